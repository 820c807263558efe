// Unit tests of the `swordbox` switch program (platform/fabric/stage/swordbox.cc,
// docs/swordbox.md), with frames built from the wire header (rackemu/roce.h via hw/rnic/wire.cc)
// and every frame the stage writes checked by the wire parser (IPv4 checksum, UDP length, ICRC):
// CAS -> WRITE and its ACK -> ATOMIC ACKNOWLEDGE, the lock-word cache (fill, release, failure),
// QP multiplexing (PSN and MSN stitching, coalesced ACK expansion, retransmission mapping, NAK
// fan-out, ring overflow), Clover write and read steering, malformed frames, parameters, the
// resource report, and the program inside a real bridge.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "bridge_rig.h"
#include "programs.h"
#include "rackemu/fabric_proto.h"
#include "stage.h"
#include "swordbox.h"
#include "wire.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::sw;
using rackemu::rnic::Packet;
using rackemu::rnic::WireError;

namespace {

using Bytes = std::vector<uint8_t>;
constexpr size_t kIp = ROCE_ETH_LEN, kUdp = kIp + ROCE_IPV4_LEN;

constexpr unsigned kServer = 1, kA = 2, kB = 3, kCarrier = 4;
constexpr uint32_t kMuxQpn = 0x100, kLockRkey = 0x77, kDataRkey = 0x55;
constexpr uint64_t kLockBase = 0x10000, kLock = kLockBase + 8 * 3;

uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

// One client connection: client node and QPN, the server QPN it talks to, its UDP source port.
struct Conn {
    unsigned node;
    uint32_t qpn, server_qpn;
    uint16_t sport;
    uint32_t psn; // the next request PSN
};

Packet base(unsigned from, unsigned to)
{
    Packet p;
    rkf_eth_node_mac(from, p.l3.src_mac.data());
    rkf_eth_node_mac(to, p.l3.dst_mac.data());
    p.l3.src_ip = rkf_eth_node_ipv4(from);
    p.l3.dst_ip = rkf_eth_node_ipv4(to);
    p.l3.udp_sport = 0xC777;
    return p;
}

uint8_t payload_buf[64][8];
unsigned payload_next = 0;

Packet request(const Conn &c, uint8_t op, uint32_t psn)
{
    Packet p = base(c.node, kServer);
    p.l3.udp_sport = c.sport;
    p.bth.opcode = op;
    p.bth.dqpn = c.server_qpn;
    p.bth.psn = psn;
    p.bth.ackreq = true;
    return p;
}
Packet cas(const Conn &c, uint32_t psn, uint64_t va, uint64_t compare, uint64_t swap,
           uint32_t rkey = kLockRkey)
{
    Packet p = request(c, ROCE_OP_CMP_SWAP, psn);
    p.atomic = {va, rkey, swap, compare};
    return p;
}
Packet write8(const Conn &c, uint32_t psn, uint64_t va, uint64_t value, uint32_t rkey = kLockRkey)
{
    Packet p = request(c, ROCE_OP_WRITE_ONLY, psn);
    uint8_t *b = payload_buf[payload_next++ % 64];
    for (int i = 0; i < 8; i++)
        b[i] = uint8_t(value >> (8 * i));
    p.reth = {va, rkey, 8};
    p.payload = b;
    p.payload_len = 8;
    return p;
}
Packet read(const Conn &c, uint32_t psn, uint64_t va, uint32_t len, uint32_t rkey = kDataRkey)
{
    Packet p = request(c, ROCE_OP_READ_REQUEST, psn);
    p.reth = {va, rkey, len};
    return p;
}
// A response of the server to (node, qpn).
Packet response(unsigned to, uint32_t qpn, uint8_t op, uint32_t psn, uint32_t msn, uint8_t syndrome = 0x1F)
{
    Packet p = base(kServer, to);
    p.bth.opcode = op;
    p.bth.dqpn = qpn;
    p.bth.psn = psn;
    p.aeth.syndrome = syndrome;
    p.aeth.msn = msn;
    return p;
}

Bytes build(const Packet &p)
{
    Bytes f(ROCE_FRAME_MAX + 64);
    size_t n = 0;
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    f.resize(n);
    return f;
}

// The frames out of the stage for one frame in, each checked with the wire code and parsed.
struct Outs {
    std::vector<Bytes> frames;
    std::vector<Packet> pkts;
    std::vector<bool> synthesized;
    size_t size() const { return pkts.size(); }
};

::testing::AssertionResult wire_valid(const Bytes &f, Packet &out)
{
    const WireError e = parse_frame(f.data(), f.size(), out, true, true);
    if (e != WireError::Ok) return ::testing::AssertionFailure() << "parse_frame: " << wire_error_name(e);
    if (rackemu::rnic::ip_checksum(f.data() + kIp, ROCE_IPV4_LEN) != 0)
        return ::testing::AssertionFailure() << "IPv4 checksum";
    if (roce_get16(f.data() + kUdp + 4) != f.size() - kUdp)
        return ::testing::AssertionFailure() << "UDP length";
    if (roce_get16(f.data() + kIp + 2) != f.size() - kIp)
        return ::testing::AssertionFailure() << "IPv4 length";
    return ::testing::AssertionSuccess();
}

Outs run(Stage &st, const Packet &p, unsigned port = 0)
{
    const Bytes in = build(p);
    Outs o;
    for (const Stage::Out &x : st.process(port, in.data(), in.size())) {
        o.frames.emplace_back(x.data, x.data + x.len);
        o.synthesized.push_back(x.synthesized);
    }
    for (const Bytes &f : o.frames) { // parsed in place: payload pointers into o.frames
        Packet q;
        EXPECT_TRUE(wire_valid(f, q));
        o.pkts.push_back(q);
    }
    return o;
}

const SwordboxStats &stats(Stage &st)
{
    return swordbox_stats(*st.program());
}

struct Rig {
    Stage st;
    Conn carrier{kCarrier, 0x40, kMuxQpn, 0xC040, 1000};
    Conn a{kA, 0x12, 0x21, 0xC012, 50};
    Conn b{kB, 0x13, 0x31, 0xC013, 7000};
    uint32_t msn_a = 0, msn_b = 0;

