"""Scenario: the Xilinx AXI CDMA-compatible engine under Linux's own drivers, in booted nodes.

Linux's unmodified xilinx_dma binds the engine from the device tree and its unmodified dmatest
copies and verifies buffers with it. Then copies through the same driver (dmaengine, via
unimem_dma.ko) between local memory and other nodes' memory in the global address space:
local-to-remote, remote-to-local and remote-to-remote, at boundary sizes, with seeded patterns
checked on the owners so that "not copied" and "copied over its neighbours" both show. Errors:
a source that is not memory and a dead node end the copy with the engine's error bits, and the
channel works again afterwards.
"""
import re
import time

import pytest

from guest_tools import check, export, kv

GAS = 0x100_0000_0000


@pytest.fixture(scope="module")
def engine(cluster2):
    """xilinx_dma loaded on node 0 (unloaded at the end of the module)."""
    n0 = cluster2.node(0)
    r = n0.exec("insmod /lib/modules/extra/xilinx_dma.ko")
    assert r.rc == 0, r.stderr
    assert "Xilinx AXI CDMA Engine Driver Probed" in n0.sh("dmesg")
    yield n0
    n0.exec("rmmod unimem_dma; rmmod xilinx_dma")


@pytest.fixture(scope="module")
def dma(cluster2, engine):
    """unimem_dma on node 0 too (it holds the channel: after the dmatest test); 1 MiB exported
    on node 1 (seed 7) and on node 0 (seed 3)."""
    n0, n1 = cluster2.node(0), cluster2.node(1)
    r = n0.exec("insmod /lib/modules/extra/unimem_dma.ko")
    assert r.rc == 0, r.stderr
    g1, _ = export(n1, 1 << 20, 7, "dma1")
    g0, p0 = export(n0, 1 << 20, 3, "dma0")
    yield n0, n1, g0, p0, g1
    n0.exec("killall gas")
    n1.exec("killall gas")


def copy(node, src, dst, length, timeout=120):
    r = node.exec(f"cdma copy --src {src} --dst {dst} --len {length}", timeout=timeout)
    return r, kv(r.stdout)[0] if r.stdout else {}


def test_dmatest_runs_against_the_engine_with_zero_failures(engine):
    n0 = engine
    # the parameters are read when `channel` is set, so it comes last; reading `wait` blocks
    # until the test threads are done
    r = n0.exec("insmod /lib/modules/extra/dmatest.ko timeout=20000 iterations=300 test_buf_size=65536 "
                "channel=dma0chan0 run=1 && cat /sys/module/dmatest/parameters/wait", timeout=600)
    assert r.rc == 0, r.stderr
    try:
        summary = []
        for _ in range(600):
            summary = [ln for ln in n0.sh("dmesg").splitlines() if "dmatest" in ln and "summary" in ln]
            if summary:
                break
            time.sleep(0.1)
        assert summary, n0.sh("dmesg | tail -20")
        m = re.search(r"summary (\d+) tests, (\d+) failures", summary[-1])
        assert m and int(m.group(1)) == 300 and int(m.group(2)) == 0, summary[-1]
    finally:
        n0.exec("rmmod dmatest")


SIZES = [(0, 1), (5, 63), (64, 64), (4095, 65), (100, 4096), (4093, 65537), (0, 1 << 20)]


@pytest.mark.parametrize("offset,length", SIZES)
def test_remote_to_local_copies_exactly_the_range(dma, offset, length):
    n0, n1, g0, p0, g1 = dma
    assert n0.exec(f"gas fill --gaddr {g0:#x} --len {1 << 20} --seed 3 --width 64").rc == 0
    r, d = copy(n0, f"g:{g1 + offset:#x}", f"p:{p0 + offset:#x}", length)
    assert r.rc == 0 and d["status"] == "ok", r.stdout
    assert check(n0, g0 + offset, length, 7, widths=[8], poff=offset)[0].rc == 0
    if offset:
        assert check(n0, g0, offset, 3, widths=[8])[0].rc == 0
    if offset + length < 1 << 20:
        assert check(n0, g0 + offset + length, (1 << 20) - offset - length, 3, widths=[8],
                     poff=offset + length)[0].rc == 0


