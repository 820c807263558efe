/* SPDX-License-Identifier: MIT */
/*
 * rackemu-node: one node of a rackemu cluster. QEMU's `virt` machine (GIC, PL011, virtio-mmio,
 * PCIe, everything `virt` accepts) plus rackemu's SoC devices at fixed addresses and fixed
 * interrupt lines, described in the device tree, and the node's fabric port.
 * Memory map, interrupts and DT bindings: docs/machine.md.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "hw/arm/virt.h"
#include "hw/arm/fdt.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "sysemu/device_tree.h"
#include "target/arm/cpu-qom.h"

#include "rackemu/board.h"
#include "rackemu/unimem_regs.h"
#include "rackemu/fabric_proto.h"
#include "rackemu_unimem.h"
#include "rackemu_gas.h"
#include "rackemu_cdma.h"
#include "rackemu/xilinx_cdma_regs.h"
#include "rackemu/sonuma_regs.h"
#include "rackemu_rmc.h"
#include "rackemu_pmem.h"
#include "rackemu/pmem_regs.h"
#include "rackemu_glue.h"
#include "rackemu_net.h"
#include "exec/memory.h"
#include "exec/cpu-common.h"
#include <libfdt.h>
#include "qemu/log.h"
#include "../../hw/qemu/trace.h" /* the overlay's trace points (a bare "trace.h" finds another directory's) */

#define TYPE_RACKEMU_NODE_MACHINE MACHINE_TYPE_NAME("rackemu-node")
OBJECT_DECLARE_TYPE(RackemuNodeState, RackemuNodeClass, RACKEMU_NODE_MACHINE)

struct RackemuNodeState {
    VirtMachineState parent_obj;
    uint32_t node_id;
    uint32_t node_count;
    char *fabric;
    char *ram_dir; /* every node's RAM file (node<i>.ram): the one-sided direct path; NULL/"": off */
    uint32_t fifo_depth;
    bool burst_known_issue;
    uint32_t remote_timeout_ms;
    uint32_t rmc_segment_mb;
    bool net;         /* the virtio-net NIC on the fabric port (docs/networking.md) */
    int stack_roce;   /* OnOffAuto: RoCEv2 from the guest's stack (rackemu_net_create) */
    uint32_t net_mtu; /* its advertised MTU */
    RackemuNet *netdev; /* NULL: no NIC (net=off, or no fabric); read by the link hook on any thread */
    RackemuFabric *fab; /* the node's port to the rack, linked into every device as "fabric" */
    uint64_t seg_base, seg_size; /* the RMC's context segment at the top of RAM */
    /* persistent memory (docs/pmem.md): a region of pmem_size bytes at RACKEMU_PMEM_BASE (0: none) */
    uint64_t pmem_size;
    char *pmem_mode;
    char *pmem_image;
    uint32_t pmem_nic_entries, pmem_nic_delay_ns, pmem_llc_lines, pmem_seed;
};

struct RackemuNodeClass {
    VirtMachineClass parent_class;
    void (*parent_init)(MachineState *ms);
};

/*
 * The node's devices: one row each, as virt's base_memmap and irqmap (docs/machine.md has the
 * same table; the addresses and SPIs come from rackemu/board.h). The machine announces the
 * rows' fabric capabilities in the port's handshake, creates the devices in this order, gives
 * each the properties it has among node-id, node-count, fifo-depth and burst-known-issue,
 * links its "fabric" to the node's port if it has that link, runs the row's wiring hook,
 * realizes it, maps MMIO region 0 at `base` (and region 1 at `base2`), connects interrupt
 * output 0 to GIC SPI `spi`, and adds its device-tree node with the row's DT hook. Nothing
 * else in the machine knows a device type.
 */
typedef struct RackemuNodeDevice RackemuNodeDevice;
struct RackemuNodeDevice {
    const char *type;   /* QOM type */
    const char *name;   /* device-tree node name (before the unit address) */
    hwaddr base, size;  /* MMIO region 0 */
    hwaddr base2;       /* MMIO region 1 (0: none) */
    int spi;            /* GIC SPI of interrupt output 0 (-1: none) */
    const char *compat; /* DT compatible */
    uint32_t caps;      /* RKF_CAP_* the device serves to other nodes (announced in the handshake) */
    void (*wire)(MachineState *ms, DeviceState *dev);             /* links beyond "fabric"; NULL: none */
    void (*dt)(MachineState *ms, const RackemuNodeDevice *d);     /* the device-tree node */
    bool (*present)(MachineState *ms); /* whether this node has the device; NULL: always */
};

/*
 * A node with reg, interrupts, node id and count, and the vmbox FIFO depth (read by the Unimem
 * drivers from the vmbox and the packetizer alike).
 */
