// SPDX-License-Identifier: MIT
//
// Unimem global address space (GAS) window device core (ExaNoDe D3.6 sec. 1 and sec. 3.1.6).
//
// A node's CPU reaches every node's memory at GAS_WINDOW_BASE + global address, the global
// address carrying the owner's node id in bits [39:34]. The core checks a window access (size,
// inside the rack's window, inside one node's 16 GiB), hands it to the host as a DMA access at
// its physical address GAS_WINDOW_BASE + G (rackemu/host.h: the host routes the window to the
// owner through the fabric's one-sided memory service, this node's own window included), and
// turns a failed access into a bus error. A read-only control page (a register bank) identifies
// the window and exposes the counters (GAS_COUNTER_TABLE in rackemu/unimem_regs.h): the
// window's own, and the node's memory service's (remote memory statistics, host.rmem()).
//
// State: GasState, described once in the RK_GAS_STATE X-macro below (hw/core/state.h).
//
// Thread safety: window accesses come from any vCPU thread, without the big lock, and may block
// in the transport; the core holds no lock while they do (counters are atomics).
//
// Caveat: in hardware the window is uncached and the interconnect carries each access as one
// transaction; here each access is one synchronous request to the owner, served by its fabric
// thread, so a load costs a fabric round trip (docs/gas.md gives the measured figures).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "rackemu/host.h"
#include "rackemu/unimem_regs.h"
#include "regbank.h"
#include "state.h"

namespace rackemu::unimem {

// The window's own counters are the first rows of GAS_COUNTER_TABLE; the rest are the service's.
constexpr unsigned kGasOwnCounters = GAS_CNT_INDEX_SERVED_READS;

// Every counter of the control page (named as in GAS_COUNTER_TABLE), plus the core's count of
// wrong guest accesses (not a register).
struct GasCounters {
#define GAS_CNT_X_FIELD_(N, n, d) uint64_t n = 0;
    GAS_COUNTER_TABLE(GAS_CNT_X_FIELD_)
#undef GAS_CNT_X_FIELD_
    uint64_t bad_access = 0;
};

using GasOwnCnt = std::array<uint64_t, kGasOwnCounters>;

// The architectural state (hw/core/state.h): the window's own counter registers (GAS_CTRL_LOADS
// .. GAS_CTRL_BUS_ERRORS, in table order); node id and count identify the node it belongs to.
// The service counters (SERVED_*, TIMEOUTS, DIRECT_*) are the fabric's remote memory statistics,
// not device state.
#define RK_GAS_STATE(X) \
    X(uint32_t, node_id) \
    X(uint32_t, node_count) \
    X(GasOwnCnt, counters)
struct GasState {
    RK_STATE_FIELDS(RK_GAS_STATE)
};

class Gas {
public:
    // node id and count come from the host (clamped to 1..64 nodes).
    explicit Gas(Host host);

    uint64_t window_size() const { return uint64_t(node_count_) * GAS_WINDOW_NODE_SIZE; }
    // `offset` is relative to GAS_WINDOW_BASE, i.e. the global address. RK_OK, or the cause of
    // the bus error the access ends in: RK_DECODE_ERROR for a size other than 1-8, an address
    // outside the rack's window or across a node boundary (no traffic), else the host's answer
    // (RK_DECODE_ERROR: not RAM on the owner; RK_UNREACHABLE: owner or link down, timeout).
    Status window_read(uint64_t offset, unsigned size, uint64_t &value);
    Status window_write(uint64_t offset, uint64_t value, unsigned size);

    // The device's two regions (rk_gas_device_ops): 0 the control page (an access that is not
    // naturally aligned is refused with RK_DECODE_ERROR, as the bus did), 1 the window.
    Status ctrl_region_read(uint64_t offset, unsigned size, uint64_t *value);
    Status ctrl_region_write(uint64_t offset, uint64_t value, unsigned size);
    Status window_region_read(uint64_t offset, unsigned size, uint64_t *value)
    {
        return window_read(offset, size, *value);
    }
    Status window_region_write(uint64_t offset, uint64_t value, unsigned size)
    {
        return window_write(offset, value, size);
    }

    // Control page: 64-bit read-only registers; writes are refused and logged.
    uint64_t ctrl_read(uint64_t offset, unsigned size);
    void ctrl_write(uint64_t offset, uint64_t value, unsigned size);
    // The register's name at a control page offset ("unmapped" where none), for logs and traces.
    std::string describe(uint64_t offset) const { return bank_.describe(offset); }

    GasCounters counters() const;

    // Migration: save() is a consistent snapshot; load() refuses (false, nothing changed, the
    // field named in *why) a state of another node or rack size. No access is ever in flight
    // inside the core between two calls: a window access is synchronous on its vCPU (QEMU
    // completes it before saving). The byte-string forms are the device's save/load ops.
    GasState save() const;
    bool load(const GasState &st, std::string *why = nullptr);
    void save(StateOut &out) const { out.put(save()); }
    bool load(StateIn &in, std::string *why);

private:
    struct Ctx {};
    static std::span<const Reg<Gas, Ctx>> reg_table();
    uint64_t counter(unsigned index) const;
    Status access(bool write, uint64_t offset, unsigned size, uint64_t &value);
    void guest_error(const std::string &msg);
    void bump(unsigned index) { own_[index].fetch_add(1, std::memory_order_relaxed); }

    Host host_;
    const unsigned node_id_, node_count_;
    std::array<std::atomic<uint64_t>, kGasOwnCounters> own_{};
    std::atomic<uint64_t> bad_access_{0};
    RegBank<Gas, Ctx> bank_{reg_table()}; // every register is read-only and hooked
};

} // namespace rackemu::unimem
