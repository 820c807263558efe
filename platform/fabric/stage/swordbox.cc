// SPDX-License-Identifier: MIT
//
// `swordbox`: the on-path serializer (swordbox.h, docs/swordbox.md). Frames it acts on: RoCEv2
// requests to the memory server (`server` node) and the server's responses to them; every other
// frame passes untouched.
//
// Connections. A client connection is {client IP, server IP, UDP source port, server QPN} (a
// request carries no source QPN). The client's QPN is learned from the server's response to the
// connection's latest request (matched by client IP and PSN) at a moment the connection has
// nothing outstanding: the connection is then *engaged*, and its MSN is taken from that response.
// Until then its frames pass end to end (its lock words are not trusted in the cache).
//
// Out-QPs. Each engaged connection's requests go to an out-QP: with mux=on every connection is
// mapped onto the one server QP `mux-qpn` whose peer is the *carrier* connection (client side on
// node `carrier`; its addresses are presented as the source of every mapped request); with
// mux=off each connection is its own out-QP (PSNs unchanged). An out-QP stamps each new request
// with its next PSN and keeps a ring of map entries indexed by out-PSN mod `ring`; responses are
// mapped back through the ring, one response per client request.
//
// Pipeline (stage: objects):
//   0  tables conns (request key -> slot, learned), rsp (server, client IP, client QPN -> slot,
//      filled by the learn digest), learn (server, client IP, PSN -> slot, digest)
//   1  array conn       per connection: state, client QPN/MAC, next PSN, steering key
//   2  array outq       per out-QP: next PSN, oldest unacknowledged PSN, carrier addresses, owner
//   3  array rdhash     read steering: murmur3(address) -> (address, key)
//   4  table keys       key -> tail slot (capacity hot-keys)
//   5  array tail       per key slot: the chain's tail; array lockgen: cache generation
//   6  array locks      per lock word: cached value, generation, version
//   7  array back       per connection x ring: client PSN -> out PSN (retransmissions)
//   8  array ring       per out-QP x ring: map entries
//   9  array msn        per connection: MSN, NAK fan-out serial
// Requests take one pass. A response takes one pass per ring entry it answers (a coalesced ACK
// covering k requests: k passes, the recirculations a Tofino would need) plus one when its
// answer fills the lock cache (stage 6 sits before the ring).
#include "swordbox.h"

#include <sstream>
#include <stdexcept>

#include "rackemu/fabric_proto.h"

namespace rackemu::fabric::sw {

namespace {

uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = uint8_t(v >> (8 * i));
}
// The murmur3 64-bit finalizer (fmix64).
uint64_t murmur_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb93e34873b53ull;
    k ^= k >> 33;
    return k;
}

struct ReqKey {
    uint32_t client, server, dqpn;
    uint16_t sport;
    bool operator==(const ReqKey &) const = default;
};
struct RspKey {
    uint32_t server, client, qpn;
    bool operator==(const RspKey &) const = default;
};
struct LearnKey {
    uint32_t server, client, psn;
    bool operator==(const LearnKey &) const = default;
};
struct KeyHash {
    size_t operator()(const ReqKey &k) const
    {
        return std::hash<uint64_t>{}((uint64_t(k.client) << 32 | k.server) ^
                                     (uint64_t(k.dqpn) << 16 | k.sport) * 31);
    }
    size_t operator()(const RspKey &k) const
    {
        return std::hash<uint64_t>{}((uint64_t(k.server) << 32 | k.client) ^
                                     uint64_t(k.qpn) * 0x9E3779B97F4A7C15ull);
    }
    size_t operator()(const LearnKey &k) const
    {
        return std::hash<uint64_t>{}((uint64_t(k.server) << 32 | k.client) ^
                                     uint64_t(k.psn) * 0x9E3779B97F4A7C15ull);
    }
};

enum ConnState : uint8_t { kNew = 0, kLearning = 1, kEngaged = 2 };

struct ConnCell {
    uint8_t state = kNew;
    bool carrier = false;
    bool key_valid = false;
    uint8_t mac[6] = {};
    uint32_t ip = 0, qpn = 0;
    uint16_t sport = 0;
    uint32_t next_psn = 0; // engaged: the next new request's PSN; learning: last request's end + 1
    uint64_t last_key = 0, last_va = 0; // steering: the key and address of the latest WRITE
};
struct OutQCell {
    bool valid = false;
    uint32_t next = 0, una = 0; // next out PSN, oldest unacknowledged
    uint32_t ip = 0, dqpn = 0;
    uint16_t sport = 0;
    uint8_t mac[6] = {};
    uint32_t owner = 0; // slot + 1 of a connection in the middle of a multi-packet request
};
struct RdCell {
    bool valid = false;
    uint64_t va = 0, key = 0;
};
struct TailCell {
    bool valid = false;
    uint64_t va = 0;
};
struct LockCell {
    bool valid = false;
    uint32_t gen = 0, ver = 0;
    uint64_t value = 0;
};
struct BackCell {
    bool valid = false;
    uint32_t cpsn = 0, out = 0;
};
struct MapEntry {
    bool valid = false, rewritten = false;
    uint8_t opcode = 0; // the client's opcode
    uint16_t span = 1;  // PSNs the request takes (a READ: its response packets)
    uint32_t out = 0, slot = 0, cip = 0, cqpn = 0, cpsn = 0;
    uint8_t cmac[6] = {};
    uint64_t va = 0;      // the address the server saw (after steering)
    uint64_t written = 0; // rewritten CAS: the value the WRITE carries
    uint64_t prior = 0;   // rewritten CAS: the original value the client is told
    int32_t lock = -1;    // a CAS on a lock word not in the cache: its index (fills on the answer)
    uint32_t lockver = 0;
    uint64_t compare = 0, swap = 0;
};
struct MsnCell {
    uint32_t msn = 0;
    uint32_t nak_serial = 0;
};

