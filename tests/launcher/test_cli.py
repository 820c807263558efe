"""The CLI as a person runs it (through ./rackemu): help texts, usage errors, messages."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launcher_fakes import pids_referencing

ROOT = Path(__file__).resolve().parents[2]
RACKEMU = str(ROOT / "rackemu")


def run(*args, env=None, timeout=60):
    e = dict(os.environ, RACKEMU_SKIP_SETUP="1")
    e.update(env or {})
    return subprocess.run([RACKEMU, *args], capture_output=True, text=True, env=e, timeout=timeout)


@pytest.mark.parametrize("cmd", [[], ["cluster"], ["cluster", "up"], ["cluster", "status"],
                                 ["cluster", "down"], ["exec"], ["cp"], ["console"],
                                 ["bridge-stats"], ["demo"], ["setup"], ["test"],
                                 ["node"], ["node", "restart"], ["node", "powercut"], ["bridge"],
                                 ["bridge", "restart"]])
def test_every_command_has_help(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: rackemu")


def test_help_does_not_run_setup(tmp_path):
    # With --help the wrapper must not start the (long) set-up, even without the skip switch.
    r = subprocess.run([RACKEMU, "demo", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "setup" not in r.stderr


@pytest.mark.parametrize("args,msg", [
    (["cluster", "up", "--nodes", "0"], "--nodes: 0 is out of range; a cluster has 1 to 64 nodes"),
    (["cluster", "up", "--nodes", "65"], "--nodes: 65 is out of range"),
    (["cluster", "up", "--nodes", "two"], "--nodes: 'two' is not a number"),
    (["exec", "0", "--timeout", "-1", "--", "ls"], "--timeout: -1 must be greater than 0"),
])
def test_usage_errors_exit_2(args, msg):
    r = run(*args)
    assert r.returncode == 2
    assert msg in r.stderr


def test_bad_memory_and_unknown_config_key(tmp_path, fake_build):
    r = run("cluster", "up", "--memory", "lots", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "memory: cannot read 'lots' as a size" in r.stderr
    bad = tmp_path / "c.toml"
    bad.write_text('nodes = 2\nmemroy = "1G"\n')
    r = run("cluster", "up", "--config", str(bad))
    assert r.returncode == 1 and f"{bad}: unknown key 'memroy'" in r.stderr


def test_cluster_up_rnic_option_meets_the_config_check(tmp_path, fake_build):
    """`cluster up --rnic` sets the rnic key: with machine virt it is refused with the reason."""
    r = run("cluster", "up", "--help")
    assert "--rnic" in r.stdout and "rackemu-rnic" in r.stdout
    r = run("cluster", "up", "--rnic", "--machine", "virt", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "rnic: the RNIC is a rackemu device" in r.stderr, r.stderr
    bad = tmp_path / "c.toml"
    bad.write_text("rnic_props = { mtu = 9000 }\n")
    r = run("cluster", "up", "--rnic", "--config", str(bad), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 1 and "rnic_props.mtu: 9000 is not a RoCE path MTU" in r.stderr, r.stderr


def test_missing_artefacts_say_run_setup(tmp_path):
    r = run("cluster", "up", "--run-dir", str(tmp_path / "r"), env={"RACKEMU_BUILD": str(tmp_path / "b")})
    assert r.returncode == 1
    assert "build artefacts missing" in r.stderr and "run `./rackemu setup` first" in r.stderr


def test_commands_on_a_cluster_that_does_not_exist(tmp_path):
    d = str(tmp_path / "none")
    r = run("cluster", "status", "--run-dir", d)
    assert r.returncode == 3 and "no cluster in" in r.stdout
    r = run("exec", "0", "--run-dir", d, "--", "true")
    assert r.returncode == 1 and "start one with `rackemu cluster up`" in r.stderr
    r = run("cluster", "down", "--run-dir", d)
    assert r.returncode == 0 and "nothing to stop" in r.stderr


def test_cp_needs_exactly_one_remote_side(tmp_path):
    r = run("cp", "a", "b", "--run-dir", str(tmp_path))
    assert r.returncode == 1 and "cp LOCAL NODE:PATH" in r.stderr
    r = run("cp", "0:/a", "1:/b", "--run-dir", str(tmp_path))
    assert r.returncode == 1 and "cp LOCAL NODE:PATH" in r.stderr


def _agent_module_present():
    return (ROOT / "platform" / "rackemu" / "agent.py").exists()


@pytest.mark.skipif(not _agent_module_present(), reason="needs platform/rackemu/agent.py")
def test_ctrl_c_during_cluster_up_leaves_nothing(tmp_path, fake_build):
    """The fake QEMU never answers the agent, so `up` waits; Ctrl-C must clean up."""
    d = tmp_path / "r"
    p = subprocess.Popen([RACKEMU, "cluster", "up", "--nodes", "2", "--run-dir", str(d)],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, RACKEMU_SKIP_SETUP="1"))
    deadline = time.monotonic() + 20
    while len(pids_referencing(d)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(pids_referencing(d)) >= 3
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "interrupted" in err
    assert pids_referencing(d) == []
