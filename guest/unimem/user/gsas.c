// SPDX-License-Identifier: MIT
/*
 * gsas: the GSAS environment from the command line (ExaNoDe D3.6 sec. 2; docs/gsas.md), written
 * against atomic.h like any application. `gsas --help` lists the subcommands. Output is
 * key=value lines; exit 0 on success, 1 when an operation or a check failed, 2 for a usage
 * error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "libunimem.h"
#include "rackemu/gsas_proto.h"
#include "tool.h"

static uint64_t parse_addr(const char *s)
{
	return num(s, "address", UINT64_MAX);
}

static void *gp(uint64_t a)
{
	return (void *)(uintptr_t)a;
}

/* A GSAS address computed with byte offsets, passed to the seed's typed prototypes. */
#define G(x) ((void *)(x))

/* ---- single operations ---- */

static const struct {
	const char *name;
	unsigned op, nargs;
} simple_ops[] = {
	{ "read8", GSAS_OP_READ8, 0 },   { "read32", GSAS_OP_READ32, 0 },   { "read64", GSAS_OP_READ64, 0 },
	{ "write8", GSAS_OP_WRITE8, 1 }, { "write32", GSAS_OP_WRITE32, 1 }, { "write64", GSAS_OP_WRITE64, 1 },
	{ "write128", GSAS_OP_WRITE128, 2 }, { "cas", GSAS_OP_CAS, 2 },     { "fad", GSAS_OP_FAD, 1 },
	{ "swap", GSAS_OP_SWAP, 1 },
};

/* Through the non-fatal gsas_request so that the tool reports errors instead of aborting. */
static int cmd_simple(unsigned op, unsigned nargs, int argc, char **argv)
{
	uint64_t addr, a[2] = { 0, 0 }, res = 0;
	int rc;

	if (argc != 2 + (int)nargs)
		die("%s needs ADDR%s (see --help)", argv[0], nargs == 2 ? " A B" : nargs ? " VALUE" : "");
	addr = parse_addr(argv[1]);
	for (unsigned i = 0; i < nargs; i++)
		a[i] = num(argv[2 + i], "value", UINT64_MAX);
	if (GSAS_ADDR_BOARD(addr) < 0)
		die("0x%llx is not a GSAS address (partition 0)", (unsigned long long)addr);
	rc = gsas_request(op, (uint64_t)GSAS_ADDR_BOARD(addr), addr & ~gsas_align_mask(op), a[0], a[1], &res, NULL);
	if (rc) {
		printf("error=%d reason=\"%s\"\n", rc, gsas_strerror(rc));
		return 1;
	}
	printf("value=0x%llx\n", (unsigned long long)res);
	return 0;
}

static int cmd_info(void)
{
	unsigned mif;
	uint64_t pid;
	int rc = gsas_thread_interface(&mif, &pid);

	if (rc)
		die("%s", gsas_strerror(-ENODEV));
	printf("board=%llu boards=%llu mif=%u pid=0x%012llx thread_argument=0x%llx\n",
	       (unsigned long long)getBoardPid(), (unsigned long long)getNumberBoards(), mif, (unsigned long long)pid,
	       (unsigned long long)readThreadArgument());
	return 0;
}

static int cmd_stats(void)
{
	int fd = open(GSAS_STATS_PATH, O_RDONLY | O_CLOEXEC);
	struct gsas_stats s;
	static const char *const err_names[] = { "ok", "badop", "badaddr", "perm", "nomem", "inval", "spawn", "sender" };

	if (fd < 0 || read(fd, &s, sizeof(s)) != (ssize_t)sizeof(s) || s.magic != GSAS_STATS_MAGIC) {
		printf("service=absent reason=\"no %s: gsasd never ran on this board\"\n", GSAS_STATS_PATH);
		return 1;
	}
	close(fd);
	printf("service=%s pid=%llu requests=%llu served=%llu malformed=%llu replies_dropped=%llu pages_in_use=%llu "
	       "pages_limit=%llu allocations=%llu spawned=%llu sleeps=%llu exit_notices=%llu reclaimed_pages=%llu "
	       "reply_retries=%llu replies_unsettled=%llu unsettled_at_sleep=%llu serve_ns=%llu\n",
	       s.pid && kill((pid_t)s.pid, 0) == 0 ? "running" : "stopped", (unsigned long long)s.pid,
	       (unsigned long long)s.requests, (unsigned long long)s.served, (unsigned long long)s.malformed,
	       (unsigned long long)s.replies_dropped, (unsigned long long)s.pages_in_use,
	       (unsigned long long)s.pages_limit, (unsigned long long)s.allocations, (unsigned long long)s.spawned,
	       (unsigned long long)s.sleeps, (unsigned long long)s.exit_notices,
	       (unsigned long long)s.reclaimed_pages, (unsigned long long)s.reply_retries,
	       (unsigned long long)s.replies_unsettled, (unsigned long long)s.unsettled_at_sleep,
	       (unsigned long long)s.serve_ns);
	for (unsigned e = 1; e <= GSAS_E_MAX; e++)
		printf("%srefused_%s=%llu", e > 1 ? " " : "", err_names[e], (unsigned long long)s.refused[e]);
	printf("\n");
	return 0;
}

