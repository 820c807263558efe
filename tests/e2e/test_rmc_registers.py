"""The soNUMA RMC at register level, in real QEMU, across two nodes and the real bridge.

Each node is qemu-system-aarch64 -M rackemu-node in qtest mode: no guest runs, the test plays the
driver and the user library (writes the context and QP tables, puts WQEs in guest RAM, rings the
doorbell, polls the CQ in guest RAM) exactly as docs/sonuma.md describes. Constants come from
hw/include/rackemu/sonuma_regs.h, parsed.
"""
import os
import signal
import struct
import tempfile
import time

import pytest

from qtest import QEMU, BRIDGE, Bridge, QtestNode, regs_header, wait_for

R = regs_header("sonuma_regs.h")
B = regs_header("board.h")
BASE = B["RACKEMU_RMC_BASE"]
RAM = 0x40000000
MEM_MB = 128
SEG = RAM + (MEM_MB - 32) * (1 << 20)   # the machine's reserved segment: the top 32 MiB
WQ = RAM + 0x2000000                     # WQ/CQ of QP q at WQ + q * 0x10000, CQ + q * 0x10000
CQ = RAM + 0x2800000
CTX = 1

pytestmark = pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(BRIDGE)),
                                reason="build first: ./rackemu setup")


def qp_reg(q, r):
    return BASE + R["RMC_QP_TABLE"] + q * R["RMC_QP_STRIDE"] + R[r]


def ctx_reg(c, r):
    return BASE + R["RMC_CTX_TABLE"] + c * R["RMC_CTX_STRIDE"] + R[r]


def db_reg(q, r):
    return BASE + R["RMC_DB_BASE"] + q * R["RMC_DB_STRIDE"] + R[r]


def cnt(node, name):
    return node.readq(BASE + R["RMC_COUNTERS"] + R[name])


def wqe(op, node, roff, loff, length, wr_id=0, operand0=0, operand1=0, flags=0):
    return struct.pack("<BBHIQQQQQQQ", op, flags, node, length, wr_id, roff, loff, operand0, operand1, 0, 0)


class Qp:
    """The driver's and the library's part for one QP, through qtest."""

    def __init__(self, node, q, ctx=CTX, log2=4):
        self.n, self.q, self.log2 = node, q, log2
        self.depth = 1 << log2
        self.wq, self.cq = WQ + q * 0x10000, CQ + q * 0x10000
        node.memwrite(self.wq, bytes(64 * self.depth))
        node.memwrite(self.cq, bytes(32 * self.depth))
        node.writeq(qp_reg(q, "QP_CTRL"), 0)
        node.writeq(qp_reg(q, "QP_WQ_BASE"), self.wq)
        node.writeq(qp_reg(q, "QP_CQ_BASE"), self.cq)
        node.writeq(qp_reg(q, "QP_DEPTH_LOG2"), log2)
        node.writeq(qp_reg(q, "QP_CTX"), ctx)
        node.writeq(qp_reg(q, "QP_CTRL"), R["QP_CTRL_EN"])
        assert node.readq(qp_reg(q, "QP_CTRL")) & R["QP_CTRL_EN"], "QP enable refused"
        self.posted = self.done = 0

    def post(self, entry):
        slot = self.posted % self.depth
        self.n.memwrite(self.wq + 64 * slot, entry)
        self.posted += 1
        self.n.writeq(db_reg(self.q, "DB_WQ_TAIL"), self.posted)

    def next(self, timeout=10.0):
        slot = self.done % self.depth
        phase = 1 ^ ((self.done >> self.log2) & 1)
        end = time.monotonic() + timeout
        while True:
            raw = self.n.memread(self.cq + 32 * slot, 32)
            if raw[31] & 1 == phase:
                break
            assert time.monotonic() < end, f"no completion on node {self.n.node_id} QP {self.q}"
            time.sleep(0.005)
        wr_id, value, modeled, wall, idx, op, status, info = struct.unpack_from("<QQIIHBBB", raw)
        self.done += 1
        self.n.writeq(db_reg(self.q, "DB_CQ_HEAD"), self.done)
        return dict(wr_id=wr_id, value=value, modeled_ns=modeled, wall_ns=wall, op=op, status=status,
                    info=info, flags=raw[31])

    def run(self, entry, timeout=10.0):
        self.post(entry)
        return self.next(timeout)


