/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of the rackemu RNIC, a PCIe RDMA NIC speaking RoCEv2 (docs/rnic.md). The device logic
 * is the C++ core (hw/rnic/rnic.{h,cc}); this file gives it a PCI function (1af4:10f5, class
 * 0x0207: BAR0 registers, BAR2 doorbell pages, BAR4 MSI-X), the host interface over the
 * function's bus-master address space (pci_dma_*, RAM only), interrupts (MSI-X vector per line,
 * INTx as their OR without MSI-X), a timer for the transport's retransmissions, and the link:
 * the node's fabric port's RoCEv2 receiver (rk_fabric_port_eth_*).
 *
 * A node gets one with `-device rackemu-rnic` on the rackemu-node machine: the device finds the
 * node's fabric and node id itself (or takes the "fabric" link and node-id); the timing model
 * is set with its properties, e.g. -global rackemu-rnic.link-mbps=25000.
 *
 * Threading: BAR accesses on a vCPU (big lock held); frames arrive on the port's thread without
 * the big lock; the core's interrupts from there are applied by a bottom half. When the port's
 * ring is full the core holds frames and pauses (backpressure); the device's transmit thread
 * waits for room on the ring's futex and resumes it (docs/rnic.md "Backpressure").
 *
 * Migration (docs/rnic.md "Migration"): the core is paused while the VM is stopped (frames from
 * the link are held, timers wait); a versioned VMState carries the core's architectural state
 * (hw/rnic/rnic_state.h: pre_save takes it, post_load hands it to the core, which validates all
 * of it), beside the standard PCI config space and MSI-X state.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/log.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/timer.h"
#include "qemu/thread.h"
#include "qapi/error.h"
#include "hw/qdev-properties.h"
#include "hw/pci/pci.h"
#include "hw/pci/pcie.h"
#include "hw/pci/msix.h"
#include "hw/core/cpu.h"
#include "exec/exec-all.h" /* CF_PARALLEL */
#include "sysemu/tcg.h"
#include "migration/vmstate.h"
#include "sysemu/runstate.h"
#include "sysemu/dma.h"

#include "rackemu/rnic_regs.h"
#include "rnic_capi.h"
#include "rk_fabric_port.h"
#include "rackemu_glue.h"
#include "trace.h"

#define TYPE_RACKEMU_RNIC RACKEMU_RNIC_TYPE
OBJECT_DECLARE_SIMPLE_TYPE(RackemuRnicState, RACKEMU_RNIC)

typedef struct RackemuRnicBar {
    MemoryRegion mr;
    struct RackemuRnicState *s;
    const char *name; /* trace name */
    uint64_t (*read)(RkRnic *r, uint64_t offset, unsigned size);
    void (*write)(RkRnic *r, uint64_t offset, uint64_t value, unsigned size);
} RackemuRnicBar;

struct RackemuRnicState {
    PCIDevice parent_obj;
    RackemuRnicBar ctrl; /* BAR0: registers */
    RackemuRnicBar db;   /* BAR2: doorbell pages */
    RkHost host;
    RkRnic *core;
    RackemuFabric *fabric; /* link "fabric"; unset: the machine's */
    RkFabricPort *port;    /* NULL: no link (frames to other nodes are dropped) */
    uint32_t node_id;      /* UINT32_MAX: the machine's node-id */
    uint32_t node_count;
    RkRnicTiming timing;
    bool direct;           /* READs to live peers copy from their RAM files (docs/rnic.md "Direct path") */
    RkRnicAmu amu;         /* the atomic unit's properties (amu-*) */
    char *amu_rate_limit;  /* amu-rate-limit, amu-raw: strings (NULL: the default) */
    char *amu_raw;
    bool cpu_parallel; /* x-cpu-parallel: TCG's parallel mode on every vCPU (global atomicity) */
    QEMUTimer *timer;
    RkFabricEndpoint *link_ep; /* the port's link changes (rackemu_rnic_on_link) */
    QEMUBH *bh;
    int level[RNIC_MSIX_VECTORS]; /* latest level per vector, from any thread */
    uint32_t rising;              /* vectors that rose since the bottom half last ran */
    bool msix;                    /* MSI-X table present */
    VMChangeStateEntry *vmse;
    /* migration: the core's state, filled in pre_save / read by post_load (counts streamed apart) */
    RkRnicSaved mig;
    int32_t mig_n_mr, mig_n_cq, mig_n_qp, mig_n_wr, mig_n_sqe, mig_n_res;
    uint32_t mig_n_pages;
    /*
     * Backpressure: the core asks (tx_ev) when the port's ring pushed back; tx_thread waits for
     * room on the ring's futex (no big lock) and calls rk_rnic_tx_resume().
     */
    QemuThread tx_thread;
    QemuEvent tx_ev;
    bool tx_stop;
    bool tx_started;
};

/* ---- the host interface over the function's bus-master address space ---- */

/* Apply the recorded levels (big lock held): MSI-X message per rising vector, else INTx. */
static void rackemu_rnic_irq_apply(RackemuRnicState *s)
{
    PCIDevice *pdev = PCI_DEVICE(s);
    uint32_t rose = qatomic_xchg(&s->rising, 0);
    int any = 0;

    for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++) {
        any |= qatomic_read(&s->level[v]);
    }
    if (s->msix && msix_enabled(pdev)) {
        pci_set_irq(pdev, 0);
        for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++) {
            if ((rose & (1u << v)) && qatomic_read(&s->level[v])) {
                trace_rackemu_rnic_msix(s->host.node_id, v);
                msix_notify(pdev, v);
            }
        }
    } else {
        pci_set_irq(pdev, any);
    }
}

