/* SPDX-License-Identifier: MIT */
/*
 * The rackemu-node board: where the node's devices sit in the guest physical address map and
 * which GIC SPI each one's interrupt output drives. The one place for these numbers
 * (docs/machine.md): the machine's device table (platform/machine/rackemu_node.c) is built
 * from them, the firmware self-tests and the e2e register tests address the devices with them.
 * Linux drivers never use them: they find their device through its device-tree node.
 *
 * What a device is (register layout and page size, DT compatible, counters) stays in its
 * register header under rackemu/, which does not include this file: a user that addresses a
 * device by its physical address includes board.h itself. The global address space window
 * (GAS_WINDOW_BASE, rackemu/unimem_regs.h) is part of the Unimem architecture (the GAS reports
 * it in a register), not a board choice.
 *
 * Plain C, no types: usable by QEMU, the kernel modules, the firmware and Python's C probe.
 * A new device adds its base and SPI here and one row to the machine's table.
 */
#ifndef RACKEMU_BOARD_H
#define RACKEMU_BOARD_H

/* clang-format off */
/* ---- MMIO bases: 1 MiB apart from 0x0b000000, below virt's PCIe MMIO window ---- */
#define RACKEMU_VMBOX_BASE     0x0b000000ull /* Unimem vmbox (docs/unimem.md) */
#define RACKEMU_PKTZ_BASE      0x0b100000ull /* Unimem packetizer */
#define RACKEMU_CDMA_BASE      0x0b200000ull /* AXI CDMA compatible engine (docs/cdma.md) */
#define RACKEMU_GAS_BASE       0x0b300000ull /* GAS control page; its window is at GAS_WINDOW_BASE */
#define RACKEMU_RMC_BASE       0x0b400000ull /* soNUMA RMC (docs/sonuma.md) */
#define RACKEMU_PMEM_CTRL_BASE 0x0b500000ull /* persistent memory control block (docs/pmem.md) */
/* the persistent-memory region (when the node has one): above RAM (which must end below it),
 * below virt's high MMIO at 256 GiB */
#define RACKEMU_PMEM_BASE      0x2000000000ull /* 128 GiB */
#define RACKEMU_PMEM_SIZE_MAX  0x1000000000ull /* 64 GiB */

/* ---- GIC SPIs (level, active high) ----
 * virt (QEMU 7.2 hw/arm/virt.c a15irqmap) takes SPIs 0..47 for its devices and virtio-mmio, 48..111
 * for the GICv2m MSI frame (PCIe MSI/MSI-X, e.g. the RNIC's vectors; SMMU at 74 when present) and
 * 112..175 for the platform bus; rackemu's devices sit above, at 176.. (of 256). */
#define RACKEMU_VMBOX_SPI      176u
#define RACKEMU_PKTZ_SPI       177u
#define RACKEMU_CDMA_SPI       178u
#define RACKEMU_RMC_SPI        179u
/* the GAS has no interrupt */
/* clang-format on */

#endif /* RACKEMU_BOARD_H */
