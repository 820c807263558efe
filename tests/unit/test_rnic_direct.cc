// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicDirect: the direct path (docs/rnic.md "Direct
// path", hw/rnic/rnic_direct.cc). The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "pmem.h"
#include "pmem_capi.h"
#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

// ---- the direct path (docs/rnic.md "Direct path"): READs copied from the peer's RAM file ----

// What rk_rmem_direct_run gives the two nodes: each node's RAM-file tail (its published table),
// the bridge's eth_watched word, and the answer of the remote memory (OK: run the copy on the
// peer's RAM; NO_DIRECT or UNREACHABLE: the device must take the wire).
struct DirectWorld {
    std::vector<uint8_t> tail[2];
    uint8_t *ram[2] = {};
    uint64_t watched = 0;
    int answer = RK_RMEM_OK;
    unsigned runs = 0;
    DirectWorld()
    {
        for (auto &t : tail)
            t.assign(RK_RMEM_TAIL_SIZE, 0);
    }
    RnicConfig config(unsigned self)
    {
        RnicConfig c;
        c.direct.own = reinterpret_cast<rnic_pub *>(tail[self].data() + RK_RMEM_TAIL_RNIC_OFF);
        c.direct.own_bytes = RK_RMEM_TAIL_RNIC_SIZE;
        c.direct.node = self;
        c.direct.run = [this, self](unsigned node, rk_rmem_direct_fn fn, void *op, int *ret) -> int {
            if (node > 1 || node == self || answer == RK_RMEM_NO_DIRECT) return RK_RMEM_NO_DIRECT;
            if (answer != RK_RMEM_OK) return answer;
            runs++;
            const rk_rmem_view v{ram[node], kBase, kRam, tail[node].data(), watched};
            *ret = fn(op, &v);
            return RK_RMEM_OK;
        };
        return c;
    }
};

struct DirectPair {
    DirectWorld w;
    Pair p;
    explicit DirectPair(uint32_t b_access = RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE)
        : p(1024, 10, 7, b_access, RNIC_QPS_RTS, w.config(0), w.config(1))
    {
        w.ram[0] = p.a.host.ram.data();
        w.ram[1] = p.b.host.ram.data();
        fill(p.b.mem(p.bufb), Pair::kBuf, 11);
    }
    uint64_t direct_reads() { return p.a.counter(RNIC_CNT_INDEX_DIRECT_READS); }
    // one signaled READ of len bytes from b's buffer + roff into a's buffer + loff; its CQE
    struct rnic_cqe read(uint64_t roff, uint32_t len, uint64_t loff = 0, uint32_t rkey = 0)
    {
        p.a.post_send(p.qa,
                      wqe(RNIC_WR_READ, 7, p.bufa + loff, len, p.keya, p.bufb + roff, rkey ? rkey : p.keyb));
        auto e = p.wait_a(1);
        EXPECT_EQ(e.size(), 1u);
        return e.empty() ? rnic_cqe{} : e[0];
    }
};

