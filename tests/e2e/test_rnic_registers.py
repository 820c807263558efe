"""The RNIC (docs/rnic.md) at register level, on a real QEMU.

One qemu-system-aarch64 -M rackemu-node with `-device rackemu-rnic` in qtest mode (no guest, no
firmware: the test enumerates the PCI function itself through the ECAM, assigns its BARs and
enables bus mastering, then plays the driver: command blocks, rings and WQEs in guest RAM,
doorbells, CQ polling). Without a fabric the device still carries traffic between two QPs of the
node (frames to its own MAC loop back inside the device), which is what the data tests use.
"""
import os
import struct

import pytest

from qtest import QEMU, QtestNode, regs_header

R = regs_header("rnic_regs.h")
RAM = 0x40000000
SLOT = 3
ECAMS = (0x4010000000, 0x3f000000)   # virt's high ECAM (default), its low one
BAR0, BAR2 = 0x10000000, 0x10200000  # in virt's 32-bit PCI MMIO window
CMD = RAM + 0x2000000                 # 32 MiB into RAM: nothing runs in qtest mode
HEAP = RAM + 0x2100000

pytestmark = pytest.mark.skipif(not os.path.exists(QEMU), reason="build first: ./rackemu setup")


class Rnic:
    """The function's config space, BARs and a small driver over qtest."""

    def __init__(self, n):
        self.n = n
        self.cfg = None
        for ecam in ECAMS:
            base = ecam + (SLOT << 15)
            if n.read(base, 4) == (R["RNIC_PCI_DEVICE_ID"] << 16 | R["RNIC_PCI_VENDOR_ID"]):
                self.cfg = base
                break
        assert self.cfg is not None, "rackemu-rnic not found at slot 3 of either ECAM"
        n.write(self.cfg + 0x10, BAR0, 4)
        n.write(self.cfg + 0x18, BAR2, 4)
        n.write(self.cfg + 0x04, 0x6, 2)  # memory space + bus master
        self.heap = HEAP

    def reg(self, off):
        return self.n.read(BAR0 + off, 4)

    def wreg(self, off, v):
        self.n.write(BAR0 + off, v, 4)

    def counter(self, name):
        return self.n.readq(BAR0 + R["RNIC_REG_COUNTERS"] + R["RNIC_CNT_" + name])

    def db(self, off, v):
        self.n.write(BAR2 + off, v, 4)

    def rdb(self, off):
        return self.n.read(BAR2 + off, 4)

    def alloc(self, size, align=4096):
        self.heap = (self.heap + align - 1) & ~(align - 1)
        a = self.heap
        self.heap += size
        return a

    def cmd(self, op, handle=0, params=b""):
        blk = struct.pack("<HHIII", op, 0, handle, 0, 0) + params
        self.n.memwrite(CMD, blk + bytes(128 - len(blk)))
        self.wreg(R["RNIC_REG_CMD_ADDR_LO"], CMD & 0xffffffff)
        self.wreg(R["RNIC_REG_CMD_ADDR_HI"], CMD >> 32)
        self.wreg(R["RNIC_REG_CMD_EXEC"], R["RNIC_CMD_EXEC_GO"])
        out = self.n.memread(CMD, 16)
        _, status, handle, out0, out1 = struct.unpack("<HHIII", out)
        assert status == self.reg(R["RNIC_REG_CMD_STATUS"])
        return status, handle, out0, out1

    def ok(self, *a):
        st, h, o0, o1 = self.cmd(*a)
        assert st == R["RNIC_CMD_ST_OK"], f"command {a[0]} status {st}"
        return h, o0, o1

    def mr(self, pd, addr, length, access=None):
        acc = R["RNIC_ACCESS_ALL"] if access is None else access
        p = struct.pack("<QQQIIBBHI", addr, length, 0, 0, acc, 12, R["RNIC_MR_F_PHYS"], 0, 0)
        return self.cmd(R["RNIC_CMD_REG_MR"], pd, p)

    def cq(self, log2=4, vector=1):
        ring = self.alloc(64 << log2)
        self.n.memwrite(ring, bytes(64 << log2))
        h, _, _ = self.ok(R["RNIC_CMD_CREATE_CQ"], 0, struct.pack("<QBBHI", ring, log2, vector, 0, 0))
        return {"cqn": h, "ring": ring, "log2": log2, "ci": 0}

    def qp(self, pd, cq, log2=4):
        sq, rq = self.alloc(128 << log2), self.alloc(64 << log2)
        h, _, _ = self.ok(R["RNIC_CMD_CREATE_QP"], pd,
                          struct.pack("<QQIIBBHI", sq, rq, cq["cqn"], cq["cqn"], log2, log2, 0, 0))
        return {"qpn": h, "sq": sq, "rq": rq, "log2": log2, "pi": 0}

    def modify(self, qpn, mask, state, mtu=0, dest_qpn=0, dest_node=0, access=0, psn=0):
        p = struct.pack("<IBBBBBBBBHHIIIIII6sH16s", mask, state, 10, 3, 7, 1, 4, 4, 0, mtu, 0xffff, access,
                        dest_qpn, psn, psn, dest_node, 0, bytes(6), 0, bytes(16))
        return self.cmd(R["RNIC_CMD_MODIFY_QP"], qpn, p)[0]

    def connect(self, qp, peer_qpn, mtu=1024):
        A = lambda *names: sum(R["RNIC_QP_ATTR_" + x] for x in names)  # noqa: E731
        acc = R["RNIC_ACCESS_ALL"] & ~R["RNIC_ACCESS_LOCAL_WRITE"]
        assert self.modify(qp["qpn"], A("STATE", "ACCESS_FLAGS"), R["RNIC_QPS_INIT"], access=acc) == 0
        rtr = A("STATE", "PATH_MTU", "DEST_QPN", "RQ_PSN", "MAX_DEST_RD_ATOMIC", "MIN_RNR_TIMER", "AV")
        rts = A("STATE", "SQ_PSN", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "MAX_QP_RD_ATOMIC")
        assert self.modify(qp["qpn"], rtr, R["RNIC_QPS_RTR"], mtu=mtu, dest_qpn=peer_qpn, dest_node=0, access=acc,
                           psn=0xfffffe) == 0
        assert self.modify(qp["qpn"], rts, R["RNIC_QPS_RTS"], access=acc, psn=0xfffffe) == 0

    def loopback_pair(self):
        """A PD, a 64 KiB buffer with one MR over it, a CQ and two QPs connected to each other
        (frames to the node's own MAC loop back in the device): (pd, buf, key, cq, a, b)."""
        pd, _, _ = self.ok(R["RNIC_CMD_CREATE_PD"])
        buf = self.alloc(1 << 16)
        st, _, key, _ = self.mr(pd, buf, 1 << 16)
        assert st == 0
        cq = self.cq(log2=6)
        a, b = self.qp(pd, cq), self.qp(pd, cq)
        self.connect(a, b["qpn"])
        self.connect(b, a["qpn"])
        return pd, buf, key, cq, a, b

    def post(self, qp, op, wr_id, laddr, length, lkey, raddr=0, rkey=0, swap_add=0, compare=0):
        w = struct.pack("<QBBBBIQIIQQ16sQII", wr_id, op, R["RNIC_WQE_F_SIGNALED"], 1, 0, 0, raddr, rkey, 0,
                        swap_add, compare, bytes(16), laddr, length, lkey)
        slot = qp["pi"] & ((1 << qp["log2"]) - 1)
        self.n.memwrite(qp["sq"] + slot * 128, w + bytes(128 - len(w)))
        qp["pi"] += 1
        self.db((qp["qpn"] - R["RNIC_QPN_BASE"]) * 0x1000 + R["RNIC_QP_DB_SQ_PI"], qp["pi"])

    def poll(self, cq):
        out = []
        while True:
            slot = cq["ci"] & ((1 << cq["log2"]) - 1)
            raw = self.n.memread(cq["ring"] + slot * 64, 64)
            e = struct.unpack("<QIIIIBBBBIQQ16s", raw)
            if (e[8] & 1) != (((cq["ci"] >> cq["log2"]) & 1) ^ 1):
                break
            out.append({"wr_id": e[0], "byte_len": e[1], "qpn": e[3], "opcode": e[5], "status": e[6],
                        "vendor_err": e[9], "modeled_ns": e[10]})
            cq["ci"] += 1
        if out:
            self.db(R["RNIC_DB_CQ_BASE"] + cq["cqn"] * 0x1000 + R["RNIC_CQ_DB_CI"], cq["ci"])
        return out


