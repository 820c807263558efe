// SPDX-License-Identifier: MIT
//
// The NIC atomic memory unit of the NIC-atomics paper (Underwood et al., "High Message Rate, NIC-Based
// Atomics", sec. III), the target side of the rackemu RNIC's atomics (docs/atomic-unit.md).
// QEMU-independent: it reaches target memory through AmuHost (read/write a word, an atomic
// read-modify-write, validity of a range) and reports each operation's end through
// AmuHost::complete. The same code runs in the unit tests, the fuzzer, bench/amu_model.cc and
// in the RNIC device under QEMU, against guest RAM (AmuDev, rnic_objects.h).
//
// The pipeline (Fig. 1), one NIC clock cycle at a time (nic-mhz, 500 MHz: 2 ns):
//
//   network ──> INPUT LINK (msg-bytes per op at net-mbps) ──> INPUT QUEUE (input-queue entries)
//        the first `lookahead` entries are the look-ahead window
//   ISSUE UNIT (in order, one op per cycle) decides for the head op
//     - its source: the register a previous op left for it (forwarding), or a cache request:
//       HIT (line valid) / MISS (victim way neither busy nor filling; the RAW buffer checked for
//       the address; a tagged read queued to the host) / no cache: a read of its own;
//     - its destination: a register (the result stays in the unit: the host write is suppressed)
//       when another op in the window targets the same word and the rate-limit policy allows
//       it, else the cache line and a host write (write-through);
//     and blocks (named stalls, counted) on: a busy word (read and not yet written back), a set
//     whose ways are all busy or filling (conflict; with conflict-bypass the op reads the word for
//     itself instead, like the uncached unit), the RAW buffer, a full host queue.
//   ALU (in order, one op per cycle, when its operand is ready): executes; writes the register
//     or the line plus a host write into the HOST QUEUE (and the RAW buffer); completes the op.
//   HOST QUEUE ──> HOST LINK NIC->host (rdreq-bytes / wrreq-bytes per request at host-mbps), one
//     tag per request (tags, HyperTransport's 32/64/128) from departure until: a read's response
//     is back (2 x host-lat-ns + mem-ns + serialisation), a write reaches the host (host-lat-ns).
//     Responses (resp-bytes, ready mem-ns after the read reaches the host) and, for a node that
//     also injects, commands (cmd-bytes) share the host->NIC direction, served in the order they
//     are ready. A write completes in memory mem-ns after it reaches the host, so a read
//     issued after it can pass it: the RAW hazard of sec. III.B.
//   RAW BUFFER (raw-entries): Ack approach: every host write stays until its acknowledgement
//     (completion + host-lat-ns); a miss on an address in it waits. Flush approach: only evicted
//     lines enter; a miss on one of them, or a full buffer, issues a flush (returns when every
//     earlier host request has completed) and empties it. None: no buffer (the hazard shows).
//
// Atomicity (docs/atomic-unit.md "Atomicity"): with atomicity = Global (the default, the
// device's mode), the ALU stage performs each operation as one atomic read-modify-write on the
// target word in host memory (AmuHost::amo; on guest RAM a host __atomic on the mapped address),
// in arrival order: the unit's results are exact, and so are the CPUs' own atomics on the same
// word in between (InfiniBand's "global" atomicity, IBV_ATOMIC_GLOB). The cache, register file
// and rate limiting then decide the modeled host transactions and times, not the values. With
// atomicity = Hca, the data path is the modeled one (values from host reads, held in the cache
// lines and registers, written through by the host writes at their modeled completion times):
// exact among the NIC's own atomics only (IBV_ATOMIC_HCA), and the RAW buffer is what keeps it
// exact; the tests run it to prove the pipeline's hazard handling.
//
// Caveats: the cache holds 8-byte words ("items", Fig. 3's 32-item cache), a 4-byte operation
// uses half of one. A fetching op's response on the outgoing network link is not modeled (the
// experiments of sec. IV are bound on the incoming side). Acknowledgements and flush requests
// take no host-link bandwidth. No set-aside buffer: a blocked head op blocks the issue unit, as
// sec. III.A's design.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rackemu/roce.h"
#include "torus.h"

