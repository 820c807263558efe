"""`rackemu shmemrun` (docs/shmem.md): argument refusals, and against a fake cluster with a fake
agent that plays the PEs: the environment each PE gets, output prefixes, a missing program, more
PEs than nodes, a failing PE stopping the others, the exit status."""
import re
import threading
import types

import pytest

from rackemu import cli
from rackemu.cluster import Cluster
from rackemu.config import load_config

from launcher_fakes import FakeAgentClient
from test_cli import run


class PeAgent(FakeAgentClient):
    """Plays the PEs: `command -v` knows only shmem-ok; a PE prints its environment; PE
    `fail_pe` exits with status 3; the others run until shmemrun's kill (or `hang_all`)."""
    fail_pe = None
    log: list = []
    stdins: list = []        # (node, stdin) of every PE's command
    killed: dict = {}
    lock = threading.Lock()

    def node(self):
        return int(re.search(r"node(\d+)\.agent$", self.path).group(1))

    def exec(self, cmd, timeout=None, stdin=None, env=None):
        ns = types.SimpleNamespace
        n = self.node()
        with PeAgent.lock:
            PeAgent.log.append((n, cmd))
        if cmd.startswith("command -v"):
            ok = "shmem-ok" in cmd
            return ns(rc=0 if ok else 1, stdout=b"/bin/shmem-ok\n" if ok else b"", stderr=b"", timed_out=False)
        m = re.search(r"RACKEMU_SHMEM_PE=(\d+)", cmd)
        if m:
            pe = int(m.group(1))
            with PeAgent.lock:
                PeAgent.stdins.append((n, stdin))
            env_line = " ".join(re.findall(r"(RACKEMU_SHMEM_\w+=\S+)", cmd))
            if pe == PeAgent.fail_pe:
                return ns(rc=3, stdout=b"", stderr=b"boom\n", timed_out=False)
            if PeAgent.fail_pe is None:
                return ns(rc=0, stdout=f"hello from {pe}\n{env_line}\n".encode(), stderr=b"", timed_out=False)
            ev = PeAgent.killed.setdefault(pe, threading.Event())
            if not ev.wait(timeout or 30):
                return ns(rc=0, stdout=b"", stderr=b"", timed_out=True)
            return ns(rc=143, stdout=b"partial\n", stderr=b"", timed_out=False)
        m = re.search(r"\.pe(\d+)\.pid", cmd)
        if m and "kill -TERM" in cmd:
            PeAgent.killed.setdefault(int(m.group(1)), threading.Event()).set()
        return ns(rc=0, stdout=b"", stderr=b"", timed_out=False)


@pytest.fixture
def cluster3(fake_build, monkeypatch, run_dir):
    FakeAgentClient.answer = True
    PeAgent.fail_pe, PeAgent.log, PeAgent.killed, PeAgent.stdins = None, [], {}, []
    monkeypatch.setattr("rackemu.node._agent_client_class", lambda: PeAgent)
    c = Cluster(load_config(overrides={"run_dir": str(run_dir), "boot_timeout": 10, "name": "t", "nodes": 3}))
    c.up()
    yield c
    c.down()


def shmemrun(run_dir, *args):
    return cli.main(["shmemrun", "--run-dir", str(run_dir), *args])


