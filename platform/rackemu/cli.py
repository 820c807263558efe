"""The `rackemu` command line (run through the top-level ./rackemu wrapper).

    rackemu cluster up [--config FILE] [--nodes N] [--name NAME] ...
    rackemu cluster status [--json]
    rackemu cluster down
    rackemu node restart NODE
    rackemu node save NODE FILE [--stop] | node restore NODE FILE
    rackemu bridge restart
    rackemu exec NODE [--timeout S] -- CMD...
    rackemu cp LOCAL NODE:PATH | NODE:PATH LOCAL
    rackemu shmemrun -n N [--cluster NAME] PROG [ARGS...]
    rackemu console NODE [--follow]
    rackemu bridge-stats [--json]
    rackemu demo [--nodes N] [--packets K]
    rackemu setup | test

Exit status: 0 on success, the guest command's status for `exec`, 1 on an error (the message
says what to do), 2 on a usage error, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence, TypeAlias

from . import __version__, shmemrun
from .base import Background, ClusterError
from .cluster import STATE_FILE, Cluster
from .config import (ConfigError, DEFAULTS, MAX_NODES, RUN_BASE, ROOT, SNAPSHOT_MODES, build_dir, load_config,
                     run_dir_for)
from .demo import run_demo
from .node import Node
from .snapshot import meta_path, read_meta
from .tables import bridge_stats_table, table


# ---------------------------------------------------------------- output helpers

_BOLD = "\033[1m" if sys.stderr.isatty() else ""
_RED = "\033[1;31m" if sys.stderr.isatty() else ""
_RESET = "\033[0m" if sys.stderr.isatty() else ""


def say(msg: str) -> None:
    print(f"{_BOLD}[rackemu]{_RESET} {msg}", file=sys.stderr, flush=True)


def error(msg: str) -> None:
    print(f"{_RED}[rackemu] error:{_RESET} {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- argument types

def _nodes_arg(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not 1 <= n <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"{n} is out of range; a cluster has 1 to {MAX_NODES} nodes")
    return n


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number of seconds") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{s} must be greater than 0")
    return v


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a whole number") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{s} must be greater than 0")
    return v


def _seed(s: str) -> int:
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer") from None
    if not 0 <= v < 2**64:
        raise argparse.ArgumentTypeError(f"{s} is out of range (0 to 2**64-1)")
    return v


def _node_index(spec: str, cluster: Cluster) -> int:
    m = re.fullmatch(r"(?:node)?(\d+)", spec)
    if not m:
        raise ClusterError(f"{spec!r} is not a node (use a number like 0, or node0)")
    i = int(m.group(1))
    if i >= len(cluster.nodes):
        raise ClusterError(f"no node {i}: cluster {cluster.config.name!r} has nodes "
                           f"0..{len(cluster.nodes) - 1}")
    return i


# ---------------------------------------------------------------- finding the cluster

def _add_select_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("which cluster (default: the one named 'default', or the only one running)")
    g.add_argument("--name", help="cluster name (its run dir is /tmp/rackemu/NAME)")
    g.add_argument("--run-dir", metavar="DIR", help="the cluster's run directory")
    g.add_argument("--config", metavar="FILE", help="the TOML file the cluster was started with")


def _running_clusters() -> list[Path]:
    found = []
    if RUN_BASE.is_dir():
        for d in sorted(RUN_BASE.iterdir()):
            try:
                st = json.loads((d / STATE_FILE).read_text())
            except (OSError, ValueError):
                continue
            if st.get("status") in ("up", "starting"):
                found.append(d)
    return found


def _select_run_dir(args: argparse.Namespace) -> Path:
    if args.run_dir or args.config or args.name:
        return run_dir_for(args.name, args.run_dir, args.config)
    default = run_dir_for()
    if (default / STATE_FILE).exists():
        return default
    running = _running_clusters()
    if len(running) == 1:
        return running[0]
    if len(running) > 1:
        raise ClusterError("several clusters are running; choose one with --name: " +
                           ", ".join(d.name for d in running))
    return default


def _attach(args: argparse.Namespace) -> Cluster:
    return Cluster.attach(_select_run_dir(args), log=say)


# ---------------------------------------------------------------- cluster up/status/down

def _status_rows(st: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for n in st["nodes"]:
        rows.append([n["node"], n["pid"], n["state"], n["agent"], n["boot_seconds"], n["console"]])
    return rows


def print_status(st: dict[str, Any]) -> None:
    b = st["bridge"]
    print(f"cluster {st['name']!r}: {st['status']}  ({len(st['nodes'])} node(s), {st['memory']}, "
          f"{st['vcpus']} vCPU(s) each, machine {st['machine']})")
    print(f"run dir: {st['run_dir']}")
    if b["state"] != "-":
        print(f"bridge:  {b['state']}" + (f" (pid {b['pid']})" if b["pid"] else "") + f", log {b['log']}")
    print()
    print(table(["node", "pid", "state", "agent", "boot s", "console"], _status_rows(st)))
    problems = st.get("problems") or []
    if problems:
        print()
        for p in problems:
            print(f"problem: {p}")


def cmd_cluster_up(args: argparse.Namespace) -> int:
    overrides = {"nodes": args.nodes, "name": args.name, "memory": args.memory, "vcpus": args.vcpus,
                 "run_dir": args.run_dir, "boot_timeout": args.boot_timeout, "machine": args.machine,
                 "snapshot": args.snapshot}
    if args.insn_count:
        overrides["insn_count"] = True
    if args.rnic:
        overrides["rnic"] = True
    if args.cmdline is not None:
        overrides["kernel_cmdline"] = args.cmdline
    cfg = load_config(args.config, overrides)
    for pattern in args.trace or []:  # after the config's qemu_args
        cfg.qemu_args += ["-trace", pattern]
    cluster = Cluster(cfg, log=say, detach=True)
    t0 = time.monotonic()
    with _sigterm_as_interrupt():
        cluster.up()
    say(f"cluster {cfg.name!r} is up ({time.monotonic() - t0:.1f} s)")
    print_status(cluster.status_dict())
    sel = "" if cfg.name == DEFAULTS["name"] else f" --name {cfg.name}"
    print(f"\nnext: rackemu exec 0{sel} -- uname -a   |   rackemu cluster down{sel}")
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    run_dir = _select_run_dir(args)
    if not (run_dir / STATE_FILE).exists():
        if args.json:
            print(json.dumps({"run_dir": str(run_dir), "status": "absent"}))
        else:
            print(f"no cluster in {run_dir}; start one with `rackemu cluster up`")
        return 3
    cluster = Cluster.attach(run_dir)
    st = cluster.status_dict(ping=not args.no_ping)
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print_status(st)
    return 0 if st["status"] == "up" else 3


def cmd_node_restart(args: argparse.Namespace) -> int:
    cluster = _attach(args)
    i = _node_index(args.node, cluster)
    t0 = time.monotonic()
    with _sigterm_as_interrupt():
        cluster.restart_node(i, timeout=args.boot_timeout)
    say(f"node {i} restarted ({time.monotonic() - t0:.1f} s): a fresh boot, its previous guest "
        f"state is gone")
    print_status(cluster.status_dict())
    return 0


def cmd_node_powercut(args: argparse.Namespace) -> int:
    cluster = _attach(args)
    i = _node_index(args.node, cluster)
    with _sigterm_as_interrupt():
        cnt = cluster.powercut_node(i, pick=args.pick, seed=args.seed)
    say(f"node {i}: power cut (pick {args.pick}"
        + (f", seed {args.seed}" if args.pick == "random" else "") + "); it is off. Lost: "
        f"{cnt.get('lost_bytes', 0)} bytes, {cnt.get('lost_lines', 0)} pending lines not kept, "
        f"{cnt.get('lost_nic', 0)} NIC buffer entries")
    print(" ".join(f"{k}={v}" for k, v in cnt.items()))
    print(f"\nimage: {cluster.config.pmem_image(i)}\n"
          f"boot it on what survived: rackemu node restart {i}{cluster.cli_select()}")
    return 0


def cmd_node_save(args: argparse.Namespace) -> int:
    cluster = _attach(args)
    i = _node_index(args.node, cluster)
    t0 = time.monotonic()
    with _sigterm_as_interrupt():
        meta = cluster.save_node(i, args.file, stop=args.stop, force=args.force,
                                 timeout=args.timeout)
    say(f"node {i} saved to {args.file} ({meta['size'] / 1048576:.1f} MiB, "
        f"{time.monotonic() - t0:.1f} s; metadata {meta_path(args.file)}); "
        + ("its QEMU is stopped" if args.stop else "the node runs on"))
    print(f"\nrestore: rackemu node restore {i} {shlex.quote(args.file)}{cluster.cli_select()}")
    return 0


def cmd_node_restore(args: argparse.Namespace) -> int:
    read_meta(args.file)    # a missing or foreign file is named before anything else
    cluster = _attach(args)
    i = _node_index(args.node, cluster)
    t0 = time.monotonic()
    with _sigterm_as_interrupt():
        cluster.restore_node(i, args.file, verify=not args.no_verify, timeout=args.timeout,
                             agent_timeout=args.boot_timeout)
    say(f"node {i} restored from {args.file} ({time.monotonic() - t0:.1f} s): it continues "
        f"from the saved state")
    print_status(cluster.status_dict())
    return 0


def cmd_bridge_restart(args: argparse.Namespace) -> int:
    cluster = _attach(args)
    t0 = time.monotonic()
    with _sigterm_as_interrupt():
        ports = cluster.restart_bridge(reconnect_timeout=args.timeout)
    say(f"fabric bridge restarted ({time.monotonic() - t0:.1f} s); node(s) "
        f"{', '.join(map(str, ports)) or '-'} reconnected and keep their guest state; fabric "
        f"operations that were in flight when it stopped have failed (their callers saw errors)")
    print_status(cluster.status_dict())
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    run_dir = _select_run_dir(args)
    if not (run_dir / STATE_FILE).exists():
        say(f"no cluster in {run_dir}: nothing to stop")
        return 0
    cluster = Cluster.attach(run_dir, log=say)
    live = cluster.live_procs()
    t0 = time.monotonic()
    cluster.down()
    say(f"cluster {cluster.config.name!r} stopped ({len(live)} process(es), "
        f"{time.monotonic() - t0:.1f} s); logs and consoles kept in {run_dir}")
    return 0


# ---------------------------------------------------------------- exec / cp / console

def _write_out(data: bytes, stream) -> None:
    if data:
        stream.buffer.write(data)
        stream.flush()


def cmd_exec(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if not cmd:
        raise ClusterError("no command given: rackemu exec NODE -- CMD [ARGS...]")
    # One argument is a shell command line ("ls -l | wc -l"); several are an argv.
    command: str | list[str] = cmd[0] if len(cmd) == 1 else cmd
    cluster = _attach(args)
    if args.node == "all":
        return _exec_all(cluster, command, args.timeout)
    node = cluster.node(_node_index(args.node, cluster))
    node.check_agent()
    r = node.exec(command, timeout=args.timeout)
    _write_out(r.stdout, sys.stdout)
    _write_out(r.stderr, sys.stderr)
    if getattr(r, "timed_out", False):
        error(f"node {node.id}: command timed out after {args.timeout:g} s (--timeout)")
        return 124
    return r.rc if isinstance(r.rc, int) and 0 <= r.rc < 256 else 1


def _exec_all(cluster: Cluster, command: str | list[str], timeout: float) -> int:
    """Every node: a node that is not running, or whose agent does not answer, is an error
    (listed, exit status 1), never silently skipped."""
    def run(n: Node) -> Any:
        n.check_agent()
        return n.exec(command, timeout=timeout)

    jobs = [(n, Background(run, n)) for n in cluster.nodes]
    worst = 0
    for n, job in jobs:
        try:
            r = job.result()
        except (ClusterError, ConfigError) as e:
            msg = str(e)
            error(msg if msg.startswith(f"node {n.id}") else f"node {n.id}: {msg}")
            worst = worst or 1
            continue
        for stream, data in ((sys.stdout, r.stdout), (sys.stderr, r.stderr)):
            for line in data.decode(errors="replace").splitlines():
                print(f"[node{n.id}] {line}", file=stream)
        if getattr(r, "timed_out", False):
            error(f"node {n.id}: timed out after {timeout:g} s")
            worst = worst or 124
        elif r.rc:
            worst = worst or (r.rc if 0 < r.rc < 256 else 1)
    return worst


_REMOTE_RE = re.compile(r"^(?:node)?(\d+):(.*)$")


def cmd_shmemrun(args: argparse.Namespace) -> int:
    if args.cluster:
        if args.name and args.name != args.cluster:
            raise ClusterError(f"--cluster {args.cluster} and --name {args.name} disagree; give one")
        args.name = args.cluster
    rest = list(args.args)
    prog = args.prog
    if prog == "--":
        if not rest:
            raise ClusterError("no program given: rackemu shmemrun -n N PROG [ARGS...]")
        prog = rest.pop(0)
    return shmemrun.main(_attach(args), args.n, prog, rest, args.env or [], args.timeout, say)


def cmd_cp(args: argparse.Namespace) -> int:
    src_r, dst_r = _REMOTE_RE.match(args.src), _REMOTE_RE.match(args.dst)
    if bool(src_r) == bool(dst_r):
        raise ClusterError("cp copies between the host and one node: `cp LOCAL NODE:PATH` or "
                           "`cp NODE:PATH LOCAL` (NODE is a number, e.g. 0:/tmp/file)")
    cluster = _attach(args)
    if dst_r:   # upload
        node = cluster.node(_node_index(dst_r.group(1), cluster))
        local = Path(args.src)
        if not local.is_file():
            raise ClusterError(f"{local}: no such file")
        remote = dst_r.group(2) or "/root/"
        if remote.endswith("/"):
            remote += local.name
        data = local.read_bytes()
        mode = local.stat().st_mode & 0o777
        agent_put(node, remote, data, mode)
        say(f"{local} -> node {node.id}:{remote} ({len(data)} bytes)")
    else:       # download
        assert src_r is not None  # exactly one of the two is a NODE:PATH (checked above)
        node = cluster.node(_node_index(src_r.group(1), cluster))
        remote = src_r.group(2)
        if not remote:
            raise ClusterError("give the file's path on the node, e.g. 0:/etc/hostname")
        data = agent_get(node, remote)
        local = Path(args.dst)
        if local.is_dir():
            local = local / os.path.basename(remote.rstrip("/"))
        local.write_bytes(data)
        say(f"node {node.id}:{remote} -> {local} ({len(data)} bytes)")
    return 0


def agent_put(node, remote: str, data: bytes, mode: int) -> None:
    node.put(data, remote, mode=mode)


def agent_get(node, remote: str) -> bytes:
    r = node.get(remote)
    return r if isinstance(r, bytes) else bytes(r)


def cmd_console(args: argparse.Namespace) -> int:
    cluster = _attach(args)
    node = cluster.node(_node_index(args.node, cluster))
    path = node.console_path
    if not path.exists():
        raise ClusterError(f"node {node.id} has no console log yet ({path})")
    out = sys.stdout.buffer
    with open(path, "rb") as f:
        if args.lines:
            data = f.read()
            lines = data.splitlines(keepends=True)[-args.lines:]
            out.write(b"".join(lines))
        else:
            while chunk := f.read(65536):
                out.write(chunk)
        out.flush()
        if not args.follow:
            return 0
        try:
            while True:
                chunk = f.read(65536)
                if chunk:
                    out.write(chunk)
                    out.flush()
                    continue
                if not node.alive():
                    say(f"node {node.id}'s QEMU is not running; stopped following")
                    return 0
                time.sleep(0.2)
        except KeyboardInterrupt:
            return 0


# ---------------------------------------------------------------- bridge stats

def cmd_bridge_stats(args: argparse.Namespace) -> int:
    cluster = _attach(args)
    stats = cluster.bridge_stats()
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(bridge_stats_table(stats, wide=args.wide))
    return 0


# ---------------------------------------------------------------- fault rules and capture

def _bridge_answer(cluster: Cluster, command: str) -> dict:
    """The bridge's answer; an error answer (a bad rule or option) raises BadRequest."""
    ans = cluster.bridge_command(command)
    if "error" in ans:
        shown = command if len(command) <= 120 else command[:100] + f"... ({len(command)} bytes)"
        raise BadRequest(f"the bridge refused `{shown}`: {ans['error']}")
    return ans


