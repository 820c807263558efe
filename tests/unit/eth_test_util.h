// Ethernet fixtures of the fabric unit tests (test_eth.cc, test_faults.cc): frames that show
// when they are lost, misplaced or cut, and a rig's ports with an Ethernet sink on each.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "bridge_rig.h"

namespace rackemu::fabric::test {

// A frame of `len` bytes (at least 18) to `dst` from node `src`'s MAC, EtherType 0x88b5 (local
// experimental), filled with a pattern that depends on `seed` and the offset (so a misplaced or
// lost fragment shows).
inline std::vector<uint8_t> eth_frame(const uint8_t dst[6], unsigned src, size_t len, uint32_t seed)
{
    std::vector<uint8_t> f(len);
    std::memcpy(f.data(), dst, 6);
    rkf_eth_node_mac(src, f.data() + 6);
    f[12] = 0x88;
    f[13] = 0xb5;
    for (size_t i = 14; i < len; i++)
        f[i] = uint8_t((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return f;
}

// The same to node `dst`'s MAC.
inline std::vector<uint8_t> to_node(unsigned dst, unsigned src, size_t len, uint32_t seed)
{
    uint8_t mac[6];
    rkf_eth_node_mac(dst, mac);
    return eth_frame(mac, src, len, seed);
}

// A frame to node `dst` that carries the number `n` right after its Ethernet header (number_of).
inline std::vector<uint8_t> numbered(unsigned dst, unsigned src, uint32_t n, size_t len = 300)
{
    std::vector<uint8_t> f = to_node(dst, src, len, n);
    std::memcpy(f.data() + RKF_ETH_HDR_LEN, &n, sizeof n);
    return f;
}

inline uint32_t number_of(const std::vector<uint8_t> &f)
{
    uint32_t n;
    std::memcpy(&n, f.data() + RKF_ETH_HDR_LEN, sizeof n);
    return n;
}

// Ports 0 .. count-1 of a rig, each with an EthSink on its netdev receiver (RK_FABRIC_ETH_NET);
// freed with this object (declare it after the rig), also when an assertion ends the test early.
struct EthPorts {
    static constexpr unsigned kMax = 8;
    RkFabricPort *port[kMax] = {};
    EthSink sink[kMax];
    unsigned count;
    EthPorts(BridgeRig &b, unsigned n) : count(n < kMax ? n : kMax)
    {
        for (unsigned i = 0; i < count; i++) {
            port[i] = b.port(i);
            if (port[i]) rk_fabric_port_eth_attach(port[i], RK_FABRIC_ETH_NET, EthSink::rx, &sink[i]);
        }
    }
    EthPorts(const EthPorts &) = delete;
    EthPorts &operator=(const EthPorts &) = delete;
    // Every port connected.
    bool ok() const
    {
        for (unsigned i = 0; i < count; i++)
            if (!port[i]) return false;
        return true;
    }
    ~EthPorts()
    {
        for (unsigned i = 0; i < count; i++)
            if (port[i]) rk_fabric_port_free(port[i]);
    }
};

} // namespace rackemu::fabric::test
