#!/usr/bin/python3
"""Stand-in for rackemu-bridge in the launcher's own tests: creates RUN_DIR/fabric.sock and
RUN_DIR/bridge.ctl, prints the ready line, answers `stats` with per-port counters, exits on
SIGTERM. FAKE_BRIDGE_MODE=die exits at once with an error instead.

Handshakes follow the real bridge's rule (docs/fabric.md, "Handshake") in a line protocol of
the fakes: a node sends `hello N`, and gets `ok`, or `DUPLICATE ...` (and is closed) while a
connection of node N is up. A port goes down when the bridge sees its connection close;
FAKE_BRIDGE_HANGUP_DELAY=S makes it see that S seconds late (a loaded machine), which a
launcher that starts a node's new QEMU without waiting for the port to go down trips over."""
import argparse
import json
import os
import selectors
import signal
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--run-dir", required=True)
p.add_argument("--max-nodes", type=int, required=True)
args, _ = p.parse_known_args()
if os.environ.get("FAKE_BRIDGE_MODE") == "die":
    print("rackemu-bridge: cannot bind: fake failure", flush=True)
    sys.exit(2)
hangup_delay = float(os.environ.get("FAKE_BRIDGE_HANGUP_DELAY", "0"))
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
fabric = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
fabric.bind(os.path.join(args.run_dir, "fabric.sock"))
fabric.listen(64)
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ctl.bind(os.path.join(args.run_dir, "bridge.ctl"))
ctl.listen(4)
sel = selectors.DefaultSelector()
sel.register(fabric, selectors.EVENT_READ, "fabric")
sel.register(ctl, selectors.EVENT_READ, "ctl")
ports: dict[int, dict] = {}       # node -> {"state", "connects", "disconnects"}
pending_down: list[tuple[float, int]] = []     # (when the hang-up is noticed, node)
refused = 0
print("rackemu-bridge: ready", flush=True)


def port_stats(i: int) -> dict:
    return {"node": i, "state": ports[i]["state"], "connects": ports[i]["connects"],
            "disconnects": ports[i]["disconnects"], "frames_in": 10 * i, "frames_out": 10 * i + 1,
            "bytes_in": 320 * i, "bytes_out": 320 * i + 32, "drops": 0, "errors": 0}


def handshake(c: socket.socket) -> None:
    global refused
    c.settimeout(2)
    try:
        words = c.makefile("rb").readline().split()
        node = int(words[1]) if len(words) == 2 and words[0] == b"hello" else -1
    except (OSError, ValueError):
        node = -1
    if not 0 <= node < args.max_nodes:
        refused += 1
        c.close()
        return
    if ports.get(node, {}).get("state") == "up":
        refused += 1
        print(f"rackemu-bridge: refused node {node}: node id {node} is already connected", flush=True)
        c.sendall(f"DUPLICATE node id {node} is already connected\n".encode())
        c.close()
        return
    port = ports.setdefault(node, {"connects": 0, "disconnects": 0})
    port.update(state="up", connects=port["connects"] + 1)
    c.sendall(b"ok\n")
    c.setblocking(False)
    sel.register(c, selectors.EVENT_READ, node)
    print(f"rackemu-bridge: node {node} connected", flush=True)


def port_down(node: int) -> None:
    ports[node]["state"] = "down"
    ports[node]["disconnects"] += 1
    print(f"rackemu-bridge: node {node} disconnected", flush=True)


while True:
    now = time.monotonic()
    for when, node in [d for d in pending_down if d[0] <= now]:
        pending_down.remove((when, node))
        port_down(node)
    wait = min((w for w, _ in pending_down), default=now + 1) - now
    for key, _events in sel.select(max(wait, 0)):
        if key.data == "fabric":
            handshake(fabric.accept()[0])
        elif key.data == "ctl":
            c = ctl.accept()[0]
            line = c.makefile("rb").readline().strip()
            if line == b"stats":
                c.sendall(json.dumps({"ports": [port_stats(i) for i in sorted(ports)],
                                      "refused_handshakes": refused, "uptime_s": 1.5}).encode())
            c.close()
        else:
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            try:
                data = conn.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(conn)
                conn.close()
                if hangup_delay > 0:
                    pending_down.append((time.monotonic() + hangup_delay, key.data))
                else:
                    port_down(key.data)
