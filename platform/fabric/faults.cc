// SPDX-License-Identifier: MIT
// Fault rules of the bridge (see faults.h and docs/fabric.md, "Fault rules").
#include "faults.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace rackemu::fabric {

namespace {

struct Name {
    const char *name;
    uint32_t bit;
};

// Services a rule may name (svc=); "rackemu" is every service but Ethernet.
const Name kSvcs[] = {
    {"eth", 1u << RKF_SVC_ETH},        {"mbox", 1u << RKF_SVC_UNIMEM_MBOX},
    {"echo", 1u << RKF_SVC_ECHO},      {"mem", 1u << RKF_SVC_MEM},
    {"rmc", 1u << RKF_SVC_RMC},        {"bridge", 1u << RKF_SVC_BRIDGE},
    {"rackemu", ~(1u << RKF_SVC_ETH)}, {"all", ~0u},
};
const Name kKinds[] = {
    {"arp", 1u << int(EthKind::Arp)},     {"ipv4", 1u << int(EthKind::Ipv4)},
    {"ipv6", 1u << int(EthKind::Ipv6)},   {"roce", 1u << int(EthKind::RoceV2)},
    {"other", 1u << int(EthKind::Other)}, {"ip", (1u << int(EthKind::Ipv4)) | (1u << int(EthKind::Ipv6))},
};

bool parse_u64(const std::string &v, uint64_t max, uint64_t &out)
{
    if (v.empty() || v[0] == '-' || v[0] == '+') return false;
    errno = 0;
    char *end = nullptr;
    const unsigned long long x = strtoull(v.c_str(), &end, 10);
    if (errno || *end || x > max) return false;
    out = x;
    return true;
}

bool parse_double(const std::string &v, double &out)
{
    if (v.empty()) return false;
    errno = 0;
    char *end = nullptr;
    const double x = strtod(v.c_str(), &end);
    if (errno || *end || !(x >= 0.0 && x <= 1.0)) return false;
    out = x;
    return true;
}

// "0,3,5" -> a bitmask of node ids.
bool parse_nodes(const std::string &v, uint64_t &mask)
{
    mask = 0;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        uint64_t n;
        if (!parse_u64(item, RKF_MAX_NODES - 1, n)) return false;
        mask |= 1ull << n;
    }
    return mask != 0 && v.back() != ',';
}

bool parse_names(const std::string &v, const Name *names, size_t count, uint32_t &mask)
{
    mask = 0;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const Name *n = std::find_if(names, names + count, [&](const Name &x) { return item == x.name; });
        if (n == names + count) return false;
        mask |= n->bit;
    }
    return mask != 0 && v.back() != ',';
}

std::string name_list(const Name *names, size_t count)
{
    std::string s;
    for (size_t i = 0; i < count; i++)
        s += std::string(i ? ", " : "") + names[i].name;
    return s;
}

uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

} // namespace

const char *FaultEngine::help()
{
    return "ACTION [MATCH...] [PARAM...]\n"
           "actions: drop, delay, duplicate, reorder, corrupt, down\n"
           "match:   src=LIST dst=LIST node=LIST (either end) between=A,B (both directions)\n"
           "         svc=eth,mbox,echo,mem,rmc,bridge,rackemu,all  kind=roce,ipv4,ipv6,ip,arp,other (Ethernet)\n"
           "params:  prob=P (0..1, default 1) or every=N; limit=N (stop after N hits); seed=S\n"
           "         delay: us=D [jitter=J]; reorder: hold_us=H (default 1000); corrupt: bits=N (1..64)\n"
           "         down: node=LIST or between=A,B (no prob: every matching frame is lost)\n"
           "examples: drop prob=0.01 svc=eth kind=roce | delay us=200 src=0 | down between=0,1";
}

uint64_t FaultEngine::next_rand(uint64_t &s)
{
    // xorshift64*: small, fast, and the same on every platform (replays).
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
}

