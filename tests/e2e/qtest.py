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


_HEADER_CACHE: dict[str, tuple] = {}  # header name -> its constants and tables
# An object-like macro whose expansion can only be an integer expression (no strings, no commas).
_INT_EXPR = re.compile(r"^[\w\s()<>+\-*|&~^/%]+$")


def regs_header(name="unimem_regs.h"):
    """Constants of hw/include/rackemu/<name> (the one definition), as the C compiler sees them.

    Nothing is parsed out of the header's text: the compiler's preprocessor lists the macros the
    header (and the rackemu headers it includes) defines, and a small program compiled against
    the header prints the value of every integer macro and of every counter of its counter tables
    (X-macros named <DEV>_COUNTER_TABLE, whose offsets are <DEV>_CNT_<NAME> and whose size is
    <DEV>_CNT_COUNT). Counter names in register order: regs_counters(name)[prefix].
    """
    return dict(_header(name)[0])


def regs_counters(name):
    """{"RMC": [(NAME, name, description), ...]}: the counter tables of a header, in order."""
    return _header(name)[1]


def _header(name):
    if name in _HEADER_CACHE:
        return _HEADER_CACHE[name]
    inc = os.path.join(ROOT, "hw", "include")
    path = os.path.join(inc, "rackemu", name)
    cc = os.environ.get("CC", "cc")
    pp = subprocess.run([cc, "-E", "-dD", "-I", inc, "-x", "c", path], capture_output=True, text=True, check=True)
    ours = os.path.join(inc, "rackemu")
    current, objs, tables, text = "", [], [], []
    for line in pp.stdout.splitlines():
        m = re.match(r'^# \d+ "([^"]+)"', line)
        if m:
            current = m.group(1)
            continue
        if not line.startswith("#") and os.path.abspath(current).startswith(ours):
            text.append(line)
        m = re.match(r"^#define (\w+)(\(?)\s*(.*)$", line)
        if not m or not os.path.abspath(current).startswith(ours):
            continue
        if m.group(2):
            if m.group(1).endswith("_COUNTER_TABLE"):
                tables.append(m.group(1)[: -len("_COUNTER_TABLE")])
        elif m.group(3) and _INT_EXPR.match(m.group(3)) and not m.group(1).endswith("_H"):
            objs.append(m.group(1))
    # Enumerators count as constants too (e.g. a command set declared as an enum).
    for body in re.findall(r"\benum\s*\w*\s*\{([^}]*)\}", "\n".join(text)):
        for item in body.split(","):
            m = re.match(r"\s*([A-Za-z_]\w*)", item)
            if m and m.group(1) not in objs:
                objs.append(m.group(1))
    with tempfile.TemporaryDirectory(prefix="rackemu-regs-") as d:
        for _ in range(5):
            lines = ["#include <stdio.h>", f'#include "rackemu/{name}"', "int main(void) {"]
            first = len(lines) + 1
            for n in objs:
                lines.append(f'printf("M %s %llu\\n", "{n}", (unsigned long long)({n}));')
            for t in tables:
                lines.append(f'#define RK_DUMP_X(N, n, d) printf("C {t} %s %s %llu %s\\n", #N, #n, '
                             f'(unsigned long long){t}_CNT_##N, d);')
                lines.append(f"{t}_COUNTER_TABLE(RK_DUMP_X)")
                lines.append("#undef RK_DUMP_X")
                lines.append(f'printf("M %s %llu\\n", "{t}_CNT_COUNT", (unsigned long long){t}_CNT_COUNT);')
            lines += ["return 0;", "}"]
            src, exe = os.path.join(d, "dump.c"), os.path.join(d, "dump")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            r = subprocess.run([cc, "-w", "-I", inc, "-o", exe, src], capture_output=True, text=True)
            if r.returncode == 0:
                break
            # A macro that is not a value after all (e.g. an expression over a type): drop it, retry.
            bad = {int(x) for x in re.findall(r"dump\.c:(\d+):", r.stderr)}
            keep = [n for i, n in enumerate(objs) if first + i not in bad]
            if len(keep) == len(objs):
                raise RuntimeError(f"cannot evaluate the constants of {name}:\n{r.stderr}")
            objs = keep
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    consts, counters = {}, {}
    for line in out.splitlines():
        kind, rest = line.split(" ", 1)
        if kind == "M":
            n, v = rest.split(" ")
            consts[n] = int(v)
        else:
            t, big, small, off, desc = rest.split(" ", 4)
            consts[f"{t}_CNT_{big}"] = int(off)
            counters.setdefault(t, []).append((big, small, desc))
    _HEADER_CACHE[name] = (consts, counters)
    return _HEADER_CACHE[name]


class QtestNode:
    """One QEMU in qtest mode: readq/writeq against the machine's physical address space."""

    def __init__(self, node_id, node_count, fabric=None, extra_machine="", memory="128M", extra_args=(),
                 qmp_path=None):
        m = f"rackemu-node,node-id={node_id},node-count={node_count}"
        if fabric:
            m += f",fabric={fabric}"
        if extra_machine:
            m += "," + extra_machine
        self.node_id = node_id
        self.qmp_path = qmp_path
        if qmp_path:
            extra_args = ("-qmp", f"unix:{qmp_path},server=on,wait=off", *extra_args)
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

    def qmp(self, timeout=30.0):
        """A connected rackemu.qmp.Qmp client of this QEMU's QMP socket (the node was made with
        qmp_path=...), waiting while QEMU creates it; use it in a `with` block."""
        from rackemu.qmp import connect_qmp  # platform/ is on sys.path (conftest.py)
        assert self.qmp_path, "this QtestNode was started without qmp_path"
        return connect_qmp(self.qmp_path, timeout, alive=lambda: self.proc.poll() is None,
                           what=f"node {self.node_id}")

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

    def clock_step(self, ns):
        """Advance the VM's clock (QEMU_CLOCK_VIRTUAL, which stands still under qtest otherwise)
        by `ns` nanoseconds, running the timers that fall due; returns the new clock."""
        r = self._cmd(f"clock_step {ns}")
        assert r.startswith("OK "), r
        return int(r.split()[1])

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
        """Everything the bridge wrote to stderr so far (its log)."""
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
