/* SPDX-License-Identifier: MIT */
/*
 * shmem.h: rackemu's OpenSHMEM subset on the RNIC (docs/shmem.md). The names and signatures are
 * OpenSHMEM 1.4's, so a program written against the standard API compiles unchanged for the
 * subset below: link with -lshmem -lpthread (build/guest/lib/libshmem.a carries librnic) and run
 * it with `rackemu shmemrun -n N ./prog`.
 *
 * Provided: shmem_init/finalize, shmem_my_pe/n_pes (and _my_pe/_num_pes), shmem_global_exit,
 * shmem_malloc/calloc/free/align, shmem_addr_accessible, shmem_ptr (NULL: no load/store path),
 * shmem_put/get for void (putmem/getmem), char, short, int, long, longlong, int32, int64, uint64
 * and the 8/16/32/64/128-bit sizes, the 64-bit atomic family for long, long long, int64 and uint64
 * (fetch, set, compare_swap, swap, fetch_inc, inc, fetch_add, add, fetch_and/or/xor, and/or/xor),
 * shmem_quiet, shmem_fence, shmem_barrier_all, shmem_set_lock/clear_lock/test_lock.
 * Symmetric objects: the symmetric heap (shmem_malloc; size from SHMEM_SYMMETRIC_SIZE, default
 * 32 MiB) and the program's global and static variables (data and bss), as the standard says.
 * Not provided: teams, contexts, collectives other than barrier_all, 32-bit atomics, wait_until,
 * threads other than SHMEM_THREAD_SINGLE.
 *
 * rackemu extensions (shmemx_*): a message channel between PEs (RC SENDs into receive buffers the
 * library keeps posted), used by the message-based HPCC RandomAccess baseline, and the RNIC's
 * counters.
 */
#ifndef RACKEMU_SHMEM_H
#define RACKEMU_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 4
#define SHMEM_VENDOR_STRING "rackemu OpenSHMEM subset on the RNIC"
#define SHMEM_MAX_NAME_LEN  64
#define SHMEM_THREAD_SINGLE 0

void shmem_init(void);
void shmem_finalize(void);
void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int _my_pe(void);
int _num_pes(void);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);

void *shmem_malloc(size_t size);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void shmem_free(void *ptr);
int shmem_addr_accessible(const void *addr, int pe);
int shmem_pe_accessible(int pe);
void *shmem_ptr(const void *dest, int pe);

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);

#define RACKEMU_SHMEM_RMA(NAME, TYPE)                                                 \
	void shmem_##NAME##_put(TYPE *dest, const TYPE *source, size_t nelems, int pe); \
	void shmem_##NAME##_get(TYPE *dest, const TYPE *source, size_t nelems, int pe); \
	void shmem_##NAME##_p(TYPE *dest, TYPE value, int pe);                          \
	TYPE shmem_##NAME##_g(const TYPE *source, int pe);
RACKEMU_SHMEM_RMA(char, char)
RACKEMU_SHMEM_RMA(short, short)
RACKEMU_SHMEM_RMA(int, int)
RACKEMU_SHMEM_RMA(long, long)
RACKEMU_SHMEM_RMA(longlong, long long)
RACKEMU_SHMEM_RMA(int32, int32_t)
RACKEMU_SHMEM_RMA(int64, int64_t)
RACKEMU_SHMEM_RMA(uint64, uint64_t)
RACKEMU_SHMEM_RMA(double, double)
#undef RACKEMU_SHMEM_RMA
void shmem_put8(void *dest, const void *source, size_t nelems, int pe);
void shmem_put16(void *dest, const void *source, size_t nelems, int pe);
void shmem_put32(void *dest, const void *source, size_t nelems, int pe);
void shmem_put64(void *dest, const void *source, size_t nelems, int pe);
void shmem_put128(void *dest, const void *source, size_t nelems, int pe);
void shmem_get8(void *dest, const void *source, size_t nelems, int pe);
void shmem_get16(void *dest, const void *source, size_t nelems, int pe);
void shmem_get32(void *dest, const void *source, size_t nelems, int pe);
void shmem_get64(void *dest, const void *source, size_t nelems, int pe);
void shmem_get128(void *dest, const void *source, size_t nelems, int pe);

