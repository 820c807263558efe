// SPDX-License-Identifier: MIT
// Direct node-to-node rings (docs/fabric.md, "Direct node-to-node rings"): a real bridge in a
// thread and real ports in this process. Frames go on the pair ring when nothing on the bridge's
// path must see them; a fault rule or a capture moves them to the bridge, with the stream's order
// kept across every switch; a dead peer's requests are answered NODE_GONE and its new QEMU gets a
// fresh pair; a peer that corrupts its ring takes down only that pair.
#include "bridge_rig.h"

#include <atomic>

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;
using namespace std::chrono_literals;

namespace {

// A poll lease of 1 ms instead of 10 us and a backstop of 20 ms instead of 1 (read once per
// process, before any port exists): the "poller present" tests below need the lease to outlast
// the scheduling delays of a loaded 2-core host between a poll and the send that relies on it, and
// the backstop to come well after the lease's end. Every other test here runs with them too,
// which the wake-up rules must not care about.
const bool kLongLease = [] {
    return setenv("RACKEMU_FABRIC_LEASE_US", "1000", 1) == 0 &&
           setenv("RACKEMU_FABRIC_BACKSTOP_US", "20000", 1) == 0;
}();

// Waits (up to 10 s) until `pred()` holds; polls every millisecond.
template <typename P> bool eventually(P pred, std::chrono::milliseconds d = 10s)
{
    const auto end = std::chrono::steady_clock::now() + d;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= end) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

rk_fabric_port_stats stats(RkFabricPort *p)
{
    rk_fabric_port_stats s{};
    rk_fabric_port_get_stats(p, &s);
    return s;
}

// A one-way message numbered `seq` (its tag) from the calling port to `dst`.
int send_msg(RkFabricPort *p, unsigned dst, uint64_t seq)
{
    rkf_frame_hdr h{};
    h.type = RKF_T_MSG;
    h.svc = RKF_SVC_UNIMEM_MBOX;
    h.op = 7;
    h.dst = uint16_t(dst);
    h.tag = seq;
    h.len = 8;
    return rk_fabric_port_send(p, &h, &seq);
}

// An echo request (the peer's port answers it itself).
int send_echo(RkFabricPort *p, unsigned dst, uint64_t tag)
{
    rkf_frame_hdr h = request(RKF_SVC_ECHO, uint16_t(dst), tag, 8);
    return rk_fabric_port_send(p, &h, &tag);
}

// Every message the receiver got, in order, checked as a stream 0..n-1 from one sender.
::testing::AssertionResult stream_is(Mailbox &m, uint64_t n, unsigned src)
{
    std::lock_guard lk(m.mu);
    if (m.requests.size() != n)
        return ::testing::AssertionFailure() << m.requests.size() << " messages, expected " << n;
    for (uint64_t i = 0; i < n; i++) {
        if (m.requests[i].tag != i || m.requests[i].src != src)
            return ::testing::AssertionFailure()
                   << "message " << i << " is #" << m.requests[i].tag << " from node " << m.requests[i].src;
    }
    return ::testing::AssertionSuccess();
}

// Both ports' state toward each other, the bridge's counters and the last message node 1 got:
// what a test that timed out waiting for a stream prints, so that the failure explains itself.
std::string pair_state(RkFabricPort *n0, RkFabricPort *n1, Mailbox &rx, const std::string &dir)
{
    char a[1024], b[1024];
    rk_fabric_port_describe_pair(n0, 1, a, sizeof a);
    rk_fabric_port_describe_pair(n1, 0, b, sizeof b);
    std::string last = "none";
    {
        std::lock_guard lk(rx.mu);
        if (!rx.requests.empty())
            last = "#" + std::to_string(rx.requests.back().tag) + " (" + std::to_string(rx.requests.size()) +
                   " received)";
    }
    return std::string("\n  ") + a + "\n  " + b + "\n  node 1's last message: " + last +
           "\n  bridge: " + control(dir, "stats") + "\n";
}

struct Two {
    BridgeRig rig;
    Mailbox rx1, echo0;
    RkFabricPort *n0 = nullptr, *n1 = nullptr;
    Two()
    {
        n0 = rig.port(0, nullptr, false);
        n1 = rig.port(1, nullptr, false);
        rk_fabric_port_register(n1, RKF_SVC_UNIMEM_MBOX, Mailbox::on_request, nullptr, nullptr, &rx1);
        rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &echo0);
        rk_fabric_port_start(n0);
        rk_fabric_port_start(n1);
    }
    ~Two()
    {
        rk_fabric_port_free(n0);
        if (n1) rk_fabric_port_free(n1);
    }
};

} // namespace

