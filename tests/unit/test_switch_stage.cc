// Unit tests of the bridge's programmable stage (platform/fabric/stage, docs/switch.md): the
// RoCEv2 parser and deparser over rackemu/roce.h, the pipeline's access discipline, tables and
// register arrays with their overflow, the program table and its parameters, the `opcount`
// program, and the stage inside a real bridge (control commands, frames through it).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "bridge_rig.h"
#include "programs.h"
#include "rackemu/fabric_proto.h"
#include "roce_vectors.h"
#include "stage.h"
#include "wire.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::sw;
using rackemu::rnic::Packet;
using rackemu::rnic::WireError;

namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kIp = ROCE_ETH_LEN, kUdp = kIp + ROCE_IPV4_LEN;

// A packet from node `from` to node `to` with the rackemu addresses (fabric_proto.h).
Packet packet(uint8_t opcode, unsigned from = 0, unsigned to = 1, uint32_t dqpn = 0x11, uint32_t psn = 100)
{
    Packet p;
    rkf_eth_node_mac(from, p.l3.src_mac.data());
    rkf_eth_node_mac(to, p.l3.dst_mac.data());
    p.l3.src_ip = rkf_eth_node_ipv4(from);
    p.l3.dst_ip = rkf_eth_node_ipv4(to);
    p.l3.udp_sport = 0xC123;
    p.l3.ip_id = 7;
    p.bth.opcode = opcode;
    p.bth.dqpn = dqpn;
    p.bth.psn = psn;
    p.bth.ackreq = true;
    p.reth = {0x7F0000001000ull, 0xABCD, 64};
    p.atomic = {0x7F0000002000ull, 0xBEEF, 0x1111, 0};
    p.xatomic.va = 0x7F0000003000ull;
    p.aeth.msn = 5;
    p.atomic_orig = 0x42;
    p.imm = 0xDEADBEEF;
    return p;
}

// The payload length an opcode needs to build (FIRST/MIDDLE: one 256-byte MTU; ATOMIC WRITE: 8).
uint32_t payload_for(uint32_t info)
{
    if (info & ROCE_HDR_FULL) return 256;
    if (info & ROCE_HDR_PAYLOAD8) return 8;
    if (info & ROCE_HDR_PAYLOAD) return 13; // a pad of 3
    return 0;
}

const uint8_t kPayload[ROCE_MTU_MAX] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

Bytes build(Packet p, uint32_t payload_len = 0)
{
    p.payload = payload_len ? kPayload : nullptr;
    p.payload_len = payload_len;
    Bytes f(ROCE_FRAME_MAX + 64);
    size_t n = 0;
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    f.resize(n);
    return f;
}

Bytes tagged(const Bytes &f, uint16_t tci = 0x2064)
{
    Bytes t(f.begin(), f.begin() + 12);
    t.push_back(0x81);
    t.push_back(0x00);
    t.push_back(uint8_t(tci >> 8));
    t.push_back(uint8_t(tci));
    t.insert(t.end(), f.begin() + 12, f.end());
    return t;
}

Bytes untagged(const Bytes &t)
{
    Bytes f(t.begin(), t.begin() + 12);
    f.insert(f.end(), t.begin() + 16, t.end());
    return f;
}

// The frame parses as valid RoCEv2 with the wire code (ICRC and IPv4 checksum checked there).
::testing::AssertionResult wire_valid(const Bytes &f, Packet *out = nullptr)
{
    Packet p;
    const WireError e = parse_frame(f.data(), f.size(), p, true, true);
    if (e != WireError::Ok) return ::testing::AssertionFailure() << "parse_frame: " << wire_error_name(e);
    if (rackemu::rnic::ip_checksum(f.data() + kIp, ROCE_IPV4_LEN) != 0)
        return ::testing::AssertionFailure() << "IPv4 checksum";
    if (roce_get16(f.data() + kUdp + 4) != f.size() - kUdp)
        return ::testing::AssertionFailure() << "UDP length " << roce_get16(f.data() + kUdp + 4);
    if (out) *out = p;
    return ::testing::AssertionSuccess();
}

std::vector<uint8_t> valid_opcodes()
{
    std::vector<uint8_t> ops;
    for (unsigned op = 0; op < 256; op++) {
        if (roce_xatomic_info(uint8_t(op)) & ROCE_HDR_VALID) ops.push_back(uint8_t(op));
    }
    return ops;
}

// A program for the tests of the frame path: what it does to each packet is set per test.
class Scripted final : public Program {
public:
    explicit Scripted(unsigned recirculations = 0)
        : Program(recirculations), a0_(pipe_, "a0", 0, 4), a1_(pipe_, "a1", 1, 4), t0_(pipe_, "t0", 0, 2)
    {
    }
    std::function<Verdict(Ctx &, Scripted &)> fn;
    Verdict ingress(Ctx &c) override { return fn(c, *this); }
    RegisterArray<uint64_t> a0_, a1_;
    Table<uint32_t, uint32_t> t0_;
};

std::unique_ptr<Scripted> scripted(std::function<Verdict(Ctx &, Scripted &)> fn, unsigned recirc = 0)
{
    auto p = std::make_unique<Scripted>(recirc);
    p->fn = std::move(fn);
    return p;
}

Bytes out_bytes(const Stage::Out &o)
{
    return Bytes(o.data, o.data + o.len);
}

