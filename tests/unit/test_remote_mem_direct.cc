// Unit tests of one-sided remote memory's direct path (hw/fabric/remote_mem.cc, docs/fabric.md
// "Direct path"): in-process "nodes" whose RAM is a shared file in the rig's directory
// (node<i>.ram, the launcher's layout), a real bridge and its liveness table.
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

// A node whose RAM is the file <dir>/node<id>.ram, mapped shared (as QEMU's
// memory-backend-file,share=on), with the direct path on unless `direct` is false.
struct FileNode : RmemObserver {
    std::string path;
    uint64_t size = 0;
    int fd = -1;
    unsigned char *ram = nullptr;
    RkFabricPort *port = nullptr;
    FileNode(BridgeRig &b, unsigned id, bool direct = true, uint64_t ram_size = kRam, unsigned char fill = 0)
        : size(ram_size)
    {
        path = b.dir + "/node" + std::to_string(id) + ".ram";
        unlink(path.c_str()); // a new incarnation gets a new file, as the launcher does
        fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        EXPECT_GE(fd, 0);
        EXPECT_EQ(ftruncate(fd, off_t(size)), 0);
        void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        EXPECT_NE(m, MAP_FAILED);
        ram = static_cast<unsigned char *>(m);
        for (uint64_t i = 0; i < size; i++)
            ram[i] = fill ? fill : (unsigned char)(i * 7 + id);
        port = b.port(id, nullptr, false);
        EXPECT_NE(port, nullptr);
        mem = rk_rmem_new(port, id, kBase, size, ram, 2000, &RmemObserver::log, this);
        if (direct) {
            char err[256] = "";
            EXPECT_EQ(
                rk_rmem_enable_direct(mem, b.dir.c_str(), fd, rk_fabric_port_liveness(port), err, sizeof err),
                0)
                << err;
        }
        rk_fabric_port_start(port);
    }
    ~FileNode() { stop(); }
    // The node's QEMU goes: its port closes (the bridge marks it down), its mapping stays a file.
    void stop()
    {
        if (!port) return;
        rk_rmem_free(mem);
        rk_fabric_port_free(port);
        port = nullptr;
        munmap(ram, size);
        close(fd);
    }
};

// Until the bridge's word for `node`, as `port` sees it, satisfies `pred` (or 2 s).
template <typename P> bool wait_word(RkFabricPort *port, unsigned node, P pred)
{
    const rkf_live_table *t = rk_fabric_port_liveness(port);
    for (int i = 0; i < 2000; i++) {
        if (pred(__atomic_load_n(&t->node[node], __ATOMIC_ACQUIRE))) return true;
        usleep(1000);
    }
    return false;
}
} // namespace

TEST(RemoteMemDirect, BridgePublishesEachNodesConnectionInTheLivenessTable)
{
    BridgeRig b;
    auto n0 = std::make_unique<FileNode>(b, 0);
    const rkf_live_table *t = rk_fabric_port_liveness(n0->port);
    EXPECT_EQ(t->magic, RKF_LIVE_MAGIC);
    EXPECT_EQ(t->node[0], (1ull << 1) | RKF_LIVE_UP); // first connection, up
    EXPECT_EQ(t->node[1], 0u);                        // never connected
    {
        FileNode n1(b, 1);
        EXPECT_TRUE(wait_word(n0->port, 1, [](uint64_t w) { return w == ((1ull << 1) | RKF_LIVE_UP); }));
    }
    EXPECT_TRUE(wait_word(n0->port, 1, [](uint64_t w) { return w == (1ull << 1); })); // gone
    FileNode again(b, 1);
    EXPECT_TRUE(wait_word(n0->port, 1, [](uint64_t w) { return w == ((2ull << 1) | RKF_LIVE_UP); }));
}

