#!/usr/bin/python3
"""Foundation benchmark: prints a table and writes CSV (not a test; figures vary by machine).

Measured, each in this run:
  qemu_build_warm_s     build-qemu.sh with nothing changed (median of --runs)
  qemu_build_cold_s     configure + full build in a scratch build dir, ccache off (--cold-build)
  boot_N_nodes_s        `cluster up` to all agents answering, for each N in --nodes (median of --runs)
  fabric: raw shared-memory ping-pong vs bridge echo round trip (median, p99) and frames/s,
          both from build/host/rackemu-fabric-bench in one run
  guest_pktz_*_rtt_*_us packetizer -> fabric -> mailbox round trip from guest user space
                        (`unimem pingpong` between node 0 and node 1, median and p99), with the
                        server woken by the arrival interrupt (irq) and with the server polling (spin)

usage: bench/foundation.py [--nodes 2,4,8] [--runs 3] [--cold-build] [--pingpong 500] [--csv FILE]
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
from benchlib import log, write_results  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,4,8", help="cluster sizes to boot (default 2,4,8)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions for medians (default 3)")
    ap.add_argument("--cold-build", action="store_true", help="also time a cold QEMU build (~7 min)")
    ap.add_argument("--pingpong", type=int, default=500, help="guest round trips (default 500)")
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
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as f:
        out = subprocess.run([str(fb), "--csv", f.name], check=True, capture_output=True, text=True).stdout
        print(out)
        for line in open(f.name):
            sec, metric, val = line.strip().split(",")
            rows.append((sec, metric, float(val), "us" if metric.endswith("_us") else "1/s"))

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
                    pp = {}
                    for mode, flag in (("irq", ""), ("spin", " --spin")):
                        srv = run_background(c.node(1), f"unimem pingpong --peer 0 --role server "
                                             f"--count {a.pingpong}{flag}", timeout=300)
                        time.sleep(1.0)
                        res = c.node(0).exec(f"unimem pingpong --peer 1 --role client --count {a.pingpong}",
                                             timeout=300)
                        srv.result(320)
                        if res.rc != 0:
                            log(f"pingpong ({mode}) failed: {res.stdout.decode()} {res.stderr.decode()}")
                            continue
                        pp[mode] = kv(res.stdout.decode())
        rows.append(("boot", f"{n}_nodes_to_agents_median", statistics.median(times), "s"))
    for mode, res in (pp or {}).items():
        for key in ("rtt_median_us", "rtt_p99_us", "rtt_min_us"):
            if key in res:
                rows.append(("guest", f"pktz_{mode}_server_{key}", float(res[key]), "us"))

    write_results(rows, a.csv)


if __name__ == "__main__":
    main()
