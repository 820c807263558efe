// Unit tests of the RoCEv2 wire format (hw/rnic/wire.cc, rackemu/roce.h) against frames built
// independently from the specification and one captured from a ConnectX-4 Lx
// (tests/unit/roce_vectors.py -> roce_vectors.h).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "roce_vectors.h"
#include "wire.h"

using namespace rackemu::rnic;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes vec(const RoceVector &v)
{
    return Bytes(v.frame, v.frame + v.len);
}

const RoceVector &named(const char *name)
{
    for (const auto &v : roce_vectors) {
        if (std::strcmp(v.name, name) == 0) return v;
    }
    ADD_FAILURE() << "no vector " << name;
    return roce_vectors[0];
}

// After a test changed header bytes: recompute the IP checksum and the ICRC, so that only the
// check under test can fail.
void reseal(Bytes &f)
{
    uint8_t *ip = f.data() + ROCE_ETH_LEN;
    ip[10] = ip[11] = 0;
    roce_put16(ip + 10, ip_checksum(ip, ROCE_IPV4_LEN));
    const size_t ip_len = roce_get16(ip + 2);
    if (ROCE_ETH_LEN + ip_len > f.size() || ip_len < ROCE_ICRC_LEN) return;
    const uint32_t c = icrc(ip, ip_len - ROCE_ICRC_LEN);
    uint8_t *q = ip + ip_len - ROCE_ICRC_LEN;
    q[0] = uint8_t(c), q[1] = uint8_t(c >> 8), q[2] = uint8_t(c >> 16), q[3] = uint8_t(c >> 24);
}

WireError parse(const Bytes &f, Packet &p)
{
    return parse_frame(f.data(), f.size(), p);
}
WireError parse(const Bytes &f)
{
    Packet p;
    return parse(f, p);
}

// Offsets in a frame.
constexpr size_t kIp = ROCE_ETH_LEN, kUdp = kIp + ROCE_IPV4_LEN, kBth = kUdp + ROCE_UDP_LEN;

Packet base_packet(uint8_t opcode)
{
    Packet p;
    p.l3 =
        L3Addr{{2, 0x52, 0x4b, 0, 0, 1}, {2, 0x52, 0x4b, 0, 0, 0}, 0xC6120001, 0xC6120002, 0xC000, 0, 0, 64};
    p.bth.opcode = opcode;
    p.bth.dqpn = 0x11;
    return p;
}

} // namespace

