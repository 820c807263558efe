// SPDX-License-Identifier: MIT
//
// RoCEv2 frames for the rackemu RNIC: build and parse Ethernet II / IPv4 / UDP 4791 / BTH /
// extension headers / payload / pad / ICRC, with the layouts of rackemu/roce.h (the one source of
// truth for the wire; docs/rnic.md "The wire"). QEMU-independent and allocation-free: build_frame
// writes into the caller's buffer, parse_frame points into the caller's frame.
//
// Parsing is strict: every length and field is checked against the frame's real length before it
// is read, and the first violation found is returned as a WireError (never a read out of bounds,
// never a partial result the caller could mistake for a packet). The order of the checks is
// fixed (Ethernet, IPv4, UDP, BTH, opcode, lengths, ICRC), so a frame has one defined error.
//
// Caveat: IPv4 only (RoCEv2 over IPv6 and VLAN-tagged frames parse as WireError::EtherType), no
// IP options, no fragments. The UDP checksum is sent as 0 and not checked on receipt (Annex A17
// allows it for IPv4; the ICRC covers the payload). SEND WITH INVALIDATE (0x16/0x17) and the
// manufacturer-specific opcodes parse as unsupported/reserved (the extended atomics only on request).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rackemu/roce.h"
#include "state.h"

namespace rackemu::rnic {

// The outcome of build_frame and parse_frame; wire_error_name() gives the name.
enum class WireError : uint8_t {
    Ok,
    Truncated,      // shorter than the headers its own fields announce
    EtherType,      // not IPv4 (IPv6, VLAN tag, ARP, ...)
    IpVersion,      // IPv4 version field is not 4
    IpHeaderLen,    // IHL is not 5 (IP options)
    IpTotalLen,     // total length disagrees with the frame (beyond Ethernet's minimum-size padding)
    IpFragment,     // MF set or a fragment offset
    IpProtocol,     // not UDP
    IpChecksum,     // header checksum wrong
    UdpPort,        // destination port is not 4791
    UdpLength,      // UDP length disagrees with the IP total length
    BthVersion,     // TVer is not 0
    OpcodeUnknown,  // an opcode this RNIC does not implement (reserved, UC/RD/UD/XRC, WITH INVALIDATE)
    OpcodeReserved, // the manufacturer-specific range (0xC0..0xFF: rackemu's extended atomics)
    PadCount,       // pad count larger than the payload area, or pad on a packet without payload
    PayloadLength,  // payload not allowed, not of the required size, or larger than ROCE_MTU_MAX
    Icrc,           // ICRC mismatch (corrupted in flight)
    BufferTooSmall, // build: the output buffer cannot hold the frame
    BadField,       // build: a field out of range (24-bit QPN/PSN/MSN, pad count)
};
const char *wire_error_name(WireError e);

// Addresses and the header fields the engine does not choose per packet.
#define RNIC_L3ADDR_STATE(X) \
    X(Bytes<6>, dst_mac, {}) \
    X(Bytes<6>, src_mac, {}) \
    X(uint32_t, src_ip, 0) /* host order (198.18.0.1 = 0xC6120001) */ \
    X(uint32_t, dst_ip, 0) \
    X(uint16_t, udp_sport, ROCE_UDP_SPORT_MIN) \
    X(uint16_t, ip_id, 0) \
    X(uint8_t, tos, 0) /* DSCP/ECN */ \
    X(uint8_t, ttl, ROCE_IP_TTL_DEFAULT)
struct L3Addr {
    RK_STATE_FIELDS_INIT(RNIC_L3ADDR_STATE)
};

struct Bth {
    uint8_t opcode = 0;
    bool se = false, migreq = false;
    uint8_t pad = 0; // parse: from the frame; build: computed from the payload length
    uint8_t tver = ROCE_TVER;
    uint16_t pkey = ROCE_PKEY_DEFAULT;
    bool fecn = false, becn = false;
    uint32_t dqpn = 0; // 24 bits
    bool ackreq = false;
    uint32_t psn = 0; // 24 bits
};
struct Reth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
};
struct AtomicEth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0, compare = 0;
};
// XAtomicETH of the extended atomics (roce.h "Extended atomics", ROCE_OP_XATOMIC/_POST).
struct XAtomicEth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint8_t op = ROCE_XOP_ADD;          // ROCE_XOP_*
    uint8_t size = ROCE_XATOMIC_SIZE64; // 4 or 8
    uint64_t operand = 0, compare = 0, mask = 0;
};
struct Aeth {
    uint8_t syndrome = ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID);
    uint32_t msn = 0; // 24 bits
};
struct Feth {
    uint8_t placement = ROCE_FETH_PLT_GLOBAL; // ROCE_FETH_PLT_* bits
    uint8_t selectivity = ROCE_FETH_SEL_RANGE;
};

// One RoCEv2 packet. Which extension headers are meaningful is given by the opcode
// (roce_opcode_info(bth.opcode)): build_frame writes exactly those, parse_frame fills exactly
// those (the others keep their default values).
struct Packet {
    L3Addr l3;
    Bth bth;
    Feth feth;
    Reth reth;
    AtomicEth atomic;
    XAtomicEth xatomic; // ROCE_OP_XATOMIC/_POST (parse only with xatomic = true)
    Aeth aeth;
    uint64_t atomic_orig = 0; // AtomicAckETH
    uint32_t imm = 0;         // ImmDt, as the 32-bit big-endian value on the wire
    const uint8_t *payload = nullptr;
    uint32_t payload_len = 0;
    uint32_t info = 0; // parse: roce_opcode_info(bth.opcode)
};

// CRC-32 (IEEE 802.3, reflected, as zlib.crc32): crc32(0, p, n) is the CRC of p[0..n); feed the
// previous result to continue.
uint32_t crc32(uint32_t crc, const void *data, size_t len);
// RFC 791 header checksum over `len` bytes (even).
uint16_t ip_checksum(const uint8_t *hdr, size_t len);
// The ICRC of a frame whose IPv4 header starts at `ip` and whose ICRC field starts at
// ip + len (len = IP total length - 4): CRC-32 over 8 bytes of 0xFF and the masked headers,
// extension headers, payload and pad (roce.h "ICRC masking").
uint32_t icrc(const uint8_t *ip, size_t len);
// The frame length build_frame produces for a packet with this opcode and payload length.
size_t frame_len(uint8_t opcode, uint32_t payload_len);

// build_frame and frame_len also accept the extended atomic opcodes (ROCE_OP_XATOMIC,
// ROCE_OP_XATOMIC_POST, ROCE_OP_XATOMIC_ACK): an RNIC hosting the atomic unit sends them; the
// other reserved opcodes are OpcodeReserved.
// Write `p` as a frame into out[0..cap): pad count, IP total length and checksum, UDP length and
// the ICRC are computed here (p.bth.pad is ignored). *len gets the frame length.
WireError build_frame(const Packet &p, uint8_t *out, size_t cap, size_t *len);
// Parse and validate frame[0..len). On Ok, `p` describes the packet and p.payload points into
// `frame`. check_icrc = false skips only the ICRC comparison (a capture tool that wants to show a
// corrupted frame's fields). xatomic = true: the receiver hosts the atomic unit, the extended
// atomic opcodes parse (else they are OpcodeReserved, as every manufacturer-specific opcode).
WireError parse_frame(const uint8_t *frame, size_t len, Packet &p, bool check_icrc = true,
                      bool xatomic = false);

} // namespace rackemu::rnic
