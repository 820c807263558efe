/* SPDX-License-Identifier: MIT */
/*
 * What every rackemu device's QOM glue shares, written once: the node's fabric as a QOM object
 * that devices reach through their "fabric" link property and bind to with one call, and the
 * glue's implementation of the one host interface of the device cores (rackemu/host.h:
 * interrupts from any thread, guest errors, DMA, time).
 */
#ifndef RACKEMU_GLUE_H
#define RACKEMU_GLUE_H

#include "hw/sysbus.h"
#include "hw/pci/pci.h"
#include "qemu/thread.h"
#include "qom/object.h"
#include "rk_fabric_endpoint.h"
#include "rk_remote_mem.h"
#include "rackemu/host.h"

/*
 * The node's port to the rack as a QOM object: the fabric port (NULL for a standalone node) and
 * one-sided remote memory over it (the GAS window's and the DMA engines' transport). The machine
 * creates it and fills it in before it creates the devices; a device declares
 * DEFINE_PROP_LINK("fabric", ..., TYPE_RACKEMU_FABRIC, RackemuFabric *) and the machine sets the
 * link. A device without the link (created by hand) is a node without fabric.
 */
#define TYPE_RACKEMU_FABRIC "rackemu-fabric"
OBJECT_DECLARE_SIMPLE_TYPE(RackemuFabric, RACKEMU_FABRIC)

struct RackemuFabric {
    Object parent_obj;
    RkFabricPort *port; /* NULL: no fabric */
    RkRemoteMem *rmem;  /* NULL: no remote memory */
};

/*
 * Bind service `svc` (RKF_SVC_*) of a device to the node's port: the one way any device binds.
 * NULL (no fabric: sends fail with -ENOTCONN) if `f` or its port is NULL. Call it in realize:
 * the machine starts the port after every device is realized.
 */
RkFabricEndpoint *rackemu_fabric_bind(RackemuFabric *f, unsigned svc, const struct rk_fabric_service *ops,
                                      void *opaque);
/* The node's port and remote memory (what the device adapter gives a core's host); NULL-safe. */
RkFabricPort *rackemu_fabric_port(RackemuFabric *f);
RkRemoteMem *rackemu_fabric_rmem(RackemuFabric *f);
/*
 * Called by a vCPU in a register read that a guest polls (a status or FIFO register): dispatch
 * what the bridge has delivered to this node on this vCPU, now, instead of after a wake-up of
 * the port thread (rk_fabric_port_poll). Interrupts that the dispatched frames raise
 * are set at once (the big lock is held). NULL-safe, never waits.
 */
void rackemu_fabric_poll(RackemuFabric *f);

/*
 * The glue's implementation of the one host interface (rackemu/host.h), shared by every device,
 * on the system bus and on PCI alike:
 *  - interrupts: up to RACKEMU_HOST_MAX_IRQS lines (index = line): a sysbus device's outputs,
 *    or a PCI function's MSI-X vectors (a message when a line rises) or, without MSI-X, its INTx
 *    pin (the OR of the lines). set_irq from a vCPU with the big lock held drives the line at
 *    once (a W1C or a disable lowers it before the guest's handler returns); from any other
 *    thread it records the level (and that the line rose) and queues one work item on a vCPU,
 *    halted if one is (async_run_on_cpu: it kicks the vCPU, which applies the latest recorded
 *    level of every line under the big lock it holds to run), so no thread other than a vCPU
 *    waits for the big lock, a halted vCPU wakes at once, a burst of changes costs one update,
 *    and a line that fell and rose again in between still gives its edge. Where no vCPU can do
 *    it (a vCPU thread that dropped the big lock, before the vCPUs run, RACKEMU_IRQ_VCPU=0) a
 *    bottom half does the same in the main loop.
 *  - DMA: the device's address space (the system memory, or the PCI function's bus-master
 *    space) through the memory API (dirty tracking and translated-code invalidation stay
 *    correct). Only RAM is reachable (and ROM/flash in read-array mode for reads): device
 *    registers give RK_SLAVE_ERROR, holes RK_DECODE_ERROR, each logged once per access. On the
 *    system bus, addresses in the global address space window [GAS_WINDOW_BASE, + node_count *
 *    GAS_WINDOW_NODE_SIZE) go to their owner through remote memory (this node's own window
 *    too), with the big lock dropped while they wait.
 *  - persist: msync of the RAM block's backing file (none: nothing is durable).
 *  - nvm: the node's persistent memory, the core rackemu_host_nvm_register gave (none:
 *    RK_DECODE_ERROR, the range is plain RAM).
 *  - the link: frames to the port's Ethernet sender; after a push-back the device's transmit
 *    thread waits for room on the port's ring (futex, no big lock) and calls tx_resume.
 *  - timers on QEMU_CLOCK_VIRTUAL, which call the device's timer op in the main loop.
 *  - time: QEMU_CLOCK_VIRTUAL; guest errors: qemu_log_mask(LOG_GUEST_ERROR) prefixed with the
 *    device's name and node.
 * The device adapter (rackemu_device.h) sets it up; a glue file does not call it itself.
 */