namespace rackemu::rnic {

// The unit's properties (docs/atomic-unit.md "Properties"); defaults are the paper's (sec. IV, VI).
enum class AmuRateLimit : uint8_t { Off, Aging, HostQueue, Both };
enum class AmuRaw : uint8_t { None, Ack, Flush };
enum class AmuAtomicity : uint8_t { Global, Hca };

struct AmuConfig {
    uint32_t nic_mhz = 500;     // NIC clock (Table II)
    uint32_t host_lat_ns = 250; // one-way host I/O latency (Table I; Fig. 2 sweeps 50..250)
    uint32_t host_mbps = 2300;  // host link per direction, MB/s (2.3 GB/s, Table I)
    uint32_t mem_ns = 70;       // host memory latency (sec. VI)
    uint32_t net_mbps = 4000;   // network link per direction, MB/s (4 GB/s, Table II)
    uint32_t msg_bytes = 48;    // one atomic on the network (sec. V-A)
    uint32_t rdreq_bytes = 8;   // host read request (eq. 3)
    uint32_t wrreq_bytes = 16;  // host write request with its data (sec. VI, eq. 1)
    uint32_t resp_bytes = 12;   // host read response (sec. VI)
    uint32_t cmd_bytes = 32;    // a command of the node's own host to its NIC (sec. VI, eq. 2)
    uint32_t cache_lines = 32;  // 0: no cache (Fig. 2); 32 direct-mapped is Fig. 3
    uint32_t cache_ways = 1;    // associativity; cache_lines: fully associative
    uint32_t lookahead = 8;     // look-ahead window (entries of the input queue)
    uint32_t regs = 8;          // register file
    uint32_t input_queue = 64;  // input queue entries (the network backs up beyond)
    uint32_t host_queue = 16;   // host request queue entries
    uint32_t tags = 32;         // outstanding host requests (HyperTransport tags)
    AmuRateLimit rate_limit = AmuRateLimit::Both;
    uint32_t age_max = 4;         // Aging: consecutive register writes of one word before a cache write
    uint32_t hostq_threshold = 2; // HostQueue: suppress only when the host queue holds this many
                                  // (or every tag / RAW entry is taken)
    AmuRaw raw = AmuRaw::Ack;
    uint32_t raw_entries = 64;    // RAW buffer entries
    uint32_t cache_cycles = 2;    // cache access, issue to operand ready on a hit
    uint32_t conflict_bypass = 0; // 1: a miss whose set has no free way (all busy or filling) reads
                                  // the word for itself, uncached, instead of blocking the issue
                                  // unit (sec. III.A's design blocks: 0, the default)
    bool symmetric = false;       // every op that arrives is matched by a command of this node's own
                                  // host (cmd-bytes host->NIC): RandomAccess's balanced traffic
    AmuAtomicity atomicity = AmuAtomicity::Global;
};
// nullptr, or what is wrong with `c` (a property out of range: the message names it).
const char *amu_check_config(const AmuConfig &c);
// The names of the enumerated properties (rate-limit: off aging hostq both; raw: none ack flush),
// shared by amu-model and the device glue. _from: false if `name` is none of them.
const char *amu_rate_limit_name(AmuRateLimit r);
bool amu_rate_limit_from(const char *name, AmuRateLimit *out);
const char *amu_raw_name(AmuRaw r);
bool amu_raw_from(const char *name, AmuRaw *out);

// One operation. `addr` is the target's host-memory address (the RNIC resolves VA + rkey first).
struct AmoRequest {
    uint64_t id = 0;   // the caller's, returned in the result
    uint64_t addr = 0; // aligned to size
    uint8_t op = ROCE_XOP_ADD;
    uint8_t size = 8;  // 4 or 8
    bool fetch = true; // the old value is wanted (XATOMIC / IB atomics) or not (XATOMIC_POST)
    uint64_t operand = 0, compare = 0, mask = 0;
    uint64_t arrival_ps = 0; // when its message starts arriving on the input link
    // Set by AtomicUnit::execute (not by callers): the host atomic was performed at submission
    // and `executed_old` is its old value; the ALU stage only times the operation.
    bool executed = false;
    uint64_t executed_old = 0;
};
enum class AmoStatus : uint8_t { Ok, Unaligned, BadOp, AccessError };
const char *amo_status_name(AmoStatus s);
struct AmoResult {
    uint64_t id = 0;
    AmoStatus status = AmoStatus::Ok;
    uint64_t old = 0;        // the value before the operation (zero-extended for 32 bits); 0 on error
    uint64_t done_ps = 0;    // modeled: the ALU executed it (or the issue unit refused it)
    uint64_t arrival_ps = 0; // modeled: its arrival as the unit took it (not before the unit's clock)
};

// The ALU: the new value of an operand-size word (roce.h's definitions). size 4 uses the low 32 bits.
uint64_t amo_alu(uint8_t op, uint8_t size, uint64_t old, uint64_t operand, uint64_t compare, uint64_t mask);

// What the unit needs of its host.
class AmuHost {
public:
    virtual ~AmuHost() = default;
    // Is [addr, addr + len) target memory the unit may touch (registered, in RAM)?
    virtual bool valid(uint64_t addr, uint32_t len) = 0;
    // Atomic read-modify-write of the operand at addr with amo_alu's semantics; returns the old value.
    virtual uint64_t amo(uint64_t addr, uint8_t size, uint8_t op, uint64_t operand, uint64_t compare,
                         uint64_t mask) = 0;
    // Plain 8-byte word access (Hca data path; addr 8-aligned).
    virtual uint64_t read_word(uint64_t addr) = 0;
    virtual void write_word(uint64_t addr, uint64_t value) = 0;
    virtual void complete(const AmoResult &r) = 0;
    virtual void guest_error(const std::string &msg) { (void)msg; }
};

// One host atomic (amo_alu's semantics) on the size-byte operand at p (naturally aligned):
// __atomic_* read-modify-writes, a compare-exchange loop for MCSWAP; returns the old value.
uint64_t amo_host_atomic(void *p, uint8_t size, uint8_t op, uint64_t operand, uint64_t compare,
                         uint64_t mask);

// AmuHost over a host mapping of target memory (guest RAM in the device, a buffer in tests):
// amo() is a host atomic (__atomic_* on the mapped address; masked compare-swap as a CAS loop),
// so the unit's operations and the target CPUs' own atomics on the same word are atomic with
// respect to each other. complete() and guest_error() are the subclass's.
class AmuRamHost : public AmuHost {
public:
    AmuRamHost(uint8_t *base, uint64_t base_addr, uint64_t len) : base_(base), addr_(base_addr), len_(len) {}
    bool valid(uint64_t addr, uint32_t len) override;
    uint64_t amo(uint64_t addr, uint8_t size, uint8_t op, uint64_t operand, uint64_t compare,
                 uint64_t mask) override;
    uint64_t read_word(uint64_t addr) override;
    void write_word(uint64_t addr, uint64_t value) override;

private:
    uint8_t *base_;
    uint64_t addr_, len_;
};

// Counters (docs/atomic-unit.md "Counters"). Stalls count operations (or host requests) that
// waited at least once for that reason.
#define AMU_COUNTERS(X) \
    X(ops, "operations completed (including errors)") \
    X(errors, "operations refused: unaligned, bad op/size, address not valid") \
    X(hits, "cache requests that hit") \
    X(misses, "cache requests that missed (a host read)") \
    X(forwards, "operands taken from the register file (no cache request)") \
    X(evictions, "valid lines replaced") \
    X(host_reads, "host read requests sent") \
    X(host_writes, "host write requests sent") \
    X(writes_suppressed, "results kept in a register by rate limiting (a host write saved)") \
    X(stall_tags, "host requests that waited for a tag") \
    X(stall_busy, "ops that waited for a busy word (read, not yet written back)") \
    X(stall_conflict, "ops that waited for a way in their set (all busy or filling)") \
    X(stall_hostq, "ops that waited for room in the host queue") \
    X(raw_hits, "misses that found their address in the RAW buffer") \
    X(raw_flushes, "flushes issued (Flush approach)") \
    X(raw_full, "writes or evictions that waited for a RAW buffer entry") \
    X(max_outstanding, "most host requests outstanding at once") \
    X(bypasses, "misses that bypassed the cache: no free way in the set (conflict-bypass)")
struct AmuCounters {
#define AMU_FIELD(name, doc) uint64_t name = 0;
    AMU_COUNTERS(AMU_FIELD)
#undef AMU_FIELD
};

// Where the modeled time goes (amu-model and the benches; not device counters): how long host
// requests hold their tags and why, and what the issue unit's head op waited for. Times in ps.
enum class AmuBlock : uint8_t { None, Busy, ConflictFill, ConflictAlu, Raw, HostQueue, Count };
struct AmuStats {
    uint64_t reads = 0, writes = 0;               // host requests whose tag came back
    uint64_t read_hold_ps = 0, write_hold_ps = 0; // summed: tag taken (departure) to tag back
    // Summed over reads: the response's wait for the host->NIC direction (queued behind other
    // responses and, with `symmetric`, the node's own commands), part of read_hold_ps.
    uint64_t resp_wait_ps = 0;
    uint64_t cmds = 0, cmd_wait_ps = 0; // the node's own commands (symmetric) and their wait
    uint64_t h2n_busy_ps = 0;           // host->NIC direction serialising (responses + commands)
    // The issue unit's head op blocked, by cause: a busy word; a conflict while a way of its set
    // is filling (its host read outstanding) or while every way holds a word read and returned
    // but not yet executed by the in-order ALU; the RAW buffer; a full host queue.
    uint64_t block_ps[size_t(AmuBlock::Count)] = {};
    uint64_t alu_block_ps = 0; // the ALU held (operand ready) by a full host queue or RAW buffer
};

class AtomicUnit {
public:
    // `c` must pass amu_check_config (the glue refuses a bad property at realize).
    AtomicUnit(const AmuConfig &c, AmuHost &host);

