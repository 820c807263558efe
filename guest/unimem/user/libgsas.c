/* SPDX-License-Identifier: MIT */
/*
 * libgsas: the atomic.h library (ExaNoDe D3.6 sec. 2.2.4, 2.2.6-2.2.8, 2.3) over the Unimem
 * packetizer and mailbox. Packet formats: rackemu/gsas_proto.h; docs/gsas.md.
 *
 * Each thread owns one /dev/unimem file (one MIF, one PIF), opened on its first call and
 * closed by a thread-specific-data destructor when it exits. A fork child starts without
 * interfaces (the driver does not let it use its parent's) and takes its own on first use.
 */
#define _GNU_SOURCE
#include "atomic.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "libunimem.h"
#include "rackemu/gsas_proto.h"
#include "spin.h"

struct gsas_thread {
	int ready;
	struct unimem u;
	uint8_t tag;
	struct gsas_thread_stats stats;
};

static __thread struct gsas_thread thr;
static pthread_key_t thr_key;
static pthread_once_t thr_once = PTHREAD_ONCE_INIT;
static unsigned timeout_ms = 10000, spin_us = 200, probe_ms = GSAS_PROBE_MS;
static int ack_first;

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void thread_exit(void *p)
{
	struct gsas_thread *t = p;

	if (t->ready)
		unimem_close(&t->u);
	t->ready = 0;
}

/* A fork child holds a copy of the parent's file but may not use it, and has no mapping. */
static void after_fork_child(void)
{
	if (thr.ready)
		close(thr.u.fd);
	thr.ready = 0;
	memset(&thr.u, 0, sizeof(thr.u));
}

static void setup_once(void)
{
	const char *s;

	pthread_key_create(&thr_key, thread_exit);
	pthread_atfork(NULL, NULL, after_fork_child);
	if ((s = getenv("GSAS_TIMEOUT_MS")) && atoi(s) > 0)
		timeout_ms = (unsigned)atoi(s);
	if ((s = getenv("GSAS_SPIN_US")) && atoi(s) >= 0)
		spin_us = (unsigned)atoi(s);
	if ((s = getenv("GSAS_PROBE_MS")) && atoi(s) > 0)
		probe_ms = (unsigned)atoi(s);
	ack_first = (s = getenv("GSAS_ACK_FIRST")) && atoi(s) > 0;
}

