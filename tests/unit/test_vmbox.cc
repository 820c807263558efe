// Unit tests of the Unimem vmbox core (hw/unimem/vmbox.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_host.h"
#include "unimem_capi.h"
#include "vmbox.h"

using namespace rackemu;
using namespace rackemu::unimem;

namespace {
struct Rig {
    test::TestHost th;
    std::vector<bool> irq_changes; // every set_irq call of the core
    Vmbox vm;
    explicit Rig(unsigned depth = 8, bool known_issue = false, bool kif = true)
        : vm(hooked(), depth, known_issue, kif)
    {
    }
    Host hooked()
    {
        th.set_irq = [this](unsigned line, bool l) {
            EXPECT_EQ(line, 0u);
            irq_changes.push_back(l);
        };
        return th.host();
    }
    std::vector<std::string> errors() { return th.guest_errors(); }
    uint64_t load(uint64_t off, unsigned size = 8)
    {
        uint64_t v = 0;
        EXPECT_EQ(vm.read(off, size, v), RK_OK);
        return v;
    }
};
} // namespace

TEST(Vmbox, EmptyFifoReadsThePattern)
{
    Rig r;
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(5)), VMBOX_EMPTY_PATTERN);
    EXPECT_EQ(r.vm.counters().empty_reads, 1u);
}

TEST(Vmbox, StoresEnqueueAndLoadsDequeueInOrderPerFifo)
{
    Rig r;
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(3), 0x11, 8), RK_OK);
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(3) + 8, 0x22, 8), RK_OK); // burst's second beat
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(6), 0x66, 8), RK_OK);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(3) + VMBOX_MIF_COUNT), 2u);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(3)), 0x11u);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(6)), 0x66u);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(3)), 0x22u);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(3)), VMBOX_EMPTY_PATTERN);
}

TEST(Vmbox, StoreToFullFifoIsABusErrorAndKeepsTheData)
{
    Rig r(4);
    for (uint64_t i = 0; i < 4; i++)
        ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(1), i, 8), RK_OK);
    EXPECT_EQ(r.vm.write(VMBOX_MIF_OFFSET(1), 99, 8), RK_NACK); // the bus answers SLVERR
    EXPECT_EQ(r.vm.counters().nacks, 1u);
    for (uint64_t i = 0; i < 4; i++)
        EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(1)), i);
}

TEST(Vmbox, NarrowFifoAccessIsRefusedAndLogged)
{
    Rig r;
    uint64_t v;
    EXPECT_EQ(r.vm.write(VMBOX_MIF_OFFSET(0), 1, 4), RK_SLAVE_ERROR);
    EXPECT_EQ(r.vm.read(VMBOX_MIF_OFFSET(0), 4, v), RK_SLAVE_ERROR);
    EXPECT_EQ(r.vm.fill(0), 0u);
    EXPECT_EQ(r.errors().size(), 2u);
}

TEST(Vmbox, BurstIsAllOrNothingByDefault)
{
    Rig r(6);
    const uint64_t pkt[4] = {1, 2, 3, 4};
    EXPECT_EQ(r.vm.deliver(2, 1, pkt, 4), RK_OK);
    EXPECT_EQ(r.vm.deliver(2, 1, pkt, 4), RK_NACK); // 2 slots left
    EXPECT_EQ(r.vm.fill(2), 4u);
}

TEST(Vmbox, KnownIssueModeTruncatesAndStillAcks)
{
    Rig r(6, true);
    const uint64_t pkt[4] = {1, 2, 3, 4};
    EXPECT_EQ(r.vm.deliver(2, 1, pkt, 4), RK_OK);
    EXPECT_EQ(r.vm.deliver(2, 1, pkt, 4), RK_OK); // sec. 5.1.2
    EXPECT_EQ(r.vm.fill(2), 6u);
    EXPECT_EQ(r.vm.counters().truncated, 2u);
    EXPECT_EQ(r.vm.deliver(2, 1, pkt, 4), RK_NACK); // full FIFO always NACKs
}

TEST(Vmbox, InterruptFollowsEnabledNonEmptyFifos)
{
    Rig r;
    const uint64_t c = VMBOX_CTRL_OFFSET;
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(7), 5, 8), RK_OK);
    EXPECT_FALSE(r.vm.irq_level()); // not enabled yet
    ASSERT_EQ(r.vm.write(c + VMBOX_CTRL_IRQ_ENABLE, 1ull << 7, 8), RK_OK);
    EXPECT_TRUE(r.vm.irq_level());
    EXPECT_EQ(r.load(c + VMBOX_CTRL_IRQ_STATUS), 1ull << 7);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(7)), 5u);
    EXPECT_FALSE(r.vm.irq_level());
    EXPECT_EQ(r.irq_changes, (std::vector<bool>{true, false}));
}