TEST(RnicDirect, ReadsCopyFromThePeersRamWithoutAFrameAndTheWireStaysInStep)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t sent0 = p.link.sent;
    const uint32_t sizes[] = {1, 8, 4096 + 7, 65536, kDirectMax};
    for (uint32_t len : sizes) {
        std::memset(p.a.mem(p.bufa), 0, len);
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, len, p.bufa, len, p.keya, p.bufb + 3, p.keyb));
        auto e = p.a.poll(p.cqa); // done within the doorbell: no frame to wait for
        ASSERT_EQ(e.size(), 1u) << len;
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(e[0].opcode, RNIC_CQE_OP_READ);
        EXPECT_EQ(e[0].wr_id, len);
        EXPECT_EQ(e[0].byte_len, len);
        EXPECT_GT(e[0].modeled_ns, 0u); // the timing model's figure, as on the wire
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb + 3), len), 0) << len;
    }
    EXPECT_EQ(p.link.sent, sent0) << "no frame left node 0";
    EXPECT_EQ(d.direct_reads(), std::size(sizes));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_READS), std::size(sizes));
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_WR_COMPLETED), std::size(sizes));
    // longer than kDirectMax: the wire, same data
    auto e = d.read(5, kDirectMax + 1);
    EXPECT_EQ(e.status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb + 5), kDirectMax + 1), 0);
    EXPECT_GT(p.link.sent, sent0);
    EXPECT_EQ(d.direct_reads(), std::size(sizes));
    // A READ behind a WRITE still in flight (too long for the direct path) goes on the wire
    // behind it (it must see the WRITE): the direct path would read the old bytes.
    fill(p.a.mem(p.bufa + 0x100000), kDirectMax + 100, 99);
    p.a.post_send(
        p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa + 0x100000, kDirectMax + 100, p.keya, p.bufb + 0x200000, p.keyb));
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + 0x180000, 3000, p.keya, p.bufb + 0x200000, p.keyb));
    auto two = p.wait_a(2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(two[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x180000), p.a.mem(p.bufa + 0x100000), 3000), 0);
    EXPECT_EQ(d.direct_reads(), std::size(sizes));
    // the PSNs stayed in step on both sides: no sequence NAK, no retransmission
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_SEQ_NAKS_RX), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SEQ_NAKS_TX), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
    // alone again: direct
    EXPECT_EQ(d.read(0x200000, 3000, 0x1c0000).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x1c0000), p.a.mem(p.bufa + 0x100000), 3000), 0);
    EXPECT_EQ(d.direct_reads(), std::size(sizes) + 1);
    // unsignaled: no CQE, the data is there; the next signaled one completes alone
    fill(p.b.mem(p.bufb), 64, 3);
    struct rnic_send_wqe u = wqe(RNIC_WR_READ, 8, p.bufa, 64, p.keya, p.bufb, p.keyb);
    u.flags = 0;
    p.a.post_send(p.qa, u);
    EXPECT_TRUE(p.a.poll(p.cqa).empty());
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb), 64), 0);
    EXPECT_EQ(d.read(64, 64, 64).wr_id, 7u);
    EXPECT_EQ(d.direct_reads(), std::size(sizes) + 3);
}

TEST(RnicDirect, WritesCopyIntoThePeersRamWithoutAFrame)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t sent0 = p.link.sent;
    const uint32_t sizes[] = {1, 8, 4096 + 7, kDirectMax};
    uint64_t n = 0;
    for (uint32_t len : sizes) {
        fill(p.a.mem(p.bufa), len, len);
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, len, p.bufa, len, p.keya, p.bufb + 5, p.keyb));
        auto e = p.a.poll(p.cqa);
        ASSERT_EQ(e.size(), 1u) << len;
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(e[0].opcode, RNIC_CQE_OP_WRITE);
        EXPECT_EQ(e[0].byte_len, len);
        EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + 5), p.a.mem(p.bufa), len), 0) << len;
        n++;
    }
    EXPECT_EQ(p.link.sent, sent0) << "no frame left node 0";
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_WRITES), n);
    // then a READ of what was written, and a SEND on the wire: the transport is in step
    EXPECT_EQ(d.read(5, 4096, 0x100000).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x100000), p.b.mem(p.bufb + 5), 4096), 0);
    p.b.post_recv(p.qb, 9, p.bufb + 0x300000, 100, p.keyb);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 3, p.bufa, 100, p.keya));
    auto r = p.wait_b(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb + 0x300000), p.a.mem(p.bufa), 100), 0);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_SEQ_NAKS_RX), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
    // an MR without remote write: the wire, which NAKs it; nothing written
    const uint64_t ro = p.b.alloc(4096);
    std::memset(p.b.mem(ro), 0x5a, 4096);
    const uint32_t rokey = p.b.mr(p.pdb, ro, 4096, RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_READ);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 4, p.bufa, 64, p.keya, ro, rokey));
    auto e = p.wait_a(2); // the SEND's, collected while waiting for node 1's, and this one
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].wr_id, 3u);
    EXPECT_EQ(e[1].wr_id, 4u);
    EXPECT_EQ(e[1].status, RNIC_WC_REM_ACCESS_ERR);
    EXPECT_EQ(p.b.mem(ro)[0], 0x5a);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), n);
}