static void rackemu_node_fdt_unimem(MachineState *ms, const RackemuNodeDevice *d)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);
    char *name = g_strdup_printf("/%s@%" PRIx64, d->name, (uint64_t)d->base);

    qemu_fdt_add_subnode(ms->fdt, name);
    qemu_fdt_setprop_string(ms->fdt, name, "compatible", d->compat);
    qemu_fdt_setprop_sized_cells(ms->fdt, name, "reg", 2, d->base, 2, d->size);
    qemu_fdt_setprop_cells(ms->fdt, name, "interrupts", GIC_FDT_IRQ_TYPE_SPI, d->spi,
                           GIC_FDT_IRQ_FLAGS_LEVEL_HI);
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-id", rn->node_id);
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-count", rn->node_count);
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,fifo-depth", rn->fifo_depth);
    g_free(name);
}

/* The GAS: control page and window, no interrupt (docs/machine.md). */
static void rackemu_node_fdt_gas(MachineState *ms, const RackemuNodeDevice *d)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);
    char *name = g_strdup_printf("/%s@%" PRIx64, d->name, (uint64_t)d->base);
    uint64_t wsize = (uint64_t)rn->node_count * GAS_WINDOW_NODE_SIZE;

    qemu_fdt_add_subnode(ms->fdt, name);
    qemu_fdt_setprop_string(ms->fdt, name, "compatible", d->compat);
    qemu_fdt_setprop_sized_cells(ms->fdt, name, "reg", 2, d->base, 2, d->size, 2, d->base2, 2, wsize);
    qemu_fdt_setprop(ms->fdt, name, "reg-names", "ctrl\0window", sizeof("ctrl\0window"));
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-id", rn->node_id);
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-count", rn->node_count);
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-shift", UNIMEM_GADDR_NODE_SHIFT);
    g_free(name);
}

/*
 * The cDMA engine as Linux's Xilinx DMA binding describes an AXI CDMA
 * (Documentation/devicetree/bindings/dma/xilinx/xilinx_dma.txt), so the unmodified
 * xilinx_dma driver binds: a parent with the register page, the two AXI clocks and the address
 * width (64: the engine reaches the global address window at 1 TiB), and one channel child.
 */
static void rackemu_node_fdt_cdma(MachineState *ms, const RackemuNodeDevice *d)
{
    VirtMachineState *vms = VIRT_MACHINE(ms);
    char *name = g_strdup_printf("/%s@%" PRIx64, d->name, (uint64_t)d->base);
    char *chan = g_strdup_printf("%s/dma-channel@%" PRIx64, name, (uint64_t)d->base);
    static const char clock_names[] = "s_axi_lite_aclk\0m_axi_aclk";

    qemu_fdt_add_subnode(ms->fdt, name);
    qemu_fdt_setprop_string(ms->fdt, name, "compatible", d->compat);
    qemu_fdt_setprop_sized_cells(ms->fdt, name, "reg", 2, d->base, 2, d->size);
    qemu_fdt_setprop_cell(ms->fdt, name, "#dma-cells", 1);
    qemu_fdt_setprop_cells(ms->fdt, name, "clocks", vms->clock_phandle, vms->clock_phandle);
    qemu_fdt_setprop(ms->fdt, name, "clock-names", clock_names, sizeof(clock_names));
    qemu_fdt_setprop_cell(ms->fdt, name, "xlnx,addrwidth", RACKEMU_CDMA_ADDRWIDTH);
    qemu_fdt_setprop(ms->fdt, name, "dma-coherent", NULL, 0); /* the engine sees what CPUs see */

    qemu_fdt_add_subnode(ms->fdt, chan);
    qemu_fdt_setprop_string(ms->fdt, chan, "compatible", RACKEMU_CDMA_CHANNEL_COMPAT);
    qemu_fdt_setprop_cells(ms->fdt, chan, "interrupts", GIC_FDT_IRQ_TYPE_SPI, d->spi,
                           GIC_FDT_IRQ_FLAGS_LEVEL_HI);
    qemu_fdt_setprop_cell(ms->fdt, chan, "xlnx,datawidth", RACKEMU_CDMA_DATAWIDTH);
    /* data realignment engine: any source/destination alignment (the core handles any) */
    qemu_fdt_setprop(ms->fdt, chan, "xlnx,include-dre", NULL, 0);
    g_free(chan);
    g_free(name);
}

/*
 * The RMC (docs/sonuma.md): registers, doorbell pages and interrupt, and the reserved segment its
 * contexts are carved from, at the top of RAM. Not no-map: the kernel keeps it in its linear map
 * (cacheable, like the rest of RAM) and only keeps its allocators away from it.
 */