TEST(Vmbox, FlushEmptiesSelectedFifos)
{
    Rig r;
    r.vm.write(VMBOX_MIF_OFFSET(1), 1, 8);
    r.vm.write(VMBOX_MIF_OFFSET(2), 2, 8);
    r.vm.write(VMBOX_CTRL_OFFSET + VMBOX_CTRL_FLUSH, 1ull << 1, 8);
    EXPECT_EQ(r.vm.fill(1), 0u);
    EXPECT_EQ(r.vm.fill(2), 1u);
    EXPECT_EQ(r.load(VMBOX_CTRL_OFFSET + VMBOX_CTRL_NONEMPTY), 1ull << 2);
}

TEST(Vmbox, OutOfRangeDeliveryAndUnmappedAccessAreHarmless)
{
    Rig r;
    const uint64_t w = 1;
    EXPECT_EQ(r.vm.deliver(UNIMEM_IF_TOTAL, 1, &w, 1), RK_NACK);
    EXPECT_EQ(r.vm.deliver(3, UNIMEM_IF_TOTAL, &w, 1), RK_NACK);
    EXPECT_EQ(r.vm.deliver(3, 1, &w, 0), RK_NACK);
    EXPECT_EQ(r.vm.fill(3), 0u);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(3) + 0x900), 0u);
    EXPECT_EQ(r.vm.write(VMBOX_CTRL_OFFSET + VMBOX_CTRL_ID, 1, 8), RK_OK);
    EXPECT_EQ(r.load(VMBOX_CTRL_OFFSET + VMBOX_CTRL_ID), VMBOX_ID_VALUE);
    EXPECT_EQ(r.load(VMBOX_CTRL_OFFSET + VMBOX_CTRL_DEPTH), 8u);
}

TEST(Vmbox, CountersReadBackThroughTheirTableOffsets)
{
    Rig r(4);
    const uint64_t c = VMBOX_CTRL_OFFSET + VMBOX_CTRL_COUNTERS;
    for (uint64_t i = 0; i < 5; i++)
        r.vm.write(VMBOX_MIF_OFFSET(2), i, 8); // 4 enqueued, 1 NACK
    r.load(VMBOX_MIF_OFFSET(2));
    const VmboxCounters k = r.vm.counters();
    EXPECT_EQ(k.enqueued, 4u);
    EXPECT_EQ(k.nacks, 1u);
    EXPECT_EQ(k.dequeued, 1u);
    EXPECT_EQ(r.load(c + VMBOX_CNT_ENQUEUED), 4u);
    EXPECT_EQ(r.load(c + VMBOX_CNT_NACKS), 1u);
    EXPECT_EQ(r.load(c + VMBOX_CNT_DEQUEUED), 1u);
    EXPECT_EQ(r.load(VMBOX_CTRL_OFFSET + VMBOX_CTRL_ENQUEUED), 4u); // the driver's names
    const char *names[] = {VMBOX_CNT_NAMES};
    EXPECT_STREQ(names[VMBOX_CNT_INDEX_TRUNCATED], "truncated");
}

TEST(Vmbox, RegisterStoresNeedAlignedDoublewordsAndAreNamedInTheLog)
{
    Rig r;
    const uint64_t c = VMBOX_CTRL_OFFSET;
    EXPECT_EQ(r.vm.write(c + VMBOX_CTRL_IRQ_ENABLE, 0xff, 4), RK_OK); // ignored: 64-bit registers
    EXPECT_EQ(r.load(c + VMBOX_CTRL_IRQ_ENABLE), 0u);
    EXPECT_EQ(r.vm.write(c + VMBOX_CTRL_DEPTH, 5, 8), RK_OK); // read-only
    EXPECT_EQ(r.load(c + VMBOX_CTRL_DEPTH), 8u);
    ASSERT_EQ(r.errors().size(), 2u);
    EXPECT_NE(r.errors()[1].find("DEPTH"), std::string::npos) << r.errors()[1];
    EXPECT_EQ(r.load(c + VMBOX_CTRL_ID + 4, 4), 0u); // registers are read at their own offset
    EXPECT_EQ(r.load(c + VMBOX_CTRL_ID, 4), VMBOX_ID_VALUE & 0xffffffffu);
    EXPECT_EQ(r.vm.counters().bad_access, 3u);
}

