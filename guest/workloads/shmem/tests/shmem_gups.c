/* SPDX-License-Identifier: MIT */
/*
 * shmem-gups: HPCC RandomAccess on N PEs (power of two) through the OpenSHMEM layer, by its rules:
 * the 64-bit stream of POLY 7 and PERIOD 1317624576693539401 started at HPCC_starts(k * NUPDATE/N)
 * on PE k, a table of 2^L 64-bit words spread evenly over the PEs (word i starts as i), NUPDATE =
 * 4 x table-size updates `table[ran & (size - 1)] ^= ran`, at most 1024 updates outstanding per PE,
 * then verification: the same stream replayed (XOR is its own inverse) and the words that are not
 * back to their index counted; the run passes with at most 1% of the table wrong.
 *
 *   --impl atomic   each update is a non-fetching 64-bit atomic XOR (shmem_uint64_atomic_xor)
 *                   executed by the target's NIC (the shmem layer keeps <= 1024 in flight)
 *   --impl message  the baseline: updates are bucketed per target PE and sent as messages (RC
 *                   SENDs, shmemx_msg_send); the target's CPU applies them to its part of the table
 *                   (buckets of <= 1024 / (2N) updates; a quiet after every N buckets sent keeps
 *                   <= 1024 updates buffered or in flight per PE)
 * The replay uses the other implementation, so a systematic error of one cannot cancel itself.
 *
 * PE 0 prints one line: impl pes log2_table table_words updates seconds gups devclock_seconds
 * devclock_gups unit_ops unit_mean_ns errors error_pct verify=pass|fail native_xor.
 * gups = updates / seconds / 1e9 (wall time of the update phase in the guest, barrier to barrier).
 * devclock: the longest span of a PE's RNIC clock between its first doorbell and last completion
 * (QEMU's virtual clock plus modeled latencies: under TCG it tracks the wall time). unit_ops,
 * unit_mean_ns: the atomics the PEs' atomic units executed in the phase and their mean modeled
 * time from arrival to execution (counters amu_ops, amu_modeled_ns), `na` when the device has no
 * atomic unit counters or the phase ran no atomic (the message baseline). unit_active_ns: the
 * longest modeled busy time of a PE's unit in the phase (amu_active_ns: time it had work, idle
 * gaps between arrivals excluded); modeled_gups = unit_ops / unit_active_ns: the update rate of
 * the units' model as fed by this run (the targets work in parallel; the busiest one bounds it).
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLY   0x0000000000000007ull
#define PERIOD 1317624576693539401ll
#define MAX_OUTSTANDING 1024

static long errors_total;
static uint64_t spans[64], unit_ops[64], unit_ns[64], unit_act[64];

/* The stream's element n (HPCC's HPCC_starts: 2^n in GF(2)[x] / POLY by squaring). */
static uint64_t hpcc_starts(int64_t n)
{
	uint64_t m2[64], temp = 1, ran = 2;
	int i, j;

	while (n < 0)
		n += PERIOD;
	while (n > PERIOD)
		n -= PERIOD;
	if (n == 0)
		return 1;
	for (i = 0; i < 64; i++) {
		m2[i] = temp;
		temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
		temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
	}
	for (i = 62; i >= 0; i--)
		if ((n >> i) & 1)
			break;
	while (i > 0) {
		temp = 0;
		for (j = 0; j < 64; j++)
			if ((ran >> j) & 1)
				temp ^= m2[j];
		ran = temp;
		i--;
		if ((n >> i) & 1)
			ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
	}
	return ran;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
	int me, n, log_local;
	uint64_t *table, local_size, nupdate;
};

static void run_atomic(const struct run *r)
{
	uint64_t ran = hpcc_starts((int64_t)(r->nupdate / (uint64_t)r->n * (uint64_t)r->me)), i;
	uint64_t mask = r->local_size * (uint64_t)r->n - 1;

	for (i = 0; i < r->nupdate / (uint64_t)r->n; i++) {
		uint64_t g;

		ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
		g = ran & mask;
		shmem_uint64_atomic_xor(&r->table[g & (r->local_size - 1)], ran, (int)(g >> r->log_local));
	}
	shmem_quiet();
}

