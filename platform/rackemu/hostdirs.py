"""The host directories the launcher trusts: the run directory, the guest-RAM directory and the
snapshot cache must be real directories of ours that no one else can change (docs/launcher.md,
"Who may touch what").
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import stat
from pathlib import Path
from typing import Callable, Iterable

from .base import ClusterError, os_error_text
from .config import ClusterConfig, ConfigError, format_mib

SHM_MARGIN_MIB = 32     # free space kept on the guest-RAM file system beyond the nodes' memory

# Injectable for tests (a fake file system size): os.statvfs of the guest-RAM directory.
_statvfs = os.statvfs


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
        raise ClusterError(f"cannot create {what} {path}: {os_error_text(e, path.parent)}") from None
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


def check_host_memory(config: ClusterConfig) -> None:
    """Refuse (ConfigError) nodes whose memory together exceeds the host's."""
    try:
        with open("/proc/meminfo") as f:
            total_kib = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return
    need_mib = config.nodes * (config.memory_mib + 150)   # + QEMU/TCG overhead
    if need_mib * 1024 > total_kib * 0.9:
        raise ConfigError(
            f"{config.nodes} nodes x {config.memory} (+ ~150 MiB QEMU overhead each) "
            f"need ~{need_mib} MiB, more than this host's {total_kib // 1024} MiB allows; "
            f"use fewer nodes or less memory")


class RunLock:
    """The run directory's .lock, flock()ed while one launcher starts, restarts or stops
    processes of a cluster (created with the directory if need be)."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir
        self._fd: int | None = None

    def acquire(self) -> None:
        """Create (or check) the run directory and flock() its .lock: one launcher at a time
        starts, restarts or stops processes of a cluster."""
        prepare_private_dir(self.dir, "run dir", create_parents=True)
        lock = self.dir / ".lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise ClusterError(f"cannot open {lock}: {os_error_text(e, self.dir)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ClusterError(f"another rackemu is starting or restarting cluster processes in "
                               f"{self.dir} right now")
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as e:
            os.close(fd)
            raise ClusterError(f"cannot write {lock}: {os_error_text(e, self.dir)}") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def check_ram_space(config: ClusterConfig, ram_path: Callable[[int], Path], starting: list[int],
                    running: Iterable[int]) -> None:
    """Refuse to start nodes whose guest RAM does not fit on the file system that holds it.
    QEMU maps the RAM file sparsely, so a full tmpfs shows up only later, as a SIGBUS in
    QEMU when the guest touches a page (no message, the node just dies). Counted: the full
    memory of every node being started, plus what running nodes of this cluster have not
    yet allocated (`running`: ids; `ram_path`: node id -> its RAM file); kept free:
    SHM_MARGIN_MIB."""
    mem = config.memory_mib << 20
    ids = set(starting)
    need = len(ids) * mem
    for i in running:
        if i not in ids:
            try:
                used = os.stat(ram_path(i)).st_blocks * 512
            except OSError:
                used = 0
            need += max(0, mem - used)
    base = config.shm_dir
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
        f"node(s) x {config.memory}"
        + (" plus what the running nodes have not allocated yet" if need > len(starting) * mem else "")
        + f" need {mib(need)} MiB + {SHM_MARGIN_MIB} MiB margin, but only {mib(free)} MiB "
        f"of its {mib(total)} MiB are free. QEMU would die of SIGBUS (nothing logged) when a "
        f"guest touches memory that does not fit.\nFix: use fewer nodes or less --memory, free "
        f"space there (other clusters: `rackemu cluster down`), enlarge it (as root: "
        f"`mount -o remount,size={size} {mount}`), or point shm_dir in the cluster's config at "
        f"a larger tmpfs")


def remove_ram_files(ram_dir: Path, keep: set[int] | None = None) -> None:
    """Remove the guest-RAM files of the nodes not in `keep` (None: every node*.ram), and the
    directory if that empties it; only in a directory of ours (owned_private_dir): never touch
    one someone else made."""
    if not owned_private_dir(ram_dir):
        return
    for f in ram_dir.glob("node*.ram"):
        if keep is None or (f.stem[4:].isdigit() and int(f.stem[4:]) not in keep):
            f.unlink(missing_ok=True)
    try:
        ram_dir.rmdir()
    except OSError:
        pass


def clean_run_dir(run_dir: Path, tmp_prefix: str) -> None:
    """Remove the sockets, pid files and temporary files (names starting with `tmp_prefix`)
    left in the run dir; never logs or consoles."""
    for entry in run_dir.iterdir():
        try:
            st = entry.lstat()
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode) or entry.suffix == ".pid" or entry.name.startswith(tmp_prefix):
            try:
                entry.unlink()
            except OSError:
                pass