TEST(Vmbox, FabricDeliveriesAreValidatedBeforeTheyReachAFifo)
{
    Rig r(8);
    rkf_frame_hdr h{};
    h.type = RKF_T_REQ;
    h.svc = RKF_SVC_UNIMEM_MBOX;
    h.op = RKF_OP_MBOX_DELIVER;
    rkf_mbox_deliver d{};
    d.mif = 9;
    d.nwords = 4;
    for (unsigned i = 0; i < 4; i++)
        d.words[i] = 0x100 + i;
    h.len = offsetof(rkf_mbox_deliver, words) + 4 * 8;
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_OK));
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_OK));
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_REFUSED)); // full
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(9)), 0x100u);
    h.len += 8; // length disagrees with nwords
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_BAD_FRAME));
    h.len -= 8;
    d.mif = UNIMEM_IF_TOTAL; // neither a MIF nor the KIF
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_BAD_FRAME));
    d.mif = 9;
    d.src_if = UNIMEM_IF_TOTAL; // no such sending interface
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_BAD_FRAME));
    d.src_if = 0;
    h.type = RKF_T_REPLY;
    EXPECT_EQ(r.vm.serve_frame(h, &d), -1); // no reply to a reply
    EXPECT_EQ(r.vm.fill(9), 7u);
}

TEST(Vmbox, SaveAndLoadKeepFifosEnablesAndCountersAndTheLine)
{
    Rig a(8);
    const uint64_t c = VMBOX_CTRL_OFFSET;
    for (uint64_t i = 0; i < 6; i++)
        a.vm.write(VMBOX_MIF_OFFSET(3), 0x30 + i, 8);
    a.load(VMBOX_MIF_OFFSET(3)); // head moves: the ring wraps below
    const uint64_t pkt[4] = {1, 2, 3, 4};
    ASSERT_EQ(a.vm.deliver(3, 1, pkt, 3), RK_OK);
    a.vm.write(VMBOX_MIF_OFFSET(63), 0x63, 8);
    a.vm.write(c + VMBOX_CTRL_IRQ_ENABLE, 1ull << 63, 8);
    ASSERT_TRUE(a.vm.irq_level());
    const VmboxState st = a.vm.save();

    Rig b(8);
    ASSERT_TRUE(b.vm.load(st));
    EXPECT_TRUE(b.vm.irq_level());
    EXPECT_EQ(b.irq_changes, (std::vector<bool>{true}));
    for (uint64_t off : std::initializer_list<uint64_t>{
             c + VMBOX_CTRL_IRQ_ENABLE, c + VMBOX_CTRL_IRQ_STATUS, c + VMBOX_CTRL_NONEMPTY,
             c + VMBOX_CTRL_NACKS, c + VMBOX_CTRL_ENQUEUED, c + VMBOX_CTRL_DEQUEUED,
             VMBOX_MIF_OFFSET(3) + VMBOX_MIF_COUNT, VMBOX_MIF_OFFSET(63) + VMBOX_MIF_COUNT})
        EXPECT_EQ(b.load(off), a.load(off)) << std::hex << off;
    for (uint64_t want : std::initializer_list<uint64_t>{0x31, 0x32, 0x33, 0x34, 0x35, 1, 2, 3})
        EXPECT_EQ(b.load(VMBOX_MIF_OFFSET(3)), uint64_t(want));
    EXPECT_EQ(b.load(VMBOX_MIF_OFFSET(3)), VMBOX_EMPTY_PATTERN);
    EXPECT_EQ(b.load(VMBOX_MIF_OFFSET(63)), 0x63u);
    EXPECT_FALSE(b.vm.irq_level());
}

TEST(Vmbox, LoadRefusesAStateThatDoesNotFitAndChangesNothing)
{
    Rig a(8);
    a.vm.write(VMBOX_MIF_OFFSET(1), 7, 8);
    VmboxState st = a.vm.save();
    Rig b(4);
    EXPECT_FALSE(b.vm.load(st)); // another depth
    Rig c(8);
    c.vm.write(VMBOX_MIF_OFFSET(5), 5, 8);
    st.fifos[2].assign(9, 0); // more words than the FIFO holds
    EXPECT_FALSE(c.vm.load(st));
    EXPECT_EQ(c.vm.fill(5), 1u);
    EXPECT_EQ(c.vm.fill(1), 0u);
}

TEST(Vmbox, APausedVmboxRefusesDeliveriesWithoutCountingThem)
{
    Rig r;
    const uint64_t w = 1;
    r.vm.pause(true);
    EXPECT_EQ(r.vm.deliver(4, 1, &w, 1), RK_NACK);
    EXPECT_EQ(r.vm.fill(4), 0u);
    EXPECT_EQ(r.vm.counters().nacks, 0u); // the saved state does not change
    r.vm.pause(false);
    EXPECT_EQ(r.vm.deliver(4, 1, &w, 1), RK_OK);
    EXPECT_EQ(r.vm.fill(4), 1u);
}

// ---- answering first: the acknowledgement leaves before the guest sees the packet ----

