"""Boot a cluster's nodes from the snapshot cache (docs/launcher.md, "Booting from snapshots").

Cluster.up calls start_nodes when the cluster's `snapshot` mode is not "off": the nodes with a
usable entry in the cache (snapcache.py: the key, the entries, their locks and size limit) get
their RAM file from the entry's image and load its device state (snapshot.py), the others boot
and are saved into the entry afterwards. snapcache.py's module comment has the whole story.
The cluster is handed in as a BootHost: this module starts, waits for and stops nodes through
it, and never imports the orchestrator.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Protocol

from .base import ClusterError, first_line
from .config import ClusterConfig
from .node import Node
from .snapcache import Entry, cache_key, cache_root, key_material, prune
from .snapshot import (LOAD_TIMEOUT, SnapshotError, finish_ram_file, load_and_resume, start_ram_file,
                       write_snapshot)

RAM_WORKERS = 2            # threads making RAM files from images while QEMUs start
AGENT_TIMEOUT = 30.0       # a restored guest's agent answers within ~1 s; then it is broken


class BootHost(Protocol):
    """What booting from the cache asks of the cluster (cluster.Cluster is one); the caller
    holds the cluster's lock and its bridge runs."""

    config: ClusterConfig
    run_dir: Path

    def log(self, msg: str) -> None: ...

    @property
    def ram_dir(self) -> Path: ...

    def node(self, i: int) -> Node: ...

    def node_argv(self, i: int) -> list[str]: ...

    def ram_path(self, i: int) -> Path: ...

    def cli_select(self) -> str: ...

    def start_node(self, i: int, extra_args: Iterable[str] = (), keep_ram: bool = False) -> Node: ...

    def wait_agents(self, nodes: list[Node] | None = None, timeout: float | None = None,
                    progress_every: float = 10.0) -> None: ...

    def wait_port_down(self, i: int, timeout: float = ...) -> None: ...

    def stop_node(self, n: Node) -> None: ...


def start_nodes(cluster: BootHost, mode: str) -> None:
    """Start every node of `cluster` (its bridge runs) and wait for every agent: from the cache
    where it has a usable snapshot (mode auto), otherwise by booting and then saving the node
    into the cache (modes auto and refresh). Raises ClusterError as Cluster.up does when a node
    cannot be booted at all; cache problems only log."""
    c = cluster.config
    log = cluster.log
    entry: Entry | None = None
    try:
        material = key_material(cluster)
        entry = Entry(cache_root(), cache_key(material), material)
        entry.open()
    except (ClusterError, OSError) as e:
        log(f"snapshot cache not used: {e}")
        entry = None
    load: list[int] = []
    if entry is not None and mode == "auto" and entry.lock(exclusive=False):
        for i in range(c.nodes):
            path = entry.snap(i)
            if not path.exists():
                continue
            try:
                entry.check(c, i)
                load.append(i)
            except SnapshotError as e:
                log(f"node {i}: cached snapshot {path} not used ({first_line(e)}); deleting it")
                if entry.lock(exclusive=True):
                    entry.drop(i)
                    entry.lock(exclusive=False)
    cold = [i for i in range(c.nodes) if i not in load]
    if entry is not None:
        log(f"snapshot cache {entry.dir}: " +
            (f"node(s) {_ids(load)} from snapshots" if load else
             "refresh" if mode == "refresh" else "no usable snapshot") +
            (f", node(s) {_ids(cold)} boot and are saved afterwards" if cold else ""))
    for i in cold:
        cluster.start_node(i)
    if entry is not None and load:
        failed_ram: dict[int, str] = {}
        loader = _Loader(cluster, {i: entry.snap(i) for i in load})
        ram_bytes = c.memory_mib << 20
        with ThreadPoolExecutor(RAM_WORKERS, thread_name_prefix="rackemu-ram") as pool:
            for i in load:
                try:
                    how = start_ram_file(cluster.node(i), cluster.ram_path(i), ram_bytes, entry.snap(i))
                except ClusterError as e:
                    failed_ram[i] = first_line(e)
                    continue
                # QEMUs are started by this thread (a QEMU dies with the thread that forked it),
                # at once; the pool copies their RAM meanwhile, and each load waits for its copy
                n = cluster.start_node(i, extra_args=["-incoming", "defer"], keep_ram=True)
                n.snapshot = str(entry.snap(i))
                loader.start(n, None if how == "reflink" else
                             pool.submit(finish_ram_file, n, cluster.ram_path(i), ram_bytes, entry.snap(i)))
            failed = loader.finish()
        failed.update(failed_ram)
        for i, why in sorted(failed.items()):
            log(f"node {i}: cached snapshot {entry.snap(i)} failed: {why}\n"
                f"node {i}: deleting it and booting the node afresh")
            if entry.lock(exclusive=True):
                entry.drop(i)
                entry.lock(exclusive=False)
            if c.fabric:
                cluster.wait_port_down(i)
            cluster.start_node(i)
            cold.append(i)
        if len(failed) < len(load):
            entry.touch()
    if cold:
        log(f"waiting for {len(cold)} guest agent(s) (TCG boot takes ~5-20 s a node; "
            f"timeout {c.boot_timeout:.0f} s)")
        cluster.wait_agents([cluster.node(i) for i in sorted(cold)])
    if entry is not None:
        try:
            if cold:
                _save_into(cluster, entry, sorted(cold))
        finally:
            entry.close()


