#!/usr/bin/python3
"""Where the time of an interrupt-mode packetizer -> mailbox round trip goes.

Boots a 2-node cluster whose QEMUs stamp every trace line (`-msg timestamp=on`: host thread id and
wall clock in microseconds, one clock for both QEMUs), switches on over QMP the few trace points
of the round trip (docs/tracing.md), runs `unimem pingpong` with node 1's server asleep on its
arrival interrupt, and takes each round trip apart from the two nodes' logs:

  post -> frame at node 1   node 0's vCPU stores the packet's destination (rackemu_unimem_send) ..
                            node 1's port takes the frame (rackemu_frame_in): the bridge's router
                            and node 1's port thread, each woken unless already running
  dispatch -> irq level     the port thread validates the frame and fills the FIFO; the vmbox
                            core sets its line (rackemu_irq level 1)
  irq level -> applied      the level reaches the GIC (rackemu_irq_apply): work queued on the
                            vCPU (via=vcpu) or the main loop's bottom half (via=bh), each a host
                            thread's wake-up
  applied -> guest handler  the halted vCPU runs the guest kernel's handler: its first read of
                            IRQ_STATUS (rackemu_mmio_read)
  handler -> process reads  the guest wakes the sleeping process, which returns from
                            UNIMEM_IOC_WAIT and reads the packet (first read of the MIF's data)
  reads -> reply posted     the process reads 4 words and posts its reply (rackemu_unimem_send)
  reply -> frame at node 0  the reply crosses the router to node 0, whose vCPU polls its MIF
  round trip                post .. reply at node 0

With --spin node 1's server polls its MIF instead (both sides spin; no MMIO tracing, whose log
lines would swamp a poll loop) and the round trip is taken apart by the frames' tags:

  post -> frame at node 1   node 0's vCPU posts; node 1 takes the request frame: the bridge's
                            router (woken unless awake), then node 1's polling vCPU or its port
                            thread (`node1_requests_taken_by_vcpu`; `nodeN_{packets,acks}_by_*`
                            count every frame each node took, by the thread that took it)
  frame -> ACK out          node 1 validates the frame, takes the packet and sends the ACK back
                            (rackemu_frame_out type 2; first, before the packet is visible, unless
                            --ack-after)
  ACK out -> reply posted   node 1's guest sees the packet (its next poll), reads it and posts the
                            echo
  reply -> frame at node 0  the router again, then node 0's polling vCPU
  frame at node 0 -> post   node 0 acknowledges the echo, its guest reads it, checks the request's
                            ACK (`request_ack_before_echo`: the ACK frame came in before the echo)
                            and posts the next request

Tracing costs time itself (every traced MMIO access of node 1 writes a log line), so the sum is
above the untraced round trip of bench/foundation.py; the split is what this is for. Prints a
table of medians and 90th percentiles per step, writes CSV (and PNG with python3-matplotlib).
RACKEMU_IRQ_VCPU=0 in the environment traces the bottom-half path (docs/machine.md).

--ack-after switches both nodes' vmbox deliveries to the old order (the packet visible and the
interrupt raised before the sender's ACK is sent; QOM "ack-first", docs/mailbox.md) for A/B runs.

usage: bench/mailbox_trace.py [--count 300] [--spin] [--ack-after] [--keep-logs DIR] [--csv FILE]
"""
import argparse
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from rackemu.cluster import Cluster, run_background  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import kv_lines, log, pyplot, save_figure, write_results  # noqa: E402
from qtest import regs_header  # noqa: E402  (the register header's constants, via the C compiler)
from rackemu.qmp import vmbox_ack_order  # noqa: E402

