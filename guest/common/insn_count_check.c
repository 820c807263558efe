// SPDX-License-Identifier: MIT
/*
 * insn-count-check: known instruction counts between instruction-count marks, for testing the
 * rk_insn TCG plugin (docs/insn-count.md) and measuring its overhead.
 *
 *   insn-count-check [--iters N] [--reps R] [--threads T]
 *       T threads (default: one per vCPU), each pinned to its vCPU, run R times (default 10):
 *       loop A, N iterations of 2 instructions (subs, b.ne) in phase RK_PH_CHECK_A, then loop B,
 *       N iterations of 3 instructions (add, subs, b.ne) in phase RK_PH_CHECK_B. Each loop is
 *       one asm block with its marks, so the compiler adds nothing: phase A counts exactly
 *       1 + 2N per run (its opening mark included), phase B 1 + 3N. Then the memory side, one
 *       asm block: phase RK_PH_CHECK_MEM_STREAM loads one word of each 64-byte line of a 64 KiB
 *       buffer, twice over (2048 loads, 1024 distinct lines, and 2048 misses of the plugin's
 *       32 KiB 2-way LRU L1d model: each set sees 4 lines in turn); phase RK_PH_CHECK_MEM_REUSE
 *       loads, then stores, then loads one word of each line of an 8 KiB buffer (256 loads, 128
 *       stores, 128 lines, 128 misses: the stream evicted it, then it stays). Marks reset the
 *       counters first and dump them at the end. Prints, per vCPU, what the plugin must report.
 *       Nothing else of this process runs at user level inside a phase: the workers start when
 *       the main thread sleeps in pthread_join (after it created them all), and none exits
 *       (waking the main thread) before every worker is done.
 *   insn-count-check --spin N
 *       N iterations of an unmarked loop of 4 instructions, timed: the plugin's overhead on
 *       user code with no phase active (run with and without the plugin).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rackemu/insn_mark.h"
#include "tool.h"

static const char usage[] = "usage: insn-count-check [--iters N] [--reps R] [--threads T] | --spin N\n"
			    "  runs loops of known instruction counts between instruction-count marks and\n"
			    "  prints the counts the rk_insn plugin must report (docs/insn-count.md);\n"
			    "  --spin N: time N iterations of an unmarked 4-instruction loop (plugin overhead)\n";

static uint64_t iters = 100000, reps = 10;
static long ncpu;
static pid_t main_tid;
static int all_created; /* set by the main thread once it created every worker */
static pthread_barrier_t done;

struct worker {
	pthread_t t;
	unsigned vcpu;
	uint64_t sink;
	uint8_t *stream, *reuse; /* STREAM_LINES and REUSE_LINES 64-byte lines, 64-byte aligned */
};

#define STREAM_LINES 1024 /* 64 KiB: twice the L1d model */
#define REUSE_LINES  128  /* 8 KiB */
/* instructions of the memory phases: the mark, then per pass 2 movs and 3 per line */
#define STREAM_INSNS (1 + 2 * (2 + 3 * STREAM_LINES))
#define REUSE_INSNS  (1 + 3 * (2 + 3 * REUSE_LINES))

/*
 * The main thread's state letter from /proc ('S': asleep), or 0 when it cannot be read. Once
 * all_created is set, the main thread's only sleep is pthread_join.
 */
static char main_state(void)
{
	char path[64], buf[512], *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)main_tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/*
 * Start when the main thread is asleep in pthread_join: its thread creation and join would
 * otherwise run on a worker's vCPU inside the worker's first phase and add to its count (seen
 * as +338 instructions in phase A under load). Gives up after 10 s (the counts may then show it).
 */
