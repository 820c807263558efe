#!/usr/bin/python3
"""Stand-in for qemu-system-aarch64 in the launcher's own tests (no guest, no emulation).

Reads the options the launcher passes (-pidfile, -serial file:, -chardev socket,path=,
-qmp unix:), writes the pid file and a console line, listens on the agent and QMP sockets,
and then behaves as FAKE_QEMU_MODE says:
  hang        (default) run until signalled
  ignore-term run, ignoring SIGTERM (the launcher must escalate to SIGKILL)
  die         exit with status 3 after one second, as a QEMU with a bad option would
  fork        start a child in the same process group, then hang (group kill must reach it)
  sigbus      kill itself with SIGBUS after half a second (what a full /dev/shm does to QEMU)
Like QEMU, it creates the guest-RAM file named by -object memory-backend-file,...,mem-path=
(sparse, of the given size) and writes its pid into it, so tests can tell whose file it is.
Like rackemu-node, with `fabric=PATH` in -M it joins the bridge before it opens its agent
socket (the fake bridge's `hello N` line, fakes/fake_bridge.py), exits with status 1 and the
bridge's reason if refused, and reconnects every half second while the bridge is gone.
Every argument is appended to $FAKE_QEMU_ARGV_LOG if set.
"""
import os
import signal
import socket
import sys
import threading
import time

argv = sys.argv[1:]
opts: dict[str, str] = {}
for i, a in enumerate(argv[:-1]):
    opts.setdefault(a, argv[i + 1])
mode = os.environ.get("FAKE_QEMU_MODE", "hang")
if os.environ.get("FAKE_QEMU_ARGV_LOG"):
    with open(os.environ["FAKE_QEMU_ARGV_LOG"], "a") as f:
        f.write(" ".join(argv) + "\n")

with open(opts["-pidfile"], "w") as f:
    f.write(f"{os.getpid()}\n")
console = opts["-serial"].removeprefix("file:")
with open(console, "w") as f:
    f.write("fake-qemu: booting\r\n[    0.000000] Linux version 6.1.0-fake\r\n")

obj = dict(kv.split("=", 1) for kv in opts.get("-object", "").split(",") if "=" in kv)
if "mem-path" in obj:
    size = obj["size"]
    mib = int(size[:-1]) * (1024 if size.endswith("G") else 1)
    with open(obj["mem-path"], "w+b") as ram:
        ram.truncate(mib << 20)
        ram.write(f"{os.getpid()}\n".encode())

machine = dict(kv.split("=", 1) for kv in opts.get("-M", "").split(",") if "=" in kv)


def join_fabric() -> socket.socket | None:
    """The connection to the bridge, or None if the bridge is not there; exits if refused."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(machine["fabric"])
        s.sendall(f"hello {machine['node-id']}\n".encode())
        answer = s.makefile("rb").readline().decode().strip()
    except OSError:
        s.close()
        return None
    if answer != "ok":
        print(f"rackemu-node: the fabric bridge refused node {machine['node-id']}: {answer}",
              file=sys.stderr, flush=True)
        os._exit(1)
    return s


def fabric_port(link: socket.socket | None) -> None:
    while True:
        while link is not None and link.recv(4096):
            pass
        if link is not None:
            link.close()
        time.sleep(0.5)
        link = join_fabric()


if "fabric" in machine:
    link = join_fabric()
    if link is None:
        print(f"rackemu-node: cannot connect to the fabric bridge at {machine['fabric']}",
              file=sys.stderr, flush=True)
        sys.exit(1)
    threading.Thread(target=fabric_port, args=(link,), daemon=True).start()

socks = []
chardev = dict(kv.split("=", 1) for kv in opts["-chardev"].split(",") if "=" in kv)
for path in (chardev["path"], opts["-qmp"].removeprefix("unix:").split(",")[0]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(4)
    socks.append(s)

if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "die":
    print("qemu-system-aarch64: -M rackemu-node: fake failure", file=sys.stderr)
    time.sleep(1)
    sys.exit(3)
elif mode == "sigbus":
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGBUS)
elif mode == "fork":
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "1000"])
else:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(1)
