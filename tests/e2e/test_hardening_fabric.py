"""Hardening of the fabric against its peers (trust-model.md findings 6-9), with real processes.

The real rackemu-bridge binary, real rackemu-node QEMUs in qtest mode (no guest: the test
performs the CPU's loads and stores through the global address space window, as
test_gas_registers.py does), and a fake node written here in Python that speaks the handshake,
maps the rings it is handed and misbehaves: it truncates them, forges replies, floods requests,
stays silent, sends a name that is not UTF-8. Also the time from a failure (owner killed,
owner stopped, bridge killed) to the error a GAS load sees, printed and bounded
(docs/fabric.md, "Error bounds").
"""
import ctypes
import json
import mmap
import os
import platform
import signal
import socket
import struct
import tempfile
import threading
import time

import pytest

from qtest import BRIDGE, QEMU, Bridge, QtestNode, regs_header, wait_for

R = regs_header()
P = regs_header("fabric_proto.h")
WIN = R["GAS_WINDOW_BASE"]
CTRL = regs_header("board.h")["RACKEMU_GAS_BASE"]
SHIFT = R["UNIMEM_GADDR_NODE_SHIFT"]
RAM = 0x40000000
SCRATCH = RAM + 0x4000000

pytestmark = pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(BRIDGE)),
                                reason="build first: ./rackemu setup")

# struct PortShm (hw/fabric/shm_ring.h): a 64-byte header, then two rings, each a
# 192-byte control block (head, tail, sleeping + space_wait: one cache line each) and 1024 slots
# of 256 bytes.
SLOTS, SLOT = P["RKF_RING_SLOTS"], P["RKF_SLOT_SIZE"]
RING = 192 + SLOTS * SLOT
TO_BRIDGE, TO_NODE = 64, 64 + RING
SHM_SIZE = 64 + 2 * RING
HDR = struct.Struct("<IBBHHHHHQQ")  # struct rkf_frame_hdr, 32 bytes
SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
LIBC = ctypes.CDLL(None, use_errno=True)


def win(node, local):
    return WIN + (node << SHIFT) + local


def ctr(node, reg):
    return node.readq(CTRL + R[reg])