def context(node, c=CTX, off=0, size=1 << 20, perm=None, mask=0b11, layout=None):
    perm = perm if perm is not None else (R["CTX_PERM_READ"] | R["CTX_PERM_WRITE"] | R["CTX_PERM_ATOMIC"]
                                          | R["CTX_PERM_SABRE"])
    node.writeq(ctx_reg(c, "CTX_CTRL"), 0)
    node.writeq(ctx_reg(c, "CTX_BASE"), SEG + off)
    node.writeq(ctx_reg(c, "CTX_SIZE"), size)
    node.writeq(ctx_reg(c, "CTX_PERM"), perm)
    node.writeq(ctx_reg(c, "CTX_NODEMASK"), mask)
    node.writeq(ctx_reg(c, "CTX_LAYOUT"), 0 if layout is None else R["CTX_LAYOUT_VALID"] | layout)
    node.writeq(ctx_reg(c, "CTX_CTRL"), R["CTX_CTRL_VALID"])
    assert node.readq(ctx_reg(c, "CTX_CTRL")) == R["CTX_CTRL_VALID"], "context refused"


@pytest.fixture(scope="module")
def rack():
    with tempfile.TemporaryDirectory(prefix="rackemu-rmc-") as d:
        bridge = Bridge(d)
        nodes = [QtestNode(i, 2, bridge.socket, memory=f"{MEM_MB}M") for i in range(2)]
        wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                 what="2 nodes connected to the bridge")
        for n in nodes:
            n.writeq(BASE + R["RMC_REG_CTRL"], R["RMC_CTRL_EN"])
            context(n, layout=0)
        yield bridge, nodes
        for n in nodes:
            n.close()
        bridge.stop()


def test_identification_and_segment(rack):
    _, (n0, n1) = rack
    assert n1.readq(BASE + R["RMC_REG_ID"]) == R["RMC_ID_VALUE"]
    assert n1.readq(BASE + R["RMC_REG_NODE_ID"]) == 1
    assert n1.readq(BASE + R["RMC_REG_NODE_COUNT"]) == 2
    assert n1.readq(BASE + R["RMC_REG_QP_COUNT"]) == R["RMC_QP_COUNT"] == 64
    assert n1.readq(BASE + R["RMC_REG_ATT_ENTRIES"]) == 16
    assert n1.readq(BASE + R["RMC_REG_SB_DEPTH"]) == 32
    assert n1.readq(BASE + R["RMC_REG_SEG_BASE"]) == SEG
    assert n1.readq(BASE + R["RMC_REG_SEG_SIZE"]) == 32 << 20
    st = n1.readq(BASE + R["RMC_REG_STATUS"])
    assert st & R["RMC_STATUS_SPEC"] and st & R["RMC_STATUS_FABRIC_UP"]
    assert n1.readq(BASE + R["RMC_REG_T_HOP_NS"]) == 35
    assert n1.readq(BASE + R["RMC_REG_T_MEM_NS"]) == 90


def test_remote_read_write_and_atomics(rack):
    _, (n0, n1) = rack
    qp = Qp(n1, 0)
    data = bytes((i * 7 + 3) & 0xff for i in range(4096 + 65))
    n0.memwrite(SEG + 0x1003, data)
    e = qp.run(wqe(R["RMC_OP_READ"], 0, 0x1003, 0x8000, len(data), wr_id=11))
    assert (e["status"], e["wr_id"], e["op"]) == (R["RMC_ST_OK"], 11, R["RMC_OP_READ"])
    assert n1.memread(SEG + 0x8000, len(data)) == data
    # wall_ns is VM time, which stands still under qtest unless a test steps it
    assert e["modeled_ns"] > 0 and e["wall_ns"] == 0
    n1.memwrite(SEG + 0x9000, b"written by node 1")
    e = qp.run(wqe(R["RMC_OP_WRITE"], 0, 0x20, 0x9000, 17))
    assert e["status"] == R["RMC_ST_OK"]
    assert n0.memread(SEG + 0x20, 17) == b"written by node 1"
    n0.memwrite(SEG + 0x100, struct.pack("<Q", 1000))
    e = qp.run(wqe(R["RMC_OP_FAA"], 0, 0x100, 0, 8, operand0=5))
    assert e["value"] == 1000
    e = qp.run(wqe(R["RMC_OP_CAS"], 0, 0x100, 0, 8, operand0=1005, operand1=77))
    assert e["value"] == 1005
    assert struct.unpack("<Q", n0.memread(SEG + 0x100, 8))[0] == 77


