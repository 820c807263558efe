/* SPDX-License-Identifier: MIT */
/*
 * librmc: user-space access to the soNUMA Remote Memory Controller through /dev/rmc
 * (docs/sonuma.md). A process registers or attaches a context (the memory segment this node
 * exposes under a cluster-wide context id), creates queue pairs bound to it, and posts one-sided
 * remote reads, writes, compare-and-swap, fetch-and-add and SABRes (atomic object reads, seed
 * 000 sec. 4). Work Queue entries are written with plain stores into the mapped WQ and handed
 * to the device with one doorbell store; completions are read from the mapped CQ: no system call
 * on the data path (rmc_wait sleeps in the kernel only after spinning).
 *
 * Offsets: `roff` is a byte offset in the destination node's segment of the context, `loff` one
 * in this node's segment of the same context (rmc_ctx_base(ctx) + loff is the local buffer).
 *
 * Every function returning int returns 0 (or a count) on success and -errno on failure unless
 * it says otherwise. A QP is used by one thread at a time (one QP per thread, like soNUMA).
 */
#ifndef LIBRMC_H
#define LIBRMC_H

#include <stddef.h>
#include <stdint.h>

#include "rackemu/sonuma_regs.h"
#include "rackemu/sonuma_uapi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rmc rmc_t;
typedef struct rmc_ctx rmc_ctx_t;
typedef struct rmc_qp rmc_qp_t;

/* LightSABRes metadata given at registration (the SABRes paper sec. 4.2): where the 64-bit version word
 * sits in every object's header, as a byte offset from the object's (64-byte aligned) base. */
struct rmc_layout {
	unsigned version_off; /* 0..56, multiple of 8 */
};

int rmc_open(rmc_t **out); /* opens /dev/rmc */
void rmc_close(rmc_t *r);  /* destroys the QPs and releases the contexts it still holds */
int rmc_info(rmc_t *r, struct rmc_uapi_info *out);
unsigned rmc_node_id(const rmc_t *r);
unsigned rmc_node_count(const rmc_t *r);

/* Register context `id` on this node: `size` bytes (rounded up to a page) of the node's RMC
 * segment, zeroed, with `perm` (CTX_PERM_*) granted to the nodes in `nodemask` (bit n = node n).
 * `layout` NULL: no SABRe on this context. The segment stays registered until the owner
 * releases it (or closes /dev/rmc). */
int rmc_ctx_register(rmc_t *r, unsigned id, size_t size, unsigned perm, uint64_t nodemask,
		     const struct rmc_layout *layout, rmc_ctx_t **out);
/* Use a context another process of this node registered: allowed to the owner's uid and to
 * CAP_SYS_ADMIN, -EACCES for anyone else (who needs the key: rmc_ctx_attach_key). */
int rmc_ctx_attach(rmc_t *r, unsigned id, rmc_ctx_t **out);
/* Access keys (docs/rmc-driver.md, "Who may use a context"). A context's key is drawn at random by
 * the driver unless the registration names one; every request on the context carries it, and a
 * destination serves only requests whose key equals its own context's. Nodes that work together
 * on a context id register it with the same key; sharing the key is how an owner shares the
 * context, locally (rmc_ctx_attach_key) and with other nodes. rmc_ctx_key returns it. */
int rmc_ctx_register_key(rmc_t *r, unsigned id, size_t size, unsigned perm, uint64_t nodemask,
			 const struct rmc_layout *layout, uint64_t key, rmc_ctx_t **out);
int rmc_ctx_attach_key(rmc_t *r, unsigned id, uint64_t key, rmc_ctx_t **out);
uint64_t rmc_ctx_key(const rmc_ctx_t *c);
/* Parse a key for the tools: a number (0x... or decimal), or "@PATH" (the number in that file),
 * or, if s is NULL, $RMC_KEY, or 0 (none) if that is not set. 0 or -EINVAL/-errno. */
int rmc_key_parse(const char *s, uint64_t *out);
void *rmc_ctx_base(rmc_ctx_t *c); /* this node's segment, mapped */
size_t rmc_ctx_size(const rmc_ctx_t *c);
unsigned rmc_ctx_id(const rmc_ctx_t *c);
uint64_t rmc_ctx_phys(const rmc_ctx_t *c); /* physical base of this node's segment (debugging) */
/* Releases the context (the owner's release unregisters it on this node) and destroys the QPs
 * this rmc_t created on it. */
