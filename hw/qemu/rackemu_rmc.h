/* SPDX-License-Identifier: MIT */
#ifndef RACKEMU_RMC_H
#define RACKEMU_RMC_H

#include "hw/sysbus.h"

#define TYPE_RACKEMU_RMC "rackemu-rmc"

/*
 * Wiring (set before realize): properties "node-id"/"node-count", "seg-base"/"seg-size" (the
 * reserved context segment, 0: none) and link "fabric" (rackemu_glue.h; unset: a node without
 * fabric). Guest memory is reached through the host interface (the memory API), so the device
 * needs no link to RAM. Realize creates the core and binds the RMC fabric service, so the machine
 * starts the port after realizing it.
 */

#endif