TEST(FabricPairs, FramesGoDirectWhenNoRuleApplies)
{
    Two t;
    ASSERT_TRUE(eventually(
        [&] { return rk_fabric_port_pair_active(t.n0, 1) && rk_fabric_port_pair_active(t.n1, 0); }));
    const uint64_t n = 3000; // more than a ring holds: the sender waits for room on the pair ring
    for (uint64_t i = 0; i < n; i++)
        ASSERT_EQ(send_msg(t.n0, 1, i), 0);
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() >= n; }));
    EXPECT_TRUE(stream_is(t.rx1, n, 0));
    // A request and its reply on the pair; the bridge tracks nothing between paired nodes.
    ASSERT_EQ(send_echo(t.n0, 1, 77), 0);
    ASSERT_TRUE(t.echo0.wait([&] { return t.echo0.replies.size() == 1; }));
    EXPECT_EQ(t.echo0.replies[0].tag, 77u);
    EXPECT_EQ(t.echo0.replies[0].status, RKF_ST_OK);
    // Idle means asleep: the port threads sleep on their rings (futex_waitv over the bridge ring
    // and the pair ring) and nothing wakes them.
    std::this_thread::sleep_for(50ms);
    const uint64_t asleep = stats(t.n0).sleeps + stats(t.n1).sleeps;
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(stats(t.n0).sleeps + stats(t.n1).sleeps, asleep);
    const auto s0 = stats(t.n0), s1 = stats(t.n1);
    EXPECT_EQ(s0.pair_frames_tx, n + 1);
    EXPECT_EQ(s1.pair_frames_rx, n + 1);
    EXPECT_EQ(s1.pair_frames_tx, 1u); // the echo reply
    EXPECT_EQ(s0.pair_markers, 1u);   // the START marker, through the bridge
    const std::string st = control(t.rig.dir, "stats");
    EXPECT_EQ(stat_of(st, "pairs"), 1u) << st;
    EXPECT_EQ(stat_of(st, "pairs_direct"), 1u) << st;
    EXPECT_EQ(stat_of(st, "outstanding"), 0u) << st;
    EXPECT_NE(st.find("\"node\":0,"), std::string::npos);
    EXPECT_NE(st.find("\"pair_frames_out\":" + std::to_string(n + 1)), std::string::npos) << st;
    // Only the START markers crossed the bridge.
    EXPECT_NE(st.find("\"frames_in\":1,"), std::string::npos) << st;
    EXPECT_NE(st.find("\"pairs_enabled\":true"), std::string::npos);
}

TEST(FabricPairs, AFaultRuleActsOnEveryFrameSentAfterItWasAdded)
{
    Two t;
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(t.n0, 1) != 0; }));
    ASSERT_NE(control(t.rig.dir, "fault add drop svc=mbox between=0,1\n").find("\"ok\":true"),
              std::string::npos);
    EXPECT_EQ(rk_fabric_port_pair_active(t.n0, 1), 0);
    for (uint64_t i = 0; i < 100; i++)
        ASSERT_EQ(send_msg(t.n0, 1, i), 0);
    // The echo goes after them, through the bridge: once its reply is here, node 1 has seen
    // everything node 0 sent before it that the rule let through (nothing).
    ASSERT_EQ(send_echo(t.n0, 1, 5), 0);
    ASSERT_TRUE(t.echo0.wait([&] { return t.echo0.replies.size() == 1; }));
    {
        std::lock_guard lk(t.rx1.mu);
        EXPECT_EQ(t.rx1.requests.size(), 0u);
    }
    const std::string list = control(t.rig.dir, "fault list\n");
    EXPECT_NE(list.find("\"hits\":100"), std::string::npos) << list;
    // Removed: direct again, and the stream flows.
    control(t.rig.dir, "fault del all\n");
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(t.n0, 1) != 0; }));
    for (uint64_t i = 0; i < 10; i++)
        ASSERT_EQ(send_msg(t.n0, 1, i), 0);
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() >= 10; }));
    EXPECT_TRUE(stream_is(t.rx1, 10, 0));
}

