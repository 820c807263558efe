// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicAtomics: COMPARE_SWAP, FETCH_ADD, ATOMIC WRITE and
// the extended atomics executed by the atomic unit in the device (docs/atomic-unit.md "In the
// RNIC"): every operation and size, refusals, bursts sharing the unit's window, the receive pass,
// exactly-once under loss and duplication, global atomicity with the CPU's atomics, the unit's
// properties. The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;

namespace {

TEST(RnicAtomics, AtomicsFlushAndAtomicWrite)
{
    Pair p;
    uint64_t v = 100;
    std::memcpy(p.b.mem(p.bufb + 64), &v, 8);
    struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, 1, p.bufa, 8, p.keya, p.bufb + 64, p.keyb);
    w.swap_add = 5;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_CMP_SWAP, 2, p.bufa + 8, 8, p.keya, p.bufb + 64, p.keyb);
    w.compare = 105;
    w.swap_add = 7;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_CMP_SWAP, 3, p.bufa + 16, 8, p.keya, p.bufb + 64, p.keyb);
    w.compare = 105; // fails now: the value is 7
    w.swap_add = 9;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_ATOMIC_WRITE, 4, 0, 0, 0, p.bufb + 128, p.keyb);
    w.num_sge = 0;
    w.swap_add = 0x1122334455667788ull;
    p.a.post_send(p.qa, w);
    w = wqe(RNIC_WR_FLUSH, 5, 0, 0, 0, p.bufb + 128, p.keyb);
    w.num_sge = 0;
    w.flush_len = 8;
    w.flush_type = ROCE_FETH_PLT_GLOBAL;
    p.a.post_send(p.qa, w);
    auto c = p.wait_a(5);
    ASSERT_EQ(c.size(), 5u);
    for (unsigned i = 0; i < 5; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, i + 1);
    }
    EXPECT_EQ(c[0].opcode, RNIC_CQE_OP_FETCH_ADD);
    EXPECT_EQ(c[1].opcode, RNIC_CQE_OP_CMP_SWAP);
    EXPECT_EQ(c[3].opcode, RNIC_CQE_OP_ATOMIC_WRITE);
    EXPECT_EQ(c[4].opcode, RNIC_CQE_OP_FLUSH);
    uint64_t r[3];
    std::memcpy(r, p.a.mem(p.bufa), 24);
    EXPECT_EQ(r[0], 100u);
    EXPECT_EQ(r[1], 105u);
    EXPECT_EQ(r[2], 7u);
    std::memcpy(&v, p.b.mem(p.bufb + 64), 8);
    EXPECT_EQ(v, 7u);
    std::memcpy(&v, p.b.mem(p.bufb + 128), 8);
    EXPECT_EQ(v, 0x1122334455667788ull);
}

// ---- the atomic unit in the device (docs/atomic-unit.md "In the RNIC") ----

struct rnic_send_wqe xwqe(bool fetch, uint8_t xop, uint8_t size, uint64_t wr_id, uint64_t laddr,
                          uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t operand,
                          uint64_t compare = 0, uint64_t mask = 0)
{
    struct rnic_send_wqe w =
        wqe(fetch ? RNIC_WR_XATOMIC : RNIC_WR_XATOMIC_POST, wr_id, laddr, size, lkey, raddr, rkey);
    if (!fetch) w.num_sge = 0;
    w.xop = xop;
    w.xsize = size;
    w.swap_add = operand;
    w.compare = compare;
    w.mask = mask;
    return w;
}