static int cmd_alloc(int argc, char **argv)
{
	uint64_t board = getBoardPid(), pages = 1, hold = 0;
	void *p;
	int c;
	static const struct option o[] = { { "board", 1, 0, 'b' }, { "pages", 1, 0, 'p' }, { "hold", 1, 0, 'H' },
					   { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'b': board = num(optarg, "--board", 63); break;
		case 'p': pages = num(optarg, "--pages", 65535); break;
		case 'H': hold = num(optarg, "--hold", 86400); break;
		case 'h':
			printf("usage: gsas alloc [--board B] [--pages N] [--hold SECONDS]\n"
			       "allocSharedPage(N, B): prints addr=0x... (exit 1 and the reason if refused). The memory\n"
			       "belongs to this process: with --hold it stays alive that long and then frees it, so that\n"
			       "other processes can use it meanwhile.\n");
			return 0;
		default: die("see gsas alloc --help");
		}
	}
	if (!pages)
		die("--pages must be at least 1");
	p = allocSharedPage((uint16_t)pages, board);
	if (!p) {
		printf("addr=0x0 error=\"%s\"\n", strerror(errno));
		return 1;
	}
	printf("addr=0x%016llx board=%llu pages=%llu\n", (unsigned long long)(uintptr_t)p, (unsigned long long)board,
	       (unsigned long long)pages);
	fflush(stdout);
	if (hold) {
		sleep((unsigned)hold);
		freeSharedPage(p);
	}
	return 0;
}

static int cmd_free(int argc, char **argv)
{
	uint64_t r;

	if (argc != 2)
		die("usage: gsas free ADDR");
	r = freeSharedPage(gp(parse_addr(argv[1])));
	printf("error=%llu reason=\"%s\"\n", (unsigned long long)r, gsas_strerror((int)r));
	return r ? 1 : 0;
}

/* FNV-1a of a page: a short fingerprint to compare */
static uint64_t fnv(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--)
		h = (h ^ *b++) * 0x100000001b3ull;
	return h;
}

static int cmd_read4k(int argc, char **argv)
{
	char page[GSAS_PAGE_SIZE];
	uint64_t addr, res;
	int rc;

	if (argc < 2 || argc > 3)
		die("usage: gsas read4k ADDR [OUTFILE]");
	addr = parse_addr(argv[1]);
	if (GSAS_ADDR_BOARD(addr) < 0)
		die("0x%llx is not a GSAS address", (unsigned long long)addr);
	rc = gsas_request(GSAS_OP_READ4K, (uint64_t)GSAS_ADDR_BOARD(addr), addr & ~(uint64_t)(GSAS_PAGE_SIZE - 1), 0, 0,
			  &res, page);
	if (rc) {
		printf("error=%d reason=\"%s\"\n", rc, gsas_strerror(rc));
		return 1;
	}
	if (argc == 3) {
		FILE *f = fopen(argv[2], "wb");

		if (!f || fwrite(page, 1, sizeof(page), f) != sizeof(page) || fclose(f))
			die("cannot write %s: %s", argv[2], strerror(errno));
	}
	printf("bytes=%llu fnv=0x%016llx\n", (unsigned long long)res, (unsigned long long)fnv(page, sizeof(page)));
	return 0;
}

static int cmd_fork(int argc, char **argv)
{
	uint64_t board = getBoardPid(), arg = 0, pid;
	int c;
	static const struct option o[] = { { "board", 1, 0, 'b' }, { "arg", 1, 0, 'a' }, { "help", 0, 0, 'h' },
					   { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'b': board = num(optarg, "--board", 63); break;
		case 'a': arg = num(optarg, "--arg", UINT64_MAX); break;
		case 'h':
			printf("usage: gsas fork [--board B] [--arg A] PATH\n"
			       "remoteFork(PATH, A, B): prints pid=N (the process on board B) or the reason.\n");
			return 0;
		default: die("see gsas fork --help");
		}
	}
	if (optind + 1 != argc)
		die("gsas fork needs exactly one PATH");
	pid = remoteFork(argv[optind], arg, board);
	if (!pid) {
		printf("pid=0 error=\"%s\"\n", strerror(errno));
		return 1;
	}
	printf("pid=%llu board=%llu\n", (unsigned long long)pid, (unsigned long long)board);
	return 0;
}

/* Any request, exactly as given: for refused and malformed requests. */
static int cmd_raw(int argc, char **argv)
{
	uint64_t board = getBoardPid(), op = GSAS_OP_PING, addr = 0, a1 = 0, a2 = 0, res = 0;
	int c, rc;
	static const struct option o[] = { { "board", 1, 0, 'b' }, { "op", 1, 0, 'o' },   { "addr", 1, 0, 'A' },
					   { "arg1", 1, 0, '1' },  { "arg2", 1, 0, '2' }, { "help", 0, 0, 'h' },
					   { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'b': board = num(optarg, "--board", 63); break;
		case 'o': op = num(optarg, "--op", 255); break;
		case 'A': addr = num(optarg, "--addr", UINT64_MAX); break;
		case '1': a1 = num(optarg, "--arg1", UINT64_MAX); break;
		case '2': a2 = num(optarg, "--arg2", UINT64_MAX); break;
		case 'h':
			printf("usage: gsas raw [--board B] --op OPCODE [--addr A] [--arg1 X] [--arg2 Y]\n"
			       "Sends one request packet to board B's atomic service with the fields as given (no\n"
			       "alignment, no checks) and prints error=E result=R reason=...: to see how the service\n"
			       "refuses bad requests. Opcodes: rackemu/gsas_proto.h.\n");
			return 0;
		default: die("see gsas raw --help");
		}
	}
	if (op == GSAS_OP_READ4K)
		die("use gsas read4k for READ4K");
	rc = gsas_request((unsigned)op, board, addr, a1, a2, &res, NULL);
	printf("error=%d result=0x%llx reason=\"%s\"\n", rc, (unsigned long long)res, gsas_strerror(rc));
	return rc ? 1 : 0;
}

/* ---- remoteFork target ---- */

