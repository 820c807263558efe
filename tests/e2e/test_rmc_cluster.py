"""Scenario: the soNUMA RMC with LightSABRes on booted nodes (docs/sonuma.md, docs/rmc-driver.md).

Every node loads sonuma_rmc.ko at boot (/dev/rmc). The `rmc` tool, `rmc-kv` (the FaRM-style
store) and `rmc-bench` are built against librmc. Contexts are held by detached `rmc ctx-hold`
processes; every test stops the processes it started, so the shared cluster stays clean.
"""
import re
import time

import pytest

from guest_tools import kv, rmc_hold, run_kv, stop_procs

PAT_SEED = 11
# The access key every node of a test's contexts registers with: a destination serves only
# requests that carry its context's key (docs/rmc-driver.md, "Who may use a context").
KEY = "0x5eedc0ffee0fab1e"


def hold(node, ctx, size, tag, *opts):
    """Register context `ctx` with KEY (guest_tools.rmc_hold)."""
    return rmc_hold(node, ctx, size, "" + tag, KEY, *opts)


def rmc(node, cmd, timeout=120):
    return run_kv(node, f"rmc {cmd}", timeout)


def stop_all(node):
    """Stop this test's RMC processes and wait until they are gone (their contexts with them)."""
    stop_procs(node, "rmc", "rmc-kv", "rmc-bench")


@pytest.fixture(autouse=True)
def no_holders_left(cluster2):
    yield
    for n in (cluster2.node(0), cluster2.node(1)):
        stop_all(n)


def test_driver_binds_on_every_node_and_the_check_suite_passes(cluster2):
    for i in (0, 1):
        n = cluster2.node(i)
        r, d = rmc(n, "info")
        assert r.rc == 0, r.stdout + r.stderr
        assert d[0]["node"] == str(i) and d[0]["nodes"] == "2" and d[0]["qps"] == "64"
        assert d[0]["segment_bytes"] == str(32 << 20) and d[0]["speculation"] == "1" and d[0]["fabric_up"] == "1"
        assert d[1]["hop_ns"] == "35" and d[1]["mem_ns"] == "90"
        r, d = rmc(n, "check")
        failed = [x for x in d if x.get("ok") == "0"]
        assert r.rc == 0 and not failed, r.stdout.decode()
        assert d[-1]["checks"] == "44" and d[-1]["failed"] == "0"


@pytest.mark.parametrize("cmd,rc,says", [
    ("rmc read --help", 0, "usage: rmc COMMAND"),
    ("rmc-bench run --help", 0, "usage: rmc-bench serve"),
    ("rmc-kv serve --help", 0, "usage: rmc-kv serve"),
    ("rmc info --id 1", 2, "rmc: --id does not apply to `rmc info`"),
    ("rmc read --id 1 --node 0 --len 8 --count 3", 2, "rmc: --count does not apply to `rmc read`"),
    ("rmc read --id 1 --node 0 --len", 2, "rmc: --len needs a value"),
    ("rmc read --id 1 --node 0 --len 8 --bogus", 2, "rmc: unknown or ambiguous option '--bogus'"),
    ("rmc read --id 1 --node 0 --len 8 --sabre=1", 2, "rmc: --sabre=1 takes no value"),
    ("rmc read --id 1 --node 0 --len 8 extra", 2, "rmc: unexpected argument 'extra'"),
    ("rmc read --id 99 --node 0 --len 8", 2, "rmc: --id '99': expected a number up to 15"),
    ("rmc frobnicate", 2, "rmc: unknown command 'frobnicate'"),
    ("rmc-bench serve --ctx 9 --node 0", 2, "rmc-bench: --node does not apply to `rmc-bench serve`"),
    ("rmc-bench --node 0 --ctx 9 --seconds 3", 2, "rmc-bench: --seconds does not apply to `rmc-bench run`"),
    ("rmc-bench run --node 0 --ctx 9 --mode fast", 2, "rmc-bench: --mode lat|tput|both"),
    ("rmc-kv serve --ctx 8 --layout sabre --size 1024 --threads 3", 2,
     "rmc-kv: --threads does not apply to `rmc-kv serve`"),
    ("rmc-kv read --node 0 --ctx 8 --layout sabre --size 1024 --unsafe --nospec", 2,
     "rmc-kv: --unsafe is a reader option, without --nospec"),
])
def test_rmc_tools_refuse_bad_arguments_with_a_usage_error(cluster2, cmd, rc, says):
    """Every option of the RMC tools is parsed by getopt_long: --help after any command, exit 2
    with the reason for an option the command does not take, a missing value, an unknown
    option or a stray argument."""
    n = cluster2.node(0)
    r = n.exec(cmd, timeout=30)
    out = (r.stdout if rc == 0 else r.stderr).decode()
    assert r.rc == rc and says in out, f"{cmd}: rc {r.rc}: {r.stdout!r} {r.stderr!r}"


