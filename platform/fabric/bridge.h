// SPDX-License-Identifier: MIT
//
// The rackemu fabric bridge: the rack switch every node's fabric port connects to
// (docs/fabric.md). One listening SOCK_SEQPACKET socket takes handshakes; each accepted node
// gets a port: a shared-memory object with two frame rings. A router thread moves frames from
// every port's to_bridge ring to the destination's to_node ring, answering requests for
// absent or dead nodes with error replies, so no sender waits forever. A control socket
// answers `stats` with JSON and `shutdown`.
//
// Every peer is untrusted (docs/fabric.md, "Bad input"): the shared memory it is handed is
// sealed against truncation, its frames are validated, its replies are delivered only if they
// answer a request the bridge routed to it, its unanswered requests are capped, and its
// handshake and control connections are non-blocking state machines with deadlines, so no peer
// can crash the bridge, stall its main loop, or grow its state without bound.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "capture.h"
#include "eth_frag.h"
#include "faults.h"
#include "shm_ring.h"
#include "stage.h"

namespace rackemu::fabric {

struct PortCounters {
    uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0, drops = 0, errors = 0;
    uint64_t connects = 0, disconnects = 0;
    uint64_t outstanding = 0; // requests this port sent that are not answered yet
    // Ethernet (RKF_SVC_ETH): whole frames and their bytes (frame only), and frames lost on the
    // way out of this port (its queue full, or it went away while a fault rule held the frame).
    uint64_t eth_frames_in = 0, eth_frames_out = 0, eth_bytes_in = 0, eth_bytes_out = 0, eth_drops = 0;
    uint64_t eth_spoofed = 0; // frames refused: a source MAC, IPv4 or ARP address not this port's
    // "Poller present" (shm_ring.h): wake-ups of the node's sleeping port thread skipped because a
    // vCPU of the node held a poll lease, and wake-ups made later because a frame was still in the
    // ring when the lease lapsed (the poller had stopped).
    uint64_t wakes_skipped = 0, lease_wakes = 0;
    // Direct node-to-node rings: frames this node published on pair rings that are gone (the
    // live ones are read from their ring indices when stats are asked for).
    uint64_t pair_frames_out = 0;
    // The node's "poller present" counters on pair rings (shm_ring.h, RingCtl; the nodes' numbers):
    // wake-ups it skipped and followed up as a producer, backstop wake-ups as a consumer.
    uint64_t pair_wakes_skipped = 0, pair_follow_up_wakes = 0, pair_backstop_wakes = 0;
};

class Bridge {
public:
    struct Options {
        std::string run_dir;
        unsigned max_nodes = RKF_MAX_NODES;
        bool verbose = false;
        size_t overflow_limit = 65536; // frames queued per destination beyond its ring
        // Requests a port may have outstanding (routed, not answered); more are answered
        // CONGESTED. Covers the RMC's default window (1024 blocks per destination) to 63 peers.
        size_t max_outstanding = 65536;
        unsigned handshake_timeout_ms = 2000; // a connection must send its rkf_hello by then
        unsigned control_timeout_ms = 1000;   // a control client must send its command by then
        unsigned max_pending = 32;       // handshake (and control) connections in progress; the oldest goes
        uint64_t fault_seed = 1;         // default seed of fault rules (each rule: seed + its id)
        std::vector<std::string> faults; // fault rules installed at start (faults.h syntax)
        // Direct node-to-node rings between nodes that announce RKF_CAP_PAIR (--no-pairs, or
        // RACKEMU_FABRIC_PAIRS=0 in the bridge's environment, turns them off).
        bool pairs = true;
        // Ethernet frames must carry their port's own source MAC, and IPv4/ARP its own address
        // (eth_source_check); others are dropped and counted in eth_spoofed (--no-source-check).
        bool eth_source_check = true;
        unsigned pair_ack_timeout_us = 10000; // longest wait for a sender to see a switch
        // A switch program loaded at start (docs/switch.md): its name and key=value settings.
        std::string switch_program;
        std::vector<std::string> switch_params;
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
    // Load a switch program object (unit tests, an embedder), as `switch load` does from the
    // program table (docs/switch.md).
    void load_switch_program(std::unique_ptr<sw::Program> p, const std::string &name);
    // The longest control command, in bytes before its newline: a capture path of PATH_MAX
    // with every option fits. A longer one is refused whole, never run in part.
    static constexpr size_t kMaxControlCommand = 8192;
    std::string fabric_socket() const { return opt_.run_dir + "/fabric.sock"; }
    std::string control_socket() const { return opt_.run_dir + "/bridge.ctl"; }

private:
    enum class State { Empty, Up };
    // A handshake or control connection in progress (non-blocking, owned by the main loop).
    struct Conn {
        int fd = -1;
        bool control = false;
        uint64_t deadline_ns = 0;
        std::string in, out; // control: command received so far, answer still to send
        size_t sent = 0;
        bool replying = false;
        bool line_end = false; // control: the command's newline arrived (later bytes are dropped)
        bool too_long = false; // control: over kMaxControlCommand (`in` keeps its start)
    };
    struct Port {
        State state = State::Empty;
        int sock = -1;
        PortShm *shm = nullptr;
        std::string name;
        uint32_t caps = 0;
        uint64_t live_gen = 0; // handshakes accepted for this id: its word in the liveness table
        std::deque<std::vector<unsigned char>> overflow; // frames waiting for ring space
        PortCounters c;
        std::unique_ptr<EthReassembler> eth_asm; // Ethernet fragments from this node (router only)
        uint32_t eth_seq_out = 0;                // frame counter of what the bridge sends it
        // A wake-up of the port thread was skipped for frames up to this index of to_node (a
        // poll lease ran): the router follows up (lease_follow_up) until they are taken or the
        // lease lapses. Router only (under mu_).
        bool lease_pending = false;
        uint32_t lease_head = 0;
        bool pair_cap = false; // announced RKF_CAP_PAIR
    };
    // A direct pair a < b (docs/fabric.md, "Direct node-to-node rings"); key a * 64 + b.
    struct Pair {
        PairShm *shm = nullptr;
        uint64_t gen = 0;
        uint32_t mode = RKF_PAIR_MODE_BRIDGE; // what the bridge last wrote
        bool ready[2] = {false, false};       // node a / b mapped it (RKF_PAIR_READY): DIRECT needs both
    };