/* The 64-bit atomic family (shmem_<T>_atomic_*), T in long, longlong, int64, uint64. The bitwise
 * ones (and, or, xor) are standard for the unsigned and fixed-width types; long and longlong get
 * them too here. */
#define RACKEMU_SHMEM_AMO(NAME, TYPE)                                                        \
	TYPE shmem_##NAME##_atomic_fetch(const TYPE *source, int pe);                          \
	void shmem_##NAME##_atomic_set(TYPE *dest, TYPE value, int pe);                        \
	TYPE shmem_##NAME##_atomic_compare_swap(TYPE *dest, TYPE cond, TYPE value, int pe);    \
	TYPE shmem_##NAME##_atomic_swap(TYPE *dest, TYPE value, int pe);                       \
	TYPE shmem_##NAME##_atomic_fetch_inc(TYPE *dest, int pe);                              \
	void shmem_##NAME##_atomic_inc(TYPE *dest, int pe);                                    \
	TYPE shmem_##NAME##_atomic_fetch_add(TYPE *dest, TYPE value, int pe);                  \
	void shmem_##NAME##_atomic_add(TYPE *dest, TYPE value, int pe);                        \
	TYPE shmem_##NAME##_atomic_fetch_and(TYPE *dest, TYPE value, int pe);                  \
	TYPE shmem_##NAME##_atomic_fetch_or(TYPE *dest, TYPE value, int pe);                   \
	TYPE shmem_##NAME##_atomic_fetch_xor(TYPE *dest, TYPE value, int pe);                  \
	void shmem_##NAME##_atomic_and(TYPE *dest, TYPE value, int pe);                        \
	void shmem_##NAME##_atomic_or(TYPE *dest, TYPE value, int pe);                         \
	void shmem_##NAME##_atomic_xor(TYPE *dest, TYPE value, int pe);
RACKEMU_SHMEM_AMO(long, long)
RACKEMU_SHMEM_AMO(longlong, long long)
RACKEMU_SHMEM_AMO(int64, int64_t)
RACKEMU_SHMEM_AMO(uint64, uint64_t)
#undef RACKEMU_SHMEM_AMO

void shmem_quiet(void);
void shmem_fence(void);
void shmem_barrier_all(void);
void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

/* ---- rackemu extensions ---- */
#define SHMEMX_MSG_MAX 2048 /* largest message of the message channel, bytes */

/* Send len (1..SHMEMX_MSG_MAX) bytes to pe's message channel (pe may be this PE). Returns when
 * the source may be reused; delivery is complete at the next shmem_quiet. 0, or -1 (bad args). */
int shmemx_msg_send(int pe, const void *buf, size_t len);
/* The next message that arrived (any sender, in order per sender): its length (copied into buf,
 * at most cap bytes) and sender in *pe; 0 when none came within timeout_ms (0: do not wait). */
long shmemx_msg_recv(void *buf, size_t cap, int *pe, int timeout_ms);
/* Most operations in flight (posted, not completed) this PE keeps; posting waits beyond it. */
unsigned shmemx_max_outstanding(void);
/* The RNIC's counter block (rackemu/rnic_regs.h RNIC_CNT_*), n entries at most: entries copied. */
int shmemx_rnic_counters(uint64_t *c, int n);
/* The name of counter i (rnic_regs.h RNIC_CNT_NAMES), NULL past the last. */
const char *shmemx_rnic_counter_name(int i);
/* The current value of the counter called name (e.g. "amu_ops"), -1 if the device has none. */
long long shmemx_rnic_counter(const char *name);
/* 1 when the bitwise and swap atomics are single NIC operations (the RNIC's extended atomics),
 * 0 when they are compare-swap loops over the IB atomics. */
int shmemx_native_bitwise_atomics(void);
/* The window of this PE's completions since the last reset on the RNIC's clock (QEMU's virtual
 * clock plus the modeled latency of each work request; under TCG that clock advances with host
 * time, so the window tracks the wall time of the emulated run): the clock at the first
 * operation's doorbell and at the last completion (ns), and the operations completed. */
void shmemx_model_window(uint64_t *start_ns, uint64_t *end_ns, uint64_t *ops);
void shmemx_model_window_reset(void);

#ifdef __cplusplus
}
#endif

#endif
