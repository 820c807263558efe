// SPDX-License-Identifier: MIT
// Unimem packetizer core; see packetizer.h and docs/unimem.md.
#include "packetizer.h"

#include "format.h"
#include "rk_fabric_endpoint.h"
#include "vmbox.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

namespace rackemu::unimem {

namespace {
// Valid bytes per PIF register (Table 5): payload0 and payload1 all 16, dest bits [39:0].
constexpr uint16_t kNeeded[3] = {0xffff, 0xffff, 0x001f};
constexpr uint32_t kStatusBits =
    PKTZ_ST_PEND | PKTZ_ST_ILLEGAL | PKTZ_ST_NACK | PKTZ_ST_ACK | PKTZ_ST_OVERWR_BUF | PKTZ_ST_FABRIC_ERR;
} // namespace

Packetizer::Packetizer(Host host, PacketizerTransmit transmit, bool kif)
    : host_(host), transmit_(std::move(transmit)), kif_(kif)
{
}

Packetizer::Packetizer(Host host, const PacketizerConfig &cfg)
    : host_(host), kif_(cfg.kif), vmbox_(cfg.vmbox), trace_(cfg.trace), trace_opaque_(cfg.trace_opaque),
      ack_first_(cfg.ack_first)
{
    transmit_ = [this](unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t w[4]) {
        link(pif, tag, dest, mif, w);
    };
}

namespace {
// The interface a PIF-register row addresses: element i of a PIF array, or the KIF's row.
constexpr unsigned pif_index(uint32_t row_offset, unsigned i)
{
    return row_offset >= PKTZ_KIF_OFFSET ? UNIMEM_KIF : i;
}
// The KIF's name in log lines, "PIF n" otherwise.
std::string if_name(unsigned pif)
{
    return pif == UNIMEM_KIF ? std::string("KIF") : "PIF " + std::to_string(pif);
}
} // namespace

// ---- the built-in link and the RKF_SVC_UNIMEM_MBOX service ----

void Packetizer::answered(uint64_t tag, Status st)
{
    if (trace_ && trace_->complete) trace_->complete(trace_opaque_, tag, int(st));
    complete(tag, st);
}

// Into this node's vmbox, or to another node's over the fabric. `pif` (0..63, or UNIMEM_KIF)
// travels with the packet as its sending interface: the receiving vmbox takes packets into its
// KIF from a KIF only. No lock held.
void Packetizer::link(unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t words[4])
{
    const unsigned node = unsigned(UNIMEM_GADDR_NODE(dest));
    if (trace_ && trace_->send) trace_->send(trace_opaque_, pif, node, mif, tag);
    if (node == host_.node_id()) {
        if (!vmbox_) {
            answered(tag, RK_UNREACHABLE);
        } else if (ack_first_.load()) {
            acks_first_++;
            vmbox_->deliver(mif, pif, words, UNIMEM_PACKET_WORDS, [&](Status st) { answered(tag, st); });
        } else {
            acks_after_++;
            answered(tag, vmbox_->deliver(mif, pif, words, UNIMEM_PACKET_WORDS));
        }
        return;
    }
    if (!host_.ep()) {
        host_.guest_error(
            if_name(pif) + ": node " + std::to_string(node) +
            " is remote and this node has no fabric (start it with -M rackemu-node,fabric=PATH)");
        answered(tag, RK_UNREACHABLE);
        return;
    }
    rkf_mbox_deliver d{};
    d.mif = uint8_t(mif);
    d.src_if = uint8_t(pif);
    d.nwords = UNIMEM_PACKET_WORDS;
    std::memcpy(d.words, words, UNIMEM_PACKET_WORDS * sizeof(uint64_t));
    rkf_frame_hdr h{};
    h.type = RKF_T_REQ;
    h.svc = RKF_SVC_UNIMEM_MBOX;
    h.op = RKF_OP_MBOX_DELIVER;
    h.dst = uint16_t(node);
    h.tag = tag;
    h.len = uint16_t(offsetof(rkf_mbox_deliver, words) + UNIMEM_PACKET_WORDS * sizeof(uint64_t));
    if (rk_fabric_endpoint_send(host_.ep(), &h, &d)) answered(tag, RK_UNREACHABLE);
}

void Packetizer::serve_request(RkFabricEndpoint *ep, const rkf_frame_hdr &h, const void *payload)
{
    auto answer = [&](int reply) {
        if (trace_ && trace_->serve) trace_->serve(trace_opaque_, h.src, h.len, reply);
        if (reply >= 0) rk_fabric_endpoint_reply(ep, &h, uint16_t(reply), nullptr, 0);
    };
    // The fabric port connects during machine init, before QEMU's first system reset, which
    // empties the FIFOs: hold a delivery that arrives in that window until the reset is done,
    // rather than acknowledge a packet that the reset then discards.
    for (int i = 0; i < 5000 && vmbox_ && !vmbox_->ready(); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!vmbox_ || !vmbox_->ready()) {
        answer(h.type == RKF_T_REQ ? int(RKF_ST_BAD_FRAME) : -1);
    } else if (ack_first_.load()) {
        // the ACK is in the ring before the guest can see the packet (or take its interrupt)
        acks_first_++;
        vmbox_->serve_frame(h, payload, answer);
    } else {
        acks_after_++;
        answer(vmbox_->serve_frame(h, payload));
    }
}

// ---- the register table (Tables 4 and 5; ID and counters are rackemu extensions) ----

std::span<const Reg<Packetizer, Packetizer::Ctx>> Packetizer::reg_table()
{
    using R = Reg<Packetizer, Ctx>;
    constexpr uint32_t t = PKTZ_TIF_OFFSET, page = UNIMEM_IF_PAGE_SIZE, n = UNIMEM_IF_COUNT;
    // PIF (and KIF) registers: the 64-bit half (r.offset in the page) / 8 (0..5) of payload0,
    // payload1, dest
    auto pif = [](Packetizer &d, const R &r, unsigned i, Ctx &) {
        return d.s_.pifs[pif_index(r.offset, i)].regs[(r.offset & (page - 1)) / 8];
    };
    auto set_pif = [](Packetizer &d, const R &r, unsigned i, uint64_t merged, uint64_t, Ctx &c) {
        d.write_pif_locked(pif_index(r.offset, i), (r.offset & (page - 1)) / 8, merged, c);
    };
    auto status = [](Packetizer &d, const R &r, unsigned i, Ctx &) -> uint64_t {
        return d.s_.pifs[pif_index(r.offset, i)].status;
    };
    auto zero = [](Packetizer &, const R &, unsigned, Ctx &) -> uint64_t { return 0; };
    auto pidt = [](Packetizer &d, const R &, unsigned i, Ctx &) { return d.s_.pidt[i]; };
    auto set_pidt = [](Packetizer &d, const R &, unsigned i, uint64_t merged, uint64_t, Ctx &) {
        d.s_.pidt[i] = merged;
    };
    auto base_dest = [](Packetizer &d, const R &, unsigned, Ctx &) { return d.s_.base_dest; };
    auto set_base_dest = [](Packetizer &d, const R &, unsigned, uint64_t merged, uint64_t, Ctx &) {
        d.s_.base_dest = merged;
    };
    auto pid_conf = [](Packetizer &d, const R &, unsigned, Ctx &) { return d.s_.pid_conf; };
    auto set_pid_conf = [](Packetizer &d, const R &, unsigned, uint64_t merged, uint64_t, Ctx &) {
        d.s_.pid_conf = merged;
    };
    auto clr_req = [](Packetizer &d, const R &, unsigned, uint64_t, uint64_t raw, Ctx &) {
        d.clear_request_locked(raw, false);
    };
    auto counter = [](Packetizer &d, const R &r, unsigned, Ctx &) {
        return d.s_.counters[(r.offset - PKTZ_TIF_OFFSET - PKTZ_TIF_COUNTERS) / 8];
    };
    // the KIF's TIF rows (rackemu extension): decoded only on a device with the KIF
    auto caps = [](Packetizer &d, const R &, unsigned, Ctx &) -> uint64_t {
        return d.kif_ ? UNIMEM_CAP_KIF : 0;
    };
    auto kif_pidt = [](Packetizer &d, const R &, unsigned, Ctx &) { return d.s_.kif_pidt; };
    auto set_kif_pidt = [](Packetizer &d, const R &, unsigned, uint64_t merged, uint64_t, Ctx &) {
        d.s_.kif_pidt = merged;
    };
    auto kif_conf = [](Packetizer &d, const R &, unsigned, Ctx &) { return d.s_.kif_conf; };
    auto set_kif_conf = [](Packetizer &d, const R &, unsigned, uint64_t merged, uint64_t, Ctx &) {
        d.s_.kif_conf = merged;
    };
    auto kif_clr_req = [](Packetizer &d, const R &, unsigned, uint64_t, uint64_t raw, Ctx &) {
        if (raw & 1) d.clear_request_locked(0, true);
    };
    auto kif_counter = [](Packetizer &d, const R &r, unsigned, Ctx &) {
        return d.s_.kif_counters[(r.offset - PKTZ_TIF_OFFSET - PKTZ_TIF_KIF_COUNTERS) / 8];
    };
    constexpr uint32_t k = PKTZ_KIF_OFFSET;
#define PKTZ_CNT_ROW_(N, n, d) {#N, t + PKTZ_TIF_COUNTERS + PKTZ_CNT_##N, 8, RegAccess::RO, 0, 0, counter},
#define PKTZ_KIF_CNT_ROW_(N, n, d) \
    {"KIF_" #N, t + PKTZ_TIF_KIF_COUNTERS + PKTZ_KIF_CNT_##N, 8, RegAccess::RO, 0, 0, kif_counter},
    static const R table[] = {
        // PIF page n (Table 5): 128-bit registers written as two 64-bit halves
        {"PAYLOAD0_LO", PKTZ_PIF_PAYLOAD0, 8, RegAccess::RW, 0, ~0ull, pif, set_pif, n, page},
        {"PAYLOAD0_HI", PKTZ_PIF_PAYLOAD0 + 8, 8, RegAccess::RW, 0, ~0ull, pif, set_pif, n, page},
        {"PAYLOAD1_LO", PKTZ_PIF_PAYLOAD1, 8, RegAccess::RW, 0, ~0ull, pif, set_pif, n, page},
        {"PAYLOAD1_HI", PKTZ_PIF_PAYLOAD1 + 8, 8, RegAccess::RW, 0, ~0ull, pif, set_pif, n, page},
        {"DEST_LO", PKTZ_PIF_DEST, 8, RegAccess::RW, 0, ~0ull, pif, set_pif, n, page},
        {"DEST_HI", PKTZ_PIF_DEST + 8, 8, RegAccess::RW, 0, ~0ull, pif, set_pif, n, page},
        {"STATUS", PKTZ_PIF_STATUS, 8, RegAccess::RO, 0, 0, status, nullptr, n, page},
        {"STATUS_HI", PKTZ_PIF_STATUS_HI, 8, RegAccess::RO, 0, 0, zero, nullptr, n, page},
        // TIF page (Table 4)
        {"PIDT", t + PKTZ_TIF_PIDT(0), 8, RegAccess::RW, 0, PKTZ_PID_MASK, pidt, set_pidt, n, 8},
        {"BASE_DEST", t + PKTZ_TIF_BASE_DEST, 8, RegAccess::RW, 0, PKTZ_BASE_DEST_MASK, base_dest,
         set_base_dest},
        {"PID_CONF", t + PKTZ_TIF_PID_CONF, 8, RegAccess::RW, 0, ~0ull, pid_conf, set_pid_conf},
        {"CLR_REQ", t + PKTZ_TIF_CLR_REQ, 8, RegAccess::RW, 0, ~0ull, zero, clr_req}, // WC, reads 0
        {"ID", t + PKTZ_TIF_ID, 8, RegAccess::RO, PKTZ_ID_VALUE, 0},
        PKTZ_COUNTER_TABLE(PKTZ_CNT_ROW_)
        // KIF (rackemu extension): its TIF rows and its page (the PIF registers)
        {"CAPS", t + PKTZ_TIF_CAPS, 8, RegAccess::RO, 0, 0, caps},
        {"KIF_PIDT", t + PKTZ_TIF_KIF_PIDT, 8, RegAccess::RW, 0, PKTZ_PID_MASK, kif_pidt, set_kif_pidt},
        {"KIF_CONF", t + PKTZ_TIF_KIF_CONF, 8, RegAccess::RW, 0, 1, kif_conf, set_kif_conf},
        {"KIF_CLR_REQ", t + PKTZ_TIF_KIF_CLR_REQ, 8, RegAccess::RW, 0, ~0ull, zero,
         kif_clr_req}, // WC, reads 0
        PKTZ_KIF_COUNTER_TABLE(PKTZ_KIF_CNT_ROW_){"KIF_PAYLOAD0_LO", k + PKTZ_PIF_PAYLOAD0, 8, RegAccess::RW,
                                                  0, ~0ull, pif, set_pif},
        {"KIF_PAYLOAD0_HI", k + PKTZ_PIF_PAYLOAD0 + 8, 8, RegAccess::RW, 0, ~0ull, pif, set_pif},
        {"KIF_PAYLOAD1_LO", k + PKTZ_PIF_PAYLOAD1, 8, RegAccess::RW, 0, ~0ull, pif, set_pif},
        {"KIF_PAYLOAD1_HI", k + PKTZ_PIF_PAYLOAD1 + 8, 8, RegAccess::RW, 0, ~0ull, pif, set_pif},
        {"KIF_DEST_LO", k + PKTZ_PIF_DEST, 8, RegAccess::RW, 0, ~0ull, pif, set_pif},
        {"KIF_DEST_HI", k + PKTZ_PIF_DEST + 8, 8, RegAccess::RW, 0, ~0ull, pif, set_pif},
        {"KIF_STATUS", k + PKTZ_PIF_STATUS, 8, RegAccess::RO, 0, 0, status},
        {"KIF_STATUS_HI", k + PKTZ_PIF_STATUS_HI, 8, RegAccess::RO, 0, 0, zero}};
#undef PKTZ_CNT_ROW_
#undef PKTZ_KIF_CNT_ROW_
    return table;
}

// ---- helpers (mu_ held) ----

void Packetizer::guest_error_locked(const std::string &msg)
{
    host_.guest_error(msg); // host ops never call back into the core
}

bool Packetizer::setup_complete(const PacketizerState::Pif &p)
{
    for (unsigned r = 0; r < 3; r++) {
        if ((p.written[r] & kNeeded[r]) != kNeeded[r]) return false;
    }
    return true;
}

// The KIF counts in its own table, PIFs in the seed's.
void Packetizer::count_locked(unsigned pif, unsigned pktz_index, unsigned kif_index)
{
    if (pif == UNIMEM_KIF)
        s_.kif_counters[kif_index]++;
    else
        s_.counters[pktz_index]++;
}

bool Packetizer::kif_absent(uint64_t offset) const
{
    const uint64_t t = PKTZ_TIF_OFFSET;
    return !kif_ && ((offset >= t + PKTZ_TIF_KIF_PIDT &&
                      offset < t + PKTZ_TIF_KIF_COUNTERS + 8 * PKTZ_KIF_CNT_COUNT) ||
                     offset >= PKTZ_KIF_OFFSET);
}

void Packetizer::fail_locked(unsigned pif)
{
    PacketizerState::Pif &p = s_.pifs[pif];
    p.waiting = false;
    p.status = (p.status & PKTZ_ST_OVERWR_BUF) | PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR;
    count_locked(pif, PKTZ_CNT_INDEX_NACKED, PKTZ_KIF_CNT_INDEX_NACKED);
    s_.fabric_errors++;
}

// CLR_REQ: bit n of `mask` clears PIF n's request; `kif`: KIF_CLR_REQ, the KIF's.
void Packetizer::clear_request_locked(uint64_t mask, bool kif)
{
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        if (i == UNIMEM_KIF ? kif : (mask & (1ull << i)) != 0) {
            PacketizerState::Pif &p = s_.pifs[i];
            p.written = {};
            p.status = 0;
            p.waiting = false;
            seq_[i]++; // a late acknowledgement is now stale
        }
    }
}

// A store to half `reg` (0..5) of PIF `pif`'s registers; `merged` is its new value.
void Packetizer::write_pif_locked(unsigned pif, unsigned reg, uint64_t merged, Ctx &ctx)
{
    PacketizerState::Pif &p = s_.pifs[pif];
    if (p.waiting) {
        // Sec. 5.2.4: one hardware buffer per PIF; the write is lost, OVERWR_BUF records it.
        p.status |= PKTZ_ST_OVERWR_BUF;
        s_.overwrites++;
        guest_error_locked(if_name(pif) + " written while a packet is pending (OVERWR_BUF)");
        return;
    }
    p.regs[reg] = merged;
    const unsigned first = (reg & 1) * 8 + unsigned(ctx.offset & 7);
    p.written[reg / 2] |= uint16_t(((1u << ctx.size) - 1) << first);
    if (!setup_complete(p)) return;

    // Third write: the PIF setup is complete (sec. 5.2.3).
    p.written = {};
    const uint64_t dest = p.regs[PKTZ_PIF_DEST / 8] & PKTZ_DEST_MASK;
    const bool kif = pif == UNIMEM_KIF;
    if (kif ? !(s_.kif_conf & 1) : !(s_.pid_conf & (1ull << pif))) {
        // Table 4: with the PID_CONF bit clear a PIF setup initiates no packet (KIF: KIF_CONF).
        p.status = 0;
        count_locked(pif, PKTZ_CNT_INDEX_NOPID, PKTZ_KIF_CNT_INDEX_NOPID);
        guest_error_locked(if_name(pif) + (kif ? ": KIF_CONF clear" : ": PID_CONF bit clear") +
                           ", no packet initiated");
        return;
    }
    // A PIF reaches the MIFs of the BASE_DEST window; the KIF also the KIF page next to it.
    unsigned mif = PKTZ_DEST_MIF(dest);
    if (kif && PKTZ_DEST_IS_KIF(dest, s_.base_dest)) {
        mif = UNIMEM_KIF;
    } else if ((dest & PKTZ_BASE_DEST_MASK) != s_.base_dest) {
        p.status = PKTZ_ST_ILLEGAL;
        count_locked(pif, PKTZ_CNT_INDEX_ILLEGAL, PKTZ_KIF_CNT_INDEX_ILLEGAL);
        guest_error_locked(if_name(pif) + ": destination " + hex(dest) + " outside BASE_DEST window " +
                           hex(s_.base_dest) + (kif ? " and not a KIF page" : "") + " (ILLEGAL)");
        return;
    }
    // PID from the PIDT (KIF: KIF_PIDT) only
    ctx.words[0] = (p.regs[0] & ~PKTZ_PID_MASK) | (kif ? s_.kif_pidt : s_.pidt[pif]);
    ctx.words[1] = p.regs[1];
    ctx.words[2] = p.regs[2];
    ctx.words[3] = p.regs[3];
    p.status = PKTZ_ST_PEND;
    p.waiting = true;
    ctx.send = true;
    ctx.pif = pif;
    ctx.mif = mif;
    ctx.dest = dest;
    ctx.tag = pktz_tag(pif, ++seq_[pif]);
    count_locked(pif, PKTZ_CNT_INDEX_SENT, PKTZ_KIF_CNT_INDEX_SENT);
}

// ---- public interface ----

Status Packetizer::region_read(uint64_t offset, unsigned size, uint64_t *value)
{
    *value = 0;
    if (host_.port()) rk_fabric_port_poll(host_.port()); // before the lock: it may complete a PIF
    if (size == 0 || (offset & (size - 1))) {
        host_.guest_error(std::to_string(size) + "-byte load at " + hex(offset) +
                          " is not aligned (decode error, as on the bus)");
        return RK_DECODE_ERROR;
    }
    *value = read(offset, size);
    return RK_OK;
}

Status Packetizer::region_write(uint64_t offset, uint64_t value, unsigned size)
{
    if (size == 0 || (offset & (size - 1))) {
        host_.guest_error(std::to_string(size) + "-byte store at " + hex(offset) +
                          " is not aligned (decode error, as on the bus)");
        return RK_DECODE_ERROR;
    }
    write(offset, value, size);
    return RK_OK;
}

void Packetizer::reset()
{
    std::lock_guard lk(mu_);
    s_ = PacketizerState{};
    for (auto &q : seq_)
        q++; // outstanding acknowledgements become stale
}

uint32_t Packetizer::status(unsigned pif) const
{
    std::lock_guard lk(mu_);
    return pif < UNIMEM_IF_TOTAL ? s_.pifs[pif].status : 0;
}

PacketizerCounters Packetizer::counters() const
{
    std::lock_guard lk(mu_);
    PacketizerCounters c;
#define PKTZ_CNT_COPY_(N, n, d) c.n = s_.counters[PKTZ_CNT_INDEX_##N];
    PKTZ_COUNTER_TABLE(PKTZ_CNT_COPY_)
#undef PKTZ_CNT_COPY_
    c.fabric_errors = s_.fabric_errors;
    c.overwrites = s_.overwrites;
    c.stale_completions = s_.stale_completions;
    c.bad_access = s_.bad_access;
    c.kif = s_.kif_counters;
    return c;
}

uint64_t Packetizer::read(uint64_t offset, unsigned size)
{
    Ctx ctx;
    ctx.offset = offset;
    ctx.size = size;
    uint64_t v = 0;
    std::lock_guard lk(mu_);
    if (kif_absent(offset) || bank_.read(*this, offset, size, ctx, v) != RegResult::Ok) {
        s_.bad_access++;
        guest_error_locked("load from unmapped offset " + hex(offset) + " (reads as 0)");
        return 0;
    }
    return v;
}

void Packetizer::write(uint64_t offset, uint64_t value, unsigned size)
{
    if (size == 0 || size > 8 || (offset & 7) + size > 8) {
        host_.guest_error("unsupported " + std::to_string(size) + "-byte store at " + hex(offset));
        return;
    }
    Ctx ctx;
    ctx.offset = offset;
    ctx.size = size;
    {
        std::lock_guard lk(mu_);
        if (kif_absent(offset) || bank_.write(*this, offset, value, size, ctx) != RegResult::Ok) {
            s_.bad_access++;
            guest_error_locked("store of " + hex(value) + " to " + hex(offset) + " (" +
                               bank_.describe(offset) + ") ignored (read-only or unmapped)");
            return;
        }
    }
    if (!ctx.send) return;
    if (transmit_) {
        transmit_(ctx.pif, ctx.tag, ctx.dest, ctx.mif, ctx.words);
    } else {
        complete(ctx.tag, RK_UNREACHABLE);
    }
}

void Packetizer::complete(uint64_t tag, Status st)
{
    const unsigned pif = unsigned(tag >> 56);
    std::lock_guard lk(mu_);
    if (pif >= UNIMEM_IF_TOTAL || !s_.pifs[pif].waiting || seq_[pif] != uint32_t(tag)) {
        s_.stale_completions++;
        return;
    }
    PacketizerState::Pif &p = s_.pifs[pif];
    const uint32_t keep = p.status & PKTZ_ST_OVERWR_BUF;
    if (st == RK_OK) {
        p.waiting = false;
        p.status = keep | PKTZ_ST_ACK;
        count_locked(pif, PKTZ_CNT_INDEX_ACKED, PKTZ_KIF_CNT_INDEX_ACKED);
    } else if (st == RK_NACK) {
        p.waiting = false;
        p.status = keep | PKTZ_ST_NACK;
        count_locked(pif, PKTZ_CNT_INDEX_NACKED, PKTZ_KIF_CNT_INDEX_NACKED);
    } else {
        fail_locked(pif);
    }
}

void Packetizer::serve_reply(const rkf_frame_hdr &h)
{
    answered(h.tag, h.status == RKF_ST_OK ? RK_OK : h.status == RKF_ST_REFUSED ? RK_NACK : RK_UNREACHABLE);
}

void Packetizer::fail_all_pending()
{
    std::lock_guard lk(mu_);
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        if (s_.pifs[i].waiting) {
            seq_[i]++;
            fail_locked(i);
        }
    }
}

