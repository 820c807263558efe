// SPDX-License-Identifier: MIT
//
// Unit tests of the RNIC device core, suite RnicPmem: the responder on persistent memory
// (docs/rnic.md "Persistent memory", hw/rnic/rnic_nvm.cc). Node B's host has a real
// persistence-domain core (hw/pmem) over a range of its RAM, bound as the host's nvm op through
// rk_pmem_nvm, as the QEMU host does. A WRITE is acknowledged before it is placed and lost at a
// cut until the mode makes it durable; a READ, an atomic or a FLUSH drains the NIC's buffer
// first; FLUSH persistence makes the range durable in every mode. The rig is rnic_rig.h.
#include <gtest/gtest.h>

#include "pmem.h"
#include "pmem_capi.h"
#include "rnic_rig.h"

using namespace rackemu;
using namespace rackemu::rnic;
using namespace rackemu::rnic::rig;
using rackemu::pmem::Mode;
using rackemu::pmem::Pick;

namespace {

constexpr uint64_t kPm = 64 * 1024;  // the region's size
constexpr uint64_t kDelay = 1000000; // NIC buffer: acknowledgement to placement, ns
const Mode kModes[] = {Mode::None, Mode::Eadr, Mode::Adr, Mode::AdrDdio};

// A Pair whose node B has persistent memory at pm (kPm bytes of its RAM) with an MR over it.
struct PmPair : Pair {
    uint64_t pm = 0;
    uint32_t pmkey = 0;
    std::unique_ptr<pmem::Pmem> core;

    explicit PmPair(Mode mode, uint32_t nic_entries = 64)
    {
        pm = b.alloc(kPm);
        pmem::Config c;
        c.base = pm;
        c.size = kPm;
        c.mode = mode;
        c.nic_delay_ns = kDelay;
        c.nic_entries = nic_entries;
        std::string err;
        core = pmem::Pmem::create(b.host.host(), c, nullptr, &err);
        EXPECT_TRUE(core) << err;
        pmem::Pmem *pc = core.get();
        b.host.nvm = [pc](unsigned op, uint64_t addr, const void *data, uint64_t len) {
            return rk_pmem_nvm(pc, op, addr, data, len);
        };
        pmkey = b.mr(pdb, pm, kPm);
    }
    ~PmPair()
    {
        b.host.nvm = [](unsigned, uint64_t, const void *, uint64_t) { return RK_DECODE_ERROR; };
    }
    // B's NIC buffer entries due by now placed (the core's timer 0)
    void place_due()
    {
        set_clock(clock + kDelay + 1);
        core->nic_place_due();
    }
    std::vector<uint8_t> durable(uint64_t off, uint64_t len)
    {
        std::vector<uint8_t> d(len, 0xee);
        EXPECT_EQ(core->durable_read(pm + off, d.data(), len), RK_OK);
        return d;
    }
    // A power cut now that keeps none of the pending lines, then the restart on the image.
    void power_cut()
    {
        const pmem::Cut c = core->cut();
        ASSERT_EQ(core->finish_cut(c, pmem::pick_one(c, Pick::None, 1)), RK_OK);
        ASSERT_EQ(core->restart(), RK_OK);
    }
    std::vector<uint8_t> ram(uint64_t off, uint64_t len) { return {b.mem(pm + off), b.mem(pm + off) + len}; }
    uint64_t post_write(uint64_t wr_id, uint64_t off, uint32_t len, uint32_t seed)
    {
        fill(a.mem(bufa), len, seed);
        a.post_send(qa, wqe(RNIC_WR_WRITE, wr_id, bufa, len, keya, pm + off, pmkey));
        return wr_id;
    }
    void post_flush(uint64_t wr_id, uint64_t off, uint32_t len, uint8_t placement = ROCE_FETH_PLT_PERSIST)
    {
        struct rnic_send_wqe w = wqe(RNIC_WR_FLUSH, wr_id, 0, 0, 0, pm + off, pmkey);
        w.num_sge = 0;
        w.flush_len = len;
        w.flush_type = placement;
        a.post_send(qa, w);
    }
};

std::vector<uint8_t> bytes(const uint8_t *p, size_t n)
{
    return {p, p + n};
}

TEST(RnicPmem, WriteIsAcknowledgedBeforePlacementAndLostAtACut)
{
    for (Mode m : kModes) {
        SCOPED_TRACE(pmem::mode_name(m));
        PmPair p(m);
        p.post_write(1, 100, 5000, 7);
        const auto want = bytes(p.a.mem(p.bufa), 5000);
        auto c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        // acknowledged: one buffer entry per packet payload (MTU 1024), nothing in RAM yet
        // (mode none: acknowledged is durable, the buffer is off)
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITES), 5u);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITE_BYTES), 5000u);
        if (m == Mode::None) {
            EXPECT_EQ(p.ram(100, 5000), want);
            continue;
        }
        EXPECT_EQ(p.core->nic_pending(), 5u);
        EXPECT_EQ(p.ram(100, 5000), std::vector<uint8_t>(5000, 0));
        p.power_cut();
        EXPECT_EQ(p.durable(100, 5000), std::vector<uint8_t>(5000, 0)) << "an acknowledged WRITE survived";
        EXPECT_EQ(p.ram(100, 5000), std::vector<uint8_t>(5000, 0));
        EXPECT_EQ(p.core->counter(PMEM_CNT_INDEX_LOST_NIC), 5u);
    }
}

