"""Scenario: the atomic unit in the RNIC (docs/atomic-unit.md "In the RNIC"), on a real QEMU.

Register level (qtest, no guest): the amu-* device properties are validated at realize, act on
the unit (no cache: every atomic misses), and an extended atomic runs between two QPs of one
node. Cluster level (3 booted nodes with `-device rackemu-rnic`): every node hammers words of
node 0 with each atomic kind (`rnic xatomic`: posted and fetching ADD, XOR, OR, AND, SWAP,
32-bit ADD, COMPARE_SWAP and masked compare-swap increments) while node 0's own CPU adds to one
of them (`rnic bench --server --cpu-adds`): every final value is exact, which is the unit's
global atomicity (NIC atomics atomic with the target CPU's atomics) tested end to end.
"""
import os
import struct
import subprocess
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import RnicRelay as Relay, kv, run_kv, stop_procs
from qtest import QEMU, QtestNode, regs_header
from test_rnic_registers import R, Rnic, SLOT

X = regs_header("roce.h")

AMU_ARGS = "amu-cache-lines=16,amu-cache-ways=4,amu-tags=64,amu-raw=flush,amu-rate-limit=aging"


def qemu_refuses(prop):
    """Start a node with `-device rackemu-rnic,PROP`: QEMU must exit at realize; its message."""
    p = subprocess.run([QEMU, "-M", "rackemu-node,node-id=0,node-count=1", "-m", "128M", "-accel", "qtest",
                        "-qtest", "/dev/null", "-display", "none", "-nodefaults", "-device",
                        f"rackemu-rnic,{prop}"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode != 0, f"QEMU accepted {prop}"
    return p.stderr


@pytest.mark.skipif(not os.path.exists(QEMU), reason="build first: ./rackemu setup")
@pytest.mark.parametrize("prop,words", [
    ("amu-cache-ways=3", "amu-cache-lines must be a multiple of cache-ways"),
    ("amu-cache-lines=8,amu-cache-ways=16", "amu-cache-ways must be 1..cache-lines"),
    ("amu-tags=0", "amu-tags must be 1..65536"),
    ("amu-lookahead=100", "amu-lookahead must be 1..input-queue"),
    ("amu-rate-limit=sometimes", "amu-rate-limit must be off, aging, hostq or both"),
    ("amu-raw=later", "amu-raw must be none, ack or flush"),
])
def test_bad_atomic_unit_properties_are_refused_at_realize(prop, words):
    err = qemu_refuses(prop)
    assert "rackemu-rnic: atomic unit: " + words in err, err


def xwqe(wr_id, fetch, xop, size, laddr, lkey, raddr, rkey, operand, compare=0, mask=0):
    op = R["RNIC_WR_XATOMIC"] if fetch else R["RNIC_WR_XATOMIC_POST"]
    w = struct.pack("<QBBBBIQIIQQQBB6s", wr_id, op, R["RNIC_WQE_F_SIGNALED"], 1 if fetch else 0, 0, 0, raddr, rkey,
                    0, operand, compare, mask, xop, size, bytes(6))
    if fetch:
        w += struct.pack("<QII", laddr, size, lkey)
    return w + bytes(128 - len(w))


def loopback_pair(nic):
    """Two connected QPs of one node (Rnic.loopback_pair), one MR: run_xatomics' arguments."""
    _, buf, key, cq, a, _ = nic.loopback_pair()
    return buf, key, key, cq, a


def run_xatomics(node, nic, buf, lkey, rkey, cq, qp, n):
    """n fetching 64-bit ADDs of 1 on one word, one at a time: the old values 0..n-1."""
    word = buf + 4096
    node.memwrite(word, bytes(8))
    for i in range(n):
        w = xwqe(i, True, X["ROCE_XOP_ADD"], 8, buf + 8 * (i % 64), lkey, word, rkey, 1)
        slot = qp["pi"] & ((1 << qp["log2"]) - 1)
        node.memwrite(qp["sq"] + slot * 128, w)
        qp["pi"] += 1
        nic.db((qp["qpn"] - R["RNIC_QPN_BASE"]) * 0x1000 + R["RNIC_QP_DB_SQ_PI"], qp["pi"])
        got = []
        got = nic.poll(cq)   # qtest: the device runs the doorbell's work synchronously
        assert got and got[0]["status"] == 0 and got[0]["opcode"] == R["RNIC_CQE_OP_XATOMIC"], got
        assert got[0]["byte_len"] == 8 and got[0]["modeled_ns"] > 0
        assert struct.unpack("<Q", node.memread(buf + 8 * (i % 64), 8))[0] == i
    assert struct.unpack("<Q", node.memread(word, 8))[0] == n


@pytest.mark.skipif(not os.path.exists(QEMU), reason="build first: ./rackemu setup")
@pytest.mark.parametrize("props,cached", [("", True), (",amu-cache-lines=0", False)])
def test_extended_atomics_go_through_the_unit_and_its_properties_act(props, cached):
    node = QtestNode(0, 1, memory="128M", extra_args=("-device", f"rackemu-rnic,addr={SLOT:#x}{props}"))
    try:
        nic = Rnic(node)
        nic.wreg(R["RNIC_REG_CTRL"], R["RNIC_CTRL_ENABLE"])
        assert nic.reg(R["RNIC_REG_CAPS"]) & R["RNIC_CAP_XATOMIC"]
        run_xatomics(node, nic, *loopback_pair(nic), n=20)
        assert nic.counter("AMU_OPS") == 20
        assert nic.counter("AMU_ERRORS") == 0
        assert nic.counter("AMU_MODELED_NS") > 0
        if cached:   # one word again and again: one miss, then hits (or forwards)
            assert nic.counter("AMU_MISSES") == 1 and nic.counter("AMU_HITS") + nic.counter("AMU_FORWARDS") == 19
        else:        # no cache (Fig. 2): every operation reads the host
            assert nic.counter("AMU_HITS") == 0 and nic.counter("AMU_HOST_READS") == 20
    finally:
        node.kill()


# ---- three booted nodes ----

@pytest.fixture(scope="module")
def acluster():
    c = _start(_config(f"e2e-rnic-amu-{int(time.time())}", nodes=3,
                       qemu_args=["-device", f"rackemu-rnic,{AMU_ARGS}"]))
    yield c
    c.down()
    _clusters.remove(c)


def test_check_suite_covers_every_extended_atomic(acluster):
    r, d = run_kv(acluster.node(1), "rnic check", 300)
    checks = {x["check"]: x for x in d if "check" in x}
    failed = [x for x in checks.values() if x.get("ok") != "1"]
    assert r.rc == 0 and not failed, (failed, r.stderr)
    for op in ("add", "swap", "xor", "and", "or", "mcswap"):
        for size in (64, 32):
            for suffix in ("", "_fetch"):
                assert f"xatomic_{op}{size}{suffix}" in checks
    for what in ("unaligned64", "unaligned32", "no_atomic_access", "past_end", "bad_op", "bad_size"):
        assert f"refuse_xatomic_{what}" in checks
    assert "xatomic_many_outstanding_quiet" in checks


def hammer(cluster, count, cpu_adds, tag):
    """Every node runs `rnic xatomic` against node 0's server; node 0's CPU adds cpu_adds times.
    The server's nine words (rnic xatomic's, docs/rnic-verbs.md), checked exact."""
    s = cluster.node(0)
    nodes = [cluster.node(i) for i in range(3)]
    try:
        relay = Relay(s, tag, 3, f"--cpu-adds {cpu_adds}")
        cl = [relay.client(n, f"xatomic --count {count} --window 64") for n in nodes]  # node 0 loops back
        relay.go(*cl)
        for c in cl:
            rc, out = relay.result(c, timeout=600)
            done = [x for x in kv(out) if x.get("xatomic") == "done"]
            assert rc == 0 and done and done[0]["errors"] == "0", out.decode()
        fin = [x for x in relay.stop() if x.get("server") == "done"]
        assert fin, "the server did not finish"
        w = [int(fin[0][f"word{i}"], 16) for i in range(9)]
        print("server:", " ".join(f"{k}={v}" for k, v in fin[0].items()))
    finally:
        for n in nodes:
            stop_procs(n, "rnic")
    bits = 0b111   # nodes 0, 1, 2
    total = 3 * count
    assert w[0] == total + cpu_adds, f"posted ADDs + the CPU's own adds: {w[0]} != {total} + {cpu_adds}"
    assert w[1] == total                                  # fetching ADD
    assert w[2] == bits                                   # XOR, an odd number of times each
    assert w[3] == bits                                   # OR
    assert w[4] == (~bits) & (2**64 - 1)                  # AND of ~bit over all ones
    assert w[5] >> 32 in (0, 1, 2) and w[5] & 0xffffffff == count - 1   # SWAP: some node's last value
    assert w[6] == 0x5A5A5A5A00000000 + total             # 32-bit ADD: the high half untouched
    assert w[7] == total                                  # COMPARE_SWAP increments
    assert w[8] == 0xABCD000000000000 + total             # masked compare-swap of the low half only
    r, d = run_kv(s, "rnic counters", 60)
    c = {k: v for x in d for k, v in x.items()}
    print("node 0:", " ".join(f"{k}={v}" for k, v in c.items() if k.startswith("amu_") or k in (
        "duplicates", "dup_replays", "retransmits")))
    assert int(c["amu_ops"]) >= 9 * total, c          # every NIC atomic went through the unit
    assert int(c["amu_errors"]) == 0
    assert int(c["amu_misses"]) >= 1 and int(c["amu_host_writes"]) >= 1
    return c


def test_every_node_hammers_node0_with_every_atomic_kind_exactly(acluster):
    hammer(acluster, 301, 2000000, "amu")   # odd count: each node's XOR bit stays set


def test_the_same_exact_under_fabric_drop_and_duplicate_rules(fresh_cluster):
    """RoCE frames between nodes dropped and duplicated by the bridge: retransmitted requests
    reach the responder again and are answered from its resources, never executed twice."""
    c = fresh_cluster(nodes=3, qemu_args=["-device", f"rackemu-rnic,{AMU_ARGS}"],
                      faults=["drop prob=0.03 svc=eth kind=roce", "duplicate prob=0.03 svc=eth kind=roce"])
    counters = hammer(c, 101, 100000, "amu-faults")
    others = [{k: v for x in run_kv(c.node(i), "rnic counters", 60)[1] for k, v in x.items()} for i in (1, 2)]
    dups = int(counters["duplicates"]) + sum(int(o["duplicates"]) for o in others)
    rexmit = int(counters["retransmits"]) + sum(int(o["retransmits"]) for o in others)
    assert dups > 0 and rexmit > 0, (dups, rexmit)


def test_a_dead_target_turns_pending_atomics_into_error_completions(fresh_cluster):
    """Node 0 killed while node 1 has extended atomics in flight: they complete with
    RETRY_EXC_ERR (the rest flushed), reported by rnic_quiet, in far less than the test's time."""
    c = fresh_cluster(nodes=2, qemu_args=["-device", "rackemu-rnic"])
    rc, out, took = Relay.kill_server_under(c, "amu-kill",
                                            "xatomic --count 100000000 --window 64 --timeout 10 --retry 3")
    assert rc == 1 and b"status 12 (transport retries exceeded)" in out, out.decode()
    assert took < 30, took