static void rackemu_rnic_bh(void *opaque)
{
    rackemu_rnic_irq_apply(opaque);
}

static void rackemu_rnic_set_irq(void *opaque, unsigned line, int level)
{
    RackemuRnicState *s = opaque;

    if (line >= RNIC_MSIX_VECTORS) {
        return;
    }
    trace_rackemu_irq("rackemu-rnic", s->host.node_id, line, !!level);
    if (level && !qatomic_xchg(&s->level[line], 1)) {
        qatomic_or(&s->rising, 1u << line);
    } else if (!level) {
        qatomic_set(&s->level[line], 0);
    }
    if (qemu_mutex_iothread_locked()) {
        rackemu_rnic_irq_apply(s);
    } else {
        qemu_bh_schedule(s->bh);
    }
}

static void rackemu_rnic_guest_error(void *opaque, const char *msg)
{
    RackemuRnicState *s = opaque;

    qemu_log_mask(LOG_GUEST_ERROR, "rackemu-rnic: node %u: %s\n", s->host.node_id, msg);
}

static rk_status rackemu_rnic_dma_rw(void *opaque, uint64_t addr, void *buf, uint64_t len, int write)
{
    RackemuRnicState *s = opaque;
    PCIDevice *pdev = PCI_DEVICE(s);
    rk_status st = RK_OK;

    if (len && addr + len < addr) {
        st = RK_DECODE_ERROR;
    } else if (len) {
        st = rackemu_check_ram(pci_get_address_space(pdev), "rackemu-rnic", s->host.node_id, addr, len, write);
        if (st == RK_OK) {
            st = rackemu_status_from_memtx(pci_dma_rw(pdev, addr, buf, len,
                                                      write ? DMA_DIRECTION_FROM_DEVICE : DMA_DIRECTION_TO_DEVICE,
                                                      MEMTXATTRS_UNSPECIFIED));
        }
    }
    trace_rackemu_dma("rackemu-rnic", s->host.node_id, write ? "write" : "read", addr, len, rk_status_name(st));
    return st;
}

static void *rackemu_rnic_dma_map(void *opaque, uint64_t addr, uint64_t *len, int write)
{
    RackemuRnicState *s = opaque;
    PCIDevice *pdev = PCI_DEVICE(s);
    dma_addr_t plen = *len;
    void *p;

    if (*len == 0 || addr + *len < addr ||
        rackemu_check_ram(pci_get_address_space(pdev), "rackemu-rnic", s->host.node_id, addr, *len, write) != RK_OK) {
        return NULL;
    }
    p = pci_dma_map(pdev, addr, &plen, write ? DMA_DIRECTION_FROM_DEVICE : DMA_DIRECTION_TO_DEVICE);
    if (p) {
        *len = plen;
    }
    trace_rackemu_dma_map("rackemu-rnic", s->host.node_id, addr, plen, write, p != NULL);
    return p;
}

static void rackemu_rnic_dma_unmap(void *opaque, void *ptr, uint64_t len, int write, uint64_t access_len)
{
    pci_dma_unmap(PCI_DEVICE(opaque), ptr, len, write ? DMA_DIRECTION_FROM_DEVICE : DMA_DIRECTION_TO_DEVICE,
                  access_len);
}

static uint64_t rackemu_rnic_now_ns(void *opaque)
{
    return qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
}

/*
 * FLUSH with persistence (docs/rnic.md "FLUSH"): write the range back to the RAM block's backing
 * file with msync(MS_SYNC) (qemu_msync rounds to host pages). RAM with no file behind it has no
 * persistence domain: nothing is counted as synced. A failed msync is RK_SLAVE_ERROR (the
 * responder NAKs the FLUSH with a remote operational error).
 */