/* The argument is a GSAS address: report board, pid and the argument itself there. */
static int cmd_child(void)
{
	uint64_t arg = readThreadArgument();

	printf("argument=0x%llx board=%llu pid=%d\n", (unsigned long long)arg, (unsigned long long)getBoardPid(),
	       (int)getpid());
	fflush(stdout);
	if (arg == _EMPTY_THREAD_ARGUMENT_ || GSAS_ADDR_BOARD(arg) < 0)
		return 1;
	WRITE64(gp(arg + 8), getBoardPid());
	WRITE64(gp(arg + 16), (uint64_t)getpid());
	WRITE64(gp(arg), arg ^ 0x600dc0de600dc0deull); /* last: the parent polls this word */
	return 0;
}

/* ---- concurrency: one counter, every board ---- */

struct counter_job {
	uint64_t addr, iters, xor_old, xor_new, retries;
	unsigned op, id;
	int64_t sum;
};

static void *counter_thread(void *p)
{
	struct counter_job *j = p;

	for (uint64_t i = 0; i < j->iters; i++) {
		if (j->op == GSAS_OP_FAD) {
			FAD64(gp(j->addr), 1);
		} else if (j->op == GSAS_OP_CAS) {
			uint64_t v = READ64(gp(j->addr));

			while (!CAS64(gp(j->addr), v, v + 1)) {
				v = READ64(gp(j->addr));
				j->retries++;
			}
		} else {
			/* SWAP: every value swapped in is unique; the XOR of all values ever swapped in equals
			 * the XOR of all values swapped out and the final value (a chain: no value lost) */
			uint64_t v = ((uint64_t)getpid() << 40) | ((uint64_t)j->id << 32) | (i + 1);

			j->xor_new ^= v;
			j->xor_old ^= SWAP64(gp(j->addr), v);
		}
	}
	return NULL;
}

static int cmd_counter(int argc, char **argv)
{
	uint64_t addr = 0, iters = 100, threads = 2;
	unsigned op = GSAS_OP_FAD;
	struct counter_job jobs[64];
	pthread_t tids[64];
	uint64_t xo = 0, xn = 0, retries = 0, t0;
	int c;
	static const struct option o[] = { { "addr", 1, 0, 'A' }, { "iters", 1, 0, 'n' }, { "threads", 1, 0, 't' },
					   { "op", 1, 0, 'o' },   { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'A': addr = parse_addr(optarg); break;
		case 'n': iters = num(optarg, "--iters", 10000000); break;
		case 't': threads = num(optarg, "--threads", 63); break;
		case 'o':
			op = !strcmp(optarg, "fad") ? GSAS_OP_FAD : !strcmp(optarg, "cas") ? GSAS_OP_CAS
							 : !strcmp(optarg, "swap") ? GSAS_OP_SWAP : 0;
			if (!op)
				die("--op must be fad, cas or swap");
			break;
		case 'h':
			printf("usage: gsas counter --addr A [--op fad|cas|swap] [--threads T] [--iters N]\n"
			       "T threads each apply N operations to the 64-bit word at A: FAD64(+1), a CAS64 increment\n"
			       "loop, or SWAP64 of unique values. Prints ops=T*N and, for swap, xor_old/xor_new (the\n"
			       "XOR of the values swapped out and in) so that a test can check that no value was lost.\n");
			return 0;
		default: die("see gsas counter --help");
		}
	}
	if (!addr || !threads)
		die("gsas counter needs --addr and at least one thread");
	t0 = now_ns();
	for (unsigned i = 0; i < threads; i++) {
		jobs[i] = (struct counter_job){ .addr = addr & ~7ull, .iters = iters, .op = op, .id = i };
		if (pthread_create(&tids[i], NULL, counter_thread, &jobs[i]))
			die("cannot start thread %u", i);
	}
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(tids[i], NULL);
		xo ^= jobs[i].xor_old;
		xn ^= jobs[i].xor_new;
		retries += jobs[i].retries;
	}
	printf("ops=%llu threads=%llu cas_retries=%llu xor_old=0x%llx xor_new=0x%llx seconds=%.3f\n",
	       (unsigned long long)(threads * iters), (unsigned long long)threads, (unsigned long long)retries,
	       (unsigned long long)xo, (unsigned long long)xn, (double)(now_ns() - t0) / 1e9);
	return 0;
}

/* ---- WRITE128 / READ4K integrity ---- */

static int cmd_pairs(int argc, char **argv)
{
	uint64_t addr = 0, rounds = 50, torn = 0, checked = 0, seen_writes = 0;
	int writer = 0, c;
	static const struct option o[] = { { "addr", 1, 0, 'A' }, { "rounds", 1, 0, 'n' }, { "writer", 0, 0, 'w' },
					   { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'A': addr = parse_addr(optarg); break;
		case 'n': rounds = num(optarg, "--rounds", 10000000); break;
		case 'w': writer = 1; break;
		case 'h':
			printf("usage: gsas pairs --addr PAGE [--rounds N] [--writer]\n"
			       "The page at PAGE holds 256 pairs (x, ~x). A writer WRITE128s N rounds of new pairs into\n"
			       "every slot; a reader READ4Ks the page N times and READ64s pairs, counting pairs whose\n"
			       "halves do not match (torn=...). Start the writer first; all-zero pairs are the initial\n"
			       "state. Prints checked= torn= nonzero=; exit 1 if anything was torn.\n");
			return 0;
		default: die("see gsas pairs --help");
		}
	}
	if (!addr)
		die("gsas pairs needs --addr");
	addr &= ~(uint64_t)(GSAS_PAGE_SIZE - 1);
	for (uint64_t r = 0; r < rounds; r++) {
		if (writer) {
			for (unsigned s = 0; s < GSAS_PAGE_SIZE / 16; s += 7) {
				uint64_t x = (r + 1) * 0x9E3779B97F4A7C15ull ^ s, v[2] = { x, ~x };

				WRITE128(gp(addr + s * 16), v);
				checked++;
			}
		} else {
			uint64_t page[GSAS_PAGE_SIZE / 8];

			READ4K(gp(addr), (char *)page);
			for (unsigned s = 0; s < GSAS_PAGE_SIZE / 16; s++) {
				checked++;
				if (page[2 * s] == 0 && page[2 * s + 1] == 0)
					continue;
				seen_writes++;
				torn += page[2 * s + 1] != ~page[2 * s];
			}
		}
	}
	printf("checked=%llu torn=%llu nonzero=%llu\n", (unsigned long long)checked, (unsigned long long)torn,
	       (unsigned long long)seen_writes);
	return torn ? 1 : 0;
}

