"""Start, watch and stop a rackemu cluster: one fabric bridge and N QEMU nodes.

Process model
-------------
Every process the launcher starts (the bridge, each QEMU) runs in its own session and so its
own process group, with stdin from /dev/null and stdout/stderr in a log file of the run
directory, so it outlives neither a terminal's Ctrl-C nor a closed pipe by accident, and it
can be killed as a group. The run directory holds:

  state.json          who runs (pid + start time, so a recycled pid is never mistaken for a node)
  .lock               flock()ed by `up` while it starts the cluster
  bridge.log          the bridge's output;  fabric.sock, bridge.ctl: its sockets
  nodeI.log           QEMU's own output;    nodeI.console: the guest's serial console
  nodeI.agent         the guest agent's socket (virtio-serial port rackemu.agent)
  nodeI.qmp, nodeI.pid  QMP socket and QEMU's pid file

`save_node`/`restore_node` (snapshot.py) write one node's state to a file and bring it back.

`down` (and a failed or interrupted `up`) sends SIGTERM to every group, waits, sends SIGKILL to
what is left, waits again, then removes the sockets and pid files. Logs and consoles stay for
post-mortems. Because the state is on disk, `status`, `exec` and `down` work from any process
(Cluster.attach). A cluster started from Python (not detached) additionally asks the kernel to
SIGKILL its QEMUs and bridge when the starting thread dies (PR_SET_PDEATHSIG), so a killed
pytest leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .config import RUN_BASE, ClusterConfig, ConfigError, format_mib

if TYPE_CHECKING:
    from .qmp import Qmp

STATE_FILE = "state.json"
STATE_VERSION = 1
BRIDGE_READY_LINE = "rackemu-bridge: ready"
BRIDGE_START_TIMEOUT = 30.0
TERM_GRACE = 5.0        # seconds between SIGTERM and SIGKILL
KILL_WAIT = 5.0
SHM_MARGIN_MIB = 32     # free space kept on the guest-RAM file system beyond the nodes' memory
AGENT_CHECK_TIMEOUT = 10.0   # `rackemu exec`: how long the agent may take to answer a ping
PORT_RECONNECT_TIMEOUT = 20.0  # `bridge restart`: how long the nodes' ports may take to rejoin
PORT_DOWN_TIMEOUT = 10.0  # the bridge noticing that a stopped QEMU's fabric connection closed

# Injectable for tests (a fake file system size): os.statvfs of the guest-RAM directory.
_statvfs = os.statvfs


class ClusterError(Exception):
    """The cluster could not be started, reached, or stopped as asked."""


# ---------------------------------------------------------------- process identity helpers

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


def _pdeathsig_preexec() -> None:
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
            if not self.alive() and not self._group_alive():
                return True
            if time.monotonic() >= deadline:
                return False
            if self.popen is None:
                time.sleep(0.05)

    def _group_alive(self) -> bool:
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
    left = [p for p in procs if p.alive() or p._group_alive()]
    for p in left:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    survivors = [p for p in left if not p.wait_gone(KILL_WAIT)]
    return survivors


# ---------------------------------------------------------------- the agent

def _agent_client_class():
    try:
        from .agent import AgentClient
    except ImportError as e:
        raise ClusterError(f"the guest agent client (platform/rackemu/agent.py) cannot be "
                           f"imported: {e}") from None
    return AgentClient


def _agent_error_classes() -> tuple[tuple, tuple]:
    """(AgentUnreachable, AgentError) of rackemu.agent, or empty tuples (catch nothing)."""
    try:
        from .agent import AgentError, AgentUnreachable
    except ImportError:
        return (), ()
    return (AgentUnreachable,), (AgentError,)


class Node:
    """One QEMU node of a cluster. exec/put/get/ping go through the guest agent's socket."""

    def __init__(self, cluster: "Cluster", index: int):
        self.cluster = cluster
        self.id = index
        d = cluster.run_dir
        self.agent_path = d / f"node{index}.agent"
        self.qmp_path = d / f"node{index}.qmp"
        self.console_path = d / f"node{index}.console"
        self.log_path = d / f"node{index}.log"
        self.pid_path = d / f"node{index}.pid"
        self.proc: Proc | None = None
        self.state = "stopped"     # stopped, starting, running, dead, killed
        self.boot_seconds: float | None = None
        self.started_at: float | None = None   # wall clock (time.time) of the QEMU start
        self._t0: float | None = None           # monotonic time of the QEMU start
        self.snapshot: str | None = None        # the snapshot this QEMU started from, if any
        # monotonic times of this QEMU's start-up steps (spawned, agent; a snapshot boot adds
        # ram, qmp, incoming, loaded, resumed, refreshed): bench/snapshot_boot.py's breakdown
        self.phases: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<Node {self.id} {self.state} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def qmp(self, timeout: float | None = None) -> Qmp:
        """A connected rackemu.qmp.Qmp client of this node's QMP socket (use it in a `with`
        block), waiting up to `timeout` seconds (default 30) while QEMU creates the socket;
        QmpError at once if the QEMU is not running."""
        from .qmp import QMP_TIMEOUT, connect_qmp
        wait = QMP_TIMEOUT if timeout is None else timeout
        return connect_qmp(self.qmp_path, wait, alive=self.alive, what=f"node {self.id}")

    # ---- guest agent ----

    def agent(self):
        """The process-wide AgentClient of this node's socket. QEMU's chardev takes one client
        at a time, so every caller shares one connection; the client multiplexes requests by
        id, which lets several commands run in one node at once."""
        return _agent_client_class().shared(str(self.agent_path))

    def ping(self, timeout: float = 2.0) -> bool:
        """True if the guest agent answers within `timeout` seconds."""
        if not self.agent_path.exists():
            return False
        try:
            return self.agent().ping(timeout) is not False
        except ClusterError:
            raise
        except Exception:
            return False

    def check_reachable(self) -> None:
        """Raise ClusterError with what to do if this node cannot take agent requests: the
        cluster is down, the node's QEMU is not running, or it is stopped (SIGSTOP)."""
        if not self.alive():
            if self.cluster.status in ("down", "failed") or not self.cluster.live_procs():
                raise ClusterError(f"cluster {self.cluster.config.name!r} is not running "
                                   f"(status: {self.cluster.status}); start it with "
                                   f"`rackemu cluster up`")
            state = "dead" if self.state in ("running", "starting") else self.state
            raise ClusterError(f"node {self.id} is not running (state: {state}); start it again "
                               f"with `rackemu node restart {self.id}{self.cluster.cli_select()}`")
        assert self.proc is not None  # alive()
        if self.proc.stopped():
            raise ClusterError(f"node {self.id}'s QEMU (pid {self.pid}) is stopped (SIGSTOP) and "
                               f"answers nothing; resume it with `kill -CONT {self.pid}` or "
                               f"restart it with `rackemu node restart {self.id}"
                               f"{self.cluster.cli_select()}`")

    def agent_problem(self, why: str) -> ClusterError:
        """The error for an agent that does not answer while QEMU runs: the guest hung,
        panicked, or its agent died."""
        last = self.last_console_line()
        return ClusterError(
            f"node {self.id}: {why}. Its QEMU runs (pid {self.pid}) but the guest agent does not "
            f"answer: the guest may have hung or panicked, or its agent died (or another process "
            f"holds the agent's socket: QEMU serves one client at a time)"
            + (f" (last console line: {_shorten(last, 100)!r})" if last else "") +
            f". See `rackemu console {self.id}{self.cluster.cli_select()}`; restart the node "
            f"with `rackemu node restart {self.id}{self.cluster.cli_select()}`")

    def _with_agent(self, what: str, fn: Callable[[Any], Any]) -> Any:
        self.check_reachable()
        unreachable, agent_error = _agent_error_classes()
        try:
            return fn(self.agent())
        except unreachable as e:
            if not self.alive():
                raise ClusterError(f"node {self.id}'s QEMU exited during {what}: {e}") from None
            self.check_reachable()      # stopped meanwhile: say so
            raise self.agent_problem(f"{what}: {e}") from None
        except agent_error as e:        # the agent answered: the request itself failed
            raise ClusterError(f"node {self.id}: {e}") from None

    def exec(self, cmd: str | list[str], timeout: float | None = 60.0,
             stdin: bytes | None = None, env: dict[str, str] | None = None):
        """Run a command in the guest. `cmd` is a shell string or an argv list. Returns the
        agent's result (.rc, .stdout bytes, .stderr bytes, .timed_out)."""
        return self._with_agent("exec", lambda c: c.exec(cmd, timeout=timeout, stdin=stdin, env=env))

    def sh(self, cmd: str, timeout: float | None = 60.0, check: bool = True) -> str:
        """Run a shell command and return its stdout as text; raise ClusterError if it fails."""
        r = self.exec(cmd, timeout=timeout)
        if check and (r.rc != 0 or getattr(r, "timed_out", False)):
            why = "timed out" if getattr(r, "timed_out", False) else f"exited with {r.rc}"
            raise ClusterError(f"node {self.id}: `{cmd}` {why}\n"
                               f"stdout: {r.stdout.decode(errors='replace')[-2000:]}\n"
                               f"stderr: {r.stderr.decode(errors='replace')[-2000:]}")
        return r.stdout.decode(errors="replace")

    def put(self, *args: Any, **kwargs: Any) -> Any:
        """Copy data into the guest (arguments as AgentClient.put)."""
        return self._with_agent("put", lambda c: c.put(*args, **kwargs))

    def get(self, path: str, *args: Any, **kwargs: Any) -> Any:
        """Read a file from the guest (AgentClient.get)."""
        return self._with_agent("get", lambda c: c.get(path, *args, **kwargs))

    # ---- logs ----

    def console_text(self) -> str:
        try:
            return self.console_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def console_tail(self, lines: int = 20) -> str:
        return "\n".join(self.console_text().splitlines()[-lines:])

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def last_console_line(self) -> str:
        for line in reversed(self.console_tail(5).splitlines()):
            line = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", line).strip()
            if line:
                return line
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "boot_seconds": self.boot_seconds,
                "started_at": self.started_at, "snapshot": self.snapshot,
                "proc": self.proc.to_dict() if self.proc else None,
                "agent": str(self.agent_path), "qmp": str(self.qmp_path),
                "console": str(self.console_path), "log": str(self.log_path)}


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


