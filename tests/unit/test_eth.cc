// SPDX-License-Identifier: MIT
// The Ethernet service of the fabric (docs/fabric.md, "Service 5: Ethernet"): the port's send and
// receive API, fragments on the rings, and the bridge's switching (unicast by the node MAC,
// flooding, counters, malformed and truncated fragments, full rings and queues).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/uio.h>

#include "bridge_rig.h"
#include "eth_frag.h"
#include "eth_test_util.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;

namespace {

// An IPv4/UDP frame to port 4791 (RoCEv2) or another port.
std::vector<uint8_t> udp_frame(unsigned dst, unsigned src, uint16_t dport)
{
    std::vector<uint8_t> f = to_node(dst, src, 14 + 20 + 8 + 16, 1);
    f[12] = 0x08;
    f[13] = 0x00;
    f[14] = 0x45;      // IPv4, IHL 5
    f[20] = f[21] = 0; // no fragment
    f[23] = 17;        // UDP
    const uint32_t sip = rkf_eth_node_ipv4(src), dip = rkf_eth_node_ipv4(dst);
    for (int i = 0; i < 4; i++) {
        f[26 + i] = uint8_t(sip >> (24 - 8 * i));
        f[30 + i] = uint8_t(dip >> (24 - 8 * i));
    }
    f[34 + 2] = uint8_t(dport >> 8);
    f[34 + 3] = uint8_t(dport);
    return f;
}

// The counter `key` of node `node`'s entry in `stats`.
uint64_t port_stat(const std::string &json, unsigned node, const std::string &key)
{
    const size_t at = json.find("{\"node\":" + std::to_string(node) + ",");
    if (at == std::string::npos) return ~0ull;
    return stat_of(json.substr(at), key);
}

} // namespace

TEST(Eth, NodeMacAndAddressFollowTheNodeId)
{
    uint8_t mac[6];
    rkf_eth_node_mac(7, mac);
    const uint8_t want[6] = {0x02, 0x52, 0x4b, 0x00, 0x00, 0x07};
    EXPECT_EQ(std::memcmp(mac, want, 6), 0);
    EXPECT_EQ(rkf_eth_mac_node(mac), 7);
    const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, other[6] = {0x52, 0x54, 0, 0, 0, 1};
    EXPECT_EQ(rkf_eth_mac_node(bcast), -1);
    EXPECT_EQ(rkf_eth_mac_node(other), -1);
    EXPECT_EQ(rkf_eth_node_ipv4(0), 0xc6120001u); // 198.18.0.1
    EXPECT_EQ(rkf_eth_node_ipv4(63), 0xc6120040u);
}

