// SPDX-License-Identifier: MIT
/*
 * rmc: the soNUMA RMC from the shell (docs/rmc-driver.md). Every command prints key=value lines.
 *
 *   rmc info | counters
 *   rmc ctx-hold --id N --size S [--perm rwas] [--nodemask M] [--version-off O] [--seed S] [--seconds T]
 *   rmc read  --id N --node D --roff R --len L [--loff L] [--sabre] [--nospec]
 *   rmc check-data --id N --node D --roff R --len L --seed S [--loff L]
 *   rmc write-pattern --id N --node D --roff R --len L --seed S [--loff L]
 *   rmc atomic --id N --node D --off O --op faa|cas --count K
 *   rmc async-read --id N --node D --len L --count K [--window W] [--timeout-ms T]
 *   rmc check
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "librmc.h"
#include "tool.h"

static const char usage[] =
	"usage: rmc COMMAND [options]   (sizes and offsets take K and M suffixes)\n"
	"  info                      this node's RMC: node, QPs, contexts, segment, ATT, timing\n"
	"  counters                  the device counters (key=value)\n"
	"  ctx-hold --id N --size S [--perm rwas] [--nodemask M] [--version-off O] [--seed S] [--seconds T]\n"
	"                            register context N (perm: r read, w write, a atomics, s SABRe; default rwas;\n"
	"                            nodemask default: every node; --version-off enables SABRes), fill it with\n"
	"                            pattern S if given, print it and hold it (until killed, or T seconds)\n"
	"  read --id N --node D --roff R --len L [--loff L] [--sabre] [--nospec]\n"
	"                            one READ (or SABRe) into this node's segment of context N\n"
	"  check-data --id N --node D --roff R --len L --seed S [--loff L]\n"
	"                            read node D's bytes and verify them against pattern S\n"
	"  write-pattern --id N --node D --roff R --len L --seed S [--loff L]\n"
	"                            write pattern S (as at roff) into node D's segment\n"
	"  atomic --id N --node D --off O --op faa|cas --count K\n"
	"                            K increments of the word at O: FAA, or a CAS retry loop\n"
	"  async-read --id N --node D --len L --count K [--window W] [--timeout-ms T]\n"
	"                            K reads with W in flight; counts completions per status\n"
	"  check                     the device and driver checks on this node (the node is its own destination)\n";

/* Byte i of pattern `seed` over a remote range starting at offset `base`: tells a byte that was
 * not copied (0 or stale) from one that landed at the wrong place. */
static uint8_t pat(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ i * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 29;
	return (uint8_t)(x * 0x94d049bb133111ebull >> 56);
}

struct opts {
	long id, node, seconds, window, timeout_ms, version_off;
	uint64_t size, roff, loff, len, off, count, nodemask, seed;
	const char *perm, *op;
	int sabre, nospec, have_seed;
};

static void parse(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->id = o->node = -1;
	o->version_off = -1;
	o->window = 16;
	o->timeout_ms = 30000;
	o->perm = "rwas";
	o->nodemask = ~0ull;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && (v || (die("%s needs a value", name), 0)) && ++i)
		if (!strcmp(a, "--sabre"))
			o->sabre = 1;
		else if (!strcmp(a, "--nospec"))
			o->nospec = o->sabre = 1;
		else if (OPT("--id"))
			o->id = (long)num(v, "--id", RMC_CTX_COUNT - 1);
		else if (OPT("--node"))
			o->node = (long)num(v, "--node", 63);
		else if (OPT("--size"))
			o->size = num(v, "--size", 1ull << 34);
		else if (OPT("--roff"))
			o->roff = num(v, "--roff", UINT64_MAX);
		else if (OPT("--loff"))
			o->loff = num(v, "--loff", 1ull << 34);
		else if (OPT("--len"))
			o->len = num(v, "--len", RMC_XFER_MAX);
		else if (OPT("--off"))
			o->off = num(v, "--off", UINT64_MAX);
		else if (OPT("--count"))
			o->count = num(v, "--count", 100000000);
		else if (OPT("--window"))
			o->window = (long)num(v, "--window", 4096);
		else if (OPT("--timeout-ms"))
			o->timeout_ms = (long)num(v, "--timeout-ms", 3600000);
		else if (OPT("--seconds"))
			o->seconds = (long)num(v, "--seconds", 86400);
		else if (OPT("--nodemask"))
			o->nodemask = num(v, "--nodemask", UINT64_MAX);
		else if (OPT("--version-off"))
			o->version_off = (long)num(v, "--version-off", 56);
		else if (OPT("--seed")) {
			o->seed = num(v, "--seed", UINT64_MAX);
			o->have_seed = 1;
		} else if (OPT("--perm"))
			o->perm = v;
		else if (OPT("--op"))
			o->op = v;
		else
			die("unknown option '%s' (rmc --help)", a);
