/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the Unimem virtualized mailbox and packetizer (ExaNoDe D3.6 sec. 5.1, 5.2).
 * The device logic lives in the QEMU-independent C++ cores (hw/unimem); this file maps them
 * to MMIO regions, the host interface (rackemu_glue.h: interrupt line, guest-error log),
 * properties, reset, migration and trace points, and carries packets between the packetizer and
 * a vmbox, local or on another node through the fabric port (the packetizer's transmit link; the
 * RKF_SVC_UNIMEM_MBOX service is bound with rackemu_fabric_bind on the "fabric" link).
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qapi/error.h"
#include "hw/irq.h"
#include "hw/qdev-properties.h"
#include "migration/vmstate.h"
#include "sysemu/runstate.h"
#include "hw/sysbus.h"

#include "rackemu/unimem_regs.h"
#include "rackemu/fabric_proto.h"
#include "unimem_capi.h"
#include "rackemu_glue.h"
#include "rackemu_unimem.h"
#include "trace.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuVmboxState, RACKEMU_VMBOX)
OBJECT_DECLARE_SIMPLE_TYPE(RackemuPacketizerState, RACKEMU_PACKETIZER)

struct RackemuVmboxState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuHost host; /* line 0: the arrival interrupt; no DMA */
    RkVmbox *core;
    /* link "fabric": the node's port, polled by register reads (deliveries: the packetizer's service) */
    RackemuFabric *fabric;
    uint32_t node_id;
    uint32_t node_count;
    uint32_t fifo_depth;
    bool burst_known_issue;
    bool kif;   /* property "kif": the kernel interface (KIF) is present (default on) */
    bool ready; /* set by the first reset; deliveries before it would be wiped by it */
    RkVmboxState mig; /* migration: filled by pre_save, read by post_load */
};

struct RackemuPacketizerState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuHost host; /* line 0 reserved: the packetizer does not interrupt (the seed defines none) */
    RkPacketizer *core;
    RackemuVmboxState *vmbox; /* link "vmbox": this node's mailbox (required) */
    RackemuFabric *fabric;    /* link "fabric": the node's port (optional) */
    RkFabricEndpoint *ep;     /* RKF_SVC_UNIMEM_MBOX; NULL: standalone node, remote destinations fail */
    uint32_t node_id;
    uint32_t node_count;
    bool kif;        /* property "kif": the kernel interface (KIF) is present (default on) */
    /*
     * Deliveries into the vmbox answer first (docs/mailbox.md): the sender's ACK or
     * NACK is sent before the packet becomes visible and raises the interrupt, so a reply the
     * receiving guest posts cannot reach the sender before that acknowledgement.
     * RACKEMU_VMBOX_ACK_FIRST=0 in the environment restores the old order (A/B measurements).
     */
    bool ack_first;
    uint64_t acks_first; /* QOM "acks-first": deliveries answered before they became visible */
    uint64_t acks_after; /* QOM "acks-after": deliveries answered after (the old order) */
    RkPktzState mig;     /* migration: filled by pre_save, read by post_load */
};

/* ---- vmbox ---- */

static MemTxResult rackemu_vmbox_read(void *opaque, hwaddr addr, uint64_t *data, unsigned size,
                                      MemTxAttrs attrs)
{
    RackemuVmboxState *s = opaque;
    rk_status st;

    /* a guest polling STATUS or a FIFO takes the packet the bridge delivered itself */
    rackemu_fabric_poll(s->fabric);
    st = rk_vmbox_read(s->core, addr, size, data);

    trace_rackemu_mmio_read(TYPE_RACKEMU_VMBOX, s->node_id, addr, size, *data);
    return rackemu_status_to_memtx(st);
}

static MemTxResult rackemu_vmbox_write(void *opaque, hwaddr addr, uint64_t data, unsigned size,
                                       MemTxAttrs attrs)
{
    RackemuVmboxState *s = opaque;

    trace_rackemu_mmio_write(TYPE_RACKEMU_VMBOX, s->node_id, addr, size, data);
    /* a store to a full FIFO (RK_NACK) ends in SLVERR, as sec. 5.1.1 says */
    return rackemu_status_to_memtx(rk_vmbox_write(s->core, addr, data, size));
}