#define RACKEMU_HOST_MAX_IRQS 8
#define RACKEMU_HOST_MAX_TIMERS 4

typedef struct RackemuHost {
    RkHost host; /* what the core gets (rackemu::Host in C++) */
    const char *name;
    AddressSpace *as;   /* DMA */
    bool gas_window;    /* the global address space window goes to remote memory (system bus) */
    PCIDevice *pci;     /* a PCI function: lines are MSI-X vectors or INTx */
    bool msix;          /* ... MSI-X vectors (the function has the table) */
    unsigned nirqs;
    qemu_irq lines[RACKEMU_HOST_MAX_IRQS]; /* sysbus outputs */
    int pending[RACKEMU_HOST_MAX_IRQS];    /* latest level from any thread */
    int applied[RACKEMU_HOST_MAX_IRQS];    /* what the line was last driven to */
    uint32_t rose;                         /* lines that rose since the last apply */
    QEMUBH *bh;
    bool irq_on_vcpu;  /* false: RACKEMU_IRQ_VCPU=0, levels from other threads go to the bottom half */
    bool work_queued;  /* the vCPU work that applies `pending` is queued and has not started */
    /* how set_irq calls were applied (QOM properties irq-direct, irq-vcpu, irq-bh) */
    uint64_t irq_direct; /* at once: the caller held the big lock (a vCPU's MMIO access) */
    uint64_t irq_vcpu;   /* by work queued on the node's vCPU (another thread) */
    uint64_t irq_bh;     /* by the main loop's bottom half (see rackemu_host_init's comment) */
    /* what the host calls back: the core and its ops (rackemu/device.h) */
    void *core;
    void (*on_timer)(void *core, unsigned id);
    int (*tx_resume)(void *core);
    unsigned ntimers;
    QEMUTimer *timers[RACKEMU_HOST_MAX_TIMERS];
    QemuThread tx_thread;
    QemuEvent tx_ev;
    bool tx_stop, tx_started;
} RackemuHost;

/*
 * Fill in `h` for a device called `name` (for logs) on node `node_id` of `node_count`, with
 * `nirqs` interrupt lines and the node's fabric `f` (NULL: a node without fabric). `dev` is a
 * SysBusDevice (its outputs are created now, after any it created before) or a PCIDevice (DMA
 * through its bus-master space; `msix`: its MSI-X table is set up, lines are vectors; else
 * INTx). Call it in realize; rackemu_host_fini in unrealize.
 */
void rackemu_host_init(RackemuHost *h, DeviceState *dev, const char *name, unsigned nirqs, bool msix,
                       RackemuFabric *f, unsigned node_id, unsigned node_count);
/* Start the timers and the transmit thread once h->core and its callbacks are set. */
void rackemu_host_start(RackemuHost *h, unsigned ntimers);
void rackemu_host_fini(RackemuHost *h);
/*
 * The core's interrupt line `line` to `level` now, without an edge (big lock held: reset,
 * post_load; MSI-X pending bits migrate with the MSI-X state).
 */
void rackemu_host_irq_sync(RackemuHost *h, unsigned line, int level);
/*
 * The node's persistent memory for every device's RkHostOps.nvm: the rackemu-pmem core (its
 * rk_pmem_nvm), or NULL to withdraw it. The pmem device calls it in realize and unrealize.
 */
void rackemu_host_nvm_register(void *pmem_core);
/*
 * The host interface's DMA rule on any address space (e.g. a PCI device's bus-master space):
 * RK_OK when every byte of [addr, addr + len) is RAM (for a read also ROM/flash in read-array
 * mode); else RK_DECODE_ERROR (nothing there) or RK_SLAVE_ERROR (device memory), logged as a
 * guest error of device `name` on node `node_id`.
 */
rk_status rackemu_check_ram(AddressSpace *as, const char *name, unsigned node_id, uint64_t addr, uint64_t len,
                            bool write);
/* rk_status from a MemTxResult and back (for MMIO handlers using *_with_attrs). */
rk_status rackemu_status_from_memtx(MemTxResult r);
MemTxResult rackemu_status_to_memtx(rk_status s);

#endif /* RACKEMU_GLUE_H */
