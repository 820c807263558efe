"""Scenario: Unimem packets between booted nodes, through the real driver and tools.

Node 0 sends through a PIF of its packetizer, the fabric carries the packet, node 1's vmbox
queues it and a process on node 1 reads it from its MIF with node 0's PID prefix. Then the
error cases of ExaNoDe D3.6 sec. 5.1-5.2 as a guest program sees them, and a node killed mid-test.
"""
import os
import re
import signal
import time

import pytest

from guest_tools import kv as kv_lines
from qtest import regs_counters


@pytest.fixture(autouse=True, scope="module")
def no_exit_notices(cluster2):
    """These tests count packets exactly: hold back the atomicity driver's GSAS exit notices
    (docs/unimem.md), which every exiting `unimem` process would add, until the module is done."""
    for n in (cluster2.node(0), cluster2.node(1)):
        n.sh("echo 0 > /sys/module/unimem/parameters/exit_notify")
    time.sleep(0.5)  # a notice round already under way
    yield
    for n in (cluster2.node(0), cluster2.node(1)):
        n.exec("echo 1 > /sys/module/unimem/parameters/exit_notify")


def sender_tgid_on_node0(cluster2, cmd):
    """Run cmd on node 0 and return (result, tgid of that shell) for PID-prefix checks."""
    r = cluster2.node(0).exec(f"echo tgid=$$; exec {cmd}")
    tgid = int(re.search(rb"tgid=(\d+)", r.stdout).group(1))
    return r, tgid


def test_packets_cross_the_fabric_with_the_senders_pid_prefix(cluster2, run_concurrently):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    recv, send = run_concurrently(n1, "unimem recv --mif 5 --count 8 --timeout 30000",
                                  n0, "echo tgid=$$; exec unimem send --node 1 --mif 5 --count 8")
    assert send.rc == 0, send.stdout + send.stderr
    assert recv.rc == 0, recv.stdout + recv.stderr
    tgid = int(re.search(rb"tgid=(\d+)", send.stdout).group(1))
    packets = [d for d in kv_lines(recv.stdout) if "packet" in d]
    assert [int(p["w1"], 16) for p in packets] == list(range(8))  # in order, none lost
    for i, p in enumerate(packets):
        # the prefix is the driver's (node 0, sender's tgid), never the sender's own bits
        assert (int(p["pid_node"]), int(p["pid_tgid"])) == (0, tgid)
        assert int(p["w0"], 16) >> 48 == i
        assert int(p["w3"], 16) == i ^ int(p["w2"], 16)


def test_full_fifo_answers_nack_and_keeps_every_accepted_packet(cluster2, run_concurrently):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    depth = int(kv_lines(n1.exec("unimem info").stdout)[0]["fifo_depth"])
    want = depth // 4
    recv, fill = run_concurrently(
        n1, f"unimem recv --mif 40 --count {want} --start-delay 8000 --timeout 30000",
        n0, "unimem fill --node 1 --mif 40 --quiet", delay=1.5)
    summary = kv_lines(fill.stdout)
    assert fill.rc == 0, fill.stdout
    assert summary[-1]["accepted"] == str(want)
    assert summary[-2]["nacked"] == "1" and summary[-2]["fabric_err"] == "0"
    assert "status=NACK" in fill.stdout.decode()
    packets = [d for d in kv_lines(recv.stdout) if "packet" in d]
    assert [int(p["w1"], 16) for p in packets] == list(range(want))


def test_destination_outside_base_dest_is_illegal(cluster2):
    n0 = cluster2.node(0)
    r = n0.exec("unimem send --dest 0x040c005000")
    assert r.rc == 1
    assert "status=ILLEGAL" in r.stdout.decode()
    assert "illegal=1" in r.stdout.decode()