// rkf_live_table.eth_watched: the nodes whose Ethernet frames the bridge must see (a capture of
// them, a fault rule that could match one); the RNIC's direct READs take the wire while either
// end's bit is set (docs/rnic.md "Direct path"). Set before the control command answers.
TEST(FabricPairs, TheLivenessTableNamesTheNodesWhoseEthernetFramesTheBridgeMustSee)
{
    Two t;
    const rkf_live_table *live = rk_fabric_port_liveness(t.n0);
    ASSERT_NE(live, nullptr);
    auto watched = [&] { return __atomic_load_n(&live->eth_watched, __ATOMIC_ACQUIRE); };
    EXPECT_EQ(watched(), 0u);
    // service frames only: Ethernet is not concerned
    ASSERT_NE(control(t.rig.dir, "fault add drop svc=mbox between=0,1\n").find("\"ok\":true"),
              std::string::npos);
    EXPECT_EQ(watched(), 0u);
    ASSERT_NE(control(t.rig.dir, "fault add delay us=5 svc=eth between=0,1\n").find("\"ok\":true"),
              std::string::npos);
    EXPECT_EQ(watched(), 0x3u);
    ASSERT_NE(control(t.rig.dir, "fault add drop kind=arp dst=5\n").find("\"ok\":true"), std::string::npos);
    EXPECT_EQ(watched(), ~0ull) << "frames to node 5 come from every node";
    control(t.rig.dir, "fault del all\n");
    EXPECT_EQ(watched(), 0u);
    const std::string pcap = t.rig.dir + "/eth.pcapng";
    ASSERT_NE(control(t.rig.dir, "capture start path=" + pcap + " nodes=1 what=eth\n").find("\"ok\":true"),
              std::string::npos);
    EXPECT_EQ(watched(), 0x2u);
    control(t.rig.dir, "capture stop\n");
    EXPECT_EQ(watched(), 0u);
    ASSERT_NE(
        control(t.rig.dir, "capture start path=" + pcap + " nodes=1 what=rackemu\n").find("\"ok\":true"),
        std::string::npos);
    EXPECT_EQ(watched(), 0u) << "a capture of service frames only";
    control(t.rig.dir, "capture stop\n");
}

// Rules given when the bridge starts (--fault) count from the first frame, pairs or not.
TEST(FabricPairs, RulesGivenAtStartSetTheEthernetWatchedBits)
{
    Bridge::Options o;
    o.faults = {"drop svc=eth kind=roce between=0,1"};
    o.pairs = false;
    BridgeRig rig(o);
    RkFabricPort *n0 = rig.port(0, nullptr, false);
    rk_fabric_port_start(n0);
    const rkf_live_table *live = rk_fabric_port_liveness(n0);
    ASSERT_TRUE(
        eventually([&] { return __atomic_load_n(&live->magic, __ATOMIC_ACQUIRE) == RKF_LIVE_MAGIC; }));
    EXPECT_EQ(__atomic_load_n(&live->eth_watched, __ATOMIC_ACQUIRE), 0x3u);
    rk_fabric_port_free(n0);
}

// A numbered stream while the pair switches between its ring and the bridge hundreds of times
// (fault rules that concern the pair but not the stream's service, and a capture of node 1):
// every message arrives once, in order.
TEST(FabricPairs, OrderIsKeptAcrossManySwitches)
{
    Two t;
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(t.n0, 1) != 0; }));
    // The sender runs until the switches are done (and at least 1000 messages), pausing now and
    // then so that the stream spans all of them.
    // The sender keeps at most kWindow messages ahead of the receiver: through the bridge nothing
    // holds it back (the bridge queues up to 65536 frames per destination, then drops one-way
    // messages, `congested`), and the stream must not depend on how fast node 1's thread runs.
    constexpr uint64_t kWindow = 8192;
    std::atomic<bool> done{false}, stalled{false};
    std::atomic<uint64_t> sent{0};
    std::thread sender([&] {
        for (uint64_t i = 0; !done.load() || i < 1000; i++) {
            if (i % 64 == 0 && !t.rx1.wait([&] { return i - t.rx1.requests.size() <= kWindow; }, 30s)) {
                stalled = true;
                break;
            }
            int rc;
            while ((rc = send_msg(t.n0, 1, i)) == -EAGAIN) {
            }
            if (rc != 0) {
                ADD_FAILURE() << "send #" << i << " failed: " << rc;
                stalled = true;
                break;
            }
            sent = i + 1;
            if (i % 64 == 63) std::this_thread::sleep_for(20us);
        }
    });
    const std::string cap = t.rig.dir + "/switch.pcapng";
    const unsigned rounds = 200;
    for (unsigned r = 0; r < rounds && !stalled.load(); r++) {
        if (r % 2) {
            control(t.rig.dir, "fault add drop svc=echo between=0,1\n");
            control(t.rig.dir, "fault del all\n");
        } else {
            control(t.rig.dir, "capture start path=" + cap + " nodes=1 what=rackemu\n");
            control(t.rig.dir, "capture stop\n");
        }
    }
    done = true;
    sender.join();
    const uint64_t n = sent.load();
    ASSERT_FALSE(stalled.load()) << "node 1 stopped receiving after " << n << " messages sent"
                                 << pair_state(t.n0, t.n1, t.rx1, t.rig.dir);
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() >= n; }, 30s))
        << n << " messages sent" << pair_state(t.n0, t.n1, t.rx1, t.rig.dir);
    EXPECT_TRUE(stream_is(t.rx1, n, 0));
    const auto s0 = stats(t.n0);
    const std::string st = control(t.rig.dir, "stats");
    EXPECT_GE(stat_of(st, "pair_switches"), 2u * rounds) << st;
    EXPECT_EQ(stat_of(st, "congested"), 0u) << st;
    // A sender descheduled for 10 ms between reading the mode and publishing (a loaded host, a
    // sanitizer) makes the bridge stop waiting for it: counted, not an error of the order.
    if (stat_of(st, "pair_ack_timeouts"))
        printf("pair_ack_timeouts: %llu\n", (unsigned long long)stat_of(st, "pair_ack_timeouts"));
    EXPECT_EQ(s0.frames_tx, n);
    EXPECT_GT(s0.pair_markers, 0u);
    EXPECT_GT(s0.pair_frames_tx, 0u);
    EXPECT_LT(s0.pair_frames_tx, n); // some went through the bridge
    printf("%u rounds of two switches while %llu messages were sent: %llu on the pair ring, %llu markers\n",
           rounds, (unsigned long long)n, (unsigned long long)s0.pair_frames_tx,
           (unsigned long long)s0.pair_markers);
}

