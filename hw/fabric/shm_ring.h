// SPDX-License-Identifier: MIT
//
// Shared-memory frame rings of the rackemu fabric (docs/fabric.md, "Data path").
//
// A port's shared-memory object holds two single-producer single-consumer rings of fixed
// 256-byte slots: to_bridge (node produces, bridge consumes) and to_node (bridge produces,
// node consumes). Indices are free-running 32-bit counters. The consumer polls adaptively:
// it spins (with `pause`, never sched_yield) for a few microseconds after the last frame, then
// announces itself asleep in `sleeping` and waits on that word with a futex, without a timeout;
// a producer wakes it only when that flag is set, so an idle cluster makes no system calls and
// no wake-ups, and a busy one makes none per frame. A producer that finds the ring full
// announces it in `space_wait` and blocks; the consumer wakes it when it frees a slot.
//
// Both sides treat the other as untrusted: a consumer validates indices and lengths before it
// copies a frame out, and never reads a slot twice.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cerrno>
#include <cstring>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "rackemu/fabric_proto.h"

namespace rackemu::fabric {

struct alignas(64) RingCtl {
    std::atomic<uint32_t> head; // next slot the producer writes
    char pad0[60];
    std::atomic<uint32_t> tail; // next slot the consumer reads
    char pad1[60];
    std::atomic<uint32_t> sleeping;   // futex word: 1 while the consumer sleeps
    std::atomic<uint32_t> space_wait; // 1 while the producer waits for a free slot (see below)
    // "Poller present" (CLOCK_MONOTONIC ns): until then a thread of the consumer's side polls
    // the ring on its own (a vCPU reading a device register), so the producer need not wake the
    // sleeping consumer for a frame: see wake_consumer() and lease_follow_up() below.
    std::atomic<uint64_t> poll_lease;
    // Pair rings only (docs/fabric.md, "Poller present on pair rings"), counters the bridge reads
    // and reports per node (numbers from the nodes, not trusted for anything): wake-ups the
    // producer skipped because a poller held the lease, wake-ups it made when it followed one of
    // them up (the lease lapsed with frames left), and timed wake-ups of the consumer's port
    // thread that found frames (the backstop, below). The first two are the producer's words,
    // the third the consumer's.
    std::atomic<uint64_t> wakes_skipped;
    std::atomic<uint64_t> follow_up_wakes;
    std::atomic<uint64_t> backstop_wakes;
    char pad2[24];
};
// `space_wait` (protocol version 2): the producer sets it when it finds the ring full, then
// re-checks and waits. After it frees slots the consumer clears it and wakes the producer: on
// to_bridge the node's sending thread waits on `space_wait` itself (futex); on to_node the
// bridge's router does not wait for one port, so the node wakes the bridge's doorbell instead.
// `poll_lease` lies in what was padding in version 2 (zeros): a side that does not know it
// leaves it 0 (no lease: every wake-up is made), so no protocol version change.
static_assert(sizeof(RingCtl) == 192, "ring control block: three cache lines (fabric_proto.h)");
static_assert(offsetof(RingCtl, poll_lease) == 136, "poll_lease lies in the third line's former padding");
static_assert(offsetof(RingCtl, backstop_wakes) == 160,
              "pair counters lie in the third line's former padding");

// The consumer's `sleeping` word. On the bridge's rings it is 0 or 1. On a pair ring the
// consumer's port thread stores kAsleepTimed instead of kAsleep when it goes to sleep while its
// node's poller holds the ring's lease: it then sleeps at most kPairBackstopNs, so a producer
// that skips its wake-up (wake_pair_consumer) can rely on the frame being taken within that
// time even if the poller stops and nobody follows up. A producer that finds kAsleep wakes it.
constexpr uint32_t kAwake = 0, kAsleep = 1, kAsleepTimed = 2;
constexpr uint64_t kPairBackstopNs = 1000000; // pair_backstop_ns(): RACKEMU_FABRIC_BACKSTOP_US

struct Ring {
    RingCtl ctl;
    unsigned char slots[RKF_RING_SLOTS][RKF_SLOT_SIZE];
};

struct PortShm {
    uint32_t magic;   // RKF_SHM_MAGIC
    uint32_t version; // RKF_PROTO_VERSION
    // 1 while the bridge's router sleeps (it sets it on every port before it sleeps): the node
    // that clears it wakes the router through the doorbell. Per port, so that a node that
    // clears its flag at will only loses its own wake-ups.
    std::atomic<uint32_t> router_asleep;
    char pad[52];
    Ring to_bridge;
    Ring to_node;
};

// A direct node-to-node pair (docs/fabric.md, "Direct node-to-node rings"): one sealed memfd the
// bridge creates for nodes `a` < `b` and hands to both. ring[0] carries a -> b, ring[1] b -> a;
// each ring's consumer is the receiving node's port, its producer the sending node's port.
// `mode` (RKF_PAIR_MODE_*) is the bridge's word: senders read it before every frame. `busy[d]`
// is 1 while the sender of direction d decides and pushes (Dekker with `mode`): the bridge,
// after switching the pair to the bridge, waits until both are 0, so no frame sent after a
// fault rule or capture was installed takes the pair ring. Both nodes write everything but
// `mode`: the bridge reads only indices (counters) and `busy`, and validates nothing else here.
struct PairShm {
    uint32_t magic;   // RKF_PAIR_MAGIC
    uint32_t version; // RKF_PROTO_VERSION
    uint16_t a, b;    // the pair's nodes, a < b
    uint32_t pad0;
    uint64_t gen;               // the pair's generation (markers carry it)
    std::atomic<uint32_t> mode; // RKF_PAIR_MODE_*: bridge only
    char pad1[36];
    std::atomic<uint32_t> busy[2]; // sender of ring[d] between reading `mode` and publishing
    char pad2[56];
    Ring ring[2];
};
static_assert(offsetof(PairShm, busy) == 64 && offsetof(PairShm, ring) % 64 == 0, "pair layout");

// The bridge's doorbell page: the futex word its router sleeps on (1 while it sleeps). Nodes
// wake it (store 0, FUTEX_WAKE) when they clear their port's `router_asleep`.
struct alignas(64) Doorbell {
    std::atomic<uint32_t> sleeping;
    char pad[60];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "lock-free atomics are shared across processes");

inline long futex_op(std::atomic<uint32_t> *addr, int op, uint32_t val, const timespec *ts)
{
    return syscall(SYS_futex, reinterpret_cast<uint32_t *>(addr), op, val, ts, nullptr, 0);
}

// Wake the consumer sleeping on `w`, if it announced it sleeps. The fence orders the
// producer's ring publication before the flag check (the consumer does the mirror image).
inline bool futex_wake(std::atomic<uint32_t> *w)
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (w->load(std::memory_order_relaxed) != 0 && w->exchange(0, std::memory_order_seq_cst) != 0) {
        futex_op(w, FUTEX_WAKE, 1, nullptr);
        return true;
    }
    return false;
}