// A peer's direct WRITE holds its busy word while it copies: the owner changes its table (here:
// deregisters the MR, after which the guest may reuse the pages) only once the word is clear,
// however long that takes (counted once a second). A word whose holder is no longer that live
// incarnation (it died, or reconnected) is cleared, while the owner's view of the table is valid.
TEST(RnicDirect, TheOwnerWaitsForAPeersWriteInProgressAndClearsADeadOnesWord)
{
    DirectWorld w;
    auto live = std::make_unique<rkf_live_table>();
    live->magic = RKF_LIVE_MAGIC;
    live->node[0] = (7ull << 1) | RKF_LIVE_UP; // node 0, generation 7, up
    live->node[1] = (3ull << 1) | RKF_LIVE_UP;
    RnicConfig ca = w.config(0), cb = w.config(1);
    ca.direct.live = cb.direct.live = live.get();
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, ca, cb);
    w.ram[0] = p.a.host.ram.data();
    w.ram[1] = p.b.host.ram.data();
    auto *pub = reinterpret_cast<rnic_pub *>(w.tail[1].data() + RK_RMEM_TAIL_RNIC_OFF);
    auto busy0 = [&] { return __atomic_load_n(&pub->busy[0], __ATOMIC_SEQ_CST); };
    auto set_busy0 = [&](uint64_t v) { __atomic_store_n(&pub->busy[0], v, __ATOMIC_SEQ_CST); };
    // a WRITE as node 0 does it holds node 0's liveness word, and clears it when done
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 64, p.keya, p.bufb, p.keyb));
    ASSERT_EQ(p.a.poll(p.cqa).size(), 1u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), 1u);
    EXPECT_EQ(busy0(), 0u);
    // a table change in a thread of its own (the owner's vCPU), done when it returns
    auto change = [&](std::atomic<bool> &done) {
        return std::thread([&] {
            const uint64_t buf = p.b.alloc(4096);
            p.b.mr(p.pdb, buf, 4096);
            done = true;
        });
    };
    // node 0 in the middle of a copy for over a second: the deregistration waits until it is done
    set_busy0(live->node[0]);
    std::atomic<bool> done{false};
    std::thread dereg([&] {
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_DEREG_MR;
        c.handle = p.keyb;
        EXPECT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
        done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    EXPECT_FALSE(done.load()) << "the table changed under a WRITE in progress";
    EXPECT_EQ(__atomic_load_n(&pub->seq, __ATOMIC_ACQUIRE) % 2, 1u) << "odd: the owner is changing it";
    set_busy0(0);
    dereg.join();
    EXPECT_TRUE(done.load());
    EXPECT_EQ(pub->seq % 2, 0u);
    EXPECT_EQ(pub->mr[RNIC_KEY_INDEX(p.keyb)].key, 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DIRECT_WAIT_STALLS), 1u) << "a second of waiting, counted";
    // a holder that died mid-copy and did not come back (the bridge cleared its UP bit): cleared
    set_busy0(live->node[0]);
    live->node[0] = 7ull << 1;
    {
        std::atomic<bool> d{false};
        change(d).join();
    }
    EXPECT_EQ(busy0(), 0u);
    // one that reconnected (generation 8): cleared too
    set_busy0(live->node[0] | RKF_LIVE_UP);
    live->node[0] = (8ull << 1) | RKF_LIVE_UP;
    {
        std::atomic<bool> d{false};
        change(d).join();
    }
    EXPECT_EQ(busy0(), 0u);
    // while the owner's view of the table is not valid (its link down), nothing is cleared
    set_busy0((7ull << 1) | RKF_LIVE_UP);
    __atomic_store_n(&live->magic, 0u, __ATOMIC_SEQ_CST);
    {
        std::atomic<bool> d{false};
        std::thread t = change(d);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_FALSE(d.load());
        __atomic_store_n(&live->magic, RKF_LIVE_MAGIC,
                         __ATOMIC_SEQ_CST); // back: node 0 is generation 8 now: cleared
        t.join();
    }
    EXPECT_EQ(busy0(), 0u);
    // a requester whose own word is not up (its link is down) does not WRITE directly
    live->node[0] = 8ull << 1;
    const uint64_t before = p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES);
    const uint32_t k2 = p.b.mr(p.pdb, p.bufb, 4096);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 2, p.bufa, 64, p.keya, p.bufb, k2));
    auto e = p.wait_a(1);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), p.a.mem(p.bufa), 64), 0);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), before);
}

