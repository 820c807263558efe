"""Scenario: SwordBox's workloads (docs/swordbox-workloads.md) on two booted nodes with the RNIC,
their RoCE traffic through the fabric's switch, no switch program loaded: the end-to-end RDMA
semantics alone must keep them correct.

One cluster (2 nodes, 1 vCPU, 256 MiB) for the module, the RNICs' direct path off so that every
READ and WRITE crosses the switch as a frame, as a switch program needs to see them: node 0 runs
the memory server (`swordbox-wl server`), clients run on both nodes (node 0's loop back through
its own RNIC).
- locks: the counter guarded by one lock is exact (every client's increments, no more, no less)
  and the lock is free at the end;
- Clover: under a short YCSB-A every put is linked once, and no get returns a version older than
  one committed before it began (`swordbox-wl kv-check` over the server's chains and the logs);
- Sherman B+tree: after a mixed insert/lookup run every inserted key is found and the tree's
  invariants hold (sorted pages, fences, separators, no lock left held), also with the node-local
  lock table handing locks over;
- the checker itself flags made-up violations; Clover with the metadata server's hints; a client
  out of server heap stops with a message; usage errors.
"""
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import SwordRelay, kv, stop_procs


@pytest.fixture(scope="module")
def scluster():
    c = _start(_config(f"e2e-swordbox-{int(time.time())}", rnic=True, nodes=2, vcpus=1, memory="256M",
                       qemu_args=["-global", "rackemu-rnic.direct=off"]))
    yield c
    c.down()
    _clusters.remove(c)


def run(cluster, tag, server_opts, cmd, per_node_threads=(1, 1)):
    """A server on node 0, `cmd` on node 0 and node 1 with the given threads each; every client's
    summary line, and the server's (rc, lines, output)."""
    nodes = [cluster.node(0), cluster.node(1)]
    for n in nodes:
        stop_procs(n, "swordbox-wl")
    relay = SwordRelay(nodes[0], tag, sum(per_node_threads), server_opts)
    cl = [relay.client(n, cmd, t) for n, t in zip(nodes, per_node_threads)]
    relay.go(*cl)
    outs = []
    for c in cl:
        rc, out = relay.result(c)
        assert rc == 0, out.decode()
        outs.append(out)
    stopped = relay.stop()
    print(*(o.decode() for o in outs), stopped[2].decode(), sep="\n")   # shown with pytest -s
    return relay, outs, stopped


def line(out, key):
    got = [d for d in kv(out) if key in d]
    assert got, out.decode()
    return got[-1]


def test_help_and_bad_arguments(scluster):
    n = scluster.node(1)
    r = n.exec("swordbox-wl --help")
    assert r.rc == 0 and b"kv-check" in r.stdout
    for cmd, words in [("lock", b"--peer-file"), ("server --peer-file /tmp/x --clients 1 --mode nosuch", b"--mode"),
                       ("kv --peer-file /tmp/x --workload Z", b"--workload"), ("btree --peer-file /tmp/x --theta 2",
                                                                               b"--theta"),
                       ("server --peer-file /tmp/x --clients 1 --mode lock --lock-place dm", b"device memory"),
                       ("frobnicate", b"unknown command")]:
        r = n.exec(f"swordbox-wl {cmd}")
        assert r.rc != 0 and words in r.stderr, (cmd, r.stderr)


def test_lock_guarded_counter_is_exact_with_clients_on_two_nodes(scluster):
    _, outs, (src, sd, sout) = run(scluster, "lock", "--mode lock --locks 1", "lock --ops 300", (1, 1))
    incr = sum(int(line(o, "lock")["increments"]) for o in outs)
    assert incr == 600
    done = [d for d in sd if d.get("server") == "done"]
    assert src == 0 and done and done[0]["counter_sum"] == str(incr) and done[0]["locks_held"] == "0", sout.decode()
    for o in outs:
        d = line(o, "lock")
        assert float(d["tx_frames_per_op"]) >= 4     # CAS, READ, WRITE, WRITE: all on the wire
        assert int(d["acquires"]) == 300 and float(d["p99_us"]) >= float(d["p50_us"]) > 0


def test_many_locks_zipf_counters_are_exact(scluster):
    _, outs, (src, sd, sout) = run(scluster, "locks", "--mode lock --locks 64", "lock --ops 200 --dist zipf", (2, 1))
    incr = sum(int(line(o, "lock")["increments"]) for o in outs)
    done = [d for d in sd if d.get("server") == "done"]
    assert src == 0 and incr == 600 and done[0]["counter_sum"] == "600", sout.decode()


def test_clover_gets_return_the_latest_committed_version_under_ycsb_a(scluster):
    s = scluster.node(0)
    _, outs, (src, sd, sout) = run(scluster, "kv", "--mode kv --keys 1024 --value-size 128 --dump /tmp/swl-kv.chain",
                                   "kv --ops 400 --workload A --log /tmp/swl-kv.log", (2, 1))
    done = [d for d in sd if d.get("server") == "done"]
    puts = sum(int(line(o, "kv")["puts"]) for o in outs)
    assert src == 0 and done and done[0]["bad"] == "0", sout.decode()
    assert int(done[0]["chain_nodes"]) == puts > 0   # every committed put linked, nothing else
    s.put(scluster.node(1).get("/tmp/swl-kv.log"), "/tmp/swl-kv-n1.log")
    r = s.exec("swordbox-wl kv-check --chain /tmp/swl-kv.chain /tmp/swl-kv.log /tmp/swl-kv-n1.log")
    d = line(r.stdout, "kvcheck")
    assert r.rc == 0 and d["kvcheck"] == "ok" and int(d["puts"]) == puts, r.stdout.decode()
    assert int(d["gets"]) > 0


