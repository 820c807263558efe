// SPDX-License-Identifier: MIT
/*
 * rnic-hostile: what a hostile unprivileged user tries against /dev/rnic0, for the hardening
 * tests (tests/e2e/test_rnic_hardening_driver.py, docs/rnic-verbs.md "Limits" and "Queues and
 * doorbells"). Every command prints key=value lines.
 *
 *   rnic-hostile take [--pd N] [--mr N] [--cq N] [--qp N] [--cq-log2 L] [--qp-log2 L] [--hold S]
 *       create up to N objects of each kind in one open file (MRs of one page, CQs of 2^L
 *       entries, QPs of 2^L send and receive entries on the first CQ), stop each kind at its first
 *       refusal and print how many it got and that errno; --hold keeps them S seconds.
 *   rnic-hostile dbrace [--iters N]
 *       N times: create a QP, then mmap its doorbell page in one thread while another destroys
 *       the QP, the destroy starting at a different moment of the mmap each time; then touch the
 *       page. A mapping that survived the destroy and reaches the device is `stale`; a revoked
 *       one faults (SIGBUS).
 *   rnic-hostile dbstale
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

#include "librnic.h"
#include "race.h"
#include "tool.h"

static const char usage[] =
	"usage: rnic-hostile COMMAND [options]\n"
	"  take [--pd N] [--mr N] [--cq N] [--qp N] [--cq-log2 L] [--qp-log2 L] [--hold S]\n"
	"                 create up to N objects of each kind (MRs of one page; CQs of 2^L entries; QPs of\n"
	"                 2^L send and receive entries on the first CQ), each kind up to its first refusal;\n"
	"                 prints pd=.. pd_err=.. mr=.. ... ring_kib=..; --hold keeps them S seconds\n"
	"  dbrace [--iters N]  N races of mmap of a QP's doorbell page against DESTROY_QP (default 5000);\n"
	"                 prints mapped= refused= revoked= stale= (stale: a mapping that outlived the destroy)\n"
	"  dbstale        a doorbell mapping faults once its QP is destroyed (check= lines)\n";

static const char *err_name(int e)
{
	const char *n = e ? strerrorname_np(e) : "none";

	return n ? n : "unknown";
}

static struct rnic_ctx *open_dev(void)
{
	struct rnic_ctx *ctx = rnic_open(NULL);

	if (!ctx) {
		fprintf(stderr, "rnic-hostile: cannot open %s: %s\n", RNIC_DEV_PATH, strerror(errno));
		exit(1);
	}
	return ctx;
}

/* ---- touching a page that may be revoked ---- */

/* Read the 32-bit word at p: 0 and *val if it reached the device, else the signal it raised. */
static int probe(volatile uint32_t *p, uint32_t *val)
{
	uint64_t v = 0;
	int sig = race_touch(p, 4, &v, NULL);

	*val = (uint32_t)v;
	return sig;
}

/* Write v to the 32-bit word at p: 0 if it reached the device, else the signal. */
static int poke(volatile uint32_t *p, uint32_t v)
{
	uint64_t w = v;

	return race_touch(p, 4, NULL, &w);
}

/* ---- raw objects (no library mapping: only what each test needs) ---- */

static int create_cq(struct rnic_ctx *ctx, unsigned log2, struct rnic_ucreate_cq *u)
{
	memset(u, 0, sizeof(*u));
	u->depth_log2 = log2;
	return ioctl(ctx->fd, RNIC_IOC_CREATE_CQ, u) ? errno : 0;
}

static int create_qp(struct rnic_ctx *ctx, uint32_t pd, uint32_t cqn, unsigned log2, struct rnic_ucreate_qp *u)
{
	memset(u, 0, sizeof(*u));
	u->pdn = pd;
	u->send_cqn = cqn;
	u->recv_cqn = cqn;
	u->sq_depth_log2 = log2;
	u->rq_depth_log2 = log2;
	return ioctl(ctx->fd, RNIC_IOC_CREATE_QP, u) ? errno : 0;
}

