"""Regression tests for the host and launcher findings of the hardening issue (15): the guest-RAM
directory (13), the room on the file system that holds guest RAM (14), and messages instead of
tracebacks, `exec all`, a dead bridge in `cluster status`, `node restart`, `bridge restart` and
relative run dirs (15). Fake QEMU and bridge (fakes/), stand-in agent client where a guest agent
must answer (conftest.py)."""
import contextlib
import errno
import json
import os
import signal
import stat
import subprocess
import time
import types
from pathlib import Path

import pytest

import rackemu.cluster as rc
from rackemu import cli
from rackemu.cluster import Cluster, ClusterError
from rackemu.config import ConfigError, load_config

from launcher_fakes import pids_referencing

ROOT = Path(__file__).resolve().parents[2]
RACKEMU = str(ROOT / "rackemu")
IS_ROOT = os.geteuid() == 0


def cfg(run_dir, **kw):
    over = {"run_dir": str(run_dir), "boot_timeout": 10, "name": "t"}
    over.update(kw)
    return load_config(overrides=over)


def run(*args, env=None, timeout=60):
    e = dict(os.environ, RACKEMU_SKIP_SETUP="1")
    e.update(env or {})
    return subprocess.run([RACKEMU, *args], capture_output=True, text=True, env=e, timeout=timeout)


def ram_files(c):
    return sorted(p.name for p in c.ram_dir.glob("node*.ram")) if c.ram_dir.is_dir() else []


def owner_pid(path):
    """The fake QEMU writes its pid at the start of the RAM file it created."""
    return int(path.read_bytes()[:16].split(b"\n")[0])


@contextlib.contextmanager
def cluster_up(config, **kw):
    c = Cluster(config, **kw)
    c.up()
    try:
        yield c
    finally:
        Cluster.attach(c.run_dir).down()
        for p in c.all_procs():
            if p.popen is not None:
                p.popen.wait(5)


def tmpfs(path, size):
    """Mount a small tmpfs at `path` (root only); None when this host does not allow it."""
    path.mkdir(parents=True, exist_ok=True)
    if not IS_ROOT:
        return None
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                       capture_output=True)
    return path if r.returncode == 0 else None


# ---------------------------------------------------------------- 13: the guest-RAM directory

