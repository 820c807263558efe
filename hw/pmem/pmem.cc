// SPDX-License-Identifier: MIT
// The persistence domain of a persistent-memory region (pmem.h, docs/pmem.md).
#include "pmem.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace rackemu::pmem {

namespace {

constexpr uint64_t kLine = PMEM_LINE_SIZE;
constexpr uint64_t kChunk = 4096; // RAM and the durable image are read a page at a time

// bit i: byte i of the two lines differs
uint64_t diff_mask(const uint8_t *a, const uint8_t *b)
{
    uint64_t m = 0;
    for (unsigned i = 0; i < kLine; i++) {
        if (a[i] != b[i]) m |= 1ull << i;
    }
    return m;
}

// bit i: byte i of line `line` lies in [off, off + len)
uint64_t range_mask(uint64_t line, uint64_t off, uint64_t len)
{
    const uint64_t lo = std::max(off, line * kLine), hi = std::min(off + len, (line + 1) * kLine);
    const unsigned a = unsigned(lo - line * kLine), n = unsigned(hi - lo);
    return n >= 64 ? ~0ull : ((1ull << n) - 1) << a;
}

const char *const kModeNames[] = {"none", "eadr", "adr", "adr-ddio"};

} // namespace

const char *mode_name(Mode m)
{
    return unsigned(m) < PMEM_MODE_COUNT ? kModeNames[unsigned(m)] : "?";
}

bool parse_mode(const char *s, Mode *m)
{
    for (unsigned i = 0; i < PMEM_MODE_COUNT; i++) {
        if (s && strcmp(s, kModeNames[i]) == 0) {
            *m = Mode(i);
            return true;
        }
    }
    return false;
}

std::string check(const Config &c)
{
    char buf[160];
    if (c.size == 0 || c.size % kLine || c.base % kLine || c.base + c.size < c.base) {
        snprintf(buf, sizeof(buf), "region [0x%llx, +0x%llx) is not a non-empty range of 64-byte lines",
                 (unsigned long long)c.base, (unsigned long long)c.size);
        return buf;
    }
    if (unsigned(c.mode) >= PMEM_MODE_COUNT) return "mode is not none, eadr, adr or adr-ddio";
    if (c.nic_entries > PMEM_NIC_ENTRIES_MAX) {
        snprintf(buf, sizeof(buf), "nic-entries %u is above %u", c.nic_entries, PMEM_NIC_ENTRIES_MAX);
        return buf;
    }
    if (c.llc_lines == 0 || c.llc_lines > PMEM_LLC_LINES_MAX) {
        snprintf(buf, sizeof(buf), "llc-lines %u is not in 1..%u", c.llc_lines, PMEM_LLC_LINES_MAX);
        return buf;
    }
    return "";
}

std::unique_ptr<Pmem> Pmem::create(const Host &host, const Config &cfg, std::unique_ptr<Media> media,
                                   std::string *err)
{
    const std::string why = check(cfg);
    if (!why.empty()) {
        if (err) *err = why;
        return nullptr;
    }
    if (!media) media = memory_media(cfg.size);
    return std::unique_ptr<Pmem>(new Pmem(host, cfg, std::move(media)));
}

Pmem::Pmem(const Host &host, const Config &cfg, std::unique_ptr<Media> media)
    : host_(host), cfg_(cfg), media_(std::move(media))
{
    mode = uint32_t(cfg.mode);
    size = cfg.size;
    rng = cfg.seed;
}

// ---- the pending set ----

void Pmem::add_pending(uint64_t line, uint64_t written, uint8_t src)
{
    auto it = where_.find(line);
    if (it != where_.end()) {
        pending[it->second].written |= written;
        pending[it->second].src |= src;
        return;
    }
    where_.emplace(line, uint32_t(pending.size()));
    PendingLine p;
    p.line = line;
    p.written = written;
    p.src = src;
    pending.push_back(p);
}

