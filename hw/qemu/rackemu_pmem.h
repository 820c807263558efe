/* SPDX-License-Identifier: MIT */
/* QOM glue of rackemu's persistent memory (docs/pmem.md). */
#ifndef RACKEMU_PMEM_QOM_H
#define RACKEMU_PMEM_QOM_H

#include "exec/memory.h"
#include "hw/sysbus.h"

#define TYPE_RACKEMU_PMEM "rackemu-pmem"

/*
 * MMIO region 0: the control/status block (PMEM_MMIO_SIZE); region 1: the NVM region (the
 * property `size`), which the machine maps at the property `base`.
 */

/*
 * Defined in QEMU's softmmu/memory.c by platform/qemu/qemu-pmem-hook.patch: called by
 * memory_region_writeback (DC CVAP, DC CVADP, DC CVAC, DC CIVAC) when set. The device sets it.
 */
extern void (*rackemu_writeback_hook)(MemoryRegion *mr, hwaddr addr, hwaddr size);

#endif