TEST(RemoteMemDirect, WritesAndReadsAPeersRamWithoutFramesAtBoundarySizes)
{
    BridgeRig b;
    FileNode n0(b, 0), n1(b, 1);
    unsigned seed = 0;
    for (size_t size : {1u, 2u, 4u, 8u, 63u, 64u, 65u, 191u, 192u, 193u, 4096u, 65537u}) {
        const uint64_t off = 4096 + 3 * seed; // unaligned for some sizes
        std::vector<unsigned char> before(n1.ram, n1.ram + kRam);
        const auto data = rmem_pattern(size, ++seed);
        ASSERT_EQ(rk_rmem_write(n0.mem, 1, kBase + off, data.data(), size), RK_RMEM_OK) << size;
        EXPECT_EQ(0, std::memcmp(n1.ram + off, data.data(), size)) << size;
        EXPECT_EQ(0, std::memcmp(n1.ram, before.data(), off)) << size;
        EXPECT_EQ(0, std::memcmp(n1.ram + off + size, before.data() + off + size, kRam - off - size)) << size;
        std::vector<unsigned char> back(size, 0xee);
        ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + off, back.data(), size), RK_RMEM_OK) << size;
        EXPECT_EQ(back, data) << size;
    }
    const auto s0 = n0.stats(), s1 = n1.stats();
    EXPECT_EQ(s0.frames, 0u); // no request went over the fabric
    EXPECT_EQ(s0.direct_reads, 12u);
    EXPECT_EQ(s0.direct_writes, 12u);
    EXPECT_EQ(s0.direct_maps, 1u);
    EXPECT_EQ(s0.direct_fallbacks, 0u);
    // The owner counts them as served (its tail page), as if its port had served them.
    EXPECT_EQ(s1.served_reads, 12u);
    EXPECT_EQ(s1.served_writes, 12u);
    EXPECT_EQ(s1.frames, 0u);
    EXPECT_EQ(s0.served_reads, 0u);
}

TEST(RemoteMemDirect, OutsideThePeersRamIsADecodeErrorAndTouchesNothing)
{
    BridgeRig b;
    FileNode n0(b, 0), n1(b, 1);
    std::vector<unsigned char> before(n1.ram, n1.ram + kRam);
    unsigned char buf[16] = {};
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase - 8, buf, 8), RK_RMEM_DECODE_ERR);
    EXPECT_EQ(rk_rmem_write(n0.mem, 1, kBase + kRam - 8, buf, 16), RK_RMEM_DECODE_ERR); // straddles the end
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase + kRam, buf, 1), RK_RMEM_DECODE_ERR);       // the tail page
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, ~0ull - 3, buf, 8), RK_RMEM_DECODE_ERR);          // wraps
    EXPECT_EQ(0, std::memcmp(n1.ram, before.data(), kRam));
    EXPECT_EQ(n0.stats().decode_errors, 4u);
    EXPECT_EQ(n1.stats().served_refused, 4u);
    EXPECT_EQ(n0.stats().frames, 0u);
}

TEST(RemoteMemDirect, DeadPeerIsUnreachableAndItsNewIncarnationIsRemapped)
{
    BridgeRig b;
    FileNode n0(b, 0);
    auto n1 = std::make_unique<FileNode>(b, 1);
    uint64_t v = 0;
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + 8, &v, 8), RK_RMEM_OK);
    n1->stop(); // QEMU gone: its file still exists and is still mapped by node 0
    ASSERT_TRUE(wait_word(n0.port, 1, [](uint64_t w) { return !(w & RKF_LIVE_UP); }));
    const uint64_t t0 = rackemu::fabric::now_ns();
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase + 8, &v, 8), RK_RMEM_UNREACHABLE);
    EXPECT_EQ(rk_rmem_write(n0.mem, 1, kBase + 8, &v, 8), RK_RMEM_UNREACHABLE);
    EXPECT_LT(rackemu::fabric::now_ns() - t0, 100000000ull); // at once, not after a timeout
    EXPECT_EQ(n0.stats().unreachable, 2u);
    EXPECT_EQ(n0.stats().timeouts, 0u);
    // A new QEMU takes id 1 with a new RAM file: node 0 maps the new one.
    n1 = std::make_unique<FileNode>(b, 1, true, kRam, 0x5a);
    ASSERT_TRUE(wait_word(n0.port, 1, [](uint64_t w) { return (w & RKF_LIVE_UP) != 0; }));
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + 8, &v, 8), RK_RMEM_OK);
    EXPECT_EQ(v, 0x5a5a5a5a5a5a5a5aull);
    EXPECT_EQ(n0.stats().direct_maps, 2u);
    EXPECT_EQ(n1->stats().served_reads, 1u); // the new incarnation's counters start at 0
}

