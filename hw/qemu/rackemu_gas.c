/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the Unimem global address space window (seed 004 sec. 1, sec. 3.1.6;
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
#include "rk_remote_mem.h"
#include "rackemu_gas.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuGasState, RACKEMU_GAS)

struct RackemuGasState {
    SysBusDevice parent_obj;
    MemoryRegion ctrl;
    MemoryRegion window;
    RkGas *core;
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: only errors beyond this node) */
    RkRemoteMem *rmem;     /* the fabric's remote memory, taken at realize */
    uint32_t node_id;
    uint32_t node_count;
};

static int rackemu_gas_access(void *opaque, int write, unsigned node, uint64_t local, void *buf, unsigned len)
{
    RackemuGasState *s = opaque;
    bool locked = qemu_mutex_iothread_locked();
    int rc;

    if (!s->rmem) {
        return RK_GAS_UNREACHABLE;
    }
    /* The core and the transport are thread-safe and keep no state across this call. */
    if (locked) {
        qemu_mutex_unlock_iothread();
    }
    rc = write ? rk_rmem_write(s->rmem, node, local, buf, len) : rk_rmem_read(s->rmem, node, local, buf, len);
    if (locked) {
        qemu_mutex_lock_iothread();
    }
    return rc == RK_RMEM_OK ? RK_GAS_OK : rc == RK_RMEM_DECODE_ERR ? RK_GAS_DECODE_ERR : RK_GAS_UNREACHABLE;
}

static uint64_t rackemu_gas_counter(void *opaque, unsigned off)
{
    RackemuGasState *s = opaque;
    struct rk_rmem_stats st;

    if (!s->rmem) {
        return 0;
    }
    rk_rmem_get_stats(s->rmem, &st);
    switch (off) {
    case GAS_CTRL_SERVED_READS: return st.served_reads;
    case GAS_CTRL_SERVED_WRITES: return st.served_writes;
    case GAS_CTRL_SERVED_REFUSED: return st.served_refused;
    case GAS_CTRL_TIMEOUTS: return st.timeouts;
    default: return 0;
    }
}

static MemTxResult rackemu_gas_window_read(void *opaque, hwaddr addr, uint64_t *data, unsigned size,
                                           MemTxAttrs attrs)
{
    RackemuGasState *s = opaque;

    return rk_gas_window_read(s->core, addr, size, data) == 0 ? MEMTX_OK : MEMTX_ERROR;
}

static MemTxResult rackemu_gas_window_write(void *opaque, hwaddr addr, uint64_t data, unsigned size,
                                            MemTxAttrs attrs)
{
    RackemuGasState *s = opaque;

    return rk_gas_window_write(s->core, addr, data, size) == 0 ? MEMTX_OK : MEMTX_ERROR;
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

    return rk_gas_ctrl_read(s->core, addr, size);
}

static void rackemu_gas_ctrl_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuGasState *s = opaque;

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
    s->rmem = rackemu_fabric_rmem(s->fabric);
    s->core = rk_gas_new(s->node_id, s->node_count, rackemu_gas_access, rackemu_gas_counter, rackemu_guest_error, s);
    memory_region_init_io(&s->ctrl, OBJECT(s), &rackemu_gas_ctrl_ops, s, "rackemu-gas-ctrl", GAS_CTRL_SIZE);
    memory_region_init_io(&s->window, OBJECT(s), &rackemu_gas_window_ops, s, "rackemu-gas-window",
                          rk_gas_window_size(s->core));
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->ctrl);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->window);
}


/* The window has no state of its own; the counters are statistics. */
static const VMStateDescription rackemu_gas_vmstate = {
    .name = "rackemu-gas",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) { VMSTATE_END_OF_LIST() },
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
