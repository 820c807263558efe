#!/usr/bin/env python3
"""What TCG's parallel mode costs a one-vCPU RNIC node (docs/atomic-unit.md "Atomicity"): the
rackemu-rnic device sets CF_PARALLEL on every vCPU so that the guest's own atomics are host
atomics (global atomicity with the NIC's); x-cpu-parallel=off leaves QEMU's choice (serial mode
for one vCPU), only to measure this. One node boots with each setting (both up at once) and runs
guest workloads --runs times each, the two settings' runs interleaved; the time is the host's
around the command run through the guest agent, less the agent's own round trip (a `:`).
Medians; the ratio is on/off per workload.

  compute   32 MiB from /dev/zero through sha256sum (user code, few atomics)
  forkexec  300 fork+exec of /bin/true (the kernel: locks, atomics, barriers, TLB work)

Files: build/bench/amu_cf_parallel.csv and .png.

examples:
  bench/amu_cf_parallel.py --runs 5   (~2 min on 2 busy host cores)
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import log, pyplot, save_figure, write_results  # noqa: E402

WORKLOADS = {
    "compute": "dd if=/dev/zero bs=1M count=32 2>/dev/null | sha256sum >/dev/null",
    "forkexec": "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done",
}


def timed(node, cmd, timeout=900):
    """Host ns for running cmd on the node through its agent, less the same for `:` (the agent's
    own round trip); fails the benchmark if cmd fails. (The guest's busybox date has no %N.)"""
    def once(c):
        t0 = time.monotonic_ns()
        r = node.exec(c, timeout=timeout)
        t1 = time.monotonic_ns()
        if r.rc != 0:
            raise SystemExit(f"`{c}` failed (rc {r.rc}): {r.stdout.decode()} {r.stderr.decode()}")
        return t1 - t0
    base = statistics.median(once(":") for _ in range(3))
    return max(0, once(cmd) - int(base))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--name", default="amucfp")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    res, clusters = {}, {}
    try:
        # both nodes up at once and their runs interleaved (the order alternating), so that the
        # machine's load, which varies by 2x here, weighs on both settings alike
        for par in ("on", "off"):
            cfg = load_config(overrides={"name": f"{args.name}{par}{int(time.time()) % 100000}", "nodes": 1,
                                         "memory": "256M",
                                         "qemu_args": ["-device", f"rackemu-rnic,x-cpu-parallel={par}"]})
            cfg.check_artefacts()
            clusters[par] = Cluster(cfg, log=log)
            clusters[par].up()
        for r in range(args.runs):
            for w, cmd in WORKLOADS.items():
                for par in (("on", "off") if r % 2 == 0 else ("off", "on")):
                    ns = timed(clusters[par].node(0), cmd)
                    log(f"x-cpu-parallel={par} {w} run {r + 1}: {ns / 1e6:.1f} ms")
                    res.setdefault(w, {}).setdefault(par, []).append(ns)
    finally:
        for c in clusters.values():
            c.down()
    rows = []
    print(f"\n{'workload':10} {'parallel on (ms)':>17} {'off (ms)':>10} {'on/off':>7}   runs (ms, on | off)")
    for w, d in res.items():
        on, off = statistics.median(d["on"]) / 1e6, statistics.median(d["off"]) / 1e6
        print(f"{w:10} {on:17.1f} {off:10.1f} {on / off:7.3f}   "
              f"{' '.join(f'{x / 1e6:.0f}' for x in d['on'])} | {' '.join(f'{x / 1e6:.0f}' for x in d['off'])}")
        rows += [("cfpar", f"{w}_parallel_on_ms", on, "ms"), ("cfpar", f"{w}_parallel_off_ms", off, "ms"),
                 ("cfpar", f"{w}_on_over_off", on / off, "ratio")]
    out = build_dir() / "bench"
    write_results(rows, out / "amu_cf_parallel.csv")
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ws = list(res)
        x = range(len(ws))
        for off, par, label in ((-0.2, "on", "CF_PARALLEL (default)"), (0.2, "off", "x-cpu-parallel=off")):
            ax.bar([i + off for i in x], [statistics.median(res[w][par]) / 1e6 for w in ws], 0.4, label=label)
        ax.set_xticks(list(x), ws)
        ax.set_ylabel("guest ms (median)")
        ax.set_title("one-vCPU RNIC node: TCG parallel mode's cost")
        ax.legend(fontsize=7)
        save_figure(fig, out / "amu_cf_parallel.png")


if __name__ == "__main__":
    main()
