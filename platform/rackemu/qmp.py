"""The one QMP client of rackemu: the launcher (snapshot.py, `Node.qmp()`) and every test that
talks to a QEMU's monitor (tests/e2e, tests/launcher) use it (docs/launcher.md, "Python API").

QMP is QEMU's JSON monitor protocol on a UNIX socket: QEMU greets, the client sends
`qmp_capabilities`, then one JSON object per line each way. This client sends one command at a
time and skips the asynchronous events QEMU interleaves with the answers. QEMU's own error
answer to a command raises QmpCommandError (its class and description kept); a socket that
cannot be reached, closes, stays silent or sends what is not QMP raises QmpError.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Callable

from .base import ClusterError, shorten

QMP_TIMEOUT = 30.0       # one QMP command, and connect_qmp's wait for the socket


class QmpError(ClusterError):
    """The QMP socket could not be reached or read, or what came back was not QMP."""


class QmpCommandError(QmpError):
    """QEMU answered a QMP command with an error (its class and description are kept)."""

    def __init__(self, cmd: str, klass: str, desc: str):
        super().__init__(f"QMP {cmd}: {desc}")
        self.cmd, self.klass, self.desc = cmd, klass, desc


class Qmp:
    """A minimal QMP client: one command at a time, asynchronous events skipped."""

    def __init__(self, path: str | os.PathLike, timeout: float = QMP_TIMEOUT):
        self.path = str(path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = b""

    def __enter__(self) -> "Qmp":
        if self._sock is None:
            self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise QmpError(f"cannot connect to QEMU's QMP socket {self.path}: "
                           f"{e.strerror or e}") from None
        self._sock, self._buf = s, b""
        try:
            greeting = self._read()
            if "QMP" not in greeting:
                raise QmpError(f"{self.path} did not greet like QMP: {shorten(str(greeting), 120)}")
            self.execute("qmp_capabilities")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _read(self) -> dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                raise QmpError(f"QEMU did not answer on {self.path} within "
                               f"{self.timeout:.0f} s") from None
            except OSError as e:
                raise QmpError(f"QMP socket {self.path}: {e.strerror or e}") from None
            if not chunk:
                raise QmpError(f"QEMU closed its QMP socket {self.path} (did it exit?)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            raise QmpError(f"QEMU sent something that is not JSON on {self.path}: "
                           f"{line[:120]!r}") from None
        return msg if isinstance(msg, dict) else {}

    def execute(self, cmd: str, **arguments: Any) -> Any:
        """Run one command; its `return` value, or QmpCommandError with QEMU's description."""
        if self._sock is None:
            raise QmpError(f"QMP client of {self.path} is not connected")
        req: dict[str, Any] = {"execute": cmd}
        if arguments:
            req["arguments"] = arguments
        try:
            self._sock.sendall(json.dumps(req).encode() + b"\n")
        except OSError as e:
            raise QmpError(f"QMP socket {self.path}: {e.strerror or e}") from None
        while True:
            msg = self._read()
            if "event" in msg:
                continue
            if "error" in msg:
                err = msg["error"] if isinstance(msg["error"], dict) else {}
                raise QmpCommandError(cmd, str(err.get("class", "")),
                                      str(err.get("desc", msg["error"])))
            if "return" in msg:
                return msg["return"]

    def hmp(self, line: str) -> str:
        """A human-monitor command (e.g. `xp /1gx 0x0b040020`); its output text."""
        return str(self.execute("human-monitor-command", **{"command-line": line}))

    def wait_migration(self, timeout: float, poll: float = 0.05) -> dict[str, Any]:
        """Poll `query-migrate` until the migration has ended (completed, failed or cancelled)
        and return its last answer; QmpError if it has not ended within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.execute("query-migrate")
            if st.get("status") in ("completed", "failed", "cancelled"):
                return st
            if time.monotonic() >= deadline:
                raise QmpError(f"the migration of {self.path} did not end within {timeout:.0f} s "
                               f"(status {st.get('status')})")
            time.sleep(poll)


def connect_qmp(path: str | os.PathLike, timeout: float = QMP_TIMEOUT,
                alive: Callable[[], bool] | None = None, what: str = "") -> Qmp:
    """Connect to a QMP socket, retrying for up to `timeout` seconds while QEMU creates it
    (start-up). `alive` (e.g. a node's `alive`) ends the wait as soon as the QEMU is gone;
    `what` (e.g. "node 1") prefixes the error."""
    deadline = time.monotonic() + timeout
    prefix = f"{what}: " if what else ""
    while True:
        try:
            q = Qmp(path, timeout=timeout)
            q.connect()
            return q
        except QmpError as e:
            if alive is not None and not alive():
                raise QmpError(f"{prefix}QEMU is not running (QMP socket {path})") from None
            if time.monotonic() >= deadline:
                raise QmpError(f"{prefix}{e}") from None
        time.sleep(0.05)


def read_phys(qmp: Qmp, addr: int, count: int = 1, width: int = 8) -> list[int]:
    """`count` words of `width` bytes at guest-physical `addr`, read through HMP `xp` (an MMIO
    register is read through the device's read handler, so registers with read side effects,
    e.g. a FIFO's data register, are popped)."""
    if width not in (1, 2, 4, 8):
        raise ValueError(f"read_phys: width {width} is not 1, 2, 4 or 8 bytes")
    unit = {1: "b", 2: "h", 4: "w", 8: "g"}[width]
    text = qmp.hmp(f"xp /{count}{unit}x {addr:#x}")
    words: list[int] = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        try:
            words += [int(tok, 16) for tok in line.split(":", 1)[1].split()]
        except ValueError:
            raise QmpError(f"xp /{count}{unit}x {addr:#x} answered {text!r}") from None
    if len(words) != count:
        raise QmpError(f"xp /{count}{unit}x {addr:#x} answered {text!r}")
    return words


IRQ_PATHS = ("irq-direct", "irq-vcpu", "irq-bh")


def irq_counters(qmp: Qmp, dev_type: str) -> dict[str, int]:
    """How a rackemu device (QOM type `dev_type`, e.g. "rackemu-vmbox"; one per node) set its
    interrupt levels so far (docs/machine.md, "Threads and locking"): {"irq-direct": at once
    under the big lock, "irq-vcpu": by work queued on the vCPU from another thread, "irq-bh": by
    the main loop's bottom half}. The machine creates its devices unnamed, so the device is found
    by type under /machine/unattached; QmpError if the node has none."""
    path = device_path(qmp, dev_type)
    return {p: int(qmp.execute("qom-get", path=path, property=p)) for p in IRQ_PATHS}


def device_path(qmp: Qmp, dev_type: str) -> str:
    """The QOM path of the node's one device of type `dev_type` (the machine creates its devices
    unnamed, so it is found by type under /machine/unattached); QmpError if the node has none."""
    for child in qmp.execute("qom-list", path="/machine/unattached"):
        if child.get("type") == f"child<{dev_type}>":
            return f"/machine/unattached/{child['name']}"
    raise QmpError(f"{qmp.path}: no {dev_type} device under /machine/unattached")


ACK_PATHS = ("acks-first", "acks-after")


def vmbox_ack_order(qmp: Qmp, first: bool | None = None) -> dict[str, int]:
    """Deliveries into the node's vmbox so far by the order of their answer (docs/mailbox.md, "The
    arrival interrupt's path"): {"acks-first": the sender's ACK/NACK left before the packet became
    visible, "acks-after": after it (the old order)}, counted by the packetizer's glue. With
    `first` given, switch the order for the deliveries that follow (QOM "ack-first") first."""
    path = device_path(qmp, "rackemu-packetizer")
    if first is not None:
        qmp.execute("qom-set", path=path, property="ack-first", value=bool(first))
    return {p: int(qmp.execute("qom-get", path=path, property=p)) for p in ACK_PATHS}
