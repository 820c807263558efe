#!/usr/bin/env python3
"""The atomic unit's sweeps of the NIC-atomics paper Figs. 2-5 on a booted cluster (docs/atomic-unit.md
"On the cluster"): for each configuration of the unit (amu-* properties of -device rackemu-rnic:
cache lines and associativity, no cache, host latency, tags, rate limiting) a cluster of --nodes
nodes boots and runs the hot-spot program (`shmem-hotspot`, sec. IV: PEs 1..N-1 each send --ops
non-fetching ADDs to PE 0, on one address and on 16 addresses each). Per run it reads node 0's
unit counters (delta over the run): operations, hits, misses, forwards, suppressed writes,
stalls, and its modeled busy time (amu_active_ns); the modeled rate is 8 bytes x ops / busy time,
the unit's own rate as the cluster fed it. Beside it, amu-model's rate for the same properties
and PEs with the messages back to back at the network's rate (the paper's load), and the paper's
statement. Not a test: wall figures measure the emulator under TCG. Medians over --runs runs.

Files: build/bench/amu_cluster.csv and build/bench/amu_cluster.png (one panel per figure, the
paper's axes: host latency for Figs. 2-3, cache lines for Figs. 4-5; MB/s of 8-byte updates).

examples:
  bench/amu_cluster.py --quick                 3 configurations, 1 run, 300 ops (~1 min; the full sweep ~3 min)
  bench/amu_cluster.py --only fig2,fig3 --runs 3
"""
import argparse
import csv
import io
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import log, pyplot, save_figure, write_results  # noqa: E402
from shmem import shmemrun  # noqa: E402

# (figure, x value, label, properties): the paper's sweeps (sec. V-A), at the device's names
CONFIGS = [
    ("fig2", 50, "no cache, 32 tags", {"amu-cache-lines": 0, "amu-host-lat-ns": 50, "amu-tags": 32}),
    ("fig2", 250, "no cache, 32 tags", {"amu-cache-lines": 0, "amu-host-lat-ns": 250, "amu-tags": 32}),
    ("fig2", 50, "no cache, 128 tags", {"amu-cache-lines": 0, "amu-host-lat-ns": 50, "amu-tags": 128}),
    ("fig2", 250, "no cache, 128 tags", {"amu-cache-lines": 0, "amu-host-lat-ns": 250, "amu-tags": 128}),
    ("fig3", 50, "32 lines DM, 32 tags", {"amu-cache-lines": 32, "amu-cache-ways": 1, "amu-host-lat-ns": 50}),
    ("fig3", 250, "32 lines DM, 32 tags", {"amu-cache-lines": 32, "amu-cache-ways": 1, "amu-host-lat-ns": 250}),
    ("fig3", 250, "32 lines DM, 32 tags, conflict-bypass",
     {"amu-cache-lines": 32, "amu-cache-ways": 1, "amu-host-lat-ns": 250, "amu-conflict-bypass": 1}),
    ("fig4", 32, "4-way, 32 tags", {"amu-cache-lines": 32, "amu-cache-ways": 4}),
    ("fig4", 128, "DM, 32 tags", {"amu-cache-lines": 128, "amu-cache-ways": 1}),
    ("fig4", 128, "4-way, 32 tags", {"amu-cache-lines": 128, "amu-cache-ways": 4}),
    ("fig5", 32, "DM, 128 tags", {"amu-cache-lines": 32, "amu-cache-ways": 1, "amu-tags": 128}),
    ("fig5", 128, "16-way, 128 tags", {"amu-cache-lines": 128, "amu-cache-ways": 16, "amu-tags": 128}),
    ("ratelimit", 250, "32 DM, rate-limit off", {"amu-rate-limit": "off"}),
    ("ratelimit", 250, "32 DM, rate-limit aging", {"amu-rate-limit": "aging"}),
    ("ratelimit", 250, "32 DM, rate-limit hostq", {"amu-rate-limit": "hostq"}),
]
QUICK = {("fig2", 250, "no cache, 32 tags"), ("fig3", 250, "32 lines DM, 32 tags"),
         ("ratelimit", 250, "32 DM, rate-limit off")}