static const MemoryRegionOps rackemu_vmbox_ops = {
    .read_with_attrs = rackemu_vmbox_read,
    .write_with_attrs = rackemu_vmbox_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

/* The VM runs again (after savevm, or a migration that failed): deliveries are taken again. */
static void rackemu_vmbox_run_state(void *opaque, bool running, RunState state)
{
    RackemuVmboxState *s = opaque;

    if (running) {
        rk_vmbox_freeze(s->core, 0);
    }
}

static void rackemu_vmbox_realize(DeviceState *dev, Error **errp)
{
    RackemuVmboxState *s = RACKEMU_VMBOX(dev);

    if (s->fifo_depth < 4 || s->fifo_depth > 65536) {
        error_setg(errp, "rackemu-vmbox: fifo-depth %u out of range 4..65536 (words per FIFO)",
                   s->fifo_depth);
        return;
    }
    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_vmbox_ops, s, TYPE_RACKEMU_VMBOX, VMBOX_MMIO_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_host_init(&s->host, DEVICE(s), TYPE_RACKEMU_VMBOX, 1, false, NULL, s->node_id, s->node_count);
    s->core = rk_vmbox_new(&s->host.host, s->fifo_depth, s->burst_known_issue, s->kif);
    qemu_add_vm_change_state_handler(rackemu_vmbox_run_state, s);
}

static void rackemu_vmbox_reset(DeviceState *dev)
{
    RackemuVmboxState *s = RACKEMU_VMBOX(dev);

    if (s->core) {
        rk_vmbox_reset(s->core);
        rackemu_host_irq_sync(&s->host, 0, rk_vmbox_irq_level(s->core));
        qatomic_set(&s->ready, true);
    }
}

/*
 * Migration (docs/unimem.md): FIFO contents, IRQ_ENABLE and the counters. pre_save freezes the
 * FIFOs against the fabric port thread first (a peer's delivery is refused with a NACK until the
 * VM runs again), so no packet is acknowledged after the snapshot and lost with it.
 */
static int rackemu_vmbox_pre_save(void *opaque)
{
    RackemuVmboxState *s = opaque;

    rk_vmbox_freeze(s->core, 1);
    rk_vmbox_save(s->core, &s->mig);
    return 0;
}

static int rackemu_vmbox_post_save(void *opaque)
{
    RackemuVmboxState *s = opaque;

    rk_vmbox_state_free(&s->mig);
    return 0;
}

static int rackemu_vmbox_pre_load(void *opaque)
{
    RackemuVmboxState *s = opaque;

    rk_vmbox_state_free(&s->mig);
    /* a version 1 stream carries no KIF: it loads as an empty, disabled one */
    s->mig.kif_fill = 0;
    s->mig.kif_ctrl = 0;
    memset(s->mig.kif_counters, 0, sizeof(s->mig.kif_counters));
    return 0;
}

/* Before the words are allocated: never more than the FIFOs hold (a hostile stream). */
static bool rackemu_vmbox_nwords_ok(void *opaque, int version_id)
{
    RackemuVmboxState *s = opaque;

    return s->mig.nwords <= (uint64_t)UNIMEM_IF_TOTAL * s->fifo_depth;
}

static int rackemu_vmbox_post_load(void *opaque, int version_id)
{
    RackemuVmboxState *s = opaque;
    int rc = rk_vmbox_load(s->core, &s->mig);

    trace_rackemu_unimem_load(TYPE_RACKEMU_VMBOX, s->node_id, rc == 0);
    rk_vmbox_state_free(&s->mig);
    if (rc) {
        qemu_log_mask(LOG_GUEST_ERROR, "%s: node %u: migration state refused (depth %u, device %u)\n",
                      TYPE_RACKEMU_VMBOX, s->node_id, s->mig.depth, s->fifo_depth);
        return -EINVAL;
    }
    rackemu_host_irq_sync(&s->host, 0, rk_vmbox_irq_level(s->core));
    return 0;
}

static const VMStateDescription rackemu_vmbox_vmstate = {
    .name = TYPE_RACKEMU_VMBOX,
    .version_id = 2, /* 2: the KIF */
    .minimum_version_id = 1,
    .pre_save = rackemu_vmbox_pre_save,
    .post_save = rackemu_vmbox_post_save,
    .pre_load = rackemu_vmbox_pre_load,
    .post_load = rackemu_vmbox_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT32(mig.depth, RackemuVmboxState),
        VMSTATE_UINT64(mig.irq_enable, RackemuVmboxState),
        VMSTATE_UINT32_ARRAY(mig.fill, RackemuVmboxState, UNIMEM_IF_COUNT),
        VMSTATE_UINT64_ARRAY(mig.counters, RackemuVmboxState, RK_VMBOX_SAVED_COUNTERS),
        VMSTATE_UINT32_V(mig.kif_fill, RackemuVmboxState, 2),
        VMSTATE_UINT64_V(mig.kif_ctrl, RackemuVmboxState, 2),
        VMSTATE_UINT64_ARRAY_V(mig.kif_counters, RackemuVmboxState, VMBOX_KIF_CNT_COUNT, 2),
        VMSTATE_UINT32(mig.nwords, RackemuVmboxState),
        VMSTATE_VALIDATE("rackemu-vmbox words fit the FIFOs", rackemu_vmbox_nwords_ok),
        VMSTATE_VARRAY_UINT32_ALLOC(mig.words, RackemuVmboxState, mig.nwords, 0, vmstate_info_uint64, uint64_t),
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
    dc->reset = rackemu_vmbox_reset;
    dc->vmsd = &rackemu_vmbox_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_vmbox_props);
}

