// Regression tests of the fabric's hardening (trust-model.md findings 6-9): a peer that truncates
// the shared memory it was handed, forged replies, silent connections and requests nobody
// answers, names that are not UTF-8. Each test failed before its fix (see docs/fabric.md,
// "Bad input" and "Error bounds").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>

#include "bridge_rig.h"
#include "rk_remote_mem.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;
using namespace std::chrono_literals;

namespace {
// Run `fn` in a child process: returns "" if it exited 0, else what went wrong. A crash of the
// bridge (SIGBUS) would otherwise take the whole test binary down.
template <typename F> std::string in_child(F fn)
{
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        _exit(fn());
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) return std::string("killed by signal ") + strsignal(WTERMSIG(st));
    if (WEXITSTATUS(st)) return "exited with code " + std::to_string(WEXITSTATUS(st));
    return "";
}

bool echo_works(RkFabricPort *from, unsigned to)
{
    Mailbox m;
    rk_fabric_port_register(from, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    rkf_frame_hdr h = request(RKF_SVC_ECHO, uint16_t(to), 4242, 0);
    const bool ok = rk_fabric_port_send(from, &h, nullptr) == 0 &&
                    m.wait([&] { return !m.replies.empty(); }, 5s) && m.replies[0].status == RKF_ST_OK;
    rk_fabric_port_register(from, RKF_SVC_ECHO, nullptr, nullptr, nullptr, nullptr);
    return ok;
}

} // namespace

// Finding 6: a peer truncated the port memory or the doorbell it was handed and the bridge
// (and every node that rings the doorbell) died of SIGBUS.
TEST(FabricHardening, APeerCannotTruncateItsPortMemoryOrTheDoorbell)
{
    const std::string what = in_child([] {
        BridgeRig b;
        RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
        if (!n0 || !n1) return 10;
        RawNode evil(b.dir, 2);
        if (!evil.welcomed()) return 11;
        int rc = 0;
        if (ftruncate(evil.shm_fd, 0) == 0 || errno != EPERM) rc = 12;
        if (ftruncate(evil.bell_fd, 0) == 0 || errno != EPERM) rc = rc ? rc : 13;
        if (ftruncate(evil.shm_fd, 1 << 30) == 0) rc = rc ? rc : 14; // nor grow it
        std::this_thread::sleep_for(300ms); // the router polls every port, the nodes ring the bell
        if (!echo_works(n0, 1) || !echo_works(n1, 0)) rc = rc ? rc : 15;
        if (b.bridge->stats_json().find("\"state\":\"up\"") == std::string::npos) rc = rc ? rc : 16;
        rk_fabric_port_free(n0);
        rk_fabric_port_free(n1);
        return rc;
    });
    EXPECT_EQ(what, "") << "(12/13: a truncation was allowed; 14: growth was allowed; 15: the fabric stopped "
                           "routing)";
}

// Finding 6, node side: a port maps only sealed objects of the right size, so nothing the peer
// at the other end can do to them makes the QEMU fault.
TEST(FabricHardening, APortRefusesSharedMemoryThatIsNotSealed)
{
    FakeBridge fb(false);
    char err[256] = "";
    RkFabricPort *p = rk_fabric_port_new(fb.path.c_str(), 0, 2, 0, 2000, err, sizeof err);
    fb.join();
    EXPECT_EQ(p, nullptr);
    EXPECT_NE(std::string(err).find("sealed"), std::string::npos) << err;
    if (p) rk_fabric_port_free(p);
}

TEST(FabricHardening, APortRefusesPortMemorySmallerThanTheRings)
{
    const std::string what = in_child([] {
        FakeBridge fb(true, 4096);
        void *m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fb.shm_fd, 0);
        static_cast<PortShm *>(m)->magic = RKF_SHM_MAGIC;
        static_cast<PortShm *>(m)->version = RKF_PROTO_VERSION;
        char err[256] = "";
        RkFabricPort *p = rk_fabric_port_new(fb.path.c_str(), 0, 2, 0, 2000, err, sizeof err);
        fb.join();
        if (p) {
            rk_fabric_port_start(p);
            std::this_thread::sleep_for(300ms);
            rk_fabric_port_free(p);
            return 20;
        }
        return std::string(err).find("smaller") == std::string::npos ? 21 : 0;
    });
    EXPECT_EQ(what, "") << "(20: the port accepted it)";
}

