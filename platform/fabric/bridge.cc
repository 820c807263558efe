// SPDX-License-Identifier: MIT
// The rackemu fabric bridge; see bridge.h and docs/fabric.md.
#include "bridge.h"

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace rackemu::fabric {

namespace {
bool make_addr(const std::string &path, sockaddr_un &sa)
{
    sa = {};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) return false;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    return true;
}

// Is some process listening on `path`?
bool socket_alive(const std::string &path, int type)
{
    sockaddr_un sa;
    if (!make_addr(path, sa)) return false;
    int s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (s < 0) return false;
    bool alive = connect(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0;
    close(s);
    return alive;
}

int listen_on(const std::string &path, int type, std::string &err)
{
    sockaddr_un sa;
    if (!make_addr(path, sa)) {
        err = "socket path too long: " + path;
        return -1;
    }
    if (socket_alive(path, type)) {
        err = "another bridge is already serving " + path + " (stop it, or use another --run-dir)";
        return -1;
    }
    unlink(path.c_str());
    int s = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0 || bind(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) < 0 || listen(s, 64) < 0) {
        err = "cannot listen on " + path + ": " + strerror(errno);
        if (s >= 0) close(s);
        return -1;
    }
    return s;
}

void welcome(int s, uint16_t status, const char *msg, const int *fds, int nfds)
{
    rkf_welcome w{};
    w.magic = RKF_HELLO_MAGIC;
    w.version = RKF_PROTO_VERSION;
    w.status = status;
    w.ring_slots = RKF_RING_SLOTS;
    w.slot_size = RKF_SLOT_SIZE;
    w.max_nodes = RKF_MAX_NODES;
    snprintf(w.message, sizeof w.message, "%s", msg);
    iovec iov{&w, sizeof w};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))]{};
    if (nfds) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    (void)sendmsg(s, &mh, MSG_NOSIGNAL);
}

} // namespace

Bridge::Bridge(Options o) : opt_(std::move(o))
{
    if (opt_.max_nodes == 0 || opt_.max_nodes > RKF_MAX_NODES) opt_.max_nodes = RKF_MAX_NODES;
}

Bridge::~Bridge()
{
    stop();
    if (router_.joinable()) router_.join();
    for (unsigned i = 0; i < RKF_MAX_NODES; i++) {
        if (ports_[i].state == State::Up) drop_port(i, "bridge shutting down");
    }
    for (int fd : {listen_fd_, ctl_fd_, wake_pipe_[0], wake_pipe_[1], bell_fd_}) {
        if (fd >= 0) close(fd);
    }
    if (bell_) munmap(bell_, sizeof(Doorbell));
    if (listen_fd_ >= 0) unlink(fabric_socket().c_str());
    if (ctl_fd_ >= 0) unlink(control_socket().c_str());
}

void Bridge::log(const char *fmt, ...)
{
    const uint64_t now = now_ns();
    if (now - log_window_ > 1000000000ull) {
        log_window_ = now;
        log_budget_ = 50; // at most 50 lines per second; the counters keep the full story
    }
    if (!log_budget_) return;
    log_budget_--;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rackemu-bridge: [%8.3f] %s\n", (now - start_ns_) / 1e9, buf);
}

bool Bridge::start(std::string &err)
{
    start_ns_ = now_ns();
    if (opt_.run_dir.empty()) {
        err = "no run directory given (--run-dir DIR)";
        return false;
    }
    if (mkdir(opt_.run_dir.c_str(), 0700) < 0 && errno != EEXIST) {
        err = "cannot create run directory " + opt_.run_dir + ": " + strerror(errno);
        return false;
    }
    if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) < 0) {
        err = std::string("pipe: ") + strerror(errno);
        return false;
    }
    bell_fd_ = memfd_create("rackemu-bridge-doorbell", MFD_CLOEXEC);
    if (bell_fd_ < 0 || ftruncate(bell_fd_, sizeof(Doorbell)) < 0) {
        err = std::string("memfd for the doorbell: ") + strerror(errno);
        return false;
    }
    void *b = mmap(nullptr, sizeof(Doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, bell_fd_, 0);
    if (b == MAP_FAILED) {
        err = std::string("mmap doorbell: ") + strerror(errno);
        return false;
    }
    bell_ = static_cast<Doorbell *>(b);
    listen_fd_ = listen_on(fabric_socket(), SOCK_SEQPACKET, err);
    if (listen_fd_ < 0) return false;
    ctl_fd_ = listen_on(control_socket(), SOCK_STREAM, err);
    return ctl_fd_ >= 0;
}

