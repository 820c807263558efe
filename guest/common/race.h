/* SPDX-License-Identifier: MIT */
/*
 * race.h: what the drivers' hostile tests (rnic-hostile, rmc-hostile) share to race a mapping
 * of a device page against the destruction of the object behind it (docs/trust-model.md):
 *   - race_touch(): load or store one register through a mapping that may have been revoked,
 *     returning the signal it raised (SIGBUS, SIGSEGV) instead of dying;
 *   - a destroying thread pinned to CPU 1 that, for each round the main thread starts, waits
 *     race.delay_ns and calls race.destroy(race.arg), so the destruction falls at every moment
 *     of the main thread's mmap in turn.
 * A test tool, not a data path: the waits spin and yield now and then, as the two threads may
 * share one vCPU.
 */
#ifndef RACKEMU_GUEST_RACE_H
#define RACKEMU_GUEST_RACE_H

#ifndef _GNU_SOURCE
#error "race.h needs _GNU_SOURCE defined before the first #include (CPU_SET, sched_setaffinity)"
#endif
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static sigjmp_buf race_env;

static void race_fault(int sig)
{
	siglongjmp(race_env, sig);
}

/*
 * Read (write_v NULL) or write the `width`-byte (4 or 8) register at p: 0 if the access reached
 * the device, else the signal it raised.
 */
static inline int race_touch(volatile void *p, unsigned width, uint64_t *read_v, const uint64_t *write_v)
{
	struct sigaction sa, old_bus, old_segv;
	int sig;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = race_fault;
	sigaction(SIGBUS, &sa, &old_bus);
	sigaction(SIGSEGV, &sa, &old_segv);
	sig = sigsetjmp(race_env, 1);
	if (!sig) {
		if (width == 4 && write_v)
			*(volatile uint32_t *)p = (uint32_t)*write_v;
		else if (width == 4)
			*read_v = *(volatile uint32_t *)p;
		else if (write_v)
			*(volatile uint64_t *)p = *write_v;
		else
			*read_v = *(volatile uint64_t *)p;
	}
	sigaction(SIGBUS, &old_bus, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	return sig;
}

static inline int race_faulted(int sig)
{
	return sig == SIGBUS || sig == SIGSEGV;
}

static inline uint64_t race_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void race_relax(unsigned *spins)
{
	if (++*spins % 4096 == 0)
		sched_yield(); /* the other thread may share our vCPU */
	else
		__asm__ volatile("" ::: "memory");
}

static inline void race_pin_to(unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set); /* best effort: one vCPU gives a slower race */
}

/* The main thread sets arg and delay_ns, then race_round(); destroy's result is in err. */
static struct {
	int (*destroy)(void *arg);
	void *arg;
	uint64_t delay_ns;
	unsigned go, done; /* __atomic */
	int err;
} race;

static void *race_destroyer(void *unused)
{
	unsigned round = 0;

	(void)unused;
	race_pin_to(1);
	for (;;) {
		unsigned spins = 0;
		uint64_t t;

		while (__atomic_load_n(&race.go, __ATOMIC_ACQUIRE) == round)
			race_relax(&spins);
		round = __atomic_load_n(&race.go, __ATOMIC_ACQUIRE);
		if (round == UINT32_MAX)
			return NULL;
		t = race_now_ns() + race.delay_ns;
		while (race_now_ns() < t)
			;
		race.err = race.destroy(race.arg);
		__atomic_store_n(&race.done, round, __ATOMIC_RELEASE);
	}
}

/* Start round `i` (1, 2, ...) of the destroyer; race_wait(i) until it has destroyed. */
static inline void race_start(unsigned i)
{
	__atomic_store_n(&race.go, i, __ATOMIC_RELEASE);
}

static inline void race_wait(unsigned i)
{
	unsigned spins = 0;

	while (__atomic_load_n(&race.done, __ATOMIC_ACQUIRE) != i)
		race_relax(&spins);
}

/* Let the destroyer thread `th` end and join it. */
static inline void race_end(pthread_t th)
{
	__atomic_store_n(&race.go, UINT32_MAX, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
}

#endif /* RACKEMU_GUEST_RACE_H */
