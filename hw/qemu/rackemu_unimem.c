/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the Unimem virtualized mailbox and packetizer (seed 004 sec. 5.1, 5.2).
 * The device logic lives in the QEMU-independent C++ cores (hw/unimem); this file maps them
 * to MMIO regions, an interrupt line, properties and reset, and carries packets between the
 * packetizer and a vmbox, local or on another node through the fabric port.
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qapi/error.h"
#include "hw/irq.h"
#include "hw/qdev-properties.h"
#include "migration/vmstate.h"
#include "hw/sysbus.h"

#include "rackemu/unimem_regs.h"
#include "rackemu/fabric_proto.h"
#include "unimem_capi.h"
#include "rackemu_glue.h"
#include "rackemu_unimem.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuVmboxState, RACKEMU_VMBOX)
OBJECT_DECLARE_SIMPLE_TYPE(RackemuPacketizerState, RACKEMU_PACKETIZER)

struct RackemuVmboxState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuIrq irq;
    RkVmbox *core;
    uint32_t node_id;
    uint32_t fifo_depth;
    bool burst_known_issue;
    bool ready; /* set by the first reset; deliveries before it would be wiped by it */
};

struct RackemuPacketizerState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    qemu_irq irq; /* reserved: the packetizer does not interrupt yet */
    RkPacketizer *core;
    RackemuVmboxState *vmbox; /* link "vmbox": this node's mailbox (required) */
    RackemuFabric *fabric;    /* link "fabric": the node's port (optional) */
    RkFabricEndpoint *ep;     /* RKF_SVC_UNIMEM_MBOX; NULL: standalone node, remote destinations fail */
    uint32_t node_id;
};

/* ---- vmbox ---- */

static int rackemu_vmbox_irq_level(void *opaque)
{
    RackemuVmboxState *s = opaque;

    return rk_vmbox_irq_level(s->core);
}

/*
 * Called by the core after the interrupt level may have changed: from a vCPU or from the
 * fabric port thread (rackemu_glue.h).
 */
static void rackemu_vmbox_irq(void *opaque, int level)
{
    RackemuVmboxState *s = opaque;

    rackemu_irq_update(&s->irq);
}

static MemTxResult rackemu_vmbox_read(void *opaque, hwaddr addr, uint64_t *data, unsigned size,
                                      MemTxAttrs attrs)
{
    RackemuVmboxState *s = opaque;

    return rk_vmbox_read(s->core, addr, size, data) == 0 ? MEMTX_OK : MEMTX_ERROR;
}

static MemTxResult rackemu_vmbox_write(void *opaque, hwaddr addr, uint64_t data, unsigned size,
                                       MemTxAttrs attrs)
{
    RackemuVmboxState *s = opaque;

    return rk_vmbox_write(s->core, addr, data, size) == 0 ? MEMTX_OK : MEMTX_ERROR;
}

