"""Scenario: guest users against the RNIC's peers on the fabric (docs/trust-model.md, "The RNIC").

One 2-node cluster with `rnic = true`. An unprivileged user (u, uid 1000) of node 0 sends an
ordinary UDP datagram to node 1's RoCEv2 port: before, node 1's RNIC took it (8192 such
datagrams executed 4095 WRITEs into another user's memory, given the connection's PSN); now the
node's NIC backend refuses RoCEv2 from the guest's stack on a node with an RNIC and counts it.
And the tools start connections at random PSNs, so that a forged request cannot take the next
PSN from the clock.
"""
import re
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import kv, stop_procs


@pytest.fixture(scope="module")
def rcluster():
    c = _start(_config(f"e2e-rnic-hard-{int(time.time())}", rnic=True))
    yield c
    c.down()
    _clusters.remove(c)


def as_user(node, cmd, user="u", timeout=60):
    return node.exec(["su", user, "-c", cmd], timeout=timeout)


def net_counter(node, name):
    with node.qmp() as q:
        return q.execute("qom-get", path="/machine/rackemu-net", property=name)


def rnic_counters(node):
    r = node.exec("rnic counters")
    assert r.rc == 0, r.stdout + r.stderr
    return {k: int(v) for d in kv(r.stdout) for k, v in d.items() if v.isdigit()}


def udp_no_ports(node):
    """Datagrams the node's stack received for a port nobody listens on (/proc/net/snmp)."""
    lines = [ln.split() for ln in node.sh("grep '^Udp:' /proc/net/snmp").splitlines()]
    return int(lines[1][lines[0].index("NoPorts")])


def test_a_users_udp_datagram_to_port_4791_never_reaches_a_peers_rnic(rcluster):
    n0, n1 = rcluster.node(0), rcluster.node(1)
    before_drop = net_counter(n0, "tx-dropped-roce")
    before_rx = rnic_counters(n1)["rx_frames"]
    before_noports = udp_no_ports(n1)
    # busybox tftp sends one ordinary UDP datagram (a read request) to HOST PORT and waits for an
    # answer: user u's datagrams to 4791, then to 4792 (which reaches node 1's stack, so a refusal
    # of the first is the rule, not a broken network)
    r = as_user(n0, "for i in 1 2 3 4; do timeout 1 tftp -g -r forged-$i 198.18.0.2 4791; done; "
                    "timeout 2 tftp -g -r hello 198.18.0.2 4792; true")
    assert r.rc == 0, r.stdout + r.stderr
    assert udp_no_ports(n1) > before_noports, "UDP to port 4792 did not reach node 1"
    dropped = net_counter(n0, "tx-dropped-roce") - before_drop
    assert dropped >= 4, f"tx-dropped-roce rose by {dropped}"
    assert rnic_counters(n1)["rx_frames"] == before_rx, "a datagram of node 0's stack reached node 1's RNIC"


def test_connections_start_at_random_psns(rcluster):
    """16 connections of one `rnic bench --server`: distinct first PSNs spread over the 24-bit
    space (from the clock, those of one run lay within a few milliseconds of each other)."""
    n0 = rcluster.node(0)
    r = n0.exec("rm -f /tmp/pf*; (rnic bench --server --clients 16 --peer-file /tmp/pf >/tmp/pf.out 2>&1 &); "
                "for i in $(seq 200); do [ $(grep -c '^conn=' /tmp/pf.out) -ge 16 ] && break; sleep 0.1; done; "
                "cat /tmp/pf.out", timeout=120)
    stop_procs(n0, "rnic")
    psns = [int(m, 16) for m in re.findall(rb"psn=0x([0-9a-f]+)", r.stdout)]
    assert len(psns) == 16, r.stdout + r.stderr
    assert len(set(psns)) == 16, psns
    # the shortest arc of the 2^24 circle that holds them all: over a quarter of it
    # (16 uniform values fit within a quarter with probability 16 / 4^15, about 1.5e-8)
    s = sorted(psns)
    gaps = [b - a for a, b in zip(s, s[1:])] + [s[0] + (1 << 24) - s[-1]]
    assert (1 << 24) - max(gaps) > (1 << 22), [hex(p) for p in s]