void Bridge::stop()
{
    stopping_ = true;
    if (wake_pipe_[1] >= 0) {
        char c = 1;
        (void)!write(wake_pipe_[1], &c, 1);
    }
    if (bell_) futex_wake(&bell_->sleeping);
}

void Bridge::accept_node()
{
    int s = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) return;
    pollfd pfd{s, POLLIN, 0};
    rkf_hello h{};
    ssize_t n = -1;
    if (poll(&pfd, 1, 2000) > 0) n = recv(s, &h, sizeof h, MSG_DONTWAIT);
    std::lock_guard lk(mu_);
    auto refuse = [&](uint16_t st, const std::string &msg) {
        refused_handshakes_++;
        log("refused a node: %s", msg.c_str());
        welcome(s, st, msg.c_str(), nullptr, 0);
        close(s);
    };
    if (n != sizeof h || h.magic != RKF_HELLO_MAGIC) {
        refuse(RKF_WELCOME_MALFORMED, "handshake was not an rkf_hello (" + std::to_string(n) + " bytes)");
        return;
    }
    if (h.version != RKF_PROTO_VERSION) {
        refuse(RKF_WELCOME_BAD_VERSION, "protocol version " + std::to_string(h.version) + ", bridge speaks " +
                                            std::to_string(RKF_PROTO_VERSION));
        return;
    }
    if (h.node_id >= opt_.max_nodes) {
        refuse(RKF_WELCOME_BAD_NODE, "node id " + std::to_string(h.node_id) + " out of range 0.." +
                                         std::to_string(opt_.max_nodes - 1));
        return;
    }
    Port &p = ports_[h.node_id];
    if (p.state == State::Up) {
        refuse(RKF_WELCOME_DUPLICATE, "node id " + std::to_string(h.node_id) + " is already connected (" +
                                          p.name + ")");
        return;
    }
    int mfd = memfd_create("rackemu-port", MFD_CLOEXEC);
    void *m = MAP_FAILED;
    if (mfd >= 0 && ftruncate(mfd, sizeof(PortShm)) == 0) {
        m = mmap(nullptr, sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    }
    if (m == MAP_FAILED) {
        if (mfd >= 0) close(mfd);
        refuse(RKF_WELCOME_NO_RESOURCES, std::string("bridge cannot allocate port memory: ") + strerror(errno));
        return;
    }
    auto *shm = static_cast<PortShm *>(m);
    shm->magic = RKF_SHM_MAGIC;
    shm->version = RKF_PROTO_VERSION;
    int fds[2] = {mfd, bell_fd_};
    welcome(s, RKF_WELCOME_OK, "welcome", fds, 2);
    close(mfd);
    h.name[sizeof h.name - 1] = 0;
    p.state = State::Up;
    p.sock = s;
    p.shm = shm;
    p.name = h.name;
    p.caps = h.caps;
    p.overflow.clear();
    p.c.connects++;
    log("node %u connected (%s, caps 0x%x, sees %u nodes)", unsigned(h.node_id), p.name.c_str(), h.caps,
        h.node_count);
}

void Bridge::error_reply_locked(const rkf_frame_hdr &req, uint16_t status)
{
    if (req.type != RKF_T_REQ) return;
    rkf_frame_hdr r{};
    r.magic = RKF_FRAME_MAGIC;
    r.type = RKF_T_REPLY;
    r.svc = req.svc;
    r.op = req.op;
    r.src = req.dst;
    r.dst = req.src;
    r.status = status;
    r.tag = req.tag;
    r.ts_ns = now_ns();
    if (r.dst < RKF_MAX_NODES && ports_[r.dst].state == State::Up) {
        deliver_locked(r.dst, r, nullptr);
    }
}

void Bridge::drop_port(unsigned id, const char *why)
{
    std::lock_guard lk(mu_);
    Port &p = ports_[id];
    if (p.state != State::Up) return;
    p.state = State::Empty;
    close(p.sock);
    p.sock = -1;
    munmap(p.shm, sizeof(PortShm));
    p.shm = nullptr;
    p.c.disconnects++;
    // Requests the dead node will never answer: tell their senders.
    unsigned failed = 0;
    for (auto it = outstanding_.begin(); it != outstanding_.end();) {
        auto [dst, src, svc, tag] = it->first;
        if (dst == id || src == id) {
            if (dst == id) {
                rkf_frame_hdr req{};
                req.type = RKF_T_REQ;
                req.svc = svc;
                req.src = src;
                req.dst = dst;
                req.tag = tag;
                for (uint16_t k = 0; k < it->second; k++) {
                    error_reply_locked(req, RKF_ST_NODE_GONE);
                    failed++;
                }
            }
            it = outstanding_.erase(it);
        } else {
            ++it;
        }
    }
    p.overflow.clear(); // requests among them are in outstanding_ and were answered above
    log("node %u disconnected (%s); %u outstanding request(s) answered NODE_GONE", id, why, failed);
}

