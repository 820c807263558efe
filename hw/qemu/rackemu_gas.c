/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the Unimem global address space window (ExaNoDe D3.6 sec. 1, sec. 3.1.6;
 * docs/unimem.md). MMIO region 0 is the read-only control page, region 1 the window that the
 * machine maps at GAS_WINDOW_BASE. QEMU 7.2 dispatches MMIO under the big lock; a window
 * access drops it while the fabric round trip runs, so a vCPU that loads from another node
 * blocks only itself (other vCPUs, the main loop and interrupts go on). Other nodes' accesses to
 * this node's RAM never need the lock: the fabric port thread serves them.
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"

#include "rackemu/unimem_regs.h"
#include "unimem_capi.h"
#include "rackemu_glue.h"
#include "rackemu_gas.h"
#include "trace.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuGasState, RACKEMU_GAS)

struct RackemuGasState {
    SysBusDevice parent_obj;
    MemoryRegion ctrl;
    MemoryRegion window;
    RackemuHost host; /* DMA to the window's owners (remote memory), guest errors, node */
    RkGas *core;
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: only errors beyond this node) */
    uint32_t node_id;
    uint32_t node_count;
    RkGasState mig; /* the core's state while it is saved or loaded */
};

/*
 * A window access runs on its vCPU; the core hands it to the host's DMA at GAS_WINDOW_BASE + G,
 * which drops the big lock while the owner answers (rackemu_glue.c).
 */
static MemTxResult rackemu_gas_window_read(void *opaque, hwaddr addr, uint64_t *data, unsigned size,
                                           MemTxAttrs attrs)
{
    RackemuGasState *s = opaque;
    rk_status st = rk_gas_window_read(s->core, addr, size, data);

    trace_rackemu_mmio_read("rackemu-gas-window", s->node_id, addr, size, *data);
    if (st != RK_OK) {
        trace_rackemu_gas_bus_error(s->node_id, 0, addr, size, rk_status_name(st));
    }
    return rackemu_status_to_memtx(st);
}

static MemTxResult rackemu_gas_window_write(void *opaque, hwaddr addr, uint64_t data, unsigned size,
                                            MemTxAttrs attrs)
{
    RackemuGasState *s = opaque;
    rk_status st = rk_gas_window_write(s->core, addr, data, size);

    trace_rackemu_mmio_write("rackemu-gas-window", s->node_id, addr, size, data);
    if (st != RK_OK) {
        trace_rackemu_gas_bus_error(s->node_id, 1, addr, size, rk_status_name(st));
    }
    return rackemu_status_to_memtx(st);
}

static const MemoryRegionOps rackemu_gas_window_ops = {
    .read_with_attrs = rackemu_gas_window_read,
    .write_with_attrs = rackemu_gas_window_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8, .unaligned = true },
    .impl = { .min_access_size = 1, .max_access_size = 8, .unaligned = true },
};

static uint64_t rackemu_gas_ctrl_read(void *opaque, hwaddr addr, unsigned size)
{
    RackemuGasState *s = opaque;
    uint64_t val = rk_gas_ctrl_read(s->core, addr, size);

    trace_rackemu_mmio_read("rackemu-gas", s->node_id, addr, size, val);
    return val;
}

static void rackemu_gas_ctrl_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuGasState *s = opaque;

    trace_rackemu_mmio_write("rackemu-gas", s->node_id, addr, size, data);
    rk_gas_ctrl_write(s->core, addr, data, size);
}

static const MemoryRegionOps rackemu_gas_ctrl_ops = {
    .read = rackemu_gas_ctrl_read,
    .write = rackemu_gas_ctrl_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void rackemu_gas_realize(DeviceState *dev, Error **errp)
{
    RackemuGasState *s = RACKEMU_GAS(dev);

    if (s->node_count < 1 || s->node_count > 64 || s->node_id >= s->node_count) {
        error_setg(errp, "rackemu-gas: node-id %u / node-count %u out of range (node-id < node-count <= 64)",
                   s->node_id, s->node_count);
        return;
    }
    rackemu_host_init(&s->host, DEVICE(s), "rackemu-gas", 0, false, s->fabric, s->node_id, s->node_count);
    s->core = rk_gas_new(&s->host.host);
    memory_region_init_io(&s->ctrl, OBJECT(s), &rackemu_gas_ctrl_ops, s, "rackemu-gas-ctrl", GAS_CTRL_SIZE);
    memory_region_init_io(&s->window, OBJECT(s), &rackemu_gas_window_ops, s, "rackemu-gas-window",
                          rk_gas_window_size(s->core));
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->ctrl);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->window);
}

static int rackemu_gas_pre_save(void *opaque)
{
    RackemuGasState *s = opaque;

    rk_gas_save(s->core, &s->mig);
    return 0;
}

/* A stream of another node or rack size (or a corrupt one) is refused. */
static int rackemu_gas_post_load(void *opaque, int version_id)
{
    RackemuGasState *s = opaque;
    int rc = rk_gas_load(s->core, &s->mig);

    trace_rackemu_gas_load(s->node_id, s->mig.node_id, s->mig.node_count, rc);
    return rc == 0 ? 0 : -EINVAL;
}

/*
 * The window's own counter registers (GAS_CTRL_LOADS .. BUS_ERRORS). Nothing is ever in flight
 * in the device at save: a window access completes on its vCPU before the VM stops. The service
 * counters (SERVED_*, TIMEOUTS) are the fabric's remote memory statistics, not device state.
 */
static const VMStateDescription rackemu_gas_vmstate = {
    .name = "rackemu-gas",
    .version_id = 1,
    .minimum_version_id = 1,
    .pre_save = rackemu_gas_pre_save,
    .post_load = rackemu_gas_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT32(mig.node_id, RackemuGasState),
        VMSTATE_UINT32(mig.node_count, RackemuGasState),
        VMSTATE_UINT64_ARRAY(mig.counters, RackemuGasState, RK_GAS_STATE_COUNTERS),
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
