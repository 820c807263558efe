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

Cluster is the orchestrator: it calls the modules below it and none of them imports it
(docs/launcher.md, "Module layout"): node.py (a node and its guest agent), procs.py (process
identity, spawning, stopping), hostdirs.py (trusted directories, the run lock, host memory and
guest-RAM space), cmdline.py (command lines), bridgectl.py (the bridge's control socket),
status.py (the live status view), snapshot.py (one node's state to a file and back: save_node
and restore_node below drive it), snapboot.py (boot from the snapshot cache), base.py
(ClusterError and small helpers).

`down` (and a failed or interrupted `up`) sends SIGTERM to every group, waits, sends SIGKILL to
what is left, waits again, then removes the sockets and pid files. Logs and consoles stay for
post-mortems. Because the state is on disk, `status`, `exec` and `down` work from any process
(Cluster.attach). A cluster started from Python (not detached) additionally asks the kernel to
SIGKILL its QEMUs and bridge when the starting thread dies (PR_SET_PDEATHSIG), so a killed
pytest leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from .base import Background, ClusterError, no_interrupts, os_error_text, write_atomic
from .bridgectl import bridge_command, wait_bridge_ready, wait_port_down, wait_ports_up
from .cmdline import bridge_argv, insn_path, node_argv
from .config import RUN_BASE, ClusterConfig
from .hostdirs import (RunLock, check_host_memory, check_ram_space, clean_run_dir, default_ram_dir,
                       prepare_private_dir, remove_ram_files, verify_private_dir)
from .node import AGENT_CHECK_TIMEOUT, Node, run_background, wait_for_agents
from .procs import (KILL_WAIT, TERM_GRACE, Proc, find_strays, pidfile_procs, proc_alive, proc_starttime, proc_state,
                    spawn, stop_procs)
from .qmp import device_path
from .snapboot import start_nodes
from .snapshot import (LOAD_TIMEOUT, SnapshotError, check_restorable, check_save_path, load_and_resume,
                       make_ram_file, ram_image_path, write_snapshot)
from .status import status_view

# Names other code imports from here (the package's public entry point): the error, a node,
# a process, a call in a thread and the process helpers of tests and benches.
__all__ = ["AGENT_CHECK_TIMEOUT", "Background", "Cluster", "ClusterError", "KILL_WAIT", "Node", "Proc",
           "STATE_FILE", "STATE_VERSION", "TERM_GRACE", "proc_alive", "proc_starttime", "proc_state",
           "run_background"]

STATE_FILE = "state.json"
STATE_VERSION = 1
PORT_RECONNECT_TIMEOUT = 20.0  # `bridge restart`: how long the nodes' ports may take to rejoin
PORT_DOWN_TIMEOUT = 10.0  # the bridge noticing that a stopped QEMU's fabric connection closed


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
        self._lock = RunLock(self.run_dir)
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
                write_atomic(self.state_path, json.dumps(self.to_dict(), indent=2) + "\n")
            except OSError as e:
                raise ClusterError(f"cannot write the cluster's state file {self.state_path}: "
                                   f"{os_error_text(e, self.run_dir)}") from None

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
        return find_strays(self.run_dir, {str(self.config.qemu), str(self.config.bridge)},
                           {p.pid for p in self.all_procs() if p.alive()})

    def _pidfile_procs(self) -> list[Proc]:
        return pidfile_procs([(n.pid_path, n.log_path) for n in self.nodes], self.run_dir)

    # ---- up ----

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
        remove_ram_files(self.ram_dir, keep={n.id for n in self.nodes if n.alive()})
        clean_run_dir(self.run_dir, STATE_FILE + ".tmp")

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
        """hostdirs.check_ram_space for the nodes `starting`, beside the running ones."""
        check_ram_space(self.config, self.ram_path, [n.id for n in starting],
                        [n.id for n in self.nodes if n.alive()])

    def bridge_argv(self) -> list[str]:
        return bridge_argv(self.config, self.run_dir)

    def node_argv(self, i: int) -> list[str]:
        return node_argv(self.config, self.run_dir, self.ram_dir, i)

    def insn_path(self, i: int) -> Path:
        """Where node i's instruction-count plugin writes its counters (docs/insn-count.md)."""
        return insn_path(self.run_dir, i)

    def _start_bridge(self) -> None:
        log_path = self.run_dir / "bridge.log"
        self.bridge = spawn(self.bridge_argv(), log_path, self.run_dir, self.detach)
        self.save_state()
        wait_bridge_ready(self.bridge, log_path, self.run_dir)
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
        if self.config.pmem_mib:
            # the durable images live on (docs/pmem.md); QEMU creates or reuses node<i>.pmem
            pdir = self.config.pmem_image(i).parent
            try:
                pdir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ClusterError(f"pmem_dir {pdir}: cannot create it: {os_error_text(e, pdir)}") from None
        # A fresh file: QEMU would otherwise map the previous incarnation's memory as is.
        if not keep_ram:
            self.ram_path(i).unlink(missing_ok=True)
        n.phases = {k: v for k, v in n.phases.items() if k.startswith("ram")} if keep_ram else {}
        n.phases["spawn"] = time.monotonic()
        n.proc = spawn(self.node_argv(i) + list(extra_args), n.log_path, self.run_dir, self.detach)
        n.phases["spawned"] = time.monotonic()
        n.state = "starting"
        n.snapshot = None
        n.boot_seconds = None
        n.started_at = time.time()
        n.t0 = time.monotonic()
        self.save_state()
        self.log(f"node {i}: QEMU started (pid {n.pid}), console {n.console_path}")
        return n

    def wait_agents(self, nodes: list[Node] | None = None, timeout: float | None = None,
                    progress_every: float = 10.0) -> None:
        """Wait until every given node's guest agent answers a ping; fail fast if a QEMU dies
        (node.wait_for_agents)."""
        wait_for_agents(list(self.nodes if nodes is None else nodes),
                        self.config.boot_timeout if timeout is None else timeout,
                        self.log, self.save_state, progress_every)

    def up(self) -> "Cluster":
        """Start the bridge and every node, wait for every agent. On any failure or Ctrl-C,
        everything started is stopped again before the exception propagates."""
        c = self.config
        c.check_artefacts()
        check_host_memory(c)
        self._lock.acquire()
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
                    start_nodes(self, c.snapshot)
                else:
                    for i in range(c.nodes):
                        self.start_node(i)
                    self.log(f"waiting for {c.nodes} guest agent(s) (TCG boot takes ~5-20 s a "
                             f"node; timeout {c.boot_timeout:.0f} s)")
                    self.wait_agents()
            except BaseException:
                self.status = "failed"
                with no_interrupts():
                    self.log("stopping what was started")
                    self._stop_all(final_status="failed")
                raise
            self.status = "up"
            self.save_state()
            return self
        finally:
            self._lock.release()

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
        else:
            remove_ram_files(self.ram_dir)
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
        with no_interrupts():
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

    def require_running(self) -> None:
        """ClusterError with what to do unless the cluster is up (possibly degraded)."""
        if self.status in ("down", "failed") or (not self.live_procs() and
                                                 self.status not in ("up", "degraded", "starting")):
            raise ClusterError(f"cluster {self.config.name!r} is not running (status: "
                               f"{self.status}); start it with `rackemu cluster up`")
        if not self.live_procs():
            raise ClusterError(f"cluster {self.config.name!r} has no process left running "
                               f"(status: dead); stop it with `rackemu cluster down"
                               f"{self.cli_select()}` and start it again with `rackemu cluster up`")

    def settle_status(self) -> None:
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
        clear_for_rejoin). If the agent does not answer within `timeout` (the
        config's boot_timeout), the node is stopped again and ClusterError raised."""
        n = self.node(i)
        self.require_running()
        if self.config.fabric and not (self.bridge and self.bridge.alive()):
            raise ClusterError(f"the fabric bridge of cluster {self.config.name!r} is not running, "
                               f"so node {i} could not join the fabric; restart it first with "
                               f"`rackemu bridge restart{self.cli_select()}`")
        self._lock.acquire()
        try:
            if n.alive():
                self.log(f"node {i}: stopping QEMU (pid {n.pid})")
            self.clear_for_rejoin(n)
            self._check_ram_space([n])
            self.start_node(i)
            try:
                self.wait_agents([n], timeout=timeout)
            except BaseException:
                with no_interrupts():
                    if n.proc and n.alive():
                        stop_procs([n.proc])
                    if n.state != "dead":
                        n.state = "stopped"
                    self.ram_path(i).unlink(missing_ok=True)
                    self.save_state()
                raise
            self.settle_status()
        finally:
            self._lock.release()
        return n

    def powercut_node(self, i: int, pick: str = "none", seed: int = 1) -> dict[str, int]:
        """Cut node i's power now (docs/pmem.md, "The power cut"): its vCPUs stop, the model
        keeps the durable bytes plus the pending lines `pick` chooses (none, all, random with
        `seed`) in the node's durable image, and its QEMU is ended: the node is off until
        `restart_node` boots it on that image. Returns the model's counters after the cut
        (lost_bytes, lost_lines, lost_nic: what was lost)."""
        n = self.node(i)
        if not self.config.pmem_mib:
            raise ClusterError(f"node {i} has no persistent memory (pmem = 0 in cluster "
                               f"{self.config.name!r}); nothing to cut")
        if pick not in ("none", "all", "random"):
            raise ClusterError(f"--pick {pick!r}: use none, all or random")
        if not 0 <= seed < 2**64:
            raise ClusterError(f"--seed {seed}: expected an integer from 0 to 2**64-1")
        if not n.alive():
            raise ClusterError(f"node {i} is not running (state {n.state}); start it with "
                               f"`rackemu node restart {i}{self.cli_select()}`")
        value = f"random:{seed}" if pick == "random" else pick
        self._lock.acquire()
        try:
            with n.qmp() as qmp:
                path = device_path(qmp, "rackemu-pmem")
                qmp.execute("qom-set", path=path, property="power-cut", value=value)
                text = qmp.execute("qom-get", path=path, property="counters")
            counters = {k: int(v) for k, v in (kv.split("=", 1) for kv in text.split(",") if kv)}
            self.stop_node(n)   # state "stopped": `node restart` boots it on the image
            self.log(f"node {i}: power cut (pick {value}); image {self.config.pmem_image(i)}")
        finally:
            self._lock.release()
        return counters

    def stop_node(self, n: Node) -> None:
        """Stop node n's QEMU if it runs (TERM, then KILL) and forget its sockets, pid file,
        guest-RAM file and this process's agent connection to it; saved."""
        if n.proc is not None and n.alive():
            if stop_procs([n.proc]):
                raise ClusterError(f"node {n.id}'s QEMU (pid {n.pid}) survived SIGKILL")
        n.state = "stopped"
        for p in (n.agent_path, n.qmp_path, n.pid_path):
            p.unlink(missing_ok=True)
        self.ram_path(n.id).unlink(missing_ok=True)
        n.forget_agent()
        self.save_state()

    def wait_port_down(self, i: int, timeout: float = PORT_DOWN_TIMEOUT) -> None:
        """Wait until the bridge reports node i's port not up: it has seen the old QEMU's
        fabric connection close."""
        wait_port_down(self.config, self.run_dir, i, timeout)

    def clear_for_rejoin(self, n: Node) -> None:
        """Before a new QEMU takes node n's id (restart_node, restore_node): stop the old one
        (stop_node) and, with a fabric, wait until the bridge has seen its connection close.
        The bridge refuses a handshake under an id it still sees connected (DUPLICATE,
        docs/fabric.md "Handshake") and the refused QEMU exits; a QEMU killed a moment ago
        (or by `node kill`) may not have been noticed yet."""
        self.stop_node(n)
        if self.config.fabric:
            self.wait_port_down(n.id)

    # ---- save and restore (snapshot.py does the work) ----

    def save_node(self, i: int, path: str | os.PathLike, stop: bool = False, force: bool = False,
                  timeout: float | None = None) -> dict[str, Any]:
        """Save node i's whole state (RAM, CPUs, devices) to `path` (+ `path`.ram, the guest RAM
        image) and its metadata to `path`.meta.json; return the metadata. The node's vCPUs are
        stopped while QEMU writes the stream; afterwards the node runs on (or, with stop=True,
        its QEMU is stopped: restore it later with restore_node). snapshot.write_snapshot."""
        path = Path(path).absolute()
        n = self.node(i)
        self.require_running()
        if not n.alive():
            sel = self.cli_select()
            raise SnapshotError(f"node {i} is not running (state: {n.state}): there is nothing to save; "
                                f"bring it back with `rackemu node restore {i} FILE{sel}` or "
                                f"`rackemu node restart {i}{sel}`")
        n.check_reachable()
        check_save_path(path, force)
        self._lock.acquire()
        try:
            meta = write_snapshot(n, self.config, self.run_dir, self.ram_path(i), path, self.log,
                                  stop=stop, timeout=timeout)
            if stop:
                self.stop_node(n)
                self.log(f"node {i}: QEMU stopped; restore it with `rackemu node restore {i} "
                         f"{shlex.quote(str(path))}{self.cli_select()}`")
            return meta
        finally:
            self._lock.release()

    def restore_node(self, i: int, path: str | os.PathLike, verify: bool = True,
                     timeout: float | None = None, agent_timeout: float | None = None) -> Node:
        """Replace node i (running or not) by the state saved in `path`: stop its QEMU, start a
        new one on the same command line plus `-incoming defer` on a RAM file made from the
        snapshot's image, load the snapshot, resume its vCPUs and wait until its guest agent
        answers again. QEMU refusing the stream raises SnapshotError with QEMU's words; the node
        is then stopped (restart it or restore another snapshot)."""
        timeout = LOAD_TIMEOUT if timeout is None else timeout
        agent_timeout = 60.0 if agent_timeout is None else agent_timeout
        path = Path(path).absolute()
        n = self.node(i)
        self.require_running()
        if self.config.fabric and not (self.bridge and self.bridge.alive()):
            raise SnapshotError(f"the fabric bridge of cluster {self.config.name!r} is not running, "
                                f"so node {i} could not rejoin the fabric; restart it first with "
                                f"`rackemu bridge restart{self.cli_select()}`")
        check_restorable(self.config, i, path, verify=verify)
        self._lock.acquire()
        t0 = time.monotonic()
        try:
            if n.alive():
                self.log(f"node {i}: stopping the running QEMU (pid {n.pid}); its state is replaced")
            self.clear_for_rejoin(n)
            self._check_ram_space([n])
            how = make_ram_file(n, self.ram_path(i), self.config.memory_mib << 20, path)
            self.start_node(i, extra_args=["-incoming", "defer"], keep_ram=True)
            n.snapshot = str(path)
            try:
                self.log(f"node {i}: RAM made from {ram_image_path(path).name} ({how}); loading {path}")
                load_and_resume(n, timeout, path, self.cli_select())
                self.log(f"node {i}: state loaded and vCPUs resumed after "
                         f"{time.monotonic() - t0:.1f} s; waiting for its guest agent")
                self.wait_agents([n], timeout=agent_timeout)
            except BaseException:
                with no_interrupts():
                    if n.state != "dead":
                        self.stop_node(n)
                    else:
                        self.ram_path(i).unlink(missing_ok=True)
                        self.save_state()
                raise
            self.settle_status()
            self.log(f"node {i}: restored from {path} in {time.monotonic() - t0:.1f} s")
            return n
        finally:
            self._lock.release()

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
        self.require_running()
        timeout = PORT_RECONNECT_TIMEOUT if reconnect_timeout is None else reconnect_timeout
        self._lock.acquire()
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
                    raise ClusterError(f"cannot rotate {log}: {os_error_text(e, self.run_dir)}") from None
            for sock in ("fabric.sock", "bridge.ctl"):
                (self.run_dir / sock).unlink(missing_ok=True)
            self._start_bridge()
            assert self.bridge is not None  # _start_bridge() set it
            running = [n for n in self.nodes if n.alive()]
            ports = wait_ports_up(self.config, self.run_dir, self.bridge, {n.id: n.log_path for n in running},
                                  timeout, self.cli_select())
            self.log(f"node(s) {', '.join(str(n.id) for n in running) or '-'} reconnected "
                     f"to the fabric")
            self.settle_status()
            return ports
        finally:
            self._lock.release()

    def bridge_stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """The bridge's `stats` answer: {"ports": [{node, state, frames_in, ...}], ...}."""
        return self.bridge_command("stats", timeout)

    def bridge_command(self, command: str, timeout: float = 5.0) -> dict[str, Any]:
        """One command on the bridge's control socket (bridgectl.bridge_command)."""
        return bridge_command(self.config, self.run_dir, command, timeout)

    # ---- status ----

    def status_dict(self, ping: bool = True, ping_timeout: float = 2.0) -> dict[str, Any]:
        """Live view: every process checked, every running node's agent pinged (in parallel);
        status.status_view."""
        return status_view(self, ping, ping_timeout)