#undef OPT
	}
}

static unsigned parse_perm(const char *s)
{
	unsigned p = 0;

	for (; *s; s++) {
		switch (*s) {
		case 'r': p |= CTX_PERM_READ; break;
		case 'w': p |= CTX_PERM_WRITE; break;
		case 'a': p |= CTX_PERM_ATOMIC; break;
		case 's': p |= CTX_PERM_SABRE; break;
		default: die("--perm '%s': letters r, w, a, s", s);
		}
	}
	return p;
}

static void need(const struct opts *o, int id, int node)
{
	if (id && o->id < 0)
		die("--id is required");
	if (node && o->node < 0)
		die("--node is required");
}

static rmc_t *open_rmc(void)
{
	rmc_t *r;
	int e = rmc_open(&r);

	if (e) {
		fprintf(stderr, "rmc: cannot open %s: %s (is sonuma_rmc.ko loaded? see dmesg)\n", RMC_DEV_PATH,
			strerror(-e));
		exit(1);
	}
	return r;
}

/* This node's segment of context id: attach to it, or register a scratch one of `size` bytes. */
static rmc_ctx_t *local_ctx(rmc_t *r, unsigned id, uint64_t size)
{
	rmc_ctx_t *c;
	int e = rmc_ctx_attach(r, id, &c);

	if (e == -ENOENT)
		e = rmc_ctx_register(r, id, size < 4096 ? 4096 : size, CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC,
				     ~0ull, NULL, &c);
	if (e) {
		fprintf(stderr, "rmc: context %u on this node: %s\n", id, strerror(-e));
		exit(1);
	}
	if (rmc_ctx_size(c) < size) {
		fprintf(stderr, "rmc: context %u on this node has %zu bytes, %llu needed\n", id, rmc_ctx_size(c),
			(unsigned long long)size);
		exit(1);
	}
	return c;
}

static rmc_qp_t *make_qp(rmc_t *r, rmc_ctx_t *c, unsigned depth)
{
	rmc_qp_t *q;
	int e = rmc_qp_create(r, c, depth, RMC_QP_IRQ, &q);

	if (e) {
		fprintf(stderr, "rmc: cannot create a queue pair: %s\n", strerror(-e));
		exit(1);
	}
	return q;
}

static int report(const char *what, int st, const struct rmc_cqe *c)
{
	if (st < 0) {
		printf("op=%s status=ERROR error=%d (%s)\n", what, st, strerror(-st));
		return 1;
	}
	printf("op=%s status=%s value=%llu modeled_ns=%u wall_ns=%u\n", what, rmc_status_str(c->status, c->info),
	       (unsigned long long)c->value, c->modeled_ns, c->wall_ns);
	return c->status != RMC_ST_OK;
}

static int cmd_info(void)
{
	rmc_t *r = open_rmc();
	struct rmc_uapi_info i;

	rmc_info(r, &i);
	printf("node=%u nodes=%u qps=%u contexts=%u segment_bytes=%llu segment_free=%llu att_entries=%u sb_depth=%u "
	       "speculation=%u fabric_up=%u\n",
	       i.node_id, i.node_count, i.qp_count, i.ctx_count, (unsigned long long)i.seg_size,
	       (unsigned long long)i.seg_free, i.att_entries, i.sb_depth, i.spec, i.fabric_up);
	printf("rmc_mhz=%llu mem_ns=%llu llc_ns=%llu hop_ns=%llu hops=%llu link_gbps=%llu r2p2_gbps=%llu "
	       "r2p2_count=%llu issue_cycles=%llu timeout_ms=%llu\n",
	       (unsigned long long)i.t_rmc_mhz, (unsigned long long)i.t_mem_ns, (unsigned long long)i.t_llc_ns,
	       (unsigned long long)i.t_hop_ns, (unsigned long long)i.t_hops, (unsigned long long)i.t_link_gbps,
	       (unsigned long long)i.t_r2p2_gbps, (unsigned long long)i.t_r2p2_count,
	       (unsigned long long)i.t_issue_cycles, (unsigned long long)i.timeout_ms);
	rmc_close(r);
	return 0;
}