// Finding 7: a reply is delivered only if it answers a request the bridge routed to the node
// that sends it; anything else is dropped and counted ("unsolicited").
TEST(FabricHardening, AReplyFromANodeTheRequestDidNotGoToIsDropped)
{
    // The bridge's own reply matching and outstanding table: between nodes of a direct pair the
    // bridge keeps no such state (the requester's port matches: test_fabric_pairs.cc).
    Bridge::Options o;
    o.pairs = false;
    BridgeRig b(o);
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1, nullptr, false), *n2 = b.port(2);
    ASSERT_TRUE(n0 && n1 && n2);
    Mailbox m0, m1;
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &m0);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Mailbox::on_request, nullptr, nullptr, &m1);
    rk_fabric_port_start(n1);
    rkf_frame_hdr req = request(RKF_SVC_MEM, 1, 77, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &req, nullptr), 0);
    ASSERT_TRUE(m1.wait([&] { return !m1.requests.empty(); }));
    // node 2 answers node 0's request to node 1, as itself (the bridge fixes src) ...
    const uint64_t forged = 0x4141414141414141ull;
    rkf_frame_hdr r = reply(RKF_SVC_MEM, 0, 77, 8);
    ASSERT_EQ(rk_fabric_port_send(n2, &r, &forged), 0);
    // ... and claiming to be node 1
    r.magic = RKF_FRAME_MAGIC;
    r.src = 1;
    ASSERT_EQ(rk_fabric_port_send_raw(n2, &r, &forged), 0);
    // an error reply in the bridge's name (a requester would fail the operation)
    rkf_frame_hdr e = r;
    e.src = 0;
    e.len = 0;
    e.status = RKF_ST_NODE_GONE;
    ASSERT_EQ(rk_fabric_port_send(n2, &e, nullptr), 0);
    // a reply to a request never made
    r.tag = 78;
    ASSERT_EQ(rk_fabric_port_send(n2, &r, &forged), 0);
    EXPECT_FALSE(m0.wait([&] { return !m0.replies.empty(); }, 500ms)) << "a forged reply was delivered";
    // the owner's genuine answer still arrives, once
    const uint64_t real = 0x1122334455667788ull;
    ASSERT_EQ(rk_fabric_port_reply(n1, &m1.requests[0], RKF_ST_OK, &real, 8), 0);
    ASSERT_EQ(rk_fabric_port_reply(n1, &m1.requests[0], RKF_ST_OK, &real, 8), 0); // a duplicate
    ASSERT_TRUE(m0.wait([&] { return !m0.replies.empty(); }));
    std::this_thread::sleep_for(200ms);
    ASSERT_EQ(m0.nreplies(), 1u);
    EXPECT_EQ(m0.replies[0].src, 1u);
    uint64_t got;
    std::memcpy(&got, m0.payloads[0].data(), 8);
    EXPECT_EQ(got, real);
    const std::string s = b.bridge->stats_json();
    EXPECT_EQ(stat_of(s, "unsolicited"), 4u) << s; // node 2's three, node 1's duplicate
    EXPECT_EQ(stat_of(s, "spoofed"), 1u) << s;
    EXPECT_EQ(stat_of(s, "outstanding"), 0u) << s;
    for (auto *p : {n0, n1, n2})
        rk_fabric_port_free(p);
}

