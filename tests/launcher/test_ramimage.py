"""The guest-RAM image of a snapshot (platform/rackemu/ramimage.py) without QEMU: what it keeps
of a RAM file, its digest, and the copies a restore makes from it with each method. Booting
from real images: tests/e2e/test_snapshot_boot.py and tests/e2e/test_savevm.py."""
import errno
import os

import pytest

from rackemu import ramimage
from rackemu.ramimage import BLOCK, ImageError, clone_image, image_digest, write_image

SIZE = 8 << 20


def ram_file(path, pages, tail=b""):
    """A RAM file of SIZE bytes (plus `tail` after it, as the direct path's tail page) with
    `pages` ({offset: bytes}) written and the rest a hole."""
    with open(path, "wb") as f:
        f.truncate(SIZE)
        for off, data in pages.items():
            f.seek(off)
            f.write(data)
        if tail:
            f.seek(SIZE)
            f.write(tail)
    return path


PAGES = {0: b"boot", 5 * BLOCK + 4096: os.urandom(4096), SIZE - 4096: b"last page",
         3 * BLOCK: bytes(4096)}       # written, but zeros: not data


def test_the_image_keeps_the_non_zero_blocks_of_the_ram_and_nothing_after_it(tmp_path):
    src = ram_file(tmp_path / "node0.ram", PAGES, tail=b"tail page")
    info = write_image(src, SIZE, tmp_path / "img")
    img = tmp_path / "img"
    assert info["size"] == SIZE == img.stat().st_size
    assert info["data_bytes"] == 3 * BLOCK and info["block"] == BLOCK
    assert img.stat().st_blocks * 512 <= 3 * BLOCK + (64 << 10)     # a sparse file
    data = img.read_bytes()
    assert data == src.read_bytes()[:SIZE]
    assert image_digest(img, SIZE) == (info["sha256"], 3 * BLOCK)


def test_the_digest_is_of_the_contents_not_of_how_the_file_is_stored(tmp_path):
    img = tmp_path / "img"
    info = write_image(ram_file(tmp_path / "r", PAGES), SIZE, img)
    dense = tmp_path / "dense"
    dense.write_bytes(img.read_bytes())          # the same bytes, no holes
    assert image_digest(dense, SIZE)[0] == info["sha256"]
    for off, data in ((SIZE - 1, b"\x01"), (7 * BLOCK, b"\x00\x02")):   # a byte in a hole
        with open(dense, "r+b") as f:
            f.seek(off)
            f.write(data)
        assert image_digest(dense, SIZE)[0] != info["sha256"]
    moved = ram_file(tmp_path / "moved", {BLOCK: b"boot", **{k: v for k, v in PAGES.items() if k}})
    assert image_digest(moved, SIZE)[0] != info["sha256"]     # same bytes at another offset


@pytest.mark.parametrize("method", ["copy_file_range", "sendfile", "read/write"])
def test_a_clone_is_a_private_copy_with_the_same_holes(tmp_path, monkeypatch, method):
    img = tmp_path / "img"
    info = write_image(ram_file(tmp_path / "r", PAGES), SIZE, img)

    def refuse(*_a):
        raise OSError(errno.EXDEV if method != "read/write" else errno.EINVAL, "refused")
    monkeypatch.setattr(ramimage.fcntl, "ioctl", lambda *a: (_ for _ in ()).throw(OSError(errno.EOPNOTSUPP, "no")))
    if method != "copy_file_range":
        monkeypatch.setattr(ramimage.os, "copy_file_range", refuse)
    if method == "read/write":
        monkeypatch.setattr(ramimage.os, "sendfile", refuse)
    a, b = tmp_path / "a.ram", tmp_path / "b.ram"
    assert clone_image(img, a, SIZE) == method
    clone_image(img, b, SIZE)
    assert a.read_bytes() == img.read_bytes()
    assert a.stat().st_blocks * 512 <= 3 * BLOCK + (64 << 10)
    assert image_digest(a, SIZE)[0] == info["sha256"]
    with open(a, "r+b") as f:                     # one node's write is not seen by another
        f.write(b"node a")
    assert b.read_bytes()[:6] == b"boot\x00\x00" and img.read_bytes()[:6] == b"boot\x00\x00"


def test_a_clone_refuses_a_truncated_image_and_an_existing_file(tmp_path):
    img = tmp_path / "img"
    write_image(ram_file(tmp_path / "r", PAGES), SIZE, img)
    os.truncate(img, SIZE - BLOCK)
    with pytest.raises(ImageError, match=r"has 8323072 bytes, the node's RAM 8388608: it is truncated"):
        clone_image(img, tmp_path / "a.ram", SIZE)
    assert not (tmp_path / "a.ram").exists()
    os.truncate(img, SIZE)
    (tmp_path / "a.ram").write_bytes(b"x")
    with pytest.raises(ImageError, match="cannot create the node's RAM file .*a.ram: File exists"):
        clone_image(img, tmp_path / "a.ram", SIZE)
    with pytest.raises(ImageError, match="cannot read the RAM image .*nope"):
        clone_image(tmp_path / "nope", tmp_path / "b.ram", SIZE)


def test_write_image_refuses_a_ram_file_smaller_than_the_ram(tmp_path):
    src = tmp_path / "r"
    src.write_bytes(b"short")
    with pytest.raises(ImageError, match="has 5 bytes, less than its RAM"):
        write_image(src, SIZE, tmp_path / "img")
