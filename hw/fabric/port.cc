// SPDX-License-Identifier: MIT
// A node's fabric port (see rk_fabric_port.h and docs/fabric.md).
#include "rk_fabric_port.h"

#include <array>
#include <bitset>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>
#include <string>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "eth_frag.h"
#include "shm_ring.h"

using namespace rackemu::fabric;

namespace {
struct Svc {
    rk_fabric_request_fn on_request = nullptr;
    rk_fabric_reply_fn on_reply = nullptr;
    rk_fabric_link_fn on_link = nullptr;
    void *opaque = nullptr;
};
struct EthRx {
    rk_fabric_eth_rx_fn fn = nullptr;
    void *opaque = nullptr;
};

// A direct ring pair with one peer (docs/fabric.md, "Direct node-to-node rings"). The pointer in
// RkFabricPort::pairs changes only with rx_mu and tx_mu held; tx_pair is the sender's (tx_mu),
// rx_pair the receiver's (rx_mu).
struct PairLink {
    PairShm *shm = nullptr;
    unsigned peer = 0;
    uint64_t gen = 0;
    unsigned txd = 0; // index of the ring this node produces
    Ring *tx = nullptr, *rx = nullptr;
    bool tx_pair = false;            // our frames to the peer go on the ring now (a START marker went ahead)
    bool rx_pair = false;            // the peer's frames to us come on the ring now (its START arrived)
    std::atomic<bool> broken{false}; // the ring from the peer was corrupt: not used any more
    // A wake-up of the peer's port thread skipped for frames up to ring index fu_head (the peer's
    // poller held the lease): followed up until the peer took them (follow_ups_locked). tx_mu.
    bool fu = false;
    uint32_t fu_head = 0;
};
constexpr uint32_t kPendMax = 65536; // requests tracked per peer; beyond, not tracked (counted)
using PendKey = std::tuple<uint16_t, uint8_t, uint16_t, uint64_t>; // peer, svc, op, tag

void fmt(char *err, size_t errlen, const char *f, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(err, errlen, f, ap);
    va_end(ap);
}

// A shared-memory object handed over by the bridge may be mapped only if nobody can change its
// size any more (a holder that shrinks it makes every mapping of the lost pages fault with
// SIGBUS) and it is at least `need` bytes. False with the reason in `err`.
bool safe_to_map(int fd, size_t need, const char *what, char *err, size_t errlen)
{
    const int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & want) != want) {
        fmt(err, errlen,
            "the fabric bridge handed over %s that is not sealed against resizing (seals 0x%x): refusing to map it",
            what, seals < 0 ? 0 : seals);
        return false;
    }
    struct stat st {};
    if (fstat(fd, &st) < 0 || st.st_size < 0 || size_t(st.st_size) < need) {
        fmt(err, errlen, "the fabric bridge handed over %s smaller (%lld bytes) than its %zu bytes", what,
            (long long)st.st_size, need);
        return false;
    }
    return true;
}

// One message of the bridge's socket into `buf`, with up to `maxfds` descriptors in `fds` (the
// others: -1); descriptors beyond them are closed. Returns recvmsg()'s result.
ssize_t recv_with_fds(int s, void *buf, size_t len, int flags, int *fds, size_t maxfds)
{
    iovec iov{buf, len};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(4 * sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    std::fill(fds, fds + maxfds, -1);
    const ssize_t n = recvmsg(s, &mh, flags | MSG_CMSG_CLOEXEC);
    size_t got = 0;
    for (cmsghdr *c = n < 0 ? nullptr : CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < nfd; k++) {
            int f;
            std::memcpy(&f, CMSG_DATA(c) + k * sizeof(int), sizeof f);
            if (got < maxfds) {
                fds[got++] = f;
            } else {
                close(f);
            }
        }
    }
    return n;
}
} // namespace

struct RkFabricPort {
    std::string path;
    unsigned node_id = 0, node_count = 0;
    uint32_t caps = 0; // RKF_CAP_* announced in every rkf_hello (first connect and reconnects)
    // Lock order: rx_mu, then tx_mu. The mapping changes only with both held.
    std::mutex rx_mu; // the consumer of to_node: the port thread or a thread driving the port
    std::mutex tx_mu; // producers on to_bridge; also guards the mapping
    std::atomic<bool> up{false};
    int sock = -1;
    PortShm *shm = nullptr;
    Doorbell *bell = nullptr;
    // The bridge's liveness table, mapped read-only at this fixed address for the port's life:
    // zeros (no magic: nobody's state is known) while the link is down or the bridge sent none.
    rkf_live_table *live = nullptr;
    // Liveness without polling: a watcher thread per connection sleeps in poll() on the socket
    // and `watch_stop` (an eventfd); on the bridge's hang-up it sets `peer_gone` and wakes the
    // port thread.
    std::thread watcher;
    int watch_stop = -1;
    std::atomic<bool> peer_gone{false};
    // Set by a thread that found the to_node ring corrupt while driving; the port thread acts.
    std::atomic<bool> rx_corrupt{false};
    // Threads inside drive() (changed under rx_mu). While any drives, the port thread does not
    // announce that it sleeps (the drivers poll the ring): it parks on `handback` (a private
    // futex, read and bumped under rx_mu, so no wake-up is lost) and the last driver to leave
    // wakes it if it parked; it then announces itself again and re-checks the ring.
    unsigned drivers = 0;
    bool parked = false;
    std::atomic<uint32_t> handback{0};
    Svc svcs[RKF_SVC_COUNT];
    std::mutex svc_mu;
    // Service callbacks running now (any thread), so that re-registering a service (unbinding
    // an endpoint) waits until no callback still uses the old one's opaque.
    unsigned svc_busy = 0;
    std::condition_variable svc_idle;
    std::thread thr;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> frames_tx{0}, frames_rx{0}, bytes_tx{0}, bytes_rx{0}, bad_frames{0},
        send_failures{0}, link_downs{0}, connects{0}, wakeups_sent{0}, sleeps{0}, driven_frames{0},
        full_waits{0}, polled_frames{0}, lease_renewals{0};
    // Direct node-to-node rings: on only when the environment allows (RACKEMU_FABRIC_PAIRS) and
    // the kernel has futex_waitv; then RKF_CAP_PAIR is announced and the bridge may hand pairs.
    bool pairs_on = false;
    std::array<PairLink *, RKF_MAX_NODES> pairs{};
    // With pairs on: the requests this node sent and that are not answered yet, per peer (either
    // path). The bridge matches no replies between the nodes of a pair, so this port does for
    // replies from a paired peer (a forged, duplicate or stale one is dropped: stray_replies), and
    // answers what is pending NODE_GONE when a pair's peer dies (docs/fabric.md).
    std::mutex pend_mu;
    std::map<PendKey, uint32_t> pend;
    uint32_t npend[RKF_MAX_NODES] = {};
    bool pend_overflow[RKF_MAX_NODES] = {}; // a request went untracked since the table was empty
    std::atomic<uint64_t> stray_replies{0};
    std::atomic<uint64_t> pair_frames_tx{0}, pair_frames_rx{0}, pair_markers{0}, pair_bad{0}, pairs_up{0},
        pairs_down{0}, pair_gone_replies{0}, pair_untracked{0}, pair_wakes_skipped{0},
        pair_follow_up_wakes{0}, pair_backstop_wakes{0};
    // Some pair has a skipped wake-up to follow up (PairLink::fu; a hint read without tx_mu).
    std::atomic<bool> fu_hint{false};
    rk_fabric_port_hooks hooks{}; // set before the thread starts and before any send; then read-only
    // Ethernet (RKF_SVC_ETH): receivers guarded by svc_mu (and svc_busy, like svcs), the
    // reassembler used only by the dispatching thread, the frame counter under tx_mu.
    EthRx eth_rx[RK_FABRIC_ETH_CLASSES];
    EthReassembler eth_asm;
    uint32_t eth_tx_seq = 0;
    std::atomic<uint64_t> eth_tx_frames{0}, eth_tx_bytes{0}, eth_tx_full{0}, eth_tx_down{0}, eth_tx_bad{0},
        eth_rx_frames{0}, eth_rx_bytes{0}, eth_rx_roce{0}, eth_rx_no_receiver{0}, eth_rx_bad{0};

    ~RkFabricPort()
    {
        if (live) munmap(live, RKF_LIVE_SIZE);
    }

    void log(rk_fabric_log_level level, const char *f, ...) __attribute__((format(printf, 3, 4)));
    void report_link(int up);