static void rackemu_node_fdt_rmc(MachineState *ms, const RackemuNodeDevice *d)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);
    char *name = g_strdup_printf("/%s@%" PRIx64, d->name, (uint64_t)d->base);
    char *seg = g_strdup_printf("/reserved-memory/rmc-segment@%" PRIx64, rn->seg_base);
    uint32_t ph = 0;

    if (rn->seg_size) {
        if (fdt_path_offset(ms->fdt, "/reserved-memory") < 0) {
            qemu_fdt_add_subnode(ms->fdt, "/reserved-memory");
            qemu_fdt_setprop_cell(ms->fdt, "/reserved-memory", "#address-cells", 2);
            qemu_fdt_setprop_cell(ms->fdt, "/reserved-memory", "#size-cells", 2);
            qemu_fdt_setprop(ms->fdt, "/reserved-memory", "ranges", NULL, 0);
        }
        qemu_fdt_add_subnode(ms->fdt, seg);
        qemu_fdt_setprop_string(ms->fdt, seg, "compatible", RACKEMU_RMC_SEG_COMPAT);
        qemu_fdt_setprop_sized_cells(ms->fdt, seg, "reg", 2, rn->seg_base, 2, rn->seg_size);
        ph = qemu_fdt_alloc_phandle(ms->fdt);
        qemu_fdt_setprop_cell(ms->fdt, seg, "phandle", ph);
    }
    qemu_fdt_add_subnode(ms->fdt, name);
    qemu_fdt_setprop_string(ms->fdt, name, "compatible", d->compat);
    qemu_fdt_setprop_sized_cells(ms->fdt, name, "reg", 2, d->base, 2, d->size);
    qemu_fdt_setprop_cells(ms->fdt, name, "interrupts", GIC_FDT_IRQ_TYPE_SPI, d->spi,
                           GIC_FDT_IRQ_FLAGS_LEVEL_HI);
    if (ph) {
        qemu_fdt_setprop_cell(ms->fdt, name, "memory-region", ph);
    }
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-id", rn->node_id);
    qemu_fdt_setprop_cell(ms->fdt, name, "rackemu,node-count", rn->node_count);
    g_free(seg);
    g_free(name);
}

/* The packetizer delivers local packets into this node's vmbox (created before it). */
static void rackemu_node_wire_packetizer(MachineState *ms, DeviceState *dev)
{
    Object *vmbox = object_resolve_path_type("", TYPE_RACKEMU_VMBOX, NULL);

    object_property_set_link(OBJECT(dev), "vmbox", vmbox, &error_fatal);
}

/* The RMC carves contexts from the segment at the top of RAM (which it reaches by DMA). */
static void rackemu_node_wire_rmc(MachineState *ms, DeviceState *dev)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);

    qdev_prop_set_uint64(dev, "seg-base", rn->seg_size ? rn->seg_base : 0);
    qdev_prop_set_uint64(dev, "seg-size", rn->seg_size);
}

/* Persistent memory: the model's properties from the machine's pmem-* ones. */
static void rackemu_node_wire_pmem(MachineState *ms, DeviceState *dev)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);

    qdev_prop_set_uint64(dev, "base", RACKEMU_PMEM_BASE);
    qdev_prop_set_uint64(dev, "size", rn->pmem_size);
    qdev_prop_set_string(dev, "mode", rn->pmem_mode ?: "adr");
    qdev_prop_set_string(dev, "image", rn->pmem_image ?: "");
    qdev_prop_set_uint32(dev, "nic-entries", rn->pmem_nic_entries);
    qdev_prop_set_uint64(dev, "nic-delay-ns", rn->pmem_nic_delay_ns);
    qdev_prop_set_uint32(dev, "llc-lines", rn->pmem_llc_lines);
    qdev_prop_set_uint64(dev, "seed", rn->pmem_seed);
}

static bool rackemu_node_has_pmem(MachineState *ms)
{
    return RACKEMU_NODE_MACHINE(ms)->pmem_size != 0;
}

/*
 * Two nodes: the region as Linux's persistent-memory binding has it ("pmem-region",
 * drivers/nvdimm/of_pmem.c: /dev/pmem0), and rackemu's device (control block, then the region)
 * for its own driver (/dev/rkpmem0, guest/pmem/kmod).
 */
static void rackemu_node_fdt_pmem(MachineState *ms, const RackemuNodeDevice *d)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);
    g_autofree char *region = g_strdup_printf("/pmem@%" PRIx64, (uint64_t)d->base2);
    g_autofree char *name = g_strdup_printf("/%s@%" PRIx64, d->name, (uint64_t)d->base);

    qemu_fdt_add_subnode(ms->fdt, region);
    qemu_fdt_setprop_string(ms->fdt, region, "compatible", "pmem-region");
    qemu_fdt_setprop_sized_cells(ms->fdt, region, "reg", 2, d->base2, 2, rn->pmem_size);
    qemu_fdt_add_subnode(ms->fdt, name);
    qemu_fdt_setprop_string(ms->fdt, name, "compatible", d->compat);
    qemu_fdt_setprop_sized_cells(ms->fdt, name, "reg", 2, d->base, 2, d->size, 2, d->base2, 2, rn->pmem_size);
    qemu_fdt_setprop(ms->fdt, name, "reg-names", "ctrl\0region", sizeof("ctrl\0region"));
}