PAPER = {
    "fig2": "no cache: one address very poor (a host round trip per update); 16 addresses pipeline; "
            "32 tags fine at 50 ns, 128 needed at 250 ns",
    "fig3": "32 lines DM: one address at the network limit (667 MB/s); 16 addresses: minimal benefit",
    "fig4": "associativity matters more than size (32 tags, 250 ns)",
    "fig5": "128 tags: a small cache sustains most of the network rate",
    "ratelimit": "(sec. III: rate limiting saves host writes when operations on one word queue)",
}
COUNTERS = ("amu_ops", "amu_hits", "amu_misses", "amu_forwards", "amu_writes_suppressed", "amu_host_writes",
            "amu_stall_tags", "amu_stall_busy", "amu_stall_conflict", "amu_bypasses", "amu_max_outstanding",
            "amu_active_ns")


def model_rate(props, pes, ops, addrs):
    """amu-model's MB/s for the same properties: the paper's load (messages back to back)."""
    exe = build_dir() / "host" / "amu-model"
    sets = [x for k, v in props.items() for x in ("--set", f"{k[len('amu-'):]}={v}")]
    out = subprocess.run([str(exe), "hotspot", "--pes", str(pes), "--ops", str(ops), "--addrs", str(addrs), *sets],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"amu-model: {out.stderr.strip()}")
    return float(next(csv.DictReader(io.StringIO(out.stdout)))["mbps"])


