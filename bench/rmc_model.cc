// SPDX-License-Identifier: MIT
// rmc-model: evaluates the RMC timing model (hw/sonuma/timing.h) for bench/sonuma.py, the same
// code the device uses, without booting a cluster. Prints CSV on stdout.
//
//   rmc-model latency [opts]   one request alone: op,size,llc,latency_ns (read, sabre, sabre-nospec)
//   rmc-model load [opts]      the contention model: op,size,llc,threads,window,think_ns,gbps,mops,
//                              mean_ns,unloaded_ns,util_r2p2,util_att,util_link,util_rgp,util_rcp,
//                              att_stalls,bound
// opts: --sizes 64,128,... --threads N --window N --think-ns X --llc --ops read,sabre,sabre-nospec
//       --abort-frac F (load, SABRe ops: the fraction of requests that abort LOCKED, 0..0.99)
//       --set NAME=VALUE (a timing property by its device-property name: rmc-mhz, mem-latency-ns,
//       llc-latency-ns, hop-ns, hops, link-gbps, r2p2-gbps, r2p2-count, r2p2-issue-cycles,
//       pkt-hdr-bytes, att-entries, sb-depth)
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "timing.h"

using namespace rackemu::sonuma;

namespace {

[[noreturn]] void usage(const char *why)
{
    std::fprintf(
        stderr,
        "rmc-model: %s\nusage: rmc-model latency|load [--sizes A,B,..] [--ops read,sabre,sabre-nospec] "
        "[--threads N] [--window N] [--think-ns X] [--abort-frac F] [--llc] [--set NAME=VALUE]...\n"
        "       rmc-model --help\n",
        why);
    std::exit(2);
}

unsigned long num(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long v = std::strtoul(s, &end, 0);
    if (errno || end == s || *end || v > 0xffffffffu) usage((std::string("bad number for ") + what).c_str());
    return v;
}

void set_prop(Timing &t, const std::string &kv)
{
    auto eq = kv.find('=');
    if (eq == std::string::npos) usage("--set NAME=VALUE");
    std::string k = kv.substr(0, eq);
    uint32_t v = uint32_t(num(kv.c_str() + eq + 1, k.c_str()));
    struct {
        const char *name;
        uint32_t *field;
    } props[] = {{"rmc-mhz", &t.rmc_mhz},
                 {"mem-latency-ns", &t.mem_ns},
                 {"llc-latency-ns", &t.llc_ns},
                 {"hop-ns", &t.hop_ns},
                 {"hops", &t.hops},
                 {"link-gbps", &t.link_gbps},
                 {"r2p2-gbps", &t.r2p2_gbps},
                 {"r2p2-count", &t.r2p2_count},
                 {"r2p2-issue-cycles", &t.issue_cycles},
                 {"pkt-hdr-bytes", &t.pkt_hdr},
                 {"att-entries", &t.att_entries},
                 {"sb-depth", &t.sb_depth}};
    for (auto &p : props)
        if (k == p.name) {
            bool one = k != "mem-latency-ns" && k != "llc-latency-ns" && k != "hop-ns" && k != "hops" &&
                       k != "pkt-hdr-bytes";
            if (one && v < 1) usage((k + " must be at least 1").c_str());
            if ((k == "att-entries" && v > RMC_ATT_MAX) || (k == "sb-depth" && v > RMC_SB_MAX))
                usage((k + " above the device's limit").c_str());
            *p.field = v;
            return;
        }
    usage(("unknown property " + k).c_str());
}

} // namespace