// Sizes around every fragment boundary, from the smallest frame to the largest.
TEST(Eth, UnicastFramesOfEverySizeArriveWholeAndInOrderAtTheirMacOwnerOnly)
{
    BridgeRig b;
    EthPorts eth(b, 3);
    ASSERT_TRUE(eth.ok());
    RkFabricPort *n0 = eth.port[0], *n1 = eth.port[1];
    EthSink &s1 = eth.sink[1], &s2 = eth.sink[2];
    std::vector<size_t> sizes = {14,  15,  60,  215,  216,  217,  230,  231,
                                 431, 432, 433, 1514, 1518, 4174, 9215, 9216};
    std::vector<std::vector<uint8_t>> sent;
    for (size_t i = 0; i < sizes.size(); i++) {
        sent.push_back(to_node(1, 0, sizes[i], uint32_t(i)));
        int rc;
        while ((rc = rk_fabric_port_eth_send(n0, sent.back().data(), sent.back().size())) == -EAGAIN) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ASSERT_EQ(rc, 0) << "size " << sizes[i];
    }
    ASSERT_TRUE(s1.wait_count(sent.size()));
    for (size_t i = 0; i < sent.size(); i++) {
        EXPECT_EQ(s1.frames[i].first, 0u);
        EXPECT_EQ(s1.frames[i].second, sent[i]) << "frame " << i << " of " << sizes[i] << " bytes";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(s2.count(), 0u);
    size_t total = 0;
    for (size_t n : sizes)
        total += n;
    rk_fabric_eth_stats st0{}, st1{};
    rk_fabric_port_eth_get_stats(n0, &st0);
    rk_fabric_port_eth_get_stats(n1, &st1);
    EXPECT_EQ(st0.tx_frames, sizes.size());
    EXPECT_EQ(st0.tx_bytes, total);
    EXPECT_EQ(st1.rx_frames, sizes.size());
    EXPECT_EQ(st1.rx_bytes, total);
    EXPECT_EQ(st1.rx_bad_fragments, 0u);
    const std::string js = control(b.dir, "stats");
    EXPECT_EQ(port_stat(js, 0, "eth_frames_in"), sizes.size());
    EXPECT_EQ(port_stat(js, 0, "eth_bytes_in"), total);
    EXPECT_EQ(port_stat(js, 1, "eth_frames_out"), sizes.size());
    EXPECT_EQ(port_stat(js, 2, "eth_frames_out"), 0u);
    EXPECT_EQ(stat_of(js, "eth_floods"), 0u);
}

TEST(Eth, BroadcastMulticastAndUnknownUnicastFloodToEveryOtherPort)
{
    BridgeRig b;
    EthPorts eth(b, 3);
    ASSERT_TRUE(eth.ok());
    RkFabricPort **n = eth.port;
    EthSink *s = eth.sink;
    const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const uint8_t mcast[6] = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
    uint8_t absent[6];
    rkf_eth_node_mac(5, absent); // node 5 is not connected
    const uint8_t stranger[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
    const std::vector<std::vector<uint8_t>> sent = {eth_frame(bcast, 0, 60, 1), eth_frame(mcast, 0, 300, 2),
                                                    eth_frame(absent, 0, 1000, 3),
                                                    eth_frame(stranger, 0, 64, 4)};
    for (auto &f : sent)
        ASSERT_EQ(rk_fabric_port_eth_send(n[0], f.data(), f.size()), 0);
    ASSERT_TRUE(s[1].wait_count(4));
    ASSERT_TRUE(s[2].wait_count(4));
    for (int i = 1; i < 3; i++) {
        for (size_t k = 0; k < sent.size(); k++)
            EXPECT_EQ(s[i].frames[k].second, sent[k]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(s[0].count(), 0u) << "a frame is never sent back to its ingress port";
    EXPECT_EQ(stat_of(control(b.dir, "stats"), "eth_floods"), 4u);
}

// A node cannot claim another's addresses (docs/fabric.md "Source addresses"): a frame whose
// source MAC, IPv4 source or ARP sender is not its port's is dropped and counted; a forged RoCEv2
// frame from node 2 posing as node 0 never reaches node 1.
TEST(Eth, FramesWithAnotherNodesSourceAddressesAreDroppedAndCounted)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1), *n2 = b.port(2);
    ASSERT_TRUE(n0 && n1 && n2);
    EthSink net, roce;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_NET, EthSink::rx, &net);
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, EthSink::rx, &roce);
    // node 2 sends node 0's RoCEv2 frame: its own MAC, node 0's IPv4; then node 0's MAC too
    auto ip_forged = udp_frame(1, 0, 4791);
    rkf_eth_node_mac(2, ip_forged.data() + 6);
    auto mac_forged = udp_frame(1, 0, 4791);
    // an ARP reply from node 2 claiming node 0's address (sender MAC node 2's, sender IP node 0's)
    std::vector<uint8_t> arp = to_node(1, 2, 60, 1);
    arp[12] = 0x08;
    arp[13] = 0x06;
    const uint8_t hdr[8] = {0, 1, 8, 0, 6, 4, 0, 2};
    std::memcpy(arp.data() + 14, hdr, 8);
    rkf_eth_node_mac(2, arp.data() + 22);
    const uint32_t ip0 = rkf_eth_node_ipv4(0);
    for (int i = 0; i < 4; i++)
        arp[28 + i] = uint8_t(ip0 >> (24 - 8 * i));
    for (const auto *f : {&ip_forged, &mac_forged, &arp})
        ASSERT_EQ(rk_fabric_port_eth_send(n2, f->data(), f->size()), 0);
    // then node 2's own frames, which pass (and show that the forged ones were not just slow)
    auto own = udp_frame(1, 2, 4791);
    auto own_arp = arp;
    const uint32_t ip2 = rkf_eth_node_ipv4(2);
    for (int i = 0; i < 4; i++)
        own_arp[28 + i] = uint8_t(ip2 >> (24 - 8 * i));
    ASSERT_EQ(rk_fabric_port_eth_send(n2, own.data(), own.size()), 0);
    ASSERT_EQ(rk_fabric_port_eth_send(n2, own_arp.data(), own_arp.size()), 0);
    ASSERT_TRUE(roce.wait_count(1));
    ASSERT_TRUE(net.wait_count(1));
    EXPECT_EQ(roce.frames[0].second, own);
    EXPECT_EQ(net.frames[0].second, own_arp);
    const std::string st = control(b.dir, "stats");
    EXPECT_EQ(port_stat(st, 2, "eth_spoofed"), 3u);
    EXPECT_EQ(stat_of(st, "eth_spoofed"), 3u);
    EXPECT_EQ(port_stat(st, 0, "eth_spoofed"), 0u);
    EXPECT_EQ(roce.frames.size(), 1u);
    EXPECT_EQ(net.frames.size(), 1u);
}