@pytest.mark.parametrize("args,msg", [
    (["-n", "0", "x"], "-n/--npes: 0 is out of range"),
    (["-n", "two", "x"], "'two' is not a number"),
    (["x"], "the following arguments are required: -n/--npes"),
    (["-n", "2"], "the following arguments are required: PROG"),
    (["-n", "2", "--timeout", "0", "x"], "--timeout: 0 must be greater than 0"),
])
def test_usage_errors_exit_2(args, msg):
    r = run("shmemrun", *args)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_help():
    r = run("shmemrun", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: rackemu shmemrun") and "-lshmem" in r.stdout


def test_no_cluster_is_an_error(tmp_path):
    r = run("shmemrun", "-n", "2", "--run-dir", str(tmp_path / "none"), "shmem-check")
    assert r.returncode == 1 and "no cluster in" in r.stderr


def test_pes_get_their_environment_and_prefixed_output(cluster3, run_dir, capsys):
    assert shmemrun(run_dir, "-n", "3", "--env", "SHMEM_SYMMETRIC_SIZE=8M", "shmem-ok", "--iters", "5") == 0
    out = capsys.readouterr().out.splitlines()
    for pe in range(3):
        assert f"[pe {pe}] hello from {pe}" in out
        env = next(line for line in out if line.startswith(f"[pe {pe}] RACKEMU"))
        assert f"RACKEMU_SHMEM_PE={pe}" in env and "RACKEMU_SHMEM_NPES=3" in env
        assert "RACKEMU_SHMEM_ROOT=node0" in env and re.search(r"RACKEMU_SHMEM_PORT=\d+", env)
    cmds = [c for n, c in PeAgent.log if "RACKEMU_SHMEM_PE=" in c]
    assert len(cmds) == 3 and all("SHMEM_SYMMETRIC_SIZE=8M" in c and "shmem-ok --iters 5" in c for c in cmds)


def test_every_run_gives_its_pes_a_fresh_secret_on_stdin_never_on_a_command_line(cluster3, run_dir, capsys):
    """trust-model.md finding R10: the PEs prove a per-job secret to each other at start-up. shmemrun
    draws it (32 random bytes, 64 hex digits) for each run and hands it to every PE's shell on
    stdin, which exports it as RACKEMU_SHMEM_SECRET: a guest's command lines are world-readable
    (/proc/PID/cmdline), its processes' environments are not. --env cannot set it."""
    secrets = []
    for _ in range(2):
        PeAgent.stdins, PeAgent.log = [], []
        assert shmemrun(run_dir, "-n", "3", "shmem-ok") == 0
        assert sorted(n for n, _ in PeAgent.stdins) == [0, 1, 2]
        given = {s for _, s in PeAgent.stdins}
        assert len(given) == 1, "the PEs of one run got different secrets"
        secret = given.pop()
        assert re.fullmatch(rb"[0-9a-f]{64}\n", secret), secret
        for _, cmd in PeAgent.log:
            assert secret.strip().decode() not in cmd
        pe_cmds = [c for _, c in PeAgent.log if "RACKEMU_SHMEM_PE=" in c]
        assert all(c.startswith("IFS= read -r RACKEMU_SHMEM_SECRET; export RACKEMU_SHMEM_SECRET;")
                   for c in pe_cmds), pe_cmds
        secrets.append(secret)
    assert secrets[0] != secrets[1]
    assert shmemrun(run_dir, "-n", "2", "--env", "RACKEMU_SHMEM_SECRET=00", "shmem-ok") == 1
    assert "shmemrun sets" in capsys.readouterr().err


def test_fewer_pes_than_nodes_uses_the_first_nodes(cluster3, run_dir, capsys):
    assert shmemrun(run_dir, "-n", "2", "shmem-ok") == 0
    assert {n for n, c in PeAgent.log if "RACKEMU_SHMEM_PE=" in c} == {0, 1}


def test_more_pes_than_nodes_is_refused(cluster3, run_dir, capsys):
    assert shmemrun(run_dir, "-n", "4", "shmem-ok") == 1
    err = capsys.readouterr().err
    assert "-n 4 asks for 4 PEs but cluster 't' has 3 node(s)" in err and "--nodes 4" in err
    assert not [c for n, c in PeAgent.log if "RACKEMU_SHMEM_PE=" in c]


def test_missing_program_is_refused(cluster3, run_dir, capsys):
    assert shmemrun(run_dir, "-n", "2", "no-such-prog") == 1
    assert "program no-such-prog not found on node 0" in capsys.readouterr().err
    assert shmemrun(run_dir, "-n", "2", "./no/such/file") == 1
    assert "program ./no/such/file not found on the host" in capsys.readouterr().err


def test_bad_env_is_refused(cluster3, run_dir, capsys):
    assert shmemrun(run_dir, "-n", "2", "--env", "1X=2", "shmem-ok") == 1
    assert "is not NAME=VALUE" in capsys.readouterr().err
    assert shmemrun(run_dir, "-n", "2", "--env", "RACKEMU_SHMEM_PE=1", "shmem-ok") == 1
    assert "shmemrun sets RACKEMU_SHMEM_PE, RACKEMU_SHMEM_NPES" in capsys.readouterr().err


def test_a_failing_pe_stops_the_others_and_sets_the_status(cluster3, run_dir, capsys):
    PeAgent.fail_pe = 1
    assert shmemrun(run_dir, "-n", "3", "shmem-ok") == 3
    cap = capsys.readouterr()
    assert "[pe 1] boom" in cap.err and "[pe 1] shmemrun: exited with status 3" in cap.err
    for pe in (0, 2):
        assert PeAgent.killed[pe].is_set()
        assert f"[pe {pe}] shmemrun: stopped after another PE failed" in cap.err
        assert f"[pe {pe}] partial" in cap.out


def test_host_program_is_copied_to_every_node(cluster3, run_dir, tmp_path, monkeypatch, capsys):
    prog = tmp_path / "a.out"
    prog.write_bytes(b"\x7fELF")
    prog.chmod(0o755)
    puts = []
    monkeypatch.setattr(PeAgent, "put", lambda self, data, path, mode=0o644, timeout=120: puts.append(
        (self.node(), path, mode, data)), raising=False)
    assert shmemrun(run_dir, "-n", "2", str(prog), "x") == 0
    assert sorted(p[0] for p in puts) == [0, 1]
    assert all(p[1].startswith("/tmp/shmemrun/") and p[1].endswith("/a.out") and p[2] == 0o755 and p[3] == b"\x7fELF"
               for p in puts)
    cmds = [c for n, c in PeAgent.log if "RACKEMU_SHMEM_PE=" in c]
    assert all(re.search(r"/tmp/shmemrun/\S+/a\.out x$", c) for c in cmds), cmds


def test_not_executable_host_program_is_refused(cluster3, run_dir, tmp_path, capsys):
    prog = tmp_path / "a.out"
    prog.write_bytes(b"x")
    prog.chmod(0o644)
    assert shmemrun(run_dir, "-n", "2", str(prog)) == 1
    assert "is not executable on the host" in capsys.readouterr().err


def test_ctrl_c_stops_every_pe(cluster3, run_dir, monkeypatch, capsys):
    import rackemu.shmemrun as sr
    PeAgent.fail_pe = 99                # no PE fails by itself: they run until stopped

    def interrupt(_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(sr, "_nap", interrupt)
    assert shmemrun(run_dir, "-n", "3", "shmem-ok") == 130
    assert all(PeAgent.killed[pe].is_set() for pe in range(3))
    assert "interrupted: stopping every PE" in capsys.readouterr().err
