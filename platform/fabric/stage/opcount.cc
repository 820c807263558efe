// SPDX-License-Identifier: MIT
//
// `opcount`: per-QP traffic counters measured from the RoCEv2 frames the switch forwards; it
// rewrites nothing. A QP is the frame's destination: (destination IPv4 address, BTH destination
// QP), so requests count at the responder's QP and responses at the requester's.
//
//   stage 0  table  qp          (dst IPv4, dest QP) -> slot, learned on first sight; when full the
//                                frame is counted in `untracked` (the defined fallback)
//   stage 1  array  ops         slot x opcode class -> frames (classes: kClasses below)
//            array  bytes       slot -> payload bytes (RoCEv2 payload, without headers or pad)
//            array  untracked   1 cell: frames of QPs beyond the table's capacity
//   stage 2  array  req_psn     slot -> the next request PSN expected (highest seen + 1)
//   stage 3  array  retrans     slot -> requests whose PSN is behind req_psn: retransmissions
//                                (go-back-N after a loss, IBA 9.7.6.1) or duplicates
//            array  naks        slot -> ACKs with a NAK syndrome (IBA 9.7.5.2)
//            array  rnr         slot -> RNR NAKs
// Every array is touched at most once per packet, stages in order (stage.h).
#include <sstream>

#include "programs.h"

namespace rackemu::fabric::sw {

namespace {

// Opcode classes, in the order of the `ops` cells of a slot (IBA 9.2 OpCode table; roce.h).
struct OpClass {
    const char *name;
    uint8_t first, last; // opcode range
};
constexpr OpClass kClasses[] = {
    {"send", ROCE_OP_SEND_FIRST, ROCE_OP_SEND_ONLY_IMM},
    {"write", ROCE_OP_WRITE_FIRST, ROCE_OP_WRITE_ONLY_IMM},
    {"read_request", ROCE_OP_READ_REQUEST, ROCE_OP_READ_REQUEST},
    {"read_response", ROCE_OP_READ_RESP_FIRST, ROCE_OP_READ_RESP_ONLY},
    {"ack", ROCE_OP_ACK, ROCE_OP_ACK},
    {"atomic_ack", ROCE_OP_ATOMIC_ACK, ROCE_OP_ATOMIC_ACK},
    {"cmp_swap", ROCE_OP_CMP_SWAP, ROCE_OP_CMP_SWAP},
    {"fetch_add", ROCE_OP_FETCH_ADD, ROCE_OP_FETCH_ADD},
    {"flush", ROCE_OP_FLUSH, ROCE_OP_FLUSH},
    {"atomic_write", ROCE_OP_ATOMIC_WRITE, ROCE_OP_ATOMIC_WRITE},
    {"cnp", ROCE_OP_CNP, ROCE_OP_CNP},
    {"xatomic", ROCE_OP_XATOMIC, ROCE_OP_XATOMIC_POST},
    {"xatomic_ack", ROCE_OP_XATOMIC_ACK, ROCE_OP_XATOMIC_ACK},
};
constexpr unsigned kNumClasses = sizeof kClasses / sizeof kClasses[0];

unsigned op_class(uint8_t op)
{
    for (unsigned i = 0; i < kNumClasses; i++) {
        if (op >= kClasses[i].first && op <= kClasses[i].last) return i;
    }
    return kNumClasses; // parse() accepts no other opcode
}

struct QpKey {
    uint32_t ip, qpn;
    bool operator==(const QpKey &) const = default;
};
struct QpKeyHash {
    size_t operator()(const QpKey &k) const { return std::hash<uint64_t>{}(uint64_t(k.ip) << 32 | k.qpn); }
};
struct PsnCell {
    uint32_t next = 0; // the next request PSN expected
    uint32_t valid = 0;
};

class OpCount final : public Program {
public:
    explicit OpCount(uint32_t qps)
        : qp_(pipe_, "qp", 0, qps), ops_(pipe_, "ops", 1, qps * kNumClasses), bytes_(pipe_, "bytes", 1, qps),
          untracked_(pipe_, "untracked", 1, 1), req_psn_(pipe_, "req_psn", 2, qps),
          retrans_(pipe_, "retrans", 3, qps), naks_(pipe_, "naks", 3, qps), rnr_(pipe_, "rnr", 3, qps)
    {
    }