// Node 1 dies with requests of node 0 unanswered (sent on the pair, so the bridge does not track
// them): node 0's port answers them NODE_GONE. A new node 1 gets a fresh pair.
TEST(FabricPairs, APeerThatDiesAnswersNodeGoneAndItsSuccessorGetsAFreshPair)
{
    BridgeRig rig;
    Mailbox got0, got1;
    RkFabricPort *n0 = rig.port(0, nullptr, false);
    RkFabricPort *n1 = rig.port(1, nullptr, false);
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &got0);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Mailbox::on_request, nullptr, nullptr, &got1); // never answers
    rk_fabric_port_start(n0);
    rk_fabric_port_start(n1);
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(n0, 1) != 0; }));
    for (uint64_t tag = 1; tag <= 5; tag++) {
        rkf_frame_hdr h = request(RKF_SVC_MEM, 1, tag, 0);
        ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    }
    ASSERT_TRUE(got1.wait([&] { return got1.requests.size() == 5; }));
    EXPECT_EQ(stats(n0).pair_frames_tx, 5u);
    rk_fabric_port_free(n1);
    ASSERT_TRUE(got0.wait([&] { return got0.replies.size() == 5; }));
    for (uint64_t i = 0; i < 5; i++) {
        EXPECT_EQ(got0.replies[i].status, RKF_ST_NODE_GONE);
        EXPECT_EQ(got0.replies[i].src, 1u);
        EXPECT_EQ(got0.replies[i].svc, RKF_SVC_MEM);
    }
    EXPECT_EQ(stats(n0).pair_gone_replies, 5u);
    EXPECT_EQ(rk_fabric_port_pair_active(n0, 1), 0);
    // No peer: the bridge answers.
    rkf_frame_hdr h = request(RKF_SVC_MEM, 1, 99, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    ASSERT_TRUE(got0.wait([&] { return got0.replies.size() == 6; }));
    EXPECT_EQ(got0.replies[5].status, RKF_ST_NOROUTE);
    // The same id again: a fresh pair, and an echo through it.
    ASSERT_TRUE(eventually([&] { return stat_of(control(rig.dir, "stats"), "pairs") == 0; }));
    n1 = rig.port(1);
    ASSERT_NE(n1, nullptr);
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(n0, 1) != 0; }));
    Mailbox echo;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &echo);
    ASSERT_EQ(send_echo(n0, 1, 3), 0);
    ASSERT_TRUE(echo.wait([&] { return echo.replies.size() == 1; }));
    EXPECT_EQ(echo.replies[0].status, RKF_ST_OK);
    const auto s = stats(n0);
    EXPECT_EQ(s.pairs_up, 2u);
    EXPECT_EQ(s.pairs_down, 1u);
    EXPECT_GE(s.pair_frames_tx, 6u);
    const std::string st = control(rig.dir, "stats");
    EXPECT_EQ(stat_of(st, "pairs_made"), 2u) << st;
    EXPECT_EQ(stat_of(st, "pairs_torn"), 1u) << st;
    rk_fabric_port_free(n1);
    rk_fabric_port_free(n0);
}

