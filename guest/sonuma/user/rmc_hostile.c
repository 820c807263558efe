// SPDX-License-Identifier: MIT
/*
 * rmc-hostile: what a hostile unprivileged user tries against /dev/rmc's doorbell pages, for the
 * hardening tests (tests/e2e/test_rmc_hardening_driver.py, docs/rmc-driver.md "Queue pairs").
 * Every command prints key=value lines. Each registers its own scratch contexts (one page, the
 * first free ids from 15 down), so several users can run it at once.
 *
 *   rmc-hostile dbrace [--iters N]
 *       N times: create a QP, then mmap its doorbell page in one thread while another destroys
 *       the QP; then touch the page. The destroy's delay tracks the moment mmap checks the QP's
 *       owner (a destroy before it makes the mmap fail, one after it lands in the window the
 *       race needs): each refused mmap delays the next destroy a step more, each mapping a step
 *       less (a negative delay holds the mmap back instead), so about half the rounds end each
 *       way, with a jitter of a few steps. A mapping that survived the destroy and reaches the device is `stale`; a revoked
 *       one faults (SIGBUS). For a stale mapping, another file then creates a QP: if it gets the
 *       same index, a store through the stale page is looked for in the new QP's doorbell
 *       (`stale_rang_other`).
 *   rmc-hostile dbstale
 *       the same property without a race: a doorbell mapping, touched or not, faults after its
 *       QP is destroyed, even when another file has a QP at the same index since.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rackemu/sonuma_regs.h"
#include "rackemu/sonuma_uapi.h"
#include "race.h"
#include "tool.h"

#define PAGE 4096

static const char usage[] =
	"usage: rmc-hostile COMMAND [options]\n"
	"  dbrace [--iters N]  N races of mmap of a QP's doorbell page against RMC_IOC_QP_DESTROY (default\n"
	"                 5000; the destroy's delay tracks mmap's owner check); prints mapped= refused=\n"
	"                 revoked= stale= (stale: a mapping that outlived the destroy and still reads the\n"
	"                 device) stale_rang_other= (of those, doorbell stores that rang another file's QP\n"
	"                 at the same index)\n"
	"  dbstale        a doorbell mapping faults once its QP is destroyed (check= lines)\n";

static int open_dev(void)
{
	int fd = open(RMC_DEV_PATH, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "rmc-hostile: cannot open %s: %s\n", RMC_DEV_PATH, strerror(errno));
		exit(1);
	}
	return fd;
}

/* Register a one-page context on the first free id from the top; its id, or exit. */
static unsigned scratch_ctx(int fd)
{
	for (int id = RMC_CTX_COUNT - 1; id >= 0; id--) {
		struct rmc_uapi_ctx u = { .id = (unsigned)id, .perm = CTX_PERM_READ | CTX_PERM_WRITE, .size = PAGE,
					  .nodemask = ~0ull, .version_off = RMC_UAPI_NO_LAYOUT };

		if (!ioctl(fd, RMC_IOC_CTX_REGISTER, &u))
			return (unsigned)id;
		if (errno != EBUSY) {
			fprintf(stderr, "rmc-hostile: register context %d: %s\n", id, strerror(errno));
			exit(1);
		}
	}
	fprintf(stderr, "rmc-hostile: every context id is taken\n");
	exit(1);
}

static int create_qp(int fd, unsigned ctx, struct rmc_uapi_qp *u)
{
	*u = (struct rmc_uapi_qp){ .ctx = ctx, .depth_log2 = 1 };
	return ioctl(fd, RMC_IOC_QP_CREATE, u) ? errno : 0;
}

static int destroy_qp(int fd, uint32_t q)
{
	return ioctl(fd, RMC_IOC_QP_DESTROY, &q) ? errno : 0;
}

static volatile uint64_t *map_db(int fd, const struct rmc_uapi_qp *u)
{
	void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)u->db_mmap_off);

	return p == MAP_FAILED ? NULL : p;
}

/* ---- touching a page that may be revoked ---- */

static int probe(volatile uint64_t *p, uint64_t *v)
{
	return race_touch(p, 8, v, NULL);
}

static int poke(volatile uint64_t *p, uint64_t v)
{
	return race_touch(p, 8, NULL, &v);
}

/* ---- dbrace ---- */