static int cmd_counters(void)
{
	static const char *const names[] = { RMC_UAPI_COUNTER_NAMES };
	rmc_t *r = open_rmc();
	uint64_t c[RMC_CNT_COUNT];
	int e = rmc_counters(r, c);

	if (e) {
		fprintf(stderr, "rmc: counters: %s\n", strerror(-e));
		return 1;
	}
	for (unsigned i = 0; i < RMC_CNT_COUNT; i++)
		printf("%s=%llu\n", names[i], (unsigned long long)c[i]);
	rmc_close(r);
	return 0;
}

static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }

static int cmd_ctx_hold(const struct opts *o)
{
	struct rmc_layout lay = { .version_off = (unsigned)o->version_off };
	rmc_t *r;
	rmc_ctx_t *c;
	int e;

	need(o, 1, 0);
	if (!o->size)
		die("--size is required");
	r = open_rmc();
	e = rmc_ctx_register(r, (unsigned)o->id, o->size, parse_perm(o->perm), o->nodemask,
			     o->version_off >= 0 ? &lay : NULL, &c);
	if (e) {
		fprintf(stderr, "rmc: register context %ld: %s%s\n", o->id, strerror(-e),
			e == -EBUSY ? " (another process holds it)" : e == -ENOSPC ? " (the RMC segment is full)" : "");
		return 1;
	}
	if (o->have_seed) {
		uint8_t *b = rmc_ctx_base(c);

		for (size_t i = 0; i < rmc_ctx_size(c); i++)
			b[i] = pat(o->seed, i);
	}
	printf("ctx=%u size=%zu perm=%s nodemask=0x%llx version_off=%ld\n", rmc_ctx_id(c), rmc_ctx_size(c), o->perm,
	       (unsigned long long)o->nodemask, o->version_off);
	fflush(stdout);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	for (long t = 0; !stop && (!o->seconds || t < o->seconds * 10); t++)
		usleep(100000);
	rmc_close(r);
	return 0;
}

static int cmd_read(const struct opts *o)
{
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	struct rmc_cqe cqe;
	int st;

	need(o, 1, 1);
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, o->loff + o->len);
	q = make_qp(r, c, 4);
	st = o->sabre ? rmc_sabre(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len,
				  o->nospec ? RMC_POST_NOSPEC : 0, &cqe)
		      : rmc_read(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe);
	st = report(o->sabre ? "SABRE" : "READ", st, &cqe);
	rmc_close(r);
	return st;
}

static int cmd_check_data(const struct opts *o, int write)
{
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	struct rmc_cqe cqe;
	uint8_t *b;
	uint64_t bad = 0, first = UINT64_MAX, stale = 0;
	int st;

	need(o, 1, 1);
	if (!o->len || !o->have_seed)
		die("--len and --seed are required");
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, o->loff + o->len);
	q = make_qp(r, c, 4);
	b = (uint8_t *)rmc_ctx_base(c) + o->loff;
	if (write) {
		for (uint64_t i = 0; i < o->len; i++)
			b[i] = pat(o->seed, o->roff + i);
		st = rmc_write(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe);
		st = report("WRITE", st, &cqe);
		rmc_close(r);
		return st;
	}
	memset(b, 0, o->len);
	st = rmc_read(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe);
	if (report("READ", st, &cqe)) {
		rmc_close(r);
		return 1;
	}
	for (uint64_t i = 0; i < o->len; i++) {
		if (b[i] != pat(o->seed, o->roff + i)) {
			bad++;
			stale += b[i] == 0;
			if (first == UINT64_MAX)
				first = i;
		}
	}
	printf("len=%llu bad=%llu", (unsigned long long)o->len, (unsigned long long)bad);
	if (bad)
		printf(" first_bad=%llu got=0x%02x want=0x%02x not_copied=%llu misplaced=%llu",
		       (unsigned long long)first, b[first], pat(o->seed, o->roff + first), (unsigned long long)stale,
		       (unsigned long long)(bad - stale));
	printf("\n");
	rmc_close(r);
	return bad != 0;
}

