"""QEMU trace points of rackemu (docs/tracing.md), from real QEMU nodes started with
-trace 'rackemu_*' in qtest mode, joined by the real bridge.

The fabric events (frame out/in, link up/down) come from the node's port through the hooks the
machine connects (platform/machine/rackemu_node.c). The MMIO, IRQ and DMA events come from each
device's glue (hw/qemu/rackemu_*.c): a device whose glue does not call them yet is skipped by
name (the check reads the glue source the QEMU under test was built from); once it does, the
test asserts the device, offset, size and value of the accesses it makes.
"""
import os
import re
import tempfile

import pytest

from qtest import BRIDGE, QEMU, ROOT, Bridge, QtestNode, regs_header, wait_for

R = regs_header()
C = regs_header("xilinx_cdma_regs.h")
S = regs_header("sonuma_regs.h")
B = regs_header("board.h")
VMBOX = B["RACKEMU_VMBOX_BASE"]
PKTZ = B["RACKEMU_PKTZ_BASE"]
TIF = PKTZ + R["PKTZ_TIF_OFFSET"]
PEND, ACK = R["PKTZ_ST_PEND"], R["PKTZ_ST_ACK"]
SVC_MBOX = 1  # RKF_SVC_UNIMEM_MBOX (fabric_proto.h)
T_REQ, T_REPLY = 1, 2  # RKF_T_REQ, RKF_T_REPLY

pytestmark = pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(BRIDGE)),
                                reason="build first: ./rackemu setup")

FRAME = re.compile(r"rackemu_frame_(out|in) node (\d+): frame (?:out to|in from) (\d+) svc (\d+) type (\d+) "
                   r"op (\d+) len (\d+) status (\d+) tag 0x([0-9a-f]+)")


def glue_calls(glue, what):
    """Whether hw/qemu/<glue> calls `what` (the device has been converted to emit it), or serves
    its core with the generic adapter (rackemu_device.c), which emits the MMIO, IRQ and DMA events."""
    with open(os.path.join(ROOT, "hw", "qemu", glue)) as f:
        src = f.read()
    return what in src or "rackemu_device_realize" in src


def frames(node):
    """(dir, peer, svc, type, op, len, status, tag) of every frame event of `node` so far."""
    out = []
    for m in FRAME.finditer(node.stderr_text()):
        d, n, peer, svc, typ, op, ln, st, tag = m.groups()
        assert int(n) == node.node_id, m.group(0)
        out.append((d, int(peer), int(svc), int(typ), int(op), int(ln), int(st), int(tag, 16)))
    return out


def traced(node, pattern, what):
    """Wait until `node`'s trace holds a line matching `pattern`; return the match."""
    rx = re.compile(pattern)
    return wait_for(lambda: rx.search(node.stderr_text()), what=f"node {node.node_id}: {what}")


@pytest.fixture(scope="module")
def rack():
    with tempfile.TemporaryDirectory(prefix="rackemu-trace-") as d:
        bridge = Bridge(d)
        nodes = [QtestNode(i, 2, bridge.socket, extra_args=("-trace", "rackemu_*")) for i in range(2)]
        wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                 what="2 nodes connected to the bridge")
        yield bridge, nodes
        for n in nodes:
            n.close()
        bridge.stop()


def test_link_up_is_traced_on_every_node(rack):
    _, nodes = rack
    for n in nodes:
        traced(n, rf"rackemu_link node {n.node_id}: link up 1\b", "link up")


def test_a_remote_packet_is_traced_as_request_and_reply_on_both_nodes(rack):
    _, (n0, n1) = rack
    n0.writeq(TIF + R["PKTZ_TIF_BASE_DEST"], VMBOX)
    n0.writeq(TIF + 8 * 3, 0xC0DE03)
    n0.writeq(TIF + R["PKTZ_TIF_PID_CONF"], 1 << 3)
    before0, before1 = len(frames(n0)), len(frames(n1))
    pif = PKTZ + 3 * 0x1000
    for i, w in enumerate((0x1, 0x2, 0x3)):
        n0.writeq(pif + 8 * i, w)
    n0.writeq(pif + 0x18, 0x4)
    n0.writeq(pif + 0x20, (1 << R["UNIMEM_GADDR_NODE_SHIFT"]) | (VMBOX + 5 * 0x1000))  # node 1, MIF 5
    st = wait_for(lambda: (lambda s: s if not s & PEND else 0)(n0.readq(pif + 0x30)) or None,
                  what="the packet to be answered")
    assert st == ACK
    assert n1.readq(VMBOX + 5 * 0x1000) & 0xFFFFFFFFFFFF == 0xC0DE03

    # node 0: the request out to node 1, then its reply in from node 1, same tag
    f0 = wait_for(lambda: (lambda f: f if len(f) >= 2 else None)(frames(n0)[before0:]),
                  what="node 0's frames")
    out, rin = f0[0], f0[1]
    assert out[:5] == ("out", 1, SVC_MBOX, T_REQ, 1)  # op RKF_OP_MBOX_DELIVER
    assert out[5] > 0 and out[6] == 0
    assert rin[:4] == ("in", 1, SVC_MBOX, T_REPLY)
    assert rin[6] == 0 and rin[7] == out[7]  # RKF_ST_OK, the request's tag
    # node 1: the same request in from node 0, its reply out to node 0
    f1 = wait_for(lambda: (lambda f: f if len(f) >= 2 else None)(frames(n1)[before1:]),
                  what="node 1's frames")
    assert f1[0] == ("in", 0) + out[2:]
    assert f1[1][:4] == ("out", 0, SVC_MBOX, T_REPLY)
    assert f1[1][6] == 0 and f1[1][7] == out[7]


