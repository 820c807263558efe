#!/usr/bin/python3
"""Foundation benchmark: prints a table and writes CSV (not a test; figures vary by machine).

Measured, each in this run:
  qemu_build_warm_median
                        build-qemu.sh with nothing changed, seconds (median of --runs)
  qemu_build_cold       configure + full build in a scratch build dir, ccache off, seconds (--cold-build)
  boot_N_nodes_to_agents_median
                        `cluster up` to all agents answering, seconds, for each N in --nodes (median
                        of --runs)
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
  guest_pktz_*_n{0,1}_irq_{vcpu,bh,direct}_per_rt
                        in each node's QEMU, the vmbox's interrupt level changes per round trip by
                        how they were applied: by work queued on the vCPU (a kick of the vCPU),
                        by the main loop's bottom half (a main-loop wake-up, then a kick), at
                        once under the big lock (docs/machine.md); RACKEMU_IRQ_VCPU=0
                        in the environment measures the bottom-half path
  guest_pktz_*_n{0,1}_acks_{first,after}_per_rt
                        in each node's QEMU, deliveries into the vmbox per round trip by the order of
                        their answer: the sender's ACK sent before the packet became visible and
                        raised the interrupt (first, the default), or after (the old order);
                        --ack-order after|ab measures the old order, or both alternately in one
                        cluster (rows of the old order are named *_ackafter_*; docs/mailbox.md)
  load_1min             the host's 1-minute load average at the start and end of the guest runs
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
  guest_gsas_remote_read64_*_per_op
                        per READ64: the requester's sleeps on its MIF interrupt, naps on its PIF
                        status and answers taken while spinning; the service's wake-ups (sleeps)
                        and replies not yet acknowledged when PIF 0 was needed for the next packet
                        (service_unsettled) or when it was about to sleep (_at_sleep); the bridge
                        router's wake-ups (docs/gsas.md, "Where the time goes")
  guest_gsas_remote_read64_{ack,service}_mean_us
                        the mean time from the request's post to its ACK (when seen before the
                        answer: a fabric round trip to the owner), and gsasd's mean time from
                        taking a request off MIF 0 to posting its reply
  guest_gsas_remote_read64_per_{raw_pingpong,pktz_spin_server_rtt}
                        the READ64 median over the raw shared-memory ping-pong and over the guest
                        packetizer ping-pong with the server spinning, both of the same run
The guest figures are the medians over --pp-runs runs in one cluster (p99: median of the runs'
p99s), measured in the 2-node cluster (2 must be in --nodes unless --pingpong 0); the raw
shared-memory ping-pong of the fabric section is the same invocation's.
Exit status 1, after the table, when a figure the options ask for could not be measured (a guest
command failed: the [bench] lines say which), naming the figures missing.
Also plots the latencies (CSV path with .png) when python3-matplotlib is installed.

usage: bench/foundation.py [--nodes 2,4,8] [--runs 3] [--cold-build] [--pingpong 500] [--pp-runs 3]
                          [--only-pingpong] [--only-gsas] [--pp-args ARGS] [--ack-order first|after|ab]
                          [--csv FILE]
--only-pingpong boots one 2-node cluster and runs the packetizer ping-pong alone (no build, fabric,
boot, GAS, RMC or GSAS figures); --only-gsas the GSAS READ64 and the ping-pong.
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
from rackemu.qmp import ACK_PATHS, IRQ_PATHS, QmpError, irq_counters, vmbox_ack_order  # noqa: E402
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
PAIR_WAKE_KEYS = ("pair_wakes_skipped", "pair_follow_up_wakes", "pair_backstop_wakes")
# per GSAS READ64: gsas bench's requester counters, the service's and the bridge's (docs/gsas.md)
GSAS_PER_OP = ("sleeps_per_op", "naps_per_op", "spun_per_op", "service_wakeups_per_op", "service_unsettled_per_op",
               "service_unsettled_at_sleep_per_op", "router_wakeups_per_op")
# the packetizer ping-pong's figures per mode: latencies (us) and host-side counts per round trip
PP_LATENCIES = ("rtt_median_us", "rtt_p99_us", "rtt_min_us")
PP_PER_RT = tuple(dict.fromkeys(
    [f"router_{k.removeprefix('router_')}_per_rt" for k in WAKE_KEYS] + [f"router_{k}_per_rt" for k in PAIR_WAKE_KEYS]
    + [f"n{n}_{k.replace('-', '_')}_per_rt" for n in range(2) for k in IRQ_PATHS + ACK_PATHS]))
# what rackemu-fabric-bench --csv writes (platform/fabric/fabric_bench.cc), in both fabric sections
FABRIC_METRICS = ("raw_pingpong_median_us", "raw_pingpong_p99_us", "bridge_rtt_median_us", "bridge_rtt_p99_us",
                  "bridge_rtt_wakeups_per_rt", "bridge_rtt_sleeps_per_rt", "bridge_rtt_blocking_median_us",
                  "bridge_rtt_blocking_p99_us", "bridge_rtt_blocking_wakeups_per_rt",
                  "bridge_rtt_blocking_sleeps_per_rt", "bridge_frames_per_s", "direct_pair")


def gsas_service_stats(node):
    """Board `node`'s gsasd counters (`gsas stats`) as integers."""
    out = {}
    for d in kv_lines(node.exec("gsas stats").stdout.decode()):
        out.update({k: int(v) for k, v in d.items() if v.isdigit()})
    return out


