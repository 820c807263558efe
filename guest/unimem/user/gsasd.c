// SPDX-License-Identifier: MIT
/*
 * gsasd: the GSAS atomic service of one board (ExaNoDe D3.6 sec. 2.2.4-2.2.8; docs/gsas.md).
 *
 * It owns interface 0 of the node's vmbox and packetizer, polls MIF 0 for request packets
 * (rackemu/gsas_proto.h), translates global virtual addresses through its software MMU (a hash
 * map of <virtual page, local page, attributes>), checks the request and the issuer's rights
 * from the PID the packetizer stamped, applies the operation to its own memory, and answers
 * into the issuer's MIF. One thread serves every request, so each operation is atomic with
 * respect to all others on the board's partition. When no request came for --spin-us the
 * service sleeps on the arrival interrupt instead of polling (the seed's "sleep mode").
 *
 * Every request gets an answer: the seed drops invalid requests, which would leave the issuer
 * waiting, so rackemu answers them with an error code (Fig. 9's error field) and counts them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libunimem.h"
#include "rackemu/gsas_proto.h"
#include "rackemu/unimem_mailbox.h"
#include "spin.h"
#include "tool.h"

/* ---- software MMU (sec. 2.2.5) ---- */

struct alloc {
	uint64_t base;       /* first GSAS address */
	uint64_t pages;
	uint8_t *mem;        /* the service's local memory backing it */
	uint64_t owner_node; /* the allocating process: node and tgid from its PID */
	uint64_t owner_tgid;
	struct alloc *next;
};

struct mmu_entry {
	uint64_t vpage;      /* key: the GSAS page address */
	uint8_t *page;       /* the local page */
	struct alloc *attr;  /* attributes: the allocation, its owner */
	struct mmu_entry *next;
};

#define MMU_BITS 12
static struct mmu_entry *mmu[1u << MMU_BITS];
static struct alloc *allocs;
static uint64_t next_local = GSAS_FIRST_LOCAL;

static unsigned mmu_hash(uint64_t vpage)
{
	return (unsigned)(((vpage >> 12) * 0x9E3779B97F4A7C15ull) >> (64 - MMU_BITS));
}

static struct mmu_entry *mmu_find(uint64_t addr)
{
	uint64_t vpage = addr & ~(uint64_t)(GSAS_PAGE_SIZE - 1);
	struct mmu_entry *e;

	for (e = mmu[mmu_hash(vpage)]; e; e = e->next)
		if (e->vpage == vpage)
			return e;
	return NULL;
}

/* ---- state ---- */

static struct unimem u;
static struct gsas_stats *st;
static unsigned node_id, node_count;
static uint64_t max_pages = 8192; /* 32 MiB */
static uint64_t max_pages_unpriv = 2048; /* 8 MiB: what one unprivileged process may hold */
static unsigned spin_us = 200, reply_timeout_ms = 200;
static const char *log_dir = "/tmp/gsas";
static int verbose;
static sigset_t run_mask; /* the mask gsasd started with: unblocked while it sleeps, and in children */

static uint64_t now_us(void)
{
	return now_ns() / 1000; /* tool.h */
}

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "gsasd[%u]: ", node_id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- replies ---- */

/*
 * The packet last posted from PIF 0 whose packetizer status is not yet settled. The service
 * does not wait for a reply's acknowledgement before it serves the next request: the
 * acknowledgement flies back while it works, and the reply is settled (ACK taken, or posted
 * again while the issuer's full FIFO refuses it, until its deadline) when PIF 0 is needed for
 * the next packet and before the service sleeps (docs/gsas.md, "Where the time goes").
 */
static struct {
	int live;
	uint64_t dest, w[4], deadline;
	unsigned backoff;
} out;

/* Settle the posted packet: 0 once acknowledged (or if none is live), -1 if it was dropped (the
 * issuer's FIFO refused it until its deadline, the fabric failed it, or PIF 0 is stuck).
 * `to_sleep`: before the service sleeps, not because PIF 0 is needed for the next packet. */
