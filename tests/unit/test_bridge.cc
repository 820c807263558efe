// Unit tests of the fabric bridge and the node-side fabric port (platform/fabric).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bridge_rig.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;
using namespace std::chrono_literals;

TEST(Bridge, RoutesARequestAndItsReplyBetweenTwoNodes)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    const char msg[] = "ring packet 42";
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, 0x1234, sizeof msg);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, msg), 0);
    ASSERT_TRUE(m.wait([&] { return !m.replies.empty(); }));
    EXPECT_EQ(m.replies[0].status, RKF_ST_OK);
    EXPECT_EQ(m.replies[0].tag, 0x1234u);
    EXPECT_EQ(m.replies[0].src, 1u);
    EXPECT_EQ(std::string(m.payloads[0].begin(), m.payloads[0].end() - 1), "ring packet 42");
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

// Unbinding a service while the port thread is inside its handler waits for the handler to
// return, so the caller may free what the handler uses (issue 10: rk_fabric_unbind freed the
// endpoint under a running handler).
TEST(Bridge, UnregisteringAServiceWaitsForItsRunningHandler)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    struct State {
        std::atomic<bool> entered{false}, finished{false};
    };
    static State st;
    st.entered = false;
    st.finished = false;
    rk_fabric_port_register(
        n1, RKF_SVC_RMC,
        [](void *, RkFabricPort *, const rkf_frame_hdr *, const void *) {
            st.entered = true;
            std::this_thread::sleep_for(300ms);
            st.finished = true;
        },
        nullptr, nullptr, nullptr);
    rkf_frame_hdr h = request(RKF_SVC_RMC, 1, 7, 0);
    h.type = RKF_T_MSG;
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (!st.entered && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(st.entered);
    rk_fabric_port_register(n1, RKF_SVC_RMC, nullptr, nullptr, nullptr, nullptr);
    EXPECT_TRUE(st.finished) << "register returned while the old handler was still running";
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(Bridge, RequestToAnAbsentNodeIsAnsweredWithNoRoute)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 5, 7, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    ASSERT_TRUE(m.wait([&] { return !m.replies.empty(); }));
    EXPECT_EQ(m.replies[0].status, RKF_ST_NOROUTE);
    EXPECT_EQ(m.replies[0].tag, 7u);
    EXPECT_NE(b.bridge->stats_json().find("\"noroute\":1"), std::string::npos);
    rk_fabric_port_free(n0);
}

TEST(Bridge, DuplicateAndOutOfRangeNodeIdsAreRefusedWithAReason)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0);
    ASSERT_TRUE(n0);
    std::string err;
    EXPECT_EQ(b.port(0, &err), nullptr);
    EXPECT_NE(err.find("already connected"), std::string::npos) << err;
    char e2[256];
    // The bridge was started for 8 nodes: node 9 of a 16-node view is out of its range.
    EXPECT_EQ(rk_fabric_port_new((b.dir + "/fabric.sock").c_str(), 9, 16, 0, 1000, e2, sizeof e2), nullptr);
    EXPECT_NE(std::string(e2).find("out of range"), std::string::npos) << e2;
    rk_fabric_port_free(n0);
}