TEST(RoceWire, Crc32IsTheIeeeCrc)
{
    EXPECT_EQ(crc32(0, "123456789", 9), 0xCBF43926u); // the CRC-32 check value
    EXPECT_EQ(crc32(crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
    std::vector<uint8_t> big(10000);
    for (size_t i = 0; i < big.size(); i++)
        big[i] = uint8_t(i * 31 + 7);
    uint32_t bytewise = 0;
    for (uint8_t b : big)
        bytewise = crc32(bytewise, &b, 1);
    EXPECT_EQ(crc32(0, big.data(), big.size()), bytewise) << "slice-by-8 agrees with byte at a time";
}

TEST(RoceWire, CapturedConnectX4CnpIcrcVerifies)
{
    const RoceVector &v = named("cx4lx_cnp");
    Packet p;
    ASSERT_EQ(parse(vec(v), p), WireError::Ok);
    EXPECT_EQ(p.bth.opcode, ROCE_OP_CNP);
    EXPECT_TRUE(p.bth.becn);
    EXPECT_FALSE(p.bth.fecn);
    EXPECT_EQ(p.bth.dqpn, 0x118u);
    EXPECT_EQ(p.l3.src_ip, 0x0a001101u);
    EXPECT_EQ(p.l3.tos, 0xc2);
    EXPECT_EQ(icrc(v.frame + kIp, v.len - kIp - ROCE_ICRC_LEN), 0x2a00fd82u);
}

TEST(RoceWire, EveryVectorParsesAndRebuildsByteForByte)
{
    for (const auto &v : roce_vectors) {
        SCOPED_TRACE(v.name);
        const Bytes in = vec(v); // p.payload points into it
        Packet p;
        ASSERT_EQ(parse(in, p), WireError::Ok);
        EXPECT_EQ(p.bth.opcode, v.opcode);
        EXPECT_EQ(p.bth.dqpn, v.dqpn);
        EXPECT_EQ(p.bth.psn, v.psn);
        EXPECT_EQ(p.payload_len, v.payload_len);
        EXPECT_EQ(icrc(v.frame + kIp, v.len - kIp - ROCE_ICRC_LEN), v.icrc);
        EXPECT_EQ(frame_len(v.opcode, v.payload_len), v.len);
        Bytes out(ROCE_FRAME_MAX);
        size_t n = 0;
        ASSERT_EQ(build_frame(p, out.data(), out.size(), &n), WireError::Ok);
        out.resize(n);
        EXPECT_EQ(out, vec(v));
    }
}

TEST(RoceWire, ExtensionHeadersDecodeAsTheSpecLaysThemOut)
{
    // Each frame is kept alive while its payload pointer is used.
    Packet p;
    const Bytes send = vec(named("send_only_pad3")), wimm = vec(named("write_only_imm")),
                aw = vec(named("atomic_write"));
    ASSERT_EQ(parse(send, p), WireError::Ok);
    EXPECT_EQ(p.bth.pad, 3);
    EXPECT_TRUE(p.bth.se);
    EXPECT_TRUE(p.bth.ackreq);
    EXPECT_EQ(std::memcmp(p.payload, "hello", 5), 0);

    ASSERT_EQ(parse(vec(named("send_last_imm")), p), WireError::Ok);
    EXPECT_EQ(p.imm, 0xDEADBEEFu);

    ASSERT_EQ(parse(vec(named("write_first_reth")), p), WireError::Ok);
    EXPECT_EQ(p.reth.va, 0x7F0000001000ull);
    EXPECT_EQ(p.reth.rkey, 0x00C0FFEEu);
    EXPECT_EQ(p.reth.dma_len, 4096u);

    ASSERT_EQ(parse(wimm, p), WireError::Ok);
    EXPECT_EQ(p.reth.rkey, 0x42u);
    EXPECT_EQ(p.imm, 7u);
    EXPECT_EQ(std::memcmp(p.payload, "abc", 3), 0);

    ASSERT_EQ(parse(vec(named("read_request")), p), WireError::Ok);
    EXPECT_EQ(p.reth.va, 0xFFFFFFFFFFFF0000ull);
    EXPECT_EQ(p.reth.dma_len, 1u << 20);
    EXPECT_EQ(p.l3.ip_id, 0x1234);

    ASSERT_EQ(parse(vec(named("read_resp_only")), p), WireError::Ok);
    EXPECT_EQ(p.aeth.syndrome, ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID));
    EXPECT_EQ(p.aeth.msn, 3u);
    EXPECT_EQ(p.l3.ttl, 1);

    ASSERT_EQ(parse(vec(named("nak_psn_seq")), p), WireError::Ok);
    EXPECT_EQ(p.aeth.syndrome & ROCE_AETH_TYPE_MASK, ROCE_AETH_TYPE_NAK);
    EXPECT_EQ(p.aeth.syndrome & ROCE_AETH_VALUE_MASK, ROCE_NAK_PSN_SEQ);
    ASSERT_EQ(parse(vec(named("rnr_nak")), p), WireError::Ok);
    EXPECT_EQ(p.aeth.syndrome & ROCE_AETH_TYPE_MASK, ROCE_AETH_TYPE_RNR);
    EXPECT_EQ(roce_rnr_timer_us(p.aeth.syndrome & ROCE_AETH_VALUE_MASK), 1280u);

    ASSERT_EQ(parse(vec(named("cmp_swap")), p), WireError::Ok);
    EXPECT_EQ(p.atomic.va, 0x2000u);
    EXPECT_EQ(p.atomic.rkey, 0x99u);
    EXPECT_EQ(p.atomic.swap_add, 0x1111u);
    EXPECT_EQ(p.atomic.compare, 0x2222u);

    ASSERT_EQ(parse(vec(named("fetch_add")), p), WireError::Ok);
    EXPECT_TRUE(p.bth.fecn && p.bth.becn);

    ASSERT_EQ(parse(vec(named("atomic_ack")), p), WireError::Ok);
    EXPECT_EQ(p.atomic_orig, 0x0123456789ABCDEFull);

    ASSERT_EQ(parse(vec(named("flush")), p), WireError::Ok);
    EXPECT_EQ(p.feth.placement, ROCE_FETH_PLT_GLOBAL | ROCE_FETH_PLT_PERSIST);
    EXPECT_EQ(p.feth.selectivity, ROCE_FETH_SEL_MR);
    EXPECT_EQ(p.reth.va, 0x3000u);

    ASSERT_EQ(parse(aw, p), WireError::Ok);
    EXPECT_EQ(p.payload_len, 8u);
    EXPECT_EQ(roce_get64(p.payload), 0xFEEDFACECAFEBEEFull);
}

// The ICRC covers everything from the IP header to the pad except the masked fields; the
// Ethernet header is not covered (the link's FCS is). One bit flipped anywhere else is caught.
TEST(RoceWire, EverySingleBitFlipOutsideTheMaskIsDetected)
{
    for (const char *name : {"send_only_pad3", "write_only_imm", "atomic_ack", "cx4lx_cnp"}) {
        SCOPED_TRACE(name);
        const Bytes good = vec(named(name));
        for (size_t i = 0; i < good.size(); i++) {
            for (int bit = 0; bit < 8; bit++) {
                Bytes f = good;
                f[i] ^= uint8_t(1u << bit);
                const size_t ip = i - kIp;
                const bool mac = i < 12;
                const bool masked =
                    i >= kIp &&
                    (ip == ROCE_ICRC_MASK_TOS || ip == ROCE_ICRC_MASK_TTL || ip == ROCE_ICRC_MASK_IPCSUM ||
                     ip == ROCE_ICRC_MASK_IPCSUM + 1 || ip == ROCE_ICRC_MASK_UDPCSUM ||
                     ip == ROCE_ICRC_MASK_UDPCSUM + 1 || ip == ROCE_ICRC_MASK_RESV8A);
                if (masked && ip != ROCE_ICRC_MASK_IPCSUM && ip != ROCE_ICRC_MASK_IPCSUM + 1) {
                    reseal(f); // IP checksum only: the ICRC must not change
                    EXPECT_EQ(icrc(f.data() + kIp, f.size() - kIp - 4),
                              icrc(good.data() + kIp, good.size() - kIp - 4))
                        << "byte " << i;
                }
                const WireError e = parse(f);
                if (mac || (masked && ip != ROCE_ICRC_MASK_IPCSUM && ip != ROCE_ICRC_MASK_IPCSUM + 1)) {
                    EXPECT_EQ(e, WireError::Ok) << "byte " << i << " bit " << bit;
                } else {
                    EXPECT_NE(e, WireError::Ok) << "byte " << i << " bit " << bit;
                }
            }
        }
    }
}

TEST(RoceWire, EveryTruncationIsAnErrorNeverARead)
{
    for (const auto &v : roce_vectors) {
        SCOPED_TRACE(v.name);
        for (size_t n = 0; n < v.len; n++) {
            // An exact-size heap copy: a read past it is a sanitizer error (tests/fuzz sanitizer runs).
            std::vector<uint8_t> f(v.frame, v.frame + n);
            Packet p;
            EXPECT_NE(parse_frame(n ? f.data() : nullptr, n, p), WireError::Ok) << n;
        }
    }
}

TEST(RoceWire, EthernetMinimumPaddingIsAcceptedOtherTrailingBytesAreNot)
{
    Packet p = base_packet(ROCE_OP_SEND_ONLY); // 58 bytes: the shortest RoCEv2 frame
    Bytes f(ROCE_FRAME_MAX);
    size_t n = 0;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    ASSERT_EQ(n, 58u);
    f.resize(60); // padded by the MAC to the minimum frame
    EXPECT_EQ(parse(f, p), WireError::Ok);
    EXPECT_EQ(p.payload_len, 0u);
    Bytes ack = vec(named("ack"));
    ack.push_back(0);
    EXPECT_EQ(parse(ack), WireError::IpTotalLen);
}

TEST(RoceWire, EachMalformedHeaderHasItsOwnError)
{
    const Bytes good = vec(named("write_only_imm"));
    auto with = [&](auto change) {
        Bytes f = good;
        change(f);
        reseal(f);
        return parse(f);
    };
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + 12, 0x86DD); }), WireError::EtherType);
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + 12, 0x8100); }), WireError::EtherType);
    EXPECT_EQ(with([](Bytes &f) { f[kIp] = 0x65; }), WireError::IpVersion);
    EXPECT_EQ(with([](Bytes &f) { f[kIp] = 0x46; }), WireError::IpHeaderLen);
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + kIp + 2, uint16_t(f.size() - kIp + 4)); }),
              WireError::IpTotalLen);
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + kIp + 2, 20); }), WireError::IpTotalLen);
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + kIp + 6, 0x2000); }), WireError::IpFragment);
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + kIp + 6, 0x4001); }), WireError::IpFragment);
    EXPECT_EQ(with([](Bytes &f) { f[kIp + 9] = 6; }), WireError::IpProtocol);
    {
        Bytes f = good;
        f[kIp + 11] ^= 1;
        EXPECT_EQ(parse(f), WireError::IpChecksum);
    }
    EXPECT_EQ(with([](Bytes &f) { roce_put16(f.data() + kUdp + 2, 4792); }), WireError::UdpPort);
    EXPECT_EQ(with([](Bytes &f) {
                  roce_put16(f.data() + kUdp + 4, uint16_t(roce_get16(f.data() + kUdp + 4) - 4));
              }),
              WireError::UdpLength);
    EXPECT_EQ(with([](Bytes &f) { f[kBth + 1] |= 1; }), WireError::BthVersion);
    EXPECT_EQ(with([](Bytes &f) { f[kBth] = 0x15; }), WireError::OpcodeUnknown); // reserved RC opcode
    EXPECT_EQ(with([](Bytes &f) { f[kBth] = ROCE_OP_SEND_ONLY_INV; }), WireError::OpcodeUnknown);
    EXPECT_EQ(with([](Bytes &f) { f[kBth] = 0x24; }), WireError::OpcodeUnknown); // UC SEND ONLY
    EXPECT_EQ(with([](Bytes &f) { f[kBth] = ROCE_OP_XATOMIC_REQ_FIRST; }), WireError::OpcodeReserved);
    EXPECT_EQ(with([](Bytes &f) { f[kBth] = 0xFF; }), WireError::OpcodeReserved);
    // An ACK's AETH but the body of a WRITE ONLY WITH IMMEDIATE: payload where none is allowed.
    EXPECT_EQ(with([](Bytes &f) { f[kBth] = ROCE_OP_ACK; }), WireError::PadCount);
    // A payload of 3 with a pad count of 0: not a multiple of 4.
    EXPECT_EQ(with([](Bytes &f) { f[kBth + 1] &= uint8_t(~ROCE_BTH_PAD_MASK); }), WireError::Ok)
        << "pad 0 makes the payload 4 bytes: a different but valid packet";
}