    // 0: connected; -1: bridge not reachable (retry later); -2: refused (fatal).
    int connect_once(char *err, size_t errlen);
    void map_live(int fd);
    void clear_live();
    void link_down(const char *why);
    void run();
    void watch(int s);
    void stop_watcher();
    void wake_port_thread();
    // Pop and dispatch up to `max` frames of to_node; rx_mu held, link up. -1: corrupt indices.
    int drain_locked(unsigned max);
    int drive(int (*done)(void *), void *arg, uint64_t max_ns);
    int poll_rx(unsigned max);
    int push(const rkf_frame_hdr &h, const void *payload);
    void dispatch(const rkf_frame_hdr &h, const unsigned char *payload);
    void eth_input(const rkf_frame_hdr &h, const unsigned char *payload);
    void callback_done();
    // Pairs (docs/fabric.md, "Direct node-to-node rings").
    void pair_message(const rkf_pair_msg &m, int fd);
    void pair_install(PairLink *pl);
    void pair_remove(unsigned peer, uint64_t gen, uint16_t status);
    void pairs_clear_locked(); // rx_mu and tx_mu held: link down or free
    int pair_drain_locked(PairLink &pl, unsigned max);
    void pair_broken_locked(PairLink &pl);
    bool pairs_ready_locked() const;
    void pair_leases_renew_locked(uint64_t now); // rx_mu held: a polling thread's promise on the pair rings
    uint64_t follow_ups_locked(uint64_t now);    // tx_mu held: see PairLink::fu
    void follow_ups_try();                       // the same from a polling thread, if tx_mu is free
    void dispatch_rx(const rkf_frame_hdr &h, const unsigned char *payload);
    bool pend_add(const rkf_frame_hdr &h);
    bool pend_settle(uint16_t peer, uint8_t svc, uint16_t op, uint64_t tag);
};

namespace {
// Service callbacks this thread is inside (a callback may re-register its own service).
thread_local unsigned tl_in_callback = 0;
} // namespace

void RkFabricPort::callback_done()
{
    tl_in_callback--;
    std::lock_guard lk(svc_mu);
    if (--svc_busy == 0) svc_idle.notify_all();
}

void RkFabricPort::log(rk_fabric_log_level level, const char *f, ...)
{
    if (!hooks.log) return;
    char buf[384];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    hooks.log(hooks.opaque, level, buf);
}

// Tell every service, then the observer, that the link went up or down.
void RkFabricPort::report_link(int is_up)
{
    Svc copy[RKF_SVC_COUNT];
    {
        std::lock_guard lk(svc_mu);
        std::copy(std::begin(svcs), std::end(svcs), copy);
        svc_busy++;
    }
    tl_in_callback++;
    for (auto &s : copy) {
        if (s.on_link) s.on_link(s.opaque, is_up);
    }
    callback_done();
    if (hooks.link) hooks.link(hooks.opaque, is_up);
}