static int cmd_atomic(const struct opts *o)
{
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	uint64_t old = 0, retries = 0, first = 0;
	struct rmc_cqe cqe = { 0 };
	int cas, st = 0;

	need(o, 1, 1);
	if (!o->op || (strcmp(o->op, "faa") && strcmp(o->op, "cas")))
		die("--op faa|cas is required");
	cas = !strcmp(o->op, "cas");
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, 4096);
	q = make_qp(r, c, 4);
	for (uint64_t k = 0; k < o->count && st == RMC_ST_OK; k++) {
		if (!cas) {
			st = rmc_faa(q, (unsigned)o->node, o->off, 1, &old, &cqe);
		} else {
			uint64_t cur = 0;

			/* a CAS that fails returns the current value: the next attempt expects it */
			st = rmc_cas(q, (unsigned)o->node, o->off, 0, 0, &cur, &cqe);
			while (st == RMC_ST_OK) {
				st = rmc_cas(q, (unsigned)o->node, o->off, cur, cur + 1, &old, &cqe);
				if (st != RMC_ST_OK || old == cur)
					break;
				retries++;
				cur = old;
			}
		}
		if (k == 0)
			first = old;
	}
	if (st != RMC_ST_OK) {
		printf("op=%s status=%s\n", o->op, st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
		rmc_close(r);
		return 1;
	}
	printf("op=%s count=%llu first_old=%llu last_old=%llu retries=%llu\n", o->op, (unsigned long long)o->count,
	       (unsigned long long)first, (unsigned long long)old, (unsigned long long)retries);
	rmc_close(r);
	return 0;
}

static int cmd_async_read(const struct opts *o)
{
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	uint64_t posted = 0, done = 0, per[5] = { 0 }, other = 0;
	struct rmc_cqe cqe[64];
	unsigned depth = 2;
	time_t t0 = time(NULL);

	need(o, 1, 1);
	if (!o->len || !o->count)
		die("--len and --count are required");
	while (depth < (unsigned)o->window)
		depth <<= 1;
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, o->len);
	q = make_qp(r, c, depth);
	while (done < o->count) {
		while (posted < o->count && rmc_qp_outstanding(q) < (unsigned)o->window &&
		       rmc_post_read(q, (unsigned)o->node, 0, 0, (uint32_t)o->len, posted, 0) == 0)
			posted++;
		int n = rmc_wait(q, cqe, 64, 1000);

		for (int i = 0; i < n; i++) {
			if (cqe[i].status < 5)
				per[cqe[i].status]++;
			else
				other++;
			if (cqe[i].status != RMC_ST_OK && per[cqe[i].status] == 1)
				printf("first_error=%s wr_id=%llu\n", rmc_status_str(cqe[i].status, cqe[i].info),
				       (unsigned long long)cqe[i].wr_id);
		}
		done += (uint64_t)(n > 0 ? n : 0);
		if (time(NULL) - t0 > o->timeout_ms / 1000 + 1) {
			printf("posted=%llu completed=%llu HUNG\n", (unsigned long long)posted, (unsigned long long)done);
			return 1;
		}
	}
	printf("posted=%llu completed=%llu ok=%llu abort=%llu remote_access=%llu bad_request=%llu unreachable=%llu "
	       "other=%llu\n",
	       (unsigned long long)posted, (unsigned long long)done, (unsigned long long)per[0],
	       (unsigned long long)per[1], (unsigned long long)per[2], (unsigned long long)per[3],
	       (unsigned long long)per[4], (unsigned long long)other);
	rmc_close(r);
	return 0;
}

/* ---- check suite: this node is its own destination ---- */

#define CK_ID 15
#define CK_SIZE (3u << 20)
#define CK_DST (3u << 19) /* 1.5 MiB: destination half */

