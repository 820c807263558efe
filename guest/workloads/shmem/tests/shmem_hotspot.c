/* SPDX-License-Identifier: MIT */
/*
 * shmem-hotspot: the atomic hot-spot benchmark of the NIC-atomics paper sec. IV on N PEs: PEs 1..N-1 each issue
 * --ops (1000) atomic operations to PE 0, all on one address (--pattern single) or each on 16
 * addresses of its own (--pattern unique16: (N-1) x 16 targets), then synchronise. The operation
 * (--op) is a non-fetching add (default: posted, up to 1024 in flight per PE), a fetching add
 * (one at a time) or an XOR.
 *
 * PE 0 prints one line: pattern op pes ops_per_pe total_ops seconds rate_mops mbytes_s
 * devclock_seconds devclock_mops unit_ops unit_mean_ns errors, then `target_<counter>=delta`
 * of its RNIC's counters that changed. Wall: barrier to barrier in the guest. devclock: the longest
 * span of a source PE's RNIC clock between its first doorbell and last completion (QEMU's virtual
 * clock plus modeled latencies: under TCG it tracks the wall time). unit_ops, unit_mean_ns: the
 * atomics the target's atomic unit executed and their mean modeled time from arrival to execution
 * (counters amu_ops, amu_modeled_ns; `na` without them); unit_active_ns: the target unit's modeled
 * busy time (amu_active_ns: idle gaps between arrivals excluded) and modeled_mbytes_s = 8 bytes x
 * unit_ops / unit_active_ns, the unit's own modeled rate as fed by this run. MB/s counts 8 bytes per update (the
 * paper's unit). errors: target words whose final value is not the exact expected one (0 or the
 * run failed: exit status 1).
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_COUNTERS 256

static uint64_t words[64 * 16];
static uint64_t spans[64];

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	const char *pattern = "single", *op = "add";
	long ops = 1000, k;
	int i, me, n, unique, bad = 0, nc = 0;
	uint64_t before[MAX_COUNTERS], after[MAX_COUNTERS], t_start, t_end, done, span = 0;
	double t0, t1;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--pattern") && i + 1 < argc)
			pattern = argv[++i];
		else if (!strcmp(argv[i], "--op") && i + 1 < argc)
			op = argv[++i];
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			ops = atol(argv[++i]);
		else if (!strcmp(argv[i], "--help")) {
			printf("usage: shmem-hotspot [--pattern single|unique16] [--op add|fetch_add|xor] [--ops K]\n"
			       "  PEs 1..N-1 each send K atomics to PE 0 (run with rackemu shmemrun -n N, N >= 2)\n");
			return 0;
		} else {
			bad = 1;
		}
	}
	unique = !strcmp(pattern, "unique16");
	if (bad || (!unique && strcmp(pattern, "single")) ||
	    (strcmp(op, "add") && strcmp(op, "fetch_add") && strcmp(op, "xor")) || ops < 1 || ops > 10000000) {
		fprintf(stderr, "shmem-hotspot: bad arguments (see --help)\n");
		return 2;
	}
	shmem_init();
	me = shmem_my_pe();
	n = shmem_n_pes();
	if (n < 2) {
		fprintf(stderr, "shmem-hotspot: needs at least 2 PEs\n");
		shmem_finalize();
		return 2;
	}
	if (me == 0)
		nc = shmemx_rnic_counters(before, MAX_COUNTERS);
	shmem_barrier_all();
	shmemx_model_window_reset();
	t0 = now();
	if (me != 0) {
		for (k = 0; k < ops; k++) {
			uint64_t *w = unique ? &words[me * 16 + k % 16] : &words[0];
			uint64_t v = !strcmp(op, "xor") ? 1ull << (k % 64) : 1;

			if (!strcmp(op, "add"))
				shmem_uint64_atomic_add(w, v, 0);
			else if (!strcmp(op, "fetch_add"))
				shmem_uint64_atomic_fetch_add(w, v, 0);
			else
				shmem_uint64_atomic_xor(w, v, 0);
		}
		shmem_quiet();
	}
	shmem_barrier_all();
	t1 = now();
	shmemx_model_window(&t_start, &t_end, &done);
	if (done)
		span = t_end - t_start;
	shmem_uint64_put(&spans[me], &span, 1, 0);
	shmem_barrier_all();
	if (me == 0) {
		long errors = 0, total = (long)(n - 1) * ops;
		uint64_t maxspan = 0;
		double secs = t1 - t0;

		for (i = 1; i < n; i++)
			maxspan = spans[i] > maxspan ? spans[i] : maxspan;
		/* the exact expected values */
		if (!strcmp(op, "xor")) {
			for (i = unique ? 1 : 0; i < (unique ? n : 1); i++)
				for (int a = 0; a < (unique ? 16 : 1); a++) {
					uint64_t want = 0;

					for (k = 0; k < ops; k++)
						if (!unique || k % 16 == a)
							want ^= 1ull << (k % 64);
					if (!unique) {
						uint64_t w1 = want;

						want = 0;
						for (int p = 1; p < n; p++)
							want ^= w1;
					}
					errors += words[unique ? i * 16 + a : 0] != want;
				}
		} else if (unique) {
			for (i = 1; i < n; i++)
				for (int a = 0; a < 16; a++)
					errors += words[i * 16 + a] != (uint64_t)(ops / 16 + (a < ops % 16));
		} else {
			errors += words[0] != (uint64_t)total;
		}
		{
			char mean[32] = "na", act[32] = "na", mrate[32] = "na";
			long long uo = -1, um = -1, ua = -1;
			uint64_t dops = 0;

			for (i = 0; i < nc; i++) {
				if (!strcmp(shmemx_rnic_counter_name(i), "amu_ops"))
					uo = i;
				if (!strcmp(shmemx_rnic_counter_name(i), "amu_modeled_ns"))
					um = i;
				if (!strcmp(shmemx_rnic_counter_name(i), "amu_active_ns"))
					ua = i;
			}
			shmemx_rnic_counters(after, MAX_COUNTERS);
			if (uo >= 0 && um >= 0 && after[uo] > before[uo]) {
				dops = after[uo] - before[uo];
				snprintf(mean, sizeof(mean), "%.1f", (double)(after[um] - before[um]) / (double)dops);
			}
			if (dops && ua >= 0 && after[ua] > before[ua]) {
				snprintf(act, sizeof(act), "%llu", (unsigned long long)(after[ua] - before[ua]));
				snprintf(mrate, sizeof(mrate), "%.3f", (double)dops * 8e3 / (double)(after[ua] - before[ua]));
			}
			printf("pattern=%s op=%s pes=%d ops_per_pe=%ld total_ops=%ld seconds=%.6f rate_mops=%.4f "
			       "mbytes_s=%.3f devclock_seconds=%.9f devclock_mops=%.3f unit_ops=%llu unit_mean_ns=%s "
			       "unit_active_ns=%s modeled_mbytes_s=%s errors=%ld native_xor=%d\n",
			       pattern, op, n, ops, total, secs, (double)total / secs / 1e6, (double)total * 8 / secs / 1e6,
			       (double)maxspan * 1e-9, maxspan ? (double)total / (double)maxspan * 1e3 : 0.0,
			       (unsigned long long)dops, mean, act, mrate, errors, shmemx_native_bitwise_atomics());
		}
		if (nc > 0)
			for (i = 0; i < nc; i++)
				if (after[i] != before[i])
					printf("target_%s=%llu\n", shmemx_rnic_counter_name(i),
					       (unsigned long long)(after[i] - before[i]));
		bad = errors != 0;
	}
	shmem_finalize();
	return bad;
}
