/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "libunimem.h"
#include "spin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int unimem_open(struct unimem *u)
{
	memset(u, 0, sizeof(*u));
	u->fd = open(UNIMEM_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (u->fd < 0)
		return -errno;
	if (ioctl(u->fd, UNIMEM_IOC_INFO, &u->info) < 0) {
		int e = -errno;
		close(u->fd);
		return e;
	}
	return 0;
}

int unimem_bind(struct unimem *u, int mif, int pif)
{
	struct unimem_bind b = { mif, pif };

	if (ioctl(u->fd, UNIMEM_IOC_BIND, &b) < 0)
		return -errno;
	return ioctl(u->fd, UNIMEM_IOC_INFO, &u->info) < 0 ? -errno : 0;
}

int unimem_map(struct unimem *u)
{
	void *m, *p;
	int e;

	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, u->fd, UNIMEM_MMAP_MIF);
	if (m == MAP_FAILED)
		return -errno;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, u->fd, UNIMEM_MMAP_PIF);
	if (p == MAP_FAILED) {
		e = -errno;
		munmap(m, 4096);
		return e;
	}
	u->mif = m;
	u->pif = p;
	return 0;
}

void unimem_close(struct unimem *u)
{
	if (u->mif)
		munmap((void *)u->mif, 4096);
	if (u->pif)
		munmap((void *)u->pif, 4096);
	if (u->fd >= 0)
		close(u->fd);
	u->fd = -1;
}

uint64_t unimem_mif_gaddr(const struct unimem *u, unsigned node, unsigned mif)
{
	return UNIMEM_GADDR(node, u->info.vmbox_base + VMBOX_MIF_OFFSET(mif));
}

/* UNIMEM_SPIN_US (default 50): how long a wait for PEND spins before it naps */
static unsigned unimem_spin_us(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = (int)spin_budget_us("UNIMEM_SPIN_US", 50);
	return (unsigned)cached;
}

int unimem_wait_status(struct unimem *u, unsigned timeout_us)
{
	return unimem_wait_status_spin(u, timeout_us, unimem_spin_us());
}

int unimem_wait_status_spin(struct unimem *u, unsigned timeout_us, unsigned spin_us)
{
	volatile uint64_t *p = u->pif;
	uint64_t start = now_us(), deadline = start + timeout_us, spin_end = start + spin_us;
	unsigned nap = 20;
	uint32_t st;

	/* the packetizer raises no interrupt: spin with the CPU hint, then nap 20 us .. 1 ms */
	for (;;) {
		uint64_t now;

		st = (uint32_t)p[PKTZ_PIF_STATUS / 8];
		if (!(st & PKTZ_ST_PEND))
			return (int)st;
		now = now_us();
		if (now > deadline)
			return -1;
		if (now < spin_end) {
			spin_relax();
			continue;
		}
		if (nap > deadline - now)
			nap = (unsigned)(deadline - now) + 1;
		spin_nap(&nap);
	}
}

int unimem_post(struct unimem *u, uint64_t dest, const uint64_t words[4])
{
	volatile uint64_t *p = u->pif;

	p[PKTZ_PIF_PAYLOAD0 / 8] = words[0];
	p[PKTZ_PIF_PAYLOAD0 / 8 + 1] = words[1];
	p[PKTZ_PIF_PAYLOAD1 / 8] = words[2];
	p[PKTZ_PIF_PAYLOAD1 / 8 + 1] = words[3];
	p[PKTZ_PIF_DEST / 8] = dest; /* the third register: the packet leaves */
	return (int)(uint32_t)p[PKTZ_PIF_STATUS / 8];
}

int unimem_send(struct unimem *u, uint64_t dest, const uint64_t words[4], unsigned timeout_us)
{
	/* one buffer per PIF (sec. 5.2.4): the previous packet must have left */
	if (unimem_wait_status(u, timeout_us) < 0)
		return -1;
	unimem_post(u, dest, words);
	return unimem_wait_status(u, timeout_us);
}

int unimem_recv(struct unimem *u, uint64_t words[4], int timeout_ms)
{
	if (timeout_ms < 0) {
		while (unimem_pending(u) < UNIMEM_PACKET_WORDS)
			spin_relax();
	} else if (unimem_pending(u) < UNIMEM_PACKET_WORDS) {
		struct unimem_wait w = { (unsigned)timeout_ms, 0 };

		if (ioctl(u->fd, UNIMEM_IOC_WAIT, &w) < 0)
			return -errno;
		/* a packet's four words are enqueued as one burst */
		if (unimem_pending(u) < UNIMEM_PACKET_WORDS)
			return -EPROTO;
	}
	for (int i = 0; i < 4; i++)
		words[i] = u->mif[VMBOX_MIF_DATA / 8];
	return 0;
}

const char *unimem_status_str(int st, char *buf, unsigned len)
{
	if (st < 0) {
		snprintf(buf, len, "TIMEOUT");
		return buf;
	}
	if (st == 0) {
		snprintf(buf, len, "NOT_SENT");
		return buf;
	}
	snprintf(buf, len, "%s%s%s%s%s%s", st & PKTZ_ST_PEND ? "PEND|" : "", st & PKTZ_ST_ACK ? "ACK|" : "",
		 st & PKTZ_ST_NACK ? "NACK|" : "", st & PKTZ_ST_FABRIC_ERR ? "FABRIC_ERR|" : "",
		 st & PKTZ_ST_ILLEGAL ? "ILLEGAL|" : "", st & PKTZ_ST_OVERWR_BUF ? "OVERWR_BUF|" : "");
	if (buf[0])
		buf[strlen(buf) - 1] = 0;
	return buf;
}