static rk_status rackemu_rnic_persist(void *opaque, uint64_t addr, uint64_t len, uint64_t *synced)
{
    RackemuRnicState *s = opaque;
    AddressSpace *as = pci_get_address_space(PCI_DEVICE(s));
    uint64_t at = addr, left = len;
    rk_status st = RK_OK;

    if (len && addr + len < addr) {
        return RK_DECODE_ERROR;
    }
    RCU_READ_LOCK_GUARD();
    while (left && st == RK_OK) {
        hwaddr xlat, l = left;
        MemoryRegion *mr = address_space_translate(as, at, &xlat, &l, true, MEMTXATTRS_UNSPECIFIED);
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
    trace_rackemu_dma("rackemu-rnic", s->host.node_id, "persist", addr, len, rk_status_name(st));
    return st;
}

static const RkHostOps rackemu_rnic_host_ops = {
    .set_irq = rackemu_rnic_set_irq,
    .guest_error = rackemu_rnic_guest_error,
    .dma_rw = rackemu_rnic_dma_rw,
    .dma_map = rackemu_rnic_dma_map,
    .dma_unmap = rackemu_rnic_dma_unmap,
    .now_ns = rackemu_rnic_now_ns,
    .persist = rackemu_rnic_persist,
};

/* ---- the link and the timer ---- */

static int rackemu_rnic_send(void *opaque, const uint8_t *frame, size_t len)
{
    RackemuRnicState *s = opaque;
    int rc = s->port ? rk_fabric_port_eth_send(s->port, frame, len) : -ENOTCONN;

    trace_rackemu_rnic_frame(s->host.node_id, "out", (uint64_t)len, rc);
    return rc;
}

static void rackemu_rnic_rx(void *opaque, const uint8_t *frame, size_t len, unsigned src_node)
{
    RackemuRnicState *s = opaque;

    trace_rackemu_rnic_frame(s->host.node_id, "in", (uint64_t)len, (int)src_node);
    rk_rnic_on_frame(s->core, frame, len);
}

/* Called with the core's lock held, from any thread: timer_mod/timer_del are thread-safe. */
static void rackemu_rnic_arm(void *opaque, uint64_t deadline_ns)
{
    RackemuRnicState *s = opaque;

    if (deadline_ns == UINT64_MAX) {
        timer_del(s->timer);
    } else {
        timer_mod(s->timer, (int64_t)MIN(deadline_ns, (uint64_t)INT64_MAX));
    }
}

static void rackemu_rnic_timer(void *opaque)
{
    RackemuRnicState *s = opaque;

    rk_rnic_poll(s->core);
}

/*
 * The port's link state, for STATUS.LINK_UP and the PORT_ACTIVE / PORT_ERR async events: the
 * port reports every change to the services bound to it (rk_fabric_endpoint.h), on its thread.
 * The RNIC's frames take the port's Ethernet receiver (rk_fabric_port_eth_attach), never the
 * service table's RKF_SVC_ETH entry, so that entry carries only this callback. While the VM is
 * stopped the core keeps the change and applies it when the VM runs (rk_rnic_set_link).
 */
static void rackemu_rnic_on_link(void *opaque, int up)
{
    RackemuRnicState *s = opaque;

    rk_rnic_set_link(s->core, up);
}

/* Called with the core's lock held when the port's ring pushed back. */
static void rackemu_rnic_tx_wait(void *opaque)
{
    RackemuRnicState *s = opaque;

    trace_rackemu_rnic_frame(s->host.node_id, "backpressure", 0, -EAGAIN);
    qemu_event_set(&s->tx_ev);
}

/*
 * The transmit thread: sleeps until the core holds frames, then waits (futex, no big lock) for
 * room in the port's ring and lets the core continue; a vCPU's doorbell never waits for the link.
 */
static void *rackemu_rnic_tx_thread(void *opaque)
{
    RackemuRnicState *s = opaque;

    for (;;) {
        qemu_event_reset(&s->tx_ev);
        if (qatomic_read(&s->tx_stop)) {
            break;
        }
        if (!rk_rnic_tx_resume(s->core)) {
            qemu_event_wait(&s->tx_ev);
            continue;
        }
        /* -ENOTCONN: the link is down, the next resume drops what is held (counted) */
        rk_fabric_port_eth_wait_room(s->port, 1, 10 * SCALE_MS);
    }
    return NULL;
}

/* ---- BARs ---- */

/*
 * BAR0 (registers) and BAR2 (doorbell pages) differ only in the core's entry points and the
 * trace name: one pair of MemoryRegionOps serves both, with a RackemuRnicBar as the opaque.
 */
static uint64_t rackemu_rnic_bar_read(void *opaque, hwaddr addr, unsigned size)
{
    RackemuRnicBar *b = opaque;
    uint64_t val = b->read(b->s->core, addr, size);

    trace_rackemu_mmio_read(b->name, b->s->host.node_id, addr, size, val);
    return val;
}

static void rackemu_rnic_bar_write(void *opaque, hwaddr addr, uint64_t data, unsigned size)
{
    RackemuRnicBar *b = opaque;

    trace_rackemu_mmio_write(b->name, b->s->host.node_id, addr, size, data);
    b->write(b->s->core, addr, data, size);
}

/* Every size reaches the core, which refuses what it does not take with a guest error. */
static const MemoryRegionOps rackemu_rnic_bar_ops = {
    .read = rackemu_rnic_bar_read,
    .write = rackemu_rnic_bar_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

static void rackemu_rnic_bar_init(RackemuRnicState *s, RackemuRnicBar *b, int index, const char *name,
                                  uint64_t size, uint64_t (*read)(RkRnic *, uint64_t, unsigned),
                                  void (*write)(RkRnic *, uint64_t, uint64_t, unsigned))
{
    *b = (RackemuRnicBar){ .s = s, .name = name, .read = read, .write = write };
    memory_region_init_io(&b->mr, OBJECT(s), &rackemu_rnic_bar_ops, b, name, size);
    pci_register_bar(PCI_DEVICE(s), index, PCI_BASE_ADDRESS_SPACE_MEMORY, &b->mr);
}

/* ---- life cycle ---- */

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

/*
 * While the VM is stopped (savevm, migration, gdb, stop) the core changes nothing: frames from the
 * link are held in order until the VM runs again, timers and paused senders wait.
 */
static void rackemu_rnic_vm_state(void *opaque, bool running, RunState state)
{
    RackemuRnicState *s = opaque;

    if (s->core) {
        trace_rackemu_rnic_pause(s->node_id, !running);
        rk_rnic_pause(s->core, !running);
        if (running && s->port) {
            /* a loaded state carries the saving node's link: this port's is the truth */
            rk_rnic_set_link(s->core, rk_fabric_port_is_up(s->port));
        }
    }
}

static void rackemu_rnic_realize(PCIDevice *pdev, Error **errp)
{
    static const struct rk_fabric_service link_ops = { NULL, NULL, rackemu_rnic_on_link };
    RackemuRnicState *s = RACKEMU_RNIC(pdev);
    uint32_t mtu = s->timing.max_mtu;

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
    if (!s->timing.link_mbps || !s->timing.nic_mhz || !s->timing.pcie_mbps) {
        error_setg(errp, "rackemu-rnic: link-mbps, nic-mhz and pcie-mbps must be at least 1");
        return;
    }
    s->amu.rate_limit = s->amu_rate_limit;
    s->amu.raw = s->amu_raw;
    {
        char msg[200];

        if (rk_rnic_amu_check(&s->amu, s->timing.nic_mhz, msg, sizeof(msg)) < 0) {
            error_setg(errp, "rackemu-rnic: atomic unit: %s", msg);
            return;
        }
    }
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
    rackemu_rnic_bar_init(s, &s->ctrl, RNIC_BAR_CTRL, "rackemu-rnic", RNIC_BAR_CTRL_SIZE, rk_rnic_ctrl_read,
                          rk_rnic_ctrl_write);
    rackemu_rnic_bar_init(s, &s->db, RNIC_BAR_DB, "rackemu-rnic-db", RNIC_BAR_DB_SIZE, rk_rnic_db_read,
                          rk_rnic_db_write);
    /* No MSI on the machine (e.g. no ITS/v2m): INTx only, which the driver falls back to. */
    s->msix = msix_init_exclusive_bar(pdev, RNIC_MSIX_VECTORS, RNIC_BAR_MSIX, NULL) == 0;
    for (unsigned v = 0; s->msix && v < RNIC_MSIX_VECTORS; v++) {
        msix_vector_use(pdev, v);
    }
    s->bh = qemu_bh_new(rackemu_rnic_bh, s);
    s->timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, rackemu_rnic_timer, s);
    s->port = rackemu_fabric_port(s->fabric);
    s->host.ops = &rackemu_rnic_host_ops;
    s->host.opaque = s;
    s->host.port = s->port;
    /* the direct path (docs/rnic.md "Direct path"): the node's remote memory, when it has one */
    s->host.rmem = s->direct && s->fabric ? rackemu_fabric_rmem(s->fabric) : NULL;
    s->host.node_id = s->node_id;
    s->host.node_count = s->node_count;
    s->core = rk_rnic_new(&s->host, &s->timing, &s->amu, s->port != NULL, rackemu_rnic_send, rackemu_rnic_arm,
                          rackemu_rnic_tx_wait, s);
    if (s->port) {
        qemu_event_init(&s->tx_ev, false);
        s->tx_stop = false;
        qemu_thread_create(&s->tx_thread, "rackemu-rnic-tx", rackemu_rnic_tx_thread, s, QEMU_THREAD_JOINABLE);
        s->tx_started = true;
        rk_fabric_port_eth_attach(s->port, RK_FABRIC_ETH_ROCE, rackemu_rnic_rx, s);
        s->link_ep = rackemu_fabric_bind(s->fabric, RKF_SVC_ETH, &link_ops, s);
        rk_rnic_set_link(s->core, rk_fabric_port_is_up(s->port)); /* a change before the bind */
    }
    s->vmse = qemu_add_vm_change_state_handler(rackemu_rnic_vm_state, s);
    trace_rackemu_rnic_realize(s->node_id, s->port != NULL, s->msix);
}

static void rackemu_rnic_exit(PCIDevice *pdev)
{
    RackemuRnicState *s = RACKEMU_RNIC(pdev);

    if (s->port) {
        rk_fabric_port_eth_attach(s->port, RK_FABRIC_ETH_ROCE, NULL, NULL);
    }
    rk_fabric_unbind(s->link_ep); /* waits for a link callback that is running */
    s->link_ep = NULL;
    if (s->tx_started) {
        qatomic_set(&s->tx_stop, true);
        qemu_event_set(&s->tx_ev);
        qemu_thread_join(&s->tx_thread);
        qemu_event_destroy(&s->tx_ev);
        s->tx_started = false;
    }
    timer_free(s->timer);
    qemu_bh_delete(s->bh);
    rk_rnic_free(s->core);
    s->core = NULL;
    if (s->msix) {
        msix_uninit_exclusive_bar(pdev);
    }
    if (s->vmse) {
        qemu_del_vm_change_state_handler(s->vmse);
        s->vmse = NULL;
    }
}

static void rackemu_rnic_reset(DeviceState *dev)
{
    RackemuRnicState *s = RACKEMU_RNIC(dev);

    if (!s->core) {
        return;
    }
    rk_rnic_reset(s->core);
    for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++) {
        qatomic_set(&s->level[v], rk_rnic_irq_level(s->core, v));
    }
    qatomic_set(&s->rising, 0);
    pci_set_irq(PCI_DEVICE(s), 0);
}

