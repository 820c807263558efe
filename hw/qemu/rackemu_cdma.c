/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of rackemu's Xilinx AXI CDMA-compatible engine (PG034; docs/cdma.md). The device
 * logic is the C++ core (hw/unimem/cdma.{h,cc}), whose engine runs on a thread of its own
 * (cdma_capi.cc). This file maps the register page and the interrupt line, and gives the
 * engine the node's view of memory: its physical address space (RAM, and devices through the
 * memory API) plus the global address space window, whose transfers go straight to the
 * fabric's one-sided memory service in large requests instead of 8-byte window accesses.
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "qapi/error.h"
#include "exec/address-spaces.h"
#include "hw/irq.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"

#include "rackemu/unimem_regs.h"
#include "rackemu/xilinx_cdma_regs.h"
#include "cdma_capi.h"
#include "rackemu_glue.h"
#include "rk_remote_mem.h"
#include "rackemu_cdma.h"

OBJECT_DECLARE_SIMPLE_TYPE(RackemuCdmaState, RACKEMU_CDMA)

struct RackemuCdmaState {
    SysBusDevice parent_obj;
    MemoryRegion mmio;
    RackemuIrq irq;
    RkCdma *core;
    RackemuFabric *fabric; /* link "fabric": the node's port (unset: global addresses fail) */
    RkRemoteMem *rmem;     /* the fabric's remote memory, taken at realize */
    uint32_t node_id;
    uint32_t node_count;
};

/*
 * The engine moves data between memory only: every byte of [addr, addr + len) must decode to
 * RAM (for a read also to ROM or flash in its read-array mode, which QEMU reads directly).
 * Anything else is refused before a byte moves: an address nothing decodes gives DECERR, device
 * registers (MMIO, flash in command mode) and writes to ROM give SLVERR. Caveat: a real AXI CDMA
 * can target device registers; here each such access would run a device callback under the big
 * lock, a few bytes at a time (16 MiB to the flash at 0x0 starved the guest for 23 s), so the
 * model refuses it and logs it (docs/cdma.md, "Address decoding").
 */
static MemTxResult rackemu_cdma_check_ram(RackemuCdmaState *s, uint64_t addr, uint64_t len, bool write)
{
    RCU_READ_LOCK_GUARD();

    while (len) {
        hwaddr xlat, l = len;
        MemoryRegion *mr = address_space_translate(&address_space_memory, addr, &xlat, &l, write,
                                                   MEMTXATTRS_UNSPECIFIED);
        bool direct = write ? memory_region_is_ram(mr) && !mr->readonly && !memory_region_is_ram_device(mr)
                            : (memory_region_is_ram(mr) && !memory_region_is_ram_device(mr)) ||
                                  memory_region_is_romd(mr);

        if (!direct) {
            /* QEMU's hole filler (io_mem_unassigned) is the only region without a name */
            bool unmapped = !mr->name;

            qemu_log_mask(LOG_GUEST_ERROR,
                          "rackemu-cdma: node %u: DMA %s 0x%" PRIx64 " hits %s \"%s\": only RAM is "
                          "reachable by the engine (%s)\n",
                          s->node_id, write ? "write to" : "read from", addr,
                          unmapped ? "no device" : "device memory", unmapped ? "-" : mr->name,
                          unmapped ? "DMADecErr" : "DMASlvErr");
            return unmapped ? MEMTX_DECODE_ERROR : MEMTX_ERROR;
        }
        if (l == 0) {
            return MEMTX_DECODE_ERROR;
        }
        addr += l;
        len -= MIN(l, len);
    }
    return MEMTX_OK;
}

