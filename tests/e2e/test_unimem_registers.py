"""Unimem vmbox and packetizer at register level, across three real QEMU nodes and the bridge.

Each node is qemu-system-aarch64 -M rackemu-node in qtest mode (no guest; the test performs
the CPU's loads and stores). Covers the scenarios of ExaNoDe D3.6 sec. 5.1-5.2 end to end through
the fabric: delivery with the PIDT prefix, ACK, NACK on a full FIFO, ILLEGAL, a cleared
PID_CONF bit, the empty pattern, a dead destination and the bridge serving the others.
"""
import os
import tempfile

import pytest

from qtest import QEMU, BRIDGE, Bridge, QtestNode, regs_counters, regs_header, wait_for
from rackemu.qmp import QmpCommandError, irq_counters, vmbox_ack_order

R = regs_header()
B = regs_header("board.h")
VMBOX = B["RACKEMU_VMBOX_BASE"]
PKTZ = B["RACKEMU_PKTZ_BASE"]
TIF = PKTZ + R["PKTZ_TIF_OFFSET"]
PEND, ILLEGAL, NACK, ACK = (R["PKTZ_ST_PEND"], R["PKTZ_ST_ILLEGAL"], R["PKTZ_ST_NACK"],
                            R["PKTZ_ST_ACK"])
FABRIC_ERR = R["PKTZ_ST_FABRIC_ERR"]
PID_MASK = (1 << 48) - 1
EMPTY = R["VMBOX_EMPTY_PATTERN"]

pytestmark = pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(BRIDGE)),
                                reason="build first: ./rackemu setup")


def gaddr(node, local):
    return (node << R["UNIMEM_GADDR_NODE_SHIFT"]) | local


def mif_addr(node, mif):
    return gaddr(node, VMBOX + mif * 0x1000)


def pid(node, pif):
    return (node << 32) | (0xC0DE00 + pif)


@pytest.fixture(scope="module")
def rack():
    with tempfile.TemporaryDirectory(prefix="rackemu-qtest-") as d:
        bridge = Bridge(d)
        # node 1 has a small FIFO so that "full" is quick to reach
        nodes = [QtestNode(0, 3, bridge.socket), QtestNode(1, 3, bridge.socket, "fifo-depth=16"),
                 QtestNode(2, 3, bridge.socket)]
        for n in nodes:
            n.writeq(TIF + R["PKTZ_TIF_BASE_DEST"], VMBOX)
            for pif in range(64):
                n.writeq(TIF + 8 * pif, pid(n.node_id, pif))
            n.writeq(TIF + R["PKTZ_TIF_PID_CONF"], (1 << 64) - 1)
        wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 3,
                 what="3 nodes connected to the bridge")
        yield bridge, nodes
        for n in nodes:
            n.close()
        bridge.stop()


def send(node, pif, dest, p0lo, p0hi, p1lo, p1hi, wait=True):
    base = PKTZ + pif * 0x1000
    node.writeq(base + 0x00, p0lo)
    node.writeq(base + 0x08, p0hi)
    node.writeq(base + 0x10, p1lo)
    node.writeq(base + 0x18, p1hi)
    node.writeq(base + 0x20, dest)  # the third register: the packet leaves now
    if not wait:
        return None
    return wait_for(lambda: (lambda s: s if not s & PEND else 0)(node.readq(base + 0x30)) or None,
                    what=f"PIF {pif} to leave PEND")


def recv(node, mif):
    return [node.readq(VMBOX + mif * 0x1000) for _ in range(4)]


def test_remote_packet_arrives_with_the_senders_pid_prefix(rack):
    _, (n0, n1, _) = rack
    st = send(n0, 3, mif_addr(1, 5), 0xAAAA_0000_0000_FFFF, 0x1111, 0x2222, 0x3333)
    assert st == ACK
    words = recv(n1, 5)
    # the writer's low 48 bits of payload0 never travel: the PIDT entry replaces them
    assert words[0] & PID_MASK == pid(0, 3)
    assert words[0] >> 48 == 0xAAAA
    assert words[1:] == [0x1111, 0x2222, 0x3333]
    assert n1.readq(VMBOX + 5 * 0x1000) == EMPTY


