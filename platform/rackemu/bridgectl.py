"""The fabric bridge's control socket (docs/fabric.md, "Running the bridge"): one command, one
JSON answer; and the bridge's start-up line.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from .base import ClusterError, indent, tail
from .config import ClusterConfig
from .procs import Proc

BRIDGE_READY_LINE = "rackemu-bridge: ready"
BRIDGE_START_TIMEOUT = 30.0


def wait_bridge_ready(bridge: Proc, log_path: Path, run_dir: Path) -> None:
    """Wait until the started bridge printed BRIDGE_READY_LINE and made its fabric socket;
    ClusterError with the end of its log if it exits or takes longer than BRIDGE_START_TIMEOUT."""
    deadline = time.monotonic() + BRIDGE_START_TIMEOUT
    while True:
        try:
            text = log_path.read_text(errors="replace")
        except OSError:
            text = ""
        if BRIDGE_READY_LINE in text and (run_dir / "fabric.sock").exists():
            break
        if not bridge.alive():
            raise ClusterError(f"the fabric bridge {bridge.exit_status()} before it was "
                               f"ready; its log ({log_path}):\n{indent(tail(text, 20))}")
        if time.monotonic() > deadline:
            raise ClusterError(f"the fabric bridge did not print {BRIDGE_READY_LINE!r} within "
                               f"{BRIDGE_START_TIMEOUT:.0f} s; its log ({log_path}):\n"
                               f"{indent(tail(text, 20))}")
        time.sleep(0.05)


def bridge_command(config: ClusterConfig, run_dir: Path, command: str,
                   timeout: float = 5.0) -> dict[str, Any]:
    """One command on the bridge's control socket (docs/fabric.md, "Running the bridge"):
    `stats`, `fault add RULE`, `fault list`, `capture start ...`; its JSON answer (an
    {"error": ...} answer is returned as is: the caller reports it)."""
    if "\n" in command:
        raise ClusterError("a bridge command is one line")
    try:
        line = command.encode() + b"\n"
    except UnicodeEncodeError:
        raise ClusterError(f"a bridge command is UTF-8 text, not {ascii(command)[:200]}") from None
    if not config.fabric:
        raise ClusterError(f"machine {config.machine!r} has no fabric bridge")
    ctl = run_dir / "bridge.ctl"
    if not ctl.exists():
        raise ClusterError(f"no bridge control socket at {ctl} (is the cluster up?)")
    data = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(ctl))
            s.sendall(line)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as e:
        raise ClusterError(f"bridge control socket {ctl}: {e}") from None
    try:
        return json.loads(data)
    except ValueError:
        raise ClusterError(f"the bridge answered `{command.split()[0]}` with something that is not JSON: "
                           f"{data[:200]!r}") from None


def port_states(config: ClusterConfig, run_dir: Path, timeout: float = 5.0) -> dict[int, str]:
    """{node: port state} from the bridge's `stats`."""
    stats = bridge_command(config, run_dir, "stats", timeout)
    return {p.get("node"): p.get("state") for p in stats.get("ports", [])}


def wait_port_down(config: ClusterConfig, run_dir: Path, i: int, timeout: float) -> None:
    """Wait until the bridge reports node i's port not up: it has seen the old QEMU's
    fabric connection close."""
    deadline = time.monotonic() + timeout
    while True:
        if port_states(config, run_dir).get(i) != "up":
            return
        if time.monotonic() >= deadline:
            raise ClusterError(f"the fabric bridge still reports node {i} connected "
                               f"{timeout:.0f} s after its QEMU stopped; see "
                               f"{run_dir / 'bridge.log'}")
        time.sleep(0.05)


def wait_ports_up(config: ClusterConfig, run_dir: Path, bridge: Proc, running: dict[int, Path],
                  timeout: float, cli_select: str) -> dict[int, str]:
    """Wait until the port of every running node ({id: its QEMU log}) is up again on the
    restarted `bridge`; {node: port state}. ClusterError naming the nodes that did not rejoin
    within `timeout` seconds, or if the bridge exits (`cli_select`: Cluster.cli_select)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ports = port_states(config, run_dir)
        except ClusterError:
            ports = {}
        missing = [i for i in running if ports.get(i) != "up"]
        if not missing:
            return {i: ports.get(i, "-") for i in running}
        if not bridge.alive():
            raise ClusterError(f"the restarted fabric bridge {bridge.exit_status()}; "
                               f"its log: {run_dir / 'bridge.log'}")
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"the fabric bridge runs again (pid {bridge.pid}) but node(s) "
                f"{', '.join(map(str, missing))} did not reconnect within {timeout:.0f} s; "
                f"restart them with `rackemu node restart N{cli_select}` (their "
                f"QEMU output: {', '.join(str(running[i]) for i in missing)})")
        time.sleep(0.2)
