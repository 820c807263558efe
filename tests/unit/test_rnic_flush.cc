// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicFlush: FLUSH (IBTA Memory Placement Extensions,
// docs/rnic.md "FLUSH"): placement before the response, persistence through the page list, the
// MR's flush flags. The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

// ---- FLUSH (IBTA Memory Placement Extensions): placement before the response ----

namespace {
struct rnic_send_wqe flush_wqe(uint64_t wr_id, uint64_t raddr, uint32_t rkey, uint32_t len, uint8_t placement,
                               uint8_t selectivity = ROCE_FETH_SEL_RANGE)
{
    struct rnic_send_wqe w = wqe(RNIC_WR_FLUSH, wr_id, 0, 0, 0, raddr, rkey);
    w.num_sge = 0;
    w.flush_len = len;
    w.flush_type = uint8_t(placement | (selectivity << ROCE_FETH_SEL_SHIFT));
    return w;
}
} // namespace

TEST(RnicFlush, FlushPersistenceWritesTheRangeBackAfterTheEarlierWrites)
{
    Pair p;
    std::vector<std::pair<uint64_t, uint64_t>> order; // persist calls, with the bytes in RAM then
    bool data_there = false;
    p.b.host.persist = [&](uint64_t addr, uint64_t len, uint64_t &synced) {
        order.push_back({addr, len});
        // the WRITE posted before the FLUSH is already in the target's RAM when it is persisted
        data_there = std::memcmp(p.b.mem(p.bufb + 1000), p.a.mem(p.bufa), 5000) == 0;
        synced += len;
        return RK_OK;
    };
    fill(p.a.mem(p.bufa), 5000, 3);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 5000, p.keya, p.bufb + 1000, p.keyb));
    p.a.post_send(p.qa, flush_wqe(2, p.bufb + 1000, p.keyb, 5000, ROCE_FETH_PLT_PERSIST));
    auto c = p.wait_a(2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(c[1].opcode, RNIC_CQE_OP_FLUSH);
    ASSERT_EQ(order.size(), 1u); // a PHYS MR: one contiguous piece
    EXPECT_EQ(order[0], std::make_pair(p.bufb + 1000, uint64_t(5000)));
    EXPECT_TRUE(data_there);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), 1u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSH_BYTES), 5000u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u);

    // global visibility only: no write-back, the bytes counted as flushed
    p.a.post_send(p.qa, flush_wqe(3, p.bufb, p.keyb, 64, ROCE_FETH_PLT_GLOBAL));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(order.size(), 1u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), 2u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSH_BYTES), 5064u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u);

    // selectivity "whole MR": the RETH range is ignored, the MR's is written back
    p.a.post_send(p.qa, flush_wqe(4, p.bufb + 8, p.keyb, 1, ROCE_FETH_PLT_GLOBAL | ROCE_FETH_PLT_PERSIST,
                                  ROCE_FETH_SEL_MR));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    ASSERT_EQ(order.size(), 2u);
    EXPECT_EQ(order[1], std::make_pair(p.bufb, uint64_t(Pair::kBuf)));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u + Pair::kBuf);

    // RAM with no backing file: the FLUSH succeeds (visibility), nothing is counted as persisted
    p.b.host.persist = [&](uint64_t, uint64_t, uint64_t &) { return RK_OK; };
    p.a.post_send(p.qa, flush_wqe(5, p.bufb, p.keyb, 4096, ROCE_FETH_PLT_PERSIST));
    c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 5000u + Pair::kBuf);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), 4u);
}

TEST(RnicFlush, FlushPersistenceFollowsThePageListAndAFailedWriteBackIsARemoteOpError)
{
    LoopNode ln;
    Node &n = ln.n;
    const uint64_t pg[2] = {n.alloc(4096), n.alloc(4096)};
    const uint32_t key = ln.page_list_mr(0x70000000, 8192, {pg[1], pg[0]}); // reversed
    ln.connect();
    auto &q1 = ln.q1;
    auto &cq = ln.cq;
    n.post_send(q1, flush_wqe(1, 0x70000000 + 4000, key, 200, ROCE_FETH_PLT_PERSIST));
    auto e = n.poll(cq);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    ASSERT_EQ(n.host.persisted.size(), 2u); // the range crosses from list entry 0 to entry 1
    EXPECT_EQ(n.host.persisted[0], std::make_pair(pg[1] + 4000, uint64_t(96)));
    EXPECT_EQ(n.host.persisted[1], std::make_pair(pg[0], uint64_t(104)));
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 200u);
    // the host cannot write it back: NAK remote operational error, the requester sees REM_OP_ERR
    n.host.persist = [](uint64_t, uint64_t, uint64_t &) { return RK_SLAVE_ERROR; };
    n.post_send(q1, flush_wqe(2, 0x70000000, key, 8, ROCE_FETH_PLT_PERSIST));
    e = n.poll(cq);
    ASSERT_GE(e.size(), 1u);
    EXPECT_EQ(e[0].wr_id, 2u);
    EXPECT_EQ(e[0].status, RNIC_WC_REM_OP_ERR);
    EXPECT_EQ(n.counter(RNIC_CNT_INDEX_FLUSHES), 1u);
}

TEST(RnicFlush, FlushIsRefusedWithoutTheMrsFlushFlagForEachPlacementBit)
{
    struct Case {
        uint32_t mr_access;
        uint8_t placement;
        bool ok;
    } cases[] = {
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_GLOBAL, ROCE_FETH_PLT_GLOBAL, true},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_GLOBAL, ROCE_FETH_PLT_PERSIST, false},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_PERSIST, ROCE_FETH_PLT_PERSIST, true},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_FLUSH_PERSIST, ROCE_FETH_PLT_GLOBAL | ROCE_FETH_PLT_PERSIST,
         false},
        {RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ, ROCE_FETH_PLT_GLOBAL,
         false},
    };
    for (const Case &k : cases) {
        Pair p;
        const uint64_t buf = p.b.alloc(4096);
        const uint32_t key = p.b.mr(p.pdb, buf, 4096, k.mr_access);
        p.a.post_send(p.qa, flush_wqe(1, buf, key, 64, k.placement));
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, k.ok ? RNIC_WC_SUCCESS : RNIC_WC_REM_ACCESS_ERR)
            << "access 0x" << std::hex << k.mr_access << " placement " << unsigned(k.placement);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_FLUSHES), k.ok ? 1u : 0u);
        EXPECT_EQ(p.b.host.persisted.size(), k.ok && (k.placement & ROCE_FETH_PLT_PERSIST) ? 1u : 0u);
    }
}

} // namespace
