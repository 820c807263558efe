"""`rackemu node save/restore` without QEMU: the checks a restore makes before it touches a node
(file, metadata, node, cluster shape, build, checksum) and the CLI's messages. The QMP client:
test_qmp.py. The real save and restore: tests/e2e/test_savevm.py."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from rackemu.cluster import Cluster, ClusterError
from rackemu.config import load_config
from rackemu.snapshot import (SNAPSHOT_FORMAT, SnapshotError, check_restorable, meta_path, ram_image_path,
                              read_meta)
from launcher_fakes import snapshot_files

ROOT = Path(__file__).resolve().parents[2]
RACKEMU = str(ROOT / "rackemu")


def run(*args, env=None):
    e = dict(os.environ, RACKEMU_SKIP_SETUP="1")
    e.update(env or {})
    return subprocess.run([RACKEMU, *args], capture_output=True, text=True, env=e, timeout=60)


def cluster(run_dir, **kw):
    over = {"run_dir": str(run_dir), "boot_timeout": 10, "name": "snap", "nodes": 2}
    over.update(kw)
    return Cluster(load_config(overrides=over))


def snapshot_for(c, node, path, data=b"QEVM\x00\x00\x00\x03 stream", **changes):
    """A snapshot (stream, RAM image, metadata) as `rackemu node save` would write it for node
    `node` of c."""
    return snapshot_files(c, node, path, data, ram=b"guest page", **changes)


@pytest.mark.parametrize("cmd", [["node", "save"], ["node", "restore"]])
def test_save_and_restore_have_help(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: rackemu node")
    assert "FILE" in r.stdout and "--name" in r.stdout


def test_restore_names_a_missing_file_or_metadata(tmp_path):
    r = run("node", "restore", "1", str(tmp_path / "nope.snap"), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and f"no snapshot file {tmp_path / 'nope.snap'}" in r.stderr
    (tmp_path / "x.snap").write_bytes(b"data")
    r = run("node", "restore", "1", str(tmp_path / "x.snap"), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "has no metadata file x.snap.meta.json beside it" in r.stderr
    meta_path(tmp_path / "x.snap").write_text('{"format": 99}')
    r = run("node", "restore", "1", str(tmp_path / "x.snap"), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "snapshot format 99; this rackemu reads format 2" in r.stderr
    meta_path(tmp_path / "x.snap").write_text('{"format": 1}')
    r = run("node", "restore", "1", str(tmp_path / "x.snap"), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "snapshot format 1; this rackemu reads format 2: it was saved by an " \
        "earlier rackemu with the guest RAM in the stream" in r.stderr and "Save the node again" in r.stderr
    meta_path(tmp_path / "x.snap").write_text("{not json")
    r = run("node", "restore", "1", str(tmp_path / "x.snap"), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "cannot read the snapshot metadata" in r.stderr


def test_save_and_restore_need_a_running_cluster(tmp_path, fake_build):
    c = cluster(tmp_path / "r")
    snap = snapshot_for(c, 1, tmp_path / "n1.snap")
    for args in (["save", "1", str(tmp_path / "new.snap")], ["restore", "1", str(snap)]):
        r = run("node", *args, "--run-dir", str(tmp_path / "r"))
        assert r.returncode == 1 and "no cluster in" in r.stderr, r.stderr


def test_save_refuses_a_wrong_node_an_existing_file_and_a_stopped_cluster(tmp_path, fake_build, fake_agent):
    rd = tmp_path / "r"
    c = cluster(rd)
    c.up()
    try:
        r = run("node", "save", "5", str(tmp_path / "s"), "--run-dir", str(rd))
        assert r.returncode == 1 and "no node 5: cluster 'snap' has nodes 0..1" in r.stderr
        (tmp_path / "exists").write_bytes(b"x")
        r = run("node", "save", "1", str(tmp_path / "exists"), "--run-dir", str(rd))
        assert r.returncode == 1 and "exists; remove it or pass --force" in r.stderr
        r = run("node", "save", "1", str(tmp_path / "nodir" / "s"), "--run-dir", str(rd))
        assert r.returncode == 1 and "is not a directory" in r.stderr
        c.kill_node(1)
        with pytest.raises(SnapshotError, match="node 1 is not running .*nothing to save.*node restore 1 FILE"):
            c.save_node(1, tmp_path / "s")
    finally:
        c.down()
    with pytest.raises(ClusterError, match="is not running"):
        c.save_node(1, tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_restore_checks_node_shape_build_and_checksum(tmp_path, fake_build):
    c = cluster(tmp_path / "r")
    good = snapshot_for(c, 1, tmp_path / "good.snap")
    assert check_restorable(c.config, 1, good)["node"] == 1
    with pytest.raises(SnapshotError, match="is a snapshot of node 1, not of node 0"):
        check_restorable(c.config, 0, good)
    bigger = cluster(tmp_path / "r2", memory="512M")
    with pytest.raises(SnapshotError, match=r"guest RAM: snapshot '256M', this node '512M'"):
        check_restorable(bigger.config, 1, good)
    wider = cluster(tmp_path / "r3", nodes=3)
    with pytest.raises(SnapshotError, match="cluster size"):
        check_restorable(wider.config, 1, good)
    other_qemu = snapshot_for(c, 1, tmp_path / "q.snap", qemu_sha256="0" * 64, qemu="/old/qemu")
    with pytest.raises(SnapshotError, match=r"QEMU binary differs: the snapshot was made with /old/qemu"):
        check_restorable(c.config, 1, other_qemu)
    other_image = snapshot_for(c, 1, tmp_path / "i.snap", initrd_sha256="1" * 64)
    with pytest.raises(SnapshotError, match="guest initramfs differs"):
        check_restorable(c.config, 1, other_image)
    changed = tmp_path / "changed.snap"
    changed.write_bytes(b"QEVM\x00\x00\x00\x03 strean")       # same size, other bytes
    meta_path(changed).write_text(meta_path(good).read_text())
    os.link(ram_image_path(good), ram_image_path(changed))
    with pytest.raises(SnapshotError, match="checksum"):
        check_restorable(c.config, 1, changed)
    assert check_restorable(c.config, 1, changed, verify=False)["node"] == 1   # QEMU gets to judge
    cut = tmp_path / "cut.snap"
    cut.write_bytes(b"QEVM")
    meta_path(cut).write_text(meta_path(good).read_text())
    os.link(ram_image_path(good), ram_image_path(cut))
    with pytest.raises(SnapshotError, match="is 4 bytes, its metadata says 15: the file is truncated"):
        check_restorable(c.config, 1, cut)
    assert check_restorable(c.config, 1, cut, verify=False)["node"] == 1
    # the RAM image: missing, truncated, changed in place (same size), or given to a node with
    # other RAM; --no-verify skips only the checksum
    image = ram_image_path(good)
    image.write_bytes(b"guest page")
    os.truncate(image, 4096)
    with pytest.raises(SnapshotError, match=r"RAM image .* is 4096 bytes, the node's RAM 268435456: the image "
                                            r"is truncated"):
        check_restorable(c.config, 1, good, verify=False)
    os.truncate(image, 256 << 20)
    with open(image, "r+b") as f:
        f.write(b"guestXpage")
    with pytest.raises(SnapshotError, match=r"RAM image .* does not match the checksum"):
        check_restorable(c.config, 1, good)
    assert check_restorable(c.config, 1, good, verify=False)["node"] == 1
    with open(image, "r+b") as f:
        f.write(b"guest page")
    assert check_restorable(c.config, 1, good)["node"] == 1
    image.unlink()
    with pytest.raises(SnapshotError, match=r"has no RAM image good.snap.ram beside it"):
        check_restorable(c.config, 1, good, verify=False)
    incomplete = tmp_path / "incomplete.snap"
    incomplete.write_bytes(b"x")
    meta_path(incomplete).write_text(json.dumps({"format": SNAPSHOT_FORMAT, "node": 1}))
    with pytest.raises(SnapshotError, match="lacks node_count"):
        read_meta(incomplete)


def test_cli_restore_reports_a_mismatch_before_touching_the_node(tmp_path, fake_build, fake_agent):
    rd = tmp_path / "r"
    c = cluster(rd)
    c.up()
    try:
        snap = snapshot_for(c, 0, tmp_path / "n0.snap")
        pid = c.node(1).pid
        r = run("node", "restore", "1", str(snap), "--run-dir", str(rd))
        assert r.returncode == 1 and "is a snapshot of node 0, not of node 1" in r.stderr, r.stderr
        assert c.node(1).alive() and c.node(1).pid == pid
    finally:
        c.down()
