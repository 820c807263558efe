// SPDX-License-Identifier: MIT
// Xilinx AXI CDMA core; see cdma.h, rackemu/xilinx_cdma_regs.h and PG034.
#include "cdma.h"

#include "format.h"

#include <algorithm>

namespace rackemu::unimem {

namespace {

constexpr uint64_t kDescMask64 = ~uint64_t(XCDMA_DESC_ALIGN - 1);
constexpr uint32_t kFrozenWhileBusy = XCDMA_CR_SGMODE | XCDMA_CR_KEYHOLE_READ | XCDMA_CR_KEYHOLE_WRITE;

uint32_t le32(const uint8_t *p)
{
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t lohi(uint32_t lo, uint32_t hi)
{
    return uint64_t(hi) << 32 | lo;
}
uint64_t with_lo(uint64_t v, uint32_t lo)
{
    return (v & 0xffffffff00000000ull) | lo;
}
uint64_t with_hi(uint64_t v, uint32_t hi)
{
    return (v & 0xffffffffull) | uint64_t(hi) << 32;
}
// The 64-bit field `v` with the half that register `r` shows (high for *_MSB) replaced by `half`.
template <class R> uint64_t merge_half(const R &r, uint64_t v, uint32_t half)
{
    return r.offset % 8 ? with_hi(v, half) : with_lo(v, half);
}

CdmaConfig sane(CdmaConfig c)
{
    c.data_width = std::clamp(c.data_width, 1u, 4096u);
    c.chunk = std::clamp<uint64_t>(c.chunk, c.data_width, 64ull << 20);
    c.chunk -= c.chunk % c.data_width; // key-hole beats never straddle two chunks
    c.max_descriptors = std::max<uint64_t>(c.max_descriptors, 1);
    c.cyclic_slice = std::max<uint64_t>(c.cyclic_slice, 1);
    return c;
}

} // namespace

Cdma::Cdma(Host host, std::function<void()> kick, CdmaConfig config)
    : host_(host), kick_(std::move(kick)), cfg_(sane(config))
{
    buf_.resize(cfg_.chunk);
}

// ---- helpers (mu_ held where the name says so) ----

void Cdma::note_locked(Pending &p, std::string msg)
{
    ctr_.guest_errors++;
    p.errors.push_back(std::move(msg));
}

// After every change: recompute the interrupt line, log, and wake the engine; no lock held.
void Cdma::finish(Pending &p)
{
    update_irq();
    for (const auto &m : p.errors)
        host_.guest_error(m);
    if (p.kick && kick_) kick_();
}

uint32_t Cdma::threshold_locked() const
{
    const uint32_t t = (s_.cr & XCDMA_CR_IRQTHRESHOLD_MASK) >> XCDMA_CR_IRQTHRESHOLD_SHIFT;
    return t ? t : 1;
}

// cdma_introut = (IOC_Irq && IOC_IrqEn) || (Dly_Irq && Dly_IrqEn) || (Err_Irq && Err_IrqEn); the
// CDMASR interrupt bits sit at the same positions as their CDMACR enables.
bool Cdma::level_locked() const
{
    return (s_.sr & s_.cr & XCDMA_SR_IRQ_ALL) != 0;
}

// The one place that drives the line: the level is computed and handed to the host under mu_,
// so calls from a vCPU and the engine thread reach the host in the order the level changed and
// the last call carries the current level (host.h: set_irq never calls back into the core).
void Cdma::update_irq()
{
    std::lock_guard lk(mu_);
    const bool level = level_locked();
    if (level == reported_) return;
    if (level) ctr_.irqs_raised++;
    reported_ = level;
    host_.set_irq(0, level);
}

bool Cdma::irq_level() const
{
    std::lock_guard lk(mu_);
    return level_locked();
}

bool Cdma::busy() const
{
    std::lock_guard lk(mu_);
    return !idle_locked();
}

CdmaCounters Cdma::counters() const
{
    std::lock_guard lk(mu_);
    return ctr_;
}

CdmaState Cdma::save() const
{
    std::lock_guard lk(mu_);
    return s_;
}

void Cdma::pause(bool on)
{
    if (on) {
        {
            std::lock_guard lk(mu_);
            paused_ = true;
        }
        // A running process() returns at its next boundary; wait for it.
        std::lock_guard pl(process_mu_);
        return;
    }
    bool work;
    {
        std::lock_guard lk(mu_);
        if (!paused_) return;
        paused_ = false;
        work = s_.phase == CdmaPhase::Simple || s_.phase == CdmaPhase::Fetch;
    }
    if (work && kick_) kick_();
}

// PG034 CDMACR.Reset: every register returns to its reset value, pending work is dropped.
void Cdma::soft_reset_locked()
{
    if (!idle_locked()) ctr_.aborted++;
    s_ = CdmaState{};
    ctr_.soft_resets++;
}

// PG034: on any error the engine halts (CDMASR.Idle = 1) and only a reset restarts it.
void Cdma::halt_locked(uint32_t sr_errors)
{
    s_.sr |= sr_errors | XCDMA_SR_ERR_IRQ | XCDMA_SR_IDLE;
    s_.phase = CdmaPhase::Halted;
    s_.resume_valid = false;
    ctr_.dma_int_errors += (sr_errors & XCDMA_SR_DMAINTERR) != 0;
    ctr_.dma_slv_errors += (sr_errors & XCDMA_SR_DMASLVERR) != 0;
    ctr_.dma_dec_errors += (sr_errors & XCDMA_SR_DMADECERR) != 0;
    ctr_.sg_int_errors += (sr_errors & XCDMA_SR_SGINTERR) != 0;
    ctr_.sg_slv_errors += (sr_errors & XCDMA_SR_SGSLVERR) != 0;
    ctr_.sg_dec_errors += (sr_errors & XCDMA_SR_SGDECERR) != 0;
}

void Cdma::reset()
{
    {
        std::lock_guard lk(mu_);
        s_ = CdmaState{};
        ctr_ = CdmaCounters{};
        epoch_++; // a running process() finds its state gone and returns
        in_process_ = false;
    }
    update_irq();
}

void Cdma::save(StateOut &out) const
{
    out.put(save());
}

bool Cdma::load(StateIn &in, std::string *why)
{
    CdmaState st;
    in.get(st);
    if (!in.finish()) return false; // the reader says which field
    return load(st, why);
}

bool Cdma::load(const CdmaState &st, std::string *why)
{
    const uint32_t thr = (st.cr & XCDMA_CR_IRQTHRESHOLD_MASK) >> XCDMA_CR_IRQTHRESHOLD_SHIFT;
    const bool sg = (st.cr & XCDMA_CR_SGMODE) != 0;
    const char *bad = nullptr;
    if (st.phase > CdmaPhase::Halted)
        bad = "phase: not an engine state";
    else if (st.irq_count == 0 || st.irq_count > 0xff)
        bad = "irq_count: out of range 1..255";
    else if (thr == 0)
        bad = "cr: IRQThreshold 0";
    else if (st.btt & ~XCDMA_BTT_MASK)
        bad = "btt: above BTT [25:0]";
    else if (st.curdesc & ~kDescMask64)
        bad = "curdesc: not 64-byte aligned";
    else if (st.taildesc & ~kDescMask64)
        bad = "taildesc: not 64-byte aligned";
    else if (st.resume_next & ~kDescMask64)
        bad = "resume_next: not 64-byte aligned";
    else if (st.phase == CdmaPhase::Simple && sg)
        bad = "phase: a simple transfer with cr.SGMode set";
    else if (!sg && st.phase >= CdmaPhase::Fetch && st.phase <= CdmaPhase::WriteBack)
        bad = "phase: a descriptor chain with cr.SGMode clear";
    if (bad) {
        if (why) *why = bad;
        return false;
    }
    CdmaState n = st;
    bool in_flight = false, soft_reset = false;
    if (n.cr & XCDMA_CR_RESET) {
        soft_reset = true; // pending at save: it completes now
    } else {
        n.cr = (n.cr & XCDMA_CR_WRITABLE) | XCDMA_CR_TAILPNTREN;
        n.sr = (n.sr & (XCDMA_SR_ERR_ALL | XCDMA_SR_IRQ_ALL)) | XCDMA_SR_SGINCLD;
        in_flight = n.phase != CdmaPhase::Idle && n.phase != CdmaPhase::Halted;
        if (n.phase == CdmaPhase::Halted || in_flight) n.resume_valid = false;
        if (!in_flight) n.sr |= XCDMA_SR_IDLE;
    }
    Pending p;
    {
        std::lock_guard lk(mu_);
        epoch_++; // a running process() finds its state gone and returns
        in_process_ = false;
        if (soft_reset) {
            s_ = CdmaState{};
            ctr_.soft_resets++;
        } else {
            s_ = n;
            if (in_flight) {
                note_locked(p, std::string(sg ? "SG chain (descriptor at " + hex(n.curdesc) + ")"
                                              : "simple transfer of " + std::to_string(n.btt) + " bytes") +
                                   " was in flight when the state was saved: DMASlvErr, engine halted");
                halt_locked(XCDMA_SR_DMASLVERR);
            }
        }
    }
    finish(p);
    return true;
}

// ---- register interface ----

bool Cdma::valid_access(uint64_t offset, unsigned size, const std::string &what)
{
    if ((size == 4 || size == 8) && offset % size == 0 && offset < RACKEMU_CDMA_SIZE) return true;
    Pending p;
    {
        std::lock_guard lk(mu_);
        note_locked(p, std::to_string(size) + "-byte " + what + " at " + hex(offset) +
                           " ignored (32-bit registers; 8-byte accesses must be 8-aligned)");
    }
    finish(p);
    return false;
}

uint64_t Cdma::read(uint64_t offset, unsigned size)
{
    if (!valid_access(offset, size, "load")) return 0;
    Pending p;
    uint64_t v;
    {
        std::lock_guard lk(mu_);
        v = read32_locked(offset, p);
        if (size == 8) v |= uint64_t(read32_locked(offset + 4, p)) << 32;
    }
    finish(p);
    return v;
}

// PG034 Table 2-1. All state lives in s_ (the migratable CdmaState): every register is hooked.
// 32-bit registers; an 8-byte access is two of them, low half first (Cdma::read/write). The write
// hooks take the raw value: they apply the writable mask themselves and log the bits they drop.
std::span<const Reg<Cdma, Cdma::Pending>> Cdma::reg_table()
{
    using R = Reg<Cdma, Pending>;
    // The 32-bit half of a 64-bit state field that a *_MSB (offset 4 mod 8) or low register shows.
    static constexpr auto half = [](const R &r, uint64_t v) -> uint64_t {
        return uint32_t(r.offset % 8 ? v >> 32 : v);
    };
    auto cr = [](Cdma &d, const R &, unsigned, Pending &) -> uint64_t { return d.s_.cr; };
    // IRQDelaySts reads 0: no time elapses in the model (see cdma.h)
    auto sr = [](Cdma &d, const R &, unsigned, Pending &) -> uint64_t {
        return (d.s_.sr & 0xffffu) | (d.s_.irq_count & 0xffu) << XCDMA_SR_IRQTHRESHOLDSTS_SHIFT;
    };
    auto curdesc = [](Cdma &d, const R &r, unsigned, Pending &) { return half(r, d.s_.curdesc); };
    auto taildesc = [](Cdma &d, const R &r, unsigned, Pending &) { return half(r, d.s_.taildesc); };
    auto sa = [](Cdma &d, const R &r, unsigned, Pending &) { return half(r, d.s_.sa); };
    auto da = [](Cdma &d, const R &r, unsigned, Pending &) { return half(r, d.s_.da); };
    auto btt = [](Cdma &d, const R &, unsigned, Pending &) -> uint64_t { return d.s_.btt; };
    auto write_cr = [](Cdma &d, const R &, unsigned, uint64_t, uint64_t raw, Pending &p) {
        d.write_cr_locked(uint32_t(raw), p);
    };
    // Err_Irq, Dly_Irq, IOC_Irq are R/WC (the bank merged the write-1-to-clear); the rest is RO.
    auto write_sr = [](Cdma &d, const R &, unsigned, uint64_t merged, uint64_t, Pending &) {
        d.s_.sr = (d.s_.sr & ~XCDMA_SR_IRQ_ALL) | (uint32_t(merged) & XCDMA_SR_IRQ_ALL);
    };
    // A *_MSB register (offset 4 mod 8) is the high half of its 64-bit state field.
    auto write_curdesc = [](Cdma &d, const R &r, unsigned, uint64_t, uint64_t raw, Pending &p) {
        d.write_desc_ptr_locked(r, false, r.offset % 8 != 0, uint32_t(raw), p);
    };
    auto write_taildesc = [](Cdma &d, const R &r, unsigned, uint64_t, uint64_t raw, Pending &p) {
        d.write_desc_ptr_locked(r, true, r.offset % 8 != 0, uint32_t(raw), p);
    };
    auto write_sa = [](Cdma &d, const R &r, unsigned, uint64_t, uint64_t raw, Pending &p) {
        if (d.simple_writable_locked(r, uint32_t(raw), p)) d.s_.sa = merge_half(r, d.s_.sa, uint32_t(raw));
    };
    auto write_da = [](Cdma &d, const R &r, unsigned, uint64_t, uint64_t raw, Pending &p) {
        if (d.simple_writable_locked(r, uint32_t(raw), p)) d.s_.da = merge_half(r, d.s_.da, uint32_t(raw));
    };
    auto write_btt = [](Cdma &d, const R &r, unsigned, uint64_t, uint64_t raw, Pending &p) {
        if (d.simple_writable_locked(r, uint32_t(raw), p)) d.write_btt_locked(uint32_t(raw), p);
    };
    static const R table[] = {
        {"CDMACR", XCDMA_CDMACR, 4, RegAccess::RW, XCDMA_CR_RESET_VALUE, XCDMA_CR_WRITABLE, cr, write_cr},
        {"CDMASR", XCDMA_CDMASR, 4, RegAccess::W1C, XCDMA_SR_RESET_VALUE, XCDMA_SR_IRQ_ALL, sr, write_sr},
        {"CURDESC_PNTR", XCDMA_CURDESC_PNTR, 4, RegAccess::RW, 0, XCDMA_DESC_PTR_MASK, curdesc,
         write_curdesc},
        {"CURDESC_PNTR_MSB", XCDMA_CURDESC_PNTR_MSB, 4, RegAccess::RW, 0, 0xffffffffu, curdesc,
         write_curdesc},
        {"TAILDESC_PNTR", XCDMA_TAILDESC_PNTR, 4, RegAccess::RW, 0, XCDMA_DESC_PTR_MASK, taildesc,
         write_taildesc},
        {"TAILDESC_PNTR_MSB", XCDMA_TAILDESC_PNTR_MSB, 4, RegAccess::RW, 0, 0xffffffffu, taildesc,
         write_taildesc},
        {"SA", XCDMA_SA, 4, RegAccess::RW, 0, 0xffffffffu, sa, write_sa},
        {"SA_MSB", XCDMA_SA_MSB, 4, RegAccess::RW, 0, 0xffffffffu, sa, write_sa},
        {"DA", XCDMA_DA, 4, RegAccess::RW, 0, 0xffffffffu, da, write_da},
        {"DA_MSB", XCDMA_DA_MSB, 4, RegAccess::RW, 0, 0xffffffffu, da, write_da},
        {"BTT", XCDMA_BTT, 4, RegAccess::RW, 0, XCDMA_BTT_MASK, btt, write_btt},
    };
    return table;
}

std::string Cdma::reg_name(uint64_t offset) const
{
    const char *n = bank_.name(offset);
    return n ? n : hex(offset);
}

uint32_t Cdma::read32_locked(uint64_t offset, Pending &p)
{
    uint64_t v = 0;
    if (bank_.read(*this, offset, 4, p, v) != RegResult::Ok) {
        note_locked(p, "load from reserved offset " + hex(offset) + " reads as 0");
        return 0;
    }
    return uint32_t(v);
}

void Cdma::write(uint64_t offset, uint64_t value, unsigned size)
{
    if (!valid_access(offset, size, "store of " + hex(value))) return;
    Pending p;
    {
        std::lock_guard lk(mu_);
        write32_locked(offset, uint32_t(value), p); // low half first, as lo_hi_writeq does
        if (size == 8) write32_locked(offset + 4, uint32_t(value >> 32), p);
    }
    finish(p);
}

void Cdma::write32_locked(uint64_t offset, uint32_t v, Pending &p)
{
    if (s_.cr & XCDMA_CR_RESET) {
        note_locked(p, reg_name(offset) + " write of " + hex(v) + " during a soft reset ignored");
        return;
    }
    if (bank_.write(*this, offset, v, 4, p) != RegResult::Ok) {
        note_locked(p, "store of " + hex(v) + " to reserved offset " + hex(offset) + " ignored");
    }
}

void Cdma::write_cr_locked(uint32_t v, Pending &p)
{
    if (v & XCDMA_CR_RESET) {
        // Data in flight: CDMACR.Reset reads 1 until process() reaches a boundary and resets.
        if (in_process_) {
            s_.cr |= XCDMA_CR_RESET;
        } else {
            soft_reset_locked();
        }
        return;
    }
    uint32_t nv = (v & XCDMA_CR_WRITABLE) | XCDMA_CR_TAILPNTREN;
    if (!(nv & XCDMA_CR_IRQTHRESHOLD_MASK)) nv |= s_.cr & XCDMA_CR_IRQTHRESHOLD_MASK; // min 1: 0 ignored
    if (!idle_locked() && ((nv ^ s_.cr) & kFrozenWhileBusy)) {
        note_locked(p, "CDMACR.SGMode/Key Hole changed while the engine is busy (" + hex(v) +
                           "): change ignored, write them only when CDMASR.Idle = 1");
        nv = (nv & ~kFrozenWhileBusy) | (s_.cr & kFrozenWhileBusy);
    }
    const uint32_t old = s_.cr;
    s_.cr = nv;
    if ((old & XCDMA_CR_SGMODE) && !(nv & XCDMA_CR_SGMODE)) {
        // PG034: CURDESC_PNTR, TAILDESC_PNTR and CDMASR.Dly_Irq are cleared when SGMode = 0.
        s_.curdesc = s_.taildesc = 0;
        s_.sr &= ~XCDMA_SR_DLY_IRQ;
        s_.resume_valid = false;
    }
    if ((old ^ nv) & XCDMA_CR_IRQTHRESHOLD_MASK) {
        s_.irq_count = threshold_locked(); // PG034: a threshold write reloads the counter
    }
}

void Cdma::write_desc_ptr_locked(const Reg<Cdma, Pending> &r, bool tail, bool msb, uint32_t v, Pending &p)
{
    const std::string name = r.name;
    if (!(s_.cr & XCDMA_CR_SGMODE)) {
        note_locked(p, name + " = " + hex(v) +
                           " written with CDMACR.SGMode = 0: ignored (cleared in simple mode)");
        return;
    }
    if (s_.phase == CdmaPhase::Halted) {
        note_locked(p, name + " = " + hex(v) +
                           " written while the engine is halted on an error: ignored until a reset");
        return;
    }
    if (!tail && !idle_locked()) {
        note_locked(p, name + " = " + hex(v) + " written while the engine is busy: ignored");
        return;
    }
    if (!msb && (v & ~XCDMA_DESC_PTR_MASK)) {
        note_locked(p, name + " = " + hex(v) + " is not 64-byte aligned: bits [5:0] ignored");
    }
    uint64_t &reg = tail ? s_.taildesc : s_.curdesc;
    reg = msb ? with_hi(reg, v) : with_lo(reg, v & XCDMA_DESC_PTR_MASK);
    if (!tail) {
        s_.resume_valid = false; // a new chain starts where software says
        return;
    }
    if (!msb || !idle_locked()) return; // while busy a tail write only moves the pause point
    // PG034: with a 64-bit address space the TAILDESC_PNTR_MSB write starts the SG engine at
    // CURDESC_PNTR; paused at the tail, it resumes at the next sequential descriptor.
    if (s_.resume_valid) s_.curdesc = s_.resume_next;
    s_.resume_valid = false;
    s_.sr &= ~XCDMA_SR_IDLE;
    s_.phase = CdmaPhase::Fetch;
    s_.irq_count = threshold_locked(); // PG034: loaded when an SG session starts
    s_.unsignalled = 0;
    s_.session_descriptors = 0;
    p.kick = true;
}

// SA, DA and BTT are written only while the engine is idle.
bool Cdma::simple_writable_locked(const Reg<Cdma, Pending> &r, uint32_t v, Pending &p)
{
    if (idle_locked()) return true;
    note_locked(p, std::string(r.name) + " = " + hex(v) + " written while the engine is busy: ignored");
    return false;
}

void Cdma::write_btt_locked(uint32_t v, Pending &p)
{
    if (v & ~XCDMA_BTT_MASK) note_locked(p, "BTT = " + hex(v) + ": bits [31:26] are reserved and ignored");
    s_.btt = v & XCDMA_BTT_MASK;
    if (s_.cr & XCDMA_CR_SGMODE) {
        note_locked(p, "BTT written with CDMACR.SGMode = 1: stored, no transfer (simple-mode register)");
        return;
    }
    if (s_.phase == CdmaPhase::Halted) {
        note_locked(p, "BTT written while the engine is halted on an error: no transfer until a reset");
        return;
    }
    if (s_.btt == 0) {
        note_locked(p, "BTT = 0 is not allowed: DMAIntErr, engine halted");
        halt_locked(XCDMA_SR_DMAINTERR);
        return;
    }
    s_.sr &= ~XCDMA_SR_IDLE; // the BTT write starts the simple transfer
    s_.phase = CdmaPhase::Simple;
    p.kick = true;
}

// ---- engine ----

Status Cdma::read_mem(uint64_t addr, void *buf, uint64_t len)
{
    return host_.dma_read(addr, buf, len);
}

Status Cdma::write_mem(uint64_t addr, const void *buf, uint64_t len)
{
    return host_.dma_write(addr, buf, len);
}

namespace {
// The AXI response the data mover got: DECERR where nothing decodes, SLVERR for everything else
// (a refused access, an owner that is down or does not answer).
bool decode_error(Status st)
{
    return st == RK_DECODE_ERROR;
}
} // namespace

void Cdma::process()
{
    for (;;) {
        std::unique_lock pl(process_mu_, std::try_to_lock);
        if (!pl.owns_lock()) {
            rerun_ = true; // the running call goes round again
            return;
        }
        rerun_ = false;
        if (run_engine()) {
            // A cyclic ring yields every cfg_.cyclic_slice descriptors so that the host's engine
            // thread can stop; the kick brings it back. process_mu_ is still held, so a host
            // that calls process() from kick() returns at once instead of recursing.
            if (kick_) kick_();
            rerun_ = false;
            return;
        }
        pl.unlock();
        if (!rerun_.exchange(false)) return;
    }
}

// Moves len bytes in chunks through buf_. Between chunks: gone if reset()/load()
// replaced the state (Stale), stop if CDMACR.Reset is pending (Aborted).
Cdma::Move Cdma::move(uint64_t src, uint64_t dst, uint64_t len, uint32_t cr, uint64_t epoch, Status &st)
{
    const bool fixed_rd = cr & XCDMA_CR_KEYHOLE_READ, fixed_wr = cr & XCDMA_CR_KEYHOLE_WRITE;
    const uint64_t dw = cfg_.data_width;
    for (uint64_t done = 0; done < len;) {
        const uint64_t n = std::min<uint64_t>(len - done, buf_.size());
        st = RK_OK;
        if (fixed_rd) {
            for (uint64_t off = 0; off < n && st == RK_OK; off += dw) {
                st = read_mem(src, buf_.data() + off, std::min(dw, n - off));
            }
        } else {
            st = read_mem(src + done, buf_.data(), n);
        }
        if (st != RK_OK) return Move::Failed;
        if (fixed_wr) {
            for (uint64_t off = 0; off < n && st == RK_OK; off += dw) {
                st = write_mem(dst, buf_.data() + off, std::min(dw, n - off));
            }
        } else {
            st = write_mem(dst + done, buf_.data(), n);
        }
        if (st != RK_OK) return Move::Failed;
        done += n;
        std::lock_guard lk(mu_);
        if (epoch_ != epoch) return Move::Stale;
        ctr_.bytes += n;
        if (s_.cr & XCDMA_CR_RESET) return Move::Aborted;
    }
    return Move::Done;
}

void Cdma::complete_descriptor_locked(const Desc &d, Pending &p)
{
    ctr_.descriptors++;
    s_.session_descriptors++;
    if (s_.irq_count <= 1) { // PG034: IOC_Irq when the threshold counter reaches 0, then reload
        s_.sr |= XCDMA_SR_IOC_IRQ;
        s_.irq_count = threshold_locked();
        s_.unsignalled = 0;
    } else {
        s_.irq_count--;
        s_.unsignalled++;
    }
    if (!(s_.cr & XCDMA_CR_CYCLIC_BD_EN) && s_.curdesc == s_.taildesc) {
        s_.phase = CdmaPhase::Idle;
        s_.sr |= XCDMA_SR_IDLE;
        s_.resume_valid = true;
        s_.resume_next = d.next & kDescMask64;
        ctr_.chains++;
        // The delay timer would run out now that the engine is idle with completions pending.
        if ((s_.cr & XCDMA_CR_IRQDELAY_MASK) && s_.unsignalled) {
            s_.sr |= XCDMA_SR_DLY_IRQ;
            s_.irq_count = threshold_locked(); // PG034: a delay interrupt reloads the counter
            s_.unsignalled = 0;
        }
        return;
    }
    if (d.next & ~kDescMask64) {
        note_locked(p, "descriptor at " + hex(d.addr) + ": NXTDESC_PNTR " + hex(d.next) +
                           " is not 64-byte aligned: bits [5:0] ignored");
    }
    s_.curdesc = d.next & kDescMask64;
    s_.phase = CdmaPhase::Fetch;
}

bool Cdma::run_engine()
{
    uint64_t epoch;
    {
        std::lock_guard lk(mu_);
        epoch = epoch_;
        in_process_ = true;
        if (s_.phase == CdmaPhase::Transfer || s_.phase == CdmaPhase::WriteBack) s_.phase = CdmaPhase::Fetch;
    }
    uint64_t slice = 0;
    Desc d;                 // the descriptor between FETCH and WRITEBACK
    uint32_t wb_status = 0; // STATUS word WRITEBACK stores
    uint32_t wb_sr_err = 0; // CDMASR error raised after it (0: the descriptor completed)
    for (;;) {
        Pending p;
        std::unique_lock lk(mu_);
        if (epoch_ != epoch) return false; // reset()/load(): the state is not ours any more
        if (s_.cr & XCDMA_CR_RESET) {
            soft_reset_locked();
            in_process_ = false;
            lk.unlock();
            finish(p);
            return false;
        }
        if (paused_ && (s_.phase == CdmaPhase::Simple || s_.phase == CdmaPhase::Fetch)) {
            in_process_ = false; // pause(): stop before the next transfer or descriptor
            lk.unlock();
            finish(p);
            return false;
        }
        const uint32_t cr = s_.cr;
        switch (s_.phase) {
        case CdmaPhase::Idle:
        case CdmaPhase::Halted:
            in_process_ = false;
            lk.unlock();
            finish(p);
            return false;

        case CdmaPhase::Simple: {
            const uint64_t src = s_.sa, dst = s_.da, len = s_.btt;
            lk.unlock();
            Status st = RK_OK;
            const Move m = move(src, dst, len, cr, epoch, st);
            if (m == Move::Stale) return false;
            if (m == Move::Aborted) continue;
            lk.lock();
            if (epoch_ != epoch) return false;
            if (m == Move::Failed) {
                halt_locked(decode_error(st) ? XCDMA_SR_DMADECERR : XCDMA_SR_DMASLVERR);
            } else {
                s_.sr |= XCDMA_SR_IOC_IRQ | XCDMA_SR_IDLE;
                s_.phase = CdmaPhase::Idle;
                ctr_.transfers++;
            }
            break;
        }

        case CdmaPhase::Fetch: {
            const bool cyclic = cr & XCDMA_CR_CYCLIC_BD_EN;
            if (cyclic && slice >= cfg_.cyclic_slice) {
                in_process_ = false;
                return true;
            }
            if (!cyclic && s_.session_descriptors >= cfg_.max_descriptors) {
                note_locked(p, "SG chain did not reach TAILDESC_PNTR " + hex(s_.taildesc) + " within " +
                                   std::to_string(cfg_.max_descriptors) + " descriptors (next " +
                                   hex(s_.curdesc) + "): SGIntErr, engine halted");
                halt_locked(XCDMA_SR_SGINTERR);
                break;
            }
            d = Desc{};
            d.addr = s_.curdesc; // CURDESC_PNTR shows the descriptor being worked on
            lk.unlock();
            uint8_t raw[XCDMA_DESC_SIZE];
            const Status st = read_mem(d.addr, raw, sizeof raw);
            lk.lock();
            if (epoch_ != epoch) return false;
            if (s_.cr & XCDMA_CR_RESET) continue;
            if (st != RK_OK) {
                halt_locked(decode_error(st) ? XCDMA_SR_SGDECERR : XCDMA_SR_SGSLVERR);
                break;
            }
            d.next = lohi(le32(raw + XCDMA_DESC_NXTDESC), le32(raw + XCDMA_DESC_NXTDESC_MSB));
            d.sa = lohi(le32(raw + XCDMA_DESC_SA), le32(raw + XCDMA_DESC_SA_MSB));
            d.da = lohi(le32(raw + XCDMA_DESC_DA), le32(raw + XCDMA_DESC_DA_MSB));
            d.control = le32(raw + XCDMA_DESC_CONTROL);
            d.status = le32(raw + XCDMA_DESC_STATUS);
            if (!cyclic && (d.status & XCDMA_DESC_STS_CMPLT)) {
                // PG034: a stale descriptor: SGIntErr, the engine halts with no update to it.
                note_locked(
                    p,
                    "descriptor at " + hex(d.addr) +
                        " fetched with STATUS.Cmplt set (stale or looping chain): SGIntErr, engine halted");
                halt_locked(XCDMA_SR_SGINTERR);
                break;
            }
            if (!(d.control & XCDMA_DESC_CTRL_BTT_MASK)) {
                note_locked(p, "descriptor at " + hex(d.addr) + " has BTT = 0: DMAIntErr, engine halted");
                wb_status = XCDMA_DESC_STS_INTERR;
                wb_sr_err = XCDMA_SR_DMAINTERR;
                s_.phase = CdmaPhase::WriteBack;
                break;
            }
            s_.phase = CdmaPhase::Transfer;
            break;
        }

        case CdmaPhase::Transfer: {
            lk.unlock();
            Status st = RK_OK;
            const Move m = move(d.sa, d.da, d.control & XCDMA_DESC_CTRL_BTT_MASK, cr, epoch, st);
            if (m == Move::Stale) return false;
            if (m == Move::Aborted) continue;
            lk.lock();
            if (epoch_ != epoch) return false;
            if (m == Move::Failed) {
                const bool dec = decode_error(st);
                wb_status = dec ? XCDMA_DESC_STS_DECERR : XCDMA_DESC_STS_SLVERR;
                wb_sr_err = dec ? XCDMA_SR_DMADECERR : XCDMA_SR_DMASLVERR;
            } else {
                wb_status = XCDMA_DESC_STS_CMPLT;
                wb_sr_err = 0;
            }
            s_.phase = CdmaPhase::WriteBack;
            break;
        }

        case CdmaPhase::WriteBack: {
            lk.unlock();
            // Only the STATUS word is stored: software may be editing the rest (NXTDESC).
            const uint8_t w[4] = {uint8_t(wb_status), uint8_t(wb_status >> 8), uint8_t(wb_status >> 16),
                                  uint8_t(wb_status >> 24)};
            const Status st = write_mem(d.addr + XCDMA_DESC_STATUS, w, sizeof w);
            lk.lock();
            if (epoch_ != epoch) return false;
            if (s_.cr & XCDMA_CR_RESET) continue;
            if (st != RK_OK) {
                halt_locked(wb_sr_err | (decode_error(st) ? XCDMA_SR_SGDECERR : XCDMA_SR_SGSLVERR));
            } else if (wb_sr_err) {
                halt_locked(wb_sr_err);
            } else {
                complete_descriptor_locked(d, p);
                slice++;
            }
            break;
        }
        }
        lk.unlock();
        finish(p);
    }
}

} // namespace rackemu::unimem
