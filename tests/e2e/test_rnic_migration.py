"""Scenario: nodes with the RNIC migrate (docs/rnic.md "Migration", docs/launcher.md).

One shared 2-node cluster with `rnic = true` and `snapshot = "auto"` over a private snapshot
cache: the first `up` boots both nodes and saves them (with the RNIC bound by its driver) into
the cache, the second `up` starts both from those snapshots; that cluster is the one every test
uses. Across it:
- after the snapshot boot, RDMA works across the switch: WRITE/READ/SEND with `--verify` at
  several sizes, and FETCH_ADDs from both nodes on one counter give the exact total;
- node 1 is saved (`node save --stop`) while its `rnic` clients are in the middle of a FETCH_ADD
  run and a verified WRITE/READ run against a server on node 0 (which keeps its QPs connected,
  and runs on), then restored from the file: the same processes on the same QPs finish, with
  the exact counter on the server and every verify check passing; node 1's RNIC counters went on
  from their saved values.
"""
import json
import os
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import RnicRelay as Relay, kv, run_kv, stop_procs
from rackemu.snapshot import meta_path


@pytest.fixture(scope="module")
def scluster(tmp_path_factory):
    """The 2-node RNIC cluster booted from its cached snapshots (see the module's docstring)."""
    cache = tmp_path_factory.mktemp("rnic-mig") / "cache"
    old = os.environ.get("RACKEMU_CACHE")
    os.environ["RACKEMU_CACHE"] = str(cache)
    name = f"e2e-rnicmig-{os.getpid()}"
    try:
        c = _start(_config(f"{name}-a", rnic=True, snapshot="auto"))
        assert [n["snapshot"] for n in c.status_dict(ping=False)["nodes"]] == [None, None]
        c.down()
        _clusters.remove(c)
        [entry] = [d for d in (cache / "snapshots").iterdir() if d.is_dir()]
        snaps = [entry / f"node{i}.snap" for i in range(2)]
        assert [json.loads(meta_path(p).read_text())["node"] for p in snaps] == [0, 1]
        c = _start(_config(f"{name}-b", rnic=True, snapshot="auto"))
        c.booted_from = [n["snapshot"] for n in c.status_dict(ping=False)["nodes"]]
        c.snaps = [str(p) for p in snaps]
        yield c
        c.down()
        _clusters.remove(c)
    finally:
        if old is None:
            os.environ.pop("RACKEMU_CACHE", None)
        else:
            os.environ["RACKEMU_CACHE"] = old


def counters(node):
    r, d = run_kv(node, "rnic counters")
    assert r.rc == 0, r.stderr
    out = {}
    for x in d:
        out.update(x)
    return {k: int(v) for k, v in out.items()}


def running(node, client):
    return "rc=" not in node.exec(f"cat {client[1]}.out").stdout.decode()


def test_snapshot_booted_nodes_carry_rdma_across_the_switch(scluster):
    assert scluster.booted_from == scluster.snaps
    s, c = scluster.node(0), scluster.node(1)
    for n in (s, c):
        assert n.sh("ls /dev/rnic0").strip() == "/dev/rnic0"
    try:
        relay = Relay(s, "sbx", 1)
        cl = relay.client(c, "bench --ops write,read,send --sizes 1,4096,4097,64K --iters 5 --window 4 "
                             "--rate-windows 1 --verify")
        relay.go(cl)
        rc, out = relay.result(cl)
        checks = [x for x in kv(out) if "check" in x]
        assert rc == 0 and checks and all(x["ok"] == "1" for x in checks), out.decode()
        relay.stop()

        assert Relay.faa_total(s, [s, c], "sbf", 200) == 2 * 200
    finally:
        stop_procs(s, "rnic")
        stop_procs(c, "rnic")


def test_a_node_saved_mid_transfer_and_restored_finishes_on_the_same_qps_with_exact_data(scluster, tmp_path):
    s, c = scluster.node(0), scluster.node(1)
    count = 30000
    try:
        relay = Relay(s, "mig", 2)
        cf = relay.client(c, f"faa --count {count}")
        cb = relay.client(c, "bench --ops write,read --sizes 8,4097,64K --iters 200 --window 4 "
                             "--rate-windows 1 --verify")
        relay.go(cf, cb)
        deadline = time.monotonic() + 60
        while counters(c)["wr_completed"] < 500 and time.monotonic() < deadline:
            time.sleep(0.5)
        before = counters(c)
        assert before["wr_completed"] >= 500, before
        assert running(c, cf), "the FETCH_ADD run ended before the save: make it longer"

        snap = tmp_path / "node1.snap"
        scluster.save_node(1, snap, stop=True)
        scluster.restore_node(1, snap)

        rc, out = relay.result(cf, timeout=600)
        d = kv(out)
        assert rc == 0 and d[-2]["errors"] == "0", out.decode()
        rc, out = relay.result(cb, timeout=600)
        checks = [x for x in kv(out) if "check" in x]
        assert rc == 0 and checks and all(x["ok"] == "1" for x in checks), out.decode()
        done = [x for x in relay.stop() if x.get("server") == "done"]
        assert done and int(done[0]["counter"]) == count, done   # every FETCH_ADD once

        after = counters(c)
        # restored, not reset: the device's counters went on from the saved values
        assert after["wr_completed"] > before["wr_completed"] >= 500
        assert after["cqes_written"] > before["cqes_written"]
    finally:
        stop_procs(s, "rnic")
        stop_procs(c, "rnic")
