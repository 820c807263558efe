// SPDX-License-Identifier: MIT
// The rackemu fabric bridge; see bridge.h and docs/fabric.md.
#include "bridge.h"

#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
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

// Seals that make a shared-memory object's size final: no holder of a descriptor can shrink it
// (which makes every other mapping of the lost pages fault with SIGBUS) or grow it.
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

int sealed_memfd(const char *name, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (ftruncate(fd, off_t(size)) < 0 || fcntl(fd, F_ADD_SEALS, kSeals) < 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

// The liveness table's memfd: sized and mapped writable here, then sealed against resizing and
// against any new writable mapping, so the nodes it is handed to can only map it read-only.
int live_memfd(rkf_live_table **out)
{
    int fd = memfd_create("rackemu-bridge-liveness", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    void *m = MAP_FAILED;
    if (ftruncate(fd, RKF_LIVE_SIZE) == 0) {
        m = mmap(nullptr, RKF_LIVE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (m == MAP_FAILED || fcntl(fd, F_ADD_SEALS, kSeals | F_SEAL_FUTURE_WRITE) < 0) {
        const int e = errno;
        if (m != MAP_FAILED) munmap(m, RKF_LIVE_SIZE);
        close(fd);
        errno = e;
        return -1;
    }
    auto *t = static_cast<rkf_live_table *>(m);
    t->version = RKF_PROTO_VERSION;
    __atomic_store_n(&t->magic, RKF_LIVE_MAGIC, __ATOMIC_RELEASE);
    *out = t;
    return fd;
}

// Append `s` as the content of a JSON string: quotes, backslashes and control characters
// escaped, valid UTF-8 kept, every byte that is not part of a valid UTF-8 sequence replaced by
// U+FFFD. Peer-chosen text (node names, commands) goes through here.
void json_escape(std::string &o, const std::string &s)
{
    static const char hex[] = "0123456789abcdef";
    const auto *p = reinterpret_cast<const unsigned char *>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            o += '\\';
            o += char(c);
            i++;
            continue;
        }
        if (c < 0x20 || c == 0x7f) {
            o += "\\u00";
            o += hex[c >> 4];
            o += hex[c & 15];
            i++;
            continue;
        }
        if (c < 0x80) {
            o += char(c);
            i++;
            continue;
        }
        // Multi-byte: the lead byte's length and the ranges of RFC 3629 (no overlong forms,
        // no surrogates, nothing above U+10FFFF).
        size_t len = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        }
        bool ok = len && i + len <= n && p[i + 1] >= lo && p[i + 1] <= hi;
        for (size_t k = 2; ok && k < len; k++)
            ok = (p[i + k] & 0xc0) == 0x80;
        if (ok) {
            o.append(s, i, len);
            i += len;
        } else {
            o += "\\ufffd";
            i++;
        }
    }
}

// Peer-chosen text for a log line: printable ASCII, everything else as \xNN.
std::string printable(const std::string &s)
{
    std::string o;
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            o += char(c);
        } else {
            char b[5];
            snprintf(b, sizeof b, "\\x%02x", c);
            o += b;
        }
    }
    return o;
}

bool welcome(int s, uint16_t status, const char *msg, const int *fds, int nfds)
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
    alignas(cmsghdr) char cbuf[CMSG_SPACE(3 * sizeof(int))]{};
    if (nfds) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    return sendmsg(s, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(sizeof w);
}

// A pair message (fabric_proto.h) on a node's socket, with the pair's memfd for RKF_PAIR_UP.
bool pair_msg(int s, uint16_t kind, unsigned peer, uint32_t reason, uint64_t gen, int fd)
{
    rkf_pair_msg m{};
    m.magic = RKF_PAIR_MAGIC;
    m.kind = kind;
    m.peer = uint16_t(peer);
    m.reason = reason;
    m.gen = gen;
    iovec iov{&m, sizeof m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))]{};
    if (fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(s, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(sizeof m);
}

} // namespace

Bridge::Bridge(Options o) : opt_(std::move(o))
{
    if (opt_.max_nodes == 0 || opt_.max_nodes > RKF_MAX_NODES) opt_.max_nodes = RKF_MAX_NODES;
    if (opt_.max_outstanding == 0) opt_.max_outstanding = 1;
    if (opt_.max_pending == 0) opt_.max_pending = 1;
    if (const char *e = getenv("RACKEMU_FABRIC_PAIRS"); e && std::strcmp(e, "0") == 0) opt_.pairs = false;
    faults_ = FaultEngine(opt_.fault_seed);
    for (Port &p : ports_)
        p.eth_asm = std::make_unique<EthReassembler>();
}

Bridge::~Bridge()
{
    stop();
    if (router_.joinable()) router_.join();
    for (unsigned i = 0; i < RKF_MAX_NODES; i++) {
        if (ports_[i].state == State::Up) drop_port(i, "bridge shutting down");
    }
    for (Conn &c : conns_)
        close(c.fd);
    conns_.clear();
    for (int fd : {listen_fd_, ctl_fd_, wake_pipe_[0], wake_pipe_[1], bell_fd_, live_fd_}) {
        if (fd >= 0) close(fd);
    }
    if (bell_) munmap(bell_, sizeof(Doorbell));
    if (live_) munmap(live_, RKF_LIVE_SIZE);
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
    {
        std::lock_guard lk(mu_);
        const char *strict = getenv("RACKEMU_SWITCH_STRICT"); // a discipline violation aborts
        stage_.set_strict(strict && *strict == '1');
        if (!opt_.switch_program.empty() && !stage_.load(opt_.switch_program, opt_.switch_params, err)) {
            err = "switch program: " + err;
            return false;
        }
    }
    if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) < 0) {
        err = std::string("pipe: ") + strerror(errno);
        return false;
    }
    bell_fd_ = sealed_memfd("rackemu-bridge-doorbell", sizeof(Doorbell));
    if (bell_fd_ < 0) {
        err = std::string("memfd for the doorbell: ") + strerror(errno);
        return false;
    }
    void *b = mmap(nullptr, sizeof(Doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, bell_fd_, 0);
    if (b == MAP_FAILED) {
        err = std::string("mmap doorbell: ") + strerror(errno);
        return false;
    }
    bell_ = static_cast<Doorbell *>(b);
    live_fd_ = live_memfd(&live_);
    if (live_fd_ < 0) {
        err = std::string("memfd for the liveness table: ") + strerror(errno);
        return false;
    }
    listen_fd_ = listen_on(fabric_socket(), SOCK_SEQPACKET, err);
    if (listen_fd_ < 0) return false;
    for (const std::string &rule : opt_.faults) {
        if (!faults_.add(rule, err)) {
            err = "fault rule '" + rule + "': " + err;
            return false;
        }
    }
    {
        std::lock_guard lk(mu_);
        update_eth_watched_locked(); // rules given at start concern Ethernet frames from the first one
    }
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
    if (bell_) futex_wake_always(&bell_->sleeping);
}

