// SPDX-License-Identifier: MIT
//
// Unimem global address space (GAS) window device core (seed 004 sec. 1 and sec. 3.1.6).
//
// A node's CPU reaches every node's memory at GAS_WINDOW_BASE + global address, the global
// address carrying the owner's node id in bits [39:34]. The core decodes a window access into
// (node, node-local address), hands it to the host's memory transport (the fabric's one-sided
// memory service, or this node's own RAM), and turns a failed access into a bus error. A
// read-only control page identifies the window and exposes the counters.
//
// Thread safety: window accesses come from any vCPU thread, without the big lock, and may block
// in the transport; the core holds no lock while they do (counters are atomics).
//
// Caveat: in hardware the window is uncached and the interconnect carries each access as one
// transaction; here each access is one synchronous request to the owner, served by its fabric
// thread, so a load costs a fabric round trip (docs/unimem.md gives the measured figures).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "rackemu/unimem_regs.h"

namespace rackemu::unimem {

enum class GasAccess { Ok, DecodeError, Unreachable };

struct GasHost {
    // Move `len` bytes between `buf` and node `node`'s physical address `local` (may block).
    std::function<GasAccess(bool write, unsigned node, uint64_t local, void *buf, unsigned len)> access;
    // Counters of the memory service that serves other nodes (GAS_CTRL_SERVED_*, TIMEOUTS).
    std::function<uint64_t(unsigned ctrl_offset)> service_counter;
    std::function<void(const std::string &msg)> guest_error;
};

struct GasCounters {
    uint64_t loads = 0, stores = 0, local = 0, bus_errors = 0, bad_access = 0;
};

class Gas {
public:
    enum class Result { Ok, BusError };

    Gas(GasHost host, unsigned node_id, unsigned node_count);

    uint64_t window_size() const { return uint64_t(node_count_) * GAS_WINDOW_NODE_SIZE; }
    // `offset` is relative to GAS_WINDOW_BASE, i.e. the global address.
    Result window_read(uint64_t offset, unsigned size, uint64_t &value);
    Result window_write(uint64_t offset, uint64_t value, unsigned size);

    // Control page: 64-bit read-only registers; writes are refused and logged.
    uint64_t ctrl_read(uint64_t offset, unsigned size);
    void ctrl_write(uint64_t offset, uint64_t value, unsigned size);

    GasCounters counters() const;

private:
    Result access(bool write, uint64_t offset, unsigned size, uint64_t &value);
    void guest_error(const std::string &msg);

    GasHost host_;
    const unsigned node_id_, node_count_;
    std::atomic<uint64_t> loads_{0}, stores_{0}, local_{0}, bus_errors_{0}, bad_access_{0};
};

} // namespace rackemu::unimem
