#!/usr/bin/python3
"""Boot from snapshots vs a cold boot: prints a table, writes CSV and a PNG plot (not a test;
figures vary by machine and by what else it runs).

For each N in --nodes, in one run and with a private snapshot cache (a temporary RACKEMU_CACHE):
  cold_N_s       `cluster up` with snapshot=off, from the call to every agent answering
                 (median of --runs)
  first_N_s      the first `up` with snapshot=auto: boot, then save every node into the cache
                 (one run: the cost of filling an entry)
  snapshot_N_s   `up` with snapshot=auto from the filled entry (median of --runs)
  speedup_N      cold_N_s / snapshot_N_s
  stream_N_mib   the mean size of one node's snapshot

usage: bench/snapshot_boot.py [--nodes 2,8,16] [--runs 3] [--memory 256M] [--csv FILE] [--png FILE]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import load_config  # noqa: E402
from benchlib import log, pyplot, save_figure, write_results  # noqa: E402


def up_seconds(nodes, memory, mode):
    """Seconds of one `up` (to every agent answering; a first use includes the saves), and the
    cluster's nodes' snapshot paths."""
    cfg = load_config(overrides={"name": "bench-snapboot", "nodes": nodes, "memory": memory,
                                 "snapshot": mode})
    c = Cluster(cfg)
    t0 = time.monotonic()
    c.up()
    secs = time.monotonic() - t0
    try:
        used = [n["snapshot"] for n in c.status_dict(ping=False)["nodes"]]
        if any(n.sh("echo ok").strip() != "ok" for n in c.nodes):
            raise SystemExit(f"{nodes} nodes ({mode}): a node does not run commands")
    finally:
        c.down()
    return secs, used


def plot(results, png):
    plt = pyplot()
    if plt is None:
        return
    ns = sorted(results)
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    xs = range(len(ns))
    cold = [results[n]["cold"] for n in ns]
    snap = [results[n]["snapshot"] for n in ns]
    ax.bar([x - width / 2 for x in xs], cold, width, label="cold boot")
    ax.bar([x + width / 2 for x in xs], snap, width, label="from snapshots")
    for x, (a, b) in enumerate(zip(cold, snap)):
        ax.text(x - width / 2, a, f"{a:.1f}", ha="center", va="bottom", fontsize=8)
        ax.text(x + width / 2, b, f"{b:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [str(n) for n in ns])
    ax.set_xlabel("nodes")
    ax.set_ylabel("cluster up to all agents answering [s] (median)")
    ax.set_title("rackemu: cold boot vs boot from snapshots")
    ax.legend()
    save_figure(fig, png, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,8,16", help="comma-separated node counts (default 2,8,16)")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure; medians are reported (default 3)")
    ap.add_argument("--memory", default="256M", help="guest RAM per node (default 256M)")
    ap.add_argument("--csv", default=str(ROOT / "build" / "bench" / "snapshot_boot.csv"))
    ap.add_argument("--png", default=str(ROOT / "build" / "bench" / "snapshot_boot.png"))
    args = ap.parse_args()
    counts = [int(x) for x in args.nodes.split(",") if x]
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="rackemu-snapboot-") as cache:
        os.environ["RACKEMU_CACHE"] = cache
        for n in counts:
            cold = []
            for k in range(args.runs):
                secs, _ = up_seconds(n, args.memory, "off")
                log(f"{n} nodes, cold boot {k + 1}/{args.runs}: {secs:.1f} s")
                cold.append(secs)
            first, used = up_seconds(n, args.memory, "auto")
            if any(used):
                raise SystemExit(f"{n} nodes: the first use found snapshots in a new cache: {used}")
            log(f"{n} nodes, first use (boot + save): {first:.1f} s")
            snap = []
            for k in range(args.runs):
                secs, used = up_seconds(n, args.memory, "auto")
                if not all(used):
                    raise SystemExit(f"{n} nodes: not every node started from its snapshot: {used}")
                log(f"{n} nodes, from snapshots {k + 1}/{args.runs}: {secs:.1f} s")
                snap.append(secs)
            files = list(Path(used[0]).parent.glob("node*.snap"))
            mib = statistics.mean(f.stat().st_size for f in files) / 1048576 if files else 0.0
            mc, ms = statistics.median(cold), statistics.median(snap)
            results[n] = {"cold": mc, "snapshot": ms}
            rows += [("boot", f"cold_{n}_s", mc, "s"), ("boot", f"first_{n}_s", first, "s"),
                     ("boot", f"snapshot_{n}_s", ms, "s"), ("boot", f"speedup_{n}", mc / ms, "x"),
                     ("boot", f"stream_{n}_mib", mib, "MiB")]
    write_results(rows, args.csv)
    plot(results, args.png)


if __name__ == "__main__":
    main()
