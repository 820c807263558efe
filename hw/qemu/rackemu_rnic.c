/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the rackemu RNIC, a PCIe RDMA NIC speaking RoCEv2 (docs/rnic.md). The device logic
 * is the C++ core (hw/rnic/rnic.{h,cc}), served through its device operations
 * (rk_rnic_device_ops, hw/rnic/rnic_capi.h) by the generic adapter (rackemu_device.h: BAR0
 * registers and BAR2 doorbell pages, MSI-X vectors on BAR4 or INTx as their OR, DMA on the
 * function's bus-master space, the retransmission timer, the transmit thread that waits for
 * room after backpressure, the port's RoCEv2 receiver and link state, pause while the VM is
 * stopped). What is the RNIC's own here: the PCI function (1af4:10f5, class 0x0207, the PCIe
 * capability), the properties and their checks, the machine's fabric and node id, and TCG's
 * parallel mode for global atomicity.
 *
 * A node gets one with `-device rackemu-rnic` on the rackemu-node machine: the device finds the
 * node's fabric and node id itself (or takes the "fabric" link and node-id); the timing model
 * is set with its properties, e.g. -global rackemu-rnic.link-mbps=25000.
 *
 * Migration (docs/rnic.md "Migration"): the PCI config space and MSI-X state, and the core's
 * architectural state as one string (VMSTATE_RACKEMU_DEVICE; its fields are the X-macro lists
 * of hw/rnic/rnic_state.h), which the core validates completely on load.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/pci/pci.h"
#include "hw/pci/pcie.h"
#include "hw/pci/msix.h"
#include "hw/core/cpu.h"
#include "exec/exec-all.h" /* CF_PARALLEL */
#include "sysemu/tcg.h"
#include "migration/vmstate.h"

#include "rackemu/rnic_regs.h"
#include "rnic_capi.h"
#include "rackemu_device.h"
#include "trace.h"

#define TYPE_RACKEMU_RNIC RACKEMU_RNIC_TYPE
OBJECT_DECLARE_SIMPLE_TYPE(RackemuRnicState, RACKEMU_RNIC)

struct RackemuRnicState {
    PCIDevice parent_obj;
    RackemuDevice dev;
    RackemuFabric *fabric; /* link "fabric"; unset: the machine's */
    uint32_t node_id;      /* UINT32_MAX: the machine's node-id */
    uint32_t node_count;
    RkRnicConfig cfg;      /* timing, amu-* and direct, for the core */
    bool direct;           /* READs to live peers copy from their RAM files (docs/rnic.md "Direct path") */
    char *amu_rate_limit;  /* amu-rate-limit, amu-raw: strings (NULL: the default) */
    char *amu_raw;
    bool cpu_parallel; /* x-cpu-parallel: TCG's parallel mode on every vCPU (global atomicity) */
};

/* The machine's fabric object and node id/count, for a device created with -device. */
static void rackemu_rnic_find_node(RackemuRnicState *s)
{
    Object *m = qdev_get_machine();

    if (!s->fabric) {
        s->fabric = (RackemuFabric *)object_resolve_path_type("", TYPE_RACKEMU_FABRIC, NULL);
    }
    if (s->node_id == UINT32_MAX) {
        s->node_id = object_property_find(m, "node-id") ? object_property_get_uint(m, "node-id", NULL) : 0;
    }
    if (s->node_count == 0) {
        s->node_count = object_property_find(m, "node-count") ? object_property_get_uint(m, "node-count", NULL)
                                                               : 1;
    }
}