/* ---- data exactness across boards ---- */

/* The pattern word `i` of seed `seed`: distinct for every word and seed, never 0. */
static uint64_t pattern_word(uint64_t seed, unsigned i)
{
	uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 32 | i);

	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return (x ^ x >> 32) | 1;
}

struct pattern_job {
	uint64_t page, seed;
	unsigned first, step;
	int write;
	uint64_t mismatches, errors;
};

/* Words first, first + step, ... of the page: WRITE64 each (--write) and READ64 it back. */
static void *pattern_thread(void *p)
{
	struct pattern_job *j = p;
	int board = GSAS_ADDR_BOARD(j->page);

	for (unsigned i = j->first; i < GSAS_PAGE_SIZE / 8; i += j->step) {
		uint64_t a = j->page + i * 8, v = 0;

		if (j->write && gsas_request(GSAS_OP_WRITE64, (uint64_t)board, a, pattern_word(j->seed, i), 0, NULL, NULL)) {
			j->errors++;
			continue;
		}
		if (gsas_request(GSAS_OP_READ64, (uint64_t)board, a, 0, 0, &v, NULL))
			j->errors++;
		else if (v != pattern_word(j->seed, i))
			j->mismatches++;
	}
	return NULL;
}

static int cmd_pattern(int argc, char **argv)
{
	uint64_t page = 0, seed = 1, threads = 2, mismatches = 0, errors = 0;
	struct pattern_job jobs[64];
	pthread_t tids[64];
	char buf[GSAS_PAGE_SIZE];
	int write = 0, c, rc;
	static const struct option o[] = { { "addr", 1, 0, 'A' }, { "seed", 1, 0, 's' }, { "threads", 1, 0, 't' },
					   { "write", 0, 0, 'w' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'A': page = parse_addr(optarg) & ~(uint64_t)(GSAS_PAGE_SIZE - 1); break;
		case 's': seed = num(optarg, "--seed", ~0ull); break;
		case 't': threads = num(optarg, "--threads", 63); break;
		case 'w': write = 1; break;
		case 'h':
			printf("usage: gsas pattern --addr PAGE [--seed S] [--threads T] [--write]\n"
			       "Every 64-bit word of the page gets a value of its own derived from S. With --write, T\n"
			       "threads WRITE64 the words (thread k: words k, k+T, ...) and READ64 each back at once;\n"
			       "without, they only READ64 them. Then one READ4K of the page is compared word by word.\n"
			       "Prints words= mismatches= (READ64) read4k_mismatches= errors=; exit 1 on any.\n");
			return 0;
		default: die("see gsas pattern --help");
		}
	}
	if (GSAS_ADDR_BOARD(page) < 0 || !threads)
		die("gsas pattern needs --addr (a GSAS page) and at least one thread");
	for (unsigned i = 0; i < threads; i++) {
		jobs[i] = (struct pattern_job){ .page = page, .seed = seed, .first = i, .step = (unsigned)threads, .write = write };
		if (pthread_create(&tids[i], NULL, pattern_thread, &jobs[i]))
			die("cannot start thread %u", i);
	}
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(tids[i], NULL);
		mismatches += jobs[i].mismatches;
		errors += jobs[i].errors;
	}
	rc = gsas_request(GSAS_OP_READ4K, (uint64_t)GSAS_ADDR_BOARD(page), page, 0, 0, NULL, buf);
	if (rc) {
		errors++;
	} else {
		uint64_t bad = 0;

		for (unsigned i = 0; i < GSAS_PAGE_SIZE / 8; i++) {
			uint64_t v;

			memcpy(&v, buf + i * 8, 8);
			bad += v != pattern_word(seed, i);
		}
		printf("words=%u mismatches=%llu read4k_mismatches=%llu errors=%llu\n", GSAS_PAGE_SIZE / 8,
		       (unsigned long long)mismatches, (unsigned long long)bad, (unsigned long long)errors);
		return mismatches || bad || errors ? 1 : 0;
	}
	printf("words=%u mismatches=%llu read4k_mismatches=-1 errors=%llu read4k_error=\"%s\"\n", GSAS_PAGE_SIZE / 8,
	       (unsigned long long)mismatches, (unsigned long long)errors, gsas_strerror(rc));
	return 1;
}

/* ---- latency and throughput ---- */

struct bench_job {
	uint64_t addr, count, *lat;
	unsigned op;
	uint64_t done;          /* successful requests: only they count (latency, ops/s) */
	int err;                /* the first error, which stops this thread (and the others) */
	uint64_t err_ns;        /* when it was reported */
	uint64_t err_start_ns;  /* when the failing request started */
	uint64_t last_ok_ns;    /* when the last success before it returned */
	struct gsas_thread_stats stats; /* the library's counters over this thread's requests */
};

static volatile int bench_stop;

