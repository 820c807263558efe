// SPDX-License-Identifier: MIT
// Unimem vmbox core; see vmbox.h and docs/unimem.md.
#include "vmbox.h"

#include "format.h"
#include "rk_fabric_port.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace rackemu::unimem {

Vmbox::Vmbox(Host host, unsigned depth, bool burst_known_issue, bool kif)
    : host_(host), depth_(std::clamp(depth, 1u, 65536u)), burst_known_issue_(burst_known_issue), kif_(kif)
{
    for (auto &f : fifos_)
        f.slots.assign(depth_, 0);
}

// ---- the register table (Table 3 is not in the source text: these are rackemu's) ----

std::span<const Reg<Vmbox, Vmbox::Ctx>> Vmbox::reg_table()
{
    using R = Reg<Vmbox, Ctx>;
    constexpr uint32_t c = VMBOX_CTRL_OFFSET;
    auto mif_count = [](Vmbox &d, const R &, unsigned i, Ctx &) -> uint64_t { return d.fifos_[i].count; };
    auto depth = [](Vmbox &d, const R &, unsigned, Ctx &) -> uint64_t { return d.depth_; };
    auto irq_status = [](Vmbox &d, const R &, unsigned, Ctx &) { return d.nonempty_locked() & d.irq_enable; };
    auto irq_enable = [](Vmbox &d, const R &, unsigned, Ctx &) { return d.irq_enable; };
    auto set_irq_enable = [](Vmbox &d, const R &, unsigned, uint64_t merged, uint64_t, Ctx &) {
        d.irq_enable = merged;
    };
    auto nonempty = [](Vmbox &d, const R &, unsigned, Ctx &) { return d.nonempty_locked(); };
    auto zero = [](Vmbox &, const R &, unsigned, Ctx &) -> uint64_t { return 0; };
    auto flush = [](Vmbox &d, const R &, unsigned, uint64_t, uint64_t raw, Ctx &) { d.flush_locked(raw); };
    auto counter = [](Vmbox &d, const R &r, unsigned, Ctx &) {
        return d.cnt[(r.offset - VMBOX_CTRL_OFFSET - VMBOX_CTRL_COUNTERS) / 8];
    };
    // the KIF's rows (rackemu extension): decoded only on a device with the KIF
    auto caps = [](Vmbox &d, const R &, unsigned, Ctx &) -> uint64_t { return d.kif_ ? UNIMEM_CAP_KIF : 0; };
    auto kif_count = [](Vmbox &d, const R &, unsigned, Ctx &) -> uint64_t {
        return d.fifos_[UNIMEM_KIF].count;
    };
    auto kif_ctrl = [](Vmbox &d, const R &, unsigned, Ctx &) { return d.kif_ctrl; };
    auto set_kif_ctrl = [](Vmbox &d, const R &, unsigned, uint64_t merged, uint64_t, Ctx &) {
        d.kif_ctrl = merged;
    };
    auto kif_status = [](Vmbox &d, const R &, unsigned, Ctx &) -> uint64_t {
        const bool ne = d.fifos_[UNIMEM_KIF].count != 0;
        return (ne ? VMBOX_KIF_NONEMPTY : 0) |
               (ne && (d.kif_ctrl & VMBOX_KIF_IRQ_ENABLE) ? VMBOX_KIF_IRQ : 0);
    };
    auto kif_flush = [](Vmbox &d, const R &, unsigned, uint64_t, uint64_t raw, Ctx &) {
        if (raw & 1) d.drop_visible_locked(d.fifos_[UNIMEM_KIF]);
    };
    auto kif_counter = [](Vmbox &d, const R &r, unsigned, Ctx &) {
        return d.kif_cnt[(r.offset - VMBOX_CTRL_OFFSET - VMBOX_CTRL_KIF_COUNTERS) / 8];
    };
#define VMBOX_CNT_ROW_(N, n, d) \
    {#N, c + VMBOX_CTRL_COUNTERS + VMBOX_CNT_##N, 8, RegAccess::RO, 0, 0, counter},
#define VMBOX_KIF_CNT_ROW_(N, n, d) \
    {"KIF_" #N, c + VMBOX_CTRL_KIF_COUNTERS + VMBOX_KIF_CNT_##N, 8, RegAccess::RO, 0, 0, kif_counter},
    static const R table[] = {
        // MIF page n (Fig. 6): the FIFO window [0x00, 0x40) is decoded by fifo_access_locked()
        {"MIF_COUNT", VMBOX_MIF_COUNT, 8, RegAccess::RO, 0, 0, mif_count, nullptr, UNIMEM_IF_COUNT,
         UNIMEM_IF_PAGE_SIZE},
        // control page (rackemu extension)
        {"ID", c + VMBOX_CTRL_ID, 8, RegAccess::RO, VMBOX_ID_VALUE, 0},
        {"DEPTH", c + VMBOX_CTRL_DEPTH, 8, RegAccess::RO, 0, 0, depth},
        {"IRQ_STATUS", c + VMBOX_CTRL_IRQ_STATUS, 8, RegAccess::RO, 0, 0, irq_status},
        {"IRQ_ENABLE", c + VMBOX_CTRL_IRQ_ENABLE, 8, RegAccess::RW, 0, ~0ull, irq_enable, set_irq_enable},
        {"NONEMPTY", c + VMBOX_CTRL_NONEMPTY, 8, RegAccess::RO, 0, 0, nonempty},
        {"FLUSH", c + VMBOX_CTRL_FLUSH, 8, RegAccess::RW, 0, ~0ull, zero, flush}, // WC, reads 0
        VMBOX_COUNTER_TABLE(VMBOX_CNT_ROW_)
        // KIF (rackemu extension)
        {"CAPS", c + VMBOX_CTRL_CAPS, 8, RegAccess::RO, 0, 0, caps},
        {"KIF_CTRL", c + VMBOX_CTRL_KIF_CTRL, 8, RegAccess::RW, 0, VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE,
         kif_ctrl, set_kif_ctrl},
        {"KIF_STATUS", c + VMBOX_CTRL_KIF_STATUS, 8, RegAccess::RO, 0, 0, kif_status},
        {"KIF_FLUSH", c + VMBOX_CTRL_KIF_FLUSH, 8, RegAccess::RW, 0, ~0ull, zero, kif_flush}, // WC, reads 0
        VMBOX_KIF_COUNTER_TABLE(VMBOX_KIF_CNT_ROW_){"KIF_COUNT", VMBOX_KIF_OFFSET + VMBOX_MIF_COUNT, 8,
                                                    RegAccess::RO, 0, 0, kif_count}};
#undef VMBOX_CNT_ROW_
#undef VMBOX_KIF_CNT_ROW_
    return table;
}

// ---- helpers (mu_ held) ----

void Vmbox::guest_error_locked(const std::string &msg)
{
    bad_access++;
    host_.guest_error(msg); // host ops never call back into the core
}

// Behind every word the FIFO has: visible at once, or held with the words of a delivery whose
// answer is running (FIFO order: nothing overtakes them).
bool Vmbox::push_locked(unsigned mif, uint64_t word)
{
    Fifo &f = fifos_[mif];
    if (f.count + f.held == depth_) return false;
    f.slots[(f.head + f.count + f.held) % depth_] = word;
    if (f.holders)
        f.held++;
    else
        f.count++;
    if (mif == UNIMEM_KIF)
        kif_cnt[VMBOX_KIF_CNT_INDEX_ENQUEUED]++;
    else
        cnt[VMBOX_CNT_INDEX_ENQUEUED]++;
    return true;
}

bool Vmbox::kif_absent(uint64_t offset) const
{
    const uint64_t c = VMBOX_CTRL_OFFSET;
    return !kif_ && ((offset >= c + VMBOX_CTRL_KIF_CTRL &&
                      offset < c + VMBOX_CTRL_KIF_COUNTERS + 8 * VMBOX_KIF_CNT_COUNT) ||
                     (offset >= VMBOX_KIF_OFFSET && offset < VMBOX_KIF_OFFSET + UNIMEM_IF_PAGE_SIZE));
}

uint64_t Vmbox::nonempty_locked() const
{
    uint64_t m = 0;
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        if (fifos_[i].count) m |= 1ull << i;
    }
    return m;
}

bool Vmbox::level_locked() const
{
    const bool kif_irq = fifos_[UNIMEM_KIF].count && (kif_ctrl & VMBOX_KIF_IRQ_ENABLE);
    return (nonempty_locked() & irq_enable) != 0 || kif_irq;
}

// The one place that drives the arrival interrupt: after every change, under the lock.
void Vmbox::sync_irq_locked()
{
    const bool level = level_locked();
    if (level == reported_) return;
    reported_ = level;
    host_.set_irq(0, level);
}

// Empties what the guest sees; held words (their answer is running) stay, and appear after it.
void Vmbox::flush_locked(uint64_t mask)
{
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        if (mask & (1ull << i)) drop_visible_locked(fifos_[i]);
    }
}

