"""Scenario: the RNIC across the fabric's switch under the bridge's fault rules, a partition, and a
capture of its frames decoded by tshark (docs/rnic.md "What the e2e fault tests show",
docs/fabric.md "Fault rules" and "Capture").

A two-node cluster with `-device rackemu-rnic` on each node. Node 0 runs `rnic bench --server`
(an MR whose first 8 bytes are a FETCH_ADD counter), node 1 the clients, the QP parameters relayed
by the test (guest_tools.RnicRelay). Each fault test installs one rule on the RoCEv2 frames
between the two nodes (`fault add ... between=0,1 svc=eth kind=roce`), runs a verified
WRITE/READ/SEND client (patterns at 1, MTU+1 and 1 MiB into the middle and the end of the
server's MR, read back and compared) and a FETCH_ADD client, and asserts exact data, the exact
counter, that the rule hit frames, and that the devices' counters show the recovery the rule
calls for (retransmissions, duplicates, ICRC errors). Every rule is removed after its test.
"""
import json
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from conftest import _clusters, _config, _start
from guest_tools import RnicRelay as Relay, kv, stop_procs

ROOT = Path(__file__).resolve().parents[2]
RNIC_ARGS = ["-device", "rackemu-rnic"]
# Timeout code 14 (67 ms, the default) and 7 retries: 1 MiB messages take tens of ms at the
# emulated link's speed and frames can wait in the bridge's queues; a short timeout with a lost
# packet can then run out of retries (docs/rnic.md "Backpressure").
QP_OPTS = "--timeout 14 --retry 7"
# --verify runs WRITE, READ and SEND at every size; then one WRITE at a time per size
VERIFY = f"bench --ops write --sizes 1,4097,1M --iters 2 --window 1 --rate-windows 1 --verify {QP_OPTS}"
FAA_COUNT = 300
MATCH = "between=0,1 svc=eth kind=roce"


@pytest.fixture(scope="module")
def fc():
    c = _start(_config(f"e2e-rnicf-{int(time.time())}", qemu_args=RNIC_ARGS))
    yield c
    c.down()
    _clusters.remove(c)


def counters(node):
    out = node.exec("rnic counters").stdout
    return {k: int(v) for d in kv(out) for k, v in d.items()}


def delta(before, after):
    return {k: after[k] - before.get(k, 0) for k in after}


def add_rule(c, rule):
    ans = c.bridge_command(f"fault add {rule}")
    assert ans.get("ok"), ans
    return ans["id"]


def rule_stats(c, rid):
    rules = {r["id"]: r for r in c.bridge_command("fault list")["rules"]}
    return rules[rid]


@pytest.fixture
def clean(fc):
    yield fc
    ans = fc.bridge_command("fault del all")
    assert ans.get("ok"), ans
    assert fc.bridge_command("fault list")["rules"] == []
    for i in (0, 1):
        stop_procs(fc.node(i), "rnic")


def run_traffic(c, tag):
    """A verified WRITE/READ/SEND client and a FETCH_ADD client of one server; returns the
    verify client's key=value lines and the server's final counter."""
    s, cn = c.node(0), c.node(1)
    relay = Relay(s, tag, 2, QP_OPTS)
    v = relay.client(cn, VERIFY)
    f = relay.client(cn, f"faa --count {FAA_COUNT} {QP_OPTS}")
    relay.go(v, f)
    rc, out = relay.result(v, timeout=600)
    d = kv(out)
    failed = [x for x in d if x.get("ok") == "0"]
    assert rc == 0 and not failed, out.decode()
    names = {x["check"] for x in d if "check" in x}
    for size in (1, 4097, 1 << 20):
        assert {f"write_{size}_middle", f"write_{size}_end", f"read_{size}_middle", f"read_{size}_end",
                f"send_{size}_recv"} <= names, names
    rc, out = relay.result(f, timeout=600)
    fa = [x for x in kv(out) if "faa" in x][-1]
    assert rc == 0 and fa["errors"] == "0" and fa["done"] == str(FAA_COUNT), out.decode()
    done = [x for x in relay.stop() if x.get("server") == "done"]
    assert done, "the server did not finish"
    return d, int(done[0]["counter"])