def med(runs, key):
    vals = [float(r[key]) for r in runs if key in r]
    return statistics.median(vals) if vals else None


def ack_orders(a):
    """The vmbox answer orders to measure (--ack-order): [True] first (default), [False] after, or both."""
    return {"first": [True], "after": [False], "ab": [True, False]}[a.ack_order]


def set_ack_order(c, first):
    """Both nodes' vmbox deliveries answer first (True) or after the packet is visible (False);
    {node: {"acks-first"/"acks-after": count so far}}, {} for a node whose QEMU lacks them."""
    out = {}
    for i in range(2):
        try:
            with c.node(i).qmp() as q:
                out[i] = vmbox_ack_order(q, first)
        except QmpError as e:
            log(f"node {i}: no vmbox answer order switch ({e})")
    return out


def order_name(name, first):
    """A figure's name in the old order (*_ackafter_*): `name` has the form section_rest."""
    return name if first else name.replace("_", "_ackafter_", 1)


def promised(a, sizes):
    """(section, metric) of every figure the options ask for (the docstring's list): a run that
    leaves one out failed, whatever else it printed."""
    want = []
    full = not (a.only_pingpong or a.only_gsas)
    if full:
        want.append(("qemu", "build_warm_median"))
        if a.cold_build:
            want.append(("qemu", "build_cold"))
        want += [(sec, m) for sec in ("fabric", "fabric_no_pairs") for m in FABRIC_METRICS]
        want += [("boot", f"{n}_nodes_to_agents_median") for n in sizes]
        if not a.pingpong:
            return want
        want += [("guest", f"{name}_{q}_us") for name in ("gas_remote_load", "rmc_read64_spin", "rmc_read64_irq")
                 for q in ("median", "p99")]
    if not a.only_pingpong:
        for first in ack_orders(a):
            # (ack_mean_us only when an ACK came before an answer: not promised)
            want += [("guest", order_name(f"gsas_remote_read64_{k}", first))
                     for k in ("median_us", "p99_us", "service_mean_us") + GSAS_PER_OP]
    want += [("host", "load_1min_start"), ("host", "load_1min_end")]
    for mode in ("irq", "spin"):
        for first in ack_orders(a):
            label = mode if first else f"{mode}_ackafter"
            want += [("guest", f"pktz_{label}_server_{k}") for k in PP_LATENCIES + PP_PER_RT]
    if full and True in ack_orders(a):
        want += [("guest", f"gsas_remote_read64_per_{ref}") for ref in ("raw_pingpong", "pktz_spin_server_rtt")]
    return want


def unmeasured(rows, want):
    """The figures of `want` that no row holds."""
    have = {(sec, metric) for sec, metric, _, _ in rows}
    return [f"{sec} {metric}" for sec, metric in want if (sec, metric) not in have]


