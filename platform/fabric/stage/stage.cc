// SPDX-License-Identifier: MIT
// The programmable stage of the rack switch: parser, deparser, pipeline discipline, parameters and
// the frame path (see stage.h and docs/switch.md).
#include "stage.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace rackemu::fabric::sw {

namespace {

void json_str(std::ostringstream &o, const std::string &s)
{
    o << '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            o << '\\' << ch;
        } else if (c < 0x20 || c >= 0x7F) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o << b;
        } else {
            o << ch;
        }
    }
    o << '"';
}

bool parse_uint(const std::string &v, uint64_t &out)
{
    if (v.empty() || v.size() > 20) return false;
    for (const char ch : v) {
        if (ch < '0' || ch > '9') return false;
    }
    errno = 0;
    char *end = nullptr;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (errno || *end) return false;
    out = x;
    return true;
}

const ParamSpec *find_spec(const std::vector<ParamSpec> &specs, const std::string &key)
{
    for (const ParamSpec &s : specs) {
        if (key == s.key) return &s;
    }
    return nullptr;
}

std::string allowed(const ParamSpec &s)
{
    if (s.choices.empty()) return "an integer in " + std::to_string(s.min) + ".." + std::to_string(s.max);
    std::string r = "one of ";
    for (size_t i = 0; i < s.choices.size(); i++)
        r += (i ? ", " : "") + s.choices[i];
    return r;
}

} // namespace

// ---- Parser and deparser ----

Headers parse(const uint8_t *f, size_t len, std::vector<uint8_t> &scratch)
{
    Headers h;
    auto malformed = [&](rnic::WireError e) {
        h.kind = Headers::Kind::Malformed;
        h.error = e;
        return h;
    };
    if (len < ROCE_ETH_LEN) return malformed(rnic::WireError::Truncated);
    size_t l2 = ROCE_ETH_LEN;
    uint16_t type = roce_get16(f + 12);
    if (type == kEthertypeVlan) {
        if (len < ROCE_ETH_LEN + kVlanLen) return malformed(rnic::WireError::Truncated);
        h.vlan = true;
        h.vlan_tci = roce_get16(f + 14);
        type = roce_get16(f + 16);
        l2 += kVlanLen;
    }
    if (type != ROCE_ETHERTYPE_IPV4) return h; // ARP, IPv6, a second tag, ...: not RoCEv2 over IPv4
    if (len < l2 + ROCE_IPV4_LEN) return malformed(rnic::WireError::Truncated);
    const uint8_t *ip = f + l2;
    if (roce_get16(ip + 6) & 0x1FFFu) return h; // a later fragment: no UDP header to look at
    if (ip[9] != ROCE_IP_PROTO_UDP) return h;
    const size_t ihl = size_t(ip[0] & 0xFu) * 4;
    if (ihl < ROCE_IPV4_LEN) return malformed(rnic::WireError::IpHeaderLen);
    if (len < l2 + ihl + ROCE_UDP_LEN) return malformed(rnic::WireError::Truncated);
    if (roce_get16(ip + ihl + 2) != ROCE_UDP_DPORT) return h;

    const uint8_t *frame = f;
    if (h.vlan) { // parse_frame takes untagged frames: the same frame without its tag
        scratch.resize(len - kVlanLen);
        std::memcpy(scratch.data(), f, 12);
        std::memcpy(scratch.data() + 12, f + 16, len - 16);
        frame = scratch.data();
        len -= kVlanLen;
    }
    const rnic::WireError e = rnic::parse_frame(frame, len, h.pkt, true, true);
    if (e != rnic::WireError::Ok) return malformed(e);
    h.kind = Headers::Kind::Roce;
    return h;
}

rnic::WireError deparse(const Headers &h, std::vector<uint8_t> &out)
{
    const size_t off = h.vlan ? kVlanLen : 0;
    out.resize(off + ROCE_FRAME_MAX + ROCE_XATOMICETH_LEN);
    size_t n = 0;
    const rnic::WireError e = rnic::build_frame(h.pkt, out.data() + off, out.size() - off, &n);
    if (e != rnic::WireError::Ok) {
        out.clear();
        return e;
    }
    if (h.vlan) { // dst, src, then the tag before build_frame's EtherType
        std::memmove(out.data(), out.data() + off, 12);
        roce_put16(out.data() + 12, kEthertypeVlan);
        roce_put16(out.data() + 14, h.vlan_tci);
    }
    out.resize(off + n);
    return rnic::WireError::Ok;
}

