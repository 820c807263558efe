"""The processes the launcher starts (the bridge, each QEMU): who they are, and how they stop.

A process is known by its pid and its start time (/proc/PID/stat), so a recycled pid is never
mistaken for a node; it runs in its own session, so it is signalled as a group. cluster.py's
module comment has the process model.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable

from .base import ClusterError, os_error_text

TERM_GRACE = 5.0        # seconds between SIGTERM and SIGKILL
KILL_WAIT = 5.0


def proc_starttime(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def proc_state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, D, T stopped, t traced, Z ...), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest[0] if rest else None


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def proc_alive(pid: int | None, starttime: int | None) -> bool:
    if not pid:
        return False
    st = proc_starttime(pid)
    return st is not None and (starttime is None or st == starttime)


def proc_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def pdeathsig_preexec() -> None:
    """Runs in the child between fork and exec: die with the parent thread."""
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Proc:
    """One started process: enough to find it again from another process and to kill it."""

    def __init__(self, pid: int, starttime: int | None, argv: list[str], log: str,
                 popen: subprocess.Popen | None = None):
        self.pid = pid
        self.starttime = starttime
        self.argv = argv
        self.log = log
        self.popen = popen   # set only in the process that started it

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "starttime": self.starttime, "argv": self.argv, "log": self.log}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Proc | None":
        if not d:
            return None
        return cls(d["pid"], d.get("starttime"), d.get("argv", []), d.get("log", ""))

    def alive(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            return False
        return proc_alive(self.pid, self.starttime)

    def exit_status(self) -> str:
        if self.popen is not None and self.popen.returncode is None and not self.alive():
            # A multi-threaded process (QEMU) shows its leader as a zombie while its other
            # threads still exit; waitpid() has its status a moment later.
            try:
                self.popen.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        if self.popen is None or self.popen.returncode is None:
            return "exited"
        rc = self.popen.returncode
        if rc >= 0:
            return f"exited with status {rc}"
        what = f"was killed by signal {-rc} ({signal_name(-rc)})"
        if -rc == signal.SIGBUS:
            # A guest page that the RAM file system (tmpfs) cannot back raises SIGBUS in QEMU.
            what += (" -- usually a full guest-RAM file system (/dev/shm or shm_dir): see "
                     "`df` of it")
        return what

    def stopped(self) -> bool:
        """True if the process is stopped (SIGSTOP/SIGTSTP) or traced: it answers nothing."""
        return self.alive() and proc_state(self.pid) in ("T", "t")

    def signal_group(self, sig: int) -> None:
        """Signal the process group (the pid leads it), only while the leader is the one we
        started: a recycled pid must never be signalled."""
        if not self.alive():
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                os.kill(self.pid, sig)
            except OSError:
                pass

    def wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.popen is not None:
                try:
                    self.popen.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    pass
            if not self.alive() and not self.group_alive():
                return True
            if time.monotonic() >= deadline:
                return False
            if self.popen is None:
                time.sleep(0.05)

    def group_alive(self) -> bool:
        """Members of the group other than a leader that already exited (QEMU has none
        normally; a wrapper script might)."""
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        # The group exists. If its leader is gone, check that the members are ours: their
        # command lines must reference one of our paths (no stranger can own that pgid then).
        if self.alive():
            return True
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.getpgid(int(entry)) == self.pid and proc_starttime(int(entry)) is not None:
                    return True
            except OSError:
                continue
        return False


def stop_procs(procs: Iterable[Proc], grace: float | None = None) -> list[Proc]:
    """SIGTERM every group, wait up to `grace` (TERM_GRACE), SIGKILL the rest, wait.
    Returns the processes that survived even that."""
    grace = TERM_GRACE if grace is None else grace
    procs = [p for p in procs if p is not None]
    for p in procs:
        p.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        p.wait_gone(max(0.0, deadline - time.monotonic()))
    left = [p for p in procs if p.alive() or p.group_alive()]
    for p in left:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    survivors = [p for p in left if not p.wait_gone(KILL_WAIT)]
    return survivors


def spawn(argv: list[str], log_path: Path, cwd: Path, detach: bool) -> Proc:
    """Start `argv` in its own session with stdin from /dev/null and its output in `log_path`;
    unless `detach`, the kernel kills it when the starting thread dies (PR_SET_PDEATHSIG)."""
    try:
        logf = open(log_path, "wb")
    except OSError as e:
        raise ClusterError(f"cannot create {log_path}: {os_error_text(e, cwd)}") from None
    with logf:
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
            cwd=cwd, start_new_session=True, close_fds=True,
            preexec_fn=None if detach else pdeathsig_preexec)
    return Proc(popen.pid, proc_starttime(popen.pid), argv, str(log_path), popen)


def find_strays(run_dir: Path, programs: set[str], known: set[int]) -> list[tuple[int, list[str]]]:
    """(pid, argv) of the processes other than `known` (and this one) that run QEMU or the
    bridge (by name, or one of `programs`) with `run_dir` on their command line."""
    rd = str(run_dir)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == os.getpid() or pid in known:
            continue
        argv = proc_cmdline(pid)
        if not argv:
            continue
        refs_dir = any(a == rd or a.startswith(rd + "/") or f"{rd}/" in a for a in argv)
        is_ours = (os.path.basename(argv[0]) in ("qemu-system-aarch64", "rackemu-bridge")
                   or any(a in programs for a in argv[:2]))
        if refs_dir and is_ours and proc_starttime(pid) is not None:
            found.append((pid, argv))
    return found


def pidfile_procs(files: list[tuple[Path, Path]], run_dir: Path) -> list[Proc]:
    """The live processes named by QEMU pid files ((pid file, log) pairs) whose command line
    names `run_dir`."""
    out = []
    for pid_path, log_path in files:
        try:
            pid = int(pid_path.read_text().strip())
        except (OSError, ValueError):
            continue
        st = proc_starttime(pid)
        if st is not None and any(str(run_dir) in a for a in proc_cmdline(pid)):
            out.append(Proc(pid, st, proc_cmdline(pid), str(log_path)))
    return out