def test_cleared_pid_conf_bit_sends_nothing(cluster2, run_concurrently):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    before = kv_lines(n0.exec("unimem counters").stdout)[0]
    recv, send = run_concurrently(n1, "unimem recv --mif 7 --count 1 --timeout 4000",
                                  n0, "unimem send --node 1 --mif 7 --no-pidconf")
    assert "status=NOT_SENT" in send.stdout.decode()
    assert recv.rc == 1 and b"received=0 timeout=1" in recv.stdout
    after = kv_lines(n0.exec("unimem counters").stdout)[0]
    assert int(after["pktz_nopid"]) == int(before["pktz_nopid"]) + 1
    assert after["pktz_sent"] == before["pktz_sent"]


def test_empty_mif_reads_the_pattern(cluster2):
    r = cluster2.node(1).exec("unimem peek --mif 33")
    assert kv_lines(r.stdout)[0]["word"] == "0xcafebebedeadbeaf"


def test_local_delivery_and_arrival_interrupts(cluster2, run_concurrently):
    n0 = cluster2.node(0)
    irqs = int(kv_lines(n0.exec("unimem counters").stdout)[0]["irqs"])
    recv, send = run_concurrently(n0, "unimem recv --mif 11 --count 4 --timeout 20000",
                                  n0, "unimem send --node 0 --mif 11 --count 4")
    assert send.rc == 0 and recv.rc == 0
    assert len([d for d in kv_lines(recv.stdout) if "packet" in d]) == 4
    assert int(kv_lines(n0.exec("unimem counters").stdout)[0]["irqs"]) > irqs


def test_a_process_maps_only_its_own_interfaces(cluster2):
    # mmap of anything but the file's own MIF (offset 0) and PIF (offset 4096) is refused,
    # and interface 0 (the atomic service's) is never handed to an unprivileged open
    n0 = cluster2.node(0)
    info = kv_lines(n0.exec("unimem info").stdout)[0]
    assert 1 <= int(info["mif"]) <= 63 and 1 <= int(info["pif"]) <= 63
    r = n0.exec("cat /sys/class/misc/unimem/counters")
    assert r.rc == 0 and b"pktz_sent=" in r.stdout


def test_counters_are_named_and_ordered_by_the_register_tables(cluster2):
    # the driver's sysfs files and `unimem counters` take names and order from VMBOX_COUNTER_TABLE
    # and PKTZ_COUNTER_TABLE (hw/include/rackemu/unimem_regs.h), nothing hand-written
    tables = regs_counters("unimem_regs.h")
    vmbox, pktz = [n for _, n, _ in tables["VMBOX"]], [n for _, n, _ in tables["PKTZ"]]
    both = [f"vmbox_{n}" for n in vmbox] + [f"pktz_{n}" for n in pktz] + ["irqs"]
    n0 = cluster2.node(0)

    def pairs(cmd):
        r = n0.exec(cmd)
        assert r.rc == 0, r.stdout + r.stderr
        return [tuple(w.split("=")) for w in r.stdout.decode().split()]

    tool, misc = pairs("unimem counters"), pairs("cat /sys/class/misc/unimem/counters")
    dev_vmbox = pairs("cat /sys/bus/platform/devices/b000000.vmbox/counters")
    dev_pktz = pairs("cat /sys/bus/platform/devices/b100000.packetizer/counters")
    assert [k for k, _ in tool] == both and [k for k, _ in misc] == both
    assert [k for k, _ in dev_vmbox] == vmbox + ["irqs"] and [k for k, _ in dev_pktz] == pktz
    # the node is idle: every file shows the same values (the ioctl and both sysfs views)
    assert [int(v) for _, v in misc[:len(vmbox)]] == [int(v) for _, v in dev_vmbox[:-1]]
    assert [int(v) for _, v in misc[len(vmbox):-1]] == [int(v) for _, v in dev_pktz]
    assert [int(v) for _, v in tool] == [int(v) for _, v in misc]
    assert int(dict(tool)["pktz_sent"]) > 0  # earlier tests of this module sent packets from node 0


