/* SPDX-License-Identifier: MIT */
/*
 * The RNIC's architectural state for migration (docs/rnic.md "Migration"): plain C structs that
 * the core's save() fills and load() validates (hw/rnic/rnic_state.cc), and that the glue's
 * versioned VMState describes field by field (hw/qemu/rackemu_rnic.c). One fixed part
 * (registers, bitmaps, counters, record counts) and arrays of records, each record naming the
 * object it belongs to (a QP index, an MR index): the layout stays flat so that the VMState is
 * a list of fields, and a new field is a new VMState field under a new version. Every byte of
 * every struct is a field (no implicit padding: checked with -Wpadded; reserved bytes are
 * streamed and must be 0), so a struct compares with memcmp.
 *
 * Not here, by design: frames on the wire or held for backpressure, READ responses paused by
 * backpressure and the requests queued behind them, the timers' deadlines (re-armed at load),
 * the atomic unit's cache (write-through: invalidated at load) and the device's properties
 * (configuration, not state).
 */
#ifndef RACKEMU_RNIC_STATE_H
#define RACKEMU_RNIC_STATE_H

#include <stdint.h>

#include "rackemu/rnic_regs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bump with every change of a struct below (and the glue's VMState version with it). */
#define RK_RNIC_STATE_VERSION  2u
/* The counters this version saves; rnic_state.cc asserts it equals RNIC_CNT_COUNT. */
#define RK_RNIC_STATE_COUNTERS 89u

/* The fixed part. */
struct rk_rnic_state {
    uint32_t version; /* RK_RNIC_STATE_VERSION */
    uint32_t ctrl, cmd_addr_lo, cmd_addr_hi, cmd_status, cmd_count;
    uint32_t int_status, int_enable, model_hi_latch;
    uint32_t irq_lines; /* bit v: interrupt line v's level */
    uint64_t cq_events[RNIC_BITMAP_WORDS(RNIC_MAX_CQ)];
    uint64_t qp_errors[RNIC_BITMAP_WORDS(RNIC_MAX_QP)];
    uint64_t cq_errors[RNIC_BITMAP_WORDS(RNIC_MAX_CQ)];
    uint64_t pd_valid[RNIC_BITMAP_WORDS(RNIC_MAX_PD)];
    uint8_t mr_tag[RNIC_MAX_MR]; /* key byte of every MR slot (the next MR's key follows it) */
    /* Counters as the core holds them (the engine's then the device's, RNIC_COUNTER_TABLE
     * order; what the guest reads is counter - cnt_base). */
    uint64_t counters[RK_RNIC_STATE_COUNTERS];
    uint64_t cnt_base[RK_RNIC_STATE_COUNTERS];
    uint64_t next_seq; /* the next send WR's sequence number */
    /* the record counts (the glue checks them against the bounds before allocating) */
    uint32_t n_mr, n_pages, n_cq, n_qp, n_wr, n_sqe, n_res;
    uint32_t reserved;
    /* the async event queue (RNIC_REG_EQ_*) and the port state its events report */
    uint64_t eq_base;
    uint32_t eq_ctrl, eq_pi, eq_ci, eq_seq, eq_status;
    uint8_t eq_armed, link_up, reserved_eq[2];
};

/* A memory region (n_pages entries of the page array, in MR record order; 0 for a physical MR). */
struct rk_rnic_mr_state {
    uint64_t iova, length;
    uint32_t index, pdn, access, npages;
    uint8_t phys, page_shift, reserved[6];
};

struct rk_rnic_cq_state {
    uint64_t ring;
    uint32_t index, pi, ci, arm;
    uint8_t depth_log2, vector, error, reserved[5];
};

/* A QP: the device's half (rings, indices, the receive WQE in use) and the RC engine's
 * (state, attributes, PSNs, retry counters, the message in progress). */
struct rk_rnic_qp_state {
    /* device */
    uint64_t sq_ring, rq_ring;
    uint32_t index, pdn, send_cqn, recv_cqn;
    uint32_t sq_pi, sq_ci, rq_pi, rq_ci;
    uint32_t dest_node, bad_lerr, rlerr, reserved0;
    uint64_t rlen, rfirst_ns;
    uint8_t sq_log2, rq_log2, dev_state, bad_held, rwqe_valid, reserved1[3];
    uint8_t rwqe[64]; /* struct rnic_recv_wqe */
    /* engine: state and attributes */
    uint8_t state; /* RNIC_QPS_* */
    uint8_t dst_mac[6], src_mac[6], tos, ttl, min_rnr_timer, timeout, retry_cnt, rnr_retry;
    uint8_t reserved2[5];
    uint16_t udp_sport, pkey;
    uint32_t src_ip, dst_ip, dest_qpn, path_mtu, rq_psn, max_dest_rd_atomic, sq_psn, max_rd_atomic, access;
    /* engine: requester */
    uint16_t ip_id;
    uint8_t retry_left, rnr_left, recovering, reserved3[3];
    uint32_t cursor, next_psn, una, rd_outstanding, since_ackreq, recover_end;
    /* engine: responder */
    uint32_t epsn, msn, wr_rkey, wr_len, ack_psn, ack_requests, res_next, n_res;
    uint64_t msg_off, wr_va;
    uint8_t nak_sent, in_msg, wqe_held, ack_owed, comm_est, reserved4[3];
};

/* A send WR the device fetched and has not completed (bad = 1: the QP's held failed WQE). */
struct rk_rnic_wr_state {
    uint64_t seq, len, posted_ns;
    uint32_t qp_index, lerr;
    uint8_t bad, reserved[7];
    uint8_t wqe[128]; /* struct rnic_send_wqe */
};

/* An entry of a QP's send queue in the engine (posted, not completed), in queue order. */
struct rk_rnic_sqe_state {
    uint64_t wr_id, local, remote_va, swap_add, compare, mask;
    uint32_t qp_index, length, rkey, imm;
    uint32_t first, last, npkts, resume, read_next;
    uint8_t op, xop, xsize, flush_placement, flush_selectivity, signaled, solicited, fence;
    uint8_t assigned, reserved[3];
};

/* A responder resource (slot of the QP's max_dest_rd_atomic ring): what answers a duplicate
 * READ, atomic, FLUSH or ATOMIC WRITE (an atomic's saved original value). */
struct rk_rnic_res_state {
    uint64_t va, orig;
    uint32_t qp_index, slot, first, last, rkey, len;
    uint8_t opcode, reserved[7];
};

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_RNIC_STATE_H */
