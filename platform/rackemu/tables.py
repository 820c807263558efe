"""Plain-text tables shared by the CLI (`cluster status`, `bridge-stats`) and the demo."""
from __future__ import annotations

import json
from typing import Any, Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; numbers right-aligned, None shown as '-'."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
        return str(v)

    cells = [[cell(v) for v in r] for r in rows]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) if rows else False
               for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def fmt(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if numeric[i] else v.ljust(w)
                         for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)


STAT_COLUMNS = ["node", "state", "frames_in", "frames_out", "bytes_in", "bytes_out", "drops", "errors"]


def bridge_stats_table(stats: dict[str, Any]) -> str:
    ports = stats.get("ports", [])
    extra = sorted({k for p in ports for k in p} - set(STAT_COLUMNS))
    cols = STAT_COLUMNS + extra
    rows = [[p.get(c) for c in cols] for p in ports]
    out = [table(cols, rows)]
    others = {k: v for k, v in stats.items() if k != "ports"}
    for k, v in others.items():
        if isinstance(v, (dict, list)):
            v = json.dumps(v)
        out.append(f"{k}: {v}")
    return "\n".join(out)