namespace {
constexpr uint64_t kCtrlOff = VMBOX_CTRL_OFFSET;
rkf_frame_hdr delivery_frame(rkf_mbox_deliver &d, unsigned mif, uint64_t first)
{
    rkf_frame_hdr h{};
    h.type = RKF_T_REQ;
    h.svc = RKF_SVC_UNIMEM_MBOX;
    h.op = RKF_OP_MBOX_DELIVER;
    d = rkf_mbox_deliver{};
    d.mif = uint8_t(mif);
    d.src_if = 1;
    d.nwords = 4;
    for (unsigned i = 0; i < 4; i++)
        d.words[i] = first + i;
    h.len = offsetof(rkf_mbox_deliver, words) + 4 * 8;
    return h;
}
} // namespace

TEST(VmboxAnswerFirst, TheWordsAppearAndTheLineRisesOnlyAfterTheAnswer)
{
    Rig r(8);
    ASSERT_EQ(r.vm.write(kCtrlOff + VMBOX_CTRL_IRQ_ENABLE, 1ull << 9, 8), RK_OK);
    rkf_mbox_deliver d;
    const rkf_frame_hdr h = delivery_frame(d, 9, 0x900);
    int answers = 0;
    const int reply = r.vm.serve_frame(h, &d, [&](int st) {
        answers++;
        EXPECT_EQ(st, int(RKF_ST_OK));
        // taken, but nothing of it is visible yet: count, NONEMPTY, data window, the line
        EXPECT_EQ(r.vm.fill(9), 0u);
        EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(9) + VMBOX_MIF_COUNT), 0u);
        EXPECT_EQ(r.load(kCtrlOff + VMBOX_CTRL_NONEMPTY), 0u);
        EXPECT_EQ(r.load(kCtrlOff + VMBOX_CTRL_IRQ_STATUS), 0u);
        EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(9)), VMBOX_EMPTY_PATTERN);
        EXPECT_FALSE(r.vm.irq_level());
        EXPECT_TRUE(r.irq_changes.empty());
    });
    EXPECT_EQ(reply, int(RKF_ST_OK));
    EXPECT_EQ(answers, 1);
    EXPECT_EQ(r.irq_changes, std::vector<bool>{true}); // raised once, after the answer
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(9) + VMBOX_MIF_COUNT), 4u);
    for (uint64_t i = 0; i < 4; i++)
        EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(9)), 0x900 + i);
    EXPECT_EQ(r.vm.counters().enqueued, 4u);
    EXPECT_EQ(r.vm.counters().dequeued, 4u);
}

TEST(VmboxAnswerFirst, HeldWordsKeepTheirRoomAndARefusalIsAnsweredToo)
{
    Rig r(8);
    rkf_mbox_deliver d;
    rkf_frame_hdr h = delivery_frame(d, 3, 0x30);
    ASSERT_EQ(r.vm.deliver(3, 1, d.words, 4), RK_OK); // 4 of 8 slots used
    std::vector<int> seen;
    r.vm.serve_frame(h, &d, [&](int st) {
        seen.push_back(st);
        // the held words fill the FIFO: a third packet is refused meanwhile (a NACK)
        rkf_mbox_deliver d2;
        const rkf_frame_hdr h2 = delivery_frame(d2, 3, 0x50);
        EXPECT_EQ(r.vm.serve_frame(h2, &d2, [&](int st2) { seen.push_back(st2); }), int(RKF_ST_REFUSED));
    });
    EXPECT_EQ(seen, (std::vector<int>{int(RKF_ST_OK), int(RKF_ST_REFUSED)}));
    EXPECT_EQ(r.vm.fill(3), 8u);
    EXPECT_EQ(r.vm.counters().nacks, 1u);
    // malformed and not-a-request frames are answered (BAD_FRAME, -1) and change nothing
    h.len += 8;
    seen.clear();
    EXPECT_EQ(r.vm.serve_frame(h, &d, [&](int st) { seen.push_back(st); }), int(RKF_ST_BAD_FRAME));
    h.len -= 8;
    h.type = RKF_T_REPLY;
    EXPECT_EQ(r.vm.serve_frame(h, &d, [&](int st) { seen.push_back(st); }), -1);
    EXPECT_EQ(seen, (std::vector<int>{int(RKF_ST_BAD_FRAME), -1}));
    const uint64_t w = 7;
    std::vector<int> bad;
    EXPECT_EQ(r.vm.deliver(UNIMEM_IF_TOTAL, 1, &w, 1, [&](Status st) { bad.push_back(st); }), RK_NACK);
    EXPECT_EQ(bad, std::vector<int>{RK_NACK});
    EXPECT_EQ(r.vm.fill(3), 8u);
}

