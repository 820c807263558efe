/* SPDX-License-Identifier: MIT */
/* QOM glue of the Unimem vmbox and packetizer (docs/unimem.md). */
#ifndef RACKEMU_UNIMEM_QOM_H
#define RACKEMU_UNIMEM_QOM_H

#include "hw/sysbus.h"

#define TYPE_RACKEMU_VMBOX "rackemu-vmbox"
#define TYPE_RACKEMU_PACKETIZER "rackemu-packetizer"

/*
 * The packetizer's links: "vmbox" (its node's mailbox, for local deliveries; required) and
 * "fabric" (rackemu_glue.h: remote deliveries; unset for a node without a fabric). It serves
 * other nodes' deliveries into the vmbox from the port thread.
 */

#endif
