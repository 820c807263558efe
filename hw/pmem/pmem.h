// SPDX-License-Identifier: MIT
//
// The persistence domain of a node's persistent-memory region (docs/pmem.md): which bytes of the
// region would survive a power cut, per platform mode, and the cut itself. QEMU-independent: it
// reads the region's RAM through its host (rackemu/host.h) and keeps the durable image in a Media
// (a file that outlives QEMU, or memory in tests).
//
// Two views of the region:
//   RAM            what CPU loads see: guest RAM at [base, base + size), written by CPU stores
//                  and by placed RNIC writes (the caches' view);
//   durable image  the persistence domain: what a cut keeps for sure.
// Between them, at 64-byte line granularity, the pending set: lines written but not durable,
// each with the bytes written and by whom (CPU, NIC). No CPU store is trapped: the host reports
// what happened, and the model compares RAM with the durable image per line:
//
//   cpu_dirty(range)     pages the dirty log saw written (QEMU: the region's dirty bitmap)
//   cpu_writeback(range) DC CVAP / DC CVAC on the range
//   nic_accept(range, data) an RNIC WRITE acknowledged into the NIC's volatile buffer; placed
//                        (written to RAM) nic-delay-ns later by nic_place_due (host timer 0), in
//                        acceptance order; the oldest placed early when the buffer is full
//   placed(range)        an RNIC write the RNIC performed on RAM itself (an atomic, a WRITE with
//                        the buffer off)
//   flush(range)         a persistent FLUSH (IBTA Memory Placement Extensions): the buffer is
//                        placed, then the range made durable
//   nic_drain()          place the whole buffer (the RNIC calls it before any other access of
//                        its own to the region, e.g. a READ: reads and placed() must not pass
//                        buffered writes)
//
// What makes a line durable, per mode (PMEM_MODE_*):
//                  CPU store            RNIC write             lost at a cut
//   none           when reported        at acceptance          nothing
//   eadr           when reported        at placement           the NIC buffer
//   adr            at write-back/FLUSH  at placement           the buffer, unwritten-back stores
//   adr-ddio       at write-back/FLUSH  at FLUSH/write-back    the buffer, and every line still
//                                                              in the LLC
// and, in adr and adr-ddio, an eviction: the pending lines are the LLC-resident dirty lines;
// when there are more than llc-lines, victims chosen uniformly by a seeded generator are written
// back (counted as evictions) until llc-lines remain, after each report. A line made durable is
// copied whole from RAM into the durable image: a line written by both CPU and NIC goes in one
// piece (the cache holds one line).
//
// The cut: cut() stops the model and returns the Cut (crash.h); finish_cut(cut, state) writes the
// chosen lines into the durable image, drops the rest and the NIC buffer and sets the LOST_*
// counters; restart() loads RAM from the durable image (the node boots on what survived).
//
// Threading: every method takes the model's lock; host calls are made with it held (host ops
// never call back). Reports after cut() and before finish_cut() are refused with RK_UNREACHABLE
// (the node is off). Bad ranges (outside the region, a length that overflows) are refused with
// RK_DECODE_ERROR and change nothing.
//
// Caveats (docs/pmem.md "What differs from real platforms"): the CPU's writes are seen only as
// changed bytes (a store of the value already durable is invisible, and counts no byte); every
// line of the pending set is in the LLC (no L1/L2, no write-back order); placement is in order,
// after a fixed delay; the region's RAM is the same bytes a NIC read or a CPU load sees.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "crash.h"
#include "rackemu/host.h"
#include "rackemu/pmem_regs.h"
#include "regbank.h"
#include "state.h"

namespace rackemu::pmem {

enum class Mode : uint32_t {
    None = PMEM_MODE_NONE,
    Eadr = PMEM_MODE_EADR,
    Adr = PMEM_MODE_ADR,
    AdrDdio = PMEM_MODE_ADR_DDIO,
};
const char *mode_name(Mode m); // "none", "eadr", "adr", "adr-ddio"
bool parse_mode(const char *s, Mode *m);

// The durable image: the persistence domain's bytes. All or nothing is not promised on an error.
class Media {
public:
    virtual ~Media() = default;
    virtual Status read(uint64_t off, void *buf, uint64_t len) = 0;
    virtual Status write(uint64_t off, const void *buf, uint64_t len) = 0;
    virtual Status sync() = 0; // the image reached the host's disk (a file: fdatasync)
};
// Zeroed memory of `size` bytes.
std::unique_ptr<Media> memory_media(uint64_t size);
// A file of `size` bytes (created, or extended with zeros; an existing image of that size keeps
// its bytes: the node restarts on it). nullptr and *err on failure.
std::unique_ptr<Media> file_media(const std::string &path, uint64_t size, std::string *err);

struct Config {
    uint64_t base = 0; // guest physical base of the region, a multiple of PMEM_LINE_SIZE
    uint64_t size = 0; // bytes, a non-zero multiple of PMEM_LINE_SIZE
    Mode mode = Mode::None;
    uint64_t nic_delay_ns = 2000; // ACK to placement
    uint32_t nic_entries = 64;    // NIC buffer capacity, 0..PMEM_NIC_ENTRIES_MAX (0: no buffer)
    uint32_t llc_lines = 4096;    // 1..PMEM_LLC_LINES_MAX
    uint64_t seed = 1;            // eviction victims
};
// "" or why the configuration is refused.
std::string check(const Config &c);

// The state (hw/core/state.h). A pending line:
#define RK_PMEM_PENDING(X) \
    X(uint64_t, line)    /* index in the region */ \
    X(uint64_t, written) /* bit i: byte i written */ \
    X(uint8_t, src)      /* PMEM_SRC_* */
struct PendingLine {
    RK_STATE_FIELDS(RK_PMEM_PENDING)
};
enum : uint8_t { PMEM_SRC_CPU = 1, PMEM_SRC_NIC = 2 };
// An entry of the NIC buffer (acknowledged, not placed):
#define RK_PMEM_NIC_ENTRY(X) \
    X(uint64_t, seq)    /* acceptance number */ \
    X(uint64_t, addr)   /* guest physical */ \
    X(uint64_t, due_ns) /* placement time (the host's clock) */ \
    X(std::vector<uint8_t>, data)
struct NicEntry {
    RK_STATE_FIELDS(RK_PMEM_NIC_ENTRY)
};
using Counters = std::array<uint64_t, PMEM_CNT_COUNT>;
// The model. The durable image is not in it: it is the Media, which travels with the node as a
// RAM file does. mode and size are saved to refuse a state of another configuration.
#define RK_PMEM_STATE(X) \
    X(uint32_t, mode) \
    X(uint64_t, size) \
    X(std::vector<PendingLine>, pending) /* the LLC's order: eviction picks an index */ \
    X(std::vector<NicEntry>, nic)        /* acceptance order */ \
    X(Counters, cnt)                     /* PMEM_COUNTER_TABLE; the gauges are computed */ \
    X(uint64_t, rng)                     /* splitmix64 state: eviction victims */ \
    X(uint64_t, next_seq)
struct PmemArch {
    RK_STATE_FIELDS(RK_PMEM_STATE)
};

class Pmem : private PmemArch {
public:
    // nullptr and *err on a bad configuration. `media` nullptr: memory.
    static std::unique_ptr<Pmem> create(const Host &host, const Config &cfg, std::unique_ptr<Media> media,
                                        std::string *err);

