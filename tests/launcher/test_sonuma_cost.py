"""bench/sonuma_cost.py's models on known inputs (no cluster): the core model charges what the
plugin measured (instructions at IPC x f, LLC lines at the latency over the memory-level
parallelism, never faster than the mesh link), and Fig. 8's conflict model follows its cause:
writers hold a key locked a fraction W/N of the time, a baseline attempt on a locked key pays
the full transfer, a SABRe's LOCKED abort only a one-block round trip."""
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sonuma_cost  # noqa: E402


def core(**kw):
    a = dict(ipc=1.0, ipc_data=0.5, ghz=2.0, llc_core_ns=12.0, mlp=None, mshrs=32, rob=128, unpack_chunk=0)
    a.update(kw)
    return sonuma_cost.Core(SimpleNamespace(**a))


def test_core_model_charges_instructions_and_llc_lines():
    c = core()
    assert c.ns(1000, 0) == pytest.approx(500.0)  # 1000 / (1 x 2 GHz)
    assert c.ns(1000, 0, data=True) == pytest.approx(1000.0)  # --ipc-data 0.5
    # 7 instructions a line: 128 x 10 / 70 = 18 misses in flight, 12 / 18 ns < the 2 ns link floor
    assert c.mlp_of(70, 10) == pytest.approx(128 * 10 / 70)
    assert c.ns(70, 10) == pytest.approx(35 + 10 * 2.0)
    # never less than one LLC latency: 5 lines at the link floor would be 10 ns; the first miss waits 12
    assert c.llc_time(10, 5) == pytest.approx(12.0)
    assert c.llc_time(10, 0.5) == pytest.approx(6.0)  # half a line on average: half a latency
    assert c.llc_time(10, 0) == 0.0
    # one miss among 1000 instructions: the ROB holds one: the full LLC latency
    assert c.ns(1000, 1) == pytest.approx(500 + 12.0)
    assert core(mlp=1.0).ns(70, 10) == pytest.approx(35 + 10 * 12.0)
    assert c.mlp_of(1, 100) == 32  # never more than the MSHRs


def test_fresh_phase_counts_every_line_the_device_wrote():
    m = {"layout": "baseline", "kv_check_lines": 130, "kv_check_misses": 0, "kv_use_lines": 3,
         "kv_use_misses": 1}
    assert sonuma_cost.llc_lines(m, "kv_check") == 130 and sonuma_cost.llc_lines(m, "kv_use") == 1
    m["layout"] = "sabre"
    assert sonuma_cost.llc_lines(m, "kv_check") == 0 and sonuma_cost.llc_lines(m, "kv_use") == 3


SW = (50.0, 10.0, 1.0, 20.0, 5.0)  # issue, check, failed check, copy, use


def test_no_writers_one_attempt():
    for layout in ("baseline", "sabre"):
        att, t, dev = sonuma_cost.conflict_sim(layout, 16, 0, 100, 1000.0, 300.0, 150.0, 1.0, SW)
        assert att == 1 and dev == 300 and t == pytest.approx(50 + 300 + 10 + 20 + 5)


def test_conflicts_follow_their_cause():
    n, N, t_w, lat, lat64 = 128, 100, 10000.0, 400.0, 150.0
    b = sonuma_cost.conflict_sim("baseline", n, 10, N, t_w, lat, lat64, 1.0, SW)
    s = sonuma_cost.conflict_sim("sabre", n, 10, N, t_w, lat, lat64, 1.0, SW)
    # 10 writers of 100 keys: a key is locked 10 % of the time; a reader that finds it locked
    # retries until the update ends (on average half of it), paying a whole attempt each time
    base_retries = 0.1 * (t_w / 2) / (50 + lat + 1.0)
    assert b[0] - 1 == pytest.approx(base_retries, rel=0.1)
    # every baseline attempt is a full transfer; a LOCKED abort costs a one-block round trip and the
    # skipped blocks, so SABRe retries more often but spends less device time per read
    assert b[2] == pytest.approx(b[0] * lat)
    assert s[0] > b[0] and s[2] / s[0] < lat
    # more writers, more attempts and a longer read
    b20 = sonuma_cost.conflict_sim("baseline", n, 20, N, t_w, lat, lat64, 1.0, SW)
    assert b20[0] > b[0] and b20[1] > b[1]


