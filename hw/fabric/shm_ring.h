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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
    char pad2[56];
};
// `space_wait` (protocol version 2): the producer sets it when it finds the ring full, then
// re-checks and waits. After it frees slots the consumer clears it and wakes the producer: on
// to_bridge the node's sending thread waits on `space_wait` itself (futex); on to_node the
// bridge's router does not wait for one port, so the node wakes the bridge's doorbell instead.
static_assert(sizeof(RingCtl) == 192, "ring control block: three cache lines (fabric_proto.h)");

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

// Wake whoever sleeps on `w`, whether or not it announced it (shutdown, liveness: events that
// must never be lost, also when a thread driving the port took the announcement over).
inline void futex_wake_always(std::atomic<uint32_t> *w)
{
    w->store(0, std::memory_order_seq_cst);
    futex_op(w, FUTEX_WAKE, INT32_MAX, nullptr);
}

// Sleep on `w` (announced by setting it to 1) unless `ready()` turns true; at most `ms`
// milliseconds, or until woken when `ms` < 0.
template <typename Ready> inline void futex_sleep(std::atomic<uint32_t> *w, int ms, Ready ready)
{
    w->store(1, std::memory_order_seq_cst);
    if (ready()) {
        w->store(0, std::memory_order_relaxed);
        return;
    }
    timespec ts{ms / 1000, (ms % 1000) * 1000000L};
    futex_op(w, FUTEX_WAIT, 1, ms < 0 ? nullptr : &ts);
    w->store(0, std::memory_order_relaxed);
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

inline uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
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
