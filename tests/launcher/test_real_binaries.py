"""The launcher with rackemu's real QEMU and fabric bridge (no guest needed: the "kernel" is
64 zero bytes, so the vCPUs spin on garbage while the machine, its fabric port and the
bridge do their part). Skipped until ./rackemu setup has built them."""
import time

import pytest

from rackemu.cluster import Cluster
from rackemu.config import build_dir, default_bridge, load_config

from launcher_fakes import make_build, pids_referencing

QEMU = build_dir() / "qemu" / "qemu-system-aarch64"
BRIDGE = default_bridge(build_dir())
pytestmark = pytest.mark.skipif(not (QEMU.exists() and BRIDGE.exists()),
                                reason="rackemu's QEMU and bridge are not built (./rackemu setup)")


def _ports(c):
    return {p["node"]: p for p in c.bridge_stats().get("ports", [])}


def test_real_qemu_nodes_join_the_real_bridge_and_leave_nothing(tmp_path, monkeypatch):
    build = make_build(tmp_path, QEMU, BRIDGE)
    monkeypatch.setenv("RACKEMU_BUILD", str(build))
    run_dir = tmp_path / "run"
    c = Cluster(load_config(overrides={"run_dir": str(run_dir), "nodes": 2, "memory": "128M",
                                       "vcpus": 1}))
    c.wait_agents = lambda *a, **k: None      # no guest: do not wait for an agent
    c.up()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(_ports(c)) < 2:
            time.sleep(0.2)
        ports = _ports(c)
        assert sorted(ports) == [0, 1] and all(p["state"] == "up" for p in ports.values()), ports
        assert all((run_dir / f"node{i}.qmp").is_socket() for i in (0, 1))
        # A running node restarted at once: the new QEMU joins under the same id only after
        # the bridge has seen the old connection close (else it is refused DUPLICATE and exits).
        old = c.node(0).pid
        c.restart_node(0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _ports(c)[0]["state"] != "up":
            time.sleep(0.2)
        ports = _ports(c)
        assert c.node(0).alive() and c.node(0).pid != old
        assert ports[0]["state"] == "up" and ports[0]["connects"] == 2, ports
        assert c.bridge_stats()["refused_handshakes"] == 0
        c.kill_node(1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _ports(c).get(1, {}).get("state") == "up":
            time.sleep(0.2)
        assert _ports(c).get(1, {}).get("state") != "up"
        assert c.node(0).alive() and c.bridge.alive()
    finally:
        c.down()
    assert pids_referencing(run_dir) == []


def test_fault_rules_and_capture_through_the_cli_with_the_real_bridge(tmp_path, monkeypatch, capsys):
    """Rules from the TOML are installed at start; `rackemu fault` and `rackemu capture` talk to
    the real bridge; a rule or option the bridge refuses is exit status 2 with its reason."""
    from rackemu import cli
    build = make_build(tmp_path, QEMU, BRIDGE)
    monkeypatch.setenv("RACKEMU_BUILD", str(build))
    run_dir = tmp_path / "run"
    c = Cluster(load_config(overrides={"run_dir": str(run_dir), "nodes": 2, "memory": "128M", "vcpus": 1}))
    c.config.faults = ["drop every=5 svc=eth kind=roce"]
    c.config.fault_seed = 7
    c.wait_agents = lambda *a, **k: None
    c.up()
    try:
        sel = ["--run-dir", str(run_dir)]
        capsys.readouterr()
        assert cli.main(["fault", "list", *sel]) == 0
        out = capsys.readouterr().out
        assert "drop every=5 svc=eth kind=roce seed=8" in out, out
        assert cli.main(["fault", "add", "delay", "us=100", "between=0,1", *sel]) == 0
        assert "fault rule 2: delay us=100 between=0,1 seed=9" in capsys.readouterr().out
        assert cli.main(["fault", "add", "drop", "prob=3", *sel]) == 2
        assert "bad value '3' for prob" in capsys.readouterr().err
        assert cli.main(["fault", "del", "42", *sel]) == 2
        assert cli.main(["fault", "del", "x", *sel]) == 2
        assert cli.main(["fault", "del", "all", *sel]) == 0
        assert "removed 2 fault rule(s)" in capsys.readouterr().out
        cap = tmp_path / "cap.pcapng"
        assert cli.main(["capture", "start", "-o", str(cap), "--nodes", "0,1", "--seconds", "0.5", *sel]) == 0
        assert "stopped: capturing to" in capsys.readouterr().err
        assert cap.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"          # a pcapng section header
        assert cli.main(["capture", "start", "-o", str(cap), "--nodes", "0,99", *sel]) == 2
        assert cli.main(["capture", "status", *sel]) == 0
        assert "no capture running" in capsys.readouterr().out
    finally:
        c.down()
    assert pids_referencing(run_dir) == []