/* ---- migration (docs/rnic.md "Migration") ---- */

static void rackemu_rnic_mig_free(RackemuRnicState *s)
{
    g_free(s->mig.mr);
    g_free(s->mig.pages);
    g_free(s->mig.cq);
    g_free(s->mig.qp);
    g_free(s->mig.wr);
    g_free(s->mig.sqe);
    g_free(s->mig.res);
    memset(&s->mig, 0, sizeof(s->mig));
    s->mig_n_mr = s->mig_n_cq = s->mig_n_qp = s->mig_n_wr = s->mig_n_sqe = s->mig_n_res = 0;
    s->mig_n_pages = 0;
}

static int rackemu_rnic_pre_save(void *opaque)
{
    RackemuRnicState *s = opaque;
    RkRnicSaved x;

    rackemu_rnic_mig_free(s);
    if (!s->core) {
        return -EINVAL;
    }
    /* the VM is stopped: the core is paused (rackemu_rnic_vm_state), its state is still */
    rk_rnic_save(s->core, &x);
    s->mig.st = x.st;
    s->mig.mr = g_memdup2(x.mr, (gsize)x.st.n_mr * sizeof(*x.mr));
    s->mig.pages = g_memdup2(x.pages, (gsize)x.st.n_pages * sizeof(*x.pages));
    s->mig.cq = g_memdup2(x.cq, (gsize)x.st.n_cq * sizeof(*x.cq));
    s->mig.qp = g_memdup2(x.qp, (gsize)x.st.n_qp * sizeof(*x.qp));
    s->mig.wr = g_memdup2(x.wr, (gsize)x.st.n_wr * sizeof(*x.wr));
    s->mig.sqe = g_memdup2(x.sqe, (gsize)x.st.n_sqe * sizeof(*x.sqe));
    s->mig.res = g_memdup2(x.res, (gsize)x.st.n_res * sizeof(*x.res));
    s->mig_n_mr = (int32_t)x.st.n_mr; /* each within the bounds of rackemu_rnic_counts_valid */
    s->mig_n_pages = x.st.n_pages;
    s->mig_n_cq = (int32_t)x.st.n_cq;
    s->mig_n_qp = (int32_t)x.st.n_qp;
    s->mig_n_wr = (int32_t)x.st.n_wr;
    s->mig_n_sqe = (int32_t)x.st.n_sqe;
    s->mig_n_res = (int32_t)x.st.n_res;
    rk_rnic_saved_free(&x);
    trace_rackemu_rnic_save(s->node_id, s->mig.st.n_qp, s->mig.st.n_sqe);
    return 0;
}