static const RackemuNodeDevice rackemu_node_devices[] = {
    /* type, DT name, base, size, base2, spi, compatible, caps, wiring, DT */
    { TYPE_RACKEMU_VMBOX, "vmbox", RACKEMU_VMBOX_BASE, VMBOX_MMIO_SIZE, 0, RACKEMU_VMBOX_SPI,
      RACKEMU_VMBOX_COMPAT, RKF_CAP_UNIMEM_MBOX, NULL, rackemu_node_fdt_unimem },
    { TYPE_RACKEMU_PACKETIZER, "packetizer", RACKEMU_PKTZ_BASE, PKTZ_MMIO_SIZE, 0, RACKEMU_PKTZ_SPI,
      RACKEMU_PKTZ_COMPAT, 0, rackemu_node_wire_packetizer, rackemu_node_fdt_unimem },
    { TYPE_RACKEMU_GAS, "gas", RACKEMU_GAS_BASE, GAS_CTRL_SIZE, GAS_WINDOW_BASE, -1,
      RACKEMU_GAS_COMPAT, 0, NULL, rackemu_node_fdt_gas },
    { TYPE_RACKEMU_CDMA, "dma", RACKEMU_CDMA_BASE, RACKEMU_CDMA_SIZE, 0, RACKEMU_CDMA_SPI,
      RACKEMU_CDMA_COMPAT, 0, NULL, rackemu_node_fdt_cdma },
    { TYPE_RACKEMU_RMC, "rmc", RACKEMU_RMC_BASE, RMC_MMIO_SIZE, 0, RACKEMU_RMC_SPI,
      RACKEMU_RMC_COMPAT, RKF_CAP_RMC, rackemu_node_wire_rmc, rackemu_node_fdt_rmc },
    { TYPE_RACKEMU_PMEM, "rkpmem", RACKEMU_PMEM_CTRL_BASE, PMEM_MMIO_SIZE, RACKEMU_PMEM_BASE, -1,
      RACKEMU_PMEM_COMPAT, 0, rackemu_node_wire_pmem, rackemu_node_fdt_pmem, rackemu_node_has_pmem },
};

/*
 * The port's and remote memory's reports (docs/tracing.md): link changes and connects through
 * QEMU's error reporting (they were always printed: the node's log shows them), malformed input
 * from the rack as a guest error (-d guest_errors), frames and link changes as trace points.
 */
static void rackemu_node_fabric_log(void *opaque, enum rk_fabric_log_level level, const char *msg)
{
    switch (level) {
    case RK_FABRIC_LOG_BAD_INPUT:
        qemu_log_mask(LOG_GUEST_ERROR, "%s\n", msg);
        break;
    case RK_FABRIC_LOG_WARN:
        warn_report("%s", msg);
        break;
    default:
        info_report("%s", msg);
        break;
    }
}

static void rackemu_node_fabric_frame(void *opaque, enum rk_fabric_dir dir, const struct rkf_frame_hdr *h)
{
    RackemuNodeState *rn = opaque;

    if (dir == RK_FABRIC_OUT) {
        trace_rackemu_frame_out(rn->node_id, h->dst, h->svc, h->type, h->op, h->len, h->status, h->tag);
    } else {
        trace_rackemu_frame_in(rn->node_id, h->src, h->svc, h->type, h->op, h->len, h->status, h->tag);
    }
}

static void rackemu_node_fabric_link(void *opaque, int up)
{
    RackemuNodeState *rn = opaque;

    trace_rackemu_link(rn->node_id, up);
    rackemu_net_link(qatomic_read(&rn->netdev), up); /* the NIC's carrier */
}

static void rackemu_node_rmem_log(void *opaque, const char *msg)
{
    qemu_log_mask(LOG_GUEST_ERROR, "%s\n", msg);
}

/* Set `name` on `dev` if the device has that property (the machine-wide device parameters). */
static void rackemu_node_set_if_present(DeviceState *dev, const char *name, uint64_t value, bool is_bool)
{
    if (!object_property_find(OBJECT(dev), name)) {
        return;
    }
    if (is_bool) {
        qdev_prop_set_bit(dev, name, value != 0);
    } else {
        qdev_prop_set_uint32(dev, name, (uint32_t)value);
    }
}

