// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicModel: what the responder models for an on-path
// serializer's effects: the atomic serializer and the per-QP message-rate ceiling (docs/rnic.md
// "Rate ceilings": modeled waits, exact counters, semantics unchanged) and device memory
// ("Device memory": allocation, its MRs, remote access, copies, refusals, state). The rig is
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
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_MSN_ERRORS), 0u) << "loss, duplication, reordering: MSNs consistent";
}

// ---- device memory (docs/rnic.md "Device memory") ----

uint16_t dm_cmd(Node &n, uint16_t op, uint32_t handle, struct rnic_cmd_dm a, struct rnic_cmd *out = nullptr)
{
    struct rnic_cmd c = {};
    c.opcode = op;
    c.handle = handle;
    c.params.dm = a;
    const uint16_t st = n.cmd(c);
    if (out) *out = c;
    return st;
}

constexpr uint32_t kDmAccess =
    RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ | RNIC_ACCESS_REMOTE_ATOMIC;

// Allocate, register (zero-based), fill by DM_COPY, remote CAS / FETCH_ADD / WRITE / READ from
// the peer, copy back, then the refusals of a busy free and the free.
TEST(RnicModel, DeviceMemoryAllocRegisterRemoteAtomicsFree)
{
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, ceilings(345, 111, 0));
    p.set_clock(1000000000ull);
    EXPECT_EQ(p.b.reg(RNIC_REG_DM_SIZE), 256u << 10);
    struct rnic_cmd c;
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 100, 0, 0, 0, 0}, &c), RNIC_CMD_ST_OK);
    const uint32_t dm = c.handle;
    EXPECT_EQ(c.out0, 0u);
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 64, 0, 0, 0, 0}, &c), RNIC_CMD_ST_OK);
    EXPECT_EQ(c.out0, 128u) << "100 bytes take two 64-byte units";
    const uint32_t dm2 = c.handle;
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_REG_DM_MR, p.pdb, {0, 0, 128, dm, kDmAccess, 0, 0}, &c), RNIC_CMD_ST_OK);
    const uint32_t dkey = c.out1;
    // 5 at DM byte 8, through a copy from guest RAM
    const uint64_t five = 5, stage = p.bufb + 65536;
    std::memcpy(p.b.mem(stage), &five, 8);
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {stage, 8, 8, 0, 0, RNIC_DM_COPY_TO_DM, 0}), RNIC_CMD_ST_OK);
    struct rnic_send_wqe w = wqe(RNIC_WR_CMP_SWAP, 1, p.bufa, 8, p.keya, 8, dkey);
    w.compare = 5;
    w.swap_add = 9;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_CMP_SWAP, 2, p.bufa + 8, 8, p.keya, 8, dkey);
    w.compare = 5; // fails: 9 now
    w.swap_add = 77;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_FETCH_ADD, 3, p.bufa + 16, 8, p.keya, 8, dkey);
    w.swap_add = 1;
    p.a.post_send(p.qa, w);
    const uint64_t pattern = 0x1122334455667788ull;
    std::memcpy(p.a.mem(p.bufa + 64), &pattern, 8);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 4, p.bufa + 64, 8, p.keya, 120, dkey));
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 5, p.bufa + 128, 128, p.keya, 0, dkey));
    auto done = p.wait_a(5);
    ASSERT_EQ(done.size(), 5u);
    for (auto &e : done)
        EXPECT_EQ(e.status, RNIC_WC_SUCCESS) << e.wr_id;
    uint64_t r[3];
    std::memcpy(r, p.a.mem(p.bufa), 24);
    EXPECT_EQ(r[0], 5u);
    EXPECT_EQ(r[1], 9u);
    EXPECT_EQ(r[2], 9u);
    uint64_t rd[16];
    std::memcpy(rd, p.a.mem(p.bufa + 128), 128);
    EXPECT_EQ(rd[0], 0u) << "a new allocation is zeroed";
    EXPECT_EQ(rd[1], 10u);
    EXPECT_EQ(rd[15], pattern);
    // copy back to guest RAM
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {stage, 8, 8, 0, 0, RNIC_DM_COPY_FROM_DM, 0}),
              RNIC_CMD_ST_OK);
    uint64_t v;
    std::memcpy(&v, p.b.mem(stage), 8);
    EXPECT_EQ(v, 10u);
    // the device executed them (not the atomic unit), on the serializer's DM service time
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DM_ATOMICS), 3u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_CEIL_ATOMIC_BUSY_NS), 3u * 111);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DM_RX_BYTES), 8u) << "the WRITE";
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DM_COPY_BYTES), 16u);
    // the state carries the bytes and the allocations: overwrite, load, the old bytes are back
    const RnicSnapshot s = p.b.nic->save();
    const uint64_t junk = 0xdead;
    std::memcpy(p.b.mem(stage), &junk, 8);
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {stage, 8, 8, 0, 0, RNIC_DM_COPY_TO_DM, 0}), RNIC_CMD_ST_OK);
    std::string why;
    ASSERT_TRUE(p.b.nic->load(s, &why)) << why;
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {stage, 8, 8, 0, 0, RNIC_DM_COPY_FROM_DM, 0}),
              RNIC_CMD_ST_OK);
    std::memcpy(&v, p.b.mem(stage), 8);
    EXPECT_EQ(v, 10u);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_FREE_DM, dm, {}), RNIC_CMD_ST_BUSY) << "users survive the load";
    // a state whose MR points beyond its allocation is refused
    RnicSnapshot bad = s;
    for (auto &m : bad.mr)
        if (m.mr.dm) m.mr.length = 4096;
    EXPECT_FALSE(p.b.nic->load(bad, &why));
    // free: busy while the MR is there
    c = {};
    c.opcode = RNIC_CMD_DEREG_MR;
    c.handle = dkey;
    ASSERT_EQ(p.b.cmd(c), RNIC_CMD_ST_OK);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_FREE_DM, dm, {}), RNIC_CMD_ST_OK);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_FREE_DM, dm, {}), RNIC_CMD_ST_BAD_PARAM) << "twice";
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_FREE_DM, dm2, {}), RNIC_CMD_ST_OK);
}