bool Bridge::deliver_locked(unsigned dst, const rkf_frame_hdr &h, const unsigned char *payload)
{
    Port &d = ports_[dst];
    if (d.overflow.empty() && ring_push(d.shm->to_node, h, payload)) {
        d.c.frames_out++;
        d.c.bytes_out += sizeof h + h.len;
        futex_wake(&d.shm->to_node.ctl.sleeping);
        return true;
    }
    if (d.overflow.size() < opt_.overflow_limit) {
        std::vector<unsigned char> f(sizeof h + h.len);
        std::memcpy(f.data(), &h, sizeof h);
        if (h.len) std::memcpy(f.data() + sizeof h, payload, h.len);
        d.overflow.push_back(std::move(f));
        return true;
    }
    congested_++;
    d.c.drops++;
    log("queue for node %u overflowed (%zu frames); frame from node %u dropped", dst, d.overflow.size(),
        unsigned(h.src));
    if (h.type == RKF_T_REQ) {
        outstanding_.erase({h.dst, h.src, h.svc, h.tag});
        error_reply_locked(h, RKF_ST_CONGESTED);
    }
    return false;
}

bool Bridge::route_locked(unsigned src, const rkf_frame_hdr &h, const unsigned char *payload)
{
    Port &s = ports_[src];
    if (const char *why = frame_defect(h)) {
        malformed_++;
        s.c.errors++;
        s.c.drops++;
        log("dropped a malformed frame from node %u: %s", src, why);
        return false;
    }
    if (h.src != src) {
        spoofed_++;
        s.c.errors++;
        s.c.drops++;
        log("dropped a frame from node %u claiming to come from node %u", src, unsigned(h.src));
        return false;
    }
    const bool present = h.dst < opt_.max_nodes && ports_[h.dst].state == State::Up;
    if (h.type == RKF_T_REPLY) {
        outstanding_.erase({uint16_t(src), h.dst, h.svc, h.tag});
    }
    if (!present) {
        noroute_++;
        s.c.drops++;
        if (h.type == RKF_T_REQ) {
            error_reply_locked(h, RKF_ST_NOROUTE);
        }
        return false;
    }
    if (h.type == RKF_T_REQ) {
        outstanding_[{h.dst, h.src, h.svc, h.tag}]++;
    }
    return deliver_locked(h.dst, h, payload);
}

void Bridge::router()
{
    unsigned char payload[RKF_SLOT_SIZE];
    uint64_t last_activity = now_ns();
    while (!stopping_.load(std::memory_order_relaxed)) {
        unsigned moved = 0;
        bool backlog = false;
        std::vector<unsigned> corrupt;
        {
            std::lock_guard lk(mu_);
            for (unsigned i = 0; i < opt_.max_nodes; i++) {
                Port &p = ports_[i];
                if (p.state != State::Up) continue;
                // Retry frames waiting for room in this node's ring first, in order.
                while (!p.overflow.empty()) {
                    auto &f = p.overflow.front();
                    rkf_frame_hdr h;
                    std::memcpy(&h, f.data(), sizeof h);
                    if (!ring_push(p.shm->to_node, h, f.data() + sizeof h)) break;
                    p.c.frames_out++;
                    p.c.bytes_out += f.size();
                    p.overflow.pop_front();
                    futex_wake(&p.shm->to_node.ctl.sleeping);
                    moved++;
                }
                backlog |= !p.overflow.empty();
                for (unsigned k = 0; k < 64; k++) {
                    rkf_frame_hdr h;
                    PopResult r = ring_pop(p.shm->to_bridge, h, payload);
                    if (r == PopResult::Empty) break;
                    if (r == PopResult::Corrupt) {
                        corrupt.push_back(i);
                        break;
                    }
                    p.c.frames_in++;
                    p.c.bytes_in += sizeof h + std::min<uint32_t>(h.len, RKF_MAX_PAYLOAD);
                    route_locked(i, h, payload);
                    moved++;
                }
            }
        }
        for (unsigned i : corrupt) {
            {
                std::lock_guard lk(mu_);
                malformed_++;
                ports_[i].c.errors++;
            }
            drop_port(i, "corrupt ring indices");
        }
        const uint64_t now = now_ns();
        if (moved) {
            last_activity = now;
            continue;
        }
        if (now - last_activity < kSpinNs) {
            poll_pause(now - last_activity);
            continue;
        }
        router_sleeps_++;
        futex_sleep(&bell_->sleeping, backlog ? 1 : kSleepMs, [&] {
            std::lock_guard lk(mu_);
            if (stopping_) return true;
            for (unsigned i = 0; i < opt_.max_nodes; i++) {
                if (ports_[i].state == State::Up && !ring_empty(ports_[i].shm->to_bridge)) return true;
            }
            return false;
        });
        last_activity = now_ns() - kSpinNs / 2;
    }
}

