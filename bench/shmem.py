#!/usr/bin/env python3
"""OpenSHMEM experiments of the NIC-atomics paper (docs/shmem.md) on booted nodes with -device rackemu-rnic,
through `rackemu shmemrun`: a table, a CSV and a PNG (not a test: wall figures measure the
emulator under TCG; beside them the atomic unit's modeled per-operation time from its counters).

Boots its own cluster (--name, default shmembench, --nodes 4; stopped at the end, also on errors).
  hotspot  sec. IV: PEs 1..N-1 each send --ops atomics to PE 0, on one address (single) or on 16
           addresses each (unique16); non-fetching add (pipelined) and fetching add (one at a time);
           for N = 2..--nodes. Wall MB/s (8 bytes per update, the paper's unit), the unit's mean
           modeled time per atomic, and the errors against the exact totals (must be 0).
  gups     HPCC RandomAccess over all nodes (power of two), NIC atomic XOR and the message-based
           baseline: GUPS wall, the unit's mean time per atomic, errors of the verification; the bound of
           sec. VI eq. 1-5 with the paper's HT figures (2.3 GB/s per direction; command 32 B, request
           16 B (8 B for a read request), response 12 B).
unit_mean: the atomic unit's mean modeled time from an atomic's arrival to its execution
(amu_modeled_ns / amu_ops of the targets); NaN when the device has no atomic unit counters or ran
no atomic (the message baseline). The unit's modeled update rates for Figs. 2-7 come from its
model swept offline (bench/atomic_unit.py): the device's busy-time counter spans idle time between
runs, so no rate is derived from it here. Medians over --runs runs. Files: build/bench/shmem.csv
and build/bench/shmem.png.

examples:
  bench/shmem.py --quick          2 runs, small sizes (~5 min on 2 host cores)
  bench/shmem.py --runs 3
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import kv_lines, log, pyplot, save_figure, write_results  # noqa: E402

HT_BW = 2.3e9                   # bytes/s per direction (Table I)
BASE_NIC_TO_HOST = 16           # eq. 1: write-back
BASE_HOST_TO_NIC = 32           # eq. 2: command
AMO_NIC_TO_HOST = 8 + 16        # eq. 3: read request + write-back
AMO_HOST_TO_NIC = 32 + 12       # eq. 4: command + read response


def num(v):
    """A figure the programs print, NaN for `na` (no atomic-unit counters on this device)."""
    return float("nan") if v == "na" else float(v)


def med(v):
    """The median of the figures that are numbers (NaN if none)."""
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def eq5(nic_to_host, host_to_nic):
    """Updates per second one node can generate (eq. 5)."""
    return HT_BW / max(nic_to_host, host_to_nic)


def shmemrun(c, n, *args):
    # QEMU serves one agent client at a time: this process lets go of every node's for the CLI
    for node in c.nodes:
        node.agent().close()
    env = dict(os.environ, RACKEMU_SKIP_SETUP="1")
    r = subprocess.run([str(ROOT / "rackemu"), "shmemrun", "--run-dir", str(c.run_dir), "-n", str(n), *args],
                       capture_output=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"shmemrun -n {n} {' '.join(args)} failed (rc {r.returncode}):\n"
                         f"{r.stdout.decode()}{r.stderr.decode()}")
    lines = [line[len("[pe 0] "):] for line in r.stdout.decode().splitlines() if line.startswith("[pe 0] ")]
    return kv_lines("\n".join(lines))


def plot(hot, gups, png):
    plt = pyplot()
    if plt is None:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (pattern, op), pts in sorted(hot.items()):
        ns = sorted(pts)
        a1.plot(ns, [med(pts[n]["wall"]) for n in ns], marker="o", label=f"{pattern} {op} wall")
    a1.set_yscale("log")
    a1.set_xlabel("PEs (N-1 target PE 0)")
    a1.set_ylabel("MB/s of 8-byte updates (median)")
    a1.set_title("hot-spot (sec. IV, Figs. 2-3 layout)")
    a1.legend(fontsize=6)
    impls = sorted(gups)
    x = range(len(impls))
    a2.bar(list(x), [med(gups[k]["wall"]) * 1e3 for k in impls], 0.5, label="wall")
    a2.set_xticks(list(x), impls)
    a2.set_yscale("log")
    a2.set_ylabel("MUPS (10^6 updates/s, median)")
    a2.set_title("RandomAccess: NIC atomic XOR vs messages (Fig. 8 layout)")
    a2.legend(fontsize=7)
    a1.set_xticks(sorted({n for pts in hot.values() for n in pts}))
    fig.suptitle("rackemu OpenSHMEM on the RNIC (wall: the emulator under TCG)")
    save_figure(fig, png)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="shmembench")
    ap.add_argument("--nodes", type=int, default=4, help="cluster size; GUPS uses the largest power of two")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ops", type=int, default=1000, help="hot-spot atomics per source PE (paper: 1000)")
    ap.add_argument("--log2-table", type=int, default=16, help="GUPS table words in total, log2")
    ap.add_argument("--quick", action="store_true", help="2 runs, --ops 300, --log2-table 12")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.ops, args.log2_table = 2, 300, 12
    if args.runs < 1 or not 2 <= args.nodes <= 64:
        ap.error("--runs must be >= 1 and --nodes 2..64")
    cfg = load_config(overrides={"name": args.name, "nodes": args.nodes, "memory": "256M",
                                 "qemu_args": ["-device", "rackemu-rnic"]})
    cfg.check_artefacts()
    hot, gups, errors = {}, {}, 0
    gpes = 1 << (args.nodes.bit_length() - 1)
    c = Cluster(cfg, log=log)
    c.up()
    try:
        for r in range(args.runs):
            log(f"run {r + 1}/{args.runs}")
            for n in range(2, args.nodes + 1):
                for pattern in ("single", "unique16"):
                    for op in ("add", "fetch_add"):
                        d = shmemrun(c, n, "shmem-hotspot", "--pattern", pattern, "--op", op,
                                     "--ops", str(args.ops))[0]
                        errors += int(d["errors"])
                        p = hot.setdefault((pattern, op), {}).setdefault(n, {"wall": [], "model": []})
                        p["wall"].append(float(d["mbytes_s"]))
                        p["model"].append(num(d["unit_mean_ns"]))
            for impl in ("atomic", "message"):
                d = shmemrun(c, gpes, "shmem-gups", "--impl", impl, "--log2-table", str(args.log2_table))[0]
                errors += int(d["errors"])
                p = gups.setdefault(impl, {"wall": [], "model": []})
                p["wall"].append(float(d["gups"]))
                p["model"].append(num(d["unit_mean_ns"]))
    finally:
        c.down()
    rows = []
    for (pattern, op), pts in sorted(hot.items()):
        for n, v in sorted(pts.items()):
            rows.append(("hotspot", f"{pattern}_{op}_pes{n}_wall", med(v["wall"]), "MB/s"))
            rows.append(("hotspot", f"{pattern}_{op}_pes{n}_unit_mean", med(v["model"]), "ns"))
    for impl, v in sorted(gups.items()):
        # GUPS x 1000: MUPS, so that the emulator's wall figures show in the table's 3 decimals
        rows.append(("gups", f"{impl}_pes{gpes}_wall", med(v["wall"]) * 1e3, "MUPS"))
        rows.append(("gups", f"{impl}_pes{gpes}_unit_mean", med(v["model"]), "ns"))
    rows.append(("gups", "eq5_bound_per_node_message", eq5(BASE_NIC_TO_HOST, BASE_HOST_TO_NIC) / 1e6, "MUPS"))
    rows.append(("gups", "eq5_bound_per_node_atomic", eq5(AMO_NIC_TO_HOST, AMO_HOST_TO_NIC) / 1e6, "MUPS"))
    rows.append(("gups", f"eq5_bound_{gpes}_nodes_message",
                 gpes * eq5(BASE_NIC_TO_HOST, BASE_HOST_TO_NIC) / 1e6, "MUPS"))
    rows.append(("gups", f"eq5_bound_{gpes}_nodes_atomic", gpes * eq5(AMO_NIC_TO_HOST, AMO_HOST_TO_NIC) / 1e6, "MUPS"))
    rows.append(("all", "errors_total", float(errors), "words"))
    out = build_dir() / "bench"
    write_results(rows, out / "shmem.csv")
    plot(hot, gups, out / "shmem.png")
    if errors:
        raise SystemExit(f"{errors} wrong words in the runs above")


if __name__ == "__main__":
    main()
