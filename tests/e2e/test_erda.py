"""Scenario: the Erda store and its two baselines (docs/erda.md) on a 2-node cluster with the RNIC.

Node 0 runs `erda server` (the log and the hash table in persistent memory when the node has
/dev/rkpmem0, else in DRAM); clients on node 1 (and node 0, looping back through its own RNIC)
connect over TCP and then use RDMA. One cluster and one server serve every test of the module.
Every assertion is on data: values read back, the fallback and repair a reader reports, the
server's counters, and YCSB reads checked against the values written for their key.
"""
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import detached, kv, run_kv, stop_procs

SERVER_OUT = "/tmp/erda-server.out"


@pytest.fixture(scope="module")
def ecluster():
    c = _start(_config(f"e2e-erda-{int(time.time())}", rnic=True))
    n0 = c.node(0)
    detached(n0, "erda server --grace-ms 100 --max-conn 32", SERVER_OUT, b"server=ready", fail=b"erda:")
    yield c
    stop_procs(n0, "erda")
    c.down()
    _clusters.remove(c)


def erda(node, cmd, timeout=120):
    r, d = run_kv(node, f"erda {cmd}", timeout)
    return r, d


def one(node, cmd):
    """Run an erda client command on node; its first key=value line (asserting it ran)."""
    r, d = erda(node, f"{cmd} --server node0")
    assert d, (r.stdout + r.stderr).decode()
    return d[0]


def stats(node):
    r, d = erda(node, "stats --server node0")
    assert r.rc == 0, (r.stdout + r.stderr).decode()
    return next(x for x in d if "requests" in x)


def server_alive(c):
    return c.node(0).exec("pidof erda").rc == 0


def test_server_reports_its_region(ecluster):
    out = ecluster.node(0).exec(f"cat {SERVER_OUT}").stdout
    d = kv(out)
    ready = next(x for x in d if x.get("server") == "ready")
    assert int(ready["heads"]) >= 1 and int(ready["buckets"]) >= 1
    if ready["pmem"] == "0":
        assert b"no persistent memory on this node: log in DRAM" in out


@pytest.mark.parametrize("scheme", ["erda", "redo", "raw"])
def test_create_update_delete_read(ecluster, scheme):
    n1 = ecluster.node(1)
    k = f"crud-{scheme}"
    d = one(n1, f"put --scheme {scheme} {k} first")
    assert d["status"] == "0" and d["kind"] == "create", d
    if scheme == "erda":
        assert d["round_trips"] == "2", d  # the request and its reply, then the object's WRITE
    d = one(n1, f"get --scheme {scheme} {k}")
    assert d["status"] == "0" and d["value"] == "first" and d["fallback"] == "0", d
    if scheme == "erda":
        assert d["round_trips"] == "2", d  # READ of the bucket window, READ of the object
    d = one(n1, f"put --scheme {scheme} {k} second-and-longer")
    assert d["status"] == "0" and d["kind"] == "update", d
    assert one(n1, f"get --scheme {scheme} {k}")["value"] == "second-and-longer"
    # the other schemes read what this one wrote: one hash table, one log
    for other in ("erda", "redo"):
        assert one(n1, f"get --scheme {other} {k}")["value"] == "second-and-longer"
    d = one(n1, f"del --scheme {scheme} {k}")
    assert d["status"] == "0" and d["kind"] == "delete", d
    assert one(n1, f"get --scheme {scheme} {k}")["status"] == "-2"  # ENOENT
    d = one(n1, f"put --scheme {scheme} {k} third")
    assert d["status"] == "0" and d["kind"] == "update", d
    assert one(n1, f"get --scheme {scheme} {k}")["value"] == "third"
    # the client's own byte count: the object, header 16 + key + value
    r, lines = erda(n1, f"put --scheme {scheme} --server node0 {k} 0123456789")
    got = next(x for x in lines if x.get("scheme") == scheme and "create" in x)  # the client_bytes line
    obj = 16 + len(k) + 10
    record = 96 + 10  # redo/raw: the request header and the value, sent into the region
    assert int(got["update"]) == (obj if scheme == "erda" else record), got


def test_durable_variant_writes_and_reads(ecluster):
    n1 = ecluster.node(1)
    d = one(n1, "put --durable dur v1")
    assert d["status"] == "0" and d["kind"] == "create", d
    # request, object WRITE, FLUSH, ATOMIC WRITE, FLUSH, DONE
    assert d["round_trips"] == "6", d
    d = one(n1, "put --durable dur v2")
    assert d["status"] == "0" and d["kind"] == "update", d
    assert one(n1, "get dur")["value"] == "v2"
    assert int(stats(n1)["durable_done"]) >= 2