TEST(VmboxAnswerFirst, WhatArrivesDuringTheAnswerQueuesBehindTheHeldPacket)
{
    Rig r(16);
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(4), 0x1, 8), RK_OK); // visible before the packet
    rkf_mbox_deliver d;
    const rkf_frame_hdr h = delivery_frame(d, 4, 0x40);
    r.vm.serve_frame(h, &d, [&](int) {
        // a guest store and a local packet (answered first as well) arrive behind it
        EXPECT_EQ(r.vm.write(VMBOX_MIF_OFFSET(4), 0x2, 8), RK_OK);
        const uint64_t local[2] = {0x3, 0x4};
        EXPECT_EQ(r.vm.deliver(4, 2, local, 2, [&](Status) { EXPECT_EQ(r.vm.fill(4), 1u); }), RK_OK);
        // still held: only the word from before is visible, until the outer answer returns
        EXPECT_EQ(r.vm.fill(4), 1u);
        // FLUSH empties what the guest sees; the held words appear after the answer
        EXPECT_EQ(r.vm.write(kCtrlOff + VMBOX_CTRL_FLUSH, 1ull << 4, 8), RK_OK);
        EXPECT_EQ(r.vm.fill(4), 0u);
    });
    const std::vector<uint64_t> want{0x40, 0x41, 0x42, 0x43, 0x2, 0x3, 0x4};
    EXPECT_EQ(r.vm.fill(4), want.size());
    for (uint64_t v : want)
        EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(4)), v);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(4)), VMBOX_EMPTY_PATTERN);
}

TEST(VmboxAnswerFirst, ASnapshotDuringTheAnswerKeepsThePacketAndAResetDropsIt)
{
    Rig r(8);
    rkf_mbox_deliver d;
    const rkf_frame_hdr h = delivery_frame(d, 6, 0x60);
    VmboxState st;
    r.vm.serve_frame(h, &d, [&](int) { st = r.vm.save(); }); // acknowledged: it must be in the state
    ASSERT_EQ(st.fifos[6].size(), 4u);
    Rig b(8);
    ASSERT_TRUE(b.vm.load(st));
    for (uint64_t i = 0; i < 4; i++)
        EXPECT_EQ(b.load(VMBOX_MIF_OFFSET(6)), 0x60 + i);

    Rig c(8);
    c.vm.serve_frame(h, &d, [&](int) { c.vm.reset(); });
    EXPECT_EQ(c.vm.fill(6), 0u);                      // the reset took it; its publish changes nothing
    ASSERT_EQ(c.vm.deliver(6, 1, d.words, 4), RK_OK); // and the FIFO works as before
    EXPECT_EQ(c.vm.fill(6), 4u);
}

TEST(VmboxAnswerFirst, TheKifHoldsItsPacketsToo)
{
    Rig r(8);
    ASSERT_EQ(r.vm.write(kCtrlOff + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE, 8), RK_OK);
    const uint64_t pkt[4] = {0xa, 0xb, 0xc, 0xd};
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, pkt, 4,
                           [&](Status st) {
                               EXPECT_EQ(st, RK_OK);
                               EXPECT_EQ(r.load(kCtrlOff + VMBOX_CTRL_KIF_STATUS), 0u);
                               EXPECT_FALSE(r.vm.irq_level());
                           }),
              RK_OK);
    EXPECT_EQ(r.load(kCtrlOff + VMBOX_CTRL_KIF_STATUS), uint64_t(VMBOX_KIF_NONEMPTY | VMBOX_KIF_IRQ));
    EXPECT_TRUE(r.vm.irq_level());
    // refused from a PIF: answered NACK, nothing held
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, 5, pkt, 4, [](Status st) { EXPECT_EQ(st, RK_NACK); }), RK_NACK);
    EXPECT_EQ(r.load(VMBOX_KIF_OFFSET + VMBOX_MIF_COUNT), 4u);
}

// A sender thread delivers packets that answer first while a reader thread drains the FIFO: every
// word the reader sees belongs to a packet already answered, all arrive, in order (TSan runs it).
TEST(VmboxAnswerFirst, AReaderOnAnotherThreadNeverSeesAPacketBeforeItsAnswer)
{
    Rig r(64);
    constexpr uint64_t kPackets = 20000;
    std::atomic<uint64_t> answered{0};
    std::atomic<bool> bad_order{false}, early{false};
    std::thread reader([&] {
        uint64_t next = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (next < kPackets * 4 && std::chrono::steady_clock::now() < deadline) {
            uint64_t v = 0;
            r.vm.read(VMBOX_MIF_OFFSET(7), 8, v);
            if (v == VMBOX_EMPTY_PATTERN) {
                std::this_thread::yield();
                continue;
            }
            if (v != next) bad_order = true;
            if (v / 4 >= answered.load()) early = true; // its packet's answer had not returned yet
            next++;
        }
        EXPECT_EQ(next, kPackets * 4);
    });
    for (uint64_t p = 0; p < kPackets;) {
        const uint64_t w[4] = {4 * p, 4 * p + 1, 4 * p + 2, 4 * p + 3};
        const Status st = r.vm.deliver(7, 1, w, 4, [&](Status s) {
            if (s == RK_OK) answered.store(p + 1);
        });
        if (st == RK_OK)
            p++;
        else
            std::this_thread::yield(); // full: the reader drains it
    }
    reader.join();
    EXPECT_FALSE(bad_order.load());
    EXPECT_FALSE(early.load());
}