R = regs_header()
SERVER_MIF = 21  # unimem pingpong's default --server-mif
IRQ_STATUS = R["VMBOX_CTRL_OFFSET"] + R["VMBOX_CTRL_IRQ_STATUS"]
MIF_DATA = SERVER_MIF * 0x1000 + R["VMBOX_MIF_DATA"]
EVENTS = {0: ("rackemu_unimem_send", "rackemu_frame_in"),
          1: ("rackemu_unimem_send", "rackemu_frame_in", "rackemu_frame_out", "rackemu_irq", "rackemu_irq_apply",
              "rackemu_mmio_read")}
LINE = re.compile(r"^(\d+)@(\d+)\.(\d+):(rackemu_\w+) (.*)$")
# --spin: the frames alone (no MMIO tracing, which would log every poll)
SPIN_EVENTS = ("rackemu_unimem_send", "rackemu_frame_in", "rackemu_frame_out", "rackemu_unimem_serve")
SPIN_STEPS = ("post -> frame at node 1", "frame -> ACK out", "ACK out -> reply posted", "reply -> frame at node 0",
              "frame at node 0 -> post", "round trip")
TAG = re.compile(r"tag (0x[0-9a-f]+)")
STEPS = ("post -> frame at node 1", "dispatch -> irq level", "irq level -> applied",
         "applied -> guest handler", "handler -> process reads", "reads -> reply posted",
         "reply -> frame at node 0", "round trip")


def parse(path):
    """[(t_us, tid, event, text)] of a node's log, in order."""
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(2)) * 1_000_000 + int(m.group(3)), int(m.group(1)), m.group(4), m.group(5)))
    return out


def first(evs, i, pred):
    """Index of the first event at or after i matching pred, or None."""
    for j in range(i, len(evs)):
        if pred(evs[j]):
            return j
    return None


def mmio_read_at(addr):
    return lambda e: (e[2] == "rackemu_mmio_read" and e[3].startswith("rackemu-vmbox ")
                      and f"read {addr:#x} " in e[3])


def split(n0, n1):
    """One dict per complete round trip: step -> microseconds, plus the applying path."""
    trips, j = [], 0
    sends = [e for e in n0 if e[2] == "rackemu_unimem_send" and "to node 1 " in e[3]]
    echoes = [e for e in n0 if e[2] == "rackemu_frame_in" and "from 1 " in e[3] and " type 1 " in e[3]]
    for k, s in enumerate(sends[:-1]):
        t0, nxt = s[0], sends[k + 1][0]
        j = first(n1, j, lambda e: e[0] >= t0)
        if j is None:
            break
        a = first(n1, j, lambda e: e[2] == "rackemu_frame_in" and "from 0 " in e[3] and " type 1 " in e[3])
        b = a is not None and first(n1, a, lambda e: e[2] == "rackemu_irq" and "rackemu-vmbox" in e[3]
                                    and "level 1" in e[3])
        d = b and first(n1, b, mmio_read_at(IRQ_STATUS))
        c = d and first(n1, b, lambda e: e[2] == "rackemu_irq_apply" and "rackemu-vmbox" in e[3])
        f = d and first(n1, d, mmio_read_at(MIF_DATA))
        g = f and first(n1, f, lambda e: e[2] == "rackemu_unimem_send" and "to node 0 " in e[3])
        if not all(x not in (None, False) for x in (a, b, d, f, g)):
            continue  # a round trip the trace does not show whole
        if c is None or c is False or c > d:
            c = b  # no apply before the handler: set at once (the awake vCPU polled the frame)
        echo = next((e for e in echoes if e[0] >= n1[g][0]), None)
        if echo is None or not n1[a][0] < nxt or echo[0] > nxt:
            continue
        ts = [t0, n1[a][0], n1[b][0], n1[c][0], n1[d][0], n1[f][0], n1[g][0], echo[0]]
        trip = {STEPS[i]: ts[i + 1] - ts[i] for i in range(7)}
        # the request's ACK (node 1's frame out, type 2, the request's tag) left after the reply
        tag = TAG.search(s[3])
        ack = tag and first(n1, a, lambda e: e[2] == "rackemu_frame_out" and " type 2 " in e[3]
                            and f"tag {tag.group(1)}" in e[3])
        trip["ack_after_reply"] = ack is not None and ack is not False and n1[ack][0] > n1[g][0]
        trip["round trip"] = ts[7] - t0
        trip["via"] = n1[c][3].rsplit(" ", 1)[-1] if c != b else "direct"
        trips.append(trip)
    return trips