    // ---- what the host reports (guest physical ranges inside the region) ----
    Status cpu_dirty(uint64_t addr, uint64_t len);
    Status cpu_writeback(uint64_t addr, uint64_t len);
    Status flush(uint64_t addr, uint64_t len);
    Status placed(uint64_t addr, uint64_t len);
    // Acknowledge an RNIC write of `len` (1..PMEM_NIC_ENTRY_MAX) bytes: buffered (mode none, or
    // no buffer: placed at once). *seq (may be null) numbers it.
    Status nic_accept(uint64_t addr, const void *data, uint64_t len, uint64_t *seq);
    unsigned nic_place_due(); // entries due by now_ns(): placed (timer 0); returns how many
    unsigned nic_drain();     // every entry placed

    // ---- the power cut ----
    Cut cut();
    // RK_SLAVE_ERROR: no cut in progress, another cut's record, or an invalid state.
    Status finish_cut(const Cut &c, const CrashState &s);
    Status restart(); // RAM := the durable image

    // ---- inspection (tests, tools) ----
    Status durable_read(uint64_t addr, void *buf, uint64_t len);
    uint64_t counter(unsigned idx);
    bool is_pending(uint64_t addr);
    size_t nic_pending();
    const Config &config() const { return cfg_; }

    // ---- the device contract (rackemu/device.h, hw/core/device_ops.h) ----
    void reset(); // the NIC buffer placed; the domain kept (a reset is no power cut)
    void pause(bool on);
    bool irq_level(unsigned) const { return false; }
    void save(StateOut &out) const;
    bool load(StateIn &in, std::string *why);
    Status ctrl_read(uint64_t offset, unsigned size, uint64_t *value);
    Status ctrl_write(uint64_t offset, uint64_t value, unsigned size);
    void timer(unsigned id);
    const char *reg_name(uint64_t offset) const { return bank_.name(offset); }

private:
    struct NoCtx {};
    using R = Reg<Pmem, NoCtx>;
    static std::span<const R> reg_table();

    Pmem(const Host &host, const Config &cfg, std::unique_ptr<Media> media);
    bool in_region(uint64_t addr, uint64_t len) const
    {
        return addr >= cfg_.base && len <= cfg_.size && addr - cfg_.base <= cfg_.size - len;
    }
    Status check_report(uint64_t addr, uint64_t len) const;
    // f(line, ram, durable, mask of the bytes of [off, off + len) in the line) for each line the
    // region-relative range touches, reading RAM and the durable image a page at a time.
    template <class F> Status for_lines(uint64_t off, uint64_t len, F &&f);
    enum class Cause : uint8_t { Store, Placement, Flush, WriteBack, Eviction };
    // Write `ram` (the line's RAM bytes) into the durable image; count `written` | the pending
    // line's bytes under `cause`; the line leaves the pending set.
    Status make_durable(uint64_t line, const uint8_t *ram, uint64_t written, Cause cause);
    void add_pending(uint64_t line, uint64_t written, uint8_t src);
    void drop_pending(uint64_t line);
    Status evict_excess();
    Status place(uint64_t off, uint64_t len); // an RNIC write now in RAM at region offset off
    Status place_entry();                     // the oldest NIC buffer entry
    void arm_timer();
    Status make_range_durable(uint64_t addr, uint64_t len, Cause cause);

    Host host_;
    Config cfg_;
    std::unique_ptr<Media> media_;
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, uint32_t> where_; // line -> index in pending
    bool paused_ = false;
    bool stopped_ = false; // cut() taken, finish_cut() not yet
    uint64_t cut_id_ = 0;
    RegBank<Pmem, NoCtx> bank_{reg_table()};
};

} // namespace rackemu::pmem