// ---- the kernel interface (KIF) ----

namespace {
constexpr uint64_t kCtrl = VMBOX_CTRL_OFFSET;
const uint64_t kPkt[4] = {0x1111, 0x2222, 0x3333, 0x4444};
uint64_t kif_counter(Rig &r, unsigned index)
{
    return r.load(kCtrl + VMBOX_CTRL_KIF_COUNTERS + 8 * index);
}
} // namespace

TEST(VmboxKif, TakesPacketsFromAKifOnlyAndOnlyWhileEnabled)
{
    Rig r;
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_CAPS), UNIMEM_CAP_KIF);
    // reset: disabled, so a node whose kernel does not listen refuses mailbox traffic
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_NACK);
    EXPECT_EQ(kif_counter(r, VMBOX_KIF_CNT_INDEX_REFUSED), 1u);
    ASSERT_EQ(r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8), RK_OK);
    // a user's PIF (or anything but a KIF) cannot post into the KIF: refused and logged
    const size_t errs = r.errors().size();
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, 5, kPkt, 4), RK_NACK);
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, 0, kPkt, 4), RK_NACK);
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 0u);
    EXPECT_EQ(kif_counter(r, VMBOX_KIF_CNT_INDEX_REFUSED), 3u);
    ASSERT_EQ(r.errors().size(), errs + 2);
    EXPECT_NE(r.errors().back().find("only a KIF may send into the KIF"), std::string::npos)
        << r.errors().back();
    // a KIF's packet is queued, read back in order through the KIF page
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_OK);
    EXPECT_EQ(r.load(VMBOX_KIF_OFFSET + VMBOX_MIF_COUNT), 4u);
    for (uint64_t w : kPkt)
        EXPECT_EQ(r.load(VMBOX_KIF_OFFSET + VMBOX_MIF_DATA), w);
    EXPECT_EQ(r.load(VMBOX_KIF_OFFSET + VMBOX_MIF_DATA), VMBOX_EMPTY_PATTERN);
    EXPECT_EQ(kif_counter(r, VMBOX_KIF_CNT_INDEX_ENQUEUED), 4u);
    EXPECT_EQ(kif_counter(r, VMBOX_KIF_CNT_INDEX_DEQUEUED), 4u);
    // the 64 MIFs and their counters are untouched: the KIF is a FIFO of its own
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_ENQUEUED), 0u);
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_DEQUEUED), 0u);
    for (unsigned m = 0; m < UNIMEM_IF_COUNT; m++)
        EXPECT_EQ(r.vm.fill(m), 0u);
    EXPECT_EQ(r.vm.counters().kif[VMBOX_KIF_CNT_INDEX_ENQUEUED], 4u);
}

TEST(VmboxKif, AFullKifNacksWholePacketsEvenInTheKnownIssueMode)
{
    Rig r(6, true);
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8);
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_OK);
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_NACK); // 2 slots: no truncation
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 4u);
    EXPECT_EQ(kif_counter(r, VMBOX_KIF_CNT_INDEX_NACKS), 1u);
    EXPECT_EQ(r.vm.counters().truncated, 0u);
    EXPECT_EQ(r.vm.counters().nacks, 0u);
}

TEST(VmboxKif, InterruptFollowsTheKifsOwnEnableAndFlush)
{
    Rig r;
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8);
    ASSERT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_OK);
    EXPECT_FALSE(r.vm.irq_level());
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_KIF_STATUS), VMBOX_KIF_NONEMPTY);
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_NONEMPTY), 0u); // the MIFs' bitmap does not carry it
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE, 8);
    EXPECT_TRUE(r.vm.irq_level());
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_KIF_STATUS), VMBOX_KIF_NONEMPTY | VMBOX_KIF_IRQ);
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_IRQ_STATUS), 0u);
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_FLUSH, 1, 8);
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 0u);
    EXPECT_FALSE(r.vm.irq_level());
    EXPECT_EQ(r.irq_changes, (std::vector<bool>{true, false}));
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_KIF_FLUSH), 0u);
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, ~0ull, 8); // reserved bits stay 0
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_KIF_CTRL), VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE);
    r.vm.reset();
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_KIF_CTRL), 0u);
}

TEST(VmboxKif, CpuStoresIntoTheKifAreABusErrorAndQueueNothing)
{
    Rig r;
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8);
    EXPECT_EQ(r.vm.write(VMBOX_KIF_OFFSET + VMBOX_MIF_DATA, 7, 8), RK_SLAVE_ERROR);
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 0u);
    ASSERT_FALSE(r.errors().empty());
    EXPECT_NE(r.errors().back().find("KIF"), std::string::npos) << r.errors().back();
    uint64_t v = 1;
    EXPECT_EQ(r.vm.read(VMBOX_KIF_OFFSET + VMBOX_MIF_DATA, 4, v), RK_SLAVE_ERROR); // narrow load
    EXPECT_EQ(v, 0u);
}

