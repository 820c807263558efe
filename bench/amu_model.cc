// SPDX-License-Identifier: MIT
// amu-model: runs the NIC atomic unit (hw/rnic/atomic_unit.h) under the load generator of seed
// 003's experiments, for bench/atomic_unit.py: the device's own code, no cluster. CSV on stdout.
//
//   amu-model hotspot [--pes N] [--ops N] [--addrs N] [--fetch] [--order O] [--set NAME=V[,V...]]...
//       N-1 PEs target PE 0 with ops ADDs each, on one word (--addrs 0) or N words each (sec. IV),
//       arriving in the order sec. IV's torus gives them (--order torus, the default; torus.h)
//   amu-model gups [--table-log2 N] [--procs N] [--rate MUPS] [--set ...]
//       HPCC RandomAccess XOR updates (POLY 7, HPCC_starts) of N processes arriving at node 0
//       (--rate: offered evenly at MUPS updates per microsecond; default all at once)
//   amu-model bounds [--set ...]
//       the analytical bounds of sec. VI (eq. 1-6) for the properties
// A --set with a comma list sweeps it: one row per combination of all lists. Properties, by
// their device-property names: nic-mhz host-lat-ns host-mbps mem-ns net-mbps msg-bytes
// rdreq-bytes wrreq-bytes resp-bytes cmd-bytes cache-lines cache-ways (0: fully associative)
// lookahead regs input-queue host-queue tags rate-limit (off|aging|hostq|both) age-max
// hostq-threshold raw (none|ack|flush) raw-entries cache-cycles conflict-bypass (0|1) symmetric (0|1) atomicity
// (global|hca).
// Besides the counters, each row has the model's timing statistics (AmuStats): the mean time a
// host read / write holds its tag, the mean wait of a read's response and of a command for the
// host->NIC direction, that direction's utilisation over the active time, and the time the issue
// unit's head op was blocked by each cause (ns).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "atomic_unit.h"

using namespace rackemu::rnic;

