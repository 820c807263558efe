"""Bare-metal firmware self-tests (firmware/*_selftest.c) on a standalone rackemu-node.

The firmware drives the vmbox and packetizer with no OS and reports every check on the UART;
this test asserts each line and the final verdict.
"""
import os
import subprocess

import pytest

from qtest import BUILD, QEMU

ELF = os.path.join(BUILD, "firmware", "unimem-selftest.elf")
CHECKS = ["vmbox id", "packetizer id", "empty fifo pattern", "mif load returns the stored word",
          "local packet acknowledged", "arrival interrupt pending", "word 0 carries the PIDT prefix",
          "interrupt clears when drained", "illegal destination", "remote node without fabric",
          "PIF without PID_CONF bit sends nothing", "no packet arrived", "NOPID counter"]


@pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(ELF)), reason="build first: ./rackemu setup")
def test_unimem_firmware_selftest_passes_every_check():
    out = subprocess.run([QEMU, "-M", "rackemu-node", "-m", "128", "-nographic", "-nic", "none",
                          "-kernel", ELF], capture_output=True, text=True, timeout=60).stdout
    lines = [ln.strip() for ln in out.replace("\r", "").splitlines()]
    for c in CHECKS:
        assert f"rackemu-firmware: {c} ok" in lines, f"check '{c}' did not pass:\n{out}"
    assert "rackemu-firmware: ALL PASS" in lines, out


RMC_ELF = os.path.join(BUILD, "firmware", "rmc-selftest.elf")
RMC_CHECKS = ["rmc id", "qp count", "segment present", "context valid", "qp enabled", "read completes ok",
              "read data", "write completes ok", "write data", "faa ok", "faa old value", "cas ok",
              "cas old value", "cas swapped", "sabre ok", "sabre version", "sabre without speculation ok",
              "sabre modeled like a read", "no speculation is slower", "odd version aborts",
              "unaligned cas refused", "read past the segment refused", "bad opcode refused", "cq wrapped"]


@pytest.mark.skipif(not (os.path.exists(QEMU) and os.path.exists(RMC_ELF)), reason="build first: ./rackemu setup")
def test_rmc_firmware_selftest_passes_every_check():
    """The soNUMA RMC without an OS: the node is its own destination (firmware/rmc_selftest.c)."""
    out = subprocess.run([QEMU, "-M", "rackemu-node", "-m", "128", "-nographic", "-nic", "none",
                          "-kernel", RMC_ELF], capture_output=True, text=True, timeout=60).stdout
    lines = [ln.strip() for ln in out.replace("\r", "").splitlines()]
    for c in RMC_CHECKS:
        assert f"rackemu-firmware: {c} ok" in lines, f"check '{c}' did not pass:\n{out}"
    assert "rackemu-firmware: ALL PASS" in lines, out
