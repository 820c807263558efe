"""`rackemu fault` and `rackemu capture` against the real fabric bridge, started by the launcher
without nodes (the commands talk only to the bridge's control socket). Skipped until
./rackemu setup has built the bridge."""
import os
import subprocess
from pathlib import Path

import pytest

from rackemu.cluster import Cluster
from rackemu.config import build_dir, default_bridge, load_config

from launcher_fakes import FAKES, make_build, pids_referencing

BRIDGE = default_bridge(build_dir())
RACKEMU = str(Path(__file__).resolve().parents[2] / "rackemu")
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


@pytest.fixture
def bridge_only(tmp_path, monkeypatch):
    """A cluster whose bridge (the real one) runs without nodes; yields (cluster, CLI selector)."""
    build = make_build(tmp_path, FAKES / "fake_qemu.py", BRIDGE)
    monkeypatch.setenv("RACKEMU_BUILD", str(build))
    run_dir = tmp_path / "run"
    c = Cluster(load_config(overrides={"run_dir": str(run_dir), "nodes": 2, "memory": "128M", "vcpus": 1}))
    c.start_node = lambda i: None
    c.wait_agents = lambda *a, **k: None
    c.up()
    try:
        yield c, ["--run-dir", str(run_dir)]
    finally:
        c.down()
    assert pids_referencing(run_dir) == []


def test_long_bridge_commands_run_whole_and_over_long_ones_are_refused(bridge_only, tmp_path, capsys):
    """trust-model.md finding R5: the bridge cut a control command at 256 bytes and ran the rest (a
    262-byte rule lost its last key; a capture with a 198-character path started with max_mb=1),
    then the CLI failed on a reset connection. Now a command runs whole, or is refused whole with
    the limit named, and the CLI shows the bridge's reason (exit 2)."""
    from rackemu import cli
    c, sel = bridge_only
    cap = tmp_path / ("c" * (198 - len(str(tmp_path)) - 8) + ".pcapng")
    assert len(str(cap)) == 198
    capsys.readouterr()
    assert cli.main(["capture", "start", "-o", str(cap), *sel]) == 0, capsys.readouterr().err
    st = c.bridge_command("capture status")
    assert st["path"] == str(cap) and st["max_mb"] == 1024 and st["snaplen"] == 65535, st
    assert cli.main(["capture", "stop", *sel]) == 0
    rule = ["drop", "src=" + ",".join(map(str, range(64))), "svc=eth,mbox,echo,mem,rmc,bridge,rackemu",
            "limit=1000000000", "dst=2"]
    assert len("fault add " + " ".join(rule)) > 256
    capsys.readouterr()
    assert cli.main(["fault", "add", *rule, *sel]) == 0, capsys.readouterr().err
    assert "dst=2 seed=2" in capsys.readouterr().out
    huge = ["drop", "src=" + ",".join(["0"] * 5000), "dst=3"]
    assert cli.main(["fault", "add", *huge, *sel]) == 2
    err = capsys.readouterr().err
    assert "longer than 8192 bytes, the limit of a control command: refused, nothing was done" in err, err
    assert "Traceback" not in err and len(err) < 600, err
    assert [r["rule"] for r in c.bridge_command("fault list")["rules"]] == [" ".join(rule) + " seed=2"]


def test_non_utf8_arguments_and_keys_given_twice_are_messages_not_tracebacks(bridge_only, tmp_path):
    """trust-model.md finding R7: a fault rule or capture path that is not UTF-8 ended in a
    UnicodeEncodeError traceback, and a key given twice (`prob=0.1 prob=0.2`) was accepted with
    the last value. Both are refused with a message naming the argument or key (exit 2)."""
    c, sel = bridge_only
    env = dict(os.environ, RACKEMU_SKIP_SETUP="1")

    def rackemu(*args):
        return subprocess.run([RACKEMU, *args, *sel], capture_output=True, env=env, timeout=60)

    r = rackemu("fault", "add", "drop", b"dst=1\xff")
    assert r.returncode == 2 and b"Traceback" not in r.stderr, r.stderr
    assert b"fault rule argument 'dst=1\\xff' is not UTF-8 text" in r.stderr, r.stderr
    r = rackemu("capture", "start", "-o", os.fsencode(tmp_path) + b"/cap\xfe.pcapng")
    assert r.returncode == 2 and b"Traceback" not in r.stderr, r.stderr
    assert b"cap\\xfe.pcapng' is not UTF-8 text" in r.stderr, r.stderr
    r = rackemu("fault", "add", "drop", "prob=0.1", "prob=0.2")
    assert r.returncode == 2 and b"'prob' is given twice; give each key once" in r.stderr, r.stderr
    assert c.bridge_command("fault list")["rules"] == []
    assert c.bridge_command("capture status") == {"active": False}
    ans = c.bridge_command(f"capture start path={tmp_path}/a.pcapng max_mb=1 max_mb=1024")
    assert ans == {"error": "capture option 'max_mb' is given twice; give each option once"}, ans


def test_switch_programs_through_the_cli_and_the_toml_with_the_real_bridge(tmp_path, monkeypatch, capsys):
    """`switch = "opcount"` in the TOML loads the program at `cluster up`; `rackemu switch list,
    load, stats, unload` talk to the real bridge (docs/switch.md); a program or parameter the
    bridge refuses is exit status 2 with its reason, and the loaded program stays."""
    from rackemu import cli
    build = make_build(tmp_path, FAKES / "fake_qemu.py", BRIDGE)
    monkeypatch.setenv("RACKEMU_BUILD", str(build))
    run_dir = tmp_path / "run"
    c = Cluster(load_config(overrides={"run_dir": str(run_dir), "nodes": 2, "memory": "128M", "vcpus": 1}))
    c.config.switch = "opcount"
    c.config.switch_params = ["qps=16"]
    c.start_node = lambda i: None
    c.wait_agents = lambda *a, **k: None
    c.up()
    try:
        sel = ["--run-dir", str(run_dir)]
        st = c.bridge_command("switch stats")
        assert st["loaded"] and st["program"] == "opcount" and st["params"]["qps"] == "16", st
        capsys.readouterr()
        assert cli.main(["switch", "list", *sel]) == 0
        out = capsys.readouterr().out
        assert "opcount (loaded): per-QP counts" in out and "qps=256  (an integer in 1..65536)" in out, out
        assert cli.main(["switch", "load", "opcount", "--set", "qps=0", *sel]) == 2
        assert "opcount: qps=0 is not an integer in 1..65536" in capsys.readouterr().err
        assert cli.main(["switch", "load", "nosuch", *sel]) == 2
        assert "no switch program 'nosuch' (programs: opcount, swordbox)" in capsys.readouterr().err
        assert c.bridge_command("switch stats")["params"]["qps"] == "16"
        assert cli.main(["switch", "load", "opcount", "--set", "qps=1024", "--set", "malformed=drop", *sel]) == 0
        out = capsys.readouterr().out
        assert "switch program opcount loaded (malformed=drop qps=1024): 4 stage(s)" in out, out
        assert cli.main(["switch", "stats", *sel]) == 0
        out = capsys.readouterr().out
        assert "program opcount: 4 stage(s)" in out and "req_psn" in out, out
        assert cli.main(["switch", "unload", *sel]) == 0
        assert "switch program opcount unloaded" in capsys.readouterr().out
        assert cli.main(["switch", "stats", *sel]) == 0
        assert "no switch program loaded" in capsys.readouterr().out
        assert c.bridge_command("switch stats") == {"loaded": False}
    finally:
        c.down()
    assert pids_referencing(run_dir) == []
