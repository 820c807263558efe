// SPDX-License-Identifier: MIT
// Fault rules (platform/fabric/faults.h; docs/fabric.md, "Fault rules") on their own and in the
// bridge, for Ethernet frames and rackemu service frames, and the bridge's pcapng capture.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bridge_rig.h"
#include "eth_test_util.h"
#include "faults.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;

namespace {

// One control command, newline-terminated (the bridge waits up to 1 s for the end of a line).
std::string ctl(const std::string &dir, const std::string &cmd)
{
    return control(dir, cmd + "\n");
}

FaultPacket eth_packet(uint16_t src, uint16_t dst, uint8_t fill, size_t len = 100)
{
    FaultPacket p;
    p.src = src;
    p.dst = dst;
    p.eth = true;
    p.kind = EthKind::Other;
    p.bytes.assign(len, fill);
    return p;
}

FaultPacket rkf_packet(uint16_t src, uint16_t dst, uint8_t svc, size_t payload)
{
    FaultPacket p;
    p.src = src;
    p.dst = dst;
    rkf_frame_hdr h{};
    h.magic = RKF_FRAME_MAGIC;
    h.type = RKF_T_MSG;
    h.svc = svc;
    h.src = src;
    h.dst = dst;
    h.len = uint16_t(payload);
    p.bytes.resize(sizeof h + payload, 0);
    std::memcpy(p.bytes.data(), &h, sizeof h);
    return p;
}

} // namespace

TEST(FaultRules, BadRulesAreRefusedWithAReason)
{
    FaultEngine e;
    std::string err;
    const char *bad[] = {"",
                         "explode",
                         "drop prob=1.5",
                         "drop prob=0.5 every=3",
                         "drop every=0",
                         "delay",
                         "delay us=-1",
                         "down",
                         "down prob=0.5 node=1",
                         "drop src=64",
                         "drop between=1,1",
                         "drop svc=tcp",
                         "corrupt bits=0",
                         "drop us=10",
                         "drop node=1,",
                         "drop garbage"};
    for (const char *r : bad) {
        err.clear();
        EXPECT_EQ(e.add(r, err), 0u) << r;
        EXPECT_FALSE(err.empty()) << r;
    }
    EXPECT_TRUE(e.rules().empty());
    EXPECT_EQ(e.add("drop every=3 svc=eth kind=roce,arp src=0,1 limit=5 seed=9", err), 1u) << err;
    EXPECT_EQ(e.rules()[0].spec, "drop every=3 svc=eth kind=roce,arp src=0,1 limit=5 seed=9");
}

// trust-model.md finding R7: a key given twice (`prob=0.1 prob=0.2`) was accepted, the last value
// silently winning; rules and capture options refuse it, naming the key.
TEST(FaultRules, AKeyGivenTwiceIsRefusedByName)
{
    FaultEngine e;
    std::string err;
    const std::pair<const char *, const char *> twice[] = {{"drop prob=0.1 prob=0.2", "prob"},
                                                           {"drop dst=1 svc=eth dst=2", "dst"},
                                                           {"delay us=5 jitter=1 us=5", "us"},
                                                           {"down node=1 node=2", "node"},
                                                           {"drop seed=1 limit=2 seed=1", "seed"}};
    for (const auto &[rule, key] : twice) {
        err.clear();
        EXPECT_EQ(e.add(rule, err), 0u) << rule;
        EXPECT_EQ(err, "'" + std::string(key) + "' is given twice; give each key once") << rule;
    }
    EXPECT_TRUE(e.rules().empty());
    Capture::Options o;
    EXPECT_FALSE(Capture::parse("path=/tmp/a.pcapng max_mb=1 max_mb=1024", o, err));
    EXPECT_EQ(err, "capture option 'max_mb' is given twice; give each option once");
    EXPECT_FALSE(Capture::parse("path=/tmp/a.pcapng nodes=0 path=/tmp/b.pcapng", o, err));
    EXPECT_EQ(err, "capture option 'path' is given twice; give each option once");
    EXPECT_TRUE(Capture::parse("path=/tmp/a.pcapng nodes=0,1 max_mb=2", o, err)) << err;
}