TEST(Eth, RoceV2FramesGoToTheRoceReceiverAndEverythingElseToTheNetdev)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    EthSink net, roce;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_NET, EthSink::rx, &net);
    // No RoCE receiver yet: RoCEv2 frames go to the netdev.
    auto r = udp_frame(1, 0, 4791);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, r.data(), r.size()), 0);
    ASSERT_TRUE(net.wait_count(1));
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, EthSink::rx, &roce);
    auto u = udp_frame(1, 0, 4792);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, r.data(), r.size()), 0);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, u.data(), u.size()), 0);
    ASSERT_TRUE(net.wait_count(2));
    ASSERT_TRUE(roce.wait_count(1));
    EXPECT_EQ(roce.frames[0].second, r);
    EXPECT_EQ(net.frames[1].second, u);
    rk_fabric_eth_stats st{};
    rk_fabric_port_eth_get_stats(n1, &st);
    EXPECT_EQ(st.rx_roce, 1u);
    EXPECT_EQ(st.rx_frames, 3u);
    // Detached receivers: frames are counted, not delivered.
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_NET, nullptr, nullptr);
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, nullptr, nullptr);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, u.data(), u.size()), 0);
    for (int i = 0; i < 500 && st.rx_no_receiver == 0; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        rk_fabric_port_eth_get_stats(n1, &st);
    }
    EXPECT_EQ(st.rx_no_receiver, 1u);
    EXPECT_EQ(rk_fabric_port_eth_attach(n1, rk_fabric_eth_rx_class(7), EthSink::rx, &net), -EINVAL);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(Eth, FramesOutsideTheSizeRangeAndBadPiecesAreRefused)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0);
    ASSERT_TRUE(n0);
    std::vector<uint8_t> big(RKF_ETH_MAX_FRAME + 1, 0);
    EXPECT_EQ(rk_fabric_port_eth_send(n0, big.data(), 13), -EMSGSIZE);
    EXPECT_EQ(rk_fabric_port_eth_send(n0, big.data(), big.size()), -EMSGSIZE);
    iovec v[2] = {{big.data(), 10}, {nullptr, 10}};
    EXPECT_EQ(rk_fabric_port_eth_sendv(n0, v, 2), -EINVAL);
    EXPECT_EQ(rk_fabric_port_eth_sendv(n0, v, -1), -EINVAL);
    iovec w[2] = {{big.data(), 9000}, {big.data(), 9000}};
    EXPECT_EQ(rk_fabric_port_eth_sendv(n0, w, 2), -EMSGSIZE);
    rk_fabric_eth_stats st{};
    rk_fabric_port_eth_get_stats(n0, &st);
    EXPECT_EQ(st.tx_bad, 5u);
    EXPECT_EQ(st.tx_frames, 0u);
    rk_fabric_port_free(n0);
}

TEST(Eth, ScatteredPiecesAreSentAsOneFrame)
{
    BridgeRig b;
    EthPorts eth(b, 2);
    ASSERT_TRUE(eth.ok());
    RkFabricPort *n0 = eth.port[0];
    EthSink &s1 = eth.sink[1];
    auto f = to_node(1, 0, 3000, 9);
    iovec v[3] = {{f.data(), 6}, {f.data() + 6, 1000}, {f.data() + 1006, f.size() - 1006}};
    ASSERT_EQ(rk_fabric_port_eth_sendv(n0, v, 3), 0);
    ASSERT_TRUE(s1.wait_count(1));
    EXPECT_EQ(s1.frames[0].second, f);
}