static int rackemu_rnic_post_save(void *opaque)
{
    rackemu_rnic_mig_free(opaque);
    return 0;
}

static int rackemu_rnic_pre_load(void *opaque)
{
    rackemu_rnic_mig_free(opaque);
    return 0;
}

/*
 * Before the records are allocated: a hostile count must not allocate gigabytes. Page-list
 * entries: at most what the device holds (RNIC_MR_TOTAL_PAGES, which REG_MR enforces too, so
 * every state that saves restores; docs/rnic.md "Migration").
 */
static bool rackemu_rnic_counts_valid(void *opaque, int version_id)
{
    RackemuRnicState *s = opaque;

    return s->mig_n_mr >= 0 && s->mig_n_mr <= (int32_t)RNIC_MAX_MR && s->mig_n_cq >= 0 &&
           s->mig_n_cq <= (int32_t)RNIC_MAX_CQ && s->mig_n_qp >= 0 && s->mig_n_qp <= (int32_t)RNIC_MAX_QP &&
           s->mig_n_wr >= 0 && s->mig_n_wr <= (int32_t)(RNIC_MAX_QP * ((1u << RNIC_DEPTH_LOG2_MAX) + 1)) &&
           s->mig_n_sqe >= 0 && s->mig_n_sqe <= s->mig_n_wr && s->mig_n_res >= 0 &&
           s->mig_n_res <= (int32_t)(RNIC_MAX_QP * 64) &&
           (uint64_t)s->mig_n_pages <= (uint64_t)s->mig_n_mr * RNIC_MR_MAX_PAGES &&
           s->mig_n_pages <= RNIC_MR_TOTAL_PAGES;
}

static int rackemu_rnic_post_load(void *opaque, int version_id)
{
    RackemuRnicState *s = opaque;
    char msg[300] = "";
    int rc;

    if (!s->core) {
        return -EINVAL;
    }
    s->mig.st.n_mr = (uint32_t)s->mig_n_mr;
    s->mig.st.n_pages = s->mig_n_pages;
    s->mig.st.n_cq = (uint32_t)s->mig_n_cq;
    s->mig.st.n_qp = (uint32_t)s->mig_n_qp;
    s->mig.st.n_wr = (uint32_t)s->mig_n_wr;
    s->mig.st.n_sqe = (uint32_t)s->mig_n_sqe;
    s->mig.st.n_res = (uint32_t)s->mig_n_res;
    rc = rk_rnic_load(s->core, &s->mig, msg, sizeof(msg));
    trace_rackemu_rnic_load(s->node_id, s->mig.st.n_qp, rc);
    rackemu_rnic_mig_free(s);
    if (rc) {
        error_report("rackemu-rnic node %u: migration state refused: %s", s->node_id, msg);
        return rc;
    }
    for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++) {
        qatomic_set(&s->level[v], rk_rnic_irq_level(s->core, v));
    }
    qatomic_set(&s->rising, 0); /* MSI-X pending bits migrate with the MSI-X state */
    rackemu_rnic_irq_apply(s);
    return 0;
}

static const VMStateDescription rackemu_rnic_mr_vmstate = {
    .name = "rackemu-rnic/mr",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(iova, struct rk_rnic_mr_state),
        VMSTATE_UINT64(length, struct rk_rnic_mr_state),
        VMSTATE_UINT32(index, struct rk_rnic_mr_state),
        VMSTATE_UINT32(pdn, struct rk_rnic_mr_state),
        VMSTATE_UINT32(access, struct rk_rnic_mr_state),
        VMSTATE_UINT32(npages, struct rk_rnic_mr_state),
        VMSTATE_UINT8(phys, struct rk_rnic_mr_state),
        VMSTATE_UINT8(page_shift, struct rk_rnic_mr_state),
        VMSTATE_UINT8_ARRAY(reserved, struct rk_rnic_mr_state, 6),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription rackemu_rnic_cq_vmstate = {
    .name = "rackemu-rnic/cq",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(ring, struct rk_rnic_cq_state),
        VMSTATE_UINT32(index, struct rk_rnic_cq_state),
        VMSTATE_UINT32(pi, struct rk_rnic_cq_state),
        VMSTATE_UINT32(ci, struct rk_rnic_cq_state),
        VMSTATE_UINT32(arm, struct rk_rnic_cq_state),
        VMSTATE_UINT8(depth_log2, struct rk_rnic_cq_state),
        VMSTATE_UINT8(vector, struct rk_rnic_cq_state),
        VMSTATE_UINT8(error, struct rk_rnic_cq_state),
        VMSTATE_UINT8_ARRAY(reserved, struct rk_rnic_cq_state, 5),
        VMSTATE_END_OF_LIST()
    },
};

