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
(x-ignore-shared: the RAM is not in the stream; snapboot._Loader, one thread per node); the launcher
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

This module is the cache itself (key, entries, locks, size limit); snapboot.py boots the nodes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

from .base import ClusterError, os_error_text, write_atomic
from .config import ClusterConfig, cache_dir
from .hostdirs import prepare_private_dir
from .snapshot import SnapshotError, artefact_sha256, check_restorable, meta_path, ram_image_path

CACHE_FORMAT = 2           # 1: RAM in the stream; 2: RAM in nodeI.snap.ram (snapshot format 2)
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

class ClusterShape(Protocol):
    """What the key is computed from: a cluster's configuration, directories and its nodes'
    command lines (cluster.Cluster is one)."""

    config: ClusterConfig
    run_dir: Path

    @property
    def ram_dir(self) -> Path: ...

    def node_argv(self, i: int) -> list[str]: ...


def normalized_argv(cluster: ClusterShape, i: int) -> list[str]:
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


def key_material(cluster: ClusterShape) -> dict[str, Any]:
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
                write_atomic(kf, json.dumps(self.material, indent=1) + "\n")
            except OSError as e:
                raise ClusterError(f"cannot write {kf}: {os_error_text(e, self.dir)}") from None
        try:
            self._fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC |
                               os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise ClusterError(f"cannot open {self.dir / '.lock'}: "
                               f"{os_error_text(e, self.dir)}") from None

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

    def check(self, config: ClusterConfig, i: int) -> None:
        """SnapshotError unless node i's snapshot may be loaded into the cluster `config`
        describes: its metadata
        fits (node, shape, build), and the stream and RAM image are the ones written (the device,
        inode, size, mtime and ctime of both recorded after the save or the last verification),
        else their sizes and checksums match the metadata."""
        path = self.snap(i)
        meta = check_restorable(config, i, path, verify=False)
        stat = _stats_of(path)
        if meta.get("cache_stat") != stat:
            check_restorable(config, i, path, verify=True)
            meta["cache_stat"] = stat    # verified: trust this version from now on
            try:
                write_atomic(meta_path(path), json.dumps(meta, indent=2) + "\n")
            except OSError:
                pass                               # verified again next time

    def stamp(self, i: int) -> None:
        """Record the stat of node i's freshly written snapshot in its metadata (check)."""
        path = self.snap(i)
        meta = json.loads(meta_path(path).read_text())
        meta["cache_stat"] = _stats_of(path)
        write_atomic(meta_path(path), json.dumps(meta, indent=2) + "\n")

    def drop(self, i: int) -> None:
        for p in (self.snap(i), ram_image_path(self.snap(i)), meta_path(self.snap(i))):
            p.unlink(missing_ok=True)


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