    explicit Rig(std::vector<std::string> sets)
    {
        st.set_strict(true); // a pipeline discipline violation aborts the test
        std::string err;
        EXPECT_TRUE(st.load("swordbox", sets, err)) << err;
    }
    // A connection's first request passes end to end; the server's answer engages it.
    void engage(Conn &c, uint32_t msn)
    {
        const Packet w = write8(c, c.psn, 0x900000, 1, kDataRkey);
        Outs o = run(st, w);
        ASSERT_EQ(o.size(), 1u);
        EXPECT_EQ(o.frames[0], build(w)); // untouched
        Outs r = run(st, response(c.node, c.qpn, ROCE_OP_ACK, c.psn, msn));
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r.pkts[0].bth.dqpn, c.qpn);
        c.psn++;
    }
};

std::vector<std::string> mux_sets(std::vector<std::string> more = {})
{
    std::vector<std::string> s = {"server=1", "mux=on",        "mux-qpn=256",     "carrier=4",
                                  "locks=on", "lock-rkey=119", "lock-base=65536", "lock-count=16"};
    s.insert(s.end(), more.begin(), more.end());
    return s;
}

// The mux rig with the carrier and clients A and B engaged; the carrier's out-PSN is next 1001.
struct MuxRig : Rig {
    explicit MuxRig(std::vector<std::string> more = {}) : Rig(mux_sets(std::move(more)))
    {
        engage(carrier, 1);
        engage(a, 10);
        engage(b, 20);
        msn_a = 10;
        msn_b = 20;
    }
};

// ---- Lock acceleration ----

