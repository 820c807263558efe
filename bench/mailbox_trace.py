#!/usr/bin/python3
"""Where the time of an interrupt-mode packetizer -> mailbox round trip goes (issue 11).

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

Tracing costs time itself (every traced MMIO access of node 1 writes a log line), so the sum is
above the untraced round trip of bench/foundation.py; the split is what this is for. Prints a
table of medians and 90th percentiles per step, writes CSV (and PNG with python3-matplotlib).
RACKEMU_IRQ_VCPU=0 in the environment traces the bottom-half path (docs/machine.md).

usage: bench/mailbox_trace.py [--count 300] [--keep-logs DIR] [--csv FILE]
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

R = regs_header()
SERVER_MIF = 21  # unimem pingpong's default --server-mif
IRQ_STATUS = R["VMBOX_CTRL_OFFSET"] + R["VMBOX_CTRL_IRQ_STATUS"]
MIF_DATA = SERVER_MIF * 0x1000 + R["VMBOX_MIF_DATA"]
EVENTS = {0: ("rackemu_unimem_send", "rackemu_frame_in"),
          1: ("rackemu_unimem_send", "rackemu_frame_in", "rackemu_irq", "rackemu_irq_apply",
              "rackemu_mmio_read")}
LINE = re.compile(r"^(\d+)@(\d+)\.(\d+):(rackemu_\w+) (.*)$")
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
        trip["round trip"] = ts[7] - t0
        trip["via"] = n1[c][3].rsplit(" ", 1)[-1] if c != b else "direct"
        trips.append(trip)
    return trips


def pct(vals, p):
    vals = sorted(vals)
    return vals[min(len(vals) - 1, int(len(vals) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=300, help="round trips (default 300)")
    ap.add_argument("--memory", default="192M", help="memory per node")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy the two nodes' traced logs there")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "mailbox_trace.csv"))
    a = ap.parse_args()
    cfg = load_config(None, {"nodes": 2, "name": "bench-mbtrace", "memory": a.memory,
                             "qemu_args": ["-msg", "timestamp=on"]})
    load0 = os.getloadavg()[0]
    with Cluster(cfg, log=lambda m: None) as c:
        srv = run_background(c.node(1), f"unimem pingpong --peer 0 --role server --count {a.count}",
                             timeout=600)
        time.sleep(1.0)
        for i, names in EVENTS.items():
            with c.node(i).qmp() as q:
                for name in names:
                    q.execute("trace-event-set-state", name=name, enable=True)
        res = c.node(0).exec(f"unimem pingpong --peer 1 --role client --count {a.count}", timeout=600)
        srv.result(620)
        for i in range(2):
            with c.node(i).qmp() as q:
                q.execute("trace-event-set-state", name="rackemu_*", enable=False)
        if res.rc != 0:
            raise SystemExit(f"pingpong failed: {res.stdout.decode()} {res.stderr.decode()}")
        untraced = kv_lines(res.stdout.decode())[-1]
        trips = split(parse(c.node(0).log_path), parse(c.node(1).log_path))
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
    for via in ("vcpu", "bh", "direct"):
        rows.append(("trace", f"applied_by_{via}", sum(t["via"] == via for t in trips), "n"))
    # the split of the round trips that took the interrupt path (the server was asleep)
    irq = [t for t in trips if t["via"] != "direct"] or trips
    for s in STEPS:
        key = s.replace(" -> ", "_to_").replace(" ", "_")
        rows.append(("trace", f"{key}_median", statistics.median(t[s] for t in irq), "us"))
        rows.append(("trace", f"{key}_p90", pct([t[s] for t in irq], 0.9), "us"))
    write_results(rows, a.csv, value_width=10)
    plt = pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        irq = [t for t in trips if t["via"] != "direct"] or trips
        meds = [statistics.median(t[s] for t in irq) for s in STEPS[:-1]]
        ax.barh(STEPS[:-1], meds)
        ax.invert_yaxis()
        ax.set_xlabel("microseconds (median over traced round trips)")
        ax.set_title(f"interrupt-mode round trip, {len(irq)} traced, via {irq[0]['via']}")
        save_figure(fig, str(Path(a.csv).with_suffix(".png")))


if __name__ == "__main__":
    main()