static void *bench_thread(void *p)
{
	struct bench_job *j = p;
	char page[GSAS_PAGE_SIZE];
	uint64_t res;
	int board = GSAS_ADDR_BOARD(j->addr);
	struct gsas_thread_stats before;

	gsas_get_thread_stats(&before);
	j->last_ok_ns = now_ns();
	for (uint64_t i = 0; i < j->count && !bench_stop; i++) {
		uint64_t t = now_ns();
		int rc;

		if (j->op == GSAS_OP_PING)
			rc = gsas_request(GSAS_OP_PING, (uint64_t)board, 0, 0, 0, &res, NULL);
		else
			rc = gsas_request(j->op, (uint64_t)board, j->addr, 1, 2, &res, j->op == GSAS_OP_READ4K ? page : NULL);
		if (rc) {
			/* every error of a request to a live page is unrecoverable here: stop */
			j->err = rc;
			j->err_ns = now_ns();
			j->err_start_ns = t;
			bench_stop = 1;
			break;
		}
		j->last_ok_ns = now_ns();
		j->lat[j->done++] = j->last_ok_ns - t;
	}
	gsas_get_thread_stats(&j->stats);
	j->stats.requests -= before.requests;
	j->stats.sleeps -= before.sleeps;
	j->stats.naps -= before.naps;
	j->stats.spun -= before.spun;
	j->stats.busy -= before.busy;
	j->stats.acks_seen -= before.acks_seen;
	j->stats.ack_ns -= before.ack_ns;
	return NULL;
}

static int cmd_bench(int argc, char **argv)
{
	uint64_t board = getBoardPid(), count = 200, threads = 1, *all, t0, wall;
	const char *opname = "read64";
	unsigned op = 0;
	struct bench_job jobs[64];
	pthread_t tids[64];
	void *page;
	uint64_t done = 0;
	struct gsas_thread_stats sum = { 0 };
	int c, first = -1;
	static const struct option o[] = { { "board", 1, 0, 'b' }, { "op", 1, 0, 'o' }, { "count", 1, 0, 'n' },
					   { "threads", 1, 0, 't' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };

	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'b': board = num(optarg, "--board", 63); break;
		case 'o': opname = optarg; break;
		case 'n': count = num(optarg, "--count", 1000000); break;
		case 't': threads = num(optarg, "--threads", 63); break;
		case 'h':
			printf("usage: gsas bench [--board B] [--op OP] [--threads T] [--count N]\n"
			       "T threads each issue N requests of OP (ping, read64, write64, cas, fad, swap, read4k,\n"
			       "write128) to a page this process allocates on board B, and time each one.\n"
			       "Prints op= board= threads= ops= latency_median_us= latency_p99_us= ops_per_s= failed=.\n"
			       "Stops at the first failed request (all threads); ops, latencies and ops/s count only\n"
			       "successful requests, and a failure adds error=, error_after_ms= (how long the failing\n"
			       "request took: a dead board's time to error) and since_last_ok_ms=; exit 1.\n");
			return 0;
		default: die("see gsas bench --help");
		}
	}
	for (unsigned i = 0; i < sizeof(simple_ops) / sizeof(simple_ops[0]); i++)
		if (!strcmp(opname, simple_ops[i].name))
			op = simple_ops[i].op;
	if (!strcmp(opname, "ping"))
		op = GSAS_OP_PING;
	if (!strcmp(opname, "read4k"))
		op = GSAS_OP_READ4K;
	if (!op || !threads || !count)
		die("unknown --op '%s' (or zero threads/count)", opname);
	page = allocSharedPage(1, board);
	if (!page)
		die("cannot allocate a page on board %llu: %s", (unsigned long long)board, strerror(errno));
	all = calloc(threads * count, sizeof(uint64_t));
	if (!all)
		die("out of memory");
	t0 = now_ns();
	for (unsigned i = 0; i < threads; i++) {
		jobs[i] = (struct bench_job){ .addr = (uint64_t)(uintptr_t)page, .count = count, .lat = all + i * count, .op = op };
		if (pthread_create(&tids[i], NULL, bench_thread, &jobs[i]))
			die("cannot start thread %u", i);
	}
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(tids[i], NULL);
		if (jobs[i].err && (first < 0 || jobs[i].err_ns < jobs[first].err_ns))
			first = (int)i;
	}
	wall = now_ns() - t0;
	/* compact the successful latencies of every thread */
	for (unsigned i = 0; i < threads; i++) {
		memmove(all + done, jobs[i].lat, jobs[i].done * sizeof(uint64_t));
		done += jobs[i].done;
	}
	if (first < 0)
		freeSharedPage(page);
	else
		gsas_request(GSAS_OP_FREE, board, (uint64_t)(uintptr_t)page, 0, 0, NULL, NULL); /* may fail too */
	qsort(all, done, sizeof(uint64_t), cmp_u64);
	for (unsigned i = 0; i < threads; i++) {
		sum.requests += jobs[i].stats.requests;
		sum.sleeps += jobs[i].stats.sleeps;
		sum.naps += jobs[i].stats.naps;
		sum.spun += jobs[i].stats.spun;
		sum.busy += jobs[i].stats.busy;
		sum.acks_seen += jobs[i].stats.acks_seen;
		sum.ack_ns += jobs[i].stats.ack_ns;
	}
	printf("op=%s board=%llu threads=%llu ops=%llu latency_median_us=%.1f latency_p99_us=%.1f ops_per_s=%.0f failed=%d",
	       opname, (unsigned long long)board, (unsigned long long)threads, (unsigned long long)done,
	       done ? all[done / 2] / 1e3 : 0.0, done ? all[done * 99 / 100] / 1e3 : 0.0,
	       (double)done * 1e9 / (double)wall, first >= 0);
	/* how each wait ended, per request: sleeps on the arrival interrupt, naps on the packetizer's
	 * status, answers taken while spinning; busy: refused by the service's full FIFO */
	if (sum.requests)
		printf(" sleeps_per_op=%.3f naps_per_op=%.3f spun_per_op=%.3f busy=%llu", (double)sum.sleeps / (double)sum.requests,
		       (double)sum.naps / (double)sum.requests, (double)sum.spun / (double)sum.requests,
		       (unsigned long long)sum.busy);
	/* the request's ACK, when it came before the answer: one fabric round trip to the board */
	if (sum.acks_seen)
		printf(" acks_seen=%llu ack_mean_us=%.1f", (unsigned long long)sum.acks_seen,
		       (double)sum.ack_ns / 1e3 / (double)sum.acks_seen);
	if (first >= 0)
		printf(" error=\"%s\" error_after_ms=%.1f since_last_ok_ms=%.1f", gsas_strerror(jobs[first].err),
		       (double)(jobs[first].err_ns - jobs[first].err_start_ns) / 1e6,
		       (double)(jobs[first].err_ns - jobs[first].last_ok_ns) / 1e6);
	printf("\n");
	free(all);
	return first >= 0 ? 1 : 0;
}