def test_sabre_speculation_shape(rack):
    _, (n0, n1) = rack
    qp = Qp(n1, 1)
    obj = struct.pack("<Q", 8) + bytes(range(256)) * 4
    n0.memwrite(SEG + 0x4000, obj[:1024])
    e_read = qp.run(wqe(R["RMC_OP_READ"], 0, 0x4000, 0xa000, 1024))
    e_spec = qp.run(wqe(R["RMC_OP_SABRE"], 0, 0x4000, 0xa000, 1024))
    e_nospec = qp.run(wqe(R["RMC_OP_SABRE"], 0, 0x4000, 0xb000, 1024, flags=R["RMC_WQE_F_NOSPEC"]))
    for e in (e_spec, e_nospec):
        assert e["status"] == R["RMC_ST_OK"] and e["value"] == 8
    assert n1.memread(SEG + 0xb000, 1024) == obj[:1024]
    # design §5: one R2P2 serves the SABRe at 3.2 ns per block, the read is spread over four (1 ns):
    # 3 cycles + 15 x 2.2 ns = 36 ns more for 16 blocks
    assert abs(e_spec["modeled_ns"] - e_read["modeled_ns"] - 36) <= 1
    assert e_nospec["modeled_ns"] - e_spec["modeled_ns"] >= 80  # one memory latency (90 ns)
    assert e_nospec["flags"] & R["RMC_CQE_F_NOSPEC"]
    n0.memwrite(SEG + 0x4000, struct.pack("<Q", 9))  # a writer holds the object
    e = qp.run(wqe(R["RMC_OP_SABRE"], 0, 0x4000, 0xa000, 1024))
    assert (e["status"], e["info"]) == (R["RMC_ST_SABRE_ABORT"], R["RMC_INFO_LOCKED"])
    assert cnt(n0, "RMC_CNT_ABORT_LOCKED") >= 1


def test_loopback_on_the_node_itself(rack):
    _, (n0, _) = rack
    qp = Qp(n0, 2)
    n0.memwrite(SEG + 0x3000, b"loop" * 16)
    e = qp.run(wqe(R["RMC_OP_READ"], 0, 0x3000, 0xc000, 64))
    assert e["status"] == R["RMC_ST_OK"]
    assert n0.memread(SEG + 0xc000, 64) == b"loop" * 16