// A node that writes fragments by hand: inconsistent, out of sequence, interleaved with another
// service's frame, or cut short. Each partial frame is dropped and counted; the next good frame
// goes through.
TEST(Eth, MalformedAndTruncatedFragmentsAreDroppedAndCounted)
{
    BridgeRig b;
    EthPorts eth(b, 2);
    ASSERT_TRUE(eth.ok());
    RkFabricPort *n0 = eth.port[0];
    EthSink &s1 = eth.sink[1];
    auto f = to_node(1, 0, 500, 3); // three fragments: 216 + 216 + 68
    auto frag = [&](unsigned i, uint32_t seq, uint16_t frame_len) {
        unsigned char slot[RKF_SLOT_SIZE];
        rkf_frame_hdr t{};
        t.magic = RKF_FRAME_MAGIC;
        t.src = 0;
        t.dst = 0;
        eth_frag_write(slot, t, f.data(), uint16_t(f.size()), seq, i);
        rkf_frame_hdr h;
        std::memcpy(&h, slot, sizeof h);
        rkf_eth_frag e;
        std::memcpy(&e, slot + sizeof h, sizeof e);
        e.frame_len = frame_len;
        std::memcpy(slot + sizeof h, &e, sizeof e);
        return std::make_pair(h, std::vector<unsigned char>(slot + sizeof h, slot + sizeof h + h.len));
    };
    auto raw = [&](const std::pair<rkf_frame_hdr, std::vector<unsigned char>> &x) {
        ASSERT_EQ(rk_fabric_port_send_raw(n0, &x.first, x.second.data()), 0);
    };
    raw(frag(1, 1, 500));                                 // 1: starts in the middle
    raw(frag(0, 2, 500));                                 // 2: a start ...
    raw(frag(2, 2, 500));                                 //    ... that skips its second fragment
    raw(frag(0, 3, 500));                                 // 3: a start ...
    raw(frag(1, 4, 500));                                 //    ... continued by another frame's fragment
    raw(frag(0, 5, 13));                                  // 4: frame length below the minimum
    raw(frag(0, 6, 500));                                 // 5: a start ...
    rkf_frame_hdr echo = request(RKF_SVC_ECHO, 1, 77, 0); // ... interrupted by another service
    echo.magic = RKF_FRAME_MAGIC;
    echo.src = 0;
    ASSERT_EQ(rk_fabric_port_send_raw(n0, &echo, nullptr), 0);
    raw(frag(1, 6, 500)); //    (its continuation is then out of sequence: 6)
    raw(frag(2, 6, 500));
    ASSERT_EQ(rk_fabric_port_eth_send(n0, f.data(), f.size()), 0); // a good frame after all that
    ASSERT_TRUE(s1.wait_count(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(s1.count(), 1u);
    EXPECT_EQ(s1.frames[0].second, f);
    const std::string js = control(b.dir, "stats");
    EXPECT_GE(stat_of(js, "eth_bad_fragments"), 7u);
    EXPECT_EQ(port_stat(js, 0, "eth_frames_in"), 1u);
    EXPECT_GE(port_stat(js, 0, "errors"), 7u);
}

// A sender whose ring is full gets -EAGAIN at once, and nothing of that frame is in the ring:
// every frame in it is whole.
TEST(Eth, AFullRingRefusesTheWholeFrameAtOnce)
{
    FakeBridge fb; // never drains the node's ring
    char err[256] = "";
    RkFabricPort *n0 = rk_fabric_port_new(fb.path.c_str(), 0, 2, 0, 2000, err, sizeof err);
    ASSERT_TRUE(n0) << err;
    rk_fabric_port_start(n0);
    fb.join();
    auto f = to_node(1, 0, RKF_ETH_MAX_FRAME, 5);
    const unsigned fit = RKF_RING_SLOTS / RKF_ETH_MAX_FRAGS;
    EXPECT_EQ(rk_fabric_port_eth_tx_room(n0), fit);
    unsigned sent = 0;
    int rc = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while ((rc = rk_fabric_port_eth_send(n0, f.data(), f.size())) == 0)
        sent++;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50)) << "sends do not wait";
    EXPECT_EQ(rc, -EAGAIN);
    EXPECT_EQ(sent, fit);
    EXPECT_EQ(rk_fabric_port_eth_tx_room(n0), 0u);
    // A small frame still fits in what is left.
    auto small = to_node(1, 0, 100, 6);
    EXPECT_EQ(rk_fabric_port_eth_send(n0, small.data(), small.size()), 0);
    rk_fabric_eth_stats st{};
    rk_fabric_port_eth_get_stats(n0, &st);
    EXPECT_EQ(st.tx_full, 1u);
    EXPECT_EQ(st.tx_frames, fit + 1);
    // The ring holds exactly those frames, whole.
    EthReassembler as;
    rkf_frame_hdr h;
    unsigned char payload[RKF_SLOT_SIZE];
    unsigned whole = 0;
    while (ring_pop(fb.shm->to_bridge, h, payload) == PopResult::Ok) {
        ASSERT_EQ(h.svc, RKF_SVC_ETH);
        const auto r = as.feed(h, payload);
        ASSERT_NE(r, EthReassembler::Result::Bad) << as.why();
        if (r == EthReassembler::Result::Complete) {
            EXPECT_EQ(std::vector<uint8_t>(as.frame(), as.frame() + as.size()), whole < fit ? f : small);
            whole++;
        }
    }
    EXPECT_EQ(whole, fit + 1);
    rk_fabric_port_free(n0);
}

