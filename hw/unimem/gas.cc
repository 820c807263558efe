// SPDX-License-Identifier: MIT
// Unimem global address space window core; see gas.h and docs/gas.md.
#include "gas.h"

#include "format.h"
#include "rk_remote_mem.h"

#include <algorithm>

namespace rackemu::unimem {

// The counters of GAS_COUNTER_TABLE are the registers GAS_CTRL_* the guest's driver reads.
static_assert(GAS_CNT_LOADS == GAS_CTRL_LOADS && GAS_CNT_STORES == GAS_CTRL_STORES &&
              GAS_CNT_LOCAL == GAS_CTRL_LOCAL && GAS_CNT_BUS_ERRORS == GAS_CTRL_BUS_ERRORS &&
              GAS_CNT_SERVED_READS == GAS_CTRL_SERVED_READS &&
              GAS_CNT_SERVED_WRITES == GAS_CTRL_SERVED_WRITES &&
              GAS_CNT_SERVED_REFUSED == GAS_CTRL_SERVED_REFUSED && GAS_CNT_TIMEOUTS == GAS_CTRL_TIMEOUTS &&
              GAS_CNT_DIRECT_READS == GAS_CTRL_DIRECT_READS &&
              GAS_CNT_DIRECT_WRITES == GAS_CTRL_DIRECT_WRITES && GAS_CNT_COUNT == 10);

Gas::Gas(Host host)
    : host_(host), node_id_(host.node_id()), node_count_(std::clamp(host.node_count(), 1u, 64u))
{
}

// The control page (docs/gas.md): identification, then the counters from GAS_COUNTER_TABLE.
// Every register is 64-bit and read-only; the rest of the page is reserved (reads as zero).
std::span<const Reg<Gas, Gas::Ctx>> Gas::reg_table()
{
    using R = Reg<Gas, Ctx>;
    auto id = [](Gas &, const R &, unsigned, Ctx &) -> uint64_t { return GAS_ID_VALUE; };
    auto node_id = [](Gas &g, const R &, unsigned, Ctx &) -> uint64_t { return g.node_id_; };
    auto node_count = [](Gas &g, const R &, unsigned, Ctx &) -> uint64_t { return g.node_count_; };
    auto base = [](Gas &, const R &, unsigned, Ctx &) -> uint64_t { return GAS_WINDOW_BASE; };
    auto size = [](Gas &g, const R &, unsigned, Ctx &) { return g.window_size(); };
    auto cnt = [](Gas &g, const R &r, unsigned, Ctx &) { return g.counter((r.offset - GAS_CNT_BASE) / 8); };
    static const R table[] = {
        {"GAS_CTRL_ID", GAS_CTRL_ID, 8, RegAccess::RO, 0, 0, id},
        {"GAS_CTRL_NODE_ID", GAS_CTRL_NODE_ID, 8, RegAccess::RO, 0, 0, node_id},
        {"GAS_CTRL_NODE_COUNT", GAS_CTRL_NODE_COUNT, 8, RegAccess::RO, 0, 0, node_count},
        {"GAS_CTRL_WINDOW_BASE", GAS_CTRL_WINDOW_BASE, 8, RegAccess::RO, 0, 0, base},
        {"GAS_CTRL_WINDOW_SIZE", GAS_CTRL_WINDOW_SIZE, 8, RegAccess::RO, 0, 0, size},
#define GAS_CNT_X_ROW_(N, n, d) {"GAS_CTRL_" #N, GAS_CNT_##N, 8, RegAccess::RO, 0, 0, cnt},
        GAS_COUNTER_TABLE(GAS_CNT_X_ROW_)
#undef GAS_CNT_X_ROW_
    };
    return table;
}

uint64_t Gas::counter(unsigned index) const
{
    if (index < kGasOwnCounters) return own_[index].load(std::memory_order_relaxed);
    if (!host_.rmem()) return 0; // a node without fabric serves nobody
    rk_rmem_stats st{};
    rk_rmem_get_stats(host_.rmem(), &st);
    switch (index) {
    case GAS_CNT_INDEX_SERVED_READS:
        return st.served_reads;
    case GAS_CNT_INDEX_SERVED_WRITES:
        return st.served_writes;
    case GAS_CNT_INDEX_SERVED_REFUSED:
        return st.served_refused;
    case GAS_CNT_INDEX_TIMEOUTS:
        return st.timeouts;
    case GAS_CNT_INDEX_DIRECT_READS:
        return st.direct_reads;
    case GAS_CNT_INDEX_DIRECT_WRITES:
        return st.direct_writes;
    default:
        return 0;
    }
}

void Gas::guest_error(const std::string &msg)
{
    bad_access_++;
    host_.guest_error(msg);
}

Status Gas::access(bool write, uint64_t offset, unsigned size, uint64_t &value)
{
    bump(write ? GAS_CNT_INDEX_STORES : GAS_CNT_INDEX_LOADS);
    if (size == 0 || size > 8 || offset >= window_size() || window_size() - offset < size) {
        bump(GAS_CNT_INDEX_BUS_ERRORS);
        guest_error(std::string(write ? "store" : "load") + " of " + std::to_string(size) +
                    " bytes at window offset " + hex(offset) + " outside the " + std::to_string(node_count_) +
                    "-node window");
        return RK_DECODE_ERROR;
    }
    const unsigned node = unsigned(UNIMEM_GADDR_NODE(offset));
    const uint64_t local = UNIMEM_GADDR_LOCAL(offset);
    if (UNIMEM_GADDR_LOCAL(offset + size - 1) < local) {
        // Crosses from one node's window into the next: no single owner can serve it.
        bump(GAS_CNT_INDEX_BUS_ERRORS);
        guest_error("access at " + hex(offset) + " crosses a node boundary");
        return RK_DECODE_ERROR;
    }
    if (node == node_id_) {
        bump(GAS_CNT_INDEX_LOCAL);
    }
    uint64_t buf = write ? value : 0;
    // The host routes its own window to the owner (remote memory; may block, never under a lock
    // of ours: the core holds none here).
    const Status st = write ? host_.dma_write(GAS_WINDOW_BASE + offset, &buf, size)
                            : host_.dma_read(GAS_WINDOW_BASE + offset, &buf, size);
    if (st != RK_OK) {
        bump(GAS_CNT_INDEX_BUS_ERRORS);
        // A bus error is the architected result (the guest gets an external abort); log it as
        // a guest error since it is the guest's access that failed.
        guest_error(std::string(write ? "store to" : "load from") + " node " + std::to_string(node) +
                    " address " + hex(local) + ": " +
                    (st == RK_DECODE_ERROR  ? std::string("not memory on that node")
                     : st == RK_UNREACHABLE ? std::string("node unreachable")
                                            : std::string("refused (") + rk_status_name(st) + ")") +
                    " (bus error)");
        return st;
    }
    if (!write) {
        value = size == 8 ? buf : (buf & ((1ull << (8 * size)) - 1));
    }
    return RK_OK;
}

Status Gas::window_read(uint64_t offset, unsigned size, uint64_t &value)
{
    value = 0;
    return access(false, offset, size, value);
}

Status Gas::window_write(uint64_t offset, uint64_t value, unsigned size)
{
    return access(true, offset, size, value);
}

Status Gas::ctrl_region_read(uint64_t offset, unsigned size, uint64_t *value)
{
    *value = 0;
    if (size == 0 || (offset & (size - 1))) {
        host_.guest_error("control page: " + std::to_string(size) + "-byte load at " + hex(offset) +
                          " is not aligned (decode error, as on the bus)");
        return RK_DECODE_ERROR;
    }
    *value = ctrl_read(offset, size);
    return RK_OK;
}

Status Gas::ctrl_region_write(uint64_t offset, uint64_t value, unsigned size)
{
    if (size == 0 || (offset & (size - 1))) {
        host_.guest_error("control page: " + std::to_string(size) + "-byte store at " + hex(offset) +
                          " is not aligned (decode error, as on the bus)");
        return RK_DECODE_ERROR;
    }
    ctrl_write(offset, value, size);
    return RK_OK;
}

uint64_t Gas::ctrl_read(uint64_t offset, unsigned size)
{
    if (size != 8 || (offset & 7) || offset >= GAS_CTRL_SIZE) {
        guest_error("control page read of " + std::to_string(size) + " bytes at " + hex(offset) +
                    " (registers are 64-bit, aligned)");
        return 0;
    }
    Ctx ctx;
    uint64_t v = 0;
    (void)bank_.read(*this, offset, size, ctx, v); // reserved: reads as zero
    return v;
}

void Gas::ctrl_write(uint64_t offset, uint64_t value, unsigned size)
{
    guest_error("write of " + hex(value) + " (" + std::to_string(size) +
                " bytes) to read-only control register " + hex(offset) + " (" + bank_.describe(offset) +
                ") ignored");
}

GasCounters Gas::counters() const
{
    GasCounters c;
#define GAS_CNT_X_GET_(N, n, d) c.n = counter(GAS_CNT_INDEX_##N);
    GAS_COUNTER_TABLE(GAS_CNT_X_GET_)
#undef GAS_CNT_X_GET_
    c.bad_access = bad_access_;
    return c;
}

GasState Gas::save() const
{
    GasState st;
    st.node_id = node_id_;
    st.node_count = node_count_;
    for (unsigned i = 0; i < kGasOwnCounters; i++)
        st.counters[i] = own_[i].load(std::memory_order_relaxed);
    return st;
}

bool Gas::load(StateIn &in, std::string *why)
{
    GasState st;
    in.get(st);
    if (!in.finish()) {
        if (why) *why = in.why();
        return false;
    }
    return load(st, why);
}

bool Gas::load(const GasState &st, std::string *why)
{
    if (st.node_id != node_id_ || st.node_count != node_count_) {
        if (why)
            *why = std::string(st.node_id != node_id_ ? "node_id" : "node_count") + ": the state of node " +
                   std::to_string(st.node_id) + " of " + std::to_string(st.node_count) + ", this is node " +
                   std::to_string(node_id_) + " of " + std::to_string(node_count_);
        return false;
    }
    for (unsigned i = 0; i < kGasOwnCounters; i++)
        own_[i].store(st.counters[i], std::memory_order_relaxed);
    return true;
}

} // namespace rackemu::unimem
