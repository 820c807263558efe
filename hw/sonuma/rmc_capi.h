/* SPDX-License-Identifier: MIT */
/*
 * The soNUMA RMC core (rmc.h) as a rackemu device (rackemu/device.h): its configuration and its
 * table of operations, which the generic adapter serves (hw/qemu/rackemu_rmc.c). The core
 * reaches the outside world only through the host interface (rackemu/host.h): guest memory, its
 * interrupt line (line 0), the guest-error log, the clock, and the RMC fabric service
 * (RKF_SVC_RMC), which the adapter binds to the node's port before it creates the core
 * (host->ep; NULL: a node without fabric). The core runs its RGP on a thread of its own and
 * serves other nodes on the port thread; it calls the host's ops from any of those threads.
 */
#ifndef RACKEMU_RMC_CAPI_H
#define RACKEMU_RMC_CAPI_H

#include <stdint.h>

#include "rackemu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rk_rmc_config {
    /* timing model (Table 2) and sizing: device properties */
    uint32_t rmc_mhz, mem_ns, llc_ns, hop_ns, hops, link_gbps, r2p2_gbps, r2p2_count, issue_cycles, pkt_hdr,
        att_entries, sb_depth;
    int speculation;
    int llc_resident; /* the data this node serves is LLC-resident (timing model) */
    uint64_t window_delay_ns;
    uint32_t timeout_ms, window_blocks;
    uint64_t seg_base, seg_size;
    int direct; /* the direct path for READs to live peers (needs the machine's ram-dir) */
};

/*
 * create takes a struct rk_rmc_config and refuses a bad one or a bad host (node_id < node_count
 * <= 64). One region (the registers and doorbell pages, RMC_MMIO_SIZE), one interrupt line, the
 * fabric service RKF_SVC_RMC; the state is RmcState (rmc.h), its fields in X-macros there.
 */
extern const RkDeviceOps rk_rmc_device_ops;

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_RMC_CAPI_H */
