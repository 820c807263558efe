/* SPDX-License-Identifier: MIT */
/*
 * GSAS (global shared address space, ExaNoDe D3.6 sec. 2.2-2.4): the request and response packets
 * between the atomic.h library and the atomic service (gsasd), and the global virtual
 * addresses. The single definition shared by the service, the library, the tools and the tests;
 * documented in docs/gsas.md.
 *
 * Transport: a request is one 256-bit packetizer packet from the issuing thread's PIF to MIF 0
 * (the atomic service's interface) of the owning node; the response goes from the service's
 * PIF 0 to the MIF named in the request's PID (rackemu/unimem_uapi.h, UNIMEM_PID). Words in
 * FIFO order:
 *
 * request (Fig. 8)
 *   w0 [47:0]  PID of the issuing thread, stamped by the packetizer from the PIDT
 *   w0 [55:48] the seed's reserved byte: rackemu's request tag, echoed in the response
 *   w0 [63:56] opcode (GSAS_OP_*)
 *   w1         instruction address (a GSAS global virtual address; unused by ALLOC and PING)
 *   w2         argument 1
 *   w3         argument 2
 *
 * response (Fig. 9, in a 256-bit packet)
 *   w0 [47:0]  the service's PID, UNIMEM_SERVICE_PID(node): no user thread can send it
 *   w0 [55:48] the request's tag, w0 [63:56] its opcode
 *   w1         error code (GSAS_E_*, 0 = success)
 *   w2         result
 *   w3         the request's instruction address
 *
 * READ4K: a successful response (result 4096) is followed by GSAS_READ4K_PACKETS data packets:
 *   w0 [63:56] GSAS_OP_DATA, [55:48] packet index 0..170, w1..w3 the page's next 24 bytes
 *   (the last packet carries 16 bytes and a zero word). Nothing in the page is reserved: the
 *   CAFEBEBEDEADBEEF restriction of the seed's READ4K does not apply.
 */
#ifndef RACKEMU_GSAS_PROTO_H
#define RACKEMU_GSAS_PROTO_H

#include "rackemu/rk_types.h"

/* ---- Global virtual addresses (sec. 2.2.2, Fig. 5) ----
 * [63:48] partition = board id + 1 (partition 0 is never valid, so NULL is no GSAS address),
 * [47:0] a virtual address the owning board's service assigns, in 4 KiB pages. */
#define GSAS_PAGE_SIZE 4096u
#define GSAS_PARTITION_SHIFT 48u
#define GSAS_LOCAL_MASK ((1ull << GSAS_PARTITION_SHIFT) - 1)
#define GSAS_ADDR(board, local) ((((rk_u64)(board) + 1) << GSAS_PARTITION_SHIFT) | ((rk_u64)(local) & GSAS_LOCAL_MASK))
#define GSAS_ADDR_PARTITION(a) ((unsigned)((rk_u64)(a) >> GSAS_PARTITION_SHIFT))
/* The board that owns a GSAS address; -1 for partition 0. */
#define GSAS_ADDR_BOARD(a) ((int)GSAS_ADDR_PARTITION(a) - 1)
#define GSAS_ADDR_LOCAL(a) ((rk_u64)(a) & GSAS_LOCAL_MASK)
/* The first virtual address a service hands out (page 0 stays unmapped). */
#define GSAS_FIRST_LOCAL 0x100000ull

/* ---- Opcodes (the seed names twelve operations, not their numbers) ---- */
#define GSAS_OP_ALLOC 0x01    /* w2 = pages (1..65535); result = GSAS address or 0 */
#define GSAS_OP_FREE 0x02     /* w1 = an allocation's first address; result = pages freed */
#define GSAS_OP_FORK 0x03     /* w1 = page holding the NUL-terminated path, w2 = argument; result = pid */
#define GSAS_OP_READ8 0x10
#define GSAS_OP_READ32 0x11
#define GSAS_OP_READ64 0x12
#define GSAS_OP_READ4K 0x13
#define GSAS_OP_WRITE8 0x20   /* w2 = value */
#define GSAS_OP_WRITE32 0x21
#define GSAS_OP_WRITE64 0x22
#define GSAS_OP_WRITE128 0x23 /* w2 = word at addr, w3 = word at addr + 8 */
#define GSAS_OP_CAS 0x30      /* w2 = expected, w3 = new; result = the old value */
#define GSAS_OP_FAD 0x31      /* w2 = addend (two's complement); result = the old value */
#define GSAS_OP_SWAP 0x32     /* w2 = new; result = the old value */
#define GSAS_OP_PING 0x7f     /* rackemu: result = the service's request count (liveness, latency) */
/* rackemu, kernel notice, never answered: sent by a node's unimem.ko from its kernel PIF
 * (PID = UNIMEM_PID(node, 63, 0, 0), which no user thread has) to every node's MIF 0 when a
 * process that used /dev/unimem exited (w1 = its tgid), or w1 = 0 when unimem.ko started (every
 * earlier process of that node is gone). The service frees the process's allocations. */
#define GSAS_OP_EXITED 0x7e
#define GSAS_OP_DATA 0xff     /* READ4K data packets (responses only) */

