#!/usr/bin/env python3
"""soNUMA RMC / LightSABRes benchmark: prints tables and writes CSV (not a test; wall-clock
figures vary by machine and measure the emulator under TCG, modeled figures come from the
device's Table 2 timing model: compare shapes, never wall against modeled).

Boots its own cluster (--name, default rmcbench; --nodes, default 2; stopped again at the end,
also on errors and Ctrl-C). Node 0 owns the objects, node 1 runs the microbenchmark, nodes
1..N-1 read the store (each with --threads reader threads, one QP each).

  micro   rmc-bench (seed 000 sec. 7.1, Fig. 7a): remote read vs SABRe vs SABRe without
          speculation, object sizes --micro-sizes; synchronous latency (wall median/p99 us,
          modeled median ns) and throughput with --window requests in flight (ops/s, wall MB/s,
          modeled MB/s); medians over --runs runs. Raw rows: build/bench/sonuma_micro.csv
  kv      rmc-kv, the FaRM-style store (sec. 7.2-7.3): per-cache-line-version baseline vs SABRe
          layout x object sizes --sizes x writers 0..--vcpus on the owner (CREW, pinned to vCPUs);
          reads/s, aborts and retries per read, torn objects (must be 0), latencies, writer
          updates/s. One row per point: build/bench/sonuma_kv.csv

Summary (section,metric,value,unit): build/bench/sonuma.csv (--csv). Exit status 1 if a reader
accepted a torn object, saw a SABRe version differing from its CQE's, or failed.
--window-delay-ns N sets the device property sabre-window-delay-ns (widens the SABRe window of
vulnerability in host time, so in-window aborts become frequent; modeled latencies unchanged).

examples:
  bench/sonuma.py --quick                 2 nodes, a small sweep (~30 s on 2 host cores)
  bench/sonuma.py                         the full sweep (~2-3 min)
  bench/sonuma.py --only kv --nodes 3 --threads 2 --window-delay-ns 20000
"""
import argparse
import concurrent.futures
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
MICRO_CTX, KV_CTX = 9, 8
# every node registers the contexts with this access key (docs/rmc-driver.md)
KEY = "0x5eedbe4c40fab1e5"


def stop(node, prog):
    """Stop `prog` on the node and wait until it is gone (its context with it)."""
    node.exec(f"killall {prog} 2>/dev/null; for i in $(seq 200); do pidof {prog} >/dev/null || break; "
              f"sleep 0.05; done; true")


def start_detached(node, cmd, out, ready, what):
    """Start cmd detached on the node, wait until its output (file `out`) contains `ready`."""
    node.sh(f"rm -f {out}; setsid {cmd} </dev/null >{out} 2>&1 &")
    for _ in range(200):
        text = node.exec(f"cat {out}").stdout.decode(errors="replace")
        if ready in text:
            return text
        if "rmc-" in text and ":" in text and "serving" not in text:
            raise SystemExit(f"node {node.id}: {what} failed: {text}")
        time.sleep(0.1)
    raise SystemExit(f"node {node.id}: {what} did not start: {node.exec(f'cat {out}').stdout.decode()}")


def parse_csv(text):
    lines = [ln.split(",") for ln in text.strip().splitlines()]
    if not lines:
        return [], []
    return lines[0], [dict(zip(lines[0], ln)) for ln in lines[1:]]