    // Queue an operation at its arrival time (requests must be submitted in arrival order; an
    // arrival before now() counts as now()).
    void submit(const AmoRequest &r);
    // Values first, timing behind (the RNIC, whose RC engine needs each old value at once): with
    // atomicity Global, perform the operation's host atomic now and return its status and old
    // value, then queue it like submit() for the timing model, whose ALU stage only times it
    // (complete() reports its modeled done_ps when the model gets there). The host atomics happen
    // in submission order, which is the ALU's order (issue and ALU are in order; a refused op
    // touches no memory), so every value equals the one execution at the ALU would give, and the
    // window, registers, rate limiting and RAW buffer act on whatever operations are queued
    // together. A refused operation (BadOp, Unaligned, AccessError) touches no memory and is
    // queued to be refused (counted, logged, completed) at issue. With atomicity Hca it is
    // refused as BadOp and nothing is queued (that data path needs the model's values).
    AmoStatus execute(const AmoRequest &r, uint64_t *old);
    // Advance the model: process every instant before `ps` at which something happens (or until
    // nothing is left to do: drain()). now_ps() is then the next instant it would process.
    void run_until(uint64_t ps);
    void drain() { run_until(UINT64_MAX); }
    bool idle() const;
    uint64_t now_ps() const { return now_; }
    const AmuCounters &counters() const { return ctr_; }
    const AmuStats &stats() const { return st_; }
    // Modeled time the unit had work (an operation on its input link or inside, a host request
    // or a host event pending), ps: the busy time that update rates are taken over; idle gaps
    // between arrivals are not in it (unlike now_ps() - the first arrival).
    uint64_t active_ps() const { return active_ps_; }
    // Time-averaged host requests outstanding since the first arrival (Little's law: tags needed).
    double mean_outstanding() const;
    const AmuConfig &config() const { return cfg_; }

private:
    enum class Src : uint8_t { Line, Reg, OwnRead };
    enum class LineState : uint8_t { Invalid, Filling, Valid };
    struct Line {
        LineState state = LineState::Invalid;
        uint64_t word = 0;
        uint64_t value = 0; // Hca data
        uint64_t lru = 0;
        bool written = false; // written since the last flush (Flush approach)
    };
    struct Reg {
        bool used = false;
        bool ready = false;   // the producer executed
        bool claimed = false; // a consumer was issued
        uint64_t word = 0, value = 0;
        uint32_t chain = 0; // consecutive register writes of this word
    };
    struct Issued {
        AmoRequest rq;
        Src src = Src::Line;
        int32_t line = -1, src_reg = -1, dst_reg = -1;
        bool ready = false; // the operand is here
        uint64_t ready_ps = 0;
        uint64_t value = 0; // OwnRead data (Hca)
        uint32_t chain = 0;
    };
    enum class HqKind : uint8_t { Read, Write, Flush };
    struct HostReq {
        HqKind kind = HqKind::Read;
        uint64_t word = 0, value = 0;
        int32_t line = -1;       // Read into a line
        uint64_t issued_seq = 0; // Read for an op of its own (no cache)
        bool waited = false;
    };
    enum class Ev : uint8_t { ReadAtHost, RespReady, ReadResp, WriteAtHost, WriteDone, Ack, FlushDone };
    struct Event {
        uint64_t ps;
        uint64_t seq;
        Ev kind;
        uint64_t word, value;
        int32_t line;
        uint64_t issued_seq;
        uint64_t sent_ps; // a host request's departure (its tag taken)
        bool operator>(const Event &o) const { return ps != o.ps ? ps > o.ps : seq > o.seq; }
    };

