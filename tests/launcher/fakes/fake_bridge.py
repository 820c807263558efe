#!/usr/bin/python3
"""Stand-in for rackemu-bridge in the launcher's own tests: creates RUN_DIR/fabric.sock and
RUN_DIR/bridge.ctl, prints the ready line, answers `stats` with per-port counters, exits on
SIGTERM. FAKE_BRIDGE_MODE=die exits at once with an error instead."""
import argparse
import json
import os
import signal
import socket
import sys

p = argparse.ArgumentParser()
p.add_argument("--run-dir", required=True)
p.add_argument("--max-nodes", type=int, required=True)
args, _ = p.parse_known_args()
if os.environ.get("FAKE_BRIDGE_MODE") == "die":
    print("rackemu-bridge: cannot bind: fake failure", flush=True)
    sys.exit(2)
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
fabric = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
fabric.bind(os.path.join(args.run_dir, "fabric.sock"))
fabric.listen(64)
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ctl.bind(os.path.join(args.run_dir, "bridge.ctl"))
ctl.listen(4)
print("rackemu-bridge: ready", flush=True)
while True:
    c, _ = ctl.accept()
    line = c.makefile("rb").readline().strip()
    if line == b"stats":
        ports = [{"node": i, "state": "up", "frames_in": 10 * i, "frames_out": 10 * i + 1,
                  "bytes_in": 320 * i, "bytes_out": 320 * i + 32, "drops": 0, "errors": 0}
                 for i in range(args.max_nodes)]
        c.sendall(json.dumps({"ports": ports, "uptime_s": 1.5}).encode())
    c.close()