namespace {

[[noreturn]] void usage(const std::string &why)
{
    std::fprintf(stderr,
                 "amu-model: %s\nusage: amu-model hotspot [--pes N] [--ops N] [--addrs N] [--fetch] [--order O] [--set NAME=V[,V..]]...\n"
                 "       amu-model gups [--table-log2 N] [--procs N] [--rate MUPS] [--set NAME=V[,V..]]...\n"
                 "       amu-model bounds [--set NAME=V[,V..]]...\n"
                 "       amu-model --help   (the properties are listed in bench/amu_model.cc and docs/atomic-unit.md)\n",
                 why.c_str());
    std::exit(2);
}

unsigned long num(const std::string &s, const std::string &what)
{
    char *end;
    errno = 0;
    unsigned long v = std::strtoul(s.c_str(), &end, 0);
    if (errno || s.empty() || *end || v > 0xffffffffu) usage("bad number '" + s + "' for " + what);
    return v;
}

struct Prop {
    const char *name;
    std::function<void(AmuConfig &, const std::string &)> set;
    std::function<std::string(const AmuConfig &)> get;
};

std::vector<Prop> props()
{
    std::vector<Prop> p;
    auto u32 = [&](const char *n, uint32_t AmuConfig::*f) {
        p.push_back({n, [f, n](AmuConfig &c, const std::string &v) { c.*f = uint32_t(num(v, n)); },
                     [f](const AmuConfig &c) { return std::to_string(c.*f); }});
    };
    u32("nic-mhz", &AmuConfig::nic_mhz);
    u32("host-lat-ns", &AmuConfig::host_lat_ns);
    u32("host-mbps", &AmuConfig::host_mbps);
    u32("mem-ns", &AmuConfig::mem_ns);
    u32("net-mbps", &AmuConfig::net_mbps);
    u32("msg-bytes", &AmuConfig::msg_bytes);
    u32("rdreq-bytes", &AmuConfig::rdreq_bytes);
    u32("wrreq-bytes", &AmuConfig::wrreq_bytes);
    u32("resp-bytes", &AmuConfig::resp_bytes);
    u32("cmd-bytes", &AmuConfig::cmd_bytes);
    u32("cache-lines", &AmuConfig::cache_lines);
    u32("cache-ways", &AmuConfig::cache_ways);
    u32("lookahead", &AmuConfig::lookahead);
    u32("regs", &AmuConfig::regs);
    u32("input-queue", &AmuConfig::input_queue);
    u32("host-queue", &AmuConfig::host_queue);
    u32("tags", &AmuConfig::tags);
    p.push_back({"rate-limit",
                 [](AmuConfig &c, const std::string &v) {
                     if (!amu_rate_limit_from(v.c_str(), &c.rate_limit)) usage("rate-limit: off, aging, hostq or both");
                 },
                 [](const AmuConfig &c) { return std::string(amu_rate_limit_name(c.rate_limit)); }});
    u32("age-max", &AmuConfig::age_max);
    u32("hostq-threshold", &AmuConfig::hostq_threshold);
    p.push_back({"raw",
                 [](AmuConfig &c, const std::string &v) {
                     if (!amu_raw_from(v.c_str(), &c.raw)) usage("raw: none, ack or flush");
                 },
                 [](const AmuConfig &c) { return std::string(amu_raw_name(c.raw)); }});
    u32("raw-entries", &AmuConfig::raw_entries);
    u32("cache-cycles", &AmuConfig::cache_cycles);
    u32("conflict-bypass", &AmuConfig::conflict_bypass);
    p.push_back({"symmetric", [](AmuConfig &c, const std::string &v) { c.symmetric = num(v, "symmetric") != 0; },
                 [](const AmuConfig &c) { return std::string(c.symmetric ? "1" : "0"); }});
    p.push_back({"atomicity",
                 [](AmuConfig &c, const std::string &v) {
                     if (v == "global") c.atomicity = AmuAtomicity::Global;
                     else if (v == "hca") c.atomicity = AmuAtomicity::Hca;
                     else usage("atomicity: global or hca");
                 },
                 [](const AmuConfig &c) {
                     return std::string(c.atomicity == AmuAtomicity::Global ? "global" : "hca");
                 }});
    return p;
}

// The timing statistics' columns (AmuStats), after the counters.
constexpr const char *kStatCols = ",read_hold_ns,write_hold_ns,resp_wait_ns,cmd_wait_ns,h2n_util,active_ns,"
                                  "block_busy_ns,block_conflict_fill_ns,block_conflict_alu_ns,block_raw_ns,"
                                  "block_hostq_ns,alu_block_ns";

void print_stats(const AmuLoadResult &r)
{
    const AmuStats &s = r.s;
    auto mean = [](uint64_t ps, uint64_t n) { return n ? double(ps) / double(n) / 1000.0 : 0.0; };
    std::printf(",%.2f,%.2f,%.2f,%.2f,%.4f,%.0f", mean(s.read_hold_ps, s.reads), mean(s.write_hold_ps, s.writes),
                mean(s.resp_wait_ps, s.reads), mean(s.cmd_wait_ps, s.cmds),
                r.active_ns > 0 ? double(s.h2n_busy_ps) / 1000.0 / r.active_ns : 0.0, r.active_ns);
    for (AmuBlock b : {AmuBlock::Busy, AmuBlock::ConflictFill, AmuBlock::ConflictAlu, AmuBlock::Raw,
                       AmuBlock::HostQueue})
        std::printf(",%.0f", double(s.block_ps[size_t(b)]) / 1000.0);
    std::printf(",%.0f", double(s.alu_block_ps) / 1000.0);
}

std::vector<std::string> split(const std::string &s)
{
    std::vector<std::string> out;
    for (size_t p = 0; p <= s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        out.push_back(s.substr(p, q - p));
        p = q + 1;
    }
    return out;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
        std::printf("amu-model: the NIC-atomics paper's atomic unit's model (hw/rnic/atomic_unit.h) under the experiments' load.\n"
                    "  hotspot [--pes N] [--ops N] [--addrs N] [--fetch]  N-1 PEs -> PE 0, sec. IV (Figs. 2-5)\n"
                    "  hotspot ... [--seed N]  the arrival order's seed\n"
                    "  hotspot ... [--order torus|random|round-robin|bursts:N]  how the sources' messages\n"
                    "      interleave at the target: as sec. IV's network delivers them (default: a packet\n"
                    "      model of its 3D torus, hw/rnic/torus.h), a random source each, the sources in\n"
                    "      turn, or N messages of a random source back to back\n"
                    "  hotspot ... [--torus-vc N] [--torus-pes-per-node N]  the torus's buffer per virtual\n"
                    "      channel (packets; default 0: the credit round trip; not in the paper) and PEs per node (default 2)\n"
                    "  gups [--table-log2 N] [--procs N] [--rate MUPS]    RandomAccess XORs (Figs. 6-7, Table III);\n"
                    "                                                     --rate offers MUPS updates/us (default: all at once)\n"
                    "  bounds                                             eq. 1-6 of sec. VI (Tables III-IV)\n"
                    "  --set NAME=V[,V...]  a property, or a list to sweep; names:");
        for (auto &p : props()) std::printf(" %s", p.name);
        std::printf("\n  cache-ways 0 = fully associative. Output: CSV on stdout, one row per combination.\n");
        return 0;
    }
    if (argc < 2) usage("no command");
    const std::string cmd = argv[1];
    if (cmd != "hotspot" && cmd != "gups" && cmd != "bounds") usage("command: hotspot, gups or bounds");
    HotspotMix hm;
    GupsMix gm;
    const auto all = props();
    std::vector<std::pair<const Prop *, std::vector<std::string>>> sweep;
    for (int i = 2; i < argc; i++) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) usage(a + " needs a value");
            return argv[++i];
        };
        if (a == "--pes") hm.pes = uint32_t(num(val(), a));
        else if (a == "--ops") hm.ops_per_pe = uint32_t(num(val(), a));
        else if (a == "--addrs") hm.addrs_per_pe = uint32_t(num(val(), a));
        else if (a == "--fetch") hm.fetch = true;
        else if (a == "--table-log2") gm.table_log2 = uint32_t(num(val(), a));
        else if (a == "--procs") gm.procs = uint32_t(num(val(), a));
        else if (a == "--rate") {
            const std::string v = val();
            char *end;
            gm.offered_mups = std::strtod(v.c_str(), &end);
            if (v.empty() || *end || !(gm.offered_mups > 0)) usage("bad --rate '" + v + "' (updates per microsecond, > 0)");
        }
        else if (a == "--seed") hm.seed = gm.seed = num(val(), a);
        else if (a == "--order") {
            const std::string v = val();
            if (v == "random") hm.order = HotspotOrder::Random;
            else if (v == "round-robin") hm.order = HotspotOrder::RoundRobin;
            else if (v == "torus") hm.order = HotspotOrder::Torus;
            else if (v.rfind("bursts:", 0) == 0) {
                hm.order = HotspotOrder::Bursts;
                hm.burst = uint32_t(num(v.substr(7), a));
            } else usage("bad --order '" + v + "' (random, round-robin, bursts:N or torus)");
        }
        else if (a == "--torus-vc") hm.net.vc_packets = uint32_t(num(val(), a));
        else if (a == "--torus-pes-per-node") hm.net.pes_per_node = uint32_t(num(val(), a));
        else if (a == "--set") {
            const std::string kv = val();
            const auto eq = kv.find('=');
            if (eq == std::string::npos) usage("--set NAME=VALUE");
            const std::string k = kv.substr(0, eq);
            const Prop *p = nullptr;
            for (auto &q : all)
                if (k == q.name) p = &q;
            if (!p) usage("unknown property " + k + " (amu-model --help lists them)");
            sweep.push_back({p, split(kv.substr(eq + 1))});
        } else usage("unknown option " + a);
    }

    if (cmd == "hotspot" && hm.order == HotspotOrder::Torus) { // one network run serves the whole sweep
        TorusOrder o = torus_hotspot_order(hm.net, hm.pes, hm.ops_per_pe);
        if (!o.ok) {
            std::fprintf(stderr, "amu-model: %s\n", o.error.c_str());
            return 1;
        }
        hm.arrivals = std::make_shared<const std::vector<uint32_t>>(std::move(o.src));
    }
    std::printf("kind,pes,addrs,table_log2,procs");
    for (auto &p : all) std::printf(",%s", p.name);
    if (cmd == "bounds")
        std::printf(",base_n2h,base_h2n,amu_n2h,amu_h2n,base_mups,amu_mups,target_mups,rd_lat_ns,wr_lat_ns,"
                    "req_gups,req_target\n");
    else {
        std::printf(",ops,elapsed_ns,mbps,mops,mean_outstanding,exact");
#define AMU_COL(name, doc) std::printf(",%s", #name);
        AMU_COUNTERS(AMU_COL)
#undef AMU_COL
        std::printf("%s\n", kStatCols);
    }
    std::vector<size_t> idx(sweep.size(), 0);
    for (;;) {
        AmuConfig c;
        for (size_t k = 0; k < sweep.size(); k++) sweep[k].first->set(c, sweep[k].second[idx[k]]);
        if (c.cache_lines && c.cache_ways == 0) c.cache_ways = c.cache_lines;
        std::printf("%s,%u,%u,%u,%u", cmd.c_str(), hm.pes, hm.addrs_per_pe, gm.table_log2, gm.procs);
        for (auto &p : all) std::printf(",%s", p.get(c).c_str());
        if (cmd == "bounds") {
            const AmuBounds b = amu_bounds(c);
            std::printf(",%.0f,%.0f,%.0f,%.0f,%.2f,%.2f,%.2f,%.0f,%.0f,%.2f,%.2f\n", b.base_n2h, b.base_h2n,
                        b.amu_n2h, b.amu_h2n, b.base_rate / 1e6, b.amu_rate / 1e6, b.target_rate / 1e6, b.rd_lat_ns,
                        b.wr_lat_ns, b.req_gups, b.req_target);
        } else if (const char *e = amu_check_config(c)) {
            // An impossible point of a sweep (Fig. 4's 32-line 64-way cache): a row of zeros.
            std::fprintf(stderr, "amu-model: skipped: %s\n", e);
            std::printf(",0,0,0,0,0,0");
#define AMU_ZERO(name, doc) std::printf(",0");
            AMU_COUNTERS(AMU_ZERO)
#undef AMU_ZERO
            for (const char *q = kStatCols; *q; q++)
                if (*q == ',') std::printf(",0");
            std::printf("\n");
        } else {
            const AmuLoadResult r = cmd == "hotspot" ? amu_model_hotspot(c, hm) : amu_model_gups(c, gm);
            if (!r.ok) {
                std::fprintf(stderr, "amu-model: %s\n", r.error.c_str());
                return 1;
            }
            std::printf(",%llu,%.1f,%.2f,%.3f,%.2f,%d", (unsigned long long)r.ops, r.elapsed_ns, r.mbps, r.mops,
                        r.mean_outstanding, r.exact ? 1 : 0);
#define AMU_VAL(name, doc) std::printf(",%llu", (unsigned long long)r.c.name);
            AMU_COUNTERS(AMU_VAL)
#undef AMU_VAL
            print_stats(r);
            std::printf("\n");
        }
        std::fflush(stdout);
        size_t k = 0;
        while (k < idx.size() && ++idx[k] == sweep[k].second.size()) idx[k++] = 0;
        if (k == idx.size()) break;
    }
    return 0;
}