def test_driver_answers_bad_input_with_errors_and_never_oopses(cluster2):
    # guest/unimem/user/unimem_check.c: wrong mmaps, binds, ioctls, reads; a store into a full FIFO
    n0 = cluster2.node(0)
    r = n0.exec("unimem-check", timeout=60)
    checks = {d["check"]: d for d in kv_lines(r.stdout) if "check" in d}
    failed = [name for name, d in checks.items() if d["ok"] != "1"]
    assert r.rc == 0 and not failed, r.stdout.decode()
    for name in ("mmap_other_offset_einval", "mmap_tif_offset_einval", "mmap_private_einval",
                 "bind_taken_mif_ebusy", "bind_service_unprivileged_eperm", "bind_after_mmap_ebusy",
                 "setpidconf_unprivileged_eperm", "wait_empty_etimedout", "poll_pollin", "read_packet",
                 "store_to_full_fifo_sigbus", "open_62_then_ebusy"):
        assert name in checks
    dmesg = n0.sh("dmesg")
    assert "Internal error" not in dmesg and "Call trace" not in dmesg
    # every interface given back: only the atomic service's 0 (the mailbox runs on the KIF)
    assert n0.sh("cat /sys/class/misc/unimem/interfaces").strip() == \
        "mif_used=00000000,00000001 pif_used=00000000,00000001"


def test_setup_while_pending_sets_overwr_buf_and_only_the_first_packet_arrives(cluster2, in_background):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    before = int(kv_lines(n1.exec("cat /sys/bus/platform/devices/b000000.vmbox/counters").stdout)[0]["enqueued"])
    receiver = in_background(n1, "unimem recv --mif 50 --count 2 --timeout 8000", timeout=60)
    time.sleep(1.5)  # the receiver holds MIF 50 (binding flushes it)
    # Node 1 is frozen (SIGSTOP: vCPUs and fabric thread alike), so the first packet's
    # acknowledgement cannot overtake the next writes: this does not depend on timing.
    os.kill(n1.pid, signal.SIGSTOP)
    try:
        job = in_background(n0, "unimem send --node 1 --mif 50 --count 3 --no-wait", timeout=60)
        time.sleep(1.5)
    finally:
        os.kill(n1.pid, signal.SIGCONT)
    r = job.result(70)
    lines = kv_lines(r.stdout)
    assert r.rc == 1, r.stdout
    assert lines[0]["status_after_write"] == "PEND"
    assert "OVERWR_BUF" in lines[1]["status_after_write"]
    assert "OVERWR_BUF" in lines[2]["status_after_write"]
    assert lines[-1]["final_status"] == "ACK|OVERWR_BUF"
    got = receiver.result(70)  # asked for 2 packets: only one comes, then the timeout
    words = [d for d in kv_lines(got.stdout) if "w1" in d]
    assert len(words) == 1 and int(words[0]["w1"], 0) == 0, got.stdout  # the first packet, not a later one
    after = int(kv_lines(n1.exec("cat /sys/bus/platform/devices/b000000.vmbox/counters").stdout)[0]["enqueued"])
    assert after - before == 4  # one packet of four words


@pytest.mark.parametrize("order", ["", " --sync-ack"], ids=["ack-checked-later", "sync-ack"])
def test_pingpong_round_trips(cluster2, run_concurrently, order):
    """Both orders of the acknowledgement check (docs/unimem.md) echo every packet (the client
    checks each echo's sequence number) and see every packet acknowledged."""
    n0, n1 = cluster2.node(0), cluster2.node(1)
    server, client = run_concurrently(n1, f"unimem pingpong --peer 0 --role server --count 50{order}",
                                      n0, f"unimem pingpong --peer 1 --role client --count 50{order}")
    assert server.rc == 0 and client.rc == 0, client.stdout + server.stdout
    assert kv_lines(server.stdout)[-1] == {"served": "50"}, server.stdout
    stats = kv_lines(client.stdout)[-1]
    assert stats["count"] == "50"
    assert 0 < float(stats["rtt_min_us"]) <= float(stats["rtt_median_us"]) <= float(stats["rtt_max_us"])


