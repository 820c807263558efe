"""One QEMU node of a cluster, and its guest agent (docs/launcher.md, "Python API").

A Node knows its files in the run directory (agent and QMP sockets, console, log, pid file), its
process, its state, and how to reach its guest: exec, put and get go through the guest agent
(agent.py), qmp() opens its QEMU's monitor (qmp.py). It asks the cluster that owns it
(NodeOwner: a Cluster) only for what a message needs: the cluster's status and how to name it
on the command line.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from .agent import AgentClient, AgentError, AgentUnreachable
from .base import Background, ClusterError, indent, shorten
from .config import ClusterConfig
from .procs import Proc
from .qmp import QMP_TIMEOUT, Qmp, connect_qmp

AGENT_CHECK_TIMEOUT = 10.0   # `rackemu exec`: how long the agent may take to answer a ping


class NodeOwner(Protocol):
    """What a Node asks of its cluster (cluster.Cluster is one)."""

    config: ClusterConfig
    run_dir: Path
    status: str

    def live_procs(self) -> list[Proc]: ...

    def cli_select(self) -> str: ...


# ---------------------------------------------------------------- the agent

def _agent_client_class() -> Any:
    """The agent client class (a test puts a fake one here)."""
    return AgentClient


def _agent_error_classes() -> tuple[tuple, tuple]:
    """(AgentUnreachable, AgentError) of rackemu.agent."""
    return (AgentUnreachable,), (AgentError,)


class Node:
    """One QEMU node of a cluster. exec/put/get/ping go through the guest agent's socket."""

    def __init__(self, cluster: NodeOwner, index: int):
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
        self.t0: float | None = None            # monotonic time of the QEMU start
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
            + (f" (last console line: {shorten(last, 100)!r})" if last else "") +
            f". See `rackemu console {self.id}{self.cluster.cli_select()}`; restart the node "
            f"with `rackemu node restart {self.id}{self.cluster.cli_select()}`")

    def with_agent(self, what: str, fn: Callable[[Any], Any]) -> Any:
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
        return self.with_agent("exec", lambda c: c.exec(cmd, timeout=timeout, stdin=stdin, env=env))

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
        return self.with_agent("put", lambda c: c.put(*args, **kwargs))

    def get(self, path: str, *args: Any, **kwargs: Any) -> Any:
        """Read a file from the guest (AgentClient.get)."""
        return self.with_agent("get", lambda c: c.get(path, *args, **kwargs))

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

    def check_agent(self) -> None:
        """Before a command: a node that cannot run it fails now with what to do, instead of
        after the command's timeout (+30 s) with a bare "no answer"."""
        self.check_reachable()
        if not self.ping(AGENT_CHECK_TIMEOUT):
            self.check_reachable()     # it may have died or been stopped meanwhile
            raise self.agent_problem(f"no answer to a ping within {AGENT_CHECK_TIMEOUT:g} s")

    def forget_agent(self) -> None:
        """Drop this process's shared agent connection of the node: the next request connects
        to the new QEMU's socket."""
        AgentClient.forget(str(self.agent_path))


def run_background(node: Node, cmd: str | list[str], **kwargs: Any) -> Background:
    """Start node.exec(cmd, **kwargs) in a thread; .result() gives the exec result."""
    return Background(node.exec, cmd, name=f"rackemu-node{node.id}-exec", **kwargs)


def wait_for_agents(nodes: list[Node], timeout: float, log: Callable[[str], None],
                    save_state: Callable[[], None], progress_every: float = 10.0) -> None:
    """Wait until every given node's guest agent answers a ping; fail fast if a QEMU dies.
    A node whose agent answers becomes "running" (with its boot time), one whose QEMU exits
    "dead"; `save_state` records each change, `log` gets the progress lines."""
    by_id = {n.id: n for n in nodes}
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    stop = threading.Event()
    done: dict[int, float] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def waiter(n: Node) -> None:
        start = n.t0 if n.t0 is not None else t0
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
                n = by_id[i]
                n.state, n.boot_seconds = "running", round(secs, 2)
                reported.add(i)
                log(f"node {i}: agent answered after {secs:.1f} s")
                save_state()
            if len(reported) == len(nodes):
                return
            if errors:
                raise errors[0]
            for n in nodes:
                if n.id not in reported and not n.alive():
                    n.state = "dead"
                    save_state()
                    raise ClusterError(
                        f"node {n.id}'s QEMU {n.proc.exit_status() if n.proc else 'is gone'} "
                        f"before its agent answered.\n"
                        f"QEMU output ({n.log_path}):\n{indent(n.log_tail(15)) or '    (empty)'}\n"
                        f"console ({n.console_path}):\n{indent(n.console_tail(15)) or '    (empty)'}")
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
                log(f"{now - t0:4.0f} s: waiting for the agent on node(s) {ids}"
                    + (f" (node {waiting[0].id}: {shorten(last, 70)!r})" if last else ""))
            time.sleep(0.1)
    finally:
        stop.set()
