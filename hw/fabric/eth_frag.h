// SPDX-License-Identifier: MIT
//
// Ethernet frames on the fabric rings (RKF_SVC_ETH, fabric_proto.h; docs/fabric.md, "Service 5:
// Ethernet"): a frame longer than one slot travels as consecutive fragments. This header holds
// the two halves both the node's port and the bridge use: the producer, which writes all of a
// frame's fragments and publishes them with one index store (so a consumer never sees a partial
// frame from a well-behaved producer), and the consumer's reassembler, which treats the producer
// as untrusted and drops anything that is not the next fragment it expects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shm_ring.h"

namespace rackemu::fabric {

// Free slots of a ring, as its producer sees them.
inline uint32_t ring_room(const Ring &r)
{
    const uint32_t used =
        r.ctl.head.load(std::memory_order_relaxed) - r.ctl.tail.load(std::memory_order_acquire);
    return used >= RKF_RING_SLOTS ? 0 : RKF_RING_SLOTS - used;
}

// Write fragment `i` of `frame` (`len` bytes) into `slot`: header `tmpl` with len, tag filled in.
inline void eth_frag_write(unsigned char *slot, const rkf_frame_hdr &tmpl, const unsigned char *frame,
                           uint16_t len, uint32_t seq, unsigned i)
{
    const uint32_t off = i * RKF_ETH_FRAG_DATA;
    const uint32_t n = len - off < RKF_ETH_FRAG_DATA ? len - off : RKF_ETH_FRAG_DATA;
    rkf_frame_hdr h = tmpl;
    h.type = RKF_T_MSG;
    h.svc = RKF_SVC_ETH;
    h.op = RKF_OP_ETH_FRAG;
    h.len = uint16_t(sizeof(rkf_eth_frag) + n);
    h.tag = seq;
    const rkf_eth_frag f{len, uint16_t(off), seq};
    std::memcpy(slot, &h, sizeof h);
    std::memcpy(slot + sizeof h, &f, sizeof f);
    std::memcpy(slot + sizeof h + sizeof f, frame + off, n);
}

// Producer side: push all fragments of one frame (RKF_ETH_MIN_FRAME..RKF_ETH_MAX_FRAME bytes,
// checked by the caller), publishing them at once. False (nothing written) if the ring lacks
// room for all of them.
inline bool ring_push_eth(Ring &r, const rkf_frame_hdr &tmpl, const unsigned char *frame, uint16_t len,
                          uint32_t seq)
{
    const unsigned n = RKF_ETH_FRAGS(len);
    if (ring_room(r) < n) return false;
    const uint32_t head = r.ctl.head.load(std::memory_order_relaxed);
    for (unsigned i = 0; i < n; i++) {
        eth_frag_write(r.slots[(head + i) % RKF_RING_SLOTS], tmpl, frame, len, seq, i);
    }
    r.ctl.head.store(head + n, std::memory_order_release);
    return true;
}

// Consumer side: feed every RKF_SVC_ETH frame popped from one ring, in ring order, and tell the
// reassembler about every other frame popped from the same ring (interrupt()): a frame between
// two fragments breaks the frame being assembled.
class EthReassembler {
public:
    enum class Result {
        Partial,  // fragment accepted, frame not complete yet
        Complete, // frame() / size() hold a whole frame until the next feed()
        Bad,      // this fragment (and the partial frame before it, if any) was dropped: why()
    };

    Result feed(const rkf_frame_hdr &h, const unsigned char *payload)
    {
        why_ = nullptr;
        if (h.op != RKF_OP_ETH_FRAG || h.type != RKF_T_MSG)
            return bad("not an Ethernet fragment (type or op)");
        if (h.len < sizeof(rkf_eth_frag) + 1 || h.len > RKF_MAX_PAYLOAD)
            return bad("fragment length out of range");
        rkf_eth_frag f;
        std::memcpy(&f, payload, sizeof f);
        const uint32_t n = h.len - uint32_t(sizeof f);
        if (f.frame_len < RKF_ETH_MIN_FRAME || f.frame_len > RKF_ETH_MAX_FRAME)
            return bad("frame length out of range");
        if (f.offset % RKF_ETH_FRAG_DATA != 0 || uint32_t(f.offset) + n > f.frame_len) {
            return bad("fragment offset or length inconsistent with the frame length");
        }
        const uint32_t rest = uint32_t(f.frame_len) - f.offset;
        const uint32_t want = rest < RKF_ETH_FRAG_DATA ? rest : RKF_ETH_FRAG_DATA;
        if (n != want) return bad("fragment shorter than its place in the frame requires");
        if (f.offset == 0) {
            const bool broke = have_ > 0;
            start(f);
            if (broke) {
                // The new frame starts cleanly; the one before it is lost.
                std::memcpy(buf_, payload + sizeof f, n);
                have_ = n;
                why_ = "a frame started before the previous one was complete";
                lost_++;
                return have_ == len_ ? complete() : Result::Partial;
            }
        } else if (have_ == 0 || f.frame_seq != seq_ || f.frame_len != len_ || f.offset != have_) {
            return bad("fragment out of sequence");
        }
        std::memcpy(buf_ + f.offset, payload + sizeof f, n);
        have_ += n;
        return have_ == len_ ? complete() : Result::Partial;
    }
    // Another kind of frame came from the same ring: a frame being assembled is lost.
    bool interrupt()
    {
        if (have_ == 0) return false;
        have_ = 0;
        lost_++;
        why_ = "a frame of another service came between two fragments";
        return true;
    }
    void reset() { have_ = 0; }
    const unsigned char *frame() const { return buf_; }
    uint16_t size() const { return len_; }
    uint32_t seq() const { return seq_; }
    const char *why() const { return why_; }
    // Partial frames dropped so far (a Bad result, an interrupt, a restart mid-frame).
    uint64_t lost() const { return lost_; }

private:
    void start(const rkf_eth_frag &f)
    {
        seq_ = f.frame_seq;
        len_ = f.frame_len;
        have_ = 0;
    }
    Result complete()
    {
        have_ = 0;
        return Result::Complete;
    }
    Result bad(const char *why)
    {
        have_ = 0;
        why_ = why;
        lost_++;
        return Result::Bad;
    }