bool frame_valid(const uint8_t *frame, size_t len)
{
    std::vector<uint8_t> scratch;
    return parse(frame, len, scratch).kind == Headers::Kind::Roce;
}

// ---- Pipeline discipline ----

bool Pass::claim(unsigned id, unsigned stage, const char *what)
{
    const uint64_t bit = 1ull << (id % 64);
    if (used_[id / 64] & bit) {
        pipe_.violation(std::string(what) + ": a second access in one pass (stage " + std::to_string(stage) +
                        ")");
        return false;
    }
    if (stage < last_stage_) {
        pipe_.violation(std::string(what) + ": stage " + std::to_string(stage) + " accessed after stage " +
                        std::to_string(last_stage_) + " in one pass (recirculate to go back)");
        return false;
    }
    used_[id / 64] |= bit;
    last_stage_ = stage;
    return true;
}

unsigned Pipeline::add(unsigned stage, std::function<void(Resources &)> report)
{
    if (objects_.size() >= kMaxObjects)
        throw std::logic_error("more than 256 tables and arrays in one program");
    if (stage >= kMaxStages)
        throw std::logic_error("stage " + std::to_string(stage) + " beyond the last (31)");
    objects_.push_back({std::move(report)});
    if (stage + 1 > stages_) stages_ = stage + 1;
    return unsigned(objects_.size() - 1);
}

void Pipeline::violation(const std::string &what)
{
    violations_++;
    if (first_violation_.empty()) first_violation_ = what;
    if (strict_) {
        std::fprintf(stderr, "switch program: pipeline discipline violated: %s\n", what.c_str());
        std::abort();
    }
}

Resources Pipeline::resources() const
{
    Resources r;
    r.stages = stages_;
    r.recirculations = recirculations_;
    for (const Object &o : objects_)
        o.report(r);
    for (const ArrayInfo &a : r.arrays)
        r.sram_bytes += uint64_t(a.cells) * a.cell_bytes;
    for (const TableInfo &t : r.tables)
        r.sram_bytes += uint64_t(t.capacity) * (t.key_bytes + t.value_bytes);
    return r;
}

// ---- Parameters ----

const std::vector<ParamSpec> &stage_params()
{
    static const std::vector<ParamSpec> specs = {
        {"malformed",
         "RoCEv2 frames that do not parse (truncated, bad checksum or ICRC): forward or drop",
         "pass",
         0,
         0,
         {"pass", "drop"}},
    };
    return specs;
}

const ProgramInfo *find_program(const std::string &name)
{
    for (const ProgramInfo &p : programs()) {
        if (name == p.name) return &p;
    }
    return nullptr;
}

bool parse_params(const ProgramInfo &info, const std::vector<std::string> &sets, Params &out,
                  std::string &err)
{
    out = Params{};
    auto &v = out.mut();
    for (const auto *specs : {&info.params, &stage_params()}) {
        for (const ParamSpec &s : *specs)
            v[s.key] = s.def;
    }
    std::map<std::string, bool> given;
    for (const std::string &set : sets) {
        const size_t eq = set.find('=');
        if (eq == std::string::npos || eq == 0) {
            err = std::string(info.name) + ": '" + set + "' is not key=value";
            return false;
        }
        const std::string key = set.substr(0, eq), val = set.substr(eq + 1);
        const ParamSpec *s = find_spec(info.params, key);
        if (!s) s = find_spec(stage_params(), key);
        if (!s) {
            std::string known;
            for (const auto *specs : {&info.params, &stage_params()}) {
                for (const ParamSpec &p : *specs)
                    known += (known.empty() ? "" : ", ") + std::string(p.key);
            }
            err = std::string(info.name) + ": no parameter '" + key + "' (parameters: " + known + ")";
            return false;
        }
        if (given[key]) {
            err = std::string(info.name) + ": " + key + " given twice";
            return false;
        }
        given[key] = true;
        bool ok = false;
        if (s->choices.empty()) {
            uint64_t x = 0;
            ok = parse_uint(val, x) && x >= s->min && x <= s->max;
        } else {
            for (const std::string &c : s->choices)
                ok = ok || val == c;
        }
        if (!ok) {
            err = std::string(info.name) + ": " + key + "=" + val + " is not " + allowed(*s);
            return false;
        }
        v[key] = val;
    }
    return true;
}