bool is_final_response(uint8_t op)
{
    return op == ROCE_OP_ACK || op == ROCE_OP_ATOMIC_ACK || op == ROCE_OP_READ_RESP_LAST ||
           op == ROCE_OP_READ_RESP_ONLY;
}

class Swordbox final : public Program {
public:
    struct Config {
        uint32_t server_ip = 0;
        bool locks = false, mux = false, steer = false;
        uint32_t lock_rkey = 0;
        uint64_t lock_base = 0;
        uint32_t lock_count = 0;
        uint32_t mux_qpn = 0, carrier_ip = 0;
        uint32_t ring = 64, conns = 64, mtu = 1024;
        uint32_t steer_rkey = 0, key_offset = 0, next_offset = 0, hot_keys = 1024, read_slots = 3072;
    };

    explicit Swordbox(const Config &c)
        : Program(c.ring + 2), cfg_(c), conns_(pipe_, "conns", 0, c.conns), rsp_(pipe_, "rsp", 0, c.conns),
          learn_(pipe_, "learn", 0, c.conns * 4), conn_(pipe_, "conn", 1, c.conns),
          outq_(pipe_, "outq", 2, c.conns + 1), rdhash_(pipe_, "rdhash", 3, c.steer ? c.read_slots : 1),
          keys_(pipe_, "keys", 4, c.steer ? c.hot_keys : 1),
          tail_(pipe_, "tail", 5, c.steer ? c.hot_keys : 1), lockgen_(pipe_, "lockgen", 5, 1),
          locks_(pipe_, "locks", 6, c.lock_count ? c.lock_count : 1),
          back_(pipe_, "back", 7, c.conns * c.ring),
          ring_(pipe_, "ring", 8, (c.mux ? 1 : c.conns + 1) * c.ring), msn_(pipe_, "msn", 9, c.conns)
    {
    }

    Verdict ingress(Ctx &c) override
    {
        const rnic::Packet &p = c.hdr.pkt;
        if (c.pass.number() == 0) {
            m_ = Meta{};
            if ((p.info & ROCE_HDR_REQUEST) && p.l3.dst_ip == cfg_.server_ip) return request(c);
            if ((p.info & ROCE_HDR_RESPONSE) && p.l3.src_ip == cfg_.server_ip) return response_first(c);
            return Verdict::Pass;
        }
        if (m_.kind == Meta::Rollback) {
            conn_.execute(c.pass, m_.slot, [&](ConnCell &cc) {
                if (cc.next_psn == m_.rollback_to_end) cc.next_psn = m_.rollback_psn;
            });
            return Verdict::Drop;
        }
        return response_step(c);
    }

    std::string stats_json() const override
    {
        const SwordboxStats &s = st_;
        std::ostringstream o;
        o << "\"behaviours\":{\"locks\":" << (cfg_.locks ? "true" : "false")
          << ",\"mux\":" << (cfg_.mux ? "true" : "false") << ",\"steer\":" << (cfg_.steer ? "true" : "false")
          << "},\"connections\":{\"untracked\":" << s.untracked << ",\"learn_overflow\":" << s.learn_overflow
          << ",\"engaged\":" << s.engaged << ",\"learning_requests\":" << s.learning_requests
          << "},\"requests\":{\"mapped\":" << s.mapped << ",\"retransmissions\":" << s.retransmissions
          << ",\"retrans_unmapped\":" << s.retrans_unmapped << ",\"gap_drops\":" << s.gap_drops
          << ",\"ring_full\":" << s.ring_full << ",\"not_ready\":" << s.not_ready
          << ",\"mux_busy\":" << s.mux_busy << ",\"mux_unsupported\":" << s.mux_unsupported
          << "},\"responses\":{\"mapped\":" << s.responses << ",\"acks_expanded\":" << s.acks_expanded
          << ",\"covered_skipped\":" << s.covered_skipped << ",\"duplicates\":" << s.duplicates
          << ",\"stray\":" << s.stray << ",\"naks_in\":" << s.naks_in << ",\"naks_out\":" << s.naks_out
          << "},\"locks\":{\"rewrites\":" << s.lock_rewrites << ",\"acquired\":" << s.lock_acquired
          << ",\"failed\":" << s.lock_failed << ",\"releases\":" << s.lock_releases
          << ",\"misses\":" << s.lock_misses << ",\"fills\":" << s.lock_fills
          << ",\"fills_stale\":" << s.lock_fills_stale << ",\"invalidations\":" << s.lock_invalidations
          << "},\"steering\":{\"cas_steered\":" << s.steer_cas << ",\"cas_at_tail\":" << s.steer_cas_at_tail
          << ",\"reads_steered\":" << s.steer_reads << ",\"read_hits\":" << s.read_hits
          << ",\"read_misses\":" << s.read_misses << ",\"hot_key_overflow\":" << s.hot_key_overflow << '}';
        return o.str();
    }

