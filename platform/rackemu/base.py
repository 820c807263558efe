"""The launcher's bottom module: its error type and the small helpers every other module shares.

It imports nothing of the package, so any module may import it: the protocol clients (qmp.py,
agent.py's users), the snapshot code (snapshot.py, snapcache.py) and the orchestrator
(cluster.py) alike. docs/launcher.md, "Module layout", has the whole import order.
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import threading
from pathlib import Path
from typing import Any, Callable


class ClusterError(Exception):
    """The cluster could not be started, reached, or stopped as asked."""


def write_atomic(path: Path, text: str) -> None:
    """Write a file via a temporary and rename: readers see the old or the new file whole."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def os_error_text(e: OSError, where: Path) -> str:
    """An OSError in words, with what to do for the ones a person can fix."""
    text = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        text += f" (the file system holding {where} is full: free space there, see `df {where}`)"
    elif e.errno == errno.EROFS:
        text += f" ({where} is on a read-only file system: choose another --run-dir)"
    elif e.errno in (errno.EACCES, errno.EPERM):
        text += f" (no permission in {where}: choose another --run-dir)"
    return text


class no_interrupts:
    """Ignore SIGINT/SIGTERM while cleaning up (main thread only): a second Ctrl-C must not
    leave half a cluster behind. The cleanup itself is bounded (TERM_GRACE + KILL_WAIT)."""

    def __enter__(self):
        self._old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._old[sig] = signal.signal(sig, signal.SIG_IGN)
                except (ValueError, OSError):
                    pass
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class Background:
    """A call running in a thread: result() waits and returns its value or raises its error."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "rackemu-bg", **kwargs: Any):
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn(*args, **kwargs)
            except BaseException as e:   # handed to the caller of result()
                self._error = e

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout: float | None = None) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"background call still running after {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + ln for ln in text.splitlines())


def shorten(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def command_string(cmd: str | list[str]) -> str:
    return cmd if isinstance(cmd, str) else shlex.join(cmd)