bool split_load_args(const std::string &args, std::string &name, std::vector<std::string> &sets,
                     std::string &err)
{
    std::istringstream in(args);
    std::string tok;
    name.clear();
    sets.clear();
    while (in >> tok) {
        if (name.empty()) {
            name = tok;
        } else if (tok != "--set") {
            sets.push_back(tok);
        }
    }
    if (name.empty()) {
        err = "usage: switch load NAME [key=value ...] (programs: `switch list`)";
        return false;
    }
    return true;
}

// ---- The stage ----

bool Stage::load(const std::string &name, const std::vector<std::string> &sets, std::string &err)
{
    const ProgramInfo *info = find_program(name);
    if (!info) {
        std::string known;
        for (const ProgramInfo &p : programs())
            known += (known.empty() ? "" : ", ") + std::string(p.name);
        err = "no switch program '" + name + "' (programs: " + known + ")";
        return false;
    }
    Params params;
    if (!parse_params(*info, sets, params, err)) return false;
    std::unique_ptr<Program> fresh;
    try {
        fresh = info->make(params);
    } catch (const std::exception &e) { // a program's own construction check (stage.h Pipeline::add)
        err = std::string(info->name) + ": " + e.what();
        return false;
    }
    prog_ = std::move(fresh); // the program loaded before (if any) and its state are gone
    prog_->pipeline().set_strict(strict_);
    name_ = info->name;
    params_ = params;
    drop_malformed_ = params.str("malformed") == "drop";
    c_ = StageCounters{};
    return true;
}

void Stage::load_program(std::unique_ptr<Program> p, const std::string &name, bool drop_malformed)
{
    prog_ = std::move(p);
    prog_->pipeline().set_strict(strict_);
    name_ = name;
    params_ = Params{};
    params_.mut()["malformed"] = drop_malformed ? "drop" : "pass";
    drop_malformed_ = drop_malformed;
    c_ = StageCounters{};
}

void Stage::unload()
{
    prog_.reset();
    name_.clear();
    params_ = Params{};
    c_ = StageCounters{};
}

const std::vector<Stage::Out> &Stage::process(unsigned port, const uint8_t *frame, size_t len)
{
    out_.clear();
    c_.frames++;
    Headers h = parse(frame, len, scratch_);
    if (h.kind == Headers::Kind::NotRoce) {
        c_.not_roce++;
        c_.passed++;
        out_.push_back({frame, len, false});
        return out_;
    }
    if (h.kind == Headers::Kind::Malformed) {
        c_.malformed++;
        c_.malformed_by[rnic::wire_error_name(h.error)]++;
        if (drop_malformed_) {
            c_.dropped++;
        } else {
            c_.passed++;
            out_.push_back({frame, len, false});
        }
        return out_;
    }
    c_.roce++;
    Verdict v = Verdict::Pass;
    size_t nsynth = 0;
    for (unsigned n = 0;; n++) {
        Pass pass(prog_->pipeline(), n);
        Ctx ctx{port, h, pass, payload_, {}};
        v = prog_->ingress(ctx);
        for (const rnic::Packet &p : ctx.emitted) {
            Headers s;
            s.kind = Headers::Kind::Roce;
            s.vlan = h.vlan;
            s.vlan_tci = h.vlan_tci;
            s.pkt = p;
            if (synth_.size() <= nsynth) synth_.resize(nsynth + 1);
            if (deparse(s, synth_[nsynth]) != rnic::WireError::Ok) {
                c_.deparse_errors++;
                continue;
            }
            nsynth++;
        }
        if (v != Verdict::Recirculate) break;
        if (n + 1 > prog_->pipeline().recirculations()) {
            c_.recirc_exceeded++;
            v = Verdict::Drop;
            break;
        }
        c_.recirculations++;
    }
    switch (v) {
    case Verdict::Pass:
    case Verdict::Recirculate:
        c_.passed++;
        out_.push_back({frame, len, false});
        break;
    case Verdict::Rewrite:
        if (deparse(h, rewritten_) != rnic::WireError::Ok) {
            c_.deparse_errors++; // the defined fallback: the frame as it came
            c_.passed++;
            out_.push_back({frame, len, false});
        } else {
            c_.rewritten++;
            out_.push_back({rewritten_.data(), rewritten_.size(), false});
        }
        break;
    case Verdict::Drop:
        c_.dropped++;
        break;
    }
    for (size_t i = 0; i < nsynth; i++) {
        c_.synthesized++;
        out_.push_back({synth_[i].data(), synth_[i].size(), true});
    }
    return out_;
}