TEST(FaultRules, DropEveryNthAndLimitCountExactly)
{
    FaultEngine e;
    std::string err;
    ASSERT_TRUE(e.add("drop every=3 limit=2", err)) << err;
    std::vector<FaultPacket> out;
    std::vector<int> dropped;
    for (int i = 1; i <= 12; i++) {
        if (e.apply(eth_packet(0, 1, uint8_t(i)), 0, out)) dropped.push_back(i);
    }
    EXPECT_EQ(dropped, (std::vector<int>{3, 6}));
    EXPECT_EQ(out.size(), 10u);
    EXPECT_EQ(e.rules()[0].matched, 12u);
    EXPECT_EQ(e.rules()[0].hits, 2u);
}

TEST(FaultRules, ProbabilisticRulesReplayWithTheSameSeed)
{
    auto run = [](uint64_t seed) {
        FaultEngine e(seed);
        std::string err;
        EXPECT_TRUE(e.add("drop prob=0.3", err));
        EXPECT_TRUE(e.add("corrupt prob=0.2 bits=3", err));
        std::vector<FaultPacket> out;
        std::string trace;
        for (int i = 0; i < 2000; i++) {
            if (e.apply(eth_packet(0, 1, 0), 0, out)) {
                trace += 'D';
                continue;
            }
            const auto &p = out.back();
            int flips = 0;
            for (uint8_t b : p.bytes)
                flips += __builtin_popcount(b);
            trace += char('0' + flips);
        }
        return std::make_pair(trace, e.rules()[0].hits);
    };
    const auto a = run(42), b = run(42), c = run(43);
    EXPECT_EQ(a.first, b.first);
    EXPECT_NE(a.first, c.first);
    EXPECT_GT(a.second, 500u); // ~600 of 2000 dropped
    EXPECT_LT(a.second, 700u);
    // Three flips per corrupted frame (two may cancel on the same bit: 1 or 3).
    EXPECT_NE(a.first.find('3'), std::string::npos);
}

TEST(FaultRules, MatchBySourceDestinationNodeBetweenServiceAndKind)
{
    FaultEngine e;
    std::string err;
    ASSERT_TRUE(e.add("down between=1,2", err)) << err;
    ASSERT_TRUE(e.add("drop svc=mem", err)) << err;
    ASSERT_TRUE(e.add("drop kind=roce dst=3", err)) << err;
    std::vector<FaultPacket> out;
    EXPECT_TRUE(e.apply(eth_packet(1, 2, 0), 0, out));
    EXPECT_TRUE(e.apply(eth_packet(2, 1, 0), 0, out));
    EXPECT_FALSE(e.apply(eth_packet(1, 3, 0), 0, out));
    EXPECT_TRUE(e.apply(rkf_packet(0, 1, RKF_SVC_MEM, 8), 0, out));
    EXPECT_FALSE(e.apply(rkf_packet(0, 1, RKF_SVC_RMC, 8), 0, out));
    auto roce = eth_packet(0, 3, 0);
    roce.kind = EthKind::RoceV2;
    EXPECT_TRUE(e.apply(FaultPacket(roce), 0, out));
    roce.dst = 4;
    EXPECT_FALSE(e.apply(FaultPacket(roce), 0, out));
    EXPECT_FALSE(e.apply(eth_packet(0, 3, 0), 0, out)) << "kind= matches Ethernet frames of that kind only";
    EXPECT_FALSE(e.apply(rkf_packet(0, 3, RKF_SVC_ECHO, 8), 0, out));
    EXPECT_EQ(out.size(), 5u);
    EXPECT_TRUE(e.del(1));
    EXPECT_FALSE(e.del(1));
    EXPECT_FALSE(e.apply(eth_packet(1, 2, 0), 0, out));
}