@pytest.fixture(scope="module")
def node():
    n = QtestNode(0, 1, memory="128M", extra_args=("-device", f"rackemu-rnic,addr={SLOT:#x}"))
    yield n
    n.kill()


@pytest.fixture
def nic(node):
    r = Rnic(node)
    r.wreg(R["RNIC_REG_CTRL"], R["RNIC_CTRL_ENABLE"])
    return r


def test_pci_identity_and_id_registers(node, nic):
    assert node.read(nic.cfg + 0x08, 4) >> 8 == R["RNIC_PCI_CLASS"] << 8, "class code 0x0207 (InfiniBand)"
    assert nic.reg(R["RNIC_REG_ID"]) == R["RNIC_ID_VALUE"]
    assert nic.reg(R["RNIC_REG_VERSION"]) == R["RNIC_VERSION_VALUE"]
    caps = nic.reg(R["RNIC_REG_CAPS"])
    assert caps & R["RNIC_CAP_FLUSH"] and caps & R["RNIC_CAP_ATOMIC_WRITE"]
    assert not caps & R["RNIC_CAP_LINK"], "no fabric on this node"
    assert nic.reg(R["RNIC_REG_MAC_HI"]) == 0x0252 and nic.reg(R["RNIC_REG_MAC_LO"]) == 0x4b000000
    assert nic.reg(R["RNIC_REG_IPV4"]) == 0xC6120001
    assert nic.reg(R["RNIC_REG_MAX_QP"]) == R["RNIC_MAX_QP"]
    assert nic.reg(R["RNIC_REG_LINK_MBPS"]) == 100000 and nic.reg(R["RNIC_REG_MAX_MTU"]) == 4096