    void accept_conns(int lfd, bool control);
    // Progress one connection; true when it is finished (closed or handed to a port).
    bool service_conn(Conn &c, short revents, uint64_t now);
    void handshake(int s, const rkf_hello &h, ssize_t n);
    std::string control_reply(std::string cmd);
    void control_input(Conn &c, const char *buf, size_t n);
    std::string control_refusal(const std::string &cmd, const std::string &why);
    void drop_port(unsigned id, const char *why);
    void router();
    bool route_locked(unsigned src, const rkf_frame_hdr &h, const unsigned char *payload);
    bool deliver_locked(unsigned dst, const rkf_frame_hdr &h, const unsigned char *payload);
    // After frames were pushed to `d`'s to_node: wake its port thread if it sleeps, unless (on
    // the router thread) a poll lease lets the node's polling vCPU take them.
    void wake_node_locked(Port &d);
    // Follow up skipped wake-ups (router only); returns the earliest lease deadline still
    // running, or UINT64_MAX.
    uint64_t lease_follow_up_locked(uint64_t now);
    void error_reply_locked(const rkf_frame_hdr &req, uint16_t status);
    // Ethernet: one fragment from `src`; a whole frame is captured, passes the switch program
    // (if one is loaded), and what comes out is switched and forwarded (docs/switch.md, "Order").
    void eth_ingress_locked(unsigned src, const rkf_frame_hdr &h, const unsigned char *payload);
    // Switch one frame from `src` by its destination MAC: one copy per destination port, through
    // the fault rules.
    void eth_switch_locked(unsigned src, const unsigned char *f, size_t len);
    // One copy of a frame or packet on its way from src to dst, through the fault rules.
    void forward_locked(FaultPacket &&p);
    // Deliver what the fault rules let through (now or when held copies are due).
    void release_locked(std::vector<FaultPacket> &out);
    void eth_deliver_locked(unsigned src, unsigned dst, const unsigned char *f, size_t len);
    std::string fault_command(const std::string &args);
    std::string capture_command(const std::string &args);
    std::string switch_command(const std::string &args);
    // A reply from `dst` answers one outstanding request of `src`: forget it. False if none.
    bool settle_locked(uint16_t dst, uint16_t src, uint8_t svc, uint16_t op, uint64_t tag);
    void log(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    // Pairs: create those of a node that just connected; tear one down (telling the nodes still
    // up); set every pair's mode from the rules and capture now in force.
    void make_pairs_locked(unsigned id);
    void tear_pair_locked(unsigned a, unsigned b, uint32_t reason);
    uint32_t pair_mode_wanted_locked(unsigned a, unsigned b, const Pair &pr) const;
    void update_pair_modes_locked(); // also update_eth_watched_locked()
    void update_eth_watched_locked();
    Pair *pair_locked(unsigned x, unsigned y);
    void pair_socket_msg(unsigned id, const unsigned char *b, ssize_t n);

    Options opt_;
    int listen_fd_ = -1, ctl_fd_ = -1, wake_pipe_[2] = {-1, -1};
    int bell_fd_ = -1;
    Doorbell *bell_ = nullptr;
    int live_fd_ = -1;               // the liveness table (fabric_proto.h), handed to every node
    rkf_live_table *live_ = nullptr; // written under mu_ on connect and disconnect
    std::mutex mu_;                  // ports_, outstanding_, counters
    std::array<Port, RKF_MAX_NODES> ports_;
    // Requests routed to a node and not yet answered: (dst, src, svc, op, tag). A reply is
    // delivered only if it settles one (same svc, op and tag, from the node the request went
    // to); NODE_GONE answers each of them if the destination dies.
    // The count is of identical keys (a requester may reuse a tag); each reply settles one.
    // At most Options::max_outstanding per requester (PortCounters::outstanding).
    std::map<std::tuple<uint16_t, uint16_t, uint8_t, uint16_t, uint64_t>, uint32_t> outstanding_;
    uint64_t outstanding_total_ = 0;
    uint64_t malformed_ = 0, noroute_ = 0, spoofed_ = 0, congested_ = 0, refused_handshakes_ = 0;
    uint64_t unsolicited_ = 0, over_cap_ = 0, conn_timeouts_ = 0, conn_evicted_ = 0;
    // Ethernet switch: frames flooded (broadcast, multicast, unknown unicast), partial frames
    // dropped, frames addressed to their own sender, frames lost to a full destination queue,
    // frames that found no other port connected (flooded to nobody), frames whose source
    // addresses were not their port's (eth_source_check).
    uint64_t eth_floods_ = 0, eth_bad_fragments_ = 0, eth_hairpin_ = 0, eth_queue_drops_ = 0,
             eth_no_port_ = 0, eth_spoofed_ = 0;
    // Fault rules (under mu_): copies lost because their destination went away while held.
    FaultEngine faults_;
    uint64_t fault_lost_ = 0;
    std::vector<FaultPacket> fault_out_; // scratch, router only
    Capture capture_;
    sw::Stage stage_; // the programmable stage (under mu_); a program loaded: every frame passes it
    std::map<unsigned, Pair> pairs_; // under mu_
    uint64_t pair_gen_ = 0, pairs_made_ = 0, pairs_torn_ = 0, pair_switches_ = 0, pair_ack_timeouts_ = 0,
             pair_broken_ = 0, pair_bad_markers_ = 0, pair_replies_ = 0;
    bool held_before_ = false;                     // router: fault rules held frames at its last pass
    std::vector<Conn> conns_;                      // main loop only
    std::atomic<uint64_t> router_sleeps_{0};       // written by the router without mu_, read by stats_json()
    uint64_t wakes_skipped_ = 0, lease_wakes_ = 0; // all ports' PortCounters of the same names (mu_)
    std::atomic<uint64_t> wakeups_{
        0}; // futex wake-ups the router sent (node port threads, blocked senders); no mu_
    std::atomic<bool> stopping_{false};
    std::thread router_;
    uint64_t start_ns_ = 0;
    uint64_t log_budget_ = 0, log_window_ = 0;
};

} // namespace rackemu::fabric
