// SPDX-License-Identifier: MIT
//
// The power cut's record and the crash states it allows (docs/pmem.md "The cut and its crash
// states"). QEMU-independent, and independent of the live model (pmem.h): a Cut is a copy of
// what was in flight at one instant, so a crash explorer can take one per persistence-relevant
// point and produce the images afterwards, host-side, without rebooting a node per state.
//
//   Pmem::cut()      ──> Cut: the durable image is the base; each line written but not durable
//                         is a candidate with its old (durable) and new (RAM) 64 bytes and the
//                         bytes its writers wrote; the NIC buffer's unplaced entries are lost.
//   CrashStates(cut, policy) ──> the states, one subset of the candidates each: the surviving
//                         image is the durable image with the chosen lines' new bytes.
//   Cut::for_each_diff / apply / revert ──> a state's image as a diff against the durable
//                         image, or applied to (and taken back from) the caller's copy of it:
//                         no copy of the whole region per state.
//
// Granularity: a candidate line is either wholly old or wholly new in every state, so an
// aligned 8-byte word (Erda sec. 2.2: NVM's failure-atomic unit) is never torn, and neither is
// any other part of a line. Caveat: real ADR/eADR platforms promise only the 8-byte word; a
// line half written back at the cut is not explored (docs/pmem.md "What differs").
//
// Policies (Chipmunk, LeBlanc et al., EuroSys 2023, explores subsets of the in-flight writes up
// to size two): None (the durable image alone), All (every candidate kept), UpToK (every
// subset of at most k candidates, by size then lexicographically), Random (count subsets, each
// candidate kept with probability 1/2, from a seeded generator). Pruning: a state whose image
// equals one already produced is counted as pruned and not returned. Two subsets give the same
// image exactly when they agree on the candidates whose new bytes differ from their old ones
// (a line rewritten with its old contents, or a placement of identical data, changes nothing),
// so the check needs no image comparison.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "rackemu/pmem_regs.h"
#include "state.h"

namespace rackemu::pmem {

// One line written but not durable at the cut.
struct CutLine {
    uint64_t line = 0;                 // index in the region (offset / PMEM_LINE_SIZE)
    uint64_t written = 0;              // bit i: byte i written (placed by the RNIC or changed by the CPU)
    Bytes<PMEM_LINE_SIZE> old_bytes{}; // the durable image's
    Bytes<PMEM_LINE_SIZE> new_bytes{}; // RAM's (the caches' view) at the cut
    bool changes() const { return old_bytes != new_bytes; }
};

struct Cut {
    uint64_t id = 0; // the model's cut number (Pmem::finish_cut checks it)
    uint64_t base = 0, size = 0;
    std::vector<CutLine> lines; // by line index
    uint64_t nic_lost_entries = 0, nic_lost_bytes = 0;
};

// A state: the candidates kept (indices into Cut::lines, ascending).
struct CrashState {
    uint64_t index = 0; // its place in the enumeration (pruned states included)
    std::vector<uint32_t> chosen;
};

enum class Pick : uint8_t { None, All, UpToK, Random };

struct CutPolicy {
    Pick pick = Pick::UpToK;
    unsigned k = 2;      // UpToK: largest subset
    uint64_t count = 16; // Random: subsets drawn
    uint64_t seed = 1;   // Random
};

// The diff of `s` against the durable image: f(offset in the region, const uint8_t *64 bytes)
// for each kept line whose bytes change.
template <class F> void for_each_diff(const Cut &c, const CrashState &s, F &&f)
{
    for (uint32_t i : s.chosen) {
        const CutLine &l = c.lines[i];
        if (l.changes()) f(l.line * PMEM_LINE_SIZE, l.new_bytes.data());
    }
}
// Apply a state to `image` (a copy of the durable image, Cut::size bytes), and take it back.
void apply(const Cut &c, const CrashState &s, uint8_t *image);
void revert(const Cut &c, const CrashState &s, uint8_t *image);
// Bytes and lines a state loses: the unplaced NIC bytes plus the written bytes of the lines
// it does not keep.
uint64_t lost_bytes(const Cut &c, const CrashState &s);
// false when an index is out of range or not strictly ascending.
bool valid(const Cut &c, const CrashState &s);

// The states of one cut under one policy, each at most once per image.
class CrashStates {
public:
    CrashStates(const Cut &cut, const CutPolicy &policy);

    // The next state whose image was not produced before; false when there is none.
    bool next(CrashState &out);
    uint64_t explored() const { return explored_; }
    uint64_t pruned() const { return pruned_; }
    // Subsets the policy visits in all (explored + pruned at the end), saturating at UINT64_MAX.
    uint64_t total() const;
    // 1 + n + n(n-1)/2 + ... up to subsets of size k, saturating at UINT64_MAX.
    static uint64_t subsets_up_to(uint64_t n, unsigned k);

private:
    bool generate(CrashState &out); // the next subset, pruned or not
    bool duplicate(const CrashState &s);

    const Cut &cut_;
    CutPolicy policy_;
    uint64_t visited_ = 0, explored_ = 0, pruned_ = 0;
    unsigned size_ = 0;          // UpToK: current subset size
    std::vector<uint32_t> comb_; // UpToK: current combination
    bool started_ = false, done_ = false;
    uint64_t rng_;                         // Random
    std::set<std::vector<uint32_t>> seen_; // Random: kept candidates that change bytes
};

// One state for a single power cut: None, All, or one Random subset from `seed` (UpToK: None).
CrashState pick_one(const Cut &c, Pick pick, uint64_t seed);

// splitmix64: the model's one seeded generator (eviction victims, random subsets).
inline uint64_t splitmix64(uint64_t &s)
{
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

} // namespace rackemu::pmem
