"""Scenario: user-level RDMA with the unim_dma_* API of ExaNoDe D3.6 sec. 3.4 between booted nodes.

unimem_dma.ko (the DMA buffers device and the remote allocator) runs on both nodes, over
Linux's unmodified xilinx_dma. unim_dma_test, built against the deliverable's API, allocates
local and remote buffers (several per node), moves data local-to-remote, remote-to-local and
remote-to-remote at boundary sizes, through _from_mem/_to_mem, 32 transfers in flight, with
callbacks and statuses, and checks every byte and the guard bytes around each range.
"""
import pytest

from guest_tools import kv


@pytest.fixture(scope="module")
def rdma(cluster2):
    nodes = [cluster2.node(0), cluster2.node(1)]
    for n in nodes:
        r = n.exec("insmod /lib/modules/extra/xilinx_dma.ko && insmod /lib/modules/extra/unimem_dma.ko")
        assert r.rc == 0, r.stderr
    yield nodes
    for n in nodes:
        n.exec("rmmod unimem_dma; rmmod xilinx_dma")


@pytest.mark.parametrize("initiator", [0, 1])
def test_every_api_function_moves_the_right_bytes(rdma, initiator):
    r = rdma[initiator].exec("unim_dma_test", timeout=300)
    lines = kv(r.stdout)
    assert r.rc == 0 and lines[-1]["failed"] == "0", r.stdout.decode()
    names = {d["check"] for d in lines if "check" in d}
    peer = 1 - initiator
    for name in (f"alloc_two_buffers_on_node{peer}", f"local_to_node{peer}_65537_at_100",
                 f"node{peer}_to_local_4103_at_4093", f"node{peer}_to_node{peer}_4103_at_4093",
                 f"from_mem_to_node{peer}", f"to_mem_from_node{peer}", f"32_in_flight_to_node{peer}",
                 "submit_past_the_end_0", "init_wrong_node_einval"):
        assert name in names, name


def test_dmabuffers_refuses_transfers_outside_the_callers_buffers(rdma):
    r = rdma[0].exec("cdma dmabuf-check")
    lines = kv(r.stdout)
    assert r.rc == 0 and lines[-1]["failed"] == "0", r.stdout.decode()
    assert int(lines[-1]["checks"]) >= 17


def test_remote_allocation_on_a_node_without_the_allocator_times_out_cleanly(rdma):
    n0, n1 = rdma
    ok = kv(n0.exec("cdma alloc --node 1 --size 100000").stdout)[0]
    assert ok.get("size") == "102400" and int(ok["gaddr"], 16) >> 34 == 1, ok
    assert n1.exec("rmmod unimem_dma").rc == 0
    try:
        r = n0.exec("cdma alloc --node 1", timeout=30)
        assert r.rc == 1 and kv(r.stdout)[0]["error"] == "ETIMEDOUT", r.stdout
    finally:
        assert n1.exec("insmod /lib/modules/extra/unimem_dma.ko").rc == 0
    assert n0.exec("cdma alloc --node 1").rc == 0
