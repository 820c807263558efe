"""Scenario: `cluster up --snapshot auto` (docs/launcher.md, "Booting from snapshots").

A private snapshot cache (RACKEMU_CACHE in tmp_path). The first 2-node `up` boots the nodes and
saves them into the cache; node 0 writes a file into its RAM (a small one and 8 MiB of random
bytes in its /tmp, a tmpfs) and is saved into the entry again. The second starts both from
their snapshots (the guest RAM from each node's image, the device state from the stream): the
files read back exactly, each node knows its own id, its guest clock is the host's (not the
save's), and the drivers work across nodes through the new bridge: a mailbox round trip each
way, RMC reads each way, GAS loads each way (and a second boot from the same snapshot draws
other random numbers). A second cluster started from the same entry meanwhile has its own RAM:
a file node 0 of one changes is unchanged on the other, and the image is unchanged.
Then node 1's cached stream is damaged in a way only QEMU can see (metadata and checksum made to
match): the third `up` starts node 0 from its snapshot, reports node 1's refusal, boots node 1
afresh and saves it again. A changed kernel command line is another configuration: the fourth
`up` boots both nodes and fills a new entry.
"""
import json
import os
import time

import pytest

from guest_tools import check, export, kv, rmc_hold

from rackemu.cluster import Cluster
from rackemu.config import load_config
from rackemu.ramimage import image_digest
from rackemu.snapshot import file_sha256, meta_path, ram_image_path

KEY = "0x5a7e5a7e00000001"
CTX = 64 << 10


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACKEMU_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "snapshots"


def entries(cache):
    return sorted(d for d in cache.iterdir() if d.is_dir()) if cache.is_dir() else []


def booted_from(c):
    return [n["snapshot"] for n in c.status_dict(ping=False)["nodes"]]


def mailbox_round_trip(run_concurrently, a, b, value):
    recv, send = run_concurrently(b, f"mbox recv --opcode {value >> 60} --action r --count 2 --timeout 30000",
                                  a, f"mbox send --node {b.id} --value {value:#x} --count 2", delay=1.5)
    assert send.rc == 0 and recv.rc == 0, (send.stdout, recv.stdout, recv.stderr)
    assert [int(d["msg"], 16) for d in kv(recv.stdout) if "msg" in d] == [value, value + 1]


def rmc_read(node, peer, seed):
    r = node.exec(f"RMC_KEY={KEY} rmc check-data --id 3 --node {peer} --roff 0 --len 4096 "
                  f"--seed {seed} --loff {CTX // 2}", timeout=120)
    assert r.rc == 0, (node.id, r.stdout, r.stderr)


def gas_ok(node, gaddr, seed):
    r, lines = check(node, gaddr, 4096, seed)
    assert r.rc == 0 and lines and all(d["ok"] == "1" and d["mismatches"] == "0" for d in lines), r.stdout


