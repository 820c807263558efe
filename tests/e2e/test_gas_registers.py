"""Unimem global address space window at register level, across three real QEMU nodes.

Each node is qemu-system-aarch64 -M rackemu-node in qtest mode (no guest; the test performs the
CPU's loads and stores). A load or store at GAS_WINDOW_BASE + global address travels through the
fabric and completes on the owner node's RAM, which the test then reads directly on the owner.
"""
import os
import tempfile
import threading
import time

import pytest

from qtest import QEMU, BRIDGE, Bridge, QtestNode, regs_header, wait_for

R = regs_header()
WIN = R["GAS_WINDOW_BASE"]
CTRL = regs_header("board.h")["RACKEMU_GAS_BASE"]
SHIFT = R["UNIMEM_GADDR_NODE_SHIFT"]
RAM = 0x40000000  # virt's RAM base
SCRATCH = RAM + 0x4000000  # 64 MiB into RAM: nothing runs in qtest mode

pytestmark = pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(BRIDGE)),
                                reason="build first: ./rackemu setup")


def win(node, local):
    return WIN + (node << SHIFT) + local


def ctr(node, reg):
    return node.readq(CTRL + R[reg])


@pytest.fixture(scope="module")
def rack():
    with tempfile.TemporaryDirectory(prefix="rackemu-gas-") as d:
        bridge = Bridge(d)
        nodes = [QtestNode(i, 3, bridge.socket) for i in range(3)]
        wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 3,
                 what="3 nodes connected to the bridge")
        yield bridge, nodes
        for n in nodes:
            n.close()
        bridge.stop()


def test_control_page_describes_the_window(rack):
    _, (n0, n1, _) = rack
    assert ctr(n1, "GAS_CTRL_ID") == R["GAS_ID_VALUE"]
    assert ctr(n1, "GAS_CTRL_NODE_ID") == 1
    assert ctr(n1, "GAS_CTRL_NODE_COUNT") == 3
    assert ctr(n1, "GAS_CTRL_WINDOW_BASE") == WIN
    assert ctr(n1, "GAS_CTRL_WINDOW_SIZE") == 3 << SHIFT


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_remote_store_lands_in_the_owners_ram_and_loads_back(rack, size):
    _, (n0, n1, n2) = rack
    addr = SCRATCH + 0x100 * size
    n1.writeq(addr, 0x1111111111111111)
    n1.writeq(addr + 8, 0x2222222222222222)
    value = int.from_bytes(bytes(range(0xA1, 0xA1 + size)), "little")
    served = ctr(n1, "GAS_CTRL_SERVED_WRITES")
    n0.write(win(1, addr + size), value, size)  # aligned to its size
    assert ctr(n1, "GAS_CTRL_SERVED_WRITES") == served + 1
    # on the owner: exactly `size` bytes changed, at the right place
    expect = bytearray((0x1111111111111111).to_bytes(8, "little") + (0x2222222222222222).to_bytes(8, "little"))
    expect[size:2 * size] = value.to_bytes(size, "little")
    assert n1.memread(addr, 16) == bytes(expect)
    # a third node loads the same bytes through its window, and so does the owner through its own
    assert n2.read(win(1, addr + size), size) == value
    assert n1.read(win(1, addr + size), size) == value


def test_unaligned_and_wide_accesses_through_the_window(rack):
    _, (n0, n1, _) = rack
    addr = SCRATCH + 0x2000
    data = bytes((i * 37 + 11) & 0xFF for i in range(4096 + 3))
    n0.memwrite(win(1, addr + 3), data)       # one 4099-byte write, unaligned
    assert n1.memread(addr + 3, len(data)) == data
    assert n0.read(win(1, addr + 5), 8) == int.from_bytes(data[2:10], "little")  # unaligned load
    assert n0.memread(win(1, addr), 4099 + 3)[3:] == data


def test_window_address_that_is_not_ram_is_a_bus_error(rack):
    _, (n0, n1, _) = rack
    before = ctr(n0, "GAS_CTRL_BUS_ERRORS"), ctr(n1, "GAS_CTRL_SERVED_REFUSED")
    n0.read(win(1, 0x08000000), 4)  # node 1's GIC: not RAM, refused by the owner
    n0.write(win(1, RAM - 8), 0x55, 8)  # just below node 1's RAM
    assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before[0] + 2
    assert ctr(n1, "GAS_CTRL_SERVED_REFUSED") == before[1] + 2


def test_two_nodes_loading_from_each_other_at_once_do_not_deadlock(rack):
    _, (n0, n1, _) = rack
    n0.memwrite(SCRATCH + 0x8000, bytes(range(256)) * 4)
    n1.memwrite(SCRATCH + 0x8000, bytes(reversed(range(256))) * 4)
    errors = []

    def hammer(me, peer_id, expect):
        for i in range(200):
            off = (i * 8) % 1024
            v = me.read(win(peer_id, SCRATCH + 0x8000 + off), 8)
            if v != int.from_bytes(expect[off:off + 8], "little"):
                errors.append((me.node_id, off, v))

    # one qtest stream per node: the two threads drive different QEMUs at the same time
    t = threading.Thread(target=hammer, args=(n0, 1, bytes(reversed(range(256))) * 4))
    t.start()
    hammer(n1, 0, bytes(range(256)) * 4)
    t.join(60)
    assert not t.is_alive() and errors == []


def test_access_to_a_dead_node_is_a_bus_error_not_a_hang(rack):
    bridge, (n0, n1, n2) = rack
    n2.kill()
    wait_for(lambda: bridge.stats()["ports"][2]["state"] == "down", what="bridge to see node 2 die")
    before = ctr(n0, "GAS_CTRL_BUS_ERRORS")
    t0 = time.monotonic()
    n0.read(win(2, SCRATCH), 8)
    n0.write(win(2, SCRATCH), 1, 8)
    assert time.monotonic() - t0 < 5
    assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 2
    # the others keep working
    n0.write(win(1, SCRATCH), 0xFEED, 8)
    assert n1.readq(SCRATCH) == 0xFEED
