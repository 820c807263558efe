#!/usr/bin/python3
"""Unimem benchmark: prints a table and writes CSV (not a test; figures vary by machine).

Measured in one run on a booted cluster (node 0 is the initiator, node 1 the owner):
  gas_{remote,local}_{load,store}_{median,p99}_us
                      one 8-byte access through the global address space window from guest user
                      space (`gas bench`), to node 1's memory and to node 0's own; medians over
                      --runs runs of --count accesses
  gas_{remote,local}_read_{ldr_x,ld1_4q}_mb_s
                      sequential loads of a --bulk region through the window, 8 and 64 bytes per
                      instruction (`gas check`), median over --runs
  cdma_{local_to_local,remote_to_local,local_to_remote}_{SIZE}_mb_s
                      cDMA copies through Linux's xilinx_dma (`cdma copy --repeat`), median of
                      --runs x 5 copies, for each size in --dma-sizes (at most 2M: source and
                      destination are the two halves of a 4 MiB export)
  mailbox_rtt_{median,p99}_us
                      user space on node 0 -> node 1's kernel (mbox_echo.ko callback, answer with
                      mailbox_send_message) -> node 0 (`mbox ping`, min(--count, 1000) round trips)
  gsas_{local,remote}_{OP}_{median,p99}_us
                      one GSAS request (atomic.h through the atomic service) from node 0 to board
                      0 (local) and board 1 (remote), one thread (`gsas bench`), median over --runs
  gsas_remote_{OP}_{T}t_ops_s
                      throughput of T threads on node 0 against board 1, for T in --gsas-threads

--transport direct,fabric boots one cluster per transport of one-sided memory (docs/fabric.md,
"Direct path"): direct (the default: a live peer's RAM file is copied directly) and fabric
(every access a request over the bridge; the machine's ram-dir is cleared). The gas and cdma
rows of the fabric cluster are in sections gas.fabric and cdma.fabric, and section "ratio" holds
fabric/direct for each metric both have (latency: >1 means direct is faster; MB/s: <1); a PNG
bar chart of those ratios is written beside the CSV.

usage: bench/unimem.py [--runs 3] [--count 2000] [--bulk 1M] [--dma-sizes 4K,64K,1M,2M] [--memory 256M]
                      [--gsas-count 300] [--gsas-threads 1,2,4] [--only gas,cdma,mailbox,gsas]
                      [--transport direct[,fabric]] [--csv FILE]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))

from rackemu.cluster import Cluster  # noqa: E402
from rackemu.config import build_dir, load_config  # noqa: E402
from benchlib import kv_lines, log, pyplot, run, save_figure, write_results  # noqa: E402

DMA_EXPORT = 4 << 20  # the cDMA section's buffer on each node
DMA_MAX = DMA_EXPORT // 2  # a copy reads one half and writes the other


def export(node, size, seed, tag):
    out = f"/tmp/bench-export-{tag}"
    node.sh(f"rm -f {out}; setsid gas export --size {size} --seed {seed} --out {out} --hold 3600 "
            f"</dev/null >/dev/null 2>&1 &")
    for _ in range(300):
        r = node.exec(f"cat {out}")
        if r.rc == 0 and b"gaddr=" in r.stdout:
            return int(kv_lines(r.stdout.decode())[0]["gaddr"], 16)
        time.sleep(0.1)
    raise SystemExit(f"gas export on node {node.id} did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=2000, help="accesses / round trips per run")
    ap.add_argument("--bulk", default="1M", help="region size for the bandwidth runs (at most 4M)")
    ap.add_argument("--dma-sizes", default="4K,64K,1M,2M",
                    help=f"cDMA copy sizes, each 1..{DMA_MAX >> 20}M (default 4K,64K,1M,2M)")
    ap.add_argument("--memory", default="256M")
    ap.add_argument("--gsas-count", type=int, default=300, help="GSAS requests per thread and run")
    ap.add_argument("--gsas-threads", default="1,2,4", help="thread counts for the GSAS throughput runs")
    ap.add_argument("--only", default="gas,cdma,mailbox,gsas", help="sections to run (comma-separated)")
    ap.add_argument("--transport", default="direct",
                    help="one-sided memory transports to compare: direct, fabric (comma-separated)")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "unimem.csv"))
    a = ap.parse_args()

    def size(x):
        return int(x[:-1]) << {"K": 10, "M": 20}[x[-1]] if x[-1] in "KM" else int(x)

    only = set(a.only.split(","))
    unknown = only - {"gas", "cdma", "mailbox", "gsas"}
    if unknown:
        ap.error(f"--only: unknown sections {sorted(unknown)} (gas, cdma, mailbox, gsas)")
    transports = [t for t in a.transport.split(",") if t]
    if not transports or set(transports) - {"direct", "fabric"}:
        ap.error("--transport: direct and/or fabric")
    try:
        bulk = size(a.bulk)
        dma_sizes = [size(x) for x in a.dma_sizes.split(",") if x]
    except (ValueError, KeyError, IndexError):
        ap.error("--bulk, --dma-sizes: byte counts such as 4096, 64K, 1M")
    if not 64 <= bulk <= 4 << 20:
        ap.error("--bulk: 64 bytes .. 4M")
    if "cdma" in only and (not dma_sizes or not all(1 <= x <= DMA_MAX for x in dma_sizes)):
        ap.error(f"--dma-sizes: each 1 .. {DMA_MAX >> 20}M (a copy's source and destination are the two halves of "
                 f"a {DMA_EXPORT >> 20} MiB export)")
    rows = []
    for t in transports:
        # fabric: clear the machine's ram-dir (a later -machine option is merged over the launcher's)
        over = {"qemu_args": ["-machine", "ram-dir="]} if t == "fabric" else {}
        cfg = load_config(None, {"nodes": 2, "name": "bench-unimem", "memory": a.memory, **over})
        log(f"booting 2 nodes (one-sided memory: {t})")
        sub = []
        with Cluster(cfg, log=lambda m: None) as c:
            n0, n1 = c.node(0), c.node(1)
            if "gas" in only:
                gas_section(a, n0, n1, bulk, sub)
            if "cdma" in only:
                cdma_section(a, n0, n1, dma_sizes, sub)
            if only & {"gas", "cdma"}:
                check_transport(n0, t)
            if t == transports[0] and "mailbox" in only:
                mailbox_section(a, n0, n1, sub)
            if t == transports[0] and "gsas" in only:
                gsas_section(a, n0, sub)
        rows += [(sec if t == "direct" else f"{sec}.{t}", m, v, u) for sec, m, v, u in sub]
    if len(transports) > 1:
        ratios(rows, a.csv)
    write_results(rows, a.csv)


def check_transport(n0, transport):
    """The cluster used the transport it was asked for: node 0's direct copies (GAS counters)."""
    c = run(n0, "gas info")[-1]
    direct = int(c["direct_reads"]) + int(c["direct_writes"])
    log(f"node 0: {direct} direct one-sided accesses, {c['timeouts']} timeouts")
    if (direct > 0) != (transport == "direct"):
        raise SystemExit(f"transport {transport}, but node 0 made {direct} direct accesses")


