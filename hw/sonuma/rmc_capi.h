/* SPDX-License-Identifier: MIT */
/*
 * C interface of the soNUMA RMC core (rmc.h) for the QEMU glue (hw/qemu/rackemu_rmc.c).
 * rk_rmc_new registers the RMC fabric service with the node's port, so call it before
 * rk_fabric_port_start(). The core runs its RGP on a thread of its own and serves other nodes on
 * the port thread; the callbacks below may come from any of those threads.
 */
#ifndef RACKEMU_RMC_CAPI_H
#define RACKEMU_RMC_CAPI_H

#include <stdint.h>

#include "rk_fabric_endpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkRmc RkRmc;

struct rk_rmc_config {
    uint32_t node_id, node_count;
    /* timing model (Table 2) and sizing: device properties */
    uint32_t rmc_mhz, mem_ns, llc_ns, hop_ns, hops, link_gbps, r2p2_gbps, r2p2_count, issue_cycles, pkt_hdr,
        att_entries, sb_depth;
    int speculation;
    uint64_t window_delay_ns;
    uint32_t timeout_ms, window_blocks;
    uint64_t seg_base, seg_size;
    /* guest RAM: host mapping of [ram_base, ram_base + ram_size) */
    void *ram_host;
    uint64_t ram_base, ram_size;
};

typedef void (*rk_rmc_irq_fn)(void *opaque);
typedef void (*rk_rmc_log_fn)(void *opaque, const char *msg);

/* `port` may be NULL (a node without fabric: only requests to itself); the RMC binds its service
 * to it with rk_fabric_bind(). NULL on a bad config,
 * with the reason in err. */
RkRmc *rk_rmc_new(const struct rk_rmc_config *cfg, RkFabricPort *port, rk_rmc_irq_fn irq, rk_rmc_log_fn log,
                  void *opaque, char *err, unsigned errlen);
void rk_rmc_free(RkRmc *r);
uint64_t rk_rmc_read(RkRmc *r, uint64_t offset, unsigned size);
void rk_rmc_write(RkRmc *r, uint64_t offset, uint64_t value, unsigned size);
void rk_rmc_reset(RkRmc *r);
int rk_rmc_irq_level(RkRmc *r);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_RMC_CAPI_H */