namespace {
// A fake node `id` speaking the handshake by hand with RKF_CAP_PAIR: it gets the pair memory
// with every node that announces the capability and writes what it likes into its rings.
int connect_pair_fake(const std::string &dir, unsigned id, PortShm **shm, Doorbell **bell)
{
    int s = unix_connect(dir + "/fabric.sock", SOCK_SEQPACKET);
    rkf_hello h = make_hello(id, 8, "fake pair node");
    h.caps = RKF_CAP_PAIR;
    if (s < 0 || send(s, &h, sizeof h, MSG_NOSIGNAL) != sizeof h) return -1;
    rkf_welcome w{};
    int fds[2];
    if (recv_welcome(s, w, fds) != sizeof w || w.status != RKF_WELCOME_OK) return -1;
    *shm =
        static_cast<PortShm *>(mmap(nullptr, sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
    *bell = static_cast<Doorbell *>(
        mmap(nullptr, sizeof(Doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0));
    close(fds[0]);
    close(fds[1]);
    return s;
}

// The next pair message on the fake's socket, with its descriptor (or -1).
bool recv_pair(int s, rkf_pair_msg &m, int &fd)
{
    fd = -1;
    pollfd pfd{s, POLLIN, 0};
    if (poll(&pfd, 1, 5000) <= 0) return false;
    iovec iov{&m, sizeof m};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    if (recvmsg(s, &mh, MSG_CMSG_CLOEXEC) != sizeof m) return false;
    for (cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return true;
}
} // namespace

// A peer's ring is untrusted input: bad frames are dropped and counted, impossible indices take
// down that pair only (node 0 keeps its link, its pair with node 1, and hears node 2 through the
// bridge).
TEST(FabricPairs, ACorruptPairRingTakesDownOnlyThatPair)
{
    Two t;
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(t.n0, 1) != 0; }));
    Mailbox rx0;
    rk_fabric_port_register(t.n0, RKF_SVC_UNIMEM_MBOX, Mailbox::on_request, nullptr, nullptr, &rx0);
    PortShm *shm = nullptr;
    Doorbell *bell = nullptr;
    const int s = connect_pair_fake(t.rig.dir, 2, &shm, &bell);
    ASSERT_GE(s, 0);
    // Pairs with node 0 and node 1 (both announce the capability), in the order they were made.
    PairShm *pair = nullptr;
    for (int k = 0; k < 2; k++) {
        rkf_pair_msg m{};
        int fd;
        ASSERT_TRUE(recv_pair(s, m, fd));
        ASSERT_EQ(m.kind, RKF_PAIR_UP);
        ASSERT_GE(fd, 0);
        void *mem = mmap(nullptr, sizeof(PairShm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        ASSERT_NE(mem, MAP_FAILED);
        if (m.peer == 0) {
            pair = static_cast<PairShm *>(mem);
        } else {
            munmap(mem, sizeof(PairShm));
        }
    }
    ASSERT_NE(pair, nullptr);
    ASSERT_EQ(pair->a, 0u);
    ASSERT_EQ(pair->b, 2u);
    // Until node 2 says it mapped the pair, the pair stays on the bridge's path: node 0 sends to
    // it through the bridge (a START now would reach a node that may not read the ring yet).
    EXPECT_EQ(pair->mode.load(), RKF_PAIR_MODE_BRIDGE);
    ASSERT_EQ(send_msg(t.n0, 2, 42), 0);
    {
        rkf_frame_hdr got{};
        unsigned char buf[RKF_SLOT_SIZE];
        ASSERT_TRUE(eventually([&] { return ring_pop(shm->to_node, got, buf) == PopResult::Ok; }));
        EXPECT_EQ(got.tag, 42u);
        EXPECT_EQ(got.src, 0u);
        EXPECT_TRUE(ring_empty(pair->ring[0]));
    }
    // As a port does once it mapped a pair: then the bridge lets it go direct (node 0 said so too).
    rkf_pair_msg ready{};
    ready.magic = RKF_PAIR_MAGIC;
    ready.kind = RKF_PAIR_READY;
    ready.peer = 0;
    ready.gen = pair->gen;
    ASSERT_EQ(send(s, &ready, sizeof ready, MSG_NOSIGNAL), ssize_t(sizeof ready));
    ASSERT_TRUE(eventually([&] { return rk_fabric_port_pair_active(t.n0, 2) != 0; }));
    Ring &to0 = pair->ring[1]; // b -> a
    static const unsigned char none[RKF_MAX_PAYLOAD] = {};
    auto bridge_send = [&](const rkf_frame_hdr &h, const void *payload) {
        ASSERT_TRUE(ring_push(shm->to_bridge, h, payload));
        wake_router(*shm, *bell);
    };
    auto msg = [&](uint64_t seq, uint16_t src) {
        rkf_frame_hdr h{};
        h.magic = RKF_FRAME_MAGIC;
        h.type = RKF_T_MSG;
        h.svc = RKF_SVC_UNIMEM_MBOX;
        h.src = src;
        h.dst = 0;
        h.tag = seq;
        return h;
    };
    // START through the bridge, then on the ring: a frame claiming another sender (dropped), a
    // good one, an Ethernet fragment (dropped), a good one.
    rkf_frame_hdr start{};
    start.magic = RKF_FRAME_MAGIC;
    start.type = RKF_T_MSG;
    start.svc = RKF_SVC_BRIDGE;
    start.op = RKF_OP_PAIR_START;
    start.src = 2;
    start.dst = 0;
    start.tag = pair->gen;
    rkf_frame_hdr eth = msg(9, 2);
    eth.svc = RKF_SVC_ETH;
    ASSERT_TRUE(ring_push(to0, msg(100, 5), none));
    ASSERT_TRUE(ring_push(to0, msg(0, 2), none));
    ASSERT_TRUE(ring_push(to0, eth, none));
    ASSERT_TRUE(ring_push(to0, msg(1, 2), none));
    bridge_send(start, none);
    ASSERT_TRUE(rx0.wait([&] { return rx0.requests.size() == 2; }));
    {
        std::lock_guard lk(rx0.mu);
        EXPECT_EQ(rx0.requests[0].tag, 0u);
        EXPECT_EQ(rx0.requests[1].tag, 1u);
    }
    EXPECT_EQ(stats(t.n0).pair_bad, 2u);
    // Impossible indices: the pair goes (node 0 asks the bridge, which tells both).
    to0.ctl.head.store(to0.ctl.tail.load() + 5 * RKF_RING_SLOTS, std::memory_order_release);
    futex_wake_always(&to0.ctl.sleeping);
    ASSERT_TRUE(eventually([&] { return stat_of(control(t.rig.dir, "stats"), "pair_broken") == 1; }));
    rkf_pair_msg down{};
    int fd;
    ASSERT_TRUE(recv_pair(s, down, fd));
    EXPECT_EQ(down.kind, RKF_PAIR_DOWN);
    EXPECT_EQ(down.peer, 0u);
    EXPECT_EQ(down.reason, RKF_PAIR_BROKEN);
    EXPECT_EQ(pair->mode.load(), RKF_PAIR_MODE_GONE);
    // Node 2 through the bridge still reaches node 0; node 0's link and its pair with node 1 live.
    bridge_send(msg(2, 2), none);
    ASSERT_TRUE(rx0.wait([&] { return rx0.requests.size() == 3; }));
    {
        std::lock_guard lk(rx0.mu);
        EXPECT_EQ(rx0.requests[2].tag, 2u);
    }
    EXPECT_EQ(rk_fabric_port_is_up(t.n0), 1);
    EXPECT_EQ(rk_fabric_port_pair_active(t.n0, 1), 1);
    EXPECT_EQ(rk_fabric_port_pair_active(t.n0, 2), 0);
    EXPECT_EQ(stats(t.n0).link_downs, 0u);
    ASSERT_EQ(send_msg(t.n0, 1, 0), 0);
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() == 1; }));
    munmap(pair, sizeof(PairShm));
    munmap(shm, sizeof(PortShm));
    munmap(bell, sizeof(Doorbell));
    close(s);
}

