/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the Unimem virtualized mailbox and packetizer (ExaNoDe D3.6 sec. 5.1, 5.2).
 * The device logic lives in the QEMU-independent C++ cores (hw/unimem), which the generic
 * adapter serves (rackemu_device.h: MMIO region, interrupt line, pause, reset, migration of the
 * core's state). This file keeps the QOM types, their properties and checks, and the one wiring
 * of its own: the packetizer's "vmbox" link, whose core takes this node's packets and, through
 * the packetizer's RKF_SVC_UNIMEM_MBOX service (bound by the adapter on the "fabric" link),
 * other nodes' deliveries.
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"

#include "rackemu/unimem_regs.h"
#include "unimem_capi.h"
#include "rackemu_device.h"
#include "rackemu_unimem.h"
#include "trace.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuVmboxState, RACKEMU_VMBOX)
OBJECT_DECLARE_SIMPLE_TYPE(RackemuPacketizerState, RACKEMU_PACKETIZER)

struct RackemuVmboxState {
    SysBusDevice parent_obj;
    RackemuDevice dev; /* line 0: the arrival interrupt; no DMA */
    /* link "fabric": the node's port, polled by register reads (deliveries: the packetizer's service) */
    RackemuFabric *fabric;
    uint32_t node_id;
    uint32_t node_count;
    uint32_t fifo_depth;
    bool burst_known_issue;
    bool kif; /* property "kif": the kernel interface (KIF) is present (default on) */
};

struct RackemuPacketizerState {
    SysBusDevice parent_obj;
    RackemuDevice dev;        /* line 0 reserved: the packetizer does not interrupt (the seed defines none) */
    RackemuVmboxState *vmbox; /* link "vmbox": this node's mailbox (required) */
    RackemuFabric *fabric;    /* link "fabric": the node's port (optional: remote destinations fail) */
    uint32_t node_id;
    uint32_t node_count;
    bool kif; /* property "kif": the kernel interface (KIF) is present (default on) */
};

/* ---- vmbox ---- */

static void rackemu_vmbox_realize(DeviceState *dev, Error **errp)
{
    RackemuVmboxState *s = RACKEMU_VMBOX(dev);
    RkVmboxConfig cfg = { .depth = s->fifo_depth, .burst_known_issue = s->burst_known_issue, .kif = s->kif };

    if (s->fifo_depth < 4 || s->fifo_depth > 65536) {
        error_setg(errp, "rackemu-vmbox: fifo-depth %u out of range 4..65536 (words per FIFO)",
                   s->fifo_depth);
        return;
    }
    /* the fabric only for the poll of a register read: the vmbox does no DMA and binds nothing */
    rackemu_device_realize(&s->dev, dev, &rk_vmbox_device_ops, &cfg, s->fabric, s->node_id, s->node_count,
                           false, errp);
}

static void rackemu_vmbox_unrealize(DeviceState *dev)
{
    rackemu_device_unrealize(&RACKEMU_VMBOX(dev)->dev);
}

static void rackemu_vmbox_reset(DeviceState *dev)
{
    rackemu_device_reset(&RACKEMU_VMBOX(dev)->dev);
}

/*
 * Migration (docs/unimem.md): FIFO contents, IRQ_ENABLE, KIF_CTRL and the counters, as the
 * core's state (vmbox.h). While the VM is stopped the core refuses a peer's delivery with a
 * NACK, so no packet is acknowledged after the snapshot and lost with it.
 */
static const VMStateDescription rackemu_vmbox_vmstate = {
    .name = TYPE_RACKEMU_VMBOX,
    .version_id = 3, /* 3: the core's state string */
    .minimum_version_id = 3,
    .fields = (VMStateField[]) {
        VMSTATE_RACKEMU_DEVICE(dev, RackemuVmboxState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_vmbox_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuVmboxState, node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuVmboxState, node_count, 1),
    DEFINE_PROP_UINT32("fifo-depth", RackemuVmboxState, fifo_depth, VMBOX_DEFAULT_DEPTH),
    DEFINE_PROP_BOOL("burst-known-issue", RackemuVmboxState, burst_known_issue, false),
    DEFINE_PROP_BOOL("kif", RackemuVmboxState, kif, true),
    DEFINE_PROP_LINK("fabric", RackemuVmboxState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_vmbox_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Unimem virtualized mailbox (64 FIFOs and the kernel's KIF), rackemu";
    dc->realize = rackemu_vmbox_realize;
    dc->unrealize = rackemu_vmbox_unrealize;
    dc->reset = rackemu_vmbox_reset;
    dc->vmsd = &rackemu_vmbox_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_vmbox_props);
}

/* ---- packetizer ---- */

/* The mailbox traffic's trace points (docs/unimem.md; bench/mailbox_trace.py reads them). */
static void rackemu_pktz_trace_send(void *opaque, unsigned pif, unsigned dst, unsigned mif, uint64_t tag)
{
    trace_rackemu_unimem_send(RACKEMU_PACKETIZER(opaque)->node_id, pif, dst, mif, tag);
}

static void rackemu_pktz_trace_complete(void *opaque, uint64_t tag, int status)
{
    trace_rackemu_unimem_complete(RACKEMU_PACKETIZER(opaque)->node_id, tag, rk_status_name((rk_status)status));
}

static void rackemu_pktz_trace_serve(void *opaque, unsigned src, unsigned len, int reply)
{
    trace_rackemu_unimem_serve(RACKEMU_PACKETIZER(opaque)->node_id, src, len, reply);
}

static const RkPktzTrace rackemu_pktz_trace = {
    rackemu_pktz_trace_send, rackemu_pktz_trace_complete, rackemu_pktz_trace_serve,
};

static bool rackemu_pktz_get_ack_first(Object *obj, Error **errp)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(obj);

    return s->dev.core && rk_pktz_ack_first(s->dev.core);
}

static void rackemu_pktz_set_ack_first(Object *obj, bool on, Error **errp)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(obj);

    if (s->dev.core) {
        rk_pktz_set_ack_first(s->dev.core, on);
    }
}

static void rackemu_pktz_get_acks(Object *obj, Visitor *v, const char *name, void *opaque, Error **errp)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(obj);
    uint64_t n = s->dev.core ? rk_pktz_acks(s->dev.core, opaque != NULL) : 0;

    visit_type_uint64(v, name, &n, errp);
}