class _Loader:
    """Brings up the nodes that start from snapshots, each on its own thread begun as soon as its
    QEMU is started (start), while the launcher makes the other nodes' RAM files and starts their
    QEMUs: load the device state and resume the vCPUs (snapshot.load_and_resume), wait for the
    guest agent, set the guest's clock and entropy (_refresh_guest). finish() waits for all and
    returns {node: why} for those that failed (their QEMU is stopped)."""

    def __init__(self, cluster: BootHost, snaps: dict[int, Path]):
        self.cluster, self.snaps = cluster, snaps
        self.failed: dict[int, str] = {}
        self.jobs: list[tuple[Node, threading.Thread]] = []
        self.lock = threading.Lock()

    def start(self, n: Node, ram: Future | None) -> None:
        """Bring node n up once `ram` (its RAM file's copy, if one is still running) is done."""
        t = threading.Thread(target=self._run, args=(n, ram), daemon=True,
                             name=f"rackemu-resume-node{n.id}")
        t.start()
        self.jobs.append((n, t))

    def _run(self, n: Node, ram: Future | None) -> None:
        try:
            if ram is not None:
                ram.result()
            load_and_resume(n, LOAD_TIMEOUT, self.snaps[n.id], self.cluster.cli_select())
        except (ClusterError, OSError) as e:    # QEMU's own words, without the restore advice
            with self.lock:
                self.failed[n.id] = str(e).split("\nthe node is stopped")[0]
            return
        # a restored guest's agent answers at once (it was answering when saved); one that does
        # not is left to finish(), whose wait_agents says why
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and n.alive():
            try:
                if n.ping(timeout=max(0.5, deadline - time.monotonic())):
                    n.phases["agent"] = time.monotonic()
                    _refresh_guest(self.cluster, n)
                    return
            except Exception:    # the agent client's errors: finish() reports them
                return
            time.sleep(0.05)

    def finish(self) -> dict[int, str]:
        cluster, failed = self.cluster, self.failed
        for _, t in self.jobs:
            t.join()
        nodes = [n for n, _ in self.jobs]
        waiting = [n for n in nodes if n.id not in failed]
        deadline = time.monotonic() + min(AGENT_TIMEOUT, cluster.config.boot_timeout)
        while waiting:      # the state bookkeeping for all; waits only for a slow agent
            try:
                cluster.wait_agents(waiting, timeout=max(1.0, deadline - time.monotonic()))
                break
            except ClusterError as e:
                dead = [n for n in waiting if not n.alive()]
                gone = dead or [n for n in waiting if n.state != "running"]
                for n in gone:
                    failed[n.id] = (f"its QEMU {n.proc.exit_status() if n.proc else 'is gone'} after "
                                    f"the load" if n in dead else
                                    f"its guest agent did not answer within {AGENT_TIMEOUT:.0f} s of "
                                    f"the load") + f" ({first_line(e)})"
                waiting = [n for n in waiting if n not in gone]
        for n in [cluster.node(i) for i in failed if i in {m.id for m in nodes}]:
            cluster.stop_node(n)
            n.snapshot = None
        late = [threading.Thread(target=_refresh_guest, args=(cluster, n), daemon=True)
                for n in nodes if n.id not in failed and "refreshed" not in n.phases]
        for t in late:
            t.start()
        for t in late:
            t.join()
        return failed


def _refresh_guest(cluster: BootHost, n: Node) -> None:
    """Set the restored guest's clock to the host's and mix host randomness into its entropy
    pool (every boot from one snapshot starts with the same pool). The agent's CLOCK request
    does both without starting a process (a restored guest's first process spawn costs ~0.1 s
    a node under TCG: its code is translated afresh, and 16 of them share the host's cores); an
    agent without it (ENOSYS) gets the equivalent command."""
    why = ""
    try:
        n.with_agent("clock", lambda a: a.set_clock(time.time_ns(), os.urandom(256)))
        n.phases["refreshed"] = time.monotonic()
        return
    except ClusterError as e:
        why = str(e)
    if "ENOSYS" not in why and "unknown request type" not in why:
        cluster.log(f"node {n.id}: warning: could not set the guest's clock and entropy after the "
                    f"restore: {why}")
        return
    try:
        r = n.exec(f"date -s @{time.time():.0f} >/dev/null && cat >/dev/urandom", timeout=20,
                   stdin=os.urandom(256))
        if r.rc != 0:
            cluster.log(f"node {n.id}: warning: could not set the guest's clock and entropy after "
                        f"the restore: {r.stderr.decode(errors='replace').strip()}")
    except ClusterError as e:
        cluster.log(f"node {n.id}: warning: could not set the guest's clock and entropy after the "
                    f"restore: {e}")


def _save_into(cluster: BootHost, entry: Entry, ids: list[int]) -> None:
    log = cluster.log
    if not entry.lock(exclusive=True):
        log(f"snapshot cache {entry.dir} is being read or written by another rackemu; "
            f"node(s) {_ids(ids)} not saved")
        return
    t0 = time.monotonic()
    saved = 0
    for k, i in enumerate(ids):
        path = entry.snap(i)
        log(f"snapshot cache: saving node {i} ({k + 1}/{len(ids)}; its vCPUs stop for ~1 s)")
        try:
            write_snapshot(cluster.node(i), cluster.config, cluster.run_dir, cluster.ram_path(i), path, log)
            entry.stamp(i)
            cluster.node(i).snapshot = None
            saved += 1
        except (ClusterError, OSError, ValueError) as e:
            entry.drop(i)
            log(f"node {i}: warning: could not save it into the snapshot cache: {first_line(e)}")
    if saved:
        entry.touch()
        log(f"snapshot cache: {saved} node(s) saved in {time.monotonic() - t0:.1f} s; the next "
            f"`cluster up` of this configuration boots them from {entry.dir}")
        prune(keep=entry.dir, log=log)


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))