void Pmem::drop_pending(uint64_t line)
{
    auto it = where_.find(line);
    if (it == where_.end()) return;
    const uint32_t i = it->second;
    where_.erase(it);
    if (i + 1 != pending.size()) {
        pending[i] = pending.back();
        where_[pending[i].line] = i;
    }
    pending.pop_back();
}

Status Pmem::make_durable(uint64_t line, const uint8_t *ram, uint64_t written, Cause cause)
{
    auto it = where_.find(line);
    if (it != where_.end()) written |= pending[it->second].written;
    drop_pending(line);
    const Status st = media_->write(line * kLine, ram, kLine);
    if (st != RK_OK) return st;
    static const unsigned idx[][2] = {
        {PMEM_CNT_INDEX_STORE_BYTES, PMEM_CNT_INDEX_STORE_LINES},
        {PMEM_CNT_INDEX_PLACE_BYTES, PMEM_CNT_INDEX_PLACE_LINES},
        {PMEM_CNT_INDEX_FLUSH_BYTES, PMEM_CNT_INDEX_FLUSH_LINES},
        {PMEM_CNT_INDEX_WB_BYTES, PMEM_CNT_INDEX_WB_LINES},
        {PMEM_CNT_INDEX_EVICT_BYTES, PMEM_CNT_INDEX_EVICT_LINES},
    };
    cnt[idx[unsigned(cause)][0]] += uint64_t(std::popcount(written));
    cnt[idx[unsigned(cause)][1]]++;
    return RK_OK;
}

Status Pmem::evict_excess()
{
    while (pending.size() > cfg_.llc_lines) {
        const uint64_t victim = pending[splitmix64(rng) % pending.size()].line;
        uint8_t ram[kLine];
        const Status st = host_.dma_read(cfg_.base + victim * kLine, ram, kLine);
        if (st != RK_OK) return st;
        const Status st2 = make_durable(victim, ram, 0, Cause::Eviction);
        if (st2 != RK_OK) return st2;
    }
    return RK_OK;
}

template <class F> Status Pmem::for_lines(uint64_t off, uint64_t len, F &&f)
{
    uint8_t ram[kChunk], dur[kChunk];
    uint64_t pos = off & ~(kLine - 1);
    const uint64_t end = off + len;
    while (pos < end) {
        const uint64_t n = std::min(kChunk - pos % kChunk, (end - pos + kLine - 1) & ~(kLine - 1));
        Status st = host_.dma_read(cfg_.base + pos, ram, n);
        if (st == RK_OK) st = media_->read(pos, dur, n);
        if (st != RK_OK) return st;
        for (uint64_t o = 0; o < n; o += kLine) {
            const uint64_t line = (pos + o) / kLine;
            st = f(line, ram + o, dur + o, range_mask(line, off, len));
            if (st != RK_OK) return st;
        }
        pos += n;
    }
    return RK_OK;
}

Status Pmem::check_report(uint64_t addr, uint64_t len) const
{
    if (stopped_) return RK_UNREACHABLE;
    if (!in_region(addr, len)) return RK_DECODE_ERROR;
    return RK_OK;
}

// ---- what the host reports ----

Status Pmem::cpu_dirty(uint64_t addr, uint64_t len)
{
    std::lock_guard lk(mu_);
    Status st = check_report(addr, len);
    if (st != RK_OK || len == 0) return st;
    const bool cached = cfg_.mode == Mode::Adr || cfg_.mode == Mode::AdrDdio;
    st = for_lines(addr - cfg_.base, len,
                   [&](uint64_t line, const uint8_t *ram, const uint8_t *dur, uint64_t) {
                       const uint64_t d = diff_mask(ram, dur);
                       if (!d) return RK_OK;
                       if (!cached) return make_durable(line, ram, d, Cause::Store);
                       // The dirty log also sees placed RNIC writes (DMA dirties pages): bytes
                       // a pending line already has are not the CPU's.
                       auto it = where_.find(line);
                       const uint64_t known = it == where_.end() ? 0 : pending[it->second].written;
                       if (d & ~known) add_pending(line, d, PMEM_SRC_CPU);
                       return RK_OK;
                   });
    return st != RK_OK ? st : evict_excess();
}