// Off: no pairs, every frame through the bridge (RACKEMU_FABRIC_PAIRS=0 or --no-pairs).
TEST(FabricPairs, TheBridgeOptionTurnsThemOff)
{
    Bridge::Options o;
    o.pairs = false;
    BridgeRig rig(o);
    Mailbox rx1;
    RkFabricPort *n0 = rig.port(0);
    RkFabricPort *n1 = rig.port(1, nullptr, false);
    rk_fabric_port_register(n1, RKF_SVC_UNIMEM_MBOX, Mailbox::on_request, nullptr, nullptr, &rx1);
    rk_fabric_port_start(n1);
    for (uint64_t i = 0; i < 100; i++)
        ASSERT_EQ(send_msg(n0, 1, i), 0);
    ASSERT_TRUE(rx1.wait([&] { return rx1.requests.size() >= 100; }));
    EXPECT_TRUE(stream_is(rx1, 100, 0));
    EXPECT_EQ(stats(n0).pair_frames_tx, 0u);
    EXPECT_EQ(rk_fabric_port_pair_active(n0, 1), 0);
    const std::string st = control(rig.dir, "stats");
    EXPECT_EQ(stat_of(st, "pairs"), 0u) << st;
    EXPECT_NE(st.find("\"pairs_enabled\":false"), std::string::npos) << st;
    rk_fabric_port_free(n1);
    rk_fabric_port_free(n0);
}