// Capabilities travel in the handshake: the bridge records what each node announced and reports
// it per port in its stats (docs/fabric.md, "Handshake").
TEST(Bridge, CapabilitiesAnnouncedInTheHandshakeAreReportedInStats)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0, nullptr, true, RKF_CAP_UNIMEM_MBOX | RKF_CAP_MEM | RKF_CAP_RMC);
    RkFabricPort *n1 = b.port(1, nullptr, true, RKF_CAP_MEM);
    ASSERT_TRUE(n0 && n1);
    EXPECT_EQ(rk_fabric_port_caps(n0), RKF_CAP_UNIMEM_MBOX | RKF_CAP_MEM | RKF_CAP_RMC);
    const std::string st = b.bridge->stats_json();
    EXPECT_NE(st.find("{\"node\":0,\"state\":\"up\""), std::string::npos) << st;
    EXPECT_NE(st.find("\"caps\":7,"), std::string::npos) << st;
    EXPECT_NE(st.find("\"caps\":2,"), std::string::npos) << st;
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(Bridge, MalformedFramesAreDroppedCountedAndDoNotStallOthers)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    rkf_frame_hdr bad = request(RKF_SVC_ECHO, 1, 1, 8);
    bad.magic = 0xdeadbeef; // bad magic
    ASSERT_EQ(rk_fabric_port_send_raw(n0, &bad, "xxxxxxxx"), 0);
    bad.magic = RKF_FRAME_MAGIC;
    bad.len = 4000;                                // oversized / truncated
    const char slot[RKF_MAX_PAYLOAD] = "xxxxxxxx"; // send_raw reads up to a slot's payload
    ASSERT_EQ(rk_fabric_port_send_raw(n0, &bad, slot), 0);
    bad.len = 0;
    bad.type = 99; // unknown type
    ASSERT_EQ(rk_fabric_port_send_raw(n0, &bad, nullptr), 0);
    bad.type = RKF_T_REQ;
    bad.src = 3; // spoofed source
    ASSERT_EQ(rk_fabric_port_send_raw(n0, &bad, nullptr), 0);
    rkf_frame_hdr good = request(RKF_SVC_ECHO, 1, 2, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &good, nullptr), 0);
    ASSERT_TRUE(m.wait([&] { return !m.replies.empty(); }));
    EXPECT_EQ(m.replies.size(), 1u);
    EXPECT_EQ(m.replies[0].tag, 2u);
    const std::string s = b.bridge->stats_json();
    EXPECT_NE(s.find("\"malformed\":3"), std::string::npos) << s;
    EXPECT_NE(s.find("\"spoofed\":1"), std::string::npos) << s;
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(Bridge, NodeDeathAnswersItsOutstandingRequestsAndTheNodeMayComeBack)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    Mailbox m0, m1;
    rk_fabric_port_register(n0, RKF_SVC_UNIMEM_MBOX, nullptr, Mailbox::on_reply, nullptr, &m0);
    rk_fabric_port_register(n1, RKF_SVC_UNIMEM_MBOX, Mailbox::on_request, nullptr, nullptr, &m1);
    rkf_frame_hdr h = request(RKF_SVC_UNIMEM_MBOX, 1, 99, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, nullptr), 0);
    ASSERT_TRUE(m1.wait([&] { return !m1.requests.empty(); }));
    rk_fabric_port_free(n1); // dies without answering
    ASSERT_TRUE(m0.wait([&] { return !m0.replies.empty(); }));
    EXPECT_EQ(m0.replies[0].status, RKF_ST_NODE_GONE);
    EXPECT_EQ(m0.replies[0].tag, 99u);
    RkFabricPort *again = b.port(1);
    ASSERT_NE(again, nullptr);
    Mailbox me;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &me);
    rkf_frame_hdr e = request(RKF_SVC_ECHO, 1, 5, 0);
    ASSERT_EQ(rk_fabric_port_send(n0, &e, nullptr), 0);
    ASSERT_TRUE(me.wait([&] { return !me.replies.empty(); }));
    EXPECT_EQ(me.replies[0].status, RKF_ST_OK);
    rk_fabric_port_free(again);
    rk_fabric_port_free(n0);
}

TEST(Bridge, BridgeDeathTakesTheLinkDownAndSendsFailFast)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, Mailbox::on_link, &m);
    b.stop();
    ASSERT_TRUE(m.wait([&] { return !m.links.empty(); }));
    EXPECT_EQ(m.links[0], 0);
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, 1, 0);
    EXPECT_EQ(rk_fabric_port_send(n0, &h, nullptr), -ENOTCONN);
    rk_fabric_port_free(n0);
}

namespace {
// What a port's observability hooks report (rk_fabric_port_set_hooks).
struct Observer {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<rk_fabric_dir, rkf_frame_hdr>> frames;
    std::vector<int> links;
    std::vector<std::pair<rk_fabric_log_level, std::string>> logs;
    rk_fabric_port_hooks hooks{&Observer::log, &Observer::frame, &Observer::link, this};