// The "poller present" lease (docs/fabric.md, "Poller present"). A thread of the consumer's side
// that polls the ring without blocking (rk_fabric_port_poll: a vCPU reading a device register)
// stores now + lease_ns() in `poll_lease` at each poll. While that deadline lies ahead, a
// producer that finds the consumer asleep skips the futex wake-up (the poller takes the frame
// on its own thread) and follows up: once the lease has lapsed, a frame still in the ring gets
// the wake-up it was spared, so a poller that stops (a vCPU that halts, dies or is descheduled)
// delays a frame by at most the lease, never loses it. A lease more than kLeaseMaxNs ahead is
// not believed (the word is written by the other, untrusted side): that frame is woken at once.
constexpr uint64_t kLeaseMaxNs = 1000000;

inline bool lease_valid(uint64_t lease, uint64_t now)
{
    return lease > now && lease - now <= kLeaseMaxNs;
}

enum class Wake {
    None,    // the consumer is awake (it looks at the ring before it sleeps)
    Woken,   // it slept: woken
    Skipped, // it sleeps but a poller holds a lease: the caller must call lease_follow_up()
};

inline uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// Producer side, after it published frames on `c`'s ring.
inline Wake wake_consumer(RingCtl &c)
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (c.sleeping.load(std::memory_order_relaxed) == 0) return Wake::None;
    if (lease_valid(c.poll_lease.load(std::memory_order_relaxed), now_ns())) return Wake::Skipped;
    return futex_wake(&c.sleeping) ? Wake::Woken : Wake::None;
}