Status Pmem::make_range_durable(uint64_t addr, uint64_t len, Cause cause)
{
    const bool cached = cfg_.mode == Mode::Adr || cfg_.mode == Mode::AdrDdio;
    return for_lines(addr - cfg_.base, len,
                     [&](uint64_t line, const uint8_t *ram, const uint8_t *dur, uint64_t) {
                         const uint64_t d = diff_mask(ram, dur);
                         // none, eadr: a store not reported yet was durable when it was made
                         if (!cached) return d ? make_durable(line, ram, d, Cause::Store) : RK_OK;
                         if (!d && !where_.count(line)) return RK_OK;
                         return make_durable(line, ram, d, cause);
                     });
}

Status Pmem::cpu_writeback(uint64_t addr, uint64_t len)
{
    std::lock_guard lk(mu_);
    const Status st = check_report(addr, len);
    if (st != RK_OK || len == 0) return st;
    return make_range_durable(addr, len, Cause::WriteBack);
}

Status Pmem::flush(uint64_t addr, uint64_t len)
{
    std::lock_guard lk(mu_);
    Status st = check_report(addr, len);
    if (st != RK_OK) return st;
    while (!nic.empty() && st == RK_OK)
        st = place_entry();
    arm_timer();
    if (st != RK_OK || len == 0) return st;
    st = make_range_durable(addr, len, Cause::Flush);
    return st != RK_OK ? st : media_->sync();
}

Status Pmem::place(uint64_t off, uint64_t len)
{
    const bool ddio = cfg_.mode == Mode::AdrDdio;
    const Status st =
        for_lines(off, len, [&](uint64_t line, const uint8_t *ram, const uint8_t *, uint64_t m) {
            if (!ddio) return make_durable(line, ram, m, Cause::Placement);
            add_pending(line, m, PMEM_SRC_NIC);
            return RK_OK;
        });
    return st != RK_OK ? st : evict_excess();
}

Status Pmem::placed(uint64_t addr, uint64_t len)
{
    std::lock_guard lk(mu_);
    const Status st = check_report(addr, len);
    if (st != RK_OK || len == 0) return st;
    return place(addr - cfg_.base, len);
}

Status Pmem::place_entry()
{
    NicEntry e = std::move(nic.front());
    nic.erase(nic.begin());
    Status st = host_.dma_write(e.addr, e.data.data(), e.data.size());
    if (st == RK_OK) st = place(e.addr - cfg_.base, e.data.size());
    cnt[PMEM_CNT_INDEX_NIC_PLACED]++;
    return st;
}

void Pmem::arm_timer()
{
    host_.timer_arm(0, nic.empty() || paused_ || stopped_ ? UINT64_MAX : nic.front().due_ns);
}

Status Pmem::nic_accept(uint64_t addr, const void *data, uint64_t len, uint64_t *seq)
{
    std::lock_guard lk(mu_);
    Status st = check_report(addr, len);
    if (st != RK_OK) return st;
    if (len == 0 || len > PMEM_NIC_ENTRY_MAX || !data) return RK_SLAVE_ERROR;
    if (seq) *seq = next_seq;
    cnt[PMEM_CNT_INDEX_NIC_ACCEPTED]++;
    NicEntry e;
    e.seq = next_seq++;
    e.addr = addr;
    e.due_ns = host_.now_ns() + cfg_.nic_delay_ns;
    e.data.assign(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + len);
    if (cfg_.mode == Mode::None || cfg_.nic_entries == 0) {
        // no volatile buffer in the way: placed as it is acknowledged
        nic.push_back(std::move(e));
        return place_entry();
    }
    if (nic.size() >= cfg_.nic_entries) {
        cnt[PMEM_CNT_INDEX_NIC_FORCED]++;
        st = place_entry();
    }
    nic.push_back(std::move(e));
    arm_timer();
    return st;
}

