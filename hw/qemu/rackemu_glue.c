/* SPDX-License-Identifier: MIT */
/* Helpers shared by every rackemu device's QOM glue; see rackemu_glue.h. */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "qemu/module.h"
#include "hw/irq.h"
#include "hw/core/cpu.h"
#include "exec/address-spaces.h"
#include "exec/memory.h"
#include "qemu/timer.h"
#include "rackemu/unimem_regs.h"

#include "rackemu_glue.h"
#include "trace.h"

RkFabricEndpoint *rackemu_fabric_bind(RackemuFabric *f, unsigned svc, const struct rk_fabric_service *ops,
                                      void *opaque)
{
    return rk_fabric_bind(rackemu_fabric_port(f), svc, ops, opaque);
}

RkFabricPort *rackemu_fabric_port(RackemuFabric *f)
{
    return f ? f->port : NULL;
}

RkRemoteMem *rackemu_fabric_rmem(RackemuFabric *f)
{
    return f ? f->rmem : NULL;
}

void rackemu_fabric_poll(RackemuFabric *f)
{
    if (f && f->port) {
        rk_fabric_port_poll(f->port);
    }
}

static const TypeInfo rackemu_fabric_info = {
    .name = TYPE_RACKEMU_FABRIC,
    .parent = TYPE_OBJECT,
    .instance_size = sizeof(RackemuFabric),
};

static void rackemu_fabric_register(void)
{
    type_register_static(&rackemu_fabric_info);
}

type_init(rackemu_fabric_register)

/* ---- the host interface (rackemu/host.h) ---- */

static void rackemu_host_apply(RackemuHost *h, const char *via)
{
    trace_rackemu_irq_apply(h->name, h->host.node_id, via);
    for (unsigned i = 0; i < h->nirqs; i++) {
        qemu_set_irq(h->lines[i], qatomic_read(&h->pending[i]));
    }
}

static void rackemu_host_bh(void *opaque)
{
    rackemu_host_apply(opaque, "bh");
}

/* Runs on the vCPU thread, which holds the big lock here (process_queued_cpu_work). */
static void rackemu_host_vcpu_work(CPUState *cpu, run_on_cpu_data data)
{
    RackemuHost *h = data.host_ptr;

    qatomic_set(&h->work_queued, false);
    /*
     * Pairs with the qatomic_xchg in rackemu_host_set_irq: a level recorded after the store
     * above either is read below or queues the work again.
     */
    smp_mb();
    rackemu_host_apply(h, "vcpu");
}

/*
 * The vCPU that applies a level set on a thread without the big lock: a halted one (asleep in
 * wfi, most likely waiting for this interrupt: the kick wakes it at once), else the node's first
 * (it applies the level when it leaves its current translation block). None when this is a vCPU
 * thread (one that dropped the big lock, e.g. while it waits on remote memory, would apply it
 * only after its wait: the bottom half does it sooner) or before the vCPU threads run.
 */
static CPUState *rackemu_host_vcpu(RackemuHost *h)
{
    CPUState *cpu, *pick = NULL;

    if (!h->irq_on_vcpu || current_cpu) {
        return NULL;
    }
    RCU_READ_LOCK_GUARD();
    CPU_FOREACH(cpu) {
        if (!qatomic_read(&cpu->created)) {
            return NULL;
        }
        if (!pick || (qatomic_read(&cpu->halted) && !qatomic_read(&pick->halted))) {
            pick = cpu;
        }
    }
    return pick;
}

static void rackemu_host_set_irq(void *opaque, unsigned line, int level)
{
    RackemuHost *h = opaque;
    CPUState *cpu;

    if (line >= h->nirqs) {
        return;
    }
    trace_rackemu_irq(h->name, h->host.node_id, line, !!level);
    qatomic_set(&h->pending[line], !!level);
    if (qemu_mutex_iothread_locked()) {
        qatomic_inc(&h->irq_direct);
        qemu_set_irq(h->lines[line], !!level);
        return;
    }
    cpu = rackemu_host_vcpu(h);
    if (cpu) {
        /*
         * the vCPU sets the line itself, under the big lock it takes anyway to run;
         * queueing the work kicks it (a halted vCPU wakes at once, a running one leaves its
         * translation block). The bottom half cost a wake-up of the main loop, which then
         * kicked the vCPU, which then waited for the big lock the main loop held.
         */
        qatomic_inc(&h->irq_vcpu);
        if (!qatomic_xchg(&h->work_queued, true)) {
            async_run_on_cpu(cpu, rackemu_host_vcpu_work, RUN_ON_CPU_HOST_PTR(h));
        }
    } else {
        qatomic_inc(&h->irq_bh);
        qemu_bh_schedule(h->bh);
    }
}