class FakeNode:
    """A node that is only a Python program: handshake, rings, nothing else."""

    def __init__(self, sock_path, node_id, name=b"fake node", node_count=4):
        self.id = node_id
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(sock_path)
        self.s.send(struct.pack("<IHHII32s", P["RKF_HELLO_MAGIC"], P["RKF_PROTO_VERSION"], node_id,
                                node_count, 0, name))
        msg, fds, _, _ = socket.recv_fds(self.s, 128, 3)
        _, _, self.status, _, _, _, _ = struct.unpack_from("<IHHIIII", msg)
        self.message = msg[24:].split(b"\0")[0].decode(errors="replace")
        self.shm_fd, self.bell_fd, self.live_fd = (fds + [-1, -1, -1])[:3]
        self.shm = self.bell = None
        if self.status == 0:
            assert os.fstat(self.shm_fd).st_size == SHM_SIZE, "ring layout changed: update this test"
            self.shm = mmap.mmap(self.shm_fd, SHM_SIZE)
            self.bell = mmap.mmap(self.bell_fd, 64)

    def _u32(self, off, value=None):
        """A ring index, read or written with one 4-byte access (struct would go byte by byte,
        and the bridge, reading a torn index, would rightly drop this port as corrupt)."""
        word = ctypes.c_uint32.from_buffer(self.shm, off)
        try:
            if value is None:
                return word.value
            word.value = value & 0xFFFFFFFF
        finally:
            del word  # release the export, or the mapping cannot be closed

    def ring_bell(self):
        """Wake the bridge's router if it sleeps (as a real port's futex_wake does)."""
        if SYS_FUTEX is None or struct.unpack_from("<I", self.bell, 0)[0] == 0:
            return
        struct.pack_into("<I", self.bell, 0, 0)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(self.bell))
        LIBC.syscall(SYS_FUTEX, ctypes.c_void_p(addr), 1, 1, None, None, 0)  # FUTEX_WAKE

    def send(self, ftype, svc, op, dst, tag, payload=b"", status=0, src=None):
        head, tail = self._u32(TO_BRIDGE), self._u32(TO_BRIDGE + 64)
        end = time.monotonic() + 5
        while (head - tail) & 0xFFFFFFFF >= SLOTS:  # full: the bridge drains it
            assert time.monotonic() < end, "the bridge stopped draining the ring"
            self.ring_bell()
            time.sleep(0.001)
            tail = self._u32(TO_BRIDGE + 64)
        slot = TO_BRIDGE + 192 + (head % SLOTS) * SLOT
        self.shm[slot:slot + 32] = HDR.pack(P["RKF_FRAME_MAGIC"], ftype, svc, op,
                                            self.id if src is None else src, dst, len(payload),
                                            status, tag, 0)
        self.shm[slot + 32:slot + 32 + len(payload)] = payload
        self._u32(TO_BRIDGE, head + 1)
        self.ring_bell()

    def recv(self, timeout=5.0):
        """The next frame the bridge delivered: (header tuple, payload) or None."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            head, tail = self._u32(TO_NODE), self._u32(TO_NODE + 64)
            if head != tail:
                slot = TO_NODE + 192 + (tail % SLOTS) * SLOT
                h = HDR.unpack_from(self.shm, slot)
                data = bytes(self.shm[slot + 32:slot + 32 + min(h[6], SLOT - 32)])
                self._u32(TO_NODE + 64, tail + 1)
                if self._u32(TO_NODE + 132):  # space_wait: the bridge queues frames for us
                    self._u32(TO_NODE + 132, 0)
                    self.ring_bell()
                return h, data
            time.sleep(0.001)
        return None

    def close(self):
        for m in (self.shm, self.bell):
            if m is not None:
                m.close()
        for fd in (self.shm_fd, self.bell_fd, self.live_fd):
            if fd >= 0:
                os.close(fd)
        self.s.close()


class RealBridge(Bridge):
    """qtest.Bridge with extra arguments."""

    def __init__(self, run_dir, *args, max_nodes=4):
        super().__init__(run_dir, max_nodes=max_nodes, extra_args=args)

    def stats_raw(self, timeout=5.0):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(os.path.join(self.run_dir, "bridge.ctl"))
        s.sendall(b"stats\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        return data


@pytest.fixture
def rack():
    """A real bridge (4 node ids) and two qtest nodes, 0 and 1; id 2 and 3 free for fakes."""
    with tempfile.TemporaryDirectory(prefix="rackemu-hfab-") as d:
        bridge = RealBridge(d)
        nodes = []
        try:
            nodes += [QtestNode(i, 4, bridge.socket) for i in range(2)]
            wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                     what="2 nodes connected to the bridge")
            yield bridge, nodes
        finally:
            for n in nodes:
                if n.proc.poll() is None:
                    os.killpg(n.proc.pid, signal.SIGCONT)
                n.close()
            bridge.stop()


def port(bridge, i):
    """Node i's entry in the bridge's stats (None before it ever connected)."""
    return next((p for p in bridge.stats()["ports"] if p["node"] == i), None)


def stop(node):
    """SIGSTOP a QEMU and wait until it is stopped (the signal is asynchronous)."""
    os.killpg(node.proc.pid, signal.SIGSTOP)
    wait_for(lambda: open(f"/proc/{node.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T",
             what="the QEMU to stop")


def gas_round_trip(n0, n1, value):
    n0.write(win(1, SCRATCH), value, 8)
    return n1.readq(SCRATCH) == value and n0.read(win(1, SCRATCH), 8) == value


# ---- finding 6: truncated shared memory ----------------------------------------------------

def test_a_fake_node_cannot_truncate_its_rings_or_the_doorbell(rack):
    bridge, (n0, n1) = rack
    fake = FakeNode(bridge.socket, 2)
    assert fake.status == 0, fake.message
    refused = []
    for fd in (fake.shm_fd, fake.bell_fd, fake.live_fd):
        try:
            os.ftruncate(fd, 0)
        except PermissionError:
            refused.append(fd)
    # the liveness table (which node is up) is the bridge's alone: no writable mapping of it
    with pytest.raises(PermissionError):
        mmap.mmap(fake.live_fd, 4096)
    time.sleep(0.3)
    # nobody died: the bridge routes, both QEMUs (which ring the doorbell) still work
    assert bridge.proc.poll() is None, f"the bridge died: {bridge.proc.returncode}"
    assert n0.proc.poll() is None and n1.proc.poll() is None, "a QEMU died"
    assert gas_round_trip(n0, n1, 0x600DF00D)
    assert refused == [fake.shm_fd, fake.bell_fd, fake.live_fd], "a truncation was allowed"
    fake.close()


@pytest.mark.parametrize("direct", [False, True], ids=["fabric", "direct"])
def test_a_truncated_guest_ram_file_takes_down_only_its_owner(direct):
    """Over the fabric, only a QEMU maps its own RAM file. Truncating node 1's file (only a host
    user with write access to it can) kills node 1 at its next touch of the lost pages; node 0
    gets a bus error, the bridge lives. With the direct path (ram-dir), node 0 maps node 1's file
    too: its copy faults, which it catches: a bus error, node 0 lives, and it does not touch that
    file again (node 1 dies when its own vCPUs or port touch the lost pages; under qtest nothing
    does)."""
    with tempfile.TemporaryDirectory(prefix="rackemu-hfab-ram-") as d:
        bridge = RealBridge(d)
        ram = [os.path.join(d, f"node{i}.ram") for i in range(2)]
        nodes = []
        machine = "memory-backend=ram" + (f",ram-dir={d}" if direct else "")
        try:
            nodes += [QtestNode(i, 2, bridge.socket, extra_machine=machine,
                                extra_args=["-object",
                                            f"memory-backend-file,id=ram,size=128M,share=on,mem-path={ram[i]}"])
                      for i in range(2)]
            n0, n1 = nodes
            wait_for(lambda: len([p for p in bridge.stats()["ports"] if p["state"] == "up"]) == 2,
                     what="2 nodes up")
            assert gas_round_trip(n0, n1, 0x1234)
            if direct:
                # node 1 publishes its file's tail page at its own pace; until it has (and for
                # 20 ms after each early look), node 0's accesses take the fabric
                wait_for(lambda: gas_round_trip(n0, n1, 0x1234)
                         and ctr(n0, "GAS_CTRL_DIRECT_READS") > 0,
                         timeout=10.0, what="node 0 reading node 1's RAM file directly")
            else:
                assert ctr(n0, "GAS_CTRL_DIRECT_READS") == 0
            os.truncate(ram[1], 0)
            before = ctr(n0, "GAS_CTRL_BUS_ERRORS")
            t0 = time.monotonic()
            n0.read(win(1, SCRATCH), 8)  # node 1's port thread (or node 0's copy) touches lost RAM
            dt = time.monotonic() - t0
            assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 1
            assert dt < 5
            if direct:
                n0.write(win(1, SCRATCH), 1, 8)
                assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 2
                assert n0.proc.poll() is None and bridge.proc.poll() is None
                print(f"\n[fabric] truncated RAM file, direct path: node 0's load failed after "
                      f"{dt * 1000:.0f} ms, node 0 lives")
                return
            wait_for(lambda: n1.proc.poll() is not None, what="node 1 to die")
            assert n1.proc.returncode == -signal.SIGBUS
            assert n0.proc.poll() is None and bridge.proc.poll() is None
            assert port(bridge, 1)["state"] == "down"
            print(f"\n[fabric] truncated RAM file: node 1 died of SIGBUS, node 0's load failed after "
                  f"{dt * 1000:.0f} ms")
        finally:
            for n in nodes:
                n.close()
            bridge.stop()


# ---- finding 7: forged replies ------------------------------------------------------------

def test_forged_replies_from_a_fake_node_are_dropped(rack):
    bridge, (n0, n1) = rack
    fake = FakeNode(bridge.socket, 2)
    n1.writeq(SCRATCH, 0x5EC2E7)
    stop(n1)  # the owner cannot answer
    try:
        before = ctr(n0, "GAS_CTRL_BUS_ERRORS")
        result = {}
        load = threading.Thread(target=lambda: result.update(v=n0.read(win(1, SCRATCH), 8)))
        load.start()
        time.sleep(0.2)  # the load's request is pending
        forged = b"\x41" * 8
        n = 0
        for tag in range(1, 3001):  # every small tag, as the guessable counter of before
            fake.send(P["RKF_T_REPLY"], P["RKF_SVC_MEM"], P["RKF_OP_MEM_READ"], 0, tag, forged)
            fake.send(P["RKF_T_REPLY"], P["RKF_SVC_MEM"], P["RKF_OP_MEM_READ"], 0, tag, forged, src=1)
            n += 2
        load.join(30)
        assert not load.is_alive()
        assert result["v"] != 0x4141414141414141, "node 0 accepted a forged load reply"
        assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 1  # it timed out instead
        # a store "acknowledged" by the fake node is not acknowledged either
        store = threading.Thread(target=lambda: n0.write(win(1, SCRATCH), 0xBAD, 8))
        store.start()
        time.sleep(0.2)
        for tag in range(1, 1001):
            fake.send(P["RKF_T_REPLY"], P["RKF_SVC_MEM"], P["RKF_OP_MEM_WRITE"], 0, tag)
            n += 1
        store.join(30)
        assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 2
        s = bridge.stats()
        assert s["unsolicited"] == 4000 and s["spoofed"] == 3000, s
    finally:
        os.killpg(n1.proc.pid, signal.SIGCONT)
        fake.close()
    assert n0.read(win(1, SCRATCH), 8) in (0x5EC2E7, 0xBAD)  # the owner answers again


# ---- finding 8: stalls and unbounded state ------------------------------------------------

def test_silent_connections_do_not_stall_the_bridge(rack):
    bridge, (n0, n1) = rack
    silent = []
    for _ in range(8):
        a = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        a.connect(bridge.socket)
        b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        b.connect(os.path.join(bridge.run_dir, "bridge.ctl"))
        silent += [a, b]
    t0 = time.monotonic()
    s = json.loads(bridge.stats_raw(timeout=5.0))  # the launcher's timeout
    assert time.monotonic() - t0 < 2.0, "stats waited for the silent connections"
    assert s["ports"][0]["state"] == "up"
    fake = FakeNode(bridge.socket, 3)  # a handshake still goes through
    assert fake.status == 0
    assert gas_round_trip(n0, n1, 0x51E47)
    wait_for(lambda: bridge.stats()["conn_timeouts"] >= 16, timeout=6, what="silent connections closed")
    for c in silent:
        c.close()
    fake.close()


def test_requests_nobody_answers_are_capped_and_answered_congested():
    with tempfile.TemporaryDirectory(prefix="rackemu-hfab-cap-") as d:
        bridge = RealBridge(d, "--max-outstanding", "16")
        try:
            a, b = FakeNode(bridge.socket, 0), FakeNode(bridge.socket, 1)
            for tag in range(20):
                a.send(P["RKF_T_REQ"], P["RKF_SVC_ECHO"], 1, 1, tag)
            got = [a.recv() for _ in range(4)]
            assert all(g and g[0][1] == P["RKF_T_REPLY"] and g[0][7] == P["RKF_ST_CONGESTED"] for g in got), got
            assert sorted(g[0][8] for g in got) == [16, 17, 18, 19]
            s = bridge.stats()
            assert s["over_cap"] == 4 and s["outstanding"] == 16 and s["ports"][0]["outstanding"] == 16, s
            b.close()  # the silent destination goes: its 16 are answered NODE_GONE
            gone = [a.recv() for _ in range(16)]
            assert all(g and g[0][7] == P["RKF_ST_NODE_GONE"] and g[0][4] == 1 for g in gone), gone
            assert bridge.stats()["outstanding"] == 0
            a.close()
        finally:
            bridge.stop()


# ---- finding 9: names that are not UTF-8 --------------------------------------------------

def test_a_name_that_is_not_utf8_keeps_stats_json(rack):
    bridge, _ = rack
    fake = FakeNode(bridge.socket, 2, name=b"\xff\xfe\"}\x1b[31mevil\xc3")
    assert fake.status == 0
    s = json.loads(bridge.stats_raw())  # bytes: json decodes them as UTF-8, strictly
    assert s["ports"][2]["name"] == "\ufffd\ufffd\"}\x1b[31mevil\ufffd"
    fake.close()
    wait_for(lambda: port(bridge, 2)["state"] == "down", what="fake node gone")
    assert json.loads(bridge.stats_raw())["ports"][2]["name"].endswith("evil\ufffd")


# ---- error bounds: time from a failure to the error a GAS load sees -----------------------

def _timed_load(n0, node, start_failure, settle=0.4):
    """Start a load of `node` through n0's window, cause the failure, and return the seconds
    from the failure to the load's completion, and whether it was a bus error."""
    before = ctr(n0, "GAS_CTRL_BUS_ERRORS")
    done = {}

    def load():
        n0.read(win(node, SCRATCH), 8)
        done["t"] = time.monotonic()

    t = threading.Thread(target=load)
    t.start()
    time.sleep(settle)  # the request is in flight (the owner is stopped)
    t_fail = time.monotonic()
    start_failure()
    t.join(30)
    assert not t.is_alive()
    return done["t"] - t_fail, ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 1


