/* SPDX-License-Identifier: MIT */
/* QOM glue of the Xilinx AXI CDMA compatible engine (docs/cdma.md). */
#ifndef RACKEMU_CDMA_QOM_H
#define RACKEMU_CDMA_QOM_H

#include "hw/sysbus.h"

#define TYPE_RACKEMU_CDMA "rackemu-cdma"

/*
 * Link "fabric" (rackemu_glue.h): the node's memory transport for transfers to and from other
 * nodes.
 */

#endif