// ---- migration ----

PacketizerState Packetizer::save() const
{
    std::lock_guard lk(mu_);
    return s_;
}

void Packetizer::save(StateOut &out) const
{
    out.put(save());
}

bool Packetizer::load(StateIn &in, std::string *why)
{
    PacketizerState st;
    in.get(st);
    if (!in.finish()) {
        if (why) *why = in.why();
        return false;
    }
    return load(st, why);
}

// A PIF state the device can reach (see the pipeline in packetizer.h): nullptr, or why not.
const char *Packetizer::invalid_pif(const PacketizerState::Pif &p)
{
    const uint32_t s = p.status;
    const bool pend = s & PKTZ_ST_PEND, ack = s & PKTZ_ST_ACK, nack = s & PKTZ_ST_NACK;
    if (s & ~kStatusBits) return "status: unknown bits";
    if (p.waiting != pend) return "waiting: differs from status PEND";
    if (ack && nack) return "status: ACK and NACK";
    if ((s & PKTZ_ST_FABRIC_ERR) && !nack) return "status: FABRIC_ERR without NACK";
    if (pend && (s & (PKTZ_ST_ILLEGAL | PKTZ_ST_ACK | PKTZ_ST_NACK))) return "status: PEND with a result";
    if ((s & PKTZ_ST_ILLEGAL) && s != PKTZ_ST_ILLEGAL) return "status: ILLEGAL with other bits";
    if ((s & PKTZ_ST_OVERWR_BUF) && !(pend || ack || nack)) return "status: OVERWR_BUF without a packet";
    if (p.waiting && (p.written[0] | p.written[1] | p.written[2]))
        return "written: bytes written while waiting (they are dropped)";
    if (setup_complete(p)) return "written: a complete setup (it is sent at once)";
    return nullptr;
}