def test_command_refusals_are_statuses_and_guest_errors(node, nic):
    st, _, _, _ = nic.cmd(99)
    assert st == R["RNIC_CMD_ST_BAD_OPCODE"]
    pd, _, _ = nic.ok(R["RNIC_CMD_CREATE_PD"])
    buf = nic.alloc(8192)
    assert nic.mr(pd, buf, 4096, R["RNIC_ACCESS_REMOTE_WRITE"])[0] == R["RNIC_CMD_ST_BAD_ACCESS"]
    assert nic.mr(pd + 100, buf, 4096)[0] == R["RNIC_CMD_ST_BAD_PD"]
    assert nic.mr(pd, 0x08000000, 4096)[0] == R["RNIC_CMD_ST_BAD_ADDR"], "the GIC is not RAM"
    assert nic.mr(pd, RAM + 128 * 1024 * 1024 - 4096, 8192)[0] == R["RNIC_CMD_ST_BAD_ADDR"], "runs off RAM"
    st, _, key, _ = nic.mr(pd, buf, 4096)
    assert st == 0
    assert nic.cmd(R["RNIC_CMD_DESTROY_PD"], pd)[0] == R["RNIC_CMD_ST_BUSY"]
    assert nic.cmd(R["RNIC_CMD_DEREG_MR"], key)[0] == 0
    assert nic.cmd(R["RNIC_CMD_DEREG_MR"], key)[0] == R["RNIC_CMD_ST_BAD_MR"]
    assert nic.cmd(R["RNIC_CMD_DESTROY_PD"], pd)[0] == 0
    # a command block outside RAM
    nic.wreg(R["RNIC_REG_CMD_ADDR_LO"], 0x08000000)
    nic.wreg(R["RNIC_REG_CMD_ADDR_HI"], 0)
    nic.wreg(R["RNIC_REG_CMD_EXEC"], 1)
    assert nic.reg(R["RNIC_REG_CMD_STATUS"]) == R["RNIC_CMD_ST_BAD_ADDR"]
    assert "rackemu-rnic: node 0: rnic: command 99" in node.stderr_text()
    assert nic.counter("COMMAND_ERRORS") >= 7