// A node that does not read its ring: the bridge queues whole frames for it up to its limit,
// drops (and counts) what is beyond, and the node later receives only whole frames, in order.
TEST(Eth, AStalledReceiverLosesWholeFramesOnlyAndTheLossIsCounted)
{
    Bridge::Options o;
    o.overflow_limit = 100; // slots queued in the bridge beyond the node's ring
    BridgeRig b(o);
    RkFabricPort *n0 = b.port(0);
    RkFabricPort *n1 = b.port(1, nullptr, /*start=*/false);
    ASSERT_TRUE(n0 && n1);
    EthSink s1;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_NET, EthSink::rx, &s1);
    const unsigned total = 200; // 200 x 8 fragments: far beyond 1024 + 100 slots
    for (unsigned i = 0; i < total; i++) {
        auto f = to_node(1, 0, 1514, i);
        while (rk_fabric_port_eth_send(n0, f.data(), f.size()) == -EAGAIN) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    std::string js;
    for (int i = 0; i < 500; i++) {
        js = control(b.dir, "stats");
        if (port_stat(js, 0, "eth_frames_in") == total) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(port_stat(js, 0, "eth_frames_in"), total);
    const uint64_t dropped = stat_of(js, "eth_queue_drops");
    const uint64_t queued = port_stat(js, 1, "eth_frames_out");
    EXPECT_EQ(dropped + queued, total);
    EXPECT_EQ(queued, (RKF_RING_SLOTS + 100) / 8); // whole frames that fit the ring and the queue
    EXPECT_EQ(port_stat(js, 1, "eth_drops"), dropped);
    rk_fabric_port_start(n1);
    ASSERT_TRUE(s1.wait_count(queued));
    for (unsigned i = 0; i < queued; i++)
        EXPECT_EQ(s1.frames[i].second, to_node(1, 0, 1514, i));
    rk_fabric_eth_stats st{};
    rk_fabric_port_eth_get_stats(n1, &st);
    EXPECT_EQ(st.rx_bad_fragments, 0u);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

// Fragments from the bridge that do not make a frame are dropped by the port and counted.
TEST(Eth, ThePortDropsInconsistentFragmentsFromTheBridge)
{
    FakeBridge fb;
    char err[256] = "";
    RkFabricPort *n0 = rk_fabric_port_new(fb.path.c_str(), 0, 2, 0, 2000, err, sizeof err);
    ASSERT_TRUE(n0) << err;
    EthSink s;
    rk_fabric_port_eth_attach(n0, RK_FABRIC_ETH_NET, EthSink::rx, &s);
    rk_fabric_port_start(n0);
    fb.join();
    auto f = to_node(0, 1, 400, 2); // two fragments
    unsigned char slot[RKF_SLOT_SIZE];
    rkf_frame_hdr t{};
    t.magic = RKF_FRAME_MAGIC;
    t.src = 1;
    auto push = [&](unsigned i, uint32_t seq) {
        eth_frag_write(slot, t, f.data(), uint16_t(f.size()), seq, i);
        rkf_frame_hdr h;
        std::memcpy(&h, slot, sizeof h);
        ASSERT_TRUE(fb.to_node(h, slot + sizeof h));
    };
    push(1, 1); // continuation without a start
    push(0, 2);
    push(1, 3); // wrong frame
    push(0, 4);
    push(1, 4); // good
    ASSERT_TRUE(s.wait_count(1));
    EXPECT_EQ(s.frames[0].second, f);
    EXPECT_EQ(s.frames[0].first, 1u);
    rk_fabric_eth_stats st{};
    rk_fabric_port_eth_get_stats(n0, &st);
    EXPECT_EQ(st.rx_bad_fragments, 2u);
    EXPECT_EQ(st.rx_frames, 1u);
    rk_fabric_port_free(n0);
}

// `rackemu bridge restart`: once the ports are connected to the new bridge, the very
// first frame each node sends arrives, round after round. The ports reconnect at about the same
// moment (their retry timers started when the old bridge went), so the new bridge's main loop
// makes their handshakes while its router goes to sleep and wakes again: a port whose handshake
// the router missed while going to sleep used to have its frames sit in its ring until another
// port's traffic woke the router. (A timing window: how often a run hits it depends on the host.)
TEST(Eth, TheFirstFrameAfterABridgeRestartArrivesFromEveryPort)
{
    constexpr unsigned kPorts = 8, kRounds = 8;
    BridgeRig b;
    EthPorts eth(b, kPorts);
    ASSERT_TRUE(eth.ok());
    for (unsigned round = 1; round <= kRounds; round++) {
        // Odd rounds: the ports' retries (once a second) all reach the new bridge before its
        // loops run, so it makes their handshakes while its router starts and goes to sleep.
        // Even rounds: the new bridge runs at once; the ports come back as they can.
        using ms = std::chrono::milliseconds;
        b.restart(ms(0), round % 2 ? ms(1100) : ms(0));
        // All reconnected: what `operstate up` on every guest stands for.
        auto connected = [&] {
            for (unsigned i = 0; i < kPorts; i++) {
                rk_fabric_port_stats st{};
                rk_fabric_port_get_stats(eth.port[i], &st);
                if (st.connects != round + 1 || !rk_fabric_port_is_up(eth.port[i])) return false;
            }
            return true;
        };
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!connected() && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_TRUE(connected()) << "round " << round;
        // Node i sends one frame to node i+1; nothing else travels, so a frame the router does
        // not pick up now is never delivered.
        std::vector<std::vector<uint8_t>> sent;
        for (unsigned i = 0; i < kPorts; i++) {
            sent.push_back(to_node((i + 1) % kPorts, i, 98, round * kPorts + i));
            ASSERT_EQ(rk_fabric_port_eth_send(eth.port[i], sent[i].data(), sent[i].size()), 0);
        }
        std::string lost;
        for (unsigned i = 0; i < kPorts; i++) {
            if (!eth.sink[(i + 1) % kPorts].wait_count(round, std::chrono::seconds(3)))
                lost += " " + std::to_string(i);
        }
        ASSERT_EQ(lost, "") << "round " << round << ": the first frame of node(s)" << lost
                            << " was lost; bridge stats " << control(b.dir, "stats");
        for (unsigned i = 0; i < kPorts; i++)
            EXPECT_EQ(eth.sink[(i + 1) % kPorts].frames[round - 1].second, sent[i]);
    }
}

// A frame for a node that is not connected, with no other port to flood it to, reaches nobody:
// the bridge counts it (a peer not back yet after a restart).
TEST(Eth, AFrameThatFindsNoOtherPortIsCountedAsDropped)
{
    BridgeRig b;
    EthPorts eth(b, 1);
    ASSERT_TRUE(eth.ok());
    const auto f = to_node(1, 0, 60, 1);
    ASSERT_EQ(rk_fabric_port_eth_send(eth.port[0], f.data(), f.size()), 0);
    std::string js;
    for (int i = 0; i < 500 && stat_of(js, "eth_no_port") != 1; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        js = control(b.dir, "stats");
    }
    EXPECT_EQ(stat_of(js, "eth_no_port"), 1u) << js;
    EXPECT_EQ(stat_of(js, "eth_floods"), 1u);
    EXPECT_EQ(port_stat(js, 0, "eth_frames_in"), 1u);
    EXPECT_EQ(port_stat(js, 0, "drops"), 1u);
}
