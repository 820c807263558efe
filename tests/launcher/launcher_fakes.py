"""Helpers for the launcher's own tests (imported by conftest.py and the test modules):
a fake build tree, a stand-in agent client, and a finder for processes left behind."""
import os
import socket
import time
import types
from pathlib import Path

FAKES = Path(__file__).resolve().parent / "fakes"


def make_build(base: Path, qemu: Path, bridge: Path) -> Path:
    build = base / "build"
    (build / "qemu").mkdir(parents=True)
    (build / "guest").mkdir()
    (build / "qemu" / "qemu-system-aarch64").symlink_to(qemu)
    (build / "rackemu-bridge").symlink_to(bridge)
    kernel = base / "Image"
    kernel.write_bytes(b"\x00" * 64)     # not a kernel: enough for process-lifecycle tests
    (build / "guest" / "guest.env").write_text(f'KVER=6.1.0-fake\nKERNEL_IMAGE="{kernel}"\n')
    (build / "guest" / "initramfs.cpio").write_bytes(b"\x00" * 64)
    return build


class FakeAgentClient:
    """Answers ping when something listens on the agent socket (the fake QEMU does); exec
    echoes the command. Stands in for rackemu.agent.AgentClient in-process."""

    answer = True

    def __init__(self, path):
        self.path = path

    @classmethod
    def shared(cls, path):
        """Like AgentClient.shared (one client per socket); the fake needs no sharing."""
        return cls(path)

    def ping(self, timeout):
        if not FakeAgentClient.answer:
            time.sleep(min(timeout, 0.2))
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def exec(self, cmd, timeout=None, stdin=None, env=None):
        return types.SimpleNamespace(rc=0, stdout=f"ran {cmd}\n".encode(), stderr=b"",
                                     timed_out=False)


def pids_referencing(path) -> list[int]:
    """Live processes whose command line mentions `path` (what must be gone after down)."""
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            argv = open(f"/proc/{e}/cmdline", "rb").read().decode(errors="replace")
            st = open(f"/proc/{e}/stat").read()
        except OSError:
            continue
        if str(path) in argv and st[st.rfind(")") + 2] not in "ZX":
            out.append(int(e))
    return out


def snapshot_files(c, node: int, path: Path, data: bytes = b"QEVM\x00\x00\x00\x03 stream",
                   ram: bytes = b"", **changes) -> Path:
    """A snapshot of node `node` of cluster c as `rackemu node save` writes it (format 2): the
    stream `path` (`data`), the RAM image path.ram (c's guest RAM, `ram` at offset 0, the rest a
    hole) and path.meta.json; `changes` override metadata keys."""
    import json

    from rackemu.ramimage import BLOCK, image_digest
    from rackemu.snapshot import SNAPSHOT_FORMAT, file_sha256, meta_path, node_identity, ram_image_path
    size = c.config.memory_mib << 20
    path.write_bytes(data)
    image = ram_image_path(path)
    with open(image, "wb") as f:
        f.write(ram)
        f.truncate(size)
    digest, data_bytes = image_digest(image, size)
    meta = {"format": SNAPSHOT_FORMAT, **node_identity(c.config, node), "size": len(data),
            "sha256": file_sha256(path),
            "ram": {"size": size, "data_bytes": data_bytes, "block": BLOCK, "sha256": digest}}
    meta.update(changes)
    meta_path(path).write_text(json.dumps(meta))
    return path
