// SPDX-License-Identifier: MIT
// libFuzzer harness of the bridge's programmable stage (platform/fabric/stage, docs/switch.md):
// the parser on any bytes, the deparser on every packet a program rewrites or synthesizes, the
// pipeline discipline, the `opcount` program's tables and arrays and the `swordbox` program.
//
// Input: one config byte (bit 0: an 802.1Q tag on built frames, bit 1: malformed=drop, bit 2:
// a rewriting program instead of opcount; without bit 2, bits 3-7: opcount's qps - 1; with bit 2,
// bit 3: swordbox instead of the adapter below, then bit 4 mux=on, bit 5 locks=on, bit 6
// steer=on, bit 7 ring=4), then frames:
//   0 LEN16 BYTES             a raw frame of LEN bytes (anything)
//   1 OP PSN24 QPN8 LEN16 N (OFF16 XOR8)*N
//                             a valid RoCEv2 frame (opcode picked from the valid ones, payload
//                             fitted to it) with N bytes then changed
// Checked: a frame the stage passes is the frame itself; every rewritten or synthesized frame is
// valid RoCEv2 (IPv4 checksum, UDP length and ICRC); a rewritten frame keeps the opcode the
// program chose; with opcount no frame changes and the pipeline discipline holds. For swordbox the
// built frames are addressed between the memory server (node 1) and clients (nodes 2-5, carrier
// node 4 on server QP 4) by the low bits of the QPN byte, so that connections engage and map.
#include "fuzz_input.h"

#include <cstring>
#include <vector>

#include "rackemu/fabric_proto.h"
#include "stage.h"
#include "wire.h"

using namespace rackemu::fabric::sw;
using rackemu::fuzz::Input;
using rackemu::rnic::Packet;