static int destroy_qp(struct rnic_ctx *ctx, uint32_t qpn)
{
	return ioctl(ctx->fd, RNIC_IOC_DESTROY_QP, &qpn) ? errno : 0;
}

static size_t page_round(size_t n)
{
	return (n + RNIC_PAGE_SIZE - 1) & ~(size_t)(RNIC_PAGE_SIZE - 1);
}

/* ---- take ---- */

static int cmd_take(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pd", required_argument, 0, 'p' }, { "mr", required_argument, 0, 'm' },
		{ "cq", required_argument, 0, 'c' }, { "qp", required_argument, 0, 'q' },
		{ "cq-log2", required_argument, 0, 'C' }, { "qp-log2", required_argument, 0, 'Q' },
		{ "hold", required_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	unsigned want_pd = 1, want_mr = 0, want_cq = 0, want_qp = 0, cq_log2 = 1, qp_log2 = 1, hold = 0;
	unsigned got_pd = 0, got_mr = 0, got_cq = 0, got_qp = 0;
	int err_pd = 0, err_mr = 0, err_cq = 0, err_qp = 0, c;
	uint64_t ring_bytes = 0;
	uint32_t pd0 = 0, cq0 = 0;
	struct rnic_ctx *ctx;
	uint8_t *page;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'p': want_pd = (unsigned)num(optarg, "--pd", 1u << 20); break;
		case 'm': want_mr = (unsigned)num(optarg, "--mr", 1u << 20); break;
		case 'c': want_cq = (unsigned)num(optarg, "--cq", 1u << 20); break;
		case 'q': want_qp = (unsigned)num(optarg, "--qp", 1u << 20); break;
		case 'C': cq_log2 = (unsigned)num(optarg, "--cq-log2", RNIC_DEPTH_LOG2_MAX); break;
		case 'Q': qp_log2 = (unsigned)num(optarg, "--qp-log2", RNIC_DEPTH_LOG2_MAX); break;
		case 'h': hold = (unsigned)num(optarg, "--hold", 86400); break;
		default: bad_option(c, argv, "rnic-hostile --help");
		}
	}
	if ((want_mr || want_qp) && !want_pd)
		die("--mr and --qp need a PD (--pd 1 or more)");
	if (want_qp && !want_cq)
		die("--qp needs a CQ (--cq 1 or more)");
	ctx = open_dev();
	page = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (page == MAP_FAILED)
		die("no memory");
	while (got_pd < want_pd) {
		uint32_t pd;
		int r = rnic_alloc_pd(ctx, &pd);

		if (r) {
			err_pd = -r;
			break;
		}
		if (!got_pd++)
			pd0 = pd;
	}
	while (got_pd && got_mr < want_mr) {
		struct rnic_mr m;
		int r = rnic_reg_mr(ctx, pd0, page, RNIC_PAGE_SIZE, RNIC_ACCESS_ALL, &m);

		if (r) {
			err_mr = -r;
			break;
		}
		got_mr++;
	}
	while (got_cq < want_cq) {
		struct rnic_ucreate_cq u;

		err_cq = create_cq(ctx, cq_log2, &u);
		if (err_cq)
			break;
		if (!got_cq++)
			cq0 = u.cqn;
		ring_bytes += page_round(sizeof(struct rnic_cqe) << cq_log2);
	}
	while (got_pd && got_cq && got_qp < want_qp) {
		struct rnic_ucreate_qp u;

		err_qp = create_qp(ctx, pd0, cq0, qp_log2, &u);
		if (err_qp)
			break;
		got_qp++;
		ring_bytes += page_round(sizeof(struct rnic_send_wqe) << qp_log2) +
			      page_round(sizeof(struct rnic_recv_wqe) << qp_log2);
	}
	printf("pd=%u pd_err=%s mr=%u mr_err=%s cq=%u cq_err=%s qp=%u qp_err=%s ring_kib=%llu uid=%u\n", got_pd,
	       err_name(err_pd), got_mr, err_name(err_mr), got_cq, err_name(err_cq), got_qp, err_name(err_qp),
	       (unsigned long long)(ring_bytes >> 10), (unsigned)getuid());
	fflush(stdout);
	if (hold) {
		signal(SIGTERM, on_signal);
		signal(SIGINT, on_signal);
		for (unsigned s = 0; s < hold * 10 && !stop; s++)
			usleep(100000);
	}
	rnic_close(ctx); /* the driver destroys every object */
	return 0;
}