    SwordboxStats st_;

private:
    // Per-packet metadata carried across the passes of one frame (a recirculated packet's bridged
    // metadata on a switch).
    struct Meta {
        enum Kind : uint8_t { None, Rollback, Answer, Nak, Dup, Done } kind = None;
        uint32_t slot = 0, q = 0;
        uint32_t rollback_psn = 0, rollback_to_end = 0;
        uint32_t P = 0, cursor = 0, nak_end = 0, serial = 0;
        bool fill = false;
        MapEntry fill_entry;
        uint64_t fill_value = 0;
    };

    uint32_t q_of(uint32_t slot) const { return cfg_.mux ? 0 : slot + 1; }
    uint32_t ring_index(uint32_t q, uint32_t psn) const
    {
        return (cfg_.mux ? 0 : q) * cfg_.ring + psn % cfg_.ring;
    }
    int32_t lock_index(uint32_t rkey, uint64_t va) const
    {
        if (!cfg_.lock_count || rkey != cfg_.lock_rkey || va < cfg_.lock_base) return -1;
        const uint64_t off = va - cfg_.lock_base;
        if (off % 8 || off / 8 >= cfg_.lock_count) return -1;
        return int32_t(off / 8);
    }
    bool overlaps_locks(uint32_t rkey, uint64_t va, uint64_t len) const
    {
        if (!cfg_.lock_count || rkey != cfg_.lock_rkey) return false;
        const uint64_t end = cfg_.lock_base + uint64_t(cfg_.lock_count) * 8;
        return va < end && va + len > cfg_.lock_base;
    }

    // ---- requests ----

    Verdict request(Ctx &c)
    {
        rnic::Packet &p = c.hdr.pkt;
        const uint8_t op = p.bth.opcode;
        const uint32_t *sp = conns_.lookup_or_learn(
            c.pass, ReqKey{p.l3.src_ip, p.l3.dst_ip, p.bth.dqpn, p.l3.udp_sport}, uint32_t(conns_.size()));
        if (!sp) {
            st_.untracked++;
            return Verdict::Pass;
        }
        const uint32_t slot = *sp;
        const bool is_carrier = cfg_.mux && p.l3.src_ip == cfg_.carrier_ip && p.bth.dqpn == cfg_.mux_qpn;
        uint32_t span = 1;
        if (op == ROCE_OP_READ_REQUEST && p.reth.dma_len > cfg_.mtu)
            span = (p.reth.dma_len + cfg_.mtu - 1) / cfg_.mtu;
        const uint32_t end = roce_psn_add(p.bth.psn, span - 1);
        const bool write_with_key = cfg_.steer && (op == ROCE_OP_WRITE_ONLY || op == ROCE_OP_WRITE_FIRST) &&
                                    p.reth.rkey == cfg_.steer_rkey && p.payload_len >= cfg_.key_offset + 8;
        const bool steer_cas = cfg_.steer && op == ROCE_OP_CMP_SWAP && p.atomic.rkey == cfg_.steer_rkey;
        const bool steer_read = cfg_.steer && op == ROCE_OP_READ_REQUEST && p.reth.rkey == cfg_.steer_rkey;

        enum { Learning, New, Retrans, Gap } cls = Learning;
        ConnCell cc{};
        uint32_t prev_learn_psn = 0;
        conn_.execute(c.pass, slot, [&](ConnCell &x) {
            prev_learn_psn = x.state == kLearning ? x.next_psn : roce_psn_add(end, 1);
            if (x.state == kNew) {
                x.state = kLearning;
                x.carrier = is_carrier;
                x.ip = p.l3.src_ip;
                x.sport = p.l3.udp_sport;
                std::copy(p.l3.src_mac.begin(), p.l3.src_mac.end(), x.mac);
                x.next_psn = p.bth.psn;
            }
            if (x.state == kLearning) {
                // Only new requests count as the latest one (a retransmission keeps the mark).
                if (roce_psn_diff(p.bth.psn, x.next_psn) >= 0) x.next_psn = roce_psn_add(end, 1);
                cls = Learning;
            } else {
                const int d = roce_psn_diff(p.bth.psn, x.next_psn);
                cls = d == 0 ? New : d < 0 ? Retrans : Gap;
                if (cls == New) x.next_psn = roce_psn_add(end, 1);
            }
            if (cls != Retrans && cls != Gap) {
                if (write_with_key) {
                    x.last_key = get_le64(p.payload + cfg_.key_offset);
                    x.last_va = p.reth.va;
                    x.key_valid = true;
                }
            }
            cc = x;
            if (steer_cas && cls != Retrans && cls != Gap) x.key_valid = false; // the CAS consumes it
        });

        if (cls == Gap) { // the server would discard it (PSN sequence error): so does the switch
            st_.gap_drops++;
            return Verdict::Drop;
        }
        if (cls == Learning) {
            st_.learning_requests++;
            const bool retrans = roce_psn_add(end, 1) != cc.next_psn;
            if (!retrans) { // the learn digest: the connection's latest request (one entry each)
                if (prev_learn_psn != cc.next_psn)
                    learn_.erase(
                        LearnKey{p.l3.dst_ip, p.l3.src_ip, roce_psn_add(prev_learn_psn, ROCE_PSN_MASK)});
                if (!learn_.insert(LearnKey{p.l3.dst_ip, p.l3.src_ip, end}, slot)) st_.learn_overflow++;
            }
            bool changed = false;
            if (!retrans) changed = steer(c, cc, write_with_key, steer_cas, steer_read);
            lock_passthrough(c, op);
            return changed ? Verdict::Rewrite : Verdict::Pass;
        }
        if (cls == Retrans) return retransmission(c, slot);

        // A new request of an engaged connection.
        const uint32_t q = q_of(slot);
        const uint32_t info = p.info;
        const bool multi = !((info & ROCE_HDR_FIRST) && (info & ROCE_HDR_LAST));
        const bool send = op <= ROCE_OP_SEND_ONLY_IMM;
        enum { Ok, NotReady, Full, Busy, Unsupported } res = Ok;
        uint32_t out = 0;
        OutQCell oq{};
        outq_.execute(c.pass, q, [&](OutQCell &x) {
            if (!x.valid) {
                res = NotReady;
                return;
            }
            if (cfg_.mux && !cc.carrier && send) {
                res = Unsupported;
                return;
            }
            if (cfg_.mux && multi) {
                if (info & ROCE_HDR_FIRST) {
                    if (x.owner && x.owner != slot + 1) res = Busy;
                } else if (x.owner != slot + 1) {
                    res = Busy;
                }
            } else if (cfg_.mux && x.owner && x.owner != slot + 1) {
                res = Busy;
            }
            if (res != Ok) return;
            if (uint32_t(roce_psn_diff(roce_psn_add(x.next, span), x.una)) > cfg_.ring) {
                res = Full;
                return;
            }
            out = x.next;
            x.next = roce_psn_add(x.next, span);
            if (cfg_.mux && multi) x.owner = (info & ROCE_HDR_LAST) ? 0 : slot + 1;
            oq = x;
        });
        if (res != Ok) {
            (res == NotReady ? st_.not_ready
             : res == Full   ? st_.ring_full
             : res == Busy   ? st_.mux_busy
                             : st_.mux_unsupported)++;
            m_.kind = Meta::Rollback; // undo the connection's PSN advance in a second pass, then drop
            m_.slot = slot;
            m_.rollback_psn = p.bth.psn;
            m_.rollback_to_end = roce_psn_add(end, 1);
            return Verdict::Recirculate;
        }

        MapEntry e;
        e.valid = true;
        e.opcode = op;
        e.span = uint16_t(span);
        e.out = out;
        e.slot = slot;
        e.cip = cc.ip;
        e.cqpn = cc.qpn;
        e.cpsn = p.bth.psn;
        std::copy(cc.mac, cc.mac + 6, e.cmac);
        steer(c, cc, write_with_key, steer_cas, steer_read);
        e.va = op == ROCE_OP_CMP_SWAP || op == ROCE_OP_FETCH_ADD ? p.atomic.va : p.reth.va;
        lock_request(c, e);
        back_.execute(c.pass, slot * cfg_.ring + p.bth.psn % cfg_.ring, [&](BackCell &b) {
            b = BackCell{true, p.bth.psn, out};
        });
        ring_.execute(c.pass, ring_index(q, out), [&](MapEntry &r) { r = e; });
        st_.mapped++;
        apply_request(c, e, oq);
        return Verdict::Rewrite;
    }