// Finding 7, error replies: the bridge answers for the destination (src = the node the request
// went to), so a requester that checks the sender accepts NOROUTE / NODE_GONE / CONGESTED.
TEST(FabricHardening, BridgeErrorRepliesCarryTheDestinationAsTheirSource)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1, nullptr, false);
    Mailbox m0, m1;
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &m0);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Mailbox::on_request, nullptr, nullptr, &m1);
    rk_fabric_port_start(n1);
    rkf_frame_hdr h = request(RKF_SVC_MEM, 5, 1, 0); // absent
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    h = request(RKF_SVC_MEM, 1, 2, 0); // dies with it outstanding
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    ASSERT_TRUE(m1.wait([&] { return !m1.requests.empty(); }));
    rk_fabric_port_free(n1);
    ASSERT_TRUE(m0.wait([&] { return m0.replies.size() == 2; }));
    EXPECT_EQ(m0.replies[0].status, RKF_ST_NOROUTE);
    EXPECT_EQ(m0.replies[0].src, 5u);
    EXPECT_EQ(m0.replies[1].status, RKF_ST_NODE_GONE);
    EXPECT_EQ(m0.replies[1].src, 1u);
    rk_fabric_port_free(n0);
}

// Finding 8: requests a peer never answers are capped per sending port; beyond the cap they
// are answered CONGESTED and counted, and other ports are not affected.
TEST(FabricHardening, OutstandingRequestsPerPortAreCappedAndAnsweredCongested)
{
    // The bridge's own reply matching and outstanding table: between nodes of a direct pair the
    // bridge keeps no such state (the requester's port matches: test_fabric_pairs.cc).
    Bridge::Options o;
    o.pairs = false;
    BridgeRig b(o);
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1, nullptr, false), *n2 = b.port(2);
    Mailbox m0, m1, m2;
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &m0);
    rk_fabric_port_register(n2, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &m2);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Mailbox::on_request, nullptr, nullptr, &m1);
    rk_fabric_port_start(n1);
    const unsigned cap = 65536, extra = 100; // the bridge's default --max-outstanding
    for (unsigned i = 0; i < cap + extra; i++) {
        rkf_frame_hdr h = request(RKF_SVC_MEM, 1, i, 0);
        while (rk_fabric_port_send(n0, &h, nullptr) == -EAGAIN) {
        }
    }
    ASSERT_TRUE(m0.wait([&] { return m0.replies.size() == extra; }, 30s)) << m0.nreplies();
    {
        std::lock_guard lk(m0.mu); // n0's port thread appends to it
        for (auto &r : m0.replies) {
            EXPECT_EQ(r.status, RKF_ST_CONGESTED);
            EXPECT_GE(r.tag, cap);
        }
    }
    ASSERT_TRUE(m1.wait([&] { return m1.requests.size() == cap; }, 30s)) << m1.requests.size();
    // another port still gets through
    rkf_frame_hdr h = request(RKF_SVC_MEM, 1, 1u << 30, 0);
    ASSERT_EQ(rk_fabric_port_send(n2, &h, nullptr), 0);
    ASSERT_TRUE(m1.wait([&] { return m1.requests.size() == cap + 1; }));
    {
        std::lock_guard lk(m2.mu); // n2's port thread appends to it
        EXPECT_TRUE(m2.replies.empty());
    }
    const std::string s = b.bridge->stats_json();
    EXPECT_EQ(stat_of(s, "over_cap"), extra) << s.substr(0, 400);
    EXPECT_EQ(stat_of(s, "outstanding"), cap + 1) << s.substr(0, 400);
    // the destination dies: every outstanding request is answered NODE_GONE, the table empties
    rk_fabric_port_free(n1);
    ASSERT_TRUE(m0.wait([&] { return m0.replies.size() == cap + extra; }, 30s)) << m0.nreplies();
    EXPECT_EQ(stat_of(b.bridge->stats_json(), "outstanding"), 0u);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n2);
}

