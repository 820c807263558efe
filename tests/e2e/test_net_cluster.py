"""Scenario: IP networking between booted nodes over the fabric (docs/networking.md).

Every node has a virtio-net NIC whose backend is its fabric port (the machine's net=on); the
guest's init brings it up as 198.18.0.<id+1>/15 and names the nodes in /etc/hosts; the bridge
switches the Ethernet frames. The tests share the session's 2-node cluster and assert on data:
ping replies, a TCP transfer whose SHA-256 is compared on both sides, the interface's MAC and
address, and the counters of the NIC's backend (QOM, over QMP) and of the bridge.
"""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def mac_of(i):
    return f"02:52:4b:00:00:{i:02x}"


def iface(node):
    """The guest interface that carries this node's fabric MAC (init configures that one)."""
    out = node.sh(f"for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac_of(node.id)} ] && "
                  f"echo ${{d##*/}}; done; true").split()
    assert len(out) == 1, f"node {node.id}: interfaces with MAC {mac_of(node.id)}: {out}"
    return out[0]


def nic_counters(node):
    """The counters of the node's NIC backend (QOM properties of /machine/rackemu-net)."""
    names = ("tx-frames", "tx-bytes", "tx-deferred", "tx-dropped-down", "tx-dropped-bad", "rx-frames",
             "rx-bytes", "rx-dropped-full", "rx-dropped-nic", "rx-queue-max", "link-changes")
    with node.qmp() as q:
        return {k: q.execute("qom-get", path="/machine/rackemu-net", property=k) for k in names}


