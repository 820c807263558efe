/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of rackemu's Xilinx AXI CDMA-compatible engine (PG034; docs/cdma.md). The device
 * logic is the C++ core (hw/unimem/cdma.{h,cc}), whose engine runs on a thread of its own
 * (cdma_capi.cc). The generic adapter (rackemu_device.h) serves the core's operations
 * (rk_cdma_device_ops): the register page, and the node's host (rackemu_glue.h): the interrupt
 * line, and DMA over the node's physical address space, RAM only, plus the global address space
 * window, whose transfers go straight to the fabric's one-sided memory service in large requests
 * instead of 8-byte window accesses. The engine is paused while the VM is stopped (it finishes
 * the transfer or descriptor it is in and waits), so a saved state and the saved RAM agree.
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"

#include "cdma_capi.h"
#include "rackemu_device.h"
#include "rackemu_cdma.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuCdmaState, RACKEMU_CDMA)

struct RackemuCdmaState {
    SysBusDevice parent_obj;
    RackemuDevice rd;
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: global addresses fail) */
    uint32_t node_id;
    uint32_t node_count;
};

static void rackemu_cdma_realize(DeviceState *dev, Error **errp)
{
    RackemuCdmaState *s = RACKEMU_CDMA(dev);

    if (s->node_count < 1 || s->node_count > 64) {
        error_setg(errp, "rackemu-cdma: node-count %u out of range 1..64", s->node_count);
        return;
    }
    rackemu_device_realize(&s->rd, dev, &rk_cdma_device_ops, NULL, s->fabric, s->node_id, s->node_count, false,
                           errp);
}

static void rackemu_cdma_unrealize(DeviceState *dev)
{
    rackemu_device_unrealize(&RACKEMU_CDMA(dev)->rd);
}

static void rackemu_cdma_reset(DeviceState *dev)
{
    rackemu_device_reset(&RACKEMU_CDMA(dev)->rd);
}

/*
 * The registers and engine state (CdmaState, hw/unimem/cdma.h); docs/cdma.md "Migration". The
 * core refuses anything out of range; a transfer in flight at save ends halted with DMASlvErr.
 */
static const VMStateDescription rackemu_cdma_vmstate = {
    .name = "rackemu-cdma",
    .version_id = 2, /* 2: the core's state string (rackemu_device.h) */
    .minimum_version_id = 2,
    .fields = (VMStateField[]) {
        VMSTATE_RACKEMU_DEVICE(rd, RackemuCdmaState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_cdma_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuCdmaState, node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuCdmaState, node_count, 1),
    DEFINE_PROP_LINK("fabric", RackemuCdmaState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_cdma_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Xilinx AXI CDMA compatible engine (PG034), rackemu";
    dc->realize = rackemu_cdma_realize;
    dc->unrealize = rackemu_cdma_unrealize;
    dc->reset = rackemu_cdma_reset;
    dc->vmsd = &rackemu_cdma_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_cdma_props);
}

static const TypeInfo rackemu_cdma_types[] = {
    {
        .name = TYPE_RACKEMU_CDMA,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuCdmaState),
        .class_init = rackemu_cdma_class_init,
    },
};

DEFINE_TYPES(rackemu_cdma_types)