TEST(RnicDirect, PageListReadsMatchTheWire)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t pg[3] = {p.b.alloc(4096), p.b.alloc(4096), p.b.alloc(4096)};
    const uint64_t list = p.b.alloc(24);
    const uint64_t order[3] = {pg[2], pg[0], pg[1]};
    std::memcpy(p.b.mem(list), order, 24);
    struct rnic_cmd c = {};
    c.opcode = RNIC_CMD_REG_MR;
    c.handle = p.pdb;
    c.params.mr = {0x70000800, 3 * 4096 - 0x800, list, 3, RNIC_ACCESS_ALL, 12, 0, 0, 0};
    ASSERT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
    for (uint64_t a : pg)
        fill(p.b.mem(a), 4096, uint32_t(a));
    // IOVA 0x70000800 + 100 is entry 0 (pg[2]) at 0x800 + 100, then pg[0], then pg[1]
    std::vector<uint8_t> want;
    want.insert(want.end(), p.b.mem(pg[2] + 0x800 + 100), p.b.mem(pg[2]) + 4096);
    want.insert(want.end(), p.b.mem(pg[0]), p.b.mem(pg[0]) + 4096);
    want.insert(want.end(), p.b.mem(pg[1]), p.b.mem(pg[1]) + 1000);
    p.a.post_send(p.qa,
                  wqe(RNIC_WR_READ, 1, p.bufa, uint32_t(want.size()), p.keya, 0x70000800 + 100, c.out1));
    auto e = p.a.poll(p.cqa);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), want.data(), want.size()), 0);
    EXPECT_EQ(d.direct_reads(), 1u);
    // deregistered: the READ goes on the wire, which refuses it
    struct rnic_cmd dc = {};
    dc.opcode = RNIC_CMD_DEREG_MR;
    dc.handle = c.out1;
    ASSERT_EQ(p.b.cmd(dc), RNIC_CMD_ST_OK);
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa, 64, p.keya, 0x70000800 + 100, c.out1));
    auto f = p.wait_a(1);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].status, RNIC_WC_REM_ACCESS_ERR);
    EXPECT_EQ(d.direct_reads(), 1u);
}

