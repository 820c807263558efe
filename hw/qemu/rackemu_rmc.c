/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the soNUMA Remote Memory Controller with LightSABRes (the SABRes paper; docs/sonuma.md).
 * The device logic is the C++ core (hw/sonuma/rmc.{h,cc}): its RGP runs on a thread of its own
 * and its R2P2/RCP on the fabric port thread, so nothing here waits for the fabric. This file
 * maps the registers and doorbell pages, carries the Table 2 timing parameters and the ATT /
 * stream-buffer sizing as properties, and gives the core the one host interface (RackemuHost:
 * guest memory through the memory API, the interrupt line from any thread, QEMU_CLOCK_VIRTUAL,
 * the guest-error log, the node's port). It pauses the core while the VM is stopped and
 * migrates its state (docs/sonuma.md "Migration").
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qapi/error.h"
#include "hw/irq.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"
#include "sysemu/runstate.h"

#include "rackemu/sonuma_regs.h"
#include "rmc_capi.h"
#include "rackemu_glue.h"
#include "rackemu_rmc.h"
#include "trace.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuRmcState, RACKEMU_RMC)

struct RackemuRmcState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuHost host;
    RkRmc *core;
    struct rk_rmc_config cfg;
    uint32_t node_id, node_count;
    bool speculation;
    bool llc_resident;
    bool direct; /* READs to live peers read their RAM files (docs/sonuma.md "Direct path") */
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: requests to itself only) */
    VMChangeStateEntry *vmse;
    /* migration: the core's state, filled in pre_save / read by post_load */
    struct rk_rmc_state mig;
    struct rk_rmc_xfer_state *mig_xfer;
    int32_t mig_nxfer; /* (VMState's variable arrays count in int32_t) */
};

static uint64_t rackemu_rmc_read(void *opaque, hwaddr addr, unsigned size)
{
    RackemuRmcState *s = opaque;
    uint64_t val = s->core ? rk_rmc_read(s->core, addr, size) : 0;

    trace_rackemu_mmio_read("rackemu-rmc", s->node_id, addr, size, val);
    return val;
}

static void rackemu_rmc_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuRmcState *s = opaque;

    trace_rackemu_mmio_write("rackemu-rmc", s->node_id, addr, size, data);
    if (trace_event_get_state_backends(TRACE_RACKEMU_RMC_REG_WRITE) && s->core) {
        trace_rackemu_rmc_reg_write(s->node_id, rk_rmc_reg_name(s->core, addr), data);
    }
    if (s->core) {
        /* the core sets the interrupt line itself (at once: a vCPU holds the big lock) */
        rk_rmc_write(s->core, addr, data, size);
    }
}

