/* SPDX-License-Identifier: MIT */
/* QOM glue of the Unimem vmbox and packetizer (docs/unimem.md). */
#ifndef RACKEMU_UNIMEM_QOM_H
#define RACKEMU_UNIMEM_QOM_H

#include "hw/sysbus.h"
#include "rk_fabric_endpoint.h"

#define TYPE_RACKEMU_VMBOX "rackemu-vmbox"
#define TYPE_RACKEMU_PACKETIZER "rackemu-packetizer"

/* Wire the packetizer to its node's vmbox (local deliveries) and to the node's fabric port
 * (remote deliveries; NULL for a node without a fabric). Serves remote deliveries into the
 * vmbox from the port thread. */
void rackemu_unimem_connect(DeviceState *vmbox, DeviceState *packetizer, RkFabricPort *port);

#endif