    // Steering (stages 3-5) of a request; true if it changed the packet.
    bool steer(Ctx &c, const ConnCell &cc, bool write_with_key, bool steer_cas, bool steer_read)
    {
        rnic::Packet &p = c.hdr.pkt;
        if (write_with_key) {
            const uint64_t va = p.reth.va, key = cc.last_key;
            rdhash_.execute(c.pass, uint32_t(murmur_fmix64(va) % cfg_.read_slots), [&](RdCell &r) {
                r = RdCell{true, va, key};
            });
            return false;
        }
        if (steer_cas && cc.key_valid) {
            const uint32_t *idx = keys_.lookup_or_learn(c.pass, cc.last_key, uint32_t(keys_.size()));
            if (!idx) {
                st_.hot_key_overflow++;
                return false;
            }
            bool changed = false;
            tail_.execute(c.pass, *idx, [&](TailCell &t) {
                if (t.valid) {
                    const uint64_t target = t.va + cfg_.next_offset;
                    if (p.atomic.va != target) {
                        p.atomic.va = target;
                        changed = true;
                        st_.steer_cas++;
                    } else {
                        st_.steer_cas_at_tail++;
                    }
                }
                t = TailCell{true, cc.last_va}; // the client's new version becomes the tail
            });
            return changed;
        }
        if (steer_read) {
            const uint64_t va = p.reth.va;
            RdCell r{};
            rdhash_.execute(c.pass, uint32_t(murmur_fmix64(va) % cfg_.read_slots), [&](RdCell &x) { r = x; });
            if (!r.valid || r.va != va) {
                st_.read_misses++;
                return false;
            }
            st_.read_hits++;
            const uint32_t *idx = keys_.lookup(c.pass, r.key);
            if (!idx) return false;
            bool changed = false;
            tail_.execute(c.pass, *idx, [&](TailCell &t) {
                if (t.valid && t.va != va) {
                    p.reth.va = t.va;
                    changed = true;
                    st_.steer_reads++;
                }
            });
            return changed;
        }
        return false;
    }