// Bad sizes, offsets, ids, access and addresses are refused with a status; a remote access
// beyond a DM MR is a remote access error.
TEST(RnicModel, DeviceMemoryRefusals)
{
    Pair p;
    struct rnic_cmd c;
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 0, 0, 0, 0, 0}), RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, (256u << 10) + 1, 0, 0, 0, 0}), RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 64, 0, 0, 0, 1}), RNIC_CMD_ST_BAD_PARAM) << "reserved";
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 256u << 10, 0, 0, 0, 0}, &c), RNIC_CMD_ST_OK);
    const uint32_t dm = c.handle;
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 64, 0, 0, 0, 0}), RNIC_CMD_ST_NO_RESOURCE) << "full";
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_REG_DM_MR, p.pdb, {0, 0, 64, dm + 1, kDmAccess, 0, 0}),
              RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_REG_DM_MR, p.pdb, {0, (256u << 10) - 8, 16, dm, kDmAccess, 0, 0}),
              RNIC_CMD_ST_BAD_PARAM)
        << "beyond the allocation";
    EXPECT_EQ(
        dm_cmd(p.b, RNIC_CMD_REG_DM_MR, p.pdb, {0, 0, 64, dm, kDmAccess | RNIC_ACCESS_FLUSH_PERSIST, 0, 0}),
        RNIC_CMD_ST_BAD_ACCESS);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_REG_DM_MR, 999, {0, 0, 64, dm, kDmAccess, 0, 0}), RNIC_CMD_ST_BAD_PD);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {p.bufb, (256u << 10) - 4, 8, 0, 0, 0, 0}),
              RNIC_CMD_ST_BAD_PARAM);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {p.bufb, 0, 8, 0, 0, 7, 0}), RNIC_CMD_ST_BAD_PARAM) << "dir";
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, dm, {1ull << 50, 0, 8, 0, 0, 0, 0}), RNIC_CMD_ST_BAD_ADDR);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_DM_COPY, 0, {p.bufb, 0, 8, 0, 0, 0, 0}), RNIC_CMD_ST_BAD_PARAM) << "id 0";
    ASSERT_EQ(dm_cmd(p.b, RNIC_CMD_REG_DM_MR, p.pdb, {4096, 0, 64, dm, kDmAccess, 0, 0}, &c), RNIC_CMD_ST_OK);
    const uint32_t dkey = c.out1;
    // a CAS at the MR's last word + 8: outside it
    struct rnic_send_wqe w = wqe(RNIC_WR_CMP_SWAP, 1, p.bufa, 8, p.keya, 4096 + 64, dkey);
    p.a.post_send(p.qa, w);
    auto done = p.wait_a(1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, RNIC_WC_REM_ACCESS_ERR);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_DM_ATOMICS), 0u);
}

