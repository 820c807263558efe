// Unit tests of the Unimem packetizer core (hw/unimem/packetizer.cc).
#include <gtest/gtest.h>

#include <vector>

#include "packetizer.h"

using namespace rackemu::unimem;

namespace {
struct Sent {
    unsigned pif;
    uint64_t tag, dest;
    uint64_t w[4];
};
struct Rig {
    std::vector<Sent> sent;
    std::vector<std::string> errors;
    Packetizer p{PacketizerHost{[this](unsigned pif, uint64_t tag, uint64_t dest, const uint64_t w[4]) {
                                    sent.push_back({pif, tag, dest, {w[0], w[1], w[2], w[3]}});
                                },
                                [this](const std::string &m) { errors.push_back(m); }}};
    static constexpr uint64_t kBase = 0x0b000000;
    Rig()
    {
        p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, kBase, 8);
        p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(4), 0xABCD12345678ull, 8);
        p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PID_CONF, 1ull << 4, 8);
    }
    void setup(unsigned pif, uint64_t dest, uint64_t p0lo = 0xFFFF000000000000ull | 0x1111,
               uint64_t p0hi = 0x2222, uint64_t p1lo = 0x3333, uint64_t p1hi = 0x4444)
    {
        const uint64_t b = PKTZ_PIF_OFFSET(pif);
        p.write(b + PKTZ_PIF_DEST, dest, 8);
        p.write(b + PKTZ_PIF_PAYLOAD0, p0lo, 8);
        p.write(b + PKTZ_PIF_PAYLOAD0 + 8, p0hi, 8);
        p.write(b + PKTZ_PIF_PAYLOAD1, p1lo, 8);
        p.write(b + PKTZ_PIF_PAYLOAD1 + 8, p1hi, 8);
    }
};
constexpr uint64_t kDest = UNIMEM_GADDR(1, 0x0b000000 + 5 * 0x1000);
} // namespace

TEST(Packetizer, ThirdRegisterWriteSendsThePacketWithThePidtPrefix)
{
    Rig r;
    const uint64_t b = PKTZ_PIF_OFFSET(4);
    r.p.write(b + PKTZ_PIF_PAYLOAD0, 0xFFFF000000000000ull | 0x1111, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD0 + 8, 0x2222, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD1, 0x3333, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD1 + 8, 0x4444, 8);
    EXPECT_TRUE(r.sent.empty());
    r.p.write(b + PKTZ_PIF_DEST, kDest, 8);
    ASSERT_EQ(r.sent.size(), 1u);
    const Sent &s = r.sent[0];
    EXPECT_EQ(s.pif, 4u);
    EXPECT_EQ(s.dest, kDest);
    // The writer's bits [47:0] of payload0 are replaced by the PIDT entry.
    EXPECT_EQ(s.w[0], 0xFFFF000000000000ull | 0xABCD12345678ull);
    EXPECT_EQ(s.w[1], 0x2222u);
    EXPECT_EQ(s.w[2], 0x3333u);
    EXPECT_EQ(s.w[3], 0x4444u);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_PEND);
}

TEST(Packetizer, AckAndNackLandInTheStatusAndClearOnTheNextPacket)
{
    Rig r;
    r.setup(4, kDest);
    r.p.complete(r.sent[0].tag, Completion::Ack);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_ACK);
    r.setup(4, kDest);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_PEND);
    r.p.complete(r.sent[1].tag, Completion::Nack);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK);
    EXPECT_EQ(r.p.counters().acked, 1u);
    EXPECT_EQ(r.p.counters().nacked, 1u);
}

TEST(Packetizer, DestinationOutsideBaseDestIsIllegalAndNothingIsSent)
{
    Rig r;
    r.setup(4, UNIMEM_GADDR(1, 0x0c000000));
    EXPECT_TRUE(r.sent.empty());
    EXPECT_EQ(r.p.status(4), PKTZ_ST_ILLEGAL);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_ILLEGAL, 8), 1u);
}

TEST(Packetizer, ClearPidConfBitSendsNothing)
{
    Rig r;
    r.setup(5, kDest); // PID_CONF bit 5 is clear
    EXPECT_TRUE(r.sent.empty());
    EXPECT_EQ(r.p.status(5), 0u);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_NOPID, 8), 1u);
}

TEST(Packetizer, WriteWhilePendingSetsOverwrBufAndIsDropped)
{
    Rig r;
    r.setup(4, kDest);
    r.p.write(PKTZ_PIF_OFFSET(4) + PKTZ_PIF_PAYLOAD1, 0xDEAD, 8);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_PEND | PKTZ_ST_OVERWR_BUF);
    EXPECT_EQ(r.p.read(PKTZ_PIF_OFFSET(4) + PKTZ_PIF_PAYLOAD1, 8), 0x3333u);
    r.p.complete(r.sent[0].tag, Completion::Ack);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_ACK | PKTZ_ST_OVERWR_BUF);
}

TEST(Packetizer, HalfWrittenPayloadDoesNotTrigger)
{
    Rig r;
    const uint64_t b = PKTZ_PIF_OFFSET(4);
    r.p.write(b + PKTZ_PIF_PAYLOAD0, 1, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD1, 2, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD1 + 8, 3, 8);
    r.p.write(b + PKTZ_PIF_DEST, kDest, 8);
    EXPECT_TRUE(r.sent.empty()); // payload0's upper half missing
    r.p.write(b + PKTZ_PIF_PAYLOAD0 + 8, 4, 4);
    r.p.write(b + PKTZ_PIF_PAYLOAD0 + 12, 0, 4);
    EXPECT_EQ(r.sent.size(), 1u);
}

TEST(Packetizer, ClrReqAbandonsThePendingPacketAndIgnoresItsLateAck)
{
    Rig r;
    r.setup(4, kDest);
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_CLR_REQ, 1ull << 4, 8);
    EXPECT_EQ(r.p.status(4), 0u);
    r.p.complete(r.sent[0].tag, Completion::Ack);
    EXPECT_EQ(r.p.status(4), 0u);
    EXPECT_EQ(r.p.counters().stale_completions, 1u);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_CLR_REQ, 8), 0u); // write-clear reads 0
}

TEST(Packetizer, LinkDownFailsEveryPendingPif)
{
    Rig r;
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(9), 7, 8);
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PID_CONF, (1ull << 4) | (1ull << 9), 8);
    r.setup(4, kDest);
    r.setup(9, kDest);
    r.p.fail_all_pending();
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    EXPECT_EQ(r.p.status(9), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    r.p.complete(r.sent[0].tag, Completion::Ack); // too late
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
}

TEST(Packetizer, TifMasksReservedBitsAndForgedTagsAreIgnored)
{
    Rig r;
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(1), ~0ull, 8);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(1), 8), PKTZ_PID_MASK);
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, ~0ull, 8);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, 8), PKTZ_BASE_DEST_MASK);
    r.p.complete(~0ull, Completion::Ack);
    r.p.complete(pktz_tag(3, 77), Completion::Ack);
    EXPECT_EQ(r.p.counters().stale_completions, 2u);
    EXPECT_EQ(r.p.read(0x7ffff0, 8), 0u); // beyond the TIF: logged, reads 0
    EXPECT_FALSE(r.errors.empty());
}
