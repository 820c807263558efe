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
  stream_N_mib   the mean size of one node's device-state stream (nodeI.snap)
  ram_N_mib      the mean data of one node's RAM image (nodeI.snap.ram; holes not counted)
  load_N         the host's 1-minute load average at the start of each `up` from snapshots
                 (median): the host is shared, and every figure here scales with it

Where an `up` from snapshots spends its time (medians over the --runs; per node: the median and
the slowest node of each run), from the launcher's per-node step times (Node.phases):
  decide         `up` called -> the first RAM file starts (key, cache checks, bridge start)
  ram            one node's RAM file made from its image (reflink or in-kernel copy)
  spawn          the launcher's fork+exec of one QEMU
  all_spawned    `up` called -> the last QEMU started
  qemu_init      a QEMU started -> its QMP monitor answers (QEMU's own start-up)
  load           migrate-incoming -> the device state loaded (the stream: no RAM in it)
  resume         `cont`
  agent          vCPUs resumed -> the guest agent answers
  all_agents     `up` called -> the last agent answered
  refresh        agent answered -> the guest's clock and entropy set
  total          the whole `up`

usage: bench/snapshot_boot.py [--nodes 2,8,16] [--runs 3] [--memory 256M] [--no-cold]
                              [--csv FILE] [--png FILE]
"""
import argparse
import json
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


# (name, from step, to step, per node?) over Node.phases; "up" is the call of `up`
PHASES = [("decide", "up", "ram_start", False), ("ram", "ram_start", "ram", True),
          ("spawn", "spawn", "spawned", True), ("all_spawned", "up", "spawned", False),
          ("qemu_init", "spawned", "qmp", True), ("load", "incoming", "loaded", True),
          ("resume", "loaded", "resumed", True), ("agent", "resumed", "agent", True),
          ("all_agents", "up", "agent", False), ("refresh", "agent", "refreshed", True)]


def breakdown(t0, phases):
    """{phase: (median over nodes, max over nodes)} of one `up` (t0: its start; phases: each
    node's Node.phases); the "up"-relative phases take the first (decide) or last step."""
    out = {}
    for name, a, b, per_node in PHASES:
        if per_node:
            d = [p[b] - p[a] for p in phases if a in p and b in p]
            if d:
                out[name] = (statistics.median(d), max(d))
        else:
            ends = [p[b] for p in phases if b in p]
            if ends:
                v = (min(ends) if name == "decide" else max(ends)) - t0
                out[name] = (v, v)
    return out


def up_seconds(nodes, memory, mode):
    """Seconds of one `up` (to every agent answering; a first use includes the saves), the
    cluster's nodes' snapshot paths, the step breakdown (breakdown) and the load average."""
    cfg = load_config(overrides={"name": "bench-snapboot", "nodes": nodes, "memory": memory,
                                 "snapshot": mode})
    c = Cluster(cfg)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    c.up()
    secs = time.monotonic() - t0
    try:
        used = [n["snapshot"] for n in c.status_dict(ping=False)["nodes"]]
        steps = breakdown(t0, [dict(n.phases) for n in c.nodes])
        steps["total"] = (secs, secs)
        if any(n.sh("echo ok").strip() != "ok" for n in c.nodes):
            raise SystemExit(f"{nodes} nodes ({mode}): a node does not run commands")
    finally:
        c.down()
    return secs, used, steps, load


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


def print_breakdown(n, runs, loads):
    """The step table of the `up`s from snapshots of n nodes (medians over the runs)."""
    print(f"\n{n} nodes from snapshots: where the time goes (medians of {len(runs)} runs; "
          f"1-min load average {', '.join(f'{x:.1f}' for x in loads)})")
    print(f"  {'step':12} {'median node [s]':>16} {'slowest node [s]':>17}")
    for name, *_ in PHASES + [("total",)]:
        vals = [r[name] for r in runs if name in r]
        if vals:
            print(f"  {name:12} {statistics.median(v[0] for v in vals):16.3f} "
                  f"{statistics.median(v[1] for v in vals):17.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,8,16", help="comma-separated node counts (default 2,8,16)")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure; medians are reported (default 3)")
    ap.add_argument("--memory", default="256M", help="guest RAM per node (default 256M)")
    ap.add_argument("--no-cold", action="store_true",
                    help="skip the cold boots (no cold_N_s or speedup_N rows, no PNG)")
    ap.add_argument("--csv", default=str(ROOT / "build" / "bench" / "snapshot_boot.csv"))
    ap.add_argument("--png", default=str(ROOT / "build" / "bench" / "snapshot_boot.png"))
    args = ap.parse_args()
    try:
        counts = [int(x) for x in args.nodes.split(",") if x]
    except ValueError:
        ap.error(f"--nodes: {args.nodes!r} is not a comma-separated list of node counts")
    if args.runs < 1 or not counts or min(counts) < 1:
        ap.error("--runs and every --nodes count must be >= 1")
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="rackemu-snapboot-") as cache:
        os.environ["RACKEMU_CACHE"] = cache
        for n in counts:
            cold = []
            for k in range(0 if args.no_cold else args.runs):
                secs, *_ = up_seconds(n, args.memory, "off")
                log(f"{n} nodes, cold boot {k + 1}/{args.runs}: {secs:.1f} s")
                cold.append(secs)
            first, used, _, _ = up_seconds(n, args.memory, "auto")
            if any(used):
                raise SystemExit(f"{n} nodes: the first use found snapshots in a new cache: {used}")
            log(f"{n} nodes, first use (boot + save): {first:.1f} s")
            snap, steps, loads = [], [], []
            for k in range(args.runs):
                secs, used, st, load = up_seconds(n, args.memory, "auto")
                if not all(used):
                    raise SystemExit(f"{n} nodes: not every node started from its snapshot: {used}")
                log(f"{n} nodes, from snapshots {k + 1}/{args.runs}: {secs:.1f} s (load {load:.1f}; "
                    + ", ".join(f"{p} {v[1]:.2f}" for p, v in st.items()) + ")")
                snap.append(secs)
                steps.append(st)
                loads.append(load)
            files = list(Path(used[0]).parent.glob("node*.snap"))
            if len(files) != n:
                raise SystemExit(f"{n} nodes: {len(files)} snapshot streams (node*.snap) in {Path(used[0]).parent}: "
                                 f"the stream and RAM sizes cannot be measured")
            mib = statistics.mean(f.stat().st_size for f in files) / 1048576
            ram = [json.loads(Path(str(f) + ".meta.json").read_text())["ram"]["data_bytes"] for f in files]
            ram_mib = statistics.mean(ram) / 1048576
            ms = statistics.median(snap)
            mc = statistics.median(cold) if cold else None
            results[n] = {"cold": mc, "snapshot": ms}
            rows += [("boot", f"cold_{n}_s", mc, "s"), ("boot", f"speedup_{n}", mc / ms, "x")] if cold else []
            rows += [("boot", f"first_{n}_s", first, "s"), ("boot", f"snapshot_{n}_s", ms, "s"),
                     ("boot", f"stream_{n}_mib", mib, "MiB"), ("boot", f"ram_{n}_mib", ram_mib, "MiB"),
                     ("boot", f"load_{n}", statistics.median(loads), "load")]
            for name, *_ in PHASES:
                vals = [st[name] for st in steps if name in st]
                if vals:
                    rows += [("steps", f"{name}_{n}_median_node_s", statistics.median(v[0] for v in vals), "s"),
                             ("steps", f"{name}_{n}_slowest_node_s", statistics.median(v[1] for v in vals), "s")]
            print_breakdown(n, steps, loads)
    write_results(rows, args.csv)
    if not args.no_cold:
        plot(results, args.png)


if __name__ == "__main__":
    main()
