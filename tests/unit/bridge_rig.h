// A bridge running in a thread of the test process, ports connected to it, and the fakes and
// collectors around them (shared by the fabric unit tests; the handshake itself, shared with the
// fuzz harnesses, is fabric_handshake.h).
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "bridge.h"
#include "fabric_handshake.h"
#include "rk_fabric_port.h"

namespace rackemu::fabric::test {

struct BridgeRig {
    std::string dir;
    Bridge::Options opt;
    Bridge *bridge = nullptr;
    std::thread thr;
    explicit BridgeRig(Bridge::Options o = {}) : opt(std::move(o))
    {
        char tmpl[] = "/tmp/rackemu-test-XXXXXX";
        dir = mkdtemp(tmpl);
        opt.run_dir = dir;
        opt.max_nodes = 8;
        launch();
    }
    // `hold`: how long the new bridge listens before its loops run (nodes that connect meanwhile
    // wait for their welcome, as they do while a loaded host has not scheduled the bridge yet).
    void launch(std::chrono::milliseconds hold = std::chrono::milliseconds(0))
    {
        bridge = new Bridge(opt);
        std::string err;
        EXPECT_TRUE(bridge->start(err)) << err;
        std::this_thread::sleep_for(hold);
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
    // `rackemu bridge restart`: the bridge goes away and, `gap` later, a new one (fresh state,
    // same options and sockets) starts (launch); the ports see their link go down and reconnect
    // on their own (at once, or at their next retry, once a second, if the first one failed).
    void restart(std::chrono::milliseconds gap = std::chrono::milliseconds(0),
                 std::chrono::milliseconds hold = std::chrono::milliseconds(0))
    {
        stop();
        std::this_thread::sleep_for(gap);
        launch(hold);
    }
    ~BridgeRig()
    {
        stop();
        std::system(("rm -rf " + dir).c_str());
    }
    // A connected port; started unless `start` is false (register services first, then start).
    RkFabricPort *port(unsigned id, std::string *err_out = nullptr, bool start = true, uint32_t caps = 0)
    {
        char err[256] = "";
        RkFabricPort *p =
            rk_fabric_port_new((dir + "/fabric.sock").c_str(), id, 8, caps, 2000, err, sizeof err);
        if (p && start) rk_fabric_port_start(p);
        if (err_out) *err_out = err;
        return p;
    }
};

// One command on the bridge's control socket, the way the launcher sends it; the answer read
// until EOF, or "" if none came within `timeout_ms`.
inline std::string control(const std::string &dir, const std::string &cmd, int timeout_ms = 5000)
{
    int s = unix_connect(dir + "/bridge.ctl", SOCK_STREAM);
    if (s < 0) return "";
    (void)!send(s, cmd.data(), cmd.size(), MSG_NOSIGNAL);
    std::string out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
        pollfd pfd{s, POLLIN, 0};
        if (left.count() <= 0 || poll(&pfd, 1, int(left.count())) <= 0) {
            out.clear();
            break;
        }
        char buf[4096];
        ssize_t n = recv(s, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, size_t(n));
    }
    close(s);
    return out;
}

// A fake node speaking the handshake by hand: it keeps the file descriptors the bridge hands
// out (the port's shared memory and the doorbell), which a real port maps and closes.
struct RawNode {
    int sock = -1, shm_fd = -1, bell_fd = -1;
    rkf_welcome w{};
    ssize_t n = -1;
    explicit RawNode(const std::string &dir, unsigned id, const char *name = "raw node", size_t name_len = 0)
    {
        sock = unix_connect(dir + "/fabric.sock", SOCK_SEQPACKET);
        if (sock < 0) return;
        const rkf_hello h = make_hello(id, 8, name, name_len);
        if (send(sock, &h, sizeof h, MSG_NOSIGNAL) != sizeof h) return;
        int fds[2];
        n = recv_welcome(sock, w, fds);
        shm_fd = fds[0];
        bell_fd = fds[1];
    }
    bool welcomed() const
    {
        return n == sizeof w && w.status == RKF_WELCOME_OK && shm_fd >= 0 && bell_fd >= 0;
    }
    ~RawNode()
    {
        for (int fd : {sock, shm_fd, bell_fd})
            if (fd >= 0) close(fd);
    }
};

// A fake bridge: answers one handshake with port memory and a doorbell it made itself (sealed
// as the real bridge does, or not), then lets the test read what the node sends and inject
// what the "bridge" delivers, frame by frame.
struct FakeBridge {
    std::string dir, path;
    int lfd = -1, conn = -1, shm_fd = -1, bell_fd = -1;
    PortShm *shm = nullptr;
    Doorbell *bell = nullptr;
    std::thread thr;
    explicit FakeBridge(bool seal = true, size_t shm_size = sizeof(PortShm))
    {
        char tmpl[] = "/tmp/rackemu-fake-XXXXXX";
        dir = mkdtemp(tmpl);
        path = dir + "/fabric.sock";
        lfd = unix_listen(path, 4);
        EXPECT_GE(lfd, 0) << strerror(errno);
        const unsigned flags = MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0u);
        shm_fd = memfd_create("fake-port", flags);
        bell_fd = memfd_create("fake-bell", flags);
        EXPECT_EQ(ftruncate(shm_fd, off_t(shm_size)), 0);
        EXPECT_EQ(ftruncate(bell_fd, sizeof(Doorbell)), 0);
        if (seal) {
            for (int fd : {shm_fd, bell_fd})
                EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
        }
        if (shm_size >= sizeof(PortShm)) {
            shm = static_cast<PortShm *>(
                mmap(nullptr, sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0));
            shm->magic = RKF_SHM_MAGIC;
            shm->version = RKF_PROTO_VERSION;
        }
        bell = static_cast<Doorbell *>(
            mmap(nullptr, sizeof(Doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, bell_fd, 0));
        thr = std::thread([this] {
            pollfd pfd{lfd, POLLIN, 0};
            if (poll(&pfd, 1, 5000) <= 0) return;
            conn = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
            rkf_hello h{};
            if (conn < 0 || recv(conn, &h, sizeof h, 0) != sizeof h) return;
            (void)send_welcome(conn, make_welcome_ok(), shm_fd, bell_fd);
        });
    }
    void join()
    {
        if (thr.joinable()) thr.join();
    }
    // The next frame the node sent, waiting up to 5 s.
    bool next_from_node(rkf_frame_hdr &h, unsigned char *payload)
    {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::chrono::steady_clock::now() < end) {
            if (ring_pop(shm->to_bridge, h, payload) == PopResult::Ok) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return false;
    }
    // Deliver a frame to the node exactly as given.
    bool to_node(const rkf_frame_hdr &h, const void *payload)
    {
        if (!ring_push(shm->to_node, h, payload)) return false;
        futex_wake(&shm->to_node.ctl.sleeping);
        return true;
    }
    ~FakeBridge()
    {
        join();
        if (shm) munmap(shm, sizeof(PortShm));
        if (bell) munmap(bell, sizeof(Doorbell));
        for (int fd : {lfd, conn, shm_fd, bell_fd})
            if (fd >= 0) close(fd);
        std::system(("rm -rf " + dir).c_str());
    }
};

// Is `s` valid UTF-8 without raw control characters (what a strict JSON parser accepts)?
inline bool json_text_ok(const std::string &s)
{
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 && c != '\n') return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
        if (!len || i + len > s.size()) return false;
        for (size_t k = 1; k < len; k++)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

// Collects what a port's service delivers: replies (with payloads) of the node's own requests,
// requests from other nodes (never answered: a stopped or hostile node), link changes. Register
// it with rk_fabric_port_register(port, svc, Mailbox::on_request, Mailbox::on_reply,
// Mailbox::on_link, &m) (any of them nullptr), then wait() for what the test expects.
struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<rkf_frame_hdr> replies, requests;
    std::vector<std::vector<unsigned char>> payloads; // of the replies
    std::vector<int> links;                           // link up (1) / down (0) events