    unsigned char buf_[RKF_ETH_MAX_FRAME];
    uint32_t have_ = 0, seq_ = 0;
    uint16_t len_ = 0;
    const char *why_ = nullptr;
    uint64_t lost_ = 0;
};

// What a frame carries, as far as the fabric cares (routing to the RNIC, fault rule matching).
// One 802.1Q tag is looked through. Truncated headers make a frame Other.
enum class EthKind { Arp, Ipv4, Ipv6, RoceV2, Other };

inline EthKind eth_kind(const unsigned char *f, size_t len)
{
    if (len < RKF_ETH_HDR_LEN) return EthKind::Other;
    size_t off = 12;
    uint16_t type = uint16_t(f[off] << 8 | f[off + 1]);
    if (type == 0x8100u && len >= 18) {
        off += 4;
        type = uint16_t(f[off] << 8 | f[off + 1]);
    }
    off += 2; // start of the L3 header
    if (type == RKF_ETHERTYPE_ARP) return EthKind::Arp;
    if (type == RKF_ETHERTYPE_IPV4) {
        if (len < off + 20) return EthKind::Ipv4;
        const size_t ihl = size_t(f[off] & 0x0f) * 4;
        const bool first_fragment = ((f[off + 6] & 0x1f) | f[off + 7]) == 0;
        if (f[off + 9] != 17 || ihl < 20 || !first_fragment || len < off + ihl + 8) return EthKind::Ipv4;
        const size_t udp = off + ihl;
        return uint16_t(f[udp + 2] << 8 | f[udp + 3]) == RKF_ROCEV2_UDP_PORT ? EthKind::RoceV2
                                                                             : EthKind::Ipv4;
    }
    if (type == RKF_ETHERTYPE_IPV6) {
        if (len < off + 40 + 8 || f[off + 6] != 17) return EthKind::Ipv6;
        const size_t udp = off + 40;
        return uint16_t(f[udp + 2] << 8 | f[udp + 3]) == RKF_ROCEV2_UDP_PORT ? EthKind::RoceV2
                                                                             : EthKind::Ipv6;
    }
    return EthKind::Other;
}

inline bool eth_is_rocev2(const unsigned char *f, size_t len)
{
    return eth_kind(f, len) == EthKind::RoceV2;
}

// Whether a frame that node `node`'s port sent carries that node's own addresses (docs/fabric.md,
// "Source addresses"): the source MAC always; an IPv4 packet's source address; an ARP packet's
// sender hardware and protocol addresses (0.0.0.0 for an address probe). One 802.1Q tag is
// looked through. IPv6 source addresses are not checked (the RNIC takes RoCEv2 over IPv4 only).
enum class EthSource { Ok, Mac, Ipv4, Arp };

inline EthSource eth_source_check(unsigned node, const unsigned char *f, size_t len)
{
    uint8_t mac[6];
    rkf_eth_node_mac(node, mac);
    if (len < RKF_ETH_HDR_LEN || std::memcmp(f + 6, mac, 6) != 0) return EthSource::Mac;
    size_t off = 12;
    uint16_t type = uint16_t(f[off] << 8 | f[off + 1]);
    if (type == 0x8100u && len >= 18) {
        off += 4;
        type = uint16_t(f[off] << 8 | f[off + 1]);
    }
    off += 2;
    const uint32_t ip = rkf_eth_node_ipv4(node);
    auto be32 = [&](size_t at) {
        return uint32_t(f[at]) << 24 | uint32_t(f[at + 1]) << 16 | uint32_t(f[at + 2]) << 8 | f[at + 3];
    };
    if (type == RKF_ETHERTYPE_IPV4)
        return len >= off + 20 && be32(off + 12) == ip ? EthSource::Ok : EthSource::Ipv4;
    if (type == RKF_ETHERTYPE_ARP) {
        if (len < off + 28) return EthSource::Arp;
        const uint32_t spa = be32(off + 14);
        return std::memcmp(f + off + 8, mac, 6) == 0 && (spa == ip || spa == 0) ? EthSource::Ok
                                                                                : EthSource::Arp;
    }
    return EthSource::Ok;
}

// Broadcast and multicast destinations have the group bit (bit 0 of the first byte) set.
inline bool eth_is_group(const unsigned char *f)
{
    return (f[0] & 1u) != 0;
}

} // namespace rackemu::fabric