/* What the destroyer (race.h) destroys in each round. */
static struct {
	int fd;
	uint32_t qp;
} victim;

static int destroy_victim(void *unused)
{
	(void)unused;
	return destroy_qp(victim.fd, victim.qp);
}

/* A stale mapping of QP index q: does a store through it reach another file's new QP q? 1 yes,
 * 0 no, -1 the other file did not get index q. */
static int stale_rings_other(volatile uint64_t *stale, uint32_t q, int other_fd, unsigned other_ctx)
{
	struct rmc_uapi_qp o;
	volatile uint64_t *n;
	uint64_t seen = 0;
	int hit = -1;

	if (create_qp(other_fd, other_ctx, &o))
		return -1;
	n = o.qp == q ? map_db(other_fd, &o) : NULL;
	if (n) {
		/* ring it: WQ tail 1 (the device takes it, and DB_WQ_TAIL reads it back) */
		hit = !poke(stale + DB_WQ_TAIL / 8, 1) && !probe(n + DB_WQ_TAIL / 8, &seen) && seen == 1;
		munmap((void *)n, PAGE);
	}
	destroy_qp(other_fd, o.qp);
	return hit;
}

static int cmd_dbrace(int argc, char **argv)
{
	static const struct option opts[] = { { "iters", required_argument, 0, 'n' }, { 0, 0, 0, 0 } };
	unsigned iters = 5000, mapped = 0, refused = 0, revoked = 0, stale = 0, rang = 0, other = 0, c;
	uint64_t t_mmap = 0;
	int64_t delay, step;
	unsigned ctx, other_ctx;
	int other_fd, r;
	pthread_t th;

	opterr = 0;
	while ((r = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		if (r != 'n')
			bad_option(r, argv, "rmc-hostile --help");
		iters = (unsigned)num(optarg, "--iters", 10000000);
	}
	victim.fd = open_dev();
	ctx = scratch_ctx(victim.fd);
	other_fd = open_dev();
	other_ctx = scratch_ctx(other_fd);
	race.destroy = destroy_victim;
	race_pin_to(0);
	/* how long an mmap of a doorbell page takes here: the scale of the destroy's delay */
	for (c = 0; c < 20; c++) {
		struct rmc_uapi_qp q;
		volatile uint64_t *p;
		uint64_t t0;

		if ((r = create_qp(victim.fd, ctx, &q))) {
			fprintf(stderr, "rmc-hostile: create QP: %s\n", strerror(r));
			return 1;
		}
		t0 = race_now_ns();
		p = map_db(victim.fd, &q);
		t_mmap += race_now_ns() - t0;
		if (p)
			munmap((void *)p, PAGE);
		destroy_qp(victim.fd, q.qp);
	}
	t_mmap /= 20;
	delay = (int64_t)t_mmap / 2;
	step = (int64_t)t_mmap / 32 + 1;
	if (pthread_create(&th, NULL, race_destroyer, NULL)) {
		fprintf(stderr, "rmc-hostile: no thread\n");
		return 1;
	}
	for (unsigned i = 1; i <= iters; i++) {
		struct rmc_uapi_qp q;
		volatile uint64_t *p;
		uint64_t v = 0;
		int64_t d;
		int sig;

		if ((r = create_qp(victim.fd, ctx, &q))) {
			fprintf(stderr, "rmc-hostile: create QP (round %u): %s\n", i, strerror(r));
			return 1;
		}
		victim.qp = q.qp;
		/* around the tracked moment, jitter of +-4 steps (in no order); a negative delay
		 * holds the mmap back instead (the destroying thread starts late)
		 */
		d = delay + (int64_t)(i * 7919 % 9) * step - 4 * step;
		race.delay_ns = d > 0 ? (uint64_t)d : 0;
		race_start(i);
		if (d < 0) {
			uint64_t t = race_now_ns() + (uint64_t)-d;

			while (race_now_ns() < t)
				;
		}
		p = map_db(victim.fd, &q);
		race_wait(i);
		if (race.err) {
			fprintf(stderr, "rmc-hostile: destroy QP (round %u): %s\n", i, strerror(race.err));
			return 1;
		}
		if (!p) {
			refused += errno == ENOENT;
			other += errno != ENOENT;
			if (delay < 64 * (int64_t)t_mmap)
				delay += step; /* the destroy came before the owner check: later */
			continue;
		}
		mapped++;
		if (delay > -64 * (int64_t)t_mmap)
			delay -= step; /* after it: earlier */
		/* the QP is gone: its doorbell page must fault, never reach the device */
		sig = probe(p + DB_STATUS / 8, &v);
		if (sig) {
			revoked++;
		} else {
			int hit = stale_rings_other(p, q.qp, other_fd, other_ctx);

			stale++;
			rang += hit == 1;
			if (stale <= 5)
				printf("stale_mapping round=%u qp=%u delay_ns=%lld status=0x%llx rang_other=%d\n", i, q.qp,
				       (long long)d, (unsigned long long)v, hit);
		}
		munmap((void *)p, PAGE);
	}
	race_end(th);
	printf("dbrace=done iters=%u mmap_ns=%llu mapped=%u refused=%u revoked=%u stale=%u stale_rang_other=%u "
	       "other_errors=%u delay_ns=%lld uid=%u\n",
	       iters, (unsigned long long)t_mmap, mapped, refused, revoked, stale, rang, other, (long long)delay,
	       (unsigned)getuid());
	close(other_fd);
	close(victim.fd); /* the driver releases the contexts */
	return stale || other ? 1 : 0;
}

/* ---- dbstale ---- */

static int cmd_dbstale(void)
{
	int a = open_dev(), b = open_dev(), r, r2, sig, sig2;
	unsigned ca = scratch_ctx(a), cb = scratch_ctx(b);
	struct rmc_uapi_qp qa, qb;
	volatile uint64_t *m, *n;
	uint64_t v = 0, h0 = 0, h1 = 0;

	/* touched, then destroyed */
	r = create_qp(a, ca, &qa);
	m = r ? NULL : map_db(a, &qa);
	sig = m ? probe(m + DB_STATUS / 8, &v) : -1;
	r = r ? r : destroy_qp(a, qa.qp);
	sig2 = m ? probe(m + DB_STATUS / 8, &v) : -1;
	check("doorbell_touched_then_destroyed_faults", sig == 0 && r == 0 && race_faulted(sig2),
	      "before=%d destroy=%d after=%s", sig, r, sig2 > 0 ? strsignal(sig2) : "reached the device");
	if (m)
		munmap((void *)m, PAGE);

	/* mapped, never touched, destroyed; then another file's QP takes the same index */
	r = create_qp(a, ca, &qa);
	m = r ? NULL : map_db(a, &qa);
	r = r ? r : destroy_qp(a, qa.qp);
	r2 = create_qp(b, cb, &qb);
	n = r2 ? NULL : map_db(b, &qb);
	if (n)
		probe(n + DB_WQ_TAIL / 8, &h0);
	sig = m ? probe(m + DB_STATUS / 8, &v) : -1;
	sig2 = m ? poke(m + DB_WQ_TAIL / 8, 1) : -1; /* would ring the other file's QP */
	if (n)
		probe(n + DB_WQ_TAIL / 8, &h1);
	check("doorbell_of_a_reused_index_faults",
	      r == 0 && r2 == 0 && n && qb.qp == qa.qp && race_faulted(sig) && race_faulted(sig2) && h1 == h0,
	      "qp=%u other_file_qp=%u read=%s write=%s other_wq_tail=%llu->%llu", qa.qp, qb.qp,
	      sig > 0 ? strsignal(sig) : "reached the device", sig2 > 0 ? strsignal(sig2) : "reached the device",
	      (unsigned long long)h0, (unsigned long long)h1);
	if (m)
		munmap((void *)m, PAGE);
	if (n)
		munmap((void *)n, PAGE);

	/* a mapping of a destroyed QP's page is refused */
	r = r2 ? r2 : destroy_qp(b, qb.qp);
	n = map_db(b, &qb);
	check("doorbell_mmap_after_destroy_refused", r == 0 && !n && errno == ENOENT, "errno=%d", n ? 0 : errno);
	if (n)
		munmap((void *)n, PAGE);
	close(a);
	close(b);
	return check_summary();
}

int main(int argc, char **argv)
{
	tool_prog = "rmc-hostile";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "dbrace"))
		return cmd_dbrace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "dbstale"))
		return cmd_dbstale();
	die("unknown command '%s' (rmc-hostile --help)", argv[1]);
}