// ---- Parser and deparser ----

TEST(SwitchParser, EveryOpcodeRoundTripsThroughParseAndDeparseTaggedOrNot)
{
    for (const uint8_t op : valid_opcodes()) {
        const uint32_t info = roce_xatomic_info(op);
        const Bytes f = build(packet(op), payload_for(info));
        for (const bool vlan : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << "opcode 0x" << std::hex << unsigned(op) << (vlan ? " 802.1Q" : ""));
            const Bytes in = vlan ? tagged(f) : f;
            std::vector<uint8_t> scratch;
            const Headers h = parse(in.data(), in.size(), scratch);
            ASSERT_EQ(h.kind, Headers::Kind::Roce) << wire_error_name(h.error);
            EXPECT_EQ(h.vlan, vlan);
            if (vlan) {
                EXPECT_EQ(h.vlan_tci, 0x2064);
            }
            EXPECT_EQ(h.pkt.bth.opcode, op);
            EXPECT_EQ(h.pkt.bth.dqpn, 0x11u);
            EXPECT_EQ(h.pkt.bth.psn, 100u);
            EXPECT_EQ(h.pkt.payload_len, payload_for(info));
            if (info & ROCE_HDR_RETH) {
                EXPECT_EQ(h.pkt.reth.rkey, 0xABCDu);
            }
            if (info & ROCE_HDR_ATOMICETH) {
                EXPECT_EQ(h.pkt.atomic.swap_add, 0x1111u);
            }
            if (info & ROCE_HDR_AETH) {
                EXPECT_EQ(h.pkt.aeth.msn, 5u);
            }
            if (info & ROCE_HDR_ATOMICACKETH) {
                EXPECT_EQ(h.pkt.atomic_orig, 0x42u);
            }
            if (info & ROCE_HDR_IMMDT) {
                EXPECT_EQ(h.pkt.imm, 0xDEADBEEFu);
            }
            Bytes out;
            ASSERT_EQ(deparse(h, out), WireError::Ok);
            EXPECT_EQ(out, in); // nothing changed: the same bytes
            EXPECT_TRUE(frame_valid(out.data(), out.size()));
        }
    }
}

// Frames built independently of hw/rnic (roce_vectors.py) and one a ConnectX-4 Lx sent: parsed
// as the vectors say, and an unchanged header vector deparses to the same bytes, tagged or not.
TEST(SwitchParser, IndependentVectorsParseAndDeparseByteForByte)
{
    for (const RoceVector &v : roce_vectors) {
        const Bytes f(v.frame, v.frame + v.len);
        for (const bool vlan : {false, true}) {
            SCOPED_TRACE(::testing::Message() << v.name << (vlan ? " 802.1Q" : ""));
            const Bytes in = vlan ? tagged(f) : f;
            std::vector<uint8_t> scratch;
            const Headers h = parse(in.data(), in.size(), scratch);
            ASSERT_EQ(h.kind, Headers::Kind::Roce) << wire_error_name(h.error);
            EXPECT_EQ(h.pkt.bth.opcode, v.opcode);
            EXPECT_EQ(h.pkt.bth.dqpn, v.dqpn);
            EXPECT_EQ(h.pkt.bth.psn, v.psn);
            EXPECT_EQ(h.pkt.payload_len, v.payload_len);
            Bytes out;
            ASSERT_EQ(deparse(h, out), WireError::Ok);
            EXPECT_EQ(out, in);
        }
    }
}

TEST(SwitchParser, FramesThatAreNotRoceV2OverIpv4AreNotParsed)
{
    const Bytes roce = build(packet(ROCE_OP_SEND_ONLY), 13);
    std::vector<uint8_t> scratch;
    auto kind = [&](const Bytes &f) { return parse(f.data(), f.size(), scratch).kind; };
    Bytes arp = roce;
    roce_put16(arp.data() + 12, 0x0806);
    EXPECT_EQ(kind(arp), Headers::Kind::NotRoce);
    Bytes ipv6 = roce;
    roce_put16(ipv6.data() + 12, 0x86DD);
    EXPECT_EQ(kind(ipv6), Headers::Kind::NotRoce);
    Bytes tcp = roce;
    tcp[kIp + 9] = 6;
    EXPECT_EQ(kind(tcp), Headers::Kind::NotRoce);
    Bytes other_port = roce;
    roce_put16(other_port.data() + kUdp + 2, 4792);
    EXPECT_EQ(kind(other_port), Headers::Kind::NotRoce);
    Bytes later_fragment = roce;
    roce_put16(later_fragment.data() + kIp + 6, 0x0010);
    EXPECT_EQ(kind(later_fragment), Headers::Kind::NotRoce);
    Bytes qinq = tagged(tagged(roce)); // a second tag: not looked through
    EXPECT_EQ(kind(qinq), Headers::Kind::NotRoce);
    EXPECT_EQ(kind(roce), Headers::Kind::Roce);
}

