/* SPDX-License-Identifier: MIT */
/*
 * atomic.h: the GSAS (global shared address space) library of ExaNoDe D3.6 sec. 2.3, on rackemu.
 * Programs written against the deliverable's API include this file and link with
 * -lgsas -lpthread (build/guest/lib/). docs/gsas.md describes the environment.
 *
 * Every call is a request to the atomic service (gsasd) of the board that owns the address,
 * sent through this thread's own packetizer interface; the answer comes back into this
 * thread's own mailbox interface. The first call of a thread takes those two interfaces from
 * /dev/unimem (the atomicity driver); they are released when the thread exits.
 *
 * Addresses: bits [63:48] select the partition (board id + 1), bits [47:0] the address inside
 * it. Shared memory is reached only through these calls, never with loads and stores.
 * Alignment (Table 1): READ32/WRITE32 ignore the 2 low address bits, READ64/WRITE64/WRITE128/
 * CAS64/FAD64/SWAP64 the 3 low bits, READ4K and freeSharedPage the 12 low bits.
 *
 * As the seed says, READ*, WRITE*, CAS64, FAD64 and SWAP64 on an invalid address make the
 * application exit abnormally: the library prints what went wrong on stderr and calls abort().
 * The gsas_* functions below are rackemu's non-fatal forms of the same requests.
 */
#ifndef GSAS_ATOMIC_H
#define GSAS_ATOMIC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define _MAX_FORK_PATH_FILENAME_ 256                  /* remoteFork path, NUL included */
#define _EMPTY_THREAD_ARGUMENT_ 0xCAFEBEBEDEADBEEFull /* readThreadArgument without a parent */
#ifndef PAGE_SIZE
#define PAGE_SIZE 4096
#endif

/* sec. 2.3.1 */
uint64_t getNumberBoards(void);  /* boards in the rack */
uint64_t getBoardPid(void);      /* the board this process runs on */

/* sec. 2.3.2: quantity pages on board bid; NULL (errno set) if the board has not enough memory
 * or bid is not a board. freeSharedPage returns 0, or the service's error code (GSAS_E_* of
 * rackemu/gsas_proto.h: 2 not an allocation, 3 allocated by another process). */
void *allocSharedPage(uint16_t quantity, uint64_t bid);
uint64_t freeSharedPage(void *addr);

/* sec. 2.3.3 and 2.3.4, with the deliverable's prototypes verbatim (typed pointers; READ32
 * takes a uint64_t * as printed there), so a program that declares them itself compiles against
 * this header. C converts the void * of allocSharedPage to any of them without a cast; C++
 * callers cast. The address is a GSAS address: only its value is used, never dereferenced. */
char READ8(char *addr);
uint32_t READ32(uint64_t *addr);
uint64_t READ64(uint64_t *addr);
uint64_t READ4K(void *addr, char *buffer); /* the page in one atomic operation; returns 4096 */
void WRITE8(char *addr, char val);
void WRITE32(uint32_t *addr, uint32_t val);
void WRITE64(uint64_t *addr, uint64_t val);
void WRITE128(uint64_t *addr, uint64_t val[2]); /* both words in one atomic operation */

uint64_t CAS64(uint64_t *addr, uint64_t old_val, uint64_t new_val); /* 1 if swapped, else 0 */
int64_t FAD64(int64_t *addr, int64_t val);                          /* the value before the add */
uint64_t SWAP64(uint64_t *addr, uint64_t val);                      /* the value before the swap */

/* sec. 2.3.5: run filename on board bid with arg (seed prototype: char *, not modified). An
 * absolute path names a file of board bid's file system. A relative path (the seed only
 * advises against it) is resolved against the caller's current working directory, on the
 * caller's board, before it is sent: "gsas-child" called from /bin starts /bin/gsas-child on
 * board bid; the result must fit in _MAX_FORK_PATH_FILENAME_ (else ENAMETOOLONG). Its stdout
 * and stderr go to NAME-BID-stdout.log / -stderr.log in the service's log directory
 * (/tmp/gsas), NAME the file name without directories. Returns the new process's pid on that
 * board, 0 if it could not be started (errno: EINVAL for an empty path or arg ==
 * _EMPTY_THREAD_ARGUMENT_, ENAMETOOLONG, ENOMEM if the board had no page for the path, the
 * getcwd() error for a relative path, or the board's reason: ENOENT, EACCES, EPERM, ...). */
uint64_t remoteFork(char *filename, uint64_t arg, uint64_t bid);
uint64_t readThreadArgument(void); /* the parent's arg, or _EMPTY_THREAD_ARGUMENT_ */

/* ---- rackemu extensions ---- */

/* One request without the fatal exit: returns the service's error code (0 = success, GSAS_E_*
 * > 0) or a transport failure as -errno (-EHOSTUNREACH: the board is down or the fabric is
 * gone; -ETIMEDOUT: no answer within GSAS_TIMEOUT_MS; -ENXIO: no such board; -ENODEV: no
 * /dev/unimem interface for this thread). `buf` receives READ4K's page (may be NULL otherwise). */
int gsas_request(unsigned op, uint64_t bid, uint64_t addr, uint64_t arg1, uint64_t arg2, uint64_t *result,
		 void *buf);
const char *gsas_strerror(int err);

/* Per-thread counters of the library. */
struct gsas_thread_stats {
	uint64_t requests;   /* requests sent */
	uint64_t busy;       /* sends the service's full FIFO refused (retried) */
	uint64_t forged;     /* packets in our MIF that did not come from the addressed service: ignored */
	uint64_t stale;      /* service answers to an earlier, abandoned request: ignored */
	uint64_t sleeps;     /* waits that went to sleep on the arrival interrupt */
	uint64_t probes;     /* liveness probes of a board whose answer was overdue */
	uint64_t naps;       /* naps while the packetizer's status of a send was pending (no interrupt) */
	uint64_t spun;       /* answers taken while spinning (no sleep, no nap) */
	uint64_t acks_seen;  /* requests whose ACK was seen before their answer */
	uint64_t ack_ns;     /* their time from the post to the ACK, summed (a fabric round trip) */
};
/* While an answer is overdue, the library probes the board every GSAS_PROBE_MS (environment
 * GSAS_PROBE_MS overrides it): a board that left the fabric fails the request with EHOSTUNREACH
 * within about GSAS_PROBE_MS plus one fabric round trip (docs/gsas.md, "Error bounds"). */
#define GSAS_PROBE_MS 200
void gsas_get_thread_stats(struct gsas_thread_stats *out);
/* This thread's interfaces: its MIF number and PID (taking them if needed); -errno on failure. */
int gsas_thread_interface(unsigned *mif, uint64_t *pid);

#ifdef __cplusplus
}
#endif

#endif /* GSAS_ATOMIC_H */