static const MemoryRegionOps rackemu_rmc_ops = {
    .read = rackemu_rmc_read,
    .write = rackemu_rmc_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

/*
 * While the VM is stopped (savevm, migration, gdb, stop) the core touches no guest memory: its
 * RGP waits and frames from other nodes are held until the VM runs again.
 */
static void rackemu_rmc_vm_state(void *opaque, bool running, RunState state)
{
    RackemuRmcState *s = opaque;

    if (s->core) {
        trace_rackemu_rmc_pause(s->node_id, !running);
        rk_rmc_pause(s->core, !running);
    }
}

static void rackemu_rmc_realize(DeviceState *dev, Error **errp)
{
    RackemuRmcState *s = RACKEMU_RMC(dev);
    char err[256] = "";

    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_rmc_ops, s, "rackemu-rmc", RMC_MMIO_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_host_init(&s->host, DEVICE(s), "rackemu-rmc", 1, false, s->fabric, s->node_id, s->node_count);

    /*
     * The core: the host interface, the reserved context segment (properties seg-base, seg-size)
     * and the node's port, to which it binds the RMC service (before the machine starts the port).
     */
    s->cfg.speculation = s->speculation;
    s->cfg.llc_resident = s->llc_resident;
    s->cfg.direct = s->direct;
    s->core = rk_rmc_new(&s->cfg, &s->host.host, err, sizeof(err));
    if (!s->core) {
        error_setg(errp, "%s", err);
        return;
    }
    s->vmse = qemu_add_vm_change_state_handler(rackemu_rmc_vm_state, s);
}

static void rackemu_rmc_reset(DeviceState *dev)
{
    RackemuRmcState *s = RACKEMU_RMC(dev);

    if (s->core) {
        rk_rmc_reset(s->core);
        rackemu_host_irq_sync(&s->host, 0, rk_rmc_irq_level(s->core));
    }
}

static int rackemu_rmc_pre_save(void *opaque)
{
    RackemuRmcState *s = opaque;

    /* the VM is stopped: the core is paused (rackemu_rmc_vm_state), its state is still */
    g_free(s->mig_xfer);
    s->mig_xfer = NULL;
    s->mig_nxfer = 0;
    if (s->core) {
        struct rk_rmc_xfer_state *x = NULL;
        uint32_t n = 0;

        rk_rmc_save(s->core, &s->mig, &x, &n);
        s->mig_xfer = n ? g_memdup2(x, (gsize)n * sizeof(*x)) : NULL;
        s->mig_nxfer = (int32_t)n; /* at most RMC_QP_COUNT << RMC_DEPTH_LOG2_MAX */
        free(x);
        trace_rackemu_rmc_save(s->node_id, n);
    }
    return 0;
}

static int rackemu_rmc_post_save(void *opaque)
{
    RackemuRmcState *s = opaque;

    g_free(s->mig_xfer);
    s->mig_xfer = NULL;
    s->mig_nxfer = 0;
    return 0;
}

/* Before the transfer records are allocated: a hostile count must not allocate gigabytes. */
static bool rackemu_rmc_nxfer_valid(void *opaque, int version_id)
{
    RackemuRmcState *s = opaque;

    return s->mig_nxfer >= 0 && s->mig_nxfer <= (int32_t)(RMC_QP_COUNT << RMC_DEPTH_LOG2_MAX);
}

static int rackemu_rmc_post_load(void *opaque, int version_id)
{
    RackemuRmcState *s = opaque;
    int rc;

    if (!s->core) {
        return -EINVAL;
    }
    rc = rk_rmc_load(s->core, &s->mig, s->mig_xfer, (uint32_t)s->mig_nxfer);
    trace_rackemu_rmc_load(s->node_id, s->mig_nxfer, rc);
    g_free(s->mig_xfer);
    s->mig_xfer = NULL;
    s->mig_nxfer = 0;
    if (rc) {
        return rc;
    }
    rackemu_host_irq_sync(&s->host, 0, rk_rmc_irq_level(s->core));
    return 0;
}

static const VMStateDescription rackemu_rmc_qp_vmstate = {
    .name = "rackemu-rmc/qp",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(wq_base, struct rk_rmc_qp_state),
        VMSTATE_UINT64(cq_base, struct rk_rmc_qp_state),
        VMSTATE_UINT64(depth_log2, struct rk_rmc_qp_state),
        VMSTATE_UINT64(ctx, struct rk_rmc_qp_state),
        VMSTATE_UINT64(ctrl, struct rk_rmc_qp_state),
        VMSTATE_UINT32(wq_tail, struct rk_rmc_qp_state),
        VMSTATE_UINT32(wq_head, struct rk_rmc_qp_state),
        VMSTATE_UINT32(cq_head, struct rk_rmc_qp_state),
        VMSTATE_UINT32(cq_tail, struct rk_rmc_qp_state),
        VMSTATE_UINT32(inflight, struct rk_rmc_qp_state),
        VMSTATE_UINT8(cfg_err, struct rk_rmc_qp_state),
        VMSTATE_UINT8(err, struct rk_rmc_qp_state),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription rackemu_rmc_ctx_vmstate = {
    .name = "rackemu-rmc/ctx",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(base, struct rk_rmc_ctx_state),
        VMSTATE_UINT64(size, struct rk_rmc_ctx_state),
        VMSTATE_UINT64(perm, struct rk_rmc_ctx_state),
        VMSTATE_UINT64(nodemask, struct rk_rmc_ctx_state),
        VMSTATE_UINT64(layout, struct rk_rmc_ctx_state),
        VMSTATE_UINT64(ctrl, struct rk_rmc_ctx_state),
        VMSTATE_UINT64(key, struct rk_rmc_ctx_state),
        VMSTATE_UINT8(cfg_err, struct rk_rmc_ctx_state),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription rackemu_rmc_xfer_vmstate = {
    .name = "rackemu-rmc/xfer",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(wr_id, struct rk_rmc_xfer_state),
        VMSTATE_UINT64(start_ns, struct rk_rmc_xfer_state),
        VMSTATE_UINT32(qp, struct rk_rmc_xfer_state),
        VMSTATE_UINT32(wq_index, struct rk_rmc_xfer_state),
        VMSTATE_UINT8(op, struct rk_rmc_xfer_state),
        VMSTATE_UINT8(status, struct rk_rmc_xfer_state),
        VMSTATE_END_OF_LIST()
    },
};

/*
 * QP and context registers, queue indices, counters and the transfers in flight, which complete
 * after load with UNREACHABLE (UNCERTAIN for a WRITE/CAS/FAA that may have been applied), info
 * LINK_DOWN. post_load refuses (-EINVAL) a state the core finds out of range.
 */
static const VMStateDescription rackemu_rmc_vmstate = {
    .name = "rackemu-rmc",
    .version_id = 2, /* 2: 36 counters (DIRECT_REQS, FABRIC_REQS) */
    .minimum_version_id = 2,
    .pre_save = rackemu_rmc_pre_save,
    .post_save = rackemu_rmc_post_save,
    .post_load = rackemu_rmc_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(mig.ctrl, RackemuRmcState),
        VMSTATE_UINT64(mig.irq_status, RackemuRmcState),
        VMSTATE_STRUCT_ARRAY(mig.qp, RackemuRmcState, RMC_QP_COUNT, 1, rackemu_rmc_qp_vmstate,
                             struct rk_rmc_qp_state),
        VMSTATE_STRUCT_ARRAY(mig.ctx, RackemuRmcState, RMC_CTX_COUNT, 1, rackemu_rmc_ctx_vmstate,
                             struct rk_rmc_ctx_state),
        VMSTATE_UINT64_ARRAY(mig.counters, RackemuRmcState, RMC_CNT_COUNT),
        VMSTATE_INT32(mig_nxfer, RackemuRmcState),
        VMSTATE_VALIDATE("rackemu-rmc transfers in flight", rackemu_rmc_nxfer_valid),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig_xfer, RackemuRmcState, mig_nxfer, 1, rackemu_rmc_xfer_vmstate,
                                    struct rk_rmc_xfer_state),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_rmc_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuRmcState, node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuRmcState, node_count, 1),
    DEFINE_PROP_LINK("fabric", RackemuRmcState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_UINT64("seg-base", RackemuRmcState, cfg.seg_base, 0),
    DEFINE_PROP_UINT64("seg-size", RackemuRmcState, cfg.seg_size, 0),
    DEFINE_PROP_UINT32("rmc-mhz", RackemuRmcState, cfg.rmc_mhz, RMC_DEF_RMC_MHZ),
    DEFINE_PROP_UINT32("mem-latency-ns", RackemuRmcState, cfg.mem_ns, RMC_DEF_MEM_NS),
    DEFINE_PROP_UINT32("llc-latency-ns", RackemuRmcState, cfg.llc_ns, RMC_DEF_LLC_NS),
    DEFINE_PROP_UINT32("hop-ns", RackemuRmcState, cfg.hop_ns, RMC_DEF_HOP_NS),
    DEFINE_PROP_UINT32("hops", RackemuRmcState, cfg.hops, RMC_DEF_HOPS),
    DEFINE_PROP_UINT32("link-gbps", RackemuRmcState, cfg.link_gbps, RMC_DEF_LINK_GBPS),
    DEFINE_PROP_UINT32("r2p2-gbps", RackemuRmcState, cfg.r2p2_gbps, RMC_DEF_R2P2_GBPS),
    DEFINE_PROP_UINT32("r2p2-count", RackemuRmcState, cfg.r2p2_count, RMC_DEF_R2P2_COUNT),
    DEFINE_PROP_UINT32("r2p2-issue-cycles", RackemuRmcState, cfg.issue_cycles, RMC_DEF_ISSUE_CYC),
    DEFINE_PROP_UINT32("pkt-hdr-bytes", RackemuRmcState, cfg.pkt_hdr, RMC_DEF_PKT_HDR),
    DEFINE_PROP_UINT32("att-entries", RackemuRmcState, cfg.att_entries, RMC_DEF_ATT_ENTRIES),
    DEFINE_PROP_UINT32("sb-depth", RackemuRmcState, cfg.sb_depth, RMC_DEF_SB_DEPTH),
    DEFINE_PROP_BOOL("sabre-speculation", RackemuRmcState, speculation, true),
    DEFINE_PROP_BOOL("llc-resident", RackemuRmcState, llc_resident, false),
    DEFINE_PROP_BOOL("direct", RackemuRmcState, direct, true),
    DEFINE_PROP_UINT64("sabre-window-delay-ns", RackemuRmcState, cfg.window_delay_ns, 0),
    DEFINE_PROP_UINT32("timeout-ms", RackemuRmcState, cfg.timeout_ms, 2000),
    DEFINE_PROP_UINT32("rgp-window-blocks", RackemuRmcState, cfg.window_blocks, RMC_DEF_WINDOW_BLOCKS),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_rmc_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "soNUMA Remote Memory Controller with LightSABRes, rackemu";
    dc->realize = rackemu_rmc_realize;
    dc->reset = rackemu_rmc_reset;
    dc->vmsd = &rackemu_rmc_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_rmc_props);
}

static const TypeInfo rackemu_rmc_types[] = {
    {
        .name = TYPE_RACKEMU_RMC,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuRmcState),
        .class_init = rackemu_rmc_class_init,
    },
};

DEFINE_TYPES(rackemu_rmc_types)
