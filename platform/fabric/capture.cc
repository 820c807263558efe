// SPDX-License-Identifier: MIT
// pcapng capture in the bridge (see capture.h; format: the pcapng specification, IETF
// draft-ietf-opsawg-pcapng: section header, interface description and enhanced packet blocks).
#include "capture.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>
#include <vector>

#include "rackemu/fabric_proto.h"

namespace rackemu::fabric {

namespace {
constexpr uint32_t kShb = 0x0A0D0D0A, kIdb = 1, kEpb = 6;
constexpr uint16_t kLinkEthernet = 1, kLinkUser0 = 147;

void put16(std::vector<unsigned char> &b, uint16_t v)
{
    b.insert(b.end(), reinterpret_cast<unsigned char *>(&v), reinterpret_cast<unsigned char *>(&v) + 2);
}
void put32(std::vector<unsigned char> &b, uint32_t v)
{
    b.insert(b.end(), reinterpret_cast<unsigned char *>(&v), reinterpret_cast<unsigned char *>(&v) + 4);
}
void pad4(std::vector<unsigned char> &b)
{
    while (b.size() % 4)
        b.push_back(0);
}
void option(std::vector<unsigned char> &b, uint16_t code, const void *v, size_t len)
{
    put16(b, code);
    put16(b, uint16_t(len));
    b.insert(b.end(), static_cast<const unsigned char *>(v), static_cast<const unsigned char *>(v) + len);
    pad4(b);
}
void end_options(std::vector<unsigned char> &b)
{
    put32(b, 0);
}
bool number(const std::string &v, uint64_t max, uint64_t &out)
{
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12) return false;
    out = std::stoull(v);
    return out <= max;
}
} // namespace

bool Capture::parse(const std::string &args, Options &o, std::string &err)
{
    std::stringstream ss(args);
    std::string w;
    std::vector<std::string> keys; // given so far: a second value would silently replace the first
    while (ss >> w) {
        const size_t eq = w.find('=');
        const std::string k = eq == std::string::npos ? w : w.substr(0, eq);
        const std::string v = eq == std::string::npos ? "" : w.substr(eq + 1);
        uint64_t n = 0;
        if (std::find(keys.begin(), keys.end(), k) != keys.end()) {
            err = "capture option '" + k + "' is given twice; give each option once";
            return false;
        }
        keys.push_back(k);
        if (k == "path") {
            if (v.empty() || v[0] != '/') {
                err = "capture path must be absolute (the bridge runs in its own directory)";
                return false;
            }
            o.path = v;
        } else if (k == "nodes") {
            o.nodes = 0;
            std::stringstream ns(v);
            std::string item;
            while (std::getline(ns, item, ',')) {
                if (!number(item, RKF_MAX_NODES - 1, n)) {
                    err = "bad node '" + item + "' in nodes=: expected node ids 0..63 separated by commas";
                    return false;
                }
                o.nodes |= 1ull << n;
            }
            if (!o.nodes) {
                err = "nodes= names no node";
                return false;
            }
        } else if (k == "what") {
            if (v != "eth" && v != "rackemu" && v != "all") {
                err = "what= must be eth, rackemu or all";
                return false;
            }
            o.eth = v != "rackemu";
            o.rkf = v != "eth";
        } else if (k == "dir") {
            if (v != "in" && v != "out" && v != "both") {
                err = "dir= must be in, out or both";
                return false;
            }
            o.in = v != "out";
            o.out = v != "in";
        } else if (k == "snaplen") {
            if (!number(v, 65535, n) || n < 64) {
                err = "snaplen= must be 64..65535";
                return false;
            }
            o.snaplen = uint32_t(n);
        } else if (k == "max_mb") {
            if (!number(v, 1ull << 20, n) || n < 1) {
                err = "max_mb= must be 1..1048576";
                return false;
            }
            o.max_bytes = n << 20;
        } else {
            err = "unknown capture option '" + k + "' (path=, nodes=, what=, dir=, snaplen=, max_mb=)";
            return false;
        }
    }
    if (o.path.empty()) {
        err = "capture needs path=/absolute/file.pcapng";
        return false;
    }
    return true;
}