TEST(RnicAtomics, EveryExtendedAtomicAt32And64BitsThroughTheAtomicUnit)
{
    Pair p;
    p.set_clock(3600ull * 1000000000ull); // a clock far from 0, as QEMU's (the unit starts at 0)
    uint64_t ref[2] = {0x8877665544332211ull, 0xCAFEF00Dull}; // a 64-bit word and a 32-bit word
    const uint64_t w64 = p.bufb + 4096, w32 = p.bufb + 4096 + 12;
    std::memcpy(p.b.mem(w64), &ref[0], 8);
    std::memcpy(p.b.mem(w32), &ref[1], 4);
    std::memset(p.b.mem(w32 + 4), 0x5A, 4); // the neighbour of the 32-bit word: never touched
    struct Want {
        uint64_t at, old;
        uint8_t size;
    };
    std::vector<Want> want;
    std::vector<uint8_t> opcodes;
    unsigned n = 0;
    for (uint8_t op = 0; op < ROCE_XOP_COUNT; op++)
        for (uint8_t size : {8, 4})
            for (bool fetch : {true, false})
                for (bool match : {true, false}) { // MCSWAP: compare matches or not
                    if (op != ROCE_XOP_MCSWAP && !match) continue;
                    uint64_t &w = ref[size == 4];
                    const uint64_t operand = 0x0123456789ABCDEFull * (n + 3);
                    const uint64_t cmp = match ? w : ~w, mask = n % 2 ? ~0ull : 0xFF00FF00FF00FF00ull;
                    p.a.post_send(p.qa, xwqe(fetch, op, size, n, p.bufa + 8 * n, p.keya,
                                             size == 8 ? w64 : w32, p.keyb, operand, cmp, mask));
                    if (fetch) want.push_back({p.bufa + 8 * n, w, size});
                    opcodes.push_back(fetch ? RNIC_CQE_OP_XATOMIC : RNIC_CQE_OP_XATOMIC_POST);
                    w = amo_alu(op, size, w, operand, cmp, mask);
                    n++;
                }
    // and the IB atomics through the same unit
    struct rnic_send_wqe fa = wqe(RNIC_WR_FETCH_ADD, n, p.bufa + 8 * n, 8, p.keya, w64, p.keyb);
    fa.swap_add = 1000;
    p.a.post_send(p.qa, fa);
    want.push_back({p.bufa + 8 * n, ref[0], 8});
    opcodes.push_back(RNIC_CQE_OP_FETCH_ADD);
    ref[0] += 1000;
    n++;
    auto c = p.wait_a(n);
    ASSERT_EQ(c.size(), n);
    for (unsigned i = 0; i < n; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        EXPECT_EQ(c[i].wr_id, i);
        EXPECT_EQ(c[i].opcode, opcodes[i]) << i;
        EXPECT_GT(c[i].modeled_ns, 0u);
    }
    uint64_t v64;
    uint32_t v32, neighbour;
    std::memcpy(&v64, p.b.mem(w64), 8);
    std::memcpy(&v32, p.b.mem(w32), 4);
    std::memcpy(&neighbour, p.b.mem(w32 + 4), 4);
    EXPECT_EQ(v64, ref[0]);
    EXPECT_EQ(v32, uint32_t(ref[1]));
    EXPECT_EQ(neighbour, 0x5A5A5A5Au);
    for (const Want &w : want) {
        uint64_t v = 0;
        std::memcpy(&v, p.a.mem(w.at), w.size);
        EXPECT_EQ(v, w.old);
    }
    // the unit executed every one; its counters and modeled time are the device's
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_ERRORS), 0u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_MISSES), 1u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_HITS), 1u) << "the same two words again and again";
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_HITS) + p.b.counter(RNIC_CNT_INDEX_AMU_MISSES) +
                  p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS),
              n);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_HOST_READS), 1u);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_AMU_HOST_WRITES), 1u);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_MODELED_NS), 0u);
    EXPECT_EQ(p.a.counter(RNIC_CNT_INDEX_AMU_OPS), 0u) << "the requester's unit is not involved";
    // CNT_CLEAR zeroes the unit's counters but its high-water mark
    const uint64_t hw = p.b.counter(RNIC_CNT_INDEX_AMU_MAX_OUTSTANDING);
    EXPECT_GE(hw, 1u);
    p.b.nic->ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE | RNIC_CTRL_CNT_CLEAR, 4);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_MODELED_NS), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_MAX_OUTSTANDING), hw);
}