    static void log(void *o, rk_fabric_log_level level, const char *msg)
    {
        auto *ob = static_cast<Observer *>(o);
        std::lock_guard lk(ob->mu);
        ob->logs.emplace_back(level, msg);
        ob->cv.notify_all();
    }
    static void frame(void *o, rk_fabric_dir dir, const rkf_frame_hdr *h)
    {
        auto *ob = static_cast<Observer *>(o);
        std::lock_guard lk(ob->mu);
        ob->frames.emplace_back(dir, *h);
        ob->cv.notify_all();
    }
    static void link(void *o, int up)
    {
        auto *ob = static_cast<Observer *>(o);
        std::lock_guard lk(ob->mu);
        ob->links.push_back(up);
        ob->cv.notify_all();
    }
    template <typename P> bool wait(P pred)
    {
        std::unique_lock lk(mu);
        return cv.wait_for(lk, 5s, pred);
    }
};
} // namespace

TEST(Bridge, PortHooksReportFramesBothWaysAndLinkChanges)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0, nullptr, false), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    Observer ob;
    rk_fabric_port_set_hooks(n0, &ob.hooks); // already up: reported at once
    ASSERT_EQ(ob.links, std::vector<int>{1});
    ASSERT_EQ(ob.logs.size(), 1u);
    EXPECT_EQ(ob.logs[0].first, RK_FABRIC_LOG_INFO);
    EXPECT_NE(ob.logs[0].second.find("connected"), std::string::npos);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, Mailbox::on_link, &m);
    rk_fabric_port_start(n0);

    const char msg[] = "traced";
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, 0xabc, sizeof msg);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, msg), 0);
    ASSERT_TRUE(m.wait([&] { return !m.replies.empty(); }));
    ASSERT_TRUE(ob.wait([&] { return ob.frames.size() >= 2; }));
    EXPECT_EQ(ob.frames[0].first, RK_FABRIC_OUT);
    EXPECT_EQ(ob.frames[0].second.dst, 1u);
    EXPECT_EQ(ob.frames[0].second.src, 0u);
    EXPECT_EQ(ob.frames[0].second.type, RKF_T_REQ);
    EXPECT_EQ(ob.frames[0].second.tag, 0xabcu);
    EXPECT_EQ(ob.frames[0].second.len, sizeof msg);
    EXPECT_EQ(ob.frames[1].first, RK_FABRIC_IN);
    EXPECT_EQ(ob.frames[1].second.src, 1u);
    EXPECT_EQ(ob.frames[1].second.type, RKF_T_REPLY);
    EXPECT_EQ(ob.frames[1].second.tag, 0xabcu);

    b.stop(); // the services hear of it first, then the observer, with a warning
    ASSERT_TRUE(ob.wait([&] { return ob.links.size() == 2; }));
    EXPECT_EQ(ob.links[1], 0);
    EXPECT_EQ(m.links, std::vector<int>{0});
    ASSERT_EQ(ob.logs.size(), 2u);
    EXPECT_EQ(ob.logs[1].first, RK_FABRIC_LOG_WARN);
    EXPECT_NE(ob.logs[1].second.find("link down"), std::string::npos);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(Bridge, ManyFramesArriveInOrderWithoutLoss)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    const unsigned N = 20000;
    for (unsigned i = 0; i < N; i++) {
        rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, i, 8);
        uint64_t v = i * 3ull;
        ASSERT_EQ(rk_fabric_port_send(n0, &h, &v), 0);
    }
    ASSERT_TRUE(m.wait([&] { return m.replies.size() == N; })) << m.replies.size();
    for (unsigned i = 0; i < N; i++) {
        ASSERT_EQ(m.replies[i].tag, i);
        uint64_t v;
        std::memcpy(&v, m.payloads[i].data(), 8);
        ASSERT_EQ(v, i * 3ull);
    }
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}