def micro(a, n0, n1, rows, raw_path):
    sizes = a.micro_sizes
    start_detached(n0, f"rmc-bench serve --ctx {MICRO_CTX} --key {KEY}", "/tmp/bench-serve", "serving",
                   "rmc-bench serve")
    head, data = None, []
    try:
        for i in range(a.runs):
            log(f"micro run {i + 1}/{a.runs}")
            n1.exec("rm -f /tmp/micro.csv")
            run(n1, f"rmc-bench run --node 0 --ctx {MICRO_CTX} --key {KEY} --op all --iters {a.iters} "
                    f"--window {a.window} "
                    f"--tput-ops {a.tput_ops} --sizes {sizes} --mode both {'--spin ' if a.spin else ''}"
                    f"--csv /tmp/micro.csv", timeout=1800)
            head, d = parse_csv(n1.exec("cat /tmp/micro.csv").stdout.decode())
            for r in d:
                r["run"] = str(i + 1)
            data += d
    finally:
        stop(n0, "rmc-bench")
    cols = ["run"] + head
    raw_path.write_text(",".join(cols) + "\n" + "".join(",".join(r[c] for c in cols) + "\n" for r in data))
    table = {}
    for r in data:
        table.setdefault((r["mode"], r["op"], int(r["size"])), []).append(r)

    def med(key, field):
        return statistics.median(float(r[field]) for r in table[key])

    sz = sorted({k[2] for k in table})
    errors = sum(int(r["errors"]) for r in data)
    print(f"\nFig. 7a shape: modeled latency (ns) per object size, median of {a.runs} run(s) x {a.iters} "
          f"synchronous requests; node 1 -> node 0")
    print(f"{'size':>6} {'read':>7} {'sabre':>7} {'no-spec':>7} {'sabre-read':>10} {'nospec-sabre':>12}"
          f" {'nospec/sabre':>12} | wall med us: {'read':>7} {'sabre':>7} {'no-spec':>7}")
    shape = []
    for size in sz:
        m = {op: med(("lat", op, size), "model_med_ns") for op in OPS}
        w = {op: med(("lat", op, size), "wall_med_us") for op in OPS}
        print(f"{size:6} {m['read']:7.0f} {m['sabre']:7.0f} {m['sabre-nospec']:7.0f} {m['sabre'] - m['read']:10.0f}"
              f" {m['sabre-nospec'] - m['sabre']:12.0f} {m['sabre-nospec'] / m['sabre']:12.2f} | {'':12}"
              f" {w['read']:7.1f} {w['sabre']:7.1f} {w['sabre-nospec']:7.1f}")
        shape.append((size, m))
        for op in OPS:
            rows.append(("micro", f"{op}_{size}_model_ns", m[op], "ns"))
            rows.append(("micro", f"{op}_{size}_wall_median_us", w[op], "us"))
            rows.append(("micro", f"{op}_{size}_wall_p99_us", med(("lat", op, size), "wall_p99_us"), "us"))
    print(f"\nthroughput: {a.window} requests in flight, {a.tput_ops} requests, median of {a.runs} run(s)")
    print(f"{'size':>6} | {'ops/s':>27} | {'wall MB/s':>27} | {'modeled MB/s':>27}")
    print(f"{'':6} | {'read':>8} {'sabre':>8} {'no-spec':>9} | {'read':>8} {'sabre':>8} {'no-spec':>9} |"
          f" {'read':>8} {'sabre':>8} {'no-spec':>9}")
    for size in sz:
        o = {op: med(("tput", op, size), "ops_per_s") for op in OPS}
        wm = {op: med(("tput", op, size), "wall_mb_per_s") for op in OPS}
        mm = {op: med(("tput", op, size), "model_mb_per_s") for op in OPS}
        print(f"{size:6} | {o['read']:8.0f} {o['sabre']:8.0f} {o['sabre-nospec']:9.0f} |"
              f" {wm['read']:8.1f} {wm['sabre']:8.1f} {wm['sabre-nospec']:9.1f} |"
              f" {mm['read']:8.0f} {mm['sabre']:8.0f} {mm['sabre-nospec']:9.0f}")
        for op in OPS:
            rows.append(("micro", f"{op}_{size}_ops_s", o[op], "ops/s"))
            rows.append(("micro", f"{op}_{size}_wall_mb_s", wm[op], "MB/s"))
            rows.append(("micro", f"{op}_{size}_model_mb_s", mm[op], "MB/s"))
    # the shape the paper reports (design doc sec. 5): SABRe ~ read, no-spec slower for > 1 block
    ok_eq = all(abs(m["sabre"] - m["read"]) <= 4 for s, m in shape if s <= 2048)
    ok_ns = all(m["sabre-nospec"] > m["sabre"] for s, m in shape if s > 64)
    ok_1b = all(m["sabre-nospec"] == m["sabre"] for s, m in shape if s == 64)
    print(f"shape: sabre - read <= 4 ns up to 2 KiB: {'yes' if ok_eq else 'NO'};"
          f" no-spec slower for every multi-block size: {'yes' if ok_ns else 'NO'};"
          f" equal at one block: {'yes' if ok_1b else 'NO'}; request errors: {errors}")
    print(f"raw rows: {raw_path}")
    return errors


