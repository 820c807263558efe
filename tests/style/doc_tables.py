#!/usr/bin/env python3
"""The counter tables of docs/*.md, generated from the register headers (the one definition).

A device's counters are declared once, as an X-macro table <PREFIX>_COUNTER_TABLE in its
register header under hw/include/rackemu (X(NAME, name, "description")). A doc page shows them
between a marker pair:

    <!-- counters: sonuma_regs.h RMC -->
    ...generated table...
    <!-- end counters -->

(an optional third word names a macro added to every offset, e.g. `VMBOX_CTRL_COUNTERS` for a
table whose offsets count from its counter block). This script regenerates every such table
from the header, read through the C compiler by tests/e2e/qtest.py's regs_counters() (nothing is
parsed out of the header's text).

    tests/style/doc_tables.py          check: exit 1 and list the pages whose tables are stale
    tests/style/doc_tables.py --fix    rewrite the stale tables
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from qtest import regs_counters, regs_header  # noqa: E402

MARKER = re.compile(r"^(<!-- counters: (\S+) (\w+)(?: (\w+))? -->\n)(.*?)^(<!-- end counters -->)",
                    re.S | re.M)


def table(header, prefix, base=None):
    """The markdown table of counter table <prefix> of hw/include/rackemu/<header>; offsets are
    <PREFIX>_CNT_<NAME>, plus the value of macro `base` if the marker names one (for tables whose
    offsets count from the start of their counter block)."""
    rows = regs_counters(header).get(prefix)
    if not rows:
        raise SystemExit(f"doc_tables: {header} has no {prefix}_COUNTER_TABLE")
    consts = regs_header(header)
    add = consts[base] if base else 0
    out = [f"Generated from `{prefix}_COUNTER_TABLE` in `hw/include/rackemu/{header}` by "
           "`tests/style/doc_tables.py --fix`; do not edit by hand.", "",
           "| Offset | Counter | Name (guest) | Counts |", "|---|---|---|---|"]
    for big, small, desc in rows:
        off = add + consts[f"{prefix}_CNT_{big}"]
        out.append(f"| `0x{off:03x}` | `{prefix}_CNT_{big}` | `{small}` | {desc.strip().strip(chr(34))} |")
    return "\n".join(out) + "\n"


def render(text):
    return MARKER.sub(lambda m: m.group(1) + table(m.group(2), m.group(3), m.group(4)) + m.group(6), text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fix", action="store_true", help="rewrite stale tables instead of failing")
    args = ap.parse_args()
    docs = os.path.join(ROOT, "docs")
    stale, count = [], 0
    for name in sorted(os.listdir(docs) if os.path.isdir(docs) else []):
        if not name.endswith(".md"):
            continue
        path = os.path.join(docs, name)
        with open(path) as f:
            text = f.read()
        count += len(MARKER.findall(text))
        new = render(text)
        if new != text:
            stale.append(f"docs/{name}")
            if args.fix:
                with open(path, "w") as f:
                    f.write(new)
    if stale and not args.fix:
        print("stale counter tables in " + ", ".join(stale) + ": run tests/style/doc_tables.py --fix")
        return 1
    print(f"{count} counter table(s)" + (f", rewrote {', '.join(stale)}" if stale and args.fix else ", current"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
