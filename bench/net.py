#!/usr/bin/env python3
"""IP networking between two nodes over the fabric (docs/networking.md): ping round-trip time
and TCP throughput, per NIC MTU. Not a test: wall-clock figures measure the emulator (two guests
under TCG, virtio-net, the port's rings, the bridge's switch) on this host, and vary with its load.

For each MTU in --mtus it boots a 2-node cluster (--name, default netbench; stopped again at the
end, also on errors and Ctrl-C) with that `net_mtu`, then:
  ping   node0 pings node1 (--pings requests per run, 0.1 s apart) with payloads of 56 and
         1400 bytes; the guest's per-reply times give the median and p99 RTT of each run
  tcp    node0 fetches a file of --size-mib MiB of random bytes from node1's busybox httpd with
         wget (one TCP connection); throughput = bytes / the guest's elapsed time (/proc/uptime,
         10 ms resolution); the SHA-256 is compared on both sides (a mismatch stops the benchmark)
--runs runs of each; the table gives the median over runs (p99: the median of the runs' p99s).

Output: a table on stdout, build/bench/net.csv (section,metric,value,unit), every run in
build/bench/net_runs.csv (mtu,measure,run,value,extra: ping median us and p99 us; tcp Mbit/s and
seconds) and build/bench/net.png (python3-matplotlib).

examples:
  bench/net.py --quick          MTU 1500 only, 1 run, 4 MiB (~1 min on 2 host cores)
  bench/net.py                  MTUs 1500 and 9000, 3 runs, 16 MiB
"""
import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import log, pyplot, save_figure, write_results  # noqa: E402

PING_SIZES = (56, 1400)
HTTP_PORT = 8090


def sh(node, cmd, timeout=600):
    r = node.exec(cmd, timeout=timeout)
    if r.rc != 0:
        raise SystemExit(f"node {node.id}: `{cmd}` failed (rc {r.rc}): {r.stdout.decode()} {r.stderr.decode()}")
    return r.stdout.decode()


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def ping_run(n0, size, count):
    out = sh(n0, f"ping -c {count} -i 0.1 -s {size} -W 5 node1", timeout=count + 60)
    times = [float(t) for t in re.findall(r"time=([0-9.]+) ms", out)]
    if len(times) != count:
        raise SystemExit(f"ping -s {size}: {len(times)} of {count} replies:\n{out}")
    return statistics.median(times) * 1000, pct(times, 99) * 1000   # us


def tcp_run(n0, n1, size_mib):
    want = sh(n1, "sha256sum /tmp/netbench/blob").split()[0]
    out = sh(n0, f"a=$(cut -d' ' -f1 /proc/uptime); wget -q -O /tmp/netbench.rx http://node1:{HTTP_PORT}/blob; "
                 f"b=$(cut -d' ' -f1 /proc/uptime); echo elapsed=$a,$b; sha256sum /tmp/netbench.rx; "
                 f"wc -c < /tmp/netbench.rx; rm -f /tmp/netbench.rx", timeout=1800)
    a, b = re.search(r"elapsed=([0-9.]+),([0-9.]+)", out).groups()
    lines = out.splitlines()
    got, nbytes = lines[1].split()[0], int(lines[2])
    if got != want or nbytes != size_mib << 20:
        raise SystemExit(f"TCP transfer corrupted: {nbytes} bytes, sha256 {got} != {want}")
    secs = max(float(b) - float(a), 0.01)
    return nbytes * 8 / secs / 1e6, secs   # Mbit/s


def nic_counters(node):
    with node.qmp() as q:
        return {k: q.execute("qom-get", path="/machine/rackemu-net", property=k)
                for k in ("tx-frames", "tx-deferred", "rx-dropped-full", "rx-queue-max")}