def test_spinning_pingpong_spares_the_port_threads_wake_ups(cluster2, run_concurrently):
    """Both sides spinning (docs/fabric.md, "Poller present on pair rings"): every frame of the
    round trips takes the pair ring, every echo comes back in order, and the senders skip waking
    the port thread of a node whose vCPU polls (the bridge's per-node counters)."""
    n0, n1 = cluster2.node(0), cluster2.node(1)
    before = {p["node"]: p for p in cluster2.bridge_stats()["ports"]}
    server, client = run_concurrently(n1, "unimem pingpong --peer 0 --role server --spin --count 200",
                                      n0, "unimem pingpong --peer 1 --role client --count 200")
    assert server.rc == 0 and client.rc == 0, client.stdout + server.stdout
    assert kv_lines(server.stdout)[-1] == {"served": "200"}, server.stdout
    assert kv_lines(client.stdout)[-1]["count"] == "200"
    after = {p["node"]: p for p in cluster2.bridge_stats()["ports"]}
    delta = {k: sum(after[n].get(k, 0) - before[n].get(k, 0) for n in (0, 1))
             for k in ("pair_frames_out", "pair_wakes_skipped")}
    # packet and acknowledgement each way per round trip, on the pair ring (the agent's exec
    # traffic is not on the fabric)
    assert delta["pair_frames_out"] >= 4 * 200, (delta, after)
    assert delta["pair_wakes_skipped"] > 0, (delta, after)


def test_pingpong_to_an_absent_node_reports_the_refusal(cluster2):
    """A request that is not acknowledged ends the client with its status, not at its timeout
    (no echo can come): node 5 is not in the 2-node cluster."""
    r = cluster2.node(0).exec("unimem pingpong --peer 5 --role client --count 3 --timeout 600000", timeout=120)
    assert r.rc == 1, r.stdout
    line = kv_lines(r.stdout)[-1]
    assert line["round"] == "0" and "send_status" in line and "timeout" not in line, r.stdout
    assert "ACK" not in line["send_status"].replace("NACK", ""), r.stdout


def test_killed_destination_fails_the_sender_and_the_bridge_serves_the_rest(fresh_cluster, run_concurrently):
    c = fresh_cluster(nodes=3)
    n0, n2 = c.node(0), c.node(2)
    c.kill_node(1)
    r = n0.exec("unimem send --node 1 --mif 5 --count 3", timeout=60)
    assert r.rc == 1
    lines = kv_lines(r.stdout)
    assert [d["status"] for d in lines if "packet" in d] == ["NACK|FABRIC_ERR"] * 3
    recv, send = run_concurrently(n2, "unimem recv --mif 5 --count 2 --timeout 20000",
                                  n0, "unimem send --node 2 --mif 5 --count 2")
    assert send.rc == 0 and recv.rc == 0
    ports = {p["node"]: p for p in c.bridge_stats()["ports"]}
    assert ports[1]["state"] == "down" and ports[0]["state"] == "up" and ports[2]["state"] == "up"


def test_bridge_death_fails_remote_sends_and_the_guests_keep_running(fresh_cluster):
    c = fresh_cluster(nodes=2)
    n0 = c.node(0)
    os.killpg(c.bridge.pid, signal.SIGKILL)
    c.bridge.wait_gone(10)
    time.sleep(1.0)  # the ports notice the hang-up within their 100 ms sleep
    r = n0.exec("unimem send --node 1 --mif 5 --count 2", timeout=60)
    assert [d["status"] for d in kv_lines(r.stdout) if "packet" in d] == ["NACK|FABRIC_ERR"] * 2
    # local traffic and the guest itself are unaffected
    assert n0.exec("unimem peek --mif 12").rc == 0
    assert c.node(1).sh("echo alive") == "alive\n"