def kv(a, nodes, rows, raw_path):
    n0, readers = nodes[0], nodes[1:]
    sizes = [int(s) for s in a.sizes.split(",")]
    writers = list(range(0, a.vcpus + 1)) if not a.quick else sorted({0, a.vcpus})
    cols = ["layout", "size", "objects", "writers", "reader_nodes", "threads", "seconds", "reads", "reads_per_s",
            "aborts", "aborts_locked", "aborts_window", "aborts_validate", "retries", "aborts_per_read",
            "retries_per_read", "max_attempts", "torn", "version_mismatch",
            "errors", "wall_med_us", "wall_p99_us", "read_med_us", "model_med_ns", "model_p99_ns",
            "writer_updates", "writer_updates_per_s", "window_delay_ns"]
    out = []
    print(f"\nFaRM-style store: {a.objects} objects on node 0, {len(readers)} reader node(s) x {a.threads} thread(s), "
          f"{a.seconds} s per point (reads/s summed over reader nodes, latencies: mean of their medians;\n"
          f"L/W/V: SABRe aborts because the version was odd / a block changed in the window / the validate"
          f" stage read another version; retries/op: re-reads after an abort or an inconsistent baseline read)")
    print(f"{'layout':9} {'size':>5} {'writers':>7} {'reads/s':>9} {'aborts/op':>9} {'L/W/V':>14} {'retries/op':>10}"
          f" {'wall_med_us':>11} {'read_med_us':>11} {'model_ns':>8} {'upd/s':>10} {'torn':>5}")
    bad = 0
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(readers))
    for size in sizes:
        for layout in ("baseline", "sabre"):
            for w in writers:
                start_detached(n0, f"rmc-kv serve --ctx {KV_CTX} --key {KEY} --layout {layout} --size {size} "
                                   f"--objects {a.objects} --writers {w}", "/tmp/kvs", "serving",
                               "rmc-kv serve")
                cmd = (f"rmc-kv read --node 0 --ctx {KV_CTX} --key {KEY} --layout {layout} --size {size} "
                       f"--objects {a.objects} "
                       f"--threads {a.threads} --seconds {a.seconds}")
                try:
                    futs = [pool.submit(n.exec, cmd, a.seconds + 120) for n in readers]
                    res = [f.result() for f in futs]
                finally:
                    stop(n0, "rmc-kv")
                srv = kv_lines(n0.exec("cat /tmp/kvs").stdout.decode())
                upd = srv[-1] if srv and "updates_per_s" in srv[-1] else {}
                ds = []
                for n, r in zip(readers, res):
                    lines = kv_lines(r.stdout.decode())
                    if not lines or "torn" not in lines[-1]:
                        raise SystemExit(f"node {n.id}: `{cmd}` gave no result (rc {r.rc}): "
                                         f"{r.stdout.decode()} {r.stderr.decode()}")
                    if r.rc != 0:
                        log(f"node {n.id}: rmc-kv read exited {r.rc}: {r.stderr.decode().strip()}")
                    ds.append(lines[-1])

                def tot(k):
                    return sum(float(d[k]) for d in ds)

                def mean(k):
                    return statistics.mean(float(d[k]) for d in ds)

                reads = max(1.0, tot("reads"))
                row = {"layout": layout, "size": size, "objects": a.objects, "writers": w,
                       "reader_nodes": len(readers), "threads": a.threads, "seconds": a.seconds,
                       "reads": int(tot("reads")), "reads_per_s": round(tot("reads_per_s"), 1),
                       "aborts": int(tot("aborts")), "aborts_locked": int(tot("aborts_locked")),
                       "aborts_window": int(tot("aborts_window")), "aborts_validate": int(tot("aborts_validate")),
                       "retries": int(tot("retries")),
                       "aborts_per_read": round(tot("aborts") / reads, 5),
                       "retries_per_read": round(tot("retries") / reads, 5),
                       "max_attempts": int(max(float(d["max_attempts"]) for d in ds)),
                       "torn": int(tot("torn")), "version_mismatch": int(tot("version_mismatch")),
                       "errors": int(tot("errors")), "wall_med_us": round(mean("wall_med_us"), 1),
                       "wall_p99_us": round(mean("wall_p99_us"), 1), "read_med_us": round(mean("read_med_us"), 1),
                       "model_med_ns": round(mean("model_med_ns")), "model_p99_ns": round(mean("model_p99_ns")),
                       "writer_updates": int(float(upd.get("updates", 0))),
                       "writer_updates_per_s": round(float(upd.get("updates_per_s", 0)), 1),
                       "window_delay_ns": a.window_delay_ns}
                out.append(row)
                bad += row["torn"] + row["version_mismatch"] + row["errors"]
                torn_s = f"{row['torn']:5}" if not row["torn"] else f"{row['torn']:5} <-- TORN OBJECTS ACCEPTED"
                lwv = f"{row['aborts_locked']}/{row['aborts_window']}/{row['aborts_validate']}"
                print(f"{layout:9} {size:5} {w:7} {row['reads_per_s']:9.0f} {row['aborts_per_read']:9.4f} {lwv:>14}"
                      f" {row['retries_per_read']:10.4f} {row['wall_med_us']:11.1f}"
                      f" {row['read_med_us']:11.1f} {row['model_med_ns']:8} {row['writer_updates_per_s']:10.0f}"
                      f" {torn_s}",
                      flush=True)
                tag = f"{layout}_{size}_w{w}"
                for k, unit in (("reads_per_s", "reads/s"), ("aborts_per_read", "ratio"),
                                ("retries_per_read", "ratio"), ("torn", "objects"), ("wall_med_us", "us"),
                                ("read_med_us", "us"), ("model_med_ns", "ns"), ("writer_updates_per_s", "updates/s")):
                    rows.append(("kv", f"{tag}_{k}", float(row[k]), unit))
    pool.shutdown()
    raw_path.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in out))
    torn = sum(r["torn"] for r in out)
    sabre_w = [r for r in out if r["layout"] == "sabre" and r["writers"] > 0]
    base_w = [r for r in out if r["layout"] == "baseline" and r["writers"] > 0]
    print(f"torn objects accepted: {torn} {'(OK)' if not torn else '<-- FAILURE'};"
          f" SABRe aborts with writers: {sum(r['aborts'] for r in sabre_w)} in {len(sabre_w)} point(s)"
          f" ({sum(1 for r in sabre_w if r['aborts'] == 0)} point(s) without any);"
          f" baseline inconsistent reads with writers: {sum(r['retries'] for r in base_w)}")
    print(f"rows: {raw_path}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2, help="cluster size, >= 2 (node 0 owns, nodes 1.. read)")
    ap.add_argument("--name", default="rmcbench", help="cluster name (run dir /tmp/rackemu/NAME)")
    ap.add_argument("--vcpus", type=int, default=2, help="vCPUs per node; the store sweeps 0..vcpus writers")
    ap.add_argument("--memory", default="256M", help="guest RAM per node")
    ap.add_argument("--only", default="micro,kv", help="sections to run (comma-separated: micro, kv)")
    ap.add_argument("--quick", action="store_true",
                    help="small sweep: micro sizes 64,128,2048,8192, 1 run, 50 iterations; store sizes 128,8192, "
                         "writers 0 and --vcpus, 2 s points")
    ap.add_argument("--runs", type=int, default=3, help="microbenchmark runs (medians are taken over them)")
    ap.add_argument("--iters", type=int, default=200, help="synchronous requests per op and size and run")
    ap.add_argument("--window", type=int, default=16, help="requests in flight for the throughput runs")
    ap.add_argument("--tput-ops", type=int, default=10000, help="requests per op and size in the throughput runs")
    ap.add_argument("--micro-sizes", default="64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--spin", action="store_true", help="microbenchmark QP without interrupts (spin-wait)")
    ap.add_argument("--sizes", default=None, help="store object sizes (default 128,1024,8192)")
    ap.add_argument("--objects", type=int, default=100, help="store objects")
    ap.add_argument("--seconds", type=int, default=4, help="seconds per store point")
    ap.add_argument("--threads", type=int, default=1, help="reader threads per reader node (1..8)")
    ap.add_argument("--window-delay-ns", type=int, default=0,
                    help="device property sabre-window-delay-ns (host ns added inside the SABRe window)")
    ap.add_argument("--csv", default=str(build_dir() / "bench" / "sonuma.csv"), help="summary CSV")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if only - {"micro", "kv"}:
        ap.error(f"--only: unknown sections {sorted(only - {'micro', 'kv'})} (micro, kv)")
    if a.quick:
        a.runs, a.seconds, a.iters, a.tput_ops = 1, min(a.seconds, 2), min(a.iters, 50), min(a.tput_ops, 2000)
        a.micro_sizes = "64,128,2048,8192"
        a.sizes = a.sizes or "128,8192"
    a.sizes = a.sizes or "128,1024,8192"
    if a.runs < 1 or a.iters < 2 or a.tput_ops < 1 or a.seconds < 1 or not 1 <= a.threads <= 8 or not 1 <= a.vcpus <= 8:
        ap.error("--runs, --seconds >= 1, --iters >= 2, --threads and --vcpus 1..8")
    if not 2 <= a.nodes <= 64:
        ap.error("--nodes: 2..64")
    out = Path(a.csv).parent
    out.mkdir(parents=True, exist_ok=True)
    bdir = build_dir() / "bench"
    bdir.mkdir(parents=True, exist_ok=True)
    rows = []
    bad = 0
    qemu_args = ["-global", f"rackemu-rmc.sabre-window-delay-ns={a.window_delay_ns}"] if a.window_delay_ns else []
    cfg = load_config(None, {"nodes": a.nodes, "name": a.name, "memory": a.memory, "vcpus": a.vcpus,
                             "qemu_args": qemu_args})
    log(f"booting {a.nodes} nodes ({a.vcpus} vCPUs each) as cluster '{a.name}'")
    t0 = time.monotonic()
    with Cluster(cfg, log=lambda m: None) as c:  # leaving the block stops the cluster (also on errors)
        nodes = [c.node(i) for i in range(a.nodes)]
        info = kv_lines(nodes[0].exec("rmc info").stdout.decode())
        if info:
            log("rmc: " + " ".join(f"{k}={v}" for d in info for k, v in d.items()))
        if "micro" in only:
            bad += micro(a, nodes[0], nodes[1], rows, bdir / "sonuma_micro.csv")
        if "kv" in only:
            bad += kv(a, nodes, rows, bdir / "sonuma_kv.csv")
    log(f"done in {time.monotonic() - t0:.0f} s; cluster '{a.name}' stopped")
    print()
    write_results(rows, a.csv)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