TEST(SwitchParser, TruncatedAndCorruptRoceFramesAreMalformedWithTheirReason)
{
    const Bytes f = build(packet(ROCE_OP_CMP_SWAP));
    std::vector<uint8_t> scratch;
    for (const bool vlan : {false, true}) {
        const Bytes in = vlan ? tagged(f) : f;
        for (size_t n = 0; n < in.size(); n++) { // every prefix: a defined answer, no read past n
            const Bytes cut(in.begin(), in.begin() + long(n));
            const Headers h = parse(cut.data(), cut.size(), scratch);
            EXPECT_NE(h.kind, Headers::Kind::Roce) << n;
        }
    }
    Bytes icrc = f;
    icrc[ROCE_HDRS_LEN + 3] ^= 0x10; // a bit of the AtomicETH: the ICRC no longer matches
    Headers h = parse(icrc.data(), icrc.size(), scratch);
    EXPECT_EQ(h.kind, Headers::Kind::Malformed);
    EXPECT_EQ(h.error, WireError::Icrc);
    Bytes csum = f;
    csum[kIp + 8] ^= 1; // TTL: the IPv4 checksum no longer matches
    h = parse(csum.data(), csum.size(), scratch);
    EXPECT_EQ(h.error, WireError::IpChecksum);
    Bytes ihl = f;
    ihl[kIp] = 0x44;
    EXPECT_EQ(parse(ihl.data(), ihl.size(), scratch).error, WireError::IpHeaderLen);
}

TEST(SwitchDeparser, CasRewrittenToWriteShrinksAndKeepsChecksumUdpLengthAndIcrcValid)
{
    const Bytes cas = build(packet(ROCE_OP_CMP_SWAP));
    for (const bool vlan : {false, true}) {
        const Bytes in = vlan ? tagged(cas) : cas;
        std::vector<uint8_t> scratch;
        Headers h = parse(in.data(), in.size(), scratch);
        ASSERT_EQ(h.kind, Headers::Kind::Roce);
        // CAS(0, x) -> an 8-byte RDMA WRITE of x (the SwordBox rewrite, WORDS 2021 sec. 3.1).
        uint8_t value[8];
        roce_put64(value, h.pkt.atomic.swap_add);
        h.pkt.bth.opcode = ROCE_OP_WRITE_ONLY;
        h.pkt.reth = {h.pkt.atomic.va, h.pkt.atomic.rkey, 8};
        h.pkt.payload = value;
        h.pkt.payload_len = 8;
        Bytes out;
        ASSERT_EQ(deparse(h, out), WireError::Ok);
        EXPECT_EQ(out.size() + 4, in.size()); // AtomicETH 28 B -> RETH 16 B + 8 B payload
        const Bytes plain = vlan ? untagged(out) : out;
        if (vlan) {
            EXPECT_EQ(roce_get16(out.data() + 14), 0x2064);
        }
        Packet w;
        ASSERT_TRUE(wire_valid(plain, &w));
        EXPECT_EQ(w.bth.opcode, ROCE_OP_WRITE_ONLY);
        EXPECT_EQ(w.reth.va, 0x7F0000002000ull);
        EXPECT_EQ(w.reth.rkey, 0xBEEFu);
        EXPECT_EQ(roce_get64(w.payload), 0x1111u);
        EXPECT_EQ(w.bth.psn, 100u);
        EXPECT_EQ(w.l3.udp_sport, 0xC123);
    }
}

TEST(SwitchDeparser, AckRewrittenToAtomicAckGrowsAndStaysValid)
{
    const Bytes ack = build(packet(ROCE_OP_ACK, 1, 0));
    std::vector<uint8_t> scratch;
    Headers h = parse(ack.data(), ack.size(), scratch);
    ASSERT_EQ(h.kind, Headers::Kind::Roce);
    h.pkt.bth.opcode = ROCE_OP_ATOMIC_ACK;
    h.pkt.atomic_orig = 1; // the lock was taken: the CAS failed
    Bytes out;
    ASSERT_EQ(deparse(h, out), WireError::Ok);
    EXPECT_EQ(out.size(), ack.size() + ROCE_ATOMICACKETH_LEN);
    Packet a;
    ASSERT_TRUE(wire_valid(out, &a));
    EXPECT_EQ(a.bth.opcode, ROCE_OP_ATOMIC_ACK);
    EXPECT_EQ(a.atomic_orig, 1u);
    EXPECT_EQ(a.aeth.msn, 5u);
}

TEST(SwitchDeparser, AnInvalidPacketIsRefusedNotWritten)
{
    const Bytes f = build(packet(ROCE_OP_WRITE_ONLY), 13);
    std::vector<uint8_t> scratch;
    Headers h = parse(f.data(), f.size(), scratch);
    h.pkt.bth.dqpn = 1u << 24; // beyond 24 bits
    Bytes out;
    EXPECT_EQ(deparse(h, out), WireError::BadField);
    EXPECT_TRUE(out.empty());
}

// ---- Pipeline discipline ----

TEST(SwitchPipeline, ASecondAccessToAnArrayInOnePassIsRefusedAndCounted)
{
    Stage st;
    auto prog = scripted([](Ctx &c, Scripted &s) {
        EXPECT_TRUE(s.a0_.execute(c.pass, 0, [](uint64_t &n) { n++; }));
        EXPECT_FALSE(s.a0_.execute(c.pass, 0, [](uint64_t &n) { n += 100; })); // refused
        return Verdict::Pass;
    });
    Scripted *p = prog.get();
    st.load_program(std::move(prog), "scripted");
    const Bytes f = build(packet(ROCE_OP_SEND_ONLY), 13);
    st.process(0, f.data(), f.size());
    st.process(0, f.data(), f.size()); // a new packet: a new budget
    EXPECT_EQ(p->a0_.value(0), 2u);
    EXPECT_EQ(p->pipeline().violations(), 2u);
    EXPECT_NE(p->pipeline().first_violation().find("a0: a second access in one pass"), std::string::npos);
}

