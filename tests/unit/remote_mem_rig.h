// Shared pieces of the remote-memory unit tests (test_remote_mem.cc, test_remote_mem_direct.cc):
// the address layout of the in-process nodes, a data pattern that tells "not copied" from
// "overwritten", and what every test node keeps of its RkRemoteMem (guest-error lines, counters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rk_remote_mem.h"

namespace rackemu::fabric::test {

constexpr uint64_t kRmemBase = 0x40000000; // node-local physical address of RAM
constexpr uint64_t kRmemRam = 1 << 20;     // bytes of RAM per test node

// n bytes that differ for every seed and repeat no byte pattern within 64 KiB.
inline std::vector<unsigned char> rmem_pattern(size_t n, unsigned seed)
{
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = (unsigned char)((i * 131 + seed * 17 + 5) ^ (i >> 8));
    return v;
}

// The RkRemoteMem side of a test node: its guest-error log (pass `&RmemObserver::log, this` to
// rk_rmem_new) and its counters.
struct RmemObserver {
    RkRemoteMem *mem = nullptr;
    std::vector<std::string> logs;
    static void log(void *o, const char *m) { static_cast<RmemObserver *>(o)->logs.push_back(m); }
    rk_rmem_stats stats() const
    {
        rk_rmem_stats s;
        rk_rmem_get_stats(mem, &s);
        return s;
    }
};

} // namespace rackemu::fabric::test