    uint64_t grid(uint64_t ps) const { return (ps + cycle_ps_ - 1) / cycle_ps_ * cycle_ps_; }
    uint64_t ser_ps(uint32_t bytes, uint32_t mbps) const { return uint64_t(bytes) * 1000000ull / mbps; }
    void schedule(uint64_t ps, Ev k, uint64_t word, uint64_t value, int32_t line, uint64_t issued_seq,
                  uint64_t sent_ps = 0);
    // The host->NIC direction, first come first served in time: a transfer of `bytes` ready at
    // `ready_ps` starts when the direction is free; returns its start.
    uint64_t h2n_send(uint64_t ready_ps, uint32_t bytes);
    void process_events();
    void link_in();
    bool host_queue_out();
    bool alu();
    bool issue();
    bool refuse(const AmoRequest &r);
    AmoStatus check(const AmoRequest &r);
    bool has_work() const;
    int32_t lookup(uint64_t word) const;
    int32_t victim(uint64_t word) const;
    bool word_busy(uint64_t word) const;
    bool rate_limit_allows(uint32_t chain) const;
    bool window_has(uint64_t word);
    Issued *find_issued(uint64_t seq);
    void set_tags(uint32_t n);
    void start_flush();
    uint64_t next_time() const;
    void finish(const AmoRequest &r, AmoStatus s, uint64_t old);