/* ---- dbrace ---- */

/* What the destroyer (race.h) destroys in each round. */
static struct {
	struct rnic_ctx *ctx;
	uint32_t qpn;
} victim;

static int destroy_victim(void *unused)
{
	(void)unused;
	return destroy_qp(victim.ctx, victim.qpn);
}

static int cmd_dbrace(int argc, char **argv)
{
	static const struct option opts[] = { { "iters", required_argument, 0, 'n' }, { 0, 0, 0, 0 } };
	unsigned iters = 5000, mapped = 0, refused = 0, revoked = 0, stale = 0, other = 0, c;
	uint64_t t_mmap = 0, window;
	struct rnic_ucreate_cq cq;
	pthread_t th;
	uint32_t pd;
	int r;

	opterr = 0;
	while ((r = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		if (r != 'n')
			bad_option(r, argv, "rnic-hostile --help");
		iters = (unsigned)num(optarg, "--iters", 10000000);
	}
	victim.ctx = open_dev();
	if ((r = rnic_alloc_pd(victim.ctx, &pd)) || (r = -create_cq(victim.ctx, 1, &cq))) {
		fprintf(stderr, "rnic-hostile: PD or CQ: %s\n", strerror(-r));
		return 1;
	}
	race.destroy = destroy_victim;
	race_pin_to(0);
	/* how long an mmap of a doorbell page takes here: the destroy starts 0..1.5x that late */
	for (c = 0; c < 20; c++) {
		struct rnic_ucreate_qp q;
		uint64_t t0;
		void *p;

		if ((r = create_qp(victim.ctx, pd, cq.cqn, 1, &q))) {
			fprintf(stderr, "rnic-hostile: create QP: %s\n", strerror(r));
			return 1;
		}
		t0 = race_now_ns();
		p = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, victim.ctx->fd, (off_t)q.db_off);
		t_mmap += race_now_ns() - t0;
		if (p != MAP_FAILED)
			munmap(p, RNIC_PAGE_SIZE);
		destroy_qp(victim.ctx, q.qpn);
	}
	t_mmap /= 20;
	window = t_mmap * 3 / 2 + 1;
	if (pthread_create(&th, NULL, race_destroyer, NULL)) {
		fprintf(stderr, "rnic-hostile: no thread\n");
		return 1;
	}
	for (unsigned i = 1; i <= iters; i++) {
		struct rnic_ucreate_qp q;
		uint32_t v;
		void *p;
		int sig;

		if ((r = create_qp(victim.ctx, pd, cq.cqn, 1, &q))) {
			fprintf(stderr, "rnic-hostile: create QP (round %u): %s\n", i, strerror(r));
			return 1;
		}
		victim.qpn = q.qpn;
		race.delay_ns = (uint64_t)i * 7919 % window; /* every moment of the mmap, in no order */
		race_start(i);
		p = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, victim.ctx->fd, (off_t)q.db_off);
		race_wait(i);
		if (race.err) {
			fprintf(stderr, "rnic-hostile: destroy QP (round %u): %s\n", i, strerror(race.err));
			return 1;
		}
		if (p == MAP_FAILED) {
			refused += errno == ENOENT;
			other += errno != ENOENT;
			continue;
		}
		mapped++;
		/* the QP is gone: its doorbell page must fault, never reach the device */
		sig = probe((volatile uint32_t *)p + RNIC_QP_DB_STATE / 4, &v);
		if (sig) {
			revoked++;
		} else {
			stale++;
			if (stale <= 5)
				printf("stale_mapping round=%u qpn=0x%x delay_ns=%llu state=%u\n", i, q.qpn,
				       (unsigned long long)race.delay_ns, v);
		}
		munmap(p, RNIC_PAGE_SIZE);
	}
	race_end(th);
	printf("dbrace=done iters=%u mmap_ns=%llu mapped=%u refused=%u revoked=%u stale=%u other_errors=%u\n", iters,
	       (unsigned long long)t_mmap, mapped, refused, revoked, stale, other);
	rnic_close(victim.ctx);
	return stale || other ? 1 : 0;
}

