// Unit tests of the Unimem packetizer core (hw/unimem/packetizer.cc).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "packetizer.h"
#include "test_host.h"
#include "unimem_capi.h"
#include "vmbox.h"

using namespace rackemu;
using namespace rackemu::unimem;

namespace {
struct Sent {
    unsigned pif;
    uint64_t tag, dest;
    unsigned mif;
    uint64_t w[4];
};
struct Rig {
    test::TestHost th;
    std::vector<Sent> sent;
    Packetizer p{th.host(),
                 [this](unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t w[4]) {
                     sent.push_back({pif, tag, dest, mif, {w[0], w[1], w[2], w[3]}});
                 }};
    std::vector<std::string> errors() { return th.guest_errors(); }
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
    r.p.complete(r.sent[0].tag, RK_OK);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_ACK);
    r.setup(4, kDest);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_PEND);
    r.p.complete(r.sent[1].tag, RK_NACK);
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
    r.p.complete(r.sent[0].tag, RK_OK);
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
    r.p.complete(r.sent[0].tag, RK_OK);
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
    r.p.complete(r.sent[0].tag, RK_OK); // too late
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
}

TEST(Packetizer, TifMasksReservedBitsAndForgedTagsAreIgnored)
{
    Rig r;
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(1), ~0ull, 8);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(1), 8), PKTZ_PID_MASK);
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, ~0ull, 8);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, 8), PKTZ_BASE_DEST_MASK);
    r.p.complete(~0ull, RK_OK);
    r.p.complete(pktz_tag(3, 77), RK_OK);
    EXPECT_EQ(r.p.counters().stale_completions, 2u);
    EXPECT_EQ(r.p.read(0x7ffff0, 8), 0u); // beyond the TIF: logged, reads 0
    EXPECT_FALSE(r.errors().empty());
}

TEST(Packetizer, CountersReadBackThroughTheirTableOffsets)
{
    Rig r;
    r.setup(4, kDest);
    r.p.complete(r.sent[0].tag, RK_UNREACHABLE); // a fabric failure: NACK | FABRIC_ERR
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    r.setup(5, kDest); // NOPID
    const uint64_t c = PKTZ_TIF_OFFSET + PKTZ_TIF_COUNTERS;
    EXPECT_EQ(r.p.read(c + PKTZ_CNT_SENT, 8), 1u);
    EXPECT_EQ(r.p.read(c + PKTZ_CNT_NACKED, 8), 1u);
    EXPECT_EQ(r.p.read(c + PKTZ_CNT_NOPID, 8), 1u);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_SENT, 8), 1u); // the driver's names
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_ID, 8), PKTZ_ID_VALUE);
    const PacketizerCounters k = r.p.counters();
    EXPECT_EQ(k.sent, 1u);
    EXPECT_EQ(k.fabric_errors, 1u);
    EXPECT_EQ(k.nopid, 1u);
    const char *names[] = {PKTZ_CNT_NAMES};
    EXPECT_STREQ(names[PKTZ_CNT_INDEX_ILLEGAL], "illegal");
}

TEST(Packetizer, ReadOnlyRegistersAreNamedInTheLogAndKeepTheirValue)
{
    Rig r;
    r.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_SENT, 99, 8);
    r.p.write(PKTZ_PIF_OFFSET(7) + PKTZ_PIF_STATUS, 0xff, 8);
    EXPECT_EQ(r.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_SENT, 8), 0u);
    EXPECT_EQ(r.p.status(7), 0u);
    ASSERT_EQ(r.errors().size(), 2u);
    EXPECT_NE(r.errors()[0].find("SENT"), std::string::npos) << r.errors()[0];
    EXPECT_NE(r.errors()[1].find("STATUS[7]"), std::string::npos) << r.errors()[1];
    EXPECT_EQ(r.p.counters().bad_access, 2u);
    EXPECT_EQ(r.p.read(PKTZ_PIF_OFFSET(7) + PKTZ_PIF_END, 8), 0u); // the rest of a PIF page
    EXPECT_EQ(r.p.counters().bad_access, 3u);
}

