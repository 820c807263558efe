// SPDX-License-Identifier: MIT
// RoCEv2 frame build/parse and the ICRC; see wire.h and rackemu/roce.h.
#include "wire.h"

#include <array>
#include <cstring>

namespace rackemu::rnic {

namespace {

// Slice-by-8 tables of the reflected CRC-32 polynomial 0xEDB88320 (0x04C11DB7 reversed).
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables make_tables()
{
    CrcTables t{};
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int s = 1; s < 8; s++)
            t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
    return t;
}
constexpr CrcTables kCrc = make_tables();

// The running CRC state (no initial or final complement).
uint32_t crc_update(uint32_t c, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        const uint32_t lo =
            c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
        const uint32_t hi =
            uint32_t(p[4]) | uint32_t(p[5]) << 8 | uint32_t(p[6]) << 16 | uint32_t(p[7]) << 24;
        c = kCrc[7][lo & 0xFF] ^ kCrc[6][(lo >> 8) & 0xFF] ^ kCrc[5][(lo >> 16) & 0xFF] ^ kCrc[4][lo >> 24] ^
            kCrc[3][hi & 0xFF] ^ kCrc[2][(hi >> 8) & 0xFF] ^ kCrc[1][(hi >> 16) & 0xFF] ^ kCrc[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ kCrc[0][(c ^ *p++) & 0xFF];
    return c;
}

constexpr size_t kIpOff = ROCE_ETH_LEN;
constexpr size_t kUdpOff = kIpOff + ROCE_IPV4_LEN;
constexpr size_t kBthOff = kUdpOff + ROCE_UDP_LEN;
constexpr size_t kExtOff = kBthOff + ROCE_BTH_LEN;
// The masked part of the ICRC: IPv4 + UDP + BTH.
constexpr size_t kMaskedLen = ROCE_IPV4_LEN + ROCE_UDP_LEN + ROCE_BTH_LEN;

static_assert(sizeof(roce_eth) == ROCE_ETH_LEN && sizeof(roce_ipv4) == ROCE_IPV4_LEN &&
                  sizeof(roce_udp) == ROCE_UDP_LEN && sizeof(roce_bth) == ROCE_BTH_LEN &&
                  sizeof(roce_reth) == ROCE_RETH_LEN && sizeof(roce_atomiceth) == ROCE_ATOMICETH_LEN &&
                  sizeof(roce_aeth) == ROCE_AETH_LEN && sizeof(roce_atomicacketh) == ROCE_ATOMICACKETH_LEN &&
                  sizeof(roce_immdt) == ROCE_IMMDT_LEN && sizeof(roce_feth) == ROCE_FETH_LEN,
              "roce.h headers are byte arrays of the spec's sizes");
static_assert(ROCE_ICRC_MASK_RESV8A == ROCE_IPV4_LEN + ROCE_UDP_LEN + 4, "resv8a is BTH byte 4");

// Payload rules of an opcode (roce_opcode_info): Ok or PayloadLength.
WireError check_payload(uint32_t info, uint32_t len)
{
    if (!(info & ROCE_HDR_PAYLOAD)) return len == 0 ? WireError::Ok : WireError::PayloadLength;
    if (len > ROCE_MTU_MAX) return WireError::PayloadLength;
    if ((info & ROCE_HDR_PAYLOAD8) && len != 8) return WireError::PayloadLength;
    // FIRST/MIDDLE carry exactly one path MTU: the parser does not know the path MTU, but it is
    // at least ROCE_MTU_MIN and a power of two (the responder checks the exact value).
    if ((info & ROCE_HDR_FULL) && (len < ROCE_MTU_MIN || (len & (len - 1)) != 0))
        return WireError::PayloadLength;
    return WireError::Ok;
}

} // namespace

const char *wire_error_name(WireError e)
{
    switch (e) {
    case WireError::Ok:
        return "ok";
    case WireError::Truncated:
        return "truncated";
    case WireError::EtherType:
        return "ethertype";
    case WireError::IpVersion:
        return "ip-version";
    case WireError::IpHeaderLen:
        return "ip-header-length";
    case WireError::IpTotalLen:
        return "ip-total-length";
    case WireError::IpFragment:
        return "ip-fragment";
    case WireError::IpProtocol:
        return "ip-protocol";
    case WireError::IpChecksum:
        return "ip-checksum";
    case WireError::UdpPort:
        return "udp-port";
    case WireError::UdpLength:
        return "udp-length";
    case WireError::BthVersion:
        return "bth-version";
    case WireError::OpcodeUnknown:
        return "opcode-unknown";
    case WireError::OpcodeReserved:
        return "opcode-reserved";
    case WireError::PadCount:
        return "pad-count";
    case WireError::PayloadLength:
        return "payload-length";
    case WireError::Icrc:
        return "icrc";
    case WireError::BufferTooSmall:
        return "buffer-too-small";
    case WireError::BadField:
        return "bad-field";
    }
    return "?";
}

uint32_t crc32(uint32_t crc, const void *data, size_t len)
{
    return ~crc_update(~crc, static_cast<const uint8_t *>(data), len);
}

uint16_t ip_checksum(const uint8_t *hdr, size_t len)
{
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += uint32_t(hdr[i]) << 8 | hdr[i + 1];
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return uint16_t(~sum);
}

uint32_t icrc(const uint8_t *ip, size_t len)
{
    static const uint8_t ones[ROCE_ICRC_SEED_LEN] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    uint8_t masked[kMaskedLen];
    const size_t m = len < kMaskedLen ? len : kMaskedLen;
    std::memcpy(masked, ip, m);
    if (m == kMaskedLen) {
        masked[ROCE_ICRC_MASK_TOS] = 0xFF;
        masked[ROCE_ICRC_MASK_TTL] = 0xFF;
        masked[ROCE_ICRC_MASK_IPCSUM] = masked[ROCE_ICRC_MASK_IPCSUM + 1] = 0xFF;
        masked[ROCE_ICRC_MASK_UDPCSUM] = masked[ROCE_ICRC_MASK_UDPCSUM + 1] = 0xFF;
        masked[ROCE_ICRC_MASK_RESV8A] = 0xFF;
    }
    uint32_t c = crc_update(0xFFFFFFFFu, ones, sizeof(ones));
    c = crc_update(c, masked, m);
    c = crc_update(c, ip + m, len - m);
    return ~c;
}

size_t frame_len(uint8_t opcode, uint32_t payload_len)
{
    const uint32_t info = roce_xatomic_info(opcode);
    return ROCE_HDRS_LEN + roce_xatomic_ext_len(info) + payload_len + ((4 - payload_len % 4) % 4) +
           ROCE_ICRC_LEN;
}

WireError build_frame(const Packet &p, uint8_t *out, size_t cap, size_t *len)
{
    *len = 0;
    const uint8_t op = p.bth.opcode;
    const uint32_t info = roce_xatomic_info(op);
    if (op >= ROCE_OP_MANUFACTURER_FIRST && !(info & ROCE_HDR_VALID)) return WireError::OpcodeReserved;
    if (!(info & ROCE_HDR_VALID)) return WireError::OpcodeUnknown;
    if (const WireError e = check_payload(info, p.payload_len); e != WireError::Ok) return e;
    if (p.payload_len && !p.payload) return WireError::BadField;
    if (p.bth.dqpn > ROCE_QPN_MASK || p.bth.psn > ROCE_PSN_MASK || p.aeth.msn > ROCE_MSN_MASK ||
        p.bth.tver > ROCE_BTH_TVER_MASK)
        return WireError::BadField;
    if ((info & ROCE_HDR_XATOMICETH) && p.xatomic.size != ROCE_XATOMIC_SIZE32 &&
        p.xatomic.size != ROCE_XATOMIC_SIZE64)
        return WireError::BadField;
    const size_t n = frame_len(op, p.payload_len);
    if (n > cap) return WireError::BufferTooSmall;
    const uint32_t pad = (4 - p.payload_len % 4) % 4;

    std::memset(out, 0, n);
    auto *eth = reinterpret_cast<roce_eth *>(out);
    std::memcpy(eth->dst, p.l3.dst_mac.data(), 6);
    std::memcpy(eth->src, p.l3.src_mac.data(), 6);
    roce_put16(eth->type, ROCE_ETHERTYPE_IPV4);

    auto *ip = reinterpret_cast<roce_ipv4 *>(out + kIpOff);
    const size_t ip_len = n - kIpOff;
    ip->ver_ihl = 0x45;
    ip->tos = p.l3.tos;
    roce_put16(ip->tot_len, uint16_t(ip_len));
    roce_put16(ip->id, p.l3.ip_id);
    roce_put16(ip->frag, ROCE_IP_FLAG_DF);
    ip->ttl = p.l3.ttl;
    ip->proto = ROCE_IP_PROTO_UDP;
    roce_put32(ip->src, p.l3.src_ip);
    roce_put32(ip->dst, p.l3.dst_ip);
    roce_put16(ip->csum, ip_checksum(out + kIpOff, ROCE_IPV4_LEN));

    auto *udp = reinterpret_cast<roce_udp *>(out + kUdpOff);
    roce_put16(udp->sport, p.l3.udp_sport);
    roce_put16(udp->dport, ROCE_UDP_DPORT);
    roce_put16(udp->len, uint16_t(ip_len - ROCE_IPV4_LEN));

    auto *bth = reinterpret_cast<roce_bth *>(out + kBthOff);
    bth->opcode = op;
    bth->flags = uint8_t((p.bth.se ? ROCE_BTH_SE : 0) | (p.bth.migreq ? ROCE_BTH_MIGREQ : 0) |
                         pad << ROCE_BTH_PAD_SHIFT | p.bth.tver);
    roce_put16(bth->pkey, p.bth.pkey);
    bth->resv8a = uint8_t((p.bth.fecn ? ROCE_BTH_FECN : 0) | (p.bth.becn ? ROCE_BTH_BECN : 0));
    roce_put24(bth->dqpn, p.bth.dqpn);
    bth->ackreq = p.bth.ackreq ? ROCE_BTH_ACKREQ : 0;
    roce_put24(bth->psn, p.bth.psn);

    uint8_t *q = out + kExtOff;
    if (info & ROCE_HDR_FETH) {
        auto *f = reinterpret_cast<roce_feth *>(q);
        roce_put32(f->bits, uint32_t(p.feth.placement & ROCE_FETH_PLT_MASK) |
                                (uint32_t(p.feth.selectivity << ROCE_FETH_SEL_SHIFT) & ROCE_FETH_SEL_MASK));
        q += ROCE_FETH_LEN;
    }
    if (info & ROCE_HDR_RETH) {
        auto *r = reinterpret_cast<roce_reth *>(q);
        roce_put64(r->va, p.reth.va);
        roce_put32(r->rkey, p.reth.rkey);
        roce_put32(r->dma_len, p.reth.dma_len);
        q += ROCE_RETH_LEN;
    }
    if (info & ROCE_HDR_ATOMICETH) {
        auto *a = reinterpret_cast<roce_atomiceth *>(q);
        roce_put64(a->va, p.atomic.va);
        roce_put32(a->rkey, p.atomic.rkey);
        roce_put64(a->swap_add, p.atomic.swap_add);
        roce_put64(a->compare, p.atomic.compare);
        q += ROCE_ATOMICETH_LEN;
    }
    if (info & ROCE_HDR_XATOMICETH) {
        auto *x = reinterpret_cast<roce_xatomiceth *>(q);
        roce_put64(x->va, p.xatomic.va);
        roce_put32(x->rkey, p.xatomic.rkey);
        x->op = p.xatomic.op;
        x->size = p.xatomic.size;
        roce_put64(x->operand, p.xatomic.operand);
        roce_put64(x->compare, p.xatomic.compare);
        roce_put64(x->mask, p.xatomic.mask);
        q += ROCE_XATOMICETH_LEN;
    }
    if (info & ROCE_HDR_AETH) {
        auto *a = reinterpret_cast<roce_aeth *>(q);
        a->syndrome = p.aeth.syndrome;
        roce_put24(a->msn, p.aeth.msn);
        q += ROCE_AETH_LEN;
    }
    if (info & ROCE_HDR_ATOMICACKETH) {
        roce_put64(reinterpret_cast<roce_atomicacketh *>(q)->orig, p.atomic_orig);
        q += ROCE_ATOMICACKETH_LEN;
    }
    if (info & ROCE_HDR_IMMDT) {
        roce_put32(reinterpret_cast<roce_immdt *>(q)->imm, p.imm);
        q += ROCE_IMMDT_LEN;
    }
    if (info & ROCE_HDR_CNP) q += ROCE_CNP_RESV_LEN; // reserved, zero
    if (p.payload_len) std::memcpy(q, p.payload, p.payload_len);
    q += p.payload_len + pad; // pad bytes are zero (memset)

    const uint32_t c = icrc(out + kIpOff, size_t(q - (out + kIpOff)));
    q[0] = uint8_t(c);
    q[1] = uint8_t(c >> 8);
    q[2] = uint8_t(c >> 16);
    q[3] = uint8_t(c >> 24);
    *len = n;
    return WireError::Ok;
}

WireError parse_frame(const uint8_t *frame, size_t len, Packet &p, bool check_icrc, bool xatomic)
{
    p = Packet{};
    if (len < ROCE_HDRS_LEN + ROCE_ICRC_LEN) return WireError::Truncated;
    const auto *eth = reinterpret_cast<const roce_eth *>(frame);
    if (roce_get16(eth->type) != ROCE_ETHERTYPE_IPV4) return WireError::EtherType;
    std::memcpy(p.l3.dst_mac.data(), eth->dst, 6);
    std::memcpy(p.l3.src_mac.data(), eth->src, 6);

    const auto *ip = reinterpret_cast<const roce_ipv4 *>(frame + kIpOff);
    if ((ip->ver_ihl >> 4) != 4) return WireError::IpVersion;
    if ((ip->ver_ihl & 0xF) != 5) return WireError::IpHeaderLen;
    const size_t ip_len = roce_get16(ip->tot_len);
    // The frame holds the IP datagram, plus at most Ethernet's padding up to its minimum size.
    if (ip_len < ROCE_IPV4_LEN + ROCE_UDP_LEN + ROCE_BTH_LEN + ROCE_ICRC_LEN || kIpOff + ip_len > len ||
        (kIpOff + ip_len < len && len > ROCE_ETH_MIN_FRAME))
        return WireError::IpTotalLen;
    if (roce_get16(ip->frag) & ROCE_IP_FRAG_MASK) return WireError::IpFragment;
    if (ip->proto != ROCE_IP_PROTO_UDP) return WireError::IpProtocol;
    if (ip_checksum(frame + kIpOff, ROCE_IPV4_LEN) != 0) return WireError::IpChecksum;
    p.l3.tos = ip->tos;
    p.l3.ttl = ip->ttl;
    p.l3.ip_id = roce_get16(ip->id);
    p.l3.src_ip = roce_get32(ip->src);
    p.l3.dst_ip = roce_get32(ip->dst);

    const auto *udp = reinterpret_cast<const roce_udp *>(frame + kUdpOff);
    if (roce_get16(udp->dport) != ROCE_UDP_DPORT) return WireError::UdpPort;
    if (roce_get16(udp->len) != ip_len - ROCE_IPV4_LEN) return WireError::UdpLength;
    p.l3.udp_sport = roce_get16(udp->sport);

    const auto *bth = reinterpret_cast<const roce_bth *>(frame + kBthOff);
    p.bth.opcode = bth->opcode;
    p.bth.se = bth->flags & ROCE_BTH_SE;
    p.bth.migreq = bth->flags & ROCE_BTH_MIGREQ;
    p.bth.pad = uint8_t(roce_bth_pad(bth));
    p.bth.tver = bth->flags & ROCE_BTH_TVER_MASK;
    p.bth.pkey = roce_get16(bth->pkey);
    p.bth.fecn = bth->resv8a & ROCE_BTH_FECN;
    p.bth.becn = bth->resv8a & ROCE_BTH_BECN;
    p.bth.dqpn = roce_bth_dqpn(bth);
    p.bth.ackreq = bth->ackreq & ROCE_BTH_ACKREQ;
    p.bth.psn = roce_bth_psn(bth);
    if (p.bth.tver != ROCE_TVER) return WireError::BthVersion;
    const uint32_t info = xatomic ? roce_xatomic_info(p.bth.opcode) : roce_opcode_info(p.bth.opcode);
    if (!(info & ROCE_HDR_VALID))
        return p.bth.opcode >= ROCE_OP_MANUFACTURER_FIRST ? WireError::OpcodeReserved
                                                          : WireError::OpcodeUnknown;
    p.info = info;

    // Transport bytes after the BTH and before the ICRC: extension headers, payload, pad.
    const size_t after_bth = ip_len - ROCE_IPV4_LEN - ROCE_UDP_LEN - ROCE_BTH_LEN - ROCE_ICRC_LEN;
    const size_t ext = roce_xatomic_ext_len(info);
    if (after_bth < ext) return WireError::Truncated;
    const size_t body = after_bth - ext; // payload + pad
    if (body % 4 != 0) return WireError::PayloadLength;
    if (p.bth.pad > body || (p.bth.pad && !(info & ROCE_HDR_PAYLOAD))) return WireError::PadCount;
    const size_t payload_len = body - p.bth.pad;
    if (payload_len > ROCE_MTU_MAX) return WireError::PayloadLength;
    if (const WireError e = check_payload(info, uint32_t(payload_len)); e != WireError::Ok) return e;

    const uint8_t *q = frame + kExtOff;
    if (info & ROCE_HDR_FETH) {
        const uint32_t w = roce_get32(reinterpret_cast<const roce_feth *>(q)->bits);
        p.feth.placement = uint8_t(w & ROCE_FETH_PLT_MASK);
        p.feth.selectivity = uint8_t((w & ROCE_FETH_SEL_MASK) >> ROCE_FETH_SEL_SHIFT);
        q += ROCE_FETH_LEN;
    }
    if (info & ROCE_HDR_RETH) {
        const auto *r = reinterpret_cast<const roce_reth *>(q);
        p.reth.va = roce_get64(r->va);
        p.reth.rkey = roce_get32(r->rkey);
        p.reth.dma_len = roce_get32(r->dma_len);
        q += ROCE_RETH_LEN;
    }
    if (info & ROCE_HDR_ATOMICETH) {
        const auto *a = reinterpret_cast<const roce_atomiceth *>(q);
        p.atomic.va = roce_get64(a->va);
        p.atomic.rkey = roce_get32(a->rkey);
        p.atomic.swap_add = roce_get64(a->swap_add);
        p.atomic.compare = roce_get64(a->compare);
        q += ROCE_ATOMICETH_LEN;
    }
    if (info & ROCE_HDR_XATOMICETH) {
        const auto *x = reinterpret_cast<const roce_xatomiceth *>(q);
        p.xatomic.va = roce_get64(x->va);
        p.xatomic.rkey = roce_get32(x->rkey);
        p.xatomic.op = x->op; // op and size are the responder's to validate (an error completion)
        p.xatomic.size = x->size;
        p.xatomic.operand = roce_get64(x->operand);
        p.xatomic.compare = roce_get64(x->compare);
        p.xatomic.mask = roce_get64(x->mask);
        q += ROCE_XATOMICETH_LEN;
    }
    if (info & ROCE_HDR_AETH) {
        const auto *a = reinterpret_cast<const roce_aeth *>(q);
        p.aeth.syndrome = a->syndrome;
        p.aeth.msn = roce_get24(a->msn);
        q += ROCE_AETH_LEN;
    }
    if (info & ROCE_HDR_ATOMICACKETH) {
        p.atomic_orig = roce_get64(reinterpret_cast<const roce_atomicacketh *>(q)->orig);
        q += ROCE_ATOMICACKETH_LEN;
    }
    if (info & ROCE_HDR_IMMDT) {
        p.imm = roce_get32(reinterpret_cast<const roce_immdt *>(q)->imm);
        q += ROCE_IMMDT_LEN;
    }
    if (info & ROCE_HDR_CNP) q += ROCE_CNP_RESV_LEN;
    p.payload = payload_len ? q : nullptr;
    p.payload_len = uint32_t(payload_len);

    if (check_icrc) {
        const uint8_t *ic = frame + kIpOff + ip_len - ROCE_ICRC_LEN;
        const uint32_t want =
            uint32_t(ic[0]) | uint32_t(ic[1]) << 8 | uint32_t(ic[2]) << 16 | uint32_t(ic[3]) << 24;
        if (icrc(frame + kIpOff, ip_len - ROCE_ICRC_LEN) != want) return WireError::Icrc;
    }
    return WireError::Ok;
}

} // namespace rackemu::rnic