void Vmbox::drop_visible_locked(Fifo &f)
{
    f.head = f.held ? (f.head + f.count) % depth_ : 0;
    f.count = 0;
}

// ---- public interface ----

bool Vmbox::irq_level(unsigned) const
{
    std::lock_guard lk(mu_);
    return level_locked();
}

unsigned Vmbox::fill(unsigned mif) const
{
    std::lock_guard lk(mu_);
    return mif < UNIMEM_IF_TOTAL ? fifos_[mif].count : 0;
}

VmboxCounters Vmbox::counters() const
{
    std::lock_guard lk(mu_);
    VmboxCounters c;
#define VMBOX_CNT_COPY_(N, n, d) c.n = cnt[VMBOX_CNT_INDEX_##N];
    VMBOX_COUNTER_TABLE(VMBOX_CNT_COPY_)
#undef VMBOX_CNT_COPY_
    c.kif = kif_cnt;
    c.empty_reads = empty_reads;
    c.bad_access = bad_access;
    return c;
}

void Vmbox::pause(bool on)
{
    std::lock_guard lk(mu_);
    paused_ = on;
}

void Vmbox::reset()
{
    std::lock_guard lk(mu_);
    for (auto &f : fifos_)
        f.head = f.count = f.held = 0; // held words too (f.holders: their publish still comes)
    static_cast<VmboxRegs &>(*this) = VmboxRegs{};
    sync_irq_locked();
    ready_.store(true, std::memory_order_release);
}

