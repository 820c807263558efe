// SPDX-License-Identifier: MIT
// The RC engine's per-QP state (rc.h), shared by the engine (rc.cc) and the RNIC's migration
// code (rnic_state.cc), which saves and validates it field by field. Internal to hw/rnic.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "rc.h"

namespace rackemu::rnic {

// The responder's message in progress (Qp::in_msg).
constexpr uint8_t kMsgSend = 1, kMsgWrite = 2;

// A send WR on the send queue.
struct SendEntry {
    SendWr wr;
    bool assigned = false; // PSNs given
    uint32_t first = 0, last = 0;
    uint32_t npkts = 1;
    uint32_t resume = 0;    // next PSN of this WR to (re)send; past `last`: all sent
    uint32_t read_next = 0; // READ: the next response PSN expected
};

// A responder resource (READ, atomic, FLUSH, ATOMIC WRITE), kept to answer duplicates.
struct Resource {
    bool valid = false;
    uint8_t opcode = 0;
    uint32_t first = 0, last = 0;
    uint64_t va = 0;
    uint32_t rkey = 0, len = 0;
    uint64_t orig = 0; // atomics: the original value
};

struct RcEngine::Qp {
    uint32_t qpn = 0;
    QpState state = QpState::Reset;
    QpAttr attr;
    uint16_t ip_id = 0;
    bool comm_est = false; // RcEvent::CommEst reported since entering Rtr

    // Requester.
    std::deque<SendEntry> sq;
    size_t cursor = 0;           // first entry of sq not fully sent
    uint32_t next_psn = 0;       // the next PSN to assign
    uint32_t una = 0;            // the oldest unacknowledged PSN (== next_psn: nothing outstanding)
    uint32_t rd_outstanding = 0; // READ/atomic/FLUSH/ATOMIC WRITE assigned and not completed
    uint32_t since_ackreq = 0;
    unsigned retry_left = 7, rnr_left = 7;
    uint64_t timer = UINT64_MAX; // retransmission deadline
    uint64_t rnr_until = 0;      // no sending before this (RNR wait)
    bool tx_stalled = false;     // the link pushed back before a request packet (resume_tx)
    bool recovering = false;     // went back; until recover_end is acknowledged, responses
    uint32_t recover_end = 0;    // to what was sent before do not start another retry

    // Responder.
    uint32_t epsn = 0;
    uint32_t msn = 0;
    bool nak_sent = false; // a NAK PSN sequence error went out for this ePSN
    uint8_t in_msg = 0;    // 0, or kMsgSend / kMsgWrite: a message in progress
    uint64_t msg_off = 0;  // bytes of the message so far
    uint64_t wr_va = 0;    // WRITE: RETH of the message
    uint32_t wr_rkey = 0, wr_len = 0;
    bool wqe_held = false; // the current message holds the head receive WQE
    bool ack_owed = false;
    uint32_t ack_psn = 0;
    unsigned ack_requests = 0; // AckReq packets the owed ACK answers
    std::vector<Resource> res;
    size_t res_next = 0;
    // READ responses paused by backpressure: the rest of one READ (packets k..n-1 at va/len),
    // and the requests that arrived meanwhile, processed in order once it is out.
    struct ReadOut {
        bool active = false;
        uint32_t rkey = 0, len = 0, first_psn = 0, k = 0, n = 0;
        uint64_t va = 0;
    } rd_out;
    std::deque<std::vector<uint8_t>> backlog;

    bool outstanding() const { return una != next_psn; }
};

} // namespace rackemu::rnic