TEST(FabricHardening, TheOutstandingCapIsAnOption)
{
    Bridge::Options o;
    o.max_outstanding = 8;
    o.pairs = false; // the cap is on requests the bridge routes (see above)
    BridgeRig b(o);
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1, nullptr, false);
    Mailbox m0, m1;
    rk_fabric_port_register(n0, RKF_SVC_MEM, nullptr, Mailbox::on_reply, nullptr, &m0);
    rk_fabric_port_register(n1, RKF_SVC_MEM, Mailbox::on_request, nullptr, nullptr, &m1);
    rk_fabric_port_start(n1);
    for (unsigned i = 0; i < 10; i++) {
        rkf_frame_hdr h = request(RKF_SVC_MEM, 1, i, 0);
        ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    }
    ASSERT_TRUE(m0.wait([&] { return m0.replies.size() == 2; }));
    {
        std::lock_guard lk(m0.mu); // the port thread appends to the same vectors
        EXPECT_EQ(m0.replies[0].tag, 8u);
        EXPECT_EQ(m0.replies[1].status, RKF_ST_CONGESTED);
    }
    // answering one makes room for one more
    ASSERT_TRUE(m1.wait([&] { return m1.requests.size() == 8; }));
    rkf_frame_hdr first;
    {
        std::lock_guard lk(m1.mu);
        first = m1.requests[0];
    }
    ASSERT_EQ(rk_fabric_port_reply(n1, &first, RKF_ST_OK, nullptr, 0), 0);
    ASSERT_TRUE(m0.wait([&] { return m0.replies.size() == 3; }));
    rkf_frame_hdr h = request(RKF_SVC_MEM, 1, 100, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    ASSERT_TRUE(m1.wait([&] { return m1.requests.size() == 9; }));
    rk_fabric_port_free(n1);
    rk_fabric_port_free(n0);
}