void rmc_ctx_release(rmc_ctx_t *c);

#define RMC_QP_IRQ (1u << 0) /* rmc_qp_create flag: completion interrupts (rmc_wait can sleep) */
/* Create a QP of `depth` entries (power of two, 2..4096) on context `c`. */
int rmc_qp_create(rmc_t *r, rmc_ctx_t *c, unsigned depth, unsigned flags, rmc_qp_t **out);
void rmc_qp_destroy(rmc_qp_t *q);
unsigned rmc_qp_index(const rmc_qp_t *q);
unsigned rmc_qp_outstanding(const rmc_qp_t *q); /* posted, not yet polled */

/* Asynchronous posts: 0, -EAGAIN when no slot is free (poll completions first), -EINVAL for an
 * argument the library can already see is wrong (the device checks everything again and answers
 * a bad request with a BAD_REQUEST completion). RMC_POST_DEFER: write the WQE but do not ring
 * the doorbell (rmc_doorbell rings once for a batch). */
#define RMC_POST_DEFER  (1u << 0)
#define RMC_POST_NOSPEC (1u << 1) /* rmc_post_sabre: the "no speculation" variant (sec. 7.1) */
int rmc_post_read(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t wr_id,
		  unsigned fl);
int rmc_post_write(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t wr_id,
		   unsigned fl);
int rmc_post_cas(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t expect, uint64_t desired, uint64_t wr_id,
		 unsigned fl);
int rmc_post_faa(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t add, uint64_t wr_id, unsigned fl);
int rmc_post_sabre(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t wr_id,
		   unsigned fl);
/* Post a raw, unchecked WQE (tests of the device's checks). */
int rmc_post_raw(rmc_qp_t *q, const struct rmc_wqe *wqe, unsigned fl);
void rmc_doorbell(rmc_qp_t *q);

/* Completions: copy up to `max` CQEs into `out` (completion order, not posting order).
 * rmc_poll never blocks; rmc_wait spins (with the CPU's hint) for RMC_SPIN_US (environment,
 * default 20) microseconds, then sleeps in the driver until at least one completion arrives or
 * timeout_ms passes (0 when it times out). A QP without RMC_QP_IRQ has no interrupt to sleep
 * on: it polls with naps growing from 20 us to 1 ms. */
int rmc_poll(rmc_qp_t *q, struct rmc_cqe *out, int max);
int rmc_wait(rmc_qp_t *q, struct rmc_cqe *out, int max, int timeout_ms);
/* 0 at once if a WQ slot is free; otherwise wait until the next completion is ready for
 * rmc_poll (which frees a slot when it consumes it): 0, or -ETIMEDOUT. Consumes nothing. */
int rmc_wait_slot(rmc_qp_t *q, int timeout_ms);

/* Synchronous operations: post, wait (timeout 10 s), return the completion's RMC_ST_* (>= 0)
 * or -errno (-EBUSY: the QP has outstanding requests). `cqe` (may be NULL) receives the CQE. */
int rmc_read(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, struct rmc_cqe *cqe);
int rmc_write(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, struct rmc_cqe *cqe);
int rmc_cas(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t expect, uint64_t desired, uint64_t *old,
	    struct rmc_cqe *cqe);
int rmc_faa(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t add, uint64_t *old, struct rmc_cqe *cqe);
int rmc_sabre(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, unsigned fl,
	      struct rmc_cqe *cqe);

/* "OK", "SABRE_ABORT(WINDOW)", "REMOTE_ACCESS(BOUNDS)", ... */
const char *rmc_status_str(unsigned status, unsigned info);
const char *rmc_op_str(unsigned op);

/* Writers on the object's owner node (the SABRes paper sec. 4.2, odd/even versions): begin CASes the
 * version from even v to v+1 (spinning while it is odd) and returns v; end stores v+2 with
 * release. Between them, plain stores to the object. */
uint64_t rmc_obj_write_begin(volatile uint64_t *version);
void rmc_obj_write_end(volatile uint64_t *version, uint64_t begun);

/* Counters of this node's RMC (RMC_CNT_COUNT values, indexed by RMC_CNT_x / 8). */
int rmc_counters(rmc_t *r, uint64_t out[RMC_CNT_COUNT]);

#ifdef __cplusplus
}
#endif

#endif /* LIBRMC_H */