static int settle_for(int to_sleep)
{
	if (out.live && ((uint32_t)u.pif[PKTZ_PIF_STATUS / 8] & PKTZ_ST_PEND)) {
		/* the acknowledgement had not come back yet */
		if (to_sleep)
			st->unsettled_at_sleep++;
		else
			st->replies_unsettled++;
	}
	while (out.live) {
		int s = unimem_wait_status_spin(&u, 1000000, spin_us); /* the ACK: spin as for a request */

		if (s > 0 && (s & PKTZ_ST_ACK)) {
			out.live = 0;
			return 0;
		}
		if (s < 0 || !(s & PKTZ_ST_NACK) || (s & PKTZ_ST_FABRIC_ERR) || now_us() > out.deadline) {
			out.live = 0;
			st->replies_dropped++;
			return -1;
		}
		usleep(out.backoff); /* the issuer's FIFO is full: it drains it while it waits for us */
		if (out.backoff < 1000)
			out.backoff *= 2;
		st->reply_retries++;
		unimem_post(&u, out.dest, out.w);
	}
	return 0;
}

static int settle(void)
{
	return settle_for(0);
}

/* Post one packet to the issuer's MIF (PIF 0 must be settled). */
static void post(uint64_t pid, const uint64_t w[4], uint64_t deadline)
{
	out.dest = unimem_mif_gaddr(&u, UNIMEM_PID_NODE(pid), UNIMEM_PID_MIF(pid));
	memcpy(out.w, w, sizeof(out.w));
	out.deadline = deadline;
	out.backoff = 10;
	out.live = 1;
	unimem_post(&u, out.dest, out.w);
}

static void reply(uint64_t pid, unsigned op, unsigned tag, uint64_t err, uint64_t result, uint64_t addr,
		  const uint8_t *page4k)
{
	uint64_t w[4] = { GSAS_W0(op, tag), err, result, addr };
	uint64_t deadline = now_us() + (uint64_t)reply_timeout_ms * 1000;

	st->refused[err <= GSAS_E_MAX ? err : 0] += err != GSAS_E_OK;
	st->served += err == GSAS_E_OK;
	settle(); /* the previous reply, another request's: its fate is counted there */
	post(pid, w, deadline);
	if (!page4k)
		return;
	for (unsigned i = 0; i < GSAS_READ4K_PACKETS; i++) {
		unsigned off = i * GSAS_READ4K_BYTES_PER_PACKET;
		unsigned n = GSAS_PAGE_SIZE - off < GSAS_READ4K_BYTES_PER_PACKET ? GSAS_PAGE_SIZE - off
										  : GSAS_READ4K_BYTES_PER_PACKET;

		if (settle()) /* the answer or the previous data packet was dropped: so is the rest */
			return;
		w[0] = GSAS_W0(GSAS_OP_DATA, i);
		w[1] = w[2] = w[3] = 0;
		memcpy(&w[1], page4k + off, n);
		post(pid, w, deadline + (uint64_t)i * 10000);
	}
}

/* ---- operations ---- */