Status Vmbox::fifo_access_locked(unsigned mif, uint64_t reg, bool is_write, unsigned size, uint64_t &value)
{
    if (mif == UNIMEM_KIF && is_write) {
        guest_error_locked(
            "KIF: " + std::to_string(size) + "-byte store at " + hex(reg) +
            " refused (the KIF is filled by packetizer KIFs only; it is read with 64-bit loads)");
        return RK_SLAVE_ERROR;
    }
    if (size != 8 || (reg & 7)) {
        guest_error_locked("MIF " + std::to_string(mif) + ": " + std::to_string(size) + "-byte " +
                           (is_write
                                ? "store at " + hex(reg) + " refused (the FIFO takes aligned 64-bit stores)"
                                : "load at " + hex(reg) + " (the FIFO is read with aligned 64-bit loads)"));
        return RK_SLAVE_ERROR;
    }
    Fifo &f = fifos_[mif];
    if (is_write) {
        // Sec. 5.1.1: a write to a full FIFO is negatively acknowledged (AXI SLVERR).
        if (!push_locked(mif, value)) {
            cnt[VMBOX_CNT_INDEX_NACKS]++;
            return RK_NACK;
        }
    } else if (f.count == 0) {
        empty_reads++;
        value = VMBOX_EMPTY_PATTERN;
        return RK_OK;
    } else {
        value = f.slots[f.head];
        f.head = (f.head + 1) % depth_;
        f.count--;
        if (mif == UNIMEM_KIF)
            kif_cnt[VMBOX_KIF_CNT_INDEX_DEQUEUED]++;
        else
            cnt[VMBOX_CNT_INDEX_DEQUEUED]++;
    }
    sync_irq_locked();
    return RK_OK;
}