bool Packetizer::load(const PacketizerState &st, std::string *why)
{
    auto refuse = [why](const std::string &msg) {
        if (why) *why = msg;
        return false;
    };
    if (st.base_dest & ~PKTZ_BASE_DEST_MASK)
        return refuse("base_dest: " + hex(st.base_dest) + " outside BASE_DEST's bits");
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        if (st.pidt[i] & ~PKTZ_PID_MASK)
            return refuse("pidt[" + std::to_string(i) + "]: " + hex(st.pidt[i]) + " wider than a PID");
    }
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        if (const char *bad = invalid_pif(st.pifs[i]))
            return refuse("pifs[" + std::to_string(i) + "]." + bad);
    }
    if (st.kif_pidt & ~PKTZ_PID_MASK) return refuse("kif_pidt: " + hex(st.kif_pidt) + " wider than a PID");
    if (st.kif_conf & ~1ull)
        return refuse("kif_conf: " + hex(st.kif_conf) + " has bits KIF_CONF does not have");
    if (!kif_) {
        // a device without the KIF: its state must be the reset one
        const PacketizerState::Pif &k = st.pifs[UNIMEM_KIF];
        const bool idle = k.status == 0 && !k.waiting && !(k.written[0] | k.written[1] | k.written[2]) &&
                          k.regs == decltype(k.regs){};
        if (!idle || st.kif_pidt || st.kif_conf)
            return refuse(std::string(!idle ? "pifs[" + std::to_string(UNIMEM_KIF) + "]" : "kif_conf") +
                          ": a KIF in use, and this packetizer has none (property kif=off)");
    }
    std::lock_guard lk(mu_);
    s_ = st;
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        seq_[i]++; // tags sent before the load are stale
        // The acknowledgement went to the saved machine: complete as a fabric failure.
        if (s_.pifs[i].waiting) fail_locked(i);
    }
    return true;
}

} // namespace rackemu::unimem