TEST(RemoteMemDirect, LinkDownOfTheRequesterIsUnreachable)
{
    BridgeRig b;
    FileNode n0(b, 0), n1(b, 1);
    uint64_t v = 0;
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase, &v, 8), RK_RMEM_OK);
    b.stop(); // the bridge goes: every port's link goes down, the liveness table is unmapped
    for (int i = 0; i < 3000 && rk_fabric_port_is_up(n0.port); i++)
        usleep(1000);
    ASSERT_FALSE(rk_fabric_port_is_up(n0.port));
    EXPECT_EQ(rk_fabric_port_liveness(n0.port)->magic, 0u);
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase, &v, 8), RK_RMEM_UNREACHABLE);
}

TEST(RemoteMemDirect, PeerWithoutAPublishedFileIsReachedOverTheFabric)
{
    BridgeRig b;
    FileNode n0(b, 0), n1(b, 1, /*direct=*/false); // node 1's file has no tail page
    const auto data = rmem_pattern(300, 3);
    ASSERT_EQ(rk_rmem_write(n0.mem, 1, kBase + 100, data.data(), data.size()), RK_RMEM_OK);
    EXPECT_EQ(0, std::memcmp(n1.ram + 100, data.data(), data.size()));
    std::vector<unsigned char> back(300);
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + 100, back.data(), back.size()), RK_RMEM_OK);
    EXPECT_EQ(back, data);
    unsigned char c;
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase + kRam, &c, 1), RK_RMEM_DECODE_ERR); // refused by the owner
    const auto s0 = n0.stats();
    EXPECT_GT(s0.frames, 0u);
    EXPECT_EQ(s0.direct_reads + s0.direct_writes, 0u);
    EXPECT_GE(s0.direct_fallbacks, 1u);
    EXPECT_EQ(n1.stats().served_refused, 1u);
}

TEST(RemoteMemDirect, PeerFileOfAnotherSizeIsRefusedWithALogLineAndTheFabricServes)
{
    BridgeRig b;
    FileNode n0(b, 0);
    FileNode n1(b, 1, /*direct=*/false, 2 * kRam);
    // Node 1 publishes a tail after 2 MiB: not the size of node 0's RAM, so not mapped.
    ASSERT_EQ(ftruncate(n1.fd, off_t(2 * kRam + RK_RMEM_TAIL_SIZE)), 0);
    uint64_t v = 0;
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + 16, &v, 8), RK_RMEM_OK);
    uint64_t want;
    std::memcpy(&want, n1.ram + 16, 8);
    EXPECT_EQ(v, want);
    EXPECT_EQ(n0.stats().direct_reads, 0u);
    ASSERT_EQ(n0.logs.size(), 1u);
    EXPECT_NE(n0.logs[0].find("is not mapped directly"), std::string::npos) << n0.logs[0];
    // Refused once per incarnation: no new attempt, no new log line.
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + 16, &v, 8), RK_RMEM_OK);
    EXPECT_EQ(n0.logs.size(), 1u);
}

// Someone truncates a peer's RAM file under the mapping: the copy faults (SIGBUS), which the
// direct path catches. The requester lives and gets UNREACHABLE, as on the fabric the owner alone
// dies of its lost pages (tests/e2e/test_hardening_fabric.py).
TEST(RemoteMemDirect, TruncatedPeerFileFaultsIntoUnreachableNotACrash)
{
    BridgeRig b;
    FileNode n0(b, 0), n1(b, 1);
    uint64_t v = 0;
    ASSERT_EQ(rk_rmem_read(n0.mem, 1, kBase + 4096, &v, 8), RK_RMEM_OK);
    ASSERT_EQ(ftruncate(n1.fd, 0), 0);
    EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase + 4096, &v, 8), RK_RMEM_UNREACHABLE);
    EXPECT_EQ(rk_rmem_write(n0.mem, 1, kBase + 8192, &v, 8), RK_RMEM_UNREACHABLE); // not tried again
    std::thread other([&] { // another thread is guarded too, and the handler still works
        uint64_t x;
        EXPECT_EQ(rk_rmem_read(n0.mem, 1, kBase, &x, 8), RK_RMEM_UNREACHABLE);
    });
    other.join();
    const auto s0 = n0.stats();
    EXPECT_EQ(s0.direct_faults, 1u);
    EXPECT_EQ(s0.unreachable, 3u);
    EXPECT_EQ(s0.frames, 0u); // the owner (in this process) is not asked to touch its lost pages
    ASSERT_EQ(n0.logs.size(), 1u);
    EXPECT_NE(n0.logs[0].find("faulted under a direct access"), std::string::npos) << n0.logs[0];
    // Node 0's own RAM and other peers are unaffected.
    EXPECT_EQ(rk_rmem_read(n0.mem, 0, kBase, &v, 8), RK_RMEM_OK);
}