TEST(SwitchPipeline, AnEarlierStageAfterALaterOneIsRefusedAndCounted)
{
    Stage st;
    auto prog = scripted([](Ctx &c, Scripted &s) {
        EXPECT_TRUE(s.a1_.execute(c.pass, 0, [](uint64_t &n) { n++; }));
        EXPECT_EQ(s.t0_.lookup(c.pass, 1), nullptr); // stage 0 after stage 1
        return Verdict::Pass;
    });
    Scripted *p = prog.get();
    st.load_program(std::move(prog), "scripted");
    const Bytes f = build(packet(ROCE_OP_SEND_ONLY), 13);
    st.process(0, f.data(), f.size());
    EXPECT_EQ(p->pipeline().violations(), 1u);
    EXPECT_NE(p->pipeline().first_violation().find("t0: stage 0 accessed after stage 1"), std::string::npos);
    EXPECT_EQ(st.resources().tables[0].misses, 0u); // the refused lookup did not count as a miss
}

TEST(SwitchPipelineDeathTest, StrictModeAbortsOnADisciplineViolation)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            Stage st;
            st.set_strict(true);
            st.load_program(scripted([](Ctx &c, Scripted &s) {
                                s.a0_.execute(c.pass, 0, [](uint64_t &) {});
                                s.a0_.execute(c.pass, 1, [](uint64_t &) {});
                                return Verdict::Pass;
                            }),
                            "scripted");
            const Bytes f = build(packet(ROCE_OP_SEND_ONLY), 13);
            st.process(0, f.data(), f.size());
        },
        "pipeline discipline violated: a0: a second access");
}

TEST(SwitchPipeline, RecirculationGivesAFreshBudgetUpToTheDeclaredLimit)
{
    Stage st;
    auto prog = scripted(
        [](Ctx &c, Scripted &s) {
            EXPECT_TRUE(s.a0_.execute(c.pass, 0, [](uint64_t &n) { n++; }));
            return c.pass.number() < 1 ? Verdict::Recirculate : Verdict::Pass;
        },
        1);
    Scripted *p = prog.get();
    st.load_program(std::move(prog), "scripted");
    const Bytes f = build(packet(ROCE_OP_SEND_ONLY), 13);
    ASSERT_EQ(st.process(0, f.data(), f.size()).size(), 1u);
    EXPECT_EQ(p->a0_.value(0), 2u); // two passes, one access each
    EXPECT_EQ(st.counters().recirculations, 1u);
    EXPECT_EQ(p->pipeline().violations(), 0u);
    EXPECT_EQ(st.resources().recirculations, 1u);

    // A program that asks for more passes than it declared: dropped, counted.
    Stage st2;
    st2.load_program(scripted([](Ctx &, Scripted &) { return Verdict::Recirculate; }, 1), "loop");
    EXPECT_TRUE(st2.process(0, f.data(), f.size()).empty());
    EXPECT_EQ(st2.counters().recirc_exceeded, 1u);
    EXPECT_EQ(st2.counters().dropped, 1u);
}

TEST(SwitchPipeline, ArrayIndexOutOfRangeAndFullTableAreDefinedAndCounted)
{
    Stage st;
    auto prog = scripted([](Ctx &c, Scripted &s) {
        const uint32_t key = c.hdr.pkt.bth.dqpn;
        const uint32_t *v = s.t0_.lookup_or_learn(c.pass, key, key * 10);
        EXPECT_FALSE(s.a1_.execute(c.pass, 99, [](uint64_t &n) { n++; })); // 4 cells
        return v ? Verdict::Pass : Verdict::Drop;
    });
    Scripted *p = prog.get();
    st.load_program(std::move(prog), "scripted");
    for (uint32_t q : {1u, 2u, 1u, 3u}) {
        const Bytes f = build(packet(ROCE_OP_SEND_ONLY, 0, 1, q), 13);
        st.process(0, f.data(), f.size());
    }
    const Resources r = st.resources();
    ASSERT_EQ(r.tables.size(), 1u);
    EXPECT_EQ(r.tables[0].entries, 2u);
    EXPECT_EQ(r.tables[0].hits, 1u);
    EXPECT_EQ(r.tables[0].misses, 3u);
    EXPECT_EQ(r.tables[0].inserts, 2u);
    EXPECT_EQ(r.tables[0].overflow, 1u); // QP 3 found the table full
    EXPECT_EQ(st.counters().dropped, 1u);
    EXPECT_EQ(p->pipeline().violations(), 0u);
    for (const ArrayInfo &a : r.arrays) {
        if (a.name == "a1") {
            EXPECT_EQ(a.out_of_range, 4u);
            EXPECT_EQ(a.occupancy, 0u);
        }
    }
}

// ---- The frame path ----

TEST(SwitchStage, WithoutAProgramNothingIsLoadedAndStatsSaySo)
{
    Stage st;
    EXPECT_FALSE(st.loaded());
    EXPECT_EQ(st.stats_json(), "{\"loaded\":false}");
}