unsigned Pmem::nic_place_due()
{
    std::lock_guard lk(mu_);
    if (paused_ || stopped_) return 0;
    const uint64_t now = host_.now_ns();
    unsigned n = 0;
    while (!nic.empty() && nic.front().due_ns <= now) {
        place_entry();
        n++;
    }
    arm_timer();
    return n;
}

unsigned Pmem::nic_drain()
{
    std::lock_guard lk(mu_);
    if (stopped_) return 0;
    unsigned n = 0;
    for (; !nic.empty(); n++)
        place_entry();
    arm_timer();
    return n;
}

// ---- the power cut ----

Cut Pmem::cut()
{
    std::lock_guard lk(mu_);
    Cut c;
    c.id = ++cut_id_;
    c.base = cfg_.base;
    c.size = cfg_.size;
    stopped_ = true;
    arm_timer();
    for (const NicEntry &e : nic) {
        c.nic_lost_entries++;
        c.nic_lost_bytes += e.data.size();
    }
    std::vector<PendingLine> lines(pending.begin(), pending.end());
    std::sort(lines.begin(), lines.end(),
              [](const PendingLine &a, const PendingLine &b) { return a.line < b.line; });
    for (const PendingLine &p : lines) {
        CutLine l;
        l.line = p.line;
        l.written = p.written;
        // A failed read leaves zeros: the line is then "new" = zeros, as a machine check would
        // leave poison; the host's RAM and image never fail inside a checked region.
        (void)media_->read(p.line * kLine, l.old_bytes.data(), kLine);
        (void)host_.dma_read(cfg_.base + p.line * kLine, l.new_bytes.data(), kLine);
        c.lines.push_back(l);
    }
    return c;
}

Status Pmem::finish_cut(const Cut &c, const CrashState &s)
{
    std::lock_guard lk(mu_);
    if (!stopped_ || c.id != cut_id_ || !valid(c, s)) return RK_SLAVE_ERROR;
    Status st = RK_OK;
    for_each_diff(c, s, [&](uint64_t off, const uint8_t *b) {
        if (st == RK_OK) st = media_->write(off, b, kLine);
    });
    if (st == RK_OK) st = media_->sync();
    if (st != RK_OK) return st;
    cnt[PMEM_CNT_INDEX_CUTS]++;
    cnt[PMEM_CNT_INDEX_LOST_BYTES] = lost_bytes(c, s);
    cnt[PMEM_CNT_INDEX_LOST_LINES] = c.lines.size() - s.chosen.size();
    cnt[PMEM_CNT_INDEX_LOST_NIC] = c.nic_lost_entries;
    pending.clear();
    where_.clear();
    nic.clear();
    stopped_ = false;
    return RK_OK;
}

Status Pmem::restart()
{
    std::lock_guard lk(mu_);
    if (stopped_) return RK_UNREACHABLE;
    std::vector<uint8_t> buf(1 << 16);
    for (uint64_t off = 0; off < cfg_.size; off += buf.size()) {
        const uint64_t n = std::min<uint64_t>(buf.size(), cfg_.size - off);
        Status st = media_->read(off, buf.data(), n);
        if (st == RK_OK) st = host_.dma_write(cfg_.base + off, buf.data(), n);
        if (st != RK_OK) return st;
    }
    // RAM is the durable image: nothing is pending, nothing is in the NIC (outside a cut, what
    // was not durable is dropped uncounted)
    pending.clear();
    where_.clear();
    nic.clear();
    arm_timer();
    return RK_OK;
}

// ---- inspection ----

Status Pmem::durable_read(uint64_t addr, void *buf, uint64_t len)
{
    std::lock_guard lk(mu_);
    if (!in_region(addr, len)) return RK_DECODE_ERROR;
    return media_->read(addr - cfg_.base, buf, len);
}