static void rackemu_node_create(MachineState *ms, const RackemuNodeDevice *d)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);
    VirtMachineState *vms = VIRT_MACHINE(ms);
    DeviceState *dev = qdev_new(d->type);

    rackemu_node_set_if_present(dev, "node-id", rn->node_id, false);
    rackemu_node_set_if_present(dev, "node-count", rn->node_count, false);
    rackemu_node_set_if_present(dev, "fifo-depth", rn->fifo_depth, false);
    rackemu_node_set_if_present(dev, "burst-known-issue", rn->burst_known_issue, true);
    if (object_property_find(OBJECT(dev), "fabric")) {
        object_property_set_link(OBJECT(dev), "fabric", OBJECT(rn->fab), &error_fatal);
    }
    if (d->wire) {
        d->wire(ms, dev);
    }
    sysbus_realize_and_unref(SYS_BUS_DEVICE(dev), &error_fatal);
    sysbus_mmio_map(SYS_BUS_DEVICE(dev), 0, d->base);
    if (d->base2) {
        sysbus_mmio_map(SYS_BUS_DEVICE(dev), 1, d->base2);
    }
    if (d->spi >= 0) {
        sysbus_connect_irq(SYS_BUS_DEVICE(dev), 0, qdev_get_gpio_in(vms->gic, d->spi));
    }
}

