"""`rackemu demo`: a ring of packets through the Unimem packetizers and mailboxes, then
round-trip times between neighbours, on a freshly booted cluster that is torn down afterwards.

For every node i (in turn), node j = (i+1) % N runs `unimem recv --mif M --count K` while
node i runs `unimem send --node j --mif M --count K`; the receiver must see K packets, each
carrying the sender's packetizer PID in word 0 bits [47:0] (hw/include/rackemu/unimem_regs.h).
Then each neighbour pair runs `unimem pingpong` (server on j, client on i). The guest tool
prints key=value lines; the demo reads them, prints one row per node and the bridge's port
counters, and writes demo-nodes.csv and demo-bridge.csv into the run directory.
"""

from __future__ import annotations

import csv
import time
from typing import Any, Callable

from .base import ClusterError
from .cluster import Cluster
from .node import run_background
from .config import ClusterConfig
from .tables import bridge_stats_table, table

SETTLE = 1.0   # seconds between starting a receiver/server and starting its peer


def parse_kv(text: str) -> dict[str, str]:
    """key=value lines (later keys win); other lines are ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        for tok in line.split():
            k, sep, v = tok.partition("=")
            if sep and k:
                out[k.strip()] = v.strip()
    return out


def _num(kv: dict[str, str], *keys: str) -> float | None:
    for k in keys:
        if k in kv:
            try:
                return float(kv[k])
            except ValueError:
                try:
                    return float(int(kv[k], 0))
                except ValueError:
                    pass
    return None


def _int(kv: dict[str, str], *keys: str) -> int | None:
    v = _num(kv, *keys)
    return None if v is None else int(v)


def _run(node, cmd: str, timeout: float) -> tuple[dict[str, str], Any]:
    r = node.exec(cmd, timeout=timeout)
    return parse_kv(r.stdout.decode(errors="replace")), r


def _describe(r: Any) -> str:
    parts = []
    if getattr(r, "timed_out", False):
        parts.append("timed out")
    else:
        parts.append(f"exit status {r.rc}")
    err = r.stderr.decode(errors="replace").strip()
    out = r.stdout.decode(errors="replace").strip()
    if err:
        parts.append("stderr: " + err[-300:])
    if out:
        parts.append("stdout: " + out[-300:])
    return "; ".join(parts)


def ring_hop(cluster: Cluster, i: int, packets: int, mif: int, recv_timeout_ms: int,
             log: Callable[[str], None]) -> dict[str, Any]:
    """Node i sends `packets` packets to node (i+1)%N's MIF `mif`, which receives them."""
    n = len(cluster.nodes)
    j = (i + 1) % n
    src, dst = cluster.node(i), cluster.node(j)
    exec_timeout = recv_timeout_ms / 1000 + 30
    recv_cmd = f"unimem recv --mif {mif} --count {packets} --timeout {recv_timeout_ms}"
    send_cmd = f"unimem send --node {j} --mif {mif} --count {packets}"
    recv_job = run_background(dst, recv_cmd, timeout=exec_timeout)
    time.sleep(SETTLE)
    send_kv, send_r = _run(src, send_cmd, exec_timeout)
    recv_r = recv_job.result(exec_timeout + 10)
    recv_kv = parse_kv(recv_r.stdout.decode(errors="replace"))

    problems = []
    if send_r.rc != 0 or getattr(send_r, "timed_out", False):
        problems.append(f"node {i}: `{send_cmd}` failed: {_describe(send_r)}")
    if recv_r.rc != 0 or getattr(recv_r, "timed_out", False):
        problems.append(f"node {j}: `{recv_cmd}` failed: {_describe(recv_r)}")

    sent = _int(send_kv, "sent", "count")
    acked = _int(send_kv, "acked", "acks", "ack")
    nacked = _int(send_kv, "nacked", "nacks", "nack")
    received = _int(recv_kv, "received", "recv", "count")
    sender_pid = send_kv.get("pid")
    if received != packets:
        problems.append(f"node {j} received {received} packet(s) from node {i}, expected {packets}")
    # The sender's PID: the receiver either counts mismatches itself or reports what it saw.
    bad_pid = _int(recv_kv, "bad_pid", "pid_mismatch", "bad_pids")
    if bad_pid:
        problems.append(f"node {j}: {bad_pid} packet(s) did not carry the sender's PID")
    seen = recv_kv.get("pid") or recv_kv.get("pids") or recv_kv.get("src_pid")
    pid_ok: bool | None = None
    if bad_pid is not None:
        pid_ok = bad_pid == 0
    if sender_pid is not None and seen is not None:
        seen_set = {s for s in seen.split(",") if s}
        pid_ok = (pid_ok is not False) and seen_set == {sender_pid}
        if seen_set != {sender_pid}:
            problems.append(f"node {j} saw PID(s) {seen} in word 0, node {i}'s packetizer PID is {sender_pid}")
    ok = not problems
    log(f"ring {i} -> {j}: sent {sent} acked {acked} nacked {nacked}, received {received}"
        + ("" if pid_ok is None else f", sender PID {'ok' if pid_ok else 'WRONG'}")
        + ("" if ok else "  FAILED"))
    return {"from": i, "to": j, "sent": sent, "acked": acked, "nacked": nacked,
            "received": received, "pid_ok": pid_ok, "ok": ok, "problems": problems,
            "send": send_kv, "recv": recv_kv}


