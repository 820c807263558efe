"""The snapshot cache of `cluster up --snapshot` without QEMU: what the cache key covers (and
what it leaves out), how an entry is judged before a node loads it (metadata, the stat recorded
after the save, else the checksum), the size limit, and the option's validation. Booting from
the cache for real: tests/e2e/test_snapshot_boot.py."""
import json
import os
import time
from pathlib import Path

import pytest

from rackemu.cluster import Cluster
from rackemu.config import ConfigError, load_config
from rackemu.snapcache import Entry, cache_key, cache_root, key_material, normalized_argv, prune
from rackemu.snapshot import SnapshotError, file_sha256, meta_path, ram_image_path
from launcher_fakes import snapshot_files

ROOT = Path(__file__).resolve().parents[2]


def cluster(run_dir, **kw):
    over = {"run_dir": str(run_dir), "name": "sc", "nodes": 2}
    over.update(kw)
    return Cluster(load_config(overrides=over))


def key(c):
    return cache_key(key_material(c))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACKEMU_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "snapshots"


def test_the_key_ignores_where_and_under_which_name_a_cluster_runs(tmp_path, fake_build):
    a = cluster(tmp_path / "a")
    b = Cluster(load_config(overrides={"run_dir": str(tmp_path / "elsewhere" / "b"), "name": "other",
                                       "nodes": 2}))
    assert key(a) == key(b)
    argv = normalized_argv(a, 1)
    assert argv == normalized_argv(b, 1)
    text = " ".join(argv)
    assert str(tmp_path) not in text and "RUN_DIR/node1.agent" in text and "RAM_DIR/node1.ram" in text
    assert argv[0] == "QEMU" and "KERNEL" in argv and "INITRD" in argv
    assert "rackemu-NAME-node1" in argv and "rackemu.node=1" in text


@pytest.mark.parametrize("change", [{"nodes": 3}, {"memory": "512M"}, {"vcpus": 2},
                                    {"cpu": "cortex-a53"}, {"kernel_cmdline": "cma=128M"},
                                    {"qemu_args": ["-d", "guest_errors"]}])
def test_the_key_changes_with_what_reaches_qemu_or_the_guest(tmp_path, fake_build, change):
    assert key(cluster(tmp_path / "a")) != key(cluster(tmp_path / "a", **change))


@pytest.mark.parametrize("artefact", ["qemu/qemu-system-aarch64", "guest/initramfs.cpio", "kernel"])
def test_the_key_changes_with_the_contents_of_qemu_kernel_and_initramfs(tmp_path, fake_build, artefact):
    before = key(cluster(tmp_path / "a"))
    path = tmp_path / "Image" if artefact == "kernel" else fake_build / artefact
    if path.is_symlink():            # the fake QEMU is a link to a script: replace it by a copy
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data)
        path.chmod(0o755)
        assert key(cluster(tmp_path / "a")) == before    # same contents, same key
    path.write_bytes(path.read_bytes() + b"\n# rebuilt\n")
    assert key(cluster(tmp_path / "a")) != before


def test_the_boot_timeout_and_the_mode_do_not_change_the_key(tmp_path, fake_build):
    assert key(cluster(tmp_path / "a")) == key(cluster(tmp_path / "a", boot_timeout=5,
                                                       snapshot="refresh"))


def snapshot_in(entry, c, i, data=b"QEVM\x00\x00\x00\x03 stream"):
    """Node i's entry as `cluster up` leaves it after a save (metadata, then its stat)."""
    entry.dir.mkdir(parents=True, exist_ok=True)
    path = snapshot_files(c, i, entry.snap(i), data, ram=b"page of node %d" % i)
    entry.stamp(i)
    return path