# rule, and the device counters (summed over both nodes) that must rise: the recovery it forces
FAULTS = {
    "drop": ("drop prob=0.01", ("retransmits",)),
    "duplicate": ("duplicate prob=0.01", ("duplicates", "resp_dropped")),
    "reorder": ("reorder prob=0.02 hold_us=500", ("out_of_seq", "seq_naks_tx", "resp_dropped", "implied_naks",
                                                  "retransmits")),
    "corrupt": ("corrupt prob=0.01 bits=1", ("rx_icrc_errors", "rx_malformed")),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_exact_data_and_totals_under_a_fault_rule(clean, name):
    c = clean
    rule, rising = FAULTS[name]
    before = [counters(c.node(i)) for i in (0, 1)]
    rid = add_rule(c, f"{rule} {MATCH}")
    _, total = run_traffic(c, f"f-{name}")
    st = rule_stats(c, rid)
    after = [counters(c.node(i)) for i in (0, 1)]
    d = [delta(b, a) for b, a in zip(before, after)]
    assert total == FAA_COUNT, f"FETCH_ADD total {total}, want {FAA_COUNT} (each executed exactly once)"
    assert st["matched"] > 0 and st["hits"] > 0, st
    seen = {k: d[0][k] + d[1][k] for k in rising}
    print(f"{name}: rule matched={st['matched']} hits={st['hits']}; devices {seen}, "
          f"retransmits={d[0]['retransmits'] + d[1]['retransmits']}")
    assert sum(seen.values()) > 0, (st, seen)
    if name in ("drop", "corrupt"):
        # a lost or discarded frame is recovered by retransmission only
        assert d[0]["retransmits"] + d[1]["retransmits"] > 0, (st, d)
    if name == "corrupt":
        # bit flips past the IP header are caught by the ICRC (flips in the Ethernet header
        # misroute the frame; in the IP header the IP checksum catches them: rx_malformed)
        assert d[0]["rx_icrc_errors"] + d[1]["rx_icrc_errors"] > 0, (st, d)
    for i in (0, 1):
        # the device never dropped its own frames at its link (backpressure holds them)
        assert d[i]["link_tx_drops"] == 0, d[i]
        assert d[i]["retry_exhausted"] == 0 and d[i]["qp_errors"] == 0, d[i]
        # a retransmission is a frame sent again: never more of them than frames sent
        assert d[i]["retransmits"] <= d[i]["tx_frames"], d[i]


def test_partition_longer_than_the_retry_budget_then_a_new_qp_works(clean):
    c = clean
    s, cn = c.node(0), c.node(1)
    # timeout code 14 (67 ms) x (3 retries + 1): a budget of ~0.27 s, which a loaded 2-core host
    # does not stall through (with code 10, 17 ms, it did, before any rule); the partition lasts
    # until the client has reported, seconds
    relay = Relay(s, "part", 1, "--timeout 14 --retry 3")
    cl = relay.client(cn, "faa --count 100000000 --timeout 14 --retry 3")
    relay.go(cl)
    time.sleep(2)
    rid = add_rule(c, "down between=0,1")
    try:
        rc, out = relay.result(cl, timeout=120)
        st = rule_stats(c, rid)
    finally:
        c.bridge_command(f"fault del {rid}")
    fa = [x for x in kv(out) if "faa" in x][-1]
    assert rc == 1 and fa["status"] == "12" and fa["qp_state"] == "ERR", out.decode()
    assert int(fa["done"]) > 0 and st["hits"] > 0, (fa, st)
    n1 = counters(cn)
    assert n1["retry_exhausted"] >= 1 and n1["timeouts"] >= 4, n1
    done = [x for x in relay.stop() if x.get("server") == "done"]
    # every completed FETCH_ADD executed once; the one in flight at the cut may have executed
    # before its ACK was lost, never twice
    assert done and int(fa["done"]) <= int(done[0]["counter"]) <= int(fa["done"]) + 1, (fa, done)
    # the rule is gone: a new QP pair works
    relay = Relay(s, "part2", 1, QP_OPTS)
    cl = relay.client(cn, f"faa --count 100 {QP_OPTS}")
    relay.go(cl)
    rc, out = relay.result(cl)
    fa = [x for x in kv(out) if "faa" in x][-1]
    assert rc == 0 and fa["errors"] == "0" and fa["done"] == "100" and fa["qp_state"] == "RTS", out.decode()
    done = [x for x in relay.stop() if x.get("server") == "done"]
    assert done and int(done[0]["counter"]) == 100, done


def icrc_ok(frame: bytes) -> bool:
    """IBA 7.8.1 / Annex A17.4.3, computed here independently of the device: CRC-32 over 8 bytes
    of 0xFF and the IPv4 + UDP + BTH headers with TOS, TTL, IP checksum, UDP checksum and BTH
    byte 4 masked to 1s, then the rest up to the ICRC (sent least significant byte first)."""
    ip = bytearray(frame[14:])
    tot = struct.unpack("!H", ip[2:4])[0]
    ip = ip[:tot]
    body, got = ip[:-4], ip[-4:]
    body[1] = 0xFF
    body[8] = 0xFF
    body[10:12] = b"\xff\xff"
    body[26:28] = b"\xff\xff"
    body[32] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(body)) & 0xFFFFFFFF) == bytes(got)