TEST(VmboxKif, FabricDeliveryIntoTheKifNeedsAKifSender)
{
    Rig r;
    r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8);
    rkf_frame_hdr h{};
    h.type = RKF_T_REQ;
    h.svc = RKF_SVC_UNIMEM_MBOX;
    h.op = RKF_OP_MBOX_DELIVER;
    h.src = 2;
    rkf_mbox_deliver d{};
    d.mif = UNIMEM_KIF;
    d.src_if = 7; // a user's PIF on node 2
    d.nwords = 4;
    std::copy(kPkt, kPkt + 4, d.words);
    h.len = offsetof(rkf_mbox_deliver, words) + 4 * 8;
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_REFUSED));
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 0u);
    d.src_if = UNIMEM_KIF;
    EXPECT_EQ(r.vm.serve_frame(h, &d), int(RKF_ST_OK));
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 4u);
    EXPECT_EQ(kif_counter(r, VMBOX_KIF_CNT_INDEX_REFUSED), 1u);
}

TEST(VmboxKif, WithoutTheKifItsRegistersAreUnmappedAndEveryDeliveryRefused)
{
    Rig r(8, false, false);
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_CAPS), 0u);
    EXPECT_EQ(r.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8), RK_OK); // logged, ignored
    EXPECT_EQ(r.load(kCtrl + VMBOX_CTRL_KIF_CTRL), 0u);
    EXPECT_EQ(r.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_NACK);
    EXPECT_EQ(r.load(VMBOX_KIF_OFFSET + VMBOX_MIF_DATA), 0u); // unmapped: reads 0, not the empty pattern
    EXPECT_EQ(r.vm.fill(UNIMEM_KIF), 0u);
    EXPECT_GE(r.vm.counters().bad_access, 4u);
}

TEST(VmboxKif, SaveAndLoadKeepTheKifAndRefuseWhatTheDeviceCannotHold)
{
    Rig a(8);
    a.vm.write(kCtrl + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE, 8);
    ASSERT_EQ(a.vm.deliver(UNIMEM_KIF, UNIMEM_KIF, kPkt, 4), RK_OK);
    a.load(VMBOX_KIF_OFFSET);             // one word dequeued
    a.vm.deliver(UNIMEM_KIF, 3, kPkt, 4); // refused: counted
    const VmboxState st = a.vm.save();
    ASSERT_EQ(st.fifos[UNIMEM_KIF].size(), 3u);

    Rig b(8);
    ASSERT_TRUE(b.vm.load(st));
    EXPECT_TRUE(b.vm.irq_level());
    for (uint64_t off : std::initializer_list<uint64_t>{
             kCtrl + VMBOX_CTRL_KIF_CTRL, kCtrl + VMBOX_CTRL_KIF_STATUS, VMBOX_KIF_OFFSET + VMBOX_MIF_COUNT,
             kCtrl + VMBOX_CTRL_KIF_COUNTERS + VMBOX_KIF_CNT_ENQUEUED,
             kCtrl + VMBOX_CTRL_KIF_COUNTERS + VMBOX_KIF_CNT_DEQUEUED,
             kCtrl + VMBOX_CTRL_KIF_COUNTERS + VMBOX_KIF_CNT_REFUSED})
        EXPECT_EQ(b.load(off), a.load(off)) << std::hex << off;
    for (unsigned i = 1; i < 4; i++)
        EXPECT_EQ(b.load(VMBOX_KIF_OFFSET), kPkt[i]);
    EXPECT_FALSE(b.vm.irq_level());

    VmboxState bad = st;
    bad.regs.kif_ctrl = 1ull << 5; // no such bit
    Rig c(8);
    EXPECT_FALSE(c.vm.load(bad));
    bad = st;
    bad.fifos[UNIMEM_KIF].assign(9, 0); // more than the depth
    EXPECT_FALSE(c.vm.load(bad));
    Rig none(8, false, false); // a device without the KIF cannot take one that holds words
    EXPECT_FALSE(none.vm.load(st));
    EXPECT_EQ(c.vm.fill(UNIMEM_KIF), 0u);
    VmboxState empty = Rig(8).vm.save();
    EXPECT_TRUE(none.vm.load(empty)); // but loads a state whose KIF is in its reset state
}

// ---- the device operations (unimem_capi.h): the state as one byte string ----