def bench_mtu(args, mtu, raw):
    cfg = load_config(overrides={"name": args.name, "nodes": 2, "memory": args.memory, "net_mtu": mtu})
    rows = []
    log(f"MTU {mtu}: booting 2 nodes")
    with Cluster(cfg, log=lambda m: None) as c:
        n0, n1 = c.node(0), c.node(1)
        sh(n0, "ping -c 2 -W 5 node1")   # ARP, warm-up
        for size in PING_SIZES:
            med, p99 = [], []
            for r in range(args.runs):
                m, p = ping_run(n0, size, args.pings)
                med.append(m)
                p99.append(p)
                raw.append((mtu, f"ping{size}", r, m, p))
                log(f"MTU {mtu}: ping -s {size} run {r}: median {m:.0f} us, p99 {p:.0f} us")
            rows.append((f"mtu{mtu}", f"ping {size} B RTT median", statistics.median(med), "us"))
            rows.append((f"mtu{mtu}", f"ping {size} B RTT p99", statistics.median(p99), "us"))
        sh(n1, f"mkdir -p /tmp/netbench && dd if=/dev/urandom of=/tmp/netbench/blob bs=1M count={args.size_mib} "
               f"2>/dev/null && httpd -p {HTTP_PORT} -h /tmp/netbench")
        before = nic_counters(n1)
        tput = []
        for r in range(args.runs):
            mbps, secs = tcp_run(n0, n1, args.size_mib)
            tput.append(mbps)
            raw.append((mtu, "tcp", r, mbps, secs))
            log(f"MTU {mtu}: TCP {args.size_mib} MiB run {r}: {mbps:.1f} Mbit/s ({secs:.2f} s)")
        after = nic_counters(n1)
        rows.append((f"mtu{mtu}", f"TCP {args.size_mib} MiB node1->node0", statistics.median(tput), "Mbit/s"))
        frames = after["tx-frames"] - before["tx-frames"]
        rows.append((f"mtu{mtu}", "TCP frames sent by node1 per run", frames / args.runs, "frames"))
        rows.append((f"mtu{mtu}", "TCP ring-full holds (node1 tx-deferred)",
                     (after["tx-deferred"] - before["tx-deferred"]) / args.runs, "per run"))
        rows.append((f"mtu{mtu}", "node1 rx queue high-water", after["rx-queue-max"], "frames"))
    return rows


def plot(rows, mtus, png):
    plt = pyplot()
    if plt is None:
        return
    get = {(sec, metric): v for sec, metric, v, _ in rows}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.35
    for k, size in enumerate(PING_SIZES):
        xs = [i + (k - 0.5) * width for i in range(len(mtus))]
        ax1.bar(xs, [get[(f"mtu{m}", f"ping {size} B RTT median")] for m in mtus], width, label=f"{size} B median")
        ax1.scatter(xs, [get[(f"mtu{m}", f"ping {size} B RTT p99")] for m in mtus], marker="_", s=200,
                    color="black", label="p99" if k == 0 else None)
    ax1.set_xticks(range(len(mtus)), [f"MTU {m}" for m in mtus])
    ax1.set_ylabel("round-trip time (us, wall)")
    ax1.set_title("ping node0 -> node1")
    ax1.legend()
    tkey = [k for k in get if k[1].startswith("TCP ") and "node1->node0" in k[1]]
    ax2.bar(range(len(mtus)), [get[next(k for k in tkey if k[0] == f"mtu{m}")] for m in mtus])
    ax2.set_xticks(range(len(mtus)), [f"MTU {m}" for m in mtus])
    ax2.set_ylabel("Mbit/s (wall)")
    ax2.set_title("TCP (wget from httpd)")
    fig.suptitle("rackemu IP over the fabric: 2 TCG guests, virtio-net, bridge switch")
    save_figure(fig, png)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="netbench", help="cluster name (default netbench)")
    ap.add_argument("--memory", default="256M", help="guest RAM per node (default 256M)")
    ap.add_argument("--mtus", default="1500,9000", help="NIC MTUs to measure, comma-separated (68..9000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement (default 3)")
    ap.add_argument("--pings", type=int, default=50, help="ping requests per run (default 50)")
    ap.add_argument("--size-mib", type=int, default=16, help="TCP transfer size in MiB (default 16)")
    ap.add_argument("--quick", action="store_true", help="MTU 1500, 1 run, 20 pings, 4 MiB")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "net.csv"), help="summary CSV path")
    args = ap.parse_args()
    if args.quick:
        args.mtus, args.runs, args.pings, args.size_mib = "1500", 1, 20, 4
    try:
        mtus = [int(m) for m in args.mtus.split(",")]
    except ValueError:
        ap.error(f"--mtus: {args.mtus!r} is not a comma-separated list of integers")
    if args.runs < 1 or args.pings < 1 or not 1 <= args.size_mib <= 128:
        ap.error("--runs and --pings must be at least 1, --size-mib 1..128")
    rows, raw = [], []
    for mtu in mtus:
        rows += bench_mtu(args, mtu, raw)
    write_results(rows, args.csv)
    raw_path = Path(args.csv).with_name(Path(args.csv).stem + "_runs.csv")
    with open(raw_path, "w") as f:
        f.write("mtu,measure,run,value,extra\n")
        for r in raw:
            f.write(",".join(str(x) for x in r) + "\n")
    print(f"CSV (every run): {raw_path}")
    plot(rows, mtus, Path(args.csv).with_suffix(".png"))


if __name__ == "__main__":
    main()