    // A request of a connection not engaged: it passes; its effect on cached lock words is unknown
    // in order, so the words it may change leave the cache.
    void lock_passthrough(Ctx &c, uint8_t op)
    {
        const rnic::Packet &p = c.hdr.pkt;
        if (op == ROCE_OP_CMP_SWAP || op == ROCE_OP_FETCH_ADD) {
            const int32_t li = lock_index(p.atomic.rkey, p.atomic.va);
            if (li < 0) return;
            locks_.execute(c.pass, uint32_t(li), [&](LockCell &l) {
                if (l.valid) st_.lock_invalidations++;
                l.valid = false;
                l.ver++;
            });
        } else if ((p.info & ROCE_HDR_RETH) && !(op == ROCE_OP_READ_REQUEST) &&
                   overlaps_locks(p.reth.rkey, p.reth.va, p.reth.dma_len)) {
            lockgen_.execute(c.pass, 0, [](uint32_t &g) { g++; });
            st_.lock_invalidations++;
        }
    }

    // The lock cache (stages 5-6) for a new mapped request; fills e.rewritten/written/prior or
    // e.lock for a fill on the answer.
    void lock_request(Ctx &c, MapEntry &e)
    {
        const rnic::Packet &p = c.hdr.pkt;
        const uint8_t op = p.bth.opcode;
        if (!cfg_.lock_count) return;
        if (op == ROCE_OP_CMP_SWAP || op == ROCE_OP_FETCH_ADD) {
            const int32_t li = lock_index(p.atomic.rkey, p.atomic.va);
            if (li < 0) return;
            uint32_t gen = 0;
            lockgen_.execute(c.pass, 0, [&](uint32_t &g) { gen = g; });
            locks_.execute(c.pass, uint32_t(li), [&](LockCell &l) {
                l.ver++;
                if (op == ROCE_OP_FETCH_ADD) {
                    if (l.valid && l.gen == gen) st_.lock_invalidations++;
                    l.valid = false;
                    return;
                }
                if (cfg_.locks && l.valid && l.gen == gen) {
                    e.rewritten = true;
                    e.prior = l.value;
                    e.written = l.value == p.atomic.compare ? p.atomic.swap_add : l.value;
                    if (l.value == p.atomic.compare) {
                        (p.atomic.compare == 0 ? st_.lock_acquired : st_.lock_releases)++;
                    } else {
                        st_.lock_failed++;
                    }
                    l.value = e.written;
                    st_.lock_rewrites++;
                    return;
                }
                st_.lock_misses++;
                l.valid = false;
                e.lock = li;
                e.lockver = l.ver;
                e.compare = p.atomic.compare;
                e.swap = p.atomic.swap_add;
            });
            return;
        }
        if (!(p.info & ROCE_HDR_RETH) || op == ROCE_OP_READ_REQUEST) return;
        const int32_t li = lock_index(p.reth.rkey, p.reth.va);
        if (op == ROCE_OP_WRITE_ONLY && p.reth.dma_len == 8 && p.payload_len == 8 && li >= 0) {
            uint32_t gen = 0;
            lockgen_.execute(c.pass, 0, [&](uint32_t &g) { gen = g; });
            locks_.execute(c.pass, uint32_t(li), [&](LockCell &l) {
                l.valid = true;
                l.gen = gen;
                l.ver++;
                l.value = get_le64(p.payload);
            });
            if (get_le64(p.payload) == 0) st_.lock_releases++;
            return;
        }
        if (overlaps_locks(p.reth.rkey, p.reth.va, p.reth.dma_len)) {
            lockgen_.execute(c.pass, 0, [](uint32_t &g) { g++; });
            st_.lock_invalidations++;
        }
    }

    // Write the mapped request: the rewrite of a cached lock's CAS, steering, the out-QP's address.
    void apply_request(Ctx &c, const MapEntry &e, const OutQCell &oq)
    {
        rnic::Packet &p = c.hdr.pkt;
        if (e.rewritten) {
            const uint32_t rkey = p.atomic.rkey;
            put_le64(c.payload, e.written);
            p.bth.opcode = ROCE_OP_WRITE_ONLY;
            p.info = roce_opcode_info(ROCE_OP_WRITE_ONLY);
            p.reth = rnic::Reth{e.va, rkey, 8};
            p.payload = c.payload;
            p.payload_len = 8;
        } else if (e.opcode == ROCE_OP_CMP_SWAP || e.opcode == ROCE_OP_FETCH_ADD) {
            p.atomic.va = e.va;
        } else if (p.info & ROCE_HDR_RETH) {
            p.reth.va = e.va;
        }
        p.bth.psn = e.out;
        if (cfg_.mux) {
            p.l3.src_ip = oq.ip;
            std::copy(oq.mac, oq.mac + 6, p.l3.src_mac.begin());
            p.l3.udp_sport = oq.sport;
            p.bth.dqpn = oq.dqpn;
        }
    }

    Verdict retransmission(Ctx &c, uint32_t slot)
    {
        rnic::Packet &p = c.hdr.pkt;
        const uint32_t q = q_of(slot);
        OutQCell oq{};
        outq_.execute(c.pass, q, [&](OutQCell &x) { oq = x; });
        BackCell b{};
        back_.execute(c.pass, slot * cfg_.ring + p.bth.psn % cfg_.ring, [&](BackCell &x) { b = x; });
        MapEntry e{};
        const bool found = oq.valid && b.valid && b.cpsn == p.bth.psn;
        if (found) ring_.execute(c.pass, ring_index(q, b.out), [&](MapEntry &x) { e = x; });
        if (!found || !e.valid || e.out != b.out || e.slot != slot || e.cpsn != p.bth.psn) {
            st_.retrans_unmapped++; // its map entry is gone (reused): the server has long answered it
            return Verdict::Drop;
        }
        st_.retransmissions++;
        apply_request(c, e, oq);
        return Verdict::Rewrite;
    }