// One more on a counter of the ring control block that only this side writes (a plain store:
// no locked read-modify-write on a line the other process reads).
inline void count_up(std::atomic<uint64_t> &c)
{
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Producer side of a pair ring, after it published frames: the bridge's rule (wake_consumer)
// with one more condition for skipping, since no router follows up here: the consumer's port
// thread sleeps with its backstop timer (kAsleepTimed). A skipped wake-up is followed up by the
// producer's node while it runs (lease_follow_up at its next poll, send or port-thread pass).
inline Wake wake_pair_consumer(RingCtl &c)
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t s = c.sleeping.load(std::memory_order_relaxed);
    if (s == kAwake) return Wake::None;
    if (s == kAsleepTimed && lease_valid(c.poll_lease.load(std::memory_order_relaxed), now_ns())) {
        count_up(c.wakes_skipped);
        return Wake::Skipped;
    }
    return futex_wake(&c.sleeping) ? Wake::Woken : Wake::None;
}

// Poller side (the consumer's side, holding the right to consume): promise to poll again within
// `lease` ns. Stored only when a quarter of the lease has passed since the last store, so a tight
// poll loop does not write the shared line at every poll. True if it stored.
inline bool lease_renew(RingCtl &c, uint64_t lease, uint64_t now = now_ns())
{
    if (!lease) return false;
    const uint64_t until = now + lease;
    if (until - c.poll_lease.load(std::memory_order_relaxed) <= lease / 4) return false;
    c.poll_lease.store(until, std::memory_order_relaxed);
    return true;
}

// Producer side, for frames published up to ring index `head` whose wake-up was skipped. True when
// nothing remains to do: the consumer took them (its tail reached `head`), or it is awake, or it
// has just been woken because the lease lapsed (`*woken` set). False while the lease runs: call
// again at `*due` (the lease's deadline as read now) or later. A tail beyond `head` (impossible
// unless the consumer's side is corrupt) counts as taken: that only concerns the consumer.
inline bool lease_follow_up(RingCtl &c, uint32_t head, uint64_t now, uint64_t *due, bool *woken)
{
    *woken = false;
    if (head - c.tail.load(std::memory_order_acquire) - 1u >= RKF_RING_SLOTS) return true; // taken
    const uint64_t lease = c.poll_lease.load(std::memory_order_relaxed);
    if (lease_valid(lease, now)) {
        *due = lease;
        return false;
    }
    *woken = futex_wake(&c.sleeping);
    return true;
}

// Node side, after it published a frame on to_bridge or freed room on to_node: wake the
// bridge's router if it sleeps.
inline bool wake_router(PortShm &shm, Doorbell &bell)
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (shm.router_asleep.load(std::memory_order_relaxed) != 0 &&
        shm.router_asleep.exchange(0, std::memory_order_seq_cst) != 0) {
        bell.sleeping.store(0, std::memory_order_seq_cst); // a wait not yet begun returns at once
        futex_op(&bell.sleeping, FUTEX_WAKE, 1, nullptr);
        return true;
    }
    return false;
}

// Wait on several futex words at once (Linux 5.16 futex_waitv): returns when any of `w[i]` is
// woken or does not hold `val[i]`, or at `until_ns` (CLOCK_MONOTONIC; 0: no timeout). Shared (not
// private) words: they live in memory other processes map. A port thread sleeps so on its bridge
// ring and the pair rings it reads.
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
inline long futex_wait_any(std::atomic<uint32_t> *const *w, const uint32_t *val, unsigned n,
                           uint64_t until_ns)
{
    struct futex_waitv v[1 + RKF_MAX_NODES] = {};
    n = std::min<unsigned>(n, FUTEX_WAITV_MAX);
    for (unsigned i = 0; i < n; i++) {
        v[i].val = val[i];
        v[i].uaddr = uint64_t(uintptr_t(w[i]));
        v[i].flags = FUTEX_32; // FUTEX2_SIZE_U32, shared
    }
    if (!until_ns) return syscall(SYS_futex_waitv, v, n, 0, nullptr, 0);
    const timespec ts{time_t(until_ns / 1000000000ull), long(until_ns % 1000000000ull)};
    return syscall(SYS_futex_waitv, v, n, 0, &ts, CLOCK_MONOTONIC);
}

// Does this kernel have futex_waitv (pair rings need it; without it a port announces no
// RKF_CAP_PAIR and everything goes through the bridge as before)?
inline bool futex_waitv_supported()
{
    static const bool ok = [] {
        return syscall(SYS_futex_waitv, nullptr, 0, 0, nullptr, 0) < 0 && errno != ENOSYS;
    }();
    return ok;
}