# (device name in the trace, glue file, base, ID register offset, its value)
IDS = [
    ("rackemu-vmbox", "rackemu_unimem.c", VMBOX, R["VMBOX_CTRL_OFFSET"] + R["VMBOX_CTRL_ID"], R["VMBOX_ID_VALUE"]),
    ("rackemu-packetizer", "rackemu_unimem.c", PKTZ, R["PKTZ_TIF_OFFSET"] + R["PKTZ_TIF_ID"], R["PKTZ_ID_VALUE"]),
    ("rackemu-gas", "rackemu_gas.c", B["RACKEMU_GAS_BASE"], R["GAS_CTRL_ID"], R["GAS_ID_VALUE"]),
    ("rackemu-rmc", "rackemu_rmc.c", B["RACKEMU_RMC_BASE"], S["RMC_REG_ID"], S["RMC_ID_VALUE"]),
]


@pytest.mark.parametrize("dev,glue,base,off,value", IDS, ids=[i[0] for i in IDS])
def test_mmio_read_is_traced_with_device_offset_size_and_value(rack, dev, glue, base, off, value):
    if not glue_calls(glue, "trace_rackemu_mmio_read"):
        pytest.skip(f"hw/qemu/{glue} does not emit rackemu_mmio_read yet")
    _, (_, n1) = rack
    assert n1.readq(base + off) == value
    traced(n1, rf"rackemu_mmio_read {dev} node 1: read 0x{off:x} size 8 -> 0x{value:x}\b",
           f"{dev} read of 0x{off:x}")


def test_mmio_write_is_traced_with_device_offset_size_and_value(rack):
    if not glue_calls("rackemu_cdma.c", "trace_rackemu_mmio_write"):
        pytest.skip("hw/qemu/rackemu_cdma.c does not emit rackemu_mmio_write yet")
    _, (n0, _) = rack
    base, reg = B["RACKEMU_CDMA_BASE"], C["XCDMA_SA"]
    n0.write(base + reg, 0x1234_5678, 4)
    assert n0.read(base + reg, 4) == 0x1234_5678
    traced(n0, rf"rackemu_mmio_write rackemu-cdma node 0: write 0x{reg:x} size 4 <- 0x12345678\b",
           "cDMA SA write")
    traced(n0, rf"rackemu_mmio_read rackemu-cdma node 0: read 0x{reg:x} size 4 -> 0x12345678\b",
           "cDMA SA read")


def test_vmbox_interrupt_is_traced(rack):
    if not glue_calls("rackemu_unimem.c", "rackemu_host_init"):
        pytest.skip("hw/qemu/rackemu_unimem.c does not use the host interface (rackemu_irq) yet")
    _, (n0, _) = rack
    ctrl = VMBOX + R["VMBOX_CTRL_OFFSET"]
    n0.writeq(ctrl + R["VMBOX_CTRL_IRQ_ENABLE"], 1 << 9)
    n0.writeq(VMBOX + 9 * 0x1000, 0x77)  # a local store into MIF 9
    traced(n0, r"rackemu_irq rackemu-vmbox node 0: irq 0 level 1\b", "vmbox IRQ raised")
    n0.writeq(ctrl + R["VMBOX_CTRL_FLUSH"], 1 << 9)
    traced(n0, r"rackemu_irq rackemu-vmbox node 0: irq 0 level 0\b", "vmbox IRQ lowered")
    n0.writeq(ctrl + R["VMBOX_CTRL_IRQ_ENABLE"], 0)


def test_gas_window_load_is_traced_as_dma_and_memory_frames(rack):
    if not glue_calls("rackemu_gas.c", "rackemu_host_init"):
        pytest.skip("hw/qemu/rackemu_gas.c does not use the host interface (rackemu_dma) yet")
    _, (n0, n1) = rack
    ram = 0x40000000 + 0x100000  # node 1's RAM (virt's RAM base), 1 MiB in
    n1.writeq(ram, 0xFEEDFACE_CAFEF00D)
    gaddr = R["GAS_WINDOW_BASE"] + ((1 << R["UNIMEM_GADDR_NODE_SHIFT"]) | ram)
    before = len(frames(n0))
    assert n0.readq(gaddr) == 0xFEEDFACE_CAFEF00D
    traced(n0, rf"rackemu_dma rackemu-gas node 0: dma read 0x{gaddr:x} len 8 -> OK\b", "the window load as DMA")
    f = frames(n0)[before:]
    assert ("out", 1, 3, T_REQ, 1) in [x[:5] for x in f]  # RKF_SVC_MEM, RKF_OP_MEM_READ


def test_link_down_is_traced_when_the_bridge_goes(rack):
    bridge, nodes = rack
    bridge.stop()
    for n in nodes:
        traced(n, rf"rackemu_link node {n.node_id}: link up 0\b", "link down")
        assert "link down" in n.stderr_text()  # and the warning in QEMU's log
