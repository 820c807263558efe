#!/usr/bin/env python3
"""RNIC benchmark (docs/rnic-verbs.md) beside the soNUMA RMC and the Unimem GAS, measured in the
same run on the same booted cluster, printed as a table, written as CSV and plotted. Not a test:
wall figures measure the emulator under TCG on this host; modeled figures are the devices'
timing models (the CQEs' modeled_ns).

Boots its own 2-node cluster with `rnic = true` (--name, default rnicbench; stopped at the end,
also on errors), then per run (--runs, medians over them):
  rnic loopback  `rnic bench` between two QPs of node 1 (frames loop back inside its device)
  rnic cross     node 1 against `rnic bench --server` on node 0, connected over TCP by host name
                 (`--client node0`, as perftest) and carried by the fabric's switch
                 per op (write, read, send, faa, cas) and size: latency of one WR at a time (wall
                 median, modeled median), bandwidth with --window in flight; then the 8-byte
                 WRITE message rate per outstanding count (--rate-windows)
  rmc            the soNUMA RMC's remote read, node 1 from node 0, 64 B..8 KiB (`rmc-bench run
                 --op read --mode lat`: wall median, modeled median)
  gas            one 8-byte load through the global address space window, node 0 from node 1's
                 memory (`gas bench`: wall median)
With --transport direct,wire (the default: both) the cross figures are measured twice, on two
clusters booted one after the other: `direct` with the RNIC's direct path on (its default: a READ
or WRITE alone on its QP is a copy of the peer's RAM file, docs/rnic.md "Direct path"), `wire`
with `-global rackemu-rnic.direct=off` on every node (every request as RoCEv2 frames through the
switch); the wire rows are mode `cross-wire`. The RMC and GAS sections run on the first cluster.
Files: build/bench/rnic.csv (section,metric,value,unit), build/bench/rnic_runs.csv (every run),
build/bench/rnic.png.

examples:
  bench/rnic.py --quick          sizes 8,4K,64K, RMC 64..8K, 1 run (a few minutes on 2 host cores)
  bench/rnic.py --runs 3         RNIC sizes 8..1M, 3 runs
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster, run_background  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import log, log_axes, pyplot, run, save_figure, write_results  # noqa: E402
from sonuma import KEY, parse_csv, start_detached, stop  # noqa: E402
from unimem import export  # noqa: E402

RNIC_PORT = 18700
RMC_CTX = 9
RMC_SIZES = "64,128,256,512,1024,2048,4096,8192"
OP_LABEL = {"write": "WRITE", "read": "READ", "send": "SEND", "faa": "FETCH_ADD", "cas": "CMP_SWAP"}


def rnic_run(c, mode, args, port):
    """One `rnic bench` in `mode`; its key=value lines."""
    cmd = (f"bench --ops {args.ops} --sizes {args.sizes} --iters {args.iters} --window {args.window} "
           f"--rate-windows {args.rate_windows}")
    if mode == "loopback":
        return run(c.node(1), f"rnic {cmd}", timeout=1800)
    srv = run_background(c.node(0), f"rnic bench --server --clients 1 --port {port}", timeout=1900)
    time.sleep(1.0)
    try:
        out = run(c.node(1), f"rnic {cmd} --client node0 --port {port}", timeout=1800)
    finally:
        r = srv.result(1910)
    if r.rc != 0:
        raise SystemExit(f"rnic bench --server on node 0 failed (rc {r.rc}): {r.stdout.decode()} {r.stderr.decode()}")
    return out


def rmc_run(c, args):
    """The RMC's synchronous remote read, node 1 from node 0's context: rows of rmc-bench's CSV."""
    n0, n1 = c.node(0), c.node(1)
    start_detached(n0, f"rmc-bench serve --ctx {RMC_CTX} --key {KEY}", "/tmp/bench-rnic-rmc", "serving",
                   "rmc-bench serve")
    try:
        n1.exec("rm -f /tmp/bench-rnic-rmc.csv")
        run(n1, f"rmc-bench run --node 0 --ctx {RMC_CTX} --key {KEY} --op read --mode lat --iters {args.iters} "
                f"--sizes {args.rmc_sizes} --csv /tmp/bench-rnic-rmc.csv", timeout=1800)
        _, rows = parse_csv(n1.exec("cat /tmp/bench-rnic-rmc.csv").stdout.decode())
    finally:
        stop(n0, "rmc-bench")
    return rows


