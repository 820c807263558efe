"""`rackemu shmemrun`: run an OpenSHMEM program on nodes 0..N-1 of a cluster as PEs 0..N-1
(docs/shmem.md).

Each PE is started through its node's guest agent with the environment libshmem reads
(RACKEMU_SHMEM_PE, _NPES, _ROOT: the host name of PE 0's node, _PORT: the TCP port of the start-up
exchange, _SECRET: the job's secret, which the PEs prove to each other in that exchange) plus the
--env pairs. The secret is drawn afresh for every run and reaches the PE's shell on its standard
input, never on a command line (a guest's command lines are visible to all its users). A program
given as a host file is copied to every node first; a bare name or guest path must exist on every
node. When a PE fails (non-zero exit, killed, timed
out, agent lost), the others are stopped. Each PE's output is printed with a `[pe I]` prefix,
stdout to stdout and stderr to stderr, in PE order; the exit status is the worst PE's.
"""
from __future__ import annotations

import os
import random
import re
import secrets
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .base import Background, ClusterError
from .cluster import Cluster

GUEST_DIR = "/tmp/shmemrun"
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
KILL_GRACE = 3.0
_nap = time.sleep  # the launcher's poll interval (tests replace it)
RESERVED_ENV = ("RACKEMU_SHMEM_PE", "RACKEMU_SHMEM_NPES", "RACKEMU_SHMEM_ROOT", "RACKEMU_SHMEM_PORT",
                "RACKEMU_SHMEM_SECRET")
SECRET_BYTES = 32          # libshmem wants 64 hex digits


@dataclass
class PeResult:
    pe: int
    rc: int
    stdout: bytes = b""
    stderr: bytes = b""
    why: str = ""          # what went wrong, when the launcher (not the program) saw it
    stopped: bool = False  # stopped by the launcher after another PE failed


@dataclass
class Plan:
    n: int
    argv: list[str]                      # the program as the guests run it, and its arguments
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 600.0
    tag: str = ""
    secret: str = field(default_factory=lambda: secrets.token_hex(SECRET_BYTES), repr=False)


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for p in pairs:
        if not ENV_RE.match(p):
            raise ClusterError(f"--env {p!r} is not NAME=VALUE (a name of letters, digits and _)")
        k, v = p.split("=", 1)
        if k in RESERVED_ENV:
            raise ClusterError(f"--env {k}: shmemrun sets {', '.join(RESERVED_ENV)} itself")
        env[k] = v
    return env


def resolve_program(cluster: Cluster, n: int, prog: str, tag: str) -> str:
    """The program's path on the nodes: a host file is copied to every node (GUEST_DIR/TAG/NAME);
    otherwise the name or guest path must be an executable on every node."""
    nodes = cluster.nodes[:n]
    local = Path(prog)
    if "/" in prog and local.is_file():
        if not os.access(local, os.X_OK):
            raise ClusterError(f"{prog} is not executable on the host (chmod +x it)")
        remote = f"{GUEST_DIR}/{tag}/{local.name}"
        data = local.read_bytes()
        for node in nodes:
            node.sh(f"mkdir -p {GUEST_DIR}/{tag}")
            node.put(data, remote, mode=0o755)
        return remote
    if "/" in prog and not prog.startswith("/"):
        raise ClusterError(f"program {prog} not found on the host (a relative path names a host file; "
                           f"give a guest program by its absolute path or bare name)")
    for node in nodes:
        r = node.exec(f"command -v {shlex.quote(prog)}", timeout=30)
        if r.rc != 0 or not r.stdout.strip():
            raise ClusterError(f"program {prog} not found on node {node.id} (neither a host file nor "
                               f"an executable in the guest's PATH)")
    return prog


def pe_command(plan: Plan, pe: int, root: str, port: int) -> str:
    env = {"RACKEMU_SHMEM_PE": str(pe), "RACKEMU_SHMEM_NPES": str(plan.n), "RACKEMU_SHMEM_ROOT": root,
           "RACKEMU_SHMEM_PORT": str(port), **plan.env}
    pidfile = f"{GUEST_DIR}/{plan.tag}.pe{pe}.pid"
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    prog = " ".join(shlex.quote(a) for a in plan.argv)
    # the secret comes on stdin (pe_stdin) into the environment, past every command line
    return (f"IFS= read -r RACKEMU_SHMEM_SECRET; export RACKEMU_SHMEM_SECRET; mkdir -p {GUEST_DIR}; "
            f"echo $$ > {pidfile}; exec env {assigns} {prog}")


def pe_stdin(plan: Plan) -> bytes:
    """What pe_command's shell reads first: the job's secret (the program's stdin is then empty)."""
    return plan.secret.encode() + b"\n"


