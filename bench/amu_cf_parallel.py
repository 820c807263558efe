#!/usr/bin/env python3
"""What TCG's parallel mode costs a one-vCPU RNIC node (docs/atomic-unit.md "Atomicity"): the
rackemu-rnic device sets CF_PARALLEL on every vCPU so that the guest's own atomics are host
atomics (global atomicity with the NIC's); x-cpu-parallel=off leaves QEMU's choice (serial mode
for one vCPU), only to measure this. One node boots with each setting and runs guest workloads
--runs times each; the time is the guest's (date +%s%N around the command, QEMU's virtual clock,
which follows the host's under TCG). Medians; the ratio is off/on per workload.

  compute   32 MiB from /dev/zero through sha256sum (user code, few atomics)
  forkexec  300 fork+exec of /bin/true (the kernel: locks, atomics, barriers, TLB work)

Files: build/bench/amu_cf_parallel.csv and .png.

examples:
  bench/amu_cf_parallel.py            3 runs of each (~10 min on 2 busy host cores)
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
    """The guest's ns for cmd (fails the benchmark if it fails)."""
    r = node.exec(f"s=$(date +%s%N); {cmd}; rc=$?; e=$(date +%s%N); echo ns=$((e-s)) rc=$rc", timeout=timeout)
    out = r.stdout.decode()
    kv = dict(t.split("=", 1) for t in out.split() if "=" in t)
    if r.rc != 0 or kv.get("rc") != "0" or "ns" not in kv:
        raise SystemExit(f"`{cmd}` failed (rc {r.rc}): {out} {r.stderr.decode()}")
    return int(kv["ns"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--name", default="amucfp")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    res = {}
    for par in ("on", "off"):
        cfg = load_config(overrides={"name": f"{args.name}{par}{int(time.time()) % 100000}", "nodes": 1,
                                     "memory": "256M",
                                     "qemu_args": ["-device", f"rackemu-rnic,x-cpu-parallel={par}"]})
        cfg.check_artefacts()
        c = Cluster(cfg, log=log)
        c.up()
        try:
            node = c.node(0)
            for r in range(args.runs):
                for w, cmd in WORKLOADS.items():
                    ns = timed(node, cmd)
                    log(f"x-cpu-parallel={par} {w} run {r + 1}: {ns / 1e6:.1f} ms")
                    res.setdefault(w, {}).setdefault(par, []).append(ns)
        finally:
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