def med(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def run_config(args, fig, x, label, props):
    dev = "rackemu-rnic," + ",".join(f"{k}={v}" for k, v in props.items())
    cfg = load_config(overrides={"name": f"{args.name}{int(time.time()) % 100000}", "nodes": args.nodes,
                                 "memory": "256M", "qemu_args": ["-device", dev]})
    cfg.check_artefacts()
    c = Cluster(cfg, log=log)
    res = {}
    c.up()
    try:
        for r in range(args.runs):
            for pattern in ("single", "unique16"):
                got = shmemrun(c, args.nodes, "shmem-hotspot", "--pattern", pattern, "--op", "add",
                               "--ops", str(args.ops))
                d = got[0]
                if d.get("modeled_mbytes_s", "na") == "na":  # the figure this benchmark is for
                    raise SystemExit(f"{label} {pattern}: node 0's atomic unit reported no busy time (amu_active_ns "
                                     f"did not advance, or the counter is missing): no modeled rate; is the "
                                     f"-device rackemu-rnic of this build the one with the atomic unit?")
                tgt = {k[len("target_"):]: float(v) for e in got for k, v in e.items() if k.startswith("target_")}
                p = res.setdefault(pattern, {"wall": [], "modeled": [], "errors": 0, "ctr": {}})
                p["errors"] += int(d["errors"])
                p["wall"].append(float(d["mbytes_s"]))
                p["modeled"].append(float(d["modeled_mbytes_s"]))
                for k in COUNTERS:
                    p["ctr"].setdefault(k, []).append(tgt.get(k, 0.0))
                if int(d["unit_ops"]) != (args.nodes - 1) * args.ops:
                    raise SystemExit(f"{label} {pattern}: the unit executed {d['unit_ops']} atomics, "
                                     f"{(args.nodes - 1) * args.ops} were sent")
    finally:
        c.down()
    rows = []
    for pattern, p in res.items():
        addrs = 0 if pattern == "single" else 16
        rows.append({"figure": fig, "x": x, "config": label, "pattern": pattern,
                     "props": " ".join(f"{k}={v}" for k, v in props.items()),
                     "wall_mbps": round(med(p["wall"]), 3), "cluster_modeled_mbps": round(med(p["modeled"]), 2),
                     "model_64pes_mbps": round(model_rate(props, 64, args.ops, addrs), 2),
                     f"model_{args.nodes}pes_mbps": round(model_rate(props, args.nodes, args.ops, addrs), 2),
                     "errors": p["errors"],
                     **{k: med(v) for k, v in p["ctr"].items()}})
    return rows


def plot(rows, png, nodes):
    plt = pyplot()
    if plt is None:
        return
    figs = [f for f in ("fig2", "fig3", "fig4", "fig5", "ratelimit") if any(r["figure"] == f for r in rows)]
    fig, axes = plt.subplots(1, len(figs), figsize=(4.6 * len(figs), 3.9), squeeze=False)
    for ax, f in zip(axes[0], figs):
        series = {}
        for r in rows:
            if r["figure"] != f:
                continue
            short = "1 addr" if r["pattern"] == "single" else "16 addrs"
            for key, tag, style in (("cluster_modeled_mbps", "cluster", "o-"),
                                    ("model_64pes_mbps", "amu-model 64 PEs", "x--")):
                xs, ys, st = series.setdefault(f"{short}, {r['config']} ({tag})", ([], [], style))
                xs.append(r["x"])
                ys.append(r[key])
        for label, (xs, ys, st) in series.items():
            order = sorted(range(len(xs)), key=lambda i: xs[i])
            ax.plot([xs[i] for i in order], [ys[i] for i in order], st, label=label, markersize=4)
        ax.set_title(f"{f}: hot-spot, {nodes - 1} sources (cluster) vs 63 (model)", fontsize=8)
        ax.set_xlabel("cache lines" if f in ("fig4", "fig5") else "host latency (ns)")
        ax.set_ylabel("MB/s of 8-byte updates (modeled)")
        ax.set_ylim(0, 700)  # the paper's common scale for sec. V-A
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=5)
    fig.suptitle("the atomic unit on a booted cluster: its modeled rate (ops / busy time) beside amu-model")
    save_figure(fig, png)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="amucl")
    ap.add_argument("--nodes", type=int, default=4, help="cluster size (N-1 sources; default 4)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--ops", type=int, default=1000, help="atomics per source PE (paper: 1000)")
    ap.add_argument("--only", default="", help="comma list of fig2,fig3,fig4,fig5,ratelimit")
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK)} configurations, --ops 300, 1 run")
    args = ap.parse_args()
    if args.quick:
        args.ops, args.runs = 300, 1
    if args.runs < 1 or not 2 <= args.nodes <= 64 or not 16 <= args.ops <= 100000:
        ap.error("--runs >= 1, --nodes 2..64, --ops 16..100000")
    only = {s for s in args.only.split(",") if s}
    bad = only - {"fig2", "fig3", "fig4", "fig5", "ratelimit"}
    if bad:
        ap.error(f"--only: unknown {', '.join(sorted(bad))}")
    selected = [c for c in CONFIGS if (not only or c[0] in only) and (not args.quick or c[:3] in QUICK)]
    rows = []
    for fig, x, label, props in selected:
        log(f"{fig} {label} @ {x}: booting {args.nodes} nodes with {props}")
        rows += run_config(args, fig, x, label, props)
    out = build_dir() / "bench"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "amu_cluster.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"\nthe atomic unit on the cluster ({args.nodes} nodes, {args.nodes - 1} sources x {args.ops} ADDs; "
          f"MB/s of 8-byte updates; cluster = 8 B x ops / the unit's modeled busy time)")
    hdr = (f"{'figure':9} {'x':>4} {'config':38} {'pattern':8} {'wall':>7} {'cluster':>8} {'model63':>8} "
           f"{'hits':>6} {'misses':>6} {'fwd':>5} {'suppr':>5} {'conflict':>8} {'tags':>5} {'maxout':>6}")
    print(hdr)
    for r in rows:
        print(f"{r['figure']:9} {r['x']:4} {r['config'][:38]:38} {r['pattern']:8} {r['wall_mbps']:7.2f} "
              f"{r['cluster_modeled_mbps']:8.2f} {r['model_64pes_mbps']:8.1f} {r['amu_hits']:6.0f} "
              f"{r['amu_misses']:6.0f} {r['amu_forwards']:5.0f} {r['amu_writes_suppressed']:5.0f} "
              f"{r['amu_stall_conflict']:8.0f} {r['amu_stall_tags']:5.0f} {r['amu_max_outstanding']:6.0f}")
    for f in sorted({r["figure"] for r in rows}):
        print(f"paper {f}: {PAPER[f]}")
    summary = [(r["figure"], f"{r['config']}_{r['x']}_{r['pattern']}_cluster".replace(" ", "_").replace(",", ""),
                r["cluster_modeled_mbps"], "MB/s modeled") for r in rows]
    write_results(summary, out / "amu_cluster_summary.csv")
    plot(rows, out / "amu_cluster.png", args.nodes)
    errors = sum(r["errors"] for r in rows)
    if errors:
        raise SystemExit(f"{errors} wrong words in the runs above")


if __name__ == "__main__":
    main()
