// SPDX-License-Identifier: MIT
// One-sided remote memory over the fabric; see rk_remote_mem.h and docs/fabric.md.
//
// A call is split into chunks of at most RKF_MEM_CHUNK bytes, each one RKF_SVC_MEM request.
// Chunks are registered in the pending table (tag -> call, offset, length) before they are
// sent, so a reply that overtakes the send is matched. Replies, link-down and timeouts complete
// chunks under the table's mutex; the waiting thread first drives the node's port (pops and
// dispatches the replies itself, rk_fabric_port_drive) for the fabric's spin time, then sleeps
// on the call's completion counter (a futex), and is woken only when it announced it sleeps.
//
// A reply completes a chunk only if it comes from the node the chunk was sent to (the bridge
// guarantees a frame's src; its own error replies carry the destination as src) and answers
// the same operation; anything else is counted in forged_replies and ignored. Tags start at a
// random value, so they do not tell one requester's traffic from another's.
//
// Direct path: each incarnation of a peer (named by the bridge's liveness word for it) gets its
// own mapping of the peer's RAM file (RAM plus its tail page), at a fresh address. A mapping is
// never unmapped while the node runs: when its incarnation is gone or replaced, an anonymous
// placeholder is mapped over it in place (atomic for concurrent accesses), so a copy still in
// flight reads zeros or writes into nothing and fails its liveness recheck, and a write of an old
// incarnation can never land in a new incarnation's RAM. Placeholders cost address space only.
//
// A peer's file that someone truncates under the mapping makes a copy fault with SIGBUS. The
// fabric path confines that to the owner (only it touches its RAM); the direct path keeps it so:
// a copy runs under a SIGBUS guard (a process-wide handler, chained to the one it replaced, that
// jumps out of a guarded copy whose fault lies in the peer's range), the access fails
// UNREACHABLE and the peer's incarnation is not touched again.
#include "rk_remote_mem.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <csetjmp>
#include <csignal>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm_ring.h"

using namespace rackemu::fabric;

namespace {

struct Call {
    bool write = false;
    unsigned node = 0;
    uint64_t addr = 0;
    unsigned char *rbuf = nullptr;
    const unsigned char *wbuf = nullptr;
    uint64_t len = 0;
    std::atomic<uint32_t> completed{0}; // chunks answered (futex word)
    std::atomic<uint32_t> sleeping{0};
    int status = RK_RMEM_OK; // worst chunk status; guarded by RkRemoteMem::mu
};

// rk_fabric_endpoint_drive's stop condition: a chunk completed.
struct Progress {
    const std::atomic<uint32_t> *completed;
    uint32_t seen;
    static int made(void *arg)
    {
        auto *p = static_cast<Progress *>(arg);
        return p->completed->load(std::memory_order_acquire) != p->seen;
    }
};

struct Pending {
    Call *call;
    uint64_t off;
    uint32_t len;
};

// Copy to or from guest RAM; aligned 1/2/4/8-byte accesses are single host loads/stores.
template <typename T> bool aligned_to(const void *p)
{
    return (reinterpret_cast<uintptr_t>(p) % sizeof(T)) == 0;
}

void ram_load(void *dst, const unsigned char *ram, size_t len)
{
    switch (len) {
    case 1: {
        uint8_t v = __atomic_load_n(ram, __ATOMIC_RELAXED);
        std::memcpy(dst, &v, 1);
        return;
    }
    case 2:
        if (aligned_to<uint16_t>(ram)) {
            uint16_t v = __atomic_load_n(reinterpret_cast<const uint16_t *>(ram), __ATOMIC_RELAXED);
            std::memcpy(dst, &v, 2);
            return;
        }
        break;
    case 4:
        if (aligned_to<uint32_t>(ram)) {
            uint32_t v = __atomic_load_n(reinterpret_cast<const uint32_t *>(ram), __ATOMIC_RELAXED);
            std::memcpy(dst, &v, 4);
            return;
        }
        break;
    case 8:
        if (aligned_to<uint64_t>(ram)) {
            uint64_t v = __atomic_load_n(reinterpret_cast<const uint64_t *>(ram), __ATOMIC_RELAXED);
            std::memcpy(dst, &v, 8);
            return;
        }
        break;
    }
    std::memcpy(dst, ram, len);
}

void ram_store(unsigned char *ram, const void *src, size_t len)
{
    switch (len) {
    case 1: {
        uint8_t v;
        std::memcpy(&v, src, 1);
        __atomic_store_n(ram, v, __ATOMIC_RELAXED);
        return;
    }
    case 2:
        if (aligned_to<uint16_t>(ram)) {
            uint16_t v;
            std::memcpy(&v, src, 2);
            __atomic_store_n(reinterpret_cast<uint16_t *>(ram), v, __ATOMIC_RELAXED);
            return;
        }
        break;
    case 4:
        if (aligned_to<uint32_t>(ram)) {
            uint32_t v;
            std::memcpy(&v, src, 4);
            __atomic_store_n(reinterpret_cast<uint32_t *>(ram), v, __ATOMIC_RELAXED);
            return;
        }
        break;
    case 8:
        if (aligned_to<uint64_t>(ram)) {
            uint64_t v;
            std::memcpy(&v, src, 8);
            __atomic_store_n(reinterpret_cast<uint64_t *>(ram), v, __ATOMIC_RELAXED);
            return;
        }
        break;
    }
    std::memcpy(ram, src, len);
}

int status_of_reply(uint16_t st)
{
    switch (st) {
    case RKF_ST_OK:
        return RK_RMEM_OK;
    case RKF_ST_REFUSED:
        return RK_RMEM_DECODE_ERR;
    default:
        return RK_RMEM_UNREACHABLE; // NOROUTE, NODE_GONE, CONGESTED, BAD_FRAME, LINK_DOWN
    }
}

// Keep the worse of two statuses (a decode error is more telling than "unreachable").
int worse(int a, int b)
{
    return a == RK_RMEM_OK ? b : a;
}

constexpr int kNoDirect = -1; // direct_access: take the fabric

// The SIGBUS guard of a direct copy (thread-local: each thread guards its own copy).
struct BusGuard {
    sigjmp_buf jb;
    uintptr_t lo, hi; // the peer's mapped range
};
thread_local BusGuard *tl_bus = nullptr;
thread_local bool tl_bus_unblocked = false;
struct sigaction g_prev_bus;
std::once_flag g_bus_once;

void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    BusGuard *g = tl_bus;
    const auto a = reinterpret_cast<uintptr_t>(si->si_addr);
    if (g && a >= g->lo && a < g->hi) {
        tl_bus = nullptr;
        siglongjmp(g->jb, 1); // SA_NODEFER: SIGBUS is not left blocked
    }
    if (g_prev_bus.sa_flags & SA_SIGINFO) {
        g_prev_bus.sa_sigaction(sig, si, uc);
    } else if (g_prev_bus.sa_handler != SIG_DFL && g_prev_bus.sa_handler != SIG_IGN) {
        g_prev_bus.sa_handler(sig);
    } else {
        signal(SIGBUS, SIG_DFL); // the faulting access runs again and ends the process, as before
    }
}

