// SPDX-License-Identifier: MIT
//
// The programmable stage of the rack switch (docs/switch.md): a pipeline in the bridge that every
// Ethernet frame passes while a switch program is loaded, shaped like a P4-16 switch pipeline so
// that a program written for it could run in one (p4lang's v1model / simple_switch; Tofino's
// per-stage register arrays, as the SwordBox Tofino program used them: "In-network Contention
// Resolution for Disaggregated Memory", WORDS 2021, and Grant's 2024 dissertation, ch. 3
// "On-path serialization").
//
// Pipeline, per frame:
//   parse      Ethernet [802.1Q] IPv4 UDP/4791 BTH + extension headers (rackemu/roce.h, parsed
//              by hw/rnic/wire.cc, ICRC checked). Not RoCEv2 -> passes untouched; RoCEv2 that
//              does not parse (truncated, bad checksum, bad ICRC, ...) -> passed or dropped
//              (`malformed=pass|drop`) and counted by reason; it never reaches the program.
//   ingress    Program::ingress(): match-action tables and register arrays, each bound to one
//              stage; one access per table or array per packet pass, in stage order (the
//              discipline of a hardware pipeline: Pass enforces it, counts violations and refuses
//              the access; in strict mode a violation aborts, so tests catch it).
//              Verdict: Pass, Rewrite (the program changed the headers), Drop, Recirculate
//              (another pass with a fresh access budget, up to the program's declared limit);
//              any number of synthesized packets (Ctx::emit), e.g. an ACK back to the sender.
//   deparse    Rewritten and synthesized packets are written out with build_frame (hw/rnic/wire.cc):
//              IPv4 total length and checksum, UDP length, pad count and ICRC recomputed; the
//              802.1Q tag of the ingress frame kept. A frame may change length.
//
// Caveats (where the model differs from a Tofino): tables are exact-match only and may learn
// entries from the data plane (a Tofino learns through the control plane or a digest); a deparsed
// frame is normalised (IPv4 DF set, UDP checksum 0, no Ethernet padding): RoCEv2 over IPv4 allows
// both (IBA Annex A17.4.2); IPv6 RoCEv2 is not parsed (passes as "not RoCE").
//
// Threading: not thread-safe; the bridge calls it under its lock (as FaultEngine and Capture).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "wire.h" // hw/rnic: Packet, parse_frame, build_frame