TEST(SwordboxLocks, CasOnACachedLockBecomesAWriteAndItsAckAnAtomicAck)
{
    MuxRig r;
    // A release (WRITE 0) puts the lock word in the cache; its ACK goes back to A.
    Outs o = run(r.st, write8(r.a, r.a.psn, kLock, 0));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_WRITE_ONLY);
    EXPECT_EQ(o.pkts[0].bth.psn, 1001u);
    EXPECT_EQ(o.pkts[0].bth.dqpn, kMuxQpn);
    EXPECT_EQ(o.pkts[0].l3.src_ip, rkf_eth_node_ipv4(kCarrier));
    EXPECT_EQ(o.pkts[0].l3.udp_sport, r.carrier.sport);
    o = run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1001, 2));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_TRUE(o.synthesized[0]);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.pkts[0].l3.dst_ip, rkf_eth_node_ipv4(kA));
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.a.qpn);
    EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn);
    EXPECT_EQ(o.pkts[0].aeth.msn, 11u);
    r.a.psn++;

    // A: CAS(0, 0xA) on the free cached lock -> WRITE of 0xA, 4 bytes shorter; answer: orig 0.
    const Packet c1 = cas(r.a, r.a.psn, kLock, 0, 0xA);
    o = run(r.st, c1);
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.frames[0].size(), build(c1).size() - 4);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_WRITE_ONLY);
    EXPECT_EQ(o.pkts[0].reth.va, kLock);
    EXPECT_EQ(o.pkts[0].reth.rkey, kLockRkey);
    EXPECT_EQ(o.pkts[0].reth.dma_len, 8u);
    ASSERT_EQ(o.pkts[0].payload_len, 8u);
    EXPECT_EQ(le64(o.pkts[0].payload), 0xAu);
    EXPECT_EQ(o.pkts[0].bth.psn, 1002u);
    const Packet ack = response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1002, 3);
    o = run(r.st, ack);
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(o.frames[0].size(), build(ack).size() + 8);
    EXPECT_EQ(o.pkts[0].atomic_orig, 0u);
    EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn);
    EXPECT_EQ(o.pkts[0].aeth.msn, 12u);
    r.a.psn++;

    // B: CAS(0, 0xB) while A holds it -> still a WRITE (of the holder's value, so the server's word
    // stays what the cache says); B is told the holder's value: its CAS failed.
    o = run(r.st, cas(r.b, r.b.psn, kLock, 0, 0xB));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_WRITE_ONLY);
    EXPECT_EQ(le64(o.pkts[0].payload), 0xAu);
    o = run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1003, 4));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(o.pkts[0].atomic_orig, 0xAu);
    EXPECT_EQ(o.pkts[0].l3.dst_ip, rkf_eth_node_ipv4(kB));
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.b.qpn);
    EXPECT_EQ(o.pkts[0].bth.psn, r.b.psn);
    EXPECT_EQ(o.pkts[0].aeth.msn, 21u);
    r.b.psn++;

    // A releases (WRITE 0), then B's retry succeeds.
    run(r.st, write8(r.a, r.a.psn++, kLock, 0));
    run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1004, 5));
    o = run(r.st, cas(r.b, r.b.psn, kLock, 0, 0xB));
    EXPECT_EQ(le64(o.pkts[0].payload), 0xBu);
    o = run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1005, 6));
    EXPECT_EQ(o.pkts[0].atomic_orig, 0u);
    const SwordboxStats &s = stats(r.st);
    EXPECT_EQ(s.lock_rewrites, 3u);
    EXPECT_EQ(s.lock_acquired, 2u);
    EXPECT_EQ(s.lock_failed, 1u);
    EXPECT_EQ(s.lock_releases, 2u);
    EXPECT_EQ(r.st.program()->pipeline().violations(), 0u);
}

TEST(SwordboxLocks, ACasOnALockNotCachedPassesAndItsAnswerFillsTheCache)
{
    MuxRig r;
    Outs o = run(r.st, cas(r.a, r.a.psn, kLock, 0, 0xA));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_CMP_SWAP); // mapped, not rewritten
    EXPECT_EQ(o.pkts[0].bth.psn, 1001u);
    Packet aa = response(kCarrier, r.carrier.qpn, ROCE_OP_ATOMIC_ACK, 1001, 2);
    aa.atomic_orig = 0; // the server's word was free: now 0xA
    o = run(r.st, aa);
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(o.pkts[0].atomic_orig, 0u);
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.a.qpn);
    EXPECT_EQ(stats(r.st).lock_fills, 1u);
    // Now cached as 0xA: B's acquire is rewritten and fails.
    o = run(r.st, cas(r.b, r.b.psn, kLock, 0, 0xB));
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_WRITE_ONLY);
    EXPECT_EQ(le64(o.pkts[0].payload), 0xAu);
    EXPECT_EQ(stats(r.st).lock_misses, 1u);
}

TEST(SwordboxLocks, AFillIsRefusedWhenALaterRequestTouchedTheWord)
{
    MuxRig r;
    run(r.st, cas(r.a, r.a.psn++, kLock, 0, 0xA)); // out 1001, miss
    run(r.st, write8(r.b, r.b.psn++, kLock, 0));   // out 1002: release, caches 0
    Packet aa = response(kCarrier, r.carrier.qpn, ROCE_OP_ATOMIC_ACK, 1001, 2);
    run(r.st, aa); // the CAS's answer would say 0xA: stale behind the release
    EXPECT_EQ(stats(r.st).lock_fills_stale, 1u);
    Outs o = run(r.st, cas(r.b, r.b.psn++, kLock, 0, 0xB));
    EXPECT_EQ(le64(o.pkts[0].payload), 0xBu); // the cache says 0 (the release), not 0xA
}

