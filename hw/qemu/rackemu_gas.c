/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the Unimem global address space window (ExaNoDe D3.6 sec. 1, sec. 3.1.6;
 * docs/gas.md). The core (hw/unimem/gas.h) is served by the generic adapter
 * (rackemu_device.h): MMIO region 0 is the read-only control page, region 1 the window that the
 * machine maps at GAS_WINDOW_BASE, node_count * GAS_WINDOW_NODE_SIZE bytes. QEMU 7.2 dispatches
 * MMIO under the big lock; a window access is the host's DMA at GAS_WINDOW_BASE + G, which drops
 * it while the fabric round trip runs (rackemu_glue.c), so a vCPU that loads from another node
 * blocks only itself (other vCPUs, the main loop and interrupts go on). Other nodes' accesses
 * to this node's RAM never need the lock: the fabric port thread serves them.
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"

#include "rackemu/unimem_regs.h"
#include "unimem_capi.h"
#include "rackemu_device.h"
#include "rackemu_gas.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuGasState, RACKEMU_GAS)

struct RackemuGasState {
    SysBusDevice parent_obj;
    RackemuDevice dev;     /* DMA to the window's owners (remote memory), guest errors, node */
    RkDeviceOps ops;       /* rk_gas_device_ops with this rack's window size */
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: only errors beyond this node) */
    uint32_t node_id;
    uint32_t node_count;
};

static void rackemu_gas_realize(DeviceState *dev, Error **errp)
{
    RackemuGasState *s = RACKEMU_GAS(dev);

    if (s->node_count < 1 || s->node_count > 64 || s->node_id >= s->node_count) {
        error_setg(errp, "rackemu-gas: node-id %u / node-count %u out of range (node-id < node-count <= 64)",
                   s->node_id, s->node_count);
        return;
    }
    /* the window covers this rack's nodes only: an address beyond it decodes to nothing */
    s->ops = rk_gas_device_ops;
    s->ops.regions[1].size = (uint64_t)s->node_count * GAS_WINDOW_NODE_SIZE;
    rackemu_device_realize(&s->dev, dev, &s->ops, NULL, s->fabric, s->node_id, s->node_count, false, errp);
}

static void rackemu_gas_unrealize(DeviceState *dev)
{
    rackemu_device_unrealize(&RACKEMU_GAS(dev)->dev);
}

/*
 * The window's own counter registers (GAS_CTRL_LOADS .. BUS_ERRORS) as the core's state
 * (gas.h); a state of another node or rack size is refused. Nothing is ever in flight in the
 * device at save: a window access completes on its vCPU before the VM stops.
 */
static const VMStateDescription rackemu_gas_vmstate = {
    .name = "rackemu-gas",
    .version_id = 2, /* 2: the core's state string */
    .minimum_version_id = 2,
    .fields = (VMStateField[]) {
        VMSTATE_RACKEMU_DEVICE(dev, RackemuGasState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_gas_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuGasState, node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuGasState, node_count, 1),
    DEFINE_PROP_LINK("fabric", RackemuGasState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_gas_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Unimem global address space window, rackemu";
    dc->realize = rackemu_gas_realize;
    dc->unrealize = rackemu_gas_unrealize;
    dc->vmsd = &rackemu_gas_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_gas_props);
}

static const TypeInfo rackemu_gas_types[] = {
    {
        .name = TYPE_RACKEMU_GAS,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuGasState),
        .class_init = rackemu_gas_class_init,
    },
};

DEFINE_TYPES(rackemu_gas_types)