def test_loopback_write_read_and_fetch_add_between_two_qps(node, nic):
    pd, _, _ = nic.ok(R["RNIC_CMD_CREATE_PD"])
    cq = nic.cq()
    q1, q2 = nic.qp(pd, cq), nic.qp(pd, cq)
    src, dst = nic.alloc(65536), nic.alloc(65536)
    st, _, ks, _ = nic.mr(pd, src, 65536)
    assert st == 0
    st, _, kd, _ = nic.mr(pd, dst, 65536)
    assert st == 0
    nic.connect(q1, q2["qpn"])
    nic.connect(q2, q1["qpn"])
    for size in (1, 1023, 1024, 1025, 40000):
        pattern = bytes((i * 13 + size) & 0xff for i in range(size))
        node.memwrite(src, pattern)
        node.memwrite(dst + 100, b"\xee" * (size + 1))
        nic.post(q1, R["RNIC_WR_WRITE"], size, src, size, ks, dst + 100, kd)
        c = nic.poll(cq)
        assert len(c) == 1 and c[0]["status"] == 0 and c[0]["wr_id"] == size, c
        assert c[0]["modeled_ns"] > 0
        assert node.memread(dst + 100, size) == pattern
        assert node.memread(dst + 100 + size, 1) == b"\xee", "wrote past the message"
        node.memwrite(src, bytes(size))
        nic.post(q1, R["RNIC_WR_READ"], 7, src, size, ks, dst + 100, kd)
        c = nic.poll(cq)
        assert len(c) == 1 and c[0]["status"] == 0 and c[0]["opcode"] == R["RNIC_CQE_OP_READ"], c
        assert node.memread(src, size) == pattern
    node.memwrite(dst, struct.pack("<Q", 40))
    nic.post(q1, R["RNIC_WR_FETCH_ADD"], 9, src, 8, ks, dst, kd, swap_add=2)
    c = nic.poll(cq)
    assert len(c) == 1 and c[0]["status"] == 0
    assert struct.unpack("<Q", node.memread(src, 8))[0] == 40
    assert struct.unpack("<Q", node.memread(dst, 8))[0] == 42
    # a bad rkey: NAK remote access, nothing written, the QP in error
    node.memwrite(dst, bytes(8))
    nic.post(q1, R["RNIC_WR_WRITE"], 10, src, 8, ks, dst, kd ^ 0x80)
    c = nic.poll(cq)
    assert [e["status"] for e in c] == [R["RNIC_WC_REM_ACCESS_ERR"]], c
    assert node.memread(dst, 8) == bytes(8)
    assert nic.rdb((q1["qpn"] - R["RNIC_QPN_BASE"]) * 0x1000 + R["RNIC_QP_DB_STATE"]) == R["RNIC_QPS_ERR"]
    assert nic.counter("REMOTE_VIOLATIONS") >= 1
    assert nic.counter("LINK_TX_DROPS") == 0, "loopback never left the device"


def test_doorbell_beyond_the_ring_fails_the_qp(node, nic):
    pd, _, _ = nic.ok(R["RNIC_CMD_CREATE_PD"])
    cq = nic.cq()
    q = nic.qp(pd, cq)
    A = R["RNIC_QP_ATTR_STATE"] | R["RNIC_QP_ATTR_ACCESS_FLAGS"]
    assert nic.modify(q["qpn"], A, R["RNIC_QPS_INIT"]) == 0
    before = nic.counter("DOORBELL_ERRORS")
    page = (q["qpn"] - R["RNIC_QPN_BASE"]) * 0x1000
    nic.db(page + R["RNIC_QP_DB_SQ_PI"], 1000)
    assert nic.rdb(page + R["RNIC_QP_DB_STATE"]) == R["RNIC_QPS_ERR"]
    assert nic.counter("DOORBELL_ERRORS") == before + 1
    assert "SQ producer index more than the ring" in node.stderr_text()


def eq_enable(nic, node, log2=3, vector=2):
    ring = nic.alloc(32 << log2)
    node.memwrite(ring, bytes(32 << log2))
    nic.wreg(R["RNIC_REG_EQ_CTRL"], 0)
    nic.wreg(R["RNIC_REG_EQ_BASE_LO"], ring & 0xffffffff)
    nic.wreg(R["RNIC_REG_EQ_BASE_HI"], ring >> 32)
    nic.wreg(R["RNIC_REG_EQ_CTRL"], R["RNIC_EQ_CTRL_ENABLE"] | log2 << R["RNIC_EQ_CTRL_DEPTH_SHIFT"] |
             vector << R["RNIC_EQ_CTRL_VECTOR_SHIFT"])
    assert nic.reg(R["RNIC_REG_EQ_CTRL"]) & R["RNIC_EQ_CTRL_ENABLE"]
    return {"ring": ring, "log2": log2, "ci": 0}


def eq_poll(nic, node, eq):
    out = []
    while True:
        slot = eq["ci"] & ((1 << eq["log2"]) - 1)
        t, owner, _, element, detail, seq, at, _ = struct.unpack("<BBHIIIQQ", node.memread(eq["ring"] + slot * 32, 32))
        if (owner & 1) != (((eq["ci"] >> eq["log2"]) & 1) ^ 1):
            break
        out.append({"type": t, "element": element, "detail": detail, "seq": seq, "at": at})
        eq["ci"] += 1
    if out:
        nic.wreg(R["RNIC_REG_EQ_CI"], eq["ci"])
    return out


