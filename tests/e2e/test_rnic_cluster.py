"""Scenario: the RNIC on booted nodes through its Linux driver and the verbs library
(docs/rnic-verbs.md, docs/rnic.md).

Every node gets `-device rackemu-rnic` (the cluster config's `rnic = true`); the image loads
rackemu_rnic.ko at boot (/dev/rnic0).
`rnic check` runs every operation and refusal between two QPs of one node (the device loops
frames to its own MAC back), `rnic bench` measures, and across nodes a `rnic bench --server`
holds a FETCH_ADD counter and an MR while clients connect over TCP (as perftest) and run RDMA
through the fabric's Ethernet switch.
"""
import re
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import RnicRelay as Relay, kv, run_kv, stop_procs

CHECKS = 114  # lines `rnic check` prints (31 of them the extended atomics, 3 the async events)


@pytest.fixture(scope="module")
def rcluster():
    c = _start(_config(f"e2e-rnic-{int(time.time())}", rnic=True))
    yield c
    c.down()
    _clusters.remove(c)


def rnic(node, cmd, timeout=180):
    return run_kv(node, f"rnic {cmd}", timeout)


def stop_all(node):
    stop_procs(node, "rnic")


def test_the_rnic_shares_no_interrupt_line_with_the_soc_devices(rcluster):
    # rackemu's SoC lines sat at SPIs 48-51, inside virt's GICv2m MSI frame: with the RNIC's MSI-X
    # vectors allocated, sonuma-rmc and unimem-vmbox failed request_irq ("Flags mismatch").
    for i in (0, 1):
        n = rcluster.node(i)
        dmesg = n.exec("dmesg").stdout.decode()
        assert "Flags mismatch" not in dmesg, dmesg[-2000:]
        irqs = n.exec("cat /proc/interrupts").stdout.decode()
        for name in ("sonuma-rmc", "unimem-vmbox", "rackemu_rnic"):
            assert name in irqs, irqs


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
                 "cq_channel_poll_read",
                 "refuse_foreign_doorbell_mmap", "objects_released_at_exit", "fetch_add", "cmp_swap_hit",
                 "atomic_write", "flush", "flush_persist", "refuse_cq_vector_beyond_count",
                 "cq_vectors_own_interrupts", "async_qp_fatal_retry_exceeded", "async_cq_err_overflow",
                 "async_nothing_left", "refuse_mr_pfnmap_not_pmem"):
        assert must in names, must
    assert d[-1]["checks"] == str(CHECKS) and d[-1]["failed"] == "0"
    # the device wrote the events the checks consumed (QP_FATAL, CQ_ERR and the refusals' own)
    # into its event queue, and none was lost there
    r, c = rnic(n, "counters")
    cnt = {k: int(v) for x in c for k, v in x.items()}
    assert cnt["eq_events"] >= 2 and cnt["eq_overflows"] == 0, cnt


def test_check_suite_passes_for_an_unprivileged_user(rcluster):
    """/dev/rnic0 is open to every user; pinned pages count against RLIMIT_MEMLOCK (8 MiB here)."""
    r = rcluster.node(1).exec("su u -c 'ulimit -l; rnic check'", timeout=600)
    d = kv(r.stdout)
    failed = [x for x in d if x.get("ok") == "0"]
    assert r.rc == 0 and not failed and d[-1]["checks"] == str(CHECKS), (r.stdout + r.stderr).decode()
    assert r.stdout.startswith(b"8192\n")


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


def test_tcp_connection_setup_on_one_node(rcluster, in_background):
    """The perftest-style exchange over TCP (here over the node's loopback interface): a server for
    two clients on one counter, a verified bench client and a FETCH_ADD client."""
    n = rcluster.node(1)
    try:
        srv = in_background(n, "rnic bench --server --clients 2 --port 18620", timeout=300)
        r, d = rnic(n, "bench --client 127.0.0.1 --port 18620 --ops write,read --sizes 1,4097 --iters 5 "
                       "--rate-windows 1 --verify")
        assert r.rc == 0 and not [x for x in d if x.get("ok") == "0"], (r.stdout + r.stderr).decode()
        r, d = rnic(n, "faa --client 127.0.0.1 --port 18620 --count 50")
        assert r.rc == 0 and d[-1]["errors"] == "0", (r.stdout + r.stderr).decode()
        rs = srv.result(310)
        done = [x for x in kv(rs.stdout) if x.get("server") == "done"]
        assert rs.rc == 0 and done and done[0]["clients"] == "2" and int(done[0]["counter"]) == 50, rs.stdout
    finally:
        stop_all(n)


def irq_counts(node):
    """{vector: interrupts} of the RNIC driver's rows of /proc/interrupts (rackemu_rnic-v<N>)."""
    out = {}
    for line in node.exec("cat /proc/interrupts").stdout.decode().splitlines():
        m = re.match(r"\s*\d+:((?:\s+\d+)+)\s.*\brackemu_rnic-v(\d+)\s*$", line)
        if m:
            out[int(m.group(2))] = sum(int(x) for x in m.group(1).split())
    return out


