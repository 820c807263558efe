"""Boot a cluster's nodes from cached snapshots (docs/launcher.md, "Booting from snapshots").

`cluster up` with `snapshot = "auto"` looks for a snapshot of every node in the cache
CACHE_ROOT/KEY/ (CACHE_ROOT: $RACKEMU_CACHE/snapshots, default ~/.cache/rackemu/snapshots).
KEY is a hash of everything a booted node's state depends on (cache_key): the SHA-256 of the
QEMU binary, the kernel and the initramfs, and every node's QEMU command line with the cluster's
own paths (run dir, guest-RAM dir, name) taken out, which carries the machine, node id, node
count, CPU, vCPUs, memory, kernel command line and qemu_args. Any change gives another KEY: that
is the invalidation.

A node with a usable entry (nodeI.snap, nodeI.snap.ram and nodeI.snap.meta.json, written by
snapshot.py: the device state and the guest RAM image) gets its RAM file created from the image
(snapshot.start_ram_file: a reflink, or a file of the RAM's size whose data a pool of threads
copies in the kernel meanwhile: finish_ram_file), starts at once on its usual command line plus
`-incoming defer` and, once its copy is done, loads nodeI.snap with `migrate-incoming`
(x-ignore-shared: the RAM is not in the stream; _Loader, one thread per node); the launcher
resumes its vCPUs,
waits for its agent, then sets the guest's clock to the host's and stirs host randomness into
the guest's /dev/urandom (a snapshot's guest would otherwise live at the instant of the save,
with the entropy pool every other boot from that entry had). A node without one boots as
usual; once every agent answers, those nodes are saved into the entry (their vCPUs stop for
the ~1 s of the save, then run on). A snapshot that is refused (wrong size, checksum, metadata)
or that QEMU cannot load, or whose guest does not answer, is reported, deleted, and the node
boots afresh (and is saved again). Problems of the cache itself never fail `up`: the nodes boot
as without it, and a line says why.

Entries are locked with flock on KEY/.lock: shared while `up` reads them, exclusive while it
writes or deletes; a busy entry is used as is, or skipped. The cache keeps at most
RACKEMU_SNAPSHOT_CACHE_MB (default 8192) MiB: after a save, the least recently used entries go.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cluster import ClusterError, _os_error_text, _write_atomic, prepare_private_dir
from .config import cache_dir
from .snapshot import (LOAD_TIMEOUT, SnapshotError, _load_and_resume, artefact_sha256, check_restorable,
                       finish_ram_file, meta_path, ram_image_path, save_node_locked, start_ram_file)

if TYPE_CHECKING:
    from .cluster import Cluster, Node

CACHE_FORMAT = 2           # 1: RAM in the stream; 2: RAM in nodeI.snap.ram (snapshot format 2)
RAM_WORKERS = 2            # threads making RAM files from images while QEMUs start
AGENT_TIMEOUT = 30.0       # a restored guest's agent answers within ~1 s; then it is broken
DEFAULT_CACHE_MIB = 8192
KEY_FILE = "key.json"
USED_FILE = "last-used"


def cache_root() -> Path:
    return cache_dir() / "snapshots"


def cache_limit_bytes() -> int:
    raw = os.environ.get("RACKEMU_SNAPSHOT_CACHE_MB", "")
    try:
        mib = int(raw) if raw else DEFAULT_CACHE_MIB
    except ValueError:
        mib = DEFAULT_CACHE_MIB
    return max(0, mib) << 20


# ---------------------------------------------------------------- the key

def normalized_argv(cluster: "Cluster", i: int) -> list[str]:
    """Node i's QEMU command line without what differs between two clusters of the same shape:
    the run dir and guest-RAM dir (RUN_DIR, RAM_DIR), the cluster's name in -name, and the paths
    of QEMU, kernel and initramfs (their contents are in the key by hash)."""
    c = cluster.config
    subst = sorted(((str(cluster.ram_dir), "RAM_DIR"), (str(cluster.run_dir), "RUN_DIR")),
                   key=lambda kv: -len(kv[0]))
    files = {str(c.qemu): "QEMU", str(c.kernel_image()): "KERNEL", str(c.initrd): "INITRD"}
    out: list[str] = []
    for k, a in enumerate(cluster.node_argv(i)):
        if a in files:
            a = files[a]
        elif k > 0 and out[-1] == "-name" and a == f"rackemu-{c.name}-node{i}":
            a = f"rackemu-NAME-node{i}"
        else:
            for path, name in subst:
                a = a.replace(path, name)
        out.append(a)
    return out


def key_material(cluster: "Cluster") -> dict[str, Any]:
    """What the cache key hashes (written to KEY/key.json for people)."""
    c = cluster.config
    qemu_version = "unknown"
    try:
        qemu_version = (Path(c.qemu).parent / "VERSION").read_text().strip()
    except OSError:
        pass
    return {"format": CACHE_FORMAT, "nodes": c.nodes,
            "qemu_sha256": artefact_sha256(c.qemu), "qemu_version": qemu_version,
            "kernel_sha256": artefact_sha256(c.kernel_image()),
            "initrd_sha256": artefact_sha256(c.initrd),
            "argv": [normalized_argv(cluster, i) for i in range(c.nodes)]}


def cache_key(material: dict[str, Any]) -> str:
    blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


# ---------------------------------------------------------------- one entry

class Entry:
    """CACHE_ROOT/KEY: nodeI.snap, nodeI.snap.ram and nodeI.snap.meta.json per node, key.json,
    last-used, .lock."""

    def __init__(self, root: Path, key: str, material: dict[str, Any]):
        self.dir = root / key
        self.key = key
        self.material = material
        self._fd: int | None = None
        self._mode = 0

    def snap(self, i: int) -> Path:
        return self.dir / f"node{i}.snap"

    def open(self) -> None:
        prepare_private_dir(self.dir.parent, "snapshot cache", create_parents=True)
        prepare_private_dir(self.dir, "snapshot cache entry", create_parents=False)
        kf = self.dir / KEY_FILE
        if not kf.exists():
            try:
                _write_atomic(kf, json.dumps(self.material, indent=1) + "\n")
            except OSError as e:
                raise ClusterError(f"cannot write {kf}: {_os_error_text(e, self.dir)}") from None
        try:
            self._fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC |
                               os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise ClusterError(f"cannot open {self.dir / '.lock'}: "
                               f"{_os_error_text(e, self.dir)}") from None

    def lock(self, exclusive: bool) -> bool:
        """Take the entry's lock (shared: reading; exclusive: writing) without waiting."""
        assert self._fd is not None
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if self._mode == mode:
            return True
        try:
            fcntl.flock(self._fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._mode = mode
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._mode = None, 0

    def touch(self) -> None:
        try:
            (self.dir / USED_FILE).write_text(f"{time.time():.0f}\n")
        except OSError:
            pass

    def check(self, cluster: "Cluster", i: int) -> None:
        """SnapshotError unless node i's snapshot may be loaded into `cluster`: its metadata
        fits (node, shape, build), and the stream and RAM image are the ones written (the device,
        inode, size, mtime and ctime of both recorded after the save or the last verification),
        else their sizes and checksums match the metadata."""
        path = self.snap(i)
        meta = check_restorable(cluster, i, path, verify=False)
        stat = _stats_of(path)
        if meta.get("cache_stat") != stat:
            check_restorable(cluster, i, path, verify=True)
            meta["cache_stat"] = stat    # verified: trust this version from now on
            try:
                _write_atomic(meta_path(path), json.dumps(meta, indent=2) + "\n")
            except OSError:
                pass                               # verified again next time

    def stamp(self, i: int) -> None:
        """Record the stat of node i's freshly written snapshot in its metadata (check)."""
        path = self.snap(i)
        meta = json.loads(meta_path(path).read_text())
        meta["cache_stat"] = _stats_of(path)
        _write_atomic(meta_path(path), json.dumps(meta, indent=2) + "\n")

    def drop(self, i: int) -> None:
        for p in (self.snap(i), ram_image_path(self.snap(i)), meta_path(self.snap(i))):
            p.unlink(missing_ok=True)


# ---------------------------------------------------------------- up

def start_nodes(cluster: "Cluster", mode: str) -> None:
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
                entry.check(cluster, i)
                load.append(i)
            except SnapshotError as e:
                log(f"node {i}: cached snapshot {path} not used ({_first_line(e)}); deleting it")
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
        with ThreadPoolExecutor(RAM_WORKERS, thread_name_prefix="rackemu-ram") as pool:
            for i in load:
                try:
                    how = start_ram_file(cluster, i, entry.snap(i))
                except ClusterError as e:
                    failed_ram[i] = _first_line(e)
                    continue
                # QEMUs are started by this thread (a QEMU dies with the thread that forked it),
                # at once; the pool copies their RAM meanwhile, and each load waits for its copy
                n = cluster.start_node(i, extra_args=["-incoming", "defer"], keep_ram=True)
                n.snapshot = str(entry.snap(i))
                loader.start(n, None if how == "reflink" else
                             pool.submit(finish_ram_file, cluster, i, entry.snap(i)))
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
    QEMUs: load the device state and resume the vCPUs (snapshot._load_and_resume), wait for the
    guest agent, set the guest's clock and entropy (_refresh_guest). finish() waits for all and
    returns {node: why} for those that failed (their QEMU is stopped)."""

    def __init__(self, cluster: "Cluster", snaps: dict[int, Path]):
        self.cluster, self.snaps = cluster, snaps
        self.failed: dict[int, str] = {}
        self.jobs: list[tuple["Node", threading.Thread]] = []
        self.lock = threading.Lock()

    def start(self, n: "Node", ram: Future | None) -> None:
        """Bring node n up once `ram` (its RAM file's copy, if one is still running) is done."""
        t = threading.Thread(target=self._run, args=(n, ram), daemon=True,
                             name=f"rackemu-resume-node{n.id}")
        t.start()
        self.jobs.append((n, t))

    def _run(self, n: "Node", ram: Future | None) -> None:
        try:
            if ram is not None:
                ram.result()
            _load_and_resume(self.cluster, n, LOAD_TIMEOUT, self.snaps[n.id])
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
                                    f"the load") + f" ({_first_line(e)})"
                waiting = [n for n in waiting if n not in gone]
        for n in [cluster.node(i) for i in failed if i in {m.id for m in nodes}]:
            cluster._stop_node(n)
            n.snapshot = None
        late = [threading.Thread(target=_refresh_guest, args=(cluster, n), daemon=True)
                for n in nodes if n.id not in failed and "refreshed" not in n.phases]
        for t in late:
            t.start()
        for t in late:
            t.join()
        return failed


def _refresh_guest(cluster: "Cluster", n: "Node") -> None:
    """Set the restored guest's clock to the host's and mix host randomness into its entropy
    pool (every boot from one snapshot starts with the same pool). The agent's CLOCK request
    does both without starting a process (a restored guest's first process spawn costs ~0.1 s
    a node under TCG: its code is translated afresh, and 16 of them share the host's cores); an
    agent without it (ENOSYS) gets the equivalent command."""
    why = ""
    try:
        n._with_agent("clock", lambda a: a.set_clock(time.time_ns(), os.urandom(256)))
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


def _save_into(cluster: "Cluster", entry: Entry, ids: list[int]) -> None:
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
            save_node_locked(cluster, i, path)
            entry.stamp(i)
            cluster.node(i).snapshot = None
            saved += 1
        except (ClusterError, OSError, ValueError) as e:
            entry.drop(i)
            log(f"node {i}: warning: could not save it into the snapshot cache: {_first_line(e)}")
    if saved:
        entry.touch()
        log(f"snapshot cache: {saved} node(s) saved in {time.monotonic() - t0:.1f} s; the next "
            f"`cluster up` of this configuration boots them from {entry.dir}")
        prune(keep=entry.dir, log=log)


# ---------------------------------------------------------------- size limit

def _entry_bytes(d: Path) -> int:
    total = 0
    for f in d.iterdir():
        try:
            total += f.lstat().st_blocks * 512
        except OSError:
            pass
    return total


def _last_used(d: Path) -> float:
    for p in (d / USED_FILE, d):
        try:
            return p.stat().st_mtime
        except OSError:
            continue
    return 0.0


def prune(keep: Path | None = None, limit: int | None = None, log: Any = None) -> list[Path]:
    """Delete the least recently used entries until the cache holds at most `limit` bytes
    (cache_limit_bytes()); never `keep`, never an entry another rackemu has locked. The
    deleted entries."""
    limit = cache_limit_bytes() if limit is None else limit
    root = cache_root()
    try:
        dirs = [d for d in root.iterdir() if d.is_dir() and not d.is_symlink()]
    except OSError:
        return []
    sizes = {d: _entry_bytes(d) for d in dirs}
    total = sum(sizes.values())
    gone = []
    for d in sorted(dirs, key=_last_used):
        if total <= limit:
            break
        if keep is not None and d == keep:
            continue
        try:
            fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(d, ignore_errors=True)
        finally:
            os.close(fd)
        total -= sizes[d]
        gone.append(d)
        if log:
            log(f"snapshot cache: removed {d.name} ({sizes[d] >> 20} MiB, least recently used; "
                f"the cache keeps {limit >> 20} MiB: RACKEMU_SNAPSHOT_CACHE_MB)")
    return gone


def _stat_of(st: os.stat_result) -> list[int]:
    """What identifies one version of a file: the mtime alone can be set back (os.utime, `touch
    -d`) after an edit in place; the ctime changes with every write and no program can set it."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _stats_of(path: Path) -> list[int]:
    """_stat_of the stream `path` and of its RAM image, one list."""
    out: list[int] = []
    for p in (path, ram_image_path(path)):
        try:
            out += _stat_of(p.stat())
        except OSError as e:
            raise SnapshotError(f"cannot read {p}: {e.strerror or e}") from None
    return out


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