#define RNIC_QP_U32(f) VMSTATE_UINT32(f, struct rk_rnic_qp_state)
#define RNIC_QP_U8(f) VMSTATE_UINT8(f, struct rk_rnic_qp_state)
static const VMStateDescription rackemu_rnic_qp_vmstate = {
    .name = "rackemu-rnic/qp",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        /* the device's half */
        VMSTATE_UINT64(sq_ring, struct rk_rnic_qp_state),
        VMSTATE_UINT64(rq_ring, struct rk_rnic_qp_state),
        RNIC_QP_U32(index), RNIC_QP_U32(pdn), RNIC_QP_U32(send_cqn), RNIC_QP_U32(recv_cqn),
        RNIC_QP_U32(sq_pi), RNIC_QP_U32(sq_ci), RNIC_QP_U32(rq_pi), RNIC_QP_U32(rq_ci),
        RNIC_QP_U32(dest_node), RNIC_QP_U32(bad_lerr), RNIC_QP_U32(rlerr), RNIC_QP_U32(reserved0),
        VMSTATE_UINT64(rlen, struct rk_rnic_qp_state),
        VMSTATE_UINT64(rfirst_ns, struct rk_rnic_qp_state),
        RNIC_QP_U8(sq_log2), RNIC_QP_U8(rq_log2), RNIC_QP_U8(dev_state), RNIC_QP_U8(bad_held),
        RNIC_QP_U8(rwqe_valid),
        VMSTATE_UINT8_ARRAY(reserved1, struct rk_rnic_qp_state, 3),
        VMSTATE_UINT8_ARRAY(rwqe, struct rk_rnic_qp_state, 64),
        /* the RC engine's: state and attributes */
        RNIC_QP_U8(state),
        VMSTATE_UINT8_ARRAY(dst_mac, struct rk_rnic_qp_state, 6),
        VMSTATE_UINT8_ARRAY(src_mac, struct rk_rnic_qp_state, 6),
        RNIC_QP_U8(tos), RNIC_QP_U8(ttl), RNIC_QP_U8(min_rnr_timer), RNIC_QP_U8(timeout),
        RNIC_QP_U8(retry_cnt), RNIC_QP_U8(rnr_retry),
        VMSTATE_UINT8_ARRAY(reserved2, struct rk_rnic_qp_state, 5),
        VMSTATE_UINT16(udp_sport, struct rk_rnic_qp_state),
        VMSTATE_UINT16(pkey, struct rk_rnic_qp_state),
        RNIC_QP_U32(src_ip), RNIC_QP_U32(dst_ip), RNIC_QP_U32(dest_qpn), RNIC_QP_U32(path_mtu),
        RNIC_QP_U32(rq_psn), RNIC_QP_U32(max_dest_rd_atomic), RNIC_QP_U32(sq_psn),
        RNIC_QP_U32(max_rd_atomic), RNIC_QP_U32(access),
        /* requester */
        VMSTATE_UINT16(ip_id, struct rk_rnic_qp_state),
        RNIC_QP_U8(retry_left), RNIC_QP_U8(rnr_left), RNIC_QP_U8(recovering),
        VMSTATE_UINT8_ARRAY(reserved3, struct rk_rnic_qp_state, 3),
        RNIC_QP_U32(cursor), RNIC_QP_U32(next_psn), RNIC_QP_U32(una), RNIC_QP_U32(rd_outstanding),
        RNIC_QP_U32(since_ackreq), RNIC_QP_U32(recover_end),
        /* responder */
        RNIC_QP_U32(epsn), RNIC_QP_U32(msn), RNIC_QP_U32(wr_rkey), RNIC_QP_U32(wr_len),
        RNIC_QP_U32(ack_psn), RNIC_QP_U32(ack_requests), RNIC_QP_U32(res_next), RNIC_QP_U32(n_res),
        VMSTATE_UINT64(msg_off, struct rk_rnic_qp_state),
        VMSTATE_UINT64(wr_va, struct rk_rnic_qp_state),
        RNIC_QP_U8(nak_sent), RNIC_QP_U8(in_msg), RNIC_QP_U8(wqe_held), RNIC_QP_U8(ack_owed),
        RNIC_QP_U8(comm_est),
        VMSTATE_UINT8_ARRAY(reserved4, struct rk_rnic_qp_state, 3),
        VMSTATE_END_OF_LIST()
    },
};
#undef RNIC_QP_U32
#undef RNIC_QP_U8

static const VMStateDescription rackemu_rnic_wr_vmstate = {
    .name = "rackemu-rnic/wr",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(seq, struct rk_rnic_wr_state),
        VMSTATE_UINT64(len, struct rk_rnic_wr_state),
        VMSTATE_UINT64(posted_ns, struct rk_rnic_wr_state),
        VMSTATE_UINT32(qp_index, struct rk_rnic_wr_state),
        VMSTATE_UINT32(lerr, struct rk_rnic_wr_state),
        VMSTATE_UINT8(bad, struct rk_rnic_wr_state),
        VMSTATE_UINT8_ARRAY(reserved, struct rk_rnic_wr_state, 7),
        VMSTATE_UINT8_ARRAY(wqe, struct rk_rnic_wr_state, 128),
        VMSTATE_END_OF_LIST()
    },
};

