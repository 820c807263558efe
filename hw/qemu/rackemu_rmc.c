/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the soNUMA Remote Memory Controller with LightSABRes (the SABRes paper; docs/sonuma.md).
 * The device logic is the C++ core (hw/sonuma/rmc.{h,cc}): its RGP runs on a thread of its own
 * and its R2P2/RCP on the fabric port thread, so nothing here waits for the fabric. This file
 * carries the Table 2 timing parameters and the ATT / stream-buffer sizing as properties; the
 * generic adapter (rackemu_device.h) does the rest with the core's operations
 * (rk_rmc_device_ops): the registers and doorbell pages, the host interface, the RMC fabric
 * service bound to the node's port, pause while the VM is stopped, and migration of the core's
 * state (docs/sonuma.md "Migration").
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"

#include "rackemu/sonuma_regs.h"
#include "rmc_capi.h"
#include "rackemu_device.h"
#include "rackemu_rmc.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuRmcState, RACKEMU_RMC)

struct RackemuRmcState {
    SysBusDevice parent_obj;
    RackemuDevice rd;
    struct rk_rmc_config cfg;
    uint32_t node_id, node_count;
    bool speculation;
    bool llc_resident;
    bool direct; /* READs to live peers read their RAM files (docs/sonuma.md "Direct path") */
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: requests to itself only) */
};

/*
 * The core gets the reserved context segment (properties seg-base, seg-size) and the node's
 * port, to which the adapter binds the RMC service (before the machine starts the port).
 */
static void rackemu_rmc_realize(DeviceState *dev, Error **errp)
{
    RackemuRmcState *s = RACKEMU_RMC(dev);

    s->cfg.speculation = s->speculation;
    s->cfg.llc_resident = s->llc_resident;
    s->cfg.direct = s->direct;
    rackemu_device_realize(&s->rd, dev, &rk_rmc_device_ops, &s->cfg, s->fabric, s->node_id, s->node_count,
                           false, errp);
}

static void rackemu_rmc_unrealize(DeviceState *dev)
{
    rackemu_device_unrealize(&RACKEMU_RMC(dev)->rd);
}

static void rackemu_rmc_reset(DeviceState *dev)
{
    rackemu_device_reset(&RACKEMU_RMC(dev)->rd);
}

/*
 * QP and context registers, queue indices, counters and the transfers in flight (RmcState,
 * hw/sonuma/rmc.h), which complete after load with UNREACHABLE (UNCERTAIN for a WRITE/CAS/FAA
 * that may have been applied), info LINK_DOWN. The core refuses a state out of range.
 */
static const VMStateDescription rackemu_rmc_vmstate = {
    .name = "rackemu-rmc",
    .version_id = 3, /* 3: the core's state string (rackemu_device.h) */
    .minimum_version_id = 3,
    .fields = (VMStateField[]) {
        VMSTATE_RACKEMU_DEVICE(rd, RackemuRmcState),
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
    dc->unrealize = rackemu_rmc_unrealize;
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