void Bridge::accept_conns(int lfd, bool control)
{
    // A handful per round: the other connections and the ports get their turn in between.
    for (int k = 0; k < 16; k++) {
        int s = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0) return;
        unsigned same = 0;
        for (const Conn &c : conns_)
            same += c.control == control;
        if (same >= opt_.max_pending) {
            // Too many in progress: the oldest of this kind goes (a flood of silent
            // connections cannot lock out a client that talks).
            for (auto it = conns_.begin(); it != conns_.end(); ++it) {
                if (it->control != control) continue;
                std::lock_guard lk(mu_);
                conn_evicted_++;
                if (!control) {
                    refused_handshakes_++;
                    welcome(it->fd, RKF_WELCOME_MALFORMED, "too many handshakes in progress", nullptr, 0);
                }
                log("%s connection evicted: %u in progress", control ? "control" : "handshake", same);
                close(it->fd);
                conns_.erase(it);
                break;
            }
        }
        Conn c;
        c.fd = s;
        c.control = control;
        c.deadline_ns =
            now_ns() + uint64_t(control ? opt_.control_timeout_ms : opt_.handshake_timeout_ms) * 1000000ull;
        conns_.push_back(std::move(c));
    }
}

bool Bridge::service_conn(Conn &c, short revents, uint64_t now)
{
    if (!c.control) {
        if (revents) {
            rkf_hello h{};
            ssize_t n = recv(c.fd, &h, sizeof h, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
            handshake(c.fd, h, n);
            return true;
        }
        if (now < c.deadline_ns) return false;
        std::lock_guard lk(mu_);
        conn_timeouts_++;
        refused_handshakes_++;
        log("refused a node: no rkf_hello within %u ms", opt_.handshake_timeout_ms);
        const std::string msg = "no rkf_hello within " + std::to_string(opt_.handshake_timeout_ms) + " ms";
        welcome(c.fd, RKF_WELCOME_MALFORMED, msg.c_str(), nullptr, 0);
        close(c.fd);
        return true;
    }
    if (!c.replying) {
        bool eof = false;
        if (revents) {
            char buf[4096];
            ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                control_input(c, buf, size_t(n));
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                eof = true;
            }
        }
        std::string trimmed = c.in;
        while (!trimmed.empty() && (trimmed.back() == '\r' || trimmed.back() == ' '))
            trimmed.pop_back();
        // A command ends at its newline or when the client shuts down its sending side; the
        // bare words need neither. Whatever else is there at the deadline may be a prefix.
        const bool complete =
            eof || c.line_end || (!c.too_long && (trimmed == "stats" || trimmed == "shutdown"));
        if (!complete) {
            if (now < c.deadline_ns) return false;
            std::lock_guard lk(mu_);
            conn_timeouts_++;
        }
        if (c.too_long) {
            c.out = control_refusal(c.in, "is longer than " + std::to_string(kMaxControlCommand) +
                                              " bytes, the limit of a control command");
        } else if (!complete && !c.in.empty()) {
            c.out = control_refusal(c.in, "did not end with a newline within " +
                                              std::to_string(opt_.control_timeout_ms) + " ms");
        } else {
            c.out = control_reply(c.in);
        }
        c.replying = true;
        c.deadline_ns = now + 2000000000ull;
        revents = POLLOUT;
    }
    if (revents & (POLLOUT | POLLHUP | POLLERR)) {
        while (c.sent < c.out.size()) {
            ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                c.sent += size_t(n);
                continue;
            }
            if (n < 0 && errno == EAGAIN) break;
            close(c.fd); // the client went away
            return true;
        }
        if (c.sent == c.out.size()) {
            // Bytes the client sent after its command, left unread, would turn the close into
            // a reset that can discard the answer on the client's side: read them first.
            char sink[4096];
            for (int k = 0; k < 16 && recv(c.fd, sink, sizeof sink, MSG_DONTWAIT) > 0; k++) {
            }
            close(c.fd);
            return true;
        }
    }
    if (now < c.deadline_ns) return false;
    std::lock_guard lk(mu_);
    conn_timeouts_++;
    close(c.fd);
    return true;
}

// Bytes of a control command: kept up to its newline (the newline and anything after it are
// not part of it) and up to kMaxControlCommand; beyond that the command is marked too long and
// the rest of its line is read and dropped, so that the client's answer is not lost to a reset.
void Bridge::control_input(Conn &c, const char *buf, size_t n)
{
    if (c.line_end) return;
    const auto *nl = static_cast<const char *>(memchr(buf, '\n', n));
    const size_t len = nl ? size_t(nl - buf) : n;
    const size_t room = kMaxControlCommand - c.in.size();
    c.in.append(buf, std::min(len, room));
    if (len > room) c.too_long = true;
    c.line_end = nl != nullptr;
}

// The answer to a control command that is not run: what was wrong, and the command's start.
std::string Bridge::control_refusal(const std::string &cmd, const std::string &why)
{
    std::string r = "{\"error\":\"the command starting '";
    json_escape(r, cmd.substr(0, 40));
    r += "' " + why + ": refused, nothing was done\"}\n";
    std::lock_guard lk(mu_);
    log("control command refused: it %s", why.c_str());
    return r;
}