TEST(Packetizer, FabricRepliesMapToAckNackAndFabricError)
{
    Rig r;
    rkf_frame_hdr h{};
    h.type = RKF_T_REPLY;
    for (uint16_t st : {uint16_t(RKF_ST_OK), uint16_t(RKF_ST_REFUSED), uint16_t(RKF_ST_NOROUTE)}) {
        r.setup(4, kDest);
        h.tag = r.sent.back().tag;
        h.status = st;
        r.p.serve_reply(h);
    }
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    const PacketizerCounters k = r.p.counters();
    EXPECT_EQ(k.acked, 1u);
    EXPECT_EQ(k.nacked, 2u);
    EXPECT_EQ(k.fabric_errors, 1u);
}

TEST(Packetizer, SaveAndLoadKeepTheRegistersAndTheHalfWrittenSetup)
{
    Rig a;
    a.setup(4, kDest);
    a.p.complete(a.sent[0].tag, RK_OK);
    const uint64_t b9 = PKTZ_PIF_OFFSET(9);
    a.p.write(b9 + PKTZ_PIF_PAYLOAD0, 0x99, 8);
    a.p.write(b9 + PKTZ_PIF_PAYLOAD0 + 8, 0x98, 8);
    a.p.write(b9 + PKTZ_PIF_PAYLOAD1, 0x97, 8);
    a.p.write(b9 + PKTZ_PIF_DEST, kDest, 8); // payload1's upper half still missing
    a.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(9), 0x900, 8);
    a.p.write(PKTZ_TIF_OFFSET + PKTZ_TIF_PID_CONF, (1ull << 4) | (1ull << 9), 8);
    const PacketizerState st = a.p.save();

    Rig b; // its constructor programs other TIF values: load replaces them
    ASSERT_TRUE(b.p.load(st));
    for (uint64_t off : std::initializer_list<uint64_t>{
             PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, PKTZ_TIF_OFFSET + PKTZ_TIF_PID_CONF,
             PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(4), PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(9),
             PKTZ_TIF_OFFSET + PKTZ_TIF_SENT, PKTZ_TIF_OFFSET + PKTZ_TIF_ACKED,
             PKTZ_PIF_OFFSET(4) + PKTZ_PIF_STATUS, PKTZ_PIF_OFFSET(4) + PKTZ_PIF_PAYLOAD1 + 8,
             b9 + PKTZ_PIF_PAYLOAD0, b9 + PKTZ_PIF_DEST})
        EXPECT_EQ(b.p.read(off, 8), a.p.read(off, 8)) << std::hex << off;
    // The written-bytes tracking came along: the missing half completes the setup.
    b.p.write(b9 + PKTZ_PIF_PAYLOAD1 + 8, 0x96, 8);
    ASSERT_EQ(b.sent.size(), 1u);
    EXPECT_EQ(b.sent[0].pif, 9u);
    EXPECT_EQ(b.sent[0].w[0], 0x900u);
    EXPECT_EQ(b.sent[0].w[3], 0x96u);
}

TEST(Packetizer, APifWaitingAtSaveCompletesAfterLoadWithFabricError)
{
    Rig a;
    a.setup(4, kDest);
    a.p.write(PKTZ_PIF_OFFSET(4) + PKTZ_PIF_PAYLOAD1, 1, 8); // OVERWR_BUF while pending
    const PacketizerState st = a.p.save();
    ASSERT_TRUE(st.pifs[4].waiting);

    Rig b;
    ASSERT_TRUE(b.p.load(st));
    EXPECT_EQ(b.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR | PKTZ_ST_OVERWR_BUF);
    EXPECT_EQ(b.p.counters().fabric_errors, 1u);
    EXPECT_EQ(b.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_NACKED, 8), 1u);
    b.p.complete(a.sent[0].tag, RK_OK); // the saved machine's acknowledgement is stale here
    EXPECT_EQ(b.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR | PKTZ_ST_OVERWR_BUF);
    EXPECT_EQ(b.p.counters().stale_completions, 1u);
    b.setup(4, kDest); // and the PIF works again
    ASSERT_EQ(b.sent.size(), 1u);
    b.p.complete(b.sent[0].tag, RK_OK);
    EXPECT_EQ(b.p.status(4), PKTZ_ST_ACK);
}