static void rackemu_node_init(MachineState *ms)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(ms);
    RackemuNodeClass *rnc = RACKEMU_NODE_MACHINE_GET_CLASS(ms);
    VirtMachineState *vms = VIRT_MACHINE(ms);
    size_t i;

    if (rn->node_count < 1 || rn->node_count > RKF_MAX_NODES) {
        error_report("rackemu-node: node-count=%u out of range 1..%u", rn->node_count, RKF_MAX_NODES);
        exit(1);
    }
    if (rn->node_id >= rn->node_count) {
        error_report("rackemu-node: node-id=%u must be below node-count=%u", rn->node_id, rn->node_count);
        exit(1);
    }
    if (rn->fifo_depth < 4 || rn->fifo_depth > 65536) {
        error_report("rackemu-node: fifo-depth=%u out of range 4..65536", rn->fifo_depth);
        exit(1);
    }
    if (rn->net_mtu < RACKEMU_NET_MTU_MIN || rn->net_mtu > RACKEMU_NET_MTU_MAX) {
        error_report("rackemu-node: net-mtu=%u out of range %u..%u", rn->net_mtu, RACKEMU_NET_MTU_MIN,
                     RACKEMU_NET_MTU_MAX);
        exit(1);
    }
    if (rn->remote_timeout_ms < 1 || rn->remote_timeout_ms > 600000) {
        error_report("rackemu-node: remote-timeout-ms=%u out of range 1..600000", rn->remote_timeout_ms);
        exit(1);
    }

    rn->seg_size = (uint64_t)rn->rmc_segment_mb << 20;
    if (rn->seg_size > ms->ram_size / 4) {
        error_report("rackemu-node: rmc-segment-mb=%u is more than a quarter of RAM (%" PRIu64 " MiB); "
                     "give the node more memory or a smaller segment", rn->rmc_segment_mb, ms->ram_size >> 20 >> 2);
        exit(1);
    }

    if (rn->pmem_size) {
        if (rn->pmem_size % 0x200000 || rn->pmem_size > RACKEMU_PMEM_SIZE_MAX) {
            error_report("rackemu-node: pmem-size=%" PRIu64 " is not a multiple of 2 MiB up to %llu GiB",
                         rn->pmem_size, RACKEMU_PMEM_SIZE_MAX >> 30);
            exit(1);
        }
        if (0x40000000ull + ms->maxram_size > RACKEMU_PMEM_BASE) {
            error_report("rackemu-node: with persistent memory (pmem-size) RAM must end below 0x%llx "
                         "(%llu GiB of RAM at most)", RACKEMU_PMEM_BASE, (RACKEMU_PMEM_BASE - 0x40000000ull) >> 30);
            exit(1);
        }
    }

    rnc->parent_init(ms); /* the whole virt machine, its device tree included */
    rn->seg_base = vms->memmap[VIRT_MEM].base + ms->ram_size - rn->seg_size;

    /* The node's port to the rack, which every device with a "fabric" link is linked to. */
    rn->fab = RACKEMU_FABRIC(object_new(TYPE_RACKEMU_FABRIC));
    object_property_add_child(OBJECT(ms), "rackemu-fabric", OBJECT(rn->fab));
    object_unref(OBJECT(rn->fab));
    if (rn->fabric && *rn->fabric) {
        char err[256] = "";
        /* Announced in the handshake: this node's RAM is served one-sided, and the rows' services. */
        uint32_t caps = RKF_CAP_MEM;
        const struct rk_fabric_port_hooks hooks = {
            .log = rackemu_node_fabric_log,
            .frame = rackemu_node_fabric_frame,
            .link = rackemu_node_fabric_link,
            .opaque = rn,
        };

        for (i = 0; i < ARRAY_SIZE(rackemu_node_devices); i++) {
            caps |= rackemu_node_devices[i].caps;
        }
        if (rn->net) {
            caps |= RKF_CAP_ETH; /* the NIC below (networking.md) */
        }
        rn->fab->port = rk_fabric_port_new(rn->fabric, rn->node_id, rn->node_count, caps, 5000, err, sizeof(err));
        if (!rn->fab->port) {
            error_report("rackemu-node: %s", err);
            exit(1);
        }
        rk_fabric_port_set_hooks(rn->fab->port, &hooks);
        if (!rk_fabric_port_is_up(rn->fab->port)) {
            warn_report("rackemu-node: %s; remote operations fail until the bridge is reachable", err);
        }
    }
    /*
     * One-sided memory: serves other nodes from this node's RAM, carries this node's remote
     * accesses (the GAS window, DMA engines).
     */
    rn->fab->rmem = rk_rmem_new(rn->fab->port, rn->node_id, vms->memmap[VIRT_MEM].base, ms->ram_size,
                                 ms->ram ? memory_region_get_ram_ptr(ms->ram) : NULL, rn->remote_timeout_ms,
                                 rackemu_node_rmem_log, rn);
    if (rn->ram_dir && *rn->ram_dir) {
        /* The direct path: peers' RAM files mapped here, this node's published (docs/fabric.md). */
        char err[384] = "";

        if (!rn->fab->port) {
            error_report("rackemu-node: ram-dir=%s needs a fabric (fabric=DIR/fabric.sock)", rn->ram_dir);
            exit(1);
        }
        if (!ms->ram || memory_region_get_fd(ms->ram) < 0 || !ms->ram->ram_block ||
            !qemu_ram_is_shared(ms->ram->ram_block)) {
            error_report("rackemu-node: ram-dir=%s needs the RAM in a shared file "
                         "(-object memory-backend-file,id=ram,share=on,mem-path=%s/node%u.ram "
                         "-M memory-backend=ram)", rn->ram_dir, rn->ram_dir, rn->node_id);
            exit(1);
        }
        if (rk_rmem_enable_direct(rn->fab->rmem, rn->ram_dir, memory_region_get_fd(ms->ram),
                                  rk_fabric_port_liveness(rn->fab->port), err, sizeof(err)) < 0) {
            error_report("rackemu-node: ram-dir=%s: %s", rn->ram_dir, err);
            exit(1);
        }
    }

    for (i = 0; i < ARRAY_SIZE(rackemu_node_devices); i++) {
        if (!rackemu_node_devices[i].present || rackemu_node_devices[i].present(ms)) {
            rackemu_node_create(ms, &rackemu_node_devices[i]);
        }
    }
    if (rn->net && rn->fab->port) {
        /* the IP network's NIC: virtio-net on a virtio-mmio transport, backed by the port */
        Error *err = NULL;
        RackemuNet *net = rackemu_net_create(OBJECT(ms), rn->fab->port, rn->node_id, rn->net_mtu,
                                             (OnOffAuto)rn->stack_roce, &err);

        if (!net) {
            error_reportf_err(err, "rackemu-node: the node's NIC (net=on): ");
            exit(1);
        }
        qatomic_set(&rn->netdev, net);
        rackemu_net_link(net, rk_fabric_port_is_up(rn->fab->port)); /* a change the hook raced with */
    }
    if (rn->fab->port) {
        rk_fabric_port_start(rn->fab->port); /* every service of the node is bound now */
    }
    for (i = 0; i < ARRAY_SIZE(rackemu_node_devices); i++) {
        if (!rackemu_node_devices[i].present || rackemu_node_devices[i].present(ms)) {
            rackemu_node_devices[i].dt(ms, &rackemu_node_devices[i]);
        }
    }
    qemu_fdt_setprop_cell(ms->fdt, "/chosen", "rackemu,node-id", rn->node_id);
    qemu_fdt_setprop_cell(ms->fdt, "/chosen", "rackemu,node-count", rn->node_count);
}

static char *rackemu_node_get_ram_dir(Object *obj, Error **errp)
{
    return g_strdup(RACKEMU_NODE_MACHINE(obj)->ram_dir ?: "");
}

static void rackemu_node_set_ram_dir(Object *obj, const char *value, Error **errp)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(obj);

    g_free(rn->ram_dir);
    rn->ram_dir = g_strdup(value);
}

static char *rackemu_node_get_fabric(Object *obj, Error **errp)
{
    return g_strdup(RACKEMU_NODE_MACHINE(obj)->fabric ?: "");
}

static void rackemu_node_set_fabric(Object *obj, const char *value, Error **errp)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(obj);

    g_free(rn->fabric);
    rn->fabric = g_strdup(value);
}

/* uint32 machine properties; `opaque` is the field's offset in RackemuNodeState. */
static void rackemu_node_get_u32(Object *obj, Visitor *v, const char *name, void *opaque, Error **errp)
{
    uint32_t *field = (uint32_t *)((char *)obj + (uintptr_t)opaque);

    visit_type_uint32(v, name, field, errp);
}