Status Vmbox::region_read(uint64_t offset, unsigned size, uint64_t *value)
{
    *value = 0;
    // before the lock: what the poll dispatches may deliver into this vmbox
    if (host_.port()) rk_fabric_port_poll(host_.port());
    if (size == 0 || (offset & (size - 1))) {
        host_.guest_error(std::to_string(size) + "-byte load at " + hex(offset) +
                          " is not aligned (decode error, as on the bus)");
        return RK_DECODE_ERROR;
    }
    return read(offset, size, *value);
}

Status Vmbox::region_write(uint64_t offset, uint64_t value, unsigned size)
{
    if (size == 0 || (offset & (size - 1))) {
        host_.guest_error(std::to_string(size) + "-byte store at " + hex(offset) +
                          " is not aligned (decode error, as on the bus)");
        return RK_DECODE_ERROR;
    }
    return write(offset, value, size);
}

Status Vmbox::read(uint64_t offset, unsigned size, uint64_t &value)
{
    value = 0;
    const uint64_t page = offset >> UNIMEM_IF_PAGE_SHIFT;
    const uint64_t reg = offset & (UNIMEM_IF_PAGE_SIZE - 1);
    std::lock_guard lk(mu_);
    const bool kif_data =
        kif_ && offset >= VMBOX_KIF_OFFSET && offset < VMBOX_KIF_OFFSET + VMBOX_MIF_DATA_SPAN;
    if ((page < UNIMEM_IF_COUNT && reg < VMBOX_MIF_DATA_SPAN) || kif_data) {
        const Status st = fifo_access_locked(kif_data ? UNIMEM_KIF : unsigned(page), reg, false, size, value);
        if (st != RK_OK) value = 0;
        return st;
    }
    // Registers are read at their own offset (any access size: the low bytes).
    Ctx ctx;
    if ((offset & 7) || kif_absent(offset) || bank_.read(*this, offset, size, ctx, value) != RegResult::Ok) {
        value = 0;
        guest_error_locked("load from unmapped offset " + hex(offset) + " (reads as 0)");
    }
    return RK_OK;
}

Status Vmbox::write(uint64_t offset, uint64_t value, unsigned size)
{
    const uint64_t page = offset >> UNIMEM_IF_PAGE_SHIFT;
    const uint64_t reg = offset & (UNIMEM_IF_PAGE_SIZE - 1);
    std::lock_guard lk(mu_);
    if (page < UNIMEM_IF_COUNT && reg < VMBOX_MIF_DATA_SPAN)
        return fifo_access_locked(unsigned(page), reg, true, size, value);
    if (kif_ && offset >= VMBOX_KIF_OFFSET && offset < VMBOX_KIF_OFFSET + VMBOX_MIF_DATA_SPAN)
        return fifo_access_locked(UNIMEM_KIF, reg, true, size, value);
    // Registers take aligned 64-bit stores only.
    Ctx ctx;
    if (size != 8 || (offset & 7) || kif_absent(offset) ||
        bank_.write(*this, offset, value, size, ctx) != RegResult::Ok) {
        guest_error_locked(std::to_string(size) + "-byte store of " + hex(value) + " to " + hex(offset) +
                           " (" + bank_.describe(offset) + ") ignored (read-only or unmapped register)");
        return RK_OK;
    }
    sync_irq_locked();
    return RK_OK;
}