def test_empty_fifo_reads_the_pattern(rack):
    _, (n0, _, _) = rack
    assert n0.readq(VMBOX + 9 * 0x1000) == EMPTY


def test_local_destination_is_delivered_without_the_fabric(rack):
    _, (n0, _, _) = rack
    assert send(n0, 4, mif_addr(0, 6), 0, 0x44, 0x55, 0x66) == ACK
    assert recv(n0, 6)[1:] == [0x44, 0x55, 0x66]


def test_full_fifo_gives_nack_and_keeps_what_was_accepted(rack):
    _, (n0, n1, _) = rack
    statuses = [send(n0, 7, mif_addr(1, 8), 0, i, i, i) for i in range(5)]
    assert statuses == [ACK] * 4 + [NACK]  # 16 words = 4 packets
    got = [recv(n1, 8)[1] for _ in range(4)]
    assert got == [0, 1, 2, 3]
    assert n1.readq(VMBOX + 8 * 0x1000) == EMPTY


def test_destination_outside_base_dest_is_illegal_and_nothing_is_sent(rack):
    bridge, (n0, n1, _) = rack
    before = bridge.stats()["ports"][0]["frames_in"]
    st = send(n0, 10, gaddr(1, 0x0c000000 + 5 * 0x1000), 0, 1, 2, 3)
    assert st == ILLEGAL
    assert bridge.stats()["ports"][0]["frames_in"] == before
    assert n1.readq(VMBOX + 5 * 0x1000) == EMPTY


def test_cleared_pid_conf_bit_sends_nothing(rack):
    bridge, (n0, n1, _) = rack
    conf = n0.readq(TIF + R["PKTZ_TIF_PID_CONF"])
    n0.writeq(TIF + R["PKTZ_TIF_PID_CONF"], conf & ~(1 << 11))
    nopid = n0.readq(TIF + R["PKTZ_TIF_NOPID"])
    try:
        assert send(n0, 11, mif_addr(1, 12), 0, 1, 2, 3, wait=False) is None
        assert n0.readq(PKTZ + 11 * 0x1000 + 0x30) == 0
        assert n0.readq(TIF + R["PKTZ_TIF_NOPID"]) == nopid + 1
        assert n1.readq(VMBOX + 12 * 0x1000) == EMPTY
    finally:
        n0.writeq(TIF + R["PKTZ_TIF_PID_CONF"], conf)


def test_absent_node_gives_nack_with_fabric_error(rack):
    _, (n0, _, _) = rack
    assert send(n0, 12, mif_addr(5, 1), 0, 1, 2, 3) == NACK | FABRIC_ERR


def test_dead_node_fails_the_sender_and_the_bridge_serves_the_others(rack):
    bridge, (n0, n1, n2) = rack
    n1.kill()
    wait_for(lambda: bridge.stats()["ports"][1]["state"] == "down", what="bridge to see node 1 die")
    assert send(n0, 13, mif_addr(1, 2), 0, 1, 2, 3) == NACK | FABRIC_ERR
    assert send(n0, 14, mif_addr(2, 2), 0, 7, 8, 9) == ACK
    assert recv(n2, 2)[1:] == [7, 8, 9]
    ports = {p["node"]: p for p in bridge.stats()["ports"]}
    assert ports[0]["state"] == "up" and ports[2]["state"] == "up"


def test_a_killed_node_restarts_and_is_accepted_again(rack):
    bridge, nodes = rack
    n0 = nodes[0]
    if nodes[1].proc.poll() is None:
        nodes[1].kill()
    wait_for(lambda: bridge.stats()["ports"][1]["state"] == "down", what="node 1 down")
    n1 = QtestNode(1, 3, bridge.socket)
    nodes[1] = n1  # the fixture closes it
    wait_for(lambda: bridge.stats()["ports"][1]["state"] == "up", what="node 1 back")
    assert send(n0, 15, mif_addr(1, 3), 0, 0x51, 0x52, 0x53) == ACK
    assert recv(n1, 3)[1:] == [0x51, 0x52, 0x53]
    assert {p["node"]: p for p in bridge.stats()["ports"]}[1]["connects"] == 2