// Only the responder QP's connected peer may use it directly: another QP of the requester's node
// (another user's, aimed at the victim's QP and MR) takes the wire, where it lacks the
// connection's PSN and gets nothing; on the direct path it read and wrote the victim's memory.
TEST(RnicDirect, OnlyTheResponderQpsConnectedPeerIsServed)
{
    DirectPair d;
    Pair &p = d.p;
    // the intruder: a QP of its own on node 0, pointed at b's QP, with its own first PSN
    auto intruder = [&](uint32_t psn) {
        Node::Qp q = p.a.create_qp(p.pda, p.cqa, p.cqa);
        p.a.connect(q, 1, p.qb.qpn, 1024, 1, 1, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS,
                    psn);
        return q;
    };
    Node::Qp x = intruder(0x123456);
    std::memset(p.a.mem(p.bufa), 0, 4096);
    p.a.post_send(x, wqe(RNIC_WR_READ, 1, p.bufa, 4096, p.keya, p.bufb, p.keyb));
    auto e = p.wait_a(1);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_NE(e[0].status, RNIC_WC_SUCCESS);
    std::vector<uint8_t> zero(4096, 0);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), zero.data(), 4096), 0)
        << "the victim's bytes reached the intruder";
    Node::Qp y = intruder(0x654321);
    std::vector<uint8_t> before(p.b.mem(p.bufb), p.b.mem(p.bufb) + 4096);
    fill(p.a.mem(p.bufa), 4096, 77);
    p.a.post_send(y, wqe(RNIC_WR_WRITE, 2, p.bufa, 4096, p.keya, p.bufb, p.keyb));
    p.wait_a(1);
    EXPECT_EQ(std::memcmp(p.b.mem(p.bufb), before.data(), 4096), 0)
        << "the intruder wrote the victim's memory";
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_READS), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_READS), 0u);
    // the connected peer still is served directly
    EXPECT_EQ(d.read(0, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 1u);
}

// Every check the responder makes is made on the direct path too: what it refuses goes on the
// wire and gets the wire's answer; what the bridge must see (eth_watched) goes on the wire.
TEST(RnicDirect, WhatTheDirectPathRefusesGetsTheWiresAnswer)
{
    {
        SCOPED_TRACE("bad rkey");
        DirectPair d;
        EXPECT_EQ(d.read(0, 64, 0, d.p.keyb + 1).status, RNIC_WC_REM_ACCESS_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("beyond the MR");
        DirectPair d;
        EXPECT_EQ(d.read(Pair::kBuf - 4, 8).status, RNIC_WC_REM_ACCESS_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the MR does not allow remote READ");
        DirectPair d;
        const uint64_t buf = d.p.b.alloc(4096);
        const uint32_t key = d.p.b.mr(d.p.pdb, buf, 4096, RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, buf, key));
        auto e = d.p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_REM_ACCESS_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the responder QP does not take remote READs");
        DirectPair d(RNIC_ACCESS_REMOTE_WRITE);
        EXPECT_EQ(d.read(0, 64).status, RNIC_WC_REM_INV_REQ_ERR);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the responder QP is still in RTR (its first packet raises COMM_EST)");
        DirectWorld w;
        Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTR, w.config(0),
               w.config(1));
        w.ram[0] = p.a.host.ram.data();
        w.ram[1] = p.b.host.ram.data();
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 1, p.bufa, 64, p.keya, p.bufb, p.keyb));
        auto e = p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_READS), 0u);
        EXPECT_GT(w.runs, 0u);
    }
    {
        SCOPED_TRACE("the responder QP is in the error state");
        DirectPair d;
        struct rnic_cmd_modify_qp m = {};
        m.attr_mask = RNIC_QP_ATTR_STATE;
        m.state = RNIC_QPS_ERR;
        ASSERT_EQ(d.p.b.modify(d.p.qb.qpn, m), RNIC_CMD_ST_OK);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, d.p.bufb, d.p.keyb));
        auto e = d.p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_RETRY_EXC_ERR) << "frames to an error QP are dropped";
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    for (uint64_t watched : {1ull << 0, 1ull << 1}) {
        SCOPED_TRACE("the bridge watches node " + std::to_string(watched >> 1));
        DirectPair d;
        d.w.watched = watched;
        const uint64_t sent0 = d.p.link.sent;
        EXPECT_EQ(d.read(0, 4000).status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(d.p.a.mem(d.p.bufa), d.p.b.mem(d.p.bufb), 4000), 0);
        EXPECT_GT(d.p.link.sent, sent0);
        EXPECT_EQ(d.direct_reads(), 0u);
        d.w.watched = 1ull << 2; // another node's: direct again
        EXPECT_EQ(d.read(0, 4000).status, RNIC_WC_SUCCESS);
        EXPECT_EQ(d.direct_reads(), 1u);
    }
    for (int answer : {int(RK_RMEM_NO_DIRECT), int(RK_RMEM_UNREACHABLE)}) {
        SCOPED_TRACE("remote memory answers " + std::to_string(answer));
        DirectPair d;
        d.w.answer = answer;
        EXPECT_EQ(d.read(8, 100).status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(d.p.a.mem(d.p.bufa), d.p.b.mem(d.p.bufb + 8), 100), 0);
        EXPECT_EQ(d.direct_reads(), 0u);
    }
    {
        SCOPED_TRACE("the responder is disabled, then enabled: the wire's retransmission gets it");
        DirectPair d;
        d.p.b.nic->ctrl_write(RNIC_REG_CTRL, 0, 4);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, d.p.bufb, d.p.keyb));
        EXPECT_TRUE(d.p.a.poll(d.p.cqa).empty());
        EXPECT_EQ(d.direct_reads(), 0u);
        d.p.run([&] { return d.p.b.counter(RNIC_CNT_INDEX_RX_DISABLED) > 0; });
        d.p.b.nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE, 4);
        auto e = d.p.wait_a(1);
        ASSERT_EQ(e.size(), 1u);
        EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(d.p.a.mem(d.p.bufa), d.p.b.mem(d.p.bufb), 64), 0);
    }
    {
        SCOPED_TRACE("the responder's VM is stopped");
        DirectPair d;
        d.p.b.nic->pause(true);
        d.p.a.post_send(d.p.qa, wqe(RNIC_WR_READ, 1, d.p.bufa, 64, d.p.keya, d.p.bufb, d.p.keyb));
        EXPECT_TRUE(d.p.a.poll(d.p.cqa).empty());
        EXPECT_EQ(d.direct_reads(), 0u);
        d.p.b.nic->pause(false);
        EXPECT_EQ(d.p.wait_a(1).size(), 1u);
    }
}