uint64_t Pmem::counter(unsigned idx)
{
    std::lock_guard lk(mu_);
    if (idx == PMEM_CNT_INDEX_PENDING_LINES) return pending.size();
    if (idx == PMEM_CNT_INDEX_NIC_PENDING) return nic.size();
    return idx < PMEM_CNT_COUNT ? cnt[idx] : 0;
}

bool Pmem::is_pending(uint64_t addr)
{
    std::lock_guard lk(mu_);
    return in_region(addr, 1) && where_.count((addr - cfg_.base) / kLine);
}

size_t Pmem::nic_pending()
{
    std::lock_guard lk(mu_);
    return nic.size();
}

// ---- the device contract ----

void Pmem::reset()
{
    std::lock_guard lk(mu_);
    while (!nic.empty() && !stopped_)
        place_entry();
    arm_timer();
    bank_.reset();
}

void Pmem::pause(bool on)
{
    std::lock_guard lk(mu_);
    paused_ = on;
    arm_timer();
}

void Pmem::timer(unsigned id)
{
    if (id == 0) nic_place_due();
}

void Pmem::save(StateOut &out) const
{
    std::lock_guard lk(mu_);
    out.put(static_cast<const PmemArch &>(*this));
}

bool Pmem::load(StateIn &in, std::string *why)
{
    PmemArch s;
    in.get(s);
    if (!in.finish()) {
        *why = in.why();
        return false;
    }
    auto fail = [&](const char *fmt, auto... a) {
        char buf[200];
        snprintf(buf, sizeof(buf), fmt, a...);
        *why = buf;
        return false;
    };
    if (s.mode != uint32_t(cfg_.mode))
        return fail("mode: the state's %s is not this device's %s", mode_name(Mode(s.mode)),
                    mode_name(cfg_.mode));
    if (s.size != cfg_.size)
        return fail("size: the state's 0x%llx is not this region's 0x%llx", (unsigned long long)s.size,
                    (unsigned long long)cfg_.size);
    if (s.pending.size() > cfg_.llc_lines)
        return fail("pending: %zu lines, llc-lines is %u", s.pending.size(), cfg_.llc_lines);
    std::unordered_map<uint64_t, uint32_t> where;
    for (uint32_t i = 0; i < s.pending.size(); i++) {
        const PendingLine &p = s.pending[i];
        if (p.line >= cfg_.size / kLine)
            return fail("pending[%u]: line %llu beyond the region", i, (unsigned long long)p.line);
        if (!p.src || p.src & ~(PMEM_SRC_CPU | PMEM_SRC_NIC)) return fail("pending[%u]: source %u", i, p.src);
        if (!where.emplace(p.line, i).second)
            return fail("pending[%u]: line %llu twice", i, (unsigned long long)p.line);
    }
    const uint32_t cap = cfg_.mode == Mode::None ? 0 : cfg_.nic_entries;
    if (s.nic.size() > cap) return fail("nic: %zu entries, the buffer holds %u", s.nic.size(), cap);
    for (uint32_t i = 0; i < s.nic.size(); i++) {
        const NicEntry &e = s.nic[i];
        if (e.data.empty() || e.data.size() > PMEM_NIC_ENTRY_MAX || !in_region(e.addr, e.data.size()))
            return fail("nic[%u]: %zu bytes at 0x%llx", i, e.data.size(), (unsigned long long)e.addr);
        if (e.seq >= s.next_seq || (i && e.seq <= s.nic[i - 1].seq))
            return fail("nic[%u]: sequence %llu", i, (unsigned long long)e.seq);
        if (i && e.due_ns < s.nic[i - 1].due_ns) return fail("nic[%u]: due before its predecessor", i);
    }
    std::lock_guard lk(mu_);
    static_cast<PmemArch &>(*this) = std::move(s);
    where_ = std::move(where);
    stopped_ = false;
    arm_timer();
    return true;
}

