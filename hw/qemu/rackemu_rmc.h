/* SPDX-License-Identifier: MIT */
#ifndef RACKEMU_RMC_H
#define RACKEMU_RMC_H

#include "hw/sysbus.h"

#define TYPE_RACKEMU_RMC "rackemu-rmc"

/*
 * Wiring (set before realize): link "ram" (the node's RAM region) with property "ram-base" (its
 * guest physical base), properties "seg-base"/"seg-size" (the reserved context segment, 0: none)
 * and link "fabric" (rackemu_glue.h; unset: a node without fabric). Realize creates the core and
 * binds the RMC fabric service, so the machine starts the port after realizing it.
 */

#endif