@pytest.mark.parametrize("offset,length", SIZES)
def test_local_to_remote_copies_exactly_the_range(dma, offset, length):
    n0, n1, g0, p0, g1 = dma
    assert n0.exec(f"gas fill --gaddr {g0:#x} --len {1 << 20} --seed 11 --width 64").rc == 0
    assert n1.exec(f"gas fill --gaddr {g1:#x} --len {1 << 20} --seed 7 --width 64").rc == 0
    r, d = copy(n0, f"p:{p0 + offset:#x}", f"g:{g1 + offset:#x}", length)
    assert r.rc == 0 and d["status"] == "ok", r.stdout
    # checked on the owner, node 1, through its own window (its RAM)
    assert check(n1, g1 + offset, length, 11, widths=[8], poff=offset)[0].rc == 0
    if offset:
        assert check(n1, g1, offset, 7, widths=[8])[0].rc == 0
    if offset + length < 1 << 20:
        assert check(n1, g1 + offset + length, (1 << 20) - offset - length, 7, widths=[8],
                     poff=offset + length)[0].rc == 0


@pytest.mark.parametrize("length", [1, 65, 65537])
def test_remote_to_remote_copy_within_another_node(dma, length):
    n0, n1, g0, p0, g1 = dma
    half = 1 << 19
    assert n1.exec(f"gas fill --gaddr {g1:#x} --len {1 << 20} --seed 7 --width 64").rc == 0
    # node 0's engine moves node 1's bytes [0, length) to [half, half + length): both ends remote
    r, d = copy(n0, f"g:{g1:#x}", f"g:{g1 + half:#x}", length)
    assert r.rc == 0 and d["status"] == "ok", r.stdout
    assert check(n1, g1 + half, length, 7, widths=[8], poff=0)[0].rc == 0
    assert check(n1, g1 + half + length, half - length, 7, widths=[8], poff=half + length)[0].rc == 0


def test_source_that_is_not_memory_fails_with_decode_error_and_the_channel_recovers(dma):
    n0, n1, g0, p0, g1 = dma
    t0 = time.monotonic()
    r, d = copy(n0, "g:0x0400000000", f"p:{p0:#x}", 64)  # node 1's flash region: not RAM
    assert r.rc == 1 and d["status"] == "EIO" and d.get("error") == "DMADecErr", r.stdout
    assert time.monotonic() - t0 < 10
    r, d = copy(n0, f"p:0x{0x0c000000:x}", f"p:{p0:#x}", 64)  # a hole in node 0's own map
    assert r.rc == 1 and d["status"] == "EIO", r.stdout
    r, d = copy(n0, f"g:{g1:#x}", f"p:{p0:#x}", 4096)  # the channel works again
    assert r.rc == 0 and d["status"] == "ok", r.stdout


def test_copy_from_a_dead_node_fails_with_slave_error_not_a_hang(fresh_cluster):
    c = fresh_cluster(nodes=3)
    n0, n2 = c.node(0), c.node(2)
    assert n0.exec("insmod /lib/modules/extra/xilinx_dma.ko && insmod /lib/modules/extra/unimem_dma.ko").rc == 0
    g2, _ = export(n2, 65536, 5, "dead")
    _, p0 = export(n0, 65536, 1, "live")
    r, d = copy(n0, f"g:{g2:#x}", f"p:{p0:#x}", 65536)
    assert r.rc == 0 and d["status"] == "ok", r.stdout
    c.kill_node(2)
    t0 = time.monotonic()
    r, d = copy(n0, f"g:{g2:#x}", f"p:{p0:#x}", 65536, timeout=60)
    assert r.rc == 1 and d["status"] == "EIO" and d.get("error") == "DMASlvErr", r.stdout
    assert time.monotonic() - t0 < 20
    r, d = copy(n0, f"p:{p0:#x}", f"p:{p0 + 32768:#x}", 4096)
    assert r.rc == 0 and d["status"] == "ok", r.stdout