TEST(FaultRules, DelayDuplicateAndReorderHoldAndReleaseInOrder)
{
    FaultEngine e;
    std::string err;
    ASSERT_TRUE(e.add("delay us=100 src=0", err));
    ASSERT_TRUE(e.add("duplicate every=2 src=1", err));
    ASSERT_TRUE(e.add("reorder every=3 src=2 hold_us=500", err));
    std::vector<FaultPacket> out;
    // Delay: nothing now, both at +100 us in order.
    e.apply(eth_packet(0, 1, 1), 0, out);
    e.apply(eth_packet(0, 1, 2), 10000, out);
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(e.next_due(), 100000u);
    e.due(105000, out);
    ASSERT_EQ(out.size(), 1u);
    e.due(200000, out);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].bytes[0], 1);
    EXPECT_EQ(out[1].bytes[0], 2);
    out.clear();
    // Duplicate: every second packet twice.
    for (uint8_t i = 1; i <= 4; i++)
        e.apply(eth_packet(1, 0, i), 0, out);
    std::vector<int> seen;
    for (auto &p : out)
        seen.push_back(p.bytes[0]);
    EXPECT_EQ(seen, (std::vector<int>{1, 2, 2, 3, 4, 4}));
    out.clear();
    // Reorder: the third packet goes after the fourth; a held one with no successor goes at hold_us.
    for (uint8_t i = 1; i <= 6; i++)
        e.apply(eth_packet(2, 0, i), 0, out);
    seen.clear();
    for (auto &p : out)
        seen.push_back(p.bytes[0]);
    EXPECT_EQ(seen, (std::vector<int>{1, 2, 4, 3, 5}));
    EXPECT_EQ(e.held(), 1u);
    out.clear();
    e.due(600000, out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].bytes[0], 6);
}

TEST(FaultRules, CorruptFlipsPayloadBitsOfServiceFramesButNeverTheirHeader)
{
    FaultEngine e;
    std::string err;
    ASSERT_TRUE(e.add("corrupt bits=1", err));
    std::vector<FaultPacket> out;
    for (int i = 0; i < 200; i++)
        e.apply(rkf_packet(0, 1, RKF_SVC_MEM, 16), 0, out);
    e.apply(rkf_packet(0, 1, RKF_SVC_MEM, 0), 0, out); // nothing to corrupt: passes untouched
    ASSERT_EQ(out.size(), 201u);
    const FaultPacket ref = rkf_packet(0, 1, RKF_SVC_MEM, 16);
    for (int i = 0; i < 200; i++) {
        EXPECT_EQ(std::memcmp(out[i].bytes.data(), ref.bytes.data(), sizeof(rkf_frame_hdr)), 0);
        int flips = 0;
        for (size_t k = sizeof(rkf_frame_hdr); k < out[i].bytes.size(); k++)
            flips += __builtin_popcount(out[i].bytes[k]);
        EXPECT_EQ(flips, 1);
    }
    EXPECT_EQ(out[200].bytes, rkf_packet(0, 1, RKF_SVC_MEM, 0).bytes);
    EXPECT_EQ(e.rules()[0].hits, 200u);
}

