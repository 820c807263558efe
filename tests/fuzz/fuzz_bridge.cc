// SPDX-License-Identifier: MIT
// libFuzzer harness of the fabric bridge's frame intake (platform/fabric/bridge.cc: ring_pop,
// frame validation, routing, reply matching, outstanding-request caps, overflow queues, error
// replies, dropping a port with corrupt ring indices) and of its handshake; docs/fuzzing.md.
//
// A real Bridge runs in this process for the whole fuzzing session (its main loop and router
// threads, as in rackemu-bridge). Each run connects fresh nodes through the real handshake,
// plays the input into their to_bridge rings, waits until the router has taken everything,
// checks what reached the nodes' to_node rings, and disconnects them (the bridge forgets their
// state, so runs do not depend on each other beyond the bridge's counters).
// Input: one config byte (nodes 1..4), then operations
//   0 a frame from node n (header fields, payload; magic, src and len may be wrong)
//   1 node n's to_bridge ring gets a bogus head index (the bridge must drop the port)
//   2 node n stops consuming its to_node ring (ring looks full: overflow queue, CONGESTED)
//   3 node n consumes again              4 node n disconnects
//   5 a handshake with a hello made from the input (any length), on a new connection
// Checked: every frame delivered to node n is structurally valid, addressed to n, and a reply
// only if n had sent the matching request; the bridge stays up (stats answer).
#include "fuzz_input.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bridge.h"
#include "fabric_handshake.h" // tests/unit: the handshake the unit tests' fake nodes speak

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;
using rackemu::fuzz::Input;