static int expect(rmc_qp_t *q, int st, const struct rmc_cqe *c, unsigned want_st, unsigned want_info, const char *name)
{
	int ok = st == (int)want_st && (want_st == RMC_ST_OK || c->info == want_info);

	check(name, ok, "status=%s", st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, c->info));
	(void)q;
	return ok;
}

static int cmd_check(void)
{
	static const uint32_t sizes[] = { 1, 63, 64, 65, 4096, 8192, 1u << 20 };
	struct rmc_layout lay0 = { 0 };
	rmc_t *r = open_rmc();
	unsigned me = rmc_node_id(r), i;
	rmc_ctx_t *c, *c_ro, *c_nolayout, *c_denied;
	rmc_qp_t *q, *q2, *q_ro, *q_nl, *q_dn;
	struct rmc_cqe cqe;
	uint8_t *b;
	uint64_t old;
	char name[64];
	int st, e;

	e = rmc_ctx_register(r, CK_ID, CK_SIZE, CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC | CTX_PERM_SABRE,
			     1ull << me, &lay0, &c);
	check("register", e == 0, "error=%d", e);
	if (e)
		return check_summary();
	b = rmc_ctx_base(c);
	check("zeroed", b[0] == 0 && b[CK_SIZE - 1] == 0, "");
	e = rmc_ctx_register(r, CK_ID, 4096, CTX_PERM_READ, ~0ull, NULL, &c_ro);
	check("register_twice_refused", e == -EBUSY, "error=%d", e);
	q = make_qp(r, c, 64);

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t len = sizes[i];
		uint64_t roff = 3 + i * 64, bad = 0;

		for (uint32_t k = 0; k < len; k++)
			b[roff + k] = pat(i, k);
		memset(b + CK_DST + 1, 0, len);
		st = rmc_read(q, me, roff, CK_DST + 1, len, &cqe);
		for (uint32_t k = 0; k < len; k++)
			bad += b[CK_DST + 1 + k] != pat(i, k);
		snprintf(name, sizeof(name), "read_%u", len);
		check(name, st == RMC_ST_OK && !bad, "status=%s bad=%llu modeled_ns=%u", rmc_status_str((unsigned)st, cqe.info),
		      (unsigned long long)bad, cqe.modeled_ns);
		memset(b + CK_DST + 4096, 0, len);
		st = rmc_write(q, me, CK_DST + 4096, roff, len, &cqe);
		bad = 0;
		for (uint32_t k = 0; k < len; k++)
			bad += b[CK_DST + 4096 + k] != pat(i, k);
		snprintf(name, sizeof(name), "write_%u", len);
		check(name, st == RMC_ST_OK && !bad, "status=%s bad=%llu", rmc_status_str((unsigned)st, cqe.info),
		      (unsigned long long)bad);
	}
	st = rmc_read(q, me, CK_SIZE - 1, 0, 1, &cqe);
	expect(q, st, &cqe, RMC_ST_OK, 0, "last_byte");
	st = rmc_read(q, me, CK_SIZE - 64, 0, 65, &cqe);
	expect(q, st, &cqe, RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS, "one_byte_beyond");
	st = rmc_write(q, me, CK_SIZE, 0, 1, &cqe);
	expect(q, st, &cqe, RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS, "write_beyond");
	e = rmc_post_read(q, me, 0, CK_SIZE - 4, 8, 0, 0);
	check("local_bounds_refused_by_library", e == -EINVAL, "error=%d", e);

	/* atomics */
	memcpy(b + 256, &(uint64_t){ 40 }, 8);
	st = rmc_faa(q, me, 256, 2, &old, &cqe);
	check("faa", st == RMC_ST_OK && old == 40 && *(uint64_t *)(b + 256) == 42, "old=%llu", (unsigned long long)old);
	st = rmc_cas(q, me, 256, 41, 7, &old, &cqe);
	check("cas_mismatch", st == RMC_ST_OK && old == 42 && *(uint64_t *)(b + 256) == 42, "old=%llu",
	      (unsigned long long)old);
	st = rmc_cas(q, me, 256, 42, 7, &old, &cqe);
	check("cas_swap", st == RMC_ST_OK && old == 42 && *(uint64_t *)(b + 256) == 7, "old=%llu", (unsigned long long)old);
	st = rmc_cas(q, me, 260, 0, 0, &old, &cqe);
	expect(q, st, &cqe, RMC_ST_BAD_REQUEST, RMC_INFO_UNALIGNED, "cas_unaligned");

	/* SABRes: an even version, then a writer holding the object (odd) */
	memset(b + 8192, 0x5a, 2048);
	memcpy(b + 8192, &(uint64_t){ 12 }, 8);
	memset(b + CK_DST, 0, 2048);
	st = rmc_sabre(q, me, 8192, CK_DST, 2048, 0, &cqe);
	check("sabre", st == RMC_ST_OK && cqe.value == 12 && !memcmp(b + CK_DST, b + 8192, 2048), "status=%s version=%llu",
	      rmc_status_str((unsigned)st, cqe.info), (unsigned long long)cqe.value);
	{
		struct rmc_cqe rd, ns;

		rmc_read(q, me, 8192, CK_DST, 2048, &rd);
		rmc_sabre(q, me, 8192, CK_DST, 2048, RMC_POST_NOSPEC, &ns);
		check("sabre_modeled_like_read", cqe.modeled_ns <= rd.modeled_ns + 4, "sabre_ns=%u read_ns=%u", cqe.modeled_ns,
		      rd.modeled_ns);
		check("nospec_slower", ns.modeled_ns > cqe.modeled_ns && (ns.flags & RMC_CQE_F_NOSPEC), "nospec_ns=%u",
		      ns.modeled_ns);
	}
	{
		volatile uint64_t *ver = (volatile uint64_t *)(b + 8192);
		uint64_t v = rmc_obj_write_begin(ver);

		st = rmc_sabre(q, me, 8192, CK_DST, 2048, 0, &cqe);
		expect(q, st, &cqe, RMC_ST_SABRE_ABORT, RMC_INFO_LOCKED, "sabre_locked");
		rmc_obj_write_end(ver, v);
		st = rmc_sabre(q, me, 8192, CK_DST, 2048, 0, &cqe);
		check("sabre_after_write", st == RMC_ST_OK && cqe.value == v + 2, "version=%llu", (unsigned long long)cqe.value);
	}
	st = rmc_sabre(q, me, 8200, CK_DST, 64, 0, &cqe);
	expect(q, st, &cqe, RMC_ST_BAD_REQUEST, RMC_INFO_UNALIGNED, "sabre_unaligned");

	/* bad requests straight into the WQ */
	{
		struct rmc_wqe w = { .op = 9, .node = (uint16_t)me, .length = 8 };

		rmc_post_raw(q, &w, 0);
		rmc_wait(q, &cqe, 1, 5000);
		check("bad_opcode", cqe.status == RMC_ST_BAD_REQUEST && cqe.info == RMC_INFO_BAD_OP, "status=%s",
		      rmc_status_str(cqe.status, cqe.info));
		w.op = RMC_OP_READ;
		w.length = 0;
		rmc_post_raw(q, &w, 0);
		rmc_wait(q, &cqe, 1, 5000);
		check("zero_length", cqe.status == RMC_ST_BAD_REQUEST && cqe.info == RMC_INFO_BAD_LEN, "status=%s",
		      rmc_status_str(cqe.status, cqe.info));
		w.length = 8;
		w.node = 63;
		rmc_post_raw(q, &w, 0);
		rmc_wait(q, &cqe, 1, 5000);
		check("bad_node", cqe.status == RMC_ST_BAD_REQUEST && cqe.info == RMC_INFO_BAD_NODE, "status=%s",
		      rmc_status_str(cqe.status, cqe.info));
		w.node = (uint16_t)me;
		w.reserved[0] = 1;
		rmc_post_raw(q, &w, 0);
		rmc_wait(q, &cqe, 1, 5000);
		check("reserved_field", cqe.status == RMC_ST_BAD_REQUEST && cqe.info == RMC_INFO_RESERVED, "status=%s",
		      rmc_status_str(cqe.status, cqe.info));
	}

	/* permissions: read-only, SABRe without layout, node mask without this node */
	e = rmc_ctx_register(r, 13, 4096, CTX_PERM_READ, ~0ull, NULL, &c_ro);
	e |= rmc_ctx_register(r, 12, 4096, CTX_PERM_READ | CTX_PERM_SABRE, ~0ull, NULL, &c_nolayout);
	e |= rmc_ctx_register(r, 11, 4096, CTX_PERM_READ, ~(1ull << me), NULL, &c_denied);
	check("register_more", e == 0, "error=%d", e);
	if (!e) {
		q_ro = make_qp(r, c_ro, 2);
		q_nl = make_qp(r, c_nolayout, 2);
		q_dn = make_qp(r, c_denied, 2);
		st = rmc_write(q_ro, me, 0, 0, 8, &cqe);
		expect(q_ro, st, &cqe, RMC_ST_REMOTE_ACCESS, RMC_INFO_PERM, "write_read_only");
		st = rmc_faa(q_ro, me, 0, 1, &old, &cqe);
		expect(q_ro, st, &cqe, RMC_ST_REMOTE_ACCESS, RMC_INFO_PERM, "faa_read_only");
		st = rmc_sabre(q_nl, me, 0, 0, 64, 0, &cqe);
		expect(q_nl, st, &cqe, RMC_ST_REMOTE_ACCESS, RMC_INFO_NO_LAYOUT, "sabre_without_layout");
		st = rmc_read(q_dn, me, 0, 0, 8, &cqe);
		expect(q_dn, st, &cqe, RMC_ST_REMOTE_ACCESS, RMC_INFO_DENIED, "node_not_in_mask");
		/* the CQ of a depth-2 QP wraps many times */
		for (i = 0, e = 0; i < 11; i++)
			e |= rmc_read(q_ro, me, 0, 0, 8, &cqe) != RMC_ST_OK;
		check("cq_wrap_depth_2", !e, "");
		/* a full WQ says so */
		rmc_post_read(q_ro, me, 0, 0, 8, 1, RMC_POST_DEFER);
		rmc_post_read(q_ro, me, 0, 0, 8, 2, RMC_POST_DEFER);
		e = rmc_post_read(q_ro, me, 0, 0, 8, 3, 0);
		check("wq_full_eagain", e == -EAGAIN, "error=%d", e);
		rmc_doorbell(q_ro);
		for (i = 0; i < 2 && rmc_qp_outstanding(q_ro);)
			i += (unsigned)rmc_wait(q_ro, &cqe, 1, 5000);
		check("wq_drained", rmc_qp_outstanding(q_ro) == 0, "");
	}

	/* a window of asynchronous reads on a second QP */
	q2 = make_qp(r, c, 64);
	for (i = 0, e = 0; i < 64; i++)
		e |= rmc_post_read(q2, me, i * 64, CK_DST + i * 64, 64, i, RMC_POST_DEFER);
	rmc_doorbell(q2);
	{
		uint64_t seen = 0;
		unsigned got = 0, okc = 0;

		while (got < 64) {
			struct rmc_cqe cs[16];
			int n = rmc_wait(q2, cs, 16, 10000);

			if (n <= 0)
				break;
			for (int k = 0; k < n; k++) {
				seen |= 1ull << (cs[k].wr_id & 63);
				okc += cs[k].status == RMC_ST_OK;
			}
			got += (unsigned)n;
		}
		check("async_window_64", !e && got == 64 && okc == 64 && seen == ~0ull, "completed=%u ok=%u", got, okc);
	}
	rmc_close(r);
	return check_summary();
}

int main(int argc, char **argv)
{
	struct opts o;

	tool_prog = "rmc";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	parse(argc - 2, argv + 2, &o);
	if (!strcmp(argv[1], "info"))
		return cmd_info();
	if (!strcmp(argv[1], "counters"))
		return cmd_counters();
	if (!strcmp(argv[1], "ctx-hold"))
		return cmd_ctx_hold(&o);
	if (!strcmp(argv[1], "read"))
		return cmd_read(&o);
	if (!strcmp(argv[1], "check-data"))
		return cmd_check_data(&o, 0);
	if (!strcmp(argv[1], "write-pattern"))
		return cmd_check_data(&o, 1);
	if (!strcmp(argv[1], "atomic"))
		return cmd_atomic(&o);
	if (!strcmp(argv[1], "async-read"))
		return cmd_async_read(&o);
	if (!strcmp(argv[1], "check"))
		return cmd_check();
	die("unknown command '%s' (rmc --help)", argv[1]);
}
