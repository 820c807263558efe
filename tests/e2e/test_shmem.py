"""Scenario: the OpenSHMEM subset (docs/shmem.md) on a 4-node cluster with the RNIC, driven by
`rackemu shmemrun` as a person runs it.

shmem-check is written against the standard API only and built by the image build against
build/guest/lib/libshmem.a; shmem-gups (HPCC RandomAccess) and shmem-hotspot (the NIC-atomics paper sec. IV)
likewise. Every assertion is on data: exact values, check counts, verification error counts.
"""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import _clusters, _config, _start
from rackemu.config import build_dir
from guest_tools import kv

ROOT = Path(__file__).resolve().parents[2]
RACKEMU = str(ROOT / "rackemu")
RNIC_ARGS = ["-device", "rackemu-rnic"]
INTRUDER = Path(__file__).resolve().parent / "shmem_intruder.c"
SECRET = "5ec2e7" * 10 + "abcd"     # a job's secret for PEs started by hand (64 hex digits)


@pytest.fixture(scope="module")
def scluster():
    c = _start(_config(f"e2e-shmem-{int(time.time())}", nodes=4, qemu_args=RNIC_ARGS))
    yield c
    c.down()
    _clusters.remove(c)


def shmemrun(c, *args, timeout=900):
    # QEMU serves one agent client at a time: this process lets go of every node's for the CLI
    for n in c.nodes:
        n.agent().close()
    env = dict(os.environ, RACKEMU_SKIP_SETUP="1")
    return subprocess.run([RACKEMU, "shmemrun", "--run-dir", str(c.run_dir), *args], capture_output=True,
                          env=env, timeout=timeout)


def pe_lines(r, pe):
    """The key=value lines PE `pe` printed (shmemrun prefixes them with [pe I])."""
    pre = f"[pe {pe}] ".encode()
    return kv(b"\n".join(line[len(pre):] for line in r.stdout.splitlines() if line.startswith(pre)))


def test_standard_api_program_runs_exactly_on_4_pes(scluster):
    r = shmemrun(scluster, "-n", "4", "shmem-check", "--iters", "20")
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    names = set()
    for pe in range(4):
        d = pe_lines(r, pe)
        bad = [x for x in d if x.get("ok") == "0"]
        assert not bad, bad
        names |= {x["check"] for x in d if "check" in x}
        assert d[-1]["pe"] == str(pe) and d[-1]["failed"] == "0" and int(d[-1]["checks"]) >= 15
    for must in ("put_heap", "put_static", "get_static", "get_heap", "g", "fetch_inc_nonneg",
                 "inc_add_fetch_add", "xor", "or", "and", "compare_swap_one_winner", "swap_chain",
                 "longlong_add", "int64_fetch_add", "uint64_add", "fetch", "fetch_before_set", "fetch_xor",
                 "fetch_and", "fetch_or", "compare_swap_miss", "lock_count", "test_lock_busy",
                 "test_lock_free", "fence"):
        assert must in names, must


def test_a_host_built_program_is_copied_and_runs(scluster):
    prog = build_dir() / "guest" / "bin" / "shmem-check"
    assert prog.is_file(), prog
    r = shmemrun(scluster, "-n", "2", str(prog), "--iters", "5")
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    assert pe_lines(r, 1)[-1]["failed"] == "0"


@pytest.mark.parametrize("impl", ["atomic", "message"])
def test_gups_verification_passes_with_no_error(scluster, impl):
    r = shmemrun(scluster, "-n", "4", "shmem-gups", "--impl", impl, "--log2-table", "12")
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    d = pe_lines(r, 0)[-1]
    assert d["impl"] == impl and d["pes"] == "4" and d["updates"] == str(4 * 4096)
    assert d["errors"] == "0" and d["verify"] == "pass"
    assert float(d["gups"]) > 0
    if impl == "atomic":
        # every update executed by a target's atomic unit counted, none missed or added (the
        # counters' baseline is read before the barrier that starts the phase)
        assert d["unit_ops"] == str(4 * 4096), d
        assert int(d["unit_active_ns"]) > 0 and float(d["modeled_gups"]) > 0, d
    else:
        assert d["unit_ops"] == "0" and d["modeled_gups"] == "na", d


