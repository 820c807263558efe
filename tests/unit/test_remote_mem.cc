// Unit tests of one-sided remote memory over the fabric (hw/fabric/remote_mem.cc):
// two or three in-process "nodes" (fabric ports with a RAM buffer each) and a real bridge.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "bridge_rig.h"
#include "remote_mem_rig.h"

using namespace rackemu::fabric::test;

namespace {
constexpr uint64_t kBase = kRmemBase;
constexpr uint64_t kRam = kRmemRam;

struct Node : RmemObserver {
    std::vector<unsigned char> ram = std::vector<unsigned char>(kRam);
    RkFabricPort *port = nullptr;
    Node(BridgeRig &b, unsigned id, unsigned timeout_ms = 2000)
    {
        port = b.port(id, nullptr, false);
        EXPECT_NE(port, nullptr);
        mem = rk_rmem_new(port, id, kBase, kRam, ram.data(), timeout_ms, &RmemObserver::log, this);
        rk_fabric_port_start(port);
        for (size_t i = 0; i < kRam; i++)
            ram[i] = (unsigned char)(i * 7 + id);
    }
    ~Node()
    {
        rk_rmem_free(mem); // unregisters from the port: before the port goes
        rk_fabric_port_free(port);
    }
};

} // namespace

TEST(RemoteMem, WritesAndReadsAnotherNodesRamAtBoundarySizes)
{
    BridgeRig b;
    Node n0(b, 0), n1(b, 1);
    unsigned seed = 0;
    for (size_t size : {1u, 2u, 4u, 8u, 63u, 64u, 65u, 191u, 192u, 193u, 4096u, 65537u}) {
        const uint64_t off = 4096 + 3 * seed; // unaligned for some sizes
        const auto before = n1.ram;
        const auto data = rmem_pattern(size, ++seed);
        ASSERT_EQ(rk_rmem_write(n0.mem, 1, kBase + off, data.data(), size), RK_RMEM_OK) << size;
        // exactly [off, off + size) changed on node 1; nothing on node 0
        EXPECT_EQ(0, std::memcmp(n1.ram.data() + off, data.data(), size)) << size;
        EXPECT_EQ(0, std::memcmp(n1.ram.data(), before.data(), off)) << size;
        EXPECT_EQ(0, std::memcmp(n1.ram.data() + off + size, before.data() + off + size, kRam - off - size))
            << size;
        std::vector<unsigned char> back(size, 0xee);
        ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + off, back.data(), size), RK_RMEM_OK) << size;
        EXPECT_EQ(back, data) << size;
    }
    EXPECT_GT(n0.stats().frames, 0u);
    EXPECT_GT(n1.stats().served_writes, 0u);
    EXPECT_GT(n1.stats().served_reads, 0u);
}

TEST(RemoteMem, AccessOutsideTheOwnersRamIsADecodeErrorAndWritesNothing)
{
    BridgeRig b;
    Node n0(b, 0), n1(b, 1);
    const auto before = n1.ram;
    unsigned char buf[256] = {1};
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase - 8, buf, 8), RK_RMEM_DECODE_ERR);
    EXPECT_EQ(rk_rmem_write(n0.mem, 1, kBase + kRam - 4, buf, 8), RK_RMEM_DECODE_ERR); // straddles the end
    EXPECT_EQ(rk_rmem_write(n0.mem, 1, ~0ull - 3, buf, 8), RK_RMEM_DECODE_ERR);        // wraps around
    EXPECT_EQ(n1.ram, before);
    EXPECT_EQ(n1.stats().served_refused, 3u);
    EXPECT_EQ(n0.stats().decode_errors, 3u);
}

TEST(RemoteMem, OwnRamIsServedDirectlyWithoutFrames)
{
    BridgeRig b;
    Node n0(b, 0);
    const uint64_t v = 0x1122334455667788ull;
    ASSERT_EQ(rk_rmem_write(n0.mem, 0, kBase + 64, &v, 8), RK_RMEM_OK);
    uint64_t r = 0;
    ASSERT_EQ(rk_rmem_read(n0.mem, 0, kBase + 64, &r, 8), RK_RMEM_OK);
    EXPECT_EQ(r, v);
    EXPECT_EQ(n0.stats().frames, 0u);
    EXPECT_EQ(n0.stats().local, 2u);
    EXPECT_EQ(rk_rmem_read(n0.mem, 0, kBase + kRam, &r, 1), RK_RMEM_DECODE_ERR);
}

TEST(RemoteMem, AbsentNodeIsUnreachable)
{
    BridgeRig b;
    Node n0(b, 0);
    uint64_t r;
    EXPECT_EQ(rk_rmem_read(n0.mem, 5, kBase, &r, 8), RK_RMEM_UNREACHABLE);
    EXPECT_EQ(rk_rmem_read(n0.mem, 200, kBase, &r, 8), RK_RMEM_UNREACHABLE); // beyond any node id
    EXPECT_EQ(n0.stats().unreachable, 2u);
}