TEST(Packetizer, LoadRefusesImpossibleStatesAndChangesNothing)
{
    Rig a;
    const PacketizerState good = a.p.save();
    std::vector<PacketizerState> bad(8, good);
    bad[0].pidt[3] = 1ull << 48;          // beyond the PID's 48 bits
    bad[1].base_dest = 1;                 // outside bits [33:18]
    bad[2].pifs[1].status = 1u << 7;      // unknown status bit
    bad[3].pifs[1].status = PKTZ_ST_PEND; // PEND without a waiting packet
    bad[4].pifs[1].waiting = true;        // waiting without PEND
    bad[5].pifs[1].status = PKTZ_ST_ACK | PKTZ_ST_NACK;
    bad[6].pifs[1].written = {0xffff, 0xffff, 0x1f}; // a complete setup is never at rest
    bad[7].pifs[1].status = PKTZ_ST_FABRIC_ERR;      // FABRIC_ERR only with NACK
    for (size_t i = 0; i < bad.size(); i++)
        EXPECT_FALSE(a.p.load(bad[i])) << i;
    EXPECT_EQ(a.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, 8), Rig::kBase);
    EXPECT_EQ(a.p.read(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(4), 8), 0xABCD12345678ull);
    EXPECT_TRUE(a.p.load(good));
}

// ---- the kernel interface (KIF) ----

namespace {
constexpr uint64_t kTif = PKTZ_TIF_OFFSET;
constexpr uint64_t kKernelPid = 0x0f0000000000ull | 0x3f000000000ull; // any 48-bit value
constexpr uint64_t kKifDest = UNIMEM_GADDR(1, Rig::kBase + VMBOX_KIF_OFFSET);
void kif_setup(Rig &r, uint64_t dest, uint64_t p0lo = 0xBEEF000000000000ull | 0x1111)
{
    const uint64_t b = PKTZ_KIF_OFFSET;
    r.p.write(b + PKTZ_PIF_PAYLOAD0, p0lo, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD0 + 8, 0x2222, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD1, 0x3333, 8);
    r.p.write(b + PKTZ_PIF_PAYLOAD1 + 8, 0x4444, 8);
    r.p.write(b + PKTZ_PIF_DEST, dest, 8);
}
void kif_enable(Rig &r)
{
    r.p.write(kTif + PKTZ_TIF_KIF_PIDT, kKernelPid, 8);
    r.p.write(kTif + PKTZ_TIF_KIF_CONF, 1, 8);
}
uint64_t kif_counter(Rig &r, unsigned index)
{
    return r.p.read(kTif + PKTZ_TIF_KIF_COUNTERS + 8 * index, 8);
}
} // namespace

TEST(PacketizerKif, SendsWithKifPidtToAnyNodesMifOrKif)
{
    Rig r;
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_CAPS, 8), UNIMEM_CAP_KIF);
    kif_enable(r);
    kif_setup(r, kDest); // MIF 5 of node 1
    ASSERT_EQ(r.sent.size(), 1u);
    EXPECT_EQ(r.sent[0].pif, UNIMEM_KIF);
    EXPECT_EQ(r.sent[0].mif, 5u);
    EXPECT_EQ(r.sent[0].tag >> 56, uint64_t(UNIMEM_KIF));
    EXPECT_EQ(r.sent[0].w[0], 0xBEEF000000000000ull | kKernelPid); // PID from KIF_PIDT only
    EXPECT_EQ(r.p.read(PKTZ_KIF_OFFSET + PKTZ_PIF_STATUS, 8), uint64_t(PKTZ_ST_PEND));
    r.p.complete(r.sent[0].tag, RK_OK);
    EXPECT_EQ(r.p.status(UNIMEM_KIF), PKTZ_ST_ACK);
    kif_setup(r, kKifDest); // node 1's KIF
    ASSERT_EQ(r.sent.size(), 2u);
    EXPECT_EQ(r.sent[1].mif, UNIMEM_KIF);
    EXPECT_EQ(r.sent[1].dest, kKifDest);
    r.p.complete(r.sent[1].tag, RK_NACK);
    EXPECT_EQ(r.p.status(UNIMEM_KIF), PKTZ_ST_NACK);
    EXPECT_EQ(kif_counter(r, PKTZ_KIF_CNT_INDEX_SENT), 2u);
    EXPECT_EQ(kif_counter(r, PKTZ_KIF_CNT_INDEX_ACKED), 1u);
    EXPECT_EQ(kif_counter(r, PKTZ_KIF_CNT_INDEX_NACKED), 1u);
    // the seed's counters count the 64 PIFs only
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_SENT, 8), 0u);
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_ACKED, 8), 0u);
}

