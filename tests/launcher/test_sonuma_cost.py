"""bench/sonuma_cost.py's models on known inputs (no cluster): the core model charges what the
plugin measured (instructions at IPC x f, LLC lines at the latency over the memory-level
parallelism, never faster than the mesh link), and Fig. 8's conflict model follows its cause:
writers hold a key locked a fraction W/N of the time, a baseline attempt on a locked key pays
the full transfer, a SABRe's LOCKED abort only a one-block round trip."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sonuma_cost  # noqa: E402


def core(**kw):
    a = dict(ipc=1.0, ipc_data=0.5, ghz=2.0, llc_core_ns=12.0, mlp=None, mshrs=32, rob=128)
    a.update(kw)
    return sonuma_cost.Core(SimpleNamespace(**a))


def test_core_model_charges_instructions_and_llc_lines():
    c = core()
    assert c.ns(1000, 0) == pytest.approx(500.0)  # 1000 / (1 x 2 GHz)
    assert c.ns(1000, 0, data=True) == pytest.approx(1000.0)  # --ipc-data 0.5
    # 7 instructions a line: 128 x 10 / 70 = 18 misses in flight, 12 / 18 ns < the 2 ns link floor
    assert c.mlp_of(70, 10) == pytest.approx(128 * 10 / 70)
    assert c.ns(70, 10) == pytest.approx(35 + 10 * 2.0)
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