TEST(SwordboxLocks, WithoutMuxTheRewriteStaysOnTheClientsOwnQp)
{
    Rig r({"server=1", "locks=on", "lock-rkey=119", "lock-base=65536", "lock-count=16"});
    r.engage(r.a, 10);
    Outs o = run(r.st, write8(r.a, r.a.psn, kLock, 0));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn); // PSN, QPN and addresses unchanged
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.a.server_qpn);
    EXPECT_EQ(o.pkts[0].l3.src_ip, rkf_eth_node_ipv4(kA));
    run(r.st, response(kA, r.a.qpn, ROCE_OP_ACK, r.a.psn++, 11));
    o = run(r.st, cas(r.a, r.a.psn, kLock, 0, 0xA));
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_WRITE_ONLY);
    EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn);
    o = run(r.st, response(kA, r.a.qpn, ROCE_OP_ACK, r.a.psn, 12));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn);
    EXPECT_EQ(o.pkts[0].aeth.msn, 12u);
}

TEST(SwordboxLocks, LocksOffPassesEveryCasUnchanged)
{
    Rig off({"server=1", "lock-rkey=119", "lock-base=65536", "lock-count=16"});
    off.engage(off.a, 10);
    run(off.st, write8(off.a, off.a.psn, kLock, 0));
    run(off.st, response(kA, off.a.qpn, ROCE_OP_ACK, off.a.psn++, 11));
    const Packet c = cas(off.a, off.a.psn, kLock, 0, 0xA);
    Outs o = run(off.st, c);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_CMP_SWAP);
    EXPECT_EQ(o.frames[0], build(c));
    EXPECT_EQ(stats(off.st).lock_rewrites, 0u);
}

// ---- QP multiplexing ----

TEST(SwordboxMux, ACoalescedAckIsExpandedIntoOneAnswerPerClientRequest)
{
    MuxRig r;
    run(r.st, write8(r.a, r.a.psn, kLock, 0));               // out 1001 (A, release: caches the lock)
    run(r.st, write8(r.b, r.b.psn, 0x900100, 5, kDataRkey)); // out 1002 (B)
    run(r.st, cas(r.a, r.a.psn + 1, kLock, 0, 0xA));         // out 1003 (A, rewritten)
    const Packet r1 = read(r.b, r.b.psn + 1, 0x900200, 16);  // out 1004 (B, READ)
    Outs o = run(r.st, r1);
    EXPECT_EQ(o.pkts[0].bth.psn, 1004u);
    // The server answers 1001..1003 with one ACK (at 1003).
    o = run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1003, 4));
    ASSERT_EQ(o.size(), 3u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.a.qpn);
    EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn);
    EXPECT_EQ(o.pkts[0].aeth.msn, 11u);
    EXPECT_EQ(o.pkts[1].bth.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.pkts[1].bth.dqpn, r.b.qpn);
    EXPECT_EQ(o.pkts[1].l3.dst_ip, rkf_eth_node_ipv4(kB));
    EXPECT_EQ(o.pkts[1].bth.psn, r.b.psn);
    EXPECT_EQ(o.pkts[1].aeth.msn, 21u);
    EXPECT_EQ(o.pkts[2].bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(o.pkts[2].bth.psn, r.a.psn + 1);
    EXPECT_EQ(o.pkts[2].atomic_orig, 0u);
    EXPECT_EQ(o.pkts[2].aeth.msn, 12u);
    // The READ's response goes to B with B's PSN and the payload.
    Packet rr = response(kCarrier, r.carrier.qpn, ROCE_OP_READ_RESP_ONLY, 1004, 5);
    static const uint8_t data[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    rr.payload = data;
    rr.payload_len = 16;
    o = run(r.st, rr);
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_READ_RESP_ONLY);
    EXPECT_EQ(o.pkts[0].bth.psn, r.b.psn + 1);
    EXPECT_EQ(o.pkts[0].aeth.msn, 22u);
    ASSERT_EQ(o.pkts[0].payload_len, 16u);
    EXPECT_EQ(std::memcmp(o.pkts[0].payload, data, 16), 0);
    EXPECT_EQ(stats(r.st).acks_expanded, 2u);
    EXPECT_EQ(stats(r.st).responses, 2u);
}

TEST(SwordboxMux, AClientsRetransmissionMapsToTheSameOutPsnAndRewrite)
{
    MuxRig r;
    run(r.st, write8(r.a, r.a.psn++, kLock, 0)); // 1001
    const Packet c = cas(r.b, r.b.psn, kLock, 0, 0xB);
    Outs first = run(r.st, c);                                 // 1002, rewritten to WRITE 0xB
    run(r.st, write8(r.a, r.a.psn++, 0x900000, 3, kDataRkey)); // 1003
    Outs again = run(r.st, c);                                 // B retransmits
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again.frames[0], first.frames[0]);
    EXPECT_EQ(again.pkts[0].bth.psn, 1002u);
    EXPECT_EQ(stats(r.st).retransmissions, 1u);
    EXPECT_EQ(stats(r.st).lock_rewrites, 1u); // the cache was not touched twice
    // A duplicate answer (the server re-ACKs 1002 after 1001..1003 were answered) goes to B again.
    run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1003, 4));
    Outs d = run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1002, 4));
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d.pkts[0].bth.dqpn, r.b.qpn);
    EXPECT_EQ(d.pkts[0].bth.psn, r.b.psn);
    EXPECT_EQ(d.pkts[0].bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(stats(r.st).duplicates, 1u);
}

