/* SPDX-License-Identifier: MIT */
/*
 * C interface of the soNUMA RMC core (rmc.h) for the QEMU glue (hw/qemu/rackemu_rmc.c).
 * The core reaches the outside world only through the host interface (rackemu/host.h): guest
 * memory, its interrupt line (line 0), the guest-error log and the clock. rk_rmc_new binds the
 * RMC fabric service to the host's port (host->port, NULL: a node without fabric), so call it
 * before rk_fabric_port_start(). The core runs its RGP on a thread of its own and serves other
 * nodes on the port thread; it calls the host's ops from any of those threads.
 */
#ifndef RACKEMU_RMC_CAPI_H
#define RACKEMU_RMC_CAPI_H

#include <stdint.h>

#include "rackemu/host.h"
#include "rackemu/sonuma_regs.h"
#include "rk_fabric_endpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkRmc RkRmc;

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
 * The architectural state for migration (docs/sonuma.md "Migration"): the registers of every
 * QP and context, the queue indices, the counters (as the guest reads them), and one record per
 * transfer in flight, which completes after load with UNREACHABLE (UNCERTAIN for a WRITE, CAS
 * or FAA whose request had left), info LINK_DOWN.
 */
struct rk_rmc_qp_state {
    uint64_t wq_base, cq_base, depth_log2, ctx, ctrl;
    uint32_t wq_tail, wq_head, cq_head, cq_tail, inflight;
    uint8_t cfg_err, err;
};
struct rk_rmc_ctx_state {
    uint64_t base, size, perm, nodemask, layout, ctrl, key;
    uint8_t cfg_err;
};
struct rk_rmc_xfer_state {
    uint64_t wr_id;    /* from the WQE */
    uint64_t start_ns; /* host clock at fetch (the CQE's wall_ns counts from it) */
    uint32_t qp, wq_index;
    uint8_t op;     /* RMC_OP_* */
    uint8_t status; /* what it completes with: RMC_ST_UNREACHABLE or RMC_ST_UNCERTAIN */
};
struct rk_rmc_state {
    uint64_t ctrl, irq_status;
    struct rk_rmc_qp_state qp[RMC_QP_COUNT];
    struct rk_rmc_ctx_state ctx[RMC_CTX_COUNT];
    uint64_t counters[RMC_CNT_COUNT];
};

/* NULL on a bad config or host (node_id < node_count <= 64), with the reason in err. */
RkRmc *rk_rmc_new(const struct rk_rmc_config *cfg, const RkHost *host, char *err, unsigned errlen);
void rk_rmc_free(RkRmc *r);
uint64_t rk_rmc_read(RkRmc *r, uint64_t offset, unsigned size);
void rk_rmc_write(RkRmc *r, uint64_t offset, uint64_t value, unsigned size);
void rk_rmc_reset(RkRmc *r);
int rk_rmc_irq_level(RkRmc *r);
/* The register's name at `offset` ("NAME" or "NAME[i]", "unmapped"), valid until the next call
 * on this thread. */
const char *rk_rmc_reg_name(RkRmc *r, uint64_t offset);

/* Quiesce (1) or resume (0) the core's threads: the glue pauses while the VM is stopped. */
void rk_rmc_pause(RkRmc *r, int on);
/* Save into *st and a malloc'ed array of *nxfer transfer records (*xfer, free() it; NULL if 0). */
void rk_rmc_save(RkRmc *r, struct rk_rmc_state *st, struct rk_rmc_xfer_state **xfer, uint32_t *nxfer);
/* Validate and load; 0, or -EINVAL (nothing changed) if anything is out of range. */
int rk_rmc_load(RkRmc *r, const struct rk_rmc_state *st, const struct rk_rmc_xfer_state *xfer,
                uint32_t nxfer);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_RMC_CAPI_H */