class BadRequest(Exception):
    """A rule or option the bridge refused: exit status 2, the bridge's reason."""


def _text_arg(what: str, s: str) -> str:
    """`s` if it is UTF-8 text, which the bridge's commands are; else BadRequest naming it (an
    argument of other bytes reaches Python as lone surrogates, which used to end in a
    UnicodeEncodeError traceback)."""
    try:
        s.encode()
    except UnicodeEncodeError:
        shown = os.fsencode(s).decode("utf-8", "backslashreplace")
        raise BadRequest(f"{what} '{shown}' is not UTF-8 text; the bridge takes its rules, options "
                         f"and paths as UTF-8") from None
    return s


def cmd_fault_add(args: argparse.Namespace) -> int:
    rule = " ".join(_text_arg("fault rule argument", a) for a in args.rule)
    ans = _bridge_answer(_attach(args), f"fault add {rule}")
    print(f"fault rule {ans['id']}: {ans['rule']}")
    return 0


def cmd_fault_list(args: argparse.Namespace) -> int:
    ans = _bridge_answer(_attach(args), "fault list")
    if args.json:
        print(json.dumps(ans, indent=2))
        return 0
    rules = ans.get("rules", [])
    if not rules:
        print(f"no fault rules (default seed {ans.get('seed')}); add one with `rackemu fault add RULE`")
        return 0
    print(table(["id", "rule", "matched", "hits"],
                [[r["id"], r["rule"], r["matched"], r["hits"]] for r in rules]))
    print(f"\n{ans.get('held', 0)} frame(s) held by delay/reorder rules now")
    return 0