TEST(RoceWire, PayloadRulesOfEachOpcode)
{
    Bytes f(ROCE_FRAME_MAX + 64);
    size_t n = 0;
    std::vector<uint8_t> data(ROCE_MTU_MAX + 4, 0x5A);
    auto build = [&](uint8_t op, uint32_t len) {
        Packet p = base_packet(op);
        p.payload = data.data();
        p.payload_len = len;
        return build_frame(p, f.data(), f.size(), &n);
    };
    EXPECT_EQ(build(ROCE_OP_ACK, 4), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_READ_REQUEST, 1), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_CMP_SWAP, 8), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_ATOMIC_WRITE, 4), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_ATOMIC_WRITE, 8), WireError::Ok);
    EXPECT_EQ(build(ROCE_OP_SEND_MIDDLE, 300), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_SEND_MIDDLE, 128), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_SEND_MIDDLE, 512), WireError::Ok);
    EXPECT_EQ(build(ROCE_OP_SEND_ONLY, ROCE_MTU_MAX + 1), WireError::PayloadLength);
    EXPECT_EQ(build(ROCE_OP_SEND_ONLY, ROCE_MTU_MAX), WireError::Ok);
    EXPECT_EQ(n, frame_len(ROCE_OP_SEND_ONLY, ROCE_MTU_MAX));
    EXPECT_LE(n, size_t(ROCE_FRAME_MAX));

    // Received: a READ RESPONSE MIDDLE of 300 bytes (pad 0) is refused with PayloadLength.
    Packet p = base_packet(ROCE_OP_SEND_LAST);
    p.payload = data.data();
    p.payload_len = 300;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    Bytes g(f.begin(), f.begin() + long(n));
    g[kBth] = ROCE_OP_READ_RESP_MIDDLE;
    reseal(g);
    EXPECT_EQ(parse(g), WireError::PayloadLength);
    // A pad count larger than the payload area of an empty SEND ONLY.
    p = base_packet(ROCE_OP_SEND_ONLY);
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    g.assign(f.begin(), f.begin() + long(n));
    g[kBth + 1] |= 2 << ROCE_BTH_PAD_SHIFT;
    reseal(g);
    EXPECT_EQ(parse(g), WireError::PadCount);
}

