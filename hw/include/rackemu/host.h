/* SPDX-License-Identifier: MIT */
/*
 * The one host interface of every rackemu device core.
 *
 * A device core (hw/unimem, hw/sonuma, ...) never calls QEMU, the clock or guest RAM itself: it
 * reaches the outside world only through an RkHost, which the QEMU glue implements once for all
 * devices (hw/qemu/rackemu_glue.c: the memory API, so dirty tracking and translated-code
 * invalidation stay correct; QEMU_CLOCK_VIRTUAL; qemu_log_mask; the interrupt-from-any-thread
 * helper), and which a unit test or a fuzzer implements with plain memory
 * (tests/unit/test_host.h). The same core thus runs under QEMU, in a unit test and in a fuzzer.
 *
 * What a core gets:
 *   - interrupt lines: set_irq(line, level) from any thread;
 *   - the guest-error log (LOG_GUEST_ERROR in QEMU, -d guest_errors);
 *   - DMA: read/write bytes at an address of the node's physical address space (RAM, or the
 *     global address space window: the host routes those to the owner over the fabric), and
 *     map/unmap a range for direct access; all with one status type, rk_status;
 *   - time: a nanosecond clock that stops while the VM is stopped (save/restore, gdb);
 *   - the node's port to the rack (host->port, NULL: no fabric; the adapter binds the core's
 *     fabric service, rackemu/device.h) and one-sided remote memory over it (NULL: none);
 *   - the link: send an Ethernet frame on the node's port, and when the port's ring pushes back,
 *     ask for a call of the core's tx_resume op once it has room (tx_wait);
 *   - timers: arm timer `id` at a deadline of the clock above; the core's timer op runs then;
 *   - its own threads: each tells the host when it starts and ends (thread(1), thread(0));
 *   - the node's persistent memory as a NIC writes it (nvm, docs/pmem.md): a write acknowledged
 *     into the NIC's volatile buffer and placed later, a drain before any other access, a
 *     persistent FLUSH; outside persistent memory the core uses dma_rw and persist.
 * Counters are the core's own (declared once in its register header, read by the guest through
 * registers); the host only carries them to traces and stats.
 *
 * Threading: every op may be called from any thread (a vCPU in an MMIO handler with QEMU's big
 * lock held, the fabric port thread, a core's own engine thread) and never calls back into the
 * core, so a core may call them with its own lock held.
 */
#ifndef RACKEMU_HOST_H
#define RACKEMU_HOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkFabricPort RkFabricPort;
typedef struct RkRemoteMem RkRemoteMem;
typedef struct RkFabricEndpoint RkFabricEndpoint;

/* The status of every host operation and of every core operation that can fail. */
typedef enum rk_status {
    RK_OK = 0,
    RK_NACK = 1,         /* the target refused, nothing changed (a full FIFO): retry may succeed */
    RK_DECODE_ERROR = 2, /* nothing decodes at that address (AXI DECERR, QEMU MEMTX_DECODE_ERROR) */
    RK_SLAVE_ERROR = 3,  /* the target exists but refused the access (AXI SLVERR, MEMTX_ERROR) */
    RK_UNREACHABLE = 4,  /* the owner is down, the link is down, or it did not answer in time */
    RK_BUSY = 5,         /* a resource is exhausted (ring full, no slot): try again later */
} rk_status;