def cmd_fault_del(args: argparse.Namespace) -> int:
    which = args.id
    if which != "all" and not which.isdigit():
        raise BadRequest(f"fault del: '{which}' is not a rule id (see `rackemu fault list`) or 'all'")
    ans = _bridge_answer(_attach(args), f"fault del {which}")
    print(f"removed {ans['removed']} fault rule(s)")
    return 0


def _switch_params(args: argparse.Namespace) -> list[str]:
    out = []
    for kv in args.set or []:
        kv = _text_arg("switch parameter", kv)
        if "=" not in kv or any(c.isspace() for c in kv):
            raise BadRequest(f"switch load: --set '{kv}' is not KEY=VALUE (no white space)")
        out.append(kv)
    return out


def cmd_switch_load(args: argparse.Namespace) -> int:
    name = _text_arg("switch program", args.program)
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise BadRequest(f"switch load: '{name}' is not a program name (see `rackemu switch list`)")
    ans = _bridge_answer(_attach(args), " ".join(["switch load", name, *_switch_params(args)]))
    sw = ans["switch"]
    params = " ".join(f"{k}={v}" for k, v in sorted(sw.get("params", {}).items()))
    r = sw.get("resources", {})
    print(f"switch program {sw['program']} loaded ({params}): {r.get('stages')} stage(s), "
          f"{r.get('sram_bytes')} byte(s) of SRAM, {r.get('table_entries')} table entries, "
          f"{r.get('recirculations')} recirculation(s)")
    return 0


def cmd_switch_unload(args: argparse.Namespace) -> int:
    ans = _bridge_answer(_attach(args), "switch unload")
    if ans.get("unloaded"):
        print(f"switch program {ans['switch']['program']} unloaded (its state is gone)")
    else:
        print("no switch program was loaded")
    return 0