TEST(SwordboxMux, AServerNakIsFannedOutToEveryClientWithOutstandingRequests)
{
    MuxRig r;
    run(r.st, write8(r.a, r.a.psn, 0x900000, 1, kDataRkey));     // 1001 A
    run(r.st, write8(r.b, r.b.psn, 0x900008, 2, kDataRkey));     // 1002 B
    run(r.st, write8(r.a, r.a.psn + 1, 0x900010, 3, kDataRkey)); // 1003 A
    run(r.st, write8(r.b, r.b.psn + 1, 0x900018, 4, kDataRkey)); // 1004 B
    // PSN sequence error at 1002: 1001 is done, 1002.. are not.
    Outs o = run(
        r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1002, 2, ROCE_AETH_TYPE_NAK | ROCE_NAK_PSN_SEQ));
    ASSERT_EQ(o.size(), 3u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_ACK); // 1001 answered to A
    EXPECT_EQ(o.pkts[0].aeth.syndrome & ROCE_AETH_TYPE_MASK, ROCE_AETH_TYPE_ACK);
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.a.qpn);
    EXPECT_EQ(o.pkts[1].aeth.syndrome, ROCE_AETH_TYPE_NAK | ROCE_NAK_PSN_SEQ); // B at its first
    EXPECT_EQ(o.pkts[1].bth.dqpn, r.b.qpn);
    EXPECT_EQ(o.pkts[1].bth.psn, r.b.psn);
    EXPECT_EQ(o.pkts[2].aeth.syndrome, ROCE_AETH_TYPE_NAK | ROCE_NAK_PSN_SEQ); // A at its second
    EXPECT_EQ(o.pkts[2].bth.dqpn, r.a.qpn);
    EXPECT_EQ(o.pkts[2].bth.psn, r.a.psn + 1);
    EXPECT_EQ(stats(r.st).naks_out, 2u); // one per client
    // B retransmits: the same out-PSN.
    Outs b = run(r.st, write8(r.b, r.b.psn, 0x900008, 2, kDataRkey));
    EXPECT_EQ(b.pkts[0].bth.psn, 1002u);
}

TEST(SwordboxMux, AMultiPacketReadTakesOnePsnPerResponsePacket)
{
    MuxRig r({"mtu=256"});
    Outs o = run(r.st, read(r.a, r.a.psn, 0x900000, 600)); // 3 response packets: out 1001..1003
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.psn, 1001u);
    o = run(r.st, write8(r.b, r.b.psn, 0x900800, 1, kDataRkey)); // out 1004
    EXPECT_EQ(o.pkts[0].bth.psn, 1004u);
    static uint8_t data[256];
    for (unsigned i = 0; i < 256; i++)
        data[i] = uint8_t(i);
    const uint8_t ops[3] = {ROCE_OP_READ_RESP_FIRST, ROCE_OP_READ_RESP_MIDDLE, ROCE_OP_READ_RESP_LAST};
    for (unsigned k = 0; k < 3; k++) {
        Packet rr = response(kCarrier, r.carrier.qpn, ops[k], 1001 + k, 2);
        rr.payload = data;
        rr.payload_len = k < 2 ? 256 : 88;
        o = run(r.st, rr);
        ASSERT_EQ(o.size(), 1u) << k;
        EXPECT_EQ(o.pkts[0].bth.opcode, ops[k]);
        EXPECT_EQ(o.pkts[0].bth.dqpn, r.a.qpn);
        EXPECT_EQ(o.pkts[0].bth.psn, r.a.psn + k);
        EXPECT_EQ(o.pkts[0].payload_len, k < 2 ? 256u : 88u);
        if (k != 1) {
            EXPECT_EQ(o.pkts[0].aeth.msn, k == 2 ? 11u : 10u);
        }
    }
    o = run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1004, 3));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.dqpn, r.b.qpn);
    EXPECT_EQ(o.pkts[0].aeth.msn, 21u);
}