TEST(RemoteMemDirect, EnableRefusesAFileThatIsNotTheNodesRam)
{
    BridgeRig b;
    FileNode n0(b, 0, false);
    char err[256] = "";
    const rkf_live_table *live = rk_fabric_port_liveness(n0.port);
    int other = open((b.dir + "/other").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(other, 0);
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, b.dir.c_str(), other, live, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("is not this node's RAM"), std::string::npos) << err;
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, (b.dir + "/nowhere").c_str(), -1, live, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("cannot open"), std::string::npos) << err;
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, b.dir.c_str(), n0.fd, nullptr, err, sizeof err), -1);
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, "", n0.fd, live, err, sizeof err), -1);
    ASSERT_EQ(ftruncate(n0.fd, off_t(kRam + 8192)), 0); // neither the RAM nor RAM + tail
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, b.dir.c_str(), n0.fd, live, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("bytes"), std::string::npos) << err;
    ASSERT_EQ(ftruncate(n0.fd, off_t(kRam)), 0);
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, b.dir.c_str(), n0.fd, live, err, sizeof err), 0) << err;
    struct stat st {};
    ASSERT_EQ(fstat(n0.fd, &st), 0);
    EXPECT_EQ(uint64_t(st.st_size), kRam + RK_RMEM_TAIL_SIZE);
    EXPECT_EQ(rk_rmem_enable_direct(n0.mem, b.dir.c_str(), n0.fd, live, err, sizeof err), -1); // twice
    close(other);
}

// Aligned 8-byte accesses are single-copy atomic: a reader never sees a mix of two writers'
// values, whether the writers are peers on the direct path or the owner itself.
TEST(RemoteMemDirect, AlignedEightByteAccessesAreAtomicUnderConcurrentWriters)
{
    BridgeRig b;
    FileNode n0(b, 0), n1(b, 1), n2(b, 2);
    constexpr uint64_t kOff = 0x800;
    constexpr uint64_t kA = 0x1111111111111111ull, kB = 0x2222222222222222ull, kC = 0x3333333333333333ull;
    __atomic_store_n(reinterpret_cast<uint64_t *>(n1.ram + kOff), kA, __ATOMIC_RELAXED);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> torn{0}, reads{0};
    std::thread w0([&] { // node 0 writes B over the direct path
        while (!stop) {
            uint64_t v = kB;
            EXPECT_EQ(rk_rmem_write(n0.mem, 1, kBase + kOff, &v, 8), RK_RMEM_OK);
        }
    });
    std::thread w1([&] { // the owner's CPU writes A and C
        for (uint64_t i = 0; !stop; i++)
            __atomic_store_n(reinterpret_cast<uint64_t *>(n1.ram + kOff), (i & 1) ? kA : kC,
                             __ATOMIC_RELAXED);
    });
    std::thread r2([&] { // node 2 reads over the direct path
        while (!stop) {
            uint64_t v = 0;
            EXPECT_EQ(rk_rmem_read(n2.mem, 1, kBase + kOff, &v, 8), RK_RMEM_OK);
            if (v != kA && v != kB && v != kC) torn++;
            reads++;
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
    w0.join();
    w1.join();
    r2.join();
    EXPECT_EQ(torn.load(), 0u);
    EXPECT_GT(reads.load(), 1000u);
    EXPECT_EQ(n2.stats().frames, 0u);
}