#define RNIC_SQE_U64(f) VMSTATE_UINT64(f, struct rk_rnic_sqe_state)
#define RNIC_SQE_U32(f) VMSTATE_UINT32(f, struct rk_rnic_sqe_state)
#define RNIC_SQE_U8(f) VMSTATE_UINT8(f, struct rk_rnic_sqe_state)
static const VMStateDescription rackemu_rnic_sqe_vmstate = {
    .name = "rackemu-rnic/sqe",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        RNIC_SQE_U64(wr_id), RNIC_SQE_U64(local), RNIC_SQE_U64(remote_va), RNIC_SQE_U64(swap_add),
        RNIC_SQE_U64(compare), RNIC_SQE_U64(mask),
        RNIC_SQE_U32(qp_index), RNIC_SQE_U32(length), RNIC_SQE_U32(rkey), RNIC_SQE_U32(imm),
        RNIC_SQE_U32(first), RNIC_SQE_U32(last), RNIC_SQE_U32(npkts), RNIC_SQE_U32(resume),
        RNIC_SQE_U32(read_next),
        RNIC_SQE_U8(op), RNIC_SQE_U8(xop), RNIC_SQE_U8(xsize), RNIC_SQE_U8(flush_placement),
        RNIC_SQE_U8(flush_selectivity), RNIC_SQE_U8(signaled), RNIC_SQE_U8(solicited), RNIC_SQE_U8(fence),
        RNIC_SQE_U8(assigned),
        VMSTATE_UINT8_ARRAY(reserved, struct rk_rnic_sqe_state, 3),
        VMSTATE_END_OF_LIST()
    },
};
#undef RNIC_SQE_U64
#undef RNIC_SQE_U32
#undef RNIC_SQE_U8

static const VMStateDescription rackemu_rnic_res_vmstate = {
    .name = "rackemu-rnic/res",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_UINT64(va, struct rk_rnic_res_state),
        VMSTATE_UINT64(orig, struct rk_rnic_res_state),
        VMSTATE_UINT32(qp_index, struct rk_rnic_res_state),
        VMSTATE_UINT32(slot, struct rk_rnic_res_state),
        VMSTATE_UINT32(first, struct rk_rnic_res_state),
        VMSTATE_UINT32(last, struct rk_rnic_res_state),
        VMSTATE_UINT32(rkey, struct rk_rnic_res_state),
        VMSTATE_UINT32(len, struct rk_rnic_res_state),
        VMSTATE_UINT8(opcode, struct rk_rnic_res_state),
        VMSTATE_UINT8_ARRAY(reserved, struct rk_rnic_res_state, 7),
        VMSTATE_END_OF_LIST()
    },
};

/*
 * Version 2 = RK_RNIC_STATE_VERSION 2 (version 1 had 82 counters: the direct path's 7 came
 * since; a version-1 stream is refused). Frames in flight are not state: RC retransmission
 * recovers them after the load. post_load refuses (-EINVAL) a state the core finds out of range.
 */
