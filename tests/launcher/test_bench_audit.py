"""The benchmarks measure every figure they promise, or fail (no cluster is booted here).

A benchmark that prints a table and exits 0 while it silently skipped a section its docstring
promises (bench/foundation.py's stray `return gsas`, 5cdc7b3) is a defect nobody sees. These
tests pin, for every bench/*.py: no statement after an unconditional return/raise/continue/break,
no exception swallowed with a bare `pass`; for bench/foundation.py: its guest parsing, fed the
guest tools' own output lines (canned from a real run), yields every figure `promised` lists for
the options, and a failed guest command leaves a figure missing, which fails the run; and the
option checks of the benches that used to measure something else than asked."""
import ast
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(BENCH))

import boot  # noqa: E402
import foundation  # noqa: E402
import snapshot_boot  # noqa: E402
import unimem  # noqa: E402

BENCHES = sorted(BENCH.glob("*.py"))
EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def stmt_lists(tree):
    """Every list of statements in the module (bodies, else and finally branches, handlers)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def test_the_benches_are_all_checked():
    names = {p.stem for p in BENCHES}
    assert {"foundation", "unimem", "sonuma", "sonuma_cost", "boot", "snapshot_boot", "net", "rnic", "shmem",
            "atomic_unit", "amu_cluster", "amu_cf_parallel", "mailbox_trace", "benchlib"} <= names


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.name)
def test_no_code_after_an_unconditional_exit(path):
    """Code after a return/raise/continue/break in the same block never runs (5cdc7b3)."""
    tree = ast.parse(path.read_text(), str(path))
    dead = [f"{path.name}:{block[i + 1].lineno} (after the {type(s).__name__.lower()} at line {s.lineno})"
            for block in stmt_lists(tree) for i, s in enumerate(block[:-1]) if isinstance(s, EXITS)]
    assert not dead, "unreachable code: " + ", ".join(dead)


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.name)
def test_no_exception_swallowed(path):
    """An `except ...: pass` hides a failed measurement; a handler must log, retry or fail."""
    tree = ast.parse(path.read_text(), str(path))
    bad = [f"{path.name}:{h.lineno}" for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler)
           and all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                   for s in h.body) and not _is_retry_loop(tree, h)]
    assert not bad, "exception swallowed at " + ", ".join(bad)


def _is_retry_loop(tree, handler):
    """sonuma_cost.read_counts: `except (OSError, ...): pass` inside a polling loop with a deadline
    that fails the run, which is a wait, not a swallowed failure."""
    for node in ast.walk(tree):
        if isinstance(node, ast.While) and any(handler is h for t in ast.walk(node) if isinstance(t, ast.Try)
                                               for h in t.handlers):
            return any(isinstance(s, ast.Raise) for s in ast.walk(node))
    return False


# ---- bench/foundation.py's guest figures, on the guest tools' own output ----

# Lines as the guest tools print them (gas.c, gsas.c, rmc_bench.c, unimem.c), captured from a
# 2-node cluster of this tree
GAS_EXPORT = "gaddr=0x0444032000 local=0x44032000 size=4096\n"
GAS_BENCH = ("op=load count=50 min_us=0.26 median_us=0.27 p99_us=220.56 max_us=220.56\n"
             "op=store count=50 min_us=0.26 median_us=0.27 p99_us=38.42 max_us=38.42\n")
GSAS_BENCH = ("op=read64 board=1 threads=1 ops=50 latency_median_us=6.2 latency_p99_us=1530.8 ops_per_s=5605 "
              "failed=0 sleeps_per_op=0.000 naps_per_op=0.000 spun_per_op=1.000 busy=0 acks_seen=49 ack_mean_us=2.4\n")
SERVING = ("serving ctx=9 size=1048576 version_off=0 objects=every_64B_block key=0x5eedbe4c40fab1e5\n")
RMC_CSV = ("mode,op,size,iters,window,errors,wall_med_us,wall_p99_us,model_med_ns,ops_per_s,wall_mb_per_s,"
           "model_gb_per_s,model_mb_per_s,model_p99_ns,wall_mean_us,wall_min_us,dev_wall_med_us,bad_bytes,src_node,"
           "dst_node,spin\n"
           "lat,read,64,50,1,0,1.07,502.19,184,,,,,184,11.48,1.04,0.18,0,1,0,1\n")
PINGPONG = ("slowest=9:2057.2,0:1564.6,1:219.4,2:75.0,7:68.5,10:45.1,5:31.0,3:27.9\n"
            "count=50 rtt_min_us=7.17 rtt_median_us=8.02 rtt_p99_us=2057.15 rtt_max_us=2057.15\n")


class Res:
    def __init__(self, out="", rc=0):
        self.rc, self.stdout, self.stderr = rc, out.encode(), b""


class FakeNode:
    """A node whose guest answers each command with canned output (the first pattern it matches)."""

    def __init__(self, i, answers):
        self.id, self.answers, self.calls = i, answers, []

    def exec(self, cmd, timeout=None):
        self.calls.append(cmd)
        for pat, out in self.answers:
            if re.search(pat, cmd):
                return out(cmd) if callable(out) else out if isinstance(out, Res) else Res(out)
        return Res()

    def sh(self, cmd, timeout=None):
        return self.exec(cmd).stdout.decode()


class FakeCluster:
    """Two nodes and a bridge whose counters grow by one round's worth on every look."""

    def __init__(self, answers0, answers1):
        self.nodes = [FakeNode(0, answers0), FakeNode(1, answers1)]
        self.looks = 0

    def node(self, i):
        return self.nodes[i]

    def bridge_stats(self):
        self.looks += 1
        k = self.looks * 1000
        port = {"pair_frames_out": k, "pair_wakes_skipped": k, "pair_follow_up_wakes": k, "pair_backstop_wakes": k}
        return {"router_sleeps": k, "router_wakeups": k, "wakes_skipped": k, "lease_wakes": k,
                "ports": [dict(port, node=0), dict(port, node=1)]}