TEST(RnicAtomics, ExtendedAtomicRefusals)
{
    struct Case {
        const char *what;
        std::function<void(struct rnic_send_wqe &, Pair &, uint32_t noatomic)> spoil;
        uint8_t status;
        uint32_t vendor_err;
        bool remote; // refused by the target (a NAK, a guest error there)
    };
    const Case cases[] = {
        {"unaligned 64-bit", [](auto &w, Pair &, uint32_t) { w.remote_addr += 4; }, RNIC_WC_REM_INV_REQ_ERR,
         ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ), true},
        {"unaligned 32-bit",
         [](auto &w, Pair &, uint32_t) { w.remote_addr += 2, w.xsize = 4, w.sge[0].length = 4; },
         RNIC_WC_REM_INV_REQ_ERR, ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ), true},
        {"MR without REMOTE_ATOMIC", [](auto &w, Pair &, uint32_t na) { w.rkey = na; },
         RNIC_WC_REM_ACCESS_ERR, ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS), true},
        {"unknown rkey", [](auto &w, Pair &, uint32_t) { w.rkey ^= 0x80; }, RNIC_WC_REM_ACCESS_ERR,
         ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS), true},
        {"beyond the MR", [](auto &w, Pair &, uint32_t) { w.remote_addr += Pair::kBuf; },
         RNIC_WC_REM_ACCESS_ERR, ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS), true},
        {"unknown xop", [](auto &w, Pair &, uint32_t) { w.xop = ROCE_XOP_COUNT; }, RNIC_WC_LOC_QP_OP_ERR,
         RNIC_LERR_OPCODE, false},
        {"xsize 2", [](auto &w, Pair &, uint32_t) { w.xsize = 2; }, RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_OPCODE,
         false},
        {"SGE not xsize", [](auto &w, Pair &, uint32_t) { w.sge[0].length = 4; }, RNIC_WC_LOC_QP_OP_ERR,
         RNIC_LERR_LENGTH, false},
        {"XATOMIC_POST with an SGE", [](auto &w, Pair &, uint32_t) { w.opcode = RNIC_WR_XATOMIC_POST; },
         RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_SGE_COUNT, false},
        {"reserved opcode 0x42", [](auto &w, Pair &, uint32_t) { w.opcode = RNIC_WR_XATOMIC + 2; },
         RNIC_WC_LOC_QP_OP_ERR, RNIC_LERR_OPCODE, false},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.what);
        Pair p;
        const uint32_t noatomic =
            p.b.mr(p.pdb, p.bufb, 65536,
                   RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ);
        std::vector<uint8_t> before(p.b.mem(p.bufb), p.b.mem(p.bufb) + Pair::kBuf);
        struct rnic_send_wqe w = xwqe(true, ROCE_XOP_ADD, 8, 9, p.bufa, p.keya, p.bufb + 64, p.keyb, 1);
        k.spoil(w, p, noatomic);
        p.a.post_send(p.qa, w);
        p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, 10, 0, 0, p.bufb + 64, p.keyb, 1)); // flushed
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].wr_id, 9u);
        EXPECT_EQ(c[0].status, k.status);
        EXPECT_EQ(c[0].vendor_err, k.vendor_err);
        EXPECT_EQ(c[1].status, RNIC_WC_WR_FLUSH_ERR);
        EXPECT_TRUE(std::equal(before.begin(), before.end(), p.b.mem(p.bufb))) << "target memory changed";
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 0u) << "refused before the unit";
        if (k.remote) {
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_ERR_NAKS_TX), 1u);
            EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_GUEST_ERRORS), 1u) << "a guest-error line on the target";
            EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_REMOTE_VIOLATIONS), 1u);
        } else {
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_RX_FRAMES), 0u) << "refused before anything was sent";
        }
    }
}