// The published page lists have a fixed room: an MR that does not fit is published without its
// pages (its READs take the wire) and gets them once a deregistration made room.
TEST(RnicDirect, MrsBeyondThePublishedRoomTakeTheWireUntilThereIsRoom)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t cap = (RK_RMEM_TAIL_RNIC_SIZE - RNIC_PUB_PAGES_OFF) / 8;
    // page lists over the same 4 physical pages again and again
    const uint64_t phys = p.b.alloc(4 * 4096);
    fill(p.b.mem(phys), 4 * 4096, 5);
    auto reg = [&](uint64_t iova, uint32_t npages) {
        const uint64_t list = p.b.alloc(8ull * npages, 8);
        for (uint32_t i = 0; i < npages; i++) {
            const uint64_t a = phys + 4096ull * (i % 4);
            std::memcpy(p.b.mem(list + 8ull * i), &a, 8);
        }
        struct rnic_cmd c = {};
        c.opcode = RNIC_CMD_REG_MR;
        c.handle = p.pdb;
        c.params.mr = {iova, 4096ull * npages, list, npages, RNIC_ACCESS_ALL, 12, 0, 0, 0};
        EXPECT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
        return c.out1;
    };
    const uint32_t big = reg(0x100000000ull, uint32_t(cap - 10));
    const uint32_t small = reg(0x200000000ull, 20); // does not fit beside it
    auto direct_after = [&](uint32_t key, uint64_t iova) {
        const uint64_t before = d.direct_reads();
        p.a.post_send(p.qa, wqe(RNIC_WR_READ, 1, p.bufa, 6000, p.keya, iova + 4096 + 100, key));
        auto e = p.wait_a(1);
        EXPECT_EQ(e.size(), 1u);
        EXPECT_EQ(e.empty() ? 99u : e[0].status, RNIC_WC_SUCCESS);
        // page 1 of the list is phys page 1, page 2 is phys page 2
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(phys + 4096 + 100), 6000), 0);
        return d.direct_reads() > before;
    };
    EXPECT_TRUE(direct_after(big, 0x100000000ull));
    EXPECT_FALSE(direct_after(small, 0x200000000ull)) << "published without its pages";
    struct rnic_cmd dc = {};
    dc.opcode = RNIC_CMD_DEREG_MR;
    dc.handle = big;
    ASSERT_EQ(p.b.cmd(dc), RNIC_CMD_ST_OK);
    EXPECT_TRUE(direct_after(small, 0x200000000ull)) << "room again after the deregistration";
}