def test_capture_decodes_every_rnic_opcode_with_good_icrc(clean, tmp_path):
    c = clean
    s, cn = c.node(0), c.node(1)
    pcap = tmp_path / "rnic.pcapng"
    r = subprocess.run([str(ROOT / "rackemu"), "capture", "start", "--run-dir", str(c.run_dir), "-o", str(pcap),
                        "--nodes", "0,1", "--what", "eth", "--dir", "in"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        relay = Relay(s, "cap", 1, QP_OPTS)
        # 10000 bytes at MTU 4096: FIRST, MIDDLE, LAST; 8 bytes: ONLY; FETCH_ADD and CMP_SWAP
        cl = relay.client(cn, f"bench --ops write,read,send,faa,cas --sizes 8,10000 --iters 2 --window 1 "
                              f"--rate-windows 1 {QP_OPTS}")
        relay.go(cl)
        rc, out = relay.result(cl)
        assert rc == 0, out.decode()
        relay.stop()
    finally:
        r = subprocess.run([str(ROOT / "rackemu"), "capture", "stop", "--run-dir", str(c.run_dir)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    t = subprocess.run(["tshark", "-r", str(pcap), "-Y", "infiniband", "-T", "fields", "-E", "separator=;",
                        "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp"],
                       capture_output=True, text=True, timeout=300)
    assert t.returncode == 0, t.stderr
    rows = [ln.split(";") for ln in t.stdout.splitlines() if ln]
    ops = {int(r[0]) for r in rows}
    # RC opcodes (IBA table 38): SEND FIRST/MIDDLE/LAST/ONLY, WRITE FIRST/MIDDLE/LAST/ONLY, READ
    # REQUEST, READ RESPONSE FIRST/MIDDLE/LAST/ONLY, ACK, ATOMIC ACK, CMP_SWAP, FETCH_ADD
    want = {0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0A, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14}
    assert want <= ops, f"missing opcodes {sorted(want - ops)}; tshark decoded {sorted(ops)}"
    # PSNs: the requests to each QP carry increasing 24-bit PSNs (no loss here, so no
    # retransmission): +1 per packet, + the response count after a READ request
    psns = {}
    for op, psn, dqp in rows:
        if int(op) <= 0x0C or int(op) in (0x13, 0x14):
            psns.setdefault(dqp, []).append(int(psn))
    assert psns and max(len(v) for v in psns.values()) > 20, psns
    for v in psns.values():
        steps = [(b - a) % (1 << 24) for a, b in zip(v, v[1:])]
        assert all(1 <= x <= 3 for x in steps), steps
    # The ICRC of every RoCEv2 frame in the file, recomputed here (tshark shows it, does not check it)
    j = subprocess.run(["tshark", "-r", str(pcap), "-Y", "infiniband", "-T", "json", "-x"],
                       capture_output=True, text=True, timeout=300)
    assert j.returncode == 0, j.stderr
    frames = [bytes.fromhex(p["_source"]["layers"]["frame_raw"][0]) for p in json.loads(j.stdout)]
    assert len(frames) == len(rows)
    bad = [i for i, f in enumerate(frames) if not icrc_ok(f)]
    assert not bad, f"{len(bad)} of {len(frames)} frames with a bad ICRC"


def test_reads_and_writes_alone_on_their_qp_are_direct_unless_the_bridge_must_see_them(clean):
    """The direct path (docs/rnic.md "Direct path"): a READ or WRITE alone on its QP to a live peer
    is a copy from or into the peer's RAM file, counted on both sides, with the data verified
    (--verify: every byte read back and compared); while a fault rule could match the two nodes'
    RoCE frames, every request goes on the wire, where the rule sees it."""
    c = clean
    s, cn = c.node(0), c.node(1)
    iters = 20
    cmd = (f"bench --ops read,write --sizes 64,4K,64K --iters {iters} --window 1 --rate-windows 1 --verify "
           f"{QP_OPTS}")

    def run_ops(tag):
        relay = Relay(s, tag, 1, QP_OPTS)
        cl = relay.client(cn, cmd)
        relay.go(cl)
        rc, out = relay.result(cl)
        assert rc == 0, out.decode()
        d = kv(out)
        checks = [x for x in d if "check" in x]
        assert checks and all(x.get("ok") == "1" for x in checks), out.decode()
        relay.stop()

    b1, b0 = counters(cn), counters(s)
    run_ops("direct")
    d1, d0 = delta(b1, counters(cn)), delta(b0, counters(s))
    for op in ("read", "write"):
        assert d1[f"direct_{op}s"] >= 3 * iters, d1
        assert d0[f"served_direct_{op}s"] == d1[f"direct_{op}s"], (d0, d1)
        assert d1[f"direct_{op}_bytes"] >= iters * (64 + 4096 + 65536), d1
    assert d0["direct_wait_stalls"] == 0
    rid = add_rule(c, f"delay us=1 {MATCH}")
    b1, b0 = counters(cn), counters(s)
    run_ops("wire")
    d1, d0 = delta(b1, counters(cn)), delta(b0, counters(s))
    for k in ("direct_reads", "direct_writes"):
        assert d1[k] == 0 and d0["served_" + k] == 0, (d0, d1)
    assert rule_stats(c, rid)["matched"] >= 6 * iters