    // ---- responses ----

    Verdict response_first(Ctx &c)
    {
        const rnic::Packet &p = c.hdr.pkt;
        const uint8_t op = p.bth.opcode;
        const uint32_t *sp = rsp_.lookup(c.pass, RspKey{p.l3.src_ip, p.l3.dst_ip, p.bth.dqpn});
        bool learned = false;
        if (!sp) {
            sp = learn_.lookup(c.pass, LearnKey{p.l3.src_ip, p.l3.dst_ip, p.bth.psn});
            learned = true;
        }
        if (!sp) return Verdict::Pass;
        const uint32_t slot = *sp;
        const bool nak =
            (p.info & ROCE_HDR_AETH) && (p.aeth.syndrome & ROCE_AETH_TYPE_MASK) != ROCE_AETH_TYPE_ACK;
        bool engage = false, engaged = false, carrier = false;
        ConnCell cc{};
        conn_.execute(c.pass, slot, [&](ConnCell &x) {
            if (x.state == kLearning && learned && is_final_response(op) && !nak &&
                roce_psn_add(p.bth.psn, 1) == x.next_psn && p.l3.dst_ip == x.ip &&
                (!cfg_.mux || x.carrier || carrier_ready_)) {
                x.state = kEngaged;
                x.qpn = p.bth.dqpn;
                engage = true;
            }
            engaged = x.state == kEngaged;
            carrier = x.carrier;
            cc = x;
        });
        if (!engaged) return Verdict::Pass;
        if (engage) {
            // The learn digest: the control plane adds the response key of the connection.
            rsp_.insert(RspKey{p.l3.src_ip, p.l3.dst_ip, p.bth.dqpn}, slot);
            learn_.erase(LearnKey{p.l3.src_ip, p.l3.dst_ip, p.bth.psn});
            st_.engaged++;
            if (!cfg_.mux || carrier) {
                outq_.execute(c.pass, q_of(slot), [&](OutQCell &x) {
                    x = OutQCell{};
                    x.valid = true;
                    x.next = x.una = cc.next_psn;
                    x.ip = cc.ip;
                    x.dqpn = cfg_.mux ? cfg_.mux_qpn : 0;
                    std::copy(cc.mac, cc.mac + 6, x.mac);
                    x.sport = cc.sport;
                });
                if (cfg_.mux) carrier_ready_ = true; // the control plane enables mapping onto it
            }
            msn_.execute(c.pass, slot, [&](MsnCell &m) { m.msn = p.aeth.msn; });
            return Verdict::Pass;
        }
        if (cfg_.mux && !carrier) { // a late answer on the connection's own QP
            st_.stray++;
            return Verdict::Pass;
        }
        const uint32_t q = q_of(slot);
        enum { Stray, Dup, Answer, Nak } kind = Stray;
        outq_.execute(c.pass, q, [&](OutQCell &x) {
            if (!x.valid) return;
            const uint32_t P = p.bth.psn;
            if (roce_psn_diff(P, x.una) < 0) {
                kind = Dup;
                return;
            }
            // Beyond anything sent; a NAK may name x.next (everything before it was executed).
            const int beyond = roce_psn_diff(P, x.next);
            if (beyond > 0 || (beyond == 0 && !nak)) return;
            m_.cursor = x.una;
            if (nak) {
                kind = Nak;
                m_.nak_end = x.next;
                x.una = P;
            } else {
                kind = Answer;
                if (is_final_response(op)) {
                    x.una = roce_psn_add(P, 1);
                } else if (op == ROCE_OP_READ_RESP_FIRST) {
                    x.una = P;
                }
            }
        });
        if (kind == Stray) {
            st_.stray++;
            return Verdict::Drop;
        }
        m_.q = q;
        m_.P = p.bth.psn;
        if (kind == Nak && m_.cursor == m_.nak_end) { // nothing outstanding to answer
            st_.naks_in++;
            return Verdict::Drop;
        }
        if (kind == Dup) {
            m_.kind = Meta::Dup;
            m_.cursor = p.bth.psn;
        } else if (kind == Nak) {
            st_.naks_in++;
            m_.kind = Meta::Nak;
            m_.serial = ++nak_serial_;
        } else {
            m_.kind = Meta::Answer;
        }
        return entry_step(c);
    }

    Verdict response_step(Ctx &c)
    {
        if (m_.fill) {
            const MapEntry &e = m_.fill_entry;
            uint32_t gen = 0;
            lockgen_.execute(c.pass, 0, [&](uint32_t &g) { gen = g; });
            locks_.execute(c.pass, uint32_t(e.lock), [&](LockCell &l) {
                if (l.ver != e.lockver) { // a later request touched the word: its value is not known
                    st_.lock_fills_stale++;
                    return;
                }
                l.valid = true;
                l.gen = gen;
                l.value = m_.fill_value;
                st_.lock_fills++;
            });
            m_.fill = false;
        }
        if (m_.kind == Meta::Done) return Verdict::Drop;
        return entry_step(c);
    }

    // The response to the client of entry e: addresses, PSN and MSN of the client's connection.
    rnic::Packet to_client(const rnic::Packet &from, const MapEntry &e, uint32_t psn, uint32_t msn) const
    {
        rnic::Packet r = from;
        r.l3.dst_ip = e.cip;
        std::copy(e.cmac, e.cmac + 6, r.l3.dst_mac.begin());
        r.bth.dqpn = e.cqpn;
        r.bth.psn = psn;
        r.aeth.msn = msn & ROCE_MSN_MASK;
        return r;
    }