std::span<const Pmem::R> Pmem::reg_table()
{
    auto cfgval = [](Pmem &d, const R &r, unsigned, NoCtx &) -> uint64_t {
        switch (r.offset) {
        case PMEM_REG_MODE:
            return uint64_t(d.cfg_.mode);
        case PMEM_REG_REGION_BASE:
            return d.cfg_.base;
        case PMEM_REG_REGION_SIZE:
            return d.cfg_.size;
        case PMEM_REG_NIC_DELAY_NS:
            return d.cfg_.nic_delay_ns;
        case PMEM_REG_NIC_ENTRIES:
            return d.cfg_.mode == Mode::None ? 0 : d.cfg_.nic_entries;
        case PMEM_REG_LLC_LINES:
            return d.cfg_.llc_lines;
        }
        return 0;
    };
    auto ctrl = [](Pmem &, const R &, unsigned, NoCtx &) -> uint64_t { return 0; };
    auto write_ctrl = [](Pmem &d, const R &, unsigned, uint64_t, uint64_t raw, NoCtx &) {
        if (raw & PMEM_CTRL_CNT_CLEAR) d.cnt.fill(0);
    };
    auto counter = [](Pmem &d, const R &, unsigned i, NoCtx &) -> uint64_t {
        if (i == PMEM_CNT_INDEX_PENDING_LINES) return d.pending.size();
        if (i == PMEM_CNT_INDEX_NIC_PENDING) return d.nic.size();
        return d.cnt[i];
    };
    static const R table[] = {
        {"ID", PMEM_REG_ID, 8, RegAccess::RO, PMEM_ID_VALUE, 0},
        {"MODE", PMEM_REG_MODE, 8, RegAccess::RO, 0, 0, cfgval},
        {"REGION_BASE", PMEM_REG_REGION_BASE, 8, RegAccess::RO, 0, 0, cfgval},
        {"REGION_SIZE", PMEM_REG_REGION_SIZE, 8, RegAccess::RO, 0, 0, cfgval},
        {"NIC_DELAY_NS", PMEM_REG_NIC_DELAY_NS, 8, RegAccess::RO, 0, 0, cfgval},
        {"NIC_ENTRIES", PMEM_REG_NIC_ENTRIES, 8, RegAccess::RO, 0, 0, cfgval},
        {"LLC_LINES", PMEM_REG_LLC_LINES, 8, RegAccess::RO, 0, 0, cfgval},
        {"CTRL", PMEM_REG_CTRL, 8, RegAccess::RW, 0, PMEM_CTRL_CNT_CLEAR, ctrl, write_ctrl},
        {"COUNTER", PMEM_COUNTERS, 8, RegAccess::RO, 0, 0, counter, nullptr, PMEM_CNT_COUNT},
    };
    return table;
}

Status Pmem::ctrl_read(uint64_t offset, unsigned size, uint64_t *value)
{
    std::lock_guard lk(mu_);
    NoCtx ctx;
    if (bank_.read(*this, offset, size, ctx, *value) == RegResult::Ok) return RK_OK;
    host_.guest_errorf("pmem: %u-byte read at 0x%llx: no register", size, (unsigned long long)offset);
    *value = 0;
    return RK_OK;
}

Status Pmem::ctrl_write(uint64_t offset, uint64_t value, unsigned size)
{
    std::lock_guard lk(mu_);
    NoCtx ctx;
    switch (bank_.write(*this, offset, value, size, ctx)) {
    case RegResult::Ok:
        break;
    case RegResult::ReadOnly:
        host_.guest_errorf("pmem: write to read-only %s ignored", bank_.describe(offset).c_str());
        break;
    case RegResult::Unmapped:
        host_.guest_errorf("pmem: %u-byte write at 0x%llx: no register", size, (unsigned long long)offset);
        break;
    }
    return RK_OK;
}

} // namespace rackemu::pmem