/* Engine thread: one transfer chunk. */
static int rackemu_cdma_mem(void *opaque, int write, uint64_t addr, void *buf, uint64_t len)
{
    RackemuCdmaState *s = opaque;
    uint64_t wsize = (uint64_t)s->node_count * GAS_WINDOW_NODE_SIZE;
    MemTxResult r;

    if (addr >= GAS_WINDOW_BASE && addr - GAS_WINDOW_BASE < wsize) {
        uint64_t g = addr - GAS_WINDOW_BASE;
        uint8_t *p = buf;

        if (len > wsize - g) {
            return RK_CDMA_MEM_DECODE_ERR; /* runs off the end of the cluster */
        }
        while (len) {
            /* one owner per piece: split where the range crosses into the next node */
            uint64_t n = MIN(len, GAS_WINDOW_NODE_SIZE - UNIMEM_GADDR_LOCAL(g));
            int rc = !s->rmem ? RK_RMEM_UNREACHABLE
                     : write ? rk_rmem_write(s->rmem, UNIMEM_GADDR_NODE(g), UNIMEM_GADDR_LOCAL(g), p, n)
                             : rk_rmem_read(s->rmem, UNIMEM_GADDR_NODE(g), UNIMEM_GADDR_LOCAL(g), p, n);

            if (rc == RK_RMEM_DECODE_ERR) {
                return RK_CDMA_MEM_DECODE_ERR;
            }
            if (rc != RK_RMEM_OK) {
                return RK_CDMA_MEM_SLAVE_ERR; /* node down, unreachable or not answering */
            }
            g += n;
            p += n;
            len -= n;
        }
        return RK_CDMA_MEM_OK;
    }
    r = rackemu_cdma_check_ram(s, addr, len, write);
    if (r != MEMTX_OK) {
        return r == MEMTX_DECODE_ERROR ? RK_CDMA_MEM_DECODE_ERR : RK_CDMA_MEM_SLAVE_ERR;
    }
    r = address_space_rw(&address_space_memory, addr, MEMTXATTRS_UNSPECIFIED, buf, len, write);
    return r == MEMTX_OK ? RK_CDMA_MEM_OK : r == MEMTX_DECODE_ERROR ? RK_CDMA_MEM_DECODE_ERR
                                                                    : RK_CDMA_MEM_SLAVE_ERR;
}

static int rackemu_cdma_irq_level(void *opaque)
{
    RackemuCdmaState *s = opaque;

    return rk_cdma_irq_level(s->core);
}

/* From a vCPU (big lock held) or from the engine thread (rackemu_glue.h). */
static void rackemu_cdma_irq(void *opaque, int level)
{
    RackemuCdmaState *s = opaque;

    rackemu_irq_update(&s->irq);
}

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

    return rk_cdma_read(s->core, addr, size);
}

static void rackemu_cdma_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuCdmaState *s = opaque;

    rk_cdma_write(s->core, addr, data, size);
}

static const MemoryRegionOps rackemu_cdma_ops = {
    .read = rackemu_cdma_read,
    .write = rackemu_cdma_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void rackemu_cdma_realize(DeviceState *dev, Error **errp)
{
    RackemuCdmaState *s = RACKEMU_CDMA(dev);

    if (s->node_count < 1 || s->node_count > 64) {
        error_setg(errp, "rackemu-cdma: node-count %u out of range 1..64", s->node_count);
        return;
    }
    s->rmem = rackemu_fabric_rmem(s->fabric);
    s->core = rk_cdma_new(rackemu_cdma_mem, rackemu_cdma_irq, rackemu_guest_error, rackemu_cdma_thread, s);
    memory_region_init_io(&s->mmio, OBJECT(s), &rackemu_cdma_ops, s, "rackemu-cdma", RACKEMU_CDMA_SIZE);
    sysbus_init_mmio(SYS_BUS_DEVICE(s), &s->mmio);
    rackemu_irq_init(&s->irq, SYS_BUS_DEVICE(s), rackemu_cdma_irq_level, s);
}

static void rackemu_cdma_reset(DeviceState *dev)
{
    RackemuCdmaState *s = RACKEMU_CDMA(dev);

    if (s->core) {
        rk_cdma_reset(s->core);
        rackemu_irq_set(&s->irq, rk_cdma_irq_level(s->core));
    }
}


/*
 * Caveat: the engine's registers and an in-flight transfer live in the C++ core and are not
 * serialised: snapshots and migration are refused rather than silently losing them.
 */
static const VMStateDescription rackemu_cdma_vmstate = {
    .name = "rackemu-cdma",
    .unmigratable = 1,
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