// Install the handler once per process; let this thread take SIGBUS (QEMU's threads start with
// every signal blocked but the synchronous ones it names, and a blocked synchronous SIGBUS kills
// the process whatever the handler).
void bus_guard_thread();

// The magic and RAM size of the tail page of a peer's file mapped at `base` (0 if the file shrank
// under the mapping since it was checked: the caller tries again later).
uint32_t read_tail(unsigned char *base, size_t span, uint64_t *ram)
{
    auto *tail = reinterpret_cast<rk_rmem_tail *>(base + span - RK_RMEM_TAIL_SIZE);
    BusGuard g;
    g.lo = uintptr_t(base);
    g.hi = g.lo + span;
    bus_guard_thread();
    if (sigsetjmp(g.jb, 0) != 0) return 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tl_bus = &g;
    const uint32_t magic = __atomic_load_n(&tail->magic, __ATOMIC_ACQUIRE);
    *ram = tail->ram_size;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tl_bus = nullptr;
    return magic;
}

void bus_guard_thread()
{
    std::call_once(g_bus_once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &g_prev_bus);
    });
    if (!tl_bus_unblocked) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        tl_bus_unblocked = true;
    }
}

// One incarnation of a peer, mapped (direct path); kept until the RkRemoteMem goes.
struct Mapping {
    uint64_t word;       // the bridge's liveness word of that incarnation
    unsigned char *base; // its file: ram_size + RK_RMEM_TAIL_SIZE bytes (later a placeholder)
};

// A peer, for the direct path.
struct Peer {
    std::atomic<const Mapping *> cur{nullptr}; // the live incarnation's mapping; NULL: none
    std::vector<std::unique_ptr<Mapping>> all; // every mapping it had (guarded by map_mu)
    uint64_t refused_word = 0;                 // an incarnation whose file was refused (logged once)
    std::atomic<uint64_t> faulted_word{0};     // an incarnation whose file faulted (truncated): unreachable
    uint64_t retry_ns = 0;                     // no new attempt before (file not there or not published yet)
};

uint64_t atomic_add(uint64_t *p, uint64_t v)
{
    return __atomic_add_fetch(p, v, __ATOMIC_RELAXED);
}

uint64_t atomic_get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

} // namespace

struct RkRemoteMem {
    RkFabricEndpoint *ep = nullptr; // RKF_SVC_MEM on the node's port; NULL: no fabric
    unsigned node_id = 0;
    uint64_t ram_base = 0, ram_size = 0;
    unsigned char *ram = nullptr;
    unsigned timeout_ms = 1000;
    rk_rmem_log_fn log_fn = nullptr;
    void *log_opaque = nullptr;