TEST(RoceWire, BuildRefusesWhatTheWireCannotCarry)
{
    Bytes f(ROCE_FRAME_MAX);
    size_t n = 1;
    Packet p = base_packet(ROCE_OP_SEND_ONLY);
    p.bth.psn = 1u << 24;
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::BadField);
    EXPECT_EQ(n, 0u);
    p = base_packet(ROCE_OP_SEND_ONLY);
    p.bth.dqpn = 1u << 24;
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::BadField);
    p = base_packet(ROCE_OP_ACK);
    p.aeth.msn = 1u << 24;
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::BadField);
    p = base_packet(ROCE_OP_SEND_ONLY);
    p.payload_len = 4; // no payload pointer
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::BadField);
    p = base_packet(ROCE_OP_SEND_ONLY);
    EXPECT_EQ(build_frame(p, f.data(), 57, &n), WireError::BufferTooSmall);
    p = base_packet(0x15);
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::OpcodeUnknown);
    p = base_packet(0xC3);
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::OpcodeReserved);
}

TEST(RoceWire, PsnArithmeticWrapsAt24Bits)
{
    EXPECT_EQ(roce_psn_add(0xFFFFFF, 1), 0u);
    EXPECT_EQ(roce_psn_add(0xFFFFFE, 5), 3u);
    EXPECT_EQ(roce_psn_diff(0, 0xFFFFFF), 1);
    EXPECT_EQ(roce_psn_diff(0xFFFFFF, 0), -1);
    EXPECT_EQ(roce_psn_diff(5, 5), 0);
    EXPECT_EQ(roce_psn_diff(0x7FFFFF, 0), 0x7FFFFF);
    EXPECT_EQ(roce_psn_diff(0x800000, 0), -0x800000); // exactly half way: behind
    EXPECT_EQ(roce_timeout_ns(0), 0u);                // infinite
    EXPECT_EQ(roce_timeout_ns(1), 8192u);
    EXPECT_EQ(roce_timeout_ns(14), 4096ull << 14); // 67.1 ms
    EXPECT_EQ(roce_rnr_timer_us(0), 655360u);
    EXPECT_EQ(roce_rnr_timer_us(1), 10u);
    EXPECT_EQ(roce_rnr_timer_us(31), 491520u);
    EXPECT_EQ(roce_credit_count(0x1F), 0u);
    EXPECT_EQ(roce_credit_count(30), 32768u);
}

