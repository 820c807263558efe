/* SPDX-License-Identifier: MIT */
/* QOM glue of the Xilinx AXI CDMA compatible engine (docs/cdma.md). */
#ifndef RACKEMU_CDMA_QOM_H
#define RACKEMU_CDMA_QOM_H

#include "hw/sysbus.h"
#include "rk_remote_mem.h"

#define TYPE_RACKEMU_CDMA "rackemu-cdma"

/* The node's memory transport for transfers to and from other nodes. */
void rackemu_cdma_connect(DeviceState *cdma, RkRemoteMem *rmem);

#endif
