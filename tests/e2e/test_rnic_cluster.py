"""Scenario: the RNIC on booted nodes through its Linux driver and the verbs library
(docs/rnic-verbs.md, docs/rnic.md).

Every node gets `-device rackemu-rnic`; the image loads rackemu_rnic.ko at boot (/dev/rnic0).
`rnic check` runs every operation and refusal between two QPs of one node (the device loops
frames to its own MAC back), `rnic bench` measures, and across nodes a `rnic bench --server`
holds a FETCH_ADD counter and an MR while clients connect over TCP (as perftest) and run RDMA
through the fabric's Ethernet switch.
"""
import re
import time

import pytest

from conftest import _config, _start, _clusters
from guest_tools import kv

RNIC_ARGS = ["-device", "rackemu-rnic"]


@pytest.fixture(scope="module")
def rcluster():
    c = _start(_config(f"e2e-rnic-{int(time.time())}", qemu_args=RNIC_ARGS))
    yield c
    c.down()
    _clusters.remove(c)


def rnic(node, cmd, timeout=180):
    r = node.exec(f"rnic {cmd}", timeout=timeout)
    return r, kv(r.stdout)


def stop_all(node):
    node.exec("killall rnic 2>/dev/null; for i in $(seq 100); do pidof rnic >/dev/null || break; "
              "sleep 0.05; done; true")


def net_up(c):
    """The IP network between nodes (virtio-net on the fabric port) answers."""
    r = c.node(1).exec("ping -c 1 -W 5 node0", timeout=30)
    return r.rc == 0


def test_driver_binds_on_every_node(rcluster):
    for i in (0, 1):
        r, d = rnic(rcluster.node(i), "info")
        assert r.rc == 0, r.stdout + r.stderr
        assert d[0]["node"] == str(i) and d[0]["flush"] == "1" and d[0]["atomic_write"] == "1"
        assert d[1]["mac"] == f"02:52:4b:00:00:{i:02x}" and d[1]["ipv4"] == f"198.18.0.{i + 1}"
        assert d[2]["max_qp"] == "256" and d[2]["max_mtu"] == "4096" and int(d[2]["irq_vectors"]) >= 1


def test_check_suite_passes(rcluster):
    """Every operation (WRITE/READ/SEND+IMM at 1, MTU-1, MTU, MTU+1, 1 MiB into the middle and the
    last byte of an MR, WRITE+IMM, atomics, ATOMIC WRITE, FLUSH) and every refusal."""
    n = rcluster.node(0)
    r, d = rnic(n, "check", timeout=600)
    failed = [x for x in d if x.get("ok") == "0"]
    assert r.rc == 0 and not failed, (r.stdout + r.stderr).decode()
    names = {x["check"] for x in d if "check" in x}
    for size in (1, 4095, 4096, 4097, 1 << 20):
        for where in ("middle", "end"):
            for op in ("write", "read", "send_imm"):
                assert f"{op}_{size}_{where}" in names
    for must in ("refuse_bad_rkey", "refuse_past_end", "refuse_write_read_only", "refuse_unaligned_atomic",
                 "refuse_atomic_no_flag", "refuse_other_pd", "refuse_bad_lkey", "err_state_flushes",
                 "rnr_retry_exceeded", "refuse_reset_to_rts", "mr_released_at_exit", "cq_armed_interrupt",
                 "refuse_foreign_doorbell_mmap", "fetch_add", "cmp_swap_hit", "atomic_write", "flush"):
        assert must in names, must
    assert d[-1]["failed"] == "0"


def test_bench_loopback_reports_wall_and_modeled(rcluster):
    n = rcluster.node(1)
    r, d = rnic(n, "bench --ops write,read,send,faa,cas --sizes 8,4K --iters 30 --window 8 --rate-windows 1,8")
    assert r.rc == 0, (r.stdout + r.stderr).decode()
    rows = [x for x in d if "op" in x]
    assert {(x["op"], x["size"]) for x in rows} == {
        ("write", "8"), ("write", "4096"), ("read", "8"), ("read", "4096"), ("send", "8"), ("send", "4096"),
        ("faa", "8"), ("cas", "8")}
    for x in rows:
        assert float(x["lat_us"]) > 0 and float(x["lat_modeled_us"]) > 0 and float(x["bw_mbps"]) > 0, x
    rates = [x for x in d if "outstanding" in x]
    assert [x["outstanding"] for x in rates] == ["1", "8"]


def test_help_and_bad_arguments(rcluster):
    n = rcluster.node(0)
    r = n.exec("rnic --help")
    assert r.rc == 0 and b"usage: rnic COMMAND" in r.stdout
    r = n.exec("rnic bench --ops frobnicate")
    assert r.rc == 2 and b"unknown op 'frobnicate'" in r.stderr
    r = n.exec("rnic bench --server --client node1")
    assert r.rc == 2 and b"exclude" in r.stderr
    r = n.exec("rnic nosuch")
    assert r.rc == 2 and b"unknown command" in r.stderr


def test_cross_node_write_read_send_and_fetch_add(rcluster, in_background):
    """Across the fabric: a server on node 0, clients on both nodes connect over TCP; FETCH_ADD
    from every node on the server's one counter gives the exact total."""
    if not net_up(rcluster):
        pytest.skip("no IP network between nodes in this build (virtio-net on the fabric port)")
    s, c = rcluster.node(0), rcluster.node(1)
    try:
        srv = in_background(s, "rnic bench --server --clients 3 --port 18600", timeout=300)
        time.sleep(1)
        r, d = rnic(c, "bench --client node0 --port 18600 --ops write,read,send --sizes 1,4095,4096,4097,1M "
                       "--iters 5 --window 4 --rate-windows 1,16 --verify")
        assert r.rc == 0, (r.stdout + r.stderr).decode()
        count = 500
        j0 = in_background(s, f"rnic faa --client 127.0.0.1 --port 18600 --count {count}", timeout=300)
        r1, d1 = rnic(c, f"faa --client node0 --port 18600 --count {count}")
        r0 = j0.result(310)
        assert r0.rc == 0 and r1.rc == 0, (r0.stdout + r0.stderr + r1.stdout + r1.stderr).decode()
        rs = srv.result(310)
        done = [x for x in kv(rs.stdout) if x.get("server") == "done"]
        assert done and int(done[0]["counter"]) == 2 * count, rs.stdout.decode()
    finally:
        stop_all(s)
        stop_all(c)


def test_killed_node_turns_work_into_error_completions(fresh_cluster, in_background):
    c = fresh_cluster(nodes=2, qemu_args=RNIC_ARGS)
    if not net_up(c):
        pytest.skip("no IP network between nodes in this build (virtio-net on the fabric port)")
    s, cl = c.node(0), c.node(1)
    s.sh("setsid rnic bench --server --port 18601 </dev/null >/tmp/srv 2>&1 &")
    job = in_background(cl, "rnic faa --client node0 --port 18601 --count 100000000 --timeout 10 --retry 3",
                        timeout=120)
    time.sleep(5)
    t0 = time.monotonic()
    c.kill_node(0)
    r = job.result(120)
    took = time.monotonic() - t0
    out = (r.stdout + r.stderr).decode()
    assert r.rc == 1 and re.search(r"status 12 \(transport retries exceeded\)", out), out
    # timeout code 10 = 4.2 ms x (3 retries + 1), plus the client's poll: well under 10 s of wall time
    assert took < 10, took