TEST(SwitchStage, RewriteDropAndSynthesizeAreCountedAndEveryOutputIsValid)
{
    Stage st;
    // WRITE: rewritten (PSN + 1000) and answered with a synthesized ACK from the responder;
    // SEND: dropped; anything else passes.
    st.load_program(scripted([](Ctx &c, Scripted &) {
                        Packet &p = c.hdr.pkt;
                        if (p.bth.opcode == ROCE_OP_SEND_ONLY) return Verdict::Drop;
                        if (p.bth.opcode != ROCE_OP_WRITE_ONLY) return Verdict::Pass;
                        Packet ack = packet(ROCE_OP_ACK, 1, 0, 0x22, p.bth.psn);
                        c.emit(ack);
                        p.bth.psn = roce_psn_add(p.bth.psn, 1000);
                        return Verdict::Rewrite;
                    }),
                    "scripted");
    const Bytes w = build(packet(ROCE_OP_WRITE_ONLY), 13);
    const auto &out = st.process(0, w.data(), w.size());
    ASSERT_EQ(out.size(), 2u);
    EXPECT_FALSE(out[0].synthesized);
    EXPECT_TRUE(out[1].synthesized);
    Packet p;
    ASSERT_TRUE(wire_valid(out_bytes(out[0]), &p));
    EXPECT_EQ(p.bth.psn, 1100u);
    ASSERT_TRUE(wire_valid(out_bytes(out[1]), &p));
    EXPECT_EQ(p.bth.opcode, ROCE_OP_ACK);
    EXPECT_EQ(p.l3.dst_ip, rkf_eth_node_ipv4(0));

    const Bytes s = build(packet(ROCE_OP_SEND_ONLY), 13);
    EXPECT_TRUE(st.process(0, s.data(), s.size()).empty());
    const Bytes r = build(packet(ROCE_OP_READ_REQUEST));
    const auto &o2 = st.process(0, r.data(), r.size());
    ASSERT_EQ(o2.size(), 1u);
    EXPECT_EQ(o2[0].data, r.data()); // passed: the frame itself, not a copy

    const StageCounters &c = st.counters();
    EXPECT_EQ(c.frames, 3u);
    EXPECT_EQ(c.roce, 3u);
    EXPECT_EQ(c.rewritten, 1u);
    EXPECT_EQ(c.synthesized, 1u);
    EXPECT_EQ(c.dropped, 1u);
    EXPECT_EQ(c.passed, 1u);
}

TEST(SwitchStage, APacketTheProgramCannotDeparseFallsBackToTheFrameAsItCame)
{
    Stage st;
    st.load_program(scripted([](Ctx &c, Scripted &) {
                        c.hdr.pkt.bth.psn = 1u << 24; // not a PSN
                        Packet bad = c.hdr.pkt;
                        c.emit(bad);
                        return Verdict::Rewrite;
                    }),
                    "scripted");
    const Bytes f = build(packet(ROCE_OP_WRITE_ONLY), 13);
    const auto &out = st.process(0, f.data(), f.size());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out_bytes(out[0]), f);
    EXPECT_EQ(st.counters().deparse_errors, 2u);
    EXPECT_EQ(st.counters().rewritten, 0u);
    EXPECT_EQ(st.counters().synthesized, 0u);
}

TEST(SwitchStage, MalformedFramesNeverReachTheProgramAndArePassedOrDropped)
{
    for (const bool drop : {false, true}) {
        Stage st;
        std::string err;
        ASSERT_TRUE(st.load("opcount", {drop ? "malformed=drop" : "malformed=pass"}, err)) << err;
        Bytes f = build(packet(ROCE_OP_WRITE_ONLY), 13);
        f[ROCE_HDRS_LEN] ^= 0xFF; // corrupt the RETH: ICRC mismatch
        EXPECT_EQ(st.process(0, f.data(), f.size()).size(), drop ? 0u : 1u);
        const Bytes cut(f.begin(), f.begin() + 40); // cut inside the UDP header
        EXPECT_EQ(st.process(0, cut.data(), cut.size()).size(), drop ? 0u : 1u);
        const Bytes tiny = {0x02, 0x52};
        st.process(0, tiny.data(), tiny.size());
        Bytes longer = build(packet(ROCE_OP_WRITE_ONLY), 13);
        longer.resize(longer.size() + 8); // bytes beyond the IPv4 total length
        st.process(0, longer.data(), longer.size());
        const StageCounters &c = st.counters();
        EXPECT_EQ(c.malformed, 4u);
        EXPECT_EQ(c.roce, 0u);
        EXPECT_EQ(c.malformed_by.at("icrc"), 1u);
        EXPECT_EQ(c.malformed_by.at("truncated"), 2u);
        EXPECT_EQ(c.malformed_by.at("ip-total-length"), 1u);
        EXPECT_EQ(c.dropped, drop ? 4u : 0u);
        EXPECT_EQ(st.resources().tables[0].misses, 0u); // the program saw none of them
        EXPECT_NE(st.stats_json().find("\"malformed_by\":{\"icrc\":1"), std::string::npos);
    }
}

TEST(SwitchStage, UnloadDropsTheProgramsStateAndLoadingAnotherStartsFresh)
{
    Stage st;
    std::string err;
    ASSERT_TRUE(st.load("opcount", {}, err)) << err;
    const Bytes f = build(packet(ROCE_OP_WRITE_ONLY), 13);
    st.process(0, f.data(), f.size());
    EXPECT_EQ(st.resources().tables[0].entries, 1u);
    st.unload();
    EXPECT_FALSE(st.loaded());
    EXPECT_EQ(st.counters().frames, 0u);
    ASSERT_TRUE(st.load("opcount", {}, err)) << err;
    EXPECT_EQ(st.resources().tables[0].entries, 0u);
    EXPECT_EQ(st.stats_json().find("\"qps\":[{"), std::string::npos);
}