static void rackemu_rnic_realize(PCIDevice *pdev, Error **errp)
{
    RackemuRnicState *s = RACKEMU_RNIC(pdev);
    uint32_t mtu = s->cfg.timing.max_mtu;

    rackemu_rnic_find_node(s);
    if (s->node_count < 1 || s->node_count > 64 || s->node_id >= s->node_count) {
        error_setg(errp, "rackemu-rnic: node-id %u / node-count %u: need node-id < node-count <= 64", s->node_id,
                   s->node_count);
        return;
    }
    if (mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096) {
        error_setg(errp, "rackemu-rnic: mtu %u is not a RoCE path MTU (256, 512, 1024, 2048 or 4096)", mtu);
        return;
    }
    if (!s->cfg.timing.link_mbps || !s->cfg.timing.nic_mhz || !s->cfg.timing.pcie_mbps) {
        error_setg(errp, "rackemu-rnic: link-mbps, nic-mhz and pcie-mbps must be at least 1");
        return;
    }
    s->cfg.amu.rate_limit = s->amu_rate_limit;
    s->cfg.amu.raw = s->amu_raw;
    {
        char msg[200];

        if (rk_rnic_amu_check(&s->cfg.amu, s->cfg.timing.nic_mhz, msg, sizeof(msg)) < 0) {
            error_setg(errp, "rackemu-rnic: atomic unit: %s", msg);
            return;
        }
    }
    /* the direct path (docs/rnic.md "Direct path"): the node's remote memory, when it has one */
    s->cfg.direct = s->direct;
    /*
     * Global atomicity (docs/atomic-unit.md): the device's atomics are host atomics on guest RAM,
     * but TCG turns the guest's own atomics (ldxr/stxr, LSE) into host atomics only in parallel
     * mode, which QEMU chooses only for more than one possible vCPU; with one, a guest atomic is
     * a plain load and store that a NIC atomic from the fabric thread can fall between (updates
     * were lost in tests/e2e/test_rnic_atomics.py). Parallel mode for every vCPU: their threads
     * have not translated anything yet when a -device is realized. x-cpu-parallel=off leaves
     * QEMU's choice, only to measure what parallel mode costs (docs/atomic-unit.md): the guest's
     * atomics are then not atomic with the NIC's.
     */
    if (tcg_enabled() && !s->cpu_parallel) {
        warn_report("rackemu-rnic: x-cpu-parallel=off: the guest's atomics are not atomic with the "
                    "NIC's on a one-vCPU node (a measurement setting, not for use)");
    }
    if (tcg_enabled() && s->cpu_parallel) {
        CPUState *cpu;

        CPU_FOREACH(cpu) {
            cpu->tcg_cflags |= CF_PARALLEL;
        }
    }
    pdev->config[PCI_INTERRUPT_PIN] = 1;
    if (pcie_endpoint_cap_init(pdev, 0x80) < 0) {
        error_setg(errp, "rackemu-rnic: no room for the PCIe capability");
        return;
    }
    /* MSI-X on BAR4 (INTx only when the machine has no MSI controller) */
    if (!rackemu_device_realize(&s->dev, DEVICE(pdev), &rk_rnic_device_ops, &s->cfg, s->fabric, s->node_id,
                                s->node_count, true, errp)) {
        return;
    }
    trace_rackemu_rnic_realize(s->node_id, s->dev.host.host.port != NULL, s->dev.host.msix);
}

static void rackemu_rnic_exit(PCIDevice *pdev)
{
    rackemu_device_unrealize(&RACKEMU_RNIC(pdev)->dev);
}

static void rackemu_rnic_reset(DeviceState *dev)
{
    rackemu_device_reset(&RACKEMU_RNIC(dev)->dev);
}

/*
 * Version RK_RNIC_STATE_VERSION (4): the core's state as one string (2 had a field list here;
 * an older stream is refused). Frames in flight are not state: RC retransmission recovers
 * them after the load. A state the core finds out of range fails the load with its reason.
 */
