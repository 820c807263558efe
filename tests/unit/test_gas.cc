// Unit tests of the Unimem global address space window core (hw/unimem/gas.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gas.h"
#include "bridge_rig.h"
#include "rk_remote_mem.h"
#include "test_host.h"
#include "unimem_capi.h"

using namespace rackemu::unimem;

namespace {
// A node of a `count`-node rack: the host's DMA is where the core's window accesses arrive, at
// GAS_WINDOW_BASE + G (the QEMU glue routes them to the owner through remote memory).
struct Rig {
    struct Acc {
        bool write;
        unsigned node;
        uint64_t local;
        uint64_t len;
    };
    std::vector<Acc> accesses;
    std::map<unsigned, rackemu::Status> fail; // node -> result
    uint64_t memory = 0x8877665544332211ull;
    rackemu::test::TestHost th;
    Gas gas;
    explicit Rig(unsigned node_id = 1, unsigned count = 4, RkRemoteMem *rmem = nullptr)
        : gas(init(th, this, node_id, count, rmem))
    {
    }
    std::vector<std::string> errors() { return th.guest_errors(); }

private:
    static rackemu::Host init(rackemu::test::TestHost &th, Rig *r, unsigned node_id, unsigned count,
                              RkRemoteMem *rmem)
    {
        th.dma_rw = [r](uint64_t addr, void *buf, uint64_t len, bool w) {
            EXPECT_GE(addr, GAS_WINDOW_BASE);
            const uint64_t g = addr - GAS_WINDOW_BASE;
            const unsigned node = unsigned(UNIMEM_GADDR_NODE(g));
            r->accesses.push_back({w, node, UNIMEM_GADDR_LOCAL(g), len});
            if (r->fail.count(node)) return r->fail[node];
            if (w)
                std::memcpy(&r->memory, buf, len);
            else
                std::memcpy(buf, &r->memory, len);
            return RK_OK;
        };
        return th.host(nullptr, rmem, node_id, count);
    }
};
} // namespace

TEST(Gas, WindowOffsetDecodesIntoNodeAndLocalAddress)
{
    Rig r;
    uint64_t v;
    ASSERT_EQ(r.gas.window_read(UNIMEM_GADDR(3, 0x40001000), 8, v), RK_OK);
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
        ASSERT_EQ(r.gas.window_read(UNIMEM_GADDR(0, 0x40000000), size, v), RK_OK);
        EXPECT_EQ(v, 0x8877665544332211ull & ((1ull << (8 * size)) - 1)) << size;
    }
}

TEST(Gas, StoresCarryTheirSizeAndValue)
{
    Rig r;
    ASSERT_EQ(r.gas.window_write(UNIMEM_GADDR(2, 0x40000010), 0xabcd, 2), RK_OK);
    EXPECT_TRUE(r.accesses[0].write);
    EXPECT_EQ(r.accesses[0].len, 2u);
    EXPECT_EQ(r.memory & 0xffff, 0xabcdu);
    EXPECT_EQ(r.gas.counters().stores, 1u);
}

TEST(Gas, AccessesToTheOwnWindowAreCountedAsLocal)
{
    Rig r(1);
    uint64_t v;
    ASSERT_EQ(r.gas.window_read(UNIMEM_GADDR(1, 0x40000000), 8, v), RK_OK);
    EXPECT_EQ(r.gas.counters().local, 1u);
}

