// A bridge running in a thread of the test process, and ports connected to it
// (shared by the fabric unit tests).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "bridge.h"
#include "rk_fabric_port.h"

namespace rackemu::fabric::test {

struct BridgeRig {
    std::string dir;
    Bridge *bridge = nullptr;
    std::thread thr;
    BridgeRig()
    {
        char tmpl[] = "/tmp/rackemu-test-XXXXXX";
        dir = mkdtemp(tmpl);
        bridge = new Bridge(Bridge::Options{dir, 8});
        std::string err;
        EXPECT_TRUE(bridge->start(err)) << err;
        thr = std::thread([this] { bridge->run(); });
    }
    void stop()
    {
        if (!bridge) return;
        bridge->stop();
        thr.join();
        delete bridge;
        bridge = nullptr;
    }
    ~BridgeRig()
    {
        stop();
        std::system(("rm -rf " + dir).c_str());
    }
    // A connected port; started unless `start` is false (register services first, then start).
    RkFabricPort *port(unsigned id, std::string *err_out = nullptr, bool start = true)
    {
        char err[256] = "";
        RkFabricPort *p = rk_fabric_port_new((dir + "/fabric.sock").c_str(), id, 8, 2000, err, sizeof err);
        if (p && start) rk_fabric_port_start(p);
        if (err_out) *err_out = err;
        return p;
    }
};

inline rkf_frame_hdr request(uint8_t svc, uint16_t dst, uint64_t tag, uint16_t len)
{
    rkf_frame_hdr h{};
    h.type = RKF_T_REQ;
    h.svc = svc;
    h.op = 1;
    h.dst = dst;
    h.tag = tag;
    h.len = len;
    return h;
}
} // namespace rackemu::fabric::test