TEST(RnicDirect, ResetAndLoadRepublish)
{
    DirectPair d;
    Pair &p = d.p;
    EXPECT_EQ(d.read(0, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 1u);
    // the responder's state saved and loaded into itself: the table is the same afterwards
    RnicSnapshot s = p.b.nic->save();
    std::string why;
    ASSERT_TRUE(p.b.nic->load(s, &why)) << why;
    EXPECT_EQ(d.read(64, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 2u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_SERVED_DIRECT_READS), 2u) << "counted across the load";
    // reset: no QP, no MR, disabled; nothing published that a peer could read
    p.b.nic->reset();
    const auto *pub = reinterpret_cast<const rnic_pub *>(d.w.tail[1].data() + RK_RMEM_TAIL_RNIC_OFF);
    EXPECT_EQ(pub->magic, RNIC_PUB_MAGIC);
    EXPECT_EQ(pub->flags, 0u);
    EXPECT_EQ(pub->seq % 2, 0u);
    for (const auto &q : pub->qp)
        EXPECT_EQ(q.pdn, 0u);
    for (const auto &m : pub->mr)
        ASSERT_EQ(m.key, 0u);
}

// An MR over persistent memory (docs/rnic.md "Persistent memory") is published without its pages:
// its WRITEs take the wire, into the responder's NIC buffer, and so do its READs, which drain it.
TEST(RnicDirect, PersistentMemoryTakesTheWire)
{
    DirectPair d;
    Pair &p = d.p;
    const uint64_t pm = p.b.alloc(65536);
    pmem::Config c;
    c.base = pm;
    c.size = 65536;
    c.mode = pmem::Mode::Adr;
    c.nic_delay_ns = 1000000;
    std::string err;
    auto core = pmem::Pmem::create(p.b.host.host(), c, nullptr, &err);
    ASSERT_TRUE(core) << err;
    pmem::Pmem *pc = core.get();
    p.b.host.nvm = [pc](unsigned op, uint64_t addr, const void *data, uint64_t len) {
        return rk_pmem_nvm(pc, op, addr, data, len);
    };
    const uint32_t key = p.b.mr(p.pdb, pm, 65536);
    fill(p.a.mem(p.bufa), 4096, 5);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 4096, p.keya, pm + 64, key));
    auto e = p.wait_a(1);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_DIRECT_WRITES), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITES), 4u); // MTU 1024
    EXPECT_EQ(core->nic_pending(), 4u);
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, p.bufa + 0x100000, 4096, p.keya, pm + 64, key));
    e = p.wait_a(1);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 0u);
    EXPECT_EQ(std::memcmp(p.a.mem(p.bufa + 0x100000), p.a.mem(p.bufa), 4096), 0);
    EXPECT_EQ(core->nic_pending(), 0u);
    // the plain RAM MR is still served directly
    EXPECT_EQ(d.read(0, 64).status, RNIC_WC_SUCCESS);
    EXPECT_EQ(d.direct_reads(), 1u);
    p.b.host.nvm = [](unsigned, uint64_t, const void *, uint64_t) { return RK_DECODE_ERROR; };
}

} // namespace