static uint64_t op_alloc(uint64_t pid, uint64_t pages, uint64_t *err)
{
	struct alloc *a;
	uint64_t span = (pages + 1) * GSAS_PAGE_SIZE; /* one unmapped guard page after each allocation */

	if (pages == 0 || pages > 0xffff) {
		*err = GSAS_E_INVAL;
		return 0;
	}
	if (st->pages_in_use + pages > max_pages || next_local + span > GSAS_LOCAL_MASK) {
		*err = GSAS_E_NOMEM;
		return 0;
	}
	if (!UNIMEM_PID_PRIVILEGED(pid)) {
		uint64_t held = 0;

		for (a = allocs; a; a = a->next)
			if (a->owner_node == UNIMEM_PID_NODE(pid) && a->owner_tgid == UNIMEM_PID_TGID(pid))
				held += a->pages;
		if (held + pages > max_pages_unpriv) {
			*err = GSAS_E_NOMEM;
			return 0;
		}
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		*err = GSAS_E_NOMEM;
		return 0;
	}
	a->mem = mmap(NULL, pages * GSAS_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		      -1, 0);
	if (a->mem == MAP_FAILED) {
		free(a);
		*err = GSAS_E_NOMEM;
		return 0;
	}
	for (uint64_t i = 0; i < pages; i++) {
		struct mmu_entry *e = malloc(sizeof(*e));

		if (!e) { /* undo the pages installed so far */
			while (i-- > 0) {
				uint64_t vp = GSAS_ADDR(node_id, next_local + i * GSAS_PAGE_SIZE);
				struct mmu_entry **pp = &mmu[mmu_hash(vp)], *x = *pp;

				*pp = x->next; /* inserted at the head, so it is the head */
				free(x);
			}
			munmap(a->mem, pages * GSAS_PAGE_SIZE);
			free(a);
			*err = GSAS_E_NOMEM;
			return 0;
		}
		e->vpage = GSAS_ADDR(node_id, next_local + i * GSAS_PAGE_SIZE);
		e->page = a->mem + i * GSAS_PAGE_SIZE;
		e->attr = a;
		e->next = mmu[mmu_hash(e->vpage)];
		mmu[mmu_hash(e->vpage)] = e;
	}
	a->base = GSAS_ADDR(node_id, next_local);
	a->pages = pages;
	a->owner_node = UNIMEM_PID_NODE(pid);
	a->owner_tgid = UNIMEM_PID_TGID(pid);
	a->next = allocs;
	allocs = a;
	next_local += span;
	st->pages_in_use += pages;
	st->allocations++;
	if (verbose)
		logmsg("alloc %llu pages at 0x%016llx for node %u tgid %u", (unsigned long long)pages,
		       (unsigned long long)a->base, UNIMEM_PID_NODE(pid), UNIMEM_PID_TGID(pid));
	return a->base;
}

static int owned_by(const struct alloc *a, uint64_t pid)
{
	return a->owner_node == UNIMEM_PID_NODE(pid) && a->owner_tgid == UNIMEM_PID_TGID(pid);
}

static void free_alloc(struct alloc *a);

static uint64_t op_free(uint64_t pid, uint64_t addr, uint64_t *err)
{
	struct alloc **pa, *a;
	uint64_t pages;

	for (pa = &allocs; *pa && (*pa)->base != addr; pa = &(*pa)->next)
		;
	a = *pa;
	if (!a) {
		*err = GSAS_E_BADADDR;
		return 0;
	}
	if (!owned_by(a, pid)) {
		*err = GSAS_E_PERM;
		return 0;
	}
	*pa = a->next;
	pages = a->pages;
	free_alloc(a);
	return pages;
}

/* Take a (already unlinked from allocs) out of the MMU and give its memory back. */
static void free_alloc(struct alloc *a)
{
	for (uint64_t i = 0; i < a->pages; i++) {
		uint64_t vp = a->base + i * GSAS_PAGE_SIZE;
		struct mmu_entry **pp = &mmu[mmu_hash(vp)];

		while (*pp && (*pp)->vpage != vp)
			pp = &(*pp)->next;
		if (*pp) {
			struct mmu_entry *x = *pp;

			*pp = x->next;
			free(x);
		}
	}
	munmap(a->mem, a->pages * GSAS_PAGE_SIZE);
	st->pages_in_use -= a->pages;
	st->allocations--;
	free(a);
}