@pytest.mark.parametrize("length", [1, 63, 64, 65, 4096, 8192, 1 << 20])
def test_remote_read_and_write_integrity(cluster2, length):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    size = 3 << 20
    hold(n0, 3, size, "own", f"--seed {PAT_SEED}")
    hold(n1, 3, size, "peer")
    # node 1 reads node 0's pattern at an unaligned offset and at the very end of the segment
    for roff in (7, size - length):
        r, d = rmc(n1, f"check-data --id 3 --node 0 --roff {roff} --len {length} --seed {PAT_SEED} --loff 5")
        assert r.rc == 0 and d[1]["bad"] == "0", r.stdout
        assert d[0]["status"] == "OK"
    # node 1 writes a pattern into node 0, node 0 reads it back locally (loopback)
    r, d = rmc(n1, f"write-pattern --id 3 --node 0 --roff 3 --len {length} --seed 99")
    assert r.rc == 0 and d[0]["status"] == "OK", r.stdout
    r, d = rmc(n0, f"check-data --id 3 --node 0 --roff 3 --len {length} --seed 99 --loff {2 << 20}")
    assert r.rc == 0 and d[1]["bad"] == "0", r.stdout


def test_out_of_bounds_permission_and_unknown_context(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    hold(n0, 4, 8192, "ro", "--perm r")
    hold(n1, 4, 8192, "ro1")
    r, d = rmc(n1, "read --id 4 --node 0 --roff 8191 --len 1")
    assert d[0]["status"] == "OK", r.stdout
    r, d = rmc(n1, "read --id 4 --node 0 --roff 8191 --len 2")
    assert r.rc == 1 and d[0]["status"] == "REMOTE_ACCESS(BOUNDS)", r.stdout
    r, d = rmc(n1, "write-pattern --id 4 --node 0 --roff 0 --len 8 --seed 1")
    assert d[0]["status"] == "REMOTE_ACCESS(PERM)", r.stdout
    r, d = rmc(n1, "atomic --id 4 --node 0 --off 0 --op faa --count 1")
    assert r.rc == 1 and "REMOTE_ACCESS(PERM)" in d[0]["status"], r.stdout
    r, d = rmc(n1, "read --id 4 --node 0 --roff 0 --len 64 --sabre")
    assert d[0]["status"] == "REMOTE_ACCESS(PERM)", r.stdout
    # context 6 exists only on node 1
    hold(n1, 6, 8192, "only1")
    r, d = rmc(n1, "read --id 6 --node 0 --roff 0 --len 8")
    assert d[0]["status"] == "REMOTE_ACCESS(NO_CTX)", r.stdout
    # node 0 exposes context 7 to itself only
    hold(n0, 7, 8192, "mask", "--nodemask 0x1")
    hold(n1, 7, 8192, "mask1")
    r, d = rmc(n1, "read --id 7 --node 0 --roff 0 --len 8")
    assert d[0]["status"] == "REMOTE_ACCESS(DENIED)", r.stdout
    r, d = rmc(n0, "read --id 7 --node 0 --roff 0 --len 8")
    assert d[0]["status"] == "OK", r.stdout
    # the refusals are counted on the destination
    r, d = rmc(n0, "counters")
    c = {k: int(v) for x in d for k, v in x.items()}
    assert c["srv_refused"] >= 5 and c["st_ok"] >= 1


def counters(node):
    r, d = rmc(node, "counters")
    assert r.rc == 0, r.stdout
    return {k: int(v) for x in d for k, v in x.items()}


def test_reads_take_the_direct_path_and_everything_else_the_fabric(cluster2):
    """docs/sonuma.md "Direct path": the launcher's nodes share their RAM files (ram-dir), so a
    READ of up to one wire frame is copied from the owner's RAM on the doorbell store; longer
    READs, writes, atomics and SABRes are frames; a refusal is the owner's (over the fabric)."""
    n0, n1 = cluster2.node(0), cluster2.node(1)
    hold(n0, 5, 65536, "d0", f"--seed {PAT_SEED}")
    hold(n1, 5, 65536, "d1")
    c0, c1 = counters(n0), counters(n1)
    for length in (64, 8192):
        r, d = rmc(n1, f"check-data --id 5 --node 0 --roff 3 --len {length} --seed {PAT_SEED}")
        assert r.rc == 0 and d[0]["status"] == "OK" and d[1]["bad"] == "0", r.stdout
    a1 = counters(n1)
    assert a1["direct_reqs"] - c1["direct_reqs"] == 2, (c1, a1)
    assert a1["fabric_reqs"] == c1["fabric_reqs"] and a1["req_frames"] == c1["req_frames"], (c1, a1)
    # the owner counts what was read from it directly as served
    assert counters(n0)["srv_rd_blocks"] - c0["srv_rd_blocks"] == 2 + 129, (c0, counters(n0))
    r, d = rmc(n1, f"check-data --id 5 --node 0 --roff 0 --len 8193 --seed {PAT_SEED}")
    assert r.rc == 0 and d[1]["bad"] == "0", r.stdout
    r, d = rmc(n1, "write-pattern --id 5 --node 0 --roff 16384 --len 64 --seed 5")
    assert r.rc == 0 and d[0]["status"] == "OK", r.stdout
    r, d = rmc(n1, "read --id 5 --node 0 --roff 65536 --len 64")  # beyond the segment
    assert d[0]["status"] == "REMOTE_ACCESS(BOUNDS)", r.stdout
    a2 = counters(n1)
    assert a2["direct_reqs"] == a1["direct_reqs"], (a1, a2)
    assert a2["fabric_reqs"] - a1["fabric_reqs"] == 3, (a1, a2)


def test_sabre_under_concurrent_writers_aborts_and_accepts_no_torn_object(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    for layout in ("sabre", "baseline"):
        n0.sh(f"rm -f /tmp/kv; setsid rmc-kv serve --ctx 8 --key {KEY} --layout {layout} --size 1024 --objects 100 "
              f"--writers 2 --seconds 30 </dev/null >/tmp/kv 2>&1 &")
        for _ in range(100):
            if b"serving" in n0.exec("cat /tmp/kv").stdout:
                break
            time.sleep(0.1)
        r = n1.exec(f"rmc-kv read --node 0 --ctx 8 --key {KEY} --layout {layout} --size 1024 --objects 100 "
                    "--seconds 4",
                    timeout=60)
        stop_all(n0)
        d = kv(r.stdout)[-1]
        assert r.rc == 0, r.stdout + r.stderr
        assert d["torn"] == "0" and d["errors"] == "0", r.stdout
        assert int(d["reads"]) > 100, r.stdout
        if layout == "sabre":
            assert int(d["aborts"]) > 0, f"writers never made a SABRe abort: {r.stdout}"
        else:
            assert int(d["retries"]) > 0, f"the baseline never saw an inconsistent object: {r.stdout}"
    r, d = rmc(n0, "counters")
    c = {k: int(v) for x in d for k, v in x.items()}
    assert c["sabre_reg"] > 0 and c["abort_locked"] + c["abort_window"] + c["abort_validate"] > 0


def test_microbenchmark_reproduces_the_speculation_shape(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    n0.sh(f"setsid rmc-bench serve --ctx 9 --key {KEY} --seconds 120 </dev/null >/tmp/bench-serve 2>&1 &")
    n1.exec("rm -f /tmp/bench.csv")
    time.sleep(0.5)
    r = n1.exec(f"rmc-bench run --node 0 --ctx 9 --key {KEY} --iters 20 --mode lat --sizes 64,128,2048,8192 "
                "--csv /tmp/bench.csv", timeout=120)
    assert r.rc == 0, r.stdout + r.stderr
    rows = {}
    for line in r.stdout.decode().splitlines():
        m = re.match(r"(read|sabre|sabre-nospec)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(\d+)\s+0$", line)
        if m:
            rows[(m.group(1), int(m.group(2)))] = int(m.group(3))
    assert len(rows) == 12, r.stdout
    assert rows[("sabre", 64)] == rows[("sabre-nospec", 64)]
    for size in (64, 128, 2048):
        # registration + validation (3 ns), and a SABRe's blocks on one R2P2 at 3.2 ns against a
        # read's over four at 1 ns: 2.2 ns per block after the first (docs/sonuma.md)
        gap = 3 + 2.2 * (size // 64 - 1)
        assert abs(rows[("sabre", size)] - rows[("read", size)] - gap) <= 2, rows
    for size in (128, 2048, 8192):
        assert rows[("sabre-nospec", size)] - rows[("sabre", size)] >= 0.3 * 90, rows
    assert rows[("sabre-nospec", 128)] - rows[("sabre", 128)] >= 0.9 * 90, rows
    assert n1.exec("wc -l < /tmp/bench.csv").stdout.strip() == b"13"


def test_atomics_from_three_nodes_and_a_killed_node(fresh_cluster, in_background):
    c = fresh_cluster(nodes=3)
    nodes = [c.node(i) for i in range(3)]
    for i, n in enumerate(nodes):
        hold(n, 1, 1 << 20, f"a{i}")
    k = 150
    # FAA and CAS-lock increments from every node (node 0 on itself) on node 0's words
    jobs = [(n, f"rmc atomic --id 1 --node 0 --off 64 --op faa --count {k}") for n in nodes]
    jobs += [(n, f"rmc atomic --id 1 --node 0 --off 128 --op cas --count {k}") for n in nodes]
    bg = [in_background(n, cmd, timeout=300) for n, cmd in jobs]
    res = [b.result(320) for b in bg]
    for r in res:
        assert r.rc == 0, r.stdout + r.stderr
    r, d = rmc(nodes[1], "atomic --id 1 --node 0 --off 64 --op faa --count 1")
    assert int(d[0]["first_old"]) == 3 * k, r.stdout
    r, d = rmc(nodes[2], "atomic --id 1 --node 0 --off 128 --op faa --count 1")
    assert int(d[0]["first_old"]) == 3 * k, r.stdout
    # node 1 keeps reads to node 2 in flight; node 2 dies: every request completes, unreachable.
    # Direct-path READs take about a microsecond: 100,000 finished before the kill, so 2,000,000.
    total = 2000000
    job = in_background(nodes[1], f"rmc async-read --id 1 --node 2 --len 8192 --count {total} --window 32 "
                                  "--timeout-ms 100000 --keep-going", timeout=150)
    time.sleep(1.0)
    c.kill_node(2)
    t = time.monotonic()
    r = job.result(150)
    d = kv(r.stdout)[-1]
    assert r.rc == 0 and d["completed"] == d["posted"] == str(total), r.stdout
    assert int(d["unreachable"]) > 0 and int(d["ok"]) > 0, r.stdout
    assert int(d["ok"]) + int(d["unreachable"]) == total, r.stdout
    assert time.monotonic() - t < 120
    r, d = rmc(nodes[1], "read --id 1 --node 2 --roff 0 --len 64")
    assert r.rc == 1 and d[0]["status"].startswith("UNREACHABLE"), r.stdout
    r, d = rmc(nodes[1], "read --id 1 --node 0 --roff 0 --len 64")
    assert d[0]["status"] == "OK", r.stdout
