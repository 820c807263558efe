// SPDX-License-Identifier: MIT
// LightSABRes in the R2P2; see r2p2.h and docs/sonuma.md.
#include "r2p2.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <mutex>

namespace rackemu::sonuma {

R2p2::R2p2(R2p2Mem &mem, R2p2Out &out, unsigned att_entries, unsigned sb_depth)
    : mem_(mem), out_(out), sb_depth_(std::max(1u, sb_depth)), att_(std::max(1u, att_entries))
{
}

int R2p2::find(const SabreId &id) const
{
    for (unsigned i = 0; i < att_.size(); i++)
        if (att_[i].state != AttState::Free && att_[i].id == id) return int(i);
    return -1;
}

bool R2p2::register_sabre(const SabreId &id, uint64_t base, uint32_t nblocks, unsigned ver_off, bool spec)
{
    // the version word must lie inside block 0 (the 8 bytes at ver_off are read from a 64-byte block)
    Queued q{id, base, std::max(1u, nblocks), ver_off & (RMC_BLOCK_SIZE - 8), !spec, 0};
    for (unsigned i = 0; i < att_.size(); i++) {
        if (att_[i].state == AttState::Free && queue_.empty()) {
            install(i, q);
            return true;
        }
    }
    cnt_.att_stalls++;
    queue_.push_back(q);
    return false;
}

void R2p2::install(unsigned att, const Queued &q)
{
    AttEntry &e = att_[att];
    e = AttEntry{};
    e.state = AttState::Registered;
    e.id = q.id;
    e.base = q.base;
    e.nblocks = q.nblocks;
    e.ver_off = q.ver_off;
    e.requests = q.requests;
    e.nospec = q.nospec;
    e.spec = true; // set at registration (sec. 4.1)
    e.read.assign(sb_depth_, 0);
    e.in_flight.assign(q.nblocks, 0);
    cnt_.sabre_reg++;
}

bool R2p2::add_requests(const SabreId &id, uint32_t k)
{
    int a = find(id);
    if (a >= 0) {
        AttEntry &e = att_[a];
        if (e.requests + uint64_t(k) > e.nblocks) return false;
        e.requests += k;
        if (e.state == AttState::Aborting) {
            // requests that arrive after the abort are answered at once, without data
            while (e.answered < e.requests && e.issued < e.requests) {
                e.issued++;
                answer(unsigned(a), e.issued - 1, nullptr);
            }
            maybe_finish(unsigned(a));
        }
        return true;
    }
    for (auto &q : queue_) {
        if (q.id == id) {
            if (q.requests + uint64_t(k) > q.nblocks) return false;
            q.requests += k;
            return true;
        }
    }
    return false;
}

bool R2p2::step()
{
    for (unsigned i = 0; i < att_.size(); i++) {
        unsigned a = (rr_ + i) % unsigned(att_.size());
        AttEntry &e = att_[a];
        if (e.state != AttState::Registered && e.state != AttState::Speculating &&
            e.state != AttState::Streaming)
            continue;
        uint32_t limit = std::min(e.nblocks, e.requests);
        if (e.issued >= limit) continue;
        uint32_t j = e.issued;
        if (j > 0 && e.spec && e.nospec) continue; // no speculation: wait for the version
        if (j > 0 && e.spec && j >= sb_depth_) {
            // the stream buffer is full: stall until the version is known (sec. 4.1: the R2P2
            // "simply needs to stall"). Counted once per SABRe, not once per step() that finds it.
            if (!e.stalled) cnt_.sb_stalls++;
            e.stalled = true;
            continue;
        }
        e.issued++;
        e.in_flight[j] = 1;
        if (j == 0)
            e.state = AttState::Speculating;
        else if (e.spec)
            cnt_.spec_blocks++;
        rr_ = (a + 1) % unsigned(att_.size());
        mem_.issue_load(a, j, e.base + uint64_t(j) * RMC_BLOCK_SIZE);
        return true;
    }
    return false;
}

void R2p2::answer(unsigned att, uint32_t blk, const uint8_t *data)
{
    AttEntry &e = att_[att];
    e.answered++;
    out_.block_reply(e.id, blk, data);
}

void R2p2::load_done(unsigned att, uint32_t blk, const uint8_t data[RMC_BLOCK_SIZE])
{
    if (att >= att_.size()) return;
    AttEntry &e = att_[att];
    if (e.state == AttState::Free || blk >= e.nblocks || !e.in_flight[blk]) return;
    e.in_flight[blk] = 0;
    if (e.state == AttState::Aborting) {
        answer(att, blk, nullptr); // a load in flight at the abort: its data is dropped
        maybe_finish(att);
        return;
    }
    if (blk == 0) {
        uint64_t v;
        std::memcpy(&v, data + e.ver_off, 8);
        e.version = v;
        if (v & 1) {
            start_abort(att, Abort::Locked, 0); // a writer holds the object
            answer(att, 0, nullptr);
            maybe_finish(att);
            return;
        }
        e.spec = false; // the window of vulnerability closes
        e.state = AttState::Streaming;
    } else if (e.spec && blk < sb_depth_) {
        e.read[blk] = 1;
    }
    answer(att, blk, data);
    maybe_confirm(att);
}

void R2p2::maybe_confirm(unsigned att)
{
    AttEntry &e = att_[att];
    if (e.state != AttState::Streaming || e.answered < e.nblocks) return;
    mem_.before_confirm(att);
    if (e.state != AttState::Streaming) return; // aborted meanwhile
    if (e.base_inval) {
        e.state = AttState::Validating;
        cnt_.validate_stage++;
        mem_.issue_validate(att, e.base + e.ver_off);
        return;
    }
    finish(att);
}

void R2p2::validate_done(unsigned att, uint64_t version)
{
    if (att >= att_.size() || att_[att].state != AttState::Validating) return;
    AttEntry &e = att_[att];
    if (version == e.version) {
        e.validated = true;
        finish(att);
    } else {
        start_abort(att, Abort::Validate, 0);
        maybe_finish(att);
    }
}

void R2p2::invalidate(uint64_t addr)
{
    for (unsigned a = 0; a < att_.size(); a++) {
        AttEntry &e = att_[a];
        if (e.state == AttState::Free || e.state == AttState::Aborting) continue;
        if (addr < e.base || addr - e.base >= uint64_t(e.nblocks) * RMC_BLOCK_SIZE) continue;
        uint32_t j = uint32_t((addr - e.base) / RMC_BLOCK_SIZE);
        if (j == 0) {
            // before the version is read the base block holds nothing yet; after, its loss means
            // the version must be checked again before the object is declared atomic
            if (!e.spec) e.base_inval = true;
        } else if (e.spec && j < sb_depth_ && e.read[j]) {
            start_abort(a, Abort::Window, j); // a block read in the window changed
            maybe_finish(a);
        } else if (!e.spec) {
            cnt_.inval_ignored++; // read after the version: an eviction, harmless
        }
    }
}

void R2p2::start_abort(unsigned att, Abort why, uint32_t blk)
{
    AttEntry &e = att_[att];
    e.state = AttState::Aborting;
    e.abort = why;
    e.abort_block = blk;
    e.issued_at_abort = e.issued;
    switch (why) {
    case Abort::Locked:
        cnt_.abort_locked++;
        break;
    case Abort::Window:
        cnt_.abort_window++;
        break;
    case Abort::Validate:
        cnt_.abort_validate++;
        break;
    case Abort::None:
        break;
    }
    // requests not issued yet are answered now, without data; loads in flight when they complete
    // (a VALIDATE abort has none left: every block went out with data, the validation packet
    // carries the verdict)
    while (e.issued < e.requests) {
        e.issued++;
        answer(att, e.issued - 1, nullptr);
    }
}

void R2p2::maybe_finish(unsigned att)
{
    AttEntry &e = att_[att];
    if (e.state != AttState::Aborting) return;
    if (e.answered < e.nblocks) return; // in-flight loads or requests still to come
    finish(att);
}

void R2p2::finish(unsigned att)
{
    AttEntry &e = att_[att];
    if (e.abort == Abort::None) cnt_.sabre_ok++;
    out_.validation(e.id, e);
    e.state = AttState::Free;
    if (!queue_.empty()) {
        Queued q = queue_.front();
        queue_.pop_front();
        install(att, q);
    }
}

// ---------------------------------------------------------------------------------------------
// Production memory

namespace {

uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// One block as the R2P2 reads it: eight single-copy atomic 8-byte acquire loads, ascending,
// starting at word `first` (block 0 reads its version word first).
void load_block(uint8_t *dst, const uint8_t *src, unsigned first = 0)
{
    for (unsigned k = 0; k < 8; k++) {
        unsigned w = (first + k) % 8;
        uint64_t v = __atomic_load_n(reinterpret_cast<const uint64_t *>(src + 8 * w), __ATOMIC_ACQUIRE);
        std::memcpy(dst + 8 * w, &v, 8);
    }
}

} // namespace

struct HostSabreServer::Impl : R2p2Mem, R2p2Out {
    std::mutex mu;
    R2p2 r2p2;
    // per serve()
    const SabreRequest *req = nullptr;
    const std::function<void(uint32_t, const uint8_t *)> *out = nullptr;
    std::vector<uint8_t> shadow; // the copies of the blocks read (the emulated Shared lines)
    std::deque<std::pair<unsigned, uint32_t>> done; // loads completed, to deliver
    bool block0_pending = false;
    unsigned att0 = 0;
    std::deque<std::pair<unsigned, uint64_t>> vdone;
    bool finished = false;
    AttEntry result;
    HostSabreServer *owner = nullptr;

