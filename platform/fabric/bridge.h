// SPDX-License-Identifier: MIT
//
// The rackemu fabric bridge: the rack switch every node's fabric port connects to
// (docs/fabric.md). One listening SOCK_SEQPACKET socket takes handshakes; each accepted node
// gets a port: a shared-memory object with two frame rings. A router thread moves frames from
// every port's to_bridge ring to the destination's to_node ring, answering requests for
// absent or dead nodes with error replies, so no sender waits forever. A control socket
// answers `stats` with JSON and `shutdown`.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shm_ring.h"

namespace rackemu::fabric {

struct PortCounters {
    uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0, drops = 0, errors = 0;
    uint64_t connects = 0, disconnects = 0;
};

class Bridge {
public:
    struct Options {
        std::string run_dir;
        unsigned max_nodes = RKF_MAX_NODES;
        bool verbose = false;
        size_t overflow_limit = 65536; // frames queued per destination beyond its ring
    };

    explicit Bridge(Options o);
    ~Bridge();
    Bridge(const Bridge &) = delete;
    Bridge &operator=(const Bridge &) = delete;

    // Create the sockets; false with `err` set on failure.
    bool start(std::string &err);
    // Serve until stop() or a `shutdown` control command; returns when everything is closed.
    void run();
    void stop();

    std::string stats_json();
    std::string fabric_socket() const { return opt_.run_dir + "/fabric.sock"; }
    std::string control_socket() const { return opt_.run_dir + "/bridge.ctl"; }

private:
    enum class State { Empty, Up };
    struct Port {
        State state = State::Empty;
        int sock = -1;
        PortShm *shm = nullptr;
        std::string name;
        uint32_t caps = 0;
        std::deque<std::vector<unsigned char>> overflow; // frames waiting for ring space
        PortCounters c;
    };

    void accept_node();
    void handle_control(int fd);
    void drop_port(unsigned id, const char *why);
    void router();
    bool route_locked(unsigned src, const rkf_frame_hdr &h, const unsigned char *payload);
    bool deliver_locked(unsigned dst, const rkf_frame_hdr &h, const unsigned char *payload);
    void error_reply_locked(const rkf_frame_hdr &req, uint16_t status);
    void log(const char *fmt, ...) __attribute__((format(printf, 2, 3)));

    Options opt_;
    int listen_fd_ = -1, ctl_fd_ = -1, wake_pipe_[2] = {-1, -1};
    int bell_fd_ = -1;
    Doorbell *bell_ = nullptr;
    std::mutex mu_; // ports_, outstanding_, counters
    std::array<Port, RKF_MAX_NODES> ports_;
    // Requests routed to a node and not yet answered: (dst, src, svc, tag). Used to answer
    // NODE_GONE for each of them if the destination dies.
    std::map<std::tuple<uint16_t, uint16_t, uint8_t, uint64_t>, uint16_t> outstanding_;
    uint64_t malformed_ = 0, noroute_ = 0, spoofed_ = 0, congested_ = 0, refused_handshakes_ = 0;
    uint64_t router_sleeps_ = 0;
    std::atomic<bool> stopping_{false};
    std::thread router_;
    uint64_t start_ns_ = 0;
    uint64_t log_budget_ = 0, log_window_ = 0;
};

} // namespace rackemu::fabric
