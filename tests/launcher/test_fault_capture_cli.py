"""`rackemu fault` and `rackemu capture` against the real fabric bridge, started by the launcher
without nodes (the commands talk only to the bridge's control socket). Skipped until
./rackemu setup has built the bridge."""
import pytest

from rackemu.cluster import Cluster
from rackemu.config import build_dir, default_bridge, load_config

from launcher_fakes import FAKES, make_build, pids_referencing

BRIDGE = default_bridge(build_dir())
pytestmark = pytest.mark.skipif(not BRIDGE.exists(), reason="the bridge is not built (./rackemu setup)")


def test_fault_rules_and_capture_through_the_cli_with_the_real_bridge(tmp_path, monkeypatch, capsys):
    """Rules from the TOML are installed at start; `rackemu fault` and `rackemu capture` talk to
    the real bridge; a rule or option the bridge refuses is exit status 2 with its reason."""
    from rackemu import cli
    build = make_build(tmp_path, FAKES / "fake_qemu.py", BRIDGE)
    monkeypatch.setenv("RACKEMU_BUILD", str(build))
    run_dir = tmp_path / "run"
    c = Cluster(load_config(overrides={"run_dir": str(run_dir), "nodes": 2, "memory": "128M", "vcpus": 1}))
    c.config.faults = ["drop every=5 svc=eth kind=roce"]
    c.config.fault_seed = 7
    c.start_node = lambda i: None          # the bridge alone: these commands talk only to it
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