static void rackemu_node_set_u32(Object *obj, Visitor *v, const char *name, void *opaque, Error **errp)
{
    uint32_t *field = (uint32_t *)((char *)obj + (uintptr_t)opaque);
    uint32_t value;

    if (visit_type_uint32(v, name, &value, errp)) {
        *field = value;
    }
}

static bool rackemu_node_get_burst(Object *obj, Error **errp)
{
    return RACKEMU_NODE_MACHINE(obj)->burst_known_issue;
}

static void rackemu_node_set_burst(Object *obj, bool value, Error **errp)
{
    RACKEMU_NODE_MACHINE(obj)->burst_known_issue = value;
}

static bool rackemu_node_get_net(Object *obj, Error **errp)
{
    return RACKEMU_NODE_MACHINE(obj)->net;
}

static void rackemu_node_set_net(Object *obj, bool value, Error **errp)
{
    RACKEMU_NODE_MACHINE(obj)->net = value;
}

static int rackemu_node_get_stack_roce(Object *obj, Error **errp)
{
    return RACKEMU_NODE_MACHINE(obj)->stack_roce;
}

static void rackemu_node_set_stack_roce(Object *obj, int value, Error **errp)
{
    RACKEMU_NODE_MACHINE(obj)->stack_roce = value;
}

static void rackemu_node_instance_init(Object *obj)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(obj);

    rn->node_id = 0;
    rn->node_count = 1;
    rn->fifo_depth = VMBOX_DEFAULT_DEPTH;
    rn->remote_timeout_ms = 2000;
    rn->rmc_segment_mb = 32;
    rn->net = true;
    rn->stack_roce = ON_OFF_AUTO_AUTO;
    rn->net_mtu = RACKEMU_NET_MTU_DEFAULT;
    rn->pmem_nic_entries = 64;
    rn->pmem_nic_delay_ns = 2000;
    rn->pmem_llc_lines = 4096;
    rn->pmem_seed = 1;
}

static void rackemu_node_get_pmem_size(Object *obj, Visitor *v, const char *name, void *opaque, Error **errp)
{
    visit_type_size(v, name, &RACKEMU_NODE_MACHINE(obj)->pmem_size, errp);
}

static void rackemu_node_set_pmem_size(Object *obj, Visitor *v, const char *name, void *opaque, Error **errp)
{
    uint64_t value;

    if (visit_type_size(v, name, &value, errp)) {
        RACKEMU_NODE_MACHINE(obj)->pmem_size = value;
    }
}

static char *rackemu_node_get_pmem_mode(Object *obj, Error **errp)
{
    return g_strdup(RACKEMU_NODE_MACHINE(obj)->pmem_mode ?: "adr");
}

static void rackemu_node_set_pmem_mode(Object *obj, const char *value, Error **errp)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(obj);

    g_free(rn->pmem_mode);
    rn->pmem_mode = g_strdup(value);
}

static char *rackemu_node_get_pmem_image(Object *obj, Error **errp)
{
    return g_strdup(RACKEMU_NODE_MACHINE(obj)->pmem_image ?: "");
}

static void rackemu_node_set_pmem_image(Object *obj, const char *value, Error **errp)
{
    RackemuNodeState *rn = RACKEMU_NODE_MACHINE(obj);

    g_free(rn->pmem_image);
    rn->pmem_image = g_strdup(value);
}

static void rackemu_node_add_u32(ObjectClass *oc, const char *name, size_t offset, const char *desc)
{
    object_class_property_add(oc, name, "uint32", rackemu_node_get_u32, rackemu_node_set_u32, NULL,
                              (void *)(uintptr_t)offset);
    object_class_property_set_description(oc, name, desc);
}

