"""Register-level access to a real rackemu-node QEMU through QEMU's qtest protocol.

No guest runs: the test reads and writes MMIO registers exactly as a CPU would, against the
real qemu-system-aarch64 binary with rackemu's devices compiled in (the QEMU qtest style of
testing, STYLE.md point 8). Used by tests/e2e/test_*_registers.py.
"""
import os
import re
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("RACKEMU_BUILD", os.path.join(ROOT, "build"))
QEMU = os.path.join(BUILD, "qemu", "qemu-system-aarch64")
BRIDGE = os.path.join(BUILD, "host", "rackemu-bridge")


def regs_header(name="unimem_regs.h"):
    """Constants of hw/include/rackemu/<name> (the one definition), parsed."""
    path = os.path.join(ROOT, "hw", "include", "rackemu", name)
    consts = {}
    for m in re.finditer(r"^#define\s+(\w+)\s+\(?([0-9a-fA-Fx]+)u?l{0,2}\)?\s*(?:/\*.*)?$",
                         open(path).read(), re.M):
        consts[m.group(1)] = int(m.group(2).rstrip("uUlL"), 0)
    for m in re.finditer(r"^#define\s+(\w+)\s+\(1u << (\d+)\)", open(path).read(), re.M):
        consts[m.group(1)] = 1 << int(m.group(2))
    return consts


class QtestNode:
    """One QEMU in qtest mode: readq/writeq against the machine's physical address space."""

    def __init__(self, node_id, node_count, fabric=None, extra_machine="", memory="128M", extra_args=()):
        m = f"rackemu-node,node-id={node_id},node-count={node_count}"
        if fabric:
            m += f",fabric={fabric}"
        if extra_machine:
            m += "," + extra_machine
        self.node_id = node_id
        # QEMU's log (-d guest_errors) goes to a file, never to a pipe nobody drains: a guest (or
        # a test) that provokes many log lines would otherwise fill the pipe and block QEMU's
        # main thread with the big lock held.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [QEMU, "-M", m, "-m", memory, "-accel", "qtest", "-qtest", "stdio", "-display", "none",
             "-nodefaults", "-qtest-log", "/dev/null", "-d", "guest_errors", *extra_args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            text=True, start_new_session=True)

    def stderr_text(self):
        """Everything QEMU wrote to stderr so far (its guest-error log)."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def _cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        while True:
            resp = self.proc.stdout.readline()
            if not resp:
                raise RuntimeError(f"node {self.node_id}: QEMU exited: {self.stderr_text()}")
            if resp.startswith("IRQ"):
                continue
            return resp.strip()

    _SUFFIX = {1: "b", 2: "w", 4: "l", 8: "q"}

    def read(self, addr, size):
        """One CPU-like load of `size` bytes (1, 2, 4, 8)."""
        r = self._cmd(f"read{self._SUFFIX[size]} 0x{addr:x}")
        assert r.startswith("OK "), r
        return int(r.split()[1], 16)

    def write(self, addr, value, size):
        r = self._cmd(f"write{self._SUFFIX[size]} 0x{addr:x} 0x{value:x}")
        assert r == "OK", r

    def readq(self, addr):
        return self.read(addr, 8)

    def writeq(self, addr, value):
        self.write(addr, value, 8)

    def memread(self, addr, size):
        """`size` bytes through QEMU's memory API (one access for the whole range)."""
        r = self._cmd(f"read 0x{addr:x} 0x{size:x}")
        assert r.startswith("OK 0x"), r
        return bytes.fromhex(r.split()[1][2:])

    def memwrite(self, addr, data):
        r = self._cmd(f"write 0x{addr:x} 0x{len(data):x} 0x{data.hex()}")
        assert r == "OK", r

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


class Bridge:
    def __init__(self, run_dir, max_nodes=8, extra_args=()):
        self.run_dir = run_dir
        self.log = tempfile.TemporaryFile(mode="w+")  # a file, not an undrained pipe (see QtestNode)
        self.proc = subprocess.Popen([BRIDGE, "--run-dir", run_dir, "--max-nodes", str(max_nodes), *extra_args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        assert "ready" in line, f"bridge did not start: {line}{self.stderr_text()}"
        self.socket = os.path.join(run_dir, "fabric.sock")

    def stderr_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stats(self):
        import json
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(self.run_dir, "bridge.ctl"))
        s.sendall(b"stats\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return json.loads(data)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def wait_for(pred, timeout=5.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