// A burst of atomics that reach the target at one device time share the unit's look-ahead
// window (values at arrival, timing by the model behind): results forwarded through registers,
// host writes suppressed by rate limiting, none lost; the busy time counts the burst once, not
// the idle time before a second burst.
TEST(RnicAtomics, AtomicBurstSharesTheUnitsWindow)
{
    Pair p;
    p.set_clock(1000000000ull);
    const uint64_t w0 = p.bufb + 8192, w1 = p.bufb + 8192 + 8;
    const unsigned n = 96;
    for (unsigned i = 0; i < n; i++)
        p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, i, 0, p.keya, i % 3 ? w0 : w1, p.keyb, i + 1));
    auto c = p.wait_a(n);
    ASSERT_EQ(c.size(), n);
    uint64_t want0 = 0, want1 = 0;
    for (unsigned i = 0; i < n; i++) {
        EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        (i % 3 ? want0 : want1) += i + 1;
    }
    uint64_t v0, v1;
    std::memcpy(&v0, p.b.mem(w0), 8);
    std::memcpy(&v1, p.b.mem(w1), 8);
    EXPECT_EQ(v0, want0);
    EXPECT_EQ(v1, want1);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS), 0u) << "operands from the register file";
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_WRITES_SUPPRESSED), 0u) << "rate limiting acted";
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_HOST_WRITES) + p.b.counter(RNIC_CNT_INDEX_AMU_WRITES_SUPPRESSED),
              n);
    const uint64_t active = p.b.counter(RNIC_CNT_INDEX_AMU_ACTIVE_NS);
    EXPECT_GT(active, 0u);
    EXPECT_NEAR(double(p.b.counter(RNIC_CNT_INDEX_AMU_BUSY_NS)), double(active), 4.0)
        << "one burst: no idle gap";
    // a second burst a second later: the busy clock spans the gap, the active time does not
    p.set_clock(p.clock + 1000000000ull);
    for (unsigned i = 0; i < n; i++)
        p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, n + i, 0, p.keya, w0, p.keyb, 1));
    ASSERT_EQ(p.wait_a(n).size(), n);
    std::memcpy(&v0, p.b.mem(w0), 8);
    EXPECT_EQ(v0, want0 + n);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), 2 * n);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_BUSY_NS), 1000000000u);
    EXPECT_LT(p.b.counter(RNIC_CNT_INDEX_AMU_ACTIVE_NS), 4 * active);
    EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_ACTIVE_NS), active);
}

// The receive pass (kRxPassGapNs): frames delivered back to back (the next within the gap of the
// previous one's end) reach the unit at the pass's start and share its window; frames delivered
// far apart reach it at their own times, one at a time. Both exact.
TEST(RnicAtomics, BackToBackFramesAreOneReceivePass)
{
    for (uint64_t step : {500ull, 1000000ull}) {
        SCOPED_TRACE(step);
        Pair p;
        p.set_clock(1000000000ull);
        const uint64_t w = p.bufb + 8192;
        const unsigned n = 64;
        for (unsigned i = 0; i < n; i++)
            p.a.post_send(p.qa, xwqe(false, ROCE_XOP_ADD, 8, i, 0, p.keya, w, p.keyb, 1));
        unsigned delivered = 0;
        while (!p.link.q.empty()) { // the requests, each after `step` ns
            Link::Frame f = p.link.pop();
            if (f.to != 1) continue; // ACKs: the RC retransmits nothing within this test's time
            p.set_clock(p.clock + step);
            p.b.nic->on_frame(f.bytes.data(), f.bytes.size());
            delivered++;
        }
        ASSERT_EQ(delivered, n);
        uint64_t v;
        std::memcpy(&v, p.b.mem(w), 8);
        EXPECT_EQ(v, n);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n);
        if (step < kRxPassGapNs) {
            EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS), 0u) << "one pass: the window holds many";
        } else {
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_FORWARDS), 0u) << "one at a time";
            EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_WRITES_SUPPRESSED), 0u);
        }
    }
}

// Every atomic executed exactly once through loss, duplication, reordering and corruption (the
// RC duplicate rule through the unit): fetched old values are the exact prefix sums.
TEST(RnicAtomics, ExtendedAtomicsExactlyOnceUnderLossAndDuplication)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE(seed);
        Pair p(1024);
        p.link.rng.seed(seed);
        p.link.drop = 0.05;
        p.link.dup = 0.05;
        p.link.reorder = 0.05;
        p.link.corrupt = 0.02;
        const uint64_t word = p.bufb + (1 << 20);
        const unsigned n = 300;
        uint64_t expect = 0;
        std::vector<uint64_t> olds(n, UINT64_MAX);
        for (unsigned i = 0; i < n; i++) {
            const bool fetch = i % 3 != 2;
            if (fetch) olds[i] = expect;
            p.a.post_send(p.qa, xwqe(fetch, ROCE_XOP_ADD, 8, i, p.bufa + 8 * i, p.keya, word, p.keyb, i + 1));
            expect += i + 1;
        }
        auto c = p.wait_a(n);
        ASSERT_EQ(c.size(), n);
        for (unsigned i = 0; i < n; i++)
            EXPECT_EQ(c[i].status, RNIC_WC_SUCCESS) << i;
        uint64_t v;
        std::memcpy(&v, p.b.mem(word), 8);
        EXPECT_EQ(v, expect) << "each add executed exactly once";
        for (unsigned i = 0; i < n; i++) {
            if (olds[i] == UINT64_MAX) continue;
            std::memcpy(&v, p.a.mem(p.bufa + 8 * i), 8);
            EXPECT_EQ(v, olds[i]) << i;
        }
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_AMU_OPS), n) << "the unit saw each once";
        EXPECT_GT(p.b.counter(RNIC_CNT_INDEX_DUPLICATES), 0u);
    }
}