def finish(rows, a, want):
    """The table, CSV and plot of what was measured; then a failure if a figure asked for is not there."""
    write_results(rows, a.csv)
    plot(rows, a.csv)
    missing = unmeasured(rows, want)
    if missing:
        shown = ", ".join(missing[:12]) + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
        raise SystemExit(f"foundation: {len(missing)} of {len(want)} figures asked for were NOT measured: "
                         f"{shown}. The [bench] lines above name the command that failed; fix it "
                         f"(a guest tool missing from the image: ./rackemu setup) and run again, or leave the "
                         f"section out (--pingpong 0: no guest figures; --only-pingpong, --only-gsas).")


def guest_latencies(a, c, rows):
    """GAS load, RMC 64-byte READ (spin and irq), GSAS READ64 and the packetizer ping-pong (irq and
    spin), --pp-runs runs each."""
    g = export(c.node(1), 4096, 7, "n1")
    gas = []
    for _ in range(a.pp_runs):
        res = c.node(0).exec(f"gas bench --gaddr {g:#x} --count {a.pingpong}", timeout=300)
        got = [d for d in kv_lines(res.stdout.decode()) if d.get("op") == "load" and "median_us" in d]
        if res.rc != 0 or not got:
            log(f"gas bench failed (rc {res.rc}): {res.stdout.decode()} {res.stderr.decode()}")
            continue
        gas += got
    gsas = gsas_read64(a, c, rows)
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
            log(f"{name}: median {med(runs, mk):.2f} us, p99 {med(runs, pk):.2f} us ({len(runs)} runs)")
            if name != "gsas_remote_read64":
                rows.append(("guest", f"{name}_median_us", med(runs, mk), "us"))
                rows.append(("guest", f"{name}_p99_us", med(runs, pk), "us"))
    gsas_rows(rows, gsas)
    return pingpong(a, c, rows)


def gsas_read64(a, c, rows):
    """GSAS READ64 from board 0 of a word on board 1, --pp-runs runs per answer order (alternating
    with --ack-order ab); returns the default order's runs and adds the rows of the others."""
    runs = {}
    for _ in range(a.pp_runs):
        for first in ack_orders(a):
            set_ack_order(c, first)
            srv_before, bridge_before = gsas_service_stats(c.node(1)), c.bridge_stats()
            res = c.node(0).exec(f"gsas bench --board 1 --op read64 --count {a.pingpong}", timeout=300)
            srv_after, bridge_after = gsas_service_stats(c.node(1)), c.bridge_stats()
            d = kv_lines(res.stdout.decode())
            if res.rc != 0 or not d or "latency_median_us" not in d[-1]:
                log(f"gsas bench failed (rc {res.rc}): {res.stdout.decode()} {res.stderr.decode()}")
                continue
            # wake-ups per READ64 (counts, which load cannot distort): the requester's sleeps on
            # its MIF interrupt and naps on its PIF status (gsas bench), the service's sleeps
            # (each one ended by a wake-up) and its replies still unacknowledged when PIF 0 was
            # needed again (gsas stats on board 1), the bridge's router wake-ups
            r = dict(d[-1])
            served = srv_after.get("requests", 0) - srv_before.get("requests", 0)
            if served > 0:
                r["service_wakeups_per_op"] = (srv_after.get("sleeps", 0) - srv_before.get("sleeps", 0)) / served
                r["service_unsettled_per_op"] = (srv_after.get("replies_unsettled", 0) -
                                                 srv_before.get("replies_unsettled", 0)) / served
                r["service_unsettled_at_sleep_per_op"] = (srv_after.get("unsettled_at_sleep", 0) -
                                                          srv_before.get("unsettled_at_sleep", 0)) / served
                r["service_mean_us"] = (srv_after.get("serve_ns", 0) - srv_before.get("serve_ns", 0)) / served / 1e3
            if "router_wakeups" in bridge_before and "router_wakeups" in bridge_after:
                r["router_wakeups_per_op"] = (bridge_after["router_wakeups"] -
                                              bridge_before["router_wakeups"]) / a.pingpong
            log(f"gsas READ64 ({'ack first' if first else 'ack after'}): median {r.get('latency_median_us')} us, "
                f"unsettled replies/op {r.get('service_unsettled_per_op', '-')}")
            runs.setdefault(first, []).append(r)
    set_ack_order(c, True)
    for first, rs in runs.items():
        if not first:  # the default order's rows are written with the other latencies
            gsas_rows(rows, rs, first)
    return runs.get(True, [])