KIF_PAGE = R["VMBOX_KIF_OFFSET"] // 0x1000  # the KIF's page in both devices (send()/recv() take it)
CTRL = VMBOX + R["VMBOX_CTRL_OFFSET"]
KIF_ON = R["VMBOX_KIF_ENABLE"] | R["VMBOX_KIF_IRQ_ENABLE"]
KERNEL_PID = 0xFC0000000000


def kif_counter(node, name):
    return node.readq(CTRL + R["VMBOX_CTRL_KIF_COUNTERS"] + R["VMBOX_KIF_CNT_" + name])


def pktz_kif_counter(node, name):
    return node.readq(TIF + R["PKTZ_TIF_KIF_COUNTERS"] + R["PKTZ_KIF_CNT_" + name])


def test_kernel_interface_kif_to_kif_across_the_fabric(rack):
    """The kernel interface (KIF): node 0's KIF reaches node 1's KIF with KIF_PIDT as
    the PID; a user PIF cannot name a KIF; a disabled KIF and a full one answer NACK."""
    _, (n0, n1, n2) = rack
    for n in (n0, n1, n2):
        assert n.readq(CTRL + R["VMBOX_CTRL_CAPS"]) == R["UNIMEM_CAP_KIF"]
        assert n.readq(TIF + R["PKTZ_TIF_CAPS"]) == R["UNIMEM_CAP_KIF"]
    n0.writeq(TIF + R["PKTZ_TIF_KIF_PIDT"], KERNEL_PID)
    n0.writeq(TIF + R["PKTZ_TIF_KIF_CONF"], 1)
    kif1, kif2 = gaddr(1, VMBOX + R["VMBOX_KIF_OFFSET"]), gaddr(2, VMBOX + R["VMBOX_KIF_OFFSET"])
    try:
        n1.writeq(CTRL + R["VMBOX_CTRL_KIF_CTRL"], KIF_ON)
        assert send(n0, KIF_PAGE, kif1, 0xAB00_0000_0000_0000, 0x11, 0x12, 0x13) == ACK
        assert n1.readq(CTRL + R["VMBOX_CTRL_KIF_STATUS"]) == R["VMBOX_KIF_NONEMPTY"] | R["VMBOX_KIF_IRQ"]
        assert n1.readq(CTRL + R["VMBOX_CTRL_NONEMPTY"]) & ~1 == 0  # no user FIFO got it
        words = recv(n1, KIF_PAGE)
        assert words == [0xAB00_0000_0000_0000 | KERNEL_PID, 0x11, 0x12, 0x13]
        # a user's PIF cannot address a KIF (the sender's BASE_DEST check)
        assert send(n0, 4, kif1, 0, 1, 2, 3) == ILLEGAL
        # the KIF also reaches an ordinary MIF, with the kernel's PID
        assert send(n0, KIF_PAGE, mif_addr(1, 30), 0, 0x31, 0x32, 0x33) == ACK
        assert recv(n1, 30) == [KERNEL_PID, 0x31, 0x32, 0x33]
        # node 2's KIF is disabled (reset): refused, counted there
        refused = kif_counter(n2, "REFUSED")
        assert send(n0, KIF_PAGE, kif2, 0, 1, 2, 3) == NACK
        assert kif_counter(n2, "REFUSED") == refused + 1
        # fill node 1's KIF (its depth: node 1 may have been restarted by an earlier test): the
        # packet after the last one that fits is refused whole
        depth = n1.readq(CTRL + R["VMBOX_CTRL_DEPTH"])
        statuses = [send(n0, KIF_PAGE, kif1, 0, i, i, i) for i in range(depth // 4 + 1)]
        assert statuses == [ACK] * (depth // 4) + [NACK]
        assert n1.readq(VMBOX + R["VMBOX_KIF_OFFSET"] + R["VMBOX_MIF_COUNT"]) == depth
        assert kif_counter(n1, "NACKS") == 1 and kif_counter(n1, "ENQUEUED") == 4 + depth
        assert pktz_kif_counter(n0, "SENT") == 4 + depth // 4 and pktz_kif_counter(n0, "NACKED") == 2
        # a CPU store into the KIF is refused with a bus error, nothing queued
        n1.write(VMBOX + R["VMBOX_KIF_OFFSET"], 5, 8)
        assert n1.readq(VMBOX + R["VMBOX_KIF_OFFSET"] + R["VMBOX_MIF_COUNT"]) == depth
    finally:
        n1.writeq(CTRL + R["VMBOX_CTRL_KIF_CTRL"], 0)
        n1.writeq(CTRL + R["VMBOX_CTRL_KIF_FLUSH"], 1)
        n0.writeq(TIF + R["PKTZ_TIF_KIF_CONF"], 0)


GICD = 0x08000000  # the virt machine's GICv2 distributor
VMBOX_IRQ = 32 + B["RACKEMU_VMBOX_SPI"]


def vmbox_line(node):
    """The vmbox's interrupt line at the GIC (GICD_ISPENDR reflects a level-triggered SPI); a GIC
    register, so reading it never polls the node's fabric port."""
    return (node.read(GICD + 0x200 + 4 * (VMBOX_IRQ // 32), 4) >> (VMBOX_IRQ % 32)) & 1


def pif3_ready(bridge, *nodes):
    """PIF 3 of each node may send (BASE_DEST, PIDT, PID_CONF), once all are on the bridge."""
    for n in nodes:
        n.writeq(TIF + R["PKTZ_TIF_BASE_DEST"], VMBOX)
        n.writeq(TIF + 8 * 3, pid(n.node_id, 3))
        n.writeq(TIF + R["PKTZ_TIF_PID_CONF"], 1 << 3)
    wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == len(nodes),
             what=f"{len(nodes)} nodes connected to the bridge")


@pytest.mark.parametrize("on_vcpu", [True, False], ids=["vcpu-work", "bottom-half"])
def test_an_arrival_on_the_port_thread_raises_the_line(on_vcpu, monkeypatch):
    """node 1's fabric port thread (no big lock) delivers a packet into a MIF whose
    interrupt is enabled; the vmbox's line rises at the GIC, set by work queued on node 1's vCPU
    (counter irq-vcpu), not by the main loop's bottom half; with RACKEMU_IRQ_VCPU=0 by the
    bottom half (irq-bh), as before. The packet is intact either way, and the guest's disable
    (a store under the big lock) lowers the line at once (irq-direct)."""
    with tempfile.TemporaryDirectory(prefix="rackemu-vmbox-irq-") as d:
        bridge = Bridge(d)
        n0 = QtestNode(0, 2, bridge.socket)
        with monkeypatch.context() as m:
            m.setenv("RACKEMU_IRQ_VCPU", "1" if on_vcpu else "0")
            n1 = QtestNode(1, 2, bridge.socket, qmp_path=os.path.join(d, "n1.qmp"))
        try:
            pif3_ready(bridge, n0, n1)
            # from here on node 1's vmbox is not read until the line is up: a read would poll the
            # port and take the packet on the qtest thread, which holds the big lock
            n1.writeq(CTRL + R["VMBOX_CTRL_IRQ_ENABLE"], 1 << 7)
            assert vmbox_line(n1) == 0
            with n1.qmp() as q:
                before = irq_counters(q, "rackemu-vmbox")
                assert send(n0, 3, mif_addr(1, 7), 0x5A00_0000_0000_0000, 0x71, 0x72, 0x73) == ACK
                wait_for(lambda: vmbox_line(n1) == 1, timeout=10, what="the vmbox's line at the GIC")
                after = irq_counters(q, "rackemu-vmbox")
                raised = {k: after[k] - before[k] for k in after}
                if on_vcpu:
                    assert raised["irq-vcpu"] >= 1 and raised["irq-bh"] == 0, raised
                else:
                    assert raised["irq-bh"] >= 1 and raised["irq-vcpu"] == 0, raised
                assert raised["irq-direct"] == 0, raised
                assert n1.readq(CTRL + R["VMBOX_CTRL_IRQ_STATUS"]) == 1 << 7
                n1.writeq(CTRL + R["VMBOX_CTRL_IRQ_ENABLE"], 0)
                assert vmbox_line(n1) == 0  # no wait: set at once under the big lock
                assert irq_counters(q, "rackemu-vmbox")["irq-direct"] > after["irq-direct"]
                assert recv(n1, 7) == [0x5A00_0000_0000_0000 | pid(0, 3), 0x71, 0x72, 0x73]
        finally:
            n0.close()
            n1.close()
            bridge.stop()


@pytest.mark.parametrize("first", [True, False], ids=["ack-first", "ack-after"])
def test_deliveries_are_answered_in_the_order_chosen(first):
    """a delivery into a vmbox sends the sender's ACK before the packet becomes visible
    (QOM "ack-first", the default; the order itself is asserted by the core's unit tests,
    VmboxAnswerFirst). Here through the glue on both paths: a peer's packet served by node 1's
    port thread and a packet into node 0's own vmbox, each counted once in the chosen order's
    counter (acks-first, or acks-after for the old order, switched at run time) and intact."""
    with tempfile.TemporaryDirectory(prefix="rackemu-vmbox-ack-") as d:
        bridge = Bridge(d)
        n0 = QtestNode(0, 2, bridge.socket, qmp_path=os.path.join(d, "n0.qmp"))
        n1 = QtestNode(1, 2, bridge.socket, qmp_path=os.path.join(d, "n1.qmp"))
        try:
            pif3_ready(bridge, n0, n1)
            with n0.qmp() as q0, n1.qmp() as q1:
                assert vmbox_ack_order(q0)["acks-first"] == 0  # nothing delivered yet
                before = vmbox_ack_order(q0, first), vmbox_ack_order(q1, first)
                assert send(n0, 3, mif_addr(1, 9), 0x5B00_0000_0000_0000, 0x91, 0x92, 0x93) == ACK
                assert send(n0, 3, mif_addr(0, 10), 0x5C00_0000_0000_0000, 0xA1, 0xA2, 0xA3) == ACK
                after = vmbox_ack_order(q0), vmbox_ack_order(q1)
                vmbox_ack_order(q0, True)
                assert {k: after[0][k] - before[0][k] for k in after[0]} == \
                    {"acks-first": int(first), "acks-after": int(not first)}
            counted = {k: after[1][k] - before[1][k] for k in after[1]}
            assert counted == {"acks-first": int(first), "acks-after": int(not first)}, counted
            assert recv(n1, 9) == [0x5B00_0000_0000_0000 | pid(0, 3), 0x91, 0x92, 0x93]
            assert recv(n0, 10) == [0x5C00_0000_0000_0000 | pid(0, 3), 0xA1, 0xA2, 0xA3]
            assert recv(n1, 9)[0] == EMPTY
        finally:
            n0.close()
            n1.close()
            bridge.stop()


def test_a_node_without_the_kif():
    """Properties kif=off: CAPS reads 0, the KIF's registers and page are unmapped."""
    n = QtestNode(0, 1, extra_args=("-global", "rackemu-vmbox.kif=off", "-global", "rackemu-packetizer.kif=off"))
    try:
        assert n.readq(CTRL + R["VMBOX_CTRL_CAPS"]) == 0
        assert n.readq(TIF + R["PKTZ_TIF_CAPS"]) == 0
        n.writeq(CTRL + R["VMBOX_CTRL_KIF_CTRL"], KIF_ON)
        assert n.readq(CTRL + R["VMBOX_CTRL_KIF_CTRL"]) == 0
        assert n.readq(VMBOX + R["VMBOX_KIF_OFFSET"]) == 0  # unmapped, not the empty pattern
        assert "KIF" in n.stderr_text() or "unmapped" in n.stderr_text()
    finally:
        n.close()


def unimem_registers(node):
    """Every vmbox and packetizer register that a load does not change (no FIFO data window)."""
    regs = {}
    c = VMBOX + R["VMBOX_CTRL_OFFSET"]
    for name in ("ID", "DEPTH", "IRQ_STATUS", "IRQ_ENABLE", "NONEMPTY"):
        regs["VMBOX_" + name] = node.readq(c + R["VMBOX_CTRL_" + name])
    for cnt, _, _ in regs_counters("unimem_regs.h")["VMBOX"]:
        regs["VMBOX_" + cnt] = node.readq(c + R["VMBOX_CTRL_COUNTERS"] + R["VMBOX_CNT_" + cnt])
    for mif in range(64):
        regs[f"MIF_COUNT[{mif}]"] = node.readq(VMBOX + mif * 0x1000 + R["VMBOX_MIF_COUNT"])
    for pif in range(64):
        for off in range(0, 0x40, 8):
            regs[f"PIF[{pif}]+{off:#x}"] = node.readq(PKTZ + pif * 0x1000 + off)
        regs[f"PIDT[{pif}]"] = node.readq(TIF + 8 * pif)
    for name in ("BASE_DEST", "PID_CONF", "ID"):
        regs["TIF_" + name] = node.readq(TIF + R["PKTZ_TIF_" + name])
    for cnt, _, _ in regs_counters("unimem_regs.h")["PKTZ"]:
        regs["PKTZ_" + cnt] = node.readq(TIF + R["PKTZ_TIF_COUNTERS"] + R["PKTZ_CNT_" + cnt])
    # the kernel interface (KIF)
    for name in ("CAPS", "KIF_CTRL", "KIF_STATUS"):
        regs["VMBOX_" + name] = node.readq(c + R["VMBOX_CTRL_" + name])
    for cnt, _, _ in regs_counters("unimem_regs.h")["VMBOX_KIF"]:
        regs["VMBOX_KIF_" + cnt] = node.readq(c + R["VMBOX_CTRL_KIF_COUNTERS"] + R["VMBOX_KIF_CNT_" + cnt])
    regs["KIF_COUNT"] = node.readq(VMBOX + R["VMBOX_KIF_OFFSET"] + R["VMBOX_MIF_COUNT"])
    for off in range(0, 0x40, 8):
        regs[f"KIF+{off:#x}"] = node.readq(PKTZ + R["PKTZ_KIF_OFFSET"] + off)
    for name in ("CAPS", "KIF_PIDT", "KIF_CONF"):
        regs["TIF_" + name] = node.readq(TIF + R["PKTZ_TIF_" + name])
    for cnt, _, _ in regs_counters("unimem_regs.h")["PKTZ_KIF"]:
        regs["PKTZ_KIF_" + cnt] = node.readq(TIF + R["PKTZ_TIF_KIF_COUNTERS"] + R["PKTZ_KIF_CNT_" + cnt])
    return regs


def test_a_migrated_node_keeps_its_fifos_and_packetizer_state():
    """Migration to a file and back (docs/unimem.md, Migration): register state, FIFO contents in
    order, a half-written PIF setup that completes after the load, and the interrupt enables."""
    with tempfile.TemporaryDirectory(prefix="rackemu-mbox-mig-") as d:
        state = os.path.join(d, "state")
        src = QtestNode(0, 1, extra_machine="fifo-depth=16", qmp_path=os.path.join(d, "src.qmp"))
        dst = None
        try:
            src.writeq(TIF + R["PKTZ_TIF_BASE_DEST"], VMBOX)
            for pif in (2, 9):
                src.writeq(TIF + 8 * pif, pid(0, pif))
            src.writeq(TIF + R["PKTZ_TIF_PID_CONF"], (1 << 2) | (1 << 9))
            assert send(src, 2, mif_addr(0, 5), 0xBEEF_0000_0000_0000, 0x21, 0x22, 0x23) == ACK
            # the KIF: enabled, one packet queued (from its own KIF), half a setup written
            src.writeq(TIF + R["PKTZ_TIF_KIF_PIDT"], KERNEL_PID)
            src.writeq(TIF + R["PKTZ_TIF_KIF_CONF"], 1)
            src.writeq(CTRL + R["VMBOX_CTRL_KIF_CTRL"], KIF_ON)
            kif = PKTZ + R["PKTZ_KIF_OFFSET"]
            assert send(src, KIF_PAGE, gaddr(0, VMBOX + R["VMBOX_KIF_OFFSET"]), 0, 0x41, 0x42, 0x43) == ACK
            src.writeq(kif + 0x00, 0xC000_0000_0000_0000)
            src.writeq(kif + 0x08, 0xC1)
            src.writeq(kif + 0x18, 0xC3)
            src.writeq(kif + 0x20, mif_addr(0, 8))  # payload1's lower half is still missing
            for w in (0x71, 0x72, 0x73):
                src.writeq(VMBOX + 7 * 0x1000, w)
            assert src.readq(VMBOX + 7 * 0x1000) == 0x71  # the ring's head moves
            src.writeq(VMBOX + R["VMBOX_CTRL_OFFSET"] + R["VMBOX_CTRL_IRQ_ENABLE"], 1 << 7)
            b9 = PKTZ + 9 * 0x1000
            src.writeq(b9 + 0x00, 0x9000_0000_0000_0000)
            src.writeq(b9 + 0x08, 0x91)
            src.writeq(b9 + 0x10, 0x92)
            src.writeq(b9 + 0x20, mif_addr(0, 6))  # payload1's upper half is still missing
            before = unimem_registers(src)
            assert before["VMBOX_IRQ_STATUS"] == 1 << 7 and before["MIF_COUNT[5]"] == 4

            with src.qmp() as qmp:
                try:
                    qmp.execute("migrate", uri=f"exec:cat > {state}")
                except QmpCommandError as e:
                    if "non-migratable" in e.desc and "rackemu-vmbox" not in e.desc \
                            and "rackemu-packetizer" not in e.desc:
                        pytest.skip(f"another device of the node is not migratable yet: {e.desc}")
                    raise
                assert qmp.wait_migration(timeout=120)["status"] == "completed"

            dst = QtestNode(0, 1, extra_machine="fifo-depth=16", qmp_path=os.path.join(d, "dst.qmp"),
                            extra_args=("-incoming", f"exec:cat {state}"))
            with dst.qmp() as qmp:
                wait_for(lambda: qmp.execute("query-status")["status"] != "inmigrate",
                         timeout=120, what="the incoming migration")
                assert qmp.execute("query-migrate").get("status") == "completed", dst.stderr_text()

            after = unimem_registers(dst)
            assert {k: v for k, v in after.items() if v != before[k]} == {}
            words = recv(dst, 5)
            assert words[0] & PID_MASK == pid(0, 2) and words[1:] == [0x21, 0x22, 0x23]
            assert [dst.readq(VMBOX + 7 * 0x1000) for _ in range(3)] == [0x72, 0x73, EMPTY]
            assert dst.readq(VMBOX + R["VMBOX_CTRL_OFFSET"] + R["VMBOX_CTRL_IRQ_STATUS"]) == 0
            # the written-bytes tracking came along: the missing half sends the packet
            dst.writeq(b9 + 0x18, 0x93)
            assert wait_for(lambda: dst.readq(b9 + 0x30) & ~PEND or None, what="PIF 9's answer") == ACK
            words = recv(dst, 6)
            assert words[0] == 0x9000_0000_0000_0000 | pid(0, 9) and words[1:] == [0x91, 0x92, 0x93]
            # the KIF's packet and its half-written setup came along too
            assert recv(dst, KIF_PAGE) == [KERNEL_PID, 0x41, 0x42, 0x43]
            dst.writeq(kif + 0x10, 0xC2)
            assert wait_for(lambda: dst.readq(kif + 0x30) & ~PEND or None, what="the KIF's answer") == ACK
            assert recv(dst, 8) == [0xC000_0000_0000_0000 | KERNEL_PID, 0xC1, 0xC2, 0xC3]
        finally:
            src.close()
            if dst:
                dst.close()
