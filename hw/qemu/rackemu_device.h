/* SPDX-License-Identifier: MIT */
/*
 * The generic adapter between QOM and a device core's operations (rackemu/device.h), written
 * once for every rackemu device on the system bus or PCI (docs/adding-a-device.md). A device's
 * glue embeds a RackemuDevice, fills in its core's configuration from QOM properties and calls
 * rackemu_device_realize; the adapter then does the rest:
 *   - the host interface (RackemuHost, rackemu_glue.h): interrupts, DMA, time, frames, timers;
 *   - the core's register regions as MemoryRegions (sysbus_init_mmio in order, or the PCI BAR
 *     each region names), every access traced and handed to the core;
 *   - the core's fabric service bound to the node's port, its Ethernet receiver attached;
 *   - pause while the VM is stopped (savevm, migration, gdb, stop), and the port's link state
 *     handed to the core when it runs again;
 *   - reset, and the interrupt lines set from the core's levels after reset and load;
 *   - migration: VMSTATE_RACKEMU_DEVICE carries the core's state string (hw/core/state.h),
 *     which the core validates on load (a refused state fails the migration with its reason).
 * What stays in a device's glue: its QOM type, properties and their checks, and what is truly
 * its own (PCI config space and capabilities, a machine-level wiring).
 */
#ifndef RACKEMU_DEVICE_ADAPTER_H
#define RACKEMU_DEVICE_ADAPTER_H

#include "migration/vmstate.h"
#include "rackemu/device.h"
#include "rackemu_glue.h"

typedef struct RackemuDevice RackemuDevice;

typedef struct RackemuDeviceRegion {
    MemoryRegion mr;
    RackemuDevice *d;
    const RkDeviceRegion *ops;
} RackemuDeviceRegion;

struct RackemuDevice {
    RackemuHost host;
    const RkDeviceOps *ops;
    void *core;
    DeviceState *dev;
    RackemuDeviceRegion regions[RK_DEVICE_MAX_REGIONS];
    RkFabricEndpoint *ep;
    bool eth_attached;
    VMChangeStateEntry *vmse;
    /* migration: the core's state string, filled in by pre_save / read before post_load */
    uint8_t *state;
    uint32_t state_len;
};

/*
 * Set up the host (rackemu_host_init: `nirqs` lines from ops; a PCI function's MSI-X table at
 * ops->msix_bar when msix is true), create the core from `cfg` and map its regions. On failure
 * errp says why ("<type>: <the core's message>") and nothing is left behind.
 */
bool rackemu_device_realize(RackemuDevice *d, DeviceState *dev, const RkDeviceOps *ops, const void *cfg,
                            RackemuFabric *fabric, unsigned node_id, unsigned node_count, bool msix,
                            Error **errp);
void rackemu_device_unrealize(RackemuDevice *d);
void rackemu_device_reset(RackemuDevice *d);

extern const VMStateDescription vmstate_rackemu_device;
/* The core's state inside a device's VMState, under the core's state_version. */
#define VMSTATE_RACKEMU_DEVICE(_field, _state) VMSTATE_STRUCT(_field, _state, 0, vmstate_rackemu_device, RackemuDevice)

#endif /* RACKEMU_DEVICE_ADAPTER_H */