static void apply(const struct run *r, const uint64_t *u, size_t k)
{
	size_t i;

	for (i = 0; i < k; i++)
		r->table[u[i] & (r->local_size - 1)] ^= u[i];
}

static void drain(const struct run *r, int *done, int wait_ms)
{
	uint64_t buf[SHMEMX_MSG_MAX / 8];
	int pe;
	long len;

	while ((len = shmemx_msg_recv(buf, sizeof(buf), &pe, wait_ms)) > 0) {
		if (len % 8) {
			(*done)++; /* the 1-byte end marker: the sender has sent everything to us */
		} else {
			apply(r, buf, (size_t)len / 8);
		}
		wait_ms = 0;
	}
}

static void run_message(const struct run *r)
{
	uint64_t ran = hpcc_starts((int64_t)(r->nupdate / (uint64_t)r->n * (uint64_t)r->me)), i;
	uint64_t mask = r->local_size * (uint64_t)r->n - 1;
	size_t bucket = MAX_OUTSTANDING / (2 * (size_t)r->n), sent = 0;
	uint64_t *b = calloc((size_t)r->n * bucket, 8);
	size_t *fill = calloc((size_t)r->n, sizeof(size_t));
	int done = 0, p;
	char end = 'e';

	if (bucket > SHMEMX_MSG_MAX / 8)
		bucket = SHMEMX_MSG_MAX / 8;
	if (!b || !fill) {
		fprintf(stderr, "shmem-gups: out of memory\n");
		shmem_global_exit(1);
	}
	for (i = 0; i < r->nupdate / (uint64_t)r->n; i++) {
		uint64_t g;

		ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
		g = ran & mask;
		p = (int)(g >> r->log_local);
		b[(size_t)p * bucket + fill[p]++] = ran;
		if (fill[p] == bucket) {
			shmemx_msg_send(p, &b[(size_t)p * bucket], bucket * 8);
			fill[p] = 0;
			if (++sent % (size_t)r->n == 0)
				shmem_quiet();
			drain(r, &done, 0);
		}
	}
	for (p = 0; p < r->n; p++) {
		if (fill[p])
			shmemx_msg_send(p, &b[(size_t)p * bucket], fill[p] * 8);
		shmemx_msg_send(p, &end, 1);
	}
	shmem_quiet();
	while (done < r->n)
		drain(r, &done, 1000);
	free(b);
	free(fill);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: shmem-gups [--impl atomic|message] [--log2-table L] [--quiet]\n"
		   "  HPCC RandomAccess over all PEs (run with rackemu shmemrun -n N, N a power of two);\n"
		   "  table of 2^L 64-bit words in total (default 16), 4 x 2^L updates.\n");
}