static void rackemu_pktz_realize(DeviceState *dev, Error **errp)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(dev);
    RkPktzConfig cfg = { .kif = s->kif, .trace = &rackemu_pktz_trace, .trace_opaque = s };

    if (!s->vmbox || !s->vmbox->dev.core) {
        error_setg(errp, "rackemu-packetizer: the 'vmbox' link (this node's mailbox) is not set");
        return;
    }
    cfg.vmbox = s->vmbox->dev.core;
    /* RACKEMU_VMBOX_ACK_FIRST=0 in the environment restores the old order (A/B measurements) */
    cfg.ack_first = g_strcmp0(g_getenv("RACKEMU_VMBOX_ACK_FIRST"), "0") != 0;
    if (!rackemu_device_realize(&s->dev, dev, &rk_pktz_device_ops, &cfg, s->fabric, s->node_id, s->node_count,
                                false, errp)) {
        return;
    }
    /* the order, switchable at run time with QMP qom-set (A/B in one cluster: bench/foundation.py) */
    object_property_add_bool(OBJECT(dev), "ack-first", rackemu_pktz_get_ack_first, rackemu_pktz_set_ack_first);
    /* how deliveries into the vmbox were answered (docs/mailbox.md); read with QMP qom-get */
    object_property_add(OBJECT(dev), "acks-first", "uint64", rackemu_pktz_get_acks, NULL, NULL, (void *)1);
    object_property_add(OBJECT(dev), "acks-after", "uint64", rackemu_pktz_get_acks, NULL, NULL, NULL);
}

static void rackemu_pktz_unrealize(DeviceState *dev)
{
    rackemu_device_unrealize(&RACKEMU_PACKETIZER(dev)->dev);
}

static void rackemu_pktz_reset(DeviceState *dev)
{
    rackemu_device_reset(&RACKEMU_PACKETIZER(dev)->dev);
}

/*
 * Migration (docs/unimem.md): PIF registers and their written-bytes tracking, PIF status, PIDT,
 * BASE_DEST, PID_CONF, the KIF's and the counters, as the core's state (packetizer.h). A PIF
 * waiting for its acknowledgement at save completes at load with NACK | FABRIC_ERR: its answer
 * went to the saved machine.
 */
static const VMStateDescription rackemu_pktz_vmstate = {
    .name = TYPE_RACKEMU_PACKETIZER,
    .version_id = 3, /* 3: the core's state string */
    .minimum_version_id = 3,
    .fields = (VMStateField[]) {
        VMSTATE_RACKEMU_DEVICE(dev, RackemuPacketizerState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_pktz_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuPacketizerState, node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuPacketizerState, node_count, 1),
    DEFINE_PROP_LINK("vmbox", RackemuPacketizerState, vmbox, TYPE_RACKEMU_VMBOX, RackemuVmboxState *),
    DEFINE_PROP_LINK("fabric", RackemuPacketizerState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_BOOL("kif", RackemuPacketizerState, kif, true),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_pktz_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Unimem virtualized packetizer (64 PIFs + TIF + the kernel's KIF), rackemu";
    dc->realize = rackemu_pktz_realize;
    dc->unrealize = rackemu_pktz_unrealize;
    dc->reset = rackemu_pktz_reset;
    dc->vmsd = &rackemu_pktz_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_pktz_props);
}

static const TypeInfo rackemu_unimem_types[] = {
    {
        .name = TYPE_RACKEMU_VMBOX,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuVmboxState),
        .class_init = rackemu_vmbox_class_init,
    }, {
        .name = TYPE_RACKEMU_PACKETIZER,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuPacketizerState),
        .class_init = rackemu_pktz_class_init,
    },
};

DEFINE_TYPES(rackemu_unimem_types)