void Capture::block(uint32_t type, const void *body, size_t len)
{
    const uint32_t total = uint32_t(12 + len);
    fwrite(&type, 4, 1, f_);
    fwrite(&total, 4, 1, f_);
    fwrite(body, 1, len, f_);
    fwrite(&total, 4, 1, f_);
    written_ += total;
}

bool Capture::start(const Options &o, std::string &err)
{
    stop();
    FILE *f = fopen(o.path.c_str(), "wbx");
    if (!f && errno == EEXIST) f = fopen(o.path.c_str(), "wb");
    if (!f) {
        err = "cannot create " + o.path + ": " + strerror(errno);
        return false;
    }
    f_ = f;
    o_ = o;
    frames_ = bytes_ = skipped_ = written_ = 0;
    full_ = false;
    std::vector<unsigned char> b;
    put32(b, 0x1A2B3C4D); // byte-order magic: the file is in this host's order
    put16(b, 1);
    put16(b, 0);
    put32(b, 0xffffffffu); // section length: not given
    put32(b, 0xffffffffu);
    const char app[] = "rackemu-bridge";
    option(b, 4, app, sizeof app - 1); // shb_userappl
    end_options(b);
    block(kShb, b.data(), b.size());
    int next = 0;
    for (unsigned i = 0; i < RKF_MAX_NODES; i++) {
        iface_[i] = -1;
        if (!(o.nodes >> i & 1)) continue;
        iface_[i] = next;
        for (int k = 0; k < 2; k++) {
            b.clear();
            put16(b, k ? kLinkUser0 : kLinkEthernet);
            put16(b, 0);
            put32(b, o.snaplen);
            const std::string name = "node" + std::to_string(i) + (k ? "-rackemu" : "");
            option(b, 2, name.data(), name.size()); // if_name
            const std::string desc =
                k ? "rackemu service frames (rkf_frame_hdr + payload; tools/wireshark/rackemu.lua)"
                  : "Ethernet frames of the node's fabric port";
            option(b, 3, desc.data(), desc.size()); // if_description
            const uint8_t nanoseconds = 9;
            option(b, 9, &nanoseconds, 1); // if_tsresol
            end_options(b);
            block(kIdb, b.data(), b.size());
            next++;
        }
    }
    fflush(f_);
    return true;
}

void Capture::record(unsigned node, bool out, bool eth, const unsigned char *data, size_t len)
{
    if (!wants(node, out, eth)) return;
    if (written_ >= o_.max_bytes) {
        full_ = true;
        skipped_++;
        return;
    }
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t t = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    const uint32_t cap = uint32_t(len < o_.snaplen ? len : o_.snaplen);
    std::vector<unsigned char> b;
    b.reserve(32 + cap);
    put32(b, uint32_t(iface_[node] + (eth ? 0 : 1)));
    put32(b, uint32_t(t >> 32));
    put32(b, uint32_t(t));
    put32(b, cap);
    put32(b, uint32_t(len));
    b.insert(b.end(), data, data + cap);
    pad4(b);
    const uint32_t flags = out ? 2u : 1u; // epb_flags direction: 1 inbound, 2 outbound
    option(b, 2, &flags, 4);
    end_options(b);
    block(kEpb, b.data(), b.size());
    frames_++;
    bytes_ += len;
}

void Capture::flush()
{
    if (f_) fflush(f_);
}

void Capture::stop()
{
    if (!f_) return;
    fclose(f_);
    f_ = nullptr;
}

std::string Capture::status_json() const
{
    std::ostringstream s;
    s << "{\"active\":" << (f_ ? "true" : "false");
    if (f_) {
        // The path was given by the operator through the control socket: escape what JSON needs.
        std::string p;
        for (char c : o_.path) {
            if (c == '"' || c == '\\') p += '\\';
            if (static_cast<unsigned char>(c) < 0x20) continue;
            p += c;
        }
        s << ",\"path\":\"" << p << "\",\"frames\":" << frames_ << ",\"bytes\":" << bytes_
          << ",\"file_bytes\":" << written_ << ",\"skipped_full\":" << skipped_
          << ",\"full\":" << (full_ ? "true" : "false") << ",\"snaplen\":" << o_.snaplen
          << ",\"max_mb\":" << (o_.max_bytes >> 20);
    }
    s << "}";
    return s.str();
}

} // namespace rackemu::fabric