TEST(RoceWire, ErrorNamesAreDistinct)
{
    for (int i = 0; i <= int(WireError::BadField); i++) {
        for (int j = 0; j < i; j++)
            EXPECT_STRNE(wire_error_name(WireError(i)), wire_error_name(WireError(j)));
    }
}

// The extended atomics of the atomic unit (roce.h "Extended atomics"): the XAtomicETH bytes at
// their offsets (written out by hand from the layout), a round trip through parse_frame with the
// unit present, and OpcodeReserved for a receiver without it.
TEST(RoceWire, ExtendedAtomicRequestLayoutAndRoundTrip)
{
    Packet p = base_packet(ROCE_OP_XATOMIC);
    p.xatomic =
        XAtomicEth{0x1122334455667788ull, 0xA1B2C3D4u,           ROCE_XOP_MCSWAP,      ROCE_XATOMIC_SIZE64,
                   0x0102030405060708ull, 0xF0E0D0C0B0A09080ull, 0x00000000FFFF0000ull};
    Bytes f(256);
    size_t n = 0;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    EXPECT_EQ(n, size_t(14 + 20 + 8 + 12 + 40 + 4));
    EXPECT_EQ(frame_len(ROCE_OP_XATOMIC, 0), n);
    const uint8_t want[40] = {
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xA1, 0xB2, 0xC3, 0xD4, 5, 8, 0, 0, 1,    2,    3, 4,
        5,    6,    7,    8,    0xF0, 0xE0, 0xD0, 0xC0, 0xB0, 0xA0, 0x90, 0x80, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0};
    EXPECT_EQ(std::memcmp(f.data() + kBth + ROCE_BTH_LEN, want, sizeof want), 0);
    f.resize(n);
    Packet q;
    EXPECT_EQ(parse_frame(f.data(), f.size(), q), WireError::OpcodeReserved); // no atomic unit
    ASSERT_EQ(parse_frame(f.data(), f.size(), q, true, true), WireError::Ok);
    EXPECT_EQ(q.xatomic.va, p.xatomic.va);
    EXPECT_EQ(q.xatomic.rkey, p.xatomic.rkey);
    EXPECT_EQ(q.xatomic.op, ROCE_XOP_MCSWAP);
    EXPECT_EQ(q.xatomic.size, ROCE_XATOMIC_SIZE64);
    EXPECT_EQ(q.xatomic.operand, p.xatomic.operand);
    EXPECT_EQ(q.xatomic.compare, p.xatomic.compare);
    EXPECT_EQ(q.xatomic.mask, p.xatomic.mask);
    EXPECT_EQ(q.info & ROCE_HDR_REQUEST, ROCE_HDR_REQUEST);
    EXPECT_EQ(q.payload_len, 0u);

    // A truncated extension header (the frame shortened by 4 bytes, resealed) is Truncated.
    Bytes t(f.begin(), f.end() - 4);
    roce_put16(t.data() + kIp + 2, uint16_t(t.size() - kIp));
    roce_put16(t.data() + kUdp + 4, uint16_t(t.size() - kUdp));
    reseal(t);
    EXPECT_EQ(parse_frame(t.data(), t.size(), q, true, true), WireError::Truncated);
    // A corrupted operand byte fails the ICRC.
    f[kBth + ROCE_BTH_LEN + 20] ^= 1;
    EXPECT_EQ(parse_frame(f.data(), f.size(), q, true, true), WireError::Icrc);
}