    std::mutex mu; // pending table, call statuses
    std::unordered_map<uint64_t, Pending> pending;
    uint64_t next_tag = 1; // a random start (rk_rmem_new)

    std::atomic<uint64_t> reads{0}, writes{0}, read_bytes{0}, write_bytes{0}, local{0}, frames{0},
        decode_errors{0}, unreachable{0}, timeouts{0}, served_reads{0}, served_writes{0}, served_bytes{0},
        served_refused{0}, served_malformed{0}, stray_replies{0}, forged_replies{0};
    std::atomic<uint64_t> direct_reads{0}, direct_writes{0}, direct_fallbacks{0}, direct_maps{0},
        direct_faults{0};

    // Direct path (rk_rmem_enable_direct); off while `live` is NULL.
    const rkf_live_table *live = nullptr;
    std::string ram_dir;
    rk_rmem_tail *own_tail = nullptr; // this node's tail page (peers' direct accesses to it)
    std::mutex map_mu;                // mapping and unmapping peers
    Peer peers[RKF_MAX_NODES];

    ~RkRemoteMem();
    int direct_access(Call &c);
    // fn(base) under the SIGBUS guard, then the liveness recheck, then commit(base) if it held.
    template <typename Fn, typename Commit> int direct_run(unsigned node, Fn &&fn, Commit &&commit);
    template <typename Fn, typename Commit>
    int direct_guarded(unsigned node, unsigned char *base, const uint64_t *wp, uint64_t w, Fn &fn,
                       Commit &commit);
    int direct_fault(unsigned node, uint64_t w);
    const Mapping *map_peer(unsigned node, uint64_t w);
    void drop_peer(unsigned node);

    void log(const char *f, ...) __attribute__((format(printf, 2, 3)));
    bool in_ram(uint64_t addr, uint64_t len) const
    {
        return len <= ram_size && addr >= ram_base && addr - ram_base <= ram_size - len;
    }
    int local_access(Call &c);
    int remote_access(Call &c);
    void complete_locked(const Pending &p, int status);
    void serve(RkFabricEndpoint *ep, const rkf_frame_hdr &h, const unsigned char *payload);
    void on_reply(const rkf_frame_hdr &h, const unsigned char *payload);
    void on_link(bool up);
    int account(Call &c, int status);
};

void RkRemoteMem::log(const char *f, ...)
{
    if (!log_fn) return;
    char buf[256];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    log_fn(log_opaque, buf);
}

RkRemoteMem::~RkRemoteMem()
{
    const size_t span = ram_size + RK_RMEM_TAIL_SIZE;
    for (Peer &p : peers) {
        for (auto &mp : p.all)
            munmap(mp->base, span);
    }
    if (own_tail) munmap(own_tail, RK_RMEM_TAIL_SIZE);
}

// Map `node`'s RAM file for its incarnation `w` (map_mu not held). NULL: use the fabric.
const Mapping *RkRemoteMem::map_peer(unsigned node, uint64_t w)
{
    std::lock_guard lk(map_mu);
    Peer &p = peers[node];
    const Mapping *cur = p.cur.load(std::memory_order_acquire);
    if (cur && cur->word == w) return cur; // another thread did it
    if (p.refused_word == w || now_ns() < p.retry_ns) return nullptr;
    const size_t span = ram_size + RK_RMEM_TAIL_SIZE;
    const std::string path = ram_dir + "/node" + std::to_string(node) + ".ram";
    char why[256] = "";
    bool retry = false;
    void *m = MAP_FAILED;
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot open %s: %s", path.c_str(), strerror(errno));
        retry = errno == ENOENT;
    } else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, sizeof why, "%s is not a regular file", path.c_str());
    } else if (uint64_t(st.st_size) == ram_size) {
        retry = true; // the owner has not published its tail page yet
    } else if (uint64_t(st.st_size) != span) {
        snprintf(why, sizeof why, "%s has %lld bytes; this node's RAM is %llu (plus a %u-byte tail)",
                 path.c_str(), (long long)st.st_size, (unsigned long long)ram_size, RK_RMEM_TAIL_SIZE);
    } else if ((m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        snprintf(why, sizeof why, "mmap of %s: %s", path.c_str(), strerror(errno));
    } else {
        // Nobody else knows this mapping yet: on refusal it can simply go.
        auto *base = static_cast<unsigned char *>(m);
        uint64_t tail_ram = 0;
        if (read_tail(base, span, &tail_ram) != RK_RMEM_TAIL_MAGIC) {
            retry = true; // grown, not initialised yet
        } else if (tail_ram != ram_size) {
            snprintf(why, sizeof why, "%s says its RAM is %llu bytes, not %llu", path.c_str(),
                     (unsigned long long)tail_ram, (unsigned long long)ram_size);
        } else if (__atomic_load_n(&live->node[node], __ATOMIC_ACQUIRE) != w) {
            retry = true; // the node changed meanwhile: the file may be another incarnation's
        } else {
            close(fd);
            p.all.push_back(std::make_unique<Mapping>(Mapping{w, base}));
            const Mapping *nm = p.all.back().get();
            drop_peer(node); // the previous incarnation's mapping, if any
            p.cur.store(nm, std::memory_order_release);
            direct_maps++;
            p.retry_ns = 0;
            return nm;
        }
        munmap(m, span);
    }
    if (fd >= 0) close(fd);
    if (retry) {
        p.retry_ns = now_ns() + 20000000ull; // 20 ms: the fabric carries the calls meanwhile
    } else {
        p.refused_word = w;
        log("rackemu-rmem: node %u's RAM is not mapped directly (%s); its accesses use the fabric", node,
            why);
    }
    return nullptr;
}