unsigned FaultEngine::add(const std::string &spec, std::string &err)
{
    std::stringstream ss(spec);
    std::string word;
    Rule r;
    if (!(ss >> word)) {
        err = "empty fault rule; expected " + std::string(help());
        return 0;
    }
    static const std::pair<const char *, Action> actions[] = {
        {"drop", Action::Drop},       {"delay", Action::Delay},     {"duplicate", Action::Duplicate},
        {"reorder", Action::Reorder}, {"corrupt", Action::Corrupt}, {"down", Action::Down},
    };
    const auto *a =
        std::find_if(std::begin(actions), std::end(actions), [&](auto &x) { return word == x.first; });
    if (a == std::end(actions)) {
        err = "unknown fault action '" + word + "' (one of drop, delay, duplicate, reorder, corrupt, down)";
        return 0;
    }
    r.action = a->second;
    std::string norm = word;
    bool have_prob = false, have_every = false, have_us = false, have_seed = false, have_where = false;
    r.max_hold_ns = 1000000;
    std::vector<std::string> keys; // given so far: a second value would silently replace the first
    while (ss >> word) {
        const size_t eq = word.find('=');
        if (eq == std::string::npos || eq == 0) {
            err = "'" + word + "' is not KEY=VALUE; rule syntax: " + help();
            return 0;
        }
        const std::string k = word.substr(0, eq), v = word.substr(eq + 1);
        if (std::find(keys.begin(), keys.end(), k) != keys.end()) {
            err = "'" + k + "' is given twice; give each key once";
            return 0;
        }
        keys.push_back(k);
        uint64_t u = 0;
        bool ok = true;
        std::string expect;
        if (k == "src" || k == "dst" || k == "node") {
            uint64_t m;
            ok = parse_nodes(v, m);
            expect = "a comma-separated list of node ids 0..63";
            (k == "src" ? r.src : k == "dst" ? r.dst : r.node) = m;
            have_where = true;
        } else if (k == "between") {
            uint64_t x = 0, y = 0;
            const size_t c = v.find(',');
            ok = c != std::string::npos && parse_u64(v.substr(0, c), RKF_MAX_NODES - 1, x) &&
                 parse_u64(v.substr(c + 1), RKF_MAX_NODES - 1, y) && x != y;
            expect = "two different node ids A,B";
            r.between_a = int(x);
            r.between_b = int(y);
            have_where = true;
        } else if (k == "svc") {
            ok = parse_names(v, kSvcs, std::size(kSvcs), r.svcs);
            expect = "a comma-separated list of " + name_list(kSvcs, std::size(kSvcs));
        } else if (k == "kind") {
            ok = parse_names(v, kKinds, std::size(kKinds), r.kinds);
            expect = "a comma-separated list of " + name_list(kKinds, std::size(kKinds));
        } else if (k == "prob" && r.action != Action::Down) {
            ok = parse_double(v, r.prob);
            expect = "a probability between 0 and 1";
            have_prob = true;
        } else if (k == "every" && r.action != Action::Down) {
            ok = parse_u64(v, UINT32_MAX, u) && u >= 1;
            expect = "an integer >= 1";
            r.every = u;
            have_every = true;
        } else if (k == "limit") {
            ok = parse_u64(v, UINT64_MAX / 2, u) && u >= 1;
            expect = "an integer >= 1";
            r.limit = u;
        } else if (k == "seed") {
            ok = parse_u64(v, UINT64_MAX, u);
            expect = "an unsigned integer";
            r.seed = u;
            have_seed = true;
        } else if (k == "us" && r.action == Action::Delay) {
            ok = parse_u64(v, 10000000, u);
            expect = "microseconds, 0..10000000";
            r.delay_ns = u * 1000;
            have_us = true;
        } else if (k == "jitter" && r.action == Action::Delay) {
            ok = parse_u64(v, 10000000, u);
            expect = "microseconds, 0..10000000";
            r.jitter_ns = u * 1000;
        } else if (k == "hold_us" && r.action == Action::Reorder) {
            ok = parse_u64(v, 10000000, u) && u >= 1;
            expect = "microseconds, 1..10000000";
            r.max_hold_ns = u * 1000;
        } else if (k == "bits" && r.action == Action::Corrupt) {
            ok = parse_u64(v, 64, u) && u >= 1;
            expect = "1..64";
            r.bits = unsigned(u);
        } else {
            err = "'" + k + "' is not a parameter of '" + a->first + "'; rule syntax: " + help();
            return 0;
        }
        if (!ok) {
            err = "bad value '" + v + "' for " + k + ": expected " + expect;
            return 0;
        }
        norm += " " + word;
    }
    if (have_prob && have_every) {
        err = "give prob= or every=, not both";
        return 0;
    }
    if (r.action == Action::Delay && !have_us) {
        err = "delay needs us=MICROSECONDS";
        return 0;
    }
    if (r.action == Action::Down && !have_where) {
        err = "down needs node=LIST or between=A,B (or src=/dst=): which link is down?";
        return 0;
    }
    r.id = next_id_++;
    if (!have_seed) {
        r.seed = seed_ + r.id;
        norm += " seed=" + std::to_string(r.seed);
    }
    r.rng = splitmix(r.seed) | 1; // xorshift needs a non-zero state
    r.spec = norm;
    rules_.push_back(r);
    return r.id;
}