// Wake whoever sleeps on `w`, whether or not it announced it (shutdown, liveness: events that
// must never be lost, also when a thread driving the port took the announcement over).
inline void futex_wake_always(std::atomic<uint32_t> *w)
{
    w->store(0, std::memory_order_seq_cst);
    futex_op(w, FUTEX_WAKE, INT32_MAX, nullptr);
}

// Sleep on `w` (announced by setting it to 1) unless `ready()` turns true; at most `ns`
// nanoseconds, or until woken when `ns` < 0.
template <typename Ready> inline void futex_sleep_ns(std::atomic<uint32_t> *w, int64_t ns, Ready ready)
{
    w->store(1, std::memory_order_seq_cst);
    if (ready()) {
        w->store(0, std::memory_order_relaxed);
        return;
    }
    timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
    futex_op(w, FUTEX_WAIT, 1, ns < 0 ? nullptr : &ts);
    w->store(0, std::memory_order_relaxed);
}

template <typename Ready> inline void futex_sleep(std::atomic<uint32_t> *w, int ms, Ready ready)
{
    futex_sleep_ns(w, ms < 0 ? -1 : int64_t(ms) * 1000000, ready);
}

inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

enum class PopResult { Empty, Ok, Corrupt };

// Producer side. Returns false when the ring is full.
inline bool ring_push(Ring &r, const rkf_frame_hdr &h, const void *payload)
{
    const uint32_t head = r.ctl.head.load(std::memory_order_relaxed);
    const uint32_t tail = r.ctl.tail.load(std::memory_order_acquire);
    if (head - tail >= RKF_RING_SLOTS) {
        return false;
    }
    unsigned char *slot = r.slots[head % RKF_RING_SLOTS];
    std::memcpy(slot, &h, sizeof h);
    if (h.len) {
        std::memcpy(slot + sizeof h, payload, h.len);
    }
    r.ctl.head.store(head + 1, std::memory_order_release);
    return true;
}

// Slots the producer has published and the consumer not taken yet (the tail read seq_cst, for
// a re-check after announcing `space_wait`).
inline uint32_t ring_used(const Ring &r)
{
    return r.ctl.head.load(std::memory_order_relaxed) - r.ctl.tail.load(std::memory_order_seq_cst);
}

inline bool ring_full(const Ring &r)
{
    return r.ctl.head.load(std::memory_order_relaxed) - r.ctl.tail.load(std::memory_order_seq_cst) >=
           RKF_RING_SLOTS;
}

// Consumer side, after it freed slots: tell a producer that waits for room. True if one did
// (the caller then wakes it: the futex on `space_wait`, or the bridge's doorbell).
inline bool ring_space_freed(Ring &r)
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return r.ctl.space_wait.load(std::memory_order_relaxed) != 0 &&
           r.ctl.space_wait.exchange(0, std::memory_order_seq_cst) != 0;
}

inline bool ring_empty(const Ring &r)
{
    return r.ctl.head.load(std::memory_order_acquire) == r.ctl.tail.load(std::memory_order_relaxed);
}

// Consumer side: copies one frame out (header + up to RKF_MAX_PAYLOAD bytes). Corrupt means
// the producer published an impossible index; the caller should drop the port.
inline PopResult ring_pop(Ring &r, rkf_frame_hdr &h, unsigned char *payload)
{
    const uint32_t tail = r.ctl.tail.load(std::memory_order_relaxed);
    const uint32_t head = r.ctl.head.load(std::memory_order_acquire);
    if (head == tail) {
        return PopResult::Empty;
    }
    if (head - tail > RKF_RING_SLOTS) {
        return PopResult::Corrupt;
    }
    const unsigned char *slot = r.slots[tail % RKF_RING_SLOTS];
    std::memcpy(&h, slot, sizeof h);
    const uint16_t len = h.len <= RKF_MAX_PAYLOAD ? h.len : RKF_MAX_PAYLOAD; // validated by caller
    if (len) {
        std::memcpy(payload, slot + sizeof h, len);
    }
    r.ctl.tail.store(tail + 1, std::memory_order_release);
    return PopResult::Ok;
}

// A duration in microseconds from the environment (0 .. 1 s), or `dflt` when unset or invalid.
inline uint64_t env_us(const char *name, uint64_t dflt)
{
    if (const char *e = getenv(name)) {
        char *end = nullptr;
        const unsigned long long us = strtoull(e, &end, 10);
        if (end != e && *end == 0 && us <= 1000000) return us * 1000ull;
    }
    return dflt;
}