@pytest.mark.parametrize("pattern", ["single", "unique16"])
def test_hotspot_totals_are_exact(scluster, pattern):
    r = shmemrun(scluster, "-n", "4", "shmem-hotspot", "--pattern", pattern, "--ops", "300")
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    d = pe_lines(r, 0)
    assert d[0]["errors"] == "0" and d[0]["total_ops"] == "900"
    counters = {k: int(v) for x in d[1:] for k, v in x.items()}
    assert counters.get("target_rx_frames", 0) >= 900, counters
    assert d[0]["unit_ops"] == "900" and counters["target_amu_ops"] == 900, (d[0], counters)
    assert counters["target_amu_active_ns"] > 0 and float(d[0]["modeled_mbytes_s"]) > 0, (d[0], counters)


def test_more_pes_than_nodes_is_refused(scluster):
    r = shmemrun(scluster, "-n", "5", "shmem-check")
    assert r.returncode == 1 and b"-n 5 asks for 5 PEs" in r.stderr


def test_missing_program_is_refused(scluster):
    r = shmemrun(scluster, "-n", "2", "no-such-shmem-prog")
    assert r.returncode == 1 and b"program no-such-shmem-prog not found on node 0" in r.stderr


def test_a_dying_pe_stops_the_others(scluster):
    # PE 1 fails at once; PEs 0 and 2 would wait 600 s: they are stopped, the status is PE 1's
    script = 'if [ "$RACKEMU_SHMEM_PE" = 1 ]; then echo dying >&2; exit 7; fi; sleep 600'
    r = shmemrun(scluster, "-n", "3", "sh", "-c", script, timeout=300)
    assert r.returncode == 7, (r.stdout + r.stderr).decode()
    err = r.stderr.decode()
    assert "[pe 1] dying" in err and "[pe 1] shmemrun: exited with status 7" in err
    for pe in (0, 2):
        assert f"[pe {pe}] shmemrun: stopped after another PE failed" in err
    for i in range(3):
        assert scluster.node(i).exec("pgrep -f 'sleep 600' || true").stdout.strip() == b""


def test_a_pe_dying_inside_libshmem_fails_the_run(scluster):
    # PE 2 is killed while the others sit in shmem_barrier_all (shmem-check waits in its first
    # barrier for PE 2, which never starts shmem_init): they fail instead of hanging.
    script = ('if [ "$RACKEMU_SHMEM_PE" = 2 ]; then sleep 2; kill -KILL $$; fi; exec shmem-check --iters 2')
    r = shmemrun(scluster, "-n", "3", "--timeout", "240", "sh", "-c", script, timeout=300)
    assert r.returncode not in (0, 124), (r.stdout + r.stderr).decode()
    err = r.stderr.decode()
    assert "[pe 2] shmemrun: exited with status" in err
    for pe in (0, 1):
        assert f"[pe {pe}] shmemrun: stopped after another PE failed" in err