// ---- ACK coalescing (docs/rnic.md "ACK coalescing") ----

// Today's rule (ack_delay_ns 0): every request frame with AckReq is answered at the end of its
// receive; with ack_every 4 and a delay, one ACK per 4 requests, and a lone rest waits for the
// delay (the rig's clock runs to the responder's deadline). Every WRITE completes, data exact.
TEST(RnicModel, AckCoalescingEveryNOrOnTheTimer)
{
    for (uint32_t every : {1u, 4u}) {
        SCOPED_TRACE(every);
        RnicConfig cb;
        cb.rc.ack_every = every;
        cb.rc.ack_delay_ns = every > 1 ? 50000 : 0;
        Pair p(1024, 14, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, cb);
        p.set_clock(1000000000ull);
        const unsigned n = 11;
        fill(p.a.mem(p.bufa), 64 * n, 5);
        for (unsigned i = 0; i < n; i++)
            p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, i, p.bufa + 64 * i, 64, p.keya, p.bufb + 64 * i, p.keyb));
        auto c = p.wait_a(n);
        ASSERT_EQ(c.size(), n);
        for (auto &e : c)
            EXPECT_EQ(e.status, RNIC_WC_SUCCESS);
        EXPECT_EQ(std::memcmp(p.a.mem(p.bufa), p.b.mem(p.bufb), 64 * n), 0);
        const uint64_t acks = p.b.counter(RNIC_CNT_INDEX_ACKS_TX);
        if (every == 1) {
            EXPECT_EQ(acks, n);
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_ACKS_COALESCED), 0u);
            EXPECT_EQ(p.clock, 1000000000ull) << "no timer needed";
        } else {
            EXPECT_EQ(acks, 3u) << "after 4, after 8, and the last 3 on the timer";
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_ACKS_COALESCED), n - 3);
            EXPECT_GE(p.clock, 1000000000ull + 50000) << "the rest waited for the delay";
        }
        EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 0u);
    }
}

// ---- the MSN check (docs/rnic.md "MSN check") ----

// An ACK whose MSN claims more messages than were sent, or fewer than it acknowledges (behind
// what was already acknowledged), is dropped and counted; the requester's retransmission then gets a true ACK and every WR completes.
TEST(RnicModel, BadMsnIsCountedAndDropped)
{
    for (uint32_t forged : {7u, 0xFFFFFFu}) { // too many; behind (the previous MSN was 1)
        SCOPED_TRACE(forged);
        Pair p(1024, 8); // timeout 8: about 1 ms
        p.set_clock(1000000000ull);
        for (unsigned i = 0; i < 2; i++) {
            p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, i, p.bufa, 64, p.keya, p.bufb, p.keyb));
            bool forged_one = false;
            while (!p.link.q.empty()) {
                Link::Frame f = p.link.pop();
                if (f.to == 0 && i == 1 && !forged_one) { // the second WRITE's ACK
                    Packet pk;
                    ASSERT_EQ(parse_frame(f.bytes.data(), f.bytes.size(), pk), WireError::Ok);
                    ASSERT_EQ(pk.bth.opcode, ROCE_OP_ACK);
                    pk.aeth.msn = forged;
                    uint8_t out[256];
                    size_t len = 0;
                    ASSERT_EQ(build_frame(pk, out, sizeof(out), &len), WireError::Ok);
                    f.bytes.assign(out, out + len);
                    forged_one = true;
                }
                p.node(f.to).nic->on_frame(f.bytes.data(), f.bytes.size());
            }
            if (i == 1) {
                EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_MSN_ERRORS), 1u);
            }
            auto c = p.wait_a(1); // the second one: after a retransmission
            ASSERT_EQ(c.size(), 1u);
            EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        }
        EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_MSN_ERRORS), 1u);
        EXPECT_GE(p.a.counter(RNIC_CNT_INDEX_RETRANSMITS), 1u);
    }
}

// dm-size 0: no device memory; every allocation refused.
TEST(RnicModel, NoDeviceMemory)
{
    RnicConfig cb;
    cb.dm_size = 0;
    Pair p(1024, 10, 7, RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE, RNIC_QPS_RTS, {}, cb);
    EXPECT_EQ(p.b.reg(RNIC_REG_DM_SIZE), 0u);
    EXPECT_EQ(dm_cmd(p.b, RNIC_CMD_ALLOC_DM, 0, {0, 0, 64, 0, 0, 0, 0}), RNIC_CMD_ST_BAD_PARAM);
}

} // namespace