static const VMStateDescription rackemu_rnic_vmstate = {
    .name = "rackemu-rnic",
    .version_id = RK_RNIC_STATE_VERSION,
    .minimum_version_id = RK_RNIC_STATE_VERSION,
    .pre_save = rackemu_rnic_pre_save,
    .post_save = rackemu_rnic_post_save,
    .pre_load = rackemu_rnic_pre_load,
    .post_load = rackemu_rnic_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_PCI_DEVICE(parent_obj, RackemuRnicState),
        VMSTATE_MSIX(parent_obj, RackemuRnicState),
        VMSTATE_UINT32(mig.st.version, RackemuRnicState),
        VMSTATE_UINT32(mig.st.ctrl, RackemuRnicState),
        VMSTATE_UINT32(mig.st.cmd_addr_lo, RackemuRnicState),
        VMSTATE_UINT32(mig.st.cmd_addr_hi, RackemuRnicState),
        VMSTATE_UINT32(mig.st.cmd_status, RackemuRnicState),
        VMSTATE_UINT32(mig.st.cmd_count, RackemuRnicState),
        VMSTATE_UINT32(mig.st.int_status, RackemuRnicState),
        VMSTATE_UINT32(mig.st.int_enable, RackemuRnicState),
        VMSTATE_UINT32(mig.st.model_hi_latch, RackemuRnicState),
        VMSTATE_UINT32(mig.st.irq_lines, RackemuRnicState),
        VMSTATE_UINT64_ARRAY(mig.st.cq_events, RackemuRnicState, RNIC_BITMAP_WORDS(RNIC_MAX_CQ)),
        VMSTATE_UINT64_ARRAY(mig.st.qp_errors, RackemuRnicState, RNIC_BITMAP_WORDS(RNIC_MAX_QP)),
        VMSTATE_UINT64_ARRAY(mig.st.cq_errors, RackemuRnicState, RNIC_BITMAP_WORDS(RNIC_MAX_CQ)),
        VMSTATE_UINT64_ARRAY(mig.st.pd_valid, RackemuRnicState, RNIC_BITMAP_WORDS(RNIC_MAX_PD)),
        VMSTATE_UINT8_ARRAY(mig.st.mr_tag, RackemuRnicState, RNIC_MAX_MR),
        VMSTATE_UINT64_ARRAY(mig.st.counters, RackemuRnicState, RK_RNIC_STATE_COUNTERS),
        VMSTATE_UINT64_ARRAY(mig.st.cnt_base, RackemuRnicState, RK_RNIC_STATE_COUNTERS),
        VMSTATE_UINT64(mig.st.next_seq, RackemuRnicState),
        VMSTATE_UINT32(mig.st.reserved, RackemuRnicState),
        VMSTATE_UINT64(mig.st.eq_base, RackemuRnicState),
        VMSTATE_UINT32(mig.st.eq_ctrl, RackemuRnicState),
        VMSTATE_UINT32(mig.st.eq_pi, RackemuRnicState),
        VMSTATE_UINT32(mig.st.eq_ci, RackemuRnicState),
        VMSTATE_UINT32(mig.st.eq_seq, RackemuRnicState),
        VMSTATE_UINT32(mig.st.eq_status, RackemuRnicState),
        VMSTATE_UINT8(mig.st.eq_armed, RackemuRnicState),
        VMSTATE_UINT8(mig.st.link_up, RackemuRnicState),
        VMSTATE_UINT8_ARRAY(mig.st.reserved_eq, RackemuRnicState, 2),
        VMSTATE_INT32(mig_n_mr, RackemuRnicState),
        VMSTATE_UINT32(mig_n_pages, RackemuRnicState),
        VMSTATE_INT32(mig_n_cq, RackemuRnicState),
        VMSTATE_INT32(mig_n_qp, RackemuRnicState),
        VMSTATE_INT32(mig_n_wr, RackemuRnicState),
        VMSTATE_INT32(mig_n_sqe, RackemuRnicState),
        VMSTATE_INT32(mig_n_res, RackemuRnicState),
        VMSTATE_VALIDATE("rackemu-rnic record counts", rackemu_rnic_counts_valid),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig.mr, RackemuRnicState, mig_n_mr, 1, rackemu_rnic_mr_vmstate,
                                    struct rk_rnic_mr_state),
        VMSTATE_VARRAY_UINT32_ALLOC(mig.pages, RackemuRnicState, mig_n_pages, 1, vmstate_info_uint64, uint64_t),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig.cq, RackemuRnicState, mig_n_cq, 1, rackemu_rnic_cq_vmstate,
                                    struct rk_rnic_cq_state),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig.qp, RackemuRnicState, mig_n_qp, 1, rackemu_rnic_qp_vmstate,
                                    struct rk_rnic_qp_state),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig.wr, RackemuRnicState, mig_n_wr, 1, rackemu_rnic_wr_vmstate,
                                    struct rk_rnic_wr_state),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig.sqe, RackemuRnicState, mig_n_sqe, 1, rackemu_rnic_sqe_vmstate,
                                    struct rk_rnic_sqe_state),
        VMSTATE_STRUCT_VARRAY_ALLOC(mig.res, RackemuRnicState, mig_n_res, 1, rackemu_rnic_res_vmstate,
                                    struct rk_rnic_res_state),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_rnic_props[] = {
    DEFINE_PROP_UINT32("node-id", RackemuRnicState, node_id, UINT32_MAX),
    DEFINE_PROP_UINT32("node-count", RackemuRnicState, node_count, 0),
    DEFINE_PROP_LINK("fabric", RackemuRnicState, fabric, TYPE_RACKEMU_FABRIC, RackemuFabric *),
    DEFINE_PROP_UINT32("link-mbps", RackemuRnicState, timing.link_mbps, 100000),
    DEFINE_PROP_UINT32("hop-ns", RackemuRnicState, timing.hop_ns, 300),
    DEFINE_PROP_UINT32("nic-mhz", RackemuRnicState, timing.nic_mhz, 500),
    DEFINE_PROP_UINT32("pcie-ns", RackemuRnicState, timing.pcie_ns, 400),
    DEFINE_PROP_UINT32("pcie-mbps", RackemuRnicState, timing.pcie_mbps, 16000),
    DEFINE_PROP_UINT32("mtu", RackemuRnicState, timing.max_mtu, 4096),
    DEFINE_PROP_BOOL("direct", RackemuRnicState, direct, true),
    /* the atomic unit (docs/atomic-unit.md "Properties"; defaults: the paper's) */
    DEFINE_PROP_UINT32("amu-host-lat-ns", RackemuRnicState, amu.host_lat_ns, 250),
    DEFINE_PROP_UINT32("amu-host-mbps", RackemuRnicState, amu.host_mbps, 2300),
    DEFINE_PROP_UINT32("amu-mem-ns", RackemuRnicState, amu.mem_ns, 70),
    DEFINE_PROP_UINT32("amu-net-mbps", RackemuRnicState, amu.net_mbps, 4000),
    DEFINE_PROP_UINT32("amu-msg-bytes", RackemuRnicState, amu.msg_bytes, 48),
    DEFINE_PROP_UINT32("amu-rdreq-bytes", RackemuRnicState, amu.rdreq_bytes, 8),
    DEFINE_PROP_UINT32("amu-wrreq-bytes", RackemuRnicState, amu.wrreq_bytes, 16),
    DEFINE_PROP_UINT32("amu-resp-bytes", RackemuRnicState, amu.resp_bytes, 12),
    DEFINE_PROP_UINT32("amu-cache-lines", RackemuRnicState, amu.cache_lines, 32),
    DEFINE_PROP_UINT32("amu-cache-ways", RackemuRnicState, amu.cache_ways, 1),
    DEFINE_PROP_UINT32("amu-lookahead", RackemuRnicState, amu.lookahead, 8),
    DEFINE_PROP_UINT32("amu-regs", RackemuRnicState, amu.regs, 8),
    DEFINE_PROP_UINT32("amu-input-queue", RackemuRnicState, amu.input_queue, 64),
    DEFINE_PROP_UINT32("amu-host-queue", RackemuRnicState, amu.host_queue, 16),
    DEFINE_PROP_UINT32("amu-tags", RackemuRnicState, amu.tags, 32),
    DEFINE_PROP_UINT32("amu-age-max", RackemuRnicState, amu.age_max, 4),
    DEFINE_PROP_UINT32("amu-hostq-threshold", RackemuRnicState, amu.hostq_threshold, 2),
    DEFINE_PROP_UINT32("amu-raw-entries", RackemuRnicState, amu.raw_entries, 64),
    DEFINE_PROP_UINT32("amu-conflict-bypass", RackemuRnicState, amu.conflict_bypass, 0),
    DEFINE_PROP_UINT32("amu-cache-cycles", RackemuRnicState, amu.cache_cycles, 2),
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
