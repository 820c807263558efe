/* SPDX-License-Identifier: MIT */
/*
 * C interface of the Unimem device cores for the QEMU glue (hw/qemu/rackemu_unimem.c,
 * hw/qemu/rackemu_gas.c), which is C: each core's configuration and its device operations
 * (rackemu/device.h), served by the generic adapter (hw/qemu/rackemu_device.h). The cores are
 * rackemu::unimem::Vmbox, Packetizer and Gas (vmbox.h, packetizer.h, gas.h); their state is
 * described there once (X-macros, hw/core/state.h).
 */
#ifndef RACKEMU_UNIMEM_CAPI_H
#define RACKEMU_UNIMEM_CAPI_H

#include <stddef.h>
#include <stdint.h>

#include "rackemu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The vmbox: one region (the MIF pages, the KIF page and the control page), interrupt line 0
 * (the arrival interrupt), pause (deliveries are refused with NACK while the VM is stopped).
 * Its host's port is only polled by register reads; the vmbox does no DMA.
 */
typedef struct RkVmboxConfig {
    uint32_t depth;        /* words per FIFO (4..65536: the glue checks it) */
    int burst_known_issue; /* model ExaNoDe D3.6 sec. 5.1.2 */
    int kif;               /* the kernel interface (KIF) is present */
} RkVmboxConfig;
extern const RkDeviceOps rk_vmbox_device_ops;

/*
 * The packetizer: one region, interrupt line 0 reserved (it raises none), and the
 * RKF_SVC_UNIMEM_MBOX service: it sends its packets to other nodes and serves their deliveries
 * into `vmbox`, the node's vmbox core (the one rk_vmbox_device_ops created), which also takes
 * this node's own packets.
 */
/* The glue's trace points of the mailbox traffic (QEMU's rackemu_unimem_*; any may be NULL). */
typedef struct RkPktzTrace {
    /* a packet leaves interface `pif` for node `dst`'s FIFO `mif` */
    void (*send)(void *opaque, unsigned pif, unsigned dst, unsigned mif, uint64_t tag);
    /* its answer (an rk_status) */
    void (*complete)(void *opaque, uint64_t tag, int status);
    /* a delivery of `len` bytes from node `src` and its reply status (RKF_ST_*; -1: none) */
    void (*serve)(void *opaque, unsigned src, unsigned len, int reply);
} RkPktzTrace;
typedef struct RkPktzConfig {
    void *vmbox;              /* required */
    int kif;                  /* the kernel interface (KIF) is present */
    int ack_first;            /* deliveries into the vmbox are answered first (docs/mailbox.md) */
    const RkPktzTrace *trace; /* NULL: none */
    void *trace_opaque;
} RkPktzConfig;
extern const RkDeviceOps rk_pktz_device_ops;
/* QOM "ack-first" (switchable at run time) and the counters "acks-first" / "acks-after". */
int rk_pktz_ack_first(void *core);
void rk_pktz_set_ack_first(void *core, int on);
uint64_t rk_pktz_acks(void *core, int first);

/*
 * The global address space window: region 0 the control page, region 1 the window of
 * node_count * GAS_WINDOW_NODE_SIZE bytes (the table's size is the largest rack's: the glue
 * sets the node's), no interrupt; no configuration (node id and count come from the host).
 */
extern const RkDeviceOps rk_gas_device_ops;

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_UNIMEM_CAPI_H */
