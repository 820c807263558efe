#!/usr/bin/env python3
"""soNUMA RMC / LightSABRes benchmark: prints tables and writes CSV (not a test; wall-clock
figures vary by machine, modeled figures come from the device's Table 2 timing model).

Boots 2 nodes (node 0 owns the objects, node 1 reads them) and runs:
  micro   rmc-bench: remote read vs SABRe vs SABRe without speculation, object sizes 64 B..8 KiB;
          synchronous latency (wall median/p99 us, modeled median ns) and throughput with
          --window requests in flight (ops/s, wall MB/s, modeled GB/s); medians over --runs runs
  kv      rmc-kv, the FaRM-style store (seed 000 sec. 7.2-7.3): per-cache-line-version baseline vs
          SABRe layout, object sizes --sizes, writers 0..--vcpus on the owner, --threads readers;
          reads/s, aborts and retries per read, torn objects (must be 0), latencies

CSV: build/bench/sonuma.csv (section,metric,value,unit), plus the raw per-run CSVs of the guest
programs: build/bench/sonuma_micro.csv and build/bench/sonuma_kv.csv.

usage: bench/sonuma.py [--runs 3] [--iters 200] [--window 16] [--sizes 128,1024,8192]
                       [--seconds 4] [--threads 1] [--vcpus 2] [--only micro,kv] [--quick] [--csv FILE]
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
from benchlib import kv_lines, log, run, write_results  # noqa: E402

OPS = ("read", "sabre", "sabre-nospec")


def stop(node, prog):
    node.exec(f"killall {prog} 2>/dev/null; for i in $(seq 100); do pidof {prog} >/dev/null || break; "
              f"sleep 0.05; done; true")


def micro(a, n0, n1, rows, raw):
    sizes = "64,128,256,512,1024,2048,4096,8192" if not a.quick else "64,128,2048,8192"
    n0.sh("setsid rmc-bench serve --ctx 9 </dev/null >/tmp/bench-serve 2>&1 &")
    n1.exec("rm -f /tmp/micro.csv")
    for i in range(a.runs):
        log(f"micro run {i + 1}/{a.runs}")
        run(n1, f"rmc-bench run --node 0 --ctx 9 --iters {a.iters} --window {a.window} --sizes {sizes} "
                f"--mode both --csv /tmp/micro.csv", timeout=900)
    stop(n0, "rmc-bench")
    text = n1.exec("cat /tmp/micro.csv").stdout.decode()
    raw.write_text(text)
    lines = [l.split(",") for l in text.splitlines()]
    head, data = lines[0], lines[1:]
    col = {k: i for i, k in enumerate(head)}
    table = {}
    for d in data:
        table.setdefault((d[col["mode"]], d[col["op"]], int(d[col["size"]])), []).append(d)

    def med(key, field):
        return statistics.median(float(d[col[field]]) for d in table[key])

    print(f"\nFig. 7a shape: modeled latency (ns), median of {a.runs} runs x {a.iters} requests")
    print(f"{'size':>6} {'read':>8} {'sabre':>8} {'no-spec':>8} {'sabre-read':>11} {'nospec-sabre':>13}"
          f" | wall median us: {'read':>7} {'sabre':>7} {'no-spec':>7}")
    for size in sorted({k[2] for k in table}):
        m = {op: med(("lat", op, size), "model_med_ns") for op in OPS}
        w = {op: med(("lat", op, size), "wall_med_us") for op in OPS}
        print(f"{size:6} {m['read']:8.0f} {m['sabre']:8.0f} {m['sabre-nospec']:8.0f} {m['sabre'] - m['read']:11.0f}"
              f" {m['sabre-nospec'] - m['sabre']:13.0f} | {'':16} {w['read']:7.1f} {w['sabre']:7.1f}"
              f" {w['sabre-nospec']:7.1f}")
        for op in OPS:
            rows.append(("micro", f"{op}_{size}_model_ns", m[op], "ns"))
            rows.append(("micro", f"{op}_{size}_wall_median_us", w[op], "us"))
            rows.append(("micro", f"{op}_{size}_wall_p99_us", med(("lat", op, size), "wall_p99_us"), "us"))
            rows.append(("micro", f"{op}_{size}_ops_s", med(("tput", op, size), "ops_per_s"), "ops/s"))
            rows.append(("micro", f"{op}_{size}_wall_mb_s", med(("tput", op, size), "wall_mb_per_s"), "MB/s"))
            rows.append(("micro", f"{op}_{size}_model_gb_s", med(("tput", op, size), "model_gb_per_s"), "GB/s"))


def kv(a, n0, n1, rows, raw):
    sizes = [int(s) for s in a.sizes.split(",")]
    writers = list(range(0, a.vcpus + 1)) if not a.quick else [0, a.vcpus]
    n1.exec("rm -f /tmp/kv.csv")
    print(f"\nFaRM-style store: {a.threads} reader thread(s) on node 1, {a.seconds} s per point, 100 objects")
    print(f"{'layout':9} {'size':>5} {'writers':>7} {'reads/s':>9} {'aborts/rd':>9} {'retries/rd':>10} {'torn':>5}"
          f" {'wall_med_us':>11} {'model_ns':>8} {'upd/s':>10}")
    torn_total = 0
    for size in sizes:
        for layout in ("baseline", "sabre"):
            for w in writers:
                n0.sh(f"rm -f /tmp/kvs; setsid rmc-kv serve --ctx 8 --layout {layout} --size {size} --objects 100 "
                      f"--writers {w} --seconds {a.seconds + 3} </dev/null >/tmp/kvs 2>&1 &")
                for _ in range(100):
                    if b"serving" in n0.exec("cat /tmp/kvs").stdout:
                        break
                    time.sleep(0.1)
                d = run(n1, f"rmc-kv read --node 0 --ctx 8 --layout {layout} --size {size} --objects 100 "
                            f"--threads {a.threads} --seconds {a.seconds} --csv /tmp/kv.csv", timeout=900)[-1]
                stop(n0, "rmc-kv")
                srv = kv_lines(n0.exec("cat /tmp/kvs").stdout.decode())
                upd = float(srv[-1].get("updates_per_s", 0)) if srv and "updates_per_s" in srv[-1] else 0.0
                reads = max(1, int(d["reads"]))
                ab, rt, torn = int(d["aborts"]) / reads, int(d["retries"]) / reads, int(d["torn"])
                torn_total += torn
                print(f"{layout:9} {size:5} {w:7} {float(d['reads_per_s']):9.0f} {ab:9.4f} {rt:10.4f} {torn:5}"
                      f" {float(d['wall_med_us']):11.1f} {int(d['model_med_ns']):8} {upd:10.0f}")
                tag = f"{layout}_{size}_w{w}"
                rows.append(("kv", f"{tag}_reads_s", float(d["reads_per_s"]), "reads/s"))
                rows.append(("kv", f"{tag}_aborts_per_read", ab, "ratio"))
                rows.append(("kv", f"{tag}_retries_per_read", rt, "ratio"))
                rows.append(("kv", f"{tag}_torn", float(torn), "objects"))
                rows.append(("kv", f"{tag}_wall_median_us", float(d["wall_med_us"]), "us"))
                rows.append(("kv", f"{tag}_model_median_ns", float(d["model_med_ns"]), "ns"))
                rows.append(("kv", f"{tag}_writer_updates_s", upd, "updates/s"))
    raw.write_text(n1.exec("cat /tmp/kv.csv").stdout.decode())
    if torn_total:
        print(f"TORN OBJECTS ACCEPTED: {torn_total}")
    return torn_total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="microbenchmark runs (medians are taken over them)")
    ap.add_argument("--iters", type=int, default=200, help="synchronous requests per op and size and run")
    ap.add_argument("--window", type=int, default=16, help="requests in flight for the throughput runs")
    ap.add_argument("--sizes", default="128,1024,8192", help="store object sizes (multiples of 64, >= 128)")
    ap.add_argument("--seconds", type=int, default=4, help="seconds per store point")
    ap.add_argument("--threads", type=int, default=1, help="reader threads on node 1")
    ap.add_argument("--vcpus", type=int, default=2, help="vCPUs per node; the store sweeps 0..vcpus writers")
    ap.add_argument("--memory", default="256M")
    ap.add_argument("--only", default="micro,kv", help="sections to run (comma-separated: micro, kv)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and writer counts, 1 run, 2 s points")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "sonuma.csv"))
    a = ap.parse_args()
    only = set(a.only.split(","))
    if only - {"micro", "kv"}:
        ap.error(f"--only: unknown sections {sorted(only - {'micro', 'kv'})} (micro, kv)")
    if a.quick:
        a.runs, a.seconds, a.iters = 1, 2, min(a.iters, 50)
    if a.runs < 1 or a.iters < 2 or a.seconds < 1 or not 1 <= a.threads <= 8 or not 1 <= a.vcpus <= 8:
        ap.error("--runs, --seconds >= 1, --iters >= 2, --threads and --vcpus 1..8")
    out = Path(a.csv).parent
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    torn = 0
    cfg = load_config(None, {"nodes": 2, "name": "bench-sonuma", "memory": a.memory, "vcpus": a.vcpus})
    log(f"booting 2 nodes ({a.vcpus} vCPUs each)")
    with Cluster(cfg, log=lambda m: None) as c:
        n0, n1 = c.node(0), c.node(1)
        if "micro" in only:
            micro(a, n0, n1, rows, out / "sonuma_micro.csv")
        if "kv" in only:
            torn = kv(a, n0, n1, rows, out / "sonuma_kv.csv")
    print()
    write_results(rows, a.csv)
    return 1 if torn else 0


if __name__ == "__main__":
    sys.exit(main())