static const MemoryRegionOps rackemu_vmbox_ops = {
    .read_with_attrs = rackemu_vmbox_read,
    .write_with_attrs = rackemu_vmbox_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void rackemu_vmbox_realize(DeviceState *dev, Error **errp)
{
    RackemuVmboxState *s = RACKEMU_VMBOX(dev);

    if (s->fifo_depth < 4 || s->fifo_depth > 65536) {
        error_setg(errp, "rackemu-vmbox: fifo-depth %u out of range 4..65536 (words per FIFO)",
                   s->fifo_depth);
        return;
    }
    s->core = rk_vmbox_new(s->fifo_depth, s->burst_known_issue, rackemu_vmbox_irq, rackemu_guest_error, s);
    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_vmbox_ops, s, "rackemu-vmbox", VMBOX_MMIO_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_irq_init(&s->irq, SYS_BUS_DEVICE(s), rackemu_vmbox_irq_level, s);
}

static void rackemu_vmbox_reset(DeviceState *dev)
{
    RackemuVmboxState *s = RACKEMU_VMBOX(dev);

    if (s->core) {
        rk_vmbox_reset(s->core);
        rackemu_irq_set(&s->irq, rk_vmbox_irq_level(s->core));
        qatomic_set(&s->ready, true);
    }
}

/*
 * Caveat: FIFO contents and PIF state live in the C++ cores and are not serialised yet, so
 * snapshots and migration are refused instead of silently losing them.
 */
static const VMStateDescription rackemu_unimem_vmstate = {
    .name = "rackemu-unimem",
    .unmigratable = 1,
};

static Property rackemu_vmbox_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuVmboxState, node_id, 0),
    DEFINE_PROP_UINT32("fifo-depth", RackemuVmboxState, fifo_depth, VMBOX_DEFAULT_DEPTH),
    DEFINE_PROP_BOOL("burst-known-issue", RackemuVmboxState, burst_known_issue, false),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_vmbox_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Unimem virtualized mailbox (64 FIFOs), rackemu";
    dc->realize = rackemu_vmbox_realize;
    dc->reset = rackemu_vmbox_reset;
    dc->vmsd = &rackemu_unimem_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_vmbox_props);
}

/* ---- packetizer ---- */

static void rackemu_pktz_transmit(void *opaque, unsigned pif, uint64_t tag, uint64_t dest,
                                  const uint64_t words[4])
{
    RackemuPacketizerState *s = opaque;
    unsigned node = UNIMEM_GADDR_NODE(dest);
    unsigned mif = PKTZ_DEST_MIF(dest);
    struct rkf_mbox_deliver d = { .mif = mif, .nwords = UNIMEM_PACKET_WORDS };
    struct rkf_frame_hdr h = { 0 };
    int rc;

    if (node == s->node_id) {
        int ok = s->vmbox && rk_vmbox_deliver(s->vmbox->core, mif, words, UNIMEM_PACKET_WORDS);
        rk_pktz_complete(s->core, tag, ok ? RK_PKTZ_ACK : RK_PKTZ_NACK);
        return;
    }
    if (!s->ep) {
        qemu_log_mask(LOG_GUEST_ERROR, "rackemu-packetizer: PIF %u: node %u is remote and this node "
                      "has no fabric (start it with -M rackemu-node,fabric=PATH)\n", pif, node);
        rk_pktz_complete(s->core, tag, RK_PKTZ_FABRIC_ERR);
        return;
    }
    memcpy(d.words, words, UNIMEM_PACKET_WORDS * sizeof(uint64_t));
    h.type = RKF_T_REQ;
    h.svc = RKF_SVC_UNIMEM_MBOX;
    h.op = RKF_OP_MBOX_DELIVER;
    h.dst = node;
    h.tag = tag;
    h.len = offsetof(struct rkf_mbox_deliver, words) + UNIMEM_PACKET_WORDS * sizeof(uint64_t);
    rc = rk_fabric_endpoint_send(s->ep, &h, &d);
    if (rc) {
        rk_pktz_complete(s->core, tag, RK_PKTZ_FABRIC_ERR);
    }
}