static void rackemu_host_guest_error(void *opaque, const char *msg)
{
    RackemuHost *h = opaque;

    qemu_log_mask(LOG_GUEST_ERROR, "%s: node %u: %s\n", h->name, h->host.node_id, msg);
}

rk_status rackemu_status_from_memtx(MemTxResult r)
{
    return r == MEMTX_OK ? RK_OK : r == MEMTX_DECODE_ERROR ? RK_DECODE_ERROR : RK_SLAVE_ERROR;
}

MemTxResult rackemu_status_to_memtx(rk_status s)
{
    return s == RK_OK ? MEMTX_OK : s == RK_DECODE_ERROR ? MEMTX_DECODE_ERROR : MEMTX_ERROR;
}

/*
 * Every byte of [addr, addr + len) must decode to RAM (for a read also to ROM or flash in its
 * read-array mode, which QEMU reads directly). Anything else is refused before a byte moves: an
 * address nothing decodes gives DECODE_ERROR, device registers (MMIO, flash in command mode) and
 * writes to ROM give SLAVE_ERROR. Caveat: a real AXI master can target device registers; here
 * each such access would run a device callback under the big lock, a few bytes at a time (16 MiB
 * to the flash at 0x0 starved the guest for 23 s), so the model refuses it and logs it.
 */
rk_status rackemu_check_ram(AddressSpace *as, const char *name, unsigned node_id, uint64_t addr, uint64_t len,
                            bool write)
{
    RCU_READ_LOCK_GUARD();

    while (len) {
        hwaddr xlat, l = len;
        MemoryRegion *mr = address_space_translate(as, addr, &xlat, &l, write, MEMTXATTRS_UNSPECIFIED);
        bool direct = write ? memory_region_is_ram(mr) && !mr->readonly && !memory_region_is_ram_device(mr)
                            : (memory_region_is_ram(mr) && !memory_region_is_ram_device(mr)) ||
                                  memory_region_is_romd(mr);

        if (!direct) {
            /* QEMU's hole filler (io_mem_unassigned) is the only region without a name */
            bool unmapped = !mr->name;

            qemu_log_mask(LOG_GUEST_ERROR,
                          "%s: node %u: DMA %s 0x%" PRIx64 " hits %s \"%s\": only RAM is reachable (%s)\n",
                          name, node_id, write ? "write to" : "read from", addr,
                          unmapped ? "no device" : "device memory", unmapped ? "-" : mr->name,
                          unmapped ? "decode error" : "slave error");
            return unmapped ? RK_DECODE_ERROR : RK_SLAVE_ERROR;
        }
        if (l == 0) {
            return RK_DECODE_ERROR;
        }
        addr += l;
        len -= MIN(l, len);
    }
    return RK_OK;
}

static rk_status rackemu_host_check_ram(RackemuHost *h, uint64_t addr, uint64_t len, bool write)
{
    return rackemu_check_ram(&address_space_memory, h->name, h->host.node_id, addr, len, write);
}

/* A range of the global address space window: one owner per piece, big lock dropped. */
static rk_status rackemu_host_remote(RackemuHost *h, uint64_t g, uint8_t *p, uint64_t len, int write)
{
    uint64_t wsize = (uint64_t)h->host.node_count * GAS_WINDOW_NODE_SIZE;
    bool locked = qemu_mutex_iothread_locked();
    rk_status st = RK_OK;

    if (len > wsize - g) {
        return RK_DECODE_ERROR; /* runs off the end of the rack */
    }
    if (!h->host.rmem) {
        return RK_UNREACHABLE;
    }
    /* Remote memory is thread-safe and may wait for a peer: never hold the big lock there. */
    if (locked) {
        qemu_mutex_unlock_iothread();
    }
    while (len && st == RK_OK) {
        uint64_t n = MIN(len, GAS_WINDOW_NODE_SIZE - UNIMEM_GADDR_LOCAL(g));
        int rc = write ? rk_rmem_write(h->host.rmem, UNIMEM_GADDR_NODE(g), UNIMEM_GADDR_LOCAL(g), p, n)
                       : rk_rmem_read(h->host.rmem, UNIMEM_GADDR_NODE(g), UNIMEM_GADDR_LOCAL(g), p, n);

        st = rc == RK_RMEM_OK ? RK_OK : rc == RK_RMEM_DECODE_ERR ? RK_DECODE_ERROR : RK_UNREACHABLE;
        g += n;
        p += n;
        len -= n;
    }
    if (locked) {
        qemu_mutex_lock_iothread();
    }
    return st;
}