def cmd_switch_stats(args: argparse.Namespace) -> int:
    ans = _bridge_answer(_attach(args), "switch stats")
    if args.json:
        print(json.dumps(ans, indent=2))
        return 0
    if not ans.get("loaded"):
        print("no switch program loaded; load one with `rackemu switch load NAME`")
        return 0
    f, r = ans["frames"], ans["resources"]
    print(f"program {ans['program']}: {r['stages']} stage(s), {r['sram_bytes']} byte(s) of SRAM, "
          f"{r['table_entries']} table entries, {r['recirculations']} recirculation(s)")
    print(table(["frames in", "roce", "not roce", "malformed", "passed", "rewritten", "synthesized", "dropped"],
                [[f["in"], f["roce"], f["not_roce"], f["malformed"], f["passed"], f["rewritten"],
                  f["synthesized"], f["dropped"]]]))
    if ans.get("tables"):
        print()
        print(table(["table", "stage", "entries", "capacity", "hits", "misses", "overflow"],
                    [[t["name"], t["stage"], t["entries"], t["capacity"], t["hits"], t["misses"], t["overflow"]]
                     for t in ans["tables"]]))
    if ans.get("arrays"):
        print()
        print(table(["array", "stage", "cells", "bytes", "occupancy", "accesses"],
                    [[a["name"], a["stage"], a["cells"], a["sram_bytes"], a["occupancy"], a["accesses"]]
                     for a in ans["arrays"]]))
    qps = ans.get("program_stats", {}).get("qps")
    if qps:
        print()
        print(table(["destination", "qpn", "operations", "payload bytes", "retransmitted", "naks", "rnr naks"],
                    [[q["dst"], q["qpn"], " ".join(f"{k}={v}" for k, v in q["ops"].items()),
                      q["payload_bytes"], q["retransmitted"], q["naks"], q["rnr_naks"]] for q in qps]))
    if ans.get("discipline_violations"):
        print(f"\npipeline discipline violated {ans['discipline_violations']} time(s); first: "
              f"{ans['first_violation']}")
    return 0


def cmd_switch_list(args: argparse.Namespace) -> int:
    ans = _bridge_answer(_attach(args), "switch list")
    for p in ans["programs"]:
        mark = " (loaded)" if p["name"] == ans.get("loaded") else ""
        print(f"{p['name']}{mark}: {p['summary']}")
        for k in p["params"]:
            print(f"    {k['key']}={k['default']}  ({k['allowed']}) {k['help']}")
    return 0


def _capture_line(c: dict) -> str:
    if not c.get("active"):
        return "no capture running"
    full = " (size limit reached: later frames were not recorded)" if c.get("full") else ""
    return (f"capturing to {c['path']}: {c['frames']} frame(s), {c['bytes']} byte(s) of frames, "
            f"file {c['file_bytes']} byte(s){full}")


def cmd_capture_start(args: argparse.Namespace) -> int:
    path = _text_arg("capture file", os.path.abspath(args.output))
    if any(c.isspace() for c in path):
        raise BadRequest(f"capture file {path!r}: the path must not contain white space")
    opts = [f"path={path}", f"what={args.what}", f"dir={args.dir}", f"snaplen={args.snaplen}",
            f"max_mb={args.max_mb}"]
    if args.nodes is not None:
        opts.append(f"nodes={args.nodes}")
    cluster = _attach(args)
    ans = _bridge_answer(cluster, "capture start " + " ".join(opts))
    say(_capture_line(ans["capture"]))
    if args.seconds is None:
        print(f"stop it with `rackemu capture stop`; open it with `tshark -r {path}` (rackemu's own frames: "
              f"`-X lua_script:{LUA_DISSECTOR}`)")
        return 0
    try:
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    ans = _bridge_answer(cluster, "capture stop")
    say("stopped: " + _capture_line(ans["capture"]))
    return 0


def cmd_capture_stop(args: argparse.Namespace) -> int:
    ans = _bridge_answer(_attach(args), "capture stop")
    print("stopped: " + _capture_line(ans["capture"]))
    return 0


def cmd_capture_status(args: argparse.Namespace) -> int:
    print(_capture_line(_bridge_answer(_attach(args), "capture status")))
    return 0


# ---------------------------------------------------------------- setup / test / demo

def cmd_setup(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    cfg.check_artefacts()
    print("rackemu is set up:")
    print(f"  QEMU:      {cfg.qemu}")
    if cfg.fabric:
        print(f"  bridge:    {cfg.bridge}")
    print(f"  kernel:    {cfg.kernel_image()}")
    print(f"  initramfs: {cfg.initrd}")
    print("next: ./rackemu cluster up   (or ./rackemu demo)")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    unit_rc = style_rc = fuzz_rc = 0
    host = build_dir() / "host"
    style = ROOT / "tests" / "style" / "check.sh"
    style_fix = "tests/style/check.sh --fix"
    if args.pytest_args:
        say("pytest arguments given: skipping the style check, the unit tests, fuzz smoke runs and sanitizers")
    else:
        # Formatter, checkpatch and Python lint (docs/style.md): seconds; a violation fails the
        # command at the end, after every test has run.
        say("style: tests/style/check.sh")
        style_rc = subprocess.call(["bash", str(style)], cwd=ROOT)
        if style_rc:
            error(f"the style check failed (C++ formatting: `{style_fix}`); running the tests anyway")
        if (host / "build.ninja").exists():
            say(f"unit tests: meson test -C {host}")
            unit_rc = subprocess.call(["meson", "test", "-C", str(host), "--print-errorlogs"], cwd=ROOT)
            if unit_rc:
                error(f"unit tests failed (meson test exited with {unit_rc}); running the pytest suites anyway")
        else:
            say(f"no meson build in {host}: skipping the unit tests (run `./rackemu setup`)")
        # Fuzz smoke runs (every harness a few seconds over its corpus) and the unit tests under
        # ASan+UBSan and TSan (docs/fuzzing.md); each in a clang or sanitizer build of its own.
        fuzz = ROOT / "tests" / "fuzz"
        steps = () if not (fuzz / "run.sh").exists() else (
            ("fuzz smoke: tests/fuzz/build.sh && tests/fuzz/run.sh --smoke",
             f"bash {shlex.quote(str(fuzz / 'build.sh'))} && bash {shlex.quote(str(fuzz / 'run.sh'))} --smoke"),
            ("sanitizers: tests/fuzz/sanitize.sh (unit tests under ASan+UBSan, TSan)",
             f"bash {shlex.quote(str(fuzz / 'sanitize.sh'))}"))
        for what, cmd in steps:
            say(what)
            rc = subprocess.call(["bash", "-c", cmd], cwd=ROOT)
            if rc:
                error(f"{what.split(':')[0]} failed (exit {rc}); running the pytest suites anyway")
                fuzz_rc = fuzz_rc or rc
    targets = [str(ROOT / "tests" / "launcher"), str(ROOT / "tests" / "e2e")]
    targets = [t for t in targets if Path(t).is_dir()]
    argv = [sys.executable, "-m", "pytest", *targets, *args.pytest_args]
    say("running " + " ".join(shlex.quote(a) for a in argv[2:]))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "platform") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    py_rc = subprocess.call(argv, cwd=ROOT, env=env)
    if style_rc:
        error(f"the style check failed (see its output before the unit tests): run `{style_fix}` for the "
              f"C++ formatting and fix the rest by hand (docs/style.md)")
    return py_rc or unit_rc or fuzz_rc or style_rc


def cmd_demo(args: argparse.Namespace) -> int:
    overrides = {"nodes": args.nodes, "name": args.name, "memory": args.memory,
                 "boot_timeout": args.boot_timeout}
    cfg = load_config(args.config, {"name": "demo", "nodes": 4} | {k: v for k, v in overrides.items() if v is not None})
    with _sigterm_as_interrupt():
        return run_demo(cfg, packets=args.packets, rounds=args.rounds, mif=args.mif,
                        keep=args.keep, log=say)


