// SPDX-License-Identifier: MIT
// Unimem global address space window core; see gas.h and docs/unimem.md.
#include "gas.h"

#include "format.h"

#include <algorithm>

namespace rackemu::unimem {

Gas::Gas(GasHost host, unsigned node_id, unsigned node_count)
    : host_(std::move(host)), node_id_(node_id), node_count_(std::clamp(node_count, 1u, 64u))
{
}

void Gas::guest_error(const std::string &msg)
{
    bad_access_++;
    if (host_.guest_error) {
        host_.guest_error("rackemu-gas: " + msg);
    }
}

Gas::Result Gas::access(bool write, uint64_t offset, unsigned size, uint64_t &value)
{
    (write ? stores_ : loads_)++;
    if (size == 0 || size > 8 || offset >= window_size() || window_size() - offset < size) {
        bus_errors_++;
        guest_error(std::string(write ? "store" : "load") + " of " + std::to_string(size) +
                    " bytes at window offset " + hex(offset) + " outside the " + std::to_string(node_count_) +
                    "-node window");
        return Result::BusError;
    }
    const unsigned node = unsigned(UNIMEM_GADDR_NODE(offset));
    const uint64_t local = UNIMEM_GADDR_LOCAL(offset);
    if (UNIMEM_GADDR_LOCAL(offset + size - 1) < local) {
        // Crosses from one node's window into the next: no single owner can serve it.
        bus_errors_++;
        guest_error("access at " + hex(offset) + " crosses a node boundary");
        return Result::BusError;
    }
    if (node == node_id_) {
        local_++;
    }
    uint64_t buf = write ? value : 0;
    GasAccess r = host_.access ? host_.access(write, node, local, &buf, size) : GasAccess::Unreachable;
    if (r != GasAccess::Ok) {
        bus_errors_++;
        // A bus error is the architected result (the guest gets an external abort); log it as
        // a guest error since it is the guest's access that failed.
        guest_error(std::string(write ? "store to" : "load from") + " node " + std::to_string(node) +
                    " address " + hex(local) + ": " +
                    (r == GasAccess::DecodeError ? "not memory on that node" : "node unreachable") +
                    " (bus error)");
        return Result::BusError;
    }
    if (!write) {
        value = size == 8 ? buf : (buf & ((1ull << (8 * size)) - 1));
    }
    return Result::Ok;
}

Gas::Result Gas::window_read(uint64_t offset, unsigned size, uint64_t &value)
{
    value = 0;
    return access(false, offset, size, value);
}

Gas::Result Gas::window_write(uint64_t offset, uint64_t value, unsigned size)
{
    return access(true, offset, size, value);
}

uint64_t Gas::ctrl_read(uint64_t offset, unsigned size)
{
    if (size != 8 || (offset & 7) || offset >= GAS_CTRL_SIZE) {
        guest_error("control page read of " + std::to_string(size) + " bytes at " + hex(offset) +
                    " (registers are 64-bit, aligned)");
        return 0;
    }
    switch (offset) {
    case GAS_CTRL_ID:
        return GAS_ID_VALUE;
    case GAS_CTRL_NODE_ID:
        return node_id_;
    case GAS_CTRL_NODE_COUNT:
        return node_count_;
    case GAS_CTRL_WINDOW_BASE:
        return GAS_WINDOW_BASE;
    case GAS_CTRL_WINDOW_SIZE:
        return window_size();
    case GAS_CTRL_LOADS:
        return loads_;
    case GAS_CTRL_STORES:
        return stores_;
    case GAS_CTRL_LOCAL:
        return local_;
    case GAS_CTRL_BUS_ERRORS:
        return bus_errors_;
    case GAS_CTRL_SERVED_READS:
    case GAS_CTRL_SERVED_WRITES:
    case GAS_CTRL_SERVED_REFUSED:
    case GAS_CTRL_TIMEOUTS:
        return host_.service_counter ? host_.service_counter(unsigned(offset)) : 0;
    default:
        return 0; // reserved: reads as zero
    }
}

void Gas::ctrl_write(uint64_t offset, uint64_t value, unsigned size)
{
    guest_error("write of " + hex(value) + " (" + std::to_string(size) +
                " bytes) to read-only control register " + hex(offset) + " ignored");
}

GasCounters Gas::counters() const
{
    GasCounters c;
    c.loads = loads_;
    c.stores = stores_;
    c.local = local_;
    c.bus_errors = bus_errors_;
    c.bad_access = bad_access_;
    return c;
}

} // namespace rackemu::unimem
