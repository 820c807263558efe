"""The RNIC's device memory and rate ceilings (docs/rnic.md "Device memory", "Rate ceilings"), on a
real QEMU at register level (qtest, no guest: tests/e2e/test_rnic_registers.py's driver).

Two connected QPs of one node (frames to its own MAC loop back in the device): QP a is the peer
that accesses QP b's device-memory MR. Allocation, registration, DM_COPY both ways, remote
COMPARE_SWAP / FETCH_ADD / READ on device memory, the serializer's counters, the refusals of bad
ids, offsets and sizes, the free; the dm-size property refused at realize when the device cannot
take it.
"""
import os
import struct
import subprocess

import pytest

from qtest import QEMU, QtestNode
from test_rnic_registers import R, Rnic, SLOT

pytestmark = pytest.mark.skipif(not os.path.exists(QEMU), reason="build first: ./rackemu setup")

DM_ACCESS = (R["RNIC_ACCESS_LOCAL_WRITE"] | R["RNIC_ACCESS_REMOTE_WRITE"] | R["RNIC_ACCESS_REMOTE_READ"]
             | R["RNIC_ACCESS_REMOTE_ATOMIC"])


def dm_params(addr=0, offset=0, length=0, dm=0, access=0, direction=0, reserved=0):
    return struct.pack("<QQQIIII", addr, offset, length, dm, access, direction, reserved)


@pytest.fixture(scope="module")
def node():
    n = QtestNode(0, 1, memory="128M",
                  extra_args=("-device", f"rackemu-rnic,addr={SLOT:#x},dm-size=65536,atomic-dm-ns=100,qp-msg-ns=0"))
    yield n
    n.kill()


def test_device_memory_alloc_register_remote_atomics_and_free(node):
    nic = Rnic(node)
    nic.wreg(R["RNIC_REG_CTRL"], R["RNIC_CTRL_ENABLE"])
    assert nic.reg(R["RNIC_REG_DM_SIZE"]) == 65536
    pd, buf, key, cq, a, _ = nic.loopback_pair()

    dm, off, _ = nic.ok(R["RNIC_CMD_ALLOC_DM"], 0, dm_params(length=200))
    assert 1 <= dm <= R["RNIC_MAX_DM"] and off % 64 == 0
    reg = dm_params(addr=0, offset=0, length=256, dm=dm, access=DM_ACCESS)
    _, dkey, dkey2 = nic.ok(R["RNIC_CMD_REG_DM_MR"], pd, reg)
    assert dkey == dkey2
    # 41 at DM byte 16 (DM_COPY from guest RAM)
    stage = buf + 0x8000
    node.memwrite(stage, struct.pack("<Q", 41))
    nic.ok(R["RNIC_CMD_DM_COPY"], dm, dm_params(addr=stage, offset=16, length=8, direction=R["RNIC_DM_COPY_TO_DM"]))
    busy0 = nic.counter("CEIL_ATOMIC_BUSY_NS")
    # the peer QP: CAS(41 -> 42), a failing CAS, FETCH_ADD 8, READ 32 bytes
    nic.post(a, R["RNIC_WR_CMP_SWAP"], 1, buf, 8, key, 16, dkey, swap_add=42, compare=41)
    nic.post(a, R["RNIC_WR_CMP_SWAP"], 2, buf + 8, 8, key, 16, dkey, swap_add=7, compare=41)
    nic.post(a, R["RNIC_WR_FETCH_ADD"], 3, buf + 16, 8, key, 16, dkey, swap_add=8)
    nic.post(a, R["RNIC_WR_READ"], 4, buf + 64, 32, key, 0, dkey)
    got = []
    for _ in range(100):
        got += nic.poll(cq)
        if len(got) >= 4:
            break
    assert [(c["wr_id"], c["status"]) for c in got] == [(1, 0), (2, 0), (3, 0), (4, 0)], got
    assert struct.unpack("<3Q", node.memread(buf, 24)) == (41, 42, 42)
    assert struct.unpack("<4Q", node.memread(buf + 64, 32)) == (0, 0, 50, 0)   # a new allocation is zeroed
    nic.ok(R["RNIC_CMD_DM_COPY"], dm, dm_params(addr=stage, offset=16, length=8,
                                                direction=R["RNIC_DM_COPY_FROM_DM"]))
    assert struct.unpack("<Q", node.memread(stage, 8))[0] == 50
    assert nic.counter("DM_ATOMICS") == 3
    assert nic.counter("AMU_OPS") == 0                        # not the atomic unit's
    assert nic.counter("CEIL_ATOMIC_BUSY_NS") - busy0 == 300  # atomic-dm-ns = 100 each

    # refusals: a status each, nothing changes
    bad = R["RNIC_CMD_ST_BAD_PARAM"]
    assert nic.cmd(R["RNIC_CMD_ALLOC_DM"], 0, dm_params(length=0))[0] == bad
    assert nic.cmd(R["RNIC_CMD_ALLOC_DM"], 0, dm_params(length=65537))[0] == bad
    assert nic.cmd(R["RNIC_CMD_REG_DM_MR"], pd, dm_params(offset=192, length=128, dm=dm, access=DM_ACCESS))[0] == bad
    assert nic.cmd(R["RNIC_CMD_REG_DM_MR"], pd, dm_params(length=8, dm=dm + 1, access=DM_ACCESS))[0] == bad
    assert (nic.cmd(R["RNIC_CMD_REG_DM_MR"], pd,
                    dm_params(length=8, dm=dm, access=DM_ACCESS | R["RNIC_ACCESS_FLUSH_PERSIST"]))[0]
            == R["RNIC_CMD_ST_BAD_ACCESS"])
    assert nic.cmd(R["RNIC_CMD_DM_COPY"], dm, dm_params(addr=stage, offset=250, length=8))[0] == bad
    assert nic.cmd(R["RNIC_CMD_DM_COPY"], dm, dm_params(addr=stage, offset=0, length=8, direction=5))[0] == bad
    assert nic.cmd(R["RNIC_CMD_DM_COPY"], dm, dm_params(addr=1 << 50, length=8))[0] == R["RNIC_CMD_ST_BAD_ADDR"]
    assert nic.cmd(R["RNIC_CMD_FREE_DM"], dm)[0] == R["RNIC_CMD_ST_BUSY"]   # its MR is registered
    # a CAS beyond the MR: remote access error
    nic.post(a, R["RNIC_WR_CMP_SWAP"], 5, buf, 8, key, 256, dkey, swap_add=1, compare=0)
    got = []
    for _ in range(100):
        got += nic.poll(cq)
        if got:
            break
    assert got and got[0]["status"] == R["RNIC_WC_REM_ACCESS_ERR"], got
    # free: deregister, then the allocation
    nic.ok(R["RNIC_CMD_DEREG_MR"], dkey)
    nic.ok(R["RNIC_CMD_FREE_DM"], dm)
    assert nic.cmd(R["RNIC_CMD_FREE_DM"], dm)[0] == bad


@pytest.mark.parametrize("prop,name", [("dm-size=100", "dm-size"), ("dm-size=8388608", "dm-size"),
                                       ("ack-every=0", "ack-every")])
def test_bad_dm_size_and_ack_every_are_refused_at_realize(prop, name):
    p = subprocess.run([QEMU, "-M", "rackemu-node,node-id=0,node-count=1", "-m", "128M", "-accel", "qtest",
                        "-qtest", "/dev/null", "-display", "none", "-nodefaults", "-device",
                        f"rackemu-rnic,{prop}"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and name in p.stderr, p.stderr
