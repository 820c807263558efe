#!/usr/bin/env python3
"""SwordBox's workloads (docs/swordbox-workloads.md) against the client count, printed as a table,
written as CSV and plotted. Not a test: wall figures measure the emulator under TCG on this host.

Boots its own cluster (--nodes, default 3; 1 vCPU, 256 MiB each; the RNIC's direct path off so
that every READ and WRITE crosses the switch as a frame; --name, default swordwl; stopped at the
end, also on errors). Node 0 is the memory server; the client threads are spread over the other
nodes, so no client loops back inside the server's RNIC. Per workload and client count, for
--seconds:
  lock    one lock word (--locks), CAS(0, tag) acquire, READ + WRITE the guarded counter, WRITE 0
  kv      Clover, YCSB --kv-workload over 1024 keys of 128 B, zipf 0.99
  btree   Sherman B+tree, --insert-share inserts, the rest lookups
Columns: operations/s (sum over nodes), failed CAS (lock) or CAS retries (kv) or failed lock CAS
(btree) per operation, p50 and p99 latency (the slowest node's), bytes sent per operation (the
client nodes' and the server's RNIC tx_bytes over the operations). Every run is checked as the
e2e test does (the counters exact, the server's audit clean); a failed check stops the bench.
Files: build/bench/swordbox_workloads.csv (section,metric,value,unit) and .png.

examples:
  bench/swordbox_workloads.py --quick                 1 and 2 clients, 2 s each
  bench/swordbox_workloads.py --clients 1,2,4,8 --seconds 5
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import kv_lines, log, pyplot, save_figure, write_results  # noqa: E402
from guest_tools import SwordRelay  # noqa: E402

WORKLOADS = ("lock", "kv", "btree")


def one(c, wl, clients, args, tag):
    """One run of workload wl with `clients` threads over nodes 1..; a dict of the figures."""
    nodes = [c.node(i) for i in range(1, args.nodes)]
    threads = [clients // len(nodes) + (1 if i < clients % len(nodes) else 0) for i in range(len(nodes))]
    server = {"lock": f"--mode lock --locks {args.locks}", "kv": "--mode kv",
              "btree": f"--mode btree --locks {args.bt_locks}"}[wl]
    cmd = {"lock": "lock --dist uniform", "kv": f"kv --workload {args.kv_workload}",
           "btree": f"btree --insert-share {args.insert_share}"}[wl] + f" --seconds {args.seconds}"
    relay = SwordRelay(c.node(0), tag, clients, server)
    cl = [relay.client(n, cmd, t) for n, t in zip(nodes, threads) if t]
    relay.go(*cl)
    lines = []
    for x in cl:
        rc, out = relay.result(x, timeout=args.seconds * 20 + 300)
        if rc != 0:
            raise SystemExit(f"{wl} with {clients} clients: a client failed: {out.decode()}")
        lines.append([d for d in kv_lines(out.decode()) if f"{wl}" in d and d[wl] == "done"][-1])
    src, sd, sout = relay.stop()
    done = [d for d in sd if d.get("server") == "done"]
    srv_tx = int([d for d in sd if "server_tx_bytes" in d][-1]["server_tx_bytes"])
    if src != 0 or not done or done[0].get("bad", "0") != "0":
        raise SystemExit(f"{wl} with {clients} clients: the server's check failed: {sout.decode()}")
    ops = [int(d["acquires"]) if wl == "lock" else int(d["gets"]) + int(d["puts"]) if wl == "kv"
           else int(d["inserts"]) + int(d["lookups"]) for d in lines]
    if wl == "lock" and int(done[0]["counter_sum"]) != sum(int(d["increments"]) for d in lines):
        raise SystemExit(f"lock with {clients} clients: counters {done[0]['counter_sum']} != increments")
    if wl == "btree" and int(done[0]["keys"]) != sum(int(d["inserts"]) for d in lines):
        raise SystemExit(f"btree with {clients} clients: keys {done[0]['keys']} != inserts")
    total = max(sum(ops), 1)
    if wl == "lock":
        fails = sum(int(d["failed_cas"]) for d in lines) / total
        p50, p99 = (max(float(d[k]) for d in lines) for k in ("p50_us", "p99_us"))
    elif wl == "kv":
        fails = sum(float(d["cas_retries_per_put"]) * int(d["puts"]) for d in lines) / total
        p50, p99 = (max(max(float(d[f"get_{k}"]), float(d[f"put_{k}"])) for d in lines) for k in ("p50_us", "p99_us"))
    else:
        fails = sum(int(d["failed_cas"]) for d in lines) / total
        p50, p99 = (max(max(float(d[f"lookup_{k}"]), float(d[f"insert_{k}"])) for d in lines)
                    for k in ("p50_us", "p99_us"))
    tx = sum(float(d["tx_bytes_per_op"]) * o for d, o in zip(lines, ops)) + srv_tx
    return {"ops_per_s": sum(float(d["acquires_per_s"] if wl == "lock" else d["ops_per_s"]) for d in lines),
            "fails_per_op": fails, "p50_us": p50, "p99_us": p99, "bytes_per_op": tx / total}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="swordwl", help="cluster name (default swordwl)")
    ap.add_argument("--nodes", type=int, default=3, help="nodes: 1 server + clients (default 3)")
    ap.add_argument("--clients", default="1,2,4", help="client thread counts (default 1,2,4)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="lock, kv, btree")
    ap.add_argument("--seconds", type=float, default=5, help="seconds per run (default 5)")
    ap.add_argument("--locks", type=int, default=1, help="lock words of the lock benchmark (default 1)")
    ap.add_argument("--bt-locks", type=int, default=4096, help="lock words of the B+tree (default 4096)")
    ap.add_argument("--kv-workload", default="A", help="YCSB workload of kv: A, B, C, U (default A)")
    ap.add_argument("--insert-share", type=float, default=0.5, help="B+tree inserts (default 0.5)")
    ap.add_argument("--quick", action="store_true", help="1 and 2 clients, 2 s each")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "swordbox_workloads.csv"), help="CSV path")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.seconds = "1,2", 2
    try:
        counts = [int(x) for x in args.clients.split(",") if x]
    except ValueError:
        ap.error("--clients: a comma-separated list of numbers")
    wls = [w for w in args.workloads.split(",") if w]
    if not counts or min(counts) < 1 or max(counts) > 64 or args.nodes < 2 or args.seconds <= 0:
        ap.error("--clients 1..64 each, --nodes >= 2, --seconds > 0")
    if any(w not in WORKLOADS for w in wls) or args.kv_workload.upper() not in ("A", "B", "C", "U"):
        ap.error("--workloads: lock, kv, btree; --kv-workload: A, B, C or U")
    cfg = load_config(overrides={"name": args.name, "nodes": args.nodes, "memory": "256M", "vcpus": 1,
                                 "rnic": True, "qemu_args": ["-global", "rackemu-rnic.direct=off"]})
    cfg.check_artefacts()
    c = Cluster(cfg)
    res = {}
    try:
        log(f"booting {args.nodes} nodes")
        c.up()
        for wl in wls:
            for n in counts:
                log(f"{wl}: {n} client(s), {args.seconds} s")
                res[(wl, n)] = one(c, wl, n, args, f"{wl}{n}-{int(time.time())}")
    finally:
        c.down()
    units = {"ops_per_s": "op/s", "fails_per_op": "per_op", "p50_us": "us", "p99_us": "us", "bytes_per_op": "B/op"}
    rows = [(wl, f"{n}c_{k}", v, units[k]) for (wl, n), r in res.items() for k, v in r.items()]
    write_results(rows, args.csv)
    plt = pyplot()
    if plt:
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        for ax, (k, label) in zip(axes, [("ops_per_s", "operations/s"), ("p99_us", "p99 latency (us)"),
                                         ("bytes_per_op", "bytes sent per op")]):
            for wl in wls:
                ax.plot(counts, [res[(wl, n)][k] for n in counts], marker="o", label=wl)
            ax.set_xlabel("client threads")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle("SwordBox workloads through the switch (no program), wall clock under TCG", fontsize=9)
        save_figure(fig, Path(args.csv).with_suffix(".png"))


if __name__ == "__main__":
    main()
