"""Shared by the benchmark scripts: the result table on stdout and the CSV file."""
from pathlib import Path


def write_results(rows, csv_path, value_width=14):
    """rows: (section, metric, value, unit) tuples. Prints the table, writes the CSV."""
    print(f"{'section':8} {'metric':40} {'value':>{value_width}} unit")
    for sec, metric, val, unit in rows:
        print(f"{sec:8} {metric:40} {val:{value_width}.3f} {unit}")
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w") as f:
        f.write("section,metric,value,unit\n")
        for sec, metric, val, unit in rows:
            f.write(f"{sec},{metric},{val},{unit}\n")
    print(f"CSV: {csv_path}")