namespace {

// ---- adapter: a rewriting program, the SwordBox-like shapes of rewrite ----
// CAS -> 8-byte WRITE (shrinks by 4), ACK -> ATOMIC ACKNOWLEDGE (grows by 8), a WRITE answered by
// a synthesized ACK to its sender; each packet touches its arrays once, stages in order.
class Rewriter final : public Program {
public:
    Rewriter() : seen_(pipe_, "seen", 0, 64), last_(pipe_, "last", 1, 64) {}
    Verdict ingress(Ctx &c) override
    {
        Packet &p = c.hdr.pkt;
        const uint32_t slot = p.bth.dqpn % 64;
        seen_.execute(c.pass, slot, [](uint64_t &n) { n++; });
        last_.execute(c.pass, slot, [&](uint32_t &v) { v = p.bth.psn; });
        switch (p.bth.opcode) {
        case ROCE_OP_CMP_SWAP:
            roce_put64(c.payload, p.atomic.swap_add);
            p.bth.opcode = ROCE_OP_WRITE_ONLY;
            p.reth = {p.atomic.va, p.atomic.rkey, 8};
            p.payload = c.payload;
            p.payload_len = 8;
            return Verdict::Rewrite;
        case ROCE_OP_ACK:
            p.bth.opcode = ROCE_OP_ATOMIC_ACK;
            p.atomic_orig = 0;
            return Verdict::Rewrite;
        case ROCE_OP_WRITE_ONLY: {
            Packet ack;
            ack.l3 = p.l3;
            std::swap(ack.l3.src_ip, ack.l3.dst_ip);
            ack.l3.src_mac = p.l3.dst_mac;
            ack.l3.dst_mac = p.l3.src_mac;
            ack.bth.opcode = ROCE_OP_ACK;
            ack.bth.dqpn = p.bth.dqpn;
            ack.bth.psn = p.bth.psn;
            c.emit(ack);
            return Verdict::Pass;
        }
        default:
            return Verdict::Pass;
        }
    }

private:
    RegisterArray<uint64_t> seen_;
    RegisterArray<uint32_t> last_;
};
// ---- end of adapter ----

std::vector<uint8_t> valid_ops()
{
    std::vector<uint8_t> ops;
    for (unsigned op = 0; op < 256; op++) {
        if (roce_xatomic_info(uint8_t(op)) & ROCE_HDR_VALID) ops.push_back(uint8_t(op));
    }
    return ops;
}

void check_out(Stage &st, const uint8_t *f, size_t len, bool rewriter, bool swordbox)
{
    const StageCounters before = st.counters();
    const auto &out = st.process(3, f, len);
    for (const Stage::Out &o : out) {
        if (o.data == f) {
            FUZZ_CHECK(o.len == len && !o.synthesized);
            continue;
        }
        FUZZ_CHECK(rewriter);
        FUZZ_CHECK(frame_valid(o.data, o.len));
        if (swordbox) continue; // any valid RoCEv2 (requests mapped, answers synthesized)
        std::vector<uint8_t> scratch;
        const Headers h = parse(o.data, o.len, scratch);
        FUZZ_CHECK(h.pkt.bth.opcode == ROCE_OP_WRITE_ONLY || h.pkt.bth.opcode == ROCE_OP_ATOMIC_ACK ||
                   (o.synthesized && h.pkt.bth.opcode == ROCE_OP_ACK));
    }
    const StageCounters &c = st.counters();
    FUZZ_CHECK(c.frames == before.frames + 1);
    FUZZ_CHECK(c.passed + c.rewritten + c.dropped == c.frames);
    if (!rewriter) FUZZ_CHECK(c.rewritten == 0 && c.synthesized == 0);
    FUZZ_CHECK(st.program()->pipeline().violations() == 0);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const std::vector<uint8_t> ops = valid_ops();
    static uint8_t payload[ROCE_MTU_MAX];
    Input in(data, size);
    const uint8_t cfg = in.u8();
    const bool vlan = cfg & 1, drop = cfg & 2, rewriter = cfg & 4, swordbox = rewriter && (cfg & 8);
    Stage st;
    st.set_strict(true); // a discipline violation is a crash
    if (swordbox) {
        std::string err;
        std::vector<std::string> sets = {"server=1",      "carrier=4",    "mux-qpn=2",
                                         "lock-count=16", "key-offset=0", "next-offset=8"};
        if (cfg & 16) sets.push_back("mux=on");
        if (cfg & 32) sets.push_back("locks=on");
        if (cfg & 64) sets.push_back("steer=on");
        sets.push_back(cfg & 128 ? "ring=4" : "ring=64");
        if (drop) sets.push_back("malformed=drop");
        if (!st.load("swordbox", sets, err)) rackemu::fuzz::invariant_failed(__FILE__, __LINE__, err.c_str());
    } else if (rewriter) {
        st.load_program(std::make_unique<Rewriter>(), "rewriter", drop);
    } else {
        std::string err;
        std::vector<std::string> sets = {"qps=" + std::to_string((cfg >> 3) + 1)};
        if (drop) sets.push_back("malformed=drop");
        if (!st.load("opcount", sets, err)) rackemu::fuzz::invariant_failed(__FILE__, __LINE__, err.c_str());
    }
    std::vector<uint8_t> f;
    for (unsigned frames = 0; frames < 64 && !in.empty(); frames++) {
        if (in.u8() % 2 == 0) {
            f.resize(in.u16() % 4300);
            if (!f.empty()) in.bytes(f.data(), f.size());
        } else {
            Packet p;
            p.bth.opcode = ops[in.u8() % ops.size()];
            p.bth.psn = in.u32() & ROCE_PSN_MASK;
            p.bth.dqpn = in.u8();
            const uint32_t info = roce_xatomic_info(p.bth.opcode);
            if (swordbox) {
                const unsigned client = 2 + (p.bth.dqpn & 3), server = 1;
                const bool req = info & ROCE_HDR_REQUEST;
                rkf_eth_node_mac(req ? client : server, p.l3.src_mac.data());
                rkf_eth_node_mac(req ? server : client, p.l3.dst_mac.data());
                p.l3.src_ip = rkf_eth_node_ipv4(req ? client : server);
                p.l3.dst_ip = rkf_eth_node_ipv4(req ? server : client);
                p.l3.udp_sport = uint16_t(0xC000 | p.bth.dqpn);
                p.reth.dma_len = 8;
                p.atomic.va = 8 * (p.bth.dqpn >> 4);
                p.reth.va = 8 * (p.bth.dqpn >> 4);
            }
            uint32_t len = in.u16() % (ROCE_MTU_MAX + 1);
            if (!(info & ROCE_HDR_PAYLOAD)) len = 0;
            if (info & ROCE_HDR_PAYLOAD8) len = 8;
            if (info & ROCE_HDR_FULL) len = 256;
            p.payload = len ? payload : nullptr;
            p.payload_len = len;
            f.resize(ROCE_FRAME_MAX + 64);
            size_t n = 0;
            FUZZ_CHECK(build_frame(p, f.data(), f.size(), &n) == rackemu::rnic::WireError::Ok);
            f.resize(n);
            if (vlan) {
                const uint8_t tag[4] = {0x81, 0x00, 0x00, 0x05};
                f.insert(f.begin() + 12, tag, tag + 4);
            }
            for (unsigned k = in.u8() % 5; k > 0; k--) {
                const uint16_t off = in.u16();
                f[off % f.size()] ^= in.u8();
            }
        }
        check_out(st, f.data(), f.size(), rewriter, swordbox);
    }
    return 0;
}
