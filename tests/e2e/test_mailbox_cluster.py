"""Scenario: the Unimem mailbox driver (ExaNoDe D3.6 sec. 3.2) between booted nodes.

User space: node 1 registers opcodes on /dev/Unimem/mailboxB with each notification action
(r: read/poll, s: a signal, e: an eventfd) and node 0 writes 8-byte messages to
/dev/Unimem/mailboxB. Kernel space: node 1 loads mbox_echo.ko, which registers an opcode with
mailbox_register_callback() and answers from the kernel with mailbox_send_message().
"""
import pytest

from guest_tools import kv


def stats(node):
    return kv(node.exec("mbox stats").stdout)[0]


@pytest.mark.parametrize("action,via", [("r", "poll"), ("s", "signal"), ("e", "eventfd")])
def test_messages_arrive_oldest_first_with_each_notification_action(cluster2, run_concurrently, action, via):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    recv, send = run_concurrently(
        n1, f"mbox recv --opcode 3,5 --action {action} --count 6 --timeout 30000",
        n0, "mbox send --node 1 --value 0x3000000000000100 --count 3 && "
            "mbox send --node 1 --value 0x5000000000000200 --count 3", delay=1.5)
    assert send.rc == 0, send.stdout
    assert recv.rc == 0, recv.stdout + recv.stderr
    msgs = [d for d in kv(recv.stdout) if "msg" in d]
    assert [int(d["msg"], 16) for d in msgs] == [0x3000000000000100, 0x3000000000000101, 0x3000000000000102,
                                                 0x5000000000000200, 0x5000000000000201, 0x5000000000000202]
    assert {d["via"] for d in msgs} == {via}
    summary = kv(recv.stdout)[-1]
    if action == "s":
        assert int(summary["signals"]) >= 1
    if action == "e":
        assert int(summary["eventfd_total"]) == 6


def test_unregistered_opcode_is_not_delivered_and_counted(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    before = int(stats(n1)["unclaimed"])
    assert n0.exec("mbox send --node 1 --value 0x7000000000000042").rc == 0
    assert int(stats(n1)["unclaimed"]) == before + 1
    r = n1.exec("mbox recv --opcode 7 --count 1 --timeout 500")
    assert r.rc == 1  # the earlier message was not kept for a later owner


def test_driver_answers_bad_input_with_defined_errors(cluster2):
    r = cluster2.node(0).exec("mbox check")
    lines = kv(r.stdout)
    assert r.rc == 0 and lines[-1]["failed"] == "0", r.stdout
    assert int(lines[-1]["checks"]) >= 18


def test_a_user_process_cannot_post_into_the_mailbox(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    assert stats(n1)["interface"] == "kif"  # the default: the devices' kernel interface
    before = stats(n1)
    base = int(kv(n1.exec("unimem info").stdout)[0]["vmbox_base"], 16)
    # node 1's KIF page: its vmbox base + 0x41000 (VMBOX_KIF_OFFSET); a user's PIF cannot name it
    kif_gaddr = (1 << 34) | (base + 0x41000)
    r = n0.exec(f"unimem send --dest {kif_gaddr:#x} --word1 0x3000000000000bad")
    assert r.rc == 1 and kv(r.stdout)[0]["status"] == "ILLEGAL", r.stdout + r.stderr
    after = stats(n1)
    assert after["received"] == before["received"] and after["forged"] == before["forged"]
    # user interface 63 is an ordinary one now: a packet there is a user's, not the mailbox's
    r = n0.exec("unimem send --node 1 --mif 63 --word1 0x3000000000000bad")
    assert r.rc == 0, r.stdout
    assert stats(n1)["received"] == before["received"]


def test_packets_forged_into_a_mailbox_on_a_user_interface_are_dropped(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    try:
        for n in cluster2.nodes:
            n.sh("echo 62 > /sys/module/unimem/parameters/mailbox_if")
        before = stats(n1)
        # a user process's PIF aims a packet at node 1's mailbox FIFO (interface 62)
        r = n0.exec("unimem send --node 1 --mif 62 --word1 0x3000000000000bad")
        assert r.rc == 0, r.stdout  # the vmbox accepted it ...
        after = stats(n1)
        assert int(after["forged"]) == int(before["forged"]) + 1  # ... the driver did not deliver it
        assert after["received"] == before["received"]
    finally:
        for n in cluster2.nodes:
            n.exec("echo 64 > /sys/module/unimem/parameters/mailbox_if")
    assert stats(n0)["interface"] == "kif" and stats(n1)["interface"] == "kif"


def test_kernel_callback_answers_through_mailbox_send_message(cluster2, run_concurrently):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    assert n1.exec("insmod /lib/modules/extra/mbox_echo.ko").rc == 0
    try:
        assert stats(n1)["kernel_opcodes"] == "0x4000"  # opcode 14 taken by a kernel callback
        taken = n1.exec("mbox recv --opcode 14 --count 1 --timeout 100")
        assert taken.rc == 2 and b"Device or resource busy" in taken.stderr
        # request: opcode 14, answer to node 0 (bits 57:52), payload 0x1234
        recv, send = run_concurrently(n0, "mbox recv --opcode 15 --count 3 --timeout 30000",
                                      n0, "mbox send --node 1 --value 0xE000000000001234 --count 3",
                                      delay=1.5)
        assert send.rc == 0 and recv.rc == 0, recv.stdout + send.stdout
        answers = [int(d["msg"], 16) for d in kv(recv.stdout) if "msg" in d]
        # opcode 15, from node 1, payload + 1
        assert answers == [0xF010000000001235, 0xF010000000001236, 0xF010000000001237]
        assert n1.sh("cat /sys/module/mbox_echo/parameters/echoed").strip() == "3"
        assert int(stats(n1)["delivered_kernel"]) >= 3
    finally:
        n1.exec("rmmod mbox_echo")
    assert stats(n1)["kernel_opcodes"] == "0x0000"


def test_message_to_a_dead_node_fails_with_ehostunreach(fresh_cluster):
    c = fresh_cluster(nodes=3)
    n0 = c.node(0)
    c.kill_node(2)
    r = n0.exec("mbox send --node 2 --value 0x1000000000000001", timeout=30)
    assert r.rc == 1 and kv(r.stdout)[0]["result"] == "EHOSTUNREACH", r.stdout
    assert n0.exec("mbox send --node 1 --value 0x1000000000000002").rc == 0