def ratios(rows, csv_path):
    """Append fabric/direct for every metric measured with both; plot them."""
    direct = {(sec, m): v for sec, m, v, _ in rows if "." not in sec}
    out = []
    for sec, m, v, u in rows:
        if sec.endswith(".fabric") and direct.get((sec[:-7], m)):
            out.append(("ratio", f"{sec[:-7]}_{m}_fabric_over_direct", v / direct[(sec[:-7], m)], "x"))
    rows += out
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(out) + 1.5))
    ax.barh([m for _, m, _, _ in out], [v for _, _, v, _ in out])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("fabric / direct (latency >1: direct faster; MB/s <1: direct faster)")
    save_figure(fig, Path(csv_path).with_suffix(".png"), dpi=100)


def gas_section(a, n0, n1, bulk, rows):
    g_remote = export(n1, bulk, 7, "n1")
    g_local = export(n0, bulk, 7, "n0")
    for where, g in (("remote", g_remote), ("local", g_local)):
        lat = {"load": [], "store": []}
        p99 = {"load": [], "store": []}
        for r in range(a.runs):
            for d in run(n0, f"gas bench --gaddr {g:#x} --count {a.count}"):
                lat[d["op"]].append(float(d["median_us"]))
                p99[d["op"]].append(float(d["p99_us"]))
        for op in ("load", "store"):
            rows.append(("gas", f"{where}_{op}_median_us", statistics.median(lat[op]), "us"))
            rows.append(("gas", f"{where}_{op}_p99_us", statistics.median(p99[op]), "us"))
        log(f"gas {where}: load {statistics.median(lat['load']):.1f} us, "
            f"store {statistics.median(lat['store']):.1f} us")
        # bandwidth: the bench's stores changed the first word; restore the pattern first
        run(n0, f"gas fill --gaddr {g:#x} --len 64 --seed 7 --width 8")
        bw = {"ldr_x": [], "ld1_4q": []}
        for r in range(a.runs):
            for d in run(n0, f"gas check --gaddr {g:#x} --len {bulk} --seed 7 --width 8 --width 64"):
                bw[d["width"]].append(float(d["mb_per_s"]))
        for w, v in bw.items():
            rows.append(("gas", f"{where}_read_{w}_mb_s", statistics.median(v), "MB/s"))