int main(int argc, char **argv)
{
    if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
        std::printf(
            "rmc-model: the RMC timing model (hw/sonuma/timing.h) the device uses, without a cluster; CSV on stdout.\n"
            "  latency [opts]   one request alone: op,size,llc,latency_ns\n"
            "  load [opts]      the contention model: op,size,llc,threads,window,think_ns,gbps,mops,mean_ns,\n"
            "                   unloaded_ns,util_r2p2,util_att,util_link,util_rgp,util_rcp,att_stalls,bound\n"
            "  --sizes A,B,..   bytes, 1..65536 (default 64..8192)   --ops read,sabre,sabre-nospec (default all)\n"
            "  --threads N --window N (load; default 16 x 16)      --think-ns X (load: per request, ns)\n"
            "  --abort-frac F   load, SABRe ops: the fraction that abort LOCKED (0..0.99)\n"
            "  --llc            the data LLC-resident instead of memory-resident\n"
            "  --set NAME=VALUE a timing property by its device-property name: rmc-mhz mem-latency-ns\n"
            "                   llc-latency-ns hop-ns hops link-gbps r2p2-gbps r2p2-count r2p2-issue-cycles\n"
            "                   pkt-hdr-bytes att-entries sb-depth (docs/sonuma.md)\n");
        return 0;
    }
    if (argc < 2) usage("no command");
    std::string cmd = argv[1];
    if (cmd != "latency" && cmd != "load") usage("command: latency or load");
    Timing t;
    std::vector<uint32_t> sizes = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
    std::vector<std::string> ops = {"read", "sabre", "sabre-nospec"};
    uint32_t threads = 16, window = 16;
    double think = 0, abort_frac = 0;
    bool llc = false;
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) usage((a + " needs a value").c_str());
            return argv[++i];
        };
        if (a == "--sizes") {
            sizes.clear();
            std::string s = val();
            for (size_t p = 0; p <= s.size();) {
                size_t q = s.find(',', p);
                if (q == std::string::npos) q = s.size();
                sizes.push_back(uint32_t(num(s.substr(p, q - p).c_str(), "--sizes")));
                p = q + 1;
            }
        } else if (a == "--ops") {
            ops.clear();
            std::string s = val();
            for (size_t p = 0; p <= s.size();) {
                size_t q = s.find(',', p);
                if (q == std::string::npos) q = s.size();
                std::string o = s.substr(p, q - p);
                if (o != "read" && o != "sabre" && o != "sabre-nospec")
                    usage("--ops: read, sabre, sabre-nospec");
                ops.push_back(o);
                p = q + 1;
            }
        } else if (a == "--threads") {
            threads = uint32_t(num(val(), "--threads"));
        } else if (a == "--window") {
            window = uint32_t(num(val(), "--window"));
        } else if (a == "--think-ns") {
            char *end;
            const char *s = val();
            think = std::strtod(s, &end);
            if (end == s || *end || !(think >= 0 && think < 1e9)) usage("--think-ns: 0..1e9");
        } else if (a == "--abort-frac") {
            char *end;
            const char *s = val();
            abort_frac = std::strtod(s, &end);
            if (end == s || *end || !(abort_frac >= 0 && abort_frac <= 0.99)) usage("--abort-frac: 0..0.99");
        } else if (a == "--llc") {
            llc = true;
        } else if (a == "--set") {
            set_prop(t, val());
        } else {
            usage(("unknown option " + a).c_str());
        }
    }
    for (uint32_t s : sizes)
        if (s < 1 || s > RMC_SABRE_MAX) usage("--sizes: 1..65536");
    if (cmd == "latency") {
        std::printf("op,size,llc,latency_ns\n");
        for (uint32_t s : sizes)
            for (auto &o : ops) {
                double ns;
                if (o == "read") {
                    ns = model_read_ns(t, 0, s, false, llc);
                } else {
                    SabreTrace tr;
                    tr.nblocks = (s + RMC_BLOCK_SIZE - 1) / RMC_BLOCK_SIZE;
                    tr.spec = o == "sabre";
                    tr.llc = llc;
                    ns = model_sabre_ns(t, model_r2p2_sabre_ns(t, tr), false);
                }
                std::printf("%s,%u,%d,%.1f\n", o.c_str(), s, llc ? 1 : 0, ns);
            }
        return 0;
    }
    std::printf(
        "op,size,llc,threads,window,think_ns,gbps,mops,mean_ns,unloaded_ns,util_r2p2,util_att,util_link,"
        "util_rgp,util_rcp,att_stalls,bound\n");
    for (uint32_t s : sizes)
        for (auto &o : ops) {
            LoadMix m;
            m.op = o == "read" ? RMC_OP_READ : RMC_OP_SABRE;
            m.spec = o != "sabre-nospec";
            m.llc = llc;
            m.size = s;
            m.threads = threads;
            m.window = window;
            m.think_ns = think;
            m.abort_frac = m.op == RMC_OP_SABRE ? abort_frac : 0.0; // reads do not abort
            LoadResult r = model_load(t, m);
            if (!r.ok) {
                std::fprintf(stderr, "rmc-model: %s %u: %s\n", o.c_str(), s, r.error);
                return 1;
            }
            std::printf("%s,%u,%d,%u,%u,%.1f,%.3f,%.3f,%.1f,%.1f,%.3f,%.3f,%.3f,%.3f,%.3f,%llu,%s\n",
                        o.c_str(), s, llc ? 1 : 0, threads, window, think, r.gbps, r.mops, r.mean_ns,
                        r.unloaded_ns, r.util_r2p2, r.util_att, r.util_link, r.util_rgp, r.util_rcp,
                        (unsigned long long)r.att_stalls, r.bound.c_str());
        }
    return 0;
}