def test_an_entry_is_trusted_while_its_file_is_the_one_written_else_checked(tmp_path, fake_build, cache):
    c = cluster(tmp_path / "r")
    m = key_material(c)
    e = Entry(cache_root(), cache_key(m), m)
    e.open()
    assert e.dir.parent == cache and oct(e.dir.stat().st_mode & 0o777) == "0o700"
    assert json.loads((e.dir / "key.json").read_text()) == json.loads(json.dumps(m))
    path = snapshot_in(e, c, 1)
    e.check(c.config, 1)
    snapshot_in(e, c, 0)
    meta_path(e.snap(0)).write_text(meta_path(path).read_text())   # node 1's metadata
    with pytest.raises(SnapshotError, match="not of node 0"):
        e.check(c.config, 0)
    # rewritten in place with other bytes of the same size: the stat changed, the checksum is
    # checked and refuses it
    time.sleep(0.01)
    path.write_bytes(b"QEVM\x00\x00\x00\x03 strean")
    with pytest.raises(SnapshotError, match="checksum"):
        e.check(c.config, 1)
    path.write_bytes(b"QEVM")
    with pytest.raises(SnapshotError, match="truncated"):
        e.check(c.config, 1)
    # the right bytes again (copied back, say): verified once, then trusted by their stat
    path.write_bytes(b"QEVM\x00\x00\x00\x03 stream")
    e.check(c.config, 1)
    assert json.loads(meta_path(path).read_text())["cache_stat"][2] == path.stat().st_size
    # the RAM image: a page changed in place (its stat changes) is found by the digest; a
    # truncated one by its size before any digest
    image = ram_image_path(path)
    with open(image, "r+b") as f:
        f.seek(200 << 20)
        f.write(b"stray write")
    with pytest.raises(SnapshotError, match="RAM image .* does not match the checksum"):
        e.check(c.config, 1)
    os.truncate(image, 100 << 20)
    with pytest.raises(SnapshotError, match="RAM image .* is 104857600 bytes, the node's RAM 268435456"):
        e.check(c.config, 1)
    with open(image, "wb") as f:      # as saved again
        f.write(b"page of node 1")
        f.truncate(256 << 20)
    e.check(c.config, 1)
    # another configuration: refused by the metadata before any checksum
    with pytest.raises(SnapshotError, match="guest RAM"):
        e.check(cluster(tmp_path / "r", memory="512M").config, 1)
    e.drop(1)
    assert not path.exists() and not meta_path(path).exists() and not image.exists()
    e.close()


@pytest.mark.parametrize("which", ["stream", "image"])
def test_a_file_edited_in_place_with_its_mtime_set_back_is_verified_again(
        tmp_path, fake_build, cache, which):
    """trust-model.md finding R6: the cache trusted (device, inode, size, mtime) after one check, so a
    stream or RAM image edited in place whose mtime was restored with os.utime (or `touch -d`)
    booted unverified. The ctime, which no program can set back, is part of what is trusted."""
    c = cluster(tmp_path / "r")
    m = key_material(c)
    e = Entry(cache_root(), cache_key(m), m)
    e.open()
    path = snapshot_in(e, c, 0)
    e.check(c.config, 0)                                   # trusted by its stat from now on
    target = path if which == "stream" else ram_image_path(path)
    st = target.stat()
    time.sleep(0.02)                                # a ctime the clock can tell apart
    with open(target, "r+b") as f:                  # same size, same inode, other bytes
        f.seek(5)
        f.write(b"\xee")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns and target.stat().st_size == st.st_size
    with pytest.raises(SnapshotError, match="does not match the checksum"):
        e.check(c.config, 0)
    e.close()


def test_entry_locks_exclude_a_writer_while_another_reads(tmp_path, fake_build, cache):
    c = cluster(tmp_path / "r")
    m = key_material(c)
    reader, writer = Entry(cache_root(), cache_key(m), m), Entry(cache_root(), cache_key(m), m)
    reader.open()
    writer.open()
    assert reader.lock(exclusive=False)
    assert not writer.lock(exclusive=True)
    assert writer.lock(exclusive=False)
    reader.close()
    assert writer.lock(exclusive=True)     # alone now: the shared lock becomes exclusive
    writer.close()


def test_prune_drops_the_least_recently_used_entries_beyond_the_limit(tmp_path, cache, monkeypatch):
    cache.mkdir(parents=True)
    now = time.time()
    for k, name in enumerate(["old", "mid", "new", "current"]):
        d = cache / name
        d.mkdir()
        (d / "node0.snap").write_bytes(os.urandom(1 << 20))
        (d / "last-used").write_text("x")
        os.utime(d / "last-used", (now - 1000 + 100 * k, now - 1000 + 100 * k))
    os.utime(cache / "current" / "last-used", (now - 5000, now - 5000))   # oldest, but in use now
    gone = prune(keep=cache / "current", limit=(2 << 20) + (64 << 10))
    assert sorted(d.name for d in gone) == ["mid", "old"]
    assert sorted(d.name for d in cache.iterdir()) == ["current", "new"]
    monkeypatch.setenv("RACKEMU_SNAPSHOT_CACHE_MB", "0")
    assert [d.name for d in prune(keep=cache / "current")] == ["new"]