// Retire `node`'s current mapping (map_mu held): an anonymous placeholder of the same size takes
// its place, which drops the reference to the peer's RAM while a copy still in flight reads zeros
// (or writes into nothing) instead of faulting.
void RkRemoteMem::drop_peer(unsigned node)
{
    Peer &p = peers[node];
    const Mapping *old = p.cur.exchange(nullptr, std::memory_order_acq_rel);
    if (old) {
        mmap(old->base, ram_size + RK_RMEM_TAIL_SIZE, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    }
}

// The direct path's frame: check the bridge's word for `node`, find (or make) the mapping of
// that incarnation, run fn(base) under the SIGBUS guard, recheck the word, then commit(base)
// (still guarded: it may touch the peer's tail page). kNoDirect: not available; take the fabric.
template <typename Fn, typename Commit> int RkRemoteMem::direct_run(unsigned node, Fn &&fn, Commit &&commit)
{
    if (__atomic_load_n(&live->magic, __ATOMIC_ACQUIRE) != RKF_LIVE_MAGIC) return kNoDirect; // link down
    const uint64_t *wp = &live->node[node];
    const uint64_t w = __atomic_load_n(wp, __ATOMIC_ACQUIRE);
    Peer &p = peers[node];
    const Mapping *mp = p.cur.load(std::memory_order_acquire);
    if (!(w & RKF_LIVE_UP)) {
        if (mp) {
            std::unique_lock lk(map_mu, std::try_to_lock); // release the dead node's RAM, lazily
            if (lk.owns_lock()) drop_peer(node);
        }
        return RK_RMEM_UNREACHABLE; // what the bridge answers for an absent node (NOROUTE/NODE_GONE)
    }
    if (p.faulted_word.load(std::memory_order_relaxed) == w) return RK_RMEM_UNREACHABLE;
    if ((!mp || mp->word != w) && !(mp = map_peer(node, w))) {
        direct_fallbacks++;
        return kNoDirect;
    }
    return direct_guarded(node, mp->base, wp, w, fn, commit);
}

// fn and commit under the SIGBUS guard for the mapping at `base`: nothing in them may own a
// resource (a fault jumps out).
template <typename Fn, typename Commit>
int RkRemoteMem::direct_guarded(unsigned node, unsigned char *base, const uint64_t *wp, uint64_t w, Fn &fn,
                                Commit &commit)
{
    bus_guard_thread();
    BusGuard g;
    g.lo = uintptr_t(base);
    g.hi = g.lo + ram_size + RK_RMEM_TAIL_SIZE;
    if (sigsetjmp(g.jb, 0) != 0) return direct_fault(node, w);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tl_bus = &g;
    int st = fn(base);
    // What fn copied is ordered before the recheck (relaxed atomics and memcpy).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (st == RK_RMEM_OK && __atomic_load_n(wp, __ATOMIC_ACQUIRE) != w)
        st = RK_RMEM_UNREACHABLE; // gone meanwhile
    if (st == RK_RMEM_OK) commit(base);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    tl_bus = nullptr;
    return st;
}

// A call of rk_rmem_read/rk_rmem_write on the direct path: a copy from or to the peer's RAM.
int RkRemoteMem::direct_access(Call &c)
{
    return direct_run(
        c.node,
        [&](unsigned char *base) {
            if (!in_ram(c.addr, c.len)) {
                atomic_add(&reinterpret_cast<rk_rmem_tail *>(base + ram_size)->served_refused, 1);
                return int(RK_RMEM_DECODE_ERR);
            }
            unsigned char *ramp = base + (c.addr - ram_base);
            if (c.write) {
                ram_store(ramp, c.wbuf, c.len);
            } else {
                ram_load(c.rbuf, ramp, c.len);
            }
            return int(RK_RMEM_OK);
        },
        [&](unsigned char *base) {
            auto *tail = reinterpret_cast<rk_rmem_tail *>(base + ram_size);
            atomic_add(c.write ? &tail->served_writes : &tail->served_reads, 1);
            atomic_add(&tail->served_bytes, c.len);
            (c.write ? direct_writes : direct_reads)++;
        });
}

// A direct copy faulted: the peer's file is shorter than its mapping (truncated under it). This
// incarnation of the peer is unreachable from now on (its owner dies of the same fault when it
// touches the lost pages); its mapping is dropped.
int RkRemoteMem::direct_fault(unsigned node, uint64_t w)
{
    direct_faults++;
    Peer &p = peers[node];
    if (p.faulted_word.exchange(w) != w) {
        log("rackemu-rmem: node %u's RAM file %s/node%u.ram faulted under a direct access (truncated?); "
            "node %u is unreachable until it reconnects",
            node, ram_dir.c_str(), node, node);
    }
    std::unique_lock lk(map_mu, std::try_to_lock);
    const Mapping *cur = p.cur.load(std::memory_order_relaxed);
    if (lk.owns_lock() && cur && cur->word == w) drop_peer(node);
    return RK_RMEM_UNREACHABLE;
}

int RkRemoteMem::local_access(Call &c)
{
    local++;
    if (!in_ram(c.addr, c.len)) return RK_RMEM_DECODE_ERR;
    unsigned char *p = ram + (c.addr - ram_base);
    if (c.write) {
        ram_store(p, c.wbuf, c.len);
    } else {
        ram_load(c.rbuf, p, c.len);
    }
    return RK_RMEM_OK;
}

void RkRemoteMem::complete_locked(const Pending &p, int status)
{
    Call *c = p.call;
    c->status = worse(c->status, status);
    c->completed.fetch_add(1, std::memory_order_release);
    if (c->sleeping.load(std::memory_order_seq_cst)) {
        futex_op(&c->completed, FUTEX_WAKE_PRIVATE, 1, nullptr);
    }
}

void RkRemoteMem::on_reply(const rkf_frame_hdr &h, const unsigned char *payload)
{
    std::lock_guard lk(mu);
    auto it = pending.find(h.tag);
    if (it == pending.end()) {
        stray_replies++;
        return;
    }
    const uint16_t op = it->second.call->write ? RKF_OP_MEM_WRITE : RKF_OP_MEM_READ;
    if (h.src != it->second.call->node || h.op != op) {
        // Not from the node this chunk went to, or not an answer to its operation: the chunk
        // stays pending for the genuine answer (or its timeout).
        forged_replies++;
        log("rackemu-rmem: ignored a reply from node %u (op %u) to a %s sent to node %u", unsigned(h.src),
            unsigned(h.op), op == RKF_OP_MEM_WRITE ? "write" : "read", it->second.call->node);
        return;
    }
    Pending p = it->second;
    pending.erase(it);
    int st = status_of_reply(h.status);
    if (st == RK_RMEM_OK && !p.call->write) {
        if (h.len != p.len) {
            log("rackemu-rmem: node %u answered a %u-byte read with %u bytes; treated as unreachable",
                unsigned(h.src), p.len, unsigned(h.len));
            st = RK_RMEM_UNREACHABLE;
        } else {
            std::memcpy(p.call->rbuf + p.off, payload, p.len);
        }
    }
    complete_locked(p, st);
}

void RkRemoteMem::on_link(bool up)
{
    if (up) return;
    std::lock_guard lk(mu);
    for (auto &[tag, p] : pending) {
        complete_locked(p, RK_RMEM_UNREACHABLE);
    }
    pending.clear();
}

int RkRemoteMem::remote_access(Call &c)
{
    if (!ep) return RK_RMEM_UNREACHABLE;
    const uint32_t nchunks = uint32_t((c.len + RKF_MEM_CHUNK - 1) / RKF_MEM_CHUNK);
    const uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1000000ull;
    uint32_t sent = 0, stop_at = nchunks;
    bool timed_out = false;
    for (;;) {
        // Issue chunks while the window has room and nothing has failed.
        uint32_t done = c.completed.load(std::memory_order_acquire);
        while (sent < stop_at && sent - done < RK_RMEM_WINDOW) {
            const uint64_t off = uint64_t(sent) * RKF_MEM_CHUNK;
            const uint32_t len = uint32_t(std::min<uint64_t>(RKF_MEM_CHUNK, c.len - off));
            unsigned char buf[sizeof(rkf_mem_req) + RKF_MEM_CHUNK];
            rkf_mem_req req{c.addr + off, len, 0};
            std::memcpy(buf, &req, sizeof req);
            rkf_frame_hdr h{};
            h.type = RKF_T_REQ;
            h.svc = RKF_SVC_MEM;
            h.op = c.write ? RKF_OP_MEM_WRITE : RKF_OP_MEM_READ;
            h.dst = uint16_t(c.node);
            h.len = uint16_t(sizeof req + (c.write ? len : 0));
            if (c.write) std::memcpy(buf + sizeof req, c.wbuf + off, len);
            {
                std::lock_guard lk(mu);
                if (c.status != RK_RMEM_OK) {
                    stop_at = sent; // something failed: issue no more
                    break;
                }
                h.tag = next_tag++;
                pending[h.tag] = Pending{&c, off, len};
            }
            frames++;
            if (rk_fabric_endpoint_send(ep, &h, buf) != 0) {
                std::lock_guard lk(mu);
                auto it = pending.find(h.tag);
                if (it != pending.end()) { // not completed by a link-down meanwhile
                    Pending p = it->second;
                    pending.erase(it);
                    complete_locked(p, RK_RMEM_UNREACHABLE);
                }
            }
            sent++;
            done = c.completed.load(std::memory_order_acquire);
        }
        {
            std::lock_guard lk(mu);
            if (c.status != RK_RMEM_OK && stop_at > sent) stop_at = sent;
        }
        if (done >= stop_at) break;
        // Wait for progress: first drive the port (this thread pops and dispatches the frames
        // the bridge delivers, so the reply needs no wake-up of the port thread), then sleep on
        // the counter; the port thread delivers meanwhile.
        Progress pr{&c.completed, done};
        if (rk_fabric_endpoint_drive(ep, Progress::made, &pr, 0)) continue;
        while (c.completed.load(std::memory_order_acquire) == done) {
            const uint64_t now = now_ns();
            if (now >= deadline) {
                timed_out = true;
                break;
            }
            c.sleeping.store(1, std::memory_order_seq_cst);
            if (c.completed.load(std::memory_order_seq_cst) == done) {
                const uint64_t left = deadline - now;
                timespec ts{time_t(left / 1000000000ull), long(left % 1000000000ull)};
                futex_op(&c.completed, FUTEX_WAIT_PRIVATE, done, &ts);
            }
            c.sleeping.store(0, std::memory_order_relaxed);
        }
        if (timed_out) break;
    }
    std::lock_guard lk(mu); // also waits out a reply handler still touching `c`
    if (timed_out) {
        for (auto it = pending.begin(); it != pending.end();) {
            if (it->second.call == &c) {
                it = pending.erase(it);
            } else {
                ++it;
            }
        }
        timeouts++;
        log("rackemu-rmem: node %u did not answer within %u ms (%s of %llu bytes at 0x%llx)", c.node,
            timeout_ms, c.write ? "write" : "read", (unsigned long long)c.len, (unsigned long long)c.addr);
        return RK_RMEM_TIMEOUT;
    }
    return c.status;
}

int RkRemoteMem::account(Call &c, int status)
{
    (c.write ? writes : reads)++;
    (c.write ? write_bytes : read_bytes) += c.len;
    if (status == RK_RMEM_DECODE_ERR) decode_errors++;
    if (status == RK_RMEM_UNREACHABLE) unreachable++;
    return status;
}

// Port thread: another node reads or writes this node's RAM.
void RkRemoteMem::serve(RkFabricEndpoint *p, const rkf_frame_hdr &h, const unsigned char *payload)
{
    rkf_mem_req req{};
    if (h.type != RKF_T_REQ) return; // one-way messages are not part of this service
    if (h.len >= sizeof req) std::memcpy(&req, payload, sizeof req);
    const bool is_read = h.op == RKF_OP_MEM_READ, is_write = h.op == RKF_OP_MEM_WRITE;
    if (h.len < sizeof req || (!is_read && !is_write) || req.len == 0 || req.len > RKF_MEM_CHUNK ||
        req.flags != 0 || h.len != sizeof req + (is_write ? req.len : 0)) {
        served_malformed++;
        log("rackemu-rmem: malformed memory request from node %u (op %u, %u bytes) refused", unsigned(h.src),
            unsigned(h.op), unsigned(h.len));
        rk_fabric_endpoint_reply(p, &h, RKF_ST_BAD_FRAME, nullptr, 0);
        return;
    }
    if (!in_ram(req.addr, req.len)) {
        served_refused++;
        rk_fabric_endpoint_reply(p, &h, RKF_ST_REFUSED, nullptr, 0);
        return;
    }
    unsigned char *ramp = ram + (req.addr - ram_base);
    served_bytes += req.len;
    if (is_write) {
        served_writes++;
        ram_store(ramp, payload + sizeof req, req.len);
        rk_fabric_endpoint_reply(p, &h, RKF_ST_OK, nullptr, 0);
    } else {
        served_reads++;
        unsigned char data[RKF_MEM_CHUNK];
        ram_load(data, ramp, req.len);
        rk_fabric_endpoint_reply(p, &h, RKF_ST_OK, data, uint16_t(req.len));
    }
}

// rk_rmem_enable_direct's refusal: close `fd` (if open), the reason into `err`, -1.
__attribute__((format(printf, 4, 5))) static int enable_fail(int fd, char *err, size_t errlen, const char *f,
                                                             ...)
{
    if (fd >= 0) close(fd);
    if (err && errlen) {
        va_list ap;
        va_start(ap, f);
        vsnprintf(err, errlen, f, ap);
        va_end(ap);
    }
    return -1;
}

extern "C" {

static void rmem_on_request(void *opaque, RkFabricEndpoint *port, const struct rkf_frame_hdr *h,
                            const void *payload)
{
    static_cast<RkRemoteMem *>(opaque)->serve(port, *h, static_cast<const unsigned char *>(payload));
}

static void rmem_on_reply(void *opaque, const struct rkf_frame_hdr *h, const void *payload)
{
    static_cast<RkRemoteMem *>(opaque)->on_reply(*h, static_cast<const unsigned char *>(payload));
}

static void rmem_on_link(void *opaque, int up)
{
    static_cast<RkRemoteMem *>(opaque)->on_link(up != 0);
}

RkRemoteMem *rk_rmem_new(RkFabricPort *port, unsigned node_id, uint64_t ram_base, uint64_t ram_size,
                         void *ram_host, unsigned timeout_ms, rk_rmem_log_fn log, void *log_opaque)
{
    auto *m = new RkRemoteMem;
    m->node_id = node_id;
    m->ram_base = ram_base;
    m->ram_size = ram_host ? ram_size : 0;
    m->ram = static_cast<unsigned char *>(ram_host);
    m->timeout_ms = timeout_ms ? timeout_ms : 1;
    m->log_fn = log;
    m->log_opaque = log_opaque;
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed) {
        seed = std::random_device{}() ^ (now_ns() << 20);
    }
    m->next_tag = seed | 1; // never 0
    static const rk_fabric_service ops = {rmem_on_request, rmem_on_reply, rmem_on_link};
    m->ep = rk_fabric_bind(port, RKF_SVC_MEM, &ops, m);
    return m;
}

int rk_rmem_enable_direct(RkRemoteMem *m, const char *ram_dir, int own_fd, const struct rkf_live_table *live,
                          char *err, size_t errlen)
{
    if (!ram_dir || !*ram_dir) return enable_fail(-1, err, errlen, "no RAM directory given");
    if (!live) return enable_fail(-1, err, errlen, "no liveness table (no fabric)");
    if (m->live) return enable_fail(-1, err, errlen, "the direct path is on already");
    if (!m->ram) return enable_fail(-1, err, errlen, "this node has no RAM mapping");
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || RK_RMEM_TAIL_SIZE % uint64_t(page) != 0 || m->ram_size % uint64_t(page) != 0) {
        return enable_fail(-1, err, errlen, "RAM size %llu is not a multiple of the page size %ld",
                           (unsigned long long)m->ram_size, page);
    }
    const std::string path = std::string(ram_dir) + "/node" + std::to_string(m->node_id) + ".ram";
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return enable_fail(-1, err, errlen, "cannot open %s: %s", path.c_str(), strerror(errno));
    struct stat st {
    }, own{};
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return enable_fail(fd, err, errlen, "%s is not a regular file", path.c_str());
    if (own_fd >= 0 && (fstat(own_fd, &own) < 0 || own.st_dev != st.st_dev || own.st_ino != st.st_ino)) {
        return enable_fail(fd, err, errlen,
                           "%s is not this node's RAM (its memory backend uses another file)", path.c_str());
    }
    const uint64_t span = m->ram_size + RK_RMEM_TAIL_SIZE;
    if (uint64_t(st.st_size) != m->ram_size && uint64_t(st.st_size) != span) {
        return enable_fail(fd, err, errlen, "%s has %lld bytes, this node's RAM %llu", path.c_str(),
                           (long long)st.st_size, (unsigned long long)m->ram_size);
    }
    if (ftruncate(fd, off_t(span)) < 0) {
        return enable_fail(fd, err, errlen, "cannot grow %s by its tail: %s", path.c_str(), strerror(errno));
    }
    void *t = mmap(nullptr, RK_RMEM_TAIL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(m->ram_size));
    if (t == MAP_FAILED)
        return enable_fail(fd, err, errlen, "cannot map the tail of %s: %s", path.c_str(), strerror(errno));
    close(fd);
    auto *tail = static_cast<rk_rmem_tail *>(t);
    __atomic_store_n(&tail->magic, 0u, __ATOMIC_RELAXED); // a previous incarnation's page: start again
    tail->version = 1;
    tail->ram_size = m->ram_size;
    for (uint64_t *c :
         {&tail->served_reads, &tail->served_writes, &tail->served_bytes, &tail->served_refused}) {
        __atomic_store_n(c, uint64_t(0), __ATOMIC_RELAXED);
    }
    // the devices' area: nothing published yet (a previous incarnation's content must not count)
    std::memset(reinterpret_cast<unsigned char *>(tail) + RK_RMEM_TAIL_DEV_OFF, 0,
                RK_RMEM_TAIL_SIZE - RK_RMEM_TAIL_DEV_OFF);
    __atomic_store_n(&tail->magic, RK_RMEM_TAIL_MAGIC, __ATOMIC_RELEASE);
    m->own_tail = tail;
    m->ram_dir = ram_dir;
    m->live = live;
    return 0;
}