/* GSAS_OP_EXITED from node `node`'s kernel: free what process `tgid` (0: any of that node) held. */
static void op_exited(unsigned node, unsigned tgid)
{
	struct alloc **pa = &allocs, *a;
	uint64_t pages = 0, n = 0;

	st->exit_notices++;
	while ((a = *pa)) {
		if (a->owner_node == node && (tgid == 0 || a->owner_tgid == tgid)) {
			*pa = a->next;
			pages += a->pages;
			n++;
			free_alloc(a);
		} else {
			pa = &a->next;
		}
	}
	st->reclaimed_pages += pages;
	if (n || verbose)
		logmsg("node %u %s%u exited: freed %llu allocations, %llu pages", node, tgid ? "tgid " : "all processes ",
		       tgid, (unsigned long long)n, (unsigned long long)pages);
}

static uint64_t op_fork(uint64_t pid, const uint8_t *page, const struct alloc *a, uint64_t arg, uint64_t *err)
{
	char path[GSAS_MAX_FORK_PATH], out[512], errp[512], argv0[GSAS_MAX_FORK_PATH], argbuf[32];
	struct stat sb;
	int pfd[2], child_errno = 0;
	pid_t child;

	/* the program runs as root: only a privileged process (its PID's MIF is one of the
	 * interfaces the driver keeps for CAP_SYS_ADMIN openers) may start one */
	if (!owned_by(a, pid) || !UNIMEM_PID_PRIVILEGED(pid)) {
		*err = GSAS_E_PERM;
		return 0;
	}
	memcpy(path, page, sizeof(path));
	if (!memchr(path, 0, sizeof(path)) || path[0] != '/' || arg == GSAS_EMPTY_THREAD_ARGUMENT) {
		*err = GSAS_E_INVAL;
		return 0;
	}
	if (stat(path, &sb))
		child_errno = errno;
	else if (!S_ISREG(sb.st_mode))
		child_errno = EACCES;
	else if (access(path, X_OK))
		child_errno = errno;
	if (child_errno) {
		*err = GSAS_E_SPAWN;
		return (uint64_t)child_errno; /* the result carries the errno */
	}
	strcpy(argv0, path);
	snprintf(out, sizeof(out), "%s/%s-%u-stdout.log", log_dir, basename(argv0), node_id);
	snprintf(errp, sizeof(errp), "%s/%s-%u-stderr.log", log_dir, basename(argv0), node_id);
	snprintf(argbuf, sizeof(argbuf), "0x%llx", (unsigned long long)arg);
	if (pipe2(pfd, O_CLOEXEC)) {
		*err = GSAS_E_SPAWN;
		return (uint64_t)errno;
	}
	child = fork();
	if (child == 0) {
		int in = open("/dev/null", O_RDONLY), o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644),
		    e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		char *argv[] = { path, NULL };

		if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 ||
		    setenv(GSAS_THREAD_ARG_ENV, argbuf, 1)) {
			child_errno = errno;
		} else {
			signal(SIGCHLD, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			sigprocmask(SIG_SETMASK, &run_mask, NULL);
			setsid();
			execv(path, argv);
			child_errno = errno;
		}
		if (write(pfd[1], &child_errno, sizeof(child_errno)) < 0)
			_exit(126);
		_exit(127);
	}
	close(pfd[1]);
	if (child < 0 || read(pfd[0], &child_errno, sizeof(child_errno)) == (ssize_t)sizeof(child_errno)) {
		close(pfd[0]);
		*err = GSAS_E_SPAWN;
		return child < 0 ? (uint64_t)errno : (uint64_t)child_errno;
	}
	close(pfd[0]);
	st->spawned++;
	if (verbose)
		logmsg("remoteFork %s arg %s: pid %d", path, argbuf, (int)child);
	return (uint64_t)child;
}

