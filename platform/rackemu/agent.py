"""Host side of the rackemu guest agent protocol (guest/agent/agent_proto.h, docs/agent.md).

QEMU exposes each node's virtio-serial port `rackemu.agent` as a UNIX socket (one client at a
time). AgentClient keeps one connection, a reader thread that dispatches responses by request
id, and is safe to share between threads, so several commands can run in one node at once.
`AgentClient.shared(path)` returns the process-wide client of a socket.
"""
from __future__ import annotations

import dataclasses
import os
import random
import shlex
import socket
import struct
import threading
import time

AG_MAGIC = 0x47414B52
AG_VERSION = 1
AG_PING, AG_EXEC, AG_PUT, AG_GET, AG_CLOCK, AG_RESPONSE = 1, 2, 3, 4, 5, 0x80
AG_MAX_ENTROPY = 4096
AG_F_TIMED_OUT, AG_F_ERROR, AG_F_TRUNCATED = 1, 2, 4
AG_MAX_BODY = 64 << 20
HDR = struct.Struct("<IHHII")  # magic, version, type, id, len
RESP = struct.Struct("<iIII")  # status, flags, out_len, err_len


def _guest_bytes(text: str) -> bytes:
    """A command or path for the guest as bytes: UTF-8, and the bytes of a host argument that was
    not UTF-8 (Python holds them as lone surrogates) passed through unchanged, as a shell would."""
    return text.encode("utf-8", "surrogateescape")


class AgentError(Exception):
    """The agent could not be reached or could not carry out the request."""


class AgentUnreachable(AgentError):
    """No answer: the socket cannot be reached, the connection closed, or the answer did not
    come in time (the guest hung, or its agent died). A request the agent answered with an
    error raises plain AgentError."""


@dataclasses.dataclass
class Result:
    rc: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