def test_writer_update_is_the_locked_span_only():
    # the paper's writers write a predefined value in a tight loop (sec. 7.2): the update Fig. 8's
    # conflicts see is rmc-kv's KV_WRITE (lock, stores of the prepared value, unlock), never the
    # payload generation it does beforehand, unlocked (KV_PREPARE)
    c = core()
    m = {"kv_write_insns": 2000.0, "kv_write_misses": 128.0, "kv_prepare_insns": 25000.0, "kv_prepare_misses": 0.0}
    assert sonuma_cost.write_ns(c, m) == pytest.approx(c.ns(2000, 128, data=True))
    m["kv_prepare_insns"] = 0.0
    assert sonuma_cost.write_ns(c, m) == pytest.approx(c.ns(2000, 128, data=True))


def test_shorter_locked_updates_mean_fewer_baseline_retries():
    # a reader that finds its key locked retries until the update ends: the retries scale with the
    # update's length, the locked fraction W/N does not (back-to-back writers)
    n, N, lat, lat64 = 128, 100, 400.0, 150.0
    long_ = sonuma_cost.conflict_sim("baseline", n, 16, N, 16700.0, lat, lat64, 1.0, SW)
    short = sonuma_cost.conflict_sim("baseline", n, 16, N, 1000.0, lat, lat64, 1.0, SW)
    assert long_[0] > 5 * (short[0] - 1) + 1 and short[0] < 1.5


def test_breakdown_row_terms():
    r = {"att": 1.25, "mreads": 10.0, "bound": "think", "read_ns": 500.0, "update_ns": 2000.0, "dev_ns": 450.0,
         "lat_ns": 360.0, "issue_ns": 47.0, "check_ns": 100.0, "check_fail_ns": 1.0, "copy_ns": 90.0, "use_ns": 12.0}
    m = {"kv_write_insns": 3000.0, "kv_prepare_insns": 9000.0}
    row = sonuma_cost.breakdown_row(1024, 16, "baseline", r, 100, m)
    assert row["failed_attempt_pct"] == pytest.approx(20.0)  # 1 - 1 / 1.25
    assert row["locked_fraction_pct"] == pytest.approx(16.0)  # W / N
    assert row["device_ns_per_attempt"] == pytest.approx(360.0)
    assert row["updates_per_s_per_writer"] == pytest.approx(5e5)
    assert sonuma_cost.breakdown_row(1024, 0, "sabre", r, 100, m)["updates_per_s_per_writer"] == 0


def test_median_of_runs_and_old_measurements(tmp_path):
    runs = [{("baseline", 128): {"layout": "baseline", "size": 128, "kv_check_insns": x}} for x in (28.0, 90.0, 28.5)]
    med = sonuma_cost.median_of(runs)[("baseline", 128)]
    assert med["kv_check_insns"] == 28.5 and med["runs"] == 3 and med["layout"] == "baseline"
    # a measurement saved before the writer's prepare phase existed still loads (prepare: 0)
    p = tmp_path / "old.json"
    p.write_text('{"exact": true, "points": [{"layout": "sabre", "size": 128, "kv_write_insns": 414}]}')
    pts, exact = sonuma_cost.load_measured(p)
    assert exact and pts[("sabre", 128)]["kv_prepare_insns"] == 0.0


def test_streaming_phase_is_issue_or_llc_bound_overlapped():
    # --streaming roofline: sec. 7.3's high-MLP phase at its best (a kernel hand-tuned for MLP):
    # Table 2's 3-wide dispatch and 2 L1d ports bound its issue, which overlaps its LLC lines; the
    # other phases keep IPC + stalls added
    c = core(streaming="roofline")
    # 1 KB strip: 160 instructions, 64 loads + 64 stores, no LLC line: port-bound, 64 cycles
    assert c.ns(160, 0, data=True, memops=128) == pytest.approx(32.0)
    # 1 KB check: 112 instructions (37 cycles), 16 loads, 16 LLC lines at MLP 18: the 2 ns link floor
    assert c.ns(112, 16, data=True, memops=16) == pytest.approx(32.0)
    # 8 KB check, instruction-bound: 1800 instructions / 3 = 600 cycles > 128 lines x 2 ns
    assert c.ns(1800, 128, data=True, memops=128) == pytest.approx(300.0)
    assert c.ns(1000, 1, data=False) == pytest.approx(500 + 12.0)  # not streaming: IPC 1, stall added
    # the default: the streaming phases as the others, at IPC --ipc-data
    assert core(ipc_data=0.5).ns(112, 16, data=True, memops=16) == pytest.approx(112 + 32.0)
    # the phases that stream: the baseline's check and copy, the local ones, the writer's update
    assert set(sonuma_cost.DATA) == {"kv_check", "kv_copy", "local_check", "local_copy", "kv_write"}
    m = {"layout": "baseline", "kv_copy_insns": 160.0, "kv_copy_misses": 0.0, "kv_copy_loads": 64.0,
         "kv_copy_stores": 64.0, "kv_copy_lines": 40.0}
    assert sonuma_cost.phase_ns(c, m, "kv_copy") == pytest.approx(32.0)