namespace {
struct OpsRig {
    test::TestHost th;
    RkHost raw = th.raw();
    void *core = nullptr;
    explicit OpsRig(uint32_t depth = 8, int kif = 1)
    {
        const RkVmboxConfig cfg = {depth, 0, kif};
        char err[128] = "";
        core = rk_vmbox_device_ops.create(&raw, &cfg, err, sizeof err);
        EXPECT_NE(core, nullptr) << err;
    }
    ~OpsRig() { rk_vmbox_device_ops.free(core); }
    std::vector<uint8_t> save()
    {
        uint8_t *buf = nullptr;
        uint64_t len = 0;
        EXPECT_EQ(rk_vmbox_device_ops.save(core, &buf, &len), 0);
        std::vector<uint8_t> v(buf, buf + len);
        free(buf);
        return v;
    }
    int load(const std::vector<uint8_t> &b, std::string *msg = nullptr)
    {
        char m[300] = "";
        const int rc = rk_vmbox_device_ops.load(core, b.data(), b.size(), m, sizeof m);
        if (msg) *msg = m;
        return rc;
    }
    uint64_t rd(uint64_t off)
    {
        uint64_t v = 0;
        EXPECT_EQ(rk_vmbox_device_ops.regions[0].read(core, off, 8, &v), RK_OK);
        return v;
    }
    rk_status wr(uint64_t off, uint64_t v) { return rk_vmbox_device_ops.regions[0].write(core, off, v, 8); }
};
} // namespace

TEST(VmboxOps, SavedStateLoadsIntoAFreshCoreAndSavesToTheSameBytes)
{
    OpsRig a;
    for (uint64_t i = 0; i < 5; i++)
        ASSERT_EQ(a.wr(VMBOX_MIF_OFFSET(2), 0x20 + i), RK_OK);
    a.rd(VMBOX_MIF_OFFSET(2)); // the ring's head moves
    ASSERT_EQ(a.wr(VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_ENABLE, 1ull << 2), RK_OK);
    ASSERT_EQ(a.wr(VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE), RK_OK);
    const std::vector<uint8_t> st = a.save();

    OpsRig b;
    std::string msg;
    ASSERT_EQ(b.load(st, &msg), 0) << msg;
    EXPECT_EQ(b.save(), st);
    EXPECT_EQ(rk_vmbox_device_ops.irq_level(b.core, 0), 1);
    for (uint64_t off : std::initializer_list<uint64_t>{
             VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_STATUS, VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL,
             VMBOX_CTRL_OFFSET + VMBOX_CTRL_ENQUEUED, VMBOX_CTRL_OFFSET + VMBOX_CTRL_DEQUEUED,
             VMBOX_MIF_OFFSET(2) + VMBOX_MIF_COUNT})
        EXPECT_EQ(b.rd(off), a.rd(off)) << std::hex << off;
    for (int i = 0; i < 5; i++) // the same words in the same order, then the empty pattern
        EXPECT_EQ(b.rd(VMBOX_MIF_OFFSET(2)), a.rd(VMBOX_MIF_OFFSET(2))) << i;
}

TEST(VmboxOps, ATruncatedALongAndAnOutOfRangeStateAreRefusedAndChangeNothing)
{
    OpsRig a;
    ASSERT_EQ(a.wr(VMBOX_MIF_OFFSET(7), 0x77), RK_OK);
    const std::vector<uint8_t> good = a.save();
    OpsRig b;
    ASSERT_EQ(b.wr(VMBOX_MIF_OFFSET(1), 0x11), RK_OK);
    const std::vector<uint8_t> before = b.save();
    std::string msg;

    std::vector<uint8_t> bad(good.begin(), good.end() - 1); // truncated: the last FIFO's count
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("fifos"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);

    bad = good;
    bad.push_back(0); // trailing bytes
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("left over"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);

    bad = good;
    bad[0] = 9; // depth, the first field: 9 words per FIFO on a device of 8
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("depth"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);

    bad = good;
    bad[4 + 8] = 0x80; // regs.kif_ctrl (after depth and irq_enable): no such bit
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("kif_ctrl"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);
    EXPECT_EQ(b.rd(VMBOX_MIF_OFFSET(1)), 0x11u);
}

TEST(VmboxOps, AnUnalignedAccessIsADecodeErrorAsOnTheBus)
{
    OpsRig r;
    uint64_t v = 1;
    EXPECT_EQ(rk_vmbox_device_ops.regions[0].read(r.core, VMBOX_CTRL_OFFSET + VMBOX_CTRL_ID + 2, 4, &v),
              RK_DECODE_ERROR);
    EXPECT_EQ(v, 0u);
    EXPECT_EQ(rk_vmbox_device_ops.regions[0].write(r.core, VMBOX_MIF_OFFSET(0) + 4, 1, 8), RK_DECODE_ERROR);
    EXPECT_EQ(r.rd(VMBOX_MIF_OFFSET(0) + VMBOX_MIF_COUNT), 0u);
    EXPECT_EQ(r.th.guest_errors().size(), 2u);
}