    static void on_reply(void *o, const rkf_frame_hdr *h, const void *p)
    {
        auto *m = static_cast<Mailbox *>(o);
        std::lock_guard lk(m->mu);
        m->replies.push_back(*h);
        auto *b = static_cast<const unsigned char *>(p);
        m->payloads.emplace_back(b, b + h->len);
        m->cv.notify_all();
    }
    static void on_request(void *o, RkFabricPort *, const rkf_frame_hdr *h, const void *)
    {
        auto *m = static_cast<Mailbox *>(o);
        std::lock_guard lk(m->mu);
        m->requests.push_back(*h);
        m->cv.notify_all();
    }
    static void on_link(void *o, int up)
    {
        auto *m = static_cast<Mailbox *>(o);
        std::lock_guard lk(m->mu);
        m->links.push_back(up);
        m->cv.notify_all();
    }
    // Whether `pred` (evaluated under the lock) became true within `d`.
    template <typename P> bool wait(P pred, std::chrono::milliseconds d = std::chrono::seconds(10))
    {
        std::unique_lock lk(mu);
        return cv.wait_for(lk, d, pred);
    }
    size_t nreplies()
    {
        std::lock_guard lk(mu);
        return replies.size();
    }
};

// Collects what a port's Ethernet receiver gets: (sending node, frame bytes). Attach it with
// rk_fabric_port_eth_attach(port, class, EthSink::rx, &sink), then wait_count() for the frames.
struct EthSink {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<unsigned, std::vector<uint8_t>>> frames;
    static void rx(void *o, const uint8_t *f, size_t len, unsigned src)
    {
        auto *s = static_cast<EthSink *>(o);
        std::lock_guard lk(s->mu);
        s->frames.emplace_back(src, std::vector<uint8_t>(f, f + len));
        s->cv.notify_all();
    }
    bool wait_count(size_t n, std::chrono::milliseconds d = std::chrono::seconds(10))
    {
        std::unique_lock lk(mu);
        return cv.wait_for(lk, d, [&] { return frames.size() >= n; });
    }
    size_t count()
    {
        std::lock_guard lk(mu);
        return frames.size();
    }
    // Frame i's bytes, copied under the lock (the port thread may be appending).
    std::vector<uint8_t> frame(size_t i)
    {
        std::lock_guard lk(mu);
        return i < frames.size() ? frames[i].second : std::vector<uint8_t>{};
    }
};

// A top-level counter of the bridge's stats JSON (UINT64_MAX if absent).
inline uint64_t stat_of(const std::string &json, const std::string &key)
{
    const std::string k = "\"" + key + "\":";
    size_t p = json.find(k);
    if (p == std::string::npos) return UINT64_MAX;
    return std::strtoull(json.c_str() + p + k.size(), nullptr, 10);
}

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

// A reply (op 1) as a node would send it to `dst` for request `tag`: the forged answers of the
// hardening tests start from this.
inline rkf_frame_hdr reply(uint8_t svc, uint16_t dst, uint64_t tag, uint16_t len)
{
    rkf_frame_hdr h = request(svc, dst, tag, len);
    h.type = RKF_T_REPLY;
    return h;
}
} // namespace rackemu::fabric::test
