/* SPDX-License-Identifier: MIT */
#ifndef RACKEMU_RMC_H
#define RACKEMU_RMC_H

#include "hw/sysbus.h"
#include "rk_fabric_port.h"

#define TYPE_RACKEMU_RMC "rackemu-rmc"

/* Create the device's core: guest RAM, the reserved context segment and the fabric port (may be
 * NULL). Registers the RMC fabric service, so call it before rk_fabric_port_start(). */
void rackemu_rmc_connect(DeviceState *dev, RkFabricPort *port, void *ram_host, uint64_t ram_base, uint64_t ram_size,
                         uint64_t seg_base, uint64_t seg_size, Error **errp);

#endif
