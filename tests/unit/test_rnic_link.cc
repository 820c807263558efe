// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicLink: the link (docs/rnic.md "Backpressure"):
// backpressure and held frames, the transmit hold limit, loss, duplication, reordering and
// corruption, a link that goes down. The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

// ---- faults on the link ----

// Backpressure: a port ring of 4 frames per node refuses sends (LinkTx::Busy) most of the time.
// The device holds what it cannot send, pauses its requesters at their next PSN and continues
// when the ring drains (tx_resume, as the glue's transmit thread does after the port's futex
// wake): 1 MiB WRITE, READ (its responses paced by the responder) and SEND and 64 pipelined
// FETCH_ADDs complete with exact data and totals, no frame dropped, no timeout and no
// retransmission. (Before backpressure the refused
// frames were dropped and each message waited for a retransmission timeout.)
TEST(RnicLink, BackpressurePausesAndResumesWithoutRetransmission)
{
    Pair p(1024);
    p.link.ring = 4;
    const uint32_t len = 1u << 20;
    fill(p.a.mem(p.bufa), len, 77);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, len, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), len), 0);
    EXPECT_GT(p.link.refused, 0u);
    EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 0u);
    EXPECT_GT(p.a.tx_wait_calls, 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), p.a.tx_wait_calls);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_REQ_PACKETS), 1024u); // every packet once
    // READ it back: the responder's 1024 responses meet the full ring and are held, in order
    std::memset(p.a.mem(p.bufa + (2 << 20)), 0, len);
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + (2 << 20), len, p.keya, p.bufb, p.keyb));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + (2 << 20)), p.a.mem(p.bufa), len), 0);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_LINK_TX_HELD), 0u);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 0u);
    // READ responses are paced, not queued: each push-back holds the one refused frame (and at
    // most an ACK), never the rest of the READ's 1024 responses
    EXPECT_LE(p.b.counter(RNIC_CNT_INDEX_LINK_TX_HELD), 2 * p.b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE))
        << "held " << p.b.counter(RNIC_CNT_INDEX_LINK_TX_HELD) << " backpressure "
        << p.b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE);
    // SEND into a posted receive
    p.b.post_recv(p.qb, 3, p.bufb + (2 << 20), len, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 4, p.bufa, len, p.keya));
    c = p.wait_a(1);
    auto r = p.wait_b(1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(r[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(r[0].byte_len, len);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + (2 << 20)), p.a.mem(p.bufa), len), 0);
    // 64 FETCH_ADDs posted at once: the total is exact
    const uint64_t ctr_at = p.bufb + (3 << 20);
    std::memset(p.b.mem(ctr_at), 0, 8);
    for (unsigned i = 0; i < 64; i++) {
        struct rnic_send_wqe w =
            wqe(RNIC_WR_FETCH_ADD, 100 + i, p.bufa + (3 << 20) + 8 * i, 8, p.keya, ctr_at, p.keyb);
        w.swap_add = i + 1;
        p.a.post_send(p.qa, w);
    }
    c = p.wait_a(64);
    ASSERT_EQ(c.size(), 64u);
    for (unsigned i = 0; i < 64; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, 100u + i);
    }
    uint64_t total = 0;
    std::memcpy(&total, p.b.mem(ctr_at), 8);
    EXPECT_EQ(total, 64u * 65u / 2u);
    for (Node *n : {&p.a, &p.b}) {
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_TIMEOUTS), 0u);
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_LINK_TX_DROPS), 0u);
        EXPECT_EQ(n->counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
    }
    EXPECT_EQ(p.link.dropped, 0u);
}

// Backpressure and a lossy, reordering link together: exact data, and the retransmission count
// stays a count of packets sent again (a QP paused after a go-back must not count PSNs it never
// reached: an e2e run under a reorder rule once showed 47244643791).
TEST(RnicLink, BackpressureUnderLossAndReorderCountsRetransmissionsSanely)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE(seed);
        Pair p(1024);
        p.link.ring = 4;
        p.link.rng.seed(seed);
        p.link.drop = 0.01;
        p.link.reorder = 0.05;
        p.link.dup = 0.01;
        const uint32_t len = 1u << 20;
        fill(p.a.mem(p.bufa), len, uint32_t(seed));
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, len, p.keya, p.bufb, p.keyb));
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + (2 << 20), len, p.keya, p.bufb, p.keyb));
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), len), 0);
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + (2 << 20)), p.a.mem(p.bufa), len), 0);
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
        EXPECT_LE(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), p.a.counter(RNIC_CNT_INDEX_TX_FRAMES));
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 0u);
    }
}