    Verdict ingress(Ctx &c) override
    {
        const rnic::Packet &p = c.hdr.pkt;
        const uint32_t fresh = uint32_t(qp_.size());
        const uint32_t *slot = qp_.lookup_or_learn(c.pass, QpKey{p.l3.dst_ip, p.bth.dqpn}, fresh);
        if (!slot) {
            untracked_.execute(c.pass, 0, [](uint64_t &n) { n++; });
            return Verdict::Pass;
        }
        const uint32_t s = *slot;
        const unsigned cls = op_class(p.bth.opcode);
        if (cls < kNumClasses) ops_.execute(c.pass, s * kNumClasses + cls, [](uint64_t &n) { n++; });
        bytes_.execute(c.pass, s, [&](uint64_t &n) { n += p.payload_len; });
        if (p.info & ROCE_HDR_REQUEST) {
            bool behind = false;
            req_psn_.execute(c.pass, s, [&](PsnCell &cell) {
                if (cell.valid && roce_psn_diff(p.bth.psn, cell.next) < 0) {
                    behind = true;
                    return;
                }
                cell.next = roce_psn_add(p.bth.psn, 1);
                cell.valid = 1;
            });
            if (behind) retrans_.execute(c.pass, s, [](uint64_t &n) { n++; });
        } else if (p.info & ROCE_HDR_AETH) {
            const uint8_t type = p.aeth.syndrome & ROCE_AETH_TYPE_MASK;
            if (type == ROCE_AETH_TYPE_NAK) naks_.execute(c.pass, s, [](uint64_t &n) { n++; });
            if (type == ROCE_AETH_TYPE_RNR) rnr_.execute(c.pass, s, [](uint64_t &n) { n++; });
        }
        return Verdict::Pass;
    }

    std::string stats_json() const override
    {
        std::ostringstream o;
        o << "\"untracked\":" << untracked_.value(0) << ",\"qps\":[";
        // In slot order (the order QPs were first seen).
        std::vector<QpKey> keys(qp_.size());
        qp_.for_each([&](const QpKey &k, uint32_t s) {
            if (s < keys.size()) keys[s] = k;
        });
        for (uint32_t s = 0; s < keys.size(); s++) {
            const QpKey &k = keys[s];
            o << (s ? "," : "") << "{\"dst\":\"" << (k.ip >> 24) << '.' << (k.ip >> 16 & 0xFF) << '.'
              << (k.ip >> 8 & 0xFF) << '.' << (k.ip & 0xFF) << "\",\"qpn\":" << k.qpn << ",\"ops\":{";
            bool first = true;
            for (unsigned i = 0; i < kNumClasses; i++) {
                const uint64_t n = ops_.value(s * kNumClasses + i);
                if (!n) continue;
                o << (first ? "" : ",") << '"' << kClasses[i].name << "\":" << n;
                first = false;
            }
            o << "},\"payload_bytes\":" << bytes_.value(s) << ",\"retransmitted\":" << retrans_.value(s)
              << ",\"naks\":" << naks_.value(s) << ",\"rnr_naks\":" << rnr_.value(s) << '}';
        }
        o << ']';
        return o.str();
    }

private:
    Table<QpKey, uint32_t, QpKeyHash> qp_;
    RegisterArray<uint64_t> ops_, bytes_, untracked_;
    RegisterArray<PsnCell> req_psn_;
    RegisterArray<uint64_t> retrans_, naks_, rnr_;
};

} // namespace

const char kOpcountSummary[] =
    "per-QP counts of RoCEv2 opcodes, payload bytes, retransmitted requests and "
    "NAKs, measured from the frames; rewrites nothing";

std::vector<ParamSpec> opcount_params()
{
    return {{"qps",
             "QPs counted (table entries); frames of further QPs count as untracked",
             "256",
             1,
             65536,
             {}}};
}

std::unique_ptr<Program> make_opcount(const Params &p)
{
    return std::make_unique<OpCount>(uint32_t(p.num("qps")));
}

} // namespace rackemu::fabric::sw