def test_torn_object_falls_back_and_the_server_restores_the_entry(ecluster):
    n1 = ecluster.node(1)
    before = stats(n1)
    assert one(n1, "put torn old-value")["status"] == "0"
    # a client that reserves, gets the word updated, and dies before its object WRITE
    d = one(n1, "put --skip-object-write torn new-value")
    assert d["status"] == "0" and d["skipped_object"] == "1", d
    time.sleep(0.5)  # past the server's grace period (100 ms); the client is gone anyway
    d = one(n1, "get torn")
    assert d["status"] == "0" and d["value"] == "old-value", d
    assert d["fallback"] == "1" and d["repaired"] == "1", d
    after = stats(n1)
    assert int(after["restored"]) == int(before["restored"]) + 1
    # the entry names the old version again: the next reader needs no fallback
    d = one(n1, "get torn")
    assert d["value"] == "old-value" and d["fallback"] == "0", d
    assert server_alive(ecluster)


def test_forged_and_out_of_range_entries_are_refused(ecluster):
    n1 = ecluster.node(1)
    before = stats(n1)
    for k in ("forge-range", "forge-bit"):
        assert one(n1, f"put {k} good-1")["status"] == "0"
        assert one(n1, f"put {k} good-2")["status"] == "0"
    # an offset far outside the head's space, written straight into the word
    d = one(n1, "forge forge-range --offset 0x7ffffff8")
    d = one(n1, "get forge-range")
    assert d["status"] == "0" and d["value"] == "good-1" and d["refused"] == "-1", d  # ERDA_E_RANGE
    assert d["fallback"] == "1" and d["repaired"] == "1", d
    # the reserved bit set
    one(n1, "forge forge-bit --reserved-bit")
    d = one(n1, "get forge-bit")
    assert d["status"] == "0" and d["value"] == "good-2", d
    after = stats(n1)
    assert int(after["out_of_range"]) >= int(before["out_of_range"]) + 1
    assert int(after["forged_entries"]) >= int(before["forged_entries"]) + 1
    # a request claiming another client's id
    d = one(n1, "put --as-client 31 spoof x")
    assert d["status"] == "-1", d  # EPERM
    assert int(stats(n1)["forged_requests"]) >= int(before["forged_requests"]) + 1
    assert one(n1, "get spoof")["status"] == "-2"
    assert server_alive(ecluster)


def test_ycsb_a_every_read_returns_a_value_written_for_its_key(ecluster, run_concurrently):
    n0, n1 = ecluster.node(0), ecluster.node(1)
    cmd = "erda ycsb --server node0 --workload A --keys 64 --ops 150 --value-size 100 --threads 2 --load --verify"
    ra, rb = run_concurrently(n1, cmd + " --seed 1", n0, cmd + " --seed 2", delay=0.5, timeout=300)
    for r in (ra, rb):
        out = (r.stdout + r.stderr).decode()
        d = kv(r.stdout)
        y = next(x for x in d if "ycsb" in x)
        assert r.rc == 0, out
        assert y["bad_reads"] == "0" and y["errors"] == "0" and y["missing"] == "0", y
        assert int(y["reads"]) + int(y["updates"]) == 300 and int(y["reads"]) > 0 and int(y["updates"]) > 0, y
        lat = {x["op"]: x for x in d if "p50_us" in x}
        assert float(lat["read"]["round_trips_per_op"]) >= 2.0, lat
        assert float(lat["update"]["round_trips_per_op"]) == 2.0, lat
        assert any("requests" in x for x in d)  # the server's counters
        print(out)
    assert server_alive(ecluster)


@pytest.mark.parametrize("scheme", ["redo", "raw"])
def test_ycsb_baselines_short(ecluster, scheme):
    n1 = ecluster.node(1)
    r, d = erda(n1, f"ycsb --server node0 --scheme {scheme} --workload B --keys 32 --ops 60 --value-size 16 "
                    "--load --verify", timeout=300)
    y = next(x for x in d if "ycsb" in x)
    assert r.rc == 0 and y["bad_reads"] == "0" and y["errors"] == "0", (r.stdout + r.stderr).decode()