// ---- The program table and parameters ----

TEST(SwitchPrograms, TheTableListsOpcountWithItsParameters)
{
    ASSERT_NE(find_program("opcount"), nullptr);
    EXPECT_NE(find_program("swordbox"), nullptr); // tests/unit/test_swordbox.cc
    const std::string list = Stage{}.list_json();
    EXPECT_NE(list.find("\"name\":\"opcount\""), std::string::npos);
    EXPECT_NE(list.find("\"key\":\"qps\",\"default\":\"256\",\"allowed\":\"an integer in 1..65536\""),
              std::string::npos);
    EXPECT_NE(list.find("\"key\":\"malformed\",\"default\":\"pass\",\"allowed\":\"one of pass, drop\""),
              std::string::npos);
}

TEST(SwitchPrograms, SetValidationNamesTheKeyTheValueAndWhatIsAllowed)
{
    Stage st;
    std::string err;
    auto refused = [&](const std::string &name, std::vector<std::string> sets) {
        err.clear();
        EXPECT_FALSE(st.load(name, sets, err));
        return err;
    };
    EXPECT_EQ(refused("nosuch", {}), "no switch program 'nosuch' (programs: opcount, swordbox)");
    EXPECT_EQ(refused("opcount", {"bogus=1"}), "opcount: no parameter 'bogus' (parameters: qps, malformed)");
    EXPECT_EQ(refused("opcount", {"qps"}), "opcount: 'qps' is not key=value");
    EXPECT_EQ(refused("opcount", {"=5"}), "opcount: '=5' is not key=value");
    EXPECT_EQ(refused("opcount", {"qps=0"}), "opcount: qps=0 is not an integer in 1..65536");
    EXPECT_EQ(refused("opcount", {"qps=65537"}), "opcount: qps=65537 is not an integer in 1..65536");
    EXPECT_EQ(refused("opcount", {"qps=-1"}), "opcount: qps=-1 is not an integer in 1..65536");
    EXPECT_EQ(refused("opcount", {"qps=12x"}), "opcount: qps=12x is not an integer in 1..65536");
    EXPECT_EQ(refused("opcount", {"qps=99999999999999999999999"}),
              "opcount: qps=99999999999999999999999 is not an integer in 1..65536");
    EXPECT_EQ(refused("opcount", {"malformed=eat"}), "opcount: malformed=eat is not one of pass, drop");
    EXPECT_EQ(refused("opcount", {"qps=2", "qps=3"}), "opcount: qps given twice");
    EXPECT_FALSE(st.loaded());

    ASSERT_TRUE(st.load("opcount", {"qps=2"}, err)) << err;
    EXPECT_FALSE(st.load("opcount", {"qps=0"}, err)); // a refused load leaves the loaded program
    EXPECT_TRUE(st.loaded());
    EXPECT_EQ(st.resources().tables[0].capacity, 2u);

    std::string name;
    std::vector<std::string> sets;
    ASSERT_TRUE(split_load_args("opcount --set qps=8 malformed=drop", name, sets, err));
    EXPECT_EQ(name, "opcount");
    EXPECT_EQ(sets, (std::vector<std::string>{"qps=8", "malformed=drop"}));
    EXPECT_FALSE(split_load_args("  ", name, sets, err));
}

// ---- opcount ----

TEST(SwitchOpcount, CountsOpcodesBytesRetransmissionsAndNaksPerQp)
{
    Stage st;
    std::string err;
    ASSERT_TRUE(st.load("opcount", {"qps=2"}, err)) << err;
    auto send = [&](Packet p, uint32_t len = 0) {
        const Bytes f = build(p, len);
        const auto &out = st.process(0, f.data(), f.size());
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out_bytes(out[0]), f); // counted, never changed
    };
    // QP 0x11 on node 1: WRITEs of 13 and 256 bytes, a CAS, a READ; then PSN 101 again (a
    // retransmission after a loss).
    send(packet(ROCE_OP_WRITE_ONLY, 0, 1, 0x11, 100), 13);
    send(packet(ROCE_OP_WRITE_FIRST, 0, 1, 0x11, 101), 256);
    send(packet(ROCE_OP_CMP_SWAP, 0, 1, 0x11, 102));
    send(packet(ROCE_OP_READ_REQUEST, 0, 1, 0x11, 103));
    send(packet(ROCE_OP_WRITE_FIRST, 0, 1, 0x11, 101), 256);
    // QP 0x22 on node 0 (the requester's): an ACK, a NAK and an RNR NAK.
    Packet ack = packet(ROCE_OP_ACK, 1, 0, 0x22, 100);
    send(ack);
    ack.aeth.syndrome = ROCE_AETH_NAK(ROCE_NAK_PSN_SEQ);
    send(ack);
    ack.aeth.syndrome = ROCE_AETH_RNR(4);
    send(ack);
    // A third QP: the table holds 2, so it is untracked (the defined fallback).
    send(packet(ROCE_OP_SEND_ONLY, 0, 1, 0x33, 1), 13);

    const std::string js = st.stats_json();
    EXPECT_NE(
        js.find("\"untracked\":1,\"qps\":[{\"dst\":\"198.18.0.2\",\"qpn\":17,\"ops\":{\"write\":3,"
                "\"read_request\":1,\"cmp_swap\":1},\"payload_bytes\":525,\"retransmitted\":1,\"naks\":0,"
                "\"rnr_naks\":0},{\"dst\":\"198.18.0.1\",\"qpn\":34,\"ops\":{\"ack\":3},\"payload_bytes\":0,"
                "\"retransmitted\":0,\"naks\":1,\"rnr_naks\":1}]"),
        std::string::npos)
        << js;
    EXPECT_NE(
        js.find(
            "\"frames\":{\"in\":9,\"roce\":9,\"not_roce\":0,\"malformed\":0,\"passed\":9,\"rewritten\":0"),
        std::string::npos)
        << js;
    EXPECT_NE(
        js.find("{\"name\":\"qp\",\"stage\":0,\"capacity\":2,\"entries\":2,\"key_bytes\":8,\"value_bytes\":4,"
                "\"hits\":6,\"misses\":3,\"inserts\":2,\"overflow\":1}"),
        std::string::npos)
        << js;
    EXPECT_NE(
        js.find(
            "{\"name\":\"bytes\",\"stage\":1,\"cells\":2,\"cell_bytes\":8,\"sram_bytes\":16,\"occupancy\":2,"
            "\"accesses\":8,\"out_of_range\":0}"),
        std::string::npos)
        << js;
    EXPECT_NE(js.find("\"discipline_violations\":0"), std::string::npos);
}