// Finding 8: silent handshake and control connections used to block the bridge's accept and
// control loop (2 s and 1 s each); `stats` must still answer, and a node still connect.
TEST(FabricHardening, SilentConnectionsDoNotStallStatsOrHandshakes)
{
    BridgeRig b;
    std::vector<int> silent;
    for (int i = 0; i < 8; i++) {
        silent.push_back(unix_connect(b.dir + "/fabric.sock", SOCK_SEQPACKET));
        silent.push_back(unix_connect(b.dir + "/bridge.ctl", SOCK_STREAM));
    }
    for (int fd : silent)
        ASSERT_GE(fd, 0);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string s = control(b.dir, "stats\n", 4000);
    const auto dt = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(s.empty()) << "stats did not answer within 4 s";
    EXPECT_LT(dt, 2s);
    EXPECT_EQ(s[0], '{');
    std::string err;
    RkFabricPort *n0 = b.port(0, &err);
    ASSERT_NE(n0, nullptr) << err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
    // the silent handshakes are closed with a reason once their deadline passes
    rkf_welcome w{};
    pollfd pfd{silent[0], POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    ASSERT_EQ(recv(silent[0], &w, sizeof w, 0), ssize_t(sizeof w));
    EXPECT_EQ(w.status, RKF_WELCOME_MALFORMED);
    std::this_thread::sleep_for(1500ms);
    const std::string s2 = b.bridge->stats_json();
    EXPECT_EQ(stat_of(s2, "refused_handshakes"), 8u) << s2;
    EXPECT_EQ(stat_of(s2, "conn_timeouts"), 16u) << s2;
    for (int fd : silent)
        close(fd);
    rk_fabric_port_free(n0);
}

TEST(FabricHardening, AFloodOfSilentConnectionsEvictsTheOldestAndStatsStillAnswers)
{
    BridgeRig b;
    std::vector<int> silent;
    for (int i = 0; i < 200; i++) {
        int fd = unix_connect(b.dir + (i % 2 ? "/bridge.ctl" : "/fabric.sock"),
                              i % 2 ? SOCK_STREAM : SOCK_SEQPACKET,
                              SOCK_NONBLOCK); // a full backlog fails instead of waiting
        if (fd >= 0) silent.push_back(fd);
    }
    const std::string s = control(b.dir, "stats", 4000); // no newline: the command is complete
    ASSERT_FALSE(s.empty());
    EXPECT_GT(stat_of(s, "conn_evicted"), 0u) << s;
    for (int fd : silent)
        close(fd);
}

// Finding 9: a node name that is not UTF-8 made `stats` invalid JSON until a restart.
TEST(FabricHardening, NamesAndCommandsAreEscapedIntoValidJson)
{
    BridgeRig b;
    const char name[] = "n\xff\xfe\"\\\x01\x1b[2J\xc3\xa9\xed\xa0\x80z";
    RawNode evil(b.dir, 3, name, sizeof name);
    ASSERT_TRUE(evil.welcomed());
    const std::string s = b.bridge->stats_json();
    EXPECT_TRUE(json_text_ok(s)) << s;
    EXPECT_NE(s.find(R"("name":"n\ufffd\ufffd\"\\\u0001\u001b[2J)"
                     "\xc3\xa9"
                     R"(\ufffd\ufffd\ufffdz")"),
              std::string::npos)
        << s;
    const std::string c = control(b.dir, "st\"a\xff\x02ts\n");
    EXPECT_TRUE(json_text_ok(c)) << c;
    EXPECT_NE(c.find(R"(unknown command 'st\"a\ufffd\u0002ts')"), std::string::npos) << c;
    const std::string ok = control(b.dir, "stats\n");
    EXPECT_TRUE(json_text_ok(ok));
    EXPECT_EQ(ok.back(), '\n');
}

// Finding 7, initiator side: the remote-memory client accepts a reply only from the node the
// request went to (defence in depth behind the bridge, which already drops such replies).
TEST(FabricHardening, RemoteMemIgnoresAReplyFromAnotherNodeThanTheOwner)
{
    FakeBridge fb;
    char err[256] = "";
    RkFabricPort *port = rk_fabric_port_new(fb.path.c_str(), 0, 4, 0, 2000, err, sizeof err);
    fb.join();
    ASSERT_NE(port, nullptr) << err;
    std::vector<unsigned char> ram(4096);
    RkRemoteMem *mem = rk_rmem_new(port, 0, 0x40000000, ram.size(), ram.data(), 3000, nullptr, nullptr);
    rk_fabric_port_start(port);
    uint64_t v = 0;
    int rc = -1;
    std::thread t([&] { rc = rk_rmem_read(mem, 1, 0x40000100, &v, 8); });
    rkf_frame_hdr h;
    unsigned char payload[RKF_SLOT_SIZE];
    ASSERT_TRUE(fb.next_from_node(h, payload));
    EXPECT_EQ(h.dst, 1u);
    EXPECT_EQ(h.svc, RKF_SVC_MEM);
    rkf_frame_hdr r{};
    r.magic = RKF_FRAME_MAGIC;
    r.type = RKF_T_REPLY;
    r.svc = RKF_SVC_MEM;
    r.op = h.op;
    r.dst = 0;
    r.tag = h.tag;
    r.len = 8;
    const uint64_t forged = 0x4141414141414141ull, real = 0x1122334455667788ull;
    r.src = 2; // another node than the owner
    ASSERT_TRUE(fb.to_node(r, &forged));
    r.op = RKF_OP_MEM_WRITE; // the owner, but answering another operation
    r.src = 1;
    ASSERT_TRUE(fb.to_node(r, &forged));
    std::this_thread::sleep_for(200ms);
    r.op = h.op;
    ASSERT_TRUE(fb.to_node(r, &real));
    t.join();
    EXPECT_EQ(rc, RK_RMEM_OK);
    EXPECT_EQ(v, real);
    rk_rmem_stats st;
    rk_rmem_get_stats(mem, &st);
    EXPECT_EQ(st.forged_replies, 2u);
    EXPECT_NE(h.tag, 1u); // tags are not a counter from 1 (they start at a random value)
    rk_rmem_free(mem);    // unregisters from the port: before the port goes
    rk_fabric_port_free(port);
}
