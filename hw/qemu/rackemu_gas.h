/* SPDX-License-Identifier: MIT */
/* QOM glue of the Unimem global address space window (docs/unimem.md). */
#ifndef RACKEMU_GAS_QOM_H
#define RACKEMU_GAS_QOM_H

#include "hw/sysbus.h"

#define TYPE_RACKEMU_GAS "rackemu-gas"

/*
 * Link "fabric" (rackemu_glue.h): the node's memory transport, which the window's accesses
 * use. MMIO region 0 is the control page, region 1 the window (at GAS_WINDOW_BASE).
 */

#endif
