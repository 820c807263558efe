"""A cluster's live status: what `rackemu cluster status` shows (docs/launcher.md, "cluster status").

The recorded state (state.json) says what should run; this checks every process and pings every
running node's agent, and names each problem with the command that fixes it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

from .base import ClusterError
from .config import ClusterConfig
from .node import Node
from .procs import Proc


class StatusSource(Protocol):
    """The recorded state the view starts from (cluster.Cluster is one)."""

    config: ClusterConfig
    run_dir: Path
    nodes: list[Node]
    bridge: Proc | None
    status: str
    created: float | None

    @property
    def ram_dir(self) -> Path: ...

    def cli_select(self) -> str: ...


def status_view(cluster: StatusSource, ping: bool = True, ping_timeout: float = 2.0) -> dict[str, Any]:
    """Live view of `cluster`: every process checked, every running node's agent pinged (in
    parallel). Cluster.status_dict; `rackemu cluster status` prints it."""
    agent: dict[int, str] = {}

    def check(n: Node) -> None:
        if not n.alive():
            agent[n.id] = "-"
        elif n.proc is not None and n.proc.stopped():
            agent[n.id] = "QEMU stopped (SIGSTOP)"
        elif not ping:
            agent[n.id] = "?"
        else:
            try:
                agent[n.id] = "ok" if n.ping(ping_timeout) else "no answer"
            except ClusterError as e:
                agent[n.id] = f"error: {e}"

    threads = [threading.Thread(target=check, args=(n,), daemon=True) for n in cluster.nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    nodes = []
    for n in cluster.nodes:
        alive = n.alive()
        state = n.state if alive or n.state in ("killed", "stopped") else "dead"
        nodes.append({"node": n.id, "pid": n.pid if alive else None, "state": state,
                      "agent": agent[n.id], "boot_seconds": n.boot_seconds,
                      "snapshot": n.snapshot if alive else None,
                      "console": str(n.console_path)})
    bridge_alive = bool(cluster.bridge and cluster.bridge.alive())
    live = any(x["pid"] for x in nodes) or bridge_alive
    status = cluster.status
    expected = status in ("up", "degraded", "starting")   # processes should be running
    sel = cluster.cli_select()
    problems = []
    if cluster.config.fabric and expected and not bridge_alive and cluster.bridge is not None:
        problems.append(f"the fabric bridge is dead (see {cluster.run_dir / 'bridge.log'}): "
                        f"restart it with `rackemu bridge restart{sel}`")
    for x in nodes:
        if expected and x["state"] in ("dead", "killed", "stopped") and status != "starting":
            problems.append(f"node {x['node']} is {x['state']}: start it again with "
                            f"`rackemu node restart {x['node']}{sel}`")
        elif x["agent"] not in ("ok", "?", "-") and status != "starting":
            problems.append(f"node {x['node']}: agent {x['agent']}; see `rackemu console "
                            f"{x['node']}{sel}`, or `rackemu node restart {x['node']}{sel}`")
    if status == "up" and (not all(x["state"] == "running" for x in nodes) or problems):
        status = "degraded"
    if status in ("up", "degraded", "starting") and not live:
        status = "dead"
    bridge_state = ("running" if bridge_alive else "-" if not cluster.config.fabric
                    else "dead" if expected and cluster.bridge is not None else "stopped")
    return {"name": cluster.config.name, "run_dir": str(cluster.run_dir), "status": status,
            "created": cluster.created, "machine": cluster.config.machine,
            "memory": cluster.config.memory, "vcpus": cluster.config.vcpus,
            "bridge": {"pid": cluster.bridge.pid if cluster.bridge is not None and bridge_alive else None,
                       "state": bridge_state,
                       "log": str(cluster.run_dir / "bridge.log")},
            "ram_dir": str(cluster.ram_dir),
            "problems": problems,
            "nodes": nodes}