TEST(SwordboxMux, ANakAtTheNextPsnAnswersEverythingBeforeIt)
{
    MuxRig r;
    run(r.st, write8(r.a, r.a.psn, 0x900000, 1, kDataRkey)); // 1001
    run(r.st, write8(r.b, r.b.psn, 0x900008, 2, kDataRkey)); // 1002
    Outs o = run(
        r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1003, 2, ROCE_AETH_TYPE_NAK | ROCE_NAK_PSN_SEQ));
    ASSERT_EQ(o.size(), 2u);
    EXPECT_EQ(o.pkts[0].aeth.syndrome & ROCE_AETH_TYPE_MASK, ROCE_AETH_TYPE_ACK);
    EXPECT_EQ(o.pkts[1].aeth.syndrome & ROCE_AETH_TYPE_MASK, ROCE_AETH_TYPE_ACK);
    EXPECT_EQ(stats(r.st).naks_out, 0u);
}

TEST(SwordboxMux, AFullRingDropsTheRequestAndCountsIt)
{
    MuxRig r({"ring=4"});
    for (unsigned i = 0; i < 4; i++)
        EXPECT_EQ(run(r.st, write8(r.a, r.a.psn + i, 0x900000, i, kDataRkey)).size(), 1u);
    const Packet fifth = write8(r.a, r.a.psn + 4, 0x900000, 4, kDataRkey);
    EXPECT_EQ(run(r.st, fifth).size(), 0u);
    EXPECT_EQ(stats(r.st).ring_full, 1u);
    EXPECT_EQ(r.st.counters().recirculations, 1u); // the rollback pass
    // Once answered, the same request (its sender retransmits) maps as new.
    EXPECT_EQ(run(r.st, response(kCarrier, r.carrier.qpn, ROCE_OP_ACK, 1004, 2)).size(), 4u);
    Outs o = run(r.st, fifth);
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.psn, 1005u);
    // A request beyond the next expected PSN (one lost on the client link) is dropped.
    EXPECT_EQ(run(r.st, write8(r.a, r.a.psn + 9, 0x900000, 4, kDataRkey)).size(), 0u);
    EXPECT_EQ(stats(r.st).gap_drops, 1u);
}

TEST(SwordboxMux, ConnectionsWaitForTheCarrierAndSendsAreNotMultiplexed)
{
    Rig r(mux_sets());
    r.engage(r.a, 10); // no carrier yet: A stays end to end
    EXPECT_EQ(stats(r.st).engaged, 0u);
    const Packet w = write8(r.a, r.a.psn, 0x900000, 1, kDataRkey);
    Outs o = run(r.st, w);
    EXPECT_EQ(o.frames[0], build(w));
    r.engage(r.carrier, 1);
    run(r.st, response(kA, r.a.qpn, ROCE_OP_ACK, r.a.psn++, 11));
    EXPECT_EQ(stats(r.st).engaged, 2u);
    Packet s = request(r.a, ROCE_OP_SEND_ONLY, r.a.psn);
    EXPECT_EQ(run(r.st, s).size(), 0u);
    EXPECT_EQ(stats(r.st).mux_unsupported, 1u);
}

// ---- Clover steering ----

std::vector<std::string> steer_sets()
{
    return {"server=1", "steer=on", "steer-rkey=85", "key-offset=0", "next-offset=8", "hot-keys=4"};
}

Packet node_write(const Conn &c, uint32_t psn, uint64_t va, uint64_t key)
{
    static uint8_t buf[8][32];
    static unsigned n = 0;
    uint8_t *b = buf[n++ % 8];
    std::memset(b, 0, 32);
    for (int i = 0; i < 8; i++)
        b[i] = uint8_t(key >> (8 * i));
    Packet p = request(c, ROCE_OP_WRITE_ONLY, psn);
    p.reth = {va, kDataRkey, 32};
    p.payload = b;
    p.payload_len = 32;
    return p;
}

TEST(SwordboxSteer, ACasOnAStaleTailIsRedirectedToTheKeysCachedTail)
{
    Rig r(steer_sets());
    // A writes version node 0x1000 of key 7 and commits at the old tail 0x500 (unknown: passes).
    run(r.st, node_write(r.a, r.a.psn++, 0x1000, 7));
    Packet c1 = cas(r.a, r.a.psn++, 0x500 + 8, 0, 0x1000, kDataRkey);
    Outs o = run(r.st, c1);
    EXPECT_EQ(o.frames[0], build(c1));
    // B, with the stale hint 0x500, writes node 0x2000 and CASes 0x508: steered to 0x1008.
    run(r.st, node_write(r.b, r.b.psn++, 0x2000, 7));
    o = run(r.st, cas(r.b, r.b.psn++, 0x500 + 8, 0, 0x2000, kDataRkey));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].bth.opcode, ROCE_OP_CMP_SWAP);
    EXPECT_EQ(o.pkts[0].atomic.va, 0x1008u);
    EXPECT_EQ(o.pkts[0].atomic.swap_add, 0x2000u);
    // A CAS already at the tail passes unchanged.
    run(r.st, node_write(r.a, r.a.psn++, 0x3000, 7));
    const Packet c3 = cas(r.a, r.a.psn++, 0x2008, 0, 0x3000, kDataRkey);
    o = run(r.st, c3);
    EXPECT_EQ(o.frames[0], build(c3));
    EXPECT_EQ(stats(r.st).steer_cas, 1u);
    EXPECT_EQ(stats(r.st).steer_cas_at_tail, 1u);
}

