// SPDX-License-Identifier: MIT
//
// Packet capture in the bridge (docs/fabric.md, "Capture"): a pcapng file of the frames that
// cross chosen ports, as the switch sees them. Ethernet frames are recorded with link type
// DLT_EN10MB (1), so Wireshark/tshark decode IP, ARP and RoCEv2 (UDP 4791: BTH opcodes, PSNs)
// with no configuration; rackemu's own service frames (rkf_frame_hdr + payload, little-endian as
// on the rings) with DLT_USER0 (147), decoded by tools/wireshark/rackemu.lua. Each captured node
// gets two interfaces, "node<i>" (Ethernet) and "node<i>-rackemu" (its service frames); each
// record carries its direction in epb_flags: inbound = sent by the node into the switch,
// outbound = delivered by the switch to the node (after fault rules).
// Not thread-safe: the bridge calls it under its lock.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace rackemu::fabric {

class Capture {
public:
    struct Options {
        std::string path;       // absolute; created or truncated
        uint64_t nodes = ~0ull; // bitmask of node ids
        bool eth = true, rkf = true;
        bool in = true, out = false;
        uint32_t snaplen = 65535;
        uint64_t max_bytes = 1ull << 30; // stop recording (and say so) beyond this file size
    };
    ~Capture() { stop(); }
    // Parse "path=/abs/file.pcapng nodes=0,1 what=eth|rackemu|all dir=in|out|both snaplen=N max_mb=N".
    static bool parse(const std::string &args, Options &o, std::string &err);
    bool start(const Options &o, std::string &err);
    void stop();
    bool active() const { return f_ != nullptr; }
    bool wants(unsigned node, bool out, bool eth) const
    {
        return f_ && (o_.nodes >> node & 1) && (out ? o_.out : o_.in) && (eth ? o_.eth : o_.rkf);
    }
    void record(unsigned node, bool out, bool eth, const unsigned char *data, size_t len);
    void flush();
    std::string status_json() const;

private:
    void block(uint32_t type, const void *body, size_t len);

    FILE *f_ = nullptr;
    Options o_;
    int iface_[64] = {}; // node -> index of its Ethernet interface (its rackemu one is +1), -1 if none
    uint64_t frames_ = 0, bytes_ = 0, skipped_ = 0, written_ = 0;
    bool full_ = false;
    std::string error_;
};

} // namespace rackemu::fabric
