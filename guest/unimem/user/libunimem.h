/* SPDX-License-Identifier: MIT */
/*
 * libunimem: user-space access to a node's Unimem mailbox and packetizer through /dev/unimem
 * (docs/unimem.md). Packets go out through this process's PIF with plain stores and come in
 * through its MIF with plain loads: no system call on the data path.
 */
#ifndef LIBUNIMEM_H
#define LIBUNIMEM_H

#include <stdint.h>

#include "rackemu/unimem_regs.h"
#include "rackemu/unimem_uapi.h"

struct unimem {
	int fd;
	volatile uint64_t *mif; /* this process's MIF page */
	volatile uint64_t *pif; /* this process's PIF page */
	struct unimem_info info;
};

/* Open /dev/unimem: allocates one MIF and one PIF. 0 or -errno. */
int unimem_open(struct unimem *u);
/* Take specific interfaces instead (-1 keeps the allocated one). Before unimem_map. */
int unimem_bind(struct unimem *u, int mif, int pif);
/* Map the MIF and PIF pages. */
int unimem_map(struct unimem *u);
void unimem_close(struct unimem *u);

/* Global address of MIF `mif` of node `node`: a packet destination. */
uint64_t unimem_mif_gaddr(const struct unimem *u, unsigned node, unsigned mif);

/* Send a 256-bit packet: words[0] bits 63:48, words[1..3] (words[0] bits 47:0 are replaced by
 * the PID the driver programmed). Waits (up to timeout_us) until the PIF is free, writes
 * payload0, payload1 and the destination (the third register sends the packet), then waits
 * until PEND clears. The packetizer raises no interrupt: a wait spins with the CPU's hint for
 * UNIMEM_SPIN_US (environment, default 50), then naps from 20 us to 1 ms (guest/common/spin.h). Returns the final PIF status (PKTZ_ST_* bits: ACK, NACK,
 * NACK|FABRIC_ERR, ILLEGAL; 0 means nothing was sent because the PIF's PID_CONF bit is clear),
 * or -1 if PEND did not clear within timeout_us. */
int unimem_send(struct unimem *u, uint64_t dest, const uint64_t words[4], unsigned timeout_us);

/* The two halves of unimem_send. unimem_post writes the five register halves without looking
 * at PEND (a write while PEND is set is dropped and sets OVERWR_BUF) and returns the status
 * read right after; unimem_wait_status waits (as above) until PEND clears and returns the
 * status, or -1 after timeout_us. */
int unimem_post(struct unimem *u, uint64_t dest, const uint64_t words[4]);
int unimem_wait_status(struct unimem *u, unsigned timeout_us);
/* The same with the caller's spin budget instead of UNIMEM_SPIN_US (gsasd: its --spin-us). */
int unimem_wait_status_spin(struct unimem *u, unsigned timeout_us, unsigned spin_us);

/* Number of words waiting in this process's MIF. */
static inline unsigned unimem_pending(const struct unimem *u)
{
	return (unsigned)u->mif[VMBOX_MIF_COUNT / 8];
}

/* Receive one packet (4 words). timeout_ms < 0: spin (with the CPU hint) without sleeping;
 * 0: sleep until one arrives; > 0: sleep at most that long. 0 on success, -errno otherwise. */
int unimem_recv(struct unimem *u, uint64_t words[4], int timeout_ms);

/* "ACK", "NACK", "NACK|FABRIC_ERR", "ILLEGAL", "NOT_SENT", ... into buf. */
const char *unimem_status_str(int status, char *buf, unsigned len);

#endif
