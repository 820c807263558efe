// SPDX-License-Identifier: MIT
// LightSABRes in the R2P2 (the SABRes paper sec. 4.1, 5.1): the Active Transfers Table, the stream
// buffers, the speculation bit and the validate stage, as a state machine driven by events
// (registration, block requests, load completions, coherence invalidations), plus the production
// memory model that serves one SABRe from host memory with exact conflict detection
// (docs/sonuma.md "SABRe in the R2P2"; design in docs/design/sonuma-rmc.md sec. 2.2, 3).
//
// The state machine talks to memory and to the requester only through R2p2Mem and R2p2Out, so
// the same code runs against a scripted memory in the unit tests (loads complete when the test
// says, invalidations arrive when the test says) and against the host's RAM in production.
#ifndef RACKEMU_SONUMA_R2P2_H
#define RACKEMU_SONUMA_R2P2_H

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "timing.h"

namespace rackemu::sonuma {

struct SabreId {
    uint16_t src = 0;  // requesting node
    uint16_t qp = 0;   // its RGP (queue pair)
    uint32_t xfer = 0; // its transfer id
    bool operator==(const SabreId &) const = default;
};

enum class AttState : uint8_t {
    Free,
    Registered,  // spec bit set, nothing issued yet
    Speculating, // block 0 issued, version not known: blocks read now are speculative
    Streaming,   // version known and even: spec bit clear
    Validating,  // base block invalidated: re-reading the version
    Aborting,    // answering the remaining block requests without data
};

struct AttEntry {
    AttState state = AttState::Free;
    SabreId id;
    uint64_t base = 0; // address of block 0
    uint32_t nblocks = 0;
    unsigned ver_off = 0;
    uint32_t requests = 0;   // block requests received
    uint32_t issued = 0;     // block loads issued
    uint32_t answered = 0;   // block replies sent (with or without data)
    bool spec = false;       // the speculation bit
    bool nospec = false;     // the "no speculation" variant: nothing beyond block 0 while spec is set
    bool base_inval = false; // the base block was invalidated after the version was read
    bool validated = false;
    bool stalled = false; // a stream-buffer stall was counted for this window
    uint64_t version = 0;
    Abort abort = Abort::None;
    uint32_t abort_block = 0;
    uint32_t issued_at_abort = 0;
    std::vector<uint8_t> read;      // read[j]: block j (< sb-depth) was read while speculating
    std::vector<uint8_t> in_flight; // per block: load issued, not completed
};

struct R2p2Counters {
    uint64_t sabre_reg = 0, sabre_ok = 0, abort_locked = 0, abort_window = 0, abort_validate = 0,
             validate_stage = 0, inval_ignored = 0, att_stalls = 0, sb_stalls = 0, spec_blocks = 0;
};

// Toward the requester: block replies (data == nullptr: answered without data after an abort)
// and the validation packet.
struct R2p2Out {
    virtual ~R2p2Out() = default;
    virtual void block_reply(const SabreId &, uint32_t blk, const uint8_t *data) = 0;
    virtual void validation(const SabreId &, const AttEntry &) = 0; // e.abort, e.version, e.validated
};

// The memory hierarchy behind the R2P2. Completions come back through R2p2::load_done and
// R2p2::validate_done, never from inside these calls.
struct R2p2Mem {
    virtual ~R2p2Mem() = default;
    virtual void issue_load(unsigned att, uint32_t blk, uint64_t addr) = 0;
    virtual void issue_validate(unsigned att, uint64_t version_addr) = 0;
    virtual void before_confirm(unsigned /*att*/) {} // the last moment for invalidations
};

class R2p2 {
public:
    R2p2(R2p2Mem &, R2p2Out &, unsigned att_entries, unsigned sb_depth);

