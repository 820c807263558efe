// SPDX-License-Identifier: MIT
// Capture read back by tshark (docs/fabric.md, "Capture"): a RoCEv2 frame built by the RNIC's
// wire code (hw/rnic/wire.h) crosses the bridge, and tshark decodes its BTH opcode and PSN with
// no configuration; rackemu's own frames are decoded by tools/wireshark/rackemu.lua.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "bridge_rig.h"
#include "wire.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;

namespace {

std::string run(const std::string &cmd)
{
    std::string out;
    FILE *p = popen(cmd.c_str(), "r");
    if (!p) return out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
        out.append(buf.data(), n);
    pclose(p);
    return out;
}

bool have_tshark()
{
    return std::system("command -v tshark >/dev/null 2>&1") == 0;
}

} // namespace

TEST(CaptureTshark, DecodesACapturedRoceV2WriteAndRackemuFramesWithTheLuaDissector)
{
    if (!have_tshark())
        GTEST_SKIP() << "tshark is not installed (apt-get install tshark; platform/setup/packages.txt)";
    const char *src = std::getenv("RACKEMU_SRC");
    ASSERT_TRUE(src) << "meson passes RACKEMU_SRC (the source tree) to this test";
    BridgeRig b;
    RkFabricPort *n0 = b.port(0), *n1 = b.port(1);
    ASSERT_TRUE(n0 && n1);
    EthSink s;
    rk_fabric_port_eth_attach(n1, RK_FABRIC_ETH_ROCE, EthSink::rx, &s);
    const std::string path = b.dir + "/roce.pcapng";
    ASSERT_NE(control(b.dir, "capture start path=" + path + " nodes=0\n").find("\"ok\":true"),
              std::string::npos);

    namespace rn = rackemu::rnic;
    rn::Packet p;
    rkf_eth_node_mac(1, p.l3.dst_mac.data());
    rkf_eth_node_mac(0, p.l3.src_mac.data());
    p.l3.src_ip = rkf_eth_node_ipv4(0);
    p.l3.dst_ip = rkf_eth_node_ipv4(1);
    p.bth.opcode = ROCE_OP_WRITE_ONLY;
    p.bth.dqpn = 0x11;
    p.bth.psn = 0x123456;
    p.bth.ackreq = true;
    p.reth.va = 0x1000;
    p.reth.rkey = 0xabcd;
    const uint8_t data[64] = {1, 2, 3};
    p.reth.dma_len = sizeof data;
    p.payload = data;
    p.payload_len = sizeof data;
    uint8_t frame[512];
    size_t len = 0;
    ASSERT_EQ(rn::build_frame(p, frame, sizeof frame, &len), rn::WireError::Ok);
    ASSERT_EQ(rk_fabric_port_eth_send(n0, frame, len), 0);
    Mailbox m;
    rk_fabric_port_register(n0, RKF_SVC_ECHO, nullptr, Mailbox::on_reply, nullptr, &m);
    rkf_frame_hdr h = request(RKF_SVC_ECHO, 1, 0x77, 4);
    ASSERT_EQ(rk_fabric_port_send(n0, &h, "abc"), 0);
    ASSERT_TRUE(m.wait([&] { return !m.replies.empty(); }));
    ASSERT_TRUE(s.wait_count(1));
    EXPECT_EQ(s.frames[0].second, std::vector<uint8_t>(frame, frame + len));
    ASSERT_NE(control(b.dir, "capture stop\n").find("\"frames\":2"), std::string::npos);

    // The RoCEv2 frame: Wireshark's InfiniBand dissector on UDP 4791, no options.
    const std::string roce = run("tshark -r " + path +
                                 " -Y infiniband -T fields -e infiniband.bth.opcode -e infiniband.bth.psn "
                                 "-e infiniband.bth.destqp -e infiniband.reth.r_key 2>/dev/null");
    EXPECT_EQ(roce, "10\t1193046\t0x000011\t0x0000abcd\n") << roce;
    // The echo request with the Lua dissector.
    const std::string lua = std::string(src) + "/tools/wireshark/rackemu.lua";
    const std::string rk = run("tshark -X lua_script:" + lua + " -r " + path +
                               " -Y rackemu -T fields -e rackemu.type -e rackemu.svc -e rackemu.src -e "
                               "rackemu.dst -e rackemu.tag -e rackemu.len 2>/dev/null");
    EXPECT_EQ(rk, "1\t2\t0\t1\t0x0000000000000077\t4\n") << rk;
    rk_fabric_port_free(n0);
    rk_fabric_port_free(n1);
}