// Between the nodes of a pair the bridge matches no replies, so the requester's port does: a
// reply from a paired node that answers nothing this port asked it (a forgery by a third node,
// a duplicate) is dropped and counted; the genuine one arrives once.
TEST(FabricPairs, ForgedAndDuplicateRepliesFromPairedNodesAreDroppedByTheRequester)
{
    BridgeRig rig;
    RkFabricPort *n0 = rig.port(0, nullptr, false), *n1 = rig.port(1, nullptr, false), *n2 = rig.port(2);
    Mailbox m0, m1;
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &m0);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Mailbox::on_request, nullptr, nullptr, &m1);
    rk_fabric_port_start(n0);
    rk_fabric_port_start(n1);
    ASSERT_TRUE(eventually([&] {
        return rk_fabric_port_pair_active(n0, 1) && rk_fabric_port_pair_active(n0, 2) &&
               rk_fabric_port_pair_active(n2, 0);
    }));
    rkf_frame_hdr req = request(RKF_SVC_MEM, 1, 77, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &req, nullptr), 0);
    ASSERT_TRUE(m1.wait([&] { return !m1.requests.empty(); }));
    // Node 2 answers node 0's request to node 1, on its own pair ring with node 0, and a request
    // never made; then, with a fault rule moving the pairs to the bridge, again.
    const uint64_t forged = 0x4141414141414141ull;
    rkf_frame_hdr r = reply(RKF_SVC_MEM, 0, 77, 8);
    ASSERT_EQ(rk_fabric_port_send(n2, &r, &forged), 0);
    r.tag = 78;
    ASSERT_EQ(rk_fabric_port_send(n2, &r, &forged), 0);
    ASSERT_NE(control(rig.dir, "fault add delay us=1 svc=mem node=2\n").find("\"ok\""), std::string::npos);
    r.tag = 77;
    ASSERT_EQ(rk_fabric_port_send(n2, &r, &forged), 0);
    ASSERT_TRUE(eventually([&] { return stats(n0).stray_replies == 3; }));
    // The genuine answer and a duplicate.
    const uint64_t real = 0x1122334455667788ull;
    ASSERT_EQ(rk_fabric_port_reply(n1, &m1.requests[0], RKF_ST_OK, &real, 8), 0);
    ASSERT_EQ(rk_fabric_port_reply(n1, &m1.requests[0], RKF_ST_OK, &real, 8), 0);
    ASSERT_TRUE(eventually([&] { return stats(n0).stray_replies == 4; }));
    {
        std::lock_guard lk(m0.mu);
        EXPECT_EQ(m0.replies.size(), 1u);
        EXPECT_EQ(m0.replies[0].src, 1u);
        uint64_t got;
        std::memcpy(&got, m0.payloads[0].data(), 8);
        EXPECT_EQ(got, real);
    }
    for (auto *p : {n0, n1, n2})
        rk_fabric_port_free(p);
}

// Both nodes flood each other with requests that their port threads answer (echo): each port
// thread, answering from inside a callback, used to block on the other's full ring while neither
// read its own (100 ms, then the reply was lost: 25-42 s and 250-450 lost replies for 3000 each
// way). A reply that finds the ring full now goes through the bridge (docs/fabric.md, invariant
// 8): every request is answered, once.
TEST(FabricPairs, PortThreadsAnsweringEachOthersFloodLoseNothing)
{
    BridgeRig rig;
    Mailbox e0, e1;
    RkFabricPort *n0 = rig.port(0, nullptr, false), *n1 = rig.port(1, nullptr, false);
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &e0);
    rk_fabric_port_register(n1, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &e1);
    rk_fabric_port_start(n0);
    rk_fabric_port_start(n1);
    ASSERT_TRUE(
        eventually([&] { return rk_fabric_port_pair_active(n0, 1) && rk_fabric_port_pair_active(n1, 0); }));
    const uint64_t n = 3000; // about three rings' worth each way
    auto flood = [&](RkFabricPort *p, unsigned dst) {
        for (uint64_t i = 0; i < n; i++) {
            int rc;
            while ((rc = send_echo(p, dst, i)) == -EAGAIN) {
            }
            if (rc) ADD_FAILURE() << "send #" << i << " to node " << dst << ": " << rc;
        }
    };
    std::thread a(flood, n0, 1), b(flood, n1, 0);
    a.join();
    b.join();
    EXPECT_TRUE(e0.wait([&] { return e0.replies.size() >= n; }, 30s)) << e0.nreplies();
    EXPECT_TRUE(e1.wait([&] { return e1.replies.size() >= n; }, 30s)) << e1.nreplies();
    for (Mailbox *m : {&e0, &e1}) {
        std::lock_guard lk(m->mu);
        EXPECT_EQ(m->replies.size(), n);
        std::vector<bool> seen(n);
        for (const auto &r : m->replies) {
            ASSERT_LT(r.tag, n);
            EXPECT_FALSE(seen[r.tag]) << "reply " << r.tag << " twice";
            seen[r.tag] = true;
            EXPECT_EQ(r.status, RKF_ST_OK);
        }
    }
    const auto s0 = stats(n0), s1 = stats(n1);
    printf(
        "%llu/%llu frames of the two port threads on the pair rings, send failures %llu/%llu, markers %llu/%llu\n",
        (unsigned long long)s0.pair_frames_tx, (unsigned long long)s1.pair_frames_tx,
        (unsigned long long)s0.send_failures, (unsigned long long)s1.send_failures,
        (unsigned long long)s0.pair_markers, (unsigned long long)s1.pair_markers);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

// "Poller present" on pair rings (docs/fabric.md): while a thread of node 1 polls (a vCPU reading
// a device register), node 0 skips the wake-ups of node 1's sleeping port thread and the poller
// takes the frames; a skipped wake-up is followed up by node 0 when it keeps running, and by node
// 1's backstop timer when nobody does. In every case each frame arrives, in order. The test's own
// thread is the poller (rk_fabric_port_poll: what a vCPU does at a device register read), so it
// decides when polling stops.
namespace {
// Polls `p` for `d` (a vCPU spinning on a register), or until `stop()`.
template <typename P> void poll_for(RkFabricPort *p, std::chrono::microseconds d, P stop)
{
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end && !stop())
        rk_fabric_port_poll(p);
}
void poll_for(RkFabricPort *p, std::chrono::microseconds d)
{
    poll_for(p, d, [] { return false; });
}
} // namespace

