"""The RNIC on persistent memory (docs/rnic.md "Persistent memory", docs/pmem.md "The RNIC on the
region"): one node RDMA-WRITEs into the other's persistent MR (`rnic pmem`, an MR over a mapping of
/dev/rkpmem0), one range followed by a FLUSH with persistence, one without; then a power cut of
the target keeping no pending line, and a restart. A WRITE's ACK only means the data reached the
NIC's volatile buffer (Erda, section 1): without FLUSH the range is lost in eadr (acknowledged, not
yet placed: nic-delay-ns is set to its largest, 4.3 s) and in adr-ddio (placed into the LLC at
most); with FLUSH it is kept in both.

One 2-node cluster: node 0 in eadr, node 1 in adr-ddio; node 1 writes into node 0, node 0 into
node 1.
"""
import os
import subprocess
import time

import conftest
import pytest
from conftest import ROOT
from guest_tools import kv, run_kv, stop_procs

LEN = 8192
FLUSHED_OFF, UNFLUSHED_OFF = 0x10000, 0x20000
MODES = ["eadr", "adr-ddio"]


def pattern(seed, n):
    """guest/common/tool.h pattern_byte(seed, i) for i < n."""
    m = (1 << 64) - 1
    out = bytearray(n)
    for i in range(n):
        x = ((seed + 1) * 0x9e3779b97f4a7c15 & m) ^ (i * 0xbf58476d1ce4e5b9 & m)
        x ^= x >> 29
        out[i] = (x * 0x94d049bb133111eb & m) >> 56
    return bytes(out)


def rackemu(cluster, *args):
    r = subprocess.run([str(ROOT / "rackemu"), *args, "--run-dir", str(cluster.run_dir)], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, RACKEMU_SKIP_SETUP="1"))
    assert r.returncode == 0, f"rackemu {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def counters(out):
    return {k: int(v) for k, v in (w.split("=", 1) for w in out.split() if "=" in w and w.split("=")[1].isdigit())}


def image_bytes(cluster, i, off, n):
    with open(cluster.config.pmem_image(i), "rb") as f:
        f.seek(off)
        return f.read(n)


@pytest.fixture(scope="module")
def pcluster():
    c = conftest._start(conftest._config(f"e2e-{os.getpid()}-rnic-pmem", nodes=2, memory="256M", rnic=True,
                                         pmem="16M", pmem_mode=MODES,
                                         pmem_props={"nic-delay-ns": 0xFFFFFFFF}))
    yield c
    c.down()
    conftest._clusters.remove(c)


def write(cluster, in_background, src, dst, off, seed, flush):
    """`rnic pmem --client` on node src into node dst's persistent MR; the client's line."""
    s, c = cluster.node(dst), cluster.node(src)
    port = 18700 + dst
    try:
        srv = in_background(s, f"rnic pmem --server --port {port} --len 1M", timeout=120)
        time.sleep(1)
        r, d = run_kv(c, f"rnic pmem --client node{dst} --port {port} --off {off:#x} --len {LEN} --seed {seed}"
                         + (" --flush" if flush else ""), timeout=120)
        assert r.rc == 0 and d and d[-1].get("ok") == "1", (r.stdout + r.stderr).decode()
        rs = srv.result(60)
        assert rs.rc == 0 and any(x.get("done") == "1" for x in kv(rs.stdout)), rs.stdout + rs.stderr
    finally:
        stop_procs(s, "rnic")
        stop_procs(c, "rnic")


def test_an_acknowledged_write_is_durable_only_after_flush(pcluster, in_background):
    c = pcluster
    # node 1 (adr-ddio) first: node 0 (eadr) is cut right after its unflushed WRITE, before the
    # NIC buffer's 4.3 s placement delay has passed
    for src, dst in ((0, 1), (1, 0)):
        write(c, in_background, src, dst, FLUSHED_OFF, 1 + dst, True)
        write(c, in_background, src, dst, UNFLUSHED_OFF, 11 + dst, False)
    for i in (0, 1):
        r = rackemu(c, "node", "powercut", str(i), "--pick", "none")
        cnt = counters(r.stdout)
        assert cnt["cuts"] == 1 and cnt["lost_bytes"] >= LEN, (MODES[i], r.stdout)
        if MODES[i] == "eadr":
            assert cnt["lost_nic"] >= 1, r.stdout  # acknowledged, never placed
        assert image_bytes(c, i, FLUSHED_OFF, LEN) == pattern(1 + i, LEN), MODES[i]
        assert image_bytes(c, i, UNFLUSHED_OFF, LEN) == bytes(LEN), MODES[i]
    for i in (0, 1):
        c.node(i).forget_agent()
        c.restart_node(i)
        n = c.node(i)
        got = bytes.fromhex(n.sh(f"rkpmem read {FLUSHED_OFF:#x} 64").strip())
        assert got == pattern(1 + i, 64), MODES[i]
        got = bytes.fromhex(n.sh(f"rkpmem read {UNFLUSHED_OFF:#x} 64").strip())
        assert got == bytes(64), MODES[i]