    rnic::Packet synthesized_ack(const rnic::Packet &from, const MapEntry &e, uint32_t msn) const
    {
        rnic::Packet a;
        a.l3 = from.l3;
        a.bth.opcode = e.rewritten ? ROCE_OP_ATOMIC_ACK : ROCE_OP_ACK;
        a.info = roce_opcode_info(a.bth.opcode);
        a.bth.pkey = from.bth.pkey;
        a.aeth.syndrome = ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID);
        a.atomic_orig = e.prior;
        return to_client(a, e, roce_psn_add(e.cpsn, e.span - 1u), msn);
    }

    // One ring entry of the response being answered: read it (stage 8), answer its client (9).
    Verdict entry_step(Ctx &c)
    {
        const rnic::Packet &p = c.hdr.pkt;
        MapEntry e{};
        const uint32_t at = m_.cursor;
        ring_.execute(c.pass, ring_index(m_.q, at), [&](MapEntry &x) { e = x; });
        if (!e.valid || e.out != at) { // no request was mapped there (a ring slot since reused)
            st_.stray++;
            return finish(c, 1);
        }
        const uint32_t last = roce_psn_add(e.out, e.span - 1u);
        const bool msg_end = (roce_opcode_info(e.opcode) & ROCE_HDR_LAST) != 0;
        if (m_.kind == Meta::Dup) {
            uint32_t msn = 0;
            msn_.execute(c.pass, e.slot, [&](MsnCell &m) { msn = m.msn; });
            rnic::Packet r = to_client(p, e, roce_psn_add(e.cpsn, roce_psn_diff(m_.P, e.out)), msn);
            rewrite_answer(r, e);
            c.emit(r);
            st_.duplicates++;
            m_.kind = Meta::Done;
            return Verdict::Drop;
        }
        const bool covered = roce_psn_diff(last, m_.P) < 0;
        if (m_.kind == Meta::Nak && !covered) {
            // At or after the NAK's PSN: one NAK per client with an entry here, at its first one.
            msn_.execute(c.pass, e.slot, [&](MsnCell &m) {
                if (m.nak_serial == m_.serial) return;
                m.nak_serial = m_.serial;
                rnic::Packet r = to_client(p, e, e.cpsn, m.msn);
                c.emit(r);
                st_.naks_out++;
            });
            const uint32_t next = roce_psn_add(at, e.span);
            m_.cursor = next;
            if (next == m_.nak_end) return finish(c, 0);
            return Verdict::Recirculate;
        }
        if (covered) { // acknowledged by a coalesced ACK (or implied by a NAK after it)
            const bool answerable = !(e.opcode == ROCE_OP_READ_REQUEST ||
                                      (roce_opcode_info(e.opcode) & ROCE_HDR_ATOMICETH && !e.rewritten) ||
                                      e.opcode == ROCE_OP_FLUSH || e.opcode == ROCE_OP_ATOMIC_WRITE);
            if (!answerable) {
                st_.covered_skipped++; // the client sees a later answer and retransmits it
            } else if (msg_end) {
                msn_.execute(c.pass, e.slot, [&](MsnCell &m) {
                    m.msn = roce_psn_add(m.msn, 1);
                    c.emit(synthesized_ack(p, e, m.msn));
                });
                st_.acks_expanded++;
            }
            m_.cursor = roce_psn_add(at, e.span);
            if (m_.kind == Meta::Nak && m_.cursor == m_.nak_end) return finish(c, 0);
            return Verdict::Recirculate;
        }
        // The entry the response itself answers.
        uint32_t msn = 0;
        const bool final = is_final_response(p.bth.opcode);
        msn_.execute(c.pass, e.slot, [&](MsnCell &m) {
            if (final && msg_end) m.msn = roce_psn_add(m.msn, 1);
            msn = m.msn;
        });
        rnic::Packet r = to_client(p, e, roce_psn_add(e.cpsn, roce_psn_diff(m_.P, e.out)), msn);
        rewrite_answer(r, e);
        c.emit(r);
        st_.responses++;
        if (e.lock >= 0 && p.bth.opcode == ROCE_OP_ATOMIC_ACK) {
            m_.fill = true;
            m_.fill_entry = e;
            m_.fill_value = p.atomic_orig == e.compare ? e.swap : p.atomic_orig;
            m_.kind = Meta::Done;
            return Verdict::Recirculate; // stage 6 is behind: one more pass
        }
        return finish(c, 0);
    }

    // A rewritten CAS's WRITE ACK becomes the ATOMIC ACKNOWLEDGE the client expects.
    static void rewrite_answer(rnic::Packet &r, const MapEntry &e)
    {
        if (e.rewritten && r.bth.opcode == ROCE_OP_ACK &&
            (r.aeth.syndrome & ROCE_AETH_TYPE_MASK) == ROCE_AETH_TYPE_ACK) {
            r.bth.opcode = ROCE_OP_ATOMIC_ACK;
            r.info = roce_opcode_info(ROCE_OP_ATOMIC_ACK);
            r.atomic_orig = e.prior;
            r.payload = nullptr;
            r.payload_len = 0;
        }
    }

    Verdict finish(Ctx &, unsigned)
    {
        m_.kind = Meta::Done;
        return Verdict::Drop; // the frame left as the synthesized answers, in ring order
    }

    Config cfg_;
    Table<ReqKey, uint32_t, KeyHash> conns_;
    Table<RspKey, uint32_t, KeyHash> rsp_;
    Table<LearnKey, uint32_t, KeyHash> learn_;
    RegisterArray<ConnCell> conn_;
    RegisterArray<OutQCell> outq_;
    RegisterArray<RdCell> rdhash_;
    Table<uint64_t, uint32_t> keys_;
    RegisterArray<TailCell> tail_;
    RegisterArray<uint32_t> lockgen_;
    RegisterArray<LockCell> locks_;
    RegisterArray<BackCell> back_;
    RegisterArray<MapEntry> ring_;
    RegisterArray<MsnCell> msn_;
    Meta m_;
    bool carrier_ready_ = false;
    uint32_t nak_serial_ = 0;
};

} // namespace

