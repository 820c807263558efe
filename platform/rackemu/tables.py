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


# The bridge's per-port counters a person reads first (`bridge-stats`, the demo); --wide shows
# every counter the bridge reports (docs/fabric.md, `stats`).
STAT_COLUMNS = ["node", "state", "frames_in", "frames_out", "bytes_in", "bytes_out", "eth_frames_in",
                "eth_frames_out", "drops", "errors"]
STAT_SUMMARY = ["uptime_s", "malformed", "noroute", "spoofed", "eth_spoofed", "congested", "fault_rules"]


def bridge_stats_table(stats: dict[str, Any], wide: bool = False, more: str = "--wide, or --json") -> str:
    """The bridge's `stats` as a table of ports and `key: value` lines: the columns and counters
    of STAT_COLUMNS/STAT_SUMMARY, or with `wide` every one the bridge reports; `more` says where
    the others are."""
    ports = stats.get("ports", [])
    extra = sorted({k for p in ports for k in p} - set(STAT_COLUMNS))
    cols = STAT_COLUMNS + extra if wide else [c for c in STAT_COLUMNS if any(c in p for p in ports)]
    rows = [[p.get(c) for c in cols] for p in ports]
    out = [table(cols, rows)]
    others = {k: v for k, v in stats.items() if k != "ports" and (wide or k in STAT_SUMMARY)}
    for k, v in others.items():
        if isinstance(v, (dict, list)):
            v = json.dumps(v)
        out.append(f"{k}: {v}")
    hidden = len(extra) + sum(1 for k in stats if k != "ports" and k not in STAT_SUMMARY)
    if not wide and hidden:
        out.append(f"({hidden} more counters: {more})")
    return "\n".join(out)
