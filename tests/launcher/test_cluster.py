"""Process lifecycle: every process the launcher starts is gone after down(), after a failed
up(), after Ctrl-C during up(), and a live cluster's run dir is never reused. Uses the fake
QEMU and bridge from fakes/ and a stand-in agent client (conftest.py)."""
import json
import os
import signal
import stat
import threading
import time

import pytest

import rackemu.cluster as rc
from rackemu.cluster import Cluster, ClusterError
from rackemu.config import GUEST_CMDLINE, load_config

from launcher_fakes import pids_referencing


def cfg(run_dir, **kw):
    over = {"run_dir": str(run_dir), "boot_timeout": 10, "name": "t"}
    over.update(kw)
    return load_config(overrides=over)


def sockets_in(d):
    return sorted(p.name for p in d.iterdir() if stat.S_ISSOCK(p.lstat().st_mode))


def test_up_runs_bridge_and_nodes_and_down_leaves_nothing(fake_build, fake_agent, run_dir):
    c = Cluster(cfg(run_dir, nodes=3))
    c.up()
    try:
        assert c.status == "up"
        assert c.bridge.alive() and all(n.alive() for n in c.nodes)
        assert all(n.state == "running" and n.boot_seconds is not None for n in c.nodes)
        assert sockets_in(run_dir) == ["bridge.ctl", "fabric.sock", "node0.agent", "node0.qmp",
                                       "node1.agent", "node1.qmp", "node2.agent", "node2.qmp"]
        # the node command line is the fixed interface
        argv = c.nodes[1].proc.argv
        assert argv[argv.index("-M") + 1] == (f"rackemu-node,memory-backend=ram,node-id=1,node-count=3,"
                                              f"fabric={run_dir}/fabric.sock,ram-dir={c.ram_dir},"
                                              f"net=on,net-mtu=1500,stack-roce=auto")
        assert f"mem-path={c.ram_dir}/node1.ram" in argv[argv.index("-object") + 1]
        assert "share=on" in argv[argv.index("-object") + 1]  # guest RAM as a shared-memory file
        assert argv[argv.index("-append") + 1] == f"console=ttyAMA0 rackemu.node=1 {GUEST_CMDLINE}"
        assert f"socket,id=agent,path={run_dir}/node1.agent,server=on,wait=off" in argv
        st = json.loads((run_dir / "state.json").read_text())
        assert st["status"] == "up" and [n["proc"]["pid"] for n in st["nodes"]] == [n.pid for n in c.nodes]
        assert c.node(2).exec("echo hi").stdout == b"ran echo hi\n"
        assert len(pids_referencing(run_dir)) == 4
    finally:
        c.down()
    assert pids_referencing(run_dir) == []
    assert sockets_in(run_dir) == []
    assert not list(run_dir.glob("*.pid"))
    assert (run_dir / "node0.console").exists(), "logs stay for post-mortems"
    assert json.loads((run_dir / "state.json").read_text())["status"] == "down"


@pytest.mark.parametrize("over,machine_tail", [
    ({}, ",net=on,net-mtu=1500,stack-roce=auto"),
    ({"net_mtu": 9000}, ",net=on,net-mtu=9000,stack-roce=auto"),
    ({"stack_roce": "on"}, ",net=on,net-mtu=1500,stack-roce=on"),
    ({"net": False}, ",net=off"),
])
def test_the_nodes_nic_on_the_fabric_is_on_the_machine_command_line(
        fake_build, fake_agent, run_dir, over, machine_tail):
    """docs/networking.md: the machine creates each node's virtio-net NIC on the fabric port
    (net=on, with the configured MTU) or none (net=off)."""
    c = Cluster(cfg(run_dir, nodes=2, **over))
    c.up()
    try:
        for n in c.nodes:
            machine = n.proc.argv[n.proc.argv.index("-M") + 1]
            assert machine.endswith(machine_tail), machine
            assert f"node-id={n.id}," in machine
    finally:
        c.down()


