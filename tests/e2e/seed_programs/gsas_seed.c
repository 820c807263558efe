/* SPDX-License-Identifier: MIT */
/*
 * A program written against ExaNoDe D3.6 sec. 2.3 as the deliverable prints it: besides including
 * atomic.h it declares the API's prototypes itself, verbatim (typed pointers: char *, uint64_t *,
 * int64_t *; remoteFork takes a char *), as code copied from the document would. It must
 * compile with -Werror against rackemu's atomic.h and run on a booted cluster
 * (tests/e2e/test_unimem_seed_api.py).
 *
 *   gsas_seed api BOARD         every call of sec. 2.3 on board BOARD; key=value lines, exit 0 if
 *                               all results are the seed's
 *   gsas_seed threads N BOARD [HOLD_MS]
 *                               N threads, each holding its own interfaces at the same time (sec.
 *                               2.2.3: at most 63 per board), FAD64 one counter on BOARD; with
 *                               HOLD_MS they hold them that long before their increments
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"

/* sec. 2.3.1 - 2.3.5, verbatim */
uint64_t getNumberBoards(void);
uint64_t getBoardPid(void);
void *allocSharedPage(uint16_t quantity, uint64_t bid);
uint64_t freeSharedPage(void *addr);
char READ8(char *addr);
uint32_t READ32(uint64_t *addr);
uint64_t READ64(uint64_t *addr);
uint64_t READ4K(void *addr, char *buffer);
void WRITE8(char *addr, char val);
void WRITE32(uint32_t *addr, uint32_t val);
void WRITE64(uint64_t *addr, uint64_t val);
void WRITE128(uint64_t *addr, uint64_t val[2]);
uint64_t CAS64(uint64_t *addr, uint64_t old_val, uint64_t new_val);
int64_t FAD64(int64_t *addr, int64_t val);
uint64_t SWAP64(uint64_t *addr, uint64_t val);
uint64_t remoteFork(char *filename, uint64_t arg, uint64_t bid);
uint64_t readThreadArgument(void);

static int failed;

static void expect(const char *what, int ok)
{
	printf("check=%s ok=%d\n", what, ok);
	failed += !ok;
}

static int api(uint64_t board)
{
	uint64_t *page = allocSharedPage(2, board);
	char *bytes = (char *)page;
	char buffer[4096];
	uint64_t pair[2] = { 0x1111222233334444ull, 0x5555666677778888ull };
	uint64_t *ret;

	printf("boards=%llu board=%llu page=%p\n", (unsigned long long)getNumberBoards(),
	       (unsigned long long)getBoardPid(), (void *)page);
	expect("alloc", page != NULL);
	if (!page)
		return 1;
	WRITE64(page, 0x0102030405060708ull);
	expect("write64_read64", READ64(page) == 0x0102030405060708ull);
	expect("read8", READ8(bytes + 1) == 0x07);
	expect("read32", READ32(page) == 0x05060708u);
	WRITE8(bytes + 2, 0x55);
	WRITE32((uint32_t *)(page + 1), 0xa5a5a5a5u);
	expect("write8_write32", READ64(page) == 0x0102030405550708ull && READ32(page + 1) == 0xa5a5a5a5u);
	WRITE128(page + 2, pair);
	expect("write128", READ64(page + 2) == pair[0] && READ64(page + 3) == pair[1]);
	expect("cas64", CAS64(page, 0x0102030405550708ull, 7) == 1 && CAS64(page, 8, 9) == 0 && READ64(page) == 7);
	expect("fad64", FAD64((int64_t *)page, -10) == 7 && (int64_t)READ64(page) == -3);
	expect("swap64", SWAP64(page, 42) == (uint64_t)-3 && READ64(page) == 42);
	expect("read4k", READ4K(page, buffer) == 4096 && ((uint64_t *)buffer)[3] == pair[1]);
	/* sec. 2.4.2: a shared array of pointers to shared arrays */
	WRITE64(page + 512, (uint64_t)(uintptr_t)(page + 8));
	WRITE64(page + 13, 99);
	ret = (uint64_t *)READ64(page + 512);
	expect("double_pointer", READ64(ret + 5) == 99);
	/* sec. 2.3.5 with a relative path: resolved against this process's working directory; the
	 * child writes arg ^ 0x600dc0de600dc0de to the address arg names, then its board and pid */
	if (chdir("/bin") == 0) {
		uint64_t arg = (uint64_t)(uintptr_t)(page + 16), pid = remoteFork("gsas-child", arg, board);
		int i;

		for (i = 0; i < 300 && pid && READ64(page + 16) != (arg ^ 0x600dc0de600dc0deull); i++)
			usleep(100000);
		printf("fork_pid=%llu child_board=%llu\n", (unsigned long long)pid, (unsigned long long)READ64(page + 17));
		expect("remotefork_relative_path", pid != 0 && READ64(page + 16) == (arg ^ 0x600dc0de600dc0deull) &&
							 READ64(page + 17) == board);
	}
	expect("thread_argument_empty", readThreadArgument() == _EMPTY_THREAD_ARGUMENT_);
	expect("free", freeSharedPage(page) == 0);
	printf("failed=%d\n", failed);
	return failed != 0;
}

struct shared {
	int64_t *counter;
	pthread_barrier_t all_hold;
	int iters;
	int hold_ms;
};

static void *worker(void *p)
{
	struct shared *s = p;

	FAD64(s->counter, 0); /* the first call takes this thread's interfaces */
	pthread_barrier_wait(&s->all_hold); /* every thread holds its own at the same time */
	if (s->hold_ms > 0)
		usleep((useconds_t)s->hold_ms * 1000);
	for (int i = 0; i < s->iters; i++)
		FAD64(s->counter, 1);
	return NULL;
}

static uint64_t alloc_board;

/* In a thread of its own: its interfaces are given back when it exits, before the workers start. */
static void *alloc_counter(void *p)
{
	*(int64_t **)p = allocSharedPage(1, alloc_board);
	return NULL;
}

static int threads(int n, uint64_t board, int hold_ms)
{
	struct shared s = { .iters = 4, .hold_ms = hold_ms };
	pthread_t t[64];
	int64_t total;

	alloc_board = board;
	if (n < 1 || n > 64 || pthread_create(&t[0], NULL, alloc_counter, &s.counter) || pthread_join(t[0], NULL) ||
	    !s.counter)
		return 2;
	pthread_barrier_init(&s.all_hold, NULL, (unsigned)n);
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, worker, &s))
			return 2;
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	/* the workers gave their interfaces back: this thread takes one now */
	total = (int64_t)READ64((uint64_t *)s.counter);
	printf("threads=%d total=%lld expected=%lld\n", n, (long long)total, (long long)n * s.iters);
	freeSharedPage(s.counter);
	return total == (int64_t)n * s.iters ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "api"))
		return api(strtoull(argv[2], NULL, 0));
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "threads"))
		return threads(atoi(argv[2]), strtoull(argv[3], NULL, 0), argc == 5 ? atoi(argv[4]) : 0);
	fprintf(stderr, "usage: gsas_seed api BOARD | threads N BOARD [HOLD_MS]\n");
	return 2;
}
