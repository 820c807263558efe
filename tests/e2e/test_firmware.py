"""Bare-metal firmware self-tests (firmware/<name>_selftest.c) on a standalone rackemu-node.

Each self-test drives its device with no OS and reports every check on the UART
(`rackemu-firmware: <what> ok`, then `ALL PASS`). The self-tests are discovered: every
firmware/*_selftest.c is built by firmware/build.sh and run here, and the checks it must report
are the `check("<what>", ...)` calls of its own source, so a check that silently stops running
fails the test.
"""
import os
import re
import subprocess

import pytest

from qtest import BUILD, QEMU, ROOT

SRC = os.path.join(ROOT, "firmware")
SELFTESTS = sorted(f[:-len("_selftest.c")] for f in os.listdir(SRC) if f.endswith("_selftest.c"))


def declared_checks(name):
    """The check names of firmware/<name>_selftest.c, in source order (each a string literal)."""
    text = open(os.path.join(SRC, f"{name}_selftest.c")).read()
    calls = re.findall(r"\bcheck\(", text)
    names = re.findall(r"\bcheck\(\s*\"((?:[^\"\\]|\\.)*)\"", text)
    assert len(names) == len(calls), f"{name}: every check() must name its check with a string literal"
    return names


def test_every_device_with_a_selftest_is_found():
    assert {"unimem", "rmc"} <= set(SELFTESTS), SELFTESTS


@pytest.mark.parametrize("name", SELFTESTS)
def test_firmware_selftest_passes_every_check(name):
    elf = os.path.join(BUILD, "firmware", f"{name}-selftest.elf")
    if not (os.path.exists(QEMU) and os.path.exists(elf)):
        pytest.skip("build first: ./rackemu setup")
    out = subprocess.run([QEMU, "-M", "rackemu-node", "-m", "128", "-nographic", "-nic", "none",
                          "-kernel", elf], capture_output=True, text=True, timeout=60).stdout
    lines = [ln.strip() for ln in out.replace("\r", "").splitlines()]
    checks = declared_checks(name)
    assert checks, f"firmware/{name}_selftest.c declares no check()"
    for c in checks:
        assert f"rackemu-firmware: {c} ok" in lines, f"check '{c}' did not pass:\n{out}"
    oks = [ln for ln in lines if ln.startswith("rackemu-firmware: ") and ln.endswith(" ok")]
    assert len(oks) >= len(checks), f"{len(oks)} checks passed, {len(checks)} declared:\n{out}"
    assert "rackemu-firmware: ALL PASS" in lines, out
