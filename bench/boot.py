#!/usr/bin/python3
"""Boot and idle benchmark: prints a table, writes CSV and a PNG plot (not a test; figures vary
by machine and by what else runs on it, so the host's load average is recorded beside them).

Measured, for each variant (the cluster defaults, plus any --variant), in this run:
  boot_N_nodes_s        Cluster.up() from cold (no QEMU running) until every guest agent answers,
                        for each N in --nodes: median of --runs (runs of all variants interleaved)
  idle_*_cpu_pct        CPU of a booted cluster of --idle-nodes nodes doing nothing: utime+stime
                        (/proc/PID/stat) of every QEMU and the fabric bridge over --idle-seconds,
                        in % of one host core, after --settle seconds; `disconnected` with no
                        agent client connected (as after `./rackemu cluster up`), `connected`
                        with the launcher's agent connections open (as in the e2e tests); median
                        of --runs
  load1_*               the host's 1-minute load average when each measurement started (median)
  workload_NAME_s       with --workload NAME=CMD: CMD's run time in node 0's guest (its own clock,
                        around the command) on the booted idle cluster, median of --runs; e.g. the
                        cost of TCG's parallel mode, which the RNIC turns on for every vCPU

A variant is LABEL followed by ';KEY=VALUE' overrides of cluster.toml keys (vcpus, memory,
kernel_cmdline, cpu, rnic = true/false) or of the artefact paths (initrd, kernel), e.g. the defaults of an older
checkout with its image:
  --variant 'before;vcpus=2;kernel_cmdline=;initrd=/tmp/base/build/guest/initramfs.cpio.gz'

usage: bench/boot.py [--nodes 1,8,16] [--runs 3] [--idle-nodes 8] [--idle-seconds 10]
                     [--settle 5] [--variant SPEC]... [--no-defaults] [--workload NAME=CMD]...
                     [--csv FILE]
"""
import argparse
import os
import shlex
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

CLK_TCK = os.sysconf("SC_CLK_TCK")
PATH_KEYS = ("initrd", "kernel")
CONFIG_KEYS = ("vcpus", "memory", "kernel_cmdline", "cpu", "rnic")


def parse_variant(spec):
    label, *pairs = spec.split(";")
    if not label or any("=" not in p for p in pairs):
        raise SystemExit(f"--variant {spec!r}: expected LABEL;KEY=VALUE;...")
    over = dict(p.split("=", 1) for p in pairs)
    for k in over:
        if k not in CONFIG_KEYS + PATH_KEYS:
            raise SystemExit(f"--variant {spec!r}: unknown key {k!r} (one of {', '.join(CONFIG_KEYS + PATH_KEYS)})")
    if "vcpus" in over:
        over["vcpus"] = int(over["vcpus"])
    if "rnic" in over:
        if over["rnic"] not in ("true", "false"):
            raise SystemExit(f"--variant {spec!r}: rnic is true or false")
        over["rnic"] = over["rnic"] == "true"
    return label, over


def config_for(label, over, n):
    cfg = load_config(None, {"nodes": n, "name": f"bboot{n}"} | {k: v for k, v in over.items() if k in CONFIG_KEYS})
    for k in PATH_KEYS:
        if k in over:
            setattr(cfg, k, Path(over[k]).resolve())
    cfg.check_artefacts()
    return cfg


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total


def idle_pct(c, seconds):
    pids = [n.pid for n in c.nodes] + ([c.bridge.pid] if c.bridge else [])
    t0, c0 = time.monotonic(), cpu_ticks(pids)
    time.sleep(seconds)
    t1, c1 = time.monotonic(), cpu_ticks(pids)
    return 100.0 * (c1 - c0) / CLK_TCK / (t1 - t0)


def guest_seconds(node, cmd):
    """cmd's run time in node's guest, by the guest's own clock (no agent round trip in it)."""
    # /proc/uptime in centiseconds (busybox date has no %N): run workloads of a second or more
    up = "$(cut -d' ' -f1 /proc/uptime | tr -d .)"
    # the workload's own exit status (the shell's is the echo's): a failed workload is no figure
    r = node.exec(f"s={up}; {{ {cmd}\n}} >/dev/null 2>&1; rc=$?; e={up}; echo $((e - s)) $rc", timeout=600)
    out = r.stdout.decode().split()
    if r.rc != 0 or len(out) < 2:
        raise SystemExit(f"workload {cmd!r} on node {node.id}: exit {r.rc}: {r.stdout.decode()} {r.stderr.decode()}")
    if out[-1] != "0":
        raise SystemExit(f"workload {cmd!r} on node {node.id} failed (exit {out[-1]}), so its time is no figure: "
                         f"try it on a booted node (./rackemu cluster up; ./rackemu exec 0 -- sh -c "
                         f"{shlex.quote(cmd)}) and fix it")
    return int(out[-2]) / 100


