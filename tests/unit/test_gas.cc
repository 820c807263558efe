// Unit tests of the Unimem global address space window core (hw/unimem/gas.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "gas.h"

using namespace rackemu::unimem;

namespace {
struct Rig {
    struct Acc {
        bool write;
        unsigned node;
        uint64_t local;
        unsigned len;
    };
    std::vector<Acc> accesses;
    std::vector<std::string> errors;
    std::map<unsigned, GasAccess> fail; // node -> result
    uint64_t memory = 0x8877665544332211ull;
    Gas gas;
    Rig(unsigned node_id = 1, unsigned count = 4)
        : gas(GasHost{[this](bool w, unsigned node, uint64_t local, void *buf, unsigned len) {
                          accesses.push_back({w, node, local, len});
                          if (fail.count(node)) return fail[node];
                          if (w)
                              std::memcpy(&memory, buf, len);
                          else
                              std::memcpy(buf, &memory, len);
                          return GasAccess::Ok;
                      },
                      [](unsigned off) { return uint64_t(off) * 1000; },
                      [this](const std::string &m) { errors.push_back(m); }},
              node_id, count)
    {
    }
};
} // namespace

TEST(Gas, WindowOffsetDecodesIntoNodeAndLocalAddress)
{
    Rig r;
    uint64_t v;
    ASSERT_EQ(r.gas.window_read(UNIMEM_GADDR(3, 0x40001000), 8, v), Gas::Result::Ok);
    ASSERT_EQ(r.accesses.size(), 1u);
    EXPECT_EQ(r.accesses[0].node, 3u);
    EXPECT_EQ(r.accesses[0].local, 0x40001000u);
    EXPECT_EQ(v, 0x8877665544332211ull);
}

TEST(Gas, NarrowLoadsReturnOnlyTheirBytes)
{
    Rig r;
    uint64_t v;
    for (unsigned size : {1u, 2u, 4u}) {
        ASSERT_EQ(r.gas.window_read(UNIMEM_GADDR(0, 0x40000000), size, v), Gas::Result::Ok);
        EXPECT_EQ(v, 0x8877665544332211ull & ((1ull << (8 * size)) - 1)) << size;
    }
}

TEST(Gas, StoresCarryTheirSizeAndValue)
{
    Rig r;
    ASSERT_EQ(r.gas.window_write(UNIMEM_GADDR(2, 0x40000010), 0xabcd, 2), Gas::Result::Ok);
    EXPECT_TRUE(r.accesses[0].write);
    EXPECT_EQ(r.accesses[0].len, 2u);
    EXPECT_EQ(r.memory & 0xffff, 0xabcdu);
    EXPECT_EQ(r.gas.counters().stores, 1u);
}

TEST(Gas, AccessesToTheOwnWindowAreCountedAsLocal)
{
    Rig r(1);
    uint64_t v;
    ASSERT_EQ(r.gas.window_read(UNIMEM_GADDR(1, 0x40000000), 8, v), Gas::Result::Ok);
    EXPECT_EQ(r.gas.counters().local, 1u);
}

TEST(Gas, FailedRemoteAccessIsABusErrorAndLogged)
{
    Rig r;
    r.fail[2] = GasAccess::Unreachable;
    r.fail[3] = GasAccess::DecodeError;
    uint64_t v = 5;
    EXPECT_EQ(r.gas.window_read(UNIMEM_GADDR(2, 0x40000000), 8, v), Gas::Result::BusError);
    EXPECT_EQ(r.gas.window_write(UNIMEM_GADDR(3, 0x0), 1, 8), Gas::Result::BusError);
    EXPECT_EQ(r.gas.counters().bus_errors, 2u);
    ASSERT_EQ(r.errors.size(), 2u);
    EXPECT_NE(r.errors[0].find("unreachable"), std::string::npos);
    EXPECT_NE(r.errors[1].find("not memory"), std::string::npos);
}

TEST(Gas, AccessBeyondTheClusterOrAcrossANodeBoundaryIsRefusedWithoutTraffic)
{
    Rig r(0, 2);
    uint64_t v;
    EXPECT_EQ(r.gas.window_read(UNIMEM_GADDR(2, 0), 8, v), Gas::Result::BusError);       // node 2 of 2
    EXPECT_EQ(r.gas.window_read(GAS_WINDOW_NODE_SIZE - 4, 8, v), Gas::Result::BusError); // crosses 0 -> 1
    EXPECT_EQ(r.gas.window_read(2 * GAS_WINDOW_NODE_SIZE - 4, 8, v),
              Gas::Result::BusError); // crosses the end
    EXPECT_TRUE(r.accesses.empty());
    EXPECT_EQ(r.errors.size(), 3u);
}

TEST(Gas, ControlPageIdentifiesTheWindowAndIsReadOnly)
{
    Rig r(1, 4);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_ID, 8), GAS_ID_VALUE);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_NODE_ID, 8), 1u);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_NODE_COUNT, 8), 4u);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_WINDOW_BASE, 8), GAS_WINDOW_BASE);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_WINDOW_SIZE, 8), 4 * GAS_WINDOW_NODE_SIZE);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_SERVED_READS, 8), uint64_t(GAS_CTRL_SERVED_READS) * 1000);
    r.gas.ctrl_write(GAS_CTRL_NODE_ID, 7, 8);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_NODE_ID, 8), 1u);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_ID, 4), 0u); // narrow: refused
    EXPECT_EQ(r.errors.size(), 2u);
}