    AmuConfig cfg_;
    AmuHost &host_;
    uint64_t cycle_ps_;
    uint32_t sets_ = 0;
    uint64_t now_ = 0, lru_clock_ = 0, ev_seq_ = 0, issued_base_ = 0;
    std::deque<AmoRequest> link_q_, input_q_;
    uint64_t link_free_ps_ = 0;
    std::vector<Line> lines_;
    std::vector<Reg> regs_;
    std::deque<Issued> issued_;                       // issued_[i] has sequence number issued_base_ + i
    std::unordered_map<uint64_t, uint32_t> inflight_; // word -> issued, not executed
    std::deque<HostReq> hostq_;
    std::vector<Event> events_; // a min-heap
    uint64_t n2h_free_ = 0, h2n_free_ = 0;
    uint32_t tags_used_ = 0;
    std::unordered_map<uint64_t, uint32_t> raw_ack_; // Ack: word -> unacknowledged host writes
    uint32_t raw_ack_n_ = 0;
    std::vector<uint64_t> raw_flush_; // Flush: evicted words since the last flush
    bool flushing_ = false;
    uint64_t last_write_done_ps_ = 0;
    bool head_flag_busy_ = false, head_flag_conflict_ = false, head_flag_hostq_ = false,
         head_flag_raw_ = false, alu_flag_raw_ = false, alu_flag_hostq_ = false;
    // Little's law bookkeeping
    bool started_ = false;
    uint64_t start_ps_ = 0;
    long double tag_area_ = 0;
    uint64_t active_ps_ = 0;
    uint64_t last_ps_ = 0; // the last instant processed (now_ is the next one)
    bool work_ = false;    // has_work() as the last instant left it
    AmuCounters ctr_;
    AmuStats st_;
    AmuBlock head_block_ = AmuBlock::None; // what the head op waited for at the last instant
    bool alu_blocked_ = false;             // the ALU's operand was ready but it could not write
};

// ---- The load generator of the experiments (sec. IV), driving one unit ----
// Hot-spot: `pes` PEs, all but PE 0 issue ops_per_pe non-fetching ADDs of 1 to node 0, either all
// on one word (addrs_per_pe = 0) or each PE on its own addrs_per_pe words in turn. How the
// messages interleave on the target's input link (each PE's own order kept) is the network's,
// which sec. IV gives only as a 3D torus with round-robin router arbitration; `order` chooses:
//   Random:     the next message from a random source with messages left (seeded);
//   RoundRobin: the sources in turn, one message each (all PEs at the same step at once);
//   Bursts:     a random source sends `burst` messages back to back, then another;
//   Torus:      the order sec. IV's network gives them: a packet-level model of its 3D torus
//               (torus.h: dimension-order routing, round-robin arbitration, dateline VCs), `net`
//               (the default: the order follows from the paper's parameters, not a choice).
enum class HotspotOrder { Random, RoundRobin, Bursts, Torus };
struct HotspotMix {
    uint32_t pes = 64, ops_per_pe = 1000, addrs_per_pe = 0;
    bool fetch = false;
    uint64_t seed = 1;
    HotspotOrder order = HotspotOrder::Torus;
    uint32_t burst = 16; // Bursts: messages per burst, 1..ops_per_pe
    TorusNet net;        // Torus: the network
    // Torus: the order torus_hotspot_order(net, pes, ops_per_pe) gave, when the caller keeps it
    // for a sweep (it does not depend on the unit); computed here when empty
    std::shared_ptr<const std::vector<uint32_t>> arrivals;
};
// RandomAccess: `updates` XORs of HPCC's stream (POLY 7, HPCC_starts) at random words of a table
// of 2^table_log2 words on this node; with cfg.symmetric the node injects as many as it receives.
// RandomAccess as it arrives at one node (node 0) of `procs` processes (a power of two), each
// with a table of T = 2^table_log2 words: every process runs HPCC's stream (POLY 7) for 4 x T
// updates; an update goes to process (ran >> table_log2) mod procs, word ran mod T. The updates
// for node 0 reach it interleaved: step k of every process, the processes in a random (seeded)
// order. Caveat: HPCC starts process p at HPCC_starts(4 x T x p), a sparse polynomial whose first
// few hundred values cluster on a handful of words (word 0 above all); in a large run those are a
// vanishing part, in a model-sized table they dominate. The model therefore takes each process's
// 4 x T updates from a random point (seeded) of its own segment of a 2^44-update run.
struct GupsMix {
    uint32_t table_log2 = 14;
    uint32_t procs = 64;
    uint64_t seed = 1;
    // Updates per microsecond offered to node 0, evenly spaced (0: all queued at once, the unit
    // and its links set the pace). A light load measures the unloaded times (Table III, eq. 6).
    double offered_mups = 0;
};
struct AmuLoadResult {
    bool ok = false;
    std::string error;
    bool exact = false; // the final memory equals the arrival-order execution
    uint64_t ops = 0;
    double elapsed_ns = 0; // first arrival to the last op's completion
    double mbps = 0;       // 8-byte updates per second, as MB/s (the paper's y axis)
    double mops = 0;       // updates per microsecond
    double mean_outstanding = 0;
    double active_ns = 0; // the unit's busy time (AtomicUnit::active_ps)
    AmuCounters c;
    AmuStats s;
};
AmuLoadResult amu_model_hotspot(const AmuConfig &, const HotspotMix &);
AmuLoadResult amu_model_gups(const AmuConfig &, const GupsMix &);

// HPCC RandomAccess's generator (hpcc RandomAccess.h/utility.c): the stream's next value, and
// the n-th value from the start (HPCC_starts).
inline uint64_t hpcc_next(uint64_t ran)
{
    return (ran << 1) ^ ((int64_t(ran) < 0) ? 7ull : 0ull);
}
uint64_t hpcc_starts(int64_t n);

// The analytical bounds of sec. VI (eq. 1-6), per node, from the properties.
struct AmuBounds {
    double base_n2h = 0, base_h2n = 0, amu_n2h = 0, amu_h2n = 0; // bytes per update (eq. 1-4)
    double base_rate = 0, amu_rate = 0;                          // updates/s per node, eq. 5
    double target_rate = 0;              // a node that only receives atomics: min(host, network)
    double rd_lat_ns = 0, wr_lat_ns = 0; // 2 x host latency (+ serialisation ignored), host latency
    double req_gups = 0, req_target = 0; // eq. 6: outstanding requests needed
};
AmuBounds amu_bounds(const AmuConfig &);

} // namespace rackemu::rnic