TEST(SwordboxSteer, AReadOfAWrittenAddressIsRedirectedToTheKeysTail)
{
    Rig r(steer_sets());
    run(r.st, node_write(r.a, r.a.psn++, 0x1000, 7));
    run(r.st, cas(r.a, r.a.psn++, 0x508, 0, 0x1000, kDataRkey)); // tail(7) = 0x1000
    run(r.st, node_write(r.b, r.b.psn++, 0x2000, 7));
    run(r.st, cas(r.b, r.b.psn++, 0x1008, 0, 0x2000, kDataRkey)); // tail(7) = 0x2000
    // A reads its old hint 0x1000: steered to the tail 0x2000.
    Outs o = run(r.st, read(r.a, r.a.psn++, 0x1000, 32));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o.pkts[0].reth.va, 0x2000u);
    EXPECT_EQ(o.pkts[0].reth.dma_len, 32u);
    // An address never written misses and passes.
    const Packet miss = read(r.a, r.a.psn++, 0x7000, 32);
    o = run(r.st, miss);
    EXPECT_EQ(o.frames[0], build(miss));
    EXPECT_EQ(stats(r.st).steer_reads, 1u);
    EXPECT_EQ(stats(r.st).read_misses, 1u);
}

TEST(SwordboxSteer, KeysBeyondHotKeysAreNotSteeredAndCounted)
{
    Rig r(steer_sets()); // hot-keys=4
    for (uint64_t k = 0; k < 6; k++) {
        run(r.st, node_write(r.a, r.a.psn++, 0x1000 * (k + 1), k));
        run(r.st, cas(r.a, r.a.psn++, 0x8, 0, 0x1000 * (k + 1), kDataRkey));
    }
    EXPECT_EQ(stats(r.st).hot_key_overflow, 2u);
}

// ---- Robustness, parameters, resources ----

TEST(SwordboxRobust, MalformedAndTruncatedFramesArePassedOrDroppedAndCounted)
{
    for (const char *mode : {"pass", "drop"}) {
        Rig r({"server=1", "locks=on", "lock-count=4", std::string("malformed=") + mode});
        Bytes f = build(cas(r.a, 1, kLock, 0, 1));
        f[f.size() - 1] ^= 0xFF; // ICRC
        const auto &o1 = r.st.process(0, f.data(), f.size());
        EXPECT_EQ(o1.size(), std::string(mode) == "pass" ? 1u : 0u);
        Bytes t(f.begin(), f.begin() + 50); // truncated inside the UDP payload
        const auto &o2 = r.st.process(0, t.data(), t.size());
        EXPECT_EQ(o2.size(), std::string(mode) == "pass" ? 1u : 0u);
        EXPECT_EQ(r.st.counters().malformed, 2u);
        // A response for a connection the program never saw passes; one beyond anything sent
        // on an engaged out-QP is dropped and counted.
        Outs o = run(r.st, response(kA, 0x99, ROCE_OP_ACK, 5, 1));
        EXPECT_EQ(o.size(), 1u);
    }
    MuxRig m;
    EXPECT_EQ(run(m.st, response(kCarrier, m.carrier.qpn, ROCE_OP_ACK, 1500, 2)).size(), 0u);
    EXPECT_EQ(stats(m.st).stray, 1u);
}

TEST(SwordboxRobust, ManyConnectionsBeyondTheTableAreUntracked)
{
    Rig r({"server=1", "conns=2"});
    for (unsigned i = 0; i < 4; i++) {
        Conn c{kA, 0x10 + i, 0x20 + i, uint16_t(0xC000 + i), 1};
        EXPECT_EQ(run(r.st, write8(c, 1, 0x900000, 1, kDataRkey)).size(), 1u);
    }
    EXPECT_EQ(stats(r.st).untracked, 2u);
}