// Into the KIF (mu_ held): from a KIF only, while enabled, all or nothing.
Status Vmbox::kif_deliver_locked(unsigned src_if, const uint64_t *words, unsigned nwords)
{
    if (!kif_) {
        guest_error_locked("delivery into the KIF refused: this vmbox has no KIF (property kif=off)");
        return RK_NACK;
    }
    if (src_if != UNIMEM_KIF) {
        // Only a node's kernel sends from its KIF: a PIF's packet here would be forged mailbox traffic.
        kif_cnt[VMBOX_KIF_CNT_INDEX_REFUSED]++;
        guest_error_locked("delivery into the KIF from packetizer interface " + std::to_string(src_if) +
                           " refused (only a KIF may send into the KIF)");
        return RK_NACK;
    }
    if (!(kif_ctrl & VMBOX_KIF_ENABLE)) {
        kif_cnt[VMBOX_KIF_CNT_INDEX_REFUSED]++; // no kernel listens (KIF_CTRL.ENABLE clear)
        return RK_NACK;
    }
    if (depth_ - fifos_[UNIMEM_KIF].count - fifos_[UNIMEM_KIF].held < nwords) {
        kif_cnt[VMBOX_KIF_CNT_INDEX_NACKS]++;
        return RK_NACK;
    }
    for (unsigned i = 0; i < nwords; i++)
        push_locked(UNIMEM_KIF, words[i]);
    sync_irq_locked();
    return RK_OK;
}

// mu_ held, mif and src_if valid, nwords > 0.
Status Vmbox::take_locked(unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords)
{
    if (paused_) return RK_NACK; // a snapshot is being taken: the sender may retry
    if (mif == UNIMEM_KIF) return kif_deliver_locked(src_if, words, nwords);
    const unsigned room = depth_ - fifos_[mif].count - fifos_[mif].held;
    if (room == 0 || (room < nwords && !burst_known_issue_)) {
        cnt[VMBOX_CNT_INDEX_NACKS]++;
        return RK_NACK;
    }
    const unsigned n = std::min(room, nwords);
    for (unsigned i = 0; i < n; i++)
        push_locked(mif, words[i]);
    cnt[VMBOX_CNT_INDEX_TRUNCATED] += nwords - n; // sec. 5.1.2: dropped, yet acknowledged
    sync_irq_locked();
    return RK_OK;
}

Status Vmbox::deliver(unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords)
{
    if (mif >= UNIMEM_IF_TOTAL || src_if >= UNIMEM_IF_TOTAL || nwords == 0) return RK_NACK;
    std::lock_guard lk(mu_);
    return take_locked(mif, src_if, words, nwords);
}

// The last holder of a FIFO's held words makes them visible (and raises the line).
void Vmbox::publish(unsigned mif)
{
    std::lock_guard lk(mu_);
    Fifo &f = fifos_[mif];
    if (--f.holders) return;
    f.count += f.held;
    f.held = 0;
    sync_irq_locked();
}

Status Vmbox::deliver(unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords,
                      const Answer &answer)
{
    if (mif >= UNIMEM_IF_TOTAL || src_if >= UNIMEM_IF_TOTAL || nwords == 0) {
        answer(RK_NACK);
        return RK_NACK;
    }
    Status st;
    {
        std::lock_guard lk(mu_);
        fifos_[mif].holders++; // what take_locked pushes is held
        st = take_locked(mif, src_if, words, nwords);
    }
    answer(st);
    publish(mif); // also when refused: the holder's count goes back
    return st;
}

