/* SPDX-License-Identifier: MIT */
/*
 * One-sided remote memory over the fabric (service RKF_SVC_MEM, docs/fabric.md).
 *
 * Each node has one RkRemoteMem. It serves other nodes' reads and writes of this node's guest
 * RAM on the fabric port thread (no vCPU, no QEMU main loop, no big lock), and it executes this
 * node's devices' accesses to any node's RAM: the global address space window, the cDMA engine,
 * later the RMC. Calls block the calling thread (a vCPU doing a load, a DMA engine thread) until
 * every chunk is answered, with up to RK_RMEM_WINDOW chunks in flight; they never hold a lock
 * while they wait, so two nodes reading each other at the same moment cannot deadlock.
 *
 * Direct path (docs/fabric.md, "Direct path"): on one host every node's RAM is a shared file
 * (<ram_dir>/node<i>.ram). Once rk_rmem_enable_direct() was called, an access to a peer that the
 * bridge's liveness table shows connected is a copy between the caller's buffer and the peer's
 * mapped RAM, done by the calling thread: no frame, no owner thread. The liveness word is read
 * before and after the copy; a peer that is gone (or replaced by a new QEMU) during the copy makes
 * the access RK_RMEM_UNREACHABLE, as the fabric's NODE_GONE would. A peer whose RAM cannot be
 * mapped (no file, another size, not published yet) is reached over the fabric instead. A copy
 * that faults because someone truncated the peer's file (SIGBUS, caught by a guard the direct
 * path installs, chained to the process's previous SIGBUS handler) fails RK_RMEM_UNREACHABLE.
 *
 * Caveat: the owner's RAM is written through its host mapping, not through QEMU's memory API:
 * TCG's translated code in a page that a remote node overwrites is not invalidated, and dirty
 * tracking does not see the write (the devices refuse migration anyway).
 */
#ifndef RK_REMOTE_MEM_H
#define RK_REMOTE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "rk_fabric_endpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkRemoteMem RkRemoteMem;
typedef void (*rk_rmem_log_fn)(void *opaque, const char *msg);

/* Result of an access. */
enum {
    RK_RMEM_OK = 0,
    RK_RMEM_DECODE_ERR = 1,  /* the range is not RAM on the owner (refused by the owner) */
    RK_RMEM_UNREACHABLE = 2, /* no fabric, link down, node absent or gone, congested, bad reply */
    RK_RMEM_TIMEOUT = 3,     /* the owner did not answer within the timeout */
};

#define RK_RMEM_WINDOW 32u /* chunks of one call in flight at once */

/* `ram_host` maps this node's RAM, guest physical [ram_base, ram_base + ram_size). `port` may be
 * NULL (a standalone node: only its own RAM is reachable). Registers RKF_SVC_MEM with the port,
 * so create it before rk_fabric_port_start(). `timeout_ms`: how long a call waits for an
 * answer before it gives up (RK_RMEM_TIMEOUT). `log` reports malformed peer requests. */
/* Published by each node at the end of its RAM file (file offset ram_size, RK_RMEM_TAIL_SIZE): the
 * counters of the accesses that peers made directly, kept by the peers with atomic adds, so that
 * the owner's served_* statistics count them as if it had served them. */
#define RK_RMEM_TAIL_MAGIC 0x524b4d54u /* "RKMT" */
#define RK_RMEM_TAIL_SIZE  0x100000u   /* 1 MiB: the header page, then the devices' areas */
struct rk_rmem_tail {
    uint32_t magic;    /* RK_RMEM_TAIL_MAGIC once the owner initialised the page */
    uint32_t version;  /* 1 */
    uint64_t ram_size; /* the owner's RAM size: the file's size minus the tail */
    uint64_t served_reads, served_writes, served_bytes, served_refused;
};
/* The rest of the tail, from RK_RMEM_TAIL_DEV_OFF, belongs to the node's devices: each
 * publishes what peers need to act on its memory directly (the RMC its context table,
 * struct rmc_pub in hw/sonuma/rmc_pub.h; the RNIC its QP and MR tables, struct rnic_pub in
 * hw/rnic/rnic_pub.h) at a fixed offset, under a seqlock (hw/fabric/seqlock.h). Host-only: no
 * guest ever sees these tables. Zeroed when the tail is (re)made. */
#define RK_RMEM_TAIL_DEV_OFF   1024u
#define RK_RMEM_TAIL_RMC_OFF   1024u /* struct rmc_pub, at most RK_RMEM_TAIL_RMC_SIZE bytes */
#define RK_RMEM_TAIL_RMC_SIZE  1024u
#define RK_RMEM_TAIL_RNIC_OFF  4096u /* struct rnic_pub, at most RK_RMEM_TAIL_RNIC_SIZE bytes */
#define RK_RMEM_TAIL_RNIC_SIZE (RK_RMEM_TAIL_SIZE - RK_RMEM_TAIL_RNIC_OFF)