def gsas_rows(rows, gsas, first=True):
    """The READ64 figures (median, p99, per-op counts, means) of `gsas` runs."""
    for mk, pk in (("latency_median_us", "latency_p99_us"),):
        if med(gsas, mk) is not None:
            rows.append(("guest", order_name("gsas_remote_read64_median_us", first), med(gsas, mk), "us"))
            rows.append(("guest", order_name("gsas_remote_read64_p99_us", first), med(gsas, pk), "us"))
    for key in GSAS_PER_OP:
        if med(gsas, key) is not None:
            rows.append(("guest", order_name(f"gsas_remote_read64_{key}", first), med(gsas, key), "1/op"))
    # where the time goes: the request's ACK seen by the requester (a fabric round trip to the
    # owner) and gsasd's time from taking the request to posting the reply
    for key in ("ack_mean_us", "service_mean_us"):
        if med(gsas, key) is not None:
            rows.append(("guest", order_name(f"gsas_remote_read64_{key}", first), med(gsas, key), "us"))


def irq_paths(c):
    """{node: {"irq-direct"/"irq-vcpu"/"irq-bh": count}} of every node's vmbox (QMP qom-get);
    {} for a node whose QEMU predates the counters."""
    out = {}
    for i in range(2):
        try:
            with c.node(i).qmp() as q:
                out[i] = irq_counters(q, "rackemu-vmbox")
        except QmpError as e:
            log(f"node {i}: no interrupt path counters ({e})")
    return out


