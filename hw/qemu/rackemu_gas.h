/* SPDX-License-Identifier: MIT */
/* QOM glue of the Unimem global address space window (docs/unimem.md). */
#ifndef RACKEMU_GAS_QOM_H
#define RACKEMU_GAS_QOM_H

#include "hw/sysbus.h"
#include "rk_remote_mem.h"

#define TYPE_RACKEMU_GAS "rackemu-gas"

/* The node's memory transport, which the window's accesses use. */
void rackemu_gas_connect(DeviceState *gas, RkRemoteMem *rmem);

#endif