@pytest.mark.parametrize("over,rnic", [
    ({}, None),
    ({"rnic": True}, "rackemu-rnic"),
    ({"rnic": True, "rnic_props": {"mtu": 2048, "pcie-ns": 250}}, "rackemu-rnic,mtu=2048,pcie-ns=250"),
])
def test_the_rnic_key_puts_the_device_on_every_node(fake_build, fake_agent, run_dir, over, rnic):
    """docs/launcher.md: rnic = true adds -device rackemu-rnic (with rnic_props) to every node,
    before the config's own qemu_args (which may still add or override)."""
    c = Cluster(cfg(run_dir, nodes=2, qemu_args=["-d", "guest_errors"], **over))
    c.up()
    try:
        for n in c.nodes:
            argv = n.proc.argv
            devices = [argv[k + 1] for k, a in enumerate(argv) if a == "-device"]
            assert [d for d in devices if d.startswith("rackemu-rnic")] == ([rnic] if rnic else [])
            if rnic:
                assert argv.index(rnic) < argv.index("guest_errors")
    finally:
        c.down()


def test_bridge_stats_reads_the_control_socket(fake_build, fake_agent, run_dir):
    with Cluster(cfg(run_dir, nodes=2)) as c:
        stats = c.bridge_stats()
    assert [p["node"] for p in stats["ports"]] == [0, 1]
    assert stats["ports"][1]["frames_out"] == 11


def test_a_cluster_whose_run_dir_has_live_processes_is_refused(fake_build, fake_agent, run_dir):
    with Cluster(cfg(run_dir)) as c:
        with pytest.raises(ClusterError, match=r"has live processes.*\n.*pid \d+.*"
                                               r"(\n.*)*stop it first with `rackemu cluster down"):
            Cluster(cfg(run_dir)).up()
        assert all(n.alive() for n in c.nodes), "the refused up must not touch the running cluster"


def test_status_and_down_from_another_process(fake_build, fake_agent, run_dir):
    c = Cluster(cfg(run_dir), detach=True)
    c.up()
    other = Cluster.attach(run_dir)
    st = other.status_dict()
    assert st["status"] == "up"
    assert [n["state"] for n in st["nodes"]] == ["running", "running"]
    assert [n["agent"] for n in st["nodes"]] == ["ok", "ok"]
    other.down()
    assert pids_referencing(run_dir) == []
    for n in c.nodes:       # reap our children (they were killed by `other`)
        n.proc.popen.wait(5)


def test_kill_node_kills_one_qemu_only(fake_build, fake_agent, run_dir):
    with Cluster(cfg(run_dir, nodes=3)) as c:
        c.kill_node(1)
        assert not c.node(1).alive() and c.node(1).state == "killed"
        assert c.node(0).alive() and c.node(2).alive() and c.bridge.alive()
        assert c.status_dict()["status"] == "degraded"
        with pytest.raises(ClusterError, match="node 1 is not running"):
            c.node(1).exec("true")
        c.restart_node(1)
        assert c.node(1).alive() and c.node(1).state == "running"
    assert pids_referencing(run_dir) == []


def test_restart_node_waits_until_the_bridge_has_seen_the_old_qemu_go(
        fake_build, fake_agent, run_dir, monkeypatch):
    """The bridge refuses a node id while it still sees that node's previous connection up
    (DUPLICATE, docs/fabric.md "Handshake") and the refused QEMU exits. The fake bridge notices
    a hang-up 1.5 s late, as a loaded bridge may: restart_node, of a running and of a killed
    node, must wait for the port to go down before it starts the new QEMU."""
    monkeypatch.setenv("FAKE_BRIDGE_HANGUP_DELAY", "1.5")
    with Cluster(cfg(run_dir, nodes=2)) as c:
        old = c.node(1).pid
        c.restart_node(1)
        ports = {p["node"]: p for p in c.bridge_stats()["ports"]}
        assert c.node(1).alive() and c.node(1).pid != old and c.node(1).state == "running"
        assert ports[1]["state"] == "up" and ports[1]["connects"] == 2
        c.kill_node(1)
        c.restart_node(1)
        stats = c.bridge_stats()
        ports = {p["node"]: p for p in stats["ports"]}
        assert c.node(1).alive() and ports[1]["state"] == "up" and ports[1]["connects"] == 3
        assert stats["refused_handshakes"] == 0
        assert ports[0]["connects"] == 1, "the other node stayed connected"
    assert pids_referencing(run_dir) == []


def test_qemu_that_dies_during_boot_fails_up_with_its_output_and_cleans_up(
        fake_build, fake_agent, run_dir, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "die")
    FakeAgent = fake_agent
    FakeAgent.answer = False
    t0 = time.monotonic()
    with pytest.raises(ClusterError) as e:
        Cluster(cfg(run_dir)).up()
    assert time.monotonic() - t0 < 8, "a dead QEMU must fail fast, not wait for the timeout"
    msg = str(e.value)
    assert "QEMU exited with status 3 before its agent answered" in msg
    assert "fake failure" in msg and "Linux version 6.1.0-fake" in msg
    assert pids_referencing(run_dir) == []
    assert sockets_in(run_dir) == []