// Global atomicity: the NIC's atomics and the target CPU's own atomics on one word (a thread
// doing __atomic_fetch_add on the guest RAM word the unit updates) give the exact sum.
TEST(RnicAtomics, NicAtomicsAndCpuAtomicsOnOneWordAreExact)
{
    Pair p;
    const uint64_t word = p.bufb + 8192;
    uint64_t *cpu_word = reinterpret_cast<uint64_t *>(p.b.mem(word));
    __atomic_store_n(cpu_word, 0, __ATOMIC_SEQ_CST);
    const unsigned n = 2000;
    std::atomic<bool> started{false}, stop{false};
    uint64_t cpu_n = 0;
    std::thread cpu([&] { // the target CPU adds for as long as the NIC works
        do {
            __atomic_fetch_add(cpu_word, 1ull << 32, __ATOMIC_SEQ_CST);
            cpu_n++;
            started = true;
        } while (!stop.load(std::memory_order_relaxed));
    });
    while (!started.load())
        std::this_thread::yield();
    unsigned posted = 0;
    std::vector<struct rnic_cqe> c;
    while (posted < n) { // a window of 64 in flight
        const unsigned batch = std::min(64u, n - posted);
        for (unsigned i = 0; i < batch; i++, posted++)
            p.a.post_send(p.qa, posted % 2
                                    ? xwqe(false, ROCE_XOP_ADD, 8, posted, 0, 0, word, p.keyb, 3)
                                    : xwqe(true, ROCE_XOP_ADD, 8, posted, p.bufa, p.keya, word, p.keyb, 3));
        auto got = p.wait_a(batch);
        c.insert(c.end(), got.begin(), got.end());
    }
    stop = true;
    cpu.join();
    ASSERT_EQ(c.size(), n);
    for (auto &e : c)
        EXPECT_EQ(e.status, RNIC_WC_SUCCESS);
    EXPECT_EQ(__atomic_load_n(cpu_word, __ATOMIC_SEQ_CST), (cpu_n << 32) + 3ull * n);
}

TEST(RnicAtomics, AtomicUnitPropertiesAreValidated)
{
    Link l;
    RnicConfig cfg;
    cfg.amu.cache_lines = 32;
    cfg.amu.cache_ways = 5; // not a divisor
    Node bad(2, l, cfg);
    EXPECT_EQ(bad.counter(RNIC_CNT_INDEX_GUEST_ERRORS), 1u) << "refused, the defaults used";
    EXPECT_NE(amu_check_config(cfg.amu), nullptr);
    cfg.amu = AmuConfig{};
    cfg.amu.cache_lines = 0; // no cache: every op reads the host
    cfg.amu.tags = 64;
    EXPECT_EQ(amu_check_config(cfg.amu), nullptr);
    AmuRateLimit r;
    AmuRaw w;
    EXPECT_TRUE(amu_rate_limit_from("hostq", &r));
    EXPECT_EQ(r, AmuRateLimit::HostQueue);
    EXPECT_FALSE(amu_rate_limit_from("sometimes", &r));
    EXPECT_TRUE(amu_raw_from("flush", &w));
    EXPECT_EQ(w, AmuRaw::Flush);
    EXPECT_FALSE(amu_raw_from("", &w));
}

} // namespace
