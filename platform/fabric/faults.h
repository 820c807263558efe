// SPDX-License-Identifier: MIT
//
// Fault rules of the bridge (docs/fabric.md, "Fault rules"): drop, delay, duplicate, reorder,
// corrupt and link down, for Ethernet frames and for rackemu's own service frames, matched by
// source and destination node, service and (for Ethernet) what the frame carries. Each rule has
// its own pseudo-random generator seeded from the rule's seed, so the same sequence of frames
// meets the same faults again (a failing test replays). Rules are added, listed and removed at
// run time through the bridge's control socket (`fault add|list|del`), or given at start.
//
// The engine knows nothing of rings or ports: the bridge hands it one packet per egress copy
// (a frame on its way from node src to node dst, already validated and switched), and gets back
// the copies to deliver now; held copies (delay, reorder) come back from due() once their time
// has come. Not thread-safe: the bridge calls it under its lock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eth_frag.h"

namespace rackemu::fabric {

struct FaultPacket {
    uint16_t src = 0, dst = 0;
    uint64_t dst_gen = 0; // the destination's incarnation when the packet was switched
    bool eth = false;     // an Ethernet frame (bytes = the frame), else a rackemu frame (header + payload)
    EthKind kind = EthKind::Other;
    std::vector<unsigned char> bytes;
};

class FaultEngine {
public:
    enum class Action { Drop, Delay, Duplicate, Reorder, Corrupt, Down };
    struct Rule {
        unsigned id = 0;
        Action action = Action::Drop;
        std::string spec; // as given, normalised (what `fault list` shows)
        // Match: all given conditions hold. Node sets are bitmasks over node ids.
        uint64_t src = ~0ull, dst = ~0ull; // src=, dst=
        uint64_t node = 0;                 // node=: src or dst in the set (0: not given)
        int between_a = -1, between_b = -1;
        uint32_t svcs = ~0u;  // bit per RKF_SVC_*: svc=
        uint32_t kinds = ~0u; // bit per EthKind (Ethernet frames only): kind=
        // Parameters.
        double prob = 1.0;        // prob=: fraction of matching packets hit
        uint64_t every = 0;       // every=N: every Nth matching packet (instead of prob)
        uint64_t delay_ns = 0;    // delay us=
        uint64_t jitter_ns = 0;   // delay jitter=
        uint64_t max_hold_ns = 0; // reorder: longest a packet is held waiting for the next one
        unsigned bits = 1;        // corrupt: bit flips per hit packet
        uint64_t limit = 0;       // limit=N: stop acting after N hits (0: no limit)
        uint64_t seed = 0;
        // Counters.
        uint64_t matched = 0, hits = 0;
        // State.
        uint64_t rng = 0;
    };

    explicit FaultEngine(uint64_t seed = 1) : seed_(seed) {}

    // Parse and add a rule ("drop prob=0.01 svc=eth"); returns its id, or 0 with `err` set.
    unsigned add(const std::string &spec, std::string &err);
    bool del(unsigned id);
    void clear();
    bool empty() const { return rules_.empty() && held_.empty(); }
    const std::vector<Rule> &rules() const { return rules_; }
    std::string list_json() const;
    uint64_t seed() const { return seed_; }

    // One packet on its way: appends to `out` the copies to deliver now (none when dropped).
    // Returns true if the packet itself was dropped (a rule dropped it or a link is down).
    bool apply(FaultPacket &&p, uint64_t now_ns, std::vector<FaultPacket> &out);
    // Held packets whose time has come, in release order.
    void due(uint64_t now_ns, std::vector<FaultPacket> &out);
    // When the next held packet is due (UINT64_MAX: none held).
    uint64_t next_due() const;
    size_t held() const { return held_.size(); }
    // Could a rule match a rackemu service frame (not Ethernet) from `src` to `dst`? (The
    // bridge keeps such a pair of nodes off their direct ring: docs/fabric.md.)
    bool touches_service_frames(unsigned src, unsigned dst) const;
    // Could a rule match an Ethernet frame (of any kind) to or from `node`? (The bridge then
    // keeps that node's RNIC off its direct path: rkf_live_table.eth_watched, docs/rnic.md.)
    bool touches_eth_frames(unsigned node) const;
    // Forget held packets to or from `node` (it disconnected); returns how many.
    size_t forget(unsigned node);

    static const char *help();

private:
    struct Held {
        uint64_t release_ns;
        uint64_t order;        // FIFO among equal release times
        unsigned reorder_rule; // 0, or the reorder rule waiting for the next packet of this pair
        FaultPacket p;
    };
    bool matches(const Rule &r, const FaultPacket &p) const;
    bool fires(Rule &r);
    static uint64_t next_rand(uint64_t &s);

    uint64_t seed_;
    unsigned next_id_ = 1;
    uint64_t order_ = 0;
    std::vector<Rule> rules_;
    std::vector<Held> held_; // small: a linear scan is fine
};

} // namespace rackemu::fabric