bool FaultEngine::del(unsigned id)
{
    const auto it = std::find_if(rules_.begin(), rules_.end(), [&](const Rule &r) { return r.id == id; });
    if (it == rules_.end()) return false;
    rules_.erase(it);
    return true;
}

void FaultEngine::clear()
{
    rules_.clear();
}

std::string FaultEngine::list_json() const
{
    std::string s =
        "{\"seed\":" + std::to_string(seed_) + ",\"held\":" + std::to_string(held_.size()) + ",\"rules\":[";
    for (size_t i = 0; i < rules_.size(); i++) {
        const Rule &r = rules_[i];
        // The spec holds only names, digits and ".,=_ ": nothing to escape.
        s += std::string(i ? "," : "") + "{\"id\":" + std::to_string(r.id) + ",\"rule\":\"" + r.spec +
             "\",\"matched\":" + std::to_string(r.matched) + ",\"hits\":" + std::to_string(r.hits) + "}";
    }
    return s + "]}";
}

bool FaultEngine::matches(const Rule &r, const FaultPacket &p) const
{
    if (!(r.src >> p.src & 1) || !(r.dst >> p.dst & 1)) return false;
    if (r.node && !((r.node >> p.src & 1) || (r.node >> p.dst & 1))) return false;
    if (r.between_a >= 0 &&
        !((p.src == r.between_a && p.dst == r.between_b) || (p.src == r.between_b && p.dst == r.between_a))) {
        return false;
    }
    const unsigned svc = p.eth ? RKF_SVC_ETH : p.bytes.size() >= sizeof(rkf_frame_hdr) ? p.bytes[5] : 0;
    if (!(r.svcs >> svc & 1)) return false;
    if (r.kinds != ~0u && (!p.eth || !(r.kinds >> int(p.kind) & 1))) return false;
    return true;
}

bool FaultEngine::touches_service_frames(unsigned src, unsigned dst) const
{
    FaultPacket p;
    p.src = uint16_t(src);
    p.dst = uint16_t(dst);
    p.bytes.resize(sizeof(rkf_frame_hdr));
    for (const Rule &r : rules_) {
        // A rule matches service frames when it names a service other than Ethernet and no
        // Ethernet kind; which one does not matter: any of them leaves the pair on the bridge.
        for (unsigned svc = 0; svc < RKF_SVC_COUNT; svc++) {
            if (svc == RKF_SVC_ETH) continue;
            p.bytes[5] = uint8_t(svc);
            if (matches(r, p)) return true;
        }
    }
    return false;
}

bool FaultEngine::touches_eth_frames(unsigned node) const
{
    FaultPacket p;
    p.eth = true;
    for (const Rule &r : rules_) {
        Rule any = r;
        any.kinds = ~0u; // whatever kind it names, some RoCE or IP frame could be one
        for (unsigned peer = 0; peer < RKF_MAX_NODES; peer++) {
            for (const bool out : {true, false}) {
                p.src = uint16_t(out ? node : peer);
                p.dst = uint16_t(out ? peer : node);
                if (matches(any, p)) return true;
            }
        }
    }
    return false;
}