TEST(RemoteMem, NoFabricReachesOnlyTheOwnRam)
{
    std::vector<unsigned char> ram(4096);
    RkRemoteMem *m = rk_rmem_new(nullptr, 0, kBase, ram.size(), ram.data(), 100, nullptr, nullptr);
    uint32_t v = 0xabcd;
    EXPECT_EQ(rk_rmem_write(m, 0, kBase + 4, &v, 4), RK_RMEM_OK);
    EXPECT_EQ(rk_rmem_write(m, 1, kBase + 4, &v, 4), RK_RMEM_UNREACHABLE);
    rk_rmem_free(m);
}

namespace {
// A node whose memory service swallows requests (a hung owner).
struct Silent {
    static void on_request(void *o, RkFabricPort *, const rkf_frame_hdr *, const void *)
    {
        static_cast<std::atomic<int> *>(o)->fetch_add(1);
    }
};
} // namespace

TEST(RemoteMem, AnOwnerThatDoesNotAnswerTimesOut)
{
    BridgeRig b;
    Node n0(b, 0, 200);
    std::atomic<int> seen{0};
    RkFabricPort *n1 = b.port(1, nullptr, false);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Silent::on_request, nullptr, nullptr, &seen);
    rk_fabric_port_start(n1);
    uint64_t r;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase, &r, 8), RK_RMEM_TIMEOUT);
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(ms, 190);
    EXPECT_LT(ms, 2000);
    EXPECT_EQ(seen.load(), 1);
    EXPECT_EQ(n0.stats().timeouts, 1u);
    rk_fabric_port_free(n1);
}

TEST(RemoteMem, OwnerDeathFailsAPendingTransferInsteadOfWaitingForTheTimeout)
{
    BridgeRig b;
    Node n0(b, 0, 20000);
    std::atomic<int> seen{0};
    RkFabricPort *n1 = b.port(1, nullptr, false);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Silent::on_request, nullptr, nullptr, &seen);
    rk_fabric_port_start(n1);
    std::vector<unsigned char> buf(64 * 1024);
    std::thread killer([&] {
        while (seen.load() == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rk_fabric_port_free(n1); // the node dies with requests outstanding
    });
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase, buf.data(), buf.size()), RK_RMEM_UNREACHABLE);
    killer.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(RemoteMem, TwoNodesReadingEachOtherAtOnceDoNotDeadlock)
{
    BridgeRig b;
    Node n0(b, 0), n1(b, 1);
    std::atomic<int> bad{0};
    auto worker = [&](Node &self, Node &peer, unsigned peer_id) {
        std::vector<unsigned char> buf(4096);
        for (int i = 0; i < 300; i++) {
            const uint64_t off = uint64_t(i % 200) * 4096;
            if (rk_rmem_read(self.mem, peer_id, kBase + off, buf.data(), buf.size()) != RK_RMEM_OK ||
                std::memcmp(buf.data(), peer.ram.data() + off, buf.size()) != 0)
                bad++;
        }
    };
    std::thread a(worker, std::ref(n0), std::ref(n1), 1u), c(worker, std::ref(n1), std::ref(n0), 0u);
    a.join();
    c.join();
    EXPECT_EQ(bad.load(), 0);
}

TEST(RemoteMem, MalformedRequestsAreRefusedAndTouchNothing)
{
    BridgeRig b;
    Node n1(b, 1);
    RkFabricPort *n0 = b.port(0);
    struct Replies {
        std::atomic<int> bad_frame{0}, other{0};
        static void on_reply(void *o, const rkf_frame_hdr *h, const void *)
        {
            auto *r = static_cast<Replies *>(o);
            (h->status == RKF_ST_BAD_FRAME ? r->bad_frame : r->other)++;
        }
    } replies;
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Replies::on_reply, nullptr, &replies);
    const auto before = n1.ram;
    unsigned char buf[RKF_MAX_PAYLOAD] = {};
    rkf_mem_req req{kBase, 16, 0};
    auto send = [&](uint16_t op, rkf_mem_req r, uint16_t len) {
        std::memcpy(buf, &r, sizeof r);
        rkf_frame_hdr h = request(RKF_SVC_MEM, 1, 9, len);
        h.op = op;
        ASSERT_EQ(rk_fabric_port_send(n0, &h, buf), 0);
    };
    send(RKF_OP_MEM_WRITE, req, sizeof req + 8);                                 // data shorter than len
    send(RKF_OP_MEM_WRITE, rkf_mem_req{kBase, 0, 0}, sizeof req);                // zero length
    send(RKF_OP_MEM_READ, rkf_mem_req{kBase, RKF_MEM_CHUNK + 1, 0}, sizeof req); // too long
    send(RKF_OP_MEM_READ, rkf_mem_req{kBase, 8, 1}, sizeof req);                 // unknown flags
    send(99, req, sizeof req);                                                   // unknown op
    send(RKF_OP_MEM_READ, req, 4);                                               // truncated header
    for (int i = 0; i < 500 && replies.bad_frame.load() < 6; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(replies.bad_frame.load(), 6);
    EXPECT_EQ(replies.other.load(), 0);
    EXPECT_EQ(n1.stats().served_malformed, 6u);
    EXPECT_EQ(n1.ram, before);
    rk_fabric_port_free(n0);
}