static rk_status rackemu_host_dma_rw(void *opaque, uint64_t addr, void *buf, uint64_t len, int write)
{
    RackemuHost *h = opaque;
    uint64_t wsize = (uint64_t)h->host.node_count * GAS_WINDOW_NODE_SIZE;
    rk_status st;

    if (len == 0) {
        st = RK_OK;
    } else if (addr >= GAS_WINDOW_BASE && addr - GAS_WINDOW_BASE < wsize) {
        st = rackemu_host_remote(h, addr - GAS_WINDOW_BASE, buf, len, write);
    } else if (addr + len < addr) {
        st = RK_DECODE_ERROR;
    } else {
        st = rackemu_host_check_ram(h, addr, len, write);
        if (st == RK_OK) {
            st = rackemu_status_from_memtx(
                address_space_rw(&address_space_memory, addr, MEMTXATTRS_UNSPECIFIED, buf, len, write));
        }
    }
    trace_rackemu_dma(h->name, h->host.node_id, write ? "write" : "read", addr, len, rk_status_name(st));
    return st;
}

static void *rackemu_host_dma_map(void *opaque, uint64_t addr, uint64_t *len, int write)
{
    RackemuHost *h = opaque;
    hwaddr plen = *len;
    void *p;

    if (*len == 0 || addr + *len < addr) {
        return NULL;
    }
    /*
     * RAM only (a device region would be served through QEMU's single bounce buffer), and
     * never the global address space window (remote: dma_rw only)
     */
    if (addr >= GAS_WINDOW_BASE || rackemu_host_check_ram(h, addr, *len, write) != RK_OK) {
        return NULL;
    }
    p = address_space_map(&address_space_memory, addr, &plen, write, MEMTXATTRS_UNSPECIFIED);
    if (p) {
        *len = plen;
    }
    trace_rackemu_dma_map(h->name, h->host.node_id, addr, plen, write, p != NULL);
    return p;
}

static void rackemu_host_dma_unmap(void *opaque, void *ptr, uint64_t len, int write, uint64_t access_len)
{
    address_space_unmap(&address_space_memory, ptr, len, write, access_len);
}

static uint64_t rackemu_host_now_ns(void *opaque)
{
    return qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
}

static const RkHostOps rackemu_host_ops = {
    .set_irq = rackemu_host_set_irq,
    .guest_error = rackemu_host_guest_error,
    .dma_rw = rackemu_host_dma_rw,
    .dma_map = rackemu_host_dma_map,
    .dma_unmap = rackemu_host_dma_unmap,
    .now_ns = rackemu_host_now_ns,
};

void rackemu_host_init(RackemuHost *h, SysBusDevice *sbd, const char *name, unsigned nirqs,
                       RackemuFabric *f, unsigned node_id, unsigned node_count)
{
    assert(nirqs <= RACKEMU_HOST_MAX_IRQS);
    h->name = name;
    h->nirqs = nirqs;
    for (unsigned i = 0; i < nirqs; i++) {
        sysbus_init_irq(sbd, &h->lines[i]);
        h->pending[i] = 0;
    }
    h->bh = qemu_bh_new(rackemu_host_bh, h);
    h->irq_on_vcpu = !g_strcmp0(g_getenv("RACKEMU_IRQ_VCPU"), "0") ? false : true;
    h->work_queued = false;
    h->irq_direct = h->irq_vcpu = h->irq_bh = 0;
    /* how the device's interrupt levels were set (docs/machine.md); read with QMP qom-get */
    object_property_add_uint64_ptr(OBJECT(sbd), "irq-direct", &h->irq_direct, OBJ_PROP_FLAG_READ);
    object_property_add_uint64_ptr(OBJECT(sbd), "irq-vcpu", &h->irq_vcpu, OBJ_PROP_FLAG_READ);
    object_property_add_uint64_ptr(OBJECT(sbd), "irq-bh", &h->irq_bh, OBJ_PROP_FLAG_READ);
    h->host.ops = &rackemu_host_ops;
    h->host.opaque = h;
    h->host.port = rackemu_fabric_port(f);
    h->host.rmem = rackemu_fabric_rmem(f);
    h->host.node_id = node_id;
    h->host.node_count = node_count;
}

void rackemu_host_irq_sync(RackemuHost *h, unsigned line, int level)
{
    if (line < h->nirqs) {
        qatomic_set(&h->pending[line], !!level);
        qemu_set_irq(h->lines[line], !!level);
    }
}