int main(int argc, char **argv)
{
	const char *impl = "atomic";
	int log_table = 16, i, me, n, log_n = 0, atomic;
	struct run r;
	uint64_t k, t_start, t_end, ops, span = 0, wrong = 0;
	long long ops0, ns0, act0;
	double t0, t1;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--impl") && i + 1 < argc)
			impl = argv[++i];
		else if (!strcmp(argv[i], "--log2-table") && i + 1 < argc)
			log_table = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (strcmp(impl, "atomic") && strcmp(impl, "message")) {
		fprintf(stderr, "shmem-gups: --impl must be atomic or message, not %s\n", impl);
		return 2;
	}
	atomic = !strcmp(impl, "atomic");
	shmem_init();
	me = shmem_my_pe();
	n = shmem_n_pes();
	while ((1 << log_n) < n)
		log_n++;
	if ((1 << log_n) != n || log_table < log_n + 3 || log_table > 26) {
		if (me == 0)
			fprintf(stderr, "shmem-gups: needs a power-of-two number of PEs (here %d) and %d <= --log2-table "
					"<= 26 (here %d)\n",
				n, log_n + 3, log_table);
		shmem_finalize();
		return 2;
	}
	r.me = me;
	r.n = n;
	r.log_local = log_table - log_n;
	r.local_size = 1ull << r.log_local;
	r.nupdate = 4ull << log_table;
	r.table = shmem_malloc(r.local_size * 8);
	if (!r.table) {
		fprintf(stderr, "shmem-gups: shmem_malloc of %llu bytes failed (SHMEM_SYMMETRIC_SIZE)\n",
			(unsigned long long)r.local_size * 8);
		shmem_global_exit(1);
	}
	for (k = 0; k < r.local_size; k++)
		r.table[k] = ((uint64_t)me << r.log_local) + k;
	/* The counters' baseline before the barrier: once a PE leaves it, it may update this PE's
	 * table, and those atomics must be in the phase's count (read after the barrier, they were
	 * not: unit_ops 14,447 of 16,384). */
	ops0 = shmemx_rnic_counter("amu_ops");
	ns0 = shmemx_rnic_counter("amu_modeled_ns");
	act0 = shmemx_rnic_counter("amu_active_ns");
	shmem_barrier_all();

	shmemx_model_window_reset();
	t0 = now();
	if (atomic)
		run_atomic(&r);
	else
		run_message(&r);
	shmem_barrier_all();
	t1 = now();
	shmemx_model_window(&t_start, &t_end, &ops);
	if (ops)
		span = t_end - t_start;
	shmem_uint64_put(&spans[me], &span, 1, 0);
	if (ops0 >= 0 && ns0 >= 0 && act0 >= 0) {
		uint64_t d_ops = (uint64_t)(shmemx_rnic_counter("amu_ops") - ops0);
		uint64_t d_ns = (uint64_t)(shmemx_rnic_counter("amu_modeled_ns") - ns0);
		uint64_t d_act = (uint64_t)(shmemx_rnic_counter("amu_active_ns") - act0);

		shmem_uint64_put(&unit_ops[me], &d_ops, 1, 0);
		shmem_uint64_put(&unit_ns[me], &d_ns, 1, 0);
		shmem_uint64_put(&unit_act[me], &d_act, 1, 0);
	}
	shmem_barrier_all();

	/* verification: replay with the other implementation */
	if (atomic)
		run_message(&r);
	else
		run_atomic(&r);
	shmem_barrier_all();
	for (k = 0; k < r.local_size; k++)
		wrong += r.table[k] != ((uint64_t)me << r.log_local) + k;
	shmem_long_atomic_add(&errors_total, (long)wrong, 0);
	shmem_barrier_all();
	if (me == 0) {
		double secs = t1 - t0, pct = 100.0 * (double)errors_total / (double)(1ull << log_table);
		uint64_t maxspan = 0, uops = 0, uns = 0, maxact = 0;
		char mean[32] = "na", act[32] = "na", mgups[32] = "na";

		for (i = 0; i < n; i++) {
			maxspan = spans[i] > maxspan ? spans[i] : maxspan;
			maxact = unit_act[i] > maxact ? unit_act[i] : maxact;
			uops += unit_ops[i];
			uns += unit_ns[i];
		}
		if (uops) {
			snprintf(mean, sizeof(mean), "%.1f", (double)uns / (double)uops);
			snprintf(act, sizeof(act), "%llu", (unsigned long long)maxact);
			if (maxact)
				snprintf(mgups, sizeof(mgups), "%.6f", (double)uops / (double)maxact);
		}
		printf("impl=%s pes=%d log2_table=%d table_words=%llu updates=%llu seconds=%.6f gups=%.9f "
		       "devclock_seconds=%.9f devclock_gups=%.9f unit_ops=%llu unit_mean_ns=%s "
		       "unit_active_ns=%s modeled_gups=%s errors=%ld error_pct=%.4f verify=%s native_xor=%d\n",
		       impl, n, log_table, 1ull << log_table, (unsigned long long)r.nupdate, secs,
		       (double)r.nupdate / secs / 1e9, (double)maxspan * 1e-9,
		       maxspan ? (double)r.nupdate / (double)maxspan : 0.0, (unsigned long long)uops, mean, act, mgups,
		       errors_total, pct, pct <= 1.0 ? "pass" : "fail",
		       shmemx_native_bitwise_atomics());
	}
	{
		int fail = (double)errors_total * 100.0 > (double)(1ull << log_table);

		shmem_free(r.table);
		shmem_finalize();
		return fail ? 1 : 0;
	}
}