TEST(PacketizerKif, APifCannotNameAKifAndTheKifNothingOutsideItsWindow)
{
    Rig r;
    kif_enable(r);
    r.setup(4, kKifDest); // a user's PIF aimed at node 1's KIF
    EXPECT_TRUE(r.sent.empty());
    EXPECT_EQ(r.p.status(4), PKTZ_ST_ILLEGAL);
    kif_setup(r, UNIMEM_GADDR(1, Rig::kBase + VMBOX_KIF_OFFSET + 0x1000)); // the page after the KIF's
    EXPECT_TRUE(r.sent.empty());
    EXPECT_EQ(r.p.status(UNIMEM_KIF), PKTZ_ST_ILLEGAL);
    EXPECT_EQ(kif_counter(r, PKTZ_KIF_CNT_INDEX_ILLEGAL), 1u);
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_ILLEGAL, 8), 1u);
}

TEST(PacketizerKif, KifConfClearSendsNothing)
{
    Rig r;
    r.p.write(kTif + PKTZ_TIF_KIF_PIDT, kKernelPid, 8);
    kif_setup(r, kDest);
    EXPECT_TRUE(r.sent.empty());
    EXPECT_EQ(r.p.status(UNIMEM_KIF), 0u);
    EXPECT_EQ(kif_counter(r, PKTZ_KIF_CNT_INDEX_NOPID), 1u);
    r.p.write(kTif + PKTZ_TIF_KIF_CONF, ~0ull, 8); // one valid bit
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_KIF_CONF, 8), 1u);
    r.p.write(kTif + PKTZ_TIF_KIF_PIDT, ~0ull, 8); // 48 valid bits
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_KIF_PIDT, 8), PKTZ_PID_MASK);
}

