/* SPDX-License-Identifier: MIT */
/*
 * What every rackemu device's QOM glue shares, written once: the interrupt line that a device
 * core may report changed from any thread, the guest-error log callback of every core, and the
 * node's fabric as a QOM object that devices reach through their "fabric" link property and
 * bind to with one call.
 */
#ifndef RACKEMU_GLUE_H
#define RACKEMU_GLUE_H

#include "hw/sysbus.h"
#include "qom/object.h"
#include "rk_fabric_endpoint.h"
#include "rk_remote_mem.h"

/*
 * An interrupt line whose level the device core computes. The core reports "the level may have
 * changed" from whatever thread it runs on: a vCPU in an MMIO handler (big lock held: the line
 * is set at once, so a W1C or a disable lowers it before the guest's handler returns), or a
 * thread of its own, the fabric port thread, a DMA engine (no big lock: a bottom half sets the
 * line in the main loop and reads the level only then, so no thread ever waits for the big lock
 * and a burst of changes costs one update). The line is level-triggered: coalesced reports
 * lose nothing.
 */
typedef struct RackemuIrq {
    qemu_irq line;
    QEMUBH *bh;
    int (*level)(void *opaque); /* the core's current level (0/1) */
    void *opaque;
} RackemuIrq;

/* Create the sysbus interrupt output (index = the order of the calls) and its bottom half. */
void rackemu_irq_init(RackemuIrq *irq, SysBusDevice *sbd, int (*level)(void *opaque), void *opaque);
/* From any thread: bring the line to the core's level. */
void rackemu_irq_update(RackemuIrq *irq);
/* With the big lock held (reset): set the line to `level` now. */
void rackemu_irq_set(RackemuIrq *irq, int level);

/* The guest-error log callback of every core: one LOG_GUEST_ERROR line (-d guest_errors). */
void rackemu_guest_error(void *opaque, const char *msg);

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

#endif /* RACKEMU_GLUE_H */