def test_the_mode_is_validated_and_offered_on_the_command_line():
    assert load_config().snapshot == "off"
    for mode in ("auto", "off", "refresh"):
        assert load_config(overrides={"snapshot": mode}).snapshot == mode
    with pytest.raises(ConfigError, match=r"snapshot: 'on' is not a mode \(use one of: auto, off, refresh\)"):
        load_config(overrides={"snapshot": "on"})
    import subprocess
    r = subprocess.run([str(ROOT / "rackemu"), "cluster", "up", "--help"], capture_output=True,
                       text=True, env=dict(os.environ, RACKEMU_SKIP_SETUP="1"), timeout=60)
    assert r.returncode == 0 and "--snapshot {auto,off,refresh}" in r.stdout
    assert "snapshots" in r.stdout
    r = subprocess.run([str(ROOT / "rackemu"), "cluster", "up", "--snapshot", "yes"], capture_output=True,
                       text=True, env=dict(os.environ, RACKEMU_SKIP_SETUP="1"), timeout=60)
    assert r.returncode == 2 and "invalid choice: 'yes'" in r.stderr


def test_artefact_digests_are_kept_across_processes_per_file_version(tmp_path, cache, monkeypatch):
    """The ~140 MB of QEMU, kernel and initramfs are hashed once per file version, not at every
    `up`: the digest is kept in the cache's directory and used while the file's identity
    (device, inode, size, mtime, ctime) is unchanged; a rewrite changes the ctime."""
    from rackemu import snapshot
    cache.mkdir(parents=True, mode=0o700)
    f = tmp_path / "artefact"
    f.write_bytes(b"one")
    calls = []
    real = snapshot.file_sha256
    monkeypatch.setattr(snapshot, "file_sha256", lambda p: calls.append(p) or real(p))
    assert snapshot.artefact_sha256(f) == file_sha256(f)
    assert len(calls) == 1
    sums = json.loads((cache / snapshot.SUMS_FILE).read_text())["sums"]
    assert sums[str(f.resolve())][5] == file_sha256(f)
    snapshot._artefact_sums.clear()              # a new process
    assert snapshot.artefact_sha256(f) == file_sha256(f)
    assert len(calls) == 1, "hashed again although the file did not change"
    time.sleep(0.01)
    f.write_bytes(b"two")                       # same size, new contents: a new version
    snapshot._artefact_sums.clear()
    assert snapshot.artefact_sha256(f) == file_sha256(f)
    assert len(calls) == 2
    # a forged record is not believed for another version of the file, and a store in a
    # directory others may write is not used at all
    sums = json.loads((cache / snapshot.SUMS_FILE).read_text())["sums"]
    sums[str(f.resolve())][5] = "0" * 64
    sums[str(f.resolve())][4] += 1
    (cache / snapshot.SUMS_FILE).write_text(json.dumps({"format": 1, "sums": sums}))
    snapshot._artefact_sums.clear()
    assert snapshot.artefact_sha256(f) == file_sha256(f)
    os.chmod(cache, 0o777)
    assert snapshot._sums_path() is None
    os.chmod(cache, 0o700)


def test_an_entry_of_the_old_format_is_not_read_but_rebuilt(tmp_path, fake_build, cache):
    """Format 1 kept the guest RAM in the stream: its entries are under another key (the cache
    format is in it), and a format-1 snapshot found under the new key is refused by its metadata
    (start_nodes then deletes it and boots the node, which is saved anew)."""
    c = cluster(tmp_path / "r")
    m = key_material(c)
    assert m["format"] == 2
    assert cache_key(m) != cache_key(dict(m, format=1))
    e = Entry(cache_root(), cache_key(m), m)
    e.open()
    path = snapshot_in(e, c, 0)
    meta = json.loads(meta_path(path).read_text())
    meta["format"] = 1
    meta_path(path).write_text(json.dumps(meta))
    with pytest.raises(SnapshotError, match="snapshot format 1; this rackemu reads format 2: it was saved "
                                            "by an earlier rackemu with the guest RAM in the stream"):
        e.check(c.config, 0)
    e.close()