def test_unpack_fetches_the_object_in_1kib_chunks():
    # sec. 7.3: the version-stripping kernel is hand-tuned "to maximize the MLP, at 1KB data chunks":
    # a chunk's lines all in flight, chunk after chunk: one exposed LLC latency per chunk, the other
    # lines at the 16-byte link's pace (2 ns a line at 2 GHz)
    c = core(unpack_chunk=1024)
    assert c.chunked_llc_time(130, 8) == pytest.approx(8 * 12.0 + 122 * 2.0)
    assert c.chunked_llc_time(4, 1) == pytest.approx(12.0 + 3 * 2.0)
    assert c.chunked_llc_time(0, 1) == 0.0
    assert c.chunked_llc_time(64, 1) == pytest.approx(2 * 12.0 + 62 * 2.0)  # 64 lines, 32 MSHRs: two rounds
    m = {"layout": "baseline", "size": 8192, "kv_check_insns": 900.0, "kv_check_lines": 130.0,
         "kv_check_misses": 0.0, "local_check_insns": 900.0, "local_check_misses": 128.0,
         "local_check_lines": 130.0}
    assert sonuma_cost.unpack_chunks(c, m, "kv_check") == 8
    assert sonuma_cost.phase_ns(c, m, "kv_check") == pytest.approx(900 / 1.0 + 8 * 12 + 122 * 2)  # ipc_data 0.5
    # the local unpack is the same kernel (its LLC lines: the L1d-model misses)
    assert sonuma_cost.phase_ns(c, m, "local_check") == pytest.approx(900 + 8 * 12 + 120 * 2)
    # the ROB model otherwise: 128 x 130 / 900 = 18.5 lines in flight, at the link floor
    assert sonuma_cost.phase_ns(core(), m, "kv_check") == pytest.approx(900 + 130 * 2.0)
    assert sonuma_cost.phase_ns(core(unpack_chunk=0), m, "kv_check") == pytest.approx(900 + 130 * 2.0)
    # an explicit MLP (a sensitivity) overrides the chunks; other layouts and phases never chunk
    assert sonuma_cost.phase_ns(c, m, "kv_check", mlp=1.0) == pytest.approx(900 + 130 * 12.0)
    assert sonuma_cost.unpack_chunks(c, {**m, "layout": "sabre"}, "kv_check") is None
    assert sonuma_cost.unpack_chunks(c, m, "kv_copy") is None
    # 1 KB: one chunk; 128 B: one chunk
    assert sonuma_cost.unpack_chunks(c, {**m, "size": 1024}, "kv_check") == 1
    assert sonuma_cost.unpack_chunks(c, {**m, "size": 128}, "kv_check") == 1


def test_perfect_prefetcher_exposes_only_the_first_chunk():
    # sec. 7.3: "only the LLC access latency of accessing the first 1KB is exposed"
    c = core(unpack_chunk=1024)
    m = {"layout": "baseline", "size": 8192, "kv_check_insns": 900.0, "kv_check_lines": 130.0,
         "kv_check_misses": 0.0, "kv_copy_insns": 1000.0, "kv_copy_misses": 0.0}
    assert sonuma_cost.phase_ns(c, m, "kv_check", prefetch=True) == pytest.approx(900 + 12 + 15 * 2.0)
    assert sonuma_cost.phase_ns(c, m, "kv_copy", prefetch=True) == sonuma_cost.phase_ns(c, m, "kv_copy")