def plot(res, variants, sizes, png):
    plt = pyplot()
    if plt is None:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    w = 0.8 / len(variants)
    for k, (label, _) in enumerate(variants):
        xs = [i + k * w for i in range(len(sizes))]
        ys = [statistics.median(res[label]["boot"][n]) for n in sizes]
        bars = a1.bar(xs, ys, w, label=label)
        a1.bar_label(bars, fmt="%.1f", fontsize=8)
        kinds = [kd for kd in ("disconnected", "connected") if res[label]["idle"].get(kd)]
        bars = a2.bar([i + k * w for i in range(len(kinds))],
                      [statistics.median(res[label]["idle"][kd]) for kd in kinds], w, label=label)
        a2.bar_label(bars, fmt="%.1f", fontsize=8)
    a1.set_xticks([i + w * (len(variants) - 1) / 2 for i in range(len(sizes))], [f"{n} nodes" for n in sizes])
    a1.set_ylabel("boot to all agents (s, median)")
    a1.set_title("cold boot")
    a1.legend()
    a2.set_xticks([i + w * (len(variants) - 1) / 2 for i in range(2)], ["no client", "agent clients open"])
    a2.set_ylabel("% of one host core (median)")
    a2.set_title("idle CPU, QEMUs + bridge")
    a2.legend()
    fig.suptitle(f"rackemu boot and idle ({os.cpu_count()} host cores)")
    save_figure(fig, png)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,8,16", help="cluster sizes to boot (default 1,8,16)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions for medians (default 3)")
    ap.add_argument("--idle-nodes", type=int, default=8, help="cluster size of the idle measurement "
                    "(one of --nodes; 0: none; default 8)")
    ap.add_argument("--idle-seconds", type=float, default=10.0, help="idle sample length (default 10)")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after boot before the idle sample")
    ap.add_argument("--variant", action="append", default=[], help="LABEL;KEY=VALUE;... (repeatable)")
    ap.add_argument("--no-defaults", action="store_true", help="only the --variant configurations")
    ap.add_argument("--workload", action="append", default=[],
                    help="NAME=CMD: time CMD in node 0's guest on the idle cluster (repeatable)")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "boot.csv"))
    a = ap.parse_args()
    sizes = [int(x) for x in a.nodes.split(",") if x]
    variants = ([] if a.no_defaults else [("defaults", {})]) + [parse_variant(v) for v in a.variant]
    if not variants:
        raise SystemExit("nothing to measure: --no-defaults without --variant")
    if a.idle_nodes and a.idle_nodes not in sizes:
        sizes.append(a.idle_nodes)
    workloads = []
    for w in a.workload:
        name, _, cmd = w.partition("=")
        if not name or not cmd:
            raise SystemExit(f"--workload {w!r}: expected NAME=CMD")
        workloads.append((name, cmd))
    res = {label: {"boot": {n: [] for n in sizes}, "idle": {"disconnected": [], "connected": []},
                   "load": {n: [] for n in sizes}, "idle_load": [],
                   "work": {name: [] for name, _ in workloads}} for label, _ in variants}

    for r in range(a.runs):
        for n in sizes:
            for label, over in variants:
                cfg = config_for(label, over, n)
                load = os.getloadavg()[0]
                t0 = time.monotonic()
                with Cluster(cfg) as c:          # entering boots the cluster
                    secs = time.monotonic() - t0
                    res[label]["boot"][n].append(secs)
                    res[label]["load"][n].append(load)
                    log(f"{label}: {n} nodes up in {secs:.1f} s (load {load:.2f}; run {r + 1}/{a.runs})")
                    if n == a.idle_nodes:
                        for node in c.nodes:     # no client connected: as after `cluster up`
                            node.agent().close()
                        time.sleep(a.settle)
                        res[label]["idle_load"].append(os.getloadavg()[0])
                        pct = idle_pct(c, a.idle_seconds)
                        res[label]["idle"]["disconnected"].append(pct)
                        for node in c.nodes:     # reconnect, as a test or `rackemu exec` holds it
                            node.ping(10)
                        time.sleep(1.0)
                        pct2 = idle_pct(c, a.idle_seconds)
                        res[label]["idle"]["connected"].append(pct2)
                        log(f"{label}: {n} idle nodes: {pct:.1f} % of a core (no client), "
                            f"{pct2:.1f} % (clients connected)")
                        for name, cmd in workloads:
                            secs = guest_seconds(c.node(0), cmd)
                            res[label]["work"][name].append(secs)
                            log(f"{label}: workload {name}: {secs:.2f} s")

    rows = []
    for label, _ in variants:
        sec = label[:8]
        for n in sizes:
            rows.append((sec, f"boot_{n}_nodes_median", statistics.median(res[label]["boot"][n]), "s"))
            rows.append((sec, f"boot_{n}_nodes_min", min(res[label]["boot"][n]), "s"))
            rows.append((sec, f"boot_{n}_nodes_max", max(res[label]["boot"][n]), "s"))
            rows.append((sec, f"load1_boot_{n}_median", statistics.median(res[label]["load"][n]), "load"))
        for kind in ("disconnected", "connected"):
            if res[label]["idle"][kind]:
                rows.append((sec, f"idle_{a.idle_nodes}_nodes_{kind}_cpu_pct",
                             statistics.median(res[label]["idle"][kind]), "%core"))
        for name, _ in workloads:
            if res[label]["work"][name]:
                rows.append((sec, f"workload_{name}_s", statistics.median(res[label]["work"][name]), "s"))
        if res[label]["idle_load"]:
            rows.append((sec, "load1_idle_median", statistics.median(res[label]["idle_load"]), "load"))
    write_results(rows, a.csv)
    plot(res, variants, sorted(set(sizes)), str(Path(a.csv).with_suffix(".png")))


if __name__ == "__main__":
    main()
