"""Scenario: hostile unprivileged users (u, uid 1000, and v, uid 1001) against the soNUMA RMC
driver's doorbell pages (docs/rmc-driver.md "Queue pairs"; the RMC's twin of the RNIC's finding 4,
docs/trust-model.md R11).

  - mmap of a QP's doorbell page raced with RMC_IOC_QP_DESTROY and left a mapping the destroy
    did not revoke: the page was installed inside mmap, before the new mapping joined the file's
    address space, where the destroy's unmap could not see it; the stale page still reached the
    device and rang the next QP at that index, whoever's. Now the page is inserted by a fault
    handler that checks ownership under the device mutex: many mmap/destroy races by two users
    on a 2-vCPU node leave no mapping that reaches the device, and the deterministic properties
    hold (a mapping faults once its QP is destroyed, even when another file's QP took the index).

One single-node cluster with 2 vCPUs serves both tests (the races want two vCPUs; they need no
traffic, so no second node).
"""
import time

import pytest

from conftest import _clusters, _config, _start
from guest_tools import kv

ITERS = 2000  # per user; two users race at once


@pytest.fixture(scope="module")
def node():
    c = _start(_config(f"e2e-rmc-hard-{int(time.time())}", nodes=1, vcpus=2))
    yield c.node(0)
    c.down()
    _clusters.remove(c)


def as_user(node, user, cmd, timeout=120):
    return node.exec(["su", user, "-c", cmd], timeout=timeout)


def test_a_destroyed_qps_doorbell_mapping_faults(node):
    """Touched or not, the mapping faults after the destroy, also when another file's QP has the
    same index since (a store through it does not ring that QP); no mmap after the destroy."""
    r = as_user(node, "u", "rmc-hostile dbstale")
    d = kv(r.stdout)
    assert r.rc == 0 and d[-1]["failed"] == "0" and d[-1]["checks"] == "3", (r.stdout + r.stderr).decode()


def test_no_doorbell_mapping_survives_a_racing_destroy(node, in_background):
    """Two users race mmap of a doorbell page against RMC_IOC_QP_DESTROY on two vCPUs. Before:
    stale mappings that still reached the device and rang another file's QP at the same index."""
    job = in_background(node, ["su", "v", "-c", f"rmc-hostile dbrace --iters {ITERS}"], timeout=600)
    ru = as_user(node, "u", f"rmc-hostile dbrace --iters {ITERS}", timeout=600)
    rv = job.result(610)
    done = []
    for r in (ru, rv):
        d = [x for x in kv(r.stdout) if x.get("dbrace") == "done"]
        assert d, (r.stdout + r.stderr).decode()
        print(r.stdout.decode())  # the figures, with pytest -s
        done.append((d[0], r))
    for d, r in done:
        assert d["stale"] == "0" and d["other_errors"] == "0", "".join(x.stdout.decode() for _, x in done)
        # both outcomes of the race happened: mappings made before the destroy, refusals after
        assert int(d["mapped"]) > 0 and int(d["refused"]) > 0, d
        assert int(d["revoked"]) == int(d["mapped"]), d