namespace rackemu::fabric::sw {

// ---- Parser and deparser ----

constexpr uint16_t kEthertypeVlan = 0x8100; // IEEE 802.1Q tag protocol identifier
constexpr size_t kVlanLen = 4;

// The header vector of one frame.
struct Headers {
    enum class Kind : uint8_t { NotRoce, Roce, Malformed };
    Kind kind = Kind::NotRoce;
    rnic::WireError error = rnic::WireError::Ok; // Malformed: why
    bool vlan = false;
    uint16_t vlan_tci = 0; // PCP, DEI, VID of the 802.1Q tag
    rnic::Packet pkt;      // Roce: every header the opcode has (wire.h); payload points into the frame
};

// Classify and parse frame[0..len). `scratch` holds the untagged copy of a VLAN-tagged frame
// (pkt.payload then points into it). A frame is RoCEv2 if it is IPv4 (after at most one 802.1Q
// tag), not a later fragment, UDP, destination port 4791; anything else is NotRoce.
Headers parse(const uint8_t *frame, size_t len, std::vector<uint8_t> &scratch);
// Write `h` (Kind::Roce) as a frame into `out` (resized): lengths, checksum and ICRC computed.
// Ok, or the build_frame error (BadField, PayloadLength, ...: the program built an invalid packet).
rnic::WireError deparse(const Headers &h, std::vector<uint8_t> &out);
// The ICRC check of a whole frame (tagged or not), for tests and tools: parse() is Roce.
bool frame_valid(const uint8_t *frame, size_t len);

// ---- Resources in switch units ----

struct ArrayInfo {
    std::string name;
    unsigned stage = 0;
    uint32_t cells = 0, cell_bytes = 0;
    uint64_t accesses = 0, out_of_range = 0;
    uint64_t occupancy = 0; // cells in use (written and not cleared)
};
struct TableInfo {
    std::string name;
    unsigned stage = 0;
    uint32_t capacity = 0, key_bytes = 0, value_bytes = 0;
    uint64_t entries = 0, hits = 0, misses = 0, inserts = 0, overflow = 0;
};
struct Resources {
    unsigned stages = 0;           // highest stage used + 1
    unsigned recirculations = 0;   // most passes beyond the first a packet may take
    uint64_t sram_bytes = 0;       // arrays (cells x cell bytes) + tables (capacity x (key + value))
    std::vector<ArrayInfo> arrays; // with run-time counters when taken from a live program
    std::vector<TableInfo> tables;
};

class Pipeline;

// One packet's pass through the pipeline: the access budget of hardware. Each table and array
// lives in one stage; in one pass each may be accessed once, and stages are visited in order
// (an access to stage s after one to stage t > s is impossible without recirculating).
class Pass {
public:
    explicit Pass(Pipeline &p, unsigned number) : pipe_(p), number_(number) {}
    unsigned number() const { return number_; } // 0 first pass, 1.. recirculations
    // Claim the access of object `id` in `stage`; false (counted, refused) if it breaks the rules.
    bool claim(unsigned id, unsigned stage, const char *what);

private:
    Pipeline &pipe_;
    unsigned number_;
    unsigned last_stage_ = 0;
    uint64_t used_[4] = {}; // bit per object id (Pipeline::kMaxObjects)
};

// The tables and arrays of one program, their stages and the discipline counters.
class Pipeline {
public:
    static constexpr unsigned kMaxObjects = 256;
    static constexpr unsigned kMaxStages = 32;
    explicit Pipeline(unsigned recirculations = 0) : recirculations_(recirculations) {}
    Pipeline(const Pipeline &) = delete;
    Pipeline &operator=(const Pipeline &) = delete;

    // Strict: a discipline violation aborts (unit tests, RACKEMU_SWITCH_STRICT=1 in the bridge).
    void set_strict(bool s) { strict_ = s; }
    uint64_t violations() const { return violations_; }
    const std::string &first_violation() const { return first_violation_; }
    unsigned recirculations() const { return recirculations_; }
    Resources resources() const;