def test_bridge_that_dies_fails_up(fake_build, fake_agent, run_dir, monkeypatch):
    monkeypatch.setenv("FAKE_BRIDGE_MODE", "die")
    with pytest.raises(ClusterError, match=r"fabric bridge exited with status 2 before it was "
                                           r"ready(.|\n)*cannot bind: fake failure"):
        Cluster(cfg(run_dir)).up()
    assert pids_referencing(run_dir) == []


def test_boot_timeout_stops_everything_and_names_the_nodes(fake_build, fake_agent, run_dir):
    fake_agent.answer = False
    with pytest.raises(ClusterError, match=r"timed out after 2 s waiting for the guest agent on "
                                           r"node\(s\) 0, 1(.|\n)*last console line: "
                                           r"'\[    0.000000\] Linux version 6.1.0-fake'"):
        Cluster(cfg(run_dir, boot_timeout=2)).up()
    assert pids_referencing(run_dir) == []
    assert json.loads((run_dir / "state.json").read_text())["status"] == "failed"


def test_ctrl_c_during_up_stops_everything(fake_build, fake_agent, run_dir):
    fake_agent.answer = False
    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        Cluster(cfg(run_dir, boot_timeout=60, nodes=2)).up()
    assert pids_referencing(run_dir) == []
    assert sockets_in(run_dir) == []


def test_qemu_ignoring_sigterm_is_killed(fake_build, fake_agent, run_dir, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "ignore-term")
    monkeypatch.setattr("rackemu.procs.TERM_GRACE", 1.0)
    c = Cluster(cfg(run_dir))
    c.up()
    t0 = time.monotonic()
    c.down()
    assert 1.0 <= time.monotonic() - t0 < 5
    assert pids_referencing(run_dir) == []


def test_children_in_the_process_group_go_too(fake_build, fake_agent, run_dir, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "fork")
    c = Cluster(cfg(run_dir, nodes=1))
    c.up()
    time.sleep(0.3)
    groups = {os.getpgid(p) for p in pids_referencing(run_dir)}
    members = [int(e) for e in os.listdir("/proc") if e.isdigit() and _pgid(int(e)) in groups]
    assert len(members) >= 3     # bridge, QEMU, its child
    c.down()
    time.sleep(0.2)
    assert [m for m in members if _alive(m)] == []


def test_down_finds_processes_a_crashed_launcher_did_not_record(fake_build, fake_agent, run_dir):
    c = Cluster(cfg(run_dir), detach=True)
    c.up()
    (run_dir / "state.json").write_text(json.dumps({**c.to_dict(), "bridge": None, "nodes": [
        {**n.to_dict(), "proc": None} for n in c.nodes]}))
    with pytest.raises(ClusterError, match="has live processes"):
        Cluster(cfg(run_dir)).up()
    Cluster.attach(run_dir).down()
    for n in c.nodes:
        n.proc.popen.wait(5)
    c.bridge.popen.wait(5)
    assert pids_referencing(run_dir) == []


def test_pdeathsig_kills_nodes_when_the_starting_process_dies(fake_build, run_dir, tmp_path):
    """A pytest run that is SIGKILLed must not leave QEMUs behind."""
    import subprocess
    import sys
    script = tmp_path / "starter.py"
    script.write_text(f"""
import sys, time
sys.path.insert(0, {str(rc.__file__.rsplit('/', 2)[0])!r})
import rackemu.cluster as rc
from rackemu.cluster import Cluster
from rackemu.config import load_config
c = Cluster(load_config(overrides={{"run_dir": {str(run_dir)!r}, "nodes": 2}}))
c.config.check_artefacts = lambda: None
c.wait_agents = lambda *a, **k: None
c.up()
print("UP", flush=True)
time.sleep(100)
""")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "UP"
    assert len(pids_referencing(run_dir)) == 3
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while pids_referencing(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids_referencing(run_dir) == []
    Cluster.attach(run_dir).down()      # nobody ran `down`: remove the guest-RAM files too


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _alive(pid):
    try:
        st = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return st[st.rfind(")") + 2] not in "ZX"
