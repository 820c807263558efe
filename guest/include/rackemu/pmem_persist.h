/* SPDX-License-Identifier: MIT */
/*
 * rk_pmem_persist(addr, len): make a process's stores to a mapping of the persistent-memory
 * region (/dev/rkpmem0, rackemu/pmem_uapi.h) durable, as a persistent-memory program does on
 * Arm: a clean of every 64-byte line of [addr, addr + len) to the point of persistence, then a
 * DSB. DC CVAP where the CPU has it (HWCAP_DCPOP), else DC CVAC (the default cortex-a57 lacks
 * FEAT_DPB); on a rackemu node both reach the persistence model (docs/pmem.md "CPU persist
 * points"). EL0 may issue them because Linux sets SCTLR_EL1.UCI.
 */
#ifndef RACKEMU_PMEM_PERSIST_H
#define RACKEMU_PMEM_PERSIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/auxv.h>

#define RK_PMEM_LINE 64u

#ifndef HWCAP_DCPOP
#define HWCAP_DCPOP (1 << 16)
#endif

static inline int rk_pmem_has_dcpop(void)
{
	static int has = -1;

	if (has < 0)
		has = (getauxval(AT_HWCAP) & HWCAP_DCPOP) != 0;
	return has;
}

static inline void rk_pmem_persist(const void *addr, size_t len)
{
	uintptr_t p = (uintptr_t)addr & ~(uintptr_t)(RK_PMEM_LINE - 1);
	const uintptr_t end = (uintptr_t)addr + len;

	if (len == 0)
		return;
	if (rk_pmem_has_dcpop()) {
		for (; p < end; p += RK_PMEM_LINE)
			__asm__ volatile("sys #3, c7, c12, #1, %0" : : "r"(p) : "memory"); /* dc cvap */
	} else {
		for (; p < end; p += RK_PMEM_LINE)
			__asm__ volatile("dc cvac, %0" : : "r"(p) : "memory");
	}
	__asm__ volatile("dsb sy" : : : "memory");
}

#endif /* RACKEMU_PMEM_PERSIST_H */