def frames(evs, event, peer, ftype):
    """{tag: (t_us, tid)} of a node's frames in or out (`event`) from/to `peer` of type `ftype`."""
    word = "from" if event == "rackemu_frame_in" else "to"
    out = {}
    for e in evs:
        if e[2] == event and f"{word} {peer} " in e[3] and f" type {ftype} " in e[3]:
            m = TAG.search(e[3])
            if m:
                out.setdefault(m.group(1), (e[0], e[1]))
    return out


def sends(evs, peer):
    """[(t_us, tid, tag)] of a node's packets posted to node `peer`, in order."""
    out = []
    for e in evs:
        m = TAG.search(e[3]) if e[2] == "rackemu_unimem_send" and f"to node {peer} " in e[3] else None
        if m:
            out.append((e[0], e[1], m.group(1)))
    return out


def split_spin(n0, n1):
    """Both sides polling: one dict per round trip (step -> us, and which thread took each frame)."""
    req, rep = sends(n0, 1), sends(n1, 0)
    vcpu0 = statistics.mode([t for _, t, _ in req]) if req else None
    vcpu1 = statistics.mode([t for _, t, _ in rep]) if rep else None
    in1, in0 = frames(n1, "rackemu_frame_in", 0, 1), frames(n0, "rackemu_frame_in", 1, 1)
    ack1 = frames(n1, "rackemu_frame_out", 0, 2)  # node 1's ACKs of the requests
    ack_in0 = frames(n0, "rackemu_frame_in", 1, 2)  # ... as node 0 takes them
    # every frame each node took, by type (1 packet, 2 ACK) and by thread: its vCPU or another
    # (the port thread, woken by the bridge when no poller took the frame within its lease)
    taken = {}
    for node, evs, vcpu in ((0, n0, vcpu0), (1, n1, vcpu1)):
        for e in evs:
            m = re.search(r" type (\d) ", e[3]) if e[2] == "rackemu_frame_in" else None
            if m:
                kind, who = "packets" if m.group(1) == "1" else "acks", "vcpu" if e[1] == vcpu else "port_thread"
                k = f"node{node}_{kind}_by_{who}"
                taken[k] = taken.get(k, 0) + 1
    trips, j = [], 0
    for k, (t0, _, tag) in enumerate(req[:-1]):
        if tag not in in1 or tag not in ack1:
            continue
        t1, tid1 = in1[tag]
        t3 = ack1[tag][0]
        while j < len(rep) and rep[j][0] < t1:
            j += 1
        if j >= len(rep) or rep[j][2] not in in0:
            continue
        t4, rtag = rep[j][0], rep[j][2]
        t5, tid5 = in0[rtag]
        t7 = req[k + 1][0]
        if not t0 <= t1 <= t3 <= t4 <= t5 <= t7:
            continue  # not one round trip (a retry, a lost line)
        trips.append({SPIN_STEPS[0]: t1 - t0, SPIN_STEPS[1]: t3 - t1, SPIN_STEPS[2]: t4 - t3,
                      SPIN_STEPS[3]: t5 - t4, SPIN_STEPS[4]: t7 - t5, "round trip": t5 - t0,
                      "n1_by_vcpu": tid1 == vcpu1, "n0_by_vcpu": tid5 == vcpu0,
                      "ack_first": tag in ack_in0 and ack_in0[tag][0] <= t5})
    return trips, taken