// How long a thread polls (with `pause`) before it blocks on a futex: a consumer after the last
// frame, the router, a sender that found a ring full. A blocking hand-off costs a few
// microseconds when a core is free, but a spinner on a host with no spare core keeps the core
// that the producer needs until the next scheduler tick (milliseconds). So spin_ns() is short
// (kSpinShortNs) unless the process may use at least kSpinCores CPUs; RACKEMU_FABRIC_SPIN_US
// overrides it (0: block at once). Read once per process (docs/fabric.md, "Data path").
constexpr uint64_t kSpinShortNs = 3000;
constexpr uint64_t kSpinLongNs = 50000;
constexpr unsigned kSpinCores = 4;

inline uint64_t spin_ns_default()
{
    if (getenv("RACKEMU_FABRIC_SPIN_US")) return env_us("RACKEMU_FABRIC_SPIN_US", kSpinShortNs);
    cpu_set_t set;
    CPU_ZERO(&set);
    const int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return unsigned(n) >= kSpinCores ? kSpinLongNs : kSpinShortNs;
}

inline uint64_t spin_ns()
{
    static const uint64_t ns = spin_ns_default();
    return ns;
}

// How long a thread that waits for a reply drives the port (rk_fabric_port_drive) before it
// blocks: about one fabric round trip on a loaded 2-core host, so that a typical reply is
// dispatched by the thread that needs it, with no wake-up of the port thread and of the waiter.
// The thread is one that cannot proceed anyway (a vCPU stalled on a remote load), so the core it
// keeps is its own; the helper threads it needs (router, the peer's port) block and get woken.
// RACKEMU_FABRIC_DRIVE_US overrides it (0: block at once).
constexpr uint64_t kDriveNs = 100000;

inline uint64_t drive_ns()
{
    static const uint64_t ns = env_us("RACKEMU_FABRIC_DRIVE_US", kDriveNs);
    return ns;
}

// How long a poll (rk_fabric_port_poll) promises that its thread polls again: the "poller
// present" lease. A guest that spins on a status register reads it every microsecond or two
// under TCG, so 10 us covers several polls; it is also the longest a frame waits when the poller
// stopped right after its last poll (a vCPU that went to sleep on its interrupt: in the guest
// packetizer ping-pong with the server on its interrupt, nearly every skipped wake-up ended so),
// before the producer's follow-up wakes the port thread: so it is kept well under the 60 us the
// interrupt-mode round trip may take. RACKEMU_FABRIC_LEASE_US overrides it (0: no lease, every
// frame for a sleeping port thread wakes it; at most kLeaseMaxNs).
constexpr uint64_t kLeaseNs = 10000;

inline uint64_t lease_ns()
{
    static const uint64_t ns = std::min<uint64_t>(env_us("RACKEMU_FABRIC_LEASE_US", kLeaseNs), kLeaseMaxNs);
    return ns;
}

// How long a port thread that sleeps with kAsleepTimed sleeps at most: the longest a frame whose
// wake-up was skipped waits when its poller stopped and its producer's node stopped running too.
// Also the period at which a port thread whose vCPU polls wakes once (about 1000 times a second
// per polling node: a few microseconds each). RACKEMU_FABRIC_BACKSTOP_US overrides it (100 us to
// 1 s; other values keep the default).
inline uint64_t pair_backstop_ns()
{
    static const uint64_t ns = [] {
        const uint64_t v = env_us("RACKEMU_FABRIC_BACKSTOP_US", kPairBackstopNs);
        return v >= 100000 ? v : kPairBackstopNs;
    }();
    return ns;
}

} // namespace rackemu::fabric

namespace rackemu::fabric {
// Structural validation of a frame read from a peer. Returns nullptr when valid, otherwise a
// static description of the defect.
inline const char *frame_defect(const rkf_frame_hdr &h)
{
    if (h.magic != RKF_FRAME_MAGIC) return "bad magic";
    if (h.len > RKF_MAX_PAYLOAD) return "length exceeds the slot (truncated or oversized frame)";
    if (h.type < RKF_T_REQ || h.type > RKF_T_MSG) return "unknown frame type";
    if (h.svc >= RKF_SVC_COUNT) return "unknown service";
    if (h.dst >= RKF_MAX_NODES) return "destination out of range";
    return nullptr;
}
} // namespace rackemu::fabric