static void wait_for_the_main_thread(void)
{
	for (int i = 0; i < 50000; i++) {
		if (__atomic_load_n(&all_created, __ATOMIC_ACQUIRE) && main_state() == 'S')
			return;
		usleep(200);
	}
	fprintf(stderr, "insn-count-check: the main thread did not go to sleep in 10 s; starting anyway\n");
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(w->vcpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("cannot pin to vCPU %u", w->vcpu);
	wait_for_the_main_thread();
	for (uint64_t r = 0; r < reps; r++) {
		uint64_t n = iters, acc = 0;
		uint8_t *p;

		__asm__ volatile("hint %2\n"
				 "1: subs %0, %0, #1\n"
				 "b.ne 1b\n"
				 "hint %3\n"
				 : "+r"(n), "+r"(acc)
				 : "i"(RK_MARK_HINT_FIRST + RK_PH_CHECK_A), "i"(RK_MARK_HINT_FIRST + RK_PH_NONE)
				 : "cc", "memory");
		n = iters;
		__asm__ volatile("hint %2\n"
				 "1: add %1, %1, #3\n"
				 "subs %0, %0, #1\n"
				 "b.ne 1b\n"
				 "hint %3\n"
				 : "+r"(n), "+r"(acc)
				 : "i"(RK_MARK_HINT_FIRST + RK_PH_CHECK_B), "i"(RK_MARK_HINT_FIRST + RK_PH_NONE)
				 : "cc", "memory");
		w->sink += acc;
		/* the memory side: known loads, stores, lines and L1d-model misses (above) */
		__asm__ volatile("hint %[ms]\n"
				 "mov %[p], %[s]\n"
				 "mov %[n], %[sl]\n"
				 "1: ldr %[t], [%[p]], #64\n"
				 "subs %[n], %[n], #1\n"
				 "b.ne 1b\n"
				 "mov %[p], %[s]\n"
				 "mov %[n], %[sl]\n"
				 "2: ldr %[t], [%[p]], #64\n"
				 "subs %[n], %[n], #1\n"
				 "b.ne 2b\n"
				 "hint %[mr]\n"
				 "mov %[p], %[r]\n"
				 "mov %[n], %[rl]\n"
				 "3: ldr %[t], [%[p]], #64\n"
				 "subs %[n], %[n], #1\n"
				 "b.ne 3b\n"
				 "mov %[p], %[r]\n"
				 "mov %[n], %[rl]\n"
				 "4: str %[t], [%[p]], #64\n"
				 "subs %[n], %[n], #1\n"
				 "b.ne 4b\n"
				 "mov %[p], %[r]\n"
				 "mov %[n], %[rl]\n"
				 "5: ldr %[t], [%[p]], #64\n"
				 "subs %[n], %[n], #1\n"
				 "b.ne 5b\n"
				 "hint %[none]\n"
				 : [p] "=&r"(p), [n] "=&r"(n), [t] "=&r"(acc)
				 : [s] "r"(w->stream), [r] "r"(w->reuse), [sl] "i"(STREAM_LINES), [rl] "i"(REUSE_LINES),
				   [ms] "i"(RK_MARK_HINT_FIRST + RK_PH_CHECK_MEM_STREAM),
				   [mr] "i"(RK_MARK_HINT_FIRST + RK_PH_CHECK_MEM_REUSE),
				   [none] "i"(RK_MARK_HINT_FIRST + RK_PH_NONE)
				 : "cc", "memory");
		w->sink += acc;
	}
	pthread_barrier_wait(&done);
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "iters", 1, 0, 'i' }, { "reps", 1, 0, 'r' }, { "threads", 1, 0, 't' },
					      { "spin", 1, 0, 's' },  { "help", 0, 0, 'h' }, { 0 } };
	struct worker ws[64];
	uint64_t spin = 0;
	unsigned threads;
	int opt;

	tool_prog = "insn-count-check";
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	threads = ncpu > 0 ? (unsigned)ncpu : 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': iters = num(optarg, "--iters", 1ull << 40); break;
		case 'r': reps = num(optarg, "--reps", 1000000); break;
		case 't': threads = (unsigned)num(optarg, "--threads", 64); break;
		case 's': spin = num(optarg, "--spin", 1ull << 40); break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad_option(opt, argv, "insn-count-check --help");
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (insn-count-check --help)", argv[optind]);
	if (!iters || !reps || !threads)
		die("--iters, --reps and --threads must be at least 1");
	if (spin) {
		uint64_t n = spin, acc = 0, t0 = now_ns();

		__asm__ volatile("1: add %1, %1, %0\n"
				 "eor %1, %1, #1\n"
				 "subs %0, %0, #1\n"
				 "b.ne 1b\n"
				 : "+r"(n), "+r"(acc)
				 :
				 : "cc");
		printf("spin iters=%llu insns=%llu ns=%llu sink=%llu\n", (unsigned long long)spin,
		       (unsigned long long)(4 * spin), (unsigned long long)(now_ns() - t0), (unsigned long long)acc);
		return 0;
	}
	if (threads > 64)
		threads = 64;
	main_tid = (pid_t)syscall(SYS_gettid);
	pthread_barrier_init(&done, NULL, threads);
	for (unsigned i = 0; i < threads; i++) {
		ws[i].vcpu = i % (unsigned)(ncpu > 0 ? ncpu : 1);
		ws[i].sink = 0;
		/* allocated and written before the measurement: no page fault inside a phase */
		ws[i].stream = aligned_alloc(64, STREAM_LINES * 64);
		ws[i].reuse = aligned_alloc(64, REUSE_LINES * 64);
		if (!ws[i].stream || !ws[i].reuse)
			die("out of memory");
		memset(ws[i].stream, 1, STREAM_LINES * 64);
		memset(ws[i].reuse, 2, REUSE_LINES * 64);
	}
	RK_MARK_RESET();
	for (unsigned i = 0; i < threads; i++)
		if (pthread_create(&ws[i].t, NULL, worker_main, &ws[i]))
			die("cannot create thread %u", i);
	__atomic_store_n(&all_created, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < threads; i++)
		pthread_join(ws[i].t, NULL);
	pthread_barrier_destroy(&done);
	RK_MARK_DUMP();
	/* what the plugin must report: per vCPU, the threads pinned there run reps x each loop */
	for (unsigned c = 0; c < (unsigned)(ncpu > 0 ? ncpu : 1) && c < threads; c++) {
		uint64_t runs = reps * ((threads - c + (unsigned)ncpu - 1) / (unsigned)ncpu);

		printf("expect vcpu=%u phase=%d insns=%llu entries=%llu min=%llu max=%llu\n", c, RK_PH_CHECK_A,
		       (unsigned long long)(runs * (1 + 2 * iters)), (unsigned long long)runs,
		       (unsigned long long)(1 + 2 * iters), (unsigned long long)(1 + 2 * iters));
		printf("expect vcpu=%u phase=%d insns=%llu entries=%llu min=%llu max=%llu\n", c, RK_PH_CHECK_B,
		       (unsigned long long)(runs * (1 + 3 * iters)), (unsigned long long)runs,
		       (unsigned long long)(1 + 3 * iters), (unsigned long long)(1 + 3 * iters));
		printf("expect vcpu=%u phase=%d insns=%llu entries=%llu min=%llu max=%llu loads=%llu stores=0 "
		       "lines=%llu misses=%llu\n",
		       c, RK_PH_CHECK_MEM_STREAM, (unsigned long long)(runs * STREAM_INSNS), (unsigned long long)runs,
		       (unsigned long long)STREAM_INSNS, (unsigned long long)STREAM_INSNS,
		       (unsigned long long)(runs * 2 * STREAM_LINES), (unsigned long long)(runs * STREAM_LINES),
		       (unsigned long long)(runs * 2 * STREAM_LINES));
		printf("expect vcpu=%u phase=%d insns=%llu entries=%llu min=%llu max=%llu loads=%llu stores=%llu "
		       "lines=%llu misses=%llu\n",
		       c, RK_PH_CHECK_MEM_REUSE, (unsigned long long)(runs * REUSE_INSNS), (unsigned long long)runs,
		       (unsigned long long)REUSE_INSNS, (unsigned long long)REUSE_INSNS,
		       (unsigned long long)(runs * 2 * REUSE_LINES), (unsigned long long)(runs * REUSE_LINES),
		       (unsigned long long)(runs * REUSE_LINES), (unsigned long long)(runs * REUSE_LINES));
	}
	return 0;
}
