"""Hardening trust-model.md findings 13-15 on a real cluster: a dead bridge is reported and restarted
with the nodes keeping their state; a node whose agent hangs or whose QEMU is stopped gives a
message (not a traceback, not a long wait) and `node restart` brings it back; the guest RAM
lives in a private directory keyed by the run dir and `down` removes it.

The launcher's own tests (tests/launcher/test_hardening.py) pin the same behaviour with a fake
QEMU and bridge; these check it against the real QEMU, bridge, fabric ports and guest agent."""
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import rackemu.cluster as rc
from rackemu import cli

ROOT = Path(__file__).resolve().parents[2]


def _ports(c):
    return {p["node"]: p["state"] for p in c.bridge_stats()["ports"]}


def _packets_cross(c, run_concurrently, mif):
    recv, send = run_concurrently(c.node(1), f"unimem recv --mif {mif} --count 4 --timeout 20000",
                                  c.node(0), f"unimem send --node 1 --mif {mif} --count 4")
    assert send.rc == 0, send.stdout + send.stderr
    assert recv.rc == 0, recv.stdout + recv.stderr
    return recv


def test_dead_bridge_is_reported_and_restarted_with_the_nodes_keeping_their_state(
        fresh_cluster, run_concurrently, capsys):
    c = fresh_cluster(nodes=2)
    ram_dir = c.ram_dir
    st = os.lstat(ram_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert ram_dir.name.startswith(f"rackemu-{os.geteuid()}-{c.config.name}-")
    c.node(1).sh("echo kept > /tmp/marker")
    pids = [n.pid for n in c.nodes]

    os.killpg(c.bridge.pid, signal.SIGKILL)
    assert c.bridge.wait_gone(5)
    st = c.status_dict(ping=False)
    assert st["status"] == "degraded" and st["bridge"]["state"] == "dead", st
    r = subprocess.run([str(ROOT / "rackemu"), "cluster", "status", "--no-ping",
                        "--run-dir", str(c.run_dir)], capture_output=True, text=True,
                       env=dict(os.environ, RACKEMU_SKIP_SETUP="1"), timeout=60)
    assert r.returncode == 3 and "bridge:  dead" in r.stdout, r.stdout + r.stderr
    assert "rackemu bridge restart" in r.stdout

    t0 = time.monotonic()
    ports = c.restart_bridge()
    took = time.monotonic() - t0
    print(f"bridge restart until both ports reconnected: {took:.1f} s")
    assert ports == {0: "up", 1: "up"}
    assert took < rc.PORT_RECONNECT_TIMEOUT
    assert [n.pid for n in c.nodes] == pids, "the nodes keep running"
    assert c.node(1).sh("cat /tmp/marker") == "kept\n", "... with their guest state"
    assert c.status_dict(ping=False)["status"] == "up"
    _packets_cross(c, run_concurrently, mif=9)   # the fabric carries packets again
    assert (c.run_dir / "bridge.log.1").exists()

    c.down()
    assert not ram_dir.exists(), "down removes the guest-RAM directory"
    assert not [p for p in c.run_dir.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)]


def test_stopped_qemu_and_hung_agent_give_messages_and_node_restart_recovers(
        fresh_cluster, run_concurrently, capsys, monkeypatch):
    c = fresh_cluster(nodes=2)
    sel = ["--run-dir", str(c.run_dir)]
    c.node(1).sh("echo old > /tmp/marker1")

    # a stopped QEMU: told at once
    os.kill(c.node(0).pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 5
        while rc.proc_state(c.node(0).pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        assert cli.main(["exec", "0", *sel, "--", "true"]) == 1
        err = capsys.readouterr().err
        assert "is stopped (SIGSTOP)" in err and f"kill -CONT {c.node(0).pid}" in err, err
        assert time.monotonic() - t0 < 3
    finally:
        os.kill(c.node(0).pid, signal.SIGCONT)
    assert c.node(0).sh("echo back") == "back\n"

    # a guest whose agent hangs: the CLI says so within AGENT_CHECK_TIMEOUT
    c.node(1).exec("setsid sh -c 'sleep 1; kill -STOP $(pidof rackemu-agent)' "
                   "</dev/null >/dev/null 2>&1 &", timeout=10)
    time.sleep(2.5)
    monkeypatch.setattr("rackemu.node.AGENT_CHECK_TIMEOUT", 3.0)
    t0 = time.monotonic()
    assert cli.main(["exec", "1", *sel, "--", "true"]) == 1
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert "no answer to a ping within 3 s" in err and "the guest agent does not answer" in err, err
    assert "rackemu node restart 1" in err and "Traceback" not in err
    assert took < 3.0 + 2.0
    assert cli.main(["exec", "all", *sel, "--", "true"]) == 1   # exec all reports it too
    assert "node 1" in capsys.readouterr().err

    # node restart: QEMU stopped, started with the same configuration, agent waited for
    old = c.node(1).pid
    t0 = time.monotonic()
    assert cli.main(["node", "restart", "1", *sel]) == 0, capsys.readouterr().err
    print(f"node restart until the agent answered: {time.monotonic() - t0:.1f} s")
    fresh = rc.Cluster.attach(c.run_dir)          # the CLI's view, from the state file
    c.nodes[1].proc, c.nodes[1].state = fresh.node(1).proc, fresh.node(1).state
    assert c.node(1).pid != old and c.node(1).alive()
    assert "rackemu.node=1" in c.node(1).sh("cat /proc/cmdline").split()
    assert c.node(1).exec("test -e /tmp/marker1").rc == 1, "a fresh boot: the old state is gone"
    deadline = time.monotonic() + 10
    while _ports(c).get(1) != "up" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ports(c) == {0: "up", 1: "up"}
    _packets_cross(c, run_concurrently, mif=10)
    assert fresh.status_dict()["status"] == "up"