def ping_received(out):
    m = re.search(r"(\d+) packets transmitted, (\d+) packets received", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def pings(node, target, count, size=56):
    """(requests, replies) of `count` pings from `node` to `target`, one `ping -c 1 -W 10` each:
    busybox's `ping -c N` waits only about two of the round trips seen so far (at least 1 s) for the
    last reply, which a loaded host misses; a single ping waits up to its -W for its reply."""
    out = node.sh(f"ok=0; for i in $(seq {count}); do ping -c 1 -W 10 -s {size} {target} >/dev/null && "
                  f"ok=$((ok + 1)); done; echo $ok", timeout=count * 12 + 30)
    return count, int(out.split()[-1])


def test_each_node_has_its_mac_address_and_carrier(cluster2):
    for n in cluster2.nodes:
        dev = iface(n)
        assert n.sh(f"cat /sys/class/net/{dev}/carrier").strip() == "1"
        addrs = n.sh(f"ip -4 addr show dev {dev}")
        assert f"inet 198.18.0.{n.id + 1}/15" in addrs, addrs
        assert n.sh(f"cat /sys/class/net/{dev}/mtu").strip() == str(cluster2.config.net_mtu)
        assert f"{dev} ({mac_of(n.id)}) up as 198.18.0.{n.id + 1}/15" in n.console_text()


def test_hosts_file_names_every_node(cluster2):
    for n in cluster2.nodes:
        lines = [ln.split() for ln in n.sh("cat /etc/hosts").splitlines() if ln.strip()]
        want = [["127.0.0.1", "localhost"]]
        want += [[f"198.18.0.{i + 1}", f"node{i}"] for i in range(cluster2.config.nodes)]
        assert lines == want


def test_ping_by_name_and_by_address_both_ways(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    assert pings(n0, "node1", 3) == (3, 3)
    assert pings(n1, "198.18.0.1", 3) == (3, 3)
    # the guest learnt the peer's fixed MAC through ARP over the switch
    assert mac_of(1) in n0.sh("cat /proc/net/arp")
    assert mac_of(0) in n1.sh("cat /proc/net/arp")


def test_rackemu_exec_ping_from_the_command_line(cluster2):
    # QEMU serves one agent client at a time: this process lets go of node 0's for the CLI
    cluster2.node(0).agent().close()
    r = subprocess.run([str(ROOT / "rackemu"), "exec", "--run-dir", str(cluster2.run_dir), "0", "--",
                        "ping", "-c", "3", "node1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    sent, got = ping_received(r.stdout)
    # every reply is checked in the tests above (pings()); here the command line path: busybox's
    # `ping -c 3` gives up on a last reply later than ~2 round trips, which a loaded host can be
    assert sent == 3 and got >= 2 and "bytes from 198.18.0.2" in r.stdout, r.stdout


def transfer(src, dst, size_mib, port):
    """`dst` fetches a file of `size_mib` MiB of random bytes from `src`'s httpd over TCP; returns
    the SHA-256 on the sender's side and on the receiver's, and the receiver's byte count."""
    src.sh(f"mkdir -p /tmp/www{port} && dd if=/dev/urandom of=/tmp/www{port}/blob bs=1M count={size_mib} "
           f"2>/dev/null && httpd -p {port} -h /tmp/www{port}")
    try:
        want = src.sh(f"sha256sum /tmp/www{port}/blob").split()[0]
        got = dst.sh(f"wget -q -O /tmp/rx{port} http://node{src.id}:{port}/blob && sha256sum /tmp/rx{port} && "
                     f"wc -c < /tmp/rx{port}", timeout=300).split()
        return want, got[0], int(got[-1])
    finally:
        src.exec(f"pkill -f 'httpd -p {port}'; rm -rf /tmp/www{port}")
        dst.exec(f"rm -f /tmp/rx{port}")


def test_tcp_transfer_of_several_mib_arrives_intact_both_ways(cluster2):
    n0, n1 = cluster2.node(0), cluster2.node(1)
    before = [nic_counters(n) for n in (n0, n1)]
    want, got, size = transfer(n1, n0, 4, 8081)
    assert size == 4 * MIB and got == want
    want, got, size = transfer(n0, n1, 3, 8082)
    assert size == 3 * MIB and got == want
    after = [nic_counters(n) for n in (n0, n1)]
    for b, a in zip(before, after):
        # 7 MiB crossed each NIC one way or the other, as frames of at most MTU + 14 bytes
        assert a["tx-bytes"] + a["rx-bytes"] - b["tx-bytes"] - b["rx-bytes"] >= 7 * MIB
        assert a["tx-frames"] - b["tx-frames"] >= 3 * MIB // (cluster2.config.net_mtu + 14)
        assert a["tx-dropped-bad"] == b["tx-dropped-bad"]
        assert a["tx-dropped-down"] == b["tx-dropped-down"]


def test_bridge_switches_the_frames_and_counts_them(cluster2):
    n0 = cluster2.node(0)
    before_nic = nic_counters(n0)
    before = cluster2.bridge_stats()
    sent, got = ping_received(n0.sh("ping -c 20 -i 0.05 -s 1000 -W 10 node1", timeout=60))
    after = cluster2.bridge_stats()
    after_nic = nic_counters(n0)
    assert sent == 20 and got >= 19   # (a last reply later than ~2 round trips is not waited for)
    assert after_nic["tx-frames"] - before_nic["tx-frames"] >= 20
    assert after_nic["rx-frames"] - before_nic["rx-frames"] >= got
    assert after_nic["tx-bytes"] - before_nic["tx-bytes"] >= 20 * 1042
    # the bridge's Ethernet counters: 20 requests in from node 0 and out to node 1, the replies back
    now = {p["node"]: p for p in after["ports"]}
    then = {p["node"]: p for p in before["ports"]}

    def moved(node, key):
        return now[node][key] - then[node][key]
    assert moved(0, "eth_frames_in") >= 20 and moved(1, "eth_frames_out") >= 20
    assert moved(1, "eth_frames_in") >= got and moved(0, "eth_frames_out") >= got
    assert moved(0, "eth_bytes_in") >= 20 * 1042
    assert moved(0, "eth_drops") == 0 and moved(1, "eth_drops") == 0


def wait_for(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s")


def bridge_down_and_back(c, devs):
    """SIGKILL the bridge, wait until every NIC lost its carrier, start the bridge again and wait
    until every guest's link is up again (operstate, not carrier: the kernel's link watch
    re-enables transmission, up to 1 s after the carrier returns, when it sets operstate)."""
    os.kill(c.bridge.pid, signal.SIGKILL)
    for n in c.nodes:
        wait_for(lambda: n.sh(f"cat /sys/class/net/{devs[n.id]}/carrier").strip() == "0", 20,
                 f"node {n.id} lost no carrier")
    c.restart_bridge()
    for n in c.nodes:
        wait_for(lambda: n.sh(f"cat /sys/class/net/{devs[n.id]}/operstate").strip() == "up", 20,
                 f"node {n.id}'s link did not come back")


def test_jumbo_mtu_and_carrier_that_follows_the_bridge(fresh_cluster):
    """net_mtu 9000: the guest takes the NIC's MTU and TCP uses 9 KB frames. Then the bridge dies:
    the NICs lose carrier (frames are dropped and counted, not queued); it comes back: carrier
    returns and the very first ping answers, after each of three restarts."""
    c = fresh_cluster(nodes=2, net_mtu=9000)
    n0, n1 = c.node(0), c.node(1)
    dev = iface(n0)
    devs = {n.id: iface(n) for n in c.nodes}
    assert n0.sh(f"cat /sys/class/net/{dev}/mtu").strip() == "9000"
    before = nic_counters(n1)
    want, got, size = transfer(n1, n0, 2, 8083)
    assert size == 2 * MIB and got == want
    after = nic_counters(n1)
    # jumbo frames: 2 MiB in far fewer frames than at 1514 bytes (1448 payload bytes each)
    assert after["tx-frames"] - before["tx-frames"] < 2 * MIB // 1448 // 2
    assert pings(n0, "node1", 2, size=8000) == (2, 2)

    base = nic_counters(n0)
    os.kill(c.bridge.pid, signal.SIGKILL)
    wait_for(lambda: n0.sh(f"cat /sys/class/net/{dev}/carrier").strip() == "0", 20, "node 0 lost no carrier")
    flags = re.search(r"<([A-Z_,-]*)>", n0.sh(f"ip link show dev {dev}")).group(1).split(",")
    assert "UP" in flags and "LOWER_UP" not in flags, flags   # up, without carrier
    down = nic_counters(n0)
    assert down["link-changes"] == base["link-changes"] + 1
    assert n0.exec("ping -c 2 -W 1 node1", timeout=30).rc != 0   # no carrier: nothing gets through
    c.restart_bridge()
    for n in (n0, n1):
        wait_for(lambda: n.sh(f"cat /sys/class/net/{devs[n.id]}/operstate").strip() == "up", 20,
                 f"node {n.id}'s link did not come back")
    assert nic_counters(n0)["link-changes"] == down["link-changes"] + 1
    for restart in range(3):
        if restart:
            bridge_down_and_back(c, devs)
        # Once both links are up, the FIRST frame gets through (a first ping was lost
        # in about one run of 3; docs/networking.md, caveats), both ways, and nothing the NICs
        # take while they have carrier is dropped.
        up = [nic_counters(n) for n in (n0, n1)]
        for src, dst in ((n0, "node1"), (n1, "node0")):
            if pings(src, dst, 1) != (1, 1):
                raise AssertionError(f"restart {restart + 1}: node {src.id}'s first ping to {dst} was lost; "
                                     f"NIC counters before {up}, now {[nic_counters(n) for n in (n0, n1)]}; "
                                     f"bridge {c.bridge_stats()}")
        later = [nic_counters(n) for n in (n0, n1)]
        for u, a in zip(up, later):
            assert a["tx-dropped-down"] == u["tx-dropped-down"]   # with carrier, nothing dropped
            assert a["rx-dropped-nic"] == u["rx-dropped-nic"]
            assert a["tx-frames"] > u["tx-frames"] and a["rx-frames"] > u["rx-frames"]
    assert pings(n0, "node1", 3) == (3, 3)


def test_net_off_gives_the_guest_no_nic(fresh_cluster):
    c = fresh_cluster(nodes=1, net=False)
    n0 = c.node(0)
    assert n0.sh("ls /sys/class/net").split() == ["lo"]
    assert "rackemu: no NIC with MAC 02:52:4b:00:00:00" in n0.console_text()
    with n0.qmp() as q:
        assert "rackemu-net" not in [p["name"] for p in q.execute("qom-list", path="/machine")]


def test_a_restored_node_talks_ip_again(fresh_cluster, tmp_path):
    """`node save` / `node restore` (the NIC's virtio state travels in the snapshot): after the
    restore the guest's interface, address and carrier are back and TCP data arrives intact."""
    c = fresh_cluster(nodes=2)
    n0, n1 = c.node(0), c.node(1)
    assert pings(n0, "node1", 2) == (2, 2)
    snap = tmp_path / "node1.snap"
    c.save_node(1, snap)
    c.restore_node(1, snap)
    dev = iface(n1)
    wait_for(lambda: n1.sh(f"cat /sys/class/net/{dev}/operstate").strip() == "up", 20,
             "node 1's link did not come back after the restore")
    assert "inet 198.18.0.2/15" in n1.sh(f"ip -4 addr show dev {dev}")
    want, got, size = transfer(n1, n0, 1, 8084)
    assert size == MIB and got == want
    assert pings(n1, "node0", 3) == (3, 3)