def gsas_stats():
    n = {"v": 0}

    def answer(cmd):
        n["v"] += 300
        v = n["v"]
        return Res(f"service=running pid=106 requests={v} served={v} malformed=0 replies_dropped=0 pages_in_use=0 "
                   f"pages_limit=8192 allocations=0 spawned=0 sleeps={v // 10} exit_notices=0 reclaimed_pages=0 "
                   f"reply_retries=0 replies_unsettled={v // 50} unsettled_at_sleep={v // 100} serve_ns={v * 900}\n"
                   "refused_badop=0 refused_badaddr=0 refused_perm=0 refused_nomem=0 refused_inval=0 "
                   "refused_spawn=0 refused_sender=0\n")
    return answer


def fake_cluster(gas_rc=0):
    node0 = [(r"^cat /tmp/bench-export", GAS_EXPORT), (r"^gas bench", Res(GAS_BENCH, gas_rc) if gas_rc else GAS_BENCH),
             (r"^gsas bench", GSAS_BENCH), (r"^cat /tmp/bench-serve", SERVING),
             (r"unimem pingpong", PINGPONG)]
    node1 = [(r"^cat /tmp/bench-export", GAS_EXPORT), (r"^gsas stats", gsas_stats()),
             (r"rmc-bench run", RMC_CSV), (r"unimem pingpong", PINGPONG)]
    return FakeCluster(node0, node1)


def counters(keys):
    """Per-node QMP counters that grow by one round's worth each look."""
    n = {"v": 0}

    def look(c):
        n["v"] += 300
        return {i: {k: n["v"] for k in keys} for i in range(2)}
    return look


@pytest.fixture
def guest(monkeypatch):
    """foundation's view of QEMU (QMP counters) and of a background guest command, faked."""
    monkeypatch.setattr(foundation, "irq_paths", counters(foundation.IRQ_PATHS))
    acks = counters(foundation.ACK_PATHS)
    monkeypatch.setattr(foundation, "set_ack_order", lambda c, first: acks(c))
    monkeypatch.setattr(foundation, "run_background",
                        lambda node, cmd, **kw: SimpleNamespace(result=lambda t: node.exec(cmd)))
    monkeypatch.setattr(foundation.time, "sleep", lambda s: None)


def args(**kw):
    a = dict(pingpong=300, pp_runs=2, pp_args="", ack_order="first", only_pingpong=False, only_gsas=False,
             cold_build=False)
    a.update(kw)
    return SimpleNamespace(**a)