def cdma_section(a, n0, n1, dma_sizes, rows):
    log("cDMA copies")
    run(n0, "insmod /lib/modules/extra/xilinx_dma.ko && insmod /lib/modules/extra/unimem_dma.ko")
    g1 = export(n1, DMA_EXPORT, 7, "dma1")
    export(n0, DMA_EXPORT, 7, "dma0")  # node 0's buffer: its local address p0
    p0 = int(kv_lines(n0.exec("cat /tmp/bench-export-dma0").stdout.decode())[0]["local"], 16)
    half = DMA_MAX
    for sz in dma_sizes:  # main() refused sizes above half the export
        for name, src, dst in (("local_to_local", f"p:{p0:#x}", f"p:{p0 + half:#x}"),
                               ("remote_to_local", f"g:{g1:#x}", f"p:{p0:#x}"),
                               ("local_to_remote", f"p:{p0:#x}", f"g:{g1 + half:#x}")):
            v = [float(run(n0, f"cdma copy --src {src} --dst {dst} --len {sz} --repeat 5")[0]["mb_per_s"])
                 for _ in range(a.runs)]
            rows.append(("cdma", f"{name}_{sz}_mb_s", statistics.median(v), "MB/s"))


def mailbox_section(a, n0, n1, rows):
    log("mailbox round trips through node 1's kernel")
    run(n1, "insmod /lib/modules/extra/mbox_echo.ko")
    rtt, rp99 = [], []
    for r in range(a.runs):
        d = run(n0, f"mbox ping --node 1 --count {min(a.count, 1000)}")[-1]
        rtt.append(float(d["rtt_median_us"]))
        rp99.append(float(d["rtt_p99_us"]))
    rows.append(("mailbox", "rtt_median_us", statistics.median(rtt), "us"))
    rows.append(("mailbox", "rtt_p99_us", statistics.median(rp99), "us"))


def gsas_section(a, n0, rows):
    ops = ("ping", "read64", "write64", "cas", "fad", "swap", "write128", "read4k")
    for where, board in (("local", 0), ("remote", 1)):
        for op in ops:
            med, p99 = [], []
            for _ in range(a.runs):
                count = max(a.gsas_count // 10, 10) if op == "read4k" else a.gsas_count
                d = run(n0, f"gsas bench --board {board} --op {op} --count {count}")[-1]
                med.append(float(d["latency_median_us"]))
                p99.append(float(d["latency_p99_us"]))
            rows.append(("gsas", f"{where}_{op}_median_us", statistics.median(med), "us"))
            rows.append(("gsas", f"{where}_{op}_p99_us", statistics.median(p99), "us"))
            log(f"gsas {where} {op}: {statistics.median(med):.1f} us")
    for op in ("read64", "fad"):
        for t in [int(x) for x in a.gsas_threads.split(",") if x]:
            v = [float(run(n0, f"gsas bench --board 1 --op {op} --threads {t} --count {a.gsas_count}")[-1]["ops_per_s"])
                 for _ in range(a.runs)]
            rows.append(("gsas", f"remote_{op}_{t}t_ops_s", statistics.median(v), "1/s"))
            log(f"gsas remote {op} x{t} threads: {statistics.median(v):.0f} ops/s")


if __name__ == "__main__":
    main()
