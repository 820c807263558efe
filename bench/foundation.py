#!/usr/bin/python3
"""Foundation benchmark: prints a table and writes CSV (not a test; figures vary by machine).

Measured, each in this run:
  qemu_build_warm_s     build-qemu.sh with nothing changed (median of --runs)
  qemu_build_cold_s     configure + full build in a scratch build dir, ccache off (--cold-build)
  boot_N_nodes_s        `cluster up` to all agents answering, for each N in --nodes (median of --runs)
  fabric: raw shared-memory ping-pong vs bridge echo round trip (median, p99; the requester
          driving its port, and blocking), host wake-ups and sleeps per round trip, and frames/s,
          from build/host/rackemu-fabric-bench (each figure the median of --runs runs); section
          `fabric` on the direct pair ring between the two nodes (the default), `fabric_no_pairs`
          through the bridge (RACKEMU_FABRIC_PAIRS=0), alternately in one run
  guest_pktz_*_rtt_*_us packetizer -> fabric -> mailbox round trip from guest user space
                        (`unimem pingpong` between node 0 and node 1, median and p99), with the
                        server woken by the arrival interrupt (irq) and with the server polling (spin)
  guest_pktz_*_router_{wakeups,sleeps,wakes_skipped,lease_wakes,pair_frames}_per_rt
                        host-side wake-ups per guest round trip, from the bridge's counters: futex
                        wake-ups the router sent to node port threads, router sleeps (each one
                        ended by a node's wake of the router, or a lease's end), port-thread
                        wake-ups skipped because the node's vCPU polled its port ("poller
                        present" lease), and wake-ups made after a lease lapsed with a frame left.
                        pair_frames: frames the nodes sent on their direct pair ring (no router).
                        RACKEMU_FABRIC_POLL=0 in the environment measures without vCPU polling of
                        the port, RACKEMU_FABRIC_LEASE_US=0 without the lease, RACKEMU_FABRIC_PAIRS=0
                        without direct pair rings (docs/fabric.md)
  guest_gas_remote_load_*_us
                        one 8-byte load by node 0's user space through the global address space
                        window from node 1's memory (`gas bench`, median and p99 of --pingpong loads)
  guest_rmc_read64_{spin,irq}_*_us
                        RMC 64-byte READ of node 0's memory by node 1's user space (`rmc-bench run
                        --op read --sizes 64 --mode lat`, wall median and p99 of --pingpong
                        synchronous reads), the wait spinning on the CQ (--spin) or on the interrupt
  guest_gsas_remote_read64_*_us
                        GSAS READ64 by node 0's user space (libgsas) of a word on board 1 (gsasd
                        there answers; `gsas bench --op read64`, median and p99 of --pingpong reads)
The guest figures are the medians over --pp-runs runs in one cluster (p99: median of the runs'
p99s); the raw shared-memory ping-pong of the fabric section is the same invocation's.
Also plots the latencies (CSV path with .png) when python3-matplotlib is installed.

usage: bench/foundation.py [--nodes 2,4,8] [--runs 3] [--cold-build] [--pingpong 500] [--pp-runs 3]
                          [--csv FILE]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster, run_background  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import kv_lines, log, write_results  # noqa: E402
from unimem import export  # noqa: E402
from sonuma import KEY, MICRO_CTX, parse_csv, start_detached, stop  # noqa: E402


def timed(argv, env=None):
    t0 = time.monotonic()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def kv(text):
    out = {}
    for line in text.splitlines():
        for tok in line.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                out[k] = v
    return out


WAKE_KEYS = ("router_wakeups", "router_sleeps", "wakes_skipped", "lease_wakes", "pair_frames")


def med(runs, key):
    vals = [float(r[key]) for r in runs if key in r]
    return statistics.median(vals) if vals else None


def guest_latencies(a, c, rows):
    """GAS load, RMC 64-byte READ (spin and irq), GSAS READ64 and the packetizer ping-pong (irq and
    spin), --pp-runs runs each."""
    g = export(c.node(1), 4096, 7, "n1")
    gas, gsas = [], []
    for _ in range(a.pp_runs):
        res = c.node(0).exec(f"gas bench --gaddr {g:#x} --count {a.pingpong}", timeout=300)
        gas += [d for d in kv_lines(res.stdout.decode()) if d.get("op") == "load" and "median_us" in d]
        res = c.node(0).exec(f"gsas bench --board 1 --op read64 --count {a.pingpong}", timeout=300)
        d = kv_lines(res.stdout.decode())
        if res.rc != 0 or not d or "latency_median_us" not in d[-1]:
            log(f"gsas bench failed (rc {res.rc}): {res.stdout.decode()} {res.stderr.decode()}")
        else:
            gsas.append(d[-1])
    rmc = {"spin": [], "irq": []}
    start_detached(c.node(0), f"rmc-bench serve --ctx {MICRO_CTX} --key {KEY}", "/tmp/bench-serve", "serving",
                   "rmc-bench serve")
    try:
        for _ in range(a.pp_runs):
            for mode, flag in (("spin", " --spin"), ("irq", "")):
                res = c.node(1).exec(f"rm -f /tmp/f.csv; rmc-bench run --node 0 --ctx {MICRO_CTX} --key {KEY} "
                                     f"--op read --sizes 64 --mode lat --iters {a.pingpong}{flag} "
                                     f"--csv /tmp/f.csv >/dev/null && cat /tmp/f.csv", timeout=300)
                _, d = parse_csv(res.stdout.decode())
                if res.rc != 0 or not d or "wall_med_us" not in d[0]:
                    log(f"rmc-bench ({mode}) failed (rc {res.rc}): {res.stdout.decode()} {res.stderr.decode()}")
                else:
                    rmc[mode].append(d[0])
    finally:
        stop(c.node(0), "rmc-bench")
    for name, runs, mk, pk in (("gas_remote_load", gas, "median_us", "p99_us"),
                               ("rmc_read64_spin", rmc["spin"], "wall_med_us", "wall_p99_us"),
                               ("rmc_read64_irq", rmc["irq"], "wall_med_us", "wall_p99_us"),
                               ("gsas_remote_read64", gsas, "latency_median_us", "latency_p99_us")):
        if runs:
            rows.append(("guest", f"{name}_median_us", med(runs, mk), "us"))
            rows.append(("guest", f"{name}_p99_us", med(runs, pk), "us"))
            log(f"{name}: median {med(runs, mk):.2f} us, p99 {med(runs, pk):.2f} us ({len(runs)} runs)")
    pp = {}
    for mode, flag in (("irq", ""), ("spin", " --spin")):
        for _ in range(a.pp_runs):
            srv = run_background(c.node(1), f"unimem pingpong --peer 0 --role server "
                                 f"--count {a.pingpong}{flag}", timeout=300)
            time.sleep(1.0)
            before = c.bridge_stats()
            res = c.node(0).exec(f"unimem pingpong --peer 1 --role client --count {a.pingpong}", timeout=300)
            after = c.bridge_stats()
            srv.result(320)
            if res.rc != 0:
                log(f"pingpong ({mode}) failed: {res.stdout.decode()} {res.stderr.decode()}")
                continue
            r = kv(res.stdout.decode())
            # Host-side wake-ups per guest round trip, from the bridge's counters over the
            # client's run (the agent's own exec traffic is not on the fabric).
            for key in WAKE_KEYS:
                if key in before and key in after:
                    r[f"router_{key.removeprefix('router_')}_per_rt"] = (after[key] - before[key]) / a.pingpong
            # Frames the nodes put on direct pair rings (docs/fabric.md): these crossed no router.
            pf = [sum(p.get("pair_frames_out", 0) for p in s.get("ports", [])) for s in (before, after)]
            r["router_pair_frames_per_rt"] = (pf[1] - pf[0]) / a.pingpong
            pp.setdefault(mode, []).append(r)
            log(f"pingpong {mode}: median {r.get('rtt_median_us')} us, p99 {r.get('rtt_p99_us')} us")
    for mode, runs in pp.items():
        for key in ("rtt_median_us", "rtt_p99_us", "rtt_min_us"):
            if med(runs, key) is not None:
                rows.append(("guest", f"pktz_{mode}_server_{key}", med(runs, key), "us"))
        for key in WAKE_KEYS:
            k = f"router_{key.removeprefix('router_')}_per_rt"
            if med(runs, k) is not None:
                rows.append(("guest", f"pktz_{mode}_server_{k}", med(runs, k), "1/rt"))
    return pp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,4,8", help="cluster sizes to boot (default 2,4,8)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions for medians (default 3)")
    ap.add_argument("--cold-build", action="store_true", help="also time a cold QEMU build (~7 min)")
    ap.add_argument("--pingpong", type=int, default=500, help="guest round trips (default 500)")
    ap.add_argument("--pp-runs", type=int, default=3, help="guest latency runs per figure (default 3)")
    ap.add_argument("--memory", default="192M", help="memory per node for the boot runs")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "foundation.csv"))
    a = ap.parse_args()
    sizes = [int(x) for x in a.nodes.split(",") if x]
    rows = []  # (section, metric, value, unit)

    log("QEMU warm build (nothing changed)")
    warm = [timed(["bash", str(ROOT / "platform/setup/build-qemu.sh")]) for _ in range(a.runs)]
    rows.append(("qemu", "build_warm_median", statistics.median(warm), "s"))
    if a.cold_build:
        with tempfile.TemporaryDirectory(prefix="rackemu-coldbuild-") as d:
            env = dict(os.environ, RACKEMU_QEMU_BUILD_DIR=f"{d}/qemu-build", RACKEMU_BUILD=f"{d}/build",
                       CCACHE_DISABLE="1")
            log("QEMU cold build (configure + full build, ccache off); this takes minutes")
            rows.append(("qemu", "build_cold", timed(["bash", str(ROOT / "platform/setup/build-qemu.sh")], env), "s"))

    log("fabric benchmark")
    fb = build_dir() / "host" / "rackemu-fabric-bench"
    fabric = {}  # (section, metric) -> values of the runs
    # Both paths in one run: the direct pair ring (default) and through the bridge
    # (RACKEMU_FABRIC_PAIRS=0), alternately (docs/fabric.md, "Direct node-to-node rings").
    for _ in range(a.runs):
        for section, env in (("fabric", None), ("fabric_no_pairs", dict(os.environ, RACKEMU_FABRIC_PAIRS="0"))):
            with tempfile.NamedTemporaryFile("r", suffix=".csv") as f:
                out = subprocess.run([str(fb), "--csv", f.name], check=True, capture_output=True, text=True,
                                     env=env).stdout
                print(out)
                for line in open(f.name):
                    _, metric, val = line.strip().split(",")
                    fabric.setdefault((section, metric), []).append(float(val))
    for (sec, metric), vals in fabric.items():
        unit = ("us" if metric.endswith("_us") else "1/rt" if metric.endswith("_per_rt")
                else "" if metric == "direct_pair" else "1/s")
        rows.append((sec, metric, statistics.median(vals), unit))

    pp = None
    for n in sizes:
        times = []
        for r in range(a.runs):
            cfg = load_config(None, {"nodes": n, "name": f"bench{n}", "memory": a.memory})
            t0 = time.monotonic()
            with Cluster(cfg, log=lambda m: None) as c:  # entering boots the cluster
                times.append(time.monotonic() - t0)
                log(f"{n} nodes up in {times[-1]:.1f}s (run {r + 1}/{a.runs})")
                if n == 2 and pp is None and a.pingpong:
                    pp = guest_latencies(a, c, rows)
        rows.append(("boot", f"{n}_nodes_to_agents_median", statistics.median(times), "s"))
    write_results(rows, a.csv)
    plot(rows, a.csv)


def plot(rows, csv_path):
    """Latencies (us) as a horizontal bar chart next to the CSV."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (apt install python3-matplotlib): no plot")
        return
    lat = [(f"{sec} {metric}", val) for sec, metric, val, unit in rows if unit == "us"]
    if not lat:
        return
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(lat) + 1))
    ax.barh([k for k, _ in lat], [v for _, v in lat])
    ax.set_xscale("log")
    ax.set_xlabel("microseconds (log scale)")
    ax.invert_yaxis()
    fig.tight_layout()
    png = str(Path(csv_path).with_suffix(".png"))
    fig.savefig(png)
    print(f"PNG: {png}")


if __name__ == "__main__":
    main()