/* ---- Error codes (response w1) ---- */
#define GSAS_E_OK 0
#define GSAS_E_BADOP 1     /* unknown opcode or reserved bits set */
#define GSAS_E_BADADDR 2   /* not an allocated address of this board */
#define GSAS_E_PERM 3      /* the issuer may not do this (free or fork with another process's page,
                              remoteFork from an unprivileged interface) */
#define GSAS_E_NOMEM 4     /* the allocation does not fit the service's memory limit, or an
                              unprivileged process's limit (gsasd --max-mem-unpriv) */
#define GSAS_E_INVAL 5     /* a bad argument (0 pages, path not terminated or not absolute) */
#define GSAS_E_SPAWN 6     /* remoteFork could not start the program (missing, not executable) */
#define GSAS_E_SENDER 7    /* the packet's PID is not a user thread's (kernel or service PID) */
#define GSAS_E_MAX 7

/* Table 1: the address bits an operation ignores (the seed's WRITE8 "2" and WRITE32 "3" entries
 * contradict its alignment column; rackemu follows the alignment column). */
static inline rk_u64 gsas_align_mask(unsigned op)
{
	switch (op) {
	case GSAS_OP_READ32: case GSAS_OP_WRITE32: return 3;
	case GSAS_OP_READ64: case GSAS_OP_WRITE64: case GSAS_OP_WRITE128:
	case GSAS_OP_CAS: case GSAS_OP_FAD: case GSAS_OP_SWAP: return 7;
	case GSAS_OP_READ4K: case GSAS_OP_FREE: case GSAS_OP_FORK: return GSAS_PAGE_SIZE - 1;
	default: return 0;
	}
}

/* Bytes an addressed operation touches (0: not addressed). */
static inline unsigned gsas_op_size(unsigned op)
{
	switch (op) {
	case GSAS_OP_READ8: case GSAS_OP_WRITE8: return 1;
	case GSAS_OP_READ32: case GSAS_OP_WRITE32: return 4;
	case GSAS_OP_READ64: case GSAS_OP_WRITE64: case GSAS_OP_CAS: case GSAS_OP_FAD:
	case GSAS_OP_SWAP: return 8;
	case GSAS_OP_WRITE128: return 16;
	case GSAS_OP_READ4K: case GSAS_OP_FORK: return GSAS_PAGE_SIZE;
	default: return 0;
	}
}

#define GSAS_READ4K_BYTES_PER_PACKET 24u
#define GSAS_READ4K_PACKETS ((GSAS_PAGE_SIZE + GSAS_READ4K_BYTES_PER_PACKET - 1) / GSAS_READ4K_BYTES_PER_PACKET)

#define GSAS_W0(op, tag) (((rk_u64)(op) << 56) | ((rk_u64)((tag) & 0xff) << 48))
#define GSAS_W0_OP(w0) ((unsigned)((w0) >> 56))
#define GSAS_W0_TAG(w0) ((unsigned)(((w0) >> 48) & 0xff))

/* remoteFork (sec. 2.3.5) */
#define GSAS_MAX_FORK_PATH 256u              /* _MAX_FORK_PATH_FILENAME_, NUL included */
#define GSAS_EMPTY_THREAD_ARGUMENT 0xCAFEBEBEDEADBEEFull
#define GSAS_THREAD_ARG_ENV "GSAS_THREAD_ARGUMENT"

/* The service's live counters: gsasd keeps them in this file (struct gsas_stats), `gsas stats`
 * prints them. */
#define GSAS_STATS_PATH "/run/gsasd.stats"
#define GSAS_STATS_MAGIC 0x5347534153544154ull
struct gsas_stats {
	rk_u64 magic;
	rk_u64 pid;              /* gsasd's process id */
	rk_u64 requests;         /* packets taken from MIF 0 */
	rk_u64 served;           /* answered with GSAS_E_OK */
	rk_u64 refused[GSAS_E_MAX + 1]; /* answered with each error code */
	rk_u64 malformed;        /* partial packets (fewer than 4 words) discarded */
	rk_u64 replies_dropped;  /* responses the issuer's MIF refused until the deadline */
	rk_u64 pages_in_use;
	rk_u64 pages_limit;
	rk_u64 allocations;      /* live allocations */
	rk_u64 spawned;          /* processes started by remoteFork */
	rk_u64 sleeps;           /* times the service went to sleep on the arrival interrupt */
	rk_u64 exit_notices;     /* GSAS_OP_EXITED notices taken from the kernels */
	rk_u64 reclaimed_pages;  /* pages freed because their owner exited */
	rk_u64 ops[256];         /* requests per opcode */
	rk_u64 reply_retries;    /* replies posted again after the issuer's full FIFO refused them */
	rk_u64 replies_unsettled; /* replies whose acknowledgement had not come back when PIF 0 was
				     needed for the next packet */
	rk_u64 serve_ns;         /* time from taking a request off MIF 0 to its reply posted, summed */
	rk_u64 unsettled_at_sleep; /* ... when the service was about to sleep (its spin ran out
				      before the round trip of its last reply came back) */
};

#endif /* RACKEMU_GSAS_PROTO_H */