TEST(RnicPmem, PlacedWriteIsKeptInEadrAndAdrAndOnlyAfterFlushInAdrDdio)
{
    for (Mode m : {Mode::Eadr, Mode::Adr, Mode::AdrDdio}) {
        SCOPED_TRACE(pmem::mode_name(m));
        PmPair p(m);
        p.post_write(1, 0, 3000, 11);
        const auto want = bytes(p.a.mem(p.bufa), 3000);
        ASSERT_EQ(p.wait_a(1).size(), 1u);
        p.place_due();
        EXPECT_EQ(p.core->nic_pending(), 0u);
        EXPECT_EQ(p.ram(0, 3000), want); // placed: in RAM
        p.power_cut();
        if (m == Mode::AdrDdio)
            EXPECT_EQ(p.durable(0, 3000), std::vector<uint8_t>(3000, 0)) << "placed into the LLC only";
        else
            EXPECT_EQ(p.durable(0, 3000), want);
    }
}

TEST(RnicPmem, FlushPersistenceMakesTheWriteDurableInEveryMode)
{
    for (Mode m : kModes) {
        SCOPED_TRACE(pmem::mode_name(m));
        PmPair p(m);
        p.post_write(1, 4000, 5000, 3);
        const auto want = bytes(p.a.mem(p.bufa), 5000);
        p.post_flush(2, 4000, 5000);
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(c[1].opcode, RNIC_CQE_OP_FLUSH);
        EXPECT_EQ(p.core->nic_pending(), 0u);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_FLUSHES), 1u);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_FLUSH_BYTES), 5000u);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 0u); // not the RAM file's msync
        EXPECT_TRUE(p.b.host.persisted.empty());
        p.power_cut();
        EXPECT_EQ(p.durable(4000, 5000), want);
        EXPECT_EQ(p.ram(4000, 5000), want); // the node restarts on it
    }
}

TEST(RnicPmem, GlobalVisibilityFlushPlacesTheBufferButPersistsNothingInAdrDdio)
{
    PmPair p(Mode::AdrDdio);
    p.post_write(1, 0, 2048, 5);
    const auto want = bytes(p.a.mem(p.bufa), 2048);
    p.post_flush(2, 0, 2048, ROCE_FETH_PLT_GLOBAL);
    auto c = p.wait_a(2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(p.core->nic_pending(), 0u);
    EXPECT_EQ(p.ram(0, 2048), want); // visible
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_FLUSHES), 0u);
    p.power_cut();
    EXPECT_EQ(p.durable(0, 2048), std::vector<uint8_t>(2048, 0));
}