    // Used by Table and RegisterArray.
    struct Object {
        std::function<void(Resources &)> report;
    };
    unsigned add(unsigned stage, std::function<void(Resources &)> report);
    void violation(const std::string &what);

private:
    std::vector<Object> objects_;
    unsigned stages_ = 0, recirculations_;
    bool strict_ = false;
    uint64_t violations_ = 0;
    std::string first_violation_;
};

// A register array: `cells` values of T in one stage, touched through execute() (a P4
// RegisterAction: one read-modify-write per pass). Occupancy counts cells written and not cleared.
template <class T> class RegisterArray {
public:
    RegisterArray(Pipeline &p, std::string name, unsigned stage, uint32_t cells)
        : name_(std::move(name)), stage_(stage), cells_(cells), used_(cells, false)
    {
        id_ = p.add(stage, [this](Resources &r) {
            r.arrays.push_back(
                {name_, stage_, cells_, uint32_t(sizeof(T)), accesses_, out_of_range_, occupancy_});
        });
    }
    // Run f(T &cell) on cell `index`; false if refused (discipline, or index out of range).
    template <class F> bool execute(Pass &pass, uint32_t index, F &&f)
    {
        if (!pass.claim(id_, stage_, name_.c_str())) return false;
        accesses_++;
        if (index >= cells_) {
            out_of_range_++;
            return false;
        }
        f(cells_ptr()[index]);
        if (!used_[index]) {
            used_[index] = true;
            occupancy_++;
        }
        return true;
    }
    // Control plane (no pass): read a cell (T{} if never written), clear one.
    T value(uint32_t index) const { return index < data_.size() ? data_[index] : T{}; }
    void clear(uint32_t index)
    {
        if (index >= cells_) return;
        if (index < data_.size()) data_[index] = T{};
        if (used_[index]) occupancy_--;
        used_[index] = false;
    }
    uint32_t cells() const { return cells_; }
    uint64_t occupancy() const { return occupancy_; }

private:
    T *cells_ptr()
    {
        if (data_.empty()) data_.resize(cells_);
        return data_.data();
    }
    std::string name_;
    unsigned stage_, id_ = 0;
    uint32_t cells_;
    std::vector<T> data_; // allocated on first access
    std::vector<bool> used_;
    uint64_t accesses_ = 0, out_of_range_ = 0, occupancy_ = 0;
};

// An exact-match table: at most `capacity` entries Key -> Value in one stage, with hit and miss
// counters. Entries come from the control plane (insert) or are learned by the data plane
// (lookup_or_learn); a full table refuses new entries and counts the overflow: the program's
// defined fallback for that case is its own (e.g. count the frame as untracked).
template <class Key, class Value, class Hash = std::hash<Key>> class Table {
public:
    Table(Pipeline &p, std::string name, unsigned stage, uint32_t capacity)
        : name_(std::move(name)), stage_(stage), capacity_(capacity)
    {
        id_ = p.add(stage, [this](Resources &r) {
            r.tables.push_back({name_, stage_, capacity_, uint32_t(sizeof(Key)), uint32_t(sizeof(Value)),
                                uint64_t(map_.size()), hits_, misses_, inserts_, overflow_});
        });
    }
    // Match: the entry's value, or nullptr on a miss (or a refused access).
    const Value *lookup(Pass &pass, const Key &k)
    {
        if (!pass.claim(id_, stage_, name_.c_str())) return nullptr;
        return find(k);
    }
    // Match, and on a miss add (k, v) if there is room: the entry, or nullptr when full (counted).
    const Value *lookup_or_learn(Pass &pass, const Key &k, const Value &v)
    {
        if (!pass.claim(id_, stage_, name_.c_str())) return nullptr;
        if (const Value *hit = find(k)) return hit;
        return insert(k, v) ? &map_.find(k)->second : nullptr;
    }
    // Control plane.
    bool insert(const Key &k, const Value &v)
    {
        if (auto it = map_.find(k); it != map_.end()) {
            it->second = v;
            return true;
        }
        if (map_.size() >= capacity_) {
            overflow_++;
            return false;
        }
        map_.emplace(k, v);
        inserts_++;
        return true;
    }
    bool erase(const Key &k) { return map_.erase(k) != 0; }
    size_t size() const { return map_.size(); }
    uint32_t capacity() const { return capacity_; }
    template <class F> void for_each(F &&f) const
    {
        for (const auto &[k, v] : map_)
            f(k, v);
    }

private:
    const Value *find(const Key &k)
    {
        auto it = map_.find(k);
        if (it == map_.end()) {
            misses_++;
            return nullptr;
        }
        hits_++;
        return &it->second;
    }
    std::string name_;
    unsigned stage_, id_ = 0;
    uint32_t capacity_;
    std::unordered_map<Key, Value, Hash> map_;
    uint64_t hits_ = 0, misses_ = 0, inserts_ = 0, overflow_ = 0;
};

// ---- Programs ----

enum class Verdict : uint8_t { Pass, Rewrite, Drop, Recirculate };

// What a program sees of one packet.
struct Ctx {
    unsigned ingress_port = 0; // the node whose port the frame came in on
    Headers &hdr;              // kind == Roce; the program may change hdr.pkt (then: Rewrite)
    Pass &pass;
    // Bytes a rewritten or synthesized packet's payload may point to (the stage's, valid until
    // the frame has left the stage; e.g. the 8-byte payload of a CAS rewritten to a WRITE).
    uint8_t *payload;
    static constexpr size_t kPayloadBytes = 64;
    // Synthesize a packet (e.g. an ACK back to the sender): deparsed, then switched by its
    // destination MAC like any frame (it may go back out of the ingress port).
    void emit(const rnic::Packet &p) { emitted.push_back(p); }
    std::vector<rnic::Packet> emitted;
};

// A program's parameter: `--set key=value` (integer in [min, max], or one of `choices`).
struct ParamSpec {
    const char *key;
    const char *help;
    const char *def;                  // default value, as text
    uint64_t min = 0, max = 0;        // integer parameter when choices is empty
    std::vector<std::string> choices; // enumeration
};
// Validated parameters: every key of the spec present (defaults filled in).
class Params {
public:
    uint64_t num(const std::string &k) const { return std::stoull(values_.at(k)); }
    const std::string &str(const std::string &k) const { return values_.at(k); }
    const std::map<std::string, std::string> &all() const { return values_; }
    std::map<std::string, std::string> &mut() { return values_; }

private:
    std::map<std::string, std::string> values_;
};

class Program {
public:
    virtual ~Program() = default;
    // One pass of one RoCEv2 packet (Headers::Kind::Roce).
    virtual Verdict ingress(Ctx &c) = 0;
    // The program's own report (JSON object members, without braces; may be empty).
    virtual std::string stats_json() const { return ""; }
    Pipeline &pipeline() { return pipe_; }
    const Pipeline &pipeline() const { return pipe_; }

protected:
    explicit Program(unsigned recirculations = 0) : pipe_(recirculations) {}
    Pipeline pipe_;
};

// One row of the program table (programs.cc).
struct ProgramInfo {
    const char *name;
    const char *summary;
    std::vector<ParamSpec> params;
    std::unique_ptr<Program> (*make)(const Params &);
};
const std::vector<ProgramInfo> &programs();
const ProgramInfo *find_program(const std::string &name);
// Parameters every program takes (handled by the stage): malformed=pass|drop.
const std::vector<ParamSpec> &stage_params();
// Validate "key=value" settings against a program's specs and the stage's; fill defaults.
// False with `err` naming the key, the value and what is allowed.
bool parse_params(const ProgramInfo &info, const std::vector<std::string> &sets, Params &out,
                  std::string &err);
// "NAME key=value ..." -> name and settings (the control command's argument).
bool split_load_args(const std::string &args, std::string &name, std::vector<std::string> &sets,
                     std::string &err);

// ---- The stage: a loaded program and the frame path through it ----

struct StageCounters {
    uint64_t frames = 0, roce = 0, not_roce = 0, malformed = 0;
    uint64_t passed = 0, rewritten = 0, synthesized = 0, dropped = 0;
    uint64_t recirculations = 0, recirc_exceeded = 0, deparse_errors = 0;
    std::map<std::string, uint64_t> malformed_by; // wire_error_name -> frames
};

class Stage {
public:
    struct Out {
        const uint8_t *data;
        size_t len;
        bool synthesized;
    };
    // Load a program, replacing the loaded one (its state is dropped). False with `err` set and
    // the loaded program (if any) untouched.
    bool load(const std::string &name, const std::vector<std::string> &sets, std::string &err);
    // Load a program object built elsewhere (unit tests, fuzzers, an embedder); the control
    // protocol loads only from the program table.
    void load_program(std::unique_ptr<Program> p, const std::string &name, bool drop_malformed = false);
    void unload(); // the program's state is dropped (soft state)
    bool loaded() const { return prog_ != nullptr; }
    const std::string &name() const { return name_; }
    void set_strict(bool s) { strict_ = s; }

    // One frame from `port`: the frames to forward, in order (none when dropped). A passed frame
    // is `frame` itself; others point into the stage's buffers, valid until the next call.
    const std::vector<Out> &process(unsigned port, const uint8_t *frame, size_t len);

    const StageCounters &counters() const { return c_; }
    Resources resources() const;
    std::string stats_json() const; // {"loaded":...,"program":...,"frames":{...},...}
    std::string list_json() const;  // the program table
    Program *program() { return prog_.get(); }

private:
    std::unique_ptr<Program> prog_;
    std::string name_;
    Params params_;
    bool drop_malformed_ = false, strict_ = false;
    StageCounters c_;
    std::vector<Out> out_;
    std::vector<uint8_t> scratch_, rewritten_;
    std::vector<std::vector<uint8_t>> synth_;
    uint8_t payload_[Ctx::kPayloadBytes] = {};
};

} // namespace rackemu::fabric::sw