namespace {

constexpr unsigned kMaxNodes = 8;

// ---- adapter: a bridge in this process and raw nodes speaking its handshake ----
struct Rig {
    std::string dir;
    Bridge *bridge = nullptr;
    std::thread thr;
    Rig()
    {
        dir = rackemu::fuzz::temp_dir_removed_at_exit("rackemu-fuzz-bridge");
        Bridge::Options o;
        o.run_dir = dir;
        o.max_nodes = kMaxNodes;
        o.overflow_limit = 4;  // small, so the input reaches the overflow and CONGESTED paths
        o.max_outstanding = 6; // likewise the per-requester cap
        bridge = new Bridge(o);
        std::string err;
        if (!bridge->start(err)) {
            std::fprintf(stderr, "fuzz_bridge: bridge start failed: %s\n", err.c_str());
            std::abort();
        }
        thr = std::thread([this] { bridge->run(); });
    }
    std::string sock() const { return dir + "/fabric.sock"; }
};

// Send `hello` (n bytes) and read the welcome; the descriptors handed over, if any, in fds.
// Why the last handshake() failed (for the failure message), and how long it took.
char handshake_error[96] = "";

bool handshake(int s, const void *hello, size_t n, rkf_welcome &w, int fds[2])
{
    fds[0] = fds[1] = -1;
    const auto t0 = std::chrono::steady_clock::now();
    auto fail = [&](const char *what, long v) {
        const long ms =
            long(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
                     .count());
        std::snprintf(handshake_error, sizeof handshake_error, "%s %ld (errno %d) after %ld ms", what, v,
                      errno, ms);
        return false;
    };
    const ssize_t sent = send(s, hello, n, MSG_NOSIGNAL);
    if (sent != ssize_t(n)) return fail("send returned", long(sent));
    const ssize_t got = recv_welcome(s, w, fds);
    if (got != ssize_t(sizeof w)) return fail("recv_welcome returned", long(got));
    return true;
}

struct Node {
    unsigned id = 0;
    int sock = -1;
    PortShm *shm = nullptr;
    Doorbell *bell = nullptr;
    bool stalled = false, dead = false;
    bool last_ok = false; // the last refused handshake, for the failure message
    unsigned last_status = 0;
    char last_message[112] = "";
    std::multiset<std::tuple<uint16_t, uint8_t, uint16_t, uint64_t>> asked; // (dst, svc, op, tag)
    bool connect(const Rig &rig, unsigned node_id)
    {
        id = node_id;
        // The previous run's node may still be up: the bridge learns of its hang-up on its own
        // thread; on a loaded machine that took longer than 0.2 s once (a 10-minute run), so
        // wait up to 2 s before calling a refusal a failure.
        for (int attempt = 0; attempt < 2000; attempt++) {
            sock = unix_connect(rig.sock(), SOCK_SEQPACKET);
            if (sock < 0) return false;
            char name[sizeof(rkf_hello::name)];
            std::snprintf(name, sizeof name, "fuzz node %u", id);
            const rkf_hello h = make_hello(id, kMaxNodes, name);
            rkf_welcome w{};
            int fds[2] = {-1, -1};
            const bool ok = handshake(sock, &h, sizeof h, w, fds);
            if (ok && w.status == RKF_WELCOME_OK && fds[0] >= 0 && fds[1] >= 0) {
                shm = static_cast<PortShm *>(
                    mmap(nullptr, sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
                bell = static_cast<Doorbell *>(
                    mmap(nullptr, sizeof(Doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0));
                close(fds[0]);
                close(fds[1]);
                FUZZ_CHECK(shm != MAP_FAILED && bell != MAP_FAILED);
                return true;
            }
            for (int fd : fds)
                if (fd >= 0) close(fd);
            close(sock);
            sock = -1;
            last_ok = ok;
            last_status = w.status;
            std::snprintf(last_message, sizeof last_message, "%.*s", int(sizeof w.message), w.message);
            if (!ok || w.status != RKF_WELCOME_DUPLICATE) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return false;
    }
    void disconnect()
    {
        if (shm) munmap(shm, sizeof(PortShm));
        if (bell) munmap(bell, sizeof(Doorbell));
        if (sock >= 0) close(sock);
        shm = nullptr;
        bell = nullptr;
        sock = -1;
        dead = true;
        stalled = false;
    }
    // Take every frame the bridge delivered and check it.
    void drain()
    {
        if (dead || stalled) return;
        rkf_frame_hdr h;
        unsigned char payload[RKF_SLOT_SIZE];
        PopResult r;
        while ((r = ring_pop(shm->to_node, h, payload)) == PopResult::Ok) {
            FUZZ_CHECK(frame_defect(h) == nullptr);
            FUZZ_CHECK(h.dst == id);
            if (h.type == RKF_T_REPLY) {
                // the bridge delivers a reply only for a request this node sent to its src
                auto it = asked.find({h.src, h.svc, h.op, h.tag});
                FUZZ_CHECK(it != asked.end());
                asked.erase(it);
            }
        }
        FUZZ_CHECK(r == PopResult::Empty); // the bridge never corrupts a ring
    }
};
// ---- end of adapter ----

Rig *rig()
{
    static Rig *r = new Rig; // lives as long as the process
    return r;
}

void wait_router(Node *nodes, unsigned n)
{
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
        bool idle = true;
        for (unsigned i = 0; i < n; i++) {
            Node &x = nodes[i];
            if (x.dead) continue;
            futex_wake(&x.bell->sleeping);
            if (!ring_empty(x.shm->to_bridge)) idle = false;
        }
        if (idle || std::chrono::steady_clock::now() > end) return;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Rig *r = rig();
    Input in(data, size);
    const unsigned n = 1 + in.u8() % 4;
    Node nodes[4];
    for (unsigned i = 0; i < n; i++) {
        if (!nodes[i].connect(*r, i)) {
            std::fprintf(
                stderr, "fuzz_bridge: node %u could not connect (handshake %s, welcome status %u: %s)\n", i,
                nodes[i].last_ok ? "answered" : "failed", nodes[i].last_status, nodes[i].last_message);
            std::abort();
        }
    }
    for (unsigned ops = 0; !in.empty() && ops < 256; ops++) {
        const uint8_t op = in.u8() % 6;
        Node &x = nodes[in.u8() % n];
        switch (op) {
        case 0: {
            rkf_frame_hdr h{};
            const uint8_t flags = in.u8();
            h.magic = (flags & 1) ? in.u32() : RKF_FRAME_MAGIC;
            h.type = (flags & 2) ? in.u8() : uint8_t(1 + in.u8() % 3);
            h.svc = (flags & 4) ? in.u8() : uint8_t(in.u8() % RKF_SVC_COUNT);
            h.op = in.u8() % 4;
            h.src = (flags & 8) ? in.u16() : uint16_t(x.id);
            h.dst = (flags & 16) ? in.u16() : uint16_t(in.u8() % (n + 1));
            h.len = (flags & 32) ? in.u16() : uint16_t(in.u8() % (RKF_MAX_PAYLOAD + 1));
            h.status = in.u8() % 8;
            h.tag = in.u8();
            unsigned char payload[RKF_MAX_PAYLOAD];
            in.bytes(payload, std::min<uint32_t>(h.len, RKF_MAX_PAYLOAD));
            if (x.dead) break;
            // pushed as a raw slot: the length field is published as given
            Ring &ring = x.shm->to_bridge;
            const uint32_t head = ring.ctl.head.load(std::memory_order_relaxed);
            if (head - ring.ctl.tail.load(std::memory_order_acquire) >= RKF_RING_SLOTS) break;
            unsigned char *slot = ring.slots[head % RKF_RING_SLOTS];
            std::memcpy(slot, &h, sizeof h);
            std::memcpy(slot + sizeof h, payload, std::min<uint32_t>(h.len, RKF_MAX_PAYLOAD));
            if (h.type == RKF_T_REQ && !frame_defect(h) && h.src == x.id)
                x.asked.insert({h.dst, h.svc, h.op, h.tag});
            ring.ctl.head.store(head + 1, std::memory_order_release);
            futex_wake(&x.bell->sleeping);
            break;
        }
        case 1: {
            const uint32_t bogus = in.u32() | 0x800; // more than a ring's worth ahead
            if (x.dead) break;
            wait_router(nodes, n);
            x.shm->to_bridge.ctl.head.store(x.shm->to_bridge.ctl.tail.load() + bogus,
                                            std::memory_order_release);
            futex_wake(&x.bell->sleeping);
            // the router must drop the port (its ring indices are corrupt)
            const std::string down = "{\"node\":" + std::to_string(x.id) + ",\"state\":\"down\"";
            const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (r->bridge->stats_json().find(down) == std::string::npos) {
                FUZZ_CHECK(std::chrono::steady_clock::now() < end);
                futex_wake(&x.bell->sleeping);
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
            x.disconnect();
            break;
        }
        case 2:
            if (x.dead) break;
            wait_router(nodes, n);
            x.drain();
            // the consumer index a full ring's worth behind: the bridge sees no room
            x.shm->to_node.ctl.tail.store(x.shm->to_node.ctl.head.load() - RKF_RING_SLOTS,
                                          std::memory_order_release);
            x.stalled = true;
            break;
        case 3:
            if (x.dead || !x.stalled) break;
            wait_router(nodes, n);
            x.shm->to_node.ctl.tail.store(x.shm->to_node.ctl.head.load(), std::memory_order_release);
            x.stalled = false;
            break;
        case 4:
            if (x.dead) break;
            wait_router(nodes, n);
            x.drain();
            x.disconnect();
            break;
        case 5: {
            unsigned char hello[96];
            const size_t len = in.u8() % sizeof hello;
            in.bytes(hello, len);
            if (in.u8() & 1 && len >= sizeof(rkf_hello)) { // a mostly valid hello for a free id
                rkf_hello h;
                std::memcpy(&h, hello, sizeof h);
                h.magic = RKF_HELLO_MAGIC;
                h.version = RKF_PROTO_VERSION;
                h.node_id = uint16_t(n + h.node_id % (kMaxNodes + 2 - n));
                std::memcpy(hello, &h, sizeof h);
            }
            const int s = unix_connect(r->sock(), SOCK_SEQPACKET);
            if (s < 0) break;
            rkf_welcome w{};
            int fds[2] = {-1, -1};
            if (len && handshake(s, hello, len, w, fds)) {
                FUZZ_CHECK(w.magic == RKF_HELLO_MAGIC);
                FUZZ_CHECK((w.status == RKF_WELCOME_OK) == (fds[0] >= 0));
            }
            for (int fd : fds)
                if (fd >= 0) close(fd);
            close(s);
            break;
        }
        }
    }
    wait_router(nodes, n);
    for (unsigned i = 0; i < n; i++) {
        if (nodes[i].stalled) {
            nodes[i].shm->to_node.ctl.tail.store(nodes[i].shm->to_node.ctl.head.load());
            nodes[i].stalled = false;
            wait_router(nodes, n);
        }
    }
    for (unsigned i = 0; i < n; i++) {
        nodes[i].drain();
        nodes[i].disconnect();
    }
    FUZZ_CHECK(r->bridge->stats_json().size() > 2); // still answering
    return 0;
}