static int thread_get(struct gsas_thread **out)
{
	int rc;

	pthread_once(&thr_once, setup_once);
	if (!thr.ready) {
		if ((rc = unimem_open(&thr.u)))
			return rc;
		if ((rc = unimem_map(&thr.u))) {
			unimem_close(&thr.u);
			return rc;
		}
		thr.ready = 1;
		pthread_setspecific(thr_key, &thr);
	}
	*out = &thr;
	return 0;
}

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fatal(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gsas: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

const char *gsas_strerror(int err)
{
	static const char *const names[] = {
		[GSAS_E_OK] = "success",
		[GSAS_E_BADOP] = "unknown operation",
		[GSAS_E_BADADDR] = "invalid address (not allocated on its board)",
		[GSAS_E_PERM] = "not permitted (the memory belongs to another process)",
		[GSAS_E_NOMEM] = "not enough shared memory on the board",
		[GSAS_E_INVAL] = "invalid argument",
		[GSAS_E_SPAWN] = "the board could not start the program",
		[GSAS_E_SENDER] = "not a user thread",
	};

	if (err >= 0 && err <= GSAS_E_MAX)
		return names[err];
	switch (-err) {
	case EHOSTUNREACH: return "board unreachable (down, or the fabric is gone)";
	case ETIMEDOUT: return "no answer from the board's atomic service (is gsasd running there? `gsas stats`)";
	case ENXIO: return "no such board";
	case ENODEV: return "no mailbox/packetizer interface for this thread (is unimem.ko loaded? at most 63 threads per board, 62 while the mailbox driver holds interface 63)";
	case EPROTO: return "garbled READ4K answer";
	default: return strerror(-err);
	}
}

/*
 * Send one packet from this thread's PIF and wait for the destination's answer (ACK or NACK) until
 * `deadline` (-1 past it, with the packet possibly still pending). The packetizer raises no
 * interrupt, so the status is polled: for spin_us, then with sleeps growing from 20 us to 1 ms.
 * Many threads polling a remote answer at full speed starve the emulated CPUs and the fabric
 * (63 threads of one board against another board did not get their answers within a second).
 */
static int wait_pif(struct gsas_thread *t, uint64_t deadline)
{
	uint64_t spin_end = now_us() + spin_us;
	unsigned nap = 20;
	int s;

	while ((s = unimem_wait_status(&t->u, 0)) < 0) {
		uint64_t now = now_us();

		if (now > deadline)
			return -1;
		if (now < spin_end) {
			spin_relax();
			continue;
		}
		t->stats.naps++;
		spin_nap(&nap);
	}
	return s;
}

static int send_packet(struct gsas_thread *t, uint64_t dest, const uint64_t w[4], uint64_t deadline)
{
	if (wait_pif(t, deadline) < 0) /* one buffer per PIF (sec. 5.2.4): the previous packet must have left */
		return -1;
	unimem_post(&t->u, dest, w);
	return wait_pif(t, deadline);
}

/*
 * A liveness probe of board bid while an answer is overdue: a PING whose answer nobody waits for
 * (it arrives later with probe_tag and is discarded as stale). Only its delivery status counts:
 * NACK|FABRIC_ERR means the board is gone (its port left the bridge: NODE_GONE/NOROUTE) or this
 * node's link is down. A busy service (ACK, or NACK with a full FIFO) is alive.
 */
static int probe_board(struct gsas_thread *t, uint64_t bid, unsigned probe_tag)
{
	uint64_t w[4] = { GSAS_W0(GSAS_OP_PING, probe_tag), 0, 0, 0 };
	int s = send_packet(t, unimem_mif_gaddr(&t->u, (unsigned)bid, UNIMEM_IF_SERVICE), w, now_us() + 1000000);

	t->stats.probes++;
	return s > 0 && (s & PKTZ_ST_FABRIC_ERR) ? -EHOSTUNREACH : 0;
}

/* Next packet of this thread's MIF, spinning briefly and then sleeping on the interrupt; every
 * probe_ms without a packet, probe the board (a dead board ends the wait with -EHOSTUNREACH). */
static int recv_packet(struct gsas_thread *t, uint64_t w[4], uint64_t deadline, uint64_t bid, unsigned probe_tag)
{
	uint64_t start = now_us(), spin_end = start + spin_us, next_probe = start + (uint64_t)probe_ms * 1000;

	while (unimem_pending(&t->u) < UNIMEM_PACKET_WORDS) {
		uint64_t now = now_us(), until;
		struct unimem_wait wt;
		int rc;

		if (now < spin_end) {
			spin_relax();
			continue;
		}
		if (now >= deadline)
			return -ETIMEDOUT;
		if (now >= next_probe) {
			if ((rc = probe_board(t, bid, probe_tag)))
				return rc;
			next_probe = now_us() + (uint64_t)probe_ms * 1000;
			continue;
		}
		until = next_probe < deadline ? next_probe : deadline;
		wt.timeout_ms = (unsigned)((until - now + 999) / 1000);
		wt.count = 0;
		t->stats.sleeps++;
		if (ioctl(t->u.fd, UNIMEM_IOC_WAIT, &wt) < 0 && errno != ETIMEDOUT && errno != EINTR)
			return -errno;
	}
	for (unsigned i = 0; i < UNIMEM_PACKET_WORDS; i++)
		w[i] = t->u.mif[VMBOX_MIF_DATA / 8];
	return 0;
}

/* How long a wait for an answer spins before it naps or sleeps. A request to this board's own
 * service on a board with one online CPU does not spin at all: the service needs that CPU. */
static unsigned spin_budget(const struct gsas_thread *t, uint64_t bid)
{
	static long cpus;

	if (!cpus)
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return bid == t->u.info.node_id && cpus == 1 ? 0 : spin_us;
}

/* The answer to request (op, tag), checked: 1 if w is it, 0 if it is to be ignored (counted). */
static int answer_matches(struct gsas_thread *t, const uint64_t w[4], uint64_t bid, unsigned op, unsigned tag)
{
	if (UNIMEM_PACKET_PID(w[0]) != UNIMEM_SERVICE_PID(bid)) {
		t->stats.forged++; /* someone else's packet in our MIF: never trusted */
		return 0;
	}
	if (GSAS_W0_OP(w[0]) != op || GSAS_W0_TAG(w[0]) != tag) {
		t->stats.stale++;
		return 0;
	}
	return 1;
}

#define AWAIT_BUSY 1 /* the service's FIFO refused the request (NACK): back off and post it again */

/*
 * The answer to the request just posted. The service's response is the request's
 * acknowledgement (docs/gsas.md, "Where the time goes"): the library does not wait for the
 * packetizer's ACK before it looks for the answer, it watches both at once. While it spins it
 * polls the MIF (the answer) and the PIF's status (NACK: the service's FIFO is full;
 * NACK|FABRIC_ERR: the board is gone or this node's link is down). After the spin, a status
 * still pending is napped on (the packetizer raises no interrupt); once the request is
 * acknowledged the thread sleeps on the MIF's arrival interrupt, and every probe_ms without an
 * answer it probes the board (a dead board ends the wait with -EHOSTUNREACH).
 * 0 with the answer in w, AWAIT_BUSY, or -errno.
 */
static int await_answer(struct gsas_thread *t, uint64_t w[4], uint64_t bid, unsigned op, unsigned tag,
			unsigned probe_tag, uint64_t deadline)
{
	uint64_t start, spin_end, next_probe, posted = now_us();
	int acked = 0, waited = 0;

	if (ack_first) { /* GSAS_ACK_FIRST=1, for A/B measurements: the ACK first, then the answer */
		int s = wait_pif(t, deadline);

		if (s < 0)
			return -ETIMEDOUT;
		if (!(s & PKTZ_ST_ACK))
			return s & PKTZ_ST_FABRIC_ERR ? -EHOSTUNREACH : s & PKTZ_ST_NACK ? AWAIT_BUSY : s == 0 ? -EPERM : -EINVAL;
		acked = 1;
	}
	start = now_us();
	spin_end = start + spin_budget(t, bid);
	next_probe = start + (uint64_t)probe_ms * 1000;
	for (;;) {
		uint64_t now, until;
		struct unimem_wait wt;
		int rc;

		if (!acked) {
			uint32_t s = (uint32_t)t->u.pif[PKTZ_PIF_STATUS / 8];

			if (!(s & PKTZ_ST_PEND)) {
				if (s & PKTZ_ST_ACK) {
					acked = 1;
					t->stats.acks_seen++;
					t->stats.ack_ns += (now_us() - posted) * 1000;
				}
				else if (s & PKTZ_ST_FABRIC_ERR)
					return -EHOSTUNREACH;
				else if (s & PKTZ_ST_NACK)
					return AWAIT_BUSY;
				else
					return s == 0 ? -EPERM : -EINVAL; /* not sent: no PID_CONF, or ILLEGAL */
			}
		}
		if (unimem_pending(&t->u) >= UNIMEM_PACKET_WORDS) {
			for (unsigned i = 0; i < UNIMEM_PACKET_WORDS; i++)
				w[i] = t->u.mif[VMBOX_MIF_DATA / 8];
			if (!answer_matches(t, w, bid, op, tag))
				continue;
			t->stats.spun += !waited;
			return 0;
		}
		now = now_us();
		if (now < spin_end) {
			spin_relax();
			continue;
		}
		if (now >= deadline)
			return -ETIMEDOUT;
		waited = 1;
		if (now >= next_probe && acked) {
			if ((rc = probe_board(t, bid, probe_tag)))
				return rc;
			next_probe = now_us() + (uint64_t)probe_ms * 1000;
			continue;
		}
		/* not yet acknowledged: the answer's arrival interrupt ends the sleep as well, but a
		 * NACK raises none, so look at the status again after a millisecond */
		until = !acked ? now + 1000 : next_probe;
		if (until > deadline)
			until = deadline;
		wt.timeout_ms = (unsigned)((until - now + 999) / 1000);
		wt.count = 0;
		t->stats.sleeps++;
		if (ioctl(t->u.fd, UNIMEM_IOC_WAIT, &wt) < 0 && errno != ETIMEDOUT && errno != EINTR)
			return -errno;
	}
}

int gsas_request(unsigned op, uint64_t bid, uint64_t addr, uint64_t arg1, uint64_t arg2, uint64_t *result,
		 void *buf)
{
	struct gsas_thread *t;
	uint64_t req[4], w[4], deadline, dest, dummy;
	unsigned tag, probe_tag, backoff = 20, next = 0;
	int rc;

	if (!result)
		result = &dummy;
	if ((rc = thread_get(&t)))
		return -ENODEV;
	if (bid >= t->u.info.node_count)
		return -ENXIO;
	tag = ++t->tag;
	probe_tag = tag ^ 0x80; /* never the tag of this request: its answer is stale */
	deadline = now_us() + (uint64_t)timeout_ms * 1000;
	dest = unimem_mif_gaddr(&t->u, (unsigned)bid, UNIMEM_IF_SERVICE);
	req[0] = GSAS_W0(op, tag);
	req[1] = addr;
	req[2] = arg1;
	req[3] = arg2;
	t->stats.requests++;
	for (;;) {
		/* one buffer per PIF (sec. 5.2.4): the previous packet must have left */
		if (wait_pif(t, deadline) < 0)
			return -ETIMEDOUT;
		unimem_post(&t->u, dest, req);
		rc = await_answer(t, w, bid, op, tag, probe_tag, deadline);
		if (rc != AWAIT_BUSY)
			break;
		t->stats.busy++; /* the service's FIFO is full: back off and retry */
		if (now_us() > deadline)
			return -ETIMEDOUT;
		usleep(backoff);
		if (backoff < 2000)
			backoff *= 2;
	}
	if (rc)
		return rc;
	*result = w[2];
	if (op != GSAS_OP_READ4K || w[1] != GSAS_E_OK)
		return (int)w[1];
	/* READ4K: the page follows in order, 24 bytes per packet */
	while (next < GSAS_READ4K_PACKETS) {
		unsigned off = next * GSAS_READ4K_BYTES_PER_PACKET;
		unsigned n = GSAS_PAGE_SIZE - off < GSAS_READ4K_BYTES_PER_PACKET ? GSAS_PAGE_SIZE - off
										  : GSAS_READ4K_BYTES_PER_PACKET;

		if ((rc = recv_packet(t, w, deadline, bid, probe_tag)))
			return rc;
		if (UNIMEM_PACKET_PID(w[0]) != UNIMEM_SERVICE_PID(bid)) {
			t->stats.forged++;
			continue;
		}
		if (GSAS_W0_OP(w[0]) == GSAS_OP_PING) {
			t->stats.stale++; /* a probe's answer (or an earlier request's) */
			continue;
		}
		if (GSAS_W0_OP(w[0]) != GSAS_OP_DATA || GSAS_W0_TAG(w[0]) != (next & 0xff))
			return -EPROTO;
		if (buf)
			memcpy((char *)buf + off, &w[1], n);
		next++;
	}
	return GSAS_E_OK;
}

/* The board of a GSAS address, or a fatal error naming the call. */
static uint64_t board_of(const char *what, const void *addr)
{
	int b = GSAS_ADDR_BOARD((uint64_t)(uintptr_t)addr);

	if (b < 0 || (uint64_t)b >= getNumberBoards())
		fatal("%s(%p): not a GSAS address (partition %u; this rack has %llu boards)", what, addr,
		      GSAS_ADDR_PARTITION((uint64_t)(uintptr_t)addr), (unsigned long long)getNumberBoards());
	return (uint64_t)b;
}

/* A request the seed makes fatal on failure. */
static uint64_t must(const char *what, unsigned op, void *addr, uint64_t a1, uint64_t a2, void *buf)
{
	uint64_t a = (uint64_t)(uintptr_t)addr & ~gsas_align_mask(op), res = 0;
	int rc = gsas_request(op, board_of(what, addr), a, a1, a2, &res, buf);

	if (rc)
		fatal("%s(%p) failed: %s", what, addr, gsas_strerror(rc));
	return res;
}

static struct unimem_info *info(void)
{
	struct gsas_thread *t;
	int rc = thread_get(&t);

	if (rc)
		fatal("cannot take a mailbox and packetizer interface from %s: %s (is unimem.ko loaded? at most 63 "
		      "threads per board use GSAS at once, 62 while the mailbox driver holds interface 63)", UNIMEM_DEV_PATH, strerror(-rc));
	return &t->u.info;
}

uint64_t getNumberBoards(void)
{
	return info()->node_count;
}

uint64_t getBoardPid(void)
{
	return info()->node_id;
}

void *allocSharedPage(uint16_t quantity, uint64_t bid)
{
	uint64_t res = 0;
	int rc = gsas_request(GSAS_OP_ALLOC, bid, 0, quantity, 0, &res, NULL);

	if (rc) {
		errno = rc < 0 ? -rc : rc == GSAS_E_NOMEM ? ENOMEM : EINVAL;
		return NULL;
	}
	return (void *)(uintptr_t)res;
}

uint64_t freeSharedPage(void *addr)
{
	int b = GSAS_ADDR_BOARD((uint64_t)(uintptr_t)addr);
	int rc;

	if (b < 0)
		return GSAS_E_BADADDR;
	rc = gsas_request(GSAS_OP_FREE, (uint64_t)b, (uint64_t)(uintptr_t)addr & ~gsas_align_mask(GSAS_OP_FREE), 0, 0,
			  NULL, NULL);
	if (rc < 0)
		fatal("freeSharedPage(%p) failed: %s", addr, gsas_strerror(rc));
	return (uint64_t)rc;
}

char READ8(char *addr)
{
	return (char)must("READ8", GSAS_OP_READ8, addr, 0, 0, NULL);
}

uint32_t READ32(uint64_t *addr)
{
	return (uint32_t)must("READ32", GSAS_OP_READ32, addr, 0, 0, NULL);
}

uint64_t READ64(uint64_t *addr)
{
	return must("READ64", GSAS_OP_READ64, addr, 0, 0, NULL);
}

uint64_t READ4K(void *addr, char *buffer)
{
	return must("READ4K", GSAS_OP_READ4K, addr, 0, 0, buffer);
}

void WRITE8(char *addr, char val)
{
	must("WRITE8", GSAS_OP_WRITE8, addr, (uint8_t)val, 0, NULL);
}

void WRITE32(uint32_t *addr, uint32_t val)
{
	must("WRITE32", GSAS_OP_WRITE32, addr, val, 0, NULL);
}

void WRITE64(uint64_t *addr, uint64_t val)
{
	must("WRITE64", GSAS_OP_WRITE64, addr, val, 0, NULL);
}

void WRITE128(uint64_t *addr, uint64_t val[2])
{
	must("WRITE128", GSAS_OP_WRITE128, addr, val[0], val[1], NULL);
}

uint64_t CAS64(uint64_t *addr, uint64_t old_val, uint64_t new_val)
{
	return must("CAS64", GSAS_OP_CAS, addr, old_val, new_val, NULL) == old_val;
}

int64_t FAD64(int64_t *addr, int64_t val)
{
	return (int64_t)must("FAD64", GSAS_OP_FAD, addr, (uint64_t)val, 0, NULL);
}

uint64_t SWAP64(uint64_t *addr, uint64_t val)
{
	return must("SWAP64", GSAS_OP_SWAP, addr, val, 0, NULL);
}

uint64_t remoteFork(char *filename, uint64_t arg, uint64_t bid)
{
	char abs[_MAX_FORK_PATH_FILENAME_];
	size_t len;
	uint64_t res = 0, word;
	char *page;
	int rc = 0;

	if (!filename || !filename[0] || arg == _EMPTY_THREAD_ARGUMENT_) {
		errno = EINVAL;
		return 0;
	}
	/* sec. 2.3.5 only advises absolute paths: a relative one means the caller's working
	 * directory (on its own board) joined with it, and is sent as that absolute path */
	if (filename[0] != '/') {
		if (!getcwd(abs, sizeof(abs)))
			return 0; /* errno from getcwd: ERANGE for a directory too long to hold anything */
		len = strlen(abs);
		if (len + 1 + strlen(filename) + 1 > sizeof(abs)) {
			errno = ENAMETOOLONG;
			return 0;
		}
		snprintf(abs + len, sizeof(abs) - len, "%s%s", abs[len - 1] == '/' ? "" : "/", filename);
		filename = abs;
	}
	len = strlen(filename) + 1;
	if (len > _MAX_FORK_PATH_FILENAME_) {
		errno = ENAMETOOLONG;
		return 0;
	}
	/* sec. 2.2.8: the path goes into a page allocated on the target board */
	page = allocSharedPage(1, bid);
	if (!page)
		return 0;
	for (size_t off = 0; off < len && !rc; off += 8) {
		word = 0;
		memcpy(&word, filename + off, len - off < 8 ? len - off : 8);
		rc = gsas_request(GSAS_OP_WRITE64, bid, (uint64_t)(uintptr_t)(page + off), word, 0, NULL, NULL);
	}
	if (!rc)
		rc = gsas_request(GSAS_OP_FORK, bid, (uint64_t)(uintptr_t)page, arg, 0, &res, NULL);
	gsas_request(GSAS_OP_FREE, bid, (uint64_t)(uintptr_t)page, 0, 0, NULL, NULL);
	if (rc) {
		errno = rc < 0 ? -rc : rc == GSAS_E_SPAWN && res ? (int)res : rc == GSAS_E_PERM ? EPERM : EINVAL;
		return 0;
	}
	return res;
}

uint64_t readThreadArgument(void)
{
	const char *s = getenv(GSAS_THREAD_ARG_ENV);
	char *end;
	uint64_t v;

	if (!s || !*s)
		return _EMPTY_THREAD_ARGUMENT_;
	errno = 0;
	v = strtoull(s, &end, 0);
	return errno || *end ? _EMPTY_THREAD_ARGUMENT_ : v;
}

void gsas_get_thread_stats(struct gsas_thread_stats *out)
{
	*out = thr.stats;
}

int gsas_thread_interface(unsigned *mif, uint64_t *pid)
{
	struct gsas_thread *t;
	int rc = thread_get(&t);

	if (rc)
		return rc;
	*mif = t->u.info.mif;
	*pid = t->u.info.pid_prefix;
	return 0;
}