/* ---- packetizer ---- */

/* A packet into this node's own vmbox: its answer completes the sending PIF. */
struct rackemu_local_answer {
    RackemuPacketizerState *s;
    uint64_t tag;
};

static void rackemu_local_answered(void *opaque, int st)
{
    struct rackemu_local_answer *la = opaque;

    trace_rackemu_unimem_complete(la->s->node_id, la->tag, rk_status_name((rk_status)st));
    rk_pktz_complete(la->s->core, la->tag, (rk_status)st);
}

/*
 * The packetizer's transmit link: into this node's vmbox, or to another node's over the fabric.
 * `pif` (0..63, or UNIMEM_KIF) travels with the packet as its sending interface: the receiving
 * vmbox takes packets into its KIF from a KIF only.
 */
static void rackemu_pktz_transmit(void *opaque, unsigned pif, uint64_t tag, uint64_t dest, unsigned mif,
                                  const uint64_t words[4])
{
    RackemuPacketizerState *s = opaque;
    unsigned node = UNIMEM_GADDR_NODE(dest);
    struct rkf_mbox_deliver d = { .mif = mif, .src_if = pif, .nwords = UNIMEM_PACKET_WORDS };
    struct rkf_frame_hdr h = { 0 };
    int rc;

    trace_rackemu_unimem_send(s->node_id, pif, node, mif, tag);
    if (node == s->node_id) {
        struct rackemu_local_answer la = { s, tag };

        if (!s->vmbox) {
            rackemu_local_answered(&la, RK_UNREACHABLE);
        } else if (qatomic_read(&s->ack_first)) {
            qatomic_inc(&s->acks_first);
            rk_vmbox_deliver_answer_first(s->vmbox->core, mif, pif, words, UNIMEM_PACKET_WORDS,
                                          rackemu_local_answered, &la);
        } else {
            qatomic_inc(&s->acks_after);
            rackemu_local_answered(&la, rk_vmbox_deliver(s->vmbox->core, mif, pif, words, UNIMEM_PACKET_WORDS));
        }
        return;
    }
    if (!s->ep) {
        qemu_log_mask(LOG_GUEST_ERROR, "rackemu-packetizer: PIF %u: node %u is remote and this node "
                      "has no fabric (start it with -M rackemu-node,fabric=PATH)\n", pif, node);
        trace_rackemu_unimem_complete(s->node_id, tag, rk_status_name(RK_UNREACHABLE));
        rk_pktz_complete(s->core, tag, RK_UNREACHABLE);
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
        trace_rackemu_unimem_complete(s->node_id, tag, rk_status_name(RK_UNREACHABLE));
        rk_pktz_complete(s->core, tag, RK_UNREACHABLE);
    }
}

/* A peer's delivery: the reply (ACK, NACK, BAD_FRAME) goes back to the sender's packetizer. */
struct rackemu_peer_answer {
    RackemuPacketizerState *s;
    RkFabricEndpoint *ep;
    const struct rkf_frame_hdr *h;
};

static void rackemu_peer_answered(void *opaque, int reply)
{
    struct rackemu_peer_answer *pa = opaque;

    trace_rackemu_unimem_serve(pa->s->node_id, pa->h->src, pa->h->len, reply);
    if (reply >= 0) {
        rk_fabric_endpoint_reply(pa->ep, pa->h, reply, NULL, 0);
    }
}