static void rackemu_node_class_init(ObjectClass *oc, void *data)
{
    MachineClass *mc = MACHINE_CLASS(oc);
    RackemuNodeClass *rnc = RACKEMU_NODE_MACHINE_CLASS(oc);

    mc->desc = "rackemu cluster node (ARM virt + Unimem vmbox/packetizer/GAS/cDMA + soNUMA RMC + fabric port + virtio-net on the fabric)";
    mc->default_cpu_type = ARM_CPU_TYPE_NAME("cortex-a57");
    rnc->parent_init = mc->init;
    mc->init = rackemu_node_init;

    rackemu_node_add_u32(oc, "node-id", offsetof(RackemuNodeState, node_id),
                         "This node's id in the cluster (0..node-count-1, default 0)");
    rackemu_node_add_u32(oc, "node-count", offsetof(RackemuNodeState, node_count),
                         "Number of nodes in the cluster (1..64, default 1)");
    rackemu_node_add_u32(oc, "fifo-depth", offsetof(RackemuNodeState, fifo_depth),
                         "vmbox FIFO depth in 64-bit words (4..65536, default 256)");
    rackemu_node_add_u32(oc, "remote-timeout-ms", offsetof(RackemuNodeState, remote_timeout_ms),
                         "How long a remote memory access waits for the owner node before it "
                         "fails with a bus error / DMA error (1..600000, default 2000)");
    rackemu_node_add_u32(oc, "rmc-segment-mb", offsetof(RackemuNodeState, rmc_segment_mb),
                         "MiB of RAM reserved at the top for the RMC's contexts (0..RAM/4, default 32; "
                         "0: no segment, contexts cannot be registered)");
    object_class_property_add_str(oc, "fabric", rackemu_node_get_fabric, rackemu_node_set_fabric);
    object_class_property_set_description(oc, "fabric",
                                          "Fabric bridge socket (DIR/fabric.sock); none: single node");
    object_class_property_add_str(oc, "ram-dir", rackemu_node_get_ram_dir, rackemu_node_set_ram_dir);
    object_class_property_set_description(oc, "ram-dir",
                                          "Directory of every node's RAM file nodeN.ram (shared file "
                                          "backends): one-sided accesses to a live peer copy directly "
                                          "from/to its RAM; empty (default): over the fabric");
    object_class_property_add_bool(oc, "net", rackemu_node_get_net, rackemu_node_set_net);
    object_class_property_set_description(oc, "net",
                                          "The node's virtio-net NIC on the fabric port, MAC "
                                          "02:52:4b:00:00:<node-id> (default on; needs a fabric)");
    object_class_property_add_enum(oc, "stack-roce", "OnOffAuto", &OnOffAuto_lookup, rackemu_node_get_stack_roce,
                                   rackemu_node_set_stack_roce);
    object_class_property_set_description(oc, "stack-roce",
                                          "Whether the guest's network stack may send RoCEv2 (UDP "
                                          "port 4791) on the fabric: on, off, or auto (default: only "
                                          "on a node without an RNIC, e.g. for soft-RoCE)");
    rackemu_node_add_u32(oc, "net-mtu", offsetof(RackemuNodeState, net_mtu),
                         "MTU the NIC advertises to the guest (68..9000, default 1500)");
    object_class_property_add(oc, "pmem-size", "size", rackemu_node_get_pmem_size, rackemu_node_set_pmem_size,
                              NULL, NULL);
    object_class_property_set_description(oc, "pmem-size",
                                          "Bytes of persistent memory at 0x2000000000 (docs/pmem.md), a "
                                          "multiple of 2 MiB up to 64 GiB; 0 (default): none");
    object_class_property_add_str(oc, "pmem-mode", rackemu_node_get_pmem_mode, rackemu_node_set_pmem_mode);
    object_class_property_set_description(oc, "pmem-mode",
                                          "What a power cut keeps: none, eadr, adr (default) or adr-ddio");
    object_class_property_add_str(oc, "pmem-image", rackemu_node_get_pmem_image, rackemu_node_set_pmem_image);
    object_class_property_set_description(oc, "pmem-image",
                                          "File of the persistent memory's durable image (created or "
                                          "reused; the node boots on it); empty: memory, lost at exit");
    rackemu_node_add_u32(oc, "pmem-nic-entries", offsetof(RackemuNodeState, pmem_nic_entries),
                         "NIC buffer entries of the persistence model (0..1024, default 64; 0: none)");
    rackemu_node_add_u32(oc, "pmem-nic-delay-ns", offsetof(RackemuNodeState, pmem_nic_delay_ns),
                         "Delay from a NIC write's acknowledgement to its placement (default 2000)");
    rackemu_node_add_u32(oc, "pmem-llc-lines", offsetof(RackemuNodeState, pmem_llc_lines),
                         "Pending lines the modeled LLC holds before it evicts (1..65536, default 4096)");
    rackemu_node_add_u32(oc, "pmem-seed", offsetof(RackemuNodeState, pmem_seed),
                         "Seed of the model's eviction victims (default 1)");
    object_class_property_add_bool(oc, "burst-known-issue", rackemu_node_get_burst, rackemu_node_set_burst);
    object_class_property_set_description(oc, "burst-known-issue",
                                          "Model the vmbox burst known issue of ExaNoDe D3.6 sec. 5.1.2");
}

static const TypeInfo rackemu_node_info = {
    .name = TYPE_RACKEMU_NODE_MACHINE,
    .parent = TYPE_VIRT_MACHINE,
    .instance_size = sizeof(RackemuNodeState),
    .instance_init = rackemu_node_instance_init,
    .class_size = sizeof(RackemuNodeClass),
    .class_init = rackemu_node_class_init,
};

static void rackemu_node_register(void)
{
    type_register_static(&rackemu_node_info);
}

type_init(rackemu_node_register)