def test_fused_unpack_fails_after_the_whole_unpack():
    # sec. 7.2: the baseline "unpacks ... checking for atomicity violation in the process": a failed
    # attempt pays the unpack; rmc-kv's two passes stop a failed check at line 0; a SABRe's check is
    # its completion's status either way
    assert sonuma_cost.unpack_costs("baseline", 100.0, 80.0, 16, True) == (180.0, 180.0, 0.0)
    assert sonuma_cost.unpack_costs("baseline", 100.0, 80.0, 16, False) == (100.0, 100.0 / 16, 80.0)
    assert sonuma_cost.unpack_costs("sabre", 1.0, 0.0, 16, True) == (1.0, 1.0, 0.0)
    # so under writers a fused baseline read costs more than a two-pass one (same attempts)
    n, N, t_w, lat, lat64 = 16, 100, 2000.0, 300.0, 150.0
    fu = sonuma_cost.conflict_sim("baseline", n, 16, N, t_w, lat, lat64, 1.0,
                                  (50.0, *sonuma_cost.unpack_costs("baseline", 100.0, 80.0, n, True), 5.0))
    tp = sonuma_cost.conflict_sim("baseline", n, 16, N, t_w, lat, lat64, 1.0,
                                  (50.0, *sonuma_cost.unpack_costs("baseline", 100.0, 80.0, n, False), 5.0))
    assert fu[1] > tp[1]


def test_destination_coherence_owner_forwards():
    c = core()
    # Table 2: the owner's 3-cycle L1 + 2.5 hops x 3 cycles, at 2 GHz
    assert c.fwd_ns == pytest.approx(5.25)
    assert sonuma_cost.fwd_fraction(c, 128, 0, 100, 100.0, 16, 200.0) == 0.0
    # 16 writers of 100 128-byte keys: every key's lines fit its writer's L1; updates (6.25 keys x
    # 100 ns = 625 ns apart) far more often than reads (16 / (100 x 200 ns) = 0.8 per us per key):
    # nearly every attempt is the first after an update
    x = 16 / (100 * 200.0) * 6.25 * 100.0
    assert sonuma_cost.fwd_fraction(c, 128, 16, 100, 100.0, 16, 200.0) == pytest.approx((1 - math.exp(-x)) / x)
    # rare updates: only the first read after each finds the lines modified
    assert sonuma_cost.fwd_fraction(c, 128, 1, 100, 1e6, 16, 200.0) < 0.01
    # 8 KiB keys beyond the writer's 32 KiB L1d (100 x 8 KiB for one writer): mostly written back
    assert sonuma_cost.fwd_fraction(c, 8192, 1, 100, 10.0, 16, 200.0) <= 32 * 1024 / (100 * 8192) + 1e-9
    # the device time per attempt grows by the forward: always when the key is locked, else with q
    n, N, t_w, lat, lat64 = 2, 100, 100.0, 200.0, 199.0
    for layout in ("baseline", "sabre"):
        a0 = sonuma_cost.conflict_sim(layout, n, 16, N, t_w, lat, lat64, 1.0, SW)
        a1 = sonuma_cost.conflict_sim(layout, n, 16, N, t_w, lat, lat64, 1.0, SW, fwd_ns=5.0, fwd_q=0.0)
        a2 = sonuma_cost.conflict_sim(layout, n, 16, N, t_w, lat, lat64, 1.0, SW, fwd_ns=5.0, fwd_q=1.0)
        assert a0[2] < a1[2] < a2[2] and a2[2] == pytest.approx(a0[2] + 5.0 * a2[0], rel=0.05)
        assert a2[1] > a0[1]


def test_roofline_unpack_exposes_one_llc_latency_per_chunk():
    # --streaming roofline with the chunked unpack: each chunk waits one LLC latency, then its lines'
    # transfers overlap the kernel's issue
    c = core(streaming="roofline", unpack_chunk=1024)
    # 8 KB: 8 x 12 ns exposed; issue 1800 / 3 = 600 cycles = 300 ns > 122 lines x 2 ns
    assert c.ns(1800, 130, data=True, memops=128, chunks=8) == pytest.approx(96 + 300.0)
    # few instructions: the lines' transfers bound it
    assert c.ns(30, 130, data=True, memops=16, chunks=8) == pytest.approx(96 + 122 * 2.0)


def test_fig8_verdict_per_size():
    v = sonuma_cost.fig8_size_verdict
    # within 5 points of the paper's at both writer counts, moving the same way
    assert v(18.0, 5.0, 15, 3).startswith("REPRODUCED")
    assert v(12.0, 10.0, 15, 3) == "direction reproduced, magnitude NOT"  # 10 % against 3 %
    assert v(40.0, 44.0, 87, 97) == "direction reproduced, magnitude NOT"
    assert v(67.0, 60.0, 30, 41).startswith("NOT REPRODUCED")
    assert v(1.0, 2.0, None, None) == "-"
