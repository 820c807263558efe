/* SPDX-License-Identifier: MIT */
/*
 * The C API of the RNIC device core (hw/rnic/rnic.h) for its QEMU glue (hw/qemu/rackemu_rnic.c).
 * Threading as the core's: the register and doorbell calls from a vCPU, rk_rnic_on_frame from the
 * fabric port's thread, rk_rnic_poll from a timer, rk_rnic_tx_resume from the glue's transmit
 * thread; `send`, `timer` and `tx_wait` are called with the core's lock held and must not call
 * back into it.
 */
#ifndef RACKEMU_RNIC_CAPI_H
#define RACKEMU_RNIC_CAPI_H

#include <stddef.h>
#include <stdint.h>

#include "rackemu/host.h"
#include "rnic_state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkRnic RkRnic;

/* The timing model (docs/rnic.md "Timing model"); the glue's properties. */
typedef struct RkRnicTiming {
    uint32_t link_mbps; /* link bandwidth, Mbit/s */
    uint32_t hop_ns;    /* latency per hop */
    uint32_t nic_mhz;   /* NIC pipeline clock */
    uint32_t pcie_ns;   /* one-way PCIe latency */
    uint32_t pcie_mbps; /* PCIe bandwidth, MByte/s */
    uint32_t max_mtu;   /* largest path MTU, 256..4096 */
} RkRnicTiming;

/* The atomic unit's properties (docs/atomic-unit.md "Properties"; amu-* on the device). The
 * unit's clock is the NIC's (RkRnicTiming.nic_mhz). rate_limit: "off", "aging", "hostq", "both";
 * raw: "none", "ack", "flush"; NULL: the default (both, ack). */
typedef struct RkRnicAmu {
    uint32_t host_lat_ns, host_mbps, mem_ns, net_mbps;
    uint32_t msg_bytes, rdreq_bytes, wrreq_bytes, resp_bytes;
    uint32_t cache_lines, cache_ways, lookahead, regs, input_queue, host_queue, tags;
    uint32_t age_max, hostq_threshold, raw_entries, cache_cycles, conflict_bypass;
    const char *rate_limit;
    const char *raw;
} RkRnicAmu;

/* The defaults (the paper's), for a caller without properties. */
void rk_rnic_amu_defaults(RkRnicAmu *a);
/* 0 if `a` is valid; else -1 and a message naming the bad property (amu-...) in msg. */
int rk_rnic_amu_check(const RkRnicAmu *a, uint32_t nic_mhz, char *msg, size_t len);

/* Transmit one frame; returns 0 when it was queued to the link, -EAGAIN when the link cannot take
 * it now (the core holds it and pauses: backpressure), any other value: dropped and counted. */
typedef int (*rk_rnic_send_fn)(void *opaque, const uint8_t *frame, size_t len);
/* The earliest time rk_rnic_poll() has work (UINT64_MAX: none). */
typedef void (*rk_rnic_timer_fn)(void *opaque, uint64_t deadline_ns);
/* The link pushed back: call rk_rnic_tx_resume() once it has room (from a thread that may block). */
typedef void (*rk_rnic_tx_wait_fn)(void *opaque);

/* `host` is copied. link = 0: no fabric port (frames to other nodes are dropped and counted).
 * amu: NULL for the defaults; an invalid one (rk_rnic_amu_check) is replaced by the defaults
 * with a guest error. */
RkRnic *rk_rnic_new(const RkHost *host, const RkRnicTiming *timing, const RkRnicAmu *amu, int link,
                    rk_rnic_send_fn send, rk_rnic_timer_fn timer, rk_rnic_tx_wait_fn tx_wait, void *opaque);
void rk_rnic_free(RkRnic *r);
uint64_t rk_rnic_ctrl_read(RkRnic *r, uint64_t offset, unsigned size);
void rk_rnic_ctrl_write(RkRnic *r, uint64_t offset, uint64_t value, unsigned size);
uint64_t rk_rnic_db_read(RkRnic *r, uint64_t offset, unsigned size);
void rk_rnic_db_write(RkRnic *r, uint64_t offset, uint64_t value, unsigned size);
void rk_rnic_on_frame(RkRnic *r, const uint8_t *frame, size_t len);
void rk_rnic_poll(RkRnic *r);
/* Send what the core held while the link pushed back, then let paused send queues continue.
 * Returns 1 while the link still pushes back (wait for room, then call again), 0 when drained. */
int rk_rnic_tx_resume(RkRnic *r);
void rk_rnic_reset(RkRnic *r);
/* The fabric port's link state (STATUS.LINK_UP; a change is a PORT_ACTIVE / PORT_ERR async event). */
void rk_rnic_set_link(RkRnic *r, int up);
/* The level of interrupt line (MSI-X vector) `vector`. */
int rk_rnic_irq_level(RkRnic *r, unsigned vector);

/*
 * Migration (docs/rnic.md "Migration"). rk_rnic_pause(r, 1) while the VM is stopped (frames from
 * the link are held, timers wait), 0 when it runs again. rk_rnic_save fills `out`: the fixed part
 * and malloc()ed record arrays of st.n_* entries (free them with rk_rnic_saved_free).
 * rk_rnic_load validates everything and returns 0, or -EINVAL with the reason in msg (the
 * device is unchanged).
 */
typedef struct RkRnicSaved {
    struct rk_rnic_state st;
    struct rk_rnic_mr_state *mr;
    uint64_t *pages;
    struct rk_rnic_cq_state *cq;
    struct rk_rnic_qp_state *qp;
    struct rk_rnic_wr_state *wr;
    struct rk_rnic_sqe_state *sqe;
    struct rk_rnic_res_state *res;
} RkRnicSaved;
void rk_rnic_pause(RkRnic *r, int on);
void rk_rnic_save(RkRnic *r, RkRnicSaved *out);
void rk_rnic_saved_free(RkRnicSaved *s);
int rk_rnic_load(RkRnic *r, const RkRnicSaved *s, char *msg, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_RNIC_CAPI_H */
