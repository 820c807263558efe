"""Save one node of a running cluster to a file and restore it (docs/launcher.md, "Save and
restore").

A snapshot (format 2) is two files. FILE is QEMU's own migration stream, written by `migrate`
to `exec:cat > FILE` (QEMU 7.2 has no `file:` transport) while the node's vCPUs are stopped,
with the `x-ignore-shared` capability: it holds the vCPUs, the GIC, virtio (the guest agent's
port), every rackemu device's VMState and the small non-shared RAM blocks, but not the guest
RAM, which is a shared file (memory-backend-file,share=on). FILE.ram is a copy of the guest RAM
made by the launcher while the vCPUs are still stopped (ramimage.py: sparse, zero blocks left
as holes), so a snapshot stays valid after the node has run on, restarted, or the cluster was
stopped. A restore makes the new node's RAM file from FILE.ram before its QEMU starts (a reflink
or an in-kernel copy of the data extents), starts QEMU with `-incoming defer`, enables
`x-ignore-shared` and then loads FILE with `migrate-incoming exec:cat FILE`. QEMU accepts the
RAM block as it finds it when the block's name, size and guest-physical address match the
stream's (migration/ram.c, RAM_SAVE_FLAG_MEM_SIZE: same command line), and refuses a stream saved
with the capability into a QEMU without it (savevm.c, "configuration" capabilities) and pages of
a block it ignores (a format-1 stream, which carried the RAM).

Beside FILE the launcher writes FILE.meta.json: the node and cluster shape, the SHA-256 of the
QEMU binary, the kernel and the initramfs, the size and SHA-256 of FILE, and the RAM image's
size, data bytes and digest (ramimage.py). A restore refuses a snapshot of another node,
another cluster shape or another build, one of format 1 (the RAM in the stream: save the node
again), and (unless verify=False) a stream or RAM image whose size or checksum changed; QEMU
itself refuses a stream it cannot load (exit status 1, `load of migration failed`), which the
launcher reports with QEMU's words.

The fabric: the restored QEMU joins the bridge under the same node id. The bridge accepts a
node id again once it has seen the previous connection close (docs/fabric.md, "Handshake"),
so the launcher stops the old QEMU and waits until the bridge reports that node's port down
before it starts the new one. The other nodes keep running throughout; requests they had
outstanding to the saved node when its old QEMU stopped were answered NODE_GONE by the bridge.

This module holds the steps, each given what it needs (the node, the configuration, paths);
Cluster.save_node and Cluster.restore_node (cluster.py) run them in order, under the cluster's
lock, and snapboot.py does the same for the snapshot cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .base import ClusterError, no_interrupts, os_error_text, write_atomic
from .config import ClusterConfig, cache_dir
from .node import Node
from .procs import KILL_WAIT
from .qmp import Qmp, QmpCommandError, QmpError
from .ramimage import ImageError, finish_clone, image_digest, start_clone, write_image

SNAPSHOT_FORMAT = 2       # 1: guest RAM in the stream; 2: guest RAM in FILE.ram (module doc)
META_SUFFIX = ".meta.json"
RAM_SUFFIX = ".ram"
# QEMU capability that leaves shared RAM blocks (the node's RAM file) out of the stream
IGNORE_SHARED = [{"capability": "x-ignore-shared", "state": True}]
RAM_BACKEND = "ram"        # the node's RAM backend's id (Cluster.node_argv)
SAVE_TIMEOUT = 300.0     # seconds for QEMU to write the stream
LOAD_TIMEOUT = 300.0     # seconds for a new QEMU to read it
# Keys of the metadata that must match the cluster a snapshot is restored into.
SHAPE_KEYS = ("node", "node_count", "machine", "cpu", "vcpus", "memory", "kernel_cmdline",
              "qemu_args")
BUILD_KEYS = ("qemu_sha256", "kernel_sha256", "initrd_sha256")


class SnapshotError(ClusterError):
    """A snapshot could not be written, is not usable here, or QEMU refused it."""


# ---------------------------------------------------------------- metadata

def meta_path(path: str | os.PathLike) -> Path:
    return Path(str(path) + META_SUFFIX)


def ram_image_path(path: str | os.PathLike) -> Path:
    """Where snapshot `path` keeps the guest RAM (format 2)."""
    return Path(str(path) + RAM_SUFFIX)


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError as e:
        raise SnapshotError(f"cannot read {path}: {e.strerror or e}") from None
    return h.hexdigest()


_artefact_sums: dict[tuple, str] = {}
_artefact_lock = threading.Lock()


SUMS_FILE = "artefact-sums.json"   # in the snapshot cache's directory (snapcache.cache_root)
SUMS_KEEP = 64


def _sums_path() -> Path | None:
    """The file that keeps artefact digests across processes: in the snapshot cache's directory
    if it is a private directory of ours (snapcache creates it so), else none."""
    d = cache_dir() / "snapshots"
    try:
        st = os.lstat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return d / SUMS_FILE


def _load_sums(path: Path) -> dict[str, list]:
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return {}
        data = json.loads(path.read_text())
        sums = data.get("sums", {}) if isinstance(data, dict) and data.get("format") == 1 else {}
        return {k: v for k, v in sums.items() if isinstance(v, list) and len(v) == 6}
    except (OSError, ValueError):
        return {}


def artefact_sha256(path: str | os.PathLike) -> str:
    """file_sha256 of a build artefact (QEMU, kernel, initramfs), computed once per file version
    (device, inode, size, mtime, ctime): a 16-node cluster would otherwise hash the ~90 MB QEMU
    binary 16 times, and every `up` with the snapshot cache would hash ~140 MB (1.5 s on a
    loaded 2-core host). Kept in the process and in the snapshot cache's directory (SUMS_FILE):
    a file rewritten in place changes its ctime, which no program can set back, so a version
    whose identity matches has the recorded digest."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise SnapshotError(f"cannot read {path}: {e.strerror or e}") from None
    real = os.path.realpath(path)
    ident = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    key = (real, *ident)
    with _artefact_lock:
        if key in _artefact_sums:
            return _artefact_sums[key]
        store = _sums_path()
        sums = _load_sums(store) if store else {}
        rec = sums.get(real)
        if rec and rec[:5] == ident and isinstance(rec[5], str) and len(rec[5]) == 64:
            _artefact_sums[key] = rec[5]
            return rec[5]
        digest = file_sha256(path)
        _artefact_sums[key] = digest
        if store:
            sums[real] = [*ident, digest]
            keep = dict(list(sums.items())[-SUMS_KEEP:])
            try:
                write_atomic(store, json.dumps({"format": 1, "sums": keep}) + "\n")
            except OSError:
                pass    # hashed again next time
        return digest


