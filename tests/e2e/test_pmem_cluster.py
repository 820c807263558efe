"""Persistent memory on real nodes (docs/pmem.md): the region as /dev/pmem0 and /dev/rkpmem0, CPU
stores with and without DC CVAP/DC CVAC, `rackemu node powercut` and `rackemu node restart`, and
what survives per mode.

One 2-node cluster per pair of modes (pmem_mode is per node), 16 MiB of persistent memory each.
On every node: line A is stored and persisted, line B only stored; a power cut keeping no pending
line, then a restart, must leave A in every mode, and B exactly where the mode says a CPU store is
durable without a write-back (none, eadr). The durable image file is checked host-side too. The
CPU-store behaviour of none equals eadr's and adr-ddio's equals adr's, so the pairs are
(eadr, adr) and (none, adr-ddio); the second pair also cuts adr-ddio keeping every pending line.
"""
import os
import subprocess

import conftest
import pytest
from conftest import ROOT

from rackemu.config import ConfigError, load_config  # noqa: E402

A_OFF, B_OFF, C_OFF = 0x1000, 0x2040, 0x3080   # three lines in three pages
BLK_OFF = 0x40000                               # a block written through /dev/pmem0
WIDE_OFF, WIDE_LEN = 0x10000, 8192              # 128 lines: beyond llc-lines = 16
LEN = 64
A_BYTE, B_BYTE, C_BYTE = 0x5A, 0xB4, 0x3C
STORE_DURABLE = {"none": True, "eadr": True, "adr": False, "adr-ddio": False}


def rackemu(cluster, *args, check=True):
    r = subprocess.run([str(ROOT / "rackemu"), *args, "--run-dir", str(cluster.run_dir)], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, RACKEMU_SKIP_SETUP="1"))
    if check:
        assert r.returncode == 0, f"rackemu {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def image_bytes(cluster, i, off, n=LEN):
    with open(cluster.config.pmem_image(i), "rb") as f:
        f.seek(off)
        return f.read(n)


def read_region(node, off, n=LEN):
    return bytes.fromhex(node.sh(f"rkpmem read {off:#x} {n}").strip())


def counters(out):
    """The name=value counters `node powercut` prints."""
    return {k: int(v) for k, v in (w.split("=", 1) for w in out.split() if "=" in w and w.split("=")[1].isdigit())}


def restart(cluster, i):
    """Boot node i again (in this process: its Node object then knows the new QEMU)."""
    cluster.node(i).forget_agent()
    cluster.restart_node(i)


@pytest.fixture(scope="module", params=[("eadr", "adr"), ("none", "adr-ddio")], ids=lambda p: "-".join(p))
def pmem_cluster(request):
    """A 2-node cluster with 16 MiB of persistent memory per node, one mode pair per run."""
    props = {"llc-lines": 16} if "adr-ddio" in request.param else {}
    c = conftest._start(conftest._config(f"e2e-{os.getpid()}-pmem-{'-'.join(request.param)}", nodes=2,
                                         memory="256M", pmem="16M", pmem_mode=list(request.param),
                                         pmem_props=props))
    yield c
    c.down()
    conftest._clusters.remove(c)


def test_region_devices(pmem_cluster):
    for n in pmem_cluster.nodes:
        out = n.sh("ls -l /dev/pmem0 /dev/rkpmem0; cat /sys/block/pmem0/size; rkpmem info")
        assert "/dev/pmem0" in out and "/dev/rkpmem0" in out
        assert "32768" in out.split()  # 16 MiB in 512-byte sectors
        mode = pmem_cluster.config.pmem_mode[n.id]
        assert f"base=0x2000000000 size={16 << 20} mode={mode}" in out