// Through the bridge: rules set on the control socket act on Ethernet frames between real
// ports; counters per rule; `fault del` restores the path.
TEST(FaultRules, TheBridgeDropsDelaysAndPartitionsEthernetFramesAsTheRulesSay)
{
    BridgeRig b;
    EthPorts eth(b, 3);
    ASSERT_TRUE(eth.ok());
    RkFabricPort *n0 = eth.port[0];
    EthSink &s1 = eth.sink[1], &s2 = eth.sink[2];
    std::string r = ctl(b.dir, "fault add drop every=4 dst=1");
    EXPECT_NE(r.find("\"ok\":true,\"id\":1"), std::string::npos) << r;
    r = ctl(b.dir, "fault add down between=0,2");
    EXPECT_NE(r.find("\"id\":2"), std::string::npos) << r;
    r = ctl(b.dir, "fault add bogus");
    EXPECT_NE(r.find("\"error\":\"unknown fault action 'bogus'"), std::string::npos) << r;
    EXPECT_TRUE(json_text_ok(r));
    for (uint32_t i = 1; i <= 40; i++) {
        auto f = numbered(1, 0, i);
        ASSERT_EQ(rk_fabric_port_eth_send(n0, f.data(), f.size()), 0);
        auto g = numbered(2, 0, i);
        ASSERT_EQ(rk_fabric_port_eth_send(n0, g.data(), g.size()), 0);
    }
    ASSERT_TRUE(s1.wait_count(30));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(s1.count(), 30u);
    for (size_t k = 0; k < 30; k++)
        EXPECT_NE(number_of(s1.frames[k].second) % 4, 0u);
    EXPECT_EQ(s2.count(), 0u) << "node 0 and node 2 are partitioned";
    r = ctl(b.dir, "fault list");
    EXPECT_NE(r.find("{\"id\":1,\"rule\":\"drop every=4 dst=1 seed=2\",\"matched\":40,\"hits\":10}"),
              std::string::npos)
        << r;
    EXPECT_NE(r.find("\"matched\":40,\"hits\":40}"), std::string::npos) << r;
    // Heal the partition; add a delay and see it hold frames for at least that long.
    r = ctl(b.dir, "fault del 2");
    EXPECT_NE(r.find("\"ok\":true"), std::string::npos) << r;
    EXPECT_NE(ctl(b.dir, "fault del 2").find("\"error\""), std::string::npos);
    r = ctl(b.dir, "fault add delay us=30000 dst=2");
    ASSERT_NE(r.find("\"ok\":true"), std::string::npos) << r;
    const auto t0 = std::chrono::steady_clock::now();
    auto g = numbered(2, 0, 99);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, g.data(), g.size()), 0);
    ASSERT_TRUE(s2.wait_count(1));
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
    EXPECT_EQ(s2.frames[0].second, g);
    r = ctl(b.dir, "fault del all");
    EXPECT_NE(r.find("\"removed\":2"), std::string::npos) << r;
}

// Rackemu service frames: a dropped request is forgotten by the bridge (it does not count
// against the sender's outstanding cap), a duplicated request is answered twice (the second
// reply is dropped as unsolicited), and a partition is silence.
TEST(FaultRules, ServiceFramesAreDroppedDuplicatedAndPartitionedToo)
{
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    ASSERT_NE(ctl(b.dir, "fault add drop every=2 svc=echo src=0").find("\"ok\""), std::string::npos);
    for (uint64_t t = 1; t <= 10; t++) {
        rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, t, 8);
        ASSERT_EQ(rk_fabric_port_send(n0, &h, "payload"), 0);
    }
    ASSERT_TRUE(m.wait([&] { return m.replies.size() >= 5; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(m.nreplies(), 5u);
    for (auto &r : m.replies)
        EXPECT_EQ(r.tag % 2, 1u);
    std::string js = ctl(b.dir, "stats");
    EXPECT_NE(js.find("\"outstanding\":0,\"max_outstanding\""), std::string::npos) << js;
    ctl(b.dir, "fault del all");
    ASSERT_NE(ctl(b.dir, "fault add duplicate svc=echo src=0").find("\"ok\""), std::string::npos);
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, 100, 8);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, "payload"), 0);
    ASSERT_TRUE(m.wait([&] { return m.replies.size() >= 6; }));
    // The second reply is dropped: by the bridge (unsolicited), or, between the nodes of a
    // direct pair (the bridge matches no replies there), by the requester's port.
    auto dropped = [&] {
        js = ctl(b.dir, "stats");
        rk_fabric_port_stats st{};
        rk_fabric_port_get_stats(n0, &st);
        return stat_of(js, "unsolicited") + st.stray_replies;
    };
    for (int i = 0; i < 100 && dropped() != 1; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(dropped(), 1u) << js;
    EXPECT_EQ(m.nreplies(), 6u);
    ctl(b.dir, "fault del all");
    ASSERT_NE(ctl(b.dir, "fault add down node=1").find("\"ok\""), std::string::npos);
    h = request(RKF_SVC_ECHO, 1, 200, 8);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, "payload"), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(m.nreplies(), 6u);
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}