def run_background(node: Node, cmd: str | list[str], **kwargs: Any) -> Background:
    """Start node.exec(cmd, **kwargs) in a thread; .result() gives the exec result."""
    return Background(node.exec, cmd, name=f"rackemu-node{node.id}-exec", **kwargs)


# ---------------------------------------------------------------- the cluster

class Cluster:
    """A cluster described by a ClusterConfig.

        with Cluster(cfg) as c:          # up() ... down()
            r = c.node(1).exec("unimem info")

    `log` receives progress lines (default: silent). `detach=True` leaves the processes
    running when this Python process exits (the CLI's `cluster up`); otherwise they are
    killed with it.
    """

    def __init__(self, config: ClusterConfig, log: Callable[[str], None] | None = None,
                 detach: bool = False):
        self.config = config
        self.run_dir = config.run_dir
        self.log = log or (lambda msg: None)
        self.detach = detach
        self.nodes = [Node(self, i) for i in range(config.nodes)]
        self.bridge: Proc | None = None
        self.status = "down"
        self.created: float | None = None
        self._lock_fd: int | None = None
        self._state_lock = threading.Lock()
        self._ram_dir = default_ram_dir(config)

    # ---- context manager ----

    def __enter__(self) -> "Cluster":
        self.up()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()

    def cli_select(self) -> str:
        """The options that pick this cluster on the command line (for hints in messages)."""
        if self.run_dir == RUN_BASE / self.config.name:
            return "" if self.config.name == "default" else f" --name {self.config.name}"
        return f" --run-dir {shlex.quote(str(self.run_dir))}"

    def node(self, i: int) -> Node:
        if not isinstance(i, int) or not 0 <= i < len(self.nodes):
            raise ClusterError(f"no node {i!r}: this cluster has nodes 0..{len(self.nodes) - 1}")
        return self.nodes[i]

    # ---- state file ----

    @property
    def state_path(self) -> Path:
        return self.run_dir / STATE_FILE

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "name": self.config.name, "run_dir": str(self.run_dir),
                "status": self.status, "created": self.created, "updated": time.time(),
                "owner_pid": os.getpid(), "config": self.config.to_dict(),
                "bridge": self.bridge.to_dict() if self.bridge else None,
                "bridge_ctl": str(self.run_dir / "bridge.ctl"),
                "fabric_sock": str(self.run_dir / "fabric.sock"),
                "ram_dir": str(self.ram_dir),
                "nodes": [n.to_dict() for n in self.nodes]}

    def save_state(self) -> None:
        with self._state_lock:
            try:
                _write_atomic(self.state_path, json.dumps(self.to_dict(), indent=2) + "\n")
            except OSError as e:
                raise ClusterError(f"cannot write the cluster's state file {self.state_path}: "
                                   f"{_os_error_text(e, self.run_dir)}") from None

    @classmethod
    def attach(cls, run_dir: str | os.PathLike, log: Callable[[str], None] | None = None) -> "Cluster":
        """The cluster whose state lives in `run_dir` (started by this or another process)."""
        run_dir = Path(run_dir)
        path = run_dir / STATE_FILE
        if os.path.lexists(path):
            # The state file says which processes to signal and which files to delete: believe
            # it only from a directory that no other user controls.
            verify_private_dir(run_dir, "run dir")
        try:
            st = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {run_dir} (no {STATE_FILE}); start one with "
                               f"`rackemu cluster up`") from None
        except (OSError, ValueError) as e:
            raise ClusterError(f"cannot read {path}: {e}") from None
        if st.get("version") != STATE_VERSION:
            raise ClusterError(f"{path} was written by another rackemu version")
        cfg = ClusterConfig.from_dict(st["config"])
        c = cls(cfg, log=log, detach=True)
        c.status = st.get("status", "unknown")
        c.created = st.get("created")
        c.bridge = Proc.from_dict(st.get("bridge"))
        if st.get("ram_dir"):
            c._ram_dir = Path(st["ram_dir"])
        for n, nd in zip(c.nodes, st.get("nodes", [])):
            n.proc = Proc.from_dict(nd.get("proc"))
            n.state = nd.get("state", "stopped")
            n.boot_seconds = nd.get("boot_seconds")
            n.started_at = nd.get("started_at")
            n.snapshot = nd.get("snapshot")
            if n.state in ("running", "starting") and not n.alive():
                n.state = "dead"
        return c

    # ---- what runs ----

    def all_procs(self) -> list[Proc]:
        procs = [n.proc for n in self.nodes if n.proc]
        if self.bridge:
            procs.append(self.bridge)
        return procs

    def live_procs(self) -> list[Proc]:
        return [p for p in self.all_procs() if p.alive()]

    def find_strays(self) -> list[tuple[int, list[str]]]:
        """Processes not recorded in our state that run our QEMU or bridge on this run dir
        (left by a launcher that was SIGKILLed before it saved its state, for example)."""
        known = {p.pid for p in self.all_procs() if p.alive()}
        rd = str(self.run_dir)
        progs = {str(self.config.qemu), str(self.config.bridge)}
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
                       or any(a in progs for a in argv[:2]))
            if refs_dir and is_ours and proc_starttime(pid) is not None:
                found.append((pid, argv))
        return found

    def _pidfile_procs(self) -> list[Proc]:
        out = []
        for n in self.nodes:
            try:
                pid = int(n.pid_path.read_text().strip())
            except (OSError, ValueError):
                continue
            st = proc_starttime(pid)
            if st is not None and any(str(self.run_dir) in a for a in proc_cmdline(pid)):
                out.append(Proc(pid, st, proc_cmdline(pid), str(n.log_path)))
        return out

    # ---- up ----

    def _check_host_memory(self) -> None:
        try:
            with open("/proc/meminfo") as f:
                total_kib = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
        except (OSError, StopIteration, ValueError):
            return
        need_mib = self.config.nodes * (self.config.memory_mib + 150)   # + QEMU/TCG overhead
        if need_mib * 1024 > total_kib * 0.9:
            raise ConfigError(
                f"{self.config.nodes} nodes x {self.config.memory} (+ ~150 MiB QEMU overhead each) "
                f"need ~{need_mib} MiB, more than this host's {total_kib // 1024} MiB allows; "
                f"use fewer nodes or less memory")

    def _acquire_lock(self) -> None:
        """Create (or check) the run directory and flock() its .lock: one launcher at a time
        starts, restarts or stops processes of a cluster."""
        prepare_private_dir(self.run_dir, "run dir", create_parents=True)
        lock = self.run_dir / ".lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise ClusterError(f"cannot open {lock}: {_os_error_text(e, self.run_dir)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ClusterError(f"another rackemu is starting or restarting cluster processes in "
                               f"{self.run_dir} right now")
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as e:
            os.close(fd)
            raise ClusterError(f"cannot write {lock}: {_os_error_text(e, self.run_dir)}") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _refuse_if_live(self) -> None:
        try:
            old = Cluster.attach(self.run_dir)
            live = old.live_procs()
        except ClusterError:
            old, live = None, []
        live_pids = {p.pid for p in live}
        live += [p for p in self._pidfile_procs() if p.pid not in live_pids]
        strays = self.find_strays()
        if live or strays:
            lines = [f"  pid {p.pid}: {' '.join(p.argv[:3])} ..." for p in live]
            lines += [f"  pid {pid}: {' '.join(argv[:3])} ..." for pid, argv in strays
                      if pid not in live_pids]
            name = old.config.name if old else self.config.name
            sel = (f"--name {name}" if self.run_dir == RUN_BASE / name
                   else f"--run-dir {self.run_dir}")
            raise ClusterError(
                f"run dir {self.run_dir} has live processes (cluster {name!r} is running):\n"
                + "\n".join(lines) +
                f"\nstop it first with `rackemu cluster down {sel}` (or pick another --name)")

    def _clean_run_dir(self) -> None:
        """Remove sockets and pid files (never logs) left in the run dir, and the guest RAM
        files of nodes that are not running."""
        if owned_private_dir(self.ram_dir):     # never touch a directory someone else made
            live = {n.id for n in self.nodes if n.alive()}
            for f in self.ram_dir.glob("node*.ram"):
                if f.stem[4:].isdigit() and int(f.stem[4:]) not in live:
                    f.unlink(missing_ok=True)
            try:
                self.ram_dir.rmdir()
            except OSError:
                pass
        for entry in self.run_dir.iterdir():
            try:
                st = entry.lstat()
            except OSError:
                continue
            if stat.S_ISSOCK(st.st_mode) or entry.suffix == ".pid" or \
                    entry.name.startswith(STATE_FILE + ".tmp"):
                try:
                    entry.unlink()
                except OSError:
                    pass

    def _spawn(self, argv: list[str], log_path: Path) -> Proc:
        try:
            logf = open(log_path, "wb")
        except OSError as e:
            raise ClusterError(f"cannot create {log_path}: {_os_error_text(e, self.run_dir)}") from None
        with logf:
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                cwd=self.run_dir, start_new_session=True, close_fds=True,
                preexec_fn=None if self.detach else _pdeathsig_preexec)
        return Proc(popen.pid, proc_starttime(popen.pid), argv, str(log_path), popen)

    def bridge_argv(self) -> list[str]:
        faults = [a for rule in self.config.faults for a in ("--fault", rule)]
        return [str(self.config.bridge), "--run-dir", str(self.run_dir),
                "--max-nodes", str(self.config.nodes), "--fault-seed", str(self.config.fault_seed),
                *faults, *self.config.bridge_args]

    @property
    def ram_dir(self) -> Path:
        """Where the nodes' guest RAM lives as shared-memory files (DESIGN.md, "The data path"):
        a party executing a one-sided operation can map the target node's memory directly.
        shm_dir/rackemu-EUID-NAME-HASH, HASH from the resolved run dir (default_ram_dir), so
        two clusters of the same name in different run dirs never share it; private (0700,
        ours), checked by _prepare_ram_dir before any QEMU gets a path in it."""
        return self._ram_dir

    def ram_path(self, i: int) -> Path:
        return self.ram_dir / f"node{i}.ram"

    def _prepare_ram_dir(self) -> None:
        """Create the guest-RAM directory exclusively for us, or accept an existing one only
        if it is a real directory (no symlink) that we own with mode 0700. Anything else is
        refused: its owner could read or swap the guests' memory."""
        base = self.config.shm_dir
        if not base.is_dir():
            raise ClusterError(f"shm_dir {base} (where the guest RAM files go) is not a "
                               f"directory; create it or set shm_dir in the config")
        prepare_private_dir(self.ram_dir, "guest-RAM directory", create_parents=False)

    def _check_ram_space(self, starting: list[Node]) -> None:
        """Refuse to start nodes whose guest RAM does not fit on the file system that holds it.
        QEMU maps the RAM file sparsely, so a full tmpfs shows up only later, as a SIGBUS in
        QEMU when the guest touches a page (no message, the node just dies). Counted: the full
        memory of every node being started, plus what running nodes of this cluster have not
        yet allocated; kept free: SHM_MARGIN_MIB."""
        mem = self.config.memory_mib << 20
        ids = {n.id for n in starting}
        need = 0
        for n in self.nodes:
            if n.id in ids:
                need += mem
            elif n.alive():
                try:
                    used = os.stat(self.ram_path(n.id)).st_blocks * 512
                except OSError:
                    used = 0
                need += max(0, mem - used)
        base = self.config.shm_dir
        try:
            st = _statvfs(str(base))
        except OSError as e:
            raise ClusterError(f"cannot check the free space of shm_dir {base}: "
                               f"{e.strerror or e}") from None
        free = st.f_bavail * st.f_frsize
        total = st.f_blocks * st.f_frsize
        margin = SHM_MARGIN_MIB << 20
        if need + margin <= free:
            return

        def mib(b: int) -> int:
            return b >> 20

        mount = mount_point(base)
        want_total = total - free + need + margin
        size = format_mib(-(-mib(want_total) // 1024) * 1024)   # whole GiB, rounded up
        raise ClusterError(
            f"not enough room for guest RAM on {base} (mounted at {mount}): {len(starting)} "
            f"node(s) x {self.config.memory}"
            + (" plus what the running nodes have not allocated yet" if need > len(starting) * mem else "")
            + f" need {mib(need)} MiB + {SHM_MARGIN_MIB} MiB margin, but only {mib(free)} MiB "
            f"of its {mib(total)} MiB are free. QEMU would die of SIGBUS (nothing logged) when a "
            f"guest touches memory that does not fit.\nFix: use fewer nodes or less --memory, free "
            f"space there (other clusters: `rackemu cluster down`), enlarge it (as root: "
            f"`mount -o remount,size={size} {mount}`), or point shm_dir in the cluster's config at "
            f"a larger tmpfs")

    def node_argv(self, i: int) -> list[str]:
        c, d = self.config, self.run_dir
        machine = c.machine + ",memory-backend=ram"
        if c.fabric:
            # ram-dir: one-sided accesses copy straight from/to a live peer's RAM file
            # (docs/fabric.md, "Direct path"); qemu_args "-machine ram-dir=" turns that off
            machine += (f",node-id={i},node-count={c.nodes},fabric={d / 'fabric.sock'}"
                        f",ram-dir={self.ram_dir}")
            # the node's virtio-net NIC on the fabric port (docs/networking.md)
            machine += (f",net=on,net-mtu={c.net_mtu},stack-roce={c.stack_roce}" if c.net
                        else ",net=off")
        append = f"console=ttyAMA0 rackemu.node={i}"
        if c.kernel_cmdline:
            append += " " + c.kernel_cmdline
        return [str(c.qemu), "-M", machine, "-cpu", c.cpu, "-smp", str(c.vcpus),
                "-m", c.memory, "-nographic", "-monitor", "none",
                "-object", f"memory-backend-file,id=ram,size={c.memory},share=on,"
                           f"mem-path={self.ram_path(i)}",
                "-nic", "none",  # virt's default NIC needs an option ROM the source package lacks
                "-name", f"rackemu-{c.name}-node{i}",
                "-serial", f"file:{d / f'node{i}.console'}",
                "-kernel", str(c.kernel_image()), "-initrd", str(c.initrd),
                "-append", append,
                "-chardev", f"socket,id=agent,path={d / f'node{i}.agent'},server=on,wait=off",
                "-device", "virtio-serial-device",
                "-device", "virtserialport,chardev=agent,name=rackemu.agent",
                "-qmp", f"unix:{d / f'node{i}.qmp'},server=on,wait=off",
                "-pidfile", str(d / f"node{i}.pid"),
                *self.insn_args(i),
                *c.rnic_args(),
                *c.qemu_args]

    def insn_path(self, i: int) -> Path:
        """Where node i's instruction-count plugin writes its counters (docs/insn-count.md)."""
        return self.run_dir / f"node{i}.insn.json"

    def insn_args(self, i: int) -> list[str]:
        if not self.config.insn_count:
            return []
        return ["-plugin", f"{self.config.insn_plugin()},out={self.insn_path(i)}"]

    def _start_bridge(self) -> None:
        log_path = self.run_dir / "bridge.log"
        self.bridge = self._spawn(self.bridge_argv(), log_path)
        self.save_state()
        deadline = time.monotonic() + BRIDGE_START_TIMEOUT
        while True:
            try:
                text = log_path.read_text(errors="replace")
            except OSError:
                text = ""
            if BRIDGE_READY_LINE in text and (self.run_dir / "fabric.sock").exists():
                break
            if not self.bridge.alive():
                raise ClusterError(f"the fabric bridge {self.bridge.exit_status()} before it was "
                                   f"ready; its log ({log_path}):\n{_indent(_tail(text, 20))}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the fabric bridge did not print {BRIDGE_READY_LINE!r} within "
                                   f"{BRIDGE_START_TIMEOUT:.0f} s; its log ({log_path}):\n"
                                   f"{_indent(_tail(text, 20))}")
            time.sleep(0.05)
        self.log(f"bridge ready (pid {self.bridge.pid}, control socket {self.run_dir / 'bridge.ctl'})")

    def start_node(self, i: int, extra_args: Iterable[str] = (), keep_ram: bool = False) -> Node:
        """Start (or restart) node i's QEMU; does not wait for the guest. `extra_args` go after
        the node's usual command line (a restore adds `-incoming ...`). keep_ram: the node's RAM
        file was made for this QEMU (a restore copied the snapshot's RAM image into it), keep it."""
        n = self.node(i)
        if n.alive():
            raise ClusterError(f"node {i} is already running (pid {n.pid})")
        for p in (n.agent_path, n.qmp_path, n.pid_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        self._prepare_ram_dir()
        # A fresh file: QEMU would otherwise map the previous incarnation's memory as is.
        if not keep_ram:
            self.ram_path(i).unlink(missing_ok=True)
        n.phases = {k: v for k, v in n.phases.items() if k.startswith("ram")} if keep_ram else {}
        n.phases["spawn"] = time.monotonic()
        n.proc = self._spawn(self.node_argv(i) + list(extra_args), n.log_path)
        n.phases["spawned"] = time.monotonic()
        n.state = "starting"
        n.snapshot = None
        n.boot_seconds = None
        n.started_at = time.time()
        n._t0 = time.monotonic()
        self.save_state()
        self.log(f"node {i}: QEMU started (pid {n.pid}), console {n.console_path}")
        return n

    def wait_agents(self, nodes: list[Node] | None = None, timeout: float | None = None,
                    progress_every: float = 10.0) -> None:
        """Wait until every given node's guest agent answers a ping; fail fast if a QEMU dies."""
        nodes = list(self.nodes if nodes is None else nodes)
        timeout = self.config.boot_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        stop = threading.Event()
        done: dict[int, float] = {}
        errors: list[BaseException] = []
        lock = threading.Lock()

        def waiter(n: Node) -> None:
            start = n._t0 if n._t0 is not None else t0
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    if not n.alive():
                        return
                    remaining = deadline - time.monotonic()
                    if n.ping(timeout=max(0.5, min(10.0, remaining))):
                        n.phases.setdefault("agent", time.monotonic())
                        with lock:
                            done[n.id] = time.monotonic() - start
                        return
                    stop.wait(0.5)
            except BaseException as e:   # e.g. the agent client cannot be imported
                with lock:
                    errors.append(e)

        threads = [threading.Thread(target=waiter, args=(n,), daemon=True,
                                    name=f"rackemu-wait-node{n.id}") for n in nodes]
        for t in threads:
            t.start()
        reported: set[int] = set()
        next_progress = time.monotonic() + progress_every
        try:
            while True:
                with lock:
                    newly = [(i, s) for i, s in done.items() if i not in reported]
                for i, secs in sorted(newly):
                    n = self.node(i)
                    n.state, n.boot_seconds = "running", round(secs, 2)
                    reported.add(i)
                    self.log(f"node {i}: agent answered after {secs:.1f} s")
                    self.save_state()
                if len(reported) == len(nodes):
                    return
                if errors:
                    raise errors[0]
                for n in nodes:
                    if n.id not in reported and not n.alive():
                        n.state = "dead"
                        self.save_state()
                        raise ClusterError(
                            f"node {n.id}'s QEMU {n.proc.exit_status() if n.proc else 'is gone'} "
                            f"before its agent answered.\n"
                            f"QEMU output ({n.log_path}):\n{_indent(n.log_tail(15)) or '    (empty)'}\n"
                            f"console ({n.console_path}):\n{_indent(n.console_tail(15)) or '    (empty)'}")
                now = time.monotonic()
                if now >= deadline:
                    waiting = [n for n in nodes if n.id not in reported]
                    lines = [f"  node {n.id}: last console line: {n.last_console_line()!r}"
                             for n in waiting]
                    raise ClusterError(
                        f"timed out after {timeout:.0f} s waiting for the guest agent on node(s) "
                        f"{', '.join(str(n.id) for n in waiting)} (boot_timeout; raise it with "
                        f"--boot-timeout or in the config)\n" + "\n".join(lines) +
                        "\nconsoles: " + ", ".join(str(n.console_path) for n in waiting))
                if now >= next_progress:
                    next_progress = now + progress_every
                    waiting = [n for n in nodes if n.id not in reported]
                    ids = ",".join(str(n.id) for n in waiting)
                    last = waiting[0].last_console_line()
                    self.log(f"{now - t0:4.0f} s: waiting for the agent on node(s) {ids}"
                             + (f" (node {waiting[0].id}: {_shorten(last, 70)!r})" if last else ""))
                time.sleep(0.1)
        finally:
            stop.set()

    def up(self) -> "Cluster":
        """Start the bridge and every node, wait for every agent. On any failure or Ctrl-C,
        everything started is stopped again before the exception propagates."""
        c = self.config
        c.check_artefacts()
        self._check_host_memory()
        self._acquire_lock()
        try:
            self._refuse_if_live()
            self._clean_run_dir()
            self._prepare_ram_dir()
            self._check_ram_space(self.nodes)
            self.created = time.time()
            self.status = "starting"
            self.bridge = None
            for n in self.nodes:
                n.proc, n.state, n.boot_seconds = None, "stopped", None
            self.save_state()
            self.log(f"cluster {c.name!r}: {c.nodes} node(s), {c.memory} and {c.vcpus} vCPU(s) "
                     f"each, machine {c.machine}, run dir {self.run_dir}")
            try:
                if c.fabric:
                    self._start_bridge()
                if c.snapshot != "off":     # boot from (and fill) the snapshot cache
                    from .snapcache import start_nodes
                    start_nodes(self, c.snapshot)
                else:
                    for i in range(c.nodes):
                        self.start_node(i)
                    self.log(f"waiting for {c.nodes} guest agent(s) (TCG boot takes ~5-20 s a "
                             f"node; timeout {c.boot_timeout:.0f} s)")
                    self.wait_agents()
            except BaseException:
                self.status = "failed"
                with _no_interrupts():
                    self.log("stopping what was started")
                    self._stop_all(final_status="failed")
                raise
            self.status = "up"
            self.save_state()
            return self
        finally:
            self._release_lock()

    # ---- down ----

    def _stop_all(self, final_status: str = "down") -> list[Proc]:
        node_procs = [n.proc for n in self.nodes if n.proc]
        survivors = stop_procs(node_procs)
        if self.bridge:
            survivors += stop_procs([self.bridge])
        # Anything started by a launcher that died before recording it.
        strays = [Proc(pid, proc_starttime(pid), argv, "") for pid, argv in self.find_strays()]
        strays += [p for p in self._pidfile_procs() if p.pid not in {s.pid for s in strays}]
        if strays:
            self.log("stopping unrecorded processes: " + ", ".join(str(p.pid) for p in strays))
            survivors += stop_procs(strays)
        for n in self.nodes:
            n.state = "stopped"
        if self.run_dir.is_dir():
            self._clean_run_dir()
        elif owned_private_dir(self.ram_dir):
            for f in self.ram_dir.glob("node*.ram"):
                f.unlink(missing_ok=True)
            try:
                self.ram_dir.rmdir()
            except OSError:
                pass
        self.status = final_status
        if self.run_dir.is_dir():
            try:
                self.save_state()
            except ClusterError as e:   # the processes are stopped: that is what matters here
                self.log(f"warning: {e}")
        return survivors

    def down(self) -> None:
        """Stop every node and the bridge (TERM, then KILL), remove sockets and pid files.
        Idempotent; works on a cluster started by another process (Cluster.attach)."""
        with _no_interrupts():
            survivors = self._stop_all()
        if survivors:
            raise ClusterError("could not stop: " + ", ".join(str(p.pid) for p in survivors))

    def kill_node(self, i: int) -> None:
        """SIGKILL node i's QEMU (failure tests). The bridge and the other nodes keep running."""
        n = self.node(i)
        if not n.alive():
            raise ClusterError(f"node {i} is not running")
        assert n.proc is not None  # alive()
        try:
            os.killpg(n.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        n.proc.wait_gone(KILL_WAIT)
        n.state = "killed"
        for p in (n.agent_path, n.qmp_path, n.pid_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        self.save_state()
        self.log(f"node {i}: killed")

    def _require_running_cluster(self) -> None:
        if self.status in ("down", "failed") or (not self.live_procs() and
                                                 self.status not in ("up", "degraded", "starting")):
            raise ClusterError(f"cluster {self.config.name!r} is not running (status: "
                               f"{self.status}); start it with `rackemu cluster up`")
        if not self.live_procs():
            raise ClusterError(f"cluster {self.config.name!r} has no process left running "
                               f"(status: dead); stop it with `rackemu cluster down"
                               f"{self.cli_select()}` and start it again with `rackemu cluster up`")

    def _settle_status(self) -> None:
        """Back to `up` once every node runs (and the bridge, if any); saved."""
        ok = all(n.alive() and n.state == "running" for n in self.nodes) and \
            (not self.config.fabric or (self.bridge is not None and self.bridge.alive()))
        if ok and self.status in ("up", "degraded", "dead", "starting"):
            self.status = "up"
        self.save_state()

    def restart_node(self, i: int, timeout: float | None = None) -> Node:
        """(Re)start node i's QEMU with the cluster's configuration and wait for its agent.
        A running node is stopped first (SIGTERM, then SIGKILL): its guest state is lost.
        Its guest RAM file is recreated empty. Needs the bridge running (the node joins the
        fabric under its id again, once the bridge has seen the old QEMU's connection close:
        _clear_node_for_rejoin). If the agent does not answer within `timeout` (the
        config's boot_timeout), the node is stopped again and ClusterError raised."""
        n = self.node(i)
        self._require_running_cluster()
        if self.config.fabric and not (self.bridge and self.bridge.alive()):
            raise ClusterError(f"the fabric bridge of cluster {self.config.name!r} is not running, "
                               f"so node {i} could not join the fabric; restart it first with "
                               f"`rackemu bridge restart{self.cli_select()}`")
        self._acquire_lock()
        try:
            if n.alive():
                self.log(f"node {i}: stopping QEMU (pid {n.pid})")
            self._clear_node_for_rejoin(n)
            self._check_ram_space([n])
            self.start_node(i)
            try:
                self.wait_agents([n], timeout=timeout)
            except BaseException:
                with _no_interrupts():
                    if n.proc and n.alive():
                        stop_procs([n.proc])
                    if n.state != "dead":
                        n.state = "stopped"
                    self.ram_path(i).unlink(missing_ok=True)
                    self.save_state()
                raise
            self._settle_status()
        finally:
            self._release_lock()
        return n

    def _stop_node(self, n: Node) -> None:
        """Stop node n's QEMU if it runs (TERM, then KILL) and forget its sockets, pid file,
        guest-RAM file and this process's agent connection to it; saved."""
        if n.proc is not None and n.alive():
            if stop_procs([n.proc]):
                raise ClusterError(f"node {n.id}'s QEMU (pid {n.pid}) survived SIGKILL")
        n.state = "stopped"
        for p in (n.agent_path, n.qmp_path, n.pid_path):
            p.unlink(missing_ok=True)
        self.ram_path(n.id).unlink(missing_ok=True)
        _forget_agent(n)
        self.save_state()

    def wait_port_down(self, i: int, timeout: float = PORT_DOWN_TIMEOUT) -> None:
        """Wait until the bridge reports node i's port not up: it has seen the old QEMU's
        fabric connection close."""
        deadline = time.monotonic() + timeout
        while True:
            ports = {p.get("node"): p.get("state") for p in self.bridge_stats().get("ports", [])}
            if ports.get(i) != "up":
                return
            if time.monotonic() >= deadline:
                raise ClusterError(f"the fabric bridge still reports node {i} connected "
                                   f"{timeout:.0f} s after its QEMU stopped; see "
                                   f"{self.run_dir / 'bridge.log'}")
            time.sleep(0.05)

    def _clear_node_for_rejoin(self, n: Node) -> None:
        """Before a new QEMU takes node n's id (restart_node, restore_node): stop the old one
        (_stop_node) and, with a fabric, wait until the bridge has seen its connection close.
        The bridge refuses a handshake under an id it still sees connected (DUPLICATE,
        docs/fabric.md "Handshake") and the refused QEMU exits; a QEMU killed a moment ago
        (or by `node kill`) may not have been noticed yet."""
        self._stop_node(n)
        if self.config.fabric:
            self.wait_port_down(n.id)

    # ---- save and restore (snapshot.py) ----

    def save_node(self, i: int, path: str | os.PathLike, stop: bool = False, force: bool = False,
                  timeout: float | None = None) -> dict[str, Any]:
        """Save node i's whole state (RAM, CPUs, devices) to `path` and its metadata to
        `path`.meta.json; the node runs on afterwards, or is stopped with stop=True. Returns
        the metadata. See rackemu.snapshot.save_node."""
        from .snapshot import save_node
        return save_node(self, i, path, stop=stop, force=force, timeout=timeout)

    def restore_node(self, i: int, path: str | os.PathLike, verify: bool = True,
                     timeout: float | None = None, agent_timeout: float | None = None) -> Node:
        """Replace node i by the state saved in `path` (its QEMU is restarted on the same
        command line plus -incoming) and wait for its guest agent. See
        rackemu.snapshot.restore_node."""
        from .snapshot import restore_node
        return restore_node(self, i, path, verify=verify, timeout=timeout,
                            agent_timeout=agent_timeout)

    # ---- bridge ----

    def restart_bridge(self, reconnect_timeout: float | None = None) -> dict[int, str]:
        """Start the fabric bridge again (stopping it first if it still runs) with the same
        arguments, in the same run dir, and wait until the port of every running node has
        reconnected (each node's fabric port retries once a second; docs/fabric.md). The
        nodes keep running: their guests keep their state, but fabric operations in flight
        when the bridge died have failed. Returns {node: port state}; raises ClusterError
        naming the nodes that did not rejoin within `reconnect_timeout` seconds."""
        if not self.config.fabric:
            raise ClusterError(f"machine {self.config.machine!r} has no fabric bridge")
        self._require_running_cluster()
        timeout = PORT_RECONNECT_TIMEOUT if reconnect_timeout is None else reconnect_timeout
        self._acquire_lock()
        try:
            if self.bridge and self.bridge.alive():
                self.log(f"stopping the fabric bridge (pid {self.bridge.pid})")
                if stop_procs([self.bridge]):
                    raise ClusterError(f"the fabric bridge (pid {self.bridge.pid}) survived SIGKILL")
            log = self.run_dir / "bridge.log"
            if log.exists():    # keep the dead bridge's output for the post-mortem
                try:
                    os.replace(log, log.with_name("bridge.log.1"))
                except OSError as e:
                    raise ClusterError(f"cannot rotate {log}: {_os_error_text(e, self.run_dir)}") from None
            for sock in ("fabric.sock", "bridge.ctl"):
                (self.run_dir / sock).unlink(missing_ok=True)
            self._start_bridge()
            assert self.bridge is not None  # _start_bridge() set it
            bridge = self.bridge
            running = [n for n in self.nodes if n.alive()]
            deadline = time.monotonic() + timeout
            while True:
                try:
                    ports = {p.get("node"): p.get("state") for p in
                             self.bridge_stats(timeout=5.0).get("ports", [])}
                except ClusterError:
                    ports = {}
                missing = [n.id for n in running if ports.get(n.id) != "up"]
                if not missing:
                    break
                if not bridge.alive():
                    raise ClusterError(f"the restarted fabric bridge {bridge.exit_status()}; "
                                       f"its log: {log}")
                if time.monotonic() >= deadline:
                    raise ClusterError(
                        f"the fabric bridge runs again (pid {bridge.pid}) but node(s) "
                        f"{', '.join(map(str, missing))} did not reconnect within {timeout:.0f} s; "
                        f"restart them with `rackemu node restart N{self.cli_select()}` (their "
                        f"QEMU output: {', '.join(str(self.node(i).log_path) for i in missing)})")
                time.sleep(0.2)
            self.log(f"node(s) {', '.join(str(n.id) for n in running) or '-'} reconnected "
                     f"to the fabric")
            self._settle_status()
            return {n.id: ports.get(n.id, "-") for n in running}
        finally:
            self._release_lock()

    def bridge_stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """The bridge's `stats` answer: {"ports": [{node, state, frames_in, ...}], ...}."""
        return self.bridge_command("stats", timeout)

    def bridge_command(self, command: str, timeout: float = 5.0) -> dict[str, Any]:
        """One command on the bridge's control socket (docs/fabric.md, "Running the bridge"):
        `stats`, `fault add RULE`, `fault list`, `capture start ...`; its JSON answer (an
        {"error": ...} answer is returned as is: the caller reports it)."""
        if "\n" in command:
            raise ClusterError("a bridge command is one line")
        try:
            line = command.encode() + b"\n"
        except UnicodeEncodeError:
            raise ClusterError(f"a bridge command is UTF-8 text, not {ascii(command)[:200]}") from None
        if not self.config.fabric:
            raise ClusterError(f"machine {self.config.machine!r} has no fabric bridge")
        ctl = self.run_dir / "bridge.ctl"
        if not ctl.exists():
            raise ClusterError(f"no bridge control socket at {ctl} (is the cluster up?)")
        data = b""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(str(ctl))
                s.sendall(line)
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as e:
            raise ClusterError(f"bridge control socket {ctl}: {e}") from None
        try:
            return json.loads(data)
        except ValueError:
            raise ClusterError(f"the bridge answered `{command.split()[0]}` with something that is not JSON: "
                               f"{data[:200]!r}") from None

    # ---- status ----

    def status_dict(self, ping: bool = True, ping_timeout: float = 2.0) -> dict[str, Any]:
        """Live view: every process checked, every running node's agent pinged (in parallel)."""
        agent: dict[int, str] = {}

        def check(n: Node) -> None:
            if not n.alive():
                agent[n.id] = "-"
            elif n.proc is not None and n.proc.stopped():
                agent[n.id] = "QEMU stopped (SIGSTOP)"
            elif not ping:
                agent[n.id] = "?"
            else:
                try:
                    agent[n.id] = "ok" if n.ping(ping_timeout) else "no answer"
                except ClusterError as e:
                    agent[n.id] = f"error: {e}"

        threads = [threading.Thread(target=check, args=(n,), daemon=True) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        nodes = []
        for n in self.nodes:
            alive = n.alive()
            state = n.state if alive or n.state in ("killed", "stopped") else "dead"
            nodes.append({"node": n.id, "pid": n.pid if alive else None, "state": state,
                          "agent": agent[n.id], "boot_seconds": n.boot_seconds,
                          "snapshot": n.snapshot if alive else None,
                          "console": str(n.console_path)})
        bridge_alive = bool(self.bridge and self.bridge.alive())
        live = any(x["pid"] for x in nodes) or bridge_alive
        status = self.status
        expected = status in ("up", "degraded", "starting")   # processes should be running
        sel = self.cli_select()
        problems = []
        if self.config.fabric and expected and not bridge_alive and self.bridge is not None:
            problems.append(f"the fabric bridge is dead (see {self.run_dir / 'bridge.log'}): "
                            f"restart it with `rackemu bridge restart{sel}`")
        for x in nodes:
            if expected and x["state"] in ("dead", "killed", "stopped") and status != "starting":
                problems.append(f"node {x['node']} is {x['state']}: start it again with "
                                f"`rackemu node restart {x['node']}{sel}`")
            elif x["agent"] not in ("ok", "?", "-") and status != "starting":
                problems.append(f"node {x['node']}: agent {x['agent']}; see `rackemu console "
                                f"{x['node']}{sel}`, or `rackemu node restart {x['node']}{sel}`")
        if status == "up" and (not all(x["state"] == "running" for x in nodes) or problems):
            status = "degraded"
        if status in ("up", "degraded", "starting") and not live:
            status = "dead"
        bridge_state = ("running" if bridge_alive else "-" if not self.config.fabric
                        else "dead" if expected and self.bridge is not None else "stopped")
        return {"name": self.config.name, "run_dir": str(self.run_dir), "status": status,
                "created": self.created, "machine": self.config.machine,
                "memory": self.config.memory, "vcpus": self.config.vcpus,
                "bridge": {"pid": self.bridge.pid if self.bridge is not None and bridge_alive else None,
                           "state": bridge_state,
                           "log": str(self.run_dir / "bridge.log")},
                "ram_dir": str(self.ram_dir),
                "problems": problems,
                "nodes": nodes}


# ---------------------------------------------------------------- host files and directories

def default_ram_dir(config: ClusterConfig) -> Path:
    """shm_dir/rackemu-EUID-NAME-HASH: HASH is from the resolved run dir, so the same cluster
    name in two run dirs (or two users) never shares guest-RAM files."""
    key = hashlib.sha256(os.fsencode(os.path.realpath(config.run_dir))).hexdigest()[:12]
    return config.shm_dir / f"rackemu-{os.geteuid()}-{config.name}-{key}"


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _check_ancestors(path: Path, what: str) -> None:
    """Every existing directory above `path` must be owned by root or us, and if others may
    write to it, sticky (like /tmp and /dev/shm): otherwise its owner (or anyone) could rename
    our directory away and put their own in its place."""
    for parent in reversed(path.parents):
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            return
        except OSError as e:
            raise ClusterError(f"{what} {path}: cannot check {parent}: {e.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ClusterError(f"{what} {path} cannot be created: {parent} is a file, not a "
                               f"directory")
        if not _trusted_owner(st.st_uid):
            raise ClusterError(f"{what} {path}: {parent} belongs to uid {st.st_uid}, who could "
                               f"replace what rackemu puts in it; use a directory of yours")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise ClusterError(f"{what} {path}: {parent} is writable by other users (mode "
                               f"{stat.S_IMODE(st.st_mode):04o}) without the sticky bit, so they "
                               f"could replace what rackemu puts in it; use another directory")


def prepare_private_dir(path: Path, what: str, create_parents: bool) -> None:
    """Create `path` with mode 0700 (parents 0755 if asked), or accept an existing one only if
    it is a real directory (not a symlink) owned by us that no one else can write to (for
    the guest-RAM directory: that no one else can even read). Refuse anything else with a
    ClusterError that says what to do."""
    _check_ancestors(path, what)
    try:
        if create_parents:
            for parent in reversed(path.parents):
                if not parent.exists():
                    os.mkdir(parent, 0o755)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except NotADirectoryError:
        raise ClusterError(f"{what} {path} cannot be created: a part of that path is a file, "
                           f"not a directory") from None
    except OSError as e:
        raise ClusterError(f"cannot create {what} {path}: {_os_error_text(e, path.parent)}") from None
    verify_private_dir(path, what)


def verify_private_dir(path: Path, what: str) -> None:
    """Refuse (ClusterError) a directory that is not a real directory owned by us, that others
    may write to (for the guest-RAM directory: read), or whose parents others control."""
    _check_ancestors(path, what)
    try:
        st = os.lstat(path)
    except OSError as e:
        raise ClusterError(f"{what} {path}: {e.strerror}") from None
    private = what == "guest-RAM directory"
    if stat.S_ISLNK(st.st_mode):
        raise ClusterError(f"{what} {path} is a symbolic link; rackemu does not follow it "
                           f"(remove it)")
    if not stat.S_ISDIR(st.st_mode):
        raise ClusterError(f"{what} {path} exists and is not a directory")
    if st.st_uid != os.geteuid():
        raise ClusterError(
            f"{what} {path} exists and belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); "
            + ("its owner could read and change the guests' memory. " if private else
               "its owner could read the consoles and replace the sockets. ")
            + f"Refusing to use it: remove it (as root: rm -r {shlex.quote(str(path))})"
            + ("" if private else " or choose another --run-dir"))
    bad = 0o077 if private else 0o022
    if st.st_mode & bad:
        raise ClusterError(
            f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}: other users could "
            + ("read the guests' memory" if private else "replace its sockets and files")
            + f". Refusing to use it: remove it, or `chmod 700 {shlex.quote(str(path))}`")


def owned_private_dir(path: Path) -> bool:
    """True if `path` is a real directory (not a symlink) that we own and only we can use:
    the only kind of guest-RAM directory rackemu puts files in, and so cleans up."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def mount_point(path: Path) -> str:
    """The mount point of the file system holding `path` (for `mount -o remount` hints)."""
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _forget_agent(n: Node) -> None:
    """Drop this process's shared agent connection of the node: the next request connects to
    the new QEMU's socket."""
    try:
        from .agent import AgentClient
    except ImportError:
        return
    with AgentClient._shared_lock:
        c = AgentClient._shared.pop(str(n.agent_path), None)
    if c is not None:
        c.close()


def _write_atomic(path: Path, text: str) -> None:
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


def _os_error_text(e: OSError, where: Path) -> str:
    """An OSError in words, with what to do for the ones a person can fix."""
    text = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        text += f" (the file system holding {where} is full: free space there, see `df {where}`)"
    elif e.errno == errno.EROFS:
        text += f" ({where} is on a read-only file system: choose another --run-dir)"
    elif e.errno in (errno.EACCES, errno.EPERM):
        text += f" (no permission in {where}: choose another --run-dir)"
    return text


# ---------------------------------------------------------------- small helpers

class _no_interrupts:
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


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + ln for ln in text.splitlines())


def _shorten(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def command_string(cmd: str | list[str]) -> str:
    return cmd if isinstance(cmd, str) else shlex.join(cmd)