/*
 * Another node's packetizer delivers into this node's vmbox: on the fabric port thread, or on a
 * vCPU that polls a device register (rk_fabric_port_poll) or a thread that drives the port.
 */
static void rackemu_unimem_on_request(void *opaque, RkFabricEndpoint *ep, const struct rkf_frame_hdr *h,
                                      const void *payload)
{
    RackemuPacketizerState *s = opaque;
    struct rackemu_peer_answer pa = { s, ep, h };

    /*
     * The fabric port connects during machine init, before QEMU's first system reset, which
     * empties the FIFOs: hold a delivery that arrives in that window until the reset is done,
     * rather than acknowledge a packet that the reset then discards.
     */
    for (int i = 0; i < 5000 && !qatomic_read(&s->vmbox->ready); i++) {
        g_usleep(1000);
    }
    /* validated and delivered by the core (vmbox.h, serve_frame) */
    if (!qatomic_read(&s->vmbox->ready)) {
        rackemu_peer_answered(&pa, h->type == RKF_T_REQ ? (int)RKF_ST_BAD_FRAME : -1);
    } else if (qatomic_read(&s->ack_first)) {
        /* the ACK is in the ring before the guest can see the packet (or take its interrupt) */
        qatomic_inc(&s->acks_first);
        rk_vmbox_serve_frame_answer_first(s->vmbox->core, h, payload, rackemu_peer_answered, &pa);
    } else {
        qatomic_inc(&s->acks_after);
        rackemu_peer_answered(&pa, rk_vmbox_serve_frame(s->vmbox->core, h, payload));
    }
}

static void rackemu_unimem_on_reply(void *opaque, const struct rkf_frame_hdr *h, const void *payload)
{
    RackemuPacketizerState *s = opaque;

    trace_rackemu_unimem_complete(s->node_id, h->tag, h->status == RKF_ST_OK ? rk_status_name(RK_OK)
                                  : h->status == RKF_ST_REFUSED ? rk_status_name(RK_NACK)
                                  : rk_status_name(RK_UNREACHABLE));
    rk_pktz_serve_reply(s->core, h);
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
    uint64_t v;

    /* a guest polling a PIF's status takes its acknowledgement itself */
    rackemu_fabric_poll(s->fabric);
    v = rk_pktz_read(s->core, addr, size);

    trace_rackemu_mmio_read(TYPE_RACKEMU_PACKETIZER, s->node_id, addr, size, v);
    return v;
}

static void rackemu_pktz_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuPacketizerState *s = opaque;

    trace_rackemu_mmio_write(TYPE_RACKEMU_PACKETIZER, s->node_id, addr, size, data);
    rk_pktz_write(s->core, addr, data, size);
}

static const MemoryRegionOps rackemu_pktz_ops = {
    .read = rackemu_pktz_read,
    .write = rackemu_pktz_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static bool rackemu_pktz_get_ack_first(Object *obj, Error **errp)
{
    return qatomic_read(&RACKEMU_PACKETIZER(obj)->ack_first);
}

static void rackemu_pktz_set_ack_first(Object *obj, bool on, Error **errp)
{
    qatomic_set(&RACKEMU_PACKETIZER(obj)->ack_first, on);
}

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
    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_pktz_ops, s, TYPE_RACKEMU_PACKETIZER, PKTZ_MMIO_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_host_init(&s->host, DEVICE(s), TYPE_RACKEMU_PACKETIZER, 1, false, s->fabric, s->node_id,
                      s->node_count);
    s->core = rk_pktz_new(&s->host.host, rackemu_pktz_transmit, s, s->kif);
    s->ack_first = g_strcmp0(g_getenv("RACKEMU_VMBOX_ACK_FIRST"), "0") != 0;
    s->acks_first = s->acks_after = 0;
    /* the order, switchable at run time with QMP qom-set (A/B in one cluster: bench/foundation.py) */
    object_property_add_bool(OBJECT(dev), "ack-first", rackemu_pktz_get_ack_first, rackemu_pktz_set_ack_first);
    /* how deliveries into the vmbox were answered (docs/mailbox.md); read with QMP qom-get */
    object_property_add_uint64_ptr(OBJECT(dev), "acks-first", &s->acks_first, OBJ_PROP_FLAG_READ);
    object_property_add_uint64_ptr(OBJECT(dev), "acks-after", &s->acks_after, OBJ_PROP_FLAG_READ);
    /* Serves other nodes' deliveries into the vmbox from the port thread. */
    s->ep = rackemu_fabric_bind(s->fabric, RKF_SVC_UNIMEM_MBOX, &ops, s);
}