const char kSwordboxSummary[] =
    "SwordBox on-path serializer: lock CAS -> WRITE with a lock-word cache, all client QPs "
    "onto one server QP (PSN/MSN stitched, coalesced ACKs expanded), Clover write and read "
    "steering; each switched by a parameter (docs/swordbox.md)";

std::vector<ParamSpec> swordbox_params()
{
    const std::vector<std::string> onoff = {"off", "on"};
    return {
        {"server",
         "node number of the memory server (its IPv4 address is the node's)",
         "1",
         0,
         RKF_MAX_NODES - 1,
         {}},
        {"locks", "lock acceleration: CAS on a cached lock word -> 8-byte WRITE", "off", 0, 0, onoff},
        {"lock-rkey", "rkey of the lock region", "0", 0, 0xFFFFFFFFull, {}},
        {"lock-base", "address of the first lock word (8-byte aligned words)", "0", 0, ~0ull, {}},
        {"lock-count", "lock words in the region (0: no lock region)", "0", 0, 65536, {}},
        {"mux", "QP multiplexing: every client connection to the server onto one server QP", "off", 0, 0,
         onoff},
        {"mux-qpn",
         "the server QP carrying the multiplexed traffic (set up by the workload)",
         "0",
         0,
         ROCE_QPN_MASK,
         {}},
        {"carrier", "node number of the client side of mux-qpn's connection", "0", 0, RKF_MAX_NODES - 1, {}},
        {"ring",
         "map entries per out-QP (outstanding requests; more: dropped, counted ring_full)",
         "64",
         4,
         4096,
         {}},
        {"conns",
         "client connections tracked (more: passed end to end, counted untracked)",
         "64",
         1,
         4096,
         {}},
        {"mtu",
         "path MTU of the connections (response packets of a READ)",
         "1024",
         0,
         0,
         {"256", "512", "1024", "2048", "4096"}},
        {"steer", "Clover write and read steering", "off", 0, 0, onoff},
        {"steer-rkey", "rkey of the Clover data region", "0", 0, 0xFFFFFFFFull, {}},
        {"key-offset", "byte offset of the 64-bit key in a written version node", "0", 0, 4088, {}},
        {"next-offset",
         "byte offset of the next pointer in a version node (the CAS target)",
         "0",
         0,
         4088,
         {}},
        {"hot-keys", "keys whose tail is cached (steered); further keys pass", "1024", 1, 65536, {}},
        {"read-slots", "read-steering table cells (about 3x the key space)", "3072", 1, 1u << 20, {}},
    };
}

std::unique_ptr<Program> make_swordbox(const Params &p)
{
    Swordbox::Config c;
    c.server_ip = rkf_eth_node_ipv4(unsigned(p.num("server")));
    c.locks = p.str("locks") == "on";
    c.lock_rkey = uint32_t(p.num("lock-rkey"));
    c.lock_base = p.num("lock-base");
    c.lock_count = uint32_t(p.num("lock-count"));
    c.mux = p.str("mux") == "on";
    c.mux_qpn = uint32_t(p.num("mux-qpn"));
    c.carrier_ip = rkf_eth_node_ipv4(unsigned(p.num("carrier")));
    c.ring = uint32_t(p.num("ring"));
    c.conns = uint32_t(p.num("conns"));
    c.mtu = uint32_t(p.num("mtu"));
    c.steer = p.str("steer") == "on";
    c.steer_rkey = uint32_t(p.num("steer-rkey"));
    c.key_offset = uint32_t(p.num("key-offset"));
    c.next_offset = uint32_t(p.num("next-offset"));
    c.hot_keys = uint32_t(p.num("hot-keys"));
    c.read_slots = uint32_t(p.num("read-slots"));
    if (c.mux && c.mux_qpn == 0)
        throw std::invalid_argument("mux=on needs mux-qpn (the server QP to carry it)");
    if (c.mux && p.num("carrier") == p.num("server"))
        throw std::invalid_argument("carrier is the client side of mux-qpn's connection: not the server");
    if (c.lock_count && c.lock_base % 8) throw std::invalid_argument("lock-base must be 8-byte aligned");
    if (c.lock_count && c.lock_base > ~0ull - uint64_t(c.lock_count) * 8)
        throw std::invalid_argument("lock region wraps the address space");
    return std::make_unique<Swordbox>(c);
}

const SwordboxStats &swordbox_stats(const Program &p)
{
    return static_cast<const Swordbox &>(p).st_;
}

} // namespace rackemu::fabric::sw