    // A registration packet. `spec` false: the "no speculation" variant (seed sec. 7.1), nothing
    // beyond block 0 is issued before the version is known. `ver_off` is the version word's byte
    // offset in block 0; the caller validated it (CTX_LAYOUT), it is masked to 0..56, 8-aligned,
    // so a bad value can never make a load leave block 0. False: the ATT is full, the
    // registration waits in the FIFO queue (an ATT stall; it is never refused).
    bool register_sabre(const SabreId &, uint64_t base, uint32_t nblocks, unsigned ver_off, bool spec);
    // k block requests of a registered (or queued) SABRe arrived. False: unknown id or more
    // requests than blocks (malformed).
    bool add_requests(const SabreId &, uint32_t k);
    // Issue at most one block load (round robin over the entries). True if it issued one.
    bool step();
    void load_done(unsigned att, uint32_t blk, const uint8_t data[RMC_BLOCK_SIZE]);
    void validate_done(unsigned att, uint64_t version);
    // A coherence invalidation of the block at `block_addr` (any address inside it).
    void invalidate(uint64_t block_addr);

    const AttEntry &entry(unsigned att) const { return att_[att]; }
    unsigned att_entries() const { return unsigned(att_.size()); }
    unsigned sb_depth() const { return sb_depth_; }
    size_t queued() const { return queue_.size(); }
    const R2p2Counters &counters() const { return cnt_; }

private:
    struct Queued {
        SabreId id;
        uint64_t base;
        uint32_t nblocks;
        unsigned ver_off;
        bool nospec;
        uint32_t requests;
    };
    int find(const SabreId &) const;
    void install(unsigned att, const Queued &);
    void start_abort(unsigned att, Abort why, uint32_t blk);
    void answer(unsigned att, uint32_t blk, const uint8_t *data);
    void maybe_confirm(unsigned att);
    void maybe_finish(unsigned att);
    void finish(unsigned att);

    R2p2Mem &mem_;
    R2p2Out &out_;
    unsigned sb_depth_;
    std::vector<AttEntry> att_;
    std::deque<Queued> queue_;
    unsigned rr_ = 0;
    R2p2Counters cnt_;
};

// ---- Production: one whole SABRe served synchronously from host memory ----

struct SabreRequest {
    SabreId id;
    uint8_t *obj = nullptr;       // host pointer to block 0 (64-byte aligned guest address)
    uint32_t nblocks = 1;         // 1 .. RMC_SABRE_MAX / 64
    unsigned ver_off = 0;         // the version word's offset in block 0 (0..56, multiple of 8)
    bool spec = true;             // false: the "no speculation" variant (sec. 7.1)
    uint64_t window_delay_ns = 0; // test property: spin this long at the window close
};

struct SabreOutcome {
    Abort abort = Abort::None;
    uint64_t version = 0;
    bool validated = false;
    uint32_t abort_block = 0;
    SabreTrace trace;
};

// The emulated coherence: a shadow copy of every block read while speculating is compared with
// memory at the window close (after the acquire read of the version) and a difference becomes an
// invalidation; before the confirm, block 0 is re-read and a difference becomes a base-block
// invalidation. Exact for writers that follow the odd/even protocol (design sec. 3.4).
class HostSabreServer {
public:
    HostSabreServer(unsigned att_entries, unsigned sb_depth);
    ~HostSabreServer();
    // Thread-safe (serialised internally: the port thread and the local RGP thread may both call
    // it). block_out(blk, data) is called once for every block 0..nblocks-1 before serve returns;
    // data is null for a block answered without data after an abort. The hooks run under the
    // internal lock: they may touch memory but must not call serve() or counters().
    SabreOutcome serve(const SabreRequest &,
                       const std::function<void(uint32_t blk, const uint8_t *data)> &block_out);
    R2p2Counters counters() const;
    // Test hooks (empty in production): at the window close before the version read, and before
    // the confirm re-read of block 0.
    std::function<void()> hook_window_close, hook_before_confirm;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace rackemu::sonuma

#endif
