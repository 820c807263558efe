"""A node's guest RAM as a sparse image file beside its snapshot (docs/launcher.md, "Save and
restore": the snapshot format).

A snapshot keeps the node's RAM out of QEMU's migration stream (the stream is written with the
`x-ignore-shared` capability, which skips the shared RAM block): the launcher copies the node's
RAM file into FILE.ram while the vCPUs are stopped, and at a restore makes the new node's RAM
file from it before QEMU starts. The image holds only what the guest wrote: RAM is cut into
BLOCK-sized blocks and a block that is all zeros stays a hole (an idle 256 MiB node has ~70 MiB
of data).

The image's digest is canonical, whatever the file system reports as data or hole: the SHA-256
over every non-zero block, in order, of its offset (8 bytes, little-endian) and its bytes. So a
truncated, punched, overwritten or extended image does not match the digest recorded at the
save.

A restore makes each node its own RAM file from the image as cheaply as the file systems
allow: a reflink (FICLONE: the two files share blocks until one is written; btrfs, XFS) when
both are on one file system that supports it, else a copy of the image's data extents only
(SEEK_DATA/SEEK_HOLE) with copy_file_range (in the kernel; same file system), else with
sendfile (in the kernel, across file systems: the usual case, cache on disk and RAM in tmpfs),
else read/write. Holes stay holes: the new RAM file allocates only the image's data.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator

BLOCK = 64 << 10           # granularity of the zero-block elimination and of the digest
CHUNK = 4 << 20            # bytes read or copied per call
FICLONE = 0x40049409       # _IOW(0x94, 9, int), linux/fs.h
_ZERO = bytes(BLOCK)


class ImageError(Exception):
    """A RAM image could not be read, written or copied; the message says which file and why."""


def _open(path: Path, flags: int, what: str) -> int:
    """os.open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0o600); ImageError "cannot WHAT PATH: why"."""
    try:
        return os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise ImageError(f"cannot {what} {path}: {e.strerror}") from None


def _extents(fd: int, size: int):
    """(start, end) of the data of fd within [0, size), aligned outwards to BLOCK. A file system
    without SEEK_DATA reports everything as data."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:          # no data after pos
                return
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                yield pos, size
                return
            raise
        if start >= size:
            return
        end = min(size, os.lseek(fd, start, os.SEEK_HOLE))
        start -= start % BLOCK
        end = min(size, -(-end // BLOCK) * BLOCK)
        yield max(start, pos), end
        pos = end


def _blocks(fd: int, size: int, path: Path):
    """(offset, memoryview) of every non-zero BLOCK of fd's first `size` bytes."""
    for start, end in _extents(fd, size):
        off = start
        while off < end:
            n = min(CHUNK, end - off)
            buf = os.pread(fd, n, off)
            if len(buf) != n:
                raise ImageError(f"{path} ends at {off + len(buf)} bytes, before {size}: truncated")
            mv = memoryview(buf)
            for k in range(0, n, BLOCK):
                blk = mv[k:k + BLOCK]
                if blk != _ZERO[:len(blk)]:
                    yield off + k, blk
            off += n


def _scan(fd: int, size: int, path: Path, each: Callable[[int, memoryview], None] | None = None
          ) -> tuple[str, int]:
    """The canonical digest (module doc) and the non-zero bytes of fd's first `size` bytes;
    `each(offset, block)` is called for every non-zero block, in order."""
    h = hashlib.sha256()
    data = 0
    for off, blk in _blocks(fd, size, path):
        h.update(off.to_bytes(8, "little"))
        h.update(blk)
        data += len(blk)
        if each is not None:
            each(off, blk)
    return h.hexdigest(), data


@contextlib.contextmanager
def _copying(src: Path, src_what: str, dst: Path, dst_flags: int, dst_what: str, fail: str
             ) -> Iterator[tuple[int, int]]:
    """(fd of src, fd of dst) for a copy; an OSError in the block becomes ImageError "FAIL: why"."""
    ifd = _open(src, os.O_RDONLY, src_what)
    try:
        ofd = _open(dst, dst_flags, dst_what)
        try:
            yield ifd, ofd
        except OSError as e:
            raise ImageError(f"{fail}: {e.strerror}") from None
        finally:
            os.close(ofd)
    finally:
        os.close(ifd)


def write_image(src: str | os.PathLike, size: int, dst: str | os.PathLike) -> dict[str, Any]:
    """Copy the first `size` bytes of RAM file `src` into a new sparse image `dst` (zero blocks
    left as holes) and return what the metadata records of it: size, data bytes, digest."""
    src, dst = Path(src), Path(dst)
    with _copying(src, "read the node's RAM file", dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "write",
                  f"cannot write {dst}") as (sfd, dfd):
        if os.fstat(sfd).st_size < size:
            raise ImageError(f"the node's RAM file {src} has {os.fstat(sfd).st_size} bytes, "
                             f"less than its RAM ({size})")
        run = bytearray()       # adjacent blocks, written with one call
        run_off = [0]

        def flush() -> None:
            if run:
                os.pwrite(dfd, run, run_off[0])
                run.clear()

        def add(off: int, blk: memoryview) -> None:
            if not run or run_off[0] + len(run) != off or len(run) >= CHUNK:
                flush()
                run_off[0] = off
            run.extend(blk)

        digest, data = _scan(sfd, size, src, add)
        flush()
        # no fsync (nor does QEMU's stream get one): after a crash, a file whose size or mtime
        # is not the one recorded is checked against the digest before it is used
        os.ftruncate(dfd, size)
    return {"size": size, "data_bytes": data, "block": BLOCK, "sha256": digest}


def image_digest(path: str | os.PathLike, size: int) -> tuple[str, int]:
    """The canonical digest of image `path` (module doc) and its non-zero bytes."""
    path = Path(path)
    fd = _open(path, os.O_RDONLY, "read")
    try:
        return _scan(fd, size, path)
    except OSError as e:
        raise ImageError(f"cannot read {path}: {e.strerror}") from None
    finally:
        os.close(fd)


def _copy_range(ifd: int, ofd: int, start: int, end: int, how: list[str]) -> None:
    """Copy [start, end) from ifd to ofd at the same offsets, with the cheapest call that works
    (how[0]: the method that worked last; updated)."""
    off = start
    while off < end:
        n = min(CHUNK, end - off)
        done = 0
        if how[0] == "copy_file_range":
            try:
                done = os.copy_file_range(ifd, ofd, n, off, off)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                how[0] = "sendfile"
                continue
        elif how[0] == "sendfile":
            try:
                os.lseek(ofd, off, os.SEEK_SET)
                done = os.sendfile(ofd, ifd, off, n)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                how[0] = "read/write"
                continue
        else:
            buf = os.pread(ifd, n, off)
            done = os.pwrite(ofd, buf, off) if buf else 0
        if done <= 0:
            raise ImageError(f"the image ends at {off} bytes, before {end}")
        off += done


def clone_image(image: str | os.PathLike, dst: str | os.PathLike, size: int) -> str:
    """Make `dst` (which must not exist) a private copy of RAM image `image` of `size` bytes, as
    cheaply as the file systems allow (module doc); the method used: "reflink",
    "copy_file_range", "sendfile" or "read/write"."""
    how = start_clone(image, dst, size)
    if how == "reflink":
        return how
    try:
        return finish_clone(image, dst, size)
    except BaseException:
        Path(dst).unlink(missing_ok=True)
        raise


def start_clone(image: str | os.PathLike, dst: str | os.PathLike, size: int) -> str:
    """The cheap first half of clone_image: `dst` (which must not exist) made a reflink of
    `image` ("reflink": done), else a hole of `size` bytes ("copy": finish_clone copies the
    data into it; a QEMU may map `dst` meanwhile, as long as nothing reads it before)."""
    image, dst = Path(image), Path(dst)
    ifd = _open(image, os.O_RDONLY, "read the RAM image")
    try:
        st = os.fstat(ifd)
        if st.st_size != size:
            raise ImageError(f"the RAM image {image} has {st.st_size} bytes, the node's RAM {size}: "
                             f"it is truncated or not this node's")
        ofd = _open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL, "create the node's RAM file")
        try:
            if os.fstat(ofd).st_dev == st.st_dev:
                try:
                    fcntl.ioctl(ofd, FICLONE, ifd)
                    return "reflink"
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL,
                                       errno.ENOSYS, errno.EPERM):
                        raise
            os.ftruncate(ofd, size)
            return "copy"
        except OSError as e:
            os.close(ofd)
            ofd = -1
            dst.unlink(missing_ok=True)
            raise ImageError(f"cannot make the node's RAM file {dst}: {e.strerror}") from None
        finally:
            if ofd >= 0:
                os.close(ofd)
    finally:
        os.close(ifd)


def finish_clone(image: str | os.PathLike, dst: str | os.PathLike, size: int) -> str:
    """Copy the data extents of `image` into `dst` made by start_clone (its holes stay holes);
    the method used: "copy_file_range", "sendfile" or "read/write"."""
    image, dst = Path(image), Path(dst)
    with _copying(image, "read the RAM image", dst, os.O_WRONLY, "write the node's RAM file",
                  f"cannot copy the RAM image {image} to {dst}") as (ifd, ofd):
        how = ["copy_file_range" if os.fstat(ofd).st_dev == os.fstat(ifd).st_dev else "sendfile"]
        for start, end in _extents(ifd, size):
            _copy_range(ifd, ofd, start, end, how)
        return how[0]
