/* SPDX-License-Identifier: MIT */
/*
 * spin.h: how the guest libraries and services wait (docs/rmc-driver.md, unimem.md, gsas.md).
 *
 * A wait polls briefly with the CPU's spin-wait hint, then blocks: in the driver where the
 * device raises an interrupt (RMC_IOC_WAIT, UNIMEM_IOC_WAIT, poll()), else in nanosleep with a
 * growing nap. Never sched_yield(): under TCG a few host cores run many vCPUs, and a vCPU that
 * yields in a loop keeps its host thread busy while the producer it waits for needs that core.
 * The spin budget of each library is an environment variable (RMC_SPIN_US, UNIMEM_SPIN_US,
 * GSAS_SPIN_US) or, for gsasd, --spin-us.
 */
#ifndef RACKEMU_GUEST_SPIN_H
#define RACKEMU_GUEST_SPIN_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* The spin-wait hint: `yield` tells the core (and QEMU's TCG, which ends the translation block
 * there) that this is a busy-wait loop. */
static inline void spin_relax(void)
{
#if defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#else
	__asm__ volatile("" ::: "memory");
#endif
}

/* Microseconds from environment variable `name` (0 .. 1 s), else `def`. */
static inline unsigned spin_budget_us(const char *name, unsigned def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	return *end || v > 1000000 ? def : (unsigned)v;
}

/* Sleep `*nap_us` microseconds and double it, up to 1 ms: the back-off of waits on a device that
 * raises no interrupt (the packetizer's status, an RMC QP without RMC_QP_IRQ). */
static inline void spin_nap(unsigned *nap_us)
{
	struct timespec ts = { 0, (long)*nap_us * 1000 };

	nanosleep(&ts, NULL);
	if (*nap_us < 1000)
		*nap_us *= 2;
}

#endif