def test_nodes_boot_from_their_cached_snapshots_and_work_across_the_new_fabric(
        fresh_cluster, cache, run_concurrently):
    c = fresh_cluster(nodes=2, snapshot="auto")
    assert booted_from(c) == [None, None]
    [entry] = entries(cache)
    snaps = [entry / f"node{i}.snap" for i in range(2)]
    assert all(p.is_file() and meta_path(p).is_file() for p in snaps)
    assert [json.loads(meta_path(p).read_text())["node"] for p in snaps] == [0, 1]
    assert all(ram_image_path(p).stat().st_size == 256 << 20 for p in snaps)
    # what node 0's guest has in RAM when it is saved (again, into the entry)
    marker = f"written before the save {os.getpid()}"
    r = c.node(0).exec(f"echo '{marker}' > /tmp/marker && dd if=/dev/urandom of=/tmp/big bs=1M "
                       f"count=8 2>/dev/null && md5sum /tmp/big", timeout=60)
    assert r.rc == 0, r.stderr
    big_md5 = r.stdout.split()[0].decode()
    c.save_node(0, snaps[0], force=True)
    c.down()

    c = fresh_cluster(nodes=2, snapshot="auto")
    assert booted_from(c) == [str(p) for p in snaps]
    n0, n1 = c.node(0), c.node(1)
    boot_id = n0.sh("cat /proc/sys/kernel/random/boot_id").strip()
    for n in (n0, n1):
        assert n.sh("hostname").strip() == f"node{n.id}"
        guest_time = int(n.sh("date +%s"))
        assert abs(guest_time - time.time()) < 30, (n.id, guest_time, time.time())
    assert n0.sh("cat /tmp/marker").strip() == marker
    assert n0.sh("md5sum /tmp/big").split()[0] == big_md5
    # another cluster from the same entry: its own RAM files, made from the same images
    other = fresh_cluster(nodes=2, snapshot="auto")
    assert booted_from(other) == [str(p) for p in snaps]
    n0.sh("echo changed on the first cluster > /tmp/marker")
    assert other.node(0).sh("cat /tmp/marker").strip() == marker
    other.node(0).sh("echo changed on the second cluster > /tmp/marker")
    assert n0.sh("cat /tmp/marker").strip() == "changed on the first cluster"
    assert other.node(0).sh("md5sum /tmp/big").split()[0] == big_md5
    other.down()
    meta0 = json.loads(meta_path(snaps[0]).read_text())
    assert image_digest(ram_image_path(snaps[0]), 256 << 20)[0] == meta0["ram"]["sha256"]
    rmc_hold(n0, 3, CTX, "sb0", KEY, "--seed", "5")
    rmc_hold(n1, 3, CTX, "sb1", KEY, "--seed", "7")
    g0, _ = export(n0, 64 << 10, 3, "sb0")
    g1, _ = export(n1, 64 << 10, 4, "sb1")
    mailbox_round_trip(run_concurrently, n0, n1, 0x3000000000000100)
    mailbox_round_trip(run_concurrently, n1, n0, 0x5000000000000200)
    rmc_read(n0, 1, 7)
    rmc_read(n1, 0, 5)
    gas_ok(n0, g1, 4)
    gas_ok(n1, g0, 3)
    c.down()

    # a stream QEMU refuses (its metadata rewritten to match): node 1 falls back to a boot
    data = bytearray(snaps[1].read_bytes())
    data[16:4096] = b"\xff" * (4096 - 16)
    snaps[1].write_bytes(bytes(data))
    meta = json.loads(meta_path(snaps[1]).read_text())
    meta.pop("cache_stat")
    meta["sha256"] = file_sha256(snaps[1])
    meta_path(snaps[1]).write_text(json.dumps(meta))
    lines = []
    c = Cluster(load_config(overrides={"name": f"e2e-{os.getpid()}-sb", "nodes": 2, "snapshot": "auto"}),
                log=lines.append)
    try:
        c.up()
        assert booted_from(c) == [str(snaps[0]), None]
        # node 0 again from the same snapshot: its randomness does not repeat
        assert c.node(0).sh("cat /proc/sys/kernel/random/boot_id").strip() != boot_id
        text = "\n".join(lines)
        assert f"node 1: cached snapshot {snaps[1]} failed" in text, text
        assert "QEMU refused the snapshot" in text and "load of migration failed" in text, text
        assert "node 1: deleting it and booting the node afresh" in text, text
        assert file_sha256(snaps[1]) != meta["sha256"]     # saved again after the boot
        assert json.loads(meta_path(snaps[1]).read_text())["cache_stat"]
        mailbox_round_trip(run_concurrently, c.node(0), c.node(1), 0x3000000000000300)
    finally:
        c.down()

    # another kernel command line: another entry, both nodes boot
    c = fresh_cluster(nodes=2, snapshot="auto", kernel_cmdline="rackemu.snaptest=1")
    assert booted_from(c) == [None, None]
    assert len(entries(cache)) == 2
    assert "rackemu.snaptest=1" in c.node(1).sh("cat /proc/cmdline")