void Bridge::handshake(int s, const rkf_hello &hello, ssize_t n)
{
    rkf_hello h = hello;
    std::lock_guard lk(mu_);
    auto refuse = [&](uint16_t st, const std::string &msg) {
        refused_handshakes_++;
        log("refused a node: %s", printable(msg).c_str());
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
        refuse(RKF_WELCOME_DUPLICATE,
               "node id " + std::to_string(h.node_id) + " is already connected (" + printable(p.name) + ")");
        return;
    }
    // Sealed: the node can neither shrink the object under the bridge's mapping (SIGBUS in the
    // router) nor grow it; it may only read and write the rings, which the bridge validates.
    int mfd = sealed_memfd("rackemu-port", sizeof(PortShm));
    void *m = MAP_FAILED;
    if (mfd >= 0) {
        m = mmap(nullptr, sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    }
    if (m == MAP_FAILED) {
        const std::string why = strerror(errno);
        if (mfd >= 0) close(mfd);
        refuse(RKF_WELCOME_NO_RESOURCES, "bridge cannot allocate port memory: " + why);
        return;
    }
    auto *shm = static_cast<PortShm *>(m);
    shm->magic = RKF_SHM_MAGIC;
    shm->version = RKF_PROTO_VERSION;
    // The router may be asleep now or about to sleep without having seen this port (between
    // announcing itself on the ports it knew and its doorbell wait, the wake-up below is
    // overwritten): a new port starts announced, so the node's first frame rings the doorbell.
    // Without it, a node that connected at that moment had its frames sit in its ring until
    // another node's traffic woke the router: the first ping after a bridge restart was lost.
    shm->router_asleep.store(1, std::memory_order_relaxed);
    int fds[3] = {mfd, bell_fd_, live_fd_};
    // Published before the welcome: once the node has it, every peer sees it up (a peer reading
    // the table does not take mu_ as the router does). A new generation for every attempt, so a
    // failed one's word is never reused by the next QEMU under this id.
    p.live_gen++;
    __atomic_store_n(&live_->node[h.node_id], (p.live_gen << 1) | RKF_LIVE_UP, __ATOMIC_RELEASE);
    const bool sent = welcome(s, RKF_WELCOME_OK, "welcome", fds, 3);
    close(mfd);
    if (!sent) {
        __atomic_store_n(&live_->node[h.node_id], p.live_gen << 1, __ATOMIC_RELEASE);
        munmap(shm, sizeof(PortShm));
        close(s);
        refused_handshakes_++;
        log("node %u went away during its handshake", unsigned(h.node_id));
        return;
    }
    h.name[sizeof h.name - 1] = 0;
    p.state = State::Up;
    p.sock = s;
    p.shm = shm;
    p.name = h.name;
    p.caps = h.caps & ~RKF_CAP_PAIR; // services; the pair capability is the port's
    p.pair_cap = opt_.pairs && (h.caps & RKF_CAP_PAIR);
    p.overflow.clear();
    p.eth_asm->reset();
    p.eth_seq_out = 0;
    p.c.connects++;
    p.c.outstanding = 0;
    make_pairs_locked(h.node_id);
    // The router sleeps without a timeout and arms only the ports it knew: let it arm this one.
    futex_wake_always(&bell_->sleeping);
    log("node %u connected (%s, caps 0x%x, sees %u nodes)", unsigned(h.node_id), printable(p.name).c_str(),
        h.caps, h.node_count);
}

// An error reply on behalf of the destination: src is the node the request went to (not the
// bridge), so a requester that accepts replies only from the node it asked (docs/fabric.md,
// "Replies") accepts it; the status says that the bridge answered.
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

bool Bridge::settle_locked(uint16_t dst, uint16_t src, uint8_t svc, uint16_t op, uint64_t tag)
{
    auto it = outstanding_.find({dst, src, svc, op, tag});
    if (it == outstanding_.end()) return false;
    if (--it->second == 0) outstanding_.erase(it);
    outstanding_total_--;
    if (ports_[src].c.outstanding) ports_[src].c.outstanding--;
    return true;
}

void Bridge::drop_port(unsigned id, const char *why)
{
    std::lock_guard lk(mu_);
    Port &p = ports_[id];
    if (p.state != State::Up) return;
    p.state = State::Empty;
    p.lease_pending = false;
    // First, so that a peer reaching this node's RAM directly sees it gone before anything else.
    __atomic_store_n(&live_->node[id], p.live_gen << 1, __ATOMIC_RELEASE);
    // Its pairs: the peers stop sending on them and answer their requests to it NODE_GONE.
    for (unsigned j = 0; j < RKF_MAX_NODES; j++) {
        if (j != id && pair_locked(id, j)) tear_pair_locked(id, j, RKF_PAIR_GONE);
    }
    close(p.sock);
    p.sock = -1;
    munmap(p.shm, sizeof(PortShm));
    p.shm = nullptr;
    p.c.disconnects++;
    // Requests the dead node will never answer: tell their senders. Requests it sent are
    // forgotten (a reply to them finds no requester).
    unsigned failed = 0;
    for (auto it = outstanding_.begin(); it != outstanding_.end();) {
        auto [dst, src, svc, op, tag] = it->first;
        if (dst == id || src == id) {
            const uint32_t count = it->second;
            if (dst == id && src != id) {
                rkf_frame_hdr req{};
                req.type = RKF_T_REQ;
                req.svc = svc;
                req.op = op;
                req.src = src;
                req.dst = dst;
                req.tag = tag;
                for (uint32_t k = 0; k < count; k++) {
                    error_reply_locked(req, RKF_ST_NODE_GONE);
                    failed++;
                }
            }
            outstanding_total_ -= count;
            Port &requester = ports_[src];
            requester.c.outstanding -= std::min<uint64_t>(requester.c.outstanding, count);
            it = outstanding_.erase(it);
        } else {
            ++it;
        }
    }
    p.c.outstanding = 0;
    p.overflow.clear(); // requests among them are in outstanding_ and were answered above
    p.eth_asm->reset();
    faults_.forget(id); // held copies for it could not be delivered any more
    log("node %u disconnected (%s); %u outstanding request(s) answered NODE_GONE", id, why, failed);
}

Bridge::Pair *Bridge::pair_locked(unsigned x, unsigned y)
{
    if (x == y || x >= RKF_MAX_NODES || y >= RKF_MAX_NODES) return nullptr;
    auto it = pairs_.find(std::min(x, y) * RKF_MAX_NODES + std::max(x, y));
    return it == pairs_.end() ? nullptr : &it->second;
}

// A node that announced RKF_CAP_PAIR connected: one pair with every other such node that is up.
// The memory is sealed like a port's (no holder can resize it under the others' mappings); each
// node gets the descriptor in an RKF_PAIR_UP message behind its welcome.
void Bridge::make_pairs_locked(unsigned id)
{
    if (!ports_[id].pair_cap) return;
    for (unsigned j = 0; j < opt_.max_nodes; j++) {
        Port &q = ports_[j];
        if (j == id || q.state != State::Up || !q.pair_cap || pair_locked(id, j)) continue;
        const unsigned a = std::min(id, j), b = std::max(id, j);
        int fd = sealed_memfd("rackemu-pair", sizeof(PairShm));
        void *m =
            fd >= 0 ? mmap(nullptr, sizeof(PairShm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (m == MAP_FAILED) {
            log("no pair ring for nodes %u and %u: %s (they use the bridge)", a, b, strerror(errno));
            if (fd >= 0) close(fd);
            continue;
        }
        auto *ps = static_cast<PairShm *>(m);
        ps->magic = RKF_PAIR_MAGIC;
        ps->version = RKF_PROTO_VERSION;
        ps->a = uint16_t(a);
        ps->b = uint16_t(b);
        ps->gen = ++pair_gen_;
        Pair pr;
        pr.shm = ps;
        pr.gen = ps->gen;
        pr.mode = pair_mode_wanted_locked(a, b, pr); // BRIDGE until both nodes are ready
        ps->mode.store(pr.mode, std::memory_order_release);
        const bool to_a = pair_msg(ports_[a].sock, RKF_PAIR_UP, b, 0, pr.gen, fd);
        const bool to_b = to_a && pair_msg(ports_[b].sock, RKF_PAIR_UP, a, 0, pr.gen, fd);
        close(fd);
        if (!to_b) {
            // One side never heard of it: nobody may use it.
            ps->mode.store(RKF_PAIR_MODE_GONE, std::memory_order_release);
            if (to_a) pair_msg(ports_[a].sock, RKF_PAIR_DOWN, b, RKF_PAIR_BROKEN, pr.gen, -1);
            munmap(ps, sizeof(PairShm));
            log("no pair ring for nodes %u and %u: cannot hand it over (they use the bridge)", a, b);
            continue;
        }
        pairs_[a * RKF_MAX_NODES + b] = pr;
        pairs_made_++;
    }
}

// Gone: the senders read GONE and use the bridge; the nodes still up hear of it (RKF_PAIR_DOWN)
// and answer their requests outstanding on it NODE_GONE (reason GONE) or LINK_DOWN (BROKEN).
// Frames still in its rings are read by a receiver that is up before it unmaps the memory.
void Bridge::tear_pair_locked(unsigned x, unsigned y, uint32_t reason)
{
    const unsigned a = std::min(x, y), b = std::max(x, y);
    auto it = pairs_.find(a * RKF_MAX_NODES + b);
    if (it == pairs_.end()) return;
    Pair &pr = it->second;
    pr.shm->mode.store(RKF_PAIR_MODE_GONE, std::memory_order_seq_cst);
    for (unsigned d = 0; d < 2; d++) {
        const RingCtl &c = pr.shm->ring[d].ctl; // produced by a (d 0) or b, read by the other
        PortCounters &tx = ports_[d ? b : a].c, &rx = ports_[d ? a : b].c;
        tx.pair_frames_out += c.head.load(std::memory_order_relaxed);
        tx.pair_wakes_skipped += c.wakes_skipped.load(std::memory_order_relaxed);
        tx.pair_follow_up_wakes += c.follow_up_wakes.load(std::memory_order_relaxed);
        rx.pair_backstop_wakes += c.backstop_wakes.load(std::memory_order_relaxed);
    }
    for (unsigned n : {a, b}) {
        if (ports_[n].state == State::Up)
            pair_msg(ports_[n].sock, RKF_PAIR_DOWN, n == a ? b : a, reason, pr.gen, -1);
    }
    munmap(pr.shm, sizeof(PairShm));
    pairs_.erase(it);
    pairs_torn_++;
}

// Direct only once both nodes mapped the pair (RKF_PAIR_READY: a START marker must find the
// receiver's pair, or the frames behind it on the ring would wait for a START that already came
// and went), and while nothing on the bridge's path must see the pair's frames: no capture of
// either node's service frames, no fault rule that could match a service frame between them,
// and no frame held by a rule (a frame the bridge still holds must reach the receiver before
// the frames that follow it on the ring).
uint32_t Bridge::pair_mode_wanted_locked(unsigned a, unsigned b, const Pair &pr) const
{
    if (!pr.ready[0] || !pr.ready[1]) return RKF_PAIR_MODE_BRIDGE;
    for (unsigned n : {a, b}) {
        if (capture_.wants(n, false, false) || capture_.wants(n, true, false)) return RKF_PAIR_MODE_BRIDGE;
    }
    if (faults_.held() || faults_.touches_service_frames(a, b) || faults_.touches_service_frames(b, a))
        return RKF_PAIR_MODE_BRIDGE;
    return RKF_PAIR_MODE_DIRECT;
}

// After rules or capture changed. A switch to the bridge returns once neither sender is between
// reading the mode and publishing (each sets `busy` around that, and `mode` is stored before
// `busy` is read: Dekker), so every frame sent after it goes through the bridge; a sender that
// stays busy (a stopped QEMU) is waited for at most pair_ack_timeout_us, then counted.
// The nodes whose Ethernet frames the bridge must see (rkf_live_table.eth_watched): stored
// before the control command that changed rules or capture answers.
void Bridge::update_eth_watched_locked()
{
    uint64_t watched = 0;
    for (unsigned n = 0; n < RKF_MAX_NODES; n++) {
        if (faults_.held() || capture_.wants(n, false, true) || capture_.wants(n, true, true) ||
            faults_.touches_eth_frames(n) || stage_.loaded())
            watched |= 1ull << n;
    }
    if (live_) __atomic_store_n(&live_->eth_watched, watched, __ATOMIC_SEQ_CST);
}

void Bridge::update_pair_modes_locked()
{
    update_eth_watched_locked();
    for (auto &[key, pr] : pairs_) {
        const unsigned a = key / RKF_MAX_NODES, b = key % RKF_MAX_NODES;
        const uint32_t want = pair_mode_wanted_locked(a, b, pr);
        if (want == pr.mode) continue;
        pr.mode = want;
        pair_switches_++;
        pr.shm->mode.store(want, std::memory_order_seq_cst);
        if (want != RKF_PAIR_MODE_BRIDGE) continue;
        const uint64_t deadline = now_ns() + uint64_t(opt_.pair_ack_timeout_us) * 1000;
        for (unsigned spins = 0;; spins++) {
            if (!pr.shm->busy[0].load(std::memory_order_seq_cst) &&
                !pr.shm->busy[1].load(std::memory_order_seq_cst))
                break;
            if (now_ns() >= deadline) {
                pair_ack_timeouts_++;
                log("a sender of nodes %u and %u did not see the switch to the bridge within %u us", a, b,
                    opt_.pair_ack_timeout_us);
                break;
            }
            if (spins < 1000) {
                cpu_relax();
            } else {
                usleep(20); // a sender descheduled in its window: sleep, do not spin
            }
        }
    }
}

// Bytes on a node's socket after the handshake: RKF_PAIR_READY (the node mapped the pair with
// `peer`: once both did, it may go direct), RKF_PAIR_BAD (the ring from `peer` to it was corrupt)
// tears that pair down; anything else counts as an error, as before.
void Bridge::pair_socket_msg(unsigned id, const unsigned char *b, ssize_t n)
{
    std::lock_guard lk(mu_);
    rkf_pair_msg m{};
    if (n == ssize_t(sizeof m)) std::memcpy(&m, b, sizeof m);
    if (n != ssize_t(sizeof m) || m.magic != RKF_PAIR_MAGIC ||
        (m.kind != RKF_PAIR_BAD && m.kind != RKF_PAIR_READY)) {
        ports_[id].c.errors++; // nothing else is expected on the socket after the handshake
        return;
    }
    Pair *pr = pair_locked(id, m.peer);
    if (!pr || pr->gen != m.gen) return; // already gone
    if (m.kind == RKF_PAIR_READY) {
        pr->ready[id < m.peer ? 0 : 1] = true;
        update_pair_modes_locked();
        return;
    }
    pair_broken_++;
    ports_[id].c.errors++;
    log("node %u found its pair ring from node %u corrupt; the pair uses the bridge from now on", id,
        unsigned(m.peer));
    tear_pair_locked(id, m.peer, RKF_PAIR_BROKEN);
}

namespace {
// Only the router follows up skipped wake-ups, so only the router may skip one (a frame queued by
// the main loop, e.g. drop_port's NODE_GONE replies, wakes the port thread as before).
thread_local bool tl_router = false;
} // namespace

void Bridge::wake_node_locked(Port &d)
{
    RingCtl &c = d.shm->to_node.ctl;
    if (!tl_router) {
        if (futex_wake(&c.sleeping)) wakeups_++;
        return;
    }
    switch (wake_consumer(c)) {
    case Wake::Woken:
        wakeups_++;
        break;
    case Wake::Skipped:
        d.c.wakes_skipped++;
        wakes_skipped_++;
        d.lease_pending = true;
        d.lease_head = c.head.load(std::memory_order_relaxed);
        break;
    case Wake::None:
        break;
    }
}

uint64_t Bridge::lease_follow_up_locked(uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (unsigned i = 0; i < opt_.max_nodes; i++) {
        Port &p = ports_[i];
        if (!p.lease_pending) continue;
        if (p.state != State::Up) {
            p.lease_pending = false;
            continue;
        }
        uint64_t due = 0;
        bool woken = false;
        if (lease_follow_up(p.shm->to_node.ctl, p.lease_head, now, &due, &woken)) {
            p.lease_pending = false;
            if (woken) {
                wakeups_++;
                p.c.lease_wakes++;
                lease_wakes_++;
            }
        } else {
            next = std::min(next, due);
        }
    }
    return next;
}

bool Bridge::deliver_locked(unsigned dst, const rkf_frame_hdr &h, const unsigned char *payload)
{
    Port &d = ports_[dst];
    if (capture_.wants(dst, true, false)) {
        unsigned char f[RKF_SLOT_SIZE];
        std::memcpy(f, &h, sizeof h);
        if (h.len) std::memcpy(f + sizeof h, payload, h.len);
        capture_.record(dst, true, false, f, sizeof h + h.len);
    }
    if (d.overflow.empty() && ring_push(d.shm->to_node, h, payload)) {
        d.c.frames_out++;
        d.c.bytes_out += sizeof h + h.len;
        wake_node_locked(d);
        return true;
    }
    // A START marker is never dropped for a full queue (up to twice its limit: a node can only
    // make one per switch of its pair, or flood them, which only harms its own pair): the
    // receiver reads the pair ring only after it, so a lost START stranded every frame the
    // sender then put on the ring, and once that ring was full, the sender's END marker too.
    const bool start_marker = h.svc == RKF_SVC_BRIDGE && h.type == RKF_T_MSG && h.op == RKF_OP_PAIR_START;
    if (d.overflow.size() < opt_.overflow_limit ||
        (start_marker && d.overflow.size() < 2 * opt_.overflow_limit)) {
        std::vector<unsigned char> f(sizeof h + h.len);
        std::memcpy(f.data(), &h, sizeof h);
        if (h.len) std::memcpy(f.data() + sizeof h, payload, h.len);
        d.overflow.push_back(std::move(f));
        // The node rings the doorbell when it frees a slot; if one is free already (the main
        // loop queues too: drop_port's NODE_GONE replies), the router must not sleep on it.
        d.shm->to_node.ctl.space_wait.store(1, std::memory_order_seq_cst);
        if (!ring_full(d.shm->to_node)) futex_wake_always(&bell_->sleeping);
        return true;
    }
    congested_++;
    d.c.drops++;
    log("queue for node %u overflowed (%zu frames); frame from node %u dropped", dst, d.overflow.size(),
        unsigned(h.src));
    if (h.type == RKF_T_REQ) {
        settle_locked(h.dst, h.src, h.svc, h.op, h.tag);
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
    if (h.svc == RKF_SVC_ETH) {
        eth_ingress_locked(src, h, payload);
        return true;
    }
    if (h.svc == RKF_SVC_BRIDGE && h.type == RKF_T_MSG && h.op == RKF_OP_PAIR_START) {
        // "My next frames to you come on our pair ring": forwarded in order behind what this node
        // sent before (the destination's queue), past capture and fault rules (the pair is direct
        // only while none apply; held frames keep it on the bridge), so that the receiver switches
        // at the right frame. Only for a live pair of these two nodes, this generation.
        const Pair *pr = h.dst < opt_.max_nodes && h.dst != src ? pair_locked(src, h.dst) : nullptr;
        if (!pr || pr->gen != h.tag || h.len) {
            pair_bad_markers_++;
            s.c.drops++;
            return false;
        }
        return deliver_locked(h.dst, h, payload);
    }
    if (s.eth_asm->interrupt()) {
        eth_bad_fragments_++;
        s.c.errors++;
        log("node %u sent a frame between two fragments of an Ethernet frame; the Ethernet frame is dropped",
            src);
    }
    if (capture_.wants(src, false, false)) {
        unsigned char f[RKF_SLOT_SIZE];
        std::memcpy(f, &h, sizeof h);
        if (h.len) std::memcpy(f + sizeof h, payload, h.len);
        capture_.record(src, false, false, f, sizeof h + h.len);
    }
    const bool present = h.dst < opt_.max_nodes && ports_[h.dst].state == State::Up;
    if (!present) {
        noroute_++;
        s.c.drops++;
        if (h.type == RKF_T_REQ) {
            error_reply_locked(h, RKF_ST_NOROUTE);
        }
        return false;
    }
    // Between the nodes of a pair the bridge does not match replies to requests: a request may
    // go one way and its reply the other (the pair switches between the ring and the bridge),
    // and only these two nodes can write their ring anyway; the requester's port answers
    // NODE_GONE for what it has outstanding when the pair goes (docs/fabric.md).
    const bool paired = h.dst != src && pair_locked(src, h.dst);
    const bool settled = h.type == RKF_T_REPLY && settle_locked(uint16_t(src), h.dst, h.svc, h.op, h.tag);
    if (h.type == RKF_T_REPLY && !settled && paired) pair_replies_++;
    if (h.type == RKF_T_REPLY && !settled && !paired) {
        // Not the answer to a request the bridge routed from h.dst to this node: a forgery,
        // a duplicate, or late after the requester went away. The requester never sees it.
        unsolicited_++;
        s.c.errors++;
        s.c.drops++;
        log("dropped a reply from node %u to node %u (service %u, tag 0x%" PRIx64
            ") that answers no request "
            "routed to node %u",
            src, unsigned(h.dst), unsigned(h.svc), h.tag, src);
        return false;
    }
    if (h.type == RKF_T_REQ && !paired) {
        if (s.c.outstanding >= opt_.max_outstanding) {
            over_cap_++;
            s.c.drops++;
            log("node %u has %" PRIu64
                " requests outstanding (the cap); request to node %u answered CONGESTED",
                src, s.c.outstanding, unsigned(h.dst));
            error_reply_locked(h, RKF_ST_CONGESTED);
            return false;
        }
        outstanding_[{h.dst, h.src, h.svc, h.op, h.tag}]++;
        outstanding_total_++;
        s.c.outstanding++;
    }
    if (faults_.empty()) return deliver_locked(h.dst, h, payload);
    FaultPacket p;
    p.src = uint16_t(src);
    p.dst = h.dst;
    p.dst_gen = ports_[h.dst].live_gen;
    p.bytes.resize(sizeof h + h.len);
    std::memcpy(p.bytes.data(), &h, sizeof h);
    if (h.len) std::memcpy(p.bytes.data() + sizeof h, payload, h.len);
    forward_locked(std::move(p));
    return true;
}

void Bridge::eth_ingress_locked(unsigned src, const rkf_frame_hdr &h, const unsigned char *payload)
{
    Port &s = ports_[src];
    EthReassembler &as = *s.eth_asm;
    const uint64_t lost = as.lost();
    const auto r = as.feed(h, payload);
    if (as.lost() != lost) {
        eth_bad_fragments_ += as.lost() - lost;
        s.c.errors++;
        s.c.drops++;
        log("dropped an Ethernet fragment from node %u: %s", src, as.why());
    }
    if (r != EthReassembler::Result::Complete) return;
    const unsigned char *f = as.frame();
    const size_t len = as.size();
    s.c.eth_frames_in++;
    s.c.eth_bytes_in += len;
    if (opt_.eth_source_check) {
        const EthSource why = eth_source_check(src, f, len);
        if (why != EthSource::Ok) {
            s.c.eth_spoofed++;
            s.c.drops++;
            eth_spoofed_++;
            if (std::has_single_bit(s.c.eth_spoofed)) // the 1st, 2nd, 4th, ...: a flood logs little
                log("dropped an Ethernet frame from node %u with a %s that is not its own (%llu so far; "
                    "docs/fabric.md \"Source addresses\")",
                    src,
                    why == EthSource::Mac    ? "source MAC"
                    : why == EthSource::Ipv4 ? "source IPv4 address"
                                             : "ARP sender address",
                    (unsigned long long)s.c.eth_spoofed);
            return;
        }
    }
    capture_.record(src, false, true, f, len);
    if (!stage_.loaded()) {
        eth_switch_locked(src, f, len);
        return;
    }
    // The switch program (docs/switch.md, "Order"): after the ingress capture, before switching,
    // fault rules and the egress capture. A frame it synthesizes is switched as if it came from
    // the node its source MAC names (an ACK on behalf of a server may go back to the sender).
    for (const sw::Stage::Out &o : stage_.process(src, f, len)) {
        const int from = o.synthesized && o.len >= RKF_ETH_HDR_LEN ? rkf_eth_mac_node(o.data + 6) : -1;
        eth_switch_locked(from >= 0 && unsigned(from) < opt_.max_nodes ? unsigned(from) : src, o.data, o.len);
    }
}

void Bridge::eth_switch_locked(unsigned src, const unsigned char *f, size_t len)
{
    Port &s = ports_[src];
    const int to = eth_is_group(f) ? -1 : rkf_eth_mac_node(f);
    if (to == int(src)) {
        eth_hairpin_++;
        s.c.drops++;
        return;
    }
    auto one = [&](unsigned dst) {
        if (faults_.empty()) {
            eth_deliver_locked(src, dst, f, len);
            return;
        }
        FaultPacket p;
        p.src = uint16_t(src);
        p.dst = uint16_t(dst);
        p.dst_gen = ports_[dst].live_gen;
        p.eth = true;
        p.kind = eth_kind(f, len);
        p.bytes.assign(f, f + len);
        forward_locked(std::move(p));
    };
    if (to >= 0 && unsigned(to) < opt_.max_nodes && ports_[to].state == State::Up) {
        one(unsigned(to));
        return;
    }
    // Broadcast, multicast, or a MAC whose node is not connected: every other port.
    eth_floods_++;
    unsigned copies = 0;
    for (unsigned i = 0; i < opt_.max_nodes; i++) {
        if (i != src && ports_[i].state == State::Up) {
            one(i);
            copies++;
        }
    }
    if (!copies) {
        eth_no_port_++; // nobody else is connected (a peer not back yet after a restart)
        s.c.drops++;
    }
}

void Bridge::forward_locked(FaultPacket &&p)
{
    rkf_frame_hdr h{};
    if (!p.eth) std::memcpy(&h, p.bytes.data(), sizeof h);
    fault_out_.clear();
    if (faults_.apply(std::move(p), now_ns(), fault_out_)) {
        // A request lost on its way will never be answered: forget it, so it does not count
        // against its sender's --max-outstanding (the requester's timeout reports it).
        if (h.magic && h.type == RKF_T_REQ) settle_locked(h.dst, h.src, h.svc, h.op, h.tag);
    }
    release_locked(fault_out_);
}

void Bridge::release_locked(std::vector<FaultPacket> &out)
{
    for (FaultPacket &p : out) {
        Port &d = ports_[p.dst];
        if (d.state != State::Up || d.live_gen != p.dst_gen) {
            fault_lost_++; // its destination went away (or came back as another QEMU) meanwhile
            continue;
        }
        if (p.eth) {
            eth_deliver_locked(p.src, p.dst, p.bytes.data(), p.bytes.size());
        } else {
            rkf_frame_hdr h;
            std::memcpy(&h, p.bytes.data(), sizeof h);
            deliver_locked(p.dst, h, p.bytes.data() + sizeof h);
        }
    }
    out.clear();
}

void Bridge::eth_deliver_locked(unsigned src, unsigned dst, const unsigned char *f, size_t len)
{
    Port &d = ports_[dst];
    capture_.record(dst, true, true, f, len);
    rkf_frame_hdr t{};
    t.magic = RKF_FRAME_MAGIC;
    t.src = uint16_t(src);
    t.dst = uint16_t(dst);
    t.ts_ns = now_ns();
    const unsigned n = RKF_ETH_FRAGS(len);
    const size_t wire = n * (sizeof(rkf_frame_hdr) + sizeof(rkf_eth_frag)) + len;
    const uint32_t seq = d.eth_seq_out;
    if (d.overflow.empty() && ring_push_eth(d.shm->to_node, t, f, uint16_t(len), seq)) {
        d.eth_seq_out++;
        d.c.frames_out += n;
        d.c.bytes_out += wire;
        d.c.eth_frames_out++;
        d.c.eth_bytes_out += len;
        wake_node_locked(d);
        return;
    }
    if (d.overflow.size() + n > opt_.overflow_limit) {
        eth_queue_drops_++;
        d.c.drops++;
        d.c.eth_drops++;
        return;
    }
    // Behind what already waits for this node, fragment by fragment and in order: they reach
    // its ring consecutively (nothing else is pushed to it while its queue is not empty).
    for (unsigned i = 0; i < n; i++) {
        std::vector<unsigned char> slot(RKF_SLOT_SIZE);
        eth_frag_write(slot.data(), t, f, uint16_t(len), seq, i);
        rkf_frame_hdr h;
        std::memcpy(&h, slot.data(), sizeof h);
        slot.resize(sizeof h + h.len);
        d.overflow.push_back(std::move(slot));
    }
    d.eth_seq_out++;
    d.c.eth_frames_out++;
    d.c.eth_bytes_out += len;
    // As deliver_locked: the node rings the doorbell when it frees a slot.
    d.shm->to_node.ctl.space_wait.store(1, std::memory_order_seq_cst);
    if (!ring_full(d.shm->to_node)) futex_wake_always(&bell_->sleeping);
}

void Bridge::router()
{
    unsigned char payload[RKF_SLOT_SIZE];
    uint64_t last_activity = now_ns();
    tl_router = true; // this thread may skip wake-ups for polled ports (wake_node_locked)
    // The router sleeps until a lease lapses when it skipped a wake-up (tens of microseconds):
    // the default timer slack (50 us) would stretch that sleep, so ask for 1 us.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    while (!stopping_.load(std::memory_order_relaxed)) {
        unsigned moved = 0;
        std::vector<unsigned> corrupt;
        uint64_t next_due = UINT64_MAX, lease_due = UINT64_MAX;
        {
            std::lock_guard lk(mu_);
            if (!faults_.empty()) {
                faults_.due(now_ns(), fault_out_);
                moved += unsigned(fault_out_.size());
                release_locked(fault_out_);
                next_due = faults_.next_due();
            }
            // The last held frame has gone: pairs the rules no longer concern may go direct.
            if (held_before_ && !faults_.held()) update_pair_modes_locked();
            held_before_ = faults_.held() != 0;
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
                    wake_node_locked(p);
                    moved++;
                }
                if (!p.overflow.empty()) {
                    // Ask the node to ring the doorbell when it frees a slot (before the router
                    // checks the ring again, in its readiness test, so no wake-up is lost).
                    p.shm->to_node.ctl.space_wait.store(1, std::memory_order_seq_cst);
                }
                unsigned k = 0;
                for (; k < 64; k++) {
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
                // A sender of this node may block on the full ring: it waits on space_wait.
                if (k && p.state == State::Up && ring_space_freed(p.shm->to_bridge)) {
                    futex_op(&p.shm->to_bridge.ctl.space_wait, FUTEX_WAKE, INT32_MAX, nullptr);
                    wakeups_++;
                }
            }
            // Frames whose wake-up a poll lease spared: taken by the poller, or, once the lease
            // has lapsed, woken for now (the poller stopped: a halted or dead vCPU).
            lease_due = lease_follow_up_locked(now_ns());
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
        // A frame a fault rule holds is due within 1.2 ms: spin for it rather than sleep past it
        // (a futex timeout has millisecond granularity here); a later one bounds the sleep.
        const uint64_t left = next_due == UINT64_MAX ? UINT64_MAX : next_due > now ? next_due - now : 0;
        // A lease that runs bounds the sleep to its end (at most kLeaseMaxNs ahead).
        const uint64_t lease_left = lease_due == UINT64_MAX ? UINT64_MAX
                                    : lease_due > now       ? lease_due - now
                                                            : 0;
        if (now - last_activity < spin_ns() || left < 1200000 || lease_left == 0) {
            cpu_relax();
            continue;
        }
        {
            std::lock_guard lk(mu_);
            capture_.flush(); // idle: what was captured reaches the file
        }
        int64_t sleep_ns = left == UINT64_MAX
                               ? -1
                               : int64_t(std::min<uint64_t>((left - 200000) / 1000000, 1000000)) * 1000000;
        if (lease_left != UINT64_MAX)
            sleep_ns = sleep_ns < 0 ? int64_t(lease_left) : std::min<int64_t>(sleep_ns, lease_left);
        // Asleep until a node publishes a frame or frees room for a queued one, a node connects,
        // or stop(): no timeout. Each port gets its own announcement (router_asleep), so a node
        // that clears its own only loses its own wake-ups; one that clears the doorbell word
        // makes the router poll once more, not sleep through the others' frames.
        router_sleeps_++;
        {
            std::lock_guard lk(mu_);
            for (unsigned i = 0; i < opt_.max_nodes; i++) {
                if (ports_[i].state == State::Up)
                    ports_[i].shm->router_asleep.store(1, std::memory_order_relaxed);
            }
        }
        futex_sleep_ns(&bell_->sleeping, sleep_ns, [&] {
            std::atomic_thread_fence(std::memory_order_seq_cst);
            std::lock_guard lk(mu_);
            if (stopping_) return true;
            for (unsigned i = 0; i < opt_.max_nodes; i++) {
                const Port &p = ports_[i];
                if (p.state != State::Up) continue;
                if (!ring_empty(p.shm->to_bridge)) return true;
                if (!p.overflow.empty() && !ring_full(p.shm->to_node)) return true;
            }
            return false;
        });
        {
            std::lock_guard lk(mu_);
            for (unsigned i = 0; i < opt_.max_nodes; i++) {
                if (ports_[i].state == State::Up)
                    ports_[i].shm->router_asleep.store(0, std::memory_order_relaxed);
            }
        }
        last_activity = now_ns();
    }
}

std::string Bridge::stats_json()
{
    std::lock_guard lk(mu_);
    std::ostringstream o;
    o << "{\"uptime_s\":" << (now_ns() - start_ns_) / 1e9 << ",\"max_nodes\":" << opt_.max_nodes
      << ",\"malformed\":" << malformed_ << ",\"noroute\":" << noroute_ << ",\"spoofed\":" << spoofed_
      << ",\"unsolicited\":" << unsolicited_ << ",\"congested\":" << congested_
      << ",\"over_cap\":" << over_cap_ << ",\"refused_handshakes\":" << refused_handshakes_
      << ",\"conn_timeouts\":" << conn_timeouts_ << ",\"conn_evicted\":" << conn_evicted_
      << ",\"outstanding\":" << outstanding_total_ << ",\"max_outstanding\":" << opt_.max_outstanding
      << ",\"router_sleeps\":" << router_sleeps_.load() << ",\"router_wakeups\":" << wakeups_.load()
      << ",\"wakes_skipped\":" << wakes_skipped_ << ",\"lease_wakes\":" << lease_wakes_
      << ",\"eth_floods\":" << eth_floods_ << ",\"eth_bad_fragments\":" << eth_bad_fragments_
      << ",\"eth_hairpin\":" << eth_hairpin_ << ",\"eth_queue_drops\":" << eth_queue_drops_
      << ",\"eth_no_port\":" << eth_no_port_ << ",\"eth_spoofed\":" << eth_spoofed_
      << ",\"fault_rules\":" << faults_.rules().size() << ",\"fault_held\":" << faults_.held()
      << ",\"fault_lost\":" << fault_lost_ << ",\"capture\":" << capture_.status_json()
      << ",\"switch_program\":\"" << stage_.name() << "\"" // a name from the program table: no escaping
      << ",\"pairs_enabled\":" << (opt_.pairs ? "true" : "false") << ",\"pairs\":" << pairs_.size()
      << ",\"pairs_direct\":"
      << std::count_if(pairs_.begin(), pairs_.end(),
                       [](const auto &e) { return e.second.mode == RKF_PAIR_MODE_DIRECT; })
      << ",\"pairs_made\":" << pairs_made_ << ",\"pairs_torn\":" << pairs_torn_
      << ",\"pair_switches\":" << pair_switches_ << ",\"pair_ack_timeouts\":" << pair_ack_timeouts_
      << ",\"pair_broken\":" << pair_broken_ << ",\"pair_bad_markers\":" << pair_bad_markers_
      << ",\"pair_replies\":" << pair_replies_ << ",\"ports\":[";
    // Frames each node published on its live pairs' rings (the ring heads it writes: its word).
    uint64_t pair_out[RKF_MAX_NODES] = {}, skipped[RKF_MAX_NODES] = {}, follow_ups[RKF_MAX_NODES] = {},
             backstops[RKF_MAX_NODES] = {};
    for (const auto &[key, pr] : pairs_) {
        for (unsigned d = 0; d < 2; d++) {
            const RingCtl &c = pr.shm->ring[d].ctl;
            const unsigned tx = d ? key % RKF_MAX_NODES : key / RKF_MAX_NODES,
                           rx = d ? key / RKF_MAX_NODES : key % RKF_MAX_NODES;
            pair_out[tx] += c.head.load(std::memory_order_relaxed);
            skipped[tx] += c.wakes_skipped.load(std::memory_order_relaxed);
            follow_ups[tx] += c.follow_up_wakes.load(std::memory_order_relaxed);
            backstops[rx] += c.backstop_wakes.load(std::memory_order_relaxed);
        }
    }
    bool first = true;
    for (unsigned i = 0; i < opt_.max_nodes; i++) {
        const Port &p = ports_[i];
        if (p.state != State::Up && p.c.connects == 0) continue;
        if (!first) o << ",";
        first = false;
        std::string name;
        json_escape(name, p.name);
        o << "{\"node\":" << i << ",\"state\":\"" << (p.state == State::Up ? "up" : "down")
          << "\",\"name\":\"" << name << "\",\"caps\":" << p.caps << ",\"frames_in\":" << p.c.frames_in
          << ",\"frames_out\":" << p.c.frames_out << ",\"bytes_in\":" << p.c.bytes_in
          << ",\"bytes_out\":" << p.c.bytes_out << ",\"drops\":" << p.c.drops << ",\"errors\":" << p.c.errors
          << ",\"connects\":" << p.c.connects << ",\"disconnects\":" << p.c.disconnects
          << ",\"queued\":" << p.overflow.size() << ",\"outstanding\":" << p.c.outstanding
          << ",\"eth_frames_in\":" << p.c.eth_frames_in << ",\"eth_frames_out\":" << p.c.eth_frames_out
          << ",\"eth_bytes_in\":" << p.c.eth_bytes_in << ",\"eth_bytes_out\":" << p.c.eth_bytes_out
          << ",\"eth_drops\":" << p.c.eth_drops << ",\"eth_spoofed\":" << p.c.eth_spoofed
          << ",\"wakes_skipped\":" << p.c.wakes_skipped << ",\"lease_wakes\":" << p.c.lease_wakes
          << ",\"pair_rings\":" << (p.pair_cap ? "true" : "false")
          << ",\"pair_frames_out\":" << p.c.pair_frames_out + pair_out[i]
          << ",\"pair_wakes_skipped\":" << p.c.pair_wakes_skipped + skipped[i]
          << ",\"pair_follow_up_wakes\":" << p.c.pair_follow_up_wakes + follow_ups[i]
          << ",\"pair_backstop_wakes\":" << p.c.pair_backstop_wakes + backstops[i] << "}";
    }
    o << "]}";
    return o.str();
}

std::string Bridge::control_reply(std::string cmd)
{
    while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == '\r' || cmd.back() == ' '))
        cmd.pop_back();
    if (cmd == "stats") return stats_json() + "\n";
    if (cmd == "shutdown") {
        stop();
        return "{\"ok\":true}\n";
    }
    if (cmd == "fault" || cmd.rfind("fault ", 0) == 0)
        return fault_command(cmd.substr(std::min<size_t>(cmd.size(), 6))) + "\n";
    if (cmd == "capture" || cmd.rfind("capture ", 0) == 0) {
        return capture_command(cmd.substr(std::min<size_t>(cmd.size(), 8))) + "\n";
    }
    if (cmd == "switch" || cmd.rfind("switch ", 0) == 0)
        return switch_command(cmd.substr(std::min<size_t>(cmd.size(), 7))) + "\n";
    std::string reply = "{\"error\":\"unknown command '";
    json_escape(reply, cmd.substr(0, 32));
    return reply +
           "'; commands: stats, shutdown, fault add|del|list, capture start|stop|status, "
           "switch load|unload|stats|list\"}\n";
}

namespace {
std::string json_error(const std::string &msg)
{
    std::string r = "{\"error\":\"";
    json_escape(r, msg);
    return r + "\"}";
}
} // namespace

// fault add RULE | fault del ID|all | fault list (docs/fabric.md, "Fault rules").
std::string Bridge::fault_command(const std::string &args)
{
    std::lock_guard lk(mu_);
    const size_t sp = args.find(' ');
    const std::string verb = args.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : args.substr(sp + 1);
    if (verb == "add") {
        std::string err;
        const unsigned id = faults_.add(rest, err);
        if (!id) return json_error(err);
        log("fault rule %u added: %s", id, faults_.rules().back().spec.c_str());
        update_pair_modes_locked();
        return "{\"ok\":true,\"id\":" + std::to_string(id) + ",\"rule\":\"" + faults_.rules().back().spec +
               "\"}";
    }
    if (verb == "del") {
        if (rest == "all") {
            const size_t n = faults_.rules().size();
            faults_.clear();
            update_pair_modes_locked();
            log("all %zu fault rule(s) removed", n);
            return "{\"ok\":true,\"removed\":" + std::to_string(n) + "}";
        }
        char *end = nullptr;
        const unsigned long id = strtoul(rest.c_str(), &end, 10);
        if (rest.empty() || *end || !faults_.del(unsigned(id))) {
            return json_error("no fault rule '" + rest + "' (give an id from 'fault list', or 'all')");
        }
        update_pair_modes_locked();
        log("fault rule %lu removed", id);
        return "{\"ok\":true,\"removed\":1}";
    }
    if (verb == "list" && rest.empty()) return faults_.list_json();
    return json_error("usage: fault add RULE | fault del ID|all | fault list; RULE: " +
                      std::string(FaultEngine::help()));
}

// switch load NAME [key=value ...] | switch unload | switch stats | switch list (docs/switch.md).
// Loading replaces a loaded program; either way the old program's state is gone (soft state).
std::string Bridge::switch_command(const std::string &args)
{
    std::lock_guard lk(mu_);
    const size_t sp = args.find(' ');
    const std::string verb = args.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : args.substr(sp + 1);
    if (verb == "load") {
        std::string name, err;
        std::vector<std::string> sets;
        if (!sw::split_load_args(rest, name, sets, err)) return json_error(err);
        const std::string old = stage_.name();
        if (!stage_.load(name, sets, err)) return json_error(err); // the loaded program stays
        update_pair_modes_locked(); // every node's RoCE frames through the bridge from now on
        log("switch program %s loaded%s%s", name.c_str(), old.empty() ? "" : ", replacing ", old.c_str());
        return "{\"ok\":true,\"switch\":" + stage_.stats_json() + "}";
    }
    if (verb == "unload" && rest.empty()) {
        const std::string st = stage_.stats_json();
        const bool was = stage_.loaded();
        stage_.unload();
        update_pair_modes_locked();
        if (was) log("switch program unloaded");
        return "{\"ok\":true,\"unloaded\":" + std::string(was ? "true" : "false") + ",\"switch\":" + st + "}";
    }
    if (verb == "stats" && rest.empty()) return stage_.stats_json();
    if (verb == "list" && rest.empty()) return stage_.list_json();
    return json_error("usage: switch load NAME [key=value ...] | switch unload | switch stats | switch list");
}

void Bridge::load_switch_program(std::unique_ptr<sw::Program> p, const std::string &name)
{
    std::lock_guard lk(mu_);
    stage_.load_program(std::move(p), name);
    update_pair_modes_locked();
    log("switch program %s loaded", name.c_str());
}

// capture start OPTIONS | capture stop | capture status (docs/fabric.md, "Capture").
std::string Bridge::capture_command(const std::string &args)
{
    std::lock_guard lk(mu_);
    const size_t sp = args.find(' ');
    const std::string verb = args.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : args.substr(sp + 1);
    if (verb == "start") {
        Capture::Options o;
        std::string err;
        if (!Capture::parse(rest, o, err) || !capture_.start(o, err)) return json_error(err);
        update_pair_modes_locked();
        log("capture started: %s", rest.c_str());
        return "{\"ok\":true,\"capture\":" + capture_.status_json() + "}";
    }
    if (verb == "stop" && rest.empty()) {
        const std::string st = capture_.status_json();
        capture_.stop();
        update_pair_modes_locked();
        return "{\"ok\":true,\"capture\":" + st + "}";
    }
    if (verb == "status" && rest.empty()) {
        capture_.flush();
        return capture_.status_json();
    }
    return json_error(
        "usage: capture start path=/abs/file.pcapng [nodes=0,1] [what=eth|rackemu|all] "
        "[dir=in|out|both] [snaplen=N] [max_mb=N] | capture stop | capture status");
}

void Bridge::run()
{
    router_ = std::thread([this] { router(); });
    while (!stopping_) {
        std::vector<pollfd> pfds = {
            {listen_fd_, POLLIN, 0}, {ctl_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
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
        // Connections in progress, and the nearest of their deadlines.
        const size_t first_conn = pfds.size();
        // Without connections in progress the loop sleeps until a socket or stop() wakes it.
        uint64_t now = now_ns(), next = UINT64_MAX;
        for (const Conn &c : conns_) {
            pfds.push_back({c.fd, short(c.replying ? POLLOUT : POLLIN), 0});
            next = std::min(next, c.deadline_ns);
        }
        const int timeout_ms = next == UINT64_MAX ? -1
                               : next > now ? int(std::min<uint64_t>((next - now + 999999) / 1000000, 60000))
                                            : 0;
        if (poll(pfds.data(), pfds.size(), timeout_ms) < 0 && errno != EINTR) break;
        now = now_ns();
        if (pfds[2].revents & POLLIN) {
            char b[64];
            while (read(wake_pipe_[0], b, sizeof b) > 0) {
            }
        }
        for (size_t k = 0; k < ids.size(); k++) {
            if (!pfds[3 + k].revents) continue;
            unsigned char b[256];
            ssize_t n = recv(pfds[3 + k].fd, b, sizeof b, MSG_DONTWAIT);
            if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
                drop_port(ids[k], n == 0 ? "connection closed" : strerror(errno));
            } else if (n > 0) {
                pair_socket_msg(ids[k], b, n);
            }
        }
        // Every connection in progress makes what progress it can without blocking; the ones
        // past their deadline are closed. Then new ones are accepted.
        std::vector<Conn> keep;
        keep.reserve(conns_.size());
        for (size_t k = 0; k < conns_.size(); k++) {
            if (!service_conn(conns_[k], pfds[first_conn + k].revents, now))
                keep.push_back(std::move(conns_[k]));
        }
        conns_.swap(keep);
        if (pfds[0].revents & POLLIN) accept_conns(listen_fd_, false);
        if (pfds[1].revents & POLLIN) accept_conns(ctl_fd_, true);
    }
    stopping_ = true;
    for (Conn &c : conns_)
        close(c.fd);
    conns_.clear();
    futex_wake_always(&bell_->sleeping);
    if (router_.joinable()) router_.join();
}

} // namespace rackemu::fabric