TEST(SwordboxParams, BadSettingsAreRefusedWithAMessage)
{
    Stage st;
    std::string err;
    EXPECT_FALSE(st.load("swordbox", {"mux=on"}, err));
    EXPECT_NE(err.find("mux-qpn"), std::string::npos) << err;
    EXPECT_FALSE(st.load("swordbox", {"mux=on", "mux-qpn=5", "carrier=1", "server=1"}, err));
    EXPECT_NE(err.find("carrier"), std::string::npos) << err;
    EXPECT_FALSE(st.load("swordbox", {"lock-base=3", "lock-count=2"}, err));
    EXPECT_NE(err.find("aligned"), std::string::npos) << err;
    EXPECT_FALSE(st.load("swordbox", {"locks=maybe"}, err));
    EXPECT_NE(err.find("one of off, on"), std::string::npos) << err;
    EXPECT_FALSE(st.load("swordbox", {"mtu=1000"}, err));
    EXPECT_FALSE(st.loaded());
    EXPECT_TRUE(st.load("swordbox", {}, err)) << err;
}

TEST(SwordboxParams, TheResourceReportNamesStagesArraysAndRecirculations)
{
    Rig r(mux_sets({"ring=32", "conns=8"}));
    const Resources res = r.st.resources();
    EXPECT_EQ(res.stages, 10u);
    EXPECT_EQ(res.recirculations, 34u); // ring + fill + rollback
    bool ring = false;
    for (const ArrayInfo &a : res.arrays) {
        if (a.name == "ring") {
            ring = true;
            EXPECT_EQ(a.stage, 8u);
            EXPECT_EQ(a.cells, 32u);
        }
    }
    EXPECT_TRUE(ring);
    const std::string js = r.st.stats_json();
    EXPECT_NE(js.find("\"program\":\"swordbox\""), std::string::npos);
    EXPECT_NE(js.find("\"locks\":{\"rewrites\":0"), std::string::npos) << js;
}

// ---- In a bridge ----

TEST(SwordboxInBridge, LoadsThroughTheControlSocketAndRewritesFrames)
{
    test::BridgeRig b;
    RkFabricPort *n2 = b.port(kA), *n1 = b.port(kServer);
    ASSERT_TRUE(n1 && n2);
    test::EthSink at_server, at_a;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, test::EthSink::rx, &at_server);
    rk_fabric_port_eth_attach(n2, RK_FABRIC_ETH_ROCE, test::EthSink::rx, &at_a);
    const std::string bad = test::control(b.dir, "switch load swordbox mux=on\n");
    EXPECT_NE(bad.find("mux-qpn"), std::string::npos) << bad;
    const std::string ok = test::control(
        b.dir,
        "switch load swordbox --set server=1 --set locks=on --set lock-rkey=119 --set lock-base=65536 "
        "--set lock-count=16\n");
    ASSERT_NE(ok.find("\"ok\":true"), std::string::npos) << ok;

    Conn a{kA, 0x12, 0x21, 0xC012, 50};
    auto send_a = [&](const Packet &p) {
        const Bytes f = build(p);
        ASSERT_EQ(rk_fabric_port_eth_send(n2, f.data(), f.size()), 0);
    };
    auto send_s = [&](const Packet &p) {
        const Bytes f = build(p);
        ASSERT_EQ(rk_fabric_port_eth_send(n1, f.data(), f.size()), 0);
    };
    send_a(write8(a, 50, kLock, 0));
    ASSERT_TRUE(at_server.wait_count(1));
    send_s(response(kA, a.qpn, ROCE_OP_ACK, 50, 1)); // engages A; the release was end to end
    ASSERT_TRUE(at_a.wait_count(1));
    send_a(write8(a, 51, kLock, 0)); // caches the word
    ASSERT_TRUE(at_server.wait_count(2));
    send_s(response(kA, a.qpn, ROCE_OP_ACK, 51, 2));
    ASSERT_TRUE(at_a.wait_count(2));
    send_a(cas(a, 52, kLock, 0, 0xA));
    ASSERT_TRUE(at_server.wait_count(3));
    Packet w;
    const Bytes wf = at_server.frame(2);
    ASSERT_TRUE(wire_valid(wf, w));
    EXPECT_EQ(w.bth.opcode, ROCE_OP_WRITE_ONLY);
    send_s(response(kA, a.qpn, ROCE_OP_ACK, 52, 3));
    ASSERT_TRUE(at_a.wait_count(3));
    Packet aa;
    const Bytes af = at_a.frame(2);
    ASSERT_TRUE(wire_valid(af, aa));
    EXPECT_EQ(aa.bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(aa.atomic_orig, 0u);
    EXPECT_EQ(aa.aeth.msn, 3u);
    const std::string st = test::control(b.dir, "switch stats\n");
    EXPECT_NE(st.find("\"rewrites\":1"), std::string::npos) << st;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, nullptr, nullptr);
    rk_fabric_port_eth_attach(n2, RK_FABRIC_ETH_ROCE, nullptr, nullptr);
    rk_fabric_port_free(n1);
    rk_fabric_port_free(n2);
}

} // namespace