def test_two_cqs_on_two_vectors_each_get_their_own_interrupt(rcluster):
    """CREATE_CQ takes a completion vector (verbs' comp_vector): the check suite arms a CQ on
    vector 0 three times and one on vector 1 five times; /proc/interrupts, read here around the
    run, shows vector 1's interrupts grew by at least those five (the suite's own reading is exact:
    +5), and a vector beyond the driver's count is refused with EINVAL."""
    n = rcluster.node(0)
    before = irq_counts(n)
    assert sorted(before) == list(range(8)), before     # 8 MSI-X vectors, one row each
    r, d = rnic(n, "check", timeout=600)
    after = irq_counts(n)
    by = {x["check"]: x for x in d if "check" in x}
    v = by["cq_vectors_own_interrupts"]
    assert v["ok"] == "1" and v["irqs_v1"] == "+5" and v["rounds_v1"] == "5/5", v
    assert int(v["irqs_v0"].lstrip("+")) >= 3, v
    assert by["refuse_cq_vector_beyond_count"]["ok"] == "1" and by["refuse_cq_vector_beyond_count"]["errno"] == "22"
    assert after[1] - before[1] >= 5 and after[0] - before[0] >= 3, (before, after)
    assert all(after[k] == before[k] for k in range(2, 8)), (before, after)   # no CQ used those


def test_tcp_connection_setup_across_nodes_by_host_name(rcluster, in_background):
    """The perftest-style exchange over TCP on the IP network between nodes, the server named by
    its host name (node0, /etc/hosts): WRITE/READ/SEND at 1, MTU-1, MTU, MTU+1 and 1 MiB into the
    middle and the end of the server's MR, read back and compared, and FETCH_ADDs whose total the
    server's counter shows; no relay through the agent."""
    s, c = rcluster.node(0), rcluster.node(1)
    try:
        srv = in_background(s, "rnic bench --server --clients 2 --port 18630", timeout=600)
        time.sleep(1)
        r, d = rnic(c, "bench --client node0 --port 18630 --ops write,read,send,faa --sizes 1,4095,4096,4097,1M "
                       "--iters 3 --window 4 --rate-windows 1 --verify", timeout=600)
        assert r.rc == 0 and not [x for x in d if x.get("ok") == "0"], (r.stdout + r.stderr).decode()
        names = {x["check"] for x in d if "check" in x}
        for size in (1, 4095, 4096, 4097, 1 << 20):
            assert {f"write_{size}_middle", f"write_{size}_end", f"read_{size}_middle", f"read_{size}_end",
                    f"send_{size}_recv"} <= names, names
        rows = {x["op"] for x in d if "op" in x}
        assert rows == {"write", "read", "send", "faa"}, rows
        r, d = rnic(c, "faa --client node0 --port 18630 --count 200")
        f = d[-1]
        assert r.rc == 0 and f["errors"] == "0", (r.stdout + r.stderr).decode()
        # the values the 200 FETCH_ADDs returned follow on from the bench's own faa WRs, one by one
        assert int(f["last"]) - int(f["first"]) == 199, f
        rs = srv.result(610)
        done = [x for x in kv(rs.stdout) if x.get("server") == "done"]
        assert rs.rc == 0 and done and done[0]["clients"] == "2", rs.stdout
        assert int(done[0]["counter"]) == int(f["last"]) + 1, (done, f)
        peers = [x for x in kv(rs.stdout) if "client" in x and "peer_qpn" in x]
        assert len(peers) == 2 and all(x["node"] == "1" for x in peers), rs.stdout
    finally:
        stop_all(s)
        stop_all(c)


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


def test_cross_node_write_read_send_at_every_size(rcluster):
    """WRITE/READ/SEND at 1, MTU-1, MTU, MTU+1 and 1 MiB into the middle and the last byte of the
    peer's MR across the switch, read back and compared (check lines)."""
    s, c = rcluster.node(0), rcluster.node(1)
    try:
        relay = Relay(s, "xs", 1)
        cl = relay.client(c, "bench --ops write --sizes 1,4095,4096,4097,1M --iters 5 --window 4 "
                             "--rate-windows 1 --verify")
        relay.go(cl)
        rc, out = relay.result(cl)
        d = kv(out)
        failed = [x for x in d if x.get("ok") == "0"]
        assert rc == 0 and not failed, out.decode()
        names = {x["check"] for x in d if "check" in x}
        for size in (1, 4095, 4096, 4097, 1 << 20):
            assert {f"write_{size}_middle", f"write_{size}_end", f"read_{size}_middle", f"read_{size}_end",
                    f"send_{size}_recv"} <= names
        relay.stop()
    finally:
        stop_all(s)
        stop_all(c)


def test_fetch_add_from_every_node_gives_the_exact_total(rcluster):
    s, c = rcluster.node(0), rcluster.node(1)
    count = 300
    try:
        assert Relay.faa_total(s, [s, c], "faa", count) == 2 * count  # node 0 loops back to its own MAC
    finally:
        stop_all(s)
        stop_all(c)


def test_killed_node_turns_work_into_error_completions(fresh_cluster):
    c = fresh_cluster(nodes=2, rnic=True)
    rc, out, took = Relay.kill_server_under(c, "kill", "faa --count 100000000 --timeout 10 --retry 3")
    assert rc == 1 and re.search(rb"status 12 \(transport retries exceeded\)", out), out.decode()
    # timeout code 10 is 4.2 ms, 3 retries: far under 10 s of wall time even polled through the agent
    assert took < 10, took
