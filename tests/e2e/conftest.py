"""End-to-end fixtures: real QEMU nodes running the real guest image, linked by the real bridge.

  cluster2           session-scoped 2-node cluster (256 MiB, 2 vCPUs each), shared by tests
                     that do not break it; torn down at the end of the session
  fresh_cluster      factory for a private cluster (tests that kill or restart nodes):
                         c = fresh_cluster(nodes=3)
  in_background      run_background(node, cmd, **exec_kwargs) -> Background (.result(timeout))
  run_concurrently   run_concurrently(node_a, cmd_a, node_b, cmd_b) -> (result_a, result_b):
                     cmd_a starts first in a thread (e.g. a receiver), cmd_b a moment later

Without the build artefacts the tests are skipped with a hint (failed instead when CI or
RACKEMU_E2E_REQUIRE is set). When a test that used a cluster fails, the tail of every node's
console is attached to its report.
"""
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "platform"))

from rackemu.cluster import Cluster, run_background  # noqa: E402
from rackemu.config import ConfigError, load_config  # noqa: E402

_clusters: list[Cluster] = []


def _config(name: str, **overrides):
    over = {"name": name, "nodes": 2, "memory": "256M"}
    over.update(overrides)
    cfg = load_config(overrides=over)
    try:
        cfg.check_artefacts()
    except ConfigError as e:
        if os.environ.get("CI") or os.environ.get("RACKEMU_E2E_REQUIRE"):
            pytest.fail(str(e))
        pytest.skip(str(e).splitlines()[-1])
    return cfg


def _start(cfg) -> Cluster:
    log = (lambda m: print(f"[rackemu] {m}", file=sys.stderr)) if os.environ.get("RACKEMU_E2E_VERBOSE") else None
    c = Cluster(cfg, log=log)
    c.up()
    _clusters.append(c)
    return c


@pytest.fixture(scope="session")
def cluster2():
    c = _start(_config(f"e2e-{os.getpid()}"))
    yield c
    c.down()
    _clusters.remove(c)


@pytest.fixture
def fresh_cluster():
    started = []

    def make(nodes: int = 2, **overrides) -> Cluster:
        n = len(started)
        c = _start(_config(f"e2e-{os.getpid()}-f{n}", nodes=nodes, **overrides))
        started.append(c)
        return c

    yield make
    for c in started:
        c.down()
        _clusters.remove(c)


@pytest.fixture
def in_background():
    return run_background


def run_concurrently(node_a, cmd_a, node_b, cmd_b, delay: float = 1.0, timeout: float = 60.0):
    """Start cmd_a on node_a in a thread, wait `delay` s, run cmd_b on node_b; both results."""
    job = run_background(node_a, cmd_a, timeout=timeout)
    time.sleep(delay)
    rb = node_b.exec(cmd_b, timeout=timeout)
    ra = job.result(timeout + 10)
    return ra, rb


@pytest.fixture(name="run_concurrently")
def _run_concurrently_fixture():
    return run_concurrently


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed and _clusters:
        for c in _clusters:
            for n in c.nodes:
                rep.sections.append((f"{c.config.name} node {n.id} console (last 30 lines)",
                                     n.console_tail(30)))