def gas_run(c, args, gaddr):
    for d in run(c.node(0), f"gas bench --gaddr {gaddr:#x} --count {args.gas_count}", timeout=600):
        if d.get("op") == "load" and "median_us" in d:
            return float(d["median_us"])
    raise SystemExit("gas bench printed no load line")


def plot(res, png):
    plt = pyplot()
    if plt is None:
        return
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.4))
    for (mode, op), pts in sorted(res["lat"].items()):
        sizes = sorted(pts)
        a1.plot(sizes, [statistics.median(pts[s]["wall"]) for s in sizes], marker="o",
                label=f"RNIC {OP_LABEL.get(op, op)} {mode} wall")
        if mode.startswith("cross"):
            a1.plot(sizes, [statistics.median(pts[s]["model"]) for s in sizes], ls="--",
                    label=f"RNIC {OP_LABEL.get(op, op)} {mode} modeled")
    if res["rmc"]:
        sizes = sorted(res["rmc"])
        a1.plot(sizes, [statistics.median(res["rmc"][s]["wall"]) for s in sizes], marker="s", color="black",
                label="soNUMA RMC read wall")
        a1.plot(sizes, [statistics.median(res["rmc"][s]["model"]) for s in sizes], ls=":", color="black",
                label="soNUMA RMC read modeled")
    if res["gas"]:
        a1.scatter([8], [statistics.median(res["gas"])], marker="*", s=160, color="red", zorder=5,
                   label="GAS 8 B load wall")
    log_axes(a1, "message bytes", "latency us (median)", "latency, one operation at a time", legend_size=5.5)
    for (mode, op), pts in sorted(res["lat"].items()):
        sizes = [s for s in sorted(pts) if pts[s]["bw"]]
        a2.plot(sizes, [statistics.median(pts[s]["bw"]) for s in sizes], marker="o",
                label=f"{OP_LABEL.get(op, op)} {mode}")
    log_axes(a2, "message bytes", "Mbit/s wall (median)", "RNIC bandwidth, --window in flight")
    for mode, pts in sorted(res["rate"].items()):
        ws = sorted(pts)
        a3.plot(ws, [statistics.median(pts[w]) for w in ws], marker="o", label=mode)
    log_axes(a3, "8-byte WRITEs outstanding", "thousand messages/s (median)", "RNIC message rate", ybase=None)
    fig.suptitle("rackemu RNIC beside the soNUMA RMC and the GAS (wall under TCG, and the devices' timing models)")
    save_figure(fig, png)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="rnicbench", help="cluster name (default rnicbench)")
    ap.add_argument("--runs", type=int, default=1, help="runs of every measurement (medians over them)")
    ap.add_argument("--modes", default="loopback,cross", help="RNIC modes: loopback, cross")
    ap.add_argument("--ops", default="write,read,send,faa,cas")
    ap.add_argument("--sizes", default="8,64,1K,4K,64K,1M", help="RNIC message sizes")
    ap.add_argument("--rmc-sizes", default=RMC_SIZES, help="soNUMA RMC read sizes (64-byte multiples)")
    ap.add_argument("--iters", type=int, default=40, help="operations per latency point")
    ap.add_argument("--window", type=int, default=16, help="RNIC WRs in flight for bandwidth")
    ap.add_argument("--rate-windows", default="1,4,16,64", help="outstanding counts for the message rate")
    ap.add_argument("--gas-count", type=int, default=500, help="GAS loads per run")
    ap.add_argument("--transport", default="direct,wire",
                    help="RNIC direct path on, off (wire), or both in turn (default direct,wire)")
    ap.add_argument("--skip", default="", help="sections to leave out: rmc, gas (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="sizes 8,4K,64K, 20 iterations, 1 run")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "rnic.csv"), help="summary CSV path")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.iters, args.runs, args.gas_count = "8,4K,64K", 20, 1, 200
    modes = [m for m in args.modes.split(",") if m]
    skip = {s for s in args.skip.split(",") if s}
    if args.runs < 1 or args.iters < 1 or any(m not in ("loopback", "cross") for m in modes):
        ap.error("--runs and --iters must be >= 1, --modes a list of loopback, cross")
    if skip - {"rmc", "gas"}:
        ap.error(f"--skip: unknown section(s) {', '.join(sorted(skip - {'rmc', 'gas'}))} (rmc, gas)")
    transports = [t for t in args.transport.split(",") if t]
    if not transports or any(t not in ("direct", "wire") for t in transports):
        ap.error("--transport: a list of direct, wire")
    res = {"lat": {}, "rate": {}, "rmc": {}, "gas": []}
    raw = []   # (run, section, metric, value)
    for k, transport in enumerate(transports):
        extra = [] if transport == "direct" else ["-global", "rackemu-rnic.direct=off"]
        cfg = load_config(overrides={"name": args.name, "nodes": 2, "memory": "256M", "rnic": True,
                                     "qemu_args": extra})
        cfg.check_artefacts()
        log(f"transport {transport}: booting")
        measure(cfg, args, [m for m in modes if k == 0 or m == "cross"], skip if k == 0 else {"rmc", "gas"},
                "" if transport == "direct" or len(transports) == 1 else "-wire", res, raw)
    report(args, res, raw)


def measure(cfg, args, modes, skip, suffix, res, raw):
    """One cluster: the RNIC modes (cross labelled cross+suffix), then the RMC and GAS."""
    c = Cluster(cfg, log=log)
    c.up()
    try:
        gaddr = export(c.node(1), 4096, 7, "rnicbench") if "gas" not in skip else None
        for r in range(args.runs):
            for run_mode in modes:
                mode = run_mode + (suffix if run_mode == "cross" else "")
                log(f"run {r + 1}/{args.runs}: rnic {mode}")
                for d in rnic_run(c, run_mode, args, RNIC_PORT + r):
                    if "op" in d and "lat_us" in d:
                        p = res["lat"].setdefault((mode, d["op"]), {}).setdefault(
                            int(d["size"]), {"wall": [], "model": [], "bw": []})
                        p["wall"].append(float(d["lat_us"]))
                        p["model"].append(float(d["lat_modeled_us"]))
                        if float(d.get("bw_mbps", 0)) > 0:
                            p["bw"].append(float(d["bw_mbps"]))
                        raw.append((r + 1, f"rnic_{mode}", f"{d['op']}_{d['size']}_lat_wall_us", d["lat_us"]))
                    elif "outstanding" in d:
                        res["rate"].setdefault(mode, {}).setdefault(int(d["outstanding"]), []).append(
                            float(d["msg_rate_kps"]))
                        raw.append((r + 1, f"rnic_{mode}", f"rate_{d['outstanding']}_kps", d["msg_rate_kps"]))
            if "rmc" not in skip:
                log(f"run {r + 1}/{args.runs}: soNUMA RMC read")
                for row in rmc_run(c, args):
                    p = res["rmc"].setdefault(int(row["size"]), {"wall": [], "model": []})
                    p["wall"].append(float(row["wall_med_us"]))
                    p["model"].append(float(row["model_med_ns"]) / 1000)
                    raw.append((r + 1, "rmc", f"read_{row['size']}_lat_wall_us", row["wall_med_us"]))
            if gaddr is not None:
                log(f"run {r + 1}/{args.runs}: GAS load")
                res["gas"].append(gas_run(c, args, gaddr))
                raw.append((r + 1, "gas", "load_8_lat_wall_us", res["gas"][-1]))
    finally:
        c.down()


def report(args, res, raw):
    rows = []
    for (mode, op), pts in sorted(res["lat"].items()):
        for size in sorted(pts):
            p = pts[size]
            rows.append((f"rnic-{mode}", f"{op}_{size}_lat_wall", statistics.median(p["wall"]), "us"))
            rows.append((f"rnic-{mode}", f"{op}_{size}_lat_modeled", statistics.median(p["model"]), "us"))
            if p["bw"]:
                rows.append((f"rnic-{mode}", f"{op}_{size}_bw_wall", statistics.median(p["bw"]), "Mbit/s"))
    for mode, pts in sorted(res["rate"].items()):
        for w in sorted(pts):
            rows.append((f"rnic-{mode}", f"write_8_rate_outstanding_{w}", statistics.median(pts[w]), "k msg/s"))
    for size in sorted(res["rmc"]):
        rows.append(("rmc", f"read_{size}_lat_wall", statistics.median(res["rmc"][size]["wall"]), "us"))
        rows.append(("rmc", f"read_{size}_lat_modeled", statistics.median(res["rmc"][size]["model"]), "us"))
    if res["gas"]:
        rows.append(("gas", "load_8_lat_wall", statistics.median(res["gas"]), "us"))
    write_results(rows, args.csv)
    raw_path = Path(args.csv).with_name(Path(args.csv).stem + "_runs.csv")
    with open(raw_path, "w") as f:
        f.write("run,section,metric,value\n")
        f.writelines(",".join(str(x) for x in r) + "\n" for r in raw)
    print(f"CSV (every run): {raw_path}")
    plot(res, Path(args.csv).with_suffix(".png"))


if __name__ == "__main__":
    main()