TEST(SwitchOpcount, ReportsItsResourcesInSwitchUnits)
{
    Stage st;
    std::string err;
    ASSERT_TRUE(st.load("opcount", {"qps=1024"}, err)) << err;
    const Resources r = st.resources();
    EXPECT_EQ(r.stages, 4u);
    EXPECT_EQ(r.recirculations, 0u);
    ASSERT_EQ(r.tables.size(), 1u);
    EXPECT_EQ(r.tables[0].capacity, 1024u);
    // ops 1024 x 13 classes x 8 B, bytes/retrans/naks/rnr 1024 x 8 B, untracked 8 B, req_psn
    // 1024 x 8 B, the table 1024 x (8 + 4) B.
    EXPECT_EQ(r.sram_bytes, 1024u * 13 * 8 + 4 * 1024 * 8 + 8 + 1024 * 8 + 1024 * 12);
    EXPECT_NE(st.stats_json().find("\"resources\":{\"stages\":4,\"recirculations\":0,\"sram_bytes\":"),
              std::string::npos);
}

// ---- In the bridge ----

TEST(SwitchInBridge, LoadedProgramSeesEveryFrameAndAnswersThroughTheControlSocket)
{
    test::BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    test::EthSink roce;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, test::EthSink::rx, &roce);

    EXPECT_NE(test::control(b.dir, "switch stats\n").find("{\"loaded\":false}"), std::string::npos);
    EXPECT_NE(test::control(b.dir, "switch load nosuch\n").find("no switch program 'nosuch'"),
              std::string::npos);
    EXPECT_NE(test::control(b.dir, "switch load opcount qps=0\n").find("qps=0 is not an integer"),
              std::string::npos);
    EXPECT_NE(test::control(b.dir, "switch list\n").find("\"name\":\"opcount\""), std::string::npos);
    EXPECT_NE(test::control(b.dir, "stats\n").find("\"switch_program\":\"\""), std::string::npos);
    const std::string loaded = test::control(b.dir, "switch load opcount --set qps=8\n");
    ASSERT_NE(loaded.find("\"ok\":true"), std::string::npos) << loaded;
    EXPECT_NE(test::control(b.dir, "stats\n").find("\"switch_program\":\"opcount\""), std::string::npos);

    const Bytes w = build(packet(ROCE_OP_WRITE_ONLY), 13);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, w.data(), w.size()), 0);
    ASSERT_TRUE(roce.wait_count(1));
    EXPECT_EQ(roce.frame(0), w);
    const std::string st = test::control(b.dir, "switch stats\n");
    EXPECT_NE(st.find("\"ops\":{\"write\":1}"), std::string::npos) << st;
    EXPECT_NE(st.find("\"in\":1,\"roce\":1"), std::string::npos) << st;

    // Unloaded: the state is gone, frames follow the bridge's path as before.
    const std::string un = test::control(b.dir, "switch unload\n");
    EXPECT_NE(un.find("\"unloaded\":true"), std::string::npos) << un;
    EXPECT_NE(test::control(b.dir, "switch stats\n").find("{\"loaded\":false}"), std::string::npos);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, w.data(), w.size()), 0);
    ASSERT_TRUE(roce.wait_count(2));
    EXPECT_EQ(roce.frame(1), w);
    EXPECT_NE(test::control(b.dir, "switch frobnicate\n").find("usage: switch load NAME"), std::string::npos);
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, nullptr, nullptr);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

std::string run(const std::string &cmd)
{
    std::string out;
    FILE *p = popen(cmd.c_str(), "r");
    if (!p) return out;
    char buf[512];
    while (fgets(buf, sizeof buf, p))
        out += buf;
    pclose(p);
    return out;
}