TEST(Gas, FailedRemoteAccessIsABusErrorWithTheHostsCauseAndLogged)
{
    Rig r;
    r.fail[2] = RK_UNREACHABLE;
    r.fail[3] = RK_DECODE_ERROR;
    r.fail[0] = RK_SLAVE_ERROR;
    uint64_t v = 5;
    EXPECT_EQ(r.gas.window_read(UNIMEM_GADDR(2, 0x40000000), 8, v), RK_UNREACHABLE);
    EXPECT_EQ(r.gas.window_write(UNIMEM_GADDR(3, 0x0), 1, 8), RK_DECODE_ERROR);
    EXPECT_EQ(r.gas.window_write(UNIMEM_GADDR(0, 0x0), 1, 4), RK_SLAVE_ERROR);
    EXPECT_EQ(r.gas.counters().bus_errors, 3u);
    const auto errs = r.errors();
    ASSERT_EQ(errs.size(), 3u);
    EXPECT_NE(errs[0].find("unreachable"), std::string::npos);
    EXPECT_NE(errs[1].find("not memory"), std::string::npos);
    EXPECT_NE(errs[2].find("SLAVE_ERROR"), std::string::npos);
}

TEST(Gas, AccessBeyondTheClusterOrAcrossANodeBoundaryIsADecodeErrorWithoutTraffic)
{
    Rig r(0, 2);
    uint64_t v;
    EXPECT_EQ(r.gas.window_read(UNIMEM_GADDR(2, 0), 8, v), RK_DECODE_ERROR);           // node 2 of 2
    EXPECT_EQ(r.gas.window_read(GAS_WINDOW_NODE_SIZE - 4, 8, v), RK_DECODE_ERROR);     // crosses 0 -> 1
    EXPECT_EQ(r.gas.window_read(2 * GAS_WINDOW_NODE_SIZE - 4, 8, v), RK_DECODE_ERROR); // crosses the end
    EXPECT_EQ(r.gas.window_read(0, 0, v), RK_DECODE_ERROR);                            // no bus access size
    EXPECT_EQ(r.gas.window_write(0, 0, 16), RK_DECODE_ERROR);
    EXPECT_TRUE(r.accesses.empty());
    EXPECT_EQ(r.errors().size(), 5u);
    EXPECT_EQ(r.gas.counters().bus_errors, 5u);
}

TEST(Gas, ControlPageIdentifiesTheWindowAndIsReadOnly)
{
    Rig r(1, 4);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_ID, 8), GAS_ID_VALUE);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_NODE_ID, 8), 1u);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_NODE_COUNT, 8), 4u);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_WINDOW_BASE, 8), GAS_WINDOW_BASE);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_WINDOW_SIZE, 8), 4 * GAS_WINDOW_NODE_SIZE);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_SERVED_READS, 8), 0u); // no fabric: serves nobody
    r.gas.ctrl_write(GAS_CTRL_NODE_ID, 7, 8);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_NODE_ID, 8), 1u);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_ID, 4), 0u); // narrow: refused
    EXPECT_EQ(r.errors().size(), 2u);
}