std::string Bridge::stats_json()
{
    std::lock_guard lk(mu_);
    std::ostringstream o;
    o << "{\"uptime_s\":" << (now_ns() - start_ns_) / 1e9 << ",\"max_nodes\":" << opt_.max_nodes
      << ",\"malformed\":" << malformed_ << ",\"noroute\":" << noroute_ << ",\"spoofed\":" << spoofed_
      << ",\"congested\":" << congested_ << ",\"refused_handshakes\":" << refused_handshakes_
      << ",\"outstanding\":" << outstanding_.size() << ",\"router_sleeps\":" << router_sleeps_ << ",\"ports\":[";
    bool first = true;
    for (unsigned i = 0; i < opt_.max_nodes; i++) {
        const Port &p = ports_[i];
        if (p.state != State::Up && p.c.connects == 0) continue;
        if (!first) o << ",";
        first = false;
        std::string name;
        for (char ch : p.name) {
            if (ch == '"' || ch == '\\') name += '\\';
            if (static_cast<unsigned char>(ch) >= 0x20) name += ch;
        }
        o << "{\"node\":" << i << ",\"state\":\"" << (p.state == State::Up ? "up" : "down") << "\",\"name\":\""
          << name << "\",\"frames_in\":" << p.c.frames_in << ",\"frames_out\":" << p.c.frames_out
          << ",\"bytes_in\":" << p.c.bytes_in << ",\"bytes_out\":" << p.c.bytes_out << ",\"drops\":" << p.c.drops
          << ",\"errors\":" << p.c.errors << ",\"connects\":" << p.c.connects
          << ",\"disconnects\":" << p.c.disconnects << ",\"queued\":" << p.overflow.size() << "}";
    }
    o << "]}";
    return o.str();
}

void Bridge::handle_control(int fd)
{
    pollfd pfd{fd, POLLIN, 0};
    char buf[128] = {};
    ssize_t n = 0;
    if (poll(&pfd, 1, 1000) > 0) n = recv(fd, buf, sizeof buf - 1, 0);
    std::string cmd(buf, n > 0 ? size_t(n) : 0);
    while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == '\r' || cmd.back() == ' ')) cmd.pop_back();
    std::string reply;
    if (cmd == "stats") {
        reply = stats_json() + "\n";
    } else if (cmd == "shutdown") {
        reply = "{\"ok\":true}\n";
        stop();
    } else {
        reply = "{\"error\":\"unknown command '" + cmd.substr(0, 32) + "'; commands: stats, shutdown\"}\n";
    }
    (void)!send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    close(fd);
}

void Bridge::run()
{
    router_ = std::thread([this] { router(); });
    while (!stopping_) {
        std::vector<pollfd> pfds = {{listen_fd_, POLLIN, 0}, {ctl_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
        std::vector<unsigned> ids;
        {
            std::lock_guard lk(mu_);
            for (unsigned i = 0; i < RKF_MAX_NODES; i++) {
                if (ports_[i].state == State::Up) {
                    pfds.push_back({ports_[i].sock, POLLIN, 0});
                    ids.push_back(i);
                }
            }
        }
        if (poll(pfds.data(), pfds.size(), 1000) < 0 && errno != EINTR) break;
        if (pfds[0].revents & POLLIN) accept_node();
        if (pfds[1].revents & POLLIN) {
            int c = accept4(ctl_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c >= 0) handle_control(c);
        }
        for (size_t k = 0; k < ids.size(); k++) {
            if (!pfds[3 + k].revents) continue;
            char b[256];
            ssize_t n = recv(pfds[3 + k].fd, b, sizeof b, MSG_DONTWAIT);
            if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
                drop_port(ids[k], n == 0 ? "connection closed" : strerror(errno));
            } else if (n > 0) {
                std::lock_guard lk(mu_);
                ports_[ids[k]].c.errors++; // nothing is expected on the socket after the handshake
            }
        }
    }
    stopping_ = true;
    futex_wake(&bell_->sleeping);
    if (router_.joinable()) router_.join();
}

} // namespace rackemu::fabric
