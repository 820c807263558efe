/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the soNUMA Remote Memory Controller with LightSABRes (seed 000; docs/sonuma.md).
 * The device logic is the C++ core (hw/sonuma/rmc.{h,cc}): its RGP runs on a thread of its own
 * and its R2P2/RCP on the fabric port thread, so nothing here waits for the fabric. This file
 * maps the registers and doorbell pages, carries the Table 2 timing parameters and the ATT /
 * stream-buffer sizing as properties, and raises the interrupt line from a bottom half when the
 * core's threads change it.
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qapi/error.h"
#include "hw/irq.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"

#include "rackemu/sonuma_regs.h"
#include "rmc_capi.h"
#include "rackemu_glue.h"
#include "rackemu_rmc.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuRmcState, RACKEMU_RMC)

struct RackemuRmcState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuIrq irq;
    RkRmc *core;
    struct rk_rmc_config cfg;
    bool speculation;
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: requests to itself only) */
    MemoryRegion *ram;     /* link "ram": the node's guest RAM, at "ram-base" */
};

static int rackemu_rmc_irq_level(void *opaque)
{
    RackemuRmcState *s = opaque;

    return s->core ? rk_rmc_irq_level(s->core) : 0;
}

/* From the RGP thread, the port thread or a vCPU (rackemu_glue.h). */
static void rackemu_rmc_irq(void *opaque)
{
    RackemuRmcState *s = opaque;

    rackemu_irq_update(&s->irq);
}

static uint64_t rackemu_rmc_read(void *opaque, hwaddr addr, unsigned size)
{
    RackemuRmcState *s = opaque;

    return s->core ? rk_rmc_read(s->core, addr, size) : 0;
}

static void rackemu_rmc_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuRmcState *s = opaque;

    if (!s->core) {
        return;
    }
    rk_rmc_write(s->core, addr, data, size);
    /*
     * A W1C of IRQ_STATUS or a CTRL write must lower the line before the guest's handler
     * returns, not a main-loop iteration later (a vCPU holds the big lock: set at once).
     */
    if (addr == RMC_REG_IRQ_STATUS || addr == RMC_REG_CTRL) {
        rackemu_irq_update(&s->irq);
    }
}

static const MemoryRegionOps rackemu_rmc_ops = {
    .read = rackemu_rmc_read,
    .write = rackemu_rmc_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void rackemu_rmc_realize(DeviceState *dev, Error **errp)
{
    RackemuRmcState *s = RACKEMU_RMC(dev);
    char err[256] = "";

    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_rmc_ops, s, "rackemu-rmc", RMC_MMIO_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_irq_init(&s->irq, SYS_BUS_DEVICE(s), rackemu_rmc_irq_level, s);

    /*
     * The core: guest RAM, the reserved context segment (properties seg-base, seg-size) and the
     * node's port, to which it binds the RMC service (before the machine starts the port).
     */
    s->cfg.speculation = s->speculation;
    s->cfg.ram_host = s->ram ? memory_region_get_ram_ptr(s->ram) : NULL;
    s->cfg.ram_size = s->ram ? memory_region_size(s->ram) : 0;
    s->core = rk_rmc_new(&s->cfg, rackemu_fabric_port(s->fabric), rackemu_rmc_irq, rackemu_guest_error, s, err,
                         sizeof(err));
    if (!s->core) {
        error_setg(errp, "%s", err);
    }
}

static void rackemu_rmc_reset(DeviceState *dev)
{
    RackemuRmcState *s = RACKEMU_RMC(dev);

    if (s->core) {
        rk_rmc_reset(s->core);
        rackemu_irq_set(&s->irq, 0);
    }
}

/*
 * Caveat: queue pairs, contexts and in-flight transfers live in the C++ core and are not
 * serialised: snapshots and migration are refused rather than silently losing them.
 */
static const VMStateDescription rackemu_rmc_vmstate = {
    .name = "rackemu-rmc",
    .unmigratable = 1,
};

static Property rackemu_rmc_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuRmcState, cfg.node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuRmcState, cfg.node_count, 1),
    DEFINE_PROP_LINK("fabric", RackemuRmcState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_LINK("ram", RackemuRmcState, ram, TYPE_MEMORY_REGION, MemoryRegion *),
    DEFINE_PROP_UINT64("ram-base", RackemuRmcState, cfg.ram_base, 0),
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