RkRemoteMem *rk_rmem_new(RkFabricPort *port, unsigned node_id, uint64_t ram_base, uint64_t ram_size,
                         void *ram_host, unsigned timeout_ms, rk_rmem_log_fn log, void *log_opaque);
void rk_rmem_free(RkRemoteMem *m);

/* Turn the direct path on. `ram_dir` holds every node's RAM file as node<i>.ram (the launcher's
 * layout); this node's file must be the same file as `own_fd` (QEMU's descriptor of its RAM; -1:
 * not checked) and `ram_size` bytes long (or already carry a tail page). This node's file grows
 * by one page, the rk_rmem_tail. `live` is the bridge's liveness table (rk_fabric_port_liveness);
 * it must stay mapped while `m` lives. Call before the node's devices run. Returns 0, or -1 with
 * the reason in `err` (nothing changed: the node stays on the fabric). */
struct rkf_live_table;
int rk_rmem_enable_direct(RkRemoteMem *m, const char *ram_dir, int own_fd, const struct rkf_live_table *live,
                          char *err, size_t errlen);

/* Read or write `len` bytes at node-local physical address `addr` of node `node` (this node's
 * own RAM included, served directly). Accesses of 1, 2, 4 or 8 bytes aligned to their size are
 * single-copy atomic. Returns RK_RMEM_*; on failure the buffer's content is unspecified for a
 * read, and a write may have been partly performed. */
int rk_rmem_read(RkRemoteMem *m, unsigned node, uint64_t addr, void *buf, uint64_t len);
int rk_rmem_write(RkRemoteMem *m, unsigned node, uint64_t addr, const void *buf, uint64_t len);

/* This node's device area [off, off + len) of its own tail page (RK_RMEM_TAIL_*_OFF), for a
 * device to publish into; NULL while the direct path is off or if the range is not in the area.
 * The page lives as long as `m`. */
void *rk_rmem_tail_area(RkRemoteMem *m, unsigned off, unsigned len);

/* A device's own direct access to a peer (the RMC's reads): `fn` runs on the calling thread with
 * `view` naming the peer's mapped RAM (guest physical ram_base maps to view->ram) and its tail
 * page, under the same guards as rk_rmem_read's direct copies: the peer's liveness word is read
 * before and after `fn`, a copy that faults on a truncated file jumps out of `fn` (so `fn` must
 * own nothing: no lock, no allocation, no guest-memory mapping; copy into a caller's buffer).
 * Its return value goes to *fn_ret. Returns RK_RMEM_OK: `fn` ran and the peer stayed the same
 * live incarnation throughout; RK_RMEM_UNREACHABLE: the peer is down, was replaced or died
 * during `fn`, or its file faulted (whatever `fn` copied is void); RK_RMEM_NO_DIRECT: no direct
 * path to that peer now (off, link down, file not mapped, this node itself): use the fabric. */
#define RK_RMEM_NO_DIRECT 4
struct rk_rmem_view {
    const unsigned char *ram; /* the peer's RAM, guest physical ram_base */
    uint64_t ram_base, ram_size;
    unsigned char *tail;  /* the peer's tail (RK_RMEM_TAIL_SIZE bytes) */
    uint64_t eth_watched; /* the bridge's rkf_live_table.eth_watched, read before `fn` runs */
};
typedef int (*rk_rmem_direct_fn)(void *opaque, const struct rk_rmem_view *view);
int rk_rmem_direct_run(RkRemoteMem *m, unsigned node, rk_rmem_direct_fn fn, void *opaque, int *fn_ret);

struct rk_rmem_stats {
    uint64_t reads, writes; /* calls issued by this node */
    uint64_t read_bytes, write_bytes;
    uint64_t local;  /* calls served from this node's own RAM */
    uint64_t frames; /* request frames sent */
    uint64_t decode_errors, unreachable, timeouts;
    uint64_t served_reads, served_writes, served_bytes, served_refused, served_malformed;
    uint64_t stray_replies;  /* replies for no pending request (late after a timeout) */
    uint64_t forged_replies; /* replies with a pending tag from another node than the owner, or
                                for another operation: ignored (the chunk keeps waiting) */
    /* Direct path (calls of this node): done by a copy, of reads / writes; fallbacks: calls that
     * went over the fabric because the peer's RAM could not be mapped; maps: peer RAM files
     * mapped (one per peer incarnation); faults: copies that hit a truncated peer file (SIGBUS,
     * caught: UNREACHABLE). served_* above include what peers did directly. */
    uint64_t direct_reads, direct_writes, direct_fallbacks, direct_maps, direct_faults;
};
void rk_rmem_get_stats(RkRemoteMem *m, struct rk_rmem_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* RK_REMOTE_MEM_H */
