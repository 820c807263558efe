"""Shared by the benchmark scripts: progress lines, guest command helpers, the result table on
stdout and the CSV file."""
import sys
from pathlib import Path


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def kv_lines(text):
    """The guest tools' `key=value` lines, one dict per line that has any."""
    return [dict(t.split("=", 1) for t in line.split() if "=" in t) for line in text.splitlines() if "=" in line]


def run(node, cmd, timeout=600):
    """Run cmd on a node; stop the benchmark with its output if it fails. Returns its key=value lines."""
    r = node.exec(cmd, timeout=timeout)
    if r.rc != 0:
        raise SystemExit(f"node {node.id}: `{cmd}` failed (rc {r.rc}): {r.stdout.decode()} {r.stderr.decode()}")
    return kv_lines(r.stdout.decode())


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


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a message) when python3-matplotlib is
    missing: the benchmark then writes its table and CSV but no PNG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("python3-matplotlib is missing (platform/setup/packages.txt): no PNG")
        return None
    return plt


def log_axes(ax, xlabel, ylabel, title=None, ybase=10, legend_size=6):
    """A plot over sizes or counts: log2 x axis, log y axis (ybase None: linear), labels, legend."""
    ax.set_xscale("log", base=2)
    if ybase:
        ax.set_yscale("log", base=ybase)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=legend_size, ncol=2)


def save_figure(fig, png, dpi=110):
    """Write a figure to png (creating its directory) and say where."""
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png, dpi=dpi)
    print(f"PNG: {png}")
