"""Fixtures for the launcher's own tests: a fake build tree (fake QEMU and bridge scripts from
fakes/, or the real binaries where a test asks for them) and an agent client stand-in
(launcher_fakes.py).

These tests need neither the guest image nor rackemu's QEMU: they pin configuration
validation, the CLI's messages, and that no process outlives `down`, a failed `up` or Ctrl-C.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from launcher_fakes import FAKES, FakeAgentClient, make_build  # noqa: E402


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """RACKEMU_BUILD pointing at fake QEMU/bridge scripts; returns the build dir."""
    build = make_build(tmp_path, FAKES / "fake_qemu.py", FAKES / "fake_bridge.py")
    monkeypatch.setenv("RACKEMU_BUILD", str(build))
    return build


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"


@pytest.fixture
def fake_agent(monkeypatch):
    FakeAgentClient.answer = True
    monkeypatch.setattr("rackemu.node._agent_client_class", lambda: FakeAgentClient)
    return FakeAgentClient