def guest_part(want):
    return [w for w in want if w[0] in ("guest", "host") and "_per_raw_pingpong" not in w[1]
            and "_per_pktz_spin" not in w[1]]


@pytest.mark.parametrize("order", ["first", "after", "ab"])
def test_foundation_guest_figures_all_measured(guest, order):
    a = args(ack_order=order)
    rows = []
    foundation.guest_latencies(a, fake_cluster(), rows)
    want = guest_part(foundation.promised(a, [2]))
    assert len(want) > 40
    assert foundation.unmeasured(rows, want) == []
    got = {m: v for _, m, v, _ in rows}
    if order != "after":
        assert got["gas_remote_load_median_us"] == pytest.approx(0.27)
        assert got["rmc_read64_spin_median_us"] == pytest.approx(1.07)
        assert got["gsas_remote_read64_median_us"] == pytest.approx(6.2)
        assert got["gsas_remote_read64_service_wakeups_per_op"] == pytest.approx(0.1)
        assert got["pktz_spin_server_rtt_p99_us"] == pytest.approx(2057.15)
        assert got["pktz_irq_server_router_wakeups_per_rt"] == pytest.approx(1000 / 300)


def test_foundation_a_failed_guest_command_fails_the_run(guest, tmp_path, capsys):
    a = args(csv=str(tmp_path / "f.csv"))
    rows = []
    foundation.guest_latencies(a, fake_cluster(gas_rc=1), rows)
    want = guest_part(foundation.promised(a, [2]))
    assert foundation.unmeasured(rows, want) == ["guest gas_remote_load_median_us", "guest gas_remote_load_p99_us"]
    with pytest.raises(SystemExit) as e:
        foundation.finish(rows, a, want)
    assert "gas_remote_load_median_us" in str(e.value) and "NOT measured" in str(e.value)
    assert "pktz_irq_server_rtt_median_us" in (tmp_path / "f.csv").read_text()  # the rest is still written


def test_foundation_promises_what_its_options_ask_for():
    full = foundation.promised(args(), [2, 4])
    assert ("boot", "4_nodes_to_agents_median") in full and ("fabric_no_pairs", "raw_pingpong_median_us") in full
    assert ("guest", "gsas_remote_read64_per_raw_pingpong") in full
    assert not [w for w in foundation.promised(args(pingpong=0), [4]) if w[0] == "guest"]
    pp = foundation.promised(args(only_pingpong=True), [2])
    assert pp and all(w[0] in ("guest", "host") and "gsas" not in w[1] and "gas_" not in w[1] for w in pp)
    assert ("guest", "gsas_ackafter_remote_read64_median_us") in foundation.promised(
        args(only_gsas=True, ack_order="ab"), [2])


def run_main(monkeypatch, mod, argv):
    monkeypatch.setattr(sys, "argv", [mod.__name__ + ".py", *argv])
    with pytest.raises(SystemExit) as e:
        mod.main()
    return e.value.code


def test_foundation_refuses_guest_figures_without_a_2_node_cluster(monkeypatch, capsys):
    assert run_main(monkeypatch, foundation, ["--nodes", "4,8"]) == 2
    assert "add 2 to --nodes" in capsys.readouterr().err


def test_unimem_refuses_a_dma_size_it_cannot_copy(monkeypatch, capsys):
    """4M used to be copied as 2M and reported under the 2M name, the 4M figure silently absent."""
    assert run_main(monkeypatch, unimem, ["--dma-sizes", "64K,4M"]) == 2
    assert "--dma-sizes" in capsys.readouterr().err


def test_snapshot_boot_refuses_zero_runs(monkeypatch):
    assert run_main(monkeypatch, snapshot_boot, ["--runs", "0"]) == 2


def test_boot_workload_that_fails_is_no_figure():
    """The workload's own exit status counts, not the echo's that prints its time."""
    node = FakeNode(0, [(r".", "250 0\n")])
    assert boot.guest_seconds(node, "sleep 2") == pytest.approx(2.5)
    assert "rc=$?" in node.calls[0]
    with pytest.raises(SystemExit, match="failed"):
        boot.guest_seconds(FakeNode(0, [(r".", "3 127\n")]), "no-such-tool")
