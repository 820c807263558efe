// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicModel: what the responder models for an on-path
// serializer's effects (docs/rnic.md "Rate ceilings"): the atomic serializer and the per-QP
// message-rate ceiling (modeled waits, exact counters, semantics unchanged). The rig is
// rnic_rig.h; its clock stands still unless a test moves it, so a burst reaches the responder
// in one receive pass.
#include <gtest/gtest.h>

#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

RnicConfig ceilings(uint32_t atomic_host_ns, uint32_t atomic_dm_ns, uint32_t qp_msg_ns)
{
    RnicConfig c;
    c.timing.atomic_host_ns = atomic_host_ns;
    c.timing.atomic_dm_ns = atomic_dm_ns;
    c.timing.qp_msg_ns = qp_msg_ns;
    return c;
}

// n CAS on one word in one burst (a chain: CAS(i, i + 1)): every one succeeds and fetches i
// whatever the ceilings; the responder's counters are the serializer's arithmetic.
void cas_burst(Pair &p, unsigned n)
{
    const uint64_t word = p.bufb + 4096;
    std::memset(p.b.mem(word), 0, 8);
    for (unsigned i = 0; i < n; i++) {
        struct rnic_send_wqe w = wqe(RNIC_WR_CMP_SWAP, i, p.bufa + 8 * i, 8, p.keya, word, p.keyb);
        w.compare = i;
        w.swap_add = i + 1;
        p.a.post_send(p.qa, w);
    }
    auto c = p.wait_a(n);
    ASSERT_EQ(c.size(), n);
    for (unsigned i = 0; i < n; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        uint64_t old;
        std::memcpy(&old, p.a.mem(p.bufa + 8 * i), 8);
        EXPECT_EQ(old, i) << i;
    }
    uint64_t v;
    std::memcpy(&v, p.b.mem(word), 8);
    EXPECT_EQ(v, n);
}

uint64_t tri(uint64_t n) // 0 + 1 + ... + (n - 1)
{
    return n * (n - 1) / 2;
}

// A burst of CAS in one receive pass: the k-th starts on its QP at k * qp-msg-ns and on the
// serializer at k * atomic-host-ns (the serializer is the slower): the waits are exact sums.
TEST(RnicModel, AtomicBurstWaitsForTheSerializer)
{
    const unsigned n = 40;
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, ceilings(345, 111, 55));
    p.set_clock(1000000000ull);
    cas_burst(p, n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS_DELAYED), n - 1);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_BUSY_NS), uint64_t(n) * 345);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_WAIT_NS), (345 - 55) * tri(n));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_NS), (345 - 55) * tri(n) + uint64_t(n) * 345);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_MSGS_DELAYED), n - 1);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_MSG_WAIT_NS), 55 * tri(n));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ACK_DELAY_NS), 345 * tri(n)) << "both waits: k * 345 each";
    // the requester is no responder: nothing modeled there
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_CEIL_ATOMICS), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_CEIL_MSG_WAIT_NS), 0u);
}

// WRITEs in one pass wait only for their QP's message-rate ceiling; the serializer stays idle.
TEST(RnicModel, WriteBurstWaitsOnlyForTheQpCeiling)
{
    const unsigned n = 30;
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, ceilings(345, 111, 55));
    p.set_clock(1000000000ull);
    fill(p.a.mem(p.bufa), 8 * n, 7);
    for (unsigned i = 0; i < n; i++)
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, i, p.bufa + 8 * i, 8, p.keya, p.bufb + 8 * i, p.keyb));
    auto c = p.wait_a(n);
    ASSERT_EQ(c.size(), n);
    for (auto &e : c)
        EXPECT_EQ(e.status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb), 8 * n), 0);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_BUSY_NS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_MSGS_DELAYED), n - 1);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_MSG_WAIT_NS), 55 * tri(n));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ACK_DELAY_NS), 55 * tri(n));
}

// Ceilings off (0): the same results, nothing modeled; atomics still counted.
TEST(RnicModel, CeilingsOffModelNothing)
{
    const unsigned n = 20;
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, ceilings(0, 0, 0));
    p.set_clock(1000000000ull);
    cas_burst(p, n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS), n);
    for (unsigned i : {RNIC_CNT_INDEX_CEIL_ATOMICS_DELAYED, RNIC_CNT_INDEX_CEIL_ATOMIC_NS,
                       RNIC_CNT_INDEX_CEIL_ATOMIC_WAIT_NS, RNIC_CNT_INDEX_CEIL_ATOMIC_BUSY_NS,
                       RNIC_CNT_INDEX_CEIL_MSGS_DELAYED, RNIC_CNT_INDEX_CEIL_MSG_WAIT_NS,
                       RNIC_CNT_INDEX_CEIL_ACK_DELAY_NS})
        EXPECT_EQ(p.b.counter(i), 0u) << i;
}

// Requests far apart (beyond the receive pass and the service times) never wait.
TEST(RnicModel, SpacedAtomicsNeverWait)
{
    const unsigned n = 10;
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, ceilings(345, 111, 55));
    p.set_clock(1000000000ull);
    const uint64_t word = p.bufb + 4096;
    for (unsigned i = 0; i < n; i++) {
        p.set_clock(p.clock + 1000000);
        struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, i, p.bufa + 8 * i, 8, p.keya, word, p.keyb);
        w.swap_add = 1;
        p.a.post_send(p.qa, w);
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    }
    uint64_t v;
    std::memcpy(&v, p.b.mem(word), 8);
    EXPECT_EQ(v, n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_BUSY_NS), uint64_t(n) * 345);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS_DELAYED), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ACK_DELAY_NS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_NS), uint64_t(n) * 345);
}

// Duplicates (loss, duplication, reordering) are answered from the responder resources, never
// re-executed: the serializer counts each atomic once.
TEST(RnicModel, DuplicatesAreNotServedTwice)
{
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, ceilings(345, 111, 55));
    p.link.rng.seed(3);
    p.link.drop = 0.05;
    p.link.dup = 0.05;
    p.link.reorder = 0.05;
    const unsigned n = 200;
    cas_burst(p, n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMICS), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_BUSY_NS), uint64_t(n) * 345);
}

} // namespace