def test_btree_invariants_hold_after_a_mixed_run(scluster):
    _, outs, (src, sd, sout) = run(scluster, "bt", "--mode btree --locks 4096",
                                   "btree --ops 400 --insert-share 0.6", (1, 1))
    done = [d for d in sd if d.get("server") == "done"]
    inserts = sum(int(line(o, "btree")["inserts"]) for o in outs)
    assert src == 0 and done and done[0]["bad"] == "0", sout.decode()
    assert int(done[0]["keys"]) == inserts > 60        # more than one leaf: splits happened
    assert int(done[0]["levels"]) >= 2 and int(done[0]["pages"]) > 2
    for o in outs:
        assert line(o, "btree")["errors"] == "0"


def test_btree_with_local_lock_hand_over_keeps_its_invariants(scluster):
    # one lock word for every page: the threads of node 1 queue on the local table and hand it over
    _, outs, (src, sd, sout) = run(scluster, "btho", "--mode btree --locks 1",
                                   "btree --ops 300 --insert-share 0.8 --hand-over 4", (1, 2))
    done = [d for d in sd if d.get("server") == "done"]
    inserts = sum(int(line(o, "btree")["inserts"]) for o in outs)
    assert src == 0 and done and done[0]["bad"] == "0" and int(done[0]["keys"]) == inserts, sout.decode()
    for o in outs:
        assert line(o, "btree")["errors"] == "0"


def test_kv_check_finds_stale_reads_lost_puts_and_going_back(scluster):
    """The checker itself, on a made-up chain and log: it must flag what it is there to flag."""
    n = scluster.node(1)
    n.put(b"c 5 0 0\nc 5 1 a\nc 5 2 b\nc 6 0 0\nc 6 1 d\nc 6 2 d\n", "/tmp/swl-chk.chain")
    good = b"# node=1 pid=1\nP 5 a 10 20 0 0\nG 5 a 30 40 1 1\nP 5 b 50 60 0 1\nG 5 b 70 80 1 1\n"
    n.put(good, "/tmp/swl-chk-good.log")
    n.put(b"c 5 0 0\nc 5 1 a\nc 5 2 b\n", "/tmp/swl-chk-good.chain")
    r = n.exec("swordbox-wl kv-check --chain /tmp/swl-chk-good.chain /tmp/swl-chk-good.log")
    d = line(r.stdout, "kvcheck")
    assert r.rc == 0 and d["kvcheck"] == "ok" and d["puts"] == "2" and d["gets"] == "2", r.stdout.decode()
    bad = (b"P 5 a 10 20 0 0\n"     # thread 0 commits version 1 of key 5 at t=20
           b"G 5 0 30 40 1 0\n"     # thread 1 starts a get at t=30 and returns the first version: stale
           b"P 5 b 50 60 0 1\n"
           b"G 5 a 70 80 0 1\n"     # thread 0 saw position 2, now 1: backwards (and stale)
           b"P 5 c 90 99 0 1\n")    # a put nobody linked
    n.put(bad, "/tmp/swl-chk-bad.log")
    r = n.exec("swordbox-wl kv-check --chain /tmp/swl-chk.chain /tmp/swl-chk-bad.log")
    d = line(r.stdout, "kvcheck")
    found = {x["kvcheck_violation"] for x in kv(r.stdout) if "kvcheck_violation" in x}
    assert r.rc == 1 and d["kvcheck"] == "fail", r.stdout.decode()
    assert found == {"duplicate_link", "not_linked", "stale_read", "backwards"}, r.stdout.decode()
    assert int(d["stale_reads"]) >= 2 and d["backwards"] == "1"


def test_kv_client_stops_with_a_message_when_the_server_heap_is_used_up(scluster):
    # 320 KiB: the roots, then one 64 KiB chunk (341 versions of 192 B) for the whole run
    nodes = [scluster.node(0), scluster.node(1)]
    for n in nodes:
        stop_procs(n, "swordbox-wl")
    relay = SwordRelay(nodes[0], "oom", 1, "--mode kv --mem 320K")
    cl = relay.client(nodes[1], "kv --ops 1000 --workload U")
    relay.go(cl)
    rc, out = relay.result(cl)
    assert rc == 1 and b"the server has no memory left (--mem)" in out, out.decode()
    src, sd, sout = relay.stop()
    done = [d for d in sd if d.get("server") == "done"]
    assert src == 0 and done and done[0]["bad"] == "0" and int(done[0]["chain_nodes"]) == 341, sout.decode()


def test_clover_with_metadata_server_hints_still_reads_the_latest(scluster):
    s = scluster.node(0)
    _, outs, (src, sd, sout) = run(scluster, "kvh", "--mode kv --dump /tmp/swl-kvh.chain",
                                   "kv --ops 300 --workload A --ms-hints --log /tmp/swl-kvh.log", (1, 1))
    assert src == 0 and [d for d in sd if d.get("server") == "done"][0]["bad"] == "0", sout.decode()
    assert all(int(line(o, "kv")["hint_rpcs"]) > 0 for o in outs)   # first touches asked the MS
    s.put(scluster.node(1).get("/tmp/swl-kvh.log"), "/tmp/swl-kvh-n1.log")
    r = s.exec("swordbox-wl kv-check --chain /tmp/swl-kvh.chain /tmp/swl-kvh.log /tmp/swl-kvh-n1.log")
    assert r.rc == 0 and line(r.stdout, "kvcheck")["kvcheck"] == "ok", r.stdout.decode()