def test_same_name_in_two_run_dirs_never_touches_the_others_ram(fake_build, fake_agent, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with cluster_up(cfg(a, name="same")) as ca:
        files_a = {i: ca.ram_path(i) for i in range(2)}
        assert [owner_pid(files_a[i]) for i in range(2)] == [n.pid for n in ca.nodes]
        with cluster_up(cfg(b, name="same")) as cb:
            assert cb.ram_dir != ca.ram_dir
            # the second `up` left the first cluster's RAM files alone ...
            assert [owner_pid(files_a[i]) for i in range(2)] == [n.pid for n in ca.nodes]
            assert [owner_pid(cb.ram_path(i)) for i in range(2)] == [n.pid for n in cb.nodes]
        # ... and its `down` removed only its own
        assert not cb.ram_dir.exists()
        assert [owner_pid(files_a[i]) for i in range(2)] == [n.pid for n in ca.nodes]
    assert not ca.ram_dir.exists()


def test_ram_dir_is_private_and_recorded_and_down_removes_it(fake_build, fake_agent, run_dir):
    with cluster_up(cfg(run_dir)) as c:
        st = os.lstat(c.ram_dir)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == os.geteuid()
        assert c.ram_dir.name.startswith(f"rackemu-{os.geteuid()}-t-")
        assert json.loads((run_dir / "state.json").read_text())["ram_dir"] == str(c.ram_dir)
        assert Cluster.attach(run_dir).ram_dir == c.ram_dir
        assert ram_files(c) == ["node0.ram", "node1.ram"]
        ram_dir = c.ram_dir
    assert not ram_dir.exists()


@pytest.mark.skipif(not IS_ROOT, reason="chown to another user needs root")
def test_ram_dir_precreated_by_another_user_is_refused(fake_build, fake_agent, run_dir):
    c = Cluster(cfg(run_dir))
    os.mkdir(c.ram_dir, 0o755)
    try:
        os.chown(c.ram_dir, 65534, 65534)      # what user `nobody` can do in /dev/shm
        with pytest.raises(ClusterError, match=r"guest-RAM directory .* belongs to uid 65534, "
                                               r"not to you(.|\n)*read and change the guests' memory"):
            c.up()
        assert pids_referencing(run_dir) == []
        assert os.listdir(c.ram_dir) == [], "no RAM file may be created in it"
        assert os.lstat(c.ram_dir).st_uid == 65534, "and it is left alone"
    finally:
        os.rmdir(c.ram_dir)


def test_ram_dir_readable_by_others_is_refused(fake_build, fake_agent, run_dir):
    c = Cluster(cfg(run_dir))
    os.mkdir(c.ram_dir)
    os.chmod(c.ram_dir, 0o755)
    try:
        with pytest.raises(ClusterError, match=r"has mode 0755: other users could read the "
                                               r"guests' memory"):
            c.up()
        assert pids_referencing(run_dir) == [] and os.listdir(c.ram_dir) == []
    finally:
        os.rmdir(c.ram_dir)


def test_ram_dir_that_is_a_symlink_is_refused(fake_build, fake_agent, run_dir, tmp_path):
    c = Cluster(cfg(run_dir))
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.symlink(target, c.ram_dir)
    try:
        with pytest.raises(ClusterError, match="is a symbolic link"):
            c.up()
        assert os.listdir(target) == []
    finally:
        os.unlink(c.ram_dir)


def test_run_dir_writable_by_others_is_refused(fake_build, fake_agent, tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(ClusterError, match=r"run dir .* has mode 0777: other users could replace"):
        Cluster(cfg(d)).up()
    sub = d / "run"
    with pytest.raises(ClusterError, match=r"is writable by other users .* without the sticky bit"):
        Cluster(cfg(sub)).up()
    assert not sub.exists()


@pytest.mark.skipif(not IS_ROOT, reason="chown to another user needs root")
def test_run_dir_owned_by_another_user_is_refused(fake_build, fake_agent, tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(ClusterError, match=r"run dir .* belongs to uid 65534(.|\n)*replace the sockets"):
        Cluster(cfg(d)).up()
    assert os.listdir(d) == []


# ---------------------------------------------------------------- 14: room for guest RAM

def fake_statvfs(free_mib, total_mib=None):
    total_mib = total_mib or free_mib
    return lambda path: types.SimpleNamespace(f_bavail=free_mib * 256, f_frsize=4096,
                                              f_blocks=total_mib * 256)


def test_guest_ram_that_does_not_fit_its_file_system_is_refused_before_anything_starts(
        fake_build, fake_agent, run_dir, monkeypatch):
    monkeypatch.setattr("rackemu.hostdirs._statvfs", fake_statvfs(500, 1000))
    with pytest.raises(ClusterError) as e:
        Cluster(cfg(run_dir, nodes=2, memory="256M")).up()
    msg = str(e.value)
    assert "not enough room for guest RAM on /dev/shm" in msg
    assert "need 512 MiB + 32 MiB margin, but only 500 MiB of its 1000 MiB are free" in msg
    assert "SIGBUS" in msg and "mount -o remount,size=2G /dev/shm" in msg and "shm_dir" in msg
    assert pids_referencing(run_dir) == []
    assert not (run_dir / "bridge.log").exists(), "refused before the bridge started"
    # enough room: starts
    monkeypatch.setattr("rackemu.hostdirs._statvfs", fake_statvfs(544, 1000))
    with cluster_up(cfg(run_dir, nodes=2, memory="256M")) as c:
        assert c.status == "up"


def test_node_restart_checks_the_room_too(fake_build, fake_agent, run_dir, monkeypatch):
    with cluster_up(cfg(run_dir)) as c:
        c.kill_node(1)
        monkeypatch.setattr("rackemu.hostdirs._statvfs", fake_statvfs(100))
        with pytest.raises(ClusterError, match="not enough room for guest RAM"):
            c.restart_node(1)
        assert not c.node(1).alive()


@pytest.mark.skipif(not IS_ROOT, reason="mounting a tmpfs needs root")
def test_a_real_small_tmpfs_as_shm_dir_is_refused_with_the_fix(fake_build, tmp_path):
    shm = tmpfs(tmp_path / "shm", "64M")
    if shm is None:
        pytest.skip("this host does not allow mounting a tmpfs")
    try:
        conf = tmp_path / "c.toml"
        conf.write_text(f'name = "t"\nnodes = 2\nmemory = "128M"\nrun_dir = "run"\n'
                        f'shm_dir = "{shm}"\n')
        r = run("cluster", "up", "--config", str(conf))
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr
        assert f"not enough room for guest RAM on {shm} (mounted at {shm})" in r.stderr
        assert f"mount -o remount,size=1G {shm}" in r.stderr
        assert pids_referencing(tmp_path / "run") == []
    finally:
        subprocess.run(["umount", str(shm)])


def test_a_qemu_killed_by_sigbus_is_named_with_the_likely_cause(
        fake_build, fake_agent, run_dir, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "sigbus")
    fake_agent.answer = False
    with pytest.raises(ClusterError, match=r"QEMU was killed by signal 7 \(SIGBUS\) -- usually a "
                                           r"full guest-RAM file system"):
        Cluster(cfg(run_dir, nodes=1)).up()
    assert pids_referencing(run_dir) == []


# ---------------------------------------------------------------- 15: messages, not tracebacks

def test_non_utf8_toml_is_a_message(tmp_path):
    p = tmp_path / "c.toml"
    p.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 0xe9 at offset 11\)"):
        load_config(p)
    r = run("cluster", "up", "--config", str(p))
    assert r.returncode == 1 and "is not UTF-8 text" in r.stderr and "Traceback" not in r.stderr
    r = run("cluster", "status", "--config", str(p))
    assert r.returncode == 1 and "is not UTF-8 text" in r.stderr and "Traceback" not in r.stderr


def test_arguments_that_are_not_utf8_reach_the_guest_as_bytes_or_are_a_message(tmp_path, fake_build):
    """trust-model.md finding R7, the audit of free-form arguments: `exec` commands and `cp` paths that
    are not UTF-8 (a file name in Latin-1, say) ended in a UnicodeEncodeError traceback in the agent
    client; they now reach the guest as the same bytes, as a shell passes them. A run directory
    that is not UTF-8 was a traceback in the socket-path length check of `cluster up`."""
    from rackemu.agent import AG_EXEC, AG_GET, AG_PUT, AgentClient
    sent = []
    a = AgentClient(str(tmp_path / "nothing.agent"))
    a._request = lambda typ, body, timeout: sent.append((typ, body)) or (0, 0, b"", b"")
    name = os.fsdecode(b"/tmp/caf\xe9")
    a.exec(["ls", "-l", name])
    a.exec(f"cat {name} | wc -c")
    a.put(b"data", name, mode=0o600)
    a.get(name)
    assert [t for t, _ in sent] == [AG_EXEC, AG_EXEC, AG_PUT, AG_GET]
    assert sent[0][1].endswith(b"ls -l '/tmp/caf\xe9'") and sent[1][1].endswith(b"cat /tmp/caf\xe9 | wc -c")
    assert sent[2][1].endswith(b"/tmp/caf\xe9data") and sent[3][1] == b"/tmp/caf\xe9"
    bad = os.fsencode(tmp_path) + b"/run\xff"
    assert load_config(overrides={"run_dir": os.fsdecode(bad)}).run_dir == Path(os.fsdecode(bad))
    env = dict(os.environ, RACKEMU_SKIP_SETUP="1", RACKEMU_BUILD=str(tmp_path / "no-build"))
    r = subprocess.run([str(ROOT / "rackemu"), "cluster", "up", "--run-dir", bad], capture_output=True,
                       env=env, timeout=60)     # the run dir is taken; the missing build stops `up`
    assert r.returncode == 1 and b"run `./rackemu setup` first" in r.stderr, r.stderr
    assert b"Traceback" not in r.stderr and b"UTF-8" not in r.stderr and not os.path.exists(bad)


def test_run_dir_that_is_a_file_or_under_a_file_is_a_message(tmp_path, fake_build):
    f = tmp_path / "afile"
    f.write_text("x")
    r = run("cluster", "up", "--run-dir", str(f))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"run dir {f} exists and is not a directory" in r.stderr
    r = run("cluster", "up", "--run-dir", str(f / "run"))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"run dir {f / 'run'} cannot be created: {f} is a file, not a directory" in r.stderr
    for cmd in (["cluster", "status"], ["cluster", "down"], ["exec", "0"], ["bridge", "restart"],
                ["node", "restart", "0"], ["node", "powercut", "0"]):
        r = run(*cmd, "--run-dir", str(f / "run"), *(["--", "true"] if cmd[0] == "exec" else []))
        assert "Traceback" not in r.stderr and r.returncode in (0, 1, 3), (cmd, r.stderr)


def test_a_full_disk_while_writing_the_state_is_a_message_and_cleans_up(
        fake_build, fake_agent, run_dir, monkeypatch):
    real = rc.write_atomic
    calls = []

    def write(path, text):
        calls.append(path)
        if len(calls) >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    monkeypatch.setattr(rc, "write_atomic", write)
    with pytest.raises(ClusterError, match=r"cannot write the cluster's state file .*state.json: "
                                           r"No space left on device \(the file system holding "
                                           r".* is full"):
        Cluster(cfg(run_dir)).up()
    assert pids_referencing(run_dir) == []
    assert not list(Path("/dev/shm").glob(f"rackemu-{os.geteuid()}-t-*")) or \
        not Cluster(cfg(run_dir)).ram_dir.exists()


@pytest.mark.skipif(not IS_ROOT, reason="mounting a tmpfs needs root")
def test_a_really_full_run_dir_file_system_is_a_message(fake_build, tmp_path):
    mnt = tmpfs(tmp_path / "small", "1M")
    if mnt is None:
        pytest.skip("this host does not allow mounting a tmpfs")
    try:
        with open(mnt / "filler", "wb") as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        r = run("cluster", "up", "--run-dir", str(mnt / "run"))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "No space left on device" in r.stderr and "is full" in r.stderr
        assert pids_referencing(mnt / "run") == []
    finally:
        subprocess.run(["umount", str(mnt)])


def test_relative_run_dir_in_a_config_file_is_relative_to_the_file(tmp_path, monkeypatch):
    confdir = tmp_path / "conf"
    confdir.mkdir()
    p = confdir / "c.toml"
    p.write_text('run_dir = "run"\nshm_dir = "shm"\n[paths]\nqemu = "bin/qemu"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    c = load_config(p)
    assert c.run_dir == confdir / "run"
    assert c.shm_dir == confdir / "shm"
    assert c.qemu == confdir / "bin" / "qemu"
    # on the command line a path is relative to the current directory, as usual
    assert load_config(p, {"run_dir": "r2"}).run_dir == elsewhere / "r2"


def test_exec_on_a_stopped_qemu_says_so_at_once(fake_build, fake_agent, run_dir, capsys):
    with cluster_up(cfg(run_dir)) as c:
        os.kill(c.node(1).pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 5
            while rc.proc_state(c.node(1).pid) != "T" and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.monotonic()
            with pytest.raises(ClusterError, match=r"node 1's QEMU \(pid \d+\) is stopped "
                                                   r"\(SIGSTOP\)(.|\n)*kill -CONT"):
                c.node(1).exec("true")
            rc_ = cli.main(["exec", "1", "--run-dir", str(run_dir), "--", "true"])
            err = capsys.readouterr().err
            assert rc_ == 1 and "is stopped (SIGSTOP)" in err and "rackemu node restart 1" in err
            assert time.monotonic() - t0 < 3
            st = Cluster.attach(run_dir).status_dict()
            assert st["nodes"][1]["agent"] == "QEMU stopped (SIGSTOP)" and st["status"] == "degraded"
        finally:
            os.kill(c.node(1).pid, signal.SIGCONT)


def test_exec_when_the_agent_does_not_answer_is_a_message(fake_build, fake_agent, run_dir,
                                                          capsys, monkeypatch):
    from rackemu.agent import AgentClient
    with cluster_up(cfg(run_dir)) as c:
        # the real client against the fake QEMU's socket: it connects, nobody answers (a guest
        # whose agent died or hangs)
        monkeypatch.setattr("rackemu.node._agent_client_class", lambda: AgentClient)
        monkeypatch.setattr("rackemu.node.AGENT_CHECK_TIMEOUT", 1.0)
        t0 = time.monotonic()
        rc_ = cli.main(["exec", "0", "--run-dir", str(run_dir), "--timeout", "1", "--", "true"])
        err = capsys.readouterr().err
        assert rc_ == 1, err
        assert "node 0: no answer to a ping within 1 s" in err
        assert "the guest agent does not answer" in err and "rackemu node restart 0" in err
        assert time.monotonic() - t0 < 10
        # the Python API turns the agent's own error into a ClusterError with the same advice
        with pytest.raises(ClusterError, match=r"node 0: exec: no answer from the agent(.|\n)*"
                                               r"node restart 0"):
            c.node(0).exec("true", timeout=0.1)
        AgentClient.shared(str(c.node(0).agent_path)).close()


def test_exec_all_reports_nodes_that_are_not_running(fake_build, fake_agent, run_dir, capsys):
    with cluster_up(cfg(run_dir, nodes=3)) as c:
        c.kill_node(1)
        rc_ = cli.main(["exec", "all", "--run-dir", str(run_dir), "--", "echo hi"])
        out = capsys.readouterr()
        assert rc_ == 1, out
        assert "[node0] ran echo hi" in out.out and "[node2] ran echo hi" in out.out
        assert "node 1 is not running (state: killed)" in out.err


def test_status_reports_a_dead_bridge_and_exits_nonzero(fake_build, fake_agent, run_dir, capsys):
    with cluster_up(cfg(run_dir)) as c:
        os.killpg(c.bridge.pid, signal.SIGKILL)
        c.bridge.wait_gone(5)
        st = Cluster.attach(run_dir).status_dict()
        assert st["status"] == "degraded"
        assert st["bridge"]["state"] == "dead"
        assert any("fabric bridge is dead" in p and "rackemu bridge restart" in p
                   for p in st["problems"])
        rc_ = cli.main(["cluster", "status", "--run-dir", str(run_dir)])
        out = capsys.readouterr().out
        assert rc_ == 3
        assert "degraded" in out and "bridge:  dead" in out
        assert "problem: the fabric bridge is dead" in out


def test_bridge_restart_brings_the_bridge_back_and_keeps_the_nodes(
        fake_build, fake_agent, run_dir, capsys):
    with cluster_up(cfg(run_dir)) as c:
        node_pids = [n.pid for n in c.nodes]
        old = c.bridge.pid
        os.killpg(old, signal.SIGKILL)
        c.bridge.wait_gone(5)
        rc_ = cli.main(["bridge", "restart", "--run-dir", str(run_dir)])
        err = capsys.readouterr().err
        assert rc_ == 0, err
        assert "reconnected and keep their guest state" in err
        other = Cluster.attach(run_dir)
        assert other.bridge.alive() and other.bridge.pid != old
        assert [n.pid for n in other.nodes] == node_pids and all(n.alive() for n in c.nodes)
        assert other.status_dict()["status"] == "up"
        assert (run_dir / "bridge.log.1").exists(), "the dead bridge's log is kept"
        assert [p["node"] for p in other.bridge_stats()["ports"]] == [0, 1]
    assert pids_referencing(run_dir) == []


def test_node_restart_starts_a_killed_or_running_node_again(fake_build, fake_agent, run_dir, capsys):
    with cluster_up(cfg(run_dir, nodes=2)) as c:
        c.kill_node(1)
        rc_ = cli.main(["node", "restart", "1", "--run-dir", str(run_dir)])
        err = capsys.readouterr().err
        assert rc_ == 0, err
        assert "node 1 restarted" in err and "previous guest state is gone" in err
        other = Cluster.attach(run_dir)
        first = other.node(1).pid
        assert other.node(1).alive() and other.node(1).state == "running"
        assert other.status_dict()["status"] == "up"
        assert owner_pid(other.ram_path(1)) == first, "a fresh RAM file for the new QEMU"
        # a running node is stopped and started again
        other.restart_node(1)
        assert other.node(1).pid != first and other.node(1).alive()
        assert not rc.proc_alive(first, None)
        assert c.node(0).alive()


def test_node_restart_needs_the_bridge_and_a_running_cluster(fake_build, fake_agent, run_dir, capsys):
    with cluster_up(cfg(run_dir)) as c:
        c.kill_node(1)
        os.killpg(c.bridge.pid, signal.SIGKILL)
        c.bridge.wait_gone(5)
        rc_ = cli.main(["node", "restart", "1", "--run-dir", str(run_dir)])
        err = capsys.readouterr().err
        assert rc_ == 1 and "fabric bridge of cluster 't' is not running" in err
        assert "rackemu bridge restart" in err
    rc_ = cli.main(["node", "restart", "1", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert rc_ == 1 and "is not running (status: down)" in err and "cluster up" in err
    rc_ = cli.main(["bridge", "restart", "--run-dir", str(run_dir)])
    assert rc_ == 1 and "is not running (status: down)" in capsys.readouterr().err
    assert pids_referencing(run_dir) == []


def test_down_leaves_nothing_behind(fake_build, fake_agent, run_dir):
    """`cluster down` after restarts: no process, socket, pid file or guest-RAM file left."""
    c = Cluster(cfg(run_dir), detach=True)
    c.up()
    c.restart_node(0)
    c.restart_bridge()
    ram_dir = c.ram_dir
    r = run("cluster", "down", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    for p in c.all_procs():
        p.popen.wait(5)
    assert pids_referencing(run_dir) == []
    assert not ram_dir.exists()
    assert not [p for p in run_dir.iterdir()
                if stat.S_ISSOCK(p.lstat().st_mode) or p.suffix == ".pid"]


def test_state_in_a_run_dir_others_can_write_is_not_believed(fake_build, fake_agent, tmp_path):
    """`down` signals the processes state.json names and deletes the RAM dir it names: never on
    the word of a directory another user could have written."""
    d = tmp_path / "planted"
    d.mkdir()
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        state = {"version": rc.STATE_VERSION, "status": "up", "config": cfg(d).to_dict(),
                 "bridge": {"pid": victim.pid, "starttime": rc.proc_starttime(victim.pid),
                            "argv": ["x"], "log": ""}, "nodes": []}
        (d / "state.json").write_text(json.dumps(state))
        os.chmod(d, 0o777)
        with pytest.raises(ClusterError, match=r"run dir .* has mode 0777"):
            Cluster.attach(d)
        r = run("cluster", "down", "--run-dir", str(d))
        assert r.returncode == 1 and "has mode 0777" in r.stderr, r.stderr
        assert victim.poll() is None, "the process named by the planted state must live"
    finally:
        victim.kill()
        victim.wait()