// Without anyone calling tx_resume (no transmit thread), the timer's poll() drains what is held.
TEST(RnicLink, HeldFramesDrainOnPollWithoutAWake)
{
    Pair p(1024);
    p.link.ring = 2;
    fill(p.a.mem(p.bufa), 64 << 10, 5);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 64 << 10, p.keya, p.bufb, p.keyb));
    EXPECT_TRUE(p.a.tx_waiting);
    p.a.tx_waiting = false; // nobody answers the wake: only poll() (the retransmission timer) may
    while (!p.link.q.empty()) {
        Link::Frame f = p.link.pop();
        p.node(f.to).nic->on_frame(f.bytes.data(), f.bytes.size());
        p.a.nic->poll();
        p.b.nic->poll();
    }
    auto c = p.a.poll(p.cqa);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 64 << 10), 0);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
}

TEST(RnicLink, ExactDataUnderLossDuplicationReorderingAndCorruption)
{
    for (uint64_t seed = 1; seed <= 4; seed++) {
        SCOPED_TRACE(seed);
        Pair p(1024);
        p.link.rng.seed(seed);
        p.link.drop = 0.03;
        p.link.dup = 0.03;
        p.link.reorder = 0.05;
        p.link.corrupt = 0.02;
        fill(p.a.mem(p.bufa), 1 << 20, uint32_t(seed));
        fill(p.b.mem(p.bufb + (2 << 20)), 1 << 20, uint32_t(seed + 100));
        uint64_t counter = 0;
        std::memcpy(p.b.mem(p.bufb + (3 << 20)), &counter, 8);
        unsigned n = 0;
        for (unsigned i = 0; i < 16; i++) {
            const uint32_t len = 1 + (i * 7919) % 20000;
            const uint64_t off = uint64_t(i) * 32768;
            p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, n++, p.bufa + off, len, p.keya, p.bufb + off, p.keyb));
            p.a.post_send(p.qa, wqe(RNIC_WR_READ, n++, p.bufa + (1 << 20) + off, len, p.keya,
                                    p.bufb + (2 << 20) + off, p.keyb));
            struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, n++, p.bufa + (3 << 20) + 8 * i, 8, p.keya,
                                         p.bufb + (3 << 20), p.keyb);
            w.swap_add = i + 1;
            p.a.post_send(p.qa, w);
        }
        auto c = p.wait_a(n);
        ASSERT_EQ(c.size(), n);
        for (unsigned i = 0; i < n; i++) {
            EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
            EXPECT_EQ(c[i].wr_id, i);
        }
        for (unsigned i = 0; i < 16; i++) {
            const uint32_t len = 1 + (i * 7919) % 20000;
            const uint64_t off = uint64_t(i) * 32768;
            EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + off), p.a.mem(p.bufa + off), len), 0) << i;
            EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + (1 << 20) + off), p.b.mem(p.bufb + (2 << 20) + off), len),
                      0)
                << i;
        }
        std::memcpy(&counter, p.b.mem(p.bufb + (3 << 20)), 8);
        EXPECT_EQ(counter, 16u * 17u / 2u) << "FETCH_ADD executed exactly once each";
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS) + p.b.counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
        EXPECT_GT(p.a.counter(RNIC_CNT_INDEX_RX_ICRC_ERRORS) + p.b.counter(RNIC_CNT_INDEX_RX_ICRC_ERRORS) +
                      p.a.counter(RNIC_CNT_INDEX_RX_MALFORMED) + p.b.counter(RNIC_CNT_INDEX_RX_MALFORMED),
                  0u);
    }
}

TEST(RnicLink, LinkDownExhaustsRetriesAndFlushesEverything)
{
    Pair p(1024, 8, 3);
    p.b.post_recv(p.qb, 1, p.bufb, 64, p.keyb);
    p.a.post_recv(p.qa, 50, p.bufa + 8192, 64, p.keya);
    p.a.post_recv(p.qa, 51, p.bufa + 8192, 64, p.keya);
    p.link.down = true;
    for (unsigned i = 0; i < 4; i++)
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, i, p.bufa, 64, p.keya, p.bufb, p.keyb));
    auto c = p.wait_a(6);
    ASSERT_EQ(c.size(), 6u);
    EXPECT_EQ(c[0].wr_id, 0u);
    EXPECT_EQ(c[0].status, RNIC_WC_RETRY_EXC_ERR);
    for (unsigned i = 1; i < 4; i++) {
        EXPECT_EQ(c[i].wr_id, i);
        EXPECT_EQ(c[i].status, RNIC_WC_WR_FLUSH_ERR);
    }
    // the receive queue is flushed too
    EXPECT_EQ(c[4].wr_id, 50u);
    EXPECT_EQ(c[4].status, RNIC_WC_WR_FLUSH_ERR);
    EXPECT_EQ(c[4].flags & RNIC_CQE_F_RECV, RNIC_CQE_F_RECV);
    EXPECT_EQ(c[5].wr_id, 51u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_TIMEOUTS), 4u); // retry_cnt 3: 4 expiries
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRY_EXHAUSTED), 1u);
    // after the error, a new WR completes at once with a flush error
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 9, p.bufa, 64, p.keya, p.bufb, p.keyb));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_WR_FLUSH_ERR);
}

