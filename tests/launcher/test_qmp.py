"""rackemu.qmp, the one QMP client of the launcher and the tests, against a scripted QMP server:
answers, QEMU's errors, skipped events, memory reads through `xp`, the wait for a socket QEMU
has not created yet, and what a peer that is not QEMU gets. The real QEMU: tests/e2e
(test_savevm.py, test_unimem_registers.py, test_cdma_registers.py)."""
import json
import socket
import threading
import time

import pytest

from rackemu.cluster import ClusterError
from rackemu.qmp import Qmp, QmpCommandError, QmpError, connect_qmp, read_phys


class ScriptedQmp:
    """A QMP server on a UNIX socket answering from a table (an answer may be a list, used in
    turn, the last one repeated); records what it was asked."""

    def __init__(self, path, answers, greeting=b'{"QMP": {"version": {}, "capabilities": []}}\r\n'):
        self.asked = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(1)
        self.answers = answers
        self.greeting = greeting
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        conn, _ = self.srv.accept()
        with conn:
            conn.sendall(self.greeting)
            f = conn.makefile("rb")
            for line in f:
                req = json.loads(line)
                self.asked.append(req)
                cmd = req["execute"]
                if cmd == "qmp_capabilities":
                    conn.sendall(b'{"return": {}}\r\n')
                    continue
                conn.sendall(b'{"event": "STOP", "data": {}}\r\n')     # events are skipped
                answer = self.answers[cmd]
                if isinstance(answer, list):
                    answer = answer.pop(0) if len(answer) > 1 else answer[0]
                conn.sendall(answer if isinstance(answer, bytes) else json.dumps(answer).encode() + b"\r\n")


def test_qmp_client_returns_values_raises_errors_and_reads_memory(tmp_path):
    path = tmp_path / "q.sock"
    srv = ScriptedQmp(path, {
        "query-status": {"return": {"status": "paused", "running": False}},
        "migrate": {"error": {"class": "GenericError",
                              "desc": "State blocked by non-migratable device 'rackemu-unimem'"}},
        "human-monitor-command": {"return": "000000000b040000: 0x524b564d42580001 0x0000000000000100\r\n"},
    })
    with Qmp(path, timeout=5) as q:
        assert q.execute("query-status")["status"] == "paused"
        with pytest.raises(QmpCommandError) as e:
            q.execute("migrate", uri="exec:cat > x")
        assert e.value.klass == "GenericError" and "non-migratable" in e.value.desc
        assert isinstance(e.value, QmpError) and isinstance(e.value, ClusterError)
        assert read_phys(q, 0x0b040000, 2) == [0x524b564d42580001, 0x100]
    assert srv.asked[2] == {"execute": "migrate", "arguments": {"uri": "exec:cat > x"}}
    assert srv.asked[3]["arguments"] == {"command-line": "xp /2gx 0xb040000"}


def test_qmp_client_names_a_socket_without_qemu(tmp_path):
    with pytest.raises(QmpError, match="cannot connect to QEMU's QMP socket"):
        Qmp(tmp_path / "absent.sock", timeout=1).connect()


def test_connect_qmp_waits_for_the_socket_and_stops_waiting_for_a_dead_qemu(tmp_path):
    path = tmp_path / "late.sock"
    late = threading.Timer(0.3, lambda: ScriptedQmp(path, {"query-status": {"return": {"status": "running"}}}))
    late.start()
    with connect_qmp(path, timeout=5) as q:
        assert q.execute("query-status") == {"status": "running"}
    t0 = time.monotonic()
    with pytest.raises(QmpError, match=r"node 3: QEMU is not running"):
        connect_qmp(tmp_path / "never.sock", timeout=30, alive=lambda: False, what="node 3")
    assert time.monotonic() - t0 < 2, "a dead QEMU must end the wait at once"
    with pytest.raises(QmpError, match=r"node 4: cannot connect"):
        connect_qmp(tmp_path / "never.sock", timeout=0.3, what="node 4")


def test_wait_migration_polls_until_the_migration_ends(tmp_path):
    path = tmp_path / "m.sock"
    ScriptedQmp(path, {"query-migrate": [{"return": {"status": "active"}}, {"return": {"status": "active"}},
                                         {"return": {"status": "completed", "total-time": 12}}]})
    with Qmp(path, timeout=5) as q:
        assert q.wait_migration(timeout=5, poll=0.01) == {"status": "completed", "total-time": 12}
    path2 = tmp_path / "m2.sock"
    ScriptedQmp(path2, {"query-migrate": {"return": {"status": "active"}}})
    with Qmp(path2, timeout=5) as q:
        with pytest.raises(QmpError, match=r"did not end within 0 s \(status active\)"):
            q.wait_migration(timeout=0.1, poll=0.01)


@pytest.mark.parametrize("greeting,answer,message", [
    (b'{"hello": 1}\n', None, "did not greet like QMP"),
    (b"this is not json\n", None, "not JSON"),
    (b'{"QMP": {}}\n', b"garbage\n", "not JSON"),
])
def test_a_peer_that_is_not_qemu_gets_a_clear_error(tmp_path, greeting, answer, message):
    path = tmp_path / "p.sock"
    ScriptedQmp(path, {"query-status": answer}, greeting=greeting)
    with pytest.raises(QmpError, match=message):
        with Qmp(path, timeout=5) as q:
            q.execute("query-status")


def test_read_phys_refuses_an_answer_it_cannot_parse(tmp_path):
    path = tmp_path / "x.sock"
    ScriptedQmp(path, {"human-monitor-command": [{"return": "0000000000001000: 0x1\r\n"},
                                                 {"return": "Cannot access memory\r\n"}]})
    with Qmp(path, timeout=5) as q:
        with pytest.raises(QmpError, match=r"xp /2gx 0x1000 answered"):
            read_phys(q, 0x1000, 2)
        with pytest.raises(QmpError, match=r"answered 'Cannot access memory"):
            read_phys(q, 0x1000, 1)
        with pytest.raises(ValueError, match="width 3"):
            read_phys(q, 0x1000, 1, width=3)