TEST(FabricPairs, APollingReceiverSparesTheSendersWakeUps)
{
    ASSERT_TRUE(kLongLease);
    Two t;
    ASSERT_TRUE(eventually(
        [&] { return rk_fabric_port_pair_active(t.n0, 1) && rk_fabric_port_pair_active(t.n1, 0); }));
    ASSERT_EQ(send_msg(t.n0, 1, 0), 0); // the START marker: from now on the ring
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() == 1; }));
    const auto b1 = stats(t.n1);
    // Node 1 polls; between frames its port thread goes to sleep (timed: the lease is held), and
    // node 0 finds it so.
    uint64_t n = 1;
    for (; n < 2000 && stats(t.n0).pair_wakes_skipped < 20; n++) {
        poll_for(t.n1, 300us);
        ASSERT_EQ(send_msg(t.n0, 1, n), 0);
        poll_for(t.n1, 5000us, [&] {
            std::lock_guard lk(t.rx1.mu);
            return t.rx1.requests.size() > n;
        });
    }
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() >= n; }))
        << pair_state(t.n0, t.n1, t.rx1, t.rig.dir);
    EXPECT_TRUE(stream_is(t.rx1, n, 0));
    const auto s0 = stats(t.n0), s1 = stats(t.n1);
    EXPECT_GE(s0.pair_wakes_skipped, 20u) << n << " frames, node 1 slept " << s1.sleeps - b1.sleeps
                                          << " times" << pair_state(t.n0, t.n1, t.rx1, t.rig.dir);
    EXPECT_GE(s1.polled_frames - b1.polled_frames, s0.pair_wakes_skipped); // each skipped one: the poller's
    // The bridge reports the node's counters.
    const std::string st = control(t.rig.dir, "stats");
    EXPECT_EQ(stat_of(st, "pair_wakes_skipped"), s0.pair_wakes_skipped) << st;
}

TEST(FabricPairs, ASkippedWakeUpIsFollowedUpByTheSenderOrTheBackstop)
{
    ASSERT_TRUE(kLongLease);
    Two t;
    ASSERT_TRUE(eventually(
        [&] { return rk_fabric_port_pair_active(t.n0, 1) && rk_fabric_port_pair_active(t.n1, 0); }));
    ASSERT_EQ(send_msg(t.n0, 1, 0), 0);
    ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() == 1; }));
    uint64_t n = 1;
    // Node 1 polls, node 0 sends, node 1 stops polling for good: node 0's wake-up was skipped and
    // nobody takes the frame. With `sender_polls` node 0 keeps running (a vCPU waiting for its
    // reply) and wakes node 1's port thread once the lease has lapsed; else nobody runs on node 0
    // and node 1's port thread takes the frame at its backstop timer.
    for (const bool sender_polls : {true, false}) {
        bool seen = false;
        for (int trial = 0; trial < 50 && !seen; trial++) {
            // A frame while node 1 polls: its port thread, woken for it or not, then goes to sleep
            // with the lease held (timed), so the next frame's wake-up can be skipped.
            poll_for(t.n1, 100us);
            ASSERT_EQ(send_msg(t.n0, 1, n++), 0);
            poll_for(t.n1, 3000us);
            const auto b0 = stats(t.n0), b1 = stats(t.n1);
            rk_fabric_port_poll(t.n1); // the lease is fresh, and the last
            ASSERT_EQ(send_msg(t.n0, 1, n++), 0);
            if (sender_polls) poll_for(t.n0, 5000us);
            ASSERT_TRUE(t.rx1.wait([&] { return t.rx1.requests.size() >= n; }))
                << pair_state(t.n0, t.n1, t.rx1, t.rig.dir);
            const auto a0 = stats(t.n0), a1 = stats(t.n1);
            if (a0.pair_wakes_skipped == b0.pair_wakes_skipped) continue; // woken at once: try again
            // Node 1's port thread may have slept since long before (a skipped frame before this
            // one): its backstop timer can then come before the lease's end. Try again.
            if (sender_polls && a1.pair_backstop_wakes != b1.pair_backstop_wakes) continue;
            seen = true;
            EXPECT_EQ(a0.pair_follow_up_wakes - b0.pair_follow_up_wakes, sender_polls ? 1u : 0u);
            EXPECT_EQ(a1.pair_backstop_wakes - b1.pair_backstop_wakes, sender_polls ? 0u : 1u);
        }
        EXPECT_TRUE(seen) << (sender_polls ? "follow-up" : "backstop")
                          << ": no trial had its wake-up skipped";
    }
    EXPECT_TRUE(stream_is(t.rx1, n, 0));
}