int RkFabricPort::connect_once(char *err, size_t errlen)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) {
        fmt(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) {
        close(s);
        fmt(err, errlen, "fabric socket path too long (%zu bytes, max %zu): %s", path.size(),
            sizeof sa.sun_path - 1, path.c_str());
        return -2;
    }
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (connect(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) < 0) {
        fmt(err, errlen, "cannot connect to the fabric bridge at %s: %s", path.c_str(), strerror(errno));
        close(s);
        return -1;
    }
    rkf_hello hello{};
    hello.magic = RKF_HELLO_MAGIC;
    hello.version = RKF_PROTO_VERSION;
    hello.node_id = node_id;
    hello.node_count = node_count;
    hello.caps = caps | (pairs_on ? RKF_CAP_PAIR : 0u);
    snprintf(hello.name, sizeof hello.name, "node%u pid %d", node_id, int(getpid()));
    if (send(s, &hello, sizeof hello, MSG_NOSIGNAL) != sizeof hello) {
        fmt(err, errlen, "handshake send failed: %s", strerror(errno));
        close(s);
        return -1;
    }
    pollfd pfd{s, POLLIN, 0};
    if (poll(&pfd, 1, 5000) <= 0) {
        fmt(err, errlen, "the fabric bridge at %s did not answer the handshake within 5 s", path.c_str());
        close(s);
        return -1;
    }
    rkf_welcome w{};
    int fds[3]; // port memory, doorbell, liveness table (optional)
    ssize_t n = recv_with_fds(s, &w, sizeof w, 0, fds, 3);
    auto fail = [&](int rc) {
        for (int fd : fds)
            if (fd >= 0) close(fd);
        close(s);
        return rc;
    };
    if (n != sizeof w || w.magic != RKF_HELLO_MAGIC) {
        fmt(err, errlen, "malformed handshake answer from the fabric bridge (%zd bytes)", n);
        return fail(-1);
    }
    if (w.status != RKF_WELCOME_OK) {
        w.message[sizeof w.message - 1] = 0;
        fmt(err, errlen, "the fabric bridge refused node %u: %s", node_id, w.message);
        return fail(-2);
    }
    if (fds[0] < 0 || fds[1] < 0 || w.ring_slots != RKF_RING_SLOTS || w.slot_size != RKF_SLOT_SIZE) {
        fmt(err, errlen, "fabric bridge handshake carried no shared memory or a different ring geometry");
        return fail(-2);
    }
    if (!safe_to_map(fds[0], sizeof(PortShm), "port memory", err, errlen) ||
        !safe_to_map(fds[1], sizeof(Doorbell), "a doorbell", err, errlen)) {
        return fail(-2);
    }
    void *m = mmap(nullptr, sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    void *b = mmap(nullptr, sizeof(Doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    if (m == MAP_FAILED || b == MAP_FAILED) {
        if (m != MAP_FAILED) munmap(m, sizeof(PortShm));
        if (b != MAP_FAILED) munmap(b, sizeof(Doorbell));
        fmt(err, errlen, "mmap of the fabric port memory failed: %s", strerror(errno));
        return fail(-1);
    }
    close(fds[0]);
    close(fds[1]);
    fds[0] = fds[1] = -1;
    auto *ps = static_cast<PortShm *>(m);
    if (ps->magic != RKF_SHM_MAGIC || ps->version != RKF_PROTO_VERSION) {
        munmap(m, sizeof(PortShm));
        munmap(b, sizeof(Doorbell));
        fmt(err, errlen, "fabric port memory has a bad magic/version");
        return fail(-2);
    }
    map_live(fds[2]);
    if (fds[2] >= 0) close(fds[2]);
    {
        std::lock_guard rk(rx_mu);
        std::lock_guard lk(tx_mu);
        sock = s;
        shm = ps;
        bell = static_cast<Doorbell *>(b);
        peer_gone = false;
        rx_corrupt = false;
        up = true;
    }
    watcher = std::thread([this, s] { watch(s); });
    connects++;
    return 0;
}

// Sleeps until the bridge hangs up (or stop_watcher): no periodic wake-up. The bridge's only
// messages after the handshake are about pairs (RKF_PAIR_UP with the pair's memory, RKF_PAIR_DOWN);
// anything else is counted and discarded.
void RkFabricPort::watch(int s)
{
    pollfd pfd[2] = {{s, POLLIN | POLLRDHUP, 0}, {watch_stop, POLLIN, 0}};
    for (;;) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break; // cannot watch: treat as gone rather than miss a dead bridge
        }
        if (pfd[1].revents) return;
        if (pfd[0].revents & POLLIN) {
            rkf_pair_msg m{};
            int fd;
            const ssize_t n = recv_with_fds(s, &m, sizeof m, MSG_DONTWAIT, &fd, 1);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
            if (n == ssize_t(sizeof m) && m.magic == RKF_PAIR_MAGIC) {
                pair_message(m, fd); // takes fd
            } else if (n > 0) {
                bad_frames++;
                if (fd >= 0) close(fd);
            }
            continue;
        }
        if (pfd[0].revents & (POLLHUP | POLLERR | POLLRDHUP)) break;
    }
    peer_gone = true;
    wake_port_thread();
}

void RkFabricPort::wake_port_thread()
{
    {
        std::lock_guard lk(tx_mu);
        if (up) futex_wake_always(&shm->to_node.ctl.sleeping);
    }
    handback.fetch_add(1, std::memory_order_seq_cst); // a port thread parked behind a driver
    futex_op(&handback, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr);
}

void RkFabricPort::stop_watcher()
{
    if (!watcher.joinable()) return;
    uint64_t one = 1;
    (void)!write(watch_stop, &one, sizeof one);
    watcher.join();
    (void)!read(watch_stop, &one, sizeof one); // reset for the next connection's watcher
}

void RkFabricPort::link_down(const char *why)
{
    stop_watcher();
    {
        std::lock_guard rk(rx_mu);
        std::lock_guard lk(tx_mu);
        if (!up) return;
        clear_live();         // every peer's state is unknown now: direct accesses fall back and fail
        pairs_clear_locked(); // the bridge is gone: its pairs too (a new bridge hands new ones)
        up = false;
        // Senders blocked on a full ring return -ENOTCONN.
        futex_wake_always(&shm->to_bridge.ctl.space_wait);
        munmap(shm, sizeof(PortShm));
        munmap(bell, sizeof(Doorbell));
        close(sock);
        shm = nullptr;
        bell = nullptr;
        sock = -1;
    }
    link_downs++;
    log(RK_FABRIC_LOG_WARN, "rackemu-fabric: node %u: link down (%s); pending operations fail, reconnecting",
        node_id, why);
    report_link(0);
}

// Map the bridge's liveness table over `live`. A table that is missing, resizable, writable by
// its holders or malformed is not used (the direct path then stays off); the port works on.
void RkFabricPort::map_live(int fd)
{
    char why[160] = "";
    const int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE;
    struct stat st {};
    const int seals = fd >= 0 ? fcntl(fd, F_GET_SEALS) : -1;
    if (fd < 0) {
        snprintf(why, sizeof why, "the bridge handed over none");
    } else if (seals < 0 || (seals & want) != want) {
        snprintf(why, sizeof why, "it is not sealed against resizing and writing (seals 0x%x)",
                 seals < 0 ? 0 : seals);
    } else if (fstat(fd, &st) < 0 || st.st_size != off_t(RKF_LIVE_SIZE)) {
        snprintf(why, sizeof why, "it has %lld bytes, not %u", (long long)st.st_size, RKF_LIVE_SIZE);
    } else if (mmap(live, RKF_LIVE_SIZE, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        snprintf(why, sizeof why, "mmap: %s", strerror(errno));
    } else if (__atomic_load_n(&live->magic, __ATOMIC_ACQUIRE) != RKF_LIVE_MAGIC ||
               live->version != RKF_PROTO_VERSION) {
        snprintf(why, sizeof why, "bad magic/version");
        clear_live();
    } else {
        return;
    }
    log(RK_FABRIC_LOG_WARN,
        "rackemu-fabric: node %u: no liveness table (%s); one-sided accesses use the fabric", node_id, why);
}

void RkFabricPort::clear_live()
{
    mmap(live, RKF_LIVE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

namespace {
rkf_frame_hdr pair_marker(unsigned src, unsigned dst, uint16_t op, uint64_t gen)
{
    rkf_frame_hdr m{};
    m.magic = RKF_FRAME_MAGIC;
    m.type = RKF_T_MSG;
    m.svc = RKF_SVC_BRIDGE;
    m.op = op;
    m.src = uint16_t(src);
    m.dst = uint16_t(dst);
    m.tag = gen;
    m.ts_ns = now_ns();
    return m;
}
} // namespace

// Queue one frame: on the pair ring of its destination while the bridge's `mode` says DIRECT,
// else on the bridge ring. A change of path is announced on the old path first (a START marker
// through the bridge, an END marker on the pair ring), so the receiver, which reads one path
// until it meets the marker, gets the frames in the order they were sent (docs/fabric.md).
int RkFabricPort::push(const rkf_frame_hdr &h, const void *payload)
{
    const uint64_t deadline = now_ns() + 100000000ull;
    std::unique_lock lk(tx_mu);
    if (fu_hint.load(std::memory_order_relaxed)) follow_ups_locked(now_ns());
    bool reported = false, tracked = false;
    for (;;) {
        if (!up) {
            send_failures++;
            return -ENOTCONN;
        }
        // Reported before it is pushed, so that a trace never shows the reply before its request.
        if (!reported && hooks.frame) hooks.frame(hooks.opaque, RK_FABRIC_OUT, &h);
        reported = true;
        PairLink *pl = h.svc != RKF_SVC_ETH && h.dst < RKF_MAX_NODES ? pairs[h.dst] : nullptr;
        if (pairs_on && h.type == RKF_T_REQ && !tracked) tracked = pend_add(h);
        Ring *r = &shm->to_bridge;
        const rkf_frame_hdr *fh = &h;
        const void *fp = payload;
        rkf_frame_hdr marker;
        std::atomic<uint32_t> *busy = nullptr;
        bool direct = false, is_marker = false, pair_room = true;
        if (pl) {
            // Dekker with the bridge (shm_ring.h, PairShm): busy, then mode.
            busy = &pl->shm->busy[pl->txd];
            busy->store(1, std::memory_order_seq_cst);
            const uint32_t mode = pl->shm->mode.load(std::memory_order_seq_cst);
            const bool gone = mode == RKF_PAIR_MODE_GONE || pl->broken.load(std::memory_order_relaxed);
            bool want = mode == RKF_PAIR_MODE_DIRECT && !gone;
            if (want) {
                // The ring's last slot stays free for an END marker (frames and a START only while
                // two are free), so this node can always leave the ring. A callback runs on a
                // thread that holds this port's receive lock: waiting there for the peer to read
                // would stop this node reading the peer, and two port threads answering each
                // other's requests would wait for each other (100 ms, then the replies were lost):
                // its frame goes through the bridge instead (docs/fabric.md, invariant 8).
                const bool room = ring_used(*pl->tx) < RKF_RING_SLOTS - 1;
                if (!room && tl_in_callback) {
                    want = false;
                } else {
                    pair_room = room;
                }
            }
            if (want != pl->tx_pair && !want && gone) {
                pl->tx_pair = false; // nobody reads that ring any more: no END marker
            } else if (want != pl->tx_pair && pair_room) {
                marker = pair_marker(node_id, pl->peer, want ? RKF_OP_PAIR_START : RKF_OP_PAIR_END, pl->gen);
                fh = &marker;
                fp = nullptr;
                is_marker = true;
                direct = !want; // END goes on the ring, START through the bridge
            } else {
                direct = want; // the ring (to wait for room there when it has none)
            }
            if (direct) r = pl->tx;
        }
        if (pair_room && ring_push(*r, *fh, fp)) {
            if (busy) busy->store(0, std::memory_order_release);
            if (direct) {
                switch (wake_pair_consumer(r->ctl)) {
                case Wake::Woken:
                    wakeups_sent++;
                    break;
                case Wake::Skipped:
                    pl->fu = true;
                    pl->fu_head = r->ctl.head.load(std::memory_order_relaxed);
                    fu_hint.store(true, std::memory_order_relaxed);
                    pair_wakes_skipped++;
                    break;
                case Wake::None:
                    break;
                }
            } else if (wake_router(*shm, *bell)) {
                wakeups_sent++;
            }
            if (is_marker) {
                pl->tx_pair = !direct;
                pair_markers++;
                continue; // now the frame itself, on the new path
            }
            frames_tx++;
            bytes_tx += sizeof h + h.len;
            if (direct) pair_frames_tx++;
            return 0;
        }
        if (busy) busy->store(0, std::memory_order_release);
        // Ring full: announce it, make sure its consumer is awake, and block until it frees a
        // slot (it clears space_wait and wakes us) or the deadline passes.
        r->ctl.space_wait.store(1, std::memory_order_seq_cst);
        if (pair_room ? !ring_full(*r) : ring_used(*r) < RKF_RING_SLOTS - 1) continue;
        if (direct) {
            futex_wake(&r->ctl.sleeping);
        } else {
            wake_router(*shm, *bell);
        }
        const uint64_t now = now_ns();
        if (now >= deadline) {
            send_failures++;
            if (tracked) pend_settle(h.dst, h.svc, h.op, h.tag);
            return -EAGAIN;
        }
        full_waits++;
        const uint64_t left = deadline - now;
        timespec ts{time_t(left / 1000000000ull), long(left % 1000000000ull)};
        std::atomic<uint32_t> *w = &r->ctl.space_wait;
        lk.unlock();
        // If the link goes down (or the pair goes) meanwhile, this word is woken before it is
        // unmapped; a wait that starts after the unmap fails at once (EFAULT) or sees a fresh 0.
        futex_op(w, FUTEX_WAIT, 1, &ts);
        lk.lock();
    }
}

void RkFabricPort::dispatch(const rkf_frame_hdr &h, const unsigned char *payload)
{
    Svc s;
    {
        std::lock_guard lk(svc_mu);
        s = svcs[h.svc];
        svc_busy++;
    }
    tl_in_callback++;
    if (h.type == RKF_T_REPLY) {
        if (s.on_reply) s.on_reply(s.opaque, &h, payload);
    } else if (h.svc == RKF_SVC_ECHO && h.type == RKF_T_REQ) {
        rk_fabric_port_reply(this, &h, RKF_ST_OK, payload, h.len);
    } else if (s.on_request) {
        s.on_request(s.opaque, this, &h, payload);
    } else if (h.type == RKF_T_REQ) {
        rk_fabric_port_reply(this, &h, RKF_ST_BAD_FRAME, nullptr, 0);
    }
    callback_done();
}

// One fragment of an Ethernet frame from the bridge; a whole frame goes to its receiver.
void RkFabricPort::eth_input(const rkf_frame_hdr &h, const unsigned char *payload)
{
    const uint64_t lost = eth_asm.lost();
    const auto r = eth_asm.feed(h, payload);
    if (eth_asm.lost() != lost) {
        eth_rx_bad += eth_asm.lost() - lost;
        log(RK_FABRIC_LOG_BAD_INPUT,
            "rackemu-fabric: node %u: dropped an Ethernet fragment from the bridge: %s", node_id,
            eth_asm.why());
    }
    if (r != EthReassembler::Result::Complete) return;
    const unsigned char *f = eth_asm.frame();
    const size_t len = eth_asm.size();
    uint8_t mine[6];
    rkf_eth_node_mac(node_id, mine);
    const bool roce = eth_is_rocev2(f, len) && std::memcmp(f, mine, 6) == 0;
    EthRx rx;
    {
        std::lock_guard lk(svc_mu);
        rx = roce && eth_rx[RK_FABRIC_ETH_ROCE].fn ? eth_rx[RK_FABRIC_ETH_ROCE] : eth_rx[RK_FABRIC_ETH_NET];
        if (roce && eth_rx[RK_FABRIC_ETH_ROCE].fn) eth_rx_roce++;
        svc_busy++;
    }
    tl_in_callback++;
    if (rx.fn) {
        eth_rx_frames++;
        eth_rx_bytes += len;
        rx.fn(rx.opaque, f, len, h.src);
    } else {
        eth_rx_no_receiver++;
    }
    callback_done();
}

// A frame for a service of this node, from either path: a reply from a paired peer settles the
// request the pair's table holds for it (it will not be answered NODE_GONE when the pair goes).
void RkFabricPort::dispatch_rx(const rkf_frame_hdr &h, const unsigned char *payload)
{
    if (pairs_on && h.type == RKF_T_REPLY && h.src < RKF_MAX_NODES &&
        !pend_settle(h.src, h.svc, h.op, h.tag) && pairs[h.src]) {
        // From a paired peer (the bridge does not match those) and answering nothing pending.
        stray_replies++;
        return;
    }
    dispatch(h, payload);
}

// Track a request (pairs on; any destination: a pair may appear while it is pending). False if
// the peer's table is full (then its replies are not filtered until the table empties).
bool RkFabricPort::pend_add(const rkf_frame_hdr &h)
{
    if (h.dst >= RKF_MAX_NODES) return false;
    std::lock_guard pk(pend_mu);
    if (npend[h.dst] >= kPendMax) {
        pend_overflow[h.dst] = true;
        pair_untracked++;
        return false;
    }
    pend[{h.dst, h.svc, h.op, h.tag}]++;
    npend[h.dst]++;
    return true;
}

// A reply (or a failed send) settles one pending request. False if none matched and the peer's
// table did not overflow (a reply that answers nothing).
bool RkFabricPort::pend_settle(uint16_t peer, uint8_t svc, uint16_t op, uint64_t tag)
{
    std::lock_guard pk(pend_mu);
    auto it = pend.find({peer, svc, op, tag});
    if (it == pend.end()) return pend_overflow[peer];
    if (--it->second == 0) pend.erase(it);
    if (--npend[peer] == 0) pend_overflow[peer] = false;
    return true;
}

int RkFabricPort::drain_locked(unsigned max)
{
    Ring &rx = shm->to_node;
    unsigned char payload[RKF_SLOT_SIZE];
    rkf_frame_hdr h;
    int handled = 0;     // frames (not markers)
    unsigned popped = 0; // markers
    PopResult pr;
    while (unsigned(handled) < max && (pr = ring_pop(rx, h, payload)) == PopResult::Ok) {
        handled++;
        if (const char *why = frame_defect(h)) {
            bad_frames++;
            log(RK_FABRIC_LOG_BAD_INPUT, "rackemu-fabric: node %u: dropped a frame from the bridge: %s",
                node_id, why);
            continue;
        }
        if (h.svc == RKF_SVC_BRIDGE && h.type == RKF_T_MSG && h.op == RKF_OP_PAIR_START) {
            handled--; // a marker: not a frame for this node's services (nor its traces)
            // The peer's next frames come on our pair ring. The bridge forwards only a marker of
            // a live pair, from its node, and lets the peer send one only after this port mapped
            // the pair (RKF_PAIR_READY); one for a pair that is not here (removed meanwhile, or
            // from a peer that does not keep the protocol) is ignored: nothing reads that ring.
            PairLink *pl = h.src < RKF_MAX_NODES ? pairs[h.src] : nullptr;
            if (pl && pl->gen == h.tag && !pl->broken.load(std::memory_order_relaxed)) {
                // Still reading the ring: the END of the previous stretch is there, before the
                // frames that follow this START (the sender left the ring, sent nothing through
                // the bridge, and came back): take that stretch first.
                if (pl->rx_pair) handled += pair_drain_locked(*pl, RKF_RING_SLOTS + 1);
                pl->rx_pair = true;
                // A port thread asleep on the rings it read before (this may be a driver or a
                // polling vCPU) must add this ring to its wait: wake it to look again.
                futex_wake_always(&shm->to_node.ctl.sleeping);
            }
            popped++;
            continue;
        }
        frames_rx++;
        bytes_rx += sizeof h + h.len;
        if (hooks.frame) hooks.frame(hooks.opaque, RK_FABRIC_IN, &h);
        if (h.svc == RKF_SVC_ETH) {
            eth_input(h, payload);
            continue;
        }
        if (eth_asm.interrupt()) eth_rx_bad++;
        // The peer switched to the bridge: what it sent before on the ring (up to its END
        // marker, or all that is there) goes first.
        if (h.src < RKF_MAX_NODES && pairs[h.src] && pairs[h.src]->rx_pair)
            handled += pair_drain_locked(*pairs[h.src], RKF_RING_SLOTS + 1);
        dispatch_rx(h, payload);
    }
    const bool corrupt = pr == PopResult::Corrupt;
    if (handled || popped) {
        // The router may wait for room in this ring (its per-destination queue).
        if (ring_space_freed(rx)) wake_router(*shm, *bell);
    }
    for (PairLink *pl : pairs) {
        if (unsigned(handled) >= max) break;
        if (pl && pl->rx_pair) handled += pair_drain_locked(*pl, max - unsigned(handled));
    }
    if (handled) return handled;
    return corrupt ? -1 : 0;
}

// The peer's frames on the pair ring, until its END marker, `max` frames, or none is left. The
// peer is untrusted as the bridge is: each frame is validated (and must come from the peer, for
// this node, not Ethernet, no bridge frame but the marker); impossible indices take the pair down.
int RkFabricPort::pair_drain_locked(PairLink &pl, unsigned max)
{
    unsigned char payload[RKF_SLOT_SIZE];
    rkf_frame_hdr h;
    unsigned n = 0;      // frames
    bool popped = false; // anything, the END marker included
    while (pl.rx_pair && n < max) {
        const PopResult pr = ring_pop(*pl.rx, h, payload);
        if (pr == PopResult::Empty) break;
        if (pr == PopResult::Corrupt) {
            pair_broken_locked(pl);
            break;
        }
        popped = true;
        n++;
        const char *why = frame_defect(h);
        if (!why && (h.src != pl.peer || h.dst != node_id)) why = "wrong source or destination";
        if (!why && h.svc == RKF_SVC_ETH) why = "an Ethernet fragment (Ethernet goes through the bridge)";
        if (!why && h.svc == RKF_SVC_BRIDGE && (h.type != RKF_T_MSG || h.op != RKF_OP_PAIR_END))
            why = "a bridge frame that is not an END marker";
        if (why) {
            bad_frames++;
            pair_bad++;
            log(RK_FABRIC_LOG_BAD_INPUT,
                "rackemu-fabric: node %u: dropped a frame from node %u's pair ring: %s", node_id, pl.peer,
                why);
            continue;
        }
        if (h.svc == RKF_SVC_BRIDGE) {
            pl.rx_pair = false; // END: its next frames come through the bridge
            n--;
            break;
        }
        frames_rx++;
        bytes_rx += sizeof h + h.len;
        pair_frames_rx++;
        if (hooks.frame) hooks.frame(hooks.opaque, RK_FABRIC_IN, &h);
        dispatch_rx(h, payload);
    }
    if (popped && ring_space_freed(*pl.rx)) futex_op(&pl.rx->ctl.space_wait, FUTEX_WAKE, INT32_MAX, nullptr);
    return int(n);
}

bool RkFabricPort::pairs_ready_locked() const
{
    for (const PairLink *pl : pairs) {
        if (pl && pl->rx_pair && !ring_empty(*pl->rx)) return true;
    }
    return false;
}

void RkFabricPort::pair_leases_renew_locked(uint64_t now)
{
    for (PairLink *pl : pairs) {
        if (pl && pl->rx_pair && lease_renew(pl->rx->ctl, lease_ns(), now)) lease_renewals++;
    }
}

// Skipped wake-ups (push): the peer's poller promised to poll within its lease. Once the lease
// has lapsed with our frames still in the ring, the peer's port thread gets the wake-up it was
// spared (shm_ring.h, lease_follow_up). Returns the earliest lease still running (0: none left).
uint64_t RkFabricPort::follow_ups_locked(uint64_t now)
{
    uint64_t due = 0;
    for (PairLink *pl : pairs) {
        if (!pl || !pl->fu) continue;
        uint64_t d = 0;
        bool woken = false;
        if (lease_follow_up(pl->tx->ctl, pl->fu_head, now, &d, &woken)) {
            pl->fu = false;
            if (woken) {
                pair_follow_up_wakes++;
                count_up(pl->tx->ctl.follow_up_wakes);
            }
        } else if (!due || d < due) {
            due = d;
        }
    }
    fu_hint.store(due != 0, std::memory_order_relaxed);
    return due;
}

void RkFabricPort::follow_ups_try()
{
    if (!fu_hint.load(std::memory_order_relaxed) || !tx_mu.try_lock()) return;
    follow_ups_locked(now_ns());
    tx_mu.unlock();
}

// Impossible indices on the ring from the peer: only this pair goes. Its frames are not read
// any more, this node sends to the peer through the bridge, and the bridge is asked to tear the
// pair down (it tells both nodes; the peer then sends through the bridge too).
void RkFabricPort::pair_broken_locked(PairLink &pl)
{
    pl.broken = true;
    pl.rx_pair = false;
    pair_bad++;
    log(RK_FABRIC_LOG_BAD_INPUT,
        "rackemu-fabric: node %u: the pair ring from node %u has impossible indices; that pair is closed, its "
        "frames go through the bridge",
        node_id, pl.peer);
    rkf_pair_msg m{};
    m.magic = RKF_PAIR_MAGIC;
    m.kind = RKF_PAIR_BAD;
    m.peer = uint16_t(pl.peer);
    m.gen = pl.gen;
    (void)!send(sock, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// From the watcher thread: a message of the bridge about a pair. Takes `fd`.
void RkFabricPort::pair_message(const rkf_pair_msg &m, int fd)
{
    if (m.kind == RKF_PAIR_DOWN) {
        if (fd >= 0) close(fd);
        if (m.peer < RKF_MAX_NODES)
            pair_remove(m.peer, m.gen, m.reason == RKF_PAIR_GONE ? RKF_ST_NODE_GONE : RKF_ST_LINK_DOWN);
        return;
    }
    char err[200] = "";
    void *mem = MAP_FAILED;
    if (m.kind != RKF_PAIR_UP || fd < 0) {
        snprintf(err, sizeof err, "message kind %u without its memory", unsigned(m.kind));
    } else if (!pairs_on) {
        snprintf(err, sizeof err, "pairs are off here but the bridge sent one");
    } else if (m.peer >= RKF_MAX_NODES || m.peer == node_id) {
        snprintf(err, sizeof err, "peer %u out of range", unsigned(m.peer));
    } else if (safe_to_map(fd, sizeof(PairShm), "pair memory", err, sizeof err)) {
        mem = mmap(nullptr, sizeof(PairShm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED) snprintf(err, sizeof err, "mmap: %s", strerror(errno));
    }
    if (fd >= 0) close(fd);
    if (mem != MAP_FAILED) {
        auto *ps = static_cast<PairShm *>(mem);
        const unsigned a = std::min(node_id, unsigned(m.peer)), b = std::max(node_id, unsigned(m.peer));
        if (ps->magic != RKF_PAIR_MAGIC || ps->version != RKF_PROTO_VERSION || ps->a != a || ps->b != b ||
            ps->gen != m.gen) {
            snprintf(err, sizeof err, "its memory names another pair or has a bad magic/version");
            munmap(mem, sizeof(PairShm));
        } else {
            auto *pl = new PairLink;
            pl->shm = ps;
            pl->peer = m.peer;
            pl->gen = m.gen;
            pl->txd = node_id == a ? 0 : 1;
            pl->tx = &ps->ring[pl->txd];
            pl->rx = &ps->ring[1 - pl->txd];
            pair_install(pl);
            return;
        }
    }
    pair_bad++;
    log(RK_FABRIC_LOG_BAD_INPUT, "rackemu-fabric: node %u: pair ring from the bridge not used: %s", node_id,
        err);
}

void RkFabricPort::pair_install(PairLink *pl)
{
    for (;;) {
        PairLink *old;
        {
            std::lock_guard rk(rx_mu);
            std::lock_guard lk(tx_mu);
            if (!up) {
                munmap(pl->shm, sizeof(PairShm));
                delete pl;
                return;
            }
            old = pairs[pl->peer];
            if (!old) {
                pairs[pl->peer] = pl;
                // Only now may the peer send its START (the bridge keeps the pair on its path
                // until both nodes said this), so every START of this pair finds it.
                rkf_pair_msg m{};
                m.magic = RKF_PAIR_MAGIC;
                m.kind = RKF_PAIR_READY;
                m.peer = uint16_t(pl->peer);
                m.gen = pl->gen;
                // EPIPE / ECONNRESET: the bridge is going away; the link-down warning that follows
                // says so, and the pair goes with the link.
                if (send(sock, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL) != ssize_t(sizeof m) &&
                    errno != EPIPE && errno != ECONNRESET)
                    log(RK_FABRIC_LOG_WARN,
                        "rackemu-fabric: node %u: could not tell the bridge that the pair with node %u is mapped "
                        "(%s); frames to it keep going through the bridge",
                        node_id, pl->peer, strerror(errno));
                break;
            }
        }
        pair_remove(old->peer, old->gen, RKF_ST_NODE_GONE); // its DOWN never came
    }
    pairs_up++;
}

// The pair with `peer` (generation `gen`) is gone. Frames the peer put on the ring before are
// still delivered; then the memory is unmapped and this node's requests outstanding to the peer
// are answered `status` (NODE_GONE: the peer died; LINK_DOWN: the pair broke), as the bridge does
// for the requests it routes.
void RkFabricPort::pair_remove(unsigned peer, uint64_t gen, uint16_t status)
{
    std::unique_lock rk(rx_mu);
    PairLink *pl = pairs[peer];
    if (!pl || pl->gen != gen) return;
    // What the bridge and the peer delivered before (a NOROUTE of the bridge, the peer's last
    // frames) is dispatched before the NODE_GONE answers below.
    if (up && drain_locked(RKF_RING_SLOTS) < 0) rx_corrupt = true; // the port thread acts
    if (up && pl->rx_pair) pair_drain_locked(*pl, RKF_RING_SLOTS + 1);
    {
        std::lock_guard lk(tx_mu);
        pairs[peer] = nullptr;
    }
    futex_wake_always(&pl->tx->ctl.space_wait); // a sender blocked on the ring: it re-reads
    munmap(pl->shm, sizeof(PairShm));
    pairs_down++;
    delete pl;
    // Everything pending to the peer, whichever path it took (what went through the bridge the
    // bridge does not track either: the nodes were paired).
    std::vector<std::pair<PendKey, uint32_t>> gone;
    {
        std::lock_guard pk(pend_mu);
        for (auto it = pend.lower_bound({uint16_t(peer), 0, 0, 0});
             it != pend.end() && std::get<0>(it->first) == peer;) {
            gone.emplace_back(it->first, it->second);
            it = pend.erase(it);
        }
        npend[peer] = 0;
        pend_overflow[peer] = false;
    }
    if (up) {
        for (const auto &[key, count] : gone) {
            rkf_frame_hdr r{};
            r.magic = RKF_FRAME_MAGIC;
            r.type = RKF_T_REPLY;
            r.svc = std::get<1>(key);
            r.op = std::get<2>(key);
            r.tag = std::get<3>(key);
            r.src = uint16_t(peer);
            r.dst = uint16_t(node_id);
            r.status = status;
            r.ts_ns = now_ns();
            for (uint32_t k = 0; k < count; k++) {
                pair_gone_replies++;
                dispatch(r, nullptr);
            }
        }
    }
    rk.unlock();
    wake_port_thread(); // it may sleep on the unmapped ring's word
}

void RkFabricPort::pairs_clear_locked()
{
    for (PairLink *&pl : pairs) {
        if (!pl) continue;
        futex_wake_always(&pl->tx->ctl.space_wait);
        munmap(pl->shm, sizeof(PairShm));
        delete pl;
        pl = nullptr;
        pairs_down++;
    }
    std::lock_guard pk(pend_mu); // the link is down: every service fails what it has pending
    pend.clear();
    std::fill(std::begin(npend), std::end(npend), 0);
    std::fill(std::begin(pend_overflow), std::end(pend_overflow), false);
}

void RkFabricPort::run()
{
    uint64_t last_activity = now_ns();
    uint64_t next_connect = 0;
    while (!stop.load(std::memory_order_relaxed)) {
        if (!up.load(std::memory_order_acquire)) {
            if (now_ns() >= next_connect) {
                char err[256];
                int rc = connect_once(err, sizeof err);
                if (rc == 0) {
                    log(RK_FABRIC_LOG_INFO,
                        "rackemu-fabric: node %u: connected to %s (spin %llu us, drive %llu us, poll lease %llu us)",
                        node_id, path.c_str(), (unsigned long long)(spin_ns() / 1000),
                        (unsigned long long)(drive_ns() / 1000), (unsigned long long)(lease_ns() / 1000));
                    {
                        std::lock_guard rk(rx_mu);
                        eth_asm.reset();
                    }
                    report_link(1);
                    continue;
                }
                next_connect = now_ns() + 1000000000ull;
            }
            usleep(50000);
            continue;
        }
        if (peer_gone.load(std::memory_order_acquire)) {
            link_down("the bridge closed the connection");
            continue;
        }
        int handled;
        {
            // Blocks while a waiting thread drives the port (it dispatches meanwhile).
            std::lock_guard rk(rx_mu);
            handled = up ? drain_locked(256) : 0;
        }
        if (handled < 0 || rx_corrupt.load(std::memory_order_acquire)) {
            link_down("corrupt ring indices");
            continue;
        }
        const uint64_t now = now_ns();
        if (handled) {
            last_activity = now;
            continue;
        }
        if (now - last_activity < spin_ns()) {
            cpu_relax();
            continue;
        }
        // Asleep until the bridge delivers a frame (it wakes us only because we announce it),
        // the watcher reports the bridge gone, or rk_fabric_port_free: no timeout.
        sleeps++;
        {
            std::unique_lock rk(rx_mu);
            if (drivers) {
                // A thread drives the port: it polls the ring and holds the announcement.
                parked = true;
                const uint32_t seq = handback.load(std::memory_order_relaxed);
                rk.unlock();
                if (!stop.load() && !peer_gone.load() && !rx_corrupt.load())
                    futex_op(&handback, FUTEX_WAIT_PRIVATE, seq, nullptr);
                rk.lock();
                parked = false;
                last_activity = now_ns();
                continue;
            }
        }
        // Skipped wake-ups this node owes a peer: followed up here, or at the earliest lease's end.
        uint64_t due = 0;
        if (fu_hint.load(std::memory_order_relaxed)) {
            std::lock_guard lk(tx_mu);
            due = follow_ups_locked(now_ns());
        }
        // Announced on the bridge ring and on every pair ring being read; any of them wakes it.
        // A pair ring whose lease a poller of this node holds gets kAsleepTimed: its producer may
        // then skip the wake-up, and this thread looks again after pair_backstop_ns() at the latest.
        std::atomic<uint32_t> *words[1 + RKF_MAX_NODES];
        uint32_t vals[1 + RKF_MAX_NODES];
        std::bitset<RKF_MAX_NODES> timed;
        unsigned nw = 0;
        bool ready;
        {
            std::lock_guard rk(rx_mu);
            if (!up) continue;
            const uint64_t t = now_ns();
            words[nw] = &shm->to_node.ctl.sleeping;
            vals[nw++] = kAsleep;
            for (unsigned peer = 0; peer < RKF_MAX_NODES; peer++) {
                PairLink *pl = pairs[peer];
                if (!pl || !pl->rx_pair) continue;
                const bool lease = lease_valid(pl->rx->ctl.poll_lease.load(std::memory_order_relaxed), t);
                timed[peer] = lease;
                words[nw] = &pl->rx->ctl.sleeping;
                vals[nw++] = lease ? kAsleepTimed : kAsleep;
            }
            for (unsigned i = 0; i < nw; i++)
                words[i]->store(vals[i], std::memory_order_seq_cst);
            // The announcements before the look at the rings (Dekker with the producers' fence
            // in futex_wake: docs/fabric.md, invariant 6).
            std::atomic_thread_fence(std::memory_order_seq_cst);
            ready = !ring_empty(shm->to_node) || pairs_ready_locked() || stop.load() || peer_gone.load() ||
                    rx_corrupt.load();
        }
        bool timed_out = false;
        if (!ready) {
            uint64_t until = timed.any() ? now_ns() + pair_backstop_ns() : 0;
            if (due && (!until || due < until)) until = due;
            // A pair removed meanwhile wakes the bridge ring's word (pair_remove) before its own
            // memory can be reused.
            if (nw == 1 && !until) {
                futex_op(words[0], FUTEX_WAIT, 1, nullptr);
            } else {
                timed_out = futex_wait_any(words, vals, nw, until) < 0 && errno == ETIMEDOUT;
            }
        }
        {
            std::lock_guard rk(rx_mu);
            if (up) {
                shm->to_node.ctl.sleeping.store(0, std::memory_order_relaxed);
                for (unsigned peer = 0; peer < RKF_MAX_NODES; peer++) {
                    PairLink *pl = pairs[peer];
                    if (!pl) continue;
                    pl->rx->ctl.sleeping.store(0, std::memory_order_relaxed);
                    // The backstop took frames a producer skipped and nobody followed up.
                    if (timed_out && timed[peer] && pl->rx_pair && !ring_empty(*pl->rx)) {
                        pair_backstop_wakes++;
                        count_up(pl->rx->ctl.backstop_wakes);
                    }
                }
            }
        }
        last_activity = now_ns();
    }
}

// A thread that waits for a reply does the port thread's work itself, so the reply needs no
// wake-up of the port thread (docs/fabric.md, "Data path"). It takes over the port thread's
// announcement that it sleeps, so the bridge does not wake it for frames this thread takes,
// and gives it back (waking the port thread if frames are left) when it stops.
int RkFabricPort::drive(int (*done)(void *), void *arg, uint64_t max_ns)
{
    if (done(arg)) return 1;
    // Inside a service callback (this thread may hold rx_mu already), or no link: nothing to do.
    if (tl_in_callback || !up.load(std::memory_order_acquire)) return 0;
    const uint64_t t0 = now_ns();
    bool joined = false, took_over = false;
    int r = 0;
    for (;;) {
        int n = 0;
        if (rx_mu.try_lock()) {
            if (up.load(std::memory_order_relaxed)) {
                Ring &rx = shm->to_node;
                if (!joined) {
                    drivers++; // from now on the port thread does not announce itself
                    joined = true;
                }
                if (!took_over) {
                    took_over = rx.ctl.sleeping.exchange(0, std::memory_order_seq_cst) != 0;
                }
                pair_leases_renew_locked(now_ns()); // this thread polls the pair rings too
                n = drain_locked(64);
                if (n > 0) driven_frames += unsigned(n);
                if (n < 0) {
                    rx_corrupt = true;
                    took_over = false;
                    futex_wake_always(&rx.ctl.sleeping);
                }
            }
            rx_mu.unlock();
        }
        follow_ups_try();
        if (done(arg)) {
            r = 1;
            break;
        }
        if (n < 0 || !up.load(std::memory_order_relaxed) || now_ns() - t0 >= max_ns) break;
        if (n == 0) cpu_relax();
    }
    if (joined) {
        std::lock_guard rk(rx_mu);
        drivers--;
        if (took_over && up) {
            Ring &rx = shm->to_node;
            rx.ctl.sleeping.store(1, std::memory_order_seq_cst);
            // A frame that arrived after the last drain saw no sleeper: hand it to the port thread.
            if (!ring_empty(rx) || pairs_ready_locked()) futex_wake(&rx.ctl.sleeping);
        }
        if (drivers == 0 && parked) {
            // The port thread parked behind the drivers: it announces itself and looks again.
            handback.fetch_add(1, std::memory_order_relaxed);
            futex_op(&handback, FUTEX_WAKE_PRIVATE, 1, nullptr);
        }
    }
    return r;
}

// A thread that polls a device register (a vCPU): dispatch what the bridge has delivered to
// this node, without waiting and without taking over the port thread's announcement. Nothing
// if another thread dispatches now (it delivers the same frames).
int RkFabricPort::poll_rx(unsigned max)
{
    // RACKEMU_FABRIC_POLL=0 turns it off (for A/B measurements in one build; docs/fabric.md).
    static const bool enabled = [] {
        const char *e = getenv("RACKEMU_FABRIC_POLL");
        return !(e && std::strcmp(e, "0") == 0);
    }();
    if (!enabled || tl_in_callback || !up.load(std::memory_order_acquire) || !rx_mu.try_lock()) return 0;
    int n = 0;
    if (up.load(std::memory_order_relaxed)) {
        // "Poller present": this thread will poll again within the lease, so the bridge need
        // not wake the port thread for what it delivers meanwhile (it wakes it if a frame is still
        // here when the lease lapses: shm_ring.h, lease_follow_up).
        const uint64_t now = now_ns(); // one clock read for every ring this poll renews
        if (lease_renew(shm->to_node.ctl, lease_ns(), now)) lease_renewals++;
        pair_leases_renew_locked(now);
        if (!ring_empty(shm->to_node) || pairs_ready_locked()) {
            n = drain_locked(max);
            if (n > 0) polled_frames += unsigned(n);
        }
    }
    rx_mu.unlock();
    follow_ups_try(); // frames this node sent to a peer whose poller stopped
    if (n < 0) {
        rx_corrupt = true; // the port thread takes the link down
        wake_port_thread();
        return 0;
    }
    return n;
}

extern "C" {

RkFabricPort *rk_fabric_port_new(const char *socket_path, unsigned node_id, unsigned node_count,
                                 uint32_t caps, unsigned connect_timeout_ms, char *err, size_t errlen)
{
    if (!socket_path || !*socket_path) {
        fmt(err, errlen, "no fabric socket path given");
        return nullptr;
    }
    if (node_id >= RKF_MAX_NODES || node_count == 0 || node_count > RKF_MAX_NODES || node_id >= node_count) {
        fmt(err, errlen, "node id %u / node count %u out of range (node id < node count <= %u)", node_id,
            node_count, RKF_MAX_NODES);
        return nullptr;
    }
    void *live = mmap(nullptr, RKF_LIVE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (live == MAP_FAILED) {
        fmt(err, errlen, "mmap of the liveness table's page failed: %s", strerror(errno));
        return nullptr;
    }
    auto *p = new RkFabricPort;
    p->live = static_cast<rkf_live_table *>(live);
    p->watch_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->watch_stop < 0) {
        fmt(err, errlen, "eventfd: %s", strerror(errno));
        delete p;
        return nullptr;
    }
    p->path = socket_path;
    p->node_id = node_id;
    p->node_count = node_count;
    p->caps = caps;
    {
        const char *e = getenv("RACKEMU_FABRIC_PAIRS");
        p->pairs_on = !(e && std::strcmp(e, "0") == 0) && futex_waitv_supported();
    }
    const uint64_t deadline = now_ns() + uint64_t(connect_timeout_ms) * 1000000ull;
    for (;;) {
        int rc = p->connect_once(err, errlen);
        if (rc == 0) break;
        if (rc == -2) {
            close(p->watch_stop);
            delete p;
            return nullptr;
        }
        if (now_ns() >= deadline) break; // stays down; the thread keeps trying
        usleep(100000);
    }
    return p;
}

void rk_fabric_port_start(RkFabricPort *p)
{
    if (!p->thr.joinable()) {
        p->thr = std::thread([p] { p->run(); });
    }
}

void rk_fabric_port_set_hooks(RkFabricPort *p, const struct rk_fabric_port_hooks *hooks)
{
    p->hooks = hooks ? *hooks : rk_fabric_port_hooks{};
    if (p->up.load()) {
        p->log(RK_FABRIC_LOG_INFO,
               "rackemu-fabric: node %u: connected to %s (spin %llu us, drive %llu us, poll lease %llu us)",
               p->node_id, p->path.c_str(), (unsigned long long)(spin_ns() / 1000),
               (unsigned long long)(drive_ns() / 1000), (unsigned long long)(lease_ns() / 1000));
        if (p->hooks.link) p->hooks.link(p->hooks.opaque, 1);
    }
}

void rk_fabric_port_free(RkFabricPort *p)
{
    if (!p) return;
    p->stop = true;
    p->wake_port_thread(); // unconditionally: a driving thread may hold the announcement
    if (p->thr.joinable()) p->thr.join();
    p->stop_watcher();
    if (p->up) {
        p->pairs_clear_locked(); // no thread left that uses them
        munmap(p->shm, sizeof(PortShm));
        munmap(p->bell, sizeof(Doorbell));
        close(p->sock);
    }
    close(p->watch_stop);
    delete p;
}

void rk_fabric_port_register(RkFabricPort *p, unsigned svc, rk_fabric_request_fn on_request,
                             rk_fabric_reply_fn on_reply, rk_fabric_link_fn on_link, void *opaque)
{
    if (svc >= RKF_SVC_COUNT) return;
    std::unique_lock lk(p->svc_mu);
    p->svcs[svc] = Svc{on_request, on_reply, on_link, opaque};
    // A callback that took the old entry may still run: wait until it has returned, so the
    // caller may free the old opaque (rk_fabric_unbind). Callbacks of this very thread are
    // not waited for (a handler may re-register its own service).
    p->svc_idle.wait(lk, [p] { return p->svc_busy <= tl_in_callback; });
}

int rk_fabric_port_send(RkFabricPort *p, struct rkf_frame_hdr *h, const void *payload)
{
    h->magic = RKF_FRAME_MAGIC;
    h->src = p->node_id;
    h->ts_ns = now_ns();
    if (frame_defect(*h) || (h->len && !payload)) {
        p->send_failures++;
        return -EINVAL;
    }
    return p->push(*h, payload);
}

int rk_fabric_port_reply(RkFabricPort *p, const struct rkf_frame_hdr *req, uint16_t status,
                         const void *payload, uint16_t len)
{
    rkf_frame_hdr h{};
    h.type = RKF_T_REPLY;
    h.svc = req->svc;
    h.op = req->op;
    h.dst = req->src;
    h.len = len;
    h.status = status;
    h.tag = req->tag;
    return rk_fabric_port_send(p, &h, payload);
}

int rk_fabric_port_send_raw(RkFabricPort *p, const struct rkf_frame_hdr *h, const void *payload)
{
    rkf_frame_hdr copy = *h;
    unsigned char buf[RKF_MAX_PAYLOAD] = {};
    if (payload) std::memcpy(buf, payload, std::min<size_t>(h->len, RKF_MAX_PAYLOAD));
    copy.len = h->len; // may be out of range on purpose; ring_push copies at most the slot
    rkf_frame_hdr clipped = copy;
    clipped.len = std::min<uint16_t>(copy.len, RKF_MAX_PAYLOAD);
    std::lock_guard lk(p->tx_mu);
    if (!p->up) return -ENOTCONN;
    // Copy the clipped payload but publish the original (possibly bogus) length.
    if (!ring_push(p->shm->to_bridge, clipped, buf)) return -EAGAIN;
    Ring &r = p->shm->to_bridge;
    const uint32_t last = r.ctl.head.load(std::memory_order_relaxed) - 1;
    std::memcpy(r.slots[last % RKF_RING_SLOTS], &copy, sizeof copy);
    wake_router(*p->shm, *p->bell);
    return 0;
}

const struct rkf_live_table *rk_fabric_port_liveness(RkFabricPort *p)
{
    return p->live;
}

int rk_fabric_port_drive(RkFabricPort *p, int (*done)(void *), void *arg, uint64_t max_ns)
{
    return p->drive(done, arg, max_ns ? max_ns : drive_ns());
}

int rk_fabric_port_poll(RkFabricPort *p)
{
    return p ? p->poll_rx(64) : 0;
}

uint64_t rk_fabric_spin_ns(void)
{
    return spin_ns();
}

uint64_t rk_fabric_drive_ns(void)
{
    return drive_ns();
}

int rk_fabric_port_is_up(RkFabricPort *p)
{
    return p->up.load() ? 1 : 0;
}
unsigned rk_fabric_port_node_id(RkFabricPort *p)
{
    return p->node_id;
}
uint32_t rk_fabric_port_caps(RkFabricPort *p)
{
    return p->caps;
}

void rk_fabric_port_get_stats(RkFabricPort *p, struct rk_fabric_port_stats *o)
{
    o->frames_tx = p->frames_tx;
    o->frames_rx = p->frames_rx;
    o->bytes_tx = p->bytes_tx;
    o->bytes_rx = p->bytes_rx;
    o->bad_frames = p->bad_frames;
    o->send_failures = p->send_failures;
    o->link_downs = p->link_downs;
    o->connects = p->connects;
    o->wakeups_sent = p->wakeups_sent;
    o->sleeps = p->sleeps;
    o->driven_frames = p->driven_frames;
    o->full_waits = p->full_waits;
    o->polled_frames = p->polled_frames;
    o->lease_renewals = p->lease_renewals;
    o->pair_frames_tx = p->pair_frames_tx;
    o->pair_frames_rx = p->pair_frames_rx;
    o->pair_markers = p->pair_markers;
    o->pair_bad = p->pair_bad;
    o->pairs_up = p->pairs_up;
    o->pairs_down = p->pairs_down;
    o->pair_gone_replies = p->pair_gone_replies;
    o->pair_untracked = p->pair_untracked;
    o->stray_replies = p->stray_replies;
    o->pair_wakes_skipped = p->pair_wakes_skipped;
    o->pair_follow_up_wakes = p->pair_follow_up_wakes;
    o->pair_backstop_wakes = p->pair_backstop_wakes;
}

int rk_fabric_port_pair_active(RkFabricPort *p, unsigned peer)
{
    if (peer >= RKF_MAX_NODES) return 0;
    std::lock_guard lk(p->tx_mu);
    const PairLink *pl = p->pairs[peer];
    return pl && pl->shm->mode.load(std::memory_order_acquire) == RKF_PAIR_MODE_DIRECT && !pl->broken ? 1 : 0;
}

int rk_fabric_port_describe_pair(RkFabricPort *p, unsigned peer, char *buf, size_t len)
{
    if (!buf || !len) return 0;
    if (peer >= RKF_MAX_NODES) return snprintf(buf, len, "peer %u out of range", peer);
    auto ring = [](const Ring &r) {
        char b[96];
        snprintf(b, sizeof b, "head %u tail %u sleeping %u space_wait %u", r.ctl.head.load(),
                 r.ctl.tail.load(), r.ctl.sleeping.load(), r.ctl.space_wait.load());
        return std::string(b);
    };
    const bool rx_locked = p->rx_mu.try_lock();
    std::lock_guard lk(p->tx_mu);
    std::string o = "node " + std::to_string(p->node_id) + " -> peer " + std::to_string(peer) + ": ";
    if (!p->up) {
        o += "link down";
    } else {
        o += "to_bridge [" + ring(p->shm->to_bridge) + "] to_node [" + ring(p->shm->to_node) +
             "] router_asleep " + std::to_string(p->shm->router_asleep.load());
        const PairLink *pl = p->pairs[peer];
        if (!pl) {
            o += "; no pair";
        } else {
            o += "; pair gen " + std::to_string(pl->gen) + " mode " + std::to_string(pl->shm->mode.load()) +
                 " busy " + std::to_string(pl->shm->busy[0].load()) + "/" +
                 std::to_string(pl->shm->busy[1].load()) + " tx ring [" + ring(*pl->tx) + "] rx ring [" +
                 ring(*pl->rx) + "] tx_pair " + std::to_string(pl->tx_pair) + (pl->broken ? " broken" : "");
        }
        if (rx_locked) {
            o += " rx_pair " + (pl ? std::to_string(pl->rx_pair) : std::string("-")) + " drivers " +
                 std::to_string(p->drivers) + " parked " + std::to_string(p->parked);
        } else {
            o += " rx_pair busy (the receive lock is held)";
        }
    }
    if (rx_locked) p->rx_mu.unlock();
    return snprintf(buf, len, "%s", o.c_str());
}

int rk_fabric_port_eth_attach(RkFabricPort *p, enum rk_fabric_eth_rx_class cls, rk_fabric_eth_rx_fn fn,
                              void *opaque)
{
    if (unsigned(cls) >= RK_FABRIC_ETH_CLASSES) return -EINVAL;
    std::unique_lock lk(p->svc_mu);
    p->eth_rx[cls] = EthRx{fn, fn ? opaque : nullptr};
    p->svc_idle.wait(lk, [p] { return p->svc_busy <= tl_in_callback; });
    return 0;
}

int rk_fabric_port_eth_attached(RkFabricPort *p, enum rk_fabric_eth_rx_class cls)
{
    if (unsigned(cls) >= RK_FABRIC_ETH_CLASSES) return 0;
    std::lock_guard lk(p->svc_mu);
    return p->eth_rx[cls].fn != nullptr;
}

int rk_fabric_eth_is_rocev2(const void *frame, size_t len)
{
    return eth_is_rocev2(static_cast<const unsigned char *>(frame), len);
}

int rk_fabric_port_eth_sendv(RkFabricPort *p, const struct iovec *iov, int iovcnt)
{
    unsigned char buf[RKF_ETH_MAX_FRAME];
    size_t len = 0;
    if (iovcnt < 0 || (iovcnt > 0 && !iov)) {
        p->eth_tx_bad++;
        return -EINVAL;
    }
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len && !iov[i].iov_base) {
            p->eth_tx_bad++;
            return -EINVAL;
        }
        if (iov[i].iov_len > RKF_ETH_MAX_FRAME - len) {
            p->eth_tx_bad++;
            return -EMSGSIZE;
        }
        if (iov[i].iov_len) std::memcpy(buf + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    if (len < RKF_ETH_MIN_FRAME) {
        p->eth_tx_bad++;
        return -EMSGSIZE;
    }
    rkf_frame_hdr tmpl{};
    tmpl.magic = RKF_FRAME_MAGIC;
    tmpl.src = uint16_t(p->node_id);
    tmpl.dst = uint16_t(p->node_id); // ignored: the bridge switches by destination MAC
    tmpl.ts_ns = now_ns();
    std::lock_guard lk(p->tx_mu);
    if (!p->up) {
        p->eth_tx_down++;
        return -ENOTCONN;
    }
    const uint32_t seq = p->eth_tx_seq;
    if (p->hooks.frame) {
        // One report per frame: its first fragment's header.
        rkf_frame_hdr first = tmpl;
        first.type = RKF_T_MSG;
        first.svc = RKF_SVC_ETH;
        first.op = RKF_OP_ETH_FRAG;
        first.len = uint16_t(sizeof(rkf_eth_frag) + std::min<size_t>(len, RKF_ETH_FRAG_DATA));
        first.tag = seq;
        p->hooks.frame(p->hooks.opaque, RK_FABRIC_OUT, &first);
    }
    if (!ring_push_eth(p->shm->to_bridge, tmpl, buf, uint16_t(len), seq)) {
        p->eth_tx_full++;
        wake_router(*p->shm, *p->bell); // the router may be asleep with a full ring
        return -EAGAIN;
    }
    p->eth_tx_seq++;
    const unsigned n = RKF_ETH_FRAGS(len);
    p->frames_tx += n;
    p->bytes_tx += n * sizeof(rkf_frame_hdr) + n * sizeof(rkf_eth_frag) + len;
    p->eth_tx_frames++;
    p->eth_tx_bytes += len;
    if (wake_router(*p->shm, *p->bell)) p->wakeups_sent++;
    return 0;
}

int rk_fabric_port_eth_send(RkFabricPort *p, const void *frame, size_t len)
{
    const iovec v{const_cast<void *>(frame), len};
    return rk_fabric_port_eth_sendv(p, &v, 1);
}

unsigned rk_fabric_port_eth_tx_room(RkFabricPort *p)
{
    std::lock_guard lk(p->tx_mu);
    if (!p->up) return 0;
    return ring_room(p->shm->to_bridge) / RKF_ETH_MAX_FRAGS;
}

int rk_fabric_port_eth_wait_room(RkFabricPort *p, unsigned frames, uint64_t max_ns)
{
    const uint64_t deadline = now_ns() + max_ns;
    const uint32_t need = std::max(frames, 1u) * RKF_ETH_MAX_FRAGS;
    std::unique_lock lk(p->tx_mu);
    for (;;) {
        if (!p->up) return -ENOTCONN;
        Ring &r = p->shm->to_bridge;
        if (ring_room(r) >= need) return 1;
        // As push(): announce the wait, re-check, make sure the router is awake, block until
        // it frees a slot (it clears space_wait and wakes us) or the deadline passes.
        r.ctl.space_wait.store(1, std::memory_order_seq_cst);
        if (ring_room(r) >= need) return 1;
        wake_router(*p->shm, *p->bell);
        const uint64_t now = now_ns();
        if (now >= deadline) return 0;
        p->full_waits++;
        const uint64_t left = deadline - now;
        timespec ts{time_t(left / 1000000000ull), long(left % 1000000000ull)};
        std::atomic<uint32_t> *w = &r.ctl.space_wait;
        lk.unlock();
        futex_op(w, FUTEX_WAIT, 1, &ts); // link_down wakes this word before it unmaps it
        lk.lock();
    }
}

void rk_fabric_port_eth_get_stats(RkFabricPort *p, struct rk_fabric_eth_stats *o)
{
    o->tx_frames = p->eth_tx_frames;
    o->tx_bytes = p->eth_tx_bytes;
    o->tx_full = p->eth_tx_full;
    o->tx_down = p->eth_tx_down;
    o->tx_bad = p->eth_tx_bad;
    o->rx_frames = p->eth_rx_frames;
    o->rx_bytes = p->eth_rx_bytes;
    o->rx_roce = p->eth_rx_roce;
    o->rx_no_receiver = p->eth_rx_no_receiver;
    o->rx_bad_fragments = p->eth_rx_bad;
}

} // extern "C"
