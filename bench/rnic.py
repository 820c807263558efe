#!/usr/bin/env python3
"""RNIC benchmark (docs/rnic-verbs.md): `rnic bench` on booted nodes with -device rackemu-rnic,
printed as a table, written as CSV and plotted (not a test: wall figures measure the emulator
under TCG; modeled figures are the device's timing model, the CQEs' modeled_ns).

Boots its own cluster (--name, default rnicbench, 2 nodes; stopped at the end, also on errors).
  loopback  two QPs of node 1 (frames loop back inside its device)
  cross     node 1 against `rnic bench --server` on node 0 through the fabric's switch (the
            QP parameters relayed by this script, --peer-file)
Per op (write, read, send, faa, cas) and size: latency of one WR at a time (wall median, modeled
median) and bandwidth with --window in flight; then the 8-byte WRITE message rate per
outstanding count. Medians over --runs runs. Files: build/bench/rnic.csv, build/bench/rnic.png.

examples:
  bench/rnic.py --quick          sizes 8,4K,64K, 1 run (~1 min on 2 host cores)
  bench/rnic.py --runs 3         sizes 8..1M, 3 runs of each mode
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import kv_lines, log, pyplot, run, write_results  # noqa: E402
from guest_tools import RnicRelay  # noqa: E402


def bench_once(c, mode, args, tag):
    cmd = (f"bench --ops {args.ops} --sizes {args.sizes} --iters {args.iters} --window {args.window} "
           f"--rate-windows {args.rate_windows}")
    if mode == "loopback":
        return run(c.node(1), f"rnic {cmd}", timeout=1800)
    relay = RnicRelay(c.node(0), tag, 1)
    cl = relay.client(c.node(1), cmd)
    relay.go(cl)
    rc, out = relay.result(cl, timeout=1800)
    relay.stop()
    if rc != 0:
        raise SystemExit(f"cross-node rnic bench failed (rc {rc}): {out.decode()}")
    return kv_lines(out.decode())


def plot(res, png):
    plt = pyplot()
    if plt is None:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (mode, op), pts in sorted(res["lat"].items()):
        sizes = sorted(pts)
        a1.plot(sizes, [statistics.median(pts[s]["wall"]) for s in sizes], marker="o", label=f"{op} {mode} wall")
        if mode == "loopback":
            a1.plot(sizes, [statistics.median(pts[s]["model"]) for s in sizes], ls="--", label=f"{op} modeled")
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xlabel("message bytes")
    a1.set_ylabel("latency us (median)")
    a1.legend(fontsize=6, ncol=2)
    for mode, pts in sorted(res["rate"].items()):
        ws = sorted(pts)
        a2.plot(ws, [statistics.median(pts[w]) for w in ws], marker="o", label=mode)
    a2.set_xscale("log", base=2)
    a2.set_xlabel("8-byte WRITEs outstanding")
    a2.set_ylabel("thousand messages/s (median)")
    a2.legend()
    fig.suptitle("rackemu RNIC: rnic bench (wall under TCG, and the device's timing model)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"PNG: {png}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="rnicbench")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--modes", default="loopback,cross")
    ap.add_argument("--ops", default="write,read,send,faa,cas")
    ap.add_argument("--sizes", default="8,64,1K,4K,64K,1M")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--rate-windows", default="1,4,16,64")
    ap.add_argument("--quick", action="store_true", help="sizes 8,4K,64K, 20 iterations, 1 run")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.iters, args.runs = "8,4K,64K", 20, 1
    modes = args.modes.split(",")
    if args.runs < 1 or any(m not in ("loopback", "cross") for m in modes):
        ap.error("--runs must be >= 1 and --modes a list of loopback, cross")
    cfg = load_config(overrides={"name": args.name, "nodes": 2, "memory": "256M",
                                 "qemu_args": ["-device", "rackemu-rnic"]})
    cfg.check_artefacts()
    res = {"lat": {}, "bw": {}, "rate": {}}
    c = Cluster(cfg, log=log)
    c.up()
    try:
        for r in range(args.runs):
            for mode in modes:
                log(f"run {r + 1}/{args.runs}: {mode}")
                for d in bench_once(c, mode, args, f"bench{r}{mode}"):
                    if "op" in d:
                        p = res["lat"].setdefault((mode, d["op"]), {}).setdefault(
                            int(d["size"]), {"wall": [], "model": [], "bw": []})
                        p["wall"].append(float(d["lat_us"]))
                        p["model"].append(float(d["lat_modeled_us"]))
                        p["bw"].append(float(d["bw_mbps"]))
                    elif "outstanding" in d:
                        res["rate"].setdefault(mode, {}).setdefault(int(d["outstanding"]), []).append(
                            float(d["msg_rate_kps"]))
    finally:
        c.down()
    rows = []
    for (mode, op), pts in sorted(res["lat"].items()):
        for size in sorted(pts):
            p = pts[size]
            rows.append((mode, f"{op}_{size}_lat_wall", statistics.median(p["wall"]), "us"))
            rows.append((mode, f"{op}_{size}_lat_modeled", statistics.median(p["model"]), "us"))
            rows.append((mode, f"{op}_{size}_bw_wall", statistics.median(p["bw"]), "Mbit/s"))
    for mode, pts in sorted(res["rate"].items()):
        for w in sorted(pts):
            rows.append((mode, f"write_8_rate_outstanding_{w}", statistics.median(pts[w]), "k msg/s"))
    out = build_dir() / "bench"
    write_results(rows, out / "rnic.csv")
    plot(res, out / "rnic.png")


if __name__ == "__main__":
    main()