def pingpong(a, c, rows):
    """The packetizer ping-pong (server on its interrupt, then spinning), --pp-runs runs each, with
    host-side wake-ups per round trip from the bridge's counters and, from each node's QEMU, how the
    vmbox's interrupt levels were set per round trip."""
    pp = {}
    rows.append(("host", "load_1min_start", os.getloadavg()[0], "load"))
    for mode, flag in (("irq", ""), ("spin", " --spin")):
        for first in [f for _ in range(a.pp_runs) for f in ack_orders(a)]:
            label = mode if first else f"{mode}_ackafter"
            extra = f" {a.pp_args}" if a.pp_args else ""
            srv = run_background(c.node(1), f"unimem pingpong --peer 0 --role server "
                                 f"--count {a.pingpong}{flag}{extra}", timeout=300)
            time.sleep(1.0)
            before, qb, ab = c.bridge_stats(), irq_paths(c), set_ack_order(c, first)
            res = c.node(0).exec(f"unimem pingpong --peer 1 --role client --count {a.pingpong}{extra}",
                                 timeout=300)
            after, qa, aa = c.bridge_stats(), irq_paths(c), set_ack_order(c, first)
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
            # In QEMU: interrupt levels set per round trip on each node, by path (a level set by
            # the port thread costs a vCPU kick with irq-vcpu, a main-loop wake-up with irq-bh).
            for n in sorted(set(qa) & set(qb)):
                for k in IRQ_PATHS:
                    r[f"n{n}_{k.replace('-', '_')}_per_rt"] = (qa[n][k] - qb[n][k]) / a.pingpong
            # Frames the nodes put on direct pair rings (docs/fabric.md): these crossed no router.
            pf = [sum(p.get("pair_frames_out", 0) for p in s.get("ports", [])) for s in (before, after)]
            r["router_pair_frames_per_rt"] = (pf[1] - pf[0]) / a.pingpong
            # Wake-ups of a port thread the pair rings' poll lease spared, and those made later
            # (a sender's follow-up, a receiver's backstop timer), both nodes together.
            for key in PAIR_WAKE_KEYS:
                v = [sum(p.get(key, 0) for p in s.get("ports", [])) for s in (before, after)]
                r[f"router_{key}_per_rt"] = (v[1] - v[0]) / a.pingpong
            # deliveries into each vmbox by the order of their answer (ACK before or after visible)
            for n in sorted(set(aa) & set(ab)):
                for k in ACK_PATHS:
                    r[f"n{n}_{k.replace('-', '_')}_per_rt"] = (aa[n][k] - ab[n][k]) / a.pingpong
            pp.setdefault(label, []).append(r)
            log(f"pingpong {label}: median {r.get('rtt_median_us')} us, p99 {r.get('rtt_p99_us')} us, "
                f"router wake-ups/rt {r.get('router_wakeups_per_rt', '-')}, server irq via vcpu/bh/direct "
                f"per rt {r.get('n1_irq_vcpu_per_rt', '-')}/{r.get('n1_irq_bh_per_rt', '-')}/"
                f"{r.get('n1_irq_direct_per_rt', '-')}, pair wake-ups skipped/followed up/backstop per rt "
                + "/".join(f"{r.get(f'router_{k}_per_rt', 0):.2f}" for k in PAIR_WAKE_KEYS)
                + f"; slowest rounds (round:us) {r.get('slowest', '-')}")
    set_ack_order(c, True)
    rows.append(("host", "load_1min_end", os.getloadavg()[0], "load"))
    for mode, runs in pp.items():
        for key in PP_LATENCIES:
            if med(runs, key) is not None:
                rows.append(("guest", f"pktz_{mode}_server_{key}", med(runs, key), "us"))
        for k in PP_PER_RT:
            if med(runs, k) is not None:
                rows.append(("guest", f"pktz_{mode}_server_{k}", med(runs, k), "1/rt"))
    return pp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,4,8", help="cluster sizes to boot (default 2,4,8)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions for medians (default 3)")
    ap.add_argument("--cold-build", action="store_true", help="also time a cold QEMU build (~7 min)")
    ap.add_argument("--pingpong", type=int, default=500,
                    help="guest round trips and accesses per run (default 500; 0: no guest figures)")
    ap.add_argument("--pp-runs", type=int, default=3, help="guest latency runs per figure (default 3)")
    ap.add_argument("--memory", default="192M", help="memory per node for the boot runs")
    ap.add_argument("--only-pingpong", action="store_true",
                    help="one 2-node cluster, the packetizer ping-pong alone")
    ap.add_argument("--pp-args", default="",
                    help="more options of both `unimem pingpong` sides, e.g. --sync-ack (the old order)")
    ap.add_argument("--only-gsas", action="store_true",
                    help="one 2-node cluster, the GSAS READ64 and the packetizer ping-pong")
    ap.add_argument("--ack-order", choices=("first", "after", "ab"), default="first",
                    help="vmbox deliveries answer first (default), after the packet is visible (the old "
                    "order), or both alternately in one cluster (ab)")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "foundation.csv"))
    a = ap.parse_args()
    try:
        sizes = [int(x) for x in a.nodes.split(",") if x]
    except ValueError:
        ap.error(f"--nodes: {a.nodes!r} is not a comma-separated list of node counts")
    if a.runs < 1 or a.pp_runs < 1 or a.pingpong < 0 or not sizes or min(sizes) < 1:
        ap.error("--runs, --pp-runs and every --nodes count must be >= 1, --pingpong >= 0")
    full = not (a.only_pingpong or a.only_gsas)
    if full and a.pingpong and 2 not in sizes:
        ap.error("the guest figures are measured on the 2-node cluster: add 2 to --nodes, or pass --pingpong 0 "
                 "to leave them out")
    if not full and not a.pingpong:
        ap.error("--only-pingpong and --only-gsas need --pingpong >= 1")
    want = promised(a, sizes)
    rows = []  # (section, metric, value, unit)

    if not full:
        with Cluster(load_config(None, {"nodes": 2, "name": "bench-pp", "memory": a.memory}), log=lambda m: None) as c:
            if a.only_gsas:
                gsas_rows(rows, gsas_read64(a, c, rows))
            pingpong(a, c, rows)
        finish(rows, a, want)
        return

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
                else "0/1" if metric == "direct_pair" else "1/s")
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
    # GSAS READ64 against the round trips of the same run: the host's raw shared-memory
    # ping-pong, and the guest packetizer ping-pong with the server spinning (its floor)
    vals = {m: v for sec, m, v, _ in rows if sec in ("fabric", "guest")}  # not fabric_no_pairs' raw figure
    g = vals.get("gsas_remote_read64_median_us")
    for ref in ("raw_pingpong_median_us", "pktz_spin_server_rtt_median_us"):
        if g is not None and vals.get(ref):
            rows.append(("guest", f"gsas_remote_read64_per_{ref.removesuffix('_median_us')}", g / vals[ref], "x"))
    finish(rows, a, want)


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