def stop_pe(node: Any, plan: Plan, pe: int) -> None:
    """TERM the PE's process, KILL it after KILL_GRACE seconds (best effort: the node may be gone)."""
    pidfile = f"{GUEST_DIR}/{plan.tag}.pe{pe}.pid"
    cmd = (f"p=$(cat {pidfile} 2>/dev/null) && [ -n \"$p\" ] || exit 0; kill -TERM $p 2>/dev/null; "
           f"for i in $(seq {int(KILL_GRACE * 10)}); do kill -0 $p 2>/dev/null || exit 0; sleep 0.1; done; "
           f"kill -KILL $p 2>/dev/null; true")
    try:
        node.exec(cmd, timeout=KILL_GRACE + 10)
    except ClusterError:
        pass


def run(cluster: Cluster, plan: Plan, say: Callable[[str], None] = lambda m: None) -> list[PeResult]:
    """Start every PE, wait, stop the others when one fails; the results in PE order."""
    nodes = cluster.nodes[:plan.n]
    port = random.randint(20000, 29999)
    root = f"node{nodes[0].id}"

    def one(pe: int) -> PeResult:
        r = nodes[pe].exec(pe_command(plan, pe, root, port), timeout=plan.timeout, stdin=pe_stdin(plan))
        if getattr(r, "timed_out", False):
            return PeResult(pe, 124, r.stdout, r.stderr, f"timed out after {plan.timeout:g} s (--timeout)")
        return PeResult(pe, r.rc if isinstance(r.rc, int) and 0 <= r.rc < 256 else 1, r.stdout, r.stderr)

    jobs = [Background(one, pe, name=f"rackemu-shmem-pe{pe}") for pe in range(plan.n)]
    results: list[PeResult | None] = [None] * plan.n
    stopped: set[int] = set()
    try:
        _wait(plan, nodes, jobs, results, stopped, say)
    except KeyboardInterrupt:
        # Ctrl-C: the PEs run in the guests, not under this process: stop them before leaving
        say("interrupted: stopping every PE")
        for s in [Background(stop_pe, nodes[q], plan, q) for q in range(plan.n) if results[q] is None]:
            s.result()
        raise
    for q in range(plan.n):
        try:
            nodes[q].exec(f"rm -f {GUEST_DIR}/{plan.tag}.pe{q}.pid", timeout=10)
        except ClusterError:
            pass
    return [r for r in results if r is not None]


def _wait(plan: Plan, nodes: list[Any], jobs: list[Background], results: list[PeResult | None],
          stopped: set[int], say: Callable[[str], None]) -> None:
    """Collect the PEs' results as they end; the first failure stops the PEs still running."""
    while any(r is None for r in results):
        for pe, job in enumerate(jobs):
            if results[pe] is not None or not job.done():
                continue
            try:
                res = job.result()
            except ClusterError as e:
                res = PeResult(pe, 1, why=str(e))
            res.stopped = pe in stopped
            results[pe] = res
            if (res.rc != 0 or res.why) and not stopped and not res.stopped:
                others = [q for q in range(plan.n) if results[q] is None]
                stopped.update(others)
                if others:
                    say(f"PE {pe} (node {nodes[pe].id}) "
                        f"{res.why or f'exited with status {res.rc}'}; stopping PEs "
                        f"{', '.join(map(str, others))}")
                    for s in [Background(stop_pe, nodes[q], plan, q) for q in others]:
                        s.result()
        _nap(0.05)


def print_results(results: list[PeResult], out=None, err=None) -> None:
    out = out or sys.stdout
    err = err or sys.stderr
    for r in results:
        for stream, data in ((out, r.stdout), (err, r.stderr)):
            for line in data.decode(errors="replace").splitlines():
                print(f"[pe {r.pe}] {line}", file=stream)
    for r in results:
        if r.why:
            print(f"[pe {r.pe}] shmemrun: {r.why}", file=err)
        elif r.stopped:
            print(f"[pe {r.pe}] shmemrun: stopped after another PE failed (status {r.rc})", file=err)
        elif r.rc:
            print(f"[pe {r.pe}] shmemrun: exited with status {r.rc}", file=err)
    out.flush()
    err.flush()


def worst(results: list[PeResult]) -> int:
    """The exit status: the first failing PE's own status (not that of the PEs stopped after it),
    else the largest."""
    own = [r.rc for r in results if r.rc and not r.stopped]
    if own:
        return max(own)
    return max((r.rc for r in results), default=0)


def main(cluster: Cluster, n: int, prog: str, args: list[str], env: list[str], timeout: float,
         say: Callable[[str], None]) -> int:
    if n > len(cluster.nodes):
        raise ClusterError(f"-n {n} asks for {n} PEs but cluster {cluster.config.name!r} has "
                           f"{len(cluster.nodes)} node(s) (one PE per node): use -n {len(cluster.nodes)} or "
                           f"less, or start a larger cluster (rackemu cluster up --nodes {n})")
    for node in cluster.nodes[:n]:
        node.check_agent()
    plan = Plan(n=n, argv=[], env=parse_env(env), timeout=timeout, tag=f"run{os.getpid()}-{int(time.time())}")
    plan.argv = [resolve_program(cluster, n, prog, plan.tag), *args]
    say(f"running {' '.join(shlex.quote(a) for a in [prog, *args])} as {n} PE(s) on nodes 0..{n - 1}")
    results = run(cluster, plan, say)
    print_results(results)
    return worst(results)