// The order in the bridge (docs/switch.md, "Order with capture and fault rules"): capture in sees
// the frame as sent, the stage rewrites it, fault rules act on what leaves the stage, capture out
// sees what is delivered; a synthesized frame goes back out of the ingress port.
TEST(SwitchInBridge, CaptureInSeesTheFrameBeforeTheStageFaultsAndCaptureOutAfterIt)
{
    test::BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    test::EthSink at0, at1;
    rk_fabric_port_eth_attach(n0, RK_FABRIC_ETH_ROCE, test::EthSink::rx, &at0);
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, test::EthSink::rx, &at1);
    // CAS -> 8-byte WRITE of the swap value, and an ACK on behalf of node 1 back to node 0.
    b.bridge->load_switch_program(scripted([](Ctx &c, Scripted &) {
                                      Packet &p = c.hdr.pkt;
                                      if (p.bth.opcode != ROCE_OP_CMP_SWAP) return Verdict::Pass;
                                      c.emit(packet(ROCE_OP_ACK, 1, 0, 0x22, p.bth.psn));
                                      roce_put64(c.payload, p.atomic.swap_add);
                                      p.bth.opcode = ROCE_OP_WRITE_ONLY;
                                      p.reth = {p.atomic.va, p.atomic.rkey, 8};
                                      p.payload = c.payload;
                                      p.payload_len = 8;
                                      return Verdict::Rewrite;
                                  }),
                                  "cas-to-write");
    const std::string path = b.dir + "/order.pcapng";
    ASSERT_NE(
        test::control(b.dir, "capture start path=" + path + " nodes=0,1 what=eth dir=both\n").find("\"ok\""),
        std::string::npos);
    ASSERT_NE(test::control(b.dir, "fault add drop svc=eth kind=roce dst=1 limit=1\n").find("\"ok\""),
              std::string::npos);
    const Bytes cas1 = build(packet(ROCE_OP_CMP_SWAP, 0, 1, 0x11, 7));
    const Bytes cas2 = build(packet(ROCE_OP_CMP_SWAP, 0, 1, 0x11, 8));
    ASSERT_EQ(rk_fabric_port_eth_send(n0, cas1.data(), cas1.size()), 0);
    ASSERT_TRUE(at0.wait_count(1)); // the ACK came back though the WRITE was dropped after the stage
    ASSERT_EQ(rk_fabric_port_eth_send(n0, cas2.data(), cas2.size()), 0);
    ASSERT_TRUE(at0.wait_count(2));
    ASSERT_TRUE(at1.wait_count(1));
    Packet w;
    const std::vector<uint8_t> f1 = at1.frame(0); // w points into it
    ASSERT_TRUE(wire_valid(f1, &w));
    EXPECT_EQ(w.bth.opcode, ROCE_OP_WRITE_ONLY);
    EXPECT_EQ(w.bth.psn, 8u);
    EXPECT_EQ(roce_get64(w.payload), 0x1111u);
    Packet a;
    const std::vector<uint8_t> f0 = at0.frame(1); // a points into it
    ASSERT_TRUE(wire_valid(f0, &a));
    EXPECT_EQ(a.bth.opcode, ROCE_OP_ACK);
    EXPECT_EQ(a.bth.psn, 8u);
    const std::string st = test::control(b.dir, "switch stats\n");
    EXPECT_NE(st.find("\"in\":2,\"roce\":2,\"not_roce\":0,\"malformed\":0,\"passed\":0,\"rewritten\":2,"
                      "\"synthesized\":2,\"dropped\":0"),
              std::string::npos)
        << st;
    EXPECT_NE(test::control(b.dir, "fault list\n").find("\"hits\":1"), std::string::npos);
    ASSERT_NE(test::control(b.dir, "capture stop\n").find("\"frames\":5"), std::string::npos);
    if (std::system("command -v tshark >/dev/null 2>&1") == 0) {
        // interface, direction (1 inbound, 2 outbound), opcode: two CAS in from node 0, two ACKs
        // out to it, one WRITE out to node 1 (the first one was dropped by the rule).
        const std::string rec = run("tshark -r " + path +
                                    " -T fields -e frame.interface_name -e frame.packet_flags_direction "
                                    "-e infiniband.bth.opcode 2>/dev/null | sort");
        EXPECT_EQ(rec,
                  "node0\t0x00000001\t19\nnode0\t0x00000001\t19\nnode0\t0x00000002\t17\n"
                  "node0\t0x00000002\t17\nnode1\t0x00000002\t10\n")
            << rec;
    }
    rk_fabric_port_eth_attach(n0, RK_FABRIC_ETH_ROCE, nullptr, nullptr);
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, nullptr, nullptr);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(SwitchInBridge, AProgramGivenAtStartIsLoadedAndABadOneRefusesToStart)
{
    Bridge::Options o;
    o.switch_program = "opcount";
    o.switch_params = {"qps=4"};
    test::BridgeRig b(o);
    EXPECT_NE(test::control(b.dir, "switch stats\n").find("\"program\":\"opcount\""), std::string::npos);

    Bridge::Options bad;
    bad.run_dir = b.dir + "/bad";
    bad.switch_program = "opcount";
    bad.switch_params = {"qps=none"};
    Bridge br(bad);
    std::string err;
    EXPECT_FALSE(br.start(err));
    EXPECT_EQ(err, "switch program: opcount: qps=none is not an integer in 1..65536");
}

} // namespace