def test_async_event_queue_reports_qp_and_cq_errors(node, nic):
    """The event queue through the real glue: a bad ring is refused with a guest error; a bad
    rkey gives the responder QP_ACCESS_ERR and the requester QP_FATAL (REM_ACCESS_ERR); a CQ
    overflow gives CQ_ERR; an armed queue raises its own vector's INT_STATUS bit."""
    assert nic.reg(R["RNIC_REG_CAPS"]) & R["RNIC_CAP_EQ"]
    nic.wreg(R["RNIC_REG_EQ_CTRL"], 0)
    nic.wreg(R["RNIC_REG_EQ_BASE_LO"], 0x08000000)  # the GIC, not RAM
    nic.wreg(R["RNIC_REG_EQ_BASE_HI"], 0)
    nic.wreg(R["RNIC_REG_EQ_CTRL"], R["RNIC_EQ_CTRL_ENABLE"] | 3 << R["RNIC_EQ_CTRL_DEPTH_SHIFT"])
    assert not nic.reg(R["RNIC_REG_EQ_CTRL"]) & R["RNIC_EQ_CTRL_ENABLE"]
    assert nic.reg(R["RNIC_REG_EQ_STATUS"]) & R["RNIC_EQ_ST_BAD_CONFIG"]
    assert "EQ_CTRL: enable refused" in node.stderr_text()
    nic.wreg(R["RNIC_REG_EQ_STATUS"], R["RNIC_EQ_ST_W1C"])
    eq = eq_enable(nic, node)
    events0 = nic.counter("EQ_EVENTS")
    nic.wreg(R["RNIC_REG_INT_STATUS"], R["RNIC_INT_ALL"])
    nic.wreg(R["RNIC_REG_EQ_ARM"], 1)

    pd, _, _ = nic.ok(R["RNIC_CMD_CREATE_PD"])
    cq = nic.cq(log2=4)
    q1, q2 = nic.qp(pd, cq), nic.qp(pd, cq)
    buf = nic.alloc(8192)
    st, _, key, _ = nic.mr(pd, buf, 8192)
    assert st == 0
    nic.connect(q1, q2["qpn"])
    nic.connect(q2, q1["qpn"])
    nic.post(q1, R["RNIC_WR_WRITE"], 1, buf, 8, key, buf + 4096, key ^ 0x80)
    c = nic.poll(cq)
    assert [e["status"] for e in c] == [R["RNIC_WC_REM_ACCESS_ERR"]], c
    ev = eq_poll(nic, node, eq)
    by = {e["type"]: e for e in ev}
    assert len(ev) == 2 and set(by) == {R["RNIC_EV_QP_ACCESS_ERR"], R["RNIC_EV_QP_FATAL"]}, ev
    assert by[R["RNIC_EV_QP_ACCESS_ERR"]]["element"] == q2["qpn"]
    assert by[R["RNIC_EV_QP_FATAL"]]["element"] == q1["qpn"]
    assert by[R["RNIC_EV_QP_FATAL"]]["detail"] == R["RNIC_WC_REM_ACCESS_ERR"]
    assert nic.reg(R["RNIC_REG_INT_STATUS"]) & (1 << 2), "the armed queue raised its vector (2)"
    assert nic.reg(R["RNIC_REG_EQ_ARM"]) == 0

    # a CQ of 2 entries, 3 receives flushed into it: one CQ_ERR
    small = nic.cq(log2=1)
    q3 = nic.qp(pd, small)
    A = R["RNIC_QP_ATTR_STATE"] | R["RNIC_QP_ATTR_ACCESS_FLAGS"]
    assert nic.modify(q3["qpn"], A, R["RNIC_QPS_INIT"]) == 0
    page = (q3["qpn"] - R["RNIC_QPN_BASE"]) * 0x1000
    for i in range(3):
        w = struct.pack("<QB7sQII", 50 + i, 1, bytes(7), buf, 8, key)
        node.memwrite(q3["rq"] + i * 64, w + bytes(64 - len(w)))
    nic.db(page + R["RNIC_QP_DB_RQ_PI"], 3)
    assert nic.modify(q3["qpn"], R["RNIC_QP_ATTR_STATE"], R["RNIC_QPS_ERR"]) == 0
    ev = eq_poll(nic, node, eq)
    assert [(e["type"], e["element"], e["detail"]) for e in ev] == \
        [(R["RNIC_EV_CQ_ERR"], small["cqn"], R["RNIC_EV_CQ_ERR_OVERFLOW"])], ev
    assert nic.counter("EQ_EVENTS") == events0 + 3 and nic.counter("EQ_OVERFLOWS") == 0
    nic.wreg(R["RNIC_REG_EQ_CTRL"], 0)