def test_bad_requests_and_errors_complete_and_qemu_lives(rack):
    _, (n0, n1) = rack
    qp = Qp(n1, 3, log2=1)  # depth 2: the CQ wraps several times
    cases = [
        (wqe(7, 0, 0, 0, 8), R["RMC_ST_BAD_REQUEST"], R["RMC_INFO_BAD_OP"]),
        (wqe(R["RMC_OP_CAS"], 0, 4, 0, 8), R["RMC_ST_BAD_REQUEST"], R["RMC_INFO_UNALIGNED"]),
        (wqe(R["RMC_OP_READ"], 5, 0, 0, 8), R["RMC_ST_BAD_REQUEST"], R["RMC_INFO_BAD_NODE"]),
        (wqe(R["RMC_OP_READ"], 0, 0, (1 << 20) - 4, 8), R["RMC_ST_BAD_REQUEST"], R["RMC_INFO_LOCAL_BOUNDS"]),
        (wqe(R["RMC_OP_READ"], 0, (1 << 20) - 8, 0, 9), R["RMC_ST_REMOTE_ACCESS"], R["RMC_INFO_BOUNDS"]),
        (wqe(R["RMC_OP_READ"], 0, 0, 0, 0), R["RMC_ST_BAD_REQUEST"], R["RMC_INFO_BAD_LEN"]),
    ]
    for entry, st, info in cases:
        e = qp.run(entry)
        assert (e["status"], e["info"]) == (st, info)
    # a WQ outside RAM is refused at enable
    n1.writeq(qp_reg(9, "QP_WQ_BASE"), 0x100000000000)
    n1.writeq(qp_reg(9, "QP_CQ_BASE"), CQ)
    n1.writeq(qp_reg(9, "QP_DEPTH_LOG2"), 4)
    n1.writeq(qp_reg(9, "QP_CTX"), CTX)
    n1.writeq(qp_reg(9, "QP_CTRL"), R["QP_CTRL_EN"])
    assert n1.readq(qp_reg(9, "QP_CTRL")) & R["QP_CTRL_EN"] == 0
    assert n1.readq(qp_reg(9, "QP_STATUS")) & R["QP_ST_CFG_ERR"]
    # narrow accesses are refused, not misread
    assert n1.read(BASE + R["RMC_REG_ID"], 4) == 0
    assert n1.readq(BASE + R["RMC_REG_ID"]) == R["RMC_ID_VALUE"]
    assert cnt(n1, "RMC_CNT_GUEST_ERRORS") >= 7


def test_timing_properties_act():
    """Node 0 serves LLC-resident data (llc-resident=on) with a slower R2P2 (r2p2-gbps=10): a read
    from node 1 costs L instead of M, and its blocks go at 64 B / 10 GB/s / 4 R2P2s = 1.6 ns."""
    with tempfile.TemporaryDirectory(prefix="rackemu-rmc-timing-") as d:
        bridge = Bridge(d)
        props = ["-global", "rackemu-rmc.llc-resident=on", "-global", "rackemu-rmc.r2p2-gbps=10"]
        nodes = [QtestNode(i, 2, bridge.socket, memory=f"{MEM_MB}M", extra_args=props if i == 0 else ())
                 for i in range(2)]
        try:
            wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                     what="2 nodes connected")
            n0, n1 = nodes
            for n in nodes:
                n.writeq(BASE + R["RMC_REG_CTRL"], R["RMC_CTRL_EN"])
                context(n, layout=0)
            assert n0.readq(BASE + R["RMC_REG_STATUS"]) & R["RMC_STATUS_LLC"]
            assert not n1.readq(BASE + R["RMC_REG_STATUS"]) & R["RMC_STATUS_LLC"]
            assert n0.readq(BASE + R["RMC_REG_T_R2P2_GBPS"]) == 10
            q1, q0 = Qp(n1, 0), Qp(n0, 0)
            # READ = F + c + M + (n-1) g_r, F = 92.8 (design §5); node 1's model uses node 0's reply
            # flag for M (10), its own properties for g_r (20 GB/s: 1 ns)
            e = q1.run(wqe(R["RMC_OP_READ"], 0, 0, 0x8000, 64))
            assert e["status"] == R["RMC_ST_OK"] and e["modeled_ns"] == 104  # 92.8 + 1 + 10
            e = q0.run(wqe(R["RMC_OP_READ"], 1, 0, 0x8000, 64))
            assert e["status"] == R["RMC_ST_OK"] and e["modeled_ns"] == 184  # 92.8 + 1 + 90
            # a SABRe's R is node 0's: 2 + 10 + 15 x 6.4 + 1 = 109; + F + c = 202.8
            e = q1.run(wqe(R["RMC_OP_SABRE"], 0, 0x1000, 0x9000, 1024))
            assert e["status"] == R["RMC_ST_OK"] and e["modeled_ns"] == 203
        finally:
            for n in nodes:
                n.close()
            bridge.stop()