/* The local bytes of [addr, addr + len) if all of it is allocated; a WRITE128 may span two pages. */
static uint8_t *translate(uint64_t addr, unsigned len, struct alloc **attr)
{
	struct mmu_entry *e = mmu_find(addr), *e2;
	uint64_t off = addr & (GSAS_PAGE_SIZE - 1);

	if (!e)
		return NULL;
	*attr = e->attr;
	if (off + len <= GSAS_PAGE_SIZE)
		return e->page + off;
	/* crosses into the next page: allowed only inside one allocation (contiguous locally) */
	e2 = mmu_find(addr + len - 1);
	if (!e2 || e2->attr != e->attr)
		return NULL;
	return e->page + off;
}

static void serve(const uint64_t w[4])
{
	uint64_t pid = UNIMEM_PACKET_PID(w[0]), addr = w[1], a1 = w[2], a2 = w[3], err = GSAS_E_OK, res = 0;
	unsigned op = GSAS_W0_OP(w[0]), tag = GSAS_W0_TAG(w[0]), size = gsas_op_size(op);
	struct alloc *attr = NULL;
	uint8_t *p = NULL;

	st->requests++;
	st->ops[op]++;
	if (op == GSAS_OP_EXITED && pid == UNIMEM_KERNEL_PID(UNIMEM_PID_NODE(pid)) &&
	    UNIMEM_PID_NODE(pid) < node_count && addr <= UNIMEM_PID_ID_MAX) {
		/* a node's kernel (its own PIF, which no user thread has) says a process exited */
		op_exited(UNIMEM_PID_NODE(pid), (unsigned)addr);
		return;
	}
	if (UNIMEM_PID_TGID(pid) == 0 || UNIMEM_PID_TID(pid) == 0) {
		/* the kernel's or a service's PID: no user thread sent this, nobody waits for a reply */
		st->refused[GSAS_E_SENDER]++;
		if (verbose)
			logmsg("dropped a packet with PID 0x%012llx (not a user thread)", (unsigned long long)pid);
		return;
	}
	if (UNIMEM_PID_NODE(pid) >= node_count || UNIMEM_PID_MIF(pid) == UNIMEM_IF_SERVICE) {
		st->refused[GSAS_E_SENDER]++;
		return;
	}
	if (size) {
		addr &= ~gsas_align_mask(op); /* Table 1: the low bits are ignored */
		if (GSAS_ADDR_BOARD(addr) != (int)node_id || !(p = translate(addr, size, &attr)))
			err = GSAS_E_BADADDR;
	}
	if (!err) {
		switch (op) {
		case GSAS_OP_PING: res = st->requests; break;
		case GSAS_OP_ALLOC: res = op_alloc(pid, a1, &err); break;
		case GSAS_OP_FREE:
			if (GSAS_ADDR_BOARD(addr & ~gsas_align_mask(op)) != (int)node_id)
				err = GSAS_E_BADADDR;
			else
				res = op_free(pid, addr & ~gsas_align_mask(op), &err);
			break;
		case GSAS_OP_FORK: res = op_fork(pid, p, attr, a1, &err); break;
		case GSAS_OP_READ8: res = *p; break;
		case GSAS_OP_READ32: res = *(uint32_t *)p; break;
		case GSAS_OP_READ64: res = *(uint64_t *)p; break;
		case GSAS_OP_READ4K: res = GSAS_PAGE_SIZE; break;
		case GSAS_OP_WRITE8:
			if (a1 > 0xff)
				err = GSAS_E_INVAL;
			else
				*p = (uint8_t)a1;
			break;
		case GSAS_OP_WRITE32:
			if (a1 > 0xffffffffull)
				err = GSAS_E_INVAL;
			else
				*(uint32_t *)p = (uint32_t)a1;
			break;
		case GSAS_OP_WRITE64: *(uint64_t *)p = a1; break;
		case GSAS_OP_WRITE128: memcpy(p, &a1, 8); memcpy(p + 8, &a2, 8); break;
		case GSAS_OP_CAS:
			res = *(uint64_t *)p;
			if (res == a1)
				*(uint64_t *)p = a2;
			break;
		case GSAS_OP_FAD: res = *(uint64_t *)p; *(uint64_t *)p = res + a1; break;
		case GSAS_OP_SWAP: res = *(uint64_t *)p; *(uint64_t *)p = a1; break;
		default: err = GSAS_E_BADOP; break;
		}
	}
	if (err && verbose)
		logmsg("refused op 0x%02x addr 0x%016llx from node %u tgid %u tid %u: error %llu", op,
		       (unsigned long long)w[1], UNIMEM_PID_NODE(pid), UNIMEM_PID_TGID(pid), UNIMEM_PID_TID(pid),
		       (unsigned long long)err);
	if (op == GSAS_OP_READ4K && !err) {
		uint8_t snap[GSAS_PAGE_SIZE];

		memcpy(snap, p, sizeof(snap)); /* the page as of now: the read is one atomic operation */
		reply(pid, op, tag, err, res, addr, snap);
		return;
	}
	reply(pid, op, tag, err, res, addr, NULL);
}