TEST(Gas, CounterRegistersComeFromTheCounterTable)
{
    Rig r(1, 4);
    r.fail[3] = RK_DECODE_ERROR;
    uint64_t v;
    (void)r.gas.window_read(UNIMEM_GADDR(1, 0x40000000), 8, v);
    (void)r.gas.window_read(UNIMEM_GADDR(3, 0x40000000), 8, v);
    (void)r.gas.window_write(UNIMEM_GADDR(2, 0x40000000), 1, 4);
    const GasCounters c = r.gas.counters();
    EXPECT_EQ(c.loads, 2u);
    EXPECT_EQ(c.stores, 1u);
    EXPECT_EQ(c.local, 1u);
    EXPECT_EQ(c.bus_errors, 1u);
    // every row of GAS_COUNTER_TABLE is a named register holding that counter
#define CHECK_ROW(N, n, d) \
    EXPECT_EQ(r.gas.describe(GAS_CNT_##N), "GAS_CTRL_" #N); \
    EXPECT_EQ(r.gas.ctrl_read(GAS_CNT_##N, 8), c.n) << #n;
    GAS_COUNTER_TABLE(CHECK_ROW)
#undef CHECK_ROW
    EXPECT_EQ(r.gas.describe(GAS_CTRL_ID), "GAS_CTRL_ID");
    EXPECT_EQ(r.gas.describe(0x28), "unmapped");
    EXPECT_EQ(r.gas.ctrl_read(0x28, 8), 0u); // reserved: zero, not an error
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_SIZE - 8, 8), 0u);
    EXPECT_EQ(r.errors().size(), 1u); // the decode error only
    r.gas.ctrl_write(GAS_CTRL_LOADS, 0, 8);
    EXPECT_NE(r.errors().back().find("GAS_CTRL_LOADS"), std::string::npos);
    EXPECT_EQ(r.gas.ctrl_read(GAS_CTRL_LOADS, 8), 2u);
}

TEST(Gas, ServiceCountersAreTheNodesRemoteMemoryStatistics)
{
    using rackemu::fabric::test::BridgeRig;
    constexpr uint64_t kBase = 0x40000000, kRam = 1 << 16;
    BridgeRig b;
    std::vector<unsigned char> ram0(kRam), ram1(kRam, 0x5a);
    RkFabricPort *p0 = b.port(0, nullptr, false), *p1 = b.port(1, nullptr, false);
    ASSERT_TRUE(p0 && p1);
    RkRemoteMem *m0 = rk_rmem_new(p0, 0, kBase, kRam, ram0.data(), 2000, nullptr, nullptr);
    RkRemoteMem *m1 = rk_rmem_new(p1, 1, kBase, kRam, ram1.data(), 2000, nullptr, nullptr);
    rk_fabric_port_start(p0);
    rk_fabric_port_start(p1);
    {
        // node 0's window goes through its remote memory, as the QEMU glue's DMA does
        rackemu::test::TestHost h0, h1;
        h0.dma_rw = [m0](uint64_t addr, void *buf, uint64_t len, bool w) {
            const uint64_t g = addr - GAS_WINDOW_BASE;
            const int rc =
                w ? rk_rmem_write(m0, unsigned(UNIMEM_GADDR_NODE(g)), UNIMEM_GADDR_LOCAL(g), buf, len)
                  : rk_rmem_read(m0, unsigned(UNIMEM_GADDR_NODE(g)), UNIMEM_GADDR_LOCAL(g), buf, len);
            return rc == RK_RMEM_OK ? RK_OK : rc == RK_RMEM_DECODE_ERR ? RK_DECODE_ERROR : RK_UNREACHABLE;
        };
        Gas g0(h0.host(p0, m0, 0, 2)), g1(h1.host(p1, m1, 1, 2));
        uint64_t v = 0;
        ASSERT_EQ(g0.window_read(UNIMEM_GADDR(1, kBase + 8), 8, v), RK_OK);
        EXPECT_EQ(v, 0x5a5a5a5a5a5a5a5aull);
        ASSERT_EQ(g0.window_write(UNIMEM_GADDR(1, kBase), 0x1234, 2), RK_OK);
        // the owner's fabric thread stored it (atomically: remote_mem.cc); read it the same way
        EXPECT_EQ(__atomic_load_n(&ram1[0], __ATOMIC_RELAXED), 0x34);
        ASSERT_EQ(g0.window_read(UNIMEM_GADDR(1, kBase), 2, v), RK_OK);
        EXPECT_EQ(v, 0x1234u);
        EXPECT_EQ(g0.window_read(UNIMEM_GADDR(1, 0x1000), 8, v), RK_DECODE_ERROR); // not RAM there
        rk_rmem_stats st{};
        rk_rmem_get_stats(m1, &st);
        EXPECT_EQ(g1.ctrl_read(GAS_CTRL_SERVED_READS, 8), st.served_reads);
        EXPECT_EQ(g1.ctrl_read(GAS_CTRL_SERVED_WRITES, 8), st.served_writes);
        EXPECT_EQ(g1.ctrl_read(GAS_CTRL_SERVED_REFUSED, 8), st.served_refused);
        EXPECT_GE(st.served_reads, 1u);
        EXPECT_GE(st.served_writes, 1u);
        EXPECT_GE(st.served_refused, 1u);
        EXPECT_EQ(g0.ctrl_read(GAS_CTRL_SERVED_READS, 8), 0u); // node 0 served nobody
        EXPECT_EQ(g0.ctrl_read(GAS_CTRL_BUS_ERRORS, 8), 1u);
    }
    // Before node 1's memory service goes: an echo round trip to node 1, so its port thread has
    // left the memory service's handler (rk_fabric_unbind also waits for a running handler now;
    // Bridge.UnregisteringAServiceWaitsForItsRunningHandler).
    static std::atomic<bool> echoed;
    echoed = false;
    rk_fabric_port_register(
        p0, RKF_SVC_ECHO, nullptr, [](void *, const rkf_frame_hdr *, const void *) { echoed = true; },
        nullptr, nullptr);
    rkf_frame_hdr echo{};
    echo.type = RKF_T_REQ;
    echo.svc = RKF_SVC_ECHO;
    echo.dst = 1;
    echo.tag = 1;
    ASSERT_EQ(rk_fabric_port_send(p0, &echo, nullptr), 0);
    for (int i = 0; i < 5000 && !echoed; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(echoed.load());
    rk_rmem_free(m0);
    rk_rmem_free(m1);
    rk_fabric_port_free(p0);
    rk_fabric_port_free(p1);
}

TEST(Gas, SaveLoadKeepsTheCounterRegistersAndRefusesAnotherNodesState)
{
    Rig a(2, 4);
    a.fail[0] = RK_UNREACHABLE;
    uint64_t v;
    for (int i = 0; i < 3; i++)
        (void)a.gas.window_read(UNIMEM_GADDR(2, 0x40000000), 8, v);
    (void)a.gas.window_write(UNIMEM_GADDR(0, 0x40000000), 1, 8);
    const GasState st = a.gas.save();
    EXPECT_EQ(st.node_id, 2u);
    EXPECT_EQ(st.node_count, 4u);

    Rig b(2, 4);
    ASSERT_TRUE(b.gas.load(st));
    for (uint64_t off = 0; off < 0x100; off += 8)
        EXPECT_EQ(b.gas.ctrl_read(off, 8), a.gas.ctrl_read(off, 8)) << off;
    EXPECT_EQ(b.gas.counters().bus_errors, 1u);
    EXPECT_EQ(b.gas.counters().local, 3u);

    Rig other_node(1, 4), other_rack(2, 3);
    EXPECT_FALSE(other_node.gas.load(st));
    EXPECT_FALSE(other_rack.gas.load(st));
    EXPECT_EQ(other_node.gas.ctrl_read(GAS_CTRL_LOADS, 8), 0u); // refused: nothing changed
    EXPECT_EQ(other_rack.gas.ctrl_read(GAS_CTRL_LOADS, 8), 0u);
}

// ---- the device operations (unimem_capi.h): two regions, the state as one byte string ----

namespace {
std::vector<uint8_t> ops_save(void *core)
{
    uint8_t *buf = nullptr;
    uint64_t len = 0;
    EXPECT_EQ(rk_gas_device_ops.save(core, &buf, &len), 0);
    std::vector<uint8_t> v(buf, buf + len);
    free(buf);
    return v;
}
int ops_load(void *core, const std::vector<uint8_t> &b, std::string *msg)
{
    char m[300] = "";
    const int rc = rk_gas_device_ops.load(core, b.data(), b.size(), m, sizeof m);
    *msg = m;
    return rc;
}
uint64_t ctrl(void *core, uint64_t off)
{
    uint64_t v = 0;
    EXPECT_EQ(rk_gas_device_ops.regions[0].read(core, off, 8, &v), RK_OK);
    return v;
}
} // namespace

TEST(GasOps, SavedStateLoadsIntoAFreshCoreAndSavesToTheSameBytes)
{
    Rig a(2, 4), b(2, 4);
    ASSERT_EQ(rk_gas_device_ops.nregions, 2u);
    uint64_t v = 0;
    EXPECT_EQ(rk_gas_device_ops.regions[1].read(&a.gas, UNIMEM_GADDR(1, 0x40000000), 8, &v), RK_OK);
    EXPECT_EQ(v, a.memory);
    EXPECT_EQ(rk_gas_device_ops.regions[1].write(&a.gas, UNIMEM_GADDR(3, 0x40000000), 5, 8), RK_OK);
    a.fail[0] = RK_UNREACHABLE;
    EXPECT_EQ(rk_gas_device_ops.regions[1].read(&a.gas, UNIMEM_GADDR(0, 0x40000000), 4, &v), RK_UNREACHABLE);
    const std::vector<uint8_t> st = ops_save(&a.gas);
    std::string msg;
    ASSERT_EQ(ops_load(&b.gas, st, &msg), 0) << msg;
    EXPECT_EQ(ops_save(&b.gas), st);
    for (uint64_t off = 0; off < 0x100; off += 8)
        EXPECT_EQ(ctrl(&b.gas, off), ctrl(&a.gas, off)) << off;
    // and counts on alike
    EXPECT_EQ(rk_gas_device_ops.regions[1].read(&b.gas, UNIMEM_GADDR(1, 0x40000000), 8, &v), RK_OK);
    EXPECT_EQ(ctrl(&b.gas, GAS_CTRL_LOADS), 3u);
}

TEST(GasOps, ATruncatedALongAndAnotherNodesStateAreRefusedAndChangeNothing)
{
    Rig a(2, 4), b(2, 4);
    uint64_t v = 0;
    (void)rk_gas_device_ops.regions[1].read(&a.gas, UNIMEM_GADDR(1, 0), 8, &v);
    const std::vector<uint8_t> good = ops_save(&a.gas);
    (void)rk_gas_device_ops.regions[1].read(&b.gas, UNIMEM_GADDR(2, 0), 8, &v);
    const std::vector<uint8_t> before = ops_save(&b.gas);
    std::string msg;

    std::vector<uint8_t> bad(good.begin(), good.end() - 1);
    EXPECT_EQ(ops_load(&b.gas, bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("counters"), std::string::npos) << msg;
    EXPECT_EQ(ops_save(&b.gas), before);

    bad = good;
    bad.push_back(7);
    EXPECT_EQ(ops_load(&b.gas, bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("left over"), std::string::npos) << msg;
    EXPECT_EQ(ops_save(&b.gas), before);

    bad = good;
    bad[0] = 3; // node_id: another node's state
    EXPECT_EQ(ops_load(&b.gas, bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("node_id"), std::string::npos) << msg;
    EXPECT_EQ(ops_save(&b.gas), before);

    bad = good;
    bad[4] = 5; // node_count: another rack size
    EXPECT_EQ(ops_load(&b.gas, bad, &msg), -EINVAL);
    EXPECT_NE(msg.find("node_count"), std::string::npos) << msg;
    EXPECT_EQ(ops_save(&b.gas), before);
    EXPECT_EQ(ctrl(&b.gas, GAS_CTRL_LOCAL), 1u);
}

TEST(GasOps, AnUnalignedControlPageAccessIsADecodeError)
{
    Rig r;
    uint64_t v = 1;
    EXPECT_EQ(rk_gas_device_ops.regions[0].read(&r.gas, GAS_CTRL_ID + 4, 8, &v), RK_DECODE_ERROR);
    EXPECT_EQ(v, 0u);
    EXPECT_EQ(rk_gas_device_ops.regions[0].write(&r.gas, GAS_CTRL_ID + 1, 1, 2), RK_DECODE_ERROR);
    EXPECT_EQ(r.errors().size(), 2u);
}