class AgentClient:
    _shared: dict[str, "AgentClient"] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, path: str) -> "AgentClient":
        with cls._shared_lock:
            c = cls._shared.get(path)
            if c is None or c._dead:
                c = cls._shared[path] = cls(path)
            return c

    @classmethod
    def forget(cls, path: str) -> None:
        """Close and drop the shared client of `path`: the next shared() connects afresh (to a
        new QEMU's socket)."""
        with cls._shared_lock:
            c = cls._shared.pop(path, None)
        if c is not None:
            c.close()

    def __init__(self, path: str):
        self.path = path
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()          # connection + sending
        self._cv = threading.Condition()
        self._replies: dict[int, tuple] = {}
        self._next = random.randrange(1, 1 << 30)
        self._dead = False
        self._reader: threading.Thread | None = None

    # ---- connection ----

    def _connect(self) -> None:
        if self._sock is not None:
            return
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise AgentUnreachable(f"cannot connect to the agent socket {self.path}: {e.strerror} "
                                   f"(is the node running?)") from None
        s.settimeout(None)
        self._sock = s
        self._reader = threading.Thread(target=self._read_loop, args=(s,), daemon=True,
                                        name=f"agent-reader {os.path.basename(self.path)}")
        self._reader.start()

    def close(self) -> None:
        with self._lock:
            s, self._sock = self._sock, None
            self._dead = True
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self._cv:
            self._cv.notify_all()

    def _read_loop(self, s: socket.socket) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= HDR.size:
                    magic, ver, typ, rid, ln = HDR.unpack_from(buf)
                    if magic != AG_MAGIC:
                        nxt = buf.find(struct.pack("<I", AG_MAGIC), 1)
                        del buf[:nxt if nxt > 0 else len(buf) - 3]
                        continue
                    if len(buf) < HDR.size + ln:
                        break
                    body = bytes(buf[HDR.size:HDR.size + ln])
                    del buf[:HDR.size + ln]
                    if ln >= RESP.size:
                        st, fl, ol, el = RESP.unpack_from(body)
                        out = body[RESP.size:RESP.size + ol]
                        err = body[RESP.size + ol:RESP.size + ol + el]
                        with self._cv:
                            self._replies[rid] = (st, fl, out, err)
                            self._cv.notify_all()
        except OSError:
            pass
        with self._lock:
            if self._sock is s:
                self._sock = None
        with self._cv:
            self._cv.notify_all()

    def _request(self, typ: int, body: bytes, timeout: float | None) -> tuple:
        with self._lock:
            self._connect()
            rid = self._next
            self._next = (self._next + 1) & 0x7FFFFFFF or 1
            assert self._sock is not None  # _connect() succeeded
            try:
                self._sock.sendall(HDR.pack(AG_MAGIC, AG_VERSION, typ, rid, len(body)) + body)
            except OSError as e:
                self._sock = None
                raise AgentUnreachable(f"agent socket {self.path}: send failed: {e.strerror}") from None
            sock = self._sock
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while rid not in self._replies:
                if self._sock is not sock:
                    raise AgentUnreachable(f"agent connection {self.path} closed while waiting "
                                           f"(did the node stop?)")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise AgentUnreachable(f"no answer from the agent at {self.path} within "
                                           f"{timeout:.1f} s")
                self._cv.wait(left if left is not None else 1.0)
            return self._replies.pop(rid)

    # ---- requests ----

    def ping(self, timeout: float = 2.0) -> bool:
        try:
            self._request(AG_PING, b"", timeout)
            return True
        except AgentError:
            return False

    def exec(self, cmd: str | list[str], timeout: float | None = 60.0, stdin: bytes | None = None,
             env: dict[str, str] | None = None) -> Result:
        """Run `cmd` (a shell string, or an argv list quoted for the shell) in the guest.
        `timeout` seconds is enforced by the agent, which kills the command's process group."""
        if not isinstance(cmd, str):
            cmd = " ".join(shlex.quote(str(a)) for a in cmd)
        if env:
            cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + cmd
        stdin = stdin or b""
        c = _guest_bytes(cmd)
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        body = struct.pack("<III", ms, len(stdin), len(c)) + c + stdin
        wait = None if timeout is None else timeout + 30  # the agent reports the timeout itself
        st, fl, out, err = self._request(AG_EXEC, body, wait)
        if fl & AG_F_ERROR:
            raise AgentError(f"agent could not run `{cmd}`: {err.decode(errors='replace')}")
        return Result(st, out, err, bool(fl & AG_F_TIMED_OUT), bool(fl & AG_F_TRUNCATED))

    def put(self, data: bytes | str | os.PathLike, remote_path: str, mode: int = 0o644,
            timeout: float = 120.0) -> None:
        """Write `data` (bytes, or the contents of a local file path) to `remote_path`."""
        if not isinstance(data, (bytes, bytearray)):
            with open(data, "rb") as f:
                data = f.read()
        if len(data) > AG_MAX_BODY - 4096:
            raise AgentError(f"file too large for the agent ({len(data)} bytes, max {AG_MAX_BODY - 4096})")
        p = _guest_bytes(remote_path)
        st, fl, out, err = self._request(AG_PUT, struct.pack("<II", mode, len(p)) + p + bytes(data), timeout)
        if fl & AG_F_ERROR or st != 0:
            raise AgentError(f"put {remote_path}: {err.decode(errors='replace')}")

    def set_clock(self, realtime_ns: int, entropy: bytes = b"", timeout: float = 20.0) -> None:
        """Set the guest's CLOCK_REALTIME and mix `entropy` (at most AG_MAX_ENTROPY bytes) into its
        random pool, without starting a process in the guest (AG_CLOCK)."""
        if len(entropy) > AG_MAX_ENTROPY:
            raise AgentError(f"set_clock: {len(entropy)} bytes of entropy (at most {AG_MAX_ENTROPY})")
        st, fl, out, err = self._request(AG_CLOCK, struct.pack("<Q", realtime_ns) + bytes(entropy), timeout)
        if fl & AG_F_ERROR or st != 0:
            raise AgentError(f"set_clock: {err.decode(errors='replace')} (status {st})")

    def get(self, remote_path: str, timeout: float = 120.0) -> bytes:
        st, fl, out, err = self._request(AG_GET, _guest_bytes(remote_path), timeout)
        if fl & AG_F_ERROR or st != 0:
            raise AgentError(f"get {remote_path}: {err.decode(errors='replace')}")
        return out