/* ---- main loop ---- */

static void usage(void)
{
	printf("usage: gsasd [--max-mem SIZE] [--max-mem-unpriv SIZE] [--spin-us N] [--reply-timeout-ms N] [--log-dir DIR] [--verbose]\n"
	       "\n"
	       "The GSAS atomic service of this board (ExaNoDe D3.6 sec. 2.2.4; docs/gsas.md). Takes interface 0\n"
	       "of the Unimem mailbox and packetizer (root; one service per board), serves allocSharedPage,\n"
	       "freeSharedPage, remoteFork, READ8/32/64/4K, WRITE8/32/64/128, CAS, FAD and SWAP for this\n"
	       "board's partition of the global shared address space, and answers every request into the\n"
	       "issuer's mailbox interface. Runs in the foreground until SIGTERM or SIGINT; init starts it.\n"
	       "\n"
	       "  --max-mem SIZE          memory it may hand out (default 32M; K and M suffixes)\n"
	       "  --max-mem-unpriv SIZE   what one unprivileged process may hold (default 8M)\n"
	       "  --spin-us N             poll MIF 0 this long after a request before sleeping on the\n"
	       "                          arrival interrupt (default 200)\n"
	       "  --reply-timeout-ms N    give up a reply the issuer's full FIFO refuses this long (default 200)\n"
	       "  --log-dir DIR           where remoteFork children write NAME-BOARD-stdout.log and\n"
	       "                          NAME-BOARD-stderr.log (default /tmp/gsas)\n"
	       "  --verbose               log allocations, spawns and refused requests on stderr\n"
	       "\n"
	       "Counters: " GSAS_STATS_PATH " (`gsas stats`).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "max-mem", required_argument, NULL, 'm' },  { "spin-us", required_argument, NULL, 's' },
		{ "reply-timeout-ms", required_argument, NULL, 'r' }, { "log-dir", required_argument, NULL, 'l' },
		{ "verbose", no_argument, NULL, 'v' },      { "help", no_argument, NULL, 'h' },
		{ "max-mem-unpriv", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa = { 0 };
	uint64_t last = 0, partial_since = 0;
	int c, rc, fd;

	tool_prog = "gsasd";
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': max_pages = num(optarg, "--max-mem", 1ull << 40) / GSAS_PAGE_SIZE; break;
		case 'u': max_pages_unpriv = num(optarg, "--max-mem-unpriv", 1ull << 40) / GSAS_PAGE_SIZE; break;
		case 's': spin_us = (unsigned)num(optarg, "--spin-us", 10000000); break;
		case 'r': reply_timeout_ms = (unsigned)num(optarg, "--reply-timeout-ms", 600000); break;
		case 'l': log_dir = optarg; break;
		case 'v': verbose = 1; break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (optind != argc)
		die("unexpected argument '%s' (see --help)", argv[optind]);
	if (!max_pages)
		die("--max-mem must be at least one page (4K)");
	setvbuf(stderr, NULL, _IOLBF, 0);
	if ((rc = unimem_open(&u)))
		die("cannot open %s: %s (is unimem.ko loaded?)", UNIMEM_DEV_PATH, strerror(-rc));
	node_id = u.info.node_id;
	node_count = u.info.node_count;
	if ((rc = unimem_bind(&u, UNIMEM_IF_SERVICE, UNIMEM_IF_SERVICE)))
		die("cannot take interface 0 of the mailbox and packetizer: %s (%s)", strerror(-rc),
		    rc == -EBUSY ? "another atomic service runs on this board" : "run gsasd as root");
	if ((rc = unimem_map(&u)))
		die("cannot map interface 0: %s", strerror(-rc));
	if (mkdir(log_dir, 0755) && errno != EEXIST)
		die("cannot create the log directory %s: %s", log_dir, strerror(errno));
	fd = open(GSAS_STATS_PATH, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || ftruncate(fd, sizeof(*st)))
		die("cannot create %s: %s", GSAS_STATS_PATH, strerror(errno));
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED)
		die("cannot map %s: %s", GSAS_STATS_PATH, strerror(errno));
	close(fd);
	st->pid = (uint64_t)getpid();
	st->pages_limit = max_pages;
	st->magic = GSAS_STATS_MAGIC;

	/* SIGTERM and SIGINT are taken only while sleeping (ppoll), so one that comes just before
	 * the sleep still ends it: the sleep has no timeout */
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	{
		sigset_t block;

		sigemptyset(&block);
		sigaddset(&block, SIGTERM);
		sigaddset(&block, SIGINT);
		sigprocmask(SIG_BLOCK, &block, &run_mask);
	}
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = SA_NOCLDWAIT; /* remoteFork children are reaped by the kernel */
	sigaction(SIGCHLD, &sa, NULL);
	logmsg("serving board %u of %u (MIF 0, PID 0x%012llx), up to %llu pages", node_id, node_count,
	       (unsigned long long)u.info.pid_prefix, (unsigned long long)max_pages);

	while (!stop) {
		unsigned pending = unimem_pending(&u);

		if (pending >= UNIMEM_PACKET_WORDS) {
			uint64_t w[UNIMEM_PACKET_WORDS];

			uint64_t t0 = now_ns();

			for (unsigned i = 0; i < UNIMEM_PACKET_WORDS; i++)
				w[i] = u.mif[VMBOX_MIF_DATA / 8];
			serve(w);
			st->serve_ns += now_ns() - t0;
			last = now_us();
			partial_since = 0;
			continue;
		}
		if (pending) {
			/* packets arrive as one 4-word burst: a lone word is debris (the vmbox's
			 * burst "known issue" mode); drop it after a millisecond */
			if (!partial_since) {
				partial_since = now_us();
			} else if (now_us() - partial_since > 1000) {
				while (unimem_pending(&u) && unimem_pending(&u) < UNIMEM_PACKET_WORDS)
					(void)u.mif[VMBOX_MIF_DATA / 8];
				st->malformed++;
				partial_since = 0;
			}
			spin_relax();
			continue;
		}
		if (now_us() - last < spin_us) {
			spin_relax();
			continue;
		}
		if (out.live) {
			settle_for(1); /* the last reply's fate before sleeping: a refused one is posted again */
			continue;
		}
		{
			/* sleep on the arrival interrupt until a request comes (no timeout: idle is asleep) */
			struct pollfd pfd = { u.fd, POLLIN, 0 };

			st->sleeps++;
			if (ppoll(&pfd, 1, NULL, &run_mask) < 0 && errno != EINTR)
				die("ppoll on /dev/unimem: %s", strerror(errno));
			if (pfd.revents & (POLLERR | POLLNVAL))
				die("/dev/unimem reports an error on interface 0");
		}
	}
	logmsg("stopping after %llu requests", (unsigned long long)st->requests);
	st->pid = 0;
	unimem_close(&u);
	return 0;
}