/* "OK", "NACK", ... ("?" for a value outside the enum, e.g. read from a peer's frame). */
static inline const char *rk_status_name(rk_status s)
{
    static const char *const names[] = {"OK", "NACK", "DECODE_ERROR", "SLAVE_ERROR", "UNREACHABLE", "BUSY"};

    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* The ops of RkHostOps.nvm: what a NIC does to the node's persistent memory (docs/pmem.md). */
enum rk_nvm_op {
    RK_NVM_WRITE = 0,  /* `data` acknowledged into the NIC's volatile buffer; placed in RAM later */
    RK_NVM_DRAIN = 1,  /* every buffered write placed (before any other NIC access of the range) */
    RK_NVM_PLACED = 2, /* the NIC wrote the range of RAM itself (an atomic): the mode's rule applies */
    RK_NVM_FLUSH = 3,  /* a persistent FLUSH: the buffer placed, then the range made durable */
};

typedef struct RkHostOps {
    /* Drive interrupt line `line` (0..n-1, the device's sysbus IRQ outputs) to `level`. Call it
     * in the order the level changes (e.g. with the core's lock held): the last call wins. */
    void (*set_irq)(void *opaque, unsigned line, int level);
    /* One line of wrong guest use (no trailing newline). The access still gets a defined result. */
    void (*guest_error)(void *opaque, const char *msg);
    /* Move `len` bytes between `buf` and the node's physical address `addr` (write = 1: to
     * memory). May block (remote memory). All or nothing is not promised: on an error some
     * bytes may have moved, as on a real bus. */
    rk_status (*dma_rw)(void *opaque, uint64_t addr, void *buf, uint64_t len, int write);
    /* Direct access to [addr, addr + *len) of RAM: returns a host pointer and may shorten *len,
     * or NULL (not RAM, or not mappable now: use dma_rw). Every successful map is paired with
     * one unmap, which marks the `access_len` bytes written (write = 1) dirty. */
    void *(*dma_map)(void *opaque, uint64_t addr, uint64_t *len, int write);
    void (*dma_unmap)(void *opaque, void *ptr, uint64_t len, int write, uint64_t access_len);
    /* Nanoseconds of a monotonic clock that stops while the VM is stopped. */
    uint64_t (*now_ns)(void *opaque);
    /* Make [addr, addr + len) of RAM durable in the RAM's backing store, the node's persistence
     * domain (a file-backed memory backend: msync of the range), and return once it is. Adds the
     * bytes written back to *synced (0 for RAM with no backing file: nothing can be made
     * durable). RK_DECODE_ERROR when part of the range is not RAM. NULL: nothing is durable. */
    rk_status (*persist)(void *opaque, uint64_t addr, uint64_t len, uint64_t *synced);
    /* Send one Ethernet frame on the node's port: 0 queued; -EAGAIN the port's ring is full
     * (nothing sent: hold it and call tx_wait); any other negative errno: dropped (no port,
     * link down). NULL: no port. */
    int (*send_frame)(void *opaque, const uint8_t *frame, size_t len);
    /* The link pushed back: call the core's tx_resume op (rackemu/device.h) from a thread that
     * may block, once the port has room. */
    void (*tx_wait)(void *opaque);
    /* Arm timer `id` (below the device's ntimers) to fire at deadline_ns of now_ns's clock (a
     * past deadline: at once); UINT64_MAX cancels it. Re-arming replaces the deadline. */
    void (*timer_arm)(void *opaque, unsigned id, uint64_t deadline_ns);
    /* Every thread a core starts calls thread(1) first and thread(0) last, on that thread
     * (QEMU: it becomes an RCU reader, as the memory API needs of a thread that does DMA). */
    void (*thread)(void *opaque, int start);
    /* RK_NVM_* on [addr, addr + len) of the node's persistent memory (`data`: RK_NVM_WRITE's
     * bytes, len 1..PMEM_NIC_ENTRY_MAX). RK_DECODE_ERROR and nothing done when the range is not
     * inside a persistent-memory region: it is plain RAM (use dma_rw and persist). Other errors
     * as rk_pmem_* (hw/pmem/pmem_capi.h): RK_UNREACHABLE after a power cut. NULL: none. */
    rk_status (*nvm)(void *opaque, unsigned op, uint64_t addr, const void *data, uint64_t len);
} RkHostOps;

typedef struct RkHost {
    const RkHostOps *ops;
    void *opaque;
    RkFabricPort *port; /* the node's port to the rack; NULL: a node without fabric */
    RkRemoteMem *rmem;  /* one-sided remote memory over `port`; NULL: none */
    unsigned node_id;   /* this node's id in the rack (0 without fabric) */
    unsigned node_count;
    RkFabricEndpoint *ep; /* the core's fabric service on `port` (rackemu/device.h fabric_svc),
                           * bound by the host before the core is created; NULL: none */
} RkHost;

#ifdef __cplusplus
} /* extern "C" */

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace rackemu {

using Status = rk_status;

/* The core's view of its host: thin inline wrappers over an RkHost (copied by value). */
class Host {
public:
    Host() = default;
    explicit Host(const RkHost &h) : h_(h) {}

    const RkHost &raw() const { return h_; }
    RkFabricPort *port() const { return h_.port; }
    RkRemoteMem *rmem() const { return h_.rmem; }
    RkFabricEndpoint *ep() const { return h_.ep; }
    unsigned node_id() const { return h_.node_id; }
    unsigned node_count() const { return h_.node_count; }

    void set_irq(unsigned line, bool level) const
    {
        if (h_.ops && h_.ops->set_irq) h_.ops->set_irq(h_.opaque, line, level ? 1 : 0);
    }
    void guest_error(const std::string &msg) const
    {
        if (h_.ops && h_.ops->guest_error) h_.ops->guest_error(h_.opaque, msg.c_str());
    }
    __attribute__((format(printf, 2, 3))) void guest_errorf(const char *fmt, ...) const
    {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        guest_error(buf);
    }
    Status dma_read(uint64_t addr, void *buf, uint64_t len) const
    {
        if (!h_.ops || !h_.ops->dma_rw) return RK_DECODE_ERROR;
        return h_.ops->dma_rw(h_.opaque, addr, buf, len, 0);
    }
    Status dma_write(uint64_t addr, const void *buf, uint64_t len) const
    {
        if (!h_.ops || !h_.ops->dma_rw) return RK_DECODE_ERROR;
        return h_.ops->dma_rw(h_.opaque, addr, const_cast<void *>(buf), len, 1);
    }
    void *dma_map(uint64_t addr, uint64_t &len, bool write) const
    {
        if (!h_.ops || !h_.ops->dma_map) return nullptr;
        return h_.ops->dma_map(h_.opaque, addr, &len, write ? 1 : 0);
    }
    void dma_unmap(void *ptr, uint64_t len, bool write, uint64_t access_len) const
    {
        if (ptr && h_.ops && h_.ops->dma_unmap)
            h_.ops->dma_unmap(h_.opaque, ptr, len, write ? 1 : 0, access_len);
    }
    uint64_t now_ns() const { return h_.ops && h_.ops->now_ns ? h_.ops->now_ns(h_.opaque) : 0; }
    Status persist(uint64_t addr, uint64_t len, uint64_t &synced) const
    {
        if (!h_.ops || !h_.ops->persist) return RK_OK;
        return h_.ops->persist(h_.opaque, addr, len, &synced);
    }
    int send_frame(const uint8_t *frame, size_t len) const
    {
        return h_.ops && h_.ops->send_frame ? h_.ops->send_frame(h_.opaque, frame, len) : -ENOTCONN;
    }
    void tx_wait() const
    {
        if (h_.ops && h_.ops->tx_wait) h_.ops->tx_wait(h_.opaque);
    }
    void timer_arm(unsigned id, uint64_t deadline_ns) const
    {
        if (h_.ops && h_.ops->timer_arm) h_.ops->timer_arm(h_.opaque, id, deadline_ns);
    }
    void thread(bool start) const
    {
        if (h_.ops && h_.ops->thread) h_.ops->thread(h_.opaque, start ? 1 : 0);
    }
    // RK_DECODE_ERROR: not persistent memory (no region there, or none at all).
    Status nvm(rk_nvm_op op, uint64_t addr, const void *data, uint64_t len) const
    {
        if (!h_.ops || !h_.ops->nvm) return RK_DECODE_ERROR;
        return h_.ops->nvm(h_.opaque, op, addr, data, len);
    }

private:
    RkHost h_{};
};

} // namespace rackemu
#endif /* __cplusplus */

#endif /* RACKEMU_HOST_H */
