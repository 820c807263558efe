/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of rackemu's Xilinx AXI CDMA-compatible engine (PG034; docs/cdma.md). The device
 * logic is the C++ core (hw/unimem/cdma.{h,cc}), whose engine runs on a thread of its own
 * (cdma_capi.cc). This file maps the register page and gives the core the node's host
 * (rackemu_glue.h): the interrupt line, and DMA over the node's physical address space, RAM
 * only, plus the global address space window, whose transfers go straight to the fabric's
 * one-sided memory service in large requests instead of 8-byte window accesses. The engine is
 * quiesced while the VM is stopped, so a saved state and the saved RAM agree.
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"
#include "sysemu/runstate.h"

#include "rackemu/xilinx_cdma_regs.h"
#include "cdma_capi.h"
#include "rackemu_glue.h"
#include "rackemu_cdma.h"
#include "trace.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuCdmaState, RACKEMU_CDMA)

struct RackemuCdmaState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuHost host; /* cdma_introut (line 0), DMA, guest errors */
    RkCdma *core;
    VMChangeStateEntry *vmse;
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: global addresses fail) */
    uint32_t node_id;
    uint32_t node_count;
    RkCdmaState mig; /* the core's state while it is saved or loaded */
};

/* The engine thread reads guest memory through the memory API: it must be an RCU reader. */
static void rackemu_cdma_thread(void *opaque, int start)
{
    if (start) {
        rcu_register_thread();
    } else {
        rcu_unregister_thread();
    }
}

static uint64_t rackemu_cdma_read(void *opaque, hwaddr addr, unsigned size)
{
    RackemuCdmaState *s = opaque;
    uint64_t val = rk_cdma_read(s->core, addr, size);

    trace_rackemu_mmio_read("rackemu-cdma", s->node_id, addr, size, val);
    return val;
}

static void rackemu_cdma_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuCdmaState *s = opaque;

    trace_rackemu_mmio_write("rackemu-cdma", s->node_id, addr, size, data);
    rk_cdma_write(s->core, addr, data, size);
}

static const MemoryRegionOps rackemu_cdma_ops = {
    .read = rackemu_cdma_read,
    .write = rackemu_cdma_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

/*
 * The engine moves guest memory only while the VM runs: when it stops (savevm, migration's
 * last phase, gdb, `stop`) the engine finishes the transfer or descriptor it is in and waits
 * (the main loop waits for it here; it never needs the big lock to get there).
 */
static void rackemu_cdma_vm_state(void *opaque, bool running, RunState state)
{
    RackemuCdmaState *s = opaque;

    if (running) {
        rk_cdma_resume(s->core);
    } else {
        rk_cdma_pause(s->core);
    }
    trace_rackemu_cdma_quiesce(s->node_id, !running);
}

static void rackemu_cdma_realize(DeviceState *dev, Error **errp)
{
    RackemuCdmaState *s = RACKEMU_CDMA(dev);

    if (s->node_count < 1 || s->node_count > 64) {
        error_setg(errp, "rackemu-cdma: node-count %u out of range 1..64", s->node_count);
        return;
    }
    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_cdma_ops, s, "rackemu-cdma", RACKEMU_CDMA_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_host_init(&s->host, DEVICE(s), "rackemu-cdma", 1, false, s->fabric, s->node_id, s->node_count);
    s->core = rk_cdma_new(&s->host.host, rackemu_cdma_thread, s);
    s->vmse = qemu_add_vm_change_state_handler(rackemu_cdma_vm_state, s);
}

static void rackemu_cdma_reset(DeviceState *dev)
{
    RackemuCdmaState *s = RACKEMU_CDMA(dev);

    if (s->core) {
        rk_cdma_reset(s->core);
        rackemu_host_irq_sync(&s->host, 0, rk_cdma_irq_level(s->core));
    }
}

/* With the VM stopped the engine is already at a boundary; pausing again costs nothing. */
static int rackemu_cdma_pre_save(void *opaque)
{
    RackemuCdmaState *s = opaque;
    bool running = runstate_is_running();

    rk_cdma_pause(s->core);
    rk_cdma_save(s->core, &s->mig);
    if (running) {
        rk_cdma_resume(s->core);
    }
    return 0;
}

/* Refuses anything out of range; a transfer in flight at save ends halted with DMASlvErr. */
static int rackemu_cdma_post_load(void *opaque, int version_id)
{
    RackemuCdmaState *s = opaque;
    int rc = rk_cdma_load(s->core, &s->mig);

    trace_rackemu_cdma_load(s->node_id, s->mig.phase, s->mig.cr, s->mig.sr, rc);
    if (rc != 0) {
        return -EINVAL;
    }
    rackemu_host_irq_sync(&s->host, 0, rk_cdma_irq_level(s->core));
    return 0;
}

/* The registers and engine state (CdmaState, cdma.h); docs/cdma.md "Migration". */
static const VMStateDescription rackemu_cdma_vmstate = {
    .name = "rackemu-cdma",
    .version_id = 1,
    .minimum_version_id = 1,
    .pre_save = rackemu_cdma_pre_save,
    .post_load = rackemu_cdma_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT32(mig.cr, RackemuCdmaState),
        VMSTATE_UINT32(mig.sr, RackemuCdmaState),
        VMSTATE_UINT64(mig.curdesc, RackemuCdmaState),
        VMSTATE_UINT64(mig.taildesc, RackemuCdmaState),
        VMSTATE_UINT64(mig.sa, RackemuCdmaState),
        VMSTATE_UINT64(mig.da, RackemuCdmaState),
        VMSTATE_UINT32(mig.btt, RackemuCdmaState),
        VMSTATE_UINT32(mig.irq_count, RackemuCdmaState),
        VMSTATE_UINT32(mig.unsignalled, RackemuCdmaState),
        VMSTATE_UINT32(mig.phase, RackemuCdmaState),
        VMSTATE_UINT32(mig.resume_valid, RackemuCdmaState),
        VMSTATE_UINT64(mig.resume_next, RackemuCdmaState),
        VMSTATE_UINT64(mig.session_descriptors, RackemuCdmaState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_cdma_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuCdmaState, node_id, 0),
    DEFINE_PROP_UINT32("node-count", RackemuCdmaState, node_count, 1),
    DEFINE_PROP_LINK("fabric", RackemuCdmaState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_cdma_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "Xilinx AXI CDMA compatible engine (PG034), rackemu";
    dc->realize = rackemu_cdma_realize;
    dc->reset = rackemu_cdma_reset;
    dc->vmsd = &rackemu_cdma_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_cdma_props);
}

static const TypeInfo rackemu_cdma_types[] = {
    {
        .name = TYPE_RACKEMU_CDMA,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuCdmaState),
        .class_init = rackemu_cdma_class_init,
    },
};

DEFINE_TYPES(rackemu_cdma_types)