/* Fabric port thread: another node's packetizer delivers into this node's vmbox. */
static void rackemu_unimem_on_request(void *opaque, RkFabricEndpoint *ep, const struct rkf_frame_hdr *h,
                                      const void *payload)
{
    RackemuPacketizerState *s = opaque;
    struct rkf_mbox_deliver d;
    size_t hdr = offsetof(struct rkf_mbox_deliver, words);

    /*
     * The fabric port connects during machine init, before QEMU's first system reset, which
     * empties the FIFOs: hold a delivery that arrives in that window until the reset is done,
     * rather than acknowledge a packet that the reset then discards.
     */
    for (int i = 0; i < 5000 && !qatomic_read(&s->vmbox->ready); i++) {
        g_usleep(1000);
    }
    if (!qatomic_read(&s->vmbox->ready)) {
        rk_fabric_endpoint_reply(ep, h, RKF_ST_BAD_FRAME, NULL, 0);
        return;
    }
    memset(&d, 0, sizeof(d));
    memcpy(&d, payload, MIN((size_t)h->len, sizeof(d)));
    if (h->type != RKF_T_REQ || h->op != RKF_OP_MBOX_DELIVER || h->len < hdr + 8 ||
        d.nwords < 1 || d.nwords > 8 || h->len != hdr + d.nwords * 8 || d.mif >= UNIMEM_IF_COUNT) {
        qemu_log_mask(LOG_GUEST_ERROR, "rackemu-vmbox: malformed delivery from node %u (op %u, %u bytes) "
                      "refused\n", h->src, h->op, h->len);
        if (h->type == RKF_T_REQ) {
            rk_fabric_endpoint_reply(ep, h, RKF_ST_BAD_FRAME, NULL, 0);
        }
        return;
    }
    rk_fabric_endpoint_reply(ep, h,
                         rk_vmbox_deliver(s->vmbox->core, d.mif, d.words, d.nwords) ? RKF_ST_OK : RKF_ST_REFUSED,
                         NULL, 0);
}

static void rackemu_unimem_on_reply(void *opaque, const struct rkf_frame_hdr *h, const void *payload)
{
    RackemuPacketizerState *s = opaque;

    rk_pktz_complete(s->core, h->tag,
                     h->status == RKF_ST_OK ? RK_PKTZ_ACK
                     : h->status == RKF_ST_REFUSED ? RK_PKTZ_NACK : RK_PKTZ_FABRIC_ERR);
}

static void rackemu_unimem_on_link(void *opaque, int up)
{
    RackemuPacketizerState *s = opaque;

    if (!up) {
        rk_pktz_fail_all(s->core);
    }
}


static uint64_t rackemu_pktz_read(void *opaque, hwaddr addr, unsigned size)
{
    RackemuPacketizerState *s = opaque;

    return rk_pktz_read(s->core, addr, size);
}

static void rackemu_pktz_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuPacketizerState *s = opaque;

    rk_pktz_write(s->core, addr, data, size);
}

static const MemoryRegionOps rackemu_pktz_ops = {
    .read = rackemu_pktz_read,
    .write = rackemu_pktz_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void rackemu_pktz_realize(DeviceState *dev, Error **errp)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(dev);
    static const struct rk_fabric_service ops = {
        rackemu_unimem_on_request, rackemu_unimem_on_reply, rackemu_unimem_on_link,
    };

    if (!s->vmbox) {
        error_setg(errp, "rackemu-packetizer: the 'vmbox' link (this node's mailbox) is not set");
        return;
    }
    s->core = rk_pktz_new(rackemu_pktz_transmit, rackemu_guest_error, s);
    /* Serves other nodes' deliveries into the vmbox from the port thread. */
    s->ep = rackemu_fabric_bind(s->fabric, RKF_SVC_UNIMEM_MBOX, &ops, s);
    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_pktz_ops, s, "rackemu-packetizer", PKTZ_MMIO_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    sysbus_init_irq(SYS_BUS_DEVICE(s), &s->irq);
}

static void rackemu_pktz_reset(DeviceState *dev)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(dev);

    if (s->core) {
        rk_pktz_reset(s->core);
    }
}

static Property rackemu_pktz_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuPacketizerState, node_id, 0),
    DEFINE_PROP_LINK("vmbox", RackemuPacketizerState, vmbox, TYPE_RACKEMU_VMBOX, RackemuVmboxState *),
    DEFINE_PROP_LINK("fabric", RackemuPacketizerState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_pktz_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Unimem virtualized packetizer (64 PIFs + TIF), rackemu";
    dc->realize = rackemu_pktz_realize;
    dc->reset = rackemu_pktz_reset;
    dc->vmsd = &rackemu_unimem_vmstate;
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
