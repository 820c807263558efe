// Unit tests of the Unimem vmbox core (hw/unimem/vmbox.cc).
#include <gtest/gtest.h>

#include <vector>

#include "vmbox.h"

using namespace rackemu::unimem;

namespace {
struct Rig {
    std::vector<bool> irq_changes;
    std::vector<std::string> errors;
    Vmbox vm;
    explicit Rig(unsigned depth = 8, bool known_issue = false)
        : vm(VmboxHost{[this](bool l) { irq_changes.push_back(l); },
                       [this](const std::string &m) { errors.push_back(m); }},
             depth, known_issue)
    {
    }
    uint64_t load(uint64_t off, unsigned size = 8)
    {
        uint64_t v = 0;
        EXPECT_EQ(vm.read(off, size, v), Vmbox::Result::Ok);
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
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(3), 0x11, 8), Vmbox::Result::Ok);
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(3) + 8, 0x22, 8), Vmbox::Result::Ok); // burst's second beat
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(6), 0x66, 8), Vmbox::Result::Ok);
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
        ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(1), i, 8), Vmbox::Result::Ok);
    EXPECT_EQ(r.vm.write(VMBOX_MIF_OFFSET(1), 99, 8), Vmbox::Result::BusError);
    EXPECT_EQ(r.vm.counters().nacks, 1u);
    for (uint64_t i = 0; i < 4; i++)
        EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(1)), i);
}

TEST(Vmbox, NarrowFifoAccessIsRefusedAndLogged)
{
    Rig r;
    uint64_t v;
    EXPECT_EQ(r.vm.write(VMBOX_MIF_OFFSET(0), 1, 4), Vmbox::Result::BusError);
    EXPECT_EQ(r.vm.read(VMBOX_MIF_OFFSET(0), 4, v), Vmbox::Result::BusError);
    EXPECT_EQ(r.vm.fill(0), 0u);
    EXPECT_EQ(r.errors.size(), 2u);
}

TEST(Vmbox, BurstIsAllOrNothingByDefault)
{
    Rig r(6);
    const uint64_t pkt[4] = {1, 2, 3, 4};
    EXPECT_EQ(r.vm.deliver(2, pkt, 4), Vmbox::Delivery::Ack);
    EXPECT_EQ(r.vm.deliver(2, pkt, 4), Vmbox::Delivery::Nack); // 2 slots left
    EXPECT_EQ(r.vm.fill(2), 4u);
}

TEST(Vmbox, KnownIssueModeTruncatesAndStillAcks)
{
    Rig r(6, true);
    const uint64_t pkt[4] = {1, 2, 3, 4};
    EXPECT_EQ(r.vm.deliver(2, pkt, 4), Vmbox::Delivery::Ack);
    EXPECT_EQ(r.vm.deliver(2, pkt, 4), Vmbox::Delivery::Ack); // sec. 5.1.2
    EXPECT_EQ(r.vm.fill(2), 6u);
    EXPECT_EQ(r.vm.counters().truncated, 2u);
    EXPECT_EQ(r.vm.deliver(2, pkt, 4), Vmbox::Delivery::Nack); // full FIFO always NACKs
}

TEST(Vmbox, InterruptFollowsEnabledNonEmptyFifos)
{
    Rig r;
    const uint64_t c = VMBOX_CTRL_OFFSET;
    ASSERT_EQ(r.vm.write(VMBOX_MIF_OFFSET(7), 5, 8), Vmbox::Result::Ok);
    EXPECT_FALSE(r.vm.irq_level()); // not enabled yet
    ASSERT_EQ(r.vm.write(c + VMBOX_CTRL_IRQ_ENABLE, 1ull << 7, 8), Vmbox::Result::Ok);
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
    EXPECT_EQ(r.vm.deliver(64, &w, 1), Vmbox::Delivery::Nack);
    EXPECT_EQ(r.vm.deliver(3, &w, 0), Vmbox::Delivery::Nack);
    EXPECT_EQ(r.load(VMBOX_MIF_OFFSET(3) + 0x900), 0u);
    EXPECT_EQ(r.vm.write(VMBOX_CTRL_OFFSET + VMBOX_CTRL_ID, 1, 8), Vmbox::Result::Ok);
    EXPECT_EQ(r.load(VMBOX_CTRL_OFFSET + VMBOX_CTRL_ID), VMBOX_ID_VALUE);
    EXPECT_EQ(r.load(VMBOX_CTRL_OFFSET + VMBOX_CTRL_DEPTH), 8u);
}