TEST(RoceWire, ExtendedAtomicPostAckAndErrors)
{
    Packet p = base_packet(ROCE_OP_XATOMIC_POST);
    p.xatomic.op = ROCE_XOP_XOR;
    p.xatomic.size = ROCE_XATOMIC_SIZE32;
    p.xatomic.operand = 0xDEADBEEF;
    Bytes f(256);
    size_t n = 0;
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    f.resize(n);
    Packet q;
    ASSERT_EQ(parse_frame(f.data(), f.size(), q, true, true), WireError::Ok);
    EXPECT_EQ(q.xatomic.size, ROCE_XATOMIC_SIZE32);
    EXPECT_EQ(q.xatomic.operand, 0xDEADBEEFull);

    p = base_packet(ROCE_OP_XATOMIC_ACK);
    p.atomic_orig = 0x8877665544332211ull;
    p.aeth.msn = 7;
    f.assign(256, 0);
    ASSERT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::Ok);
    EXPECT_EQ(n, size_t(14 + 20 + 8 + 12 + 4 + 8 + 4));
    f.resize(n);
    ASSERT_EQ(parse_frame(f.data(), f.size(), q, true, true), WireError::Ok);
    EXPECT_EQ(q.atomic_orig, 0x8877665544332211ull);
    EXPECT_EQ(q.aeth.msn, 7u);
    EXPECT_EQ(q.info & ROCE_HDR_RESPONSE, ROCE_HDR_RESPONSE);

    f.assign(256, 0);
    p = base_packet(ROCE_OP_XATOMIC);
    p.xatomic.size = 3; // operand sizes are 4 and 8
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::BadField);
    p = base_packet(0xC2); // still reserved
    EXPECT_EQ(build_frame(p, f.data(), f.size(), &n), WireError::OpcodeReserved);
    EXPECT_EQ(roce_xatomic_info(0xC2), 0u);
    EXPECT_EQ(roce_opcode_info(ROCE_OP_XATOMIC), 0u); // the base table is unchanged
}