TEST(RnicPmem, ReadAfterWriteReturnsTheNewBytes)
{
    PmPair p(Mode::Adr);
    p.post_write(1, 512, 3000, 9);
    const auto want = bytes(p.a.mem(p.bufa), 3000);
    const uint64_t dst = p.bufa + (1 << 20);
    p.a.post_send(p.qa, wqe(RNIC_WR_READ, 2, dst, 3000, p.keya, p.pm + 512, p.pmkey));
    auto c = p.wait_a(2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(bytes(p.a.mem(dst), 3000), want) << "a READ passed the buffered WRITE";
    EXPECT_EQ(p.core->nic_pending(), 0u);
}

TEST(RnicPmem, AtomicsSeeTheBufferedWriteAndArePlaced)
{
    for (Mode m : {Mode::Adr, Mode::AdrDdio}) {
        SCOPED_TRACE(pmem::mode_name(m));
        PmPair p(m);
        const uint64_t v = 0x1000;
        std::memcpy(p.a.mem(p.bufa), &v, 8);
        p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 8, p.keya, p.pm + 64, p.pmkey));
        struct rnic_send_wqe w = wqe(RNIC_WR_FETCH_ADD, 2, p.bufa + 64, 8, p.keya, p.pm + 64, p.pmkey);
        w.swap_add = 5;
        p.a.post_send(p.qa, w);
        auto c = p.wait_a(2);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
        uint64_t orig = 0, now = 0;
        std::memcpy(&orig, p.a.mem(p.bufa + 64), 8);
        EXPECT_EQ(orig, v) << "the atomic passed the buffered WRITE";
        std::memcpy(&now, p.b.mem(p.pm + 64), 8);
        EXPECT_EQ(now, v + 5);
        // ATOMIC WRITE is a NIC write like WRITE: buffered
        struct rnic_send_wqe aw = wqe(RNIC_WR_ATOMIC_WRITE, 3, 0, 0, 0, p.pm + 128, p.pmkey);
        aw.num_sge = 0;
        aw.swap_add = 0x77;
        p.a.post_send(p.qa, aw);
        c = p.wait_a(1);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
        EXPECT_EQ(p.core->nic_pending(), 1u);
        EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITES), 2u);
        p.power_cut();
        uint64_t d = 0, aww = 0;
        std::memcpy(&d, p.durable(64, 8).data(), 8);
        std::memcpy(&aww, p.durable(128, 8).data(), 8);
        EXPECT_EQ(aww, 0u); // still in the NIC's buffer at the cut
        // placed by the atomic: durable in adr, still in the LLC in adr-ddio
        EXPECT_EQ(d, m == Mode::Adr ? v + 5 : 0u);
    }
}

TEST(RnicPmem, SendIntoAPersistentReceiveBufferIsBuffered)
{
    PmPair p(Mode::Eadr);
    p.b.post_recv(p.qb, 77, p.pm + 8192, 4096, p.pmkey);
    fill(p.a.mem(p.bufa), 2500, 21);
    const auto want = bytes(p.a.mem(p.bufa), 2500);
    p.a.post_send(p.qa, wqe(RNIC_WR_SEND, 1, p.bufa, 2500, p.keya));
    auto c = p.wait_b(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(c[0].byte_len, 2500u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITES), 3u);
    EXPECT_EQ(p.core->nic_pending(), 3u);
    p.place_due();
    EXPECT_EQ(p.ram(8192, 2500), want);
    p.power_cut();
    EXPECT_EQ(p.durable(8192, 2500), want);
}

TEST(RnicPmem, AWriteWhileThePowerIsCutIsARemoteOperationalError)
{
    PmPair p(Mode::Adr);
    const pmem::Cut cut = p.core->cut(); // the node is off until finish_cut
    p.post_write(1, 0, 100, 1);
    auto c = p.wait_a(1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, RNIC_WC_REM_OP_ERR);
    EXPECT_GE(p.b.counter(RNIC_CNT_INDEX_NVM_ERRORS), 1u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITES), 0u);
    EXPECT_EQ(p.core->finish_cut(cut, pmem::pick_one(cut, Pick::None, 1)), RK_OK);
}

TEST(RnicPmem, PlainRamIsUnchanged)
{
    PmPair p(Mode::AdrDdio);
    fill(p.a.mem(p.bufa), 4096, 2);
    p.a.post_send(p.qa, wqe(RNIC_WR_WRITE, 1, p.bufa, 4096, p.keya, p.bufb, p.keyb));
    struct rnic_send_wqe w = wqe(RNIC_WR_FLUSH, 2, 0, 0, 0, p.bufb, p.keyb);
    w.num_sge = 0;
    w.flush_len = 4096;
    w.flush_type = ROCE_FETH_PLT_PERSIST;
    p.a.post_send(p.qa, w);
    auto c = p.wait_a(2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, RNIC_WC_SUCCESS);
    EXPECT_EQ(bytes(p.b.mem(p.bufb), 4096), bytes(p.a.mem(p.bufa), 4096));
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_NVM_WRITES), 0u);
    EXPECT_EQ(p.b.counter(RNIC_CNT_INDEX_PERSIST_BYTES), 4096u); // the RAM file's msync, as before
    EXPECT_EQ(p.core->nic_pending(), 0u);
}

} // namespace
