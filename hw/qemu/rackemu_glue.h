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
/* The port (for a core whose C API binds itself, e.g. the RMC) and remote memory; NULL-safe. */
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
 * The glue's implementation of the one host interface (rackemu/host.h), shared by every device:
 *  - interrupts: up to RACKEMU_HOST_MAX_IRQS sysbus outputs (index = line). set_irq from a vCPU
 *    with the big lock held sets the line at once (a W1C or a disable lowers it before the
 *    guest's handler returns); from any other thread it records the level and queues one work
 *    item on a vCPU, halted if one is (async_run_on_cpu: it kicks the vCPU, which applies the
 *    latest recorded level of every line under the big lock it holds to run), so no thread
 *    other than a vCPU waits for the big lock, a halted vCPU wakes at once, and a burst of
 *    changes costs one update. Where no vCPU can do it (a vCPU thread that dropped the big lock,
 *    before the vCPUs run, RACKEMU_IRQ_VCPU=0) a bottom half does the same in the main loop.
 *  - DMA: the node's physical address space through the memory API (dirty tracking and
 *    translated-code invalidation stay correct). Only RAM is reachable (and ROM/flash in
 *    read-array mode for reads): device registers give RK_SLAVE_ERROR, holes RK_DECODE_ERROR,
 *    each logged once per access. Addresses in the global address space window
 *    [GAS_WINDOW_BASE, + node_count * GAS_WINDOW_NODE_SIZE) go to their owner through remote
 *    memory (this node's own window too), with the big lock dropped while they wait.
 *  - time: QEMU_CLOCK_VIRTUAL; guest errors: qemu_log_mask(LOG_GUEST_ERROR) prefixed with the
 *    device's name and node.
 */
#define RACKEMU_HOST_MAX_IRQS 4

typedef struct RackemuHost {
    RkHost host; /* what the core gets (rackemu::Host in C++) */
    const char *name;
    unsigned nirqs;
    qemu_irq lines[RACKEMU_HOST_MAX_IRQS];
    int pending[RACKEMU_HOST_MAX_IRQS]; /* latest level from a thread without the big lock */
    QEMUBH *bh;
    bool irq_on_vcpu;  /* false: RACKEMU_IRQ_VCPU=0, levels from other threads go to the bottom half */
    bool work_queued;  /* the vCPU work that applies `pending` is queued and has not started */
    /* how set_irq calls were applied (QOM properties irq-direct, irq-vcpu, irq-bh) */
    uint64_t irq_direct; /* at once: the caller held the big lock (a vCPU's MMIO access) */
    uint64_t irq_vcpu;   /* by work queued on the node's vCPU (another thread) */
    uint64_t irq_bh;     /* by the main loop's bottom half (see rackemu_host_init's comment) */
} RackemuHost;

/*
 * Fill in `h` for a device called `name` (for logs) on node `node_id` of `node_count`, with
 * `nirqs` sysbus interrupt outputs created now (index 0..nirqs-1, after any the device created
 * before) and the node's fabric `f` (NULL: a node without fabric). Call it in realize.
 */
void rackemu_host_init(RackemuHost *h, SysBusDevice *sbd, const char *name, unsigned nirqs,
                       RackemuFabric *f, unsigned node_id, unsigned node_count);
/* The core's interrupt line `line` to `level` now (big lock held: reset, post_load). */
void rackemu_host_irq_sync(RackemuHost *h, unsigned line, int level);
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