// Validates a delivery frame: 0 when it is one, else the reply status (logged), or -1.
int Vmbox::check_frame(const rkf_frame_hdr &h, const void *payload, rkf_mbox_deliver &d)
{
    const size_t hdr = offsetof(rkf_mbox_deliver, words);
    std::memcpy(&d, payload, std::min<size_t>(h.len, sizeof d));
    if (h.type != RKF_T_REQ || h.op != RKF_OP_MBOX_DELIVER || h.len < hdr + 8 || d.nwords < 1 ||
        d.nwords > 8 || h.len != hdr + d.nwords * 8 || d.mif >= UNIMEM_IF_TOTAL ||
        d.src_if >= UNIMEM_IF_TOTAL) {
        host_.guest_error("malformed delivery from node " + std::to_string(h.src) + " (op " +
                          std::to_string(h.op) + ", " + std::to_string(h.len) + " bytes) refused");
        return h.type == RKF_T_REQ ? int(RKF_ST_BAD_FRAME) : -1;
    }
    return 0;
}

int Vmbox::serve_frame(const rkf_frame_hdr &h, const void *payload, const FrameAnswer &answer)
{
    rkf_mbox_deliver d{};
    int reply = check_frame(h, payload, d);
    if (reply) {
        answer(reply);
        return reply;
    }
    deliver(d.mif, d.src_if, d.words, d.nwords, [&](Status s) {
        reply = s == RK_OK ? int(RKF_ST_OK) : int(RKF_ST_REFUSED);
        answer(reply);
    });
    return reply;
}

int Vmbox::serve_frame(const rkf_frame_hdr &h, const void *payload)
{
    rkf_mbox_deliver d{};
    if (const int reply = check_frame(h, payload, d)) return reply;
    return deliver(d.mif, d.src_if, d.words, d.nwords) == RK_OK ? int(RKF_ST_OK) : int(RKF_ST_REFUSED);
}

// ---- migration ----

VmboxState Vmbox::save() const
{
    std::lock_guard lk(mu_);
    VmboxState st;
    st.depth = depth_;
    st.regs = *this;
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        const Fifo &f = fifos_[i];
        // held words included: their delivery is acknowledged (or about to be)
        st.fifos[i].resize(f.count + f.held);
        for (unsigned k = 0; k < f.count + f.held; k++)
            st.fifos[i][k] = f.slots[(f.head + k) % depth_];
    }
    return st;
}

void Vmbox::save(StateOut &out) const
{
    out.put(save());
}

bool Vmbox::load(StateIn &in, std::string *why)
{
    VmboxState st;
    in.get(st);
    if (!in.finish()) {
        if (why) *why = in.why();
        return false;
    }
    return load(st, why);
}

bool Vmbox::load(const VmboxState &st, std::string *why)
{
    auto refuse = [why](const std::string &msg) {
        if (why) *why = msg;
        return false;
    };
    if (st.depth != depth_)
        return refuse("depth: " + std::to_string(st.depth) + " words per FIFO, the device has " +
                      std::to_string(depth_));
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        if (st.fifos[i].size() > depth_)
            return refuse("fifos[" + std::to_string(i) + "]: " + std::to_string(st.fifos[i].size()) +
                          " words, the FIFO holds " + std::to_string(depth_));
    }
    if (st.regs.kif_ctrl & ~uint64_t(VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE))
        return refuse("regs.kif_ctrl: " + hex(st.regs.kif_ctrl) + " has bits KIF_CTRL does not have");
    if (!kif_ && (st.regs.kif_ctrl || !st.fifos[UNIMEM_KIF].empty())) // a KIF this device lacks
        return refuse(
            (st.regs.kif_ctrl ? std::string("regs.kif_ctrl") : "fifos[" + std::to_string(UNIMEM_KIF) + "]") +
            ": a KIF in use, and this vmbox has none (property kif=off)");
    std::lock_guard lk(mu_);
    static_cast<VmboxRegs &>(*this) = st.regs;
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        Fifo &f = fifos_[i];
        f.head = f.held = 0;
        f.count = unsigned(st.fifos[i].size());
        std::copy(st.fifos[i].begin(), st.fifos[i].end(), f.slots.begin());
    }
    sync_irq_locked();
    return true;
}

} // namespace rackemu::unimem