def test_time_to_error_of_a_gas_load_after_a_kill_a_stop_and_a_bridge_kill(rack):
    bridge, (n0, n1) = rack
    figures = {}
    # (b) owner stopped: the load waits for the owner's answer until remote-timeout-ms (2 s)
    stop(n1)
    t0 = time.monotonic()
    before = ctr(n0, "GAS_CTRL_BUS_ERRORS")
    n0.read(win(1, SCRATCH), 8)
    figures["owner stopped"] = time.monotonic() - t0
    assert ctr(n0, "GAS_CTRL_BUS_ERRORS") == before + 1
    # (a) owner killed with the load in flight: the bridge answers NODE_GONE at the hang-up
    dt, bus = _timed_load(n0, 1, lambda: n1.kill())
    figures["owner killed (load in flight)"] = dt
    assert bus
    t0 = time.monotonic()
    n0.read(win(1, SCRATCH), 8)  # and after it: NOROUTE at once
    figures["owner killed (load after)"] = time.monotonic() - t0
    # (c) bridge killed with a load in flight (to a stopped third node)
    n2 = QtestNode(2, 4, bridge.socket)
    try:
        wait_for(lambda: (port(bridge, 2) or {}).get("state") == "up", what="node 2 up")
        stop(n2)
        dt, bus = _timed_load(n0, 2, lambda: os.killpg(bridge.proc.pid, signal.SIGKILL))
        figures["bridge killed (load in flight)"] = dt
        assert bus
        t0 = time.monotonic()
        n0.read(win(2, SCRATCH), 8)
        figures["bridge killed (load after)"] = time.monotonic() - t0
        assert n0.proc.poll() is None
    finally:
        os.killpg(n2.proc.pid, signal.SIGCONT)
        n2.close()
    print("\n[fabric] time from failure to a GAS load's bus error:")
    for k, v in figures.items():
        print(f"[fabric]   {k:32s} {v * 1000:8.1f} ms")
    assert 1.5 < figures["owner stopped"] < 4.0
    assert figures["owner killed (load in flight)"] < 1.0
    assert figures["owner killed (load after)"] < 1.0
    assert figures["bridge killed (load in flight)"] < 1.5
    assert figures["bridge killed (load after)"] < 1.0
