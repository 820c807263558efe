"""Scenario: the launcher boots real nodes; each node knows its id, commands run on two nodes
at once, and a killed node leaves its peers and the bridge running."""
import time


def test_each_node_boots_with_its_own_node_id(cluster2):
    for n in cluster2.nodes:
        cmdline = n.sh("cat /proc/cmdline")
        assert f"rackemu.node={n.id}" in cmdline.split()


def test_exec_returns_exit_status_stdout_and_stderr(cluster2):
    r = cluster2.node(0).exec("echo out; echo err >&2; exit 7")
    assert (r.rc, r.stdout, r.stderr) == (7, b"out\n", b"err\n")


def test_commands_on_two_nodes_run_at_the_same_time(cluster2, in_background):
    t0 = time.monotonic()
    job = in_background(cluster2.node(0), "sleep 3; echo zero")
    r1 = cluster2.node(1).exec("sleep 3; echo one")
    r0 = job.result(30)
    assert (r0.stdout, r1.stdout) == (b"zero\n", b"one\n")
    assert time.monotonic() - t0 < 5.5, "the two sleeps must overlap"


def test_bridge_sees_both_nodes(cluster2):
    ports = {p["node"]: p for p in cluster2.bridge_stats()["ports"]}
    assert sorted(ports) == [0, 1]
    assert all(p["state"] == "up" for p in ports.values())


def test_killed_node_leaves_peer_and_bridge_running(fresh_cluster):
    c = fresh_cluster(nodes=2)
    c.kill_node(1)
    assert c.node(0).sh("echo alive") == "alive\n"
    assert c.bridge.alive()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        port1 = {p["node"]: p for p in c.bridge_stats()["ports"]}.get(1, {})
        if port1.get("state") != "up":
            break
        time.sleep(0.2)
    assert port1.get("state") != "up"


def test_cli_cp_copies_a_file_in_and_back_out(cluster2):
    """`rackemu cp` in both directions, through the CLI's own helpers (a second process cannot
    connect while this one holds the nodes' agent sockets: docs/agent.md)."""
    import hashlib
    from rackemu.cli import agent_get, agent_put
    data = bytes(range(256)) * 40
    node = cluster2.node(1)
    agent_put(node, "/tmp/cp-in.bin", data, 0o640)
    r = node.exec("md5sum /tmp/cp-in.bin; stat -c %a /tmp/cp-in.bin")
    assert r.stdout.split()[0].decode() == hashlib.md5(data).hexdigest(), r.stdout
    assert r.stdout.split()[-1] == b"640"
    assert agent_get(node, "/tmp/cp-in.bin") == data


def test_agent_clock_request_sets_the_guest_wall_clock(cluster2):
    """AG_CLOCK (docs/agent.md): what the launcher sends a node restored from a snapshot."""
    import os
    from rackemu.agent import AG_CLOCK
    n = cluster2.node(1)
    target = time.time_ns() + 1000 * 10**9
    n.with_agent("clock", lambda a: a.set_clock(target, os.urandom(256)))
    assert abs(int(n.sh("date +%s")) - target / 1e9) < 30
    # a body shorter than the time is refused with EINVAL, and the agent keeps serving
    st, fl, out, err = n.agent()._request(AG_CLOCK, b"\x01\x02", 10)
    assert (st, fl & 2) == (-22, 2) and b"malformed" in err, (st, fl, err)
    n.with_agent("clock", lambda a: a.set_clock(time.time_ns()))
    assert abs(int(n.sh("date +%s")) - time.time()) < 30