TEST(FaultRules, RulesGivenAtStartAreInstalledAndBadOnesStopTheStart)
{
    Bridge::Options o;
    o.faults = {"drop every=2 svc=eth"};
    BridgeRig b(o);
    EXPECT_NE(ctl(b.dir, "fault list").find("drop every=2 svc=eth seed=2"), std::string::npos);
    char tmpl[] = "/tmp/rackemu-test-XXXXXX";
    Bridge::Options bad;
    bad.run_dir = mkdtemp(tmpl);
    bad.faults = {"drop prob=7"};
    Bridge br(bad);
    std::string err;
    EXPECT_FALSE(br.start(err));
    EXPECT_NE(err.find("fault rule 'drop prob=7': bad value '7' for prob"), std::string::npos) << err;
    std::system(("rm -rf " + bad.run_dir).c_str());
}

// Capture: a pcapng file with an Ethernet and a rackemu interface per captured node; records
// carry the frames' bytes and directions.
TEST(Capture, WritesThePcapngOfTheChosenNodesFrames)
{
    BridgeRig b;
    Mailbox m; // outlives the ports, which call it
    EthPorts eth(b, 3);
    ASSERT_TRUE(eth.ok());
    RkFabricPort *n0 = eth.port[0], *n2 = eth.port[2];
    EthSink &s1 = eth.sink[1];
    const std::string path = b.dir + "/cap.pcapng";
    EXPECT_NE(ctl(b.dir, "capture start path=relative.pcapng").find("must be absolute"), std::string::npos);
    EXPECT_NE(ctl(b.dir, "capture start path=" + path + " nodes=x").find("\"error\""), std::string::npos);
    std::string r = ctl(b.dir, "capture start path=" + path + " nodes=0 dir=both");
    ASSERT_NE(r.find("\"ok\":true"), std::string::npos) << r;
    auto f = numbered(1, 0, 7, 1514);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, f.data(), f.size()), 0);
    auto g = numbered(1, 2, 8, 100); // node 2 is not captured
    ASSERT_EQ(rk_fabric_port_eth_send(n2, g.data(), g.size()), 0);
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, 5, 4);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, "abc"), 0);
    ASSERT_TRUE(s1.wait_count(2));
    ASSERT_TRUE(m.wait([&] { return !m.replies.empty(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r = ctl(b.dir, "capture stop");
    EXPECT_NE(r.find("\"frames\":3"), std::string::npos) << r; // eth in, echo request in, echo reply out
    FILE *fp = fopen(path.c_str(), "rb");
    ASSERT_TRUE(fp);
    std::vector<unsigned char> d(1 << 16);
    d.resize(fread(d.data(), 1, d.size(), fp));
    fclose(fp);
    // Walk the blocks: SHB, 2 IDBs (node0, node0-rackemu), 3 EPBs.
    std::vector<uint32_t> types;
    std::vector<std::vector<unsigned char>> packets;
    std::vector<uint32_t> ifaces, flags;
    for (size_t off = 0; off + 12 <= d.size();) {
        uint32_t type, len;
        std::memcpy(&type, &d[off], 4);
        std::memcpy(&len, &d[off + 4], 4);
        ASSERT_TRUE(len >= 12 && len % 4 == 0 && off + len <= d.size());
        uint32_t tail;
        std::memcpy(&tail, &d[off + len - 4], 4);
        ASSERT_EQ(tail, len);
        types.push_back(type);
        if (type == 6) {
            uint32_t iface, cap;
            std::memcpy(&iface, &d[off + 8], 4);
            std::memcpy(&cap, &d[off + 20], 4);
            ifaces.push_back(iface);
            packets.emplace_back(&d[off + 28], &d[off + 28 + cap]);
            uint32_t fl;
            std::memcpy(&fl, &d[off + 28 + ((cap + 3) & ~3u) + 4], 4);
            flags.push_back(fl);
        }
        off += len;
    }
    ASSERT_EQ(types, (std::vector<uint32_t>{0x0A0D0D0A, 1, 1, 6, 6, 6}));
    EXPECT_EQ(ifaces, (std::vector<uint32_t>{0, 1, 1}));
    EXPECT_EQ(flags, (std::vector<uint32_t>{1, 1, 2}));
    EXPECT_EQ(packets[0], f);
    rkf_frame_hdr req, rep;
    std::memcpy(&req, packets[1].data(), sizeof req);
    std::memcpy(&rep, packets[2].data(), sizeof rep);
    EXPECT_EQ(req.type, RKF_T_REQ);
    EXPECT_EQ(rep.type, RKF_T_REPLY);
    EXPECT_EQ(rep.tag, 5u);
}

// trust-model.md finding R5: a control command over 256 bytes was cut there and the cut command run
// (a 262-byte `fault add ... dst=2` installed a rule without dst=2; a capture with a 198-byte
// path started with max_mb=1 instead of 1024), then the client saw a reset instead of the
// answer. A command of up to Bridge::kMaxControlCommand bytes now runs whole; a longer one is
// refused whole with the limit in the answer; none is run in part.
TEST(ControlCommands, LongCommandsRunWholeAndOverLongOnesAreRefusedNeverCut)
{
    constexpr auto npos = std::string::npos;
    BridgeRig b;
    std::string r = ctl(b.dir, "fault add drop" + std::string(242, ' ') + "dst=2"); // 262 bytes
    EXPECT_NE(r.find("\"rule\":\"drop dst=2 seed=2\""), npos) << r;
    const std::string path = b.dir + "/" + std::string(198 - b.dir.size() - 8, 'p') + ".pcapng";
    ASSERT_EQ(path.size(), 198u);
    r = ctl(b.dir, "capture start path=" + path + " what=all dir=in snaplen=65535 max_mb=1024");
    EXPECT_NE(r.find("\"path\":\"" + path + "\""), npos) << r;
    EXPECT_NE(r.find("\"max_mb\":1024"), npos) << r;
    ctl(b.dir, "capture stop");

    // Spaces between the words: every prefix of these commands is a valid, broader rule.
    const std::string head = "fault add drop", tail = " dst=3";
    const size_t pad = Bridge::kMaxControlCommand - head.size() - tail.size();
    r = ctl(b.dir, head + std::string(pad, ' ') + tail); // exactly the limit
    EXPECT_NE(r.find("\"rule\":\"drop dst=3 seed=3\""), npos) << r;
    for (size_t extra : {size_t(1), size_t(100000)}) { // one byte over; many writes over
        r = ctl(b.dir, head + std::string(pad + extra, ' ') + tail);
        EXPECT_NE(r.find("longer than 8192 bytes, the limit of a control command: refused, nothing "
                         "was done"),
                  npos)
            << r;
        EXPECT_NE(r.find("the command starting 'fault add drop"), npos) << r;
        EXPECT_TRUE(json_text_ok(r)) << r;
    }
    // No newline within the deadline: what arrived may be a prefix, and is not run either.
    r = control(b.dir, "fault add drop", 5000);
    EXPECT_NE(r.find("did not end with a newline within 1000 ms: refused"), npos) << r;
    r = ctl(b.dir, "fault list");
    EXPECT_NE(r.find("\"id\":2,"), npos) << r;
    EXPECT_EQ(r.find("\"id\":3,"), npos) << "a refused command added a rule: " << r;
}