// ---- the transmit hold limit ----

// While the link pushes back the device holds the frames its responder owes (ACKs here), up to
// tx_hold_max_bytes (64 MiB in the device; 2 KiB here so that a test reaches it). Beyond that a
// frame is dropped and counted in link_tx_drops; the requester's retransmission recovers the
// lost ACKs and the data arrives exactly.
TEST(RnicLink, TransmitHoldLimitDropsAndCountsAndNothingIsLost)
{
    EXPECT_EQ(RnicConfig{}.tx_hold_max_bytes, kTxHoldMaxBytes);
    EXPECT_EQ(kTxHoldMaxBytes, size_t(64) << 20);
    constexpr size_t kHold = 2048;
    RnicConfig cfg;
    cfg.tx_hold_max_bytes = kHold;
    Link link;
    Node a(0, link), b(1, link, cfg);
    const uint32_t pda = a.create_pd(), pdb = b.create_pd();
    Node::Cq cqa = a.create_cq(), cqb = b.create_cq();
    Node::Qp qa = a.create_qp(pda, cqa, cqa), qb = b.create_qp(pdb, cqb, cqb);
    const uint64_t bufa = a.alloc(1 << 20), bufb = b.alloc(1 << 20);
    const uint32_t ka = a.mr(pda, bufa, 1 << 20), kb = b.mr(pdb, bufb, 1 << 20);
    a.connect(qa, 1, qb.qpn, 256, 8);
    b.connect(qb, 0, qa.qpn, 256, 8);
    fill(a.mem(bufa), 1 << 20, 41);
    // B's port refuses everything: each ACK B owes is held, until 2 KiB are held
    link.blocked[1] = true;
    for (unsigned i = 0; i < 16; i++)
        a.post_send(qa, wqe(RNIC_WR_WRITE, i, bufa + i * 65536, 65536, ka, bufb + i * 65536, kb));
    uint64_t clock = 0;
    auto deliver = [&] {
        while (!link.q.empty()) {
            Link::Frame f = link.pop();
            (f.to ? b : a).nic->on_frame(f.bytes.data(), f.bytes.size());
        }
    };
    deliver();
    const uint64_t held = b.counter(RNIC_CNT_INDEX_LINK_TX_HELD),
                   drops = b.counter(RNIC_CNT_INDEX_LINK_TX_DROPS);
    // every frame B sent is an ACK of one size: the hold took what fits, and no more
    const size_t ack_len =
        ROCE_ETH_LEN + ROCE_IPV4_LEN + ROCE_UDP_LEN + ROCE_BTH_LEN + ROCE_AETH_LEN + ROCE_ICRC_LEN;
    EXPECT_EQ(held, kHold / ack_len);
    EXPECT_GT(drops, 0u) << "held " << held;
    EXPECT_EQ(held + drops, b.counter(RNIC_CNT_INDEX_ACKS_TX));
    EXPECT_EQ(b.counter(RNIC_CNT_INDEX_LINK_BACKPRESSURE), 1u);
    EXPECT_TRUE(b.tx_waiting);
    // the link takes frames again: the held ACKs go out in order, the dropped ones are made up
    // for by the requester's retransmission (timer) and the responder's re-ACK of duplicates
    link.blocked[1] = false;
    b.tx_waiting = b.nic->tx_resume();
    std::vector<struct rnic_cqe> got;
    for (unsigned step = 0; step < 100000 && got.size() < 16; step++) {
        deliver();
        auto v = a.poll(cqa);
        got.insert(got.end(), v.begin(), v.end());
        if (got.size() >= 16 || !link.q.empty()) continue;
        const uint64_t d = std::min(a.nic->next_deadline_ns(), b.nic->next_deadline_ns());
        if (d == UINT64_MAX) break;
        clock = std::max(clock + 1, d);
        a.host.clock_ns = b.host.clock_ns = clock;
        a.nic->poll();
        b.nic->poll();
    }
    ASSERT_EQ(got.size(), 16u);
    for (unsigned i = 0; i < 16; i++) {
        EXPECT_EQ(got[i].wr_id, i);
        EXPECT_EQ(got[i].status, RNIC_WC_SUCCESS);
    }
    EXPECT_EQ(std::memcmp(b.mem(bufb), a.mem(bufa), 1 << 20), 0);
    EXPECT_EQ(b.counter(RNIC_CNT_INDEX_LINK_TX_DROPS), drops); // only the hold dropped
    EXPECT_GT(a.counter(RNIC_CNT_INDEX_TIMEOUTS), 0u);
    EXPECT_GT(b.counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
}

} // namespace