def pct(vals, p):
    vals = sorted(vals)
    return vals[min(len(vals) - 1, int(len(vals) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=300, help="round trips (default 300)")
    ap.add_argument("--memory", default="192M", help="memory per node")
    ap.add_argument("--spin", action="store_true", help="node 1's server polls (both sides spin)")
    ap.add_argument("--client-reads", action="store_true",
                    help="with --spin, also trace node 0's device reads: how often its vCPU polls while it waits")
    ap.add_argument("--ack-after", action="store_true",
                    help="the old order: a delivery visible (and its interrupt raised) before its ACK is sent")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy the two nodes' traced logs there")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "mailbox_trace.csv"))
    a = ap.parse_args()
    if a.client_reads and not a.spin:
        ap.error("--client-reads traces node 0's reads while both sides spin: add --spin")
    if a.count < 2:
        ap.error("--count: at least 2 round trips")
    cfg = load_config(None, {"nodes": 2, "name": "bench-mbtrace", "memory": a.memory,
                             "qemu_args": ["-msg", "timestamp=on"]})
    load0 = os.getloadavg()[0]
    with Cluster(cfg, log=lambda m: None) as c:
        for i in range(2):
            with c.node(i).qmp() as q:
                vmbox_ack_order(q, first=not a.ack_after)
        srv = run_background(c.node(1), f"unimem pingpong --peer 0 --role server --count {a.count}"
                             f"{' --spin' if a.spin else ''}", timeout=600)
        time.sleep(1.0)
        for i, names in EVENTS.items():
            with c.node(i).qmp() as q:
                for name in (SPIN_EVENTS if a.spin else names):
                    q.execute("trace-event-set-state", name=name, enable=True)
                if a.spin and a.client_reads and i == 0:
                    q.execute("trace-event-set-state", name="rackemu_mmio_read", enable=True)
        res = c.node(0).exec(f"unimem pingpong --peer 1 --role client --count {a.count}", timeout=600)
        srv.result(620)
        for i in range(2):
            with c.node(i).qmp() as q:
                q.execute("trace-event-set-state", name="rackemu_*", enable=False)
        if res.rc != 0:
            raise SystemExit(f"pingpong failed: {res.stdout.decode()} {res.stderr.decode()}")
        untraced = kv_lines(res.stdout.decode())[-1]
        logs = parse(c.node(0).log_path), parse(c.node(1).log_path)
        trips, taken = split_spin(*logs) if a.spin else (split(*logs), {})
        if a.keep_logs:
            Path(a.keep_logs).mkdir(parents=True, exist_ok=True)
            for i in range(2):
                shutil.copy(c.node(i).log_path, Path(a.keep_logs) / f"node{i}.log")
    if not trips:
        raise SystemExit("no complete round trip in the trace (is QEMU built with rackemu_irq_apply?)")
    log(f"{len(trips)} of {a.count} round trips traced whole; load {load0:.1f} .. {os.getloadavg()[0]:.1f}")
    rows = [("host", "load_1min_start", load0, "load"), ("host", "load_1min_end", os.getloadavg()[0], "load"),
            ("trace", "round_trips_whole", len(trips), "n"),
            ("trace", "pingpong_median_us_as_measured_by_the_guest", float(untraced["rtt_median_us"]), "us")]
    if a.spin and a.client_reads:
        client_polls(logs[0], rows)
    if a.spin:
        spin_rows(trips, rows)
        rows += [("trace", k, v, "n") for k, v in sorted(taken.items())]
        write_results(rows, a.csv, value_width=10)
        plot(trips, SPIN_STEPS, f"both sides spinning, {len(trips)} traced", a.csv)
        return
    for via in ("vcpu", "bh", "direct"):
        rows.append(("trace", f"applied_by_{via}", sum(t["via"] == via for t in trips), "n"))
    # the old order's hazard: node 1's ACK of the request left only after its guest posted the reply
    rows.append(("trace", "request_ack_after_reply", sum(t["ack_after_reply"] for t in trips) / len(trips), "1/rt"))
    # the split of the round trips that took the interrupt path (the server was asleep)
    irq = [t for t in trips if t["via"] != "direct"]
    if not irq:
        write_results(rows, a.csv, value_width=10)
        raise SystemExit(f"none of the {len(trips)} traced round trips took the interrupt path (every level was set "
                         f"at once: node 1's vCPU was awake), so there is no interrupt-mode split to print; is the "
                         f"server polling (--spin runs that split)?")
    for s in STEPS:
        key = s.replace(" -> ", "_to_").replace(" ", "_")
        rows.append(("trace", f"{key}_median", statistics.median(t[s] for t in irq), "us"))
        rows.append(("trace", f"{key}_p90", pct([t[s] for t in irq], 0.9), "us"))
    write_results(rows, a.csv, value_width=10)
    plot(irq, STEPS, f"interrupt-mode round trip, {len(irq)} traced, via {irq[0]['via']}", a.csv)


def client_polls(n0, rows):
    """Node 0's device reads (each one polls the node's port) while it waits for the echo: per
    round trip (post .. echo frame in) how many, and the longest gap between two."""
    req = sends(n0, 1)
    vcpu = statistics.mode([t for _, t, _ in req]) if req else None
    reads = [e[0] for e in n0 if e[2] == "rackemu_mmio_read" and e[1] == vcpu]
    echoes = sorted(t for t, _ in frames(n0, "rackemu_frame_in", 1, 1).values())
    counts, gaps, i = [], [], 0
    for t0, _, _ in req:
        t1 = next((t for t in echoes if t > t0), None)
        if t1 is None:
            break
        while i < len(reads) and reads[i] < t0:
            i += 1
        mine = [t0]
        while i < len(reads) and reads[i] <= t1:
            mine.append(reads[i])
            i += 1
        mine.append(t1)
        counts.append(len(mine) - 2)
        gaps.append(max(b - a for a, b in zip(mine, mine[1:])))
    if counts:
        rows.append(("trace", "client_reads_per_wait_median", statistics.median(counts), "n"))
        rows.append(("trace", "client_longest_gap_between_reads_median", statistics.median(gaps), "us"))
        rows.append(("trace", "client_longest_gap_between_reads_p90", pct(gaps, 0.9), "us"))


def spin_rows(trips, rows):
    """The spinning round trip's steps (median, p90, p99) and which thread took the frames."""
    n = len(trips)
    rows.append(("trace", "node1_requests_taken_by_vcpu", sum(t["n1_by_vcpu"] for t in trips) / n, "1/rt"))
    rows.append(("trace", "node0_echoes_taken_by_vcpu", sum(t["n0_by_vcpu"] for t in trips) / n, "1/rt"))
    rows.append(("trace", "request_ack_before_echo", sum(t["ack_first"] for t in trips) / n, "1/rt"))
    for s in SPIN_STEPS:
        key = s.replace(" -> ", "_to_").replace(" ", "_")
        vals = [t[s] for t in trips]
        rows.append(("trace", f"{key}_median", statistics.median(vals), "us"))
        rows.append(("trace", f"{key}_p90", pct(vals, 0.9), "us"))
        rows.append(("trace", f"{key}_p99", pct(vals, 0.99), "us"))
    # the slowest 1 %: which step took the time there
    slow = sorted(trips, key=lambda t: t["round trip"])[-max(1, n // 100):]
    for s in SPIN_STEPS[:-1]:
        key = s.replace(" -> ", "_to_").replace(" ", "_")
        rows.append(("trace", f"slowest_1pct_{key}_median", statistics.median(t[s] for t in slow), "us"))


def plot(trips, steps, title, csv):
    plt = pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        meds = [statistics.median(t[s] for t in trips) for s in steps[:-1]]
        ax.barh(steps[:-1], meds)
        ax.invert_yaxis()
        ax.set_xlabel("microseconds (median over traced round trips)")
        ax.set_title(title)
        save_figure(fig, str(Path(csv).with_suffix(".png")))


if __name__ == "__main__":
    main()
