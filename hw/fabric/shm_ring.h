// SPDX-License-Identifier: MIT
//
// Shared-memory frame rings of the rackemu fabric (docs/fabric.md, "Data path").
//
// A port's shared-memory object holds two single-producer single-consumer rings of fixed
// 256-byte slots: to_bridge (node produces, bridge consumes) and to_node (bridge produces,
// node consumes). Indices are free-running 32-bit counters. The consumer polls adaptively:
// it spins while frames flow, then announces itself asleep in `sleeping` and waits on that
// word with a futex; a producer wakes it only when that flag is set, so an idle cluster makes
// no system calls and burns no CPU, and a busy one makes none per frame.
//
// Both sides treat the other as untrusted: a consumer validates indices and lengths before it
// copies a frame out, and never reads a slot twice.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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
    std::atomic<uint32_t> sleeping; // futex word: 1 while the consumer sleeps
    char pad2[60];
};

struct Ring {
    RingCtl ctl;
    unsigned char slots[RKF_RING_SLOTS][RKF_SLOT_SIZE];
};

struct PortShm {
    uint32_t magic;   // RKF_SHM_MAGIC
    uint32_t version; // RKF_PROTO_VERSION
    char pad[56];
    Ring to_bridge;
    Ring to_node;
};

// The bridge's doorbell page: producers on every port wake the bridge's router through it.
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

// Sleep on `w` (announced by setting it to 1) unless `ready()` turns true; at most `ms`.
template <typename Ready> inline void futex_sleep(std::atomic<uint32_t> *w, int ms, Ready ready)
{
    w->store(1, std::memory_order_seq_cst);
    if (ready()) {
        w->store(0, std::memory_order_relaxed);
        return;
    }
    timespec ts{ms / 1000, (ms % 1000) * 1000000L};
    futex_op(w, FUTEX_WAIT, 1, &ts);
    w->store(0, std::memory_order_relaxed);
}

// Polling step of a consumer that found nothing: spin briefly, then yield the CPU so that on an
// oversubscribed host (more polling threads and vCPUs than cores) the producer gets to run.
inline void poll_pause(uint64_t idle_ns)
{
    if (idle_ns < 2000) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        asm volatile("yield" ::: "memory");
#endif
    } else {
        sched_yield();
    }
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

// How long a consumer keeps spinning after the last frame before it sleeps.
constexpr uint64_t kSpinNs = 50000;
// Longest futex sleep; consumers wake up at least this often to check for shutdown.
constexpr int kSleepMs = 100;

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
