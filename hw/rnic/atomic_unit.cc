// SPDX-License-Identifier: MIT
// The NIC atomic unit (the NIC-atomics paper sec. III): see atomic_unit.h for the pipeline and the atomicity.
#include "atomic_unit.h"

#include <cstring>

#include <algorithm>
#include <cstdio>
#include <functional>

namespace rackemu::rnic {

namespace {

constexpr uint64_t kNever = UINT64_MAX;

uint64_t lane_mask(uint8_t size)
{
    return size == 4 ? 0xFFFFFFFFull : ~0ull;
}

} // namespace

const char *amo_status_name(AmoStatus s)
{
    switch (s) {
    case AmoStatus::Ok:
        return "ok";
    case AmoStatus::Unaligned:
        return "unaligned";
    case AmoStatus::BadOp:
        return "bad operation or size";
    case AmoStatus::AccessError:
        return "address not valid";
    }
    return "?";
}

uint64_t amo_alu(uint8_t op, uint8_t size, uint64_t old, uint64_t operand, uint64_t compare, uint64_t mask)
{
    const uint64_t m = lane_mask(size);
    old &= m;
    operand &= m;
    switch (op) {
    case ROCE_XOP_ADD:
        return (old + operand) & m;
    case ROCE_XOP_SWAP:
        return operand;
    case ROCE_XOP_XOR:
        return old ^ operand;
    case ROCE_XOP_AND:
        return old & operand;
    case ROCE_XOP_OR:
        return old | operand;
    case ROCE_XOP_MCSWAP:
        mask &= m;
        return ((old ^ compare) & mask) == 0 ? ((old & ~mask) | (operand & mask)) & m : old;
    default:
        return old;
    }
}

const char *amu_check_config(const AmuConfig &c)
{
    if (c.nic_mhz < 1 || c.nic_mhz > 10000) return "nic-mhz must be 1..10000";
    if (c.host_lat_ns > 100000) return "host-lat-ns must be at most 100000";
    if (c.mem_ns > 100000) return "mem-ns must be at most 100000";
    if (c.host_mbps < 1 || c.net_mbps < 1) return "host-mbps and net-mbps must be at least 1";
    if (c.msg_bytes < 1 || c.rdreq_bytes < 1 || c.wrreq_bytes < 1 || c.resp_bytes < 1)
        return "message and host request sizes must be at least 1 byte";
    if (c.msg_bytes > 4096 || c.rdreq_bytes > 4096 || c.wrreq_bytes > 4096 || c.resp_bytes > 4096 ||
        c.cmd_bytes > 4096)
        return "message and host request sizes must be at most 4096 bytes";
    if (c.cache_lines > 65536) return "cache-lines must be at most 65536";
    if (c.cache_lines) {
        if (c.cache_ways < 1 || c.cache_ways > c.cache_lines)
            return "cache-ways must be 1..cache-lines (cache-lines ways: fully associative)";
        if (c.cache_lines % c.cache_ways) return "cache-lines must be a multiple of cache-ways";
    }
    if (c.lookahead < 1 || c.lookahead > c.input_queue) return "lookahead must be 1..input-queue";
    if (c.input_queue < 1 || c.input_queue > 65536) return "input-queue must be 1..65536";
    if (c.regs > 1024) return "regs must be at most 1024";
    if (c.host_queue < 1 || c.host_queue > 65536) return "host-queue must be 1..65536";
    if (c.tags < 1 || c.tags > 65536) return "tags must be 1..65536";
    if (c.raw != AmuRaw::None && (c.raw_entries < 1 || c.raw_entries > 65536))
        return "raw-entries must be 1..65536";
    if (c.age_max < 1) return "age-max must be at least 1";
    if (c.cache_cycles < 1 || c.cache_cycles > 1000) return "cache-cycles must be 1..1000";
    if (c.conflict_bypass > 1) return "conflict-bypass must be 0 or 1";
    return nullptr;
}

const char *amu_rate_limit_name(AmuRateLimit r)
{
    static const char *const n[] = {"off", "aging", "hostq", "both"};
    return n[unsigned(r) & 3];
}

bool amu_rate_limit_from(const char *name, AmuRateLimit *out)
{
    for (AmuRateLimit r :
         {AmuRateLimit::Off, AmuRateLimit::Aging, AmuRateLimit::HostQueue, AmuRateLimit::Both})
        if (name && std::strcmp(name, amu_rate_limit_name(r)) == 0) {
            *out = r;
            return true;
        }
    return false;
}

const char *amu_raw_name(AmuRaw r)
{
    return r == AmuRaw::None ? "none" : r == AmuRaw::Ack ? "ack" : "flush";
}

bool amu_raw_from(const char *name, AmuRaw *out)
{
    for (AmuRaw r : {AmuRaw::None, AmuRaw::Ack, AmuRaw::Flush})
        if (name && std::strcmp(name, amu_raw_name(r)) == 0) {
            *out = r;
            return true;
        }
    return false;
}

// ---- AmuRamHost ----

bool AmuRamHost::valid(uint64_t addr, uint32_t len)
{
    return addr >= addr_ && len <= len_ && addr - addr_ <= len_ - len;
}

namespace {

// One host atomic on an operand of type T (uint32_t or uint64_t).
template <typename T> uint64_t host_amo(T *w, uint8_t op, uint64_t operand, uint64_t compare, uint64_t mask)
{
    const T v = T(operand);
    switch (op) {
    case ROCE_XOP_ADD:
        return __atomic_fetch_add(w, v, __ATOMIC_SEQ_CST);
    case ROCE_XOP_SWAP:
        return __atomic_exchange_n(w, v, __ATOMIC_SEQ_CST);
    case ROCE_XOP_XOR:
        return __atomic_fetch_xor(w, v, __ATOMIC_SEQ_CST);
    case ROCE_XOP_AND:
        return __atomic_fetch_and(w, v, __ATOMIC_SEQ_CST);
    case ROCE_XOP_OR:
        return __atomic_fetch_or(w, v, __ATOMIC_SEQ_CST);
    default: { // masked compare-swap: a compare-exchange loop
        T old = __atomic_load_n(w, __ATOMIC_SEQ_CST);
        while (!__atomic_compare_exchange_n(w, &old, T(amo_alu(op, sizeof(T), old, operand, compare, mask)),
                                            false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
        return old;
    }
    }
}

} // namespace

uint64_t amo_host_atomic(void *p, uint8_t size, uint8_t op, uint64_t operand, uint64_t compare, uint64_t mask)
{
    if (size == 4) return host_amo(static_cast<uint32_t *>(p), op, operand, compare, mask);
    return host_amo(static_cast<uint64_t *>(p), op, operand, compare, mask);
}

uint64_t AmuRamHost::amo(uint64_t addr, uint8_t size, uint8_t op, uint64_t operand, uint64_t compare,
                         uint64_t mask)
{
    return amo_host_atomic(base_ + (addr - addr_), size, op, operand, compare, mask);
}

uint64_t AmuRamHost::read_word(uint64_t addr)
{
    return __atomic_load_n(reinterpret_cast<uint64_t *>(base_ + (addr - addr_)), __ATOMIC_SEQ_CST);
}

void AmuRamHost::write_word(uint64_t addr, uint64_t value)
{
    __atomic_store_n(reinterpret_cast<uint64_t *>(base_ + (addr - addr_)), value, __ATOMIC_SEQ_CST);
}

// ---- AtomicUnit ----

AtomicUnit::AtomicUnit(const AmuConfig &c, AmuHost &host) : cfg_(c), host_(host)
{
    cycle_ps_ = std::max<uint64_t>(1, 1000000ull / cfg_.nic_mhz);
    if (cfg_.cache_lines) {
        sets_ = cfg_.cache_lines / std::max(1u, cfg_.cache_ways);
        lines_.resize(cfg_.cache_lines);
    }
    regs_.resize(cfg_.regs);
}

void AtomicUnit::submit(const AmoRequest &r)
{
    AmoRequest q = r;
    // An arrival before the last instant processed counts as then (its message enters later).
    q.arrival_ps = std::max(q.arrival_ps, last_ps_);
    if (!link_q_.empty()) q.arrival_ps = std::max(q.arrival_ps, link_q_.back().arrival_ps);
    if (!started_) {
        started_ = true;
        start_ps_ = q.arrival_ps;
    }
    // The next instant was chosen without this op: if it heads the link, the instant its
    // message is in (next_time()'s rule) may come first. So run_until in steps, submitting each
    // op after the model ran up to its arrival (the RNIC), processes the same instants as
    // submitting every op first.
    if (link_q_.empty() && input_q_.size() < cfg_.input_queue && now_ > last_ps_) {
        const uint64_t enter = std::max(q.arrival_ps, link_free_ps_) + ser_ps(cfg_.msg_bytes, cfg_.net_mbps);
        now_ = std::min(now_, std::max(last_ps_ + cycle_ps_, grid(enter)));
    }
    link_q_.push_back(q);
}

AmoStatus AtomicUnit::execute(const AmoRequest &r, uint64_t *old)
{
    *old = 0;
    if (cfg_.atomicity != AmuAtomicity::Global) return AmoStatus::BadOp;
    const AmoStatus s = check(r);
    AmoRequest q = r;
    if (s == AmoStatus::Ok) {
        q.executed = true;
        q.executed_old = *old = host_.amo(r.addr, r.size, r.op, r.operand, r.compare, r.mask);
    }
    submit(q);
    return s;
}

bool AtomicUnit::idle() const
{
    return link_q_.empty() && input_q_.empty() && issued_.empty() && hostq_.empty() && events_.empty();
}

// Work in the unit: anything past the start of its input link (an op whose message has not
// started arriving yet is the network's, not the unit's).
bool AtomicUnit::has_work() const
{
    return !input_q_.empty() || !issued_.empty() || !hostq_.empty() || !events_.empty() ||
           (!link_q_.empty() && link_q_.front().arrival_ps <= now_);
}

double AtomicUnit::mean_outstanding() const
{
    const uint64_t span = last_ps_ > start_ps_ ? last_ps_ - start_ps_ : 0;
    return span ? double(tag_area_ / (long double)span) : 0.0;
}

void AtomicUnit::schedule(uint64_t ps, Ev k, uint64_t word, uint64_t value, int32_t line, uint64_t issued_seq,
                          uint64_t sent_ps)
{
    events_.push_back(Event{ps, ev_seq_++, k, word, value, line, issued_seq, sent_ps});
    std::push_heap(events_.begin(), events_.end(), std::greater<Event>());
}

uint64_t AtomicUnit::h2n_send(uint64_t ready_ps, uint32_t bytes)
{
    const uint64_t start = std::max(h2n_free_, ready_ps), ser = ser_ps(bytes, cfg_.host_mbps);
    h2n_free_ = start + ser;
    st_.h2n_busy_ps += ser;
    return start;
}

void AtomicUnit::set_tags(uint32_t n)
{
    tags_used_ = n;
    ctr_.max_outstanding = std::max<uint64_t>(ctr_.max_outstanding, n);
}

AtomicUnit::Issued *AtomicUnit::find_issued(uint64_t seq)
{
    if (seq < issued_base_ || seq - issued_base_ >= issued_.size()) return nullptr;
    return &issued_[size_t(seq - issued_base_)];
}

void AtomicUnit::process_events()
{
    while (!events_.empty() && events_.front().ps <= now_) {
        std::pop_heap(events_.begin(), events_.end(), std::greater<Event>());
        const Event e = events_.back();
        events_.pop_back();
        const uint64_t L = uint64_t(cfg_.host_lat_ns) * 1000, M = uint64_t(cfg_.mem_ns) * 1000;
        switch (e.kind) {
        case Ev::ReadAtHost: {
            // The memory read happens now (Hca data); the response is ready mem-ns later.
            const uint64_t v = cfg_.atomicity == AmuAtomicity::Hca ? host_.read_word(e.word) : 0;
            schedule(e.ps + M, Ev::RespReady, e.word, v, e.line, e.issued_seq, e.sent_ps);
            break;
        }
        case Ev::RespReady: {
            // The response takes the host->NIC direction in the order transfers are ready for it
            // (responses and the node's own commands): it is claimed when ready, not when the
            // request reached the host, so a command that is ready first goes first.
            const uint64_t start = h2n_send(e.ps, cfg_.resp_bytes);
            st_.resp_wait_ps += start - e.ps;
            schedule(start + ser_ps(cfg_.resp_bytes, cfg_.host_mbps) + L, Ev::ReadResp, e.word, e.value,
                     e.line, e.issued_seq, e.sent_ps);
            break;
        }
        case Ev::ReadResp:
            set_tags(tags_used_ - 1);
            st_.reads++;
            st_.read_hold_ps += e.ps - e.sent_ps;
            if (e.line >= 0) {
                Line &l = lines_[size_t(e.line)];
                l.state = LineState::Valid;
                l.value = e.value;
                for (auto &is : issued_)
                    if (is.src == Src::Line && is.line == e.line && !is.ready) {
                        is.ready = true;
                        is.ready_ps = e.ps + cycle_ps_;
                    }
            } else if (Issued *is = find_issued(e.issued_seq)) {
                is->value = e.value;
                is->ready = true;
                is->ready_ps = e.ps + cycle_ps_;
            }
            break;
        case Ev::WriteAtHost:
            set_tags(tags_used_ - 1);
            st_.writes++;
            st_.write_hold_ps += e.ps - e.sent_ps;
            break;
        case Ev::WriteDone:
            if (cfg_.atomicity == AmuAtomicity::Hca) host_.write_word(e.word, e.value);
            break;
        case Ev::Ack: {
            auto it = raw_ack_.find(e.word);
            if (it != raw_ack_.end() && --it->second == 0) raw_ack_.erase(it);
            raw_ack_n_--;
            break;
        }
        case Ev::FlushDone:
            raw_flush_.clear();
            flushing_ = false;
            break;
        }
    }
}

void AtomicUnit::link_in()
{
    const uint64_t ser = ser_ps(cfg_.msg_bytes, cfg_.net_mbps);
    while (!link_q_.empty()) {
        if (input_q_.size() >= cfg_.input_queue) { // the network backs up: the link waits
            link_free_ps_ = std::max(link_free_ps_, now_);
            return;
        }
        const AmoRequest &r = link_q_.front();
        const uint64_t enter = std::max(r.arrival_ps, link_free_ps_) + ser;
        if (enter > now_) return;
        link_free_ps_ = enter;
        if (cfg_.symmetric) { // the node's own command to its NIC, on the host->NIC direction
            st_.cmds++;
            st_.cmd_wait_ps += h2n_send(enter, cfg_.cmd_bytes) - enter;
        }
        input_q_.push_back(r);
        link_q_.pop_front();
    }
}

void AtomicUnit::start_flush()
{
    if (flushing_) return;
    flushing_ = true;
    ctr_.raw_flushes++;
    hostq_.push_back(
        HostReq{HqKind::Flush, 0, 0, -1, 0, false}); // a control request: beyond the queue's size
}

bool AtomicUnit::host_queue_out()
{
    bool progress = false;
    const uint64_t L = uint64_t(cfg_.host_lat_ns) * 1000, M = uint64_t(cfg_.mem_ns) * 1000;
    while (!hostq_.empty()) {
        HostReq &h = hostq_.front();
        if (h.kind == HqKind::Flush) { // returns when every earlier request has completed
            schedule(std::max(now_ + L, last_write_done_ps_) + L, Ev::FlushDone, 0, 0, -1, 0);
            hostq_.pop_front();
            progress = true;
            continue;
        }
        if (tags_used_ >= cfg_.tags) {
            if (!h.waited) ctr_.stall_tags++;
            h.waited = true;
            break;
        }
        if (n2h_free_ > now_) break;
        const bool rd = h.kind == HqKind::Read;
        const uint64_t ser = ser_ps(rd ? cfg_.rdreq_bytes : cfg_.wrreq_bytes, cfg_.host_mbps);
        n2h_free_ = now_ + ser;
        const uint64_t at_host = now_ + ser + L;
        set_tags(tags_used_ + 1);
        if (rd) {
            ctr_.host_reads++;
            schedule(at_host, Ev::ReadAtHost, h.word, 0, h.line, h.issued_seq, now_);
        } else {
            ctr_.host_writes++;
            schedule(at_host, Ev::WriteAtHost, h.word, 0, -1, 0, now_);
            schedule(at_host + M, Ev::WriteDone, h.word, h.value, -1, 0);
            last_write_done_ps_ = std::max(last_write_done_ps_, at_host + M);
            if (cfg_.raw == AmuRaw::Ack) schedule(at_host + M + L, Ev::Ack, h.word, 0, -1, 0);
        }
        hostq_.pop_front();
        progress = true;
    }
    return progress;
}

int32_t AtomicUnit::lookup(uint64_t word) const
{
    if (!sets_) return -1;
    const uint32_t set = uint32_t((word >> 3) % sets_), ways = cfg_.cache_ways;
    for (uint32_t w = 0; w < ways; w++) {
        const Line &l = lines_[set * ways + w];
        if (l.state != LineState::Invalid && l.word == word) return int32_t(set * ways + w);
    }
    return -1;
}

bool AtomicUnit::word_busy(uint64_t word) const
{
    return inflight_.count(word) != 0;
}

int32_t AtomicUnit::victim(uint64_t word) const
{
    const uint32_t set = uint32_t((word >> 3) % sets_), ways = cfg_.cache_ways;
    int32_t best = -1;
    for (uint32_t w = 0; w < ways; w++) {
        const uint32_t i = set * ways + w;
        const Line &l = lines_[i];
        if (l.state == LineState::Invalid) return int32_t(i);
        if (l.state == LineState::Filling || word_busy(l.word)) continue;
        if (best < 0 || l.lru < lines_[size_t(best)].lru) best = int32_t(i);
    }
    return best;
}

bool AtomicUnit::window_has(uint64_t word)
{
    const size_t n = std::min<size_t>(cfg_.lookahead, input_q_.size());
    for (size_t i = 1; i < n; i++) {
        const AmoRequest &r = input_q_[i];
        if ((r.addr & ~7ull) == word && (r.executed || check(r) == AmoStatus::Ok)) return true;
    }
    return false;
}

bool AtomicUnit::rate_limit_allows(uint32_t chain) const
{
    // The host path is backed up: requests queue for it, or every tag or RAW entry is taken.
    const bool age = chain < cfg_.age_max,
               queue = hostq_.size() >= cfg_.hostq_threshold || tags_used_ >= cfg_.tags ||
                       (cfg_.raw == AmuRaw::Ack && raw_ack_n_ >= cfg_.raw_entries);
    switch (cfg_.rate_limit) {
    case AmuRateLimit::Off:
        return false;
    case AmuRateLimit::Aging:
        return age;
    case AmuRateLimit::HostQueue:
        return queue;
    case AmuRateLimit::Both:
        return age && queue;
    }
    return false;
}

void AtomicUnit::finish(const AmoRequest &r, AmoStatus s, uint64_t old)
{
    ctr_.ops++;
    host_.complete(AmoResult{r.id, s, old, now_ + cycle_ps_, r.arrival_ps});
}

AmoStatus AtomicUnit::check(const AmoRequest &r)
{
    if (r.op >= ROCE_XOP_COUNT || (r.size != 4 && r.size != 8)) return AmoStatus::BadOp;
    if (r.addr % r.size) return AmoStatus::Unaligned;
    if (!host_.valid(r.addr, r.size)) return AmoStatus::AccessError;
    return AmoStatus::Ok;
}

bool AtomicUnit::refuse(const AmoRequest &r)
{
    // An op executed at submission passed these checks then (and its memory was touched).
    const AmoStatus s = r.executed ? AmoStatus::Ok : check(r);
    if (s == AmoStatus::Ok) return false;
    ctr_.errors++;
    host_.guest_error("atomic unit: op " + std::to_string(r.op) + " size " + std::to_string(r.size) +
                      " at 0x" +
                      [&] {
                          char b[24];
                          std::snprintf(b, sizeof b, "%llx", (unsigned long long)r.addr);
                          return std::string(b);
                      }() +
                      ": " + amo_status_name(s) + " (completed with an error, memory untouched)");
    finish(r, s, 0);
    return true;
}

// The issue unit: one op per cycle, in order (atomic_unit.h). Every check comes before any
// change, so a stalled op leaves no trace but its stall counter.
bool AtomicUnit::issue()
{
    head_block_ = AmuBlock::None;
    if (input_q_.empty()) return false;
    const AmoRequest r = input_q_.front();
    if (refuse(r)) {
        input_q_.pop_front();
        return true;
    }
    const uint64_t word = r.addr & ~7ull;
    Issued is;
    is.rq = r;
    const uint64_t seq = issued_base_ + issued_.size();

    int32_t fr = -1;
    for (size_t i = 0; i < regs_.size(); i++)
        if (regs_[i].used && !regs_[i].claimed && regs_[i].word == word) fr = int32_t(i);
    auto raw_blocks = [&]() {
        bool hit = false;
        if (cfg_.raw == AmuRaw::Ack) {
            hit = raw_ack_.count(word) != 0;
        } else if (cfg_.raw == AmuRaw::Flush) {
            hit = std::find(raw_flush_.begin(), raw_flush_.end(), word) != raw_flush_.end();
            if (hit) start_flush();
        }
        if (hit && !head_flag_raw_) ctr_.raw_hits++;
        head_flag_raw_ = head_flag_raw_ || hit;
        if (hit) head_block_ = AmuBlock::Raw;
        return hit;
    };
    auto hostq_full = [&]() {
        const bool full = hostq_.size() >= cfg_.host_queue;
        if (full && !head_flag_hostq_) ctr_.stall_hostq++;
        head_flag_hostq_ = head_flag_hostq_ || full;
        if (full) head_block_ = AmuBlock::HostQueue;
        return full;
    };

    int32_t install = -1;
    bool evict_to_raw = false, bypass = false;
    if (fr >= 0) {
        is.src = Src::Reg;
        is.src_reg = fr;
        is.chain = regs_[size_t(fr)].chain;
        is.ready_ps = now_ + cycle_ps_; // a register read; later if the producer has not executed
    } else {
        if (word_busy(word)) {
            if (!head_flag_busy_) ctr_.stall_busy++;
            head_flag_busy_ = true;
            head_block_ = AmuBlock::Busy;
            return false;
        }
        const int32_t l = lookup(word);
        if (l >= 0) {
            is.src = Src::Line;
            is.line = l;
        } else {
            if (raw_blocks()) return false;
            if (sets_) install = victim(word);
            if (sets_ && install < 0 && !cfg_.conflict_bypass) {
                if (!head_flag_conflict_) ctr_.stall_conflict++;
                head_flag_conflict_ = true;
                // what the set's ways wait for: a host read (filling), or the in-order ALU
                const uint32_t set = uint32_t((word >> 3) % sets_);
                head_block_ = AmuBlock::ConflictAlu;
                for (uint32_t w = 0; w < cfg_.cache_ways; w++)
                    if (lines_[set * cfg_.cache_ways + w].state == LineState::Filling)
                        head_block_ = AmuBlock::ConflictFill;
                return false;
            }
            if (install >= 0) {
                const Line &v = lines_[size_t(install)];
                evict_to_raw = cfg_.raw == AmuRaw::Flush && v.state == LineState::Valid && v.written;
                if (evict_to_raw && (flushing_ || raw_flush_.size() >= cfg_.raw_entries)) {
                    if (!head_flag_raw_) ctr_.raw_full++;
                    head_flag_raw_ = true;
                    head_block_ = AmuBlock::Raw;
                    start_flush();
                    return false;
                }
            }
            if (hostq_full()) return false;
            // no cache, or (conflict-bypass) no way free in the set: a read of its own, the
            // result written through without a line
            is.src = install >= 0 ? Src::Line : Src::OwnRead;
            is.line = install;
            bypass = sets_ && install < 0;
        }
    }

    // Committed from here on.
    if (is.src == Src::Reg) {
        regs_[size_t(fr)].claimed = true;
        ctr_.forwards++;
    } else if (is.line >= 0 && install < 0) {
        ctr_.hits++;
        lines_[size_t(is.line)].lru = ++lru_clock_;
        is.ready = true;
        is.ready_ps = now_ + uint64_t(cfg_.cache_cycles) * cycle_ps_;
    } else {
        ctr_.misses++;
        ctr_.bypasses += bypass;
        if (install >= 0) {
            Line &v = lines_[size_t(install)];
            if (v.state == LineState::Valid) ctr_.evictions++;
            if (evict_to_raw) raw_flush_.push_back(v.word);
            v = Line{LineState::Filling, word, 0, ++lru_clock_, false};
        }
        hostq_.push_back(HostReq{HqKind::Read, word, 0, install, seq, false});
    }

    // Destination: a register when a later op in the window wants this word and the policy
    // allows it (the host write is suppressed), else the cache line and a host write.
    if (sets_ && window_has(word) && rate_limit_allows(is.chain)) {
        for (size_t i = 0; i < regs_.size(); i++)
            if (!regs_[i].used) {
                regs_[i] = Reg{true, false, false, word, 0, is.chain + 1};
                is.dst_reg = int32_t(i);
                ctr_.writes_suppressed++;
                break;
            }
    }
    issued_.push_back(is);
    inflight_[word]++;
    input_q_.pop_front();
    head_flag_busy_ = head_flag_conflict_ = head_flag_hostq_ = head_flag_raw_ = false;
    return true;
}

// The ALU: the head of the issued ops, in order, once its operand is there.
bool AtomicUnit::alu()
{
    alu_blocked_ = false;
    if (issued_.empty()) return false;
    Issued &h = issued_.front();
    uint64_t ready_ps;
    if (h.src == Src::Reg) {
        const Reg &g = regs_[size_t(h.src_reg)];
        if (!g.ready) return false;
        ready_ps = h.ready_ps;
    } else {
        if (!h.ready) return false;
        ready_ps = h.ready_ps;
    }
    if (ready_ps > now_) return false;
    const uint64_t word = h.rq.addr & ~7ull;
    const bool to_host = h.dst_reg < 0;
    if (to_host) {
        if (hostq_.size() >= cfg_.host_queue) {
            if (!alu_flag_hostq_) ctr_.stall_hostq++;
            alu_flag_hostq_ = true;
            alu_blocked_ = true;
            return false;
        }
        const bool raw_full =
            cfg_.raw == AmuRaw::Ack ? raw_ack_n_ >= cfg_.raw_entries
            : cfg_.raw == AmuRaw::Flush && (h.src == Src::Line ? h.line : lookup(word)) < 0
                ? (flushing_ || raw_flush_.size() >= cfg_.raw_entries) &&
                      std::find(raw_flush_.begin(), raw_flush_.end(), word) == raw_flush_.end()
                : false;
        if (raw_full) {
            if (!alu_flag_raw_) ctr_.raw_full++;
            alu_flag_raw_ = true;
            alu_blocked_ = true;
            if (cfg_.raw == AmuRaw::Flush) start_flush();
            return false;
        }
    }

    // The operand word (Hca data path) and the operation.
    uint64_t cur = 0;
    if (h.src == Src::Reg)
        cur = regs_[size_t(h.src_reg)].value;
    else if (h.src == Src::Line)
        cur = lines_[size_t(h.line)].value;
    else
        cur = h.value;
    const unsigned shift = (h.rq.size == 4 && (h.rq.addr & 4)) ? 32 : 0;
    const uint64_t m = lane_mask(h.rq.size);
    uint64_t old;
    if (h.rq.executed)
        old = h.rq.executed_old;
    else if (cfg_.atomicity == AmuAtomicity::Global)
        old = host_.amo(h.rq.addr, h.rq.size, h.rq.op, h.rq.operand, h.rq.compare, h.rq.mask);
    else
        old = (cur >> shift) & m;
    const uint64_t nv = amo_alu(h.rq.op, h.rq.size, old, h.rq.operand, h.rq.compare, h.rq.mask);
    const uint64_t next = (cur & ~(m << shift)) | (nv << shift);

    if (h.src == Src::Reg) regs_[size_t(h.src_reg)] = Reg{};
    if (!to_host) {
        Reg &d = regs_[size_t(h.dst_reg)];
        d.value = next;
        d.ready = true;
        for (auto &is : issued_) // the consumer's operand is here next cycle
            if (is.src == Src::Reg && is.src_reg == h.dst_reg)
                is.ready_ps = std::max(is.ready_ps, now_ + cycle_ps_);
    } else {
        const int32_t l = h.src == Src::Line ? h.line : lookup(word);
        if (l >= 0) {
            Line &ln = lines_[size_t(l)];
            ln.value = next;
            ln.state = LineState::Valid;
            ln.written = true;
            ln.lru = ++lru_clock_;
        }
        hostq_.push_back(HostReq{HqKind::Write, word, next, -1, 0, false});
        if (cfg_.raw == AmuRaw::Ack) {
            raw_ack_[word]++;
            raw_ack_n_++;
        } else if (cfg_.raw == AmuRaw::Flush && l < 0 &&
                   std::find(raw_flush_.begin(), raw_flush_.end(), word) == raw_flush_.end()) {
            raw_flush_.push_back(word); // not (or no longer) cached: the write leaves the unit at once
        }
    }
    auto it = inflight_.find(word);
    if (it != inflight_.end() && --it->second == 0) inflight_.erase(it);
    const AmoRequest rq = h.rq;
    issued_.pop_front();
    issued_base_++;
    alu_flag_hostq_ = alu_flag_raw_ = false;
    finish(rq, AmoStatus::Ok, old);
    return true;
}

uint64_t AtomicUnit::next_time() const
{
    uint64_t t = kNever;
    if (!events_.empty()) t = std::min(t, events_.front().ps);
    if (!link_q_.empty() && input_q_.size() < cfg_.input_queue)
        t = std::min(t, std::max(link_q_.front().arrival_ps, link_free_ps_) +
                            ser_ps(cfg_.msg_bytes, cfg_.net_mbps));
    // The host queue can send when the link is free and a tag is (a flush needs no tag). A request
    // queued after this cycle's host_queue_out (the ALU starting a flush) goes next cycle.
    if (!hostq_.empty() && (hostq_.front().kind == HqKind::Flush || tags_used_ < cfg_.tags))
        t = std::min(t, std::max(n2h_free_, now_ + 1));
    if (!issued_.empty()) {
        const Issued &h = issued_.front();
        if (h.ready_ps > now_ && (h.ready || h.src == Src::Reg)) t = std::min(t, h.ready_ps);
    }
    return t;
}

void AtomicUnit::run_until(uint64_t ps)
{
    while (!idle() && now_ < ps) {
        // The time since the last instant processed, in the state that instant left: host
        // requests in flight (Little's law) and the busy time.
        const uint64_t dt = now_ - last_ps_;
        if (started_ && last_ps_ >= start_ps_) {
            tag_area_ += (long double)tags_used_ * (long double)dt;
            st_.block_ps[size_t(head_block_)] += dt;
            st_.alu_block_ps += alu_blocked_ ? dt : 0;
        }
        if (work_)
            active_ps_ += dt;
        else if (!link_q_.empty() && link_q_.front().arrival_ps < now_) // the next op started arriving
            active_ps_ += now_ - std::max(link_q_.front().arrival_ps, last_ps_);
        last_ps_ = now_;
        const size_t ev_before = events_.size(), in_before = link_q_.size();
        process_events();
        link_in();
        bool progress = events_.size() != ev_before || link_q_.size() != in_before;
        progress |= host_queue_out();
        progress |= alu();
        progress |= issue();
        work_ = has_work();
        uint64_t nx = progress ? now_ + cycle_ps_ : next_time();
        if (nx == kNever) {
            // Cannot happen by construction (every stall waits on an event or a later stage):
            // report rather than spin.
            host_.guest_error("atomic unit: internal deadlock at " + std::to_string(now_) + " ps");
            return;
        }
        // The next instant, on the clock's grid; it may lie beyond ps (then it is not processed
        // yet: an operation submitted meanwhile can pull it back, submit()).
        now_ = std::max(now_ + cycle_ps_, grid(nx));
    }
}

// ---- The load generator and the bounds ----

uint64_t hpcc_starts(int64_t n)
{
    constexpr int64_t kPeriod = 1317624576693539401LL;
    while (n < 0)
        n += kPeriod;
    while (n > kPeriod)
        n -= kPeriod;
    if (n == 0) return 1;
    uint64_t m2[64], t = 1;
    for (auto &m : m2) { // m2[i] = x^(2i) in GF(2)[x] / POLY
        m = t;
        t = hpcc_next(hpcc_next(t));
    }
    int i = 62;
    while (i >= 0 && !((n >> i) & 1))
        i--;
    uint64_t ran = 2;
    while (i > 0) { // square, then multiply by x if the next bit of n is set
        uint64_t sq = 0;
        for (int j = 0; j < 64; j++)
            if ((ran >> j) & 1) sq ^= m2[j];
        ran = sq;
        i--;
        if ((n >> i) & 1) ran = hpcc_next(ran);
    }
    return ran;
}

namespace {

struct ModelHost : AmuRamHost {
    explicit ModelHost(std::vector<uint64_t> &mem)
        : AmuRamHost(reinterpret_cast<uint8_t *>(mem.data()), 0, mem.size() * 8)
    {
    }
    void complete(const AmoResult &r) override
    {
        last_ps = std::max(last_ps, r.done_ps);
        errors += r.status != AmoStatus::Ok;
        done++;
    }
    void guest_error(const std::string &m) override { error = m; }
    uint64_t last_ps = 0, errors = 0, done = 0;
    std::string error;
};

AmuLoadResult finish_load(AtomicUnit &u, ModelHost &h, uint64_t ops, bool exact)
{
    AmuLoadResult r;
    r.ops = ops;
    r.c = u.counters();
    r.s = u.stats();
    r.mean_outstanding = u.mean_outstanding();
    r.active_ns = double(u.active_ps()) / 1000.0;
    if (!h.error.empty() || h.done != ops || h.errors) {
        r.error = h.error.empty() ? "operations lost or failed" : h.error;
        return r;
    }
    r.ok = true;
    r.exact = exact;
    r.elapsed_ns = double(h.last_ps) / 1000.0;
    r.mops = r.elapsed_ns > 0 ? double(ops) / r.elapsed_ns * 1000.0 : 0;
    r.mbps = r.mops * 8.0;
    return r;
}

} // namespace

AmuLoadResult amu_model_hotspot(const AmuConfig &c, const HotspotMix &m)
{
    AmuLoadResult bad;
    if (const char *e = amu_check_config(c)) {
        bad.error = e;
        return bad;
    }
    if (m.pes < 2 || m.pes > 4096 || m.ops_per_pe < 1 || m.ops_per_pe > 100000 || m.addrs_per_pe > 4096 ||
        (m.order == HotspotOrder::Bursts && (m.burst < 1 || m.burst > m.ops_per_pe))) {
        bad.error = "hot-spot: pes 2..4096, ops-per-pe 1..100000, addrs-per-pe 0..4096, burst 1..ops-per-pe";
        return bad;
    }
    const uint32_t srcs = m.pes - 1, per = std::max(1u, m.addrs_per_pe);
    std::vector<uint64_t> mem(size_t(m.addrs_per_pe ? srcs * per : 1), 0);
    ModelHost h(mem);
    AtomicUnit u(c, h);
    // The target's input link takes the next message from a source with messages left (each
    // source's own order kept), chosen as `m.order` says (HotspotMix). By default a random one:
    // the sources run unsynchronised, so the arbitration does not line their i-th operations up.
    uint64_t id = 0, rng = 0x9E3779B97F4A7C15ull ^ m.seed;
    std::vector<uint32_t> next(srcs, 0), live(srcs);
    for (uint32_t p = 0; p < srcs; p++)
        live[p] = p;
    size_t k = 0, rr = 0;
    uint32_t left_in_burst = 0;
    std::shared_ptr<const std::vector<uint32_t>> torus = m.arrivals;
    size_t tk = 0;
    if (m.order == HotspotOrder::Torus && !torus) {
        TorusOrder o = torus_hotspot_order(m.net, m.pes, m.ops_per_pe);
        if (!o.ok) {
            bad.error = o.error;
            return bad;
        }
        torus = std::make_shared<const std::vector<uint32_t>>(std::move(o.src));
    }
    if (m.order == HotspotOrder::Torus && torus->size() != size_t(srcs) * m.ops_per_pe) {
        bad.error = "hot-spot: the arrivals given are not this mix's (" + std::to_string(torus->size()) +
                    " messages)";
        return bad;
    }
    while (!live.empty()) {
        if (m.order == HotspotOrder::Torus) {
            const uint32_t named = (*torus)[tk++], pe = named - 1; // the network's PEs 1.. are sources 0..
            k = size_t(std::find(live.begin(), live.end(), pe) - live.begin());
            if (k == live.size()) {
                bad.error = "hot-spot: the arrivals given name PE " + std::to_string(named) +
                            ", not a source with messages left (PEs 1.." + std::to_string(m.pes - 1) + ", " +
                            std::to_string(m.ops_per_pe) + " messages each)";
                return bad;
            }
        } else if (m.order == HotspotOrder::RoundRobin) {
            k = rr++ % live.size();
        } else if (m.order == HotspotOrder::Random || left_in_burst == 0) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            k = size_t(rng % live.size());
            left_in_burst = m.burst;
        }
        if (left_in_burst) left_in_burst--;
        const uint32_t pe = live[k], i = next[pe]++;
        if (next[pe] == m.ops_per_pe) {
            // the last source in the slot moves in: a burst in progress ends with its source
            live[k] = live.back();
            live.pop_back();
            left_in_burst = 0;
            if (m.order == HotspotOrder::RoundRobin && rr) rr--; // the source moved into k goes next
        }
        {
            AmoRequest r;
            r.id = id++;
            r.addr = m.addrs_per_pe ? (uint64_t(pe) * per + i % per) * 8 : 0;
            r.op = ROCE_XOP_ADD;
            r.operand = 1;
            r.fetch = m.fetch;
            u.submit(r);
        }
    }
    u.drain();
    bool exact = true;
    if (!m.addrs_per_pe) {
        exact = mem[0] == uint64_t(srcs) * m.ops_per_pe;
    } else {
        for (uint32_t w = 0; w < srcs * per; w++)
            exact = exact && mem[w] == m.ops_per_pe / per + (w % per < m.ops_per_pe % per ? 1 : 0);
    }
    return finish_load(u, h, id, exact);
}

AmuLoadResult amu_model_gups(const AmuConfig &c, const GupsMix &m)
{
    AmuLoadResult bad;
    if (const char *e = amu_check_config(c)) {
        bad.error = e;
        return bad;
    }
    if (m.table_log2 < 1 || m.table_log2 > 22 || m.procs < 1 || m.procs > 1024 || (m.procs & (m.procs - 1)) ||
        !(m.offered_mups >= 0 && m.offered_mups <= 1e6)) {
        bad.error = "gups: table-log2 1..22, procs a power of two 1..1024, rate 0..1000000 M/s";
        return bad;
    }
    const uint64_t words = 1ull << m.table_log2, per_proc = 4 * words;
    std::vector<uint64_t> mem(words), ref(words);
    for (uint64_t i = 0; i < words; i++)
        mem[i] = ref[i] = i; // HPCC's Table[i] = i (node 0's part)
    ModelHost h(mem);
    AtomicUnit u(c, h);
    std::vector<uint64_t> ran(m.procs);
    std::vector<uint32_t> order(m.procs);
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ m.seed, n = 0;
    for (uint32_t p = 0; p < m.procs; p++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        ran[p] = hpcc_starts(int64_t((uint64_t(p) << 44) + (rng >> 24)));
        order[p] = p;
    }
    for (uint64_t k = 0; k < per_proc; k++) {
        for (uint32_t i = m.procs; i > 1; i--) { // Fisher-Yates: this step's arrival order
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            std::swap(order[i - 1], order[size_t(rng % i)]);
        }
        for (uint32_t p : order) {
            ran[p] = hpcc_next(ran[p]);
            const uint64_t v = ran[p];
            if (((v >> m.table_log2) & (m.procs - 1)) != 0) continue; // another node's update
            const uint64_t w = v & (words - 1);
            ref[w] ^= v;
            AmoRequest r;
            if (m.offered_mups > 0) r.arrival_ps = uint64_t(double(n) * 1e6 / m.offered_mups);
            r.id = n++;
            r.addr = w * 8;
            r.op = ROCE_XOP_XOR;
            r.operand = v;
            r.fetch = false;
            u.submit(r);
        }
    }
    u.drain();
    return finish_load(u, h, n, mem == ref);
}

AmuBounds amu_bounds(const AmuConfig &c)
{
    AmuBounds b;
    const double host = double(c.host_mbps) * 1e6, net = double(c.net_mbps) * 1e6;
    b.base_n2h = c.wrreq_bytes;                            // eq. 1
    b.base_h2n = c.cmd_bytes;                              // eq. 2
    b.amu_n2h = c.rdreq_bytes + c.wrreq_bytes;             // eq. 3
    b.amu_h2n = c.cmd_bytes + c.resp_bytes;                // eq. 4
    b.base_rate = host / std::max(b.base_n2h, b.base_h2n); // eq. 5
    b.amu_rate = host / std::max(b.amu_n2h, b.amu_h2n);
    b.target_rate = std::min(host / std::max(b.amu_n2h, double(c.resp_bytes)), net / c.msg_bytes);
    b.rd_lat_ns = 2.0 * c.host_lat_ns;
    b.wr_lat_ns = c.host_lat_ns;
    const double lat = (b.rd_lat_ns + b.wr_lat_ns + c.mem_ns) * 1e-9; // eq. 6
    b.req_gups = b.amu_rate * lat;
    b.req_target = b.target_rate * lat;
    return b;
}

} // namespace rackemu::rnic