/* ---- checks of the API's rules and the service's refusals ---- */


static int raw(unsigned op, uint64_t board, uint64_t addr, uint64_t a1, uint64_t a2, uint64_t *res)
{
	uint64_t dummy;

	return gsas_request(op, board, addr, a1, a2, res ? res : &dummy, NULL);
}

/* In a child process (another tgid): the rc of fn, or 100 + signal. */
static int in_child(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	int st;

	if (pid == 0)
		_exit(fn(arg));
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static int child_free(void *p)
{
	return (int)freeSharedPage(p);
}

static int child_write(void *p)
{
	return raw(GSAS_OP_WRITE64, (uint64_t)GSAS_ADDR_BOARD((uint64_t)(uintptr_t)p), (uint64_t)(uintptr_t)p, 0x77, 0, NULL);
}

struct forge {
	unsigned mif, board;
};

/* Forge answers into the parent's MIF: a fake service reply with every tag, from a user PIF. */
static int child_forge(void *p)
{
	struct forge *f = p;
	struct unimem u;
	int rc = unimem_open(&u);

	if (rc || unimem_map(&u))
		return 3;
	for (unsigned tag = 0; tag < 8; tag++) {
		uint64_t w[4] = { GSAS_W0(GSAS_OP_READ64, tag), GSAS_E_OK, 0xbadbadbadull, 0 };

		if (unimem_send(&u, unimem_mif_gaddr(&u, f->board, f->mif), w, 1000000) <= 0)
			return 4;
	}
	unimem_close(&u);
	return 0;
}

static int child_read_after_fork(void *p)
{
	/* the child takes its own interfaces: its parent's cannot be used */
	return READ64(p) == 0x1234 ? 0 : 5;
}

static int cmd_check(int argc, char **argv)
{
	uint64_t board, res = 0, nb = getNumberBoards(), me = getBoardPid();
	char *p, *q;
	int rc;

	if (argc != 2)
		die("usage: gsas check BOARD");
	board = num(argv[1], "BOARD", 63);
	if (board >= nb)
		die("board %llu: this rack has %llu boards", (unsigned long long)board, (unsigned long long)nb);
	printf("board=%llu from=%llu\n", (unsigned long long)board, (unsigned long long)me);

	/* allocation, addressing (sec. 2.2.2) */
	p = allocSharedPage(2, board);
	check("alloc_two_pages", p && GSAS_ADDR_BOARD((uint64_t)(uintptr_t)p) == (int)board &&
					 ((uint64_t)(uintptr_t)p & (GSAS_PAGE_SIZE - 1)) == 0,
	      "addr=%p", (void *)p);
	if (!p)
		goto out;
	check("fresh_memory_is_zero", READ64(G(p)) == 0 && READ64(G(p + 8184)) == 0, "");
	/* every width, alignment rules of Table 1 */
	WRITE64(G(p), 0x1122334455667788ull);
	check("read8_every_byte", (uint8_t)READ8(G(p)) == 0x88 && (uint8_t)READ8(G(p + 7)) == 0x11 && (uint8_t)READ8(G(p + 3)) == 0x55,
	      " ");
	check("read32_ignores_2_bits", READ32(G(p + 4)) == 0x11223344 && READ32(G(p + 7)) == 0x11223344 && READ32(G(p + 1)) == 0x55667788,
	      " ");
	check("read64_ignores_3_bits", READ64(G(p + 5)) == 0x1122334455667788ull, "");
	WRITE8(G(p + 1), (char)0xAB);
	WRITE32(G(p + 9), 0xCAFEF00Du); /* low bits ignored: lands at p + 8 */
	check("write8_write32", READ64(G(p)) == 0x112233445566AB88ull && READ32(G(p + 8)) == 0xCAFEF00Du, "w0=0x%llx",
	      (unsigned long long)READ64(G(p)));
	{
		uint64_t v[2] = { 0x0123456789abcdefull, 0xfedcba9876543210ull };

		WRITE128(G(p + 4096 - 8), v); /* spans the two pages of one allocation */
		check("write128_across_pages_of_one_allocation",
		      READ64(G(p + 4088)) == v[0] && READ64(G(p + 4096)) == v[1], "");
	}
	check("cas_success_returns_1", CAS64(G(p + 16), 0, 5) == 1 && READ64(G(p + 16)) == 5, "");
	check("cas_failure_returns_0", CAS64(G(p + 16), 4, 9) == 0 && READ64(G(p + 16)) == 5, "");
	check("fad_returns_old_and_adds_negative", FAD64(G(p + 16), -7) == 5 && (int64_t)READ64(G(p + 16)) == -2, "");
	check("swap_returns_old", SWAP64(G(p + 16), 42) == (uint64_t)-2 && READ64(G(p + 16)) == 42, "");
	/* READ4K: the whole page, the seed's sentinel value included */
	{
		char page[GSAS_PAGE_SIZE];

		WRITE64(G(p + 24), _EMPTY_THREAD_ARGUMENT_);
		WRITE64(G(p + 32), VMBOX_EMPTY_PATTERN);
		WRITE64(G(p + 4080), 0x5a5a5a5a5a5a5a5aull);
		memset(page, 0x11, sizeof(page));
		check("read4k_returns_4096", READ4K(G(p + 100), page) == GSAS_PAGE_SIZE, "");
		check("read4k_content", ((uint64_t *)page)[0] == 0x112233445566AB88ull &&
						 ((uint64_t *)page)[3] == _EMPTY_THREAD_ARGUMENT_ &&
						 ((uint64_t *)page)[4] == VMBOX_EMPTY_PATTERN &&
						 ((uint64_t *)page)[510] == 0x5a5a5a5a5a5a5a5aull && ((uint64_t *)page)[100] == 0,
		      "w0=0x%llx w3=0x%llx", (unsigned long long)((uint64_t *)page)[0],
		      (unsigned long long)((uint64_t *)page)[3]);
	}

	/* refusals: every one answered with an error code, none kills the service */
	rc = raw(GSAS_OP_READ64, board, (uint64_t)(uintptr_t)p + 2 * GSAS_PAGE_SIZE, 0, 0, NULL);
	check("guard_page_after_allocation_badaddr", rc == GSAS_E_BADADDR, "rc=%d", rc);
	rc = raw(GSAS_OP_WRITE128, board, (uint64_t)(uintptr_t)p + 2 * GSAS_PAGE_SIZE - 8, 1, 2, NULL);
	check("write128_past_allocation_end_badaddr", rc == GSAS_E_BADADDR, "rc=%d", rc);
	rc = raw(GSAS_OP_READ64, board, GSAS_ADDR((board + 1) % nb, GSAS_ADDR_LOCAL((uint64_t)(uintptr_t)p)), 0, 0, NULL);
	check("other_partition_badaddr", nb == 1 || rc == GSAS_E_BADADDR, "rc=%d", rc);
	rc = raw(GSAS_OP_READ64, board, 0, 0, 0, NULL);
	check("null_badaddr", rc == GSAS_E_BADADDR, "rc=%d", rc);
	rc = raw(0x55, board, (uint64_t)(uintptr_t)p, 0, 0, NULL);
	check("unknown_opcode_badop", rc == GSAS_E_BADOP, "rc=%d", rc);
	rc = raw(GSAS_OP_DATA, board, (uint64_t)(uintptr_t)p, 0, 0, NULL);
	check("data_opcode_as_request_badop", rc == GSAS_E_BADOP, "rc=%d", rc);
	rc = raw(GSAS_OP_WRITE8, board, (uint64_t)(uintptr_t)p, 0x1ff, 0, NULL);
	check("write8_value_too_wide_inval", rc == GSAS_E_INVAL && (uint8_t)READ8(G(p)) == 0x88, "rc=%d", rc);
	rc = raw(GSAS_OP_WRITE32, board, (uint64_t)(uintptr_t)p, 1ull << 32, 0, NULL);
	check("write32_value_too_wide_inval", rc == GSAS_E_INVAL, "rc=%d", rc);
	rc = raw(GSAS_OP_ALLOC, board, 0, 0, 0, &res);
	check("alloc_zero_pages_inval", rc == GSAS_E_INVAL && res == 0, "rc=%d", rc);
	errno = 0;
	q = allocSharedPage(65535, board);
	check("alloc_beyond_limit_null_enomem", q == NULL && errno == ENOMEM, "q=%p errno=%d", (void *)q, errno);
	rc = raw(GSAS_OP_FREE, board, (uint64_t)(uintptr_t)p + GSAS_PAGE_SIZE, 0, 0, NULL);
	check("free_not_an_allocation_start_badaddr", rc == GSAS_E_BADADDR, "rc=%d", rc);
	rc = in_child(child_free, p);
	check("free_by_another_process_perm", rc == GSAS_E_PERM, "rc=%d", rc);
	rc = in_child(child_write, p + 64);
	check("shared_memory_writable_by_another_process", rc == 0 && READ64(G(p + 64)) == 0x77, "rc=%d", rc);
	WRITE64(G(p + 72), 0x1234);
	rc = in_child(child_read_after_fork, p + 72);
	check("fork_child_takes_its_own_interfaces", rc == 0, "rc=%d", rc);
	errno = 0;
	check("remotefork_empty_path_refused", remoteFork("", 1, board) == 0 && errno == EINVAL, "errno=%d", errno);
	/* a relative path is resolved against the caller's working directory (docs/gsas.md): the
	 * board answers for /no/such/program, not the library for a relative path */
	errno = 0;
	check("remotefork_relative_path_resolved", chdir("/") == 0 && remoteFork("no/such/program", 1, board) == 0 &&
							   errno == ENOENT, "errno=%d", errno);
	errno = 0;
	check("remotefork_empty_argument_refused", remoteFork("/bin/gsas", _EMPTY_THREAD_ARGUMENT_, board) == 0 &&
							   errno == EINVAL, "errno=%d", errno);
	errno = 0;
	check("remotefork_missing_program_enoent", remoteFork("/no/such/program", 1, board) == 0 && errno == ENOENT,
	      "errno=%d", errno);
	errno = 0;
	check("remotefork_directory_eacces", remoteFork("/tmp", 1, board) == 0 && errno == EACCES, "errno=%d", errno);
	{
		char longpath[_MAX_FORK_PATH_FILENAME_ + 8];

		memset(longpath, 'a', sizeof(longpath));
		longpath[0] = '/';
		longpath[sizeof(longpath) - 1] = 0;
		errno = 0;
		check("remotefork_path_too_long", remoteFork(longpath, 1, board) == 0 && errno == ENAMETOOLONG, "errno=%d",
		      errno);
	}
	/* a path page without a terminating NUL, sent by hand */
	q = allocSharedPage(1, board);
	if (q) {
		for (unsigned off = 0; off < GSAS_PAGE_SIZE; off += 8)
			WRITE64(G(q + off), 0x2f2f2f2f2f2f2f2full);
		rc = raw(GSAS_OP_FORK, board, (uint64_t)(uintptr_t)q, 1, 0, NULL);
		check("fork_unterminated_path_inval", rc == GSAS_E_INVAL, "rc=%d", rc);
		freeSharedPage(q);
		rc = raw(GSAS_OP_READ64, board, (uint64_t)(uintptr_t)q, 0, 0, NULL);
		check("use_after_free_badaddr", rc == GSAS_E_BADADDR, "rc=%d", rc);
	}
	/* forged answers: another process writes fake service replies into this thread's MIF */
	{
		struct forge f = { 0, (unsigned)me };
		struct gsas_thread_stats before, after;
		uint64_t pid;

		gsas_thread_interface(&f.mif, &pid);
		gsas_get_thread_stats(&before);
		rc = in_child(child_forge, &f);
		WRITE64(G(p + 80), 0x600d);
		check("forged_replies_ignored", rc == 0 && READ64(G(p + 80)) == 0x600d, "rc=%d", rc);
		gsas_get_thread_stats(&after);
		check("forged_replies_counted", after.forged - before.forged == 8, "forged=%llu",
		      (unsigned long long)(after.forged - before.forged));
	}
	rc = raw(GSAS_OP_PING, board, 0, 0, 0, &res);
	check("service_alive_after_refusals", rc == 0 && res > 0, "rc=%d requests=%llu", rc, (unsigned long long)res);
	check("free", freeSharedPage(p) == 0, "");
	rc = raw(GSAS_OP_READ64, board, (uint64_t)(uintptr_t)p, 0, 0, NULL);
	check("read_after_free_badaddr", rc == GSAS_E_BADADDR, "rc=%d", rc);
out:
	return check_summary();
}

static void usage(void)
{
	printf("usage: gsas COMMAND [ARGS]   (the GSAS environment, ExaNoDe D3.6 sec. 2; docs/gsas.md)\n"
	       "\n"
	       "  info                         this board, the number of boards, this thread's MIF and PID\n"
	       "  stats                        this board's atomic service counters (gsasd)\n"
	       "  alloc [--board B] [--pages N] [--hold S]   allocSharedPage; prints addr=\n"
	       "  free ADDR                    freeSharedPage\n"
	       "  read8|read32|read64 ADDR     print value=\n"
	       "  write8|write32|write64 ADDR VALUE, write128 ADDR LO HI\n"
	       "  cas ADDR OLD NEW, fad ADDR ADDEND, swap ADDR VALUE   print value= (the old value)\n"
	       "  read4k ADDR [OUTFILE]        the page, atomically; prints bytes= fnv=\n"
	       "  fork [--board B] [--arg A] PATH   remoteFork; prints pid=\n"
	       "  child                        a remoteFork target: writes its argument back (see docs)\n"
	       "  raw --op OPCODE [--board B] [--addr A] [--arg1 X] [--arg2 Y]   one request as given\n"
	       "  counter --addr A [--op fad|cas|swap] [--threads T] [--iters N]   concurrent updates\n"
	       "  pairs --addr PAGE [--rounds N] [--writer]   WRITE128/READ4K atomicity\n"
	       "  pattern --addr PAGE [--seed S] [--threads T] [--write]   every word exact (READ64, READ4K)\n"
	       "  bench [--board B] [--op OP] [--threads T] [--count N]   latency and throughput\n"
	       "  check BOARD                  the API's rules and the service's refusals, one line each\n"
	       "\n"
	       "Failing reads and writes print error= and the reason instead of aborting as atomic.h's\n"
	       "functions do. Environment: GSAS_TIMEOUT_MS (default 10000), GSAS_SPIN_US (default 200),\n"
	       "GSAS_ACK_FIRST=1 (A/B measurements: wait for the ACK of a request before its answer).\n");
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');

	tool_prog = "gsas";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(base ? base + 1 : argv[0], "gsas-child"))
		return cmd_child(); /* remoteFork runs a program without arguments */
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	argc--;
	argv++;
	for (unsigned i = 0; i < sizeof(simple_ops) / sizeof(simple_ops[0]); i++)
		if (!strcmp(argv[0], simple_ops[i].name))
			return cmd_simple(simple_ops[i].op, simple_ops[i].nargs, argc, argv);
	if (!strcmp(argv[0], "info")) return cmd_info();
	if (!strcmp(argv[0], "stats")) return cmd_stats();
	if (!strcmp(argv[0], "alloc")) return cmd_alloc(argc, argv);
	if (!strcmp(argv[0], "free")) return cmd_free(argc, argv);
	if (!strcmp(argv[0], "read4k")) return cmd_read4k(argc, argv);
	if (!strcmp(argv[0], "fork")) return cmd_fork(argc, argv);
	if (!strcmp(argv[0], "child")) return cmd_child();
	if (!strcmp(argv[0], "raw")) return cmd_raw(argc, argv);
	if (!strcmp(argv[0], "counter")) return cmd_counter(argc, argv);
	if (!strcmp(argv[0], "pairs")) return cmd_pairs(argc, argv);
	if (!strcmp(argv[0], "pattern")) return cmd_pattern(argc, argv);
	if (!strcmp(argv[0], "bench")) return cmd_bench(argc, argv);
	if (!strcmp(argv[0], "check")) return cmd_check(argc, argv);
	die("unknown command '%s' (see gsas --help)", argv[0]);
}
