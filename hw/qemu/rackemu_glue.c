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
#include "hw/pci/msix.h"
#include "sysemu/dma.h"
#include "rackemu/unimem_regs.h"
#include "rk_fabric_port.h"
#include "pmem_capi.h"

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

/*
 * Drive line `line` to `level` (big lock held). On a PCI function with MSI-X a rising line sends
 * its vector's message; without MSI-X the INTx pin is the OR of the lines.
 */
static void rackemu_host_drive(RackemuHost *h, unsigned line, int level, bool edge)
{
    h->applied[line] = level;
    if (!h->pci) {
        qemu_set_irq(h->lines[line], level);
    } else if (h->msix && msix_enabled(h->pci)) {
        pci_set_irq(h->pci, 0);
        if (level && edge) {
            trace_rackemu_msix(h->name, h->host.node_id, line);
            msix_notify(h->pci, line);
        }
    } else {
        int any = 0;

        for (unsigned i = 0; i < h->nirqs; i++) {
            any |= h->applied[i];
        }
        pci_set_irq(h->pci, any);
    }
}

/*
 * Every line to its latest level; a line that rose since the last apply gives its edge even if
 * it was high before (it fell and rose in between on another thread).
 */
static void rackemu_host_apply(RackemuHost *h, const char *via)
{
    uint32_t rose = qatomic_xchg(&h->rose, 0);

    trace_rackemu_irq_apply(h->name, h->host.node_id, via);
    for (unsigned i = 0; i < h->nirqs; i++) {
        int level = qatomic_read(&h->pending[i]);
        /*
         * An edge only where set_irq recorded a rise: it sets the level before the rise bit, so
         * an apply that runs between the two sees the level without the edge and the next
         * apply gives it, once (an MSI-X vector's message is never sent twice for one rise).
         */
        bool edge = level && (rose & (1u << i));

        if (edge && h->applied[i] && !h->pci) {
            qemu_set_irq(h->lines[i], 0); /* the fall that happened in between */
        }
        rackemu_host_drive(h, i, level, edge);
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
    if (level && !qatomic_xchg(&h->pending[line], 1)) {
        qatomic_or(&h->rose, 1u << line);
    } else if (!level) {
        qatomic_set(&h->pending[line], 0);
    }
    if (qemu_mutex_iothread_locked()) {
        qatomic_inc(&h->irq_direct);
        rackemu_host_apply(h, "direct");
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
    return rackemu_check_ram(h->as, h->name, h->host.node_id, addr, len, write);
}

static bool rackemu_host_in_window(RackemuHost *h, uint64_t addr)
{
    return h->gas_window && addr >= GAS_WINDOW_BASE &&
           addr - GAS_WINDOW_BASE < (uint64_t)h->host.node_count * GAS_WINDOW_NODE_SIZE;
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
    rk_status st;

    if (len == 0) {
        st = RK_OK;
    } else if (rackemu_host_in_window(h, addr)) {
        st = rackemu_host_remote(h, addr - GAS_WINDOW_BASE, buf, len, write);
    } else if (addr + len < addr) {
        st = RK_DECODE_ERROR;
    } else {
        st = rackemu_host_check_ram(h, addr, len, write);
        if (st == RK_OK) {
            st = rackemu_status_from_memtx(
                dma_memory_rw(h->as, addr, buf, len, write ? DMA_DIRECTION_FROM_DEVICE : DMA_DIRECTION_TO_DEVICE,
                              MEMTXATTRS_UNSPECIFIED));
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
    if ((h->gas_window && addr >= GAS_WINDOW_BASE) || rackemu_host_check_ram(h, addr, *len, write) != RK_OK) {
        return NULL;
    }
    p = address_space_map(h->as, addr, &plen, write, MEMTXATTRS_UNSPECIFIED);
    if (p) {
        *len = plen;
    }
    trace_rackemu_dma_map(h->name, h->host.node_id, addr, plen, write, p != NULL);
    return p;
}

static void rackemu_host_dma_unmap(void *opaque, void *ptr, uint64_t len, int write, uint64_t access_len)
{
    RackemuHost *h = opaque;

    address_space_unmap(h->as, ptr, len, write, access_len);
}

static uint64_t rackemu_host_now_ns(void *opaque)
{
    return qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
}

/*
 * Write [addr, addr + len) back to the RAM block's backing file with msync(MS_SYNC) (qemu_msync
 * rounds to host pages). RAM with no file behind it has no persistence domain: nothing is
 * counted as synced. A failed msync is RK_SLAVE_ERROR.
 */
static rk_status rackemu_host_persist(void *opaque, uint64_t addr, uint64_t len, uint64_t *synced)
{
    RackemuHost *h = opaque;
    uint64_t at = addr, left = len;
    rk_status st = RK_OK;

    if (len && addr + len < addr) {
        return RK_DECODE_ERROR;
    }
    RCU_READ_LOCK_GUARD();
    while (left && st == RK_OK) {
        hwaddr xlat, l = left;
        MemoryRegion *mr = address_space_translate(h->as, at, &xlat, &l, true, MEMTXATTRS_UNSPECIFIED);
        int fd = memory_region_is_ram(mr) ? memory_region_get_fd(mr) : -1;

        if (!memory_region_is_ram(mr) || l == 0) {
            st = RK_DECODE_ERROR;
        } else if (fd >= 0) {
            if (qemu_msync((uint8_t *)memory_region_get_ram_ptr(mr) + xlat, l, fd)) {
                st = RK_SLAVE_ERROR;
            } else {
                *synced += l;
            }
        }
        at += l;
        left -= l;
    }
    trace_rackemu_dma(h->name, h->host.node_id, "persist", addr, len, rk_status_name(st));
    return st;
}

static int rackemu_host_send_frame(void *opaque, const uint8_t *frame, size_t len)
{
    RackemuHost *h = opaque;
    int rc = h->host.port ? rk_fabric_port_eth_send(h->host.port, frame, len) : -ENOTCONN;

    trace_rackemu_frame(h->name, h->host.node_id, "out", (uint64_t)len, rc);
    return rc;
}

/* Called with the core's lock held when the port's ring pushed back. */
static void rackemu_host_tx_wait(void *opaque)
{
    RackemuHost *h = opaque;

    trace_rackemu_frame(h->name, h->host.node_id, "backpressure", 0, -EAGAIN);
    if (h->tx_started) {
        qemu_event_set(&h->tx_ev);
    }
}

/*
 * The transmit thread: sleeps until the core holds frames, then waits (futex, no big lock) for
 * room in the port's ring and lets the core continue; a vCPU never waits for the link.
 */
static void *rackemu_host_tx_thread(void *opaque)
{
    RackemuHost *h = opaque;

    for (;;) {
        qemu_event_reset(&h->tx_ev);
        if (qatomic_read(&h->tx_stop)) {
            break;
        }
        if (!h->tx_resume(h->core)) {
            qemu_event_wait(&h->tx_ev);
            continue;
        }
        /* -ENOTCONN: the link is down, the next resume drops what is held (counted) */
        rk_fabric_port_eth_wait_room(h->host.port, 1, 10 * SCALE_MS);
    }
    return NULL;
}

/* Any thread (the core's lock held): timer_mod and timer_del are thread-safe. */
static void rackemu_host_timer_arm(void *opaque, unsigned id, uint64_t deadline_ns)
{
    RackemuHost *h = opaque;

    if (id >= h->ntimers) {
        return;
    }
    if (deadline_ns == UINT64_MAX) {
        timer_del(h->timers[id]);
    } else {
        timer_mod(h->timers[id], (int64_t)MIN(deadline_ns, (uint64_t)INT64_MAX));
    }
}

/* A core's own thread reads guest memory through the memory API: it must be an RCU reader. */
static void rackemu_host_thread(void *opaque, int start)
{
    if (start) {
        rcu_register_thread();
    } else {
        rcu_unregister_thread();
    }
}

typedef struct RackemuHostTimer {
    RackemuHost *h;
    unsigned id;
} RackemuHostTimer;

static void rackemu_host_timer_fire(void *opaque)
{
    RackemuHostTimer *t = opaque;

    t->h->on_timer(t->h->core, t->id);
}

/*
 * The node's persistent memory: the core of the machine's rackemu-pmem device, registered at its
 * realize (one node per QEMU process, so one pointer; a sysbus device the machine creates, never
 * unplugged while the node runs).
 */
static void *rackemu_nvm_core;

void rackemu_host_nvm_register(void *pmem_core)
{
    qatomic_set(&rackemu_nvm_core, pmem_core);
}

static rk_status rackemu_host_nvm(void *opaque, unsigned op, uint64_t addr, const void *data, uint64_t len)
{
    void *core = qatomic_read(&rackemu_nvm_core);

    return core ? rk_pmem_nvm(core, op, addr, data, len) : RK_DECODE_ERROR;
}

static const RkHostOps rackemu_host_ops = {
    .set_irq = rackemu_host_set_irq,
    .guest_error = rackemu_host_guest_error,
    .dma_rw = rackemu_host_dma_rw,
    .dma_map = rackemu_host_dma_map,
    .dma_unmap = rackemu_host_dma_unmap,
    .now_ns = rackemu_host_now_ns,
    .persist = rackemu_host_persist,
    .send_frame = rackemu_host_send_frame,
    .tx_wait = rackemu_host_tx_wait,
    .timer_arm = rackemu_host_timer_arm,
    .thread = rackemu_host_thread,
    .nvm = rackemu_host_nvm,
};

void rackemu_host_init(RackemuHost *h, DeviceState *dev, const char *name, unsigned nirqs, bool msix,
                       RackemuFabric *f, unsigned node_id, unsigned node_count)
{
    Object *pci = object_dynamic_cast(OBJECT(dev), TYPE_PCI_DEVICE);

    assert(nirqs <= RACKEMU_HOST_MAX_IRQS);
    memset(h, 0, sizeof(*h));
    h->name = name;
    h->nirqs = nirqs;
    if (pci) {
        h->pci = PCI_DEVICE(pci);
        h->msix = msix;
        h->as = pci_get_address_space(h->pci);
    } else {
        h->as = &address_space_memory;
        h->gas_window = true;
        for (unsigned i = 0; i < nirqs; i++) {
            sysbus_init_irq(SYS_BUS_DEVICE(dev), &h->lines[i]);
        }
    }
    h->bh = qemu_bh_new(rackemu_host_bh, h);
    h->irq_on_vcpu = !g_strcmp0(g_getenv("RACKEMU_IRQ_VCPU"), "0") ? false : true;
    /* how the device's interrupt levels were set (docs/machine.md); read with QMP qom-get */
    object_property_add_uint64_ptr(OBJECT(dev), "irq-direct", &h->irq_direct, OBJ_PROP_FLAG_READ);
    object_property_add_uint64_ptr(OBJECT(dev), "irq-vcpu", &h->irq_vcpu, OBJ_PROP_FLAG_READ);
    object_property_add_uint64_ptr(OBJECT(dev), "irq-bh", &h->irq_bh, OBJ_PROP_FLAG_READ);
    h->host.ops = &rackemu_host_ops;
    h->host.opaque = h;
    h->host.port = rackemu_fabric_port(f);
    h->host.rmem = rackemu_fabric_rmem(f);
    h->host.node_id = node_id;
    h->host.node_count = node_count;
}

void rackemu_host_start(RackemuHost *h, unsigned ntimers)
{
    assert(ntimers <= RACKEMU_HOST_MAX_TIMERS);
    for (unsigned i = 0; i < ntimers && h->on_timer; i++) {
        RackemuHostTimer *t = g_new(RackemuHostTimer, 1);

        t->h = h;
        t->id = i;
        h->timers[i] = timer_new_ns(QEMU_CLOCK_VIRTUAL, rackemu_host_timer_fire, t);
        h->ntimers = i + 1;
    }
    if (h->tx_resume && h->host.port) {
        qemu_event_init(&h->tx_ev, false);
        h->tx_stop = false;
        qemu_thread_create(&h->tx_thread, "rackemu-tx", rackemu_host_tx_thread, h, QEMU_THREAD_JOINABLE);
        h->tx_started = true;
    }
}

void rackemu_host_fini(RackemuHost *h)
{
    if (h->tx_started) {
        qatomic_set(&h->tx_stop, true);
        qemu_event_set(&h->tx_ev);
        qemu_thread_join(&h->tx_thread);
        qemu_event_destroy(&h->tx_ev);
        h->tx_started = false;
    }
    for (unsigned i = 0; i < h->ntimers; i++) {
        g_free(h->timers[i]->opaque);
        timer_free(h->timers[i]);
        h->timers[i] = NULL;
    }
    h->ntimers = 0;
    if (h->bh) {
        qemu_bh_delete(h->bh);
        h->bh = NULL;
    }
}

void rackemu_host_irq_sync(RackemuHost *h, unsigned line, int level)
{
    if (line < h->nirqs) {
        qatomic_set(&h->pending[line], !!level);
        qatomic_and(&h->rose, ~(1u << line));
        rackemu_host_drive(h, line, !!level, false);
    }
}