def pingpong_pair(cluster: Cluster, i: int, rounds: int,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """Round trips between node i (client) and node (i+1)%N (server)."""
    n = len(cluster.nodes)
    j = (i + 1) % n
    timeout = 60 + rounds * 0.05
    server_cmd = f"unimem pingpong --peer {i} --role server --count {rounds}"
    client_cmd = f"unimem pingpong --peer {j} --role client --count {rounds}"
    server_job = run_background(cluster.node(j), server_cmd, timeout=timeout)
    time.sleep(SETTLE)
    client_kv, client_r = _run(cluster.node(i), client_cmd, timeout)
    server_r = server_job.result(timeout + 10)
    problems = []
    if client_r.rc != 0 or getattr(client_r, "timed_out", False):
        problems.append(f"node {i}: `{client_cmd}` failed: {_describe(client_r)}")
    if server_r.rc != 0 or getattr(server_r, "timed_out", False):
        problems.append(f"node {j}: `{server_cmd}` failed: {_describe(server_r)}")
    median = _num(client_kv, "rtt_median_us", "median_us", "rtt_p50_us", "p50_us")
    p99 = _num(client_kv, "rtt_p99_us", "p99_us")
    log(f"pingpong {i} <-> {j}: {rounds} round trips, median {median} us, p99 {p99} us"
        + ("" if not problems else "  FAILED"))
    return {"client": i, "server": j, "median_us": median, "p99_us": p99,
            "ok": not problems, "problems": problems, "kv": client_kv}


def run_demo(cfg: ClusterConfig, packets: int = 100, rounds: int = 200, mif: int = 1,
             keep: bool = False, log: Callable[[str], None] = print) -> int:
    if cfg.nodes < 2:
        raise ClusterError("the demo needs at least 2 nodes (--nodes)")
    if not 1 <= mif < 64:
        raise ClusterError(f"--mif {mif}: mailbox interfaces are 1..63 (0 is the atomic service's)")
    cluster = Cluster(cfg, log=log, detach=keep)
    t0 = time.monotonic()
    try:
        cluster.up()
        log(f"cluster up in {time.monotonic() - t0:.1f} s")
        for n in cluster.nodes:
            kv, r = _run(n, "unimem info", 30)
            if r.rc != 0:
                raise ClusterError(f"node {n.id}: `unimem info` failed: {_describe(r)}")
            log(f"node {n.id}: " + " ".join(f"{k}={v}" for k, v in list(kv.items())[:8]))

        log(f"ring: each node sends {packets} packet(s) to the next node's MIF {mif}")
        hops = [ring_hop(cluster, i, packets, mif, 30000, log) for i in range(cfg.nodes)]
        log(f"round trips: {rounds} per neighbour pair")
        pairs = [pingpong_pair(cluster, i, rounds, log) for i in range(cfg.nodes)]
        stats = None
        if cfg.fabric:
            stats = cluster.bridge_stats()

        rows = []
        for i in range(cfg.nodes):
            out_hop = hops[i]
            in_hop = hops[(i - 1) % cfg.nodes]
            pp = pairs[i]
            rows.append({"node": i, "sent_to": out_hop["to"], "sent": out_hop["sent"],
                         "acked": out_hop["acked"], "nacked": out_hop["nacked"],
                         "received_from": in_hop["from"], "received": in_hop["received"],
                         "sender_pid_ok": in_hop["pid_ok"], "rtt_peer": pp["server"],
                         "rtt_median_us": pp["median_us"], "rtt_p99_us": pp["p99_us"]})
        print()
        print(table(["node", "sent", "acked", "nacked", "received", "pid ok",
                     "rtt peer", "rtt median us", "rtt p99 us"],
                    [[r["node"], r["sent"], r["acked"], r["nacked"], r["received"],
                      {True: "yes", False: "NO", None: "-"}[r["sender_pid_ok"]], r["rtt_peer"],
                      r["rtt_median_us"], r["rtt_p99_us"]] for r in rows]))
        if stats is not None:
            print("\nbridge:")
            print(bridge_stats_table(stats, more=f"every port counter is in {cfg.run_dir / 'demo-bridge.csv'}"))
        print()

        nodes_csv = cfg.run_dir / "demo-nodes.csv"
        with open(nodes_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        log(f"wrote {nodes_csv}")
        if stats is not None:
            bridge_csv = cfg.run_dir / "demo-bridge.csv"
            ports = stats.get("ports", [])
            cols = sorted({k for p in ports for k in p}, key=lambda k: (k != "node", k != "state", k))
            with open(bridge_csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=cols)
                w.writeheader()
                w.writerows(ports)
            log(f"wrote {bridge_csv}")

        problems = [p for x in hops + pairs for p in x["problems"]]
        if problems:
            for p in problems:
                log("FAILED: " + p)
            log(f"demo failed: {len(problems)} problem(s); consoles and logs in {cfg.run_dir}")
            return 1
        log(f"demo passed: {cfg.nodes} hops x {packets} packets, {cfg.nodes} pairs x {rounds} "
            f"round trips ({time.monotonic() - t0:.0f} s)")
        return 0
    finally:
        if keep and cluster.status == "up":
            log(f"cluster {cfg.name!r} left running (--keep); stop it with "
                f"`rackemu cluster down --name {cfg.name}`")
        elif cluster.status != "down":
            log("stopping the cluster")
            cluster.down()