static const VMStateDescription rackemu_rnic_vmstate = {
    .name = "rackemu-rnic",
    .version_id = RK_RNIC_STATE_VERSION,
    .minimum_version_id = RK_RNIC_STATE_VERSION,
    .fields = (VMStateField[]) {
        VMSTATE_PCI_DEVICE(parent_obj, RackemuRnicState),
        VMSTATE_MSIX(parent_obj, RackemuRnicState),
        VMSTATE_RACKEMU_DEVICE(dev, RackemuRnicState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_rnic_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuRnicState, node_id, UINT32_MAX),
    DEFINE_PROP_UINT32("node-count", RackemuRnicState, node_count, 0),
    DEFINE_PROP_LINK("fabric", RackemuRnicState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_UINT32("link-mbps", RackemuRnicState, cfg.timing.link_mbps, 100000),
    DEFINE_PROP_UINT32("hop-ns", RackemuRnicState, cfg.timing.hop_ns, 300),
    DEFINE_PROP_UINT32("nic-mhz", RackemuRnicState, cfg.timing.nic_mhz, 500),
    DEFINE_PROP_UINT32("pcie-ns", RackemuRnicState, cfg.timing.pcie_ns, 400),
    DEFINE_PROP_UINT32("pcie-mbps", RackemuRnicState, cfg.timing.pcie_mbps, 16000),
    DEFINE_PROP_UINT32("mtu", RackemuRnicState, cfg.timing.max_mtu, 4096),
    DEFINE_PROP_UINT32("atomic-host-ns", RackemuRnicState, cfg.timing.atomic_host_ns, 345),
    DEFINE_PROP_UINT32("atomic-dm-ns", RackemuRnicState, cfg.timing.atomic_dm_ns, 111),
    DEFINE_PROP_UINT32("qp-msg-ns", RackemuRnicState, cfg.timing.qp_msg_ns, 55),
    DEFINE_PROP_UINT32("dm-size", RackemuRnicState, cfg.dm_size, 256 * 1024),
    DEFINE_PROP_UINT32("ack-every", RackemuRnicState, cfg.ack_every, 1),
    DEFINE_PROP_UINT32("ack-delay-ns", RackemuRnicState, cfg.ack_delay_ns, 0),
    DEFINE_PROP_BOOL("direct", RackemuRnicState, direct, true),
    /* the atomic unit (docs/atomic-unit.md "Properties"; defaults: the paper's) */
    DEFINE_PROP_UINT32("amu-host-lat-ns", RackemuRnicState, cfg.amu.host_lat_ns, 250),
    DEFINE_PROP_UINT32("amu-host-mbps", RackemuRnicState, cfg.amu.host_mbps, 2300),
    DEFINE_PROP_UINT32("amu-mem-ns", RackemuRnicState, cfg.amu.mem_ns, 70),
    DEFINE_PROP_UINT32("amu-net-mbps", RackemuRnicState, cfg.amu.net_mbps, 4000),
    DEFINE_PROP_UINT32("amu-msg-bytes", RackemuRnicState, cfg.amu.msg_bytes, 48),
    DEFINE_PROP_UINT32("amu-rdreq-bytes", RackemuRnicState, cfg.amu.rdreq_bytes, 8),
    DEFINE_PROP_UINT32("amu-wrreq-bytes", RackemuRnicState, cfg.amu.wrreq_bytes, 16),
    DEFINE_PROP_UINT32("amu-resp-bytes", RackemuRnicState, cfg.amu.resp_bytes, 12),
    DEFINE_PROP_UINT32("amu-cache-lines", RackemuRnicState, cfg.amu.cache_lines, 32),
    DEFINE_PROP_UINT32("amu-cache-ways", RackemuRnicState, cfg.amu.cache_ways, 1),
    DEFINE_PROP_UINT32("amu-lookahead", RackemuRnicState, cfg.amu.lookahead, 8),
    DEFINE_PROP_UINT32("amu-regs", RackemuRnicState, cfg.amu.regs, 8),
    DEFINE_PROP_UINT32("amu-input-queue", RackemuRnicState, cfg.amu.input_queue, 64),
    DEFINE_PROP_UINT32("amu-host-queue", RackemuRnicState, cfg.amu.host_queue, 16),
    DEFINE_PROP_UINT32("amu-tags", RackemuRnicState, cfg.amu.tags, 32),
    DEFINE_PROP_UINT32("amu-age-max", RackemuRnicState, cfg.amu.age_max, 4),
    DEFINE_PROP_UINT32("amu-hostq-threshold", RackemuRnicState, cfg.amu.hostq_threshold, 2),
    DEFINE_PROP_UINT32("amu-raw-entries", RackemuRnicState, cfg.amu.raw_entries, 64),
    DEFINE_PROP_UINT32("amu-conflict-bypass", RackemuRnicState, cfg.amu.conflict_bypass, 0),
    DEFINE_PROP_UINT32("amu-cache-cycles", RackemuRnicState, cfg.amu.cache_cycles, 2),
    DEFINE_PROP_STRING("amu-rate-limit", RackemuRnicState, amu_rate_limit),
    DEFINE_PROP_STRING("amu-raw", RackemuRnicState, amu_raw),
    DEFINE_PROP_BOOL("x-cpu-parallel", RackemuRnicState, cpu_parallel, true),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_rnic_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);
    PCIDeviceClass *k = PCI_DEVICE_CLASS(oc);

    k->realize = rackemu_rnic_realize;
    k->exit = rackemu_rnic_exit;
    k->vendor_id = RNIC_PCI_VENDOR_ID;
    k->device_id = RNIC_PCI_DEVICE_ID;
    k->subsystem_vendor_id = RNIC_PCI_SUBSYS_VENDOR;
    k->subsystem_id = RNIC_PCI_SUBSYS_ID;
    k->class_id = RNIC_PCI_CLASS;
    k->revision = RNIC_PCI_REVISION;
    dc->desc = "rackemu RNIC: RoCEv2 RDMA NIC with InfiniBand RC (docs/rnic.md)";
    dc->reset = rackemu_rnic_reset;
    dc->vmsd = &rackemu_rnic_vmstate;
    set_bit(DEVICE_CATEGORY_NETWORK, dc->categories);
    device_class_set_props(dc, rackemu_rnic_props);
}

static const TypeInfo rackemu_rnic_types[] = {
    {
        .name = RACKEMU_RNIC_TYPE,
        .parent = TYPE_PCI_DEVICE,
        .instance_size = sizeof(RackemuRnicState),
        .class_init = rackemu_rnic_class_init,
        .interfaces = (InterfaceInfo[]) {
            { INTERFACE_PCIE_DEVICE },
            { }
        },
    },
};

DEFINE_TYPES(rackemu_rnic_types)