/* ---- dbstale ---- */

static int cmd_dbstale(void)
{
	struct rnic_ctx *a = open_dev(), *b = open_dev();
	struct rnic_ucreate_cq ca, cb;
	struct rnic_ucreate_qp qa, qb;
	uint32_t pa, pb, v = 0, st0 = 0, st1 = 0;
	volatile uint32_t *m, *n;
	int r, sig, sig2;

	if ((r = rnic_alloc_pd(a, &pa)) || (r = rnic_alloc_pd(b, &pb)) || (r = -create_cq(a, 1, &ca)) ||
	    (r = -create_cq(b, 1, &cb))) {
		fprintf(stderr, "rnic-hostile: PD or CQ: %s\n", strerror(-r));
		return 1;
	}
	/* touched, then destroyed */
	create_qp(a, pa, ca.cqn, 1, &qa);
	m = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, (off_t)qa.db_off);
	sig = m == MAP_FAILED ? -1 : probe(m + RNIC_QP_DB_STATE / 4, &v);
	r = destroy_qp(a, qa.qpn);
	sig2 = m == MAP_FAILED ? -1 : probe(m + RNIC_QP_DB_STATE / 4, &v);
	check("doorbell_touched_then_destroyed_faults", sig == 0 && r == 0 && race_faulted(sig2),
	      "before=%d destroy=%d after=%s", sig, r, sig2 > 0 ? strsignal(sig2) : "reached the device");
	if (m != MAP_FAILED)
		munmap((void *)m, RNIC_PAGE_SIZE);

	/* mapped, never touched, destroyed; then another file's QP takes the same index */
	create_qp(a, pa, ca.cqn, 1, &qa);
	m = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, (off_t)qa.db_off);
	r = destroy_qp(a, qa.qpn);
	create_qp(b, pb, cb.cqn, 1, &qb);
	n = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, (off_t)qb.db_off);
	if (n != MAP_FAILED)
		probe(n + RNIC_QP_DB_STATE / 4, &st0);
	sig = m == MAP_FAILED ? -1 : probe(m + RNIC_QP_DB_STATE / 4, &v);
	sig2 = m == MAP_FAILED ? -1 : poke(m + RNIC_QP_DB_SQ_PI / 4, 1);
	if (n != MAP_FAILED)
		probe(n + RNIC_QP_DB_STATE / 4, &st1);
	check("doorbell_of_a_reused_index_faults",
	      r == 0 && qb.qpn == qa.qpn && race_faulted(sig) && race_faulted(sig2) &&
		      st1 == st0,
	      "qpn=0x%x other_file_qpn=0x%x read=%s write=%s other_state=%u->%u", qa.qpn, qb.qpn,
	      sig > 0 ? strsignal(sig) : "reached the device", sig2 > 0 ? strsignal(sig2) : "reached the device", st0,
	      st1);
	/* a mapping of a destroyed QP's page is refused */
	r = destroy_qp(b, qb.qpn);
	n = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, (off_t)qb.db_off);
	check("doorbell_mmap_after_destroy_refused", r == 0 && n == MAP_FAILED && errno == ENOENT, "errno=%d",
	      n == MAP_FAILED ? errno : 0);
	rnic_close(a);
	rnic_close(b);
	return check_summary();
}

int main(int argc, char **argv)
{
	tool_prog = "rnic-hostile";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "take"))
		return cmd_take(argc - 1, argv + 1);
	if (!strcmp(argv[1], "dbrace"))
		return cmd_dbrace(argc - 1, argv + 1);
	if (!strcmp(argv[1], "dbstale"))
		return cmd_dbstale();
	die("unknown command '%s' (rnic-hostile --help)", argv[1]);
}