bool FaultEngine::fires(Rule &r)
{
    if (r.limit && r.hits >= r.limit) return false;
    bool hit;
    if (r.every) {
        hit = r.matched % r.every == 0;
    } else {
        hit = r.prob >= 1.0 || double(next_rand(r.rng) >> 11) * 0x1.0p-53 < r.prob;
    }
    if (hit) r.hits++;
    return hit;
}

bool FaultEngine::apply(FaultPacket &&p, uint64_t now, std::vector<FaultPacket> &out)
{
    uint64_t delay = 0;
    bool dup = false;
    const Rule *reorder = nullptr;
    const size_t hdr = p.eth ? 0 : sizeof(rkf_frame_hdr);
    for (Rule &r : rules_) {
        if (!matches(r, p)) continue;
        if (r.action == Action::Corrupt && p.bytes.size() <= hdr) continue; // nothing to corrupt
        r.matched++;
        if (r.action == Action::Down) {
            r.hits++;
            return true;
        }
        if (!fires(r)) continue;
        switch (r.action) {
        case Action::Drop:
            return true;
        case Action::Delay:
            delay += r.delay_ns + (r.jitter_ns ? next_rand(r.rng) % (r.jitter_ns + 1) : 0);
            break;
        case Action::Duplicate:
            dup = true;
            break;
        case Action::Reorder:
            reorder = &r;
            break;
        case Action::Corrupt:
            for (unsigned b = 0; b < r.bits; b++) {
                const uint64_t bit = next_rand(r.rng) % ((p.bytes.size() - hdr) * 8);
                p.bytes[hdr + bit / 8] ^= uint8_t(1u << (bit % 8));
            }
            break;
        case Action::Down:
            break;
        }
    }
    const unsigned copies = dup ? 2 : 1;
    if (reorder) {
        // Held until the next packet between the same two nodes has gone, or hold_us.
        for (unsigned c = 0; c < copies; c++) {
            held_.push_back(Held{now + delay + reorder->max_hold_ns, order_++, reorder->id,
                                 c + 1 < copies ? p : std::move(p)});
        }
        return false;
    }
    const uint16_t src = p.src, dst = p.dst;
    for (unsigned c = 0; c < copies; c++) {
        if (delay) {
            held_.push_back(Held{now + delay, order_++, 0, c + 1 < copies ? p : std::move(p)});
        } else {
            out.push_back(c + 1 < copies ? p : std::move(p));
        }
    }
    if (!delay) {
        // Packets held back by a reorder rule for this pair go right after this one.
        for (size_t i = 0; i < held_.size();) {
            if (held_[i].reorder_rule && held_[i].p.src == src && held_[i].p.dst == dst) {
                out.push_back(std::move(held_[i].p));
                held_.erase(held_.begin() + long(i));
            } else {
                i++;
            }
        }
    }
    return false;
}

void FaultEngine::due(uint64_t now, std::vector<FaultPacket> &out)
{
    if (held_.empty()) return;
    std::vector<Held> ready;
    for (size_t i = 0; i < held_.size();) {
        if (held_[i].release_ns <= now) {
            ready.push_back(std::move(held_[i]));
            held_.erase(held_.begin() + long(i));
        } else {
            i++;
        }
    }
    std::sort(ready.begin(), ready.end(), [](const Held &a, const Held &b) {
        return a.release_ns != b.release_ns ? a.release_ns < b.release_ns : a.order < b.order;
    });
    for (Held &h : ready)
        out.push_back(std::move(h.p));
}

uint64_t FaultEngine::next_due() const
{
    uint64_t t = UINT64_MAX;
    for (const Held &h : held_)
        t = std::min(t, h.release_ns);
    return t;
}

size_t FaultEngine::forget(unsigned node)
{
    const size_t before = held_.size();
    held_.erase(std::remove_if(held_.begin(), held_.end(), [&](const Held &h) { return h.p.dst == node; }),
                held_.end());
    return before - held_.size();
}

} // namespace rackemu::fabric