def test_a_pe_killed_mid_run_fails_the_others_without_the_launcher(scluster):
    # the library alone (no shmemrun to stop anyone): PE 1 is killed while the PEs run atomics and
    # barriers; PEs 0 and 2 must exit with an error naming what failed, never hang
    from rackemu.cluster import Background
    port = 21000 + int(time.time()) % 5000
    env = f"RACKEMU_SHMEM_NPES=3 RACKEMU_SHMEM_ROOT=node0 RACKEMU_SHMEM_PORT={port} RACKEMU_SHMEM_SECRET={SECRET}"
    cmds = {pe: f"RACKEMU_SHMEM_PE={pe} {env} shmem-check --iters 100000" for pe in (0, 2)}
    cmds[1] = (f"RACKEMU_SHMEM_PE=1 {env} shmem-check --iters 100000 >/dev/null & "
               f"sleep 8; kill -KILL $!; wait $!; exit 0")
    jobs = {pe: Background(scluster.node(pe).exec, cmd, timeout=240) for pe, cmd in cmds.items()}
    res = {pe: j.result() for pe, j in jobs.items()}
    for pe in (0, 2):
        r = res[pe]
        assert not r.timed_out, f"PE {pe} hung after PE 1 died"
        assert r.rc == 1, (r.rc, r.stderr)
        assert re.search(rb"shmem: PE %d: .*(failed|left)" % pe, r.stderr), r.stderr


def test_an_intruder_without_the_secret_learns_nothing_and_takes_no_slot(scluster, tmp_path):
    """trust-model.md finding R10: any local user who connected to PE 0's start-up port got every PE's
    QPN, rkey and heap base, or took a PE's place. Three unprivileged users' processes on PE 0's
    node (u and v; tests/e2e/shmem_intruder.c) find the port in /proc/net/tcp and connect while PEs
    1-3 are held back: one stays silent, one sends a start record as PE 1 (the exchange before the
    fix), one a made-up proof as PE 1. Each gets PE 0's challenge (magic and a nonce, 40 bytes) and
    then the connection closed, nothing else; PE 0 refuses and counts all three; the job runs
    exactly on its 4 PEs."""
    cc = "aarch64-linux-gnu-gcc"
    if not shutil.which(cc):
        pytest.skip(f"{cc} not found (./rackemu setup installs it)")
    binary = tmp_path / "shmem-intruder"
    r = subprocess.run([cc, "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(binary), str(INTRUDER)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    n0 = scluster.node(0)
    tag = f"{os.getpid()}-{int(time.time())}"
    n0.put(binary, "/tmp/shmem-intruder", mode=0o755)
    modes = {"silent": "u", "record": "v", "proof": "u"}
    for mode, user in modes.items():
        r = n0.exec(f"su {user} -c 'setsid /tmp/shmem-intruder {mode} 4 </dev/null "
                    f">/tmp/intruder-{tag}-{mode} 2>&1 &'", timeout=30)
        assert r.rc == 0, r.stderr
    # PEs 1-3 start 20 s after PE 0, so the intruders meet PE 0 alone
    script = 'if [ "$RACKEMU_SHMEM_PE" != 0 ]; then sleep 20; fi; exec shmem-check --iters 5'
    r = shmemrun(scluster, "-n", "4", "--timeout", "400", "sh", "-c", script, timeout=500)
    text = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 0, text
    for pe in range(4):
        d = pe_lines(r, pe)
        assert not [x for x in d if x.get("ok") == "0"] and d[-1]["failed"] == "0", (pe, d[-1])
    assert "[pe 0] shmem: PE 0: refused 3 start-up connection(s) that did not prove the job's secret" in text, text
    assert len(re.findall(r"\[pe 0\] shmem: PE 0: refused a start-up connection from 127\.0\.0\.1:", text)) == 3
    seen = {}
    deadline = time.monotonic() + 120
    while len(seen) < len(modes) and time.monotonic() < deadline:
        for mode in modes:
            d = kv(n0.exec(f"cat /tmp/intruder-{tag}-{mode} 2>/dev/null; true").stdout)
            if d and "end" in d[-1]:
                seen[mode] = d[-1]
        time.sleep(1)
    n0.exec(f"rm -f /tmp/intruder-{tag}-*")
    assert set(seen) == set(modes), seen
    for mode, d in seen.items():
        assert d["received"] == "40" and d["magic"] == "43484d32", (mode, d)   # "CHM2" and a nonce
        assert d["end"] in ("eof", "reset"), (mode, d)