class _sigterm_as_interrupt:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt so the cleanup path runs for them too."""

    def __enter__(self):
        self._old = {}
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


# ---------------------------------------------------------------- parser

EPILOG = """\
examples:
  rackemu cluster up --nodes 4          boot 4 nodes and the fabric bridge
  rackemu exec 1 -- unimem info         run a command on node 1
  rackemu exec all -- uname -r          ... on every node
  rackemu cp ./prog 0:/root/            copy a file to node 0
  rackemu shmemrun -n 4 shmem-check     an OpenSHMEM program on nodes 0..3 as 4 PEs
  rackemu console 0 --follow            watch node 0's serial console
  rackemu bridge-stats                  the fabric's per-port counters
  rackemu node restart 1                restart node 1 (fresh boot), wait for its agent
  rackemu bridge restart                restart a dead bridge; the nodes reconnect
  rackemu node save 1 n1.snap           save node 1's whole state to a file
  rackemu node restore 1 n1.snap        put node 1 back into that state
  rackemu cluster down                  stop everything
  rackemu demo                          4 nodes: packets around a ring, round-trip times

docs/launcher.md has the full reference and the config file's keys.
"""

# The rule syntax is the bridge's (platform/fabric/faults.cc checks it; docs/fabric.md lists it).
FAULT_EPILOG = """\
rule: ACTION [KEY=VALUE...]   (the bridge checks it and says what is wrong; exit status 2)
  actions: drop, delay us=D [jitter=J], duplicate, reorder [hold_us=H], corrupt [bits=N],
           down (every matching frame is lost: a link or a partition)
  match:   src=LIST dst=LIST node=LIST between=A,B svc=eth,mbox,echo,mem,rmc,rackemu,all
           kind=roce,ipv4,ipv6,ip,arp,other (Ethernet frames)
  how often: prob=P or every=N; limit=N; seed=S (default: the cluster's fault_seed + rule id)
examples:
  rackemu fault add drop prob=0.01 svc=eth kind=roce
  rackemu fault add delay us=200 jitter=50 between=0,1
  rackemu fault add down between=0,2          partition nodes 0 and 2
  rackemu fault list
  rackemu fault del all
"""
LUA_DISSECTOR = "tools/wireshark/rackemu.lua"

# What add_subparsers returns: each command group adds its parsers to it.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_cluster_commands(sub: SubParsers) -> None:
    """The parsers of cluster up, status and down."""
    fmt = argparse.RawDescriptionHelpFormatter
    # cluster
    pc = sub.add_parser("cluster", help="start, inspect and stop a cluster",
                        description="Start, inspect and stop a cluster.")
    csub = pc.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    up = csub.add_parser("up", formatter_class=fmt, help="start the bridge and N nodes, wait for their agents",
                         description="Start the fabric bridge, then every node's QEMU, and wait "
                                     "until each node's guest agent answers. Prints a status table. "
                                     "On failure or Ctrl-C everything started is stopped again.",
                         epilog="Values on the command line override the config file, which "
                                "overrides the built-in defaults (platform/cluster.toml).")
    up.add_argument("--config", metavar="FILE", help="cluster TOML file (keys: platform/cluster.toml)")
    up.add_argument("--nodes", type=_nodes_arg, metavar="N", help=f"number of nodes, 1..{MAX_NODES} (default 2)")
    up.add_argument("--name", help="cluster name; run dir /tmp/rackemu/NAME (default 'default')")
    up.add_argument("--memory", metavar="SIZE", help="guest RAM per node, e.g. 256M, 1G (default 256M)")
    up.add_argument("--vcpus", type=_positive_int, metavar="N", help="vCPUs per node (default 1)")
    up.add_argument("--run-dir", metavar="DIR", help="run directory (default /tmp/rackemu/NAME)")
    up.add_argument("--boot-timeout", type=_positive_float, metavar="S",
                    help="seconds to wait for every agent (default 300)")
    up.add_argument("--machine", metavar="M", help="rackemu-node (default) or virt (development: no fabric)")
    up.add_argument("--cmdline", metavar="ARGS", help="kernel command line after console= and rackemu.node= "
                    "(replaces kernel_cmdline and its default, cluster.toml)")
    up.add_argument("--snapshot", choices=SNAPSHOT_MODES,
                    help="boot nodes from cached snapshots of booted nodes of the same "
                         "configuration: auto (use the cache; boot and save the nodes it lacks), "
                         "refresh (boot all, save anew), off (no cache); default: the config's "
                         "`snapshot` (built in: off). Cache: ~/.cache/rackemu/snapshots")
    up.add_argument("--insn-count", action="store_true",
                    help="load the instruction-count TCG plugin into every node: it counts the "
                         "user-space instructions between the marks workloads set and writes "
                         "RUN_DIR/nodeI.insn.json (docs/insn-count.md; config key insn_count)")
    up.add_argument("--rnic", action="store_true",
                    help="give every node the rackemu RNIC, a RoCEv2 RDMA NIC (-device rackemu-rnic; "
                         "docs/rnic.md; config keys rnic and rnic_props)")
    up.add_argument("--trace", metavar="PATTERN", action="append",
                    help="enable QEMU trace events matching PATTERN on every node, e.g. 'rackemu_*' "
                         "(repeatable); they go to the node's log, RUN_DIR/nodeI.log (docs/tracing.md)")
    up.set_defaults(func=cmd_cluster_up)

    st = csub.add_parser("status", help="show the cluster's processes and agents",
                         description="Show every node's QEMU pid, state, agent answer and boot time. "
                                     "Exit status 0 when the cluster is up, 3 otherwise.")
    _add_select_args(st)
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.add_argument("--no-ping", action="store_true", help="do not ping the agents")
    st.set_defaults(func=cmd_cluster_status)

    dn = csub.add_parser("down", help="stop every node and the bridge",
                         description="Stop every node and the bridge (SIGTERM, then SIGKILL after "
                                     "5 s), remove sockets and pid files; keep logs and consoles.")
    _add_select_args(dn)
    dn.set_defaults(func=cmd_cluster_down)


def _add_guest_commands(sub: SubParsers) -> None:
    """The parsers of exec, shmemrun, cp and console: the guests of a running cluster."""
    fmt = argparse.RawDescriptionHelpFormatter
    # exec
    ex = sub.add_parser("exec", formatter_class=fmt, help="run a command on a node",
                        description="Run a command on a node through its guest agent; print its "
                                    "stdout and stderr; exit with its exit status (124 on timeout).",
                        epilog="One CMD argument is run by the guest's shell (pipes allowed: "
                               "exec 0 -- 'dmesg | tail'); several are run as an argv.")
    ex.add_argument("node", metavar="NODE", help="node number (0, 1, ...) or 'all'")
    ex.add_argument("--timeout", type=_positive_float, default=60.0, metavar="S",
                    help="seconds before the command is killed (default 60)")
    _add_select_args(ex)
    ex.add_argument("cmd", nargs="*", metavar="-- CMD", help="the command and its arguments, after --")
    ex.set_defaults(func=cmd_exec)

    # shmemrun
    sr = sub.add_parser("shmemrun", formatter_class=fmt, help="run an OpenSHMEM program on N nodes as N PEs",
                        description="Run PROG on nodes 0..N-1 as OpenSHMEM PEs 0..N-1 (libshmem over the "
                                    "RNIC: the nodes need -device rackemu-rnic). Each PE's output is printed "
                                    "with a [pe I] prefix; when one PE fails the others are stopped; the exit "
                                    "status is the failing PE's (else the worst).",
                        epilog="PROG is a host file (copied to every node; build it with aarch64-linux-gnu-gcc "
                               "-static -I build/guest/lib prog.c -L build/guest/lib -lshmem -lpthread) or a "
                               "program in the guests' PATH.\nexamples:\n"
                               "  rackemu shmemrun -n 4 shmem-check\n"
                               "  rackemu shmemrun -n 4 shmem-gups --impl message --log2-table 16\n"
                               "  rackemu shmemrun -n 2 --env SHMEM_SYMMETRIC_SIZE=16M ./a.out\n"
                               "docs/shmem.md has the library's reference.")
    sr.add_argument("-n", "--npes", dest="n", type=_nodes_arg, required=True, metavar="N",
                    help="number of PEs (nodes 0..N-1 run one each)")
    sr.add_argument("--cluster", metavar="NAME", help="the cluster's name (as --name)")
    sr.add_argument("--timeout", type=_positive_float, default=600.0, metavar="S",
                    help="seconds before every PE is killed (default 600; exit status 124)")
    sr.add_argument("--env", action="append", metavar="NAME=VALUE",
                    help="environment for every PE (repeatable), e.g. SHMEM_SYMMETRIC_SIZE=16M")
    _add_select_args(sr)
    sr.add_argument("prog", metavar="PROG", help="the program: a host file or a guest command")
    sr.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the program's arguments")
    sr.set_defaults(func=cmd_shmemrun)

    # cp
    cp = sub.add_parser("cp", formatter_class=fmt, help="copy a file to or from a node",
                        description="Copy one file between the host and a node's guest.",
                        epilog="examples:\n  rackemu cp ./a.out 1:/root/a.out\n"
                               "  rackemu cp ./a.out 1:/root/       (keeps the name)\n"
                               "  rackemu cp 0:/proc/cpuinfo ./cpuinfo.txt")
    cp.add_argument("src", metavar="SRC", help="LOCAL or NODE:PATH")
    cp.add_argument("dst", metavar="DST", help="NODE:PATH or LOCAL")
    _add_select_args(cp)
    cp.set_defaults(func=cmd_cp)

    # console
    co = sub.add_parser("console", help="print a node's serial console log",
                        description="Print node NODE's serial console (the kernel log and anything "
                                    "written to ttyAMA0).")
    co.add_argument("node", metavar="NODE", help="node number")
    co.add_argument("-f", "--follow", action="store_true", help="keep printing as it grows (Ctrl-C stops)")
    co.add_argument("-n", "--lines", type=_positive_int, metavar="N", help="only the last N lines")
    _add_select_args(co)
    co.set_defaults(func=cmd_console)


def _add_node_commands(sub: SubParsers) -> None:
    """The parsers of node restart, powercut, save and restore."""
    # node
    pn = sub.add_parser("node", help="restart, power-cut, save or restore one node",
                        description="Act on one node of a running cluster.")
    nsub = pn.add_subparsers(dest="node_command", metavar="ACTION", required=True)
    nr = nsub.add_parser("restart", help="restart one node's QEMU and wait for its agent",
                         description="Stop node NODE's QEMU if it still runs (SIGTERM, then "
                                     "SIGKILL), start it again with the cluster's configuration "
                                     "(fresh guest RAM: everything the guest held is lost) and "
                                     "wait until its guest agent answers. The bridge must run "
                                     "(see `rackemu bridge restart`). If the agent does not "
                                     "answer in time, the node is stopped again. A node with "
                                     "persistent memory boots on its durable image: after "
                                     "`rackemu node powercut`, on what survived the cut.")
    nr.add_argument("node", metavar="NODE", help="node number")
    nr.add_argument("--boot-timeout", type=_positive_float, metavar="S",
                    help="seconds to wait for the agent (default: the cluster's boot_timeout)")
    _add_select_args(nr)
    nr.set_defaults(func=cmd_node_restart)
    npc = nsub.add_parser("powercut", help="cut one node's power: what its persistent memory keeps",
                          description="Cut node NODE's power now: its vCPUs stop, the persistence "
                                      "model (pmem_mode) writes the surviving image of its persistent "
                                      "memory to its durable image file (the durable bytes, plus the "
                                      "lines written but not yet durable that --pick keeps, at 64-byte "
                                      "granularity; what was in the NIC's buffer is lost), and its "
                                      "QEMU ends: the node is off. The other nodes and the bridge run "
                                      "on. Prints the model's counters: lost_bytes, lost_lines and "
                                      "lost_nic say what the cut lost.",
                          epilog="Boot the node on the surviving image with `rackemu node restart "
                                 "NODE`. The cluster needs persistent memory (pmem in the cluster's "
                                 "TOML); docs/pmem.md, \"The power cut\".")
    npc.add_argument("node", metavar="NODE", help="node number")
    npc.add_argument("--pick", choices=("none", "all", "random"), default="none",
                     help="which pending lines survive: none (default), all, or a random subset "
                          "chosen by --seed")
    npc.add_argument("--seed", type=_seed, default=1, metavar="S",
                     help="seed of --pick random (0..2**64-1, default 1)")
    _add_select_args(npc)
    npc.set_defaults(func=cmd_node_powercut)
    nsv = nsub.add_parser("save", help="save one node's whole state to a file",
                          description="Stop node NODE's vCPUs, write its whole state (guest RAM, "
                                      "CPUs, interrupt controller, virtio, every rackemu device) "
                                      "to FILE with QEMU's migration, and FILE.meta.json beside it "
                                      "(node, cluster shape, checksums of QEMU, kernel, initramfs "
                                      "and FILE). Then the node runs on (or, with --stop, its QEMU "
                                      "is stopped). The other nodes keep running; fabric requests "
                                      "they send to the node while it is stopped wait for it.",
                          epilog="Restore with `rackemu node restore NODE FILE`, into the same "
                                 "node of a cluster started with the same build and shape. "
                                 "docs/launcher.md, \"Save and restore\", has what is saved and "
                                 "the limits.")
    nsv.add_argument("node", metavar="NODE", help="node number")
    nsv.add_argument("file", metavar="FILE", help="the snapshot file to write")
    nsv.add_argument("--stop", action="store_true", help="stop the node's QEMU after saving")
    nsv.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    nsv.add_argument("--timeout", type=_positive_float, metavar="S",
                     help="seconds QEMU may take to write the state (default 300)")
    _add_select_args(nsv)
    nsv.set_defaults(func=cmd_node_save)
    nrs = nsub.add_parser("restore", help="put one node back into a saved state",
                          description="Check FILE and FILE.meta.json (same node, same cluster shape, "
                                      "same QEMU, kernel and initramfs, checksum), stop node NODE's "
                                      "QEMU if it runs, wait until the fabric bridge has seen it go, "
                                      "start a new QEMU on the node's command line that loads FILE "
                                      "(-incoming), resume its vCPUs and wait until its guest agent "
                                      "answers. If QEMU refuses the file, its message is shown and "
                                      "the node stays stopped.",
                          epilog="The node rejoins the fabric under its id; the other nodes keep "
                                 "running. Device operations in flight at the save complete with "
                                 "an error after the restore (docs/launcher.md).")
    nrs.add_argument("node", metavar="NODE", help="node number")
    nrs.add_argument("file", metavar="FILE", help="a snapshot written by `rackemu node save`")
    nrs.add_argument("--no-verify", action="store_true",
                     help="skip the checksum test of FILE (QEMU still checks the stream)")
    nrs.add_argument("--timeout", type=_positive_float, metavar="S",
                     help="seconds QEMU may take to load the state (default 300)")
    nrs.add_argument("--boot-timeout", type=_positive_float, metavar="S",
                     help="seconds to wait for the guest agent afterwards (default 60)")
    _add_select_args(nrs)
    nrs.set_defaults(func=cmd_node_restore)


def _add_bridge_commands(sub: SubParsers) -> None:
    """The parsers of bridge restart and bridge-stats."""
    # bridge
    pb = sub.add_parser("bridge", help="restart the fabric bridge",
                        description="Act on the fabric bridge of a running cluster.")
    bsub = pb.add_subparsers(dest="bridge_command", metavar="ACTION", required=True)
    br = bsub.add_parser("restart", help="restart the bridge; the nodes reconnect",
                         description="Stop the fabric bridge if it still runs, start it again "
                                     "with the same arguments in the same run dir (its old log "
                                     "becomes bridge.log.1) and wait until every running node's "
                                     "fabric port has reconnected (each retries once a second). "
                                     "The nodes keep running with their guest state; fabric "
                                     "operations in flight when the bridge stopped have failed.")
    br.add_argument("--timeout", type=_positive_float, default=20.0, metavar="S",
                    help="seconds to wait for the nodes to reconnect (default 20)")
    _add_select_args(br)
    br.set_defaults(func=cmd_bridge_restart)

    # bridge-stats
    bs = sub.add_parser("bridge-stats", help="the fabric bridge's counters",
                        description="Ask the fabric bridge for its counters (per port: frames and "
                                    "bytes in/out, drops, errors) and print them as a table: the "
                                    "columns a person reads first, or every counter with --wide "
                                    "(docs/fabric.md lists them).")
    bs.add_argument("--json", action="store_true", help="print the bridge's JSON as is")
    bs.add_argument("--wide", action="store_true", help="every counter the bridge reports")
    _add_select_args(bs)
    bs.set_defaults(func=cmd_bridge_stats)


def _add_fault_commands(sub: SubParsers) -> None:
    """The parsers of fault add, list and del: the bridge's fault rules."""
    fmt = argparse.RawDescriptionHelpFormatter
    # fault rules
    fr = sub.add_parser("fault", formatter_class=fmt, help="fault rules in the bridge: add, list, del",
                        description="Fault rules in the fabric bridge, applied to the frames between "
                                    "nodes (Ethernet and rackemu's own services): drop, delay, "
                                    "duplicate, reorder, corrupt, link down. Rules act at once and "
                                    "until removed; each counts the frames it matched and hit. The "
                                    "cluster TOML's `faults` list installs rules at `cluster up`. "
                                    "docs/fabric.md, \"Fault rules\".",
                        epilog=FAULT_EPILOG)
    fsub = fr.add_subparsers(dest="fault_command", metavar="ACTION", required=True)
    fa = fsub.add_parser("add", formatter_class=fmt, help="add a rule", epilog=FAULT_EPILOG,
                         description="Add a fault rule; prints its id and its normalised form "
                                     "(with the seed it draws from).")
    fa.add_argument("rule", nargs="+", metavar="RULE", help="ACTION [KEY=VALUE...], e.g. drop prob=0.01 svc=eth")
    _add_select_args(fa)
    fa.set_defaults(func=cmd_fault_add)
    fl = fsub.add_parser("list", help="the rules and their counters",
                         description="List the rules with the frames each matched and hit.")
    fl.add_argument("--json", action="store_true", help="print the bridge's JSON as is")
    _add_select_args(fl)
    fl.set_defaults(func=cmd_fault_list)
    fd = fsub.add_parser("del", help="remove a rule (or all)", description="Remove a rule by id, or all.")
    fd.add_argument("id", metavar="ID|all")
    _add_select_args(fd)
    fd.set_defaults(func=cmd_fault_del)


def _add_switch_commands(sub: SubParsers) -> None:
    """The parsers of switch load, unload, stats and list: the bridge's programmable stage."""
    fmt = argparse.RawDescriptionHelpFormatter
    sw = sub.add_parser("switch", formatter_class=fmt, help="switch programs in the bridge: load, unload, stats",
                        description="The programmable stage of the fabric bridge: a switch program "
                                    "every Ethernet frame passes while it is loaded (RoCEv2 parsed, "
                                    "match-action tables and register arrays, frames rewritten, "
                                    "dropped or synthesized). Its state is soft: unloading drops it. "
                                    "The cluster TOML's `switch` key loads one at `cluster up`. "
                                    "docs/switch.md.")
    ssub = sw.add_subparsers(dest="switch_command", metavar="ACTION", required=True)
    sl = ssub.add_parser("load", help="load a program (replaces the loaded one)",
                         description="Load a switch program; prints its resources in switch units.")
    sl.add_argument("program", metavar="PROGRAM", help="a program of `rackemu switch list`")
    sl.add_argument("--set", action="append", metavar="KEY=VALUE", help="a parameter (repeatable)")
    _add_select_args(sl)
    sl.set_defaults(func=cmd_switch_load)
    su = ssub.add_parser("unload", help="unload the program (its state is dropped)",
                         description="Unload the switch program: frames take the bridge's plain path.")
    _add_select_args(su)
    su.set_defaults(func=cmd_switch_unload)
    st = ssub.add_parser("stats", help="frames, tables, arrays and the program's own counters",
                         description="The loaded program's counters: frames rewritten, synthesized and "
                                     "dropped, per table hits and misses, per array occupancy.")
    st.add_argument("--json", action="store_true", help="print the bridge's JSON as is")
    _add_select_args(st)
    st.set_defaults(func=cmd_switch_stats)
    sli = ssub.add_parser("list", help="the programs and their parameters", description="List the programs.")
    _add_select_args(sli)
    sli.set_defaults(func=cmd_switch_list)


def _add_capture_commands(sub: SubParsers) -> None:
    """The parsers of capture start, stop and status: the bridge's frame capture."""
    fmt = argparse.RawDescriptionHelpFormatter
    # capture
    ca = sub.add_parser("capture", formatter_class=fmt, help="record the frames crossing ports to a pcapng file",
                        description="Record the frames that cross chosen nodes' ports of the fabric "
                                    "bridge into a pcapng file. Ethernet frames (IP, ARP, RoCEv2) open "
                                    "in Wireshark/tshark as they are; rackemu's own service frames use "
                                    f"link type DLT_USER0 (147), decoded by {LUA_DISSECTOR} "
                                    "(docs/fabric.md, \"Capture\").")
    casub = ca.add_subparsers(dest="capture_command", metavar="ACTION", required=True)
    cs = casub.add_parser("start", help="start recording (replaces a running capture)",
                          description="Start recording. With --seconds, stop after that long (or at "
                                      "Ctrl-C); otherwise it runs until `rackemu capture stop`.")
    cs.add_argument("-o", "--output", required=True, metavar="FILE", help="pcapng file to write (overwritten)")
    cs.add_argument("--nodes", metavar="LIST", help="comma-separated node ids (default: every node)")
    cs.add_argument("--what", choices=("all", "eth", "rackemu"), default="all",
                    help="Ethernet frames, rackemu service frames, or both (default all)")
    cs.add_argument("--dir", choices=("in", "out", "both"), default="in",
                    help="frames the node sends into the switch (in, default: every frame once), "
                         "frames the switch delivers to it after fault rules (out), or both")
    cs.add_argument("--snaplen", type=int, default=65535, metavar="N", help="bytes kept per frame (64..65535)")
    cs.add_argument("--max-mb", type=int, default=1024, metavar="N",
                    help="stop recording once the file reaches N MiB (default 1024)")
    cs.add_argument("--seconds", type=_positive_float, metavar="S", help="record for S seconds, then stop")
    _add_select_args(cs)
    cs.set_defaults(func=cmd_capture_start)
    cp_ = casub.add_parser("stop", help="stop recording and close the file", description="Stop recording.")
    _add_select_args(cp_)
    cp_.set_defaults(func=cmd_capture_stop)
    cst = casub.add_parser("status", help="what is being recorded", description="Show the running capture.")
    _add_select_args(cst)
    cst.set_defaults(func=cmd_capture_status)


def _add_tool_commands(sub: SubParsers) -> None:
    """The parsers of demo, setup and test."""
    fmt = argparse.RawDescriptionHelpFormatter
    # demo
    de = sub.add_parser("demo", formatter_class=fmt, help="4-node ring of packets + round-trip times",
                        description="Boot a cluster (4 nodes by default), pass packets around a ring "
                                    "of all nodes through the Unimem packetizers and mailboxes "
                                    "(node i sends to node i+1, which checks count and sender PID), "
                                    "measure round-trip times between neighbours with `unimem "
                                    "pingpong`, print a table per node and the bridge's counters, "
                                    "write CSV files into the run dir, and stop the cluster.")
    de.add_argument("--nodes", type=_nodes_arg, metavar="N", help="nodes in the ring (default 4; 2 minimum)")
    de.add_argument("--packets", type=_positive_int, default=100, metavar="K",
                    help="packets each node sends to its neighbour (default 100)")
    de.add_argument("--rounds", type=_positive_int, default=200, metavar="R",
                    help="ping-pong round trips per neighbour pair (default 200)")
    de.add_argument("--mif", type=int, default=1, metavar="M", help="mailbox interface to use (default 1)")
    de.add_argument("--name", help="cluster name (default 'demo')")
    de.add_argument("--memory", metavar="SIZE", help="guest RAM per node (default 256M)")
    de.add_argument("--boot-timeout", type=_positive_float, metavar="S", help="seconds to wait for the agents")
    de.add_argument("--config", metavar="FILE", help="cluster TOML file")
    de.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    de.set_defaults(func=cmd_demo)

    # setup / test (the ./rackemu wrapper runs platform/setup/setup.sh before these)
    se = sub.add_parser("setup", help="install packages and build QEMU, bridge and guest image",
                        description="Install the host packages and build everything (QEMU with "
                                    "rackemu's devices, the fabric bridge, the guest kernel and "
                                    "initramfs); the ./rackemu wrapper runs platform/setup/setup.sh, "
                                    "then this checks the artefacts are there.")
    se.add_argument("--config", metavar="FILE", help="check the artefacts named by this config")
    se.set_defaults(func=cmd_setup)

    te = sub.add_parser("test", help="run the style check, the unit tests (meson) and the launcher and e2e "
                                     "tests (pytest)",
                        description="Run the style check (tests/style/check.sh: clang-format, checkpatch, "
                                    "flake8, mypy; a violation fails the command after the tests ran), "
                                    "the unit tests (meson test in $RACKEMU_BUILD/host), then pytest on "
                                    "tests/launcher and tests/e2e. Extra arguments go to pytest and skip "
                                    "the style check and the unit tests (e.g. rackemu test -k ring -x).")
    te.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS", help="passed to pytest")
    te.set_defaults(func=cmd_test)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the top-level options, then each command group's parsers."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="rackemu", formatter_class=fmt, epilog=EPILOG,
                                description="Boot and drive clusters of emulated ARMv8 nodes "
                                            "(QEMU + rackemu devices) linked by a fabric bridge.")
    p.add_argument("--version", action="version", version=f"rackemu {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_cluster_commands(sub)
    _add_guest_commands(sub)
    _add_node_commands(sub)
    _add_bridge_commands(sub)
    _add_fault_commands(sub)
    _add_switch_commands(sub)
    _add_capture_commands(sub)
    _add_tool_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # argparse cannot take "everything after --" next to options; split it off by hand.
    tail = None
    if argv[:1] == ["exec"] and "--" in argv:
        k = argv.index("--")
        argv, tail = argv[:k], argv[k + 1:]
    elif argv[:1] == ["test"] and not {"-h", "--help"} & set(argv[1:]):
        argv, tail = ["test"], argv[1:]
    args = parser.parse_args(argv)
    if tail is not None:
        if args.command == "exec":
            args.cmd = tail
        else:
            args.pytest_args = tail
    try:
        return args.func(args)
    except (ConfigError, ClusterError) as e:
        error(str(e))
        return 1
    except BadRequest as e:
        error(str(e))
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        say("interrupted")
        return 130
    except BrokenPipeError:
        # `rackemu console 0 | head`: the reader left; not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        # Last resort (the launcher turns the ones it expects into ClusterError at their
        # source): a message, never a traceback.
        where = f" ({e.filename})" if e.filename else ""
        error(f"{e.strerror or e}{where}")
        return 1
    except UnicodeError as e:
        # Last resort likewise: text that must be UTF-8 and is not (an argument of other bytes).
        error(f"text that is not UTF-8 where UTF-8 is needed (an argument or a file name?): {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