Resources Stage::resources() const
{
    return prog_ ? prog_->pipeline().resources() : Resources{};
}

std::string Stage::stats_json() const
{
    std::ostringstream o;
    o << "{\"loaded\":" << (prog_ ? "true" : "false");
    if (!prog_) {
        o << '}';
        return o.str();
    }
    o << ",\"program\":";
    json_str(o, name_);
    o << ",\"params\":{";
    bool first = true;
    for (const auto &[k, v] : params_.all()) {
        o << (first ? "" : ",");
        json_str(o, k);
        o << ':';
        json_str(o, v);
        first = false;
    }
    const Resources r = resources();
    o << "},\"resources\":{\"stages\":" << r.stages << ",\"recirculations\":" << r.recirculations
      << ",\"sram_bytes\":" << r.sram_bytes << ",\"table_entries\":";
    uint64_t entries = 0;
    for (const TableInfo &t : r.tables)
        entries += t.capacity;
    o << entries << "},\"frames\":{\"in\":" << c_.frames << ",\"roce\":" << c_.roce
      << ",\"not_roce\":" << c_.not_roce << ",\"malformed\":" << c_.malformed << ",\"passed\":" << c_.passed
      << ",\"rewritten\":" << c_.rewritten << ",\"synthesized\":" << c_.synthesized
      << ",\"dropped\":" << c_.dropped << ",\"recirculations\":" << c_.recirculations
      << ",\"recirc_exceeded\":" << c_.recirc_exceeded << ",\"deparse_errors\":" << c_.deparse_errors
      << "},\"malformed_by\":{";
    first = true;
    for (const auto &[k, n] : c_.malformed_by) {
        o << (first ? "" : ",");
        json_str(o, k);
        o << ':' << n;
        first = false;
    }
    o << "},\"tables\":[";
    for (size_t i = 0; i < r.tables.size(); i++) {
        const TableInfo &t = r.tables[i];
        o << (i ? "," : "") << "{\"name\":";
        json_str(o, t.name);
        o << ",\"stage\":" << t.stage << ",\"capacity\":" << t.capacity << ",\"entries\":" << t.entries
          << ",\"key_bytes\":" << t.key_bytes << ",\"value_bytes\":" << t.value_bytes
          << ",\"hits\":" << t.hits << ",\"misses\":" << t.misses << ",\"inserts\":" << t.inserts
          << ",\"overflow\":" << t.overflow << '}';
    }
    o << "],\"arrays\":[";
    for (size_t i = 0; i < r.arrays.size(); i++) {
        const ArrayInfo &a = r.arrays[i];
        o << (i ? "," : "") << "{\"name\":";
        json_str(o, a.name);
        o << ",\"stage\":" << a.stage << ",\"cells\":" << a.cells << ",\"cell_bytes\":" << a.cell_bytes
          << ",\"sram_bytes\":" << uint64_t(a.cells) * a.cell_bytes << ",\"occupancy\":" << a.occupancy
          << ",\"accesses\":" << a.accesses << ",\"out_of_range\":" << a.out_of_range << '}';
    }
    const Pipeline &p = prog_->pipeline();
    o << "],\"discipline_violations\":" << p.violations() << ",\"first_violation\":";
    json_str(o, p.first_violation());
    const std::string own = prog_->stats_json();
    o << ",\"program_stats\":{" << own << "}}";
    return o.str();
}

std::string Stage::list_json() const
{
    std::ostringstream o;
    o << "{\"programs\":[";
    bool first = true;
    for (const ProgramInfo &p : programs()) {
        o << (first ? "" : ",") << "{\"name\":";
        json_str(o, p.name);
        o << ",\"summary\":";
        json_str(o, p.summary);
        o << ",\"params\":[";
        bool f2 = true;
        for (const auto *specs : {&p.params, &stage_params()}) {
            for (const ParamSpec &s : *specs) {
                o << (f2 ? "" : ",") << "{\"key\":";
                json_str(o, s.key);
                o << ",\"default\":";
                json_str(o, s.def);
                o << ",\"allowed\":";
                json_str(o, allowed(s));
                o << ",\"help\":";
                json_str(o, s.help);
                o << '}';
                f2 = false;
            }
        }
        o << "]}";
        first = false;
    }
    o << "],\"loaded\":";
    json_str(o, name_);
    o << '}';
    return o.str();
}

} // namespace rackemu::fabric::sw