static void rackemu_pktz_reset(DeviceState *dev)
{
    RackemuPacketizerState *s = RACKEMU_PACKETIZER(dev);

    if (s->core) {
        rk_pktz_reset(s->core);
        rackemu_host_irq_sync(&s->host, 0, 0);
    }
}

/*
 * Migration (docs/unimem.md): PIF registers and their written-bytes tracking, PIF status, PIDT,
 * BASE_DEST, PID_CONF and the counters. A PIF waiting for its acknowledgement at save completes
 * in post_load with NACK | FABRIC_ERR: its answer went to the saved machine.
 */
static int rackemu_pktz_pre_save(void *opaque)
{
    RackemuPacketizerState *s = opaque;

    rk_pktz_save(s->core, &s->mig);
    return 0;
}

static int rackemu_pktz_pre_load(void *opaque)
{
    RackemuPacketizerState *s = opaque;

    /* a version 1 stream carries no KIF: it loads as an idle one with KIF_CONF clear */
    memset(s->mig.kif_regs, 0, sizeof(s->mig.kif_regs));
    memset(s->mig.kif_written, 0, sizeof(s->mig.kif_written));
    s->mig.kif_status = 0;
    s->mig.kif_waiting = 0;
    s->mig.kif_pidt = 0;
    s->mig.kif_conf = 0;
    memset(s->mig.kif_counters, 0, sizeof(s->mig.kif_counters));
    return 0;
}

static int rackemu_pktz_post_load(void *opaque, int version_id)
{
    RackemuPacketizerState *s = opaque;
    int rc = rk_pktz_load(s->core, &s->mig);

    trace_rackemu_unimem_load(TYPE_RACKEMU_PACKETIZER, s->node_id, rc == 0);
    if (rc) {
        qemu_log_mask(LOG_GUEST_ERROR, "%s: node %u: migration state refused\n", TYPE_RACKEMU_PACKETIZER,
                      s->node_id);
        return -EINVAL;
    }
    rackemu_host_irq_sync(&s->host, 0, 0);
    return 0;
}

static const VMStateDescription rackemu_pktz_vmstate = {
    .name = TYPE_RACKEMU_PACKETIZER,
    .version_id = 2, /* 2: the KIF */
    .minimum_version_id = 1,
    .pre_save = rackemu_pktz_pre_save,
    .pre_load = rackemu_pktz_pre_load,
    .post_load = rackemu_pktz_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64_ARRAY(mig.pif_regs, RackemuPacketizerState, UNIMEM_IF_COUNT * 6),
        VMSTATE_UINT16_ARRAY(mig.pif_written, RackemuPacketizerState, UNIMEM_IF_COUNT * 3),
        VMSTATE_UINT32_ARRAY(mig.pif_status, RackemuPacketizerState, UNIMEM_IF_COUNT),
        VMSTATE_UINT8_ARRAY(mig.pif_waiting, RackemuPacketizerState, UNIMEM_IF_COUNT),
        VMSTATE_UINT64_ARRAY(mig.pidt, RackemuPacketizerState, UNIMEM_IF_COUNT),
        VMSTATE_UINT64(mig.base_dest, RackemuPacketizerState),
        VMSTATE_UINT64(mig.pid_conf, RackemuPacketizerState),
        VMSTATE_UINT64_ARRAY(mig.counters, RackemuPacketizerState, RK_PKTZ_SAVED_COUNTERS),
        VMSTATE_UINT64_ARRAY_V(mig.kif_regs, RackemuPacketizerState, 6, 2),
        VMSTATE_UINT16_ARRAY_V(mig.kif_written, RackemuPacketizerState, 3, 2),
        VMSTATE_UINT32_V(mig.kif_status, RackemuPacketizerState, 2),
        VMSTATE_UINT8_V(mig.kif_waiting, RackemuPacketizerState, 2),
        VMSTATE_UINT64_V(mig.kif_pidt, RackemuPacketizerState, 2),
        VMSTATE_UINT64_V(mig.kif_conf, RackemuPacketizerState, 2),
        VMSTATE_UINT64_ARRAY_V(mig.kif_counters, RackemuPacketizerState, PKTZ_KIF_CNT_COUNT, 2),
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