def test_killed_node_turns_pending_requests_into_unreachable():
    with tempfile.TemporaryDirectory(prefix="rackemu-rmc-kill-") as d:
        bridge = Bridge(d)
        # node 1 reads from node 0, then node 0 is killed with requests outstanding
        nodes = [QtestNode(i, 2, bridge.socket, memory=f"{MEM_MB}M") for i in range(2)]
        try:
            wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                     what="2 nodes connected")
            n0, n1 = nodes
            for n in nodes:
                n.writeq(BASE + R["RMC_REG_CTRL"], R["RMC_CTRL_EN"])
                context(n)
            qp = Qp(n1, 0, log2=6)
            assert qp.run(wqe(R["RMC_OP_READ"], 0, 0, 0, 64))["status"] == R["RMC_ST_OK"]
            n0.kill()
            t0 = time.monotonic()
            for i in range(20):
                qp.post(wqe(R["RMC_OP_READ"], 0, 0, 0, 8192, wr_id=i))
            got = [qp.next(timeout=10) for _ in range(20)]
            assert time.monotonic() - t0 < 8
            assert sorted(e["wr_id"] for e in got) == list(range(20))
            for e in got:
                assert e["status"] == R["RMC_ST_UNREACHABLE"], e
                assert e["info"] in (R["RMC_INFO_NOROUTE"], R["RMC_INFO_NODE_GONE"], R["RMC_INFO_TIMEOUT"])
        finally:
            for n in nodes:
                n.close()
            bridge.stop()


def test_timed_out_request_raises_the_interrupt_line():
    """trust-model.md finding 10: a completion written because the destination never answered (node 0
    stopped) raises the RMC's interrupt line like any other, seen at the GIC's distributor
    (GICD_ISPENDR reflects a level-triggered SPI's line)."""
    gicd = 0x08000000  # the virt machine's GICv2 distributor
    irq = 32 + B["RACKEMU_RMC_SPI"]

    def line(n):
        return (n.read(gicd + 0x200 + 4 * (irq // 32), 4) >> (irq % 32)) & 1

    with tempfile.TemporaryDirectory(prefix="rackemu-rmc-irq-") as d:
        bridge = Bridge(d)
        nodes = [QtestNode(i, 2, bridge.socket, memory=f"{MEM_MB}M") for i in range(2)]
        n0, n1 = nodes
        stopped = False
        try:
            wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                     what="2 nodes connected")
            for n in nodes:
                n.writeq(BASE + R["RMC_REG_CTRL"], R["RMC_CTRL_EN"])
                context(n)
            qp = Qp(n1, 0, log2=4)
            n1.writeq(qp_reg(0, "QP_CTRL"), R["QP_CTRL_EN"] | R["QP_CTRL_IRQ_EN"])
            # an answered request raises the line; write-1-to-clear lowers it
            assert qp.run(wqe(R["RMC_OP_READ"], 0, 0, 0, 64))["status"] == R["RMC_ST_OK"]
            wait_for(lambda: line(n1) == 1, timeout=2, what="the interrupt line after a completion")
            n1.writeq(BASE + R["RMC_REG_IRQ_STATUS"], 1)
            wait_for(lambda: line(n1) == 0, timeout=2, what="the interrupt line to drop")
            os.killpg(n0.proc.pid, signal.SIGSTOP)
            stopped = True
            # the deadline runs on the VM's clock: nothing times out until the test steps it
            # past timeout-ms (2 s), and wall_ns is the VM time that passed
            qp.post(wqe(R["RMC_OP_READ"], 0, 0, 0, 64, wr_id=7))
            time.sleep(2.5)
            slot = qp.cq + 32 * (qp.done % qp.depth)  # first round: the phase bit reads 0 until written
            assert n1.memread(slot, 32)[31] & 1 == 0, "timed out while the VM's clock stood still"
            n1.clock_step(2_100_000_000)
            e = qp.next(timeout=10)
            assert (e["status"], e["info"]) == (R["RMC_ST_UNREACHABLE"], R["RMC_INFO_TIMEOUT"]), e
            assert 2_000_000_000 <= e["wall_ns"] <= 2_100_000_000, e
            assert n1.readq(BASE + R["RMC_REG_IRQ_STATUS"]) & 1
            wait_for(lambda: line(n1) == 1, timeout=2, what="the interrupt line after a timed-out request")
        finally:
            if stopped:
                os.killpg(n0.proc.pid, signal.SIGCONT)
            for n in nodes:
                n.close()
            bridge.stop()
