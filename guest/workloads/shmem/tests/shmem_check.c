/* SPDX-License-Identifier: MIT */
/*
 * shmem-check: an OpenSHMEM program written against the standard API only (shmem.h), run on N PEs
 * with `rackemu shmemrun -n N shmem-check [--iters K]`. Every PE checks exact results of put/get
 * (heap and static objects), every 64-bit atomic, barrier, fence and the locks, and prints
 * `check=NAME ok=0|1 got=... want=...` lines, then `checks=N failed=F`; exit status 1 on a failure.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORDS 512

static long static_buf[WORDS]; /* symmetric: a global variable */
static long counter, xor_word, and_word, or_word, swap_word, cas_word, winners, lock_count, lock;
static long long ll_word;
static int64_t i64_word;
static uint64_t u64_word;
static long sums[4];
static int checks, failed;

static void check(const char *name, long long got, long long want)
{
	checks++;
	if (got != want)
		failed++;
	printf("check=%s pe=%d ok=%d got=%lld want=%lld\n", name, shmem_my_pe(), got == want, got, want);
}

int main(int argc, char **argv)
{
	long k, iters = 50, i;
	int me, n, next, prev, p;
	long *heap_buf;

	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atol(argv[++i]);
		else if (!strcmp(argv[i], "--help")) {
			printf("usage: shmem-check [--iters K]   (run with rackemu shmemrun -n N)\n");
			return 0;
		} else {
			fprintf(stderr, "shmem-check: unknown argument %s (see --help)\n", argv[i]);
			return 2;
		}
	if (iters < 1 || iters > 100000) {
		fprintf(stderr, "shmem-check: --iters must be 1..100000\n");
		return 2;
	}
	shmem_init();
	me = shmem_my_pe();
	n = shmem_n_pes();
	next = (me + 1) % n;
	prev = (me + n - 1) % n;
	heap_buf = shmem_malloc(WORDS * sizeof(long));
	if (!heap_buf) {
		fprintf(stderr, "shmem-check: shmem_malloc failed\n");
		return 1;
	}
	if (me == 0)
		and_word = -1;
	shmem_barrier_all();

	/* put: my pattern into the next PE's heap buffer and static buffer */
	{
		long src[WORDS];

		for (i = 0; i < WORDS; i++)
			src[i] = (long)me * 1000000 + i;
		shmem_long_put(heap_buf, src, WORDS, next);
		shmem_putmem(static_buf, src, sizeof(src), next);
		shmem_long_p(&heap_buf[WORDS - 1], -(long)me - 1, next);
	}
	shmem_barrier_all();
	{
		long bad = 0;

		for (i = 0; i < WORDS - 1; i++)
			bad += heap_buf[i] != (long)prev * 1000000 + i;
		bad += heap_buf[WORDS - 1] != -(long)prev - 1;
		check("put_heap", bad, 0);
		bad = 0;
		for (i = 0; i < WORDS; i++)
			bad += static_buf[i] != (long)prev * 1000000 + i;
		check("put_static", bad, 0);
	}
	/* get: the previous PE's static buffer (it holds the pattern of prev - 1) */
	{
		long dst[WORDS];
		long bad = 0, src_pe = (prev + n - 1) % n;

		shmem_long_get(dst, static_buf, WORDS, prev);
		for (i = 0; i < WORDS; i++)
			bad += dst[i] != src_pe * 1000000 + i;
		check("get_static", bad, 0);
		shmem_getmem(dst, heap_buf, 16 * sizeof(long), prev);
		bad = 0;
		for (i = 0; i < 16; i++)
			bad += dst[i] != src_pe * 1000000 + i;
		check("get_heap", bad, 0);
		check("g", shmem_long_g(&heap_buf[WORDS - 1], next), -(long)me - 1);
	}
	shmem_barrier_all();

	/* atomics on PE 0's words from every PE */
	{
		long fsum = 0;

		for (k = 0; k < iters; k++) {
			fsum += shmem_long_atomic_fetch_inc(&counter, 0) >= 0;
			shmem_long_atomic_inc(&counter, 0);
			shmem_long_atomic_add(&counter, 2, 0);
			shmem_long_atomic_fetch_add(&counter, 3, 0);
			shmem_long_atomic_xor(&xor_word, 1l << me, 0);
			shmem_longlong_atomic_add(&ll_word, 1, 0);
			shmem_int64_atomic_fetch_add(&i64_word, -1, 0);
			shmem_uint64_atomic_add(&u64_word, 5, 0);
		}
		check("fetch_inc_nonneg", fsum, iters);
		shmem_long_atomic_or(&or_word, 1l << me, 0);
		shmem_long_atomic_and(&and_word, ~(1l << me), 0);
		/* a compare-swap race: exactly one PE wins */
		if (shmem_long_atomic_compare_swap(&cas_word, 0, me + 1, 0) == 0)
			shmem_long_atomic_inc(&winners, 0);
		/* swap chain: sum of the values seen + the final value = initial + sum of those written */
		{
			long seen = 0;

			for (k = 0; k < iters; k++)
				seen += shmem_long_atomic_swap(&swap_word, (long)me * 1000 + k + 1, 0);
			shmem_long_atomic_add(&sums[0], seen, 0);
			for (k = 0; k < iters; k++)
				shmem_long_atomic_add(&sums[1], (long)me * 1000 + k + 1, 0);
		}
	}
	shmem_barrier_all();
	if (me == 0) {
		long xor_want = 0, mask = (n >= 63) ? -1 : (1l << n) - 1;

		for (p = 0; p < n; p++)
			xor_want ^= (iters & 1) ? (1l << p) : 0;
		check("inc_add_fetch_add", counter, (long)n * iters * 7);
		check("xor", xor_word, xor_want);
		check("or", or_word, mask);
		check("and", and_word, ~mask);
		check("compare_swap_one_winner", winners, 1);
		check("compare_swap_value", cas_word >= 1 && cas_word <= n, 1);
		check("swap_chain", sums[0] + swap_word, sums[1]);
		check("longlong_add", ll_word, (long long)n * iters);
		check("int64_fetch_add", i64_word, -(long long)n * iters);
		check("uint64_add", (long long)u64_word, 5ll * n * iters);
	}
	shmem_barrier_all();
	/* fetch, set and the fetching bitwise operations on PE 0's words, one PE at a time */
	for (p = 0; p < n; p++) {
		if (p == me) {
			long before = shmem_long_atomic_fetch(&counter, 0), got;

			shmem_long_atomic_set(&counter, 7000 + me, 0);
			check("fetch", shmem_long_atomic_fetch(&counter, 0), 7000 + me);
			check("fetch_before_set", before, me ? 7000 + me - 1 : (long)n * iters * 7);
			shmem_long_atomic_set(&xor_word, 0x0f0f, 0);
			got = shmem_long_atomic_fetch_xor(&xor_word, 0xff, 0);
			check("fetch_xor", got * 0x10000 + shmem_long_atomic_fetch(&xor_word, 0), 0x0f0f * 0x10000l + 0x0ff0);
			got = shmem_long_atomic_fetch_and(&xor_word, 0x0f00, 0);
			check("fetch_and", got * 0x10000 + shmem_long_atomic_fetch(&xor_word, 0), 0x0ff0 * 0x10000l + 0x0f00);
			got = shmem_long_atomic_fetch_or(&xor_word, 0x000f, 0);
			check("fetch_or", got * 0x10000 + shmem_long_atomic_fetch(&xor_word, 0), 0x0f00 * 0x10000l + 0x0f0f);
			check("uint64_fetch_xor", (long long)shmem_uint64_atomic_fetch_xor(&u64_word, 1, next) >= 0, 1);
			check("compare_swap_miss", shmem_long_atomic_compare_swap(&counter, 1, 2, 0), 7000 + me);
		}
		shmem_barrier_all();
	}
	/* locks: a non-atomic read-modify-write of PE 0's lock_count under the lock */
	for (k = 0; k < iters; k++) {
		long v;

		shmem_set_lock(&lock);
		v = shmem_long_g(&lock_count, 0);
		shmem_long_p(&lock_count, v + 1, 0);
		shmem_clear_lock(&lock);
	}
	shmem_barrier_all();
	if (me == 0)
		check("lock_count", lock_count, (long)n * iters);
	if (me == 0)
		shmem_set_lock(&lock);
	shmem_barrier_all();
	if (me != 0)
		check("test_lock_busy", shmem_test_lock(&lock), 1);
	shmem_barrier_all();
	if (me == 0)
		shmem_clear_lock(&lock);
	shmem_barrier_all();
	if (me == n - 1) {
		check("test_lock_free", shmem_test_lock(&lock), 0);
		shmem_clear_lock(&lock);
	}
	/* fence: data then flag to the next PE; once the flag is seen, the data must be there */
	shmem_long_p(&heap_buf[0], 0, next);
	shmem_barrier_all();
	{
		long src[WORDS];
		volatile long *flag = &heap_buf[0];
		struct timespec nap = { 0, 100000 };
		int waited = 0;

		for (i = 0; i < WORDS; i++)
			src[i] = 42 + i;
		shmem_long_put(&heap_buf[1], src, WORDS - 1, next);
		shmem_fence();
		shmem_long_p(&heap_buf[0], 1, next);
		while (*flag != 1 && waited++ < 100000)
			nanosleep(&nap, NULL);
		__sync_synchronize(); /* the data is read after the flag */
		check("fence", *flag == 1 && heap_buf[1] == 42 && heap_buf[WORDS - 1] == 42 + WORDS - 2, 1);
	}
	shmem_barrier_all();
	shmem_free(heap_buf);
	shmem_barrier_all();
	printf("pe=%d checks=%d failed=%d\n", me, checks, failed);
	shmem_finalize();
	return failed ? 1 : 0;
}