def node_identity(c: ClusterConfig, i: int) -> dict[str, Any]:
    """What a snapshot of node i depends on: the node's place and shape in the cluster `c` and
    the exact QEMU binary, kernel and initramfs it runs (device models and RAM layout must be
    the same on both sides of a migration stream)."""
    ident: dict[str, Any] = {
        "node": i, "node_count": c.nodes, "machine": c.machine, "cpu": c.cpu, "vcpus": c.vcpus,
        "memory": c.memory, "kernel_cmdline": c.kernel_cmdline,
        "qemu_args": c.rnic_args() + list(c.qemu_args),  # the RNIC is a device of the node's shape
        "qemu": str(c.qemu), "kernel": str(c.kernel_image()), "initrd": str(c.initrd)}
    for key, p in (("qemu", c.qemu), ("kernel", c.kernel_image()), ("initrd", c.initrd)):
        ident[f"{key}_sha256"] = artefact_sha256(p)
    version = Path(c.qemu).parent / "VERSION"
    try:
        ident["qemu_version"] = version.read_text().strip()
    except OSError:
        ident["qemu_version"] = "unknown"
    return ident


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of snapshot `path`, checked for form; SnapshotError says what is wrong."""
    path = Path(path)
    mp = meta_path(path)
    if not path.exists():
        raise SnapshotError(f"no snapshot file {path}")
    if not path.is_file():
        raise SnapshotError(f"{path} is not a regular file")
    try:
        meta = json.loads(mp.read_text())
    except FileNotFoundError:
        raise SnapshotError(f"{path} has no metadata file {mp.name} beside it: it was not written "
                            f"by `rackemu node save` (or the .meta.json was not copied with it)") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise SnapshotError(f"cannot read the snapshot metadata {mp}: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != SNAPSHOT_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        why = (": it was saved by an earlier rackemu with the guest RAM in the stream; this one "
               "keeps the RAM in FILE.ram. Save the node again" if got == 1 else "")
        raise SnapshotError(f"{mp} has snapshot format {got!r}; this rackemu reads format "
                            f"{SNAPSHOT_FORMAT}{why}")
    # kernel_cmdline joined the metadata later: an older file lacks it and is refused by
    # compatibility_problems as made for another command line, not as foreign
    missing = [k for k in (*SHAPE_KEYS, *BUILD_KEYS, "size", "sha256", "ram")
               if k not in meta and k != "kernel_cmdline"]
    ram = meta.get("ram")
    if not missing and not (isinstance(ram, dict) and isinstance(ram.get("size"), int)
                            and isinstance(ram.get("sha256"), str)):
        missing = ["ram.size", "ram.sha256"]
    if missing:
        raise SnapshotError(f"{mp} lacks {', '.join(missing)}: not a rackemu snapshot's metadata")
    return meta


def compatibility_problems(meta: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """Why a snapshot with `meta` cannot be loaded into a node described by `here` (empty: it
    can)."""
    problems = []
    names = {"node": "node id", "node_count": "cluster size (nodes)", "machine": "machine",
             "cpu": "CPU model", "vcpus": "vCPUs", "memory": "guest RAM",
             "kernel_cmdline": "kernel command line", "qemu_args": "qemu_args"}
    for k in SHAPE_KEYS:
        if meta.get(k) != here.get(k):
            problems.append(f"{names[k]}: snapshot {meta.get(k)!r}, this node {here.get(k)!r}")
    for k, what in (("qemu_sha256", "QEMU binary"), ("kernel_sha256", "guest kernel"),
                    ("initrd_sha256", "guest initramfs")):
        if meta.get(k) != here.get(k):
            src = k.removesuffix("_sha256")
            problems.append(f"{what} differs: the snapshot was made with {meta.get(src, '?')} "
                            f"(sha256 {str(meta.get(k))[:12]}...), this cluster runs "
                            f"{here.get(src)} (sha256 {str(here.get(k))[:12]}...)")
    return problems


# ---------------------------------------------------------------- save

def check_save_path(path: Path, force: bool) -> None:
    """SnapshotError unless a snapshot may be written to `path` (force: over an existing file)."""
    if path.exists() and not force:
        raise SnapshotError(f"{path} exists; remove it or pass --force to overwrite it")
    if path.is_dir():
        raise SnapshotError(f"{path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise SnapshotError(f"cannot write {path}: {path.parent} is not a directory")
    if not os.access(path.parent, os.W_OK):
        raise SnapshotError(f"cannot write {path}: no permission in {path.parent}")


def write_snapshot(n: Node, config: ClusterConfig, run_dir: Path, ram_path: Path, path: Path,
                   log: Callable[[str], None], stop: bool = False,
                   timeout: float | None = None) -> dict[str, Any]:
    """Write running node n's snapshot to `path` (+ .ram, .meta.json) and return the metadata:
    its vCPUs stop while QEMU writes the stream and its RAM file `ram_path` is copied, then run
    on, or (stop) its QMP connection is closed and the caller stops its QEMU. The caller holds
    the cluster's lock and checked the node and `path` (Cluster.save_node, and `cluster up`
    saving a node into the snapshot cache)."""
    timeout = SAVE_TIMEOUT if timeout is None else timeout
    i = n.id
    ident = node_identity(config, i)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    t0 = time.monotonic()
    with n.qmp() as qmp:
        was = qmp.execute("query-status").get("status")
        log(f"node {i}: stopping its vCPUs and writing its state to {path}")
        qmp.execute("stop")
        try:
            _migrate_out(qmp, i, tmp, timeout)
        except BaseException:
            with no_interrupts():
                tmp.unlink(missing_ok=True)
                if was == "running":     # nothing saved: the node runs on
                    try:
                        qmp.execute("cont")
                    except ClusterError:
                        pass
            raise
        tmp_ram = ram_image_path(tmp)
        try:
            # the vCPUs are still stopped: the RAM file holds what the stream's devices saw
            ram = write_image(ram_path, config.memory_mib << 20, tmp_ram)
        except BaseException as e:
            with no_interrupts():
                tmp.unlink(missing_ok=True)
                tmp_ram.unlink(missing_ok=True)
                if was == "running":
                    try:
                        qmp.execute("cont")
                    except ClusterError:
                        pass
            if isinstance(e, ImageError):
                raise SnapshotError(f"node {i} cannot be saved: {e}") from None
            raise
        size = tmp.stat().st_size
        meta = {"format": SNAPSHOT_FORMAT, "rackemu": __version__, "created": time.time(),
                "cluster": config.name, "run_dir": str(run_dir),
                **ident, "size": size, "sha256": file_sha256(tmp), "ram": ram,
                "save_seconds": round(time.monotonic() - t0, 2)}
        try:
            write_atomic(meta_path(path), json.dumps(meta, indent=2) + "\n")
            os.replace(tmp_ram, ram_image_path(path))
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            tmp_ram.unlink(missing_ok=True)
            raise SnapshotError(f"cannot write {path}: {os_error_text(e, path.parent)}") from None
        if stop:
            qmp.close()
        elif was == "running":
            qmp.execute("cont")
    log(f"node {i}: saved {size / 1048576:.1f} MiB of device state and "
        f"{ram['data_bytes'] / 1048576:.1f} MiB of RAM in {time.monotonic() - t0:.1f} s "
        f"({path}, {ram_image_path(path).name}, metadata {meta_path(path).name})")
    return meta


def _migrate_out(qmp: Qmp, i: int, tmp: Path, timeout: float) -> None:
    # Everything in one pass: the vCPUs are stopped, so no downtime to bound; QEMU 7.2's
    # default bandwidth cap (32 MiB/s) would only slow the write down.
    qmp.execute("migrate-set-parameters", **{"max-bandwidth": 1 << 40, "downtime-limit": 600000})
    # x-ignore-shared leaves every shared memory backend out of the stream, and the launcher
    # copies only the node's RAM ("ram"): another shared backend (qemu_args) would be lost
    others = [str(m.get("id", "?")) for m in qmp.execute("query-memdev")
              if m.get("share") and m.get("id") != RAM_BACKEND]
    if others:
        raise SnapshotError(f"node {i} cannot be saved: memory backend(s) {', '.join(others)} are "
                            f"shared (share=on); a snapshot keeps only the node's RAM "
                            f"({RAM_BACKEND!r}) out of QEMU's stream and would lose their contents. "
                            f"Give them share=off in qemu_args to save the node")
    try:
        qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
        qmp.execute("migrate", uri=f"exec:cat > {shlex.quote(str(tmp))}")
    except QmpCommandError as e:
        hint = (" (a device of this build cannot be migrated yet: its VMState is marked "
                "unmigratable)" if "non-migratable" in e.desc or "blocked" in e.desc else "")
        raise SnapshotError(f"node {i} cannot be saved: QEMU refused to migrate: {e.desc}{hint}") from None
    deadline = time.monotonic() + timeout
    while True:
        st = qmp.execute("query-migrate")
        status = st.get("status")
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            raise SnapshotError(f"node {i}: QEMU could not save its state: "
                                f"{st.get('error-desc', status)}")
        if time.monotonic() >= deadline:
            try:
                qmp.execute("migrate_cancel")
            except ClusterError:
                pass
            raise SnapshotError(f"node {i}: saving did not finish within {timeout:.0f} s "
                                f"(status {status}); cancelled")
        time.sleep(0.1)


# ---------------------------------------------------------------- restore

def check_restorable(config: ClusterConfig, i: int, path: str | os.PathLike,
                     verify: bool = True) -> dict[str, Any]:
    """Everything a restore checks before it touches node i of the cluster `config` describes:
    the file and its metadata, the node, the cluster's shape and build, and (verify) the file's
    checksum. The metadata."""
    path = Path(path)
    meta = read_meta(path)
    if meta["node"] != i:
        raise SnapshotError(f"{path} is a snapshot of node {meta['node']}, not of node {i}: a node's "
                            f"id is part of its hardware state (restore it into node {meta['node']})")
    problems = compatibility_problems(meta, node_identity(config, i))
    if problems:
        raise SnapshotError(f"{path} cannot be restored into node {i} of cluster "
                            f"{config.name!r}: it was saved from another configuration "
                            f"or build:\n" + "\n".join(f"  {p}" for p in problems) +
                            "\nrestore it into a cluster started with the same build and shape")
    image = ram_image_path(path)
    try:
        isize = image.stat().st_size
    except OSError as e:
        raise SnapshotError(f"{path} has no RAM image {image.name} beside it ({e.strerror}): copy "
                            f"it with the snapshot, or save the node again") from None
    ram_bytes = config.memory_mib << 20
    if meta["ram"]["size"] != ram_bytes:
        raise SnapshotError(f"{meta_path(path)} records {meta['ram']['size']} bytes of guest RAM, "
                            f"node {i} has {ram_bytes}: the metadata was changed")
    if isize != ram_bytes:
        raise SnapshotError(f"the RAM image {image} is {isize} bytes, the node's RAM {ram_bytes}: "
                            f"the image is truncated or was changed after it was saved")
    if not verify:
        return meta
    size = path.stat().st_size
    if size != meta["size"]:
        raise SnapshotError(f"{path} is {size} bytes, its metadata says {meta['size']}: the file "
                            f"is truncated or was changed after it was saved")
    if file_sha256(path) != meta["sha256"]:
        raise SnapshotError(f"{path} does not match the checksum recorded when it was saved: it "
                            f"is corrupt or was changed (pass --no-verify to let QEMU try it "
                            f"anyway)")
    try:
        digest, _ = image_digest(image, ram_bytes)
    except ImageError as e:
        raise SnapshotError(str(e)) from None
    if digest != meta["ram"]["sha256"]:
        raise SnapshotError(f"the RAM image {image} does not match the checksum recorded when it "
                            f"was saved: it is corrupt or was changed (pass --no-verify to load "
                            f"it anyway)")
    return meta


def make_ram_file(n: Node, dst: Path, size: int, path: str | os.PathLike) -> str:
    """Node n's RAM file `dst` (of `size` bytes) made afresh from snapshot `path`'s RAM image
    (before its QEMU starts); the method used (ramimage.clone_image). SnapshotError says why it
    could not be made."""
    how = start_ram_file(n, dst, size, path)
    return how if how == "reflink" else finish_ram_file(n, dst, size, path)


def start_ram_file(n: Node, dst: Path, size: int, path: str | os.PathLike) -> str:
    """The cheap half of make_ram_file (ramimage.start_clone): "reflink" (done) or "copy" (the
    file has the RAM's size and no data yet: finish_ram_file copies it; the node's QEMU may be
    started meanwhile with `-incoming defer`, and the load must wait for the copy)."""
    n.phases = {"ram_start": time.monotonic()}
    dst.unlink(missing_ok=True)
    try:
        how = start_clone(ram_image_path(path), dst, size)
    except ImageError as e:
        raise SnapshotError(f"node {n.id}: {e}") from None
    if how == "reflink":
        n.phases["ram"] = time.monotonic()
    return how


def finish_ram_file(n: Node, dst: Path, size: int, path: str | os.PathLike) -> str:
    """The copy after start_ram_file "copy" (ramimage.finish_clone); the method used."""
    try:
        how = finish_clone(ram_image_path(path), dst, size)
    except ImageError as e:
        raise SnapshotError(f"node {n.id}: {e}") from None
    n.phases["ram"] = time.monotonic()
    return how


def _qemu_complaint(n: Node) -> str:
    lines = [ln for ln in n.log_tail(40).splitlines() if ln.strip()]
    picked = [ln for ln in lines if "qemu-system" in ln or "error" in ln.lower() or "fail" in ln.lower()]
    return "\n".join(f"    {ln}" for ln in (picked or lines)[-8:]) or "    (no output)"


def load_and_resume(n: Node, timeout: float, path: str | os.PathLike, cli_select: str = "") -> None:
    """Load snapshot `path` into node n, whose QEMU was started with `-incoming defer` on the RAM
    file make_ram_file made, and resume its vCPUs (SnapshotError with QEMU's words if it
    refuses; `cli_select` picks the cluster in its advice, Cluster.cli_select)."""
    deadline = time.monotonic() + timeout
    qmp: Qmp | None = None
    started = False
    try:
        while True:
            if not n.alive():
                if n.proc is not None:
                    n.proc.wait_gone(KILL_WAIT)
                    if n.proc.popen is not None:     # started here: its exit status
                        try:
                            n.proc.popen.wait(KILL_WAIT)
                        except subprocess.TimeoutExpired:
                            pass
                n.state = "dead"
                why = n.proc.exit_status() if n.proc is not None else "exited"
                raise SnapshotError(f"node {n.id}: QEMU refused the snapshot and {why}; its output "
                                    f"({n.log_path}):\n{_qemu_complaint(n)}\nthe node is stopped: "
                                    f"`rackemu node restart {n.id}{cli_select}` boots it "
                                    f"afresh")
            if time.monotonic() >= deadline:
                raise SnapshotError(f"node {n.id}: QEMU did not finish loading the snapshot within "
                                    f"{timeout:.0f} s; stopped it")
            if qmp is None and n.qmp_path.exists():
                try:
                    qmp = Qmp(n.qmp_path)
                    qmp.connect()
                    n.phases.setdefault("qmp", time.monotonic())
                except QmpError:
                    qmp = None
            if qmp is not None and not started:
                try:
                    qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
                    qmp.execute("migrate-incoming", uri=f"exec:cat {shlex.quote(str(path))}")
                    started = True
                    n.phases["incoming"] = time.monotonic()
                except QmpCommandError as e:
                    raise SnapshotError(f"node {n.id}: QEMU refused to load {path}: {e.desc}") from None
                except QmpError:
                    qmp.close()
                    qmp = None
            if qmp is not None:
                try:
                    status = qmp.execute("query-status").get("status")
                except QmpError:
                    qmp.close()
                    qmp = None
                    status = None
                if status in ("paused", "postmigrate"):
                    n.phases["loaded"] = time.monotonic()
                    qmp.execute("cont")  # type: ignore[union-attr]
                    n.phases["resumed"] = time.monotonic()
                    return
                if status == "running":
                    return
                if status not in (None, "inmigrate"):
                    raise SnapshotError(f"node {n.id}: after loading the snapshot QEMU is in state "
                                        f"{status!r}:\n{_qemu_complaint(n)}")
            time.sleep(0.02 if started else 0.05)   # a load of device state takes ~0.1 s
    finally:
        if qmp is not None:
            qmp.close()