    Impl(unsigned att, unsigned sb) : r2p2(*this, *this, att, sb) {}

    uint8_t *blk(uint32_t j) { return req->obj + uint64_t(j) * RMC_BLOCK_SIZE; }

    void issue_load(unsigned att, uint32_t j, uint64_t) override
    {
        if (j == 0) { // the version block: its completion models the memory latency
            block0_pending = true;
            att0 = att;
            return;
        }
        load_block(&shadow[size_t(j) * RMC_BLOCK_SIZE], blk(j));
        done.emplace_back(att, j);
    }
    void issue_validate(unsigned att, uint64_t ver_addr) override // relative to the object (base 0)
    {
        uint64_t v =
            __atomic_load_n(reinterpret_cast<const uint64_t *>(req->obj + ver_addr), __ATOMIC_ACQUIRE);
        vdone.emplace_back(att, v);
    }
    void before_confirm(unsigned att) override
    {
        std::atomic_thread_fence(std::memory_order_acquire);
        if (owner->hook_before_confirm) owner->hook_before_confirm();
        uint8_t now[RMC_BLOCK_SIZE];
        load_block(now, blk(0), r2p2.entry(att).ver_off / 8); // tau2: the version word first
        if (std::memcmp(now, shadow.data(), RMC_BLOCK_SIZE)) r2p2.invalidate(uint64_t(0)); // base block
    }
    void block_reply(const SabreId &, uint32_t j, const uint8_t *data) override { (*out)(j, data); }
    void validation(const SabreId &, const AttEntry &e) override
    {
        finished = true;
        result = e;
    }
};

HostSabreServer::HostSabreServer(unsigned att_entries, unsigned sb_depth)
    : impl_(std::make_unique<Impl>(att_entries, sb_depth))
{
    impl_->owner = this;
}

HostSabreServer::~HostSabreServer() = default;

R2p2Counters HostSabreServer::counters() const
{
    std::lock_guard lk(impl_->mu);
    return impl_->r2p2.counters();
}

SabreOutcome HostSabreServer::serve(const SabreRequest &rq,
                                    const std::function<void(uint32_t, const uint8_t *)> &out)
{
    Impl &m = *impl_;
    std::lock_guard lk(m.mu);
    // The state machine works on addresses relative to the object: block j is at 64 * j.
    m.req = &rq;
    m.out = &out;
    m.shadow.assign(size_t(rq.nblocks) * RMC_BLOCK_SIZE, 0);
    m.done.clear();
    m.vdone.clear();
    m.block0_pending = false;
    m.finished = false;
    SabreOutcome o;
    o.trace.nblocks = rq.nblocks;
    o.trace.spec = rq.spec;
    R2p2 &r = m.r2p2;
    r.register_sabre(rq.id, 0, rq.nblocks, rq.ver_off, rq.spec);
    r.add_requests(rq.id, rq.nblocks); // every block request came in the registration's frame
    while (!m.finished) {
        bool progress = false;
        while (r.step())
            progress = true;
        while (!m.done.empty()) {
            auto [a, j] = m.done.front();
            m.done.pop_front();
            r.load_done(a, j, &m.shadow[size_t(j) * RMC_BLOCK_SIZE]);
            progress = true;
        }
        while (!m.vdone.empty()) {
            auto [a, v] = m.vdone.front();
            m.vdone.pop_front();
            r.validate_done(a, v);
            progress = true;
        }
        if (m.finished) break;
        if (m.block0_pending && !progress) {
            // Window close: step() issues nothing more before the version is known (stream
            // buffer full, every block issued, or no speculation) and every copy was delivered.
            m.block0_pending = false;
            if (rq.window_delay_ns) {
                uint64_t end = now_ns() + rq.window_delay_ns;
                while (now_ns() < end) {
                }
            }
            if (hook_window_close) hook_window_close();
            uint8_t *b0 = &m.shadow[0];
            load_block(b0, m.blk(0), r.entry(m.att0).ver_off / 8); // the version first (tau1), then the rest
            // the emulated invalidations: blocks read in the window that changed since
            const AttEntry &e = r.entry(m.att0);
            uint8_t now[RMC_BLOCK_SIZE];
            for (uint32_t j = 1; j < std::min(rq.nblocks, r.sb_depth()) && e.state == AttState::Speculating;
                 j++) {
                if (!e.read[j]) continue;
                load_block(now, m.blk(j));
                if (std::memcmp(now, &m.shadow[size_t(j) * RMC_BLOCK_SIZE], RMC_BLOCK_SIZE))
                    r.invalidate(uint64_t(j) * RMC_BLOCK_SIZE);
            }
            r.load_done(m.att0, 0, b0);
            progress = true;
        }
        if (!progress) break; // cannot happen: every state has a next event here
    }
    if (!m.finished) { // defensive: never report success for a SABRe the ATT did not finish
        m.result = AttEntry{};
        m.result.abort = Abort::Window;
    }
    const AttEntry &e = m.result;
    o.abort = e.abort;
    o.version = e.version;
    o.validated = e.validated;
    o.abort_block = e.abort_block;
    o.trace.abort = e.abort;
    o.trace.issued_at_abort = e.issued_at_abort;
    o.trace.validated = e.validated;
    m.req = nullptr;
    m.out = nullptr;
    return o;
}

} // namespace rackemu::sonuma