void rk_rmem_free(RkRemoteMem *m)
{
    if (!m) return;
    rk_fabric_unbind(m->ep);
    delete m;
}

int rk_rmem_read(RkRemoteMem *m, unsigned node, uint64_t addr, void *buf, uint64_t len)
{
    Call c;
    c.node = node;
    c.addr = addr;
    c.rbuf = static_cast<unsigned char *>(buf);
    c.len = len;
    if (len == 0) return RK_RMEM_OK;
    if (node >= RKF_MAX_NODES) return m->account(c, RK_RMEM_UNREACHABLE);
    if (node == m->node_id) return m->account(c, m->local_access(c));
    if (m->live) {
        const int st = m->direct_access(c);
        if (st != kNoDirect) return m->account(c, st);
    }
    return m->account(c, m->remote_access(c));
}

int rk_rmem_write(RkRemoteMem *m, unsigned node, uint64_t addr, const void *buf, uint64_t len)
{
    Call c;
    c.write = true;
    c.node = node;
    c.addr = addr;
    c.wbuf = static_cast<const unsigned char *>(buf);
    c.len = len;
    if (len == 0) return RK_RMEM_OK;
    if (node >= RKF_MAX_NODES) return m->account(c, RK_RMEM_UNREACHABLE);
    if (node == m->node_id) return m->account(c, m->local_access(c));
    if (m->live) {
        const int st = m->direct_access(c);
        if (st != kNoDirect) return m->account(c, st);
    }
    return m->account(c, m->remote_access(c));
}