def test_powercut_keeps_what_the_mode_says(pmem_cluster):
    c = pmem_cluster
    modes = c.config.pmem_mode
    for n in c.nodes:
        n.sh(f"rkpmem fill {A_OFF:#x} {LEN} {A_BYTE:#x} persist && rkpmem fill {B_OFF:#x} {LEN} {B_BYTE:#x}")
        # the kernel's path: nd_pmem writes back what it writes (DC CVAC on cortex-a57)
        n.sh(f"dd if=/dev/zero bs=4096 count=1 2>/dev/null | tr '\\000' 'p' | "
             f"dd of=/dev/pmem0 bs=4096 seek={BLK_OFF // 4096} conv=fsync 2>/dev/null")
        assert read_region(n, A_OFF) == bytes([A_BYTE]) * LEN
        assert read_region(n, B_OFF) == bytes([B_BYTE]) * LEN
    for i, mode in enumerate(modes):
        r = rackemu(c, "node", "powercut", str(i), "--pick", "none")
        cnt = counters(r.stdout)
        assert cnt["cuts"] == 1 and cnt["lost_nic"] == 0, r.stdout
        assert cnt["lost_bytes"] == (0 if STORE_DURABLE[mode] else LEN), r.stdout
        assert cnt["lost_lines"] == (0 if STORE_DURABLE[mode] else 1), r.stdout
        if not STORE_DURABLE[mode]:
            assert cnt["wb_lines"] >= 1 and cnt["wb_bytes"] >= LEN, r.stdout   # line A's DC CVAC
        assert not c.node(i).alive()
        assert image_bytes(c, i, A_OFF) == bytes([A_BYTE]) * LEN
        assert image_bytes(c, i, BLK_OFF, 4096) == b"p" * 4096, mode
        b = image_bytes(c, i, B_OFF)
        assert b == (bytes([B_BYTE]) * LEN if STORE_DURABLE[mode] else bytes(LEN)), (mode, b.hex())
    for i, mode in enumerate(modes):
        restart(c, i)
        n = c.node(i)
        assert read_region(n, A_OFF) == bytes([A_BYTE]) * LEN, mode
        b = read_region(n, B_OFF)
        assert b == (bytes([B_BYTE]) * LEN if STORE_DURABLE[mode] else bytes(LEN)), (mode, b.hex())


def test_powercut_pick_all_keeps_pending_stores(pmem_cluster):
    c = pmem_cluster
    i = [k for k, m in enumerate(c.config.pmem_mode) if not STORE_DURABLE[m]][0]
    if c.config.pmem_mode[i] != "adr-ddio":
        pytest.skip("one pick-all cut per run: on the adr-ddio node")
    n = c.node(i)
    n.sh(f"rkpmem fill {C_OFF:#x} {LEN} {C_BYTE:#x} && rkpmem fill {WIDE_OFF:#x} {WIDE_LEN} 0x77")
    r = rackemu(c, "node", "powercut", str(i), "--pick", "all")
    cnt = counters(r.stdout)
    assert cnt["lost_bytes"] == 0 and cnt["lost_lines"] == 0, r.stdout
    # 129 lines stored, the LLC holds 16: the rest were evicted (written back) on the way
    assert cnt["evict_lines"] >= 129 - 16, r.stdout
    assert image_bytes(c, i, C_OFF) == bytes([C_BYTE]) * LEN
    assert image_bytes(c, i, WIDE_OFF, WIDE_LEN) == b"\x77" * WIDE_LEN
    restart(c, i)
    assert read_region(c.node(i), C_OFF) == bytes([C_BYTE]) * LEN


def test_bad_cli_values_refused(pmem_cluster):
    c = pmem_cluster
    r = rackemu(c, "node", "powercut", "0", "--pick", "some", check=False)
    assert r.returncode == 2 and "invalid choice: 'some'" in r.stderr
    r = rackemu(c, "node", "powercut", "0", "--pick", "random", "--seed", "-1", check=False)
    assert r.returncode == 2 and "out of range" in r.stderr
    r = rackemu(c, "node", "powercut", "7", check=False)
    assert r.returncode != 0 and "node" in r.stderr
    assert all(n.alive() for n in c.nodes)


@pytest.mark.parametrize("over, msg", [
    ({"pmem": "3M"}, "pmem: '3M' is not a multiple of 2 MiB"),
    ({"pmem": "16M", "pmem_mode": "adr2"}, "pmem_mode: 'adr2' is not one of"),
    ({"pmem": "16M", "pmem_mode": ["adr"]}, "give one per node"),
    ({"pmem": "16M", "pmem_props": {"llc-lines": 0}}, "pmem_props.llc-lines: 0 is out of range"),
    ({"pmem": "16M", "pmem_props": {"ways": 4}}, "pmem_props: unknown property 'ways'"),
    ({"pmem": "16M", "snapshot": "auto"}, "boot on its durable image"),
])
def test_bad_config_refused(over, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        load_config(overrides={"nodes": 2, **over})


def test_bad_toml_refused_by_cluster_up(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('nodes = 1\npmem = "16M"\npmem_mode = "adr-dio"\n')
    r = subprocess.run([str(ROOT / "rackemu"), "cluster", "up", "--config", str(toml), "--run-dir",
                        str(tmp_path / "run")], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, RACKEMU_SKIP_SETUP="1"))
    assert r.returncode != 0 and "pmem_mode: 'adr-dio' is not one of" in r.stderr
