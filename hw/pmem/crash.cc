// SPDX-License-Identifier: MIT
// The crash states of a power cut (crash.h).
#include "crash.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace rackemu::pmem {

void apply(const Cut &c, const CrashState &s, uint8_t *image)
{
    for_each_diff(c, s, [&](uint64_t off, const uint8_t *b) { memcpy(image + off, b, PMEM_LINE_SIZE); });
}

void revert(const Cut &c, const CrashState &s, uint8_t *image)
{
    for (uint32_t i : s.chosen) {
        const CutLine &l = c.lines[i];
        if (l.changes()) memcpy(image + l.line * PMEM_LINE_SIZE, l.old_bytes.data(), PMEM_LINE_SIZE);
    }
}

bool valid(const Cut &c, const CrashState &s)
{
    for (size_t j = 0; j < s.chosen.size(); j++) {
        if (s.chosen[j] >= c.lines.size()) return false;
        if (j && s.chosen[j] <= s.chosen[j - 1]) return false;
    }
    return true;
}

uint64_t lost_bytes(const Cut &c, const CrashState &s)
{
    uint64_t lost = c.nic_lost_bytes;
    size_t j = 0;
    for (uint32_t i = 0; i < c.lines.size(); i++) {
        if (j < s.chosen.size() && s.chosen[j] == i) {
            j++;
            continue;
        }
        lost += uint64_t(std::popcount(c.lines[i].written));
    }
    return lost;
}

uint64_t CrashStates::subsets_up_to(uint64_t n, unsigned k)
{
    // sum over s <= k of C(n, s); C(n, s) = C(n, s-1) * (n - s + 1) / s, exact in 128 bits
    unsigned __int128 total = 0, c = 1;
    for (unsigned s = 0; s <= k && s <= n; s++) {
        if (s) c = c * (n - s + 1) / s;
        total += c;
        if (total >= UINT64_MAX || c >= UINT64_MAX) return UINT64_MAX;
    }
    return uint64_t(total);
}

CrashStates::CrashStates(const Cut &cut, const CutPolicy &policy)
    : cut_(cut), policy_(policy), rng_(policy.seed)
{
}

uint64_t CrashStates::total() const
{
    switch (policy_.pick) {
    case Pick::None:
    case Pick::All:
        return 1;
    case Pick::UpToK:
        return subsets_up_to(cut_.lines.size(), policy_.k);
    case Pick::Random:
        return policy_.count;
    }
    return 0;
}

bool CrashStates::generate(CrashState &out)
{
    if (done_) return false;
    const uint32_t n = uint32_t(cut_.lines.size());
    out.chosen.clear();
    switch (policy_.pick) {
    case Pick::None:
    case Pick::All:
        if (policy_.pick == Pick::All) {
            for (uint32_t i = 0; i < n; i++)
                out.chosen.push_back(i);
        }
        done_ = true;
        break;
    case Pick::Random:
        if (visited_ >= policy_.count) {
            done_ = true;
            return false;
        }
        for (uint32_t i = 0; i < n; i += 64) {
            const uint64_t bits = splitmix64(rng_);
            for (uint32_t b = 0; b < 64 && i + b < n; b++) {
                if (bits >> b & 1) out.chosen.push_back(i + b);
            }
        }
        break;
    case Pick::UpToK:
        if (!started_) {
            started_ = true; // the empty subset
        } else {
            // next combination of size size_ over 0..n-1; past the last, the first of size_ + 1
            int j = int(size_) - 1;
            while (j >= 0 && comb_[j] == n - size_ + unsigned(j))
                j--;
            if (j >= 0) {
                comb_[j]++;
                for (unsigned t = unsigned(j) + 1; t < size_; t++)
                    comb_[t] = comb_[t - 1] + 1;
            } else {
                size_++;
                if (size_ > policy_.k || size_ > n) {
                    done_ = true;
                    return false;
                }
                comb_.resize(size_);
                for (unsigned t = 0; t < size_; t++)
                    comb_[t] = t;
            }
        }
        out.chosen = comb_;
        break;
    }
    out.index = visited_++;
    return true;
}

bool CrashStates::duplicate(const CrashState &s)
{
    switch (policy_.pick) {
    case Pick::None:
    case Pick::All:
        return false;
    case Pick::UpToK:
        // Enumerated by size: without its lines that change nothing, the subset is a smaller one
        // that was produced before.
        return std::any_of(s.chosen.begin(), s.chosen.end(),
                           [&](uint32_t i) { return !cut_.lines[i].changes(); });
    case Pick::Random: {
        std::vector<uint32_t> eff;
        for (uint32_t i : s.chosen) {
            if (cut_.lines[i].changes()) eff.push_back(i);
        }
        return !seen_.insert(std::move(eff)).second;
    }
    }
    return false;
}

bool CrashStates::next(CrashState &out)
{
    while (generate(out)) {
        if (!duplicate(out)) {
            explored_++;
            return true;
        }
        pruned_++;
    }
    return false;
}

CrashState pick_one(const Cut &c, Pick pick, uint64_t seed)
{
    CrashState s;
    if (pick == Pick::UpToK) pick = Pick::None;
    CrashStates it(c, CutPolicy{pick, 0, 1, seed});
    // the first state of None, All or Random is never pruned
    it.next(s);
    return s;
}

} // namespace rackemu::pmem