TEST(PacketizerKif, OverwriteFabricFailureAndClrReqActOnTheKifAlone)
{
    Rig r;
    kif_enable(r);
    kif_setup(r, kDest);
    r.setup(4, kDest);
    ASSERT_EQ(r.sent.size(), 2u);
    r.p.write(PKTZ_KIF_OFFSET + PKTZ_PIF_PAYLOAD1, 1, 8); // while PEND: dropped
    EXPECT_EQ(r.p.status(UNIMEM_KIF), PKTZ_ST_PEND | PKTZ_ST_OVERWR_BUF);
    r.p.write(kTif + PKTZ_TIF_KIF_CLR_REQ, 1, 8);
    EXPECT_EQ(r.p.status(UNIMEM_KIF), 0u);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_PEND); // PIF 4 keeps its packet
    r.p.complete(r.sent[0].tag, RK_OK);     // the abandoned KIF packet's late answer
    EXPECT_EQ(r.p.status(UNIMEM_KIF), 0u);
    EXPECT_EQ(r.p.counters().stale_completions, 1u);
    kif_setup(r, kDest);
    r.p.fail_all_pending();
    EXPECT_EQ(r.p.status(UNIMEM_KIF), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    EXPECT_EQ(r.p.status(4), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    EXPECT_EQ(kif_counter(r, PKTZ_KIF_CNT_INDEX_NACKED), 1u);
    EXPECT_EQ(r.p.read(kTif + PKTZ_TIF_NACKED, 8), 1u);
}

TEST(PacketizerKif, WithoutTheKifItsPageAndRowsAreUnmapped)
{
    test::TestHost th;
    std::vector<Sent> sent;
    Packetizer p{th.host(),
                 [&](unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t w[4]) {
                     sent.push_back({pif, tag, dest, mif, {w[0], w[1], w[2], w[3]}});
                 },
                 false};
    EXPECT_EQ(p.read(kTif + PKTZ_TIF_CAPS, 8), 0u);
    p.write(kTif + PKTZ_TIF_KIF_CONF, 1, 8);
    EXPECT_EQ(p.read(kTif + PKTZ_TIF_KIF_CONF, 8), 0u);
    for (unsigned off = 0; off < PKTZ_PIF_END; off += 8)
        p.write(PKTZ_KIF_OFFSET + off, kKifDest, 8);
    EXPECT_TRUE(sent.empty());
    EXPECT_EQ(p.status(UNIMEM_KIF), 0u);
    EXPECT_EQ(p.counters().bad_access, 10u); // 1 + 8 stores, 1 load
}

TEST(PacketizerKif, SaveAndLoadKeepTheKifAndAWaitingKifFailsAfterLoad)
{
    Rig a;
    kif_enable(a);
    a.p.write(PKTZ_KIF_OFFSET + PKTZ_PIF_PAYLOAD0, 0x77, 8); // half a setup
    PacketizerState st = a.p.save();
    Rig b;
    ASSERT_TRUE(b.p.load(st));
    EXPECT_EQ(b.p.read(kTif + PKTZ_TIF_KIF_PIDT, 8), kKernelPid);
    EXPECT_EQ(b.p.read(kTif + PKTZ_TIF_KIF_CONF, 8), 1u);
    EXPECT_EQ(b.p.read(PKTZ_KIF_OFFSET + PKTZ_PIF_PAYLOAD0, 8), 0x77u);
    kif_setup(b, kKifDest, 0x77); // completes with the tracked bytes
    ASSERT_EQ(b.sent.size(), 1u);
    EXPECT_EQ(b.sent[0].pif, UNIMEM_KIF);

    st = b.p.save(); // the KIF waits for its answer
    ASSERT_TRUE(st.pifs[UNIMEM_KIF].waiting);
    Rig c;
    ASSERT_TRUE(c.p.load(st));
    EXPECT_EQ(c.p.status(UNIMEM_KIF), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    c.p.complete(b.sent[0].tag, RK_OK); // stale here
    EXPECT_EQ(c.p.status(UNIMEM_KIF), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);

    PacketizerState bad = st;
    bad.kif_pidt = 1ull << 48;
    EXPECT_FALSE(c.p.load(bad));
    bad = st;
    bad.kif_conf = 2;
    EXPECT_FALSE(c.p.load(bad));
    test::TestHost th;
    Packetizer none{th.host(), nullptr, false}; // a device without the KIF takes only a reset one
    EXPECT_FALSE(none.load(st));
    EXPECT_TRUE(none.load(Rig().p.save()));
}

// The two cores together: node 0's KIF into node 1's KIF, through the link the glue implements.
TEST(PacketizerKif, KifToKifReachesTheKernelAndAPifNeverDoes)
{
    test::TestHost th0, th1;
    Vmbox vm1{th1.host(), 8};
    vm1.write(VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE, 8);
    Packetizer *p0 = nullptr;
    Packetizer pk{th0.host(), [&](unsigned pif, uint64_t tag, uint64_t, unsigned mif, const uint64_t w[4]) {
                      p0->complete(tag, vm1.deliver(mif, pif, w, UNIMEM_PACKET_WORDS));
                  }};
    p0 = &pk;
    const uint64_t t = PKTZ_TIF_OFFSET;
    pk.write(t + PKTZ_TIF_BASE_DEST, Rig::kBase, 8);
    pk.write(t + PKTZ_TIF_KIF_PIDT, kKernelPid, 8);
    pk.write(t + PKTZ_TIF_KIF_CONF, 1, 8);
    pk.write(t + PKTZ_TIF_PIDT(9), 0x999, 8);
    pk.write(t + PKTZ_TIF_PID_CONF, 1ull << 9, 8);
    auto send = [&](uint64_t page, uint64_t dest) {
        pk.write(page + PKTZ_PIF_PAYLOAD0, 0xAAAA000000000000ull, 8);
        pk.write(page + PKTZ_PIF_PAYLOAD0 + 8, 1, 8);
        pk.write(page + PKTZ_PIF_PAYLOAD1, 2, 8);
        pk.write(page + PKTZ_PIF_PAYLOAD1 + 8, 3, 8);
        pk.write(page + PKTZ_PIF_DEST, dest, 8);
    };
    send(PKTZ_KIF_OFFSET, kKifDest);
    EXPECT_EQ(pk.status(UNIMEM_KIF), PKTZ_ST_ACK);
    ASSERT_EQ(vm1.fill(UNIMEM_KIF), 4u);
    uint64_t w0 = 0;
    vm1.read(VMBOX_KIF_OFFSET, 8, w0);
    EXPECT_EQ(w0, 0xAAAA000000000000ull | kKernelPid);
    send(PKTZ_PIF_OFFSET(9), kKifDest); // the user's PIF: refused at the sender
    EXPECT_EQ(pk.status(9), PKTZ_ST_ILLEGAL);
    // fill the KIF: the next KIF packet is NACKed, nothing is truncated
    send(PKTZ_KIF_OFFSET, kKifDest);
    send(PKTZ_KIF_OFFSET, kKifDest);
    EXPECT_EQ(pk.status(UNIMEM_KIF), PKTZ_ST_NACK);
    EXPECT_EQ(vm1.fill(UNIMEM_KIF), 7u);
    EXPECT_EQ(vm1.counters().kif[VMBOX_KIF_CNT_INDEX_NACKS], 1u);
}

// ---- the device operations (unimem_capi.h): the built-in link and the state as bytes ----

namespace {
struct OpsRig {
    test::TestHost vth, pth;
    std::vector<std::string> traced; // the glue's trace points
    static OpsRig *of(void *o) { return static_cast<OpsRig *>(o); }
    static constexpr RkPktzTrace kTrace = {
        [](void *o, unsigned pif, unsigned dst, unsigned mif, uint64_t) {
            of(o)->traced.push_back("send " + std::to_string(pif) + " " + std::to_string(dst) + " " +
                                    std::to_string(mif));
        },
        [](void *o, uint64_t, int st) {
            of(o)->traced.push_back(std::string("complete ") + rk_status_name(rk_status(st)));
        },
        [](void *o, unsigned, unsigned, int reply) {
            of(o)->traced.push_back("serve " + std::to_string(reply));
        },
    };
    RkHost vraw = vth.raw(), praw = pth.raw(nullptr, nullptr, 2, 4); // node 2 of 4, no fabric
    void *vmbox = nullptr, *core = nullptr;
    OpsRig()
    {
        const RkVmboxConfig vc = {8, 0, 1};
        char err[128] = "";
        vmbox = rk_vmbox_device_ops.create(&vraw, &vc, err, sizeof err);
        const RkPktzConfig pc = {vmbox, 1, 1, &kTrace, this};
        core = rk_pktz_device_ops.create(&praw, &pc, err, sizeof err);
        EXPECT_NE(core, nullptr) << err;
        rk_vmbox_device_ops.reset(vmbox);
        wr(PKTZ_TIF_OFFSET + PKTZ_TIF_BASE_DEST, Rig::kBase);
        wr(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(4), 0x4444);
        wr(PKTZ_TIF_OFFSET + PKTZ_TIF_PID_CONF, 1ull << 4);
    }
    ~OpsRig()
    {
        rk_pktz_device_ops.free(core);
        rk_vmbox_device_ops.free(vmbox);
    }
    void wr(uint64_t off, uint64_t v)
    {
        EXPECT_EQ(rk_pktz_device_ops.regions[0].write(core, off, v, 8), RK_OK);
    }
    uint64_t rd(uint64_t off)
    {
        uint64_t v = 0;
        EXPECT_EQ(rk_pktz_device_ops.regions[0].read(core, off, 8, &v), RK_OK);
        return v;
    }
    void send(unsigned pif, uint64_t dest, uint64_t p1hi = 0x44)
    {
        const uint64_t b = PKTZ_PIF_OFFSET(pif);
        wr(b + PKTZ_PIF_PAYLOAD0, 0x11);
        wr(b + PKTZ_PIF_PAYLOAD0 + 8, 0x22);
        wr(b + PKTZ_PIF_PAYLOAD1, 0x33);
        wr(b + PKTZ_PIF_PAYLOAD1 + 8, p1hi);
        wr(b + PKTZ_PIF_DEST, dest);
    }
    std::vector<uint8_t> save()
    {
        uint8_t *buf = nullptr;
        uint64_t len = 0;
        EXPECT_EQ(rk_pktz_device_ops.save(core, &buf, &len), 0);
        std::vector<uint8_t> v(buf, buf + len);
        free(buf);
        return v;
    }
    int load(const std::vector<uint8_t> &b, std::string *msg)
    {
        char m[300] = "";
        const int rc = rk_pktz_device_ops.load(core, b.data(), b.size(), m, sizeof m);
        *msg = m;
        return rc;
    }
};
constexpr uint64_t kOwnDest = UNIMEM_GADDR(2, 0x0b000000 + 5 * 0x1000); // node 2 (this one), MIF 5
} // namespace

TEST(PacketizerOps, APacketForThisNodeGoesIntoItsVmboxAnsweredFirst)
{
    OpsRig r;
    EXPECT_EQ(rk_pktz_device_ops.fabric_svc, int(RKF_SVC_UNIMEM_MBOX));
    r.send(4, kOwnDest);
    EXPECT_EQ(r.rd(PKTZ_PIF_OFFSET(4) + PKTZ_PIF_STATUS), PKTZ_ST_ACK);
    uint64_t w = 0;
    ASSERT_EQ(rk_vmbox_device_ops.regions[0].read(r.vmbox, VMBOX_MIF_OFFSET(5), 8, &w), RK_OK);
    EXPECT_EQ(w, 0x4444u); // payload0 with the PIDT entry
    EXPECT_EQ(rk_pktz_acks(r.core, 1), 1u);
    EXPECT_EQ(r.traced, (std::vector<std::string>{"send 4 2 5", "complete OK"}));
    rk_pktz_set_ack_first(r.core, 0); // the old order
    EXPECT_EQ(rk_pktz_ack_first(r.core), 0);
    r.send(4, kOwnDest);
    EXPECT_EQ(r.rd(PKTZ_PIF_OFFSET(4) + PKTZ_PIF_STATUS), PKTZ_ST_ACK);
    EXPECT_EQ(rk_pktz_acks(r.core, 0), 1u);
}

TEST(PacketizerOps, APacketForAnotherNodeWithoutFabricFailsWithFabricError)
{
    OpsRig r;
    r.send(4, kDest); // node 1
    EXPECT_EQ(r.rd(PKTZ_PIF_OFFSET(4) + PKTZ_PIF_STATUS), PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    ASSERT_FALSE(r.pth.guest_errors().empty());
    EXPECT_NE(r.pth.guest_errors().back().find("no fabric"), std::string::npos);
    EXPECT_EQ(r.traced, (std::vector<std::string>{"send 4 1 5", "complete UNREACHABLE"}));
}

TEST(PacketizerOps, SavedStateLoadsIntoAFreshCoreAndSavesToTheSameBytes)
{
    OpsRig a;
    a.send(4, kOwnDest);
    const uint64_t b9 = PKTZ_PIF_OFFSET(9);
    a.wr(b9 + PKTZ_PIF_PAYLOAD0, 0x99);
    a.wr(b9 + PKTZ_PIF_DEST, kOwnDest); // a setup half done
    const std::vector<uint8_t> st = a.save();
    OpsRig b;
    std::string msg;
    ASSERT_EQ(b.load(st, &msg), 0) << msg;
    EXPECT_EQ(b.save(), st);
    for (uint64_t off : std::initializer_list<uint64_t>{
             PKTZ_PIF_OFFSET(4) + PKTZ_PIF_STATUS, PKTZ_TIF_OFFSET + PKTZ_TIF_SENT,
             PKTZ_TIF_OFFSET + PKTZ_TIF_ACKED, b9 + PKTZ_PIF_PAYLOAD0, b9 + PKTZ_PIF_DEST})
        EXPECT_EQ(b.rd(off), a.rd(off)) << std::hex << off;
    // the written-bytes tracking came along: the rest of the setup sends in both
    for (OpsRig *r : {&a, &b}) {
        r->wr(PKTZ_TIF_OFFSET + PKTZ_TIF_PID_CONF, (1ull << 4) | (1ull << 9));
        r->wr(b9 + PKTZ_PIF_PAYLOAD0 + 8, 1);
        r->wr(b9 + PKTZ_PIF_PAYLOAD1, 2);
        r->wr(b9 + PKTZ_PIF_PAYLOAD1 + 8, 3);
        EXPECT_EQ(r->rd(b9 + PKTZ_PIF_STATUS), PKTZ_ST_ACK);
    }
    EXPECT_EQ(b.save(), a.save());
}

TEST(PacketizerOps, ATruncatedALongAndAnOutOfRangeStateAreRefusedAndChangeNothing)
{
    OpsRig a;
    const std::vector<uint8_t> good = a.save();
    OpsRig b;
    b.wr(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(7), 0x777);
    const std::vector<uint8_t> before = b.save();
    std::string msg;

    std::vector<uint8_t> bad(good.begin(), good.end() - 3); // truncated: in the last counter
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("bad_access"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);

    bad = good;
    bad.insert(bad.end(), {1, 2}); // trailing bytes
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("left over"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);

    // base_dest after the interfaces (regs 48, written 6, status 4, waiting 1 bytes each) and PIDT
    const size_t base_dest = UNIMEM_IF_TOTAL * (48 + 6 + 4 + 1) + UNIMEM_IF_COUNT * 8;
    bad = good;
    bad[base_dest] = 1; // outside BASE_DEST's bits [33:18]
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("base_dest"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);

    bad = good;
    bad[48 + 6 + 4] = 2; // pifs[0].waiting: not a boolean
    EXPECT_EQ(b.load(bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("waiting"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);
    EXPECT_EQ(b.rd(PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(7)), 0x777u);
}