void *rk_rmem_tail_area(RkRemoteMem *m, unsigned off, unsigned len)
{
    if (!m || !m->own_tail || off < RK_RMEM_TAIL_DEV_OFF || off > RK_RMEM_TAIL_SIZE ||
        len > RK_RMEM_TAIL_SIZE - off)
        return nullptr;
    return reinterpret_cast<unsigned char *>(m->own_tail) + off;
}

int rk_rmem_direct_run(RkRemoteMem *m, unsigned node, rk_rmem_direct_fn fn, void *opaque, int *fn_ret)
{
    if (!m || !m->live || node >= RKF_MAX_NODES || node == m->node_id) return RK_RMEM_NO_DIRECT;
    int ret = 0;
    const int st = m->direct_run(
        node,
        [&](unsigned char *base) {
            const rk_rmem_view v{base, m->ram_base, m->ram_size, base + m->ram_size,
                                 __atomic_load_n(&m->live->eth_watched, __ATOMIC_ACQUIRE)};
            ret = fn(opaque, &v);
            return int(RK_RMEM_OK);
        },
        [](unsigned char *) {});
    if (fn_ret) *fn_ret = ret;
    return st == kNoDirect ? RK_RMEM_NO_DIRECT : st;
}

void rk_rmem_get_stats(RkRemoteMem *m, struct rk_rmem_stats *o)
{
    o->reads = m->reads;
    o->writes = m->writes;
    o->read_bytes = m->read_bytes;
    o->write_bytes = m->write_bytes;
    o->local = m->local;
    o->frames = m->frames;
    o->decode_errors = m->decode_errors;
    o->unreachable = m->unreachable;
    o->timeouts = m->timeouts;
    o->served_reads = m->served_reads;
    o->served_writes = m->served_writes;
    o->served_bytes = m->served_bytes;
    o->served_refused = m->served_refused;
    o->served_malformed = m->served_malformed;
    o->stray_replies = m->stray_replies;
    o->forged_replies = m->forged_replies;
    o->direct_reads = m->direct_reads;
    o->direct_writes = m->direct_writes;
    o->direct_fallbacks = m->direct_fallbacks;
    o->direct_maps = m->direct_maps;
    o->direct_faults = m->direct_faults;
    if (const rk_rmem_tail *t = m->own_tail) { // what peers did directly to this node's RAM
        o->served_reads += atomic_get(&t->served_reads);
        o->served_writes += atomic_get(&t->served_writes);
        o->served_bytes += atomic_get(&t->served_bytes);
        o->served_refused += atomic_get(&t->served_refused);
    }
}

} // extern "C"
