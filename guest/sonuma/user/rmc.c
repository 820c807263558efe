// SPDX-License-Identifier: MIT
/*
 * rmc: the soNUMA RMC from the shell (docs/rmc-driver.md). Every command prints key=value lines.
 *
 *   rmc info | counters
 *   rmc ctx-hold --id N --size S [--perm rwas] [--nodemask M] [--version-off O] [--seed S] [--seconds T]
 *   rmc fill --id N --off O --len L --seed S
 *   rmc read  --id N --node D --roff R --len L [--loff L] [--sabre] [--nospec]
 *   rmc write --id N --node D --roff R --len L [--loff L]
 *   rmc check-data --id N --node D --roff R --len L --seed S [--loff L]
 *   rmc write-pattern --id N --node D --roff R --len L --seed S [--loff L]
 *   rmc atomic --id N --node D --off O --op faa|cas --count K
 *   rmc async-read --id N --node D --len L --count K [--window W] [--timeout-ms T] [--keep-going]
 *   rmc check | check-driver
 * Every command that registers or attaches a context takes --key K (default: $RMC_KEY).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
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
	"  fill --id N --off O --len L --seed S\n"
	"                            write pattern S into this node's segment of context N (held by ctx-hold)\n"
	"  read --id N --node D --roff R --len L [--loff L] [--sabre] [--nospec]\n"
	"                            one READ (or SABRe) into this node's segment of context N\n"
	"  write --id N --node D --roff R --len L [--loff L]\n"
	"                            one WRITE of this node's bytes [loff, loff+len) to node D's segment\n"
	"  check-data --id N --node D --roff R --len L --seed S [--loff L]\n"
	"                            read node D's bytes and verify them against pattern S\n"
	"  write-pattern --id N --node D --roff R --len L --seed S [--loff L]\n"
	"                            write pattern S (as at roff) into node D's segment\n"
	"  atomic --id N --node D --off O --op faa|cas --count K\n"
	"                            K increments of the word at O: FAA, or a CAS retry loop\n"
	"  async-read --id N --node D --len L --count K [--window W] [--timeout-ms T] [--keep-going]\n"
	"                            K reads with W in flight; counts completions per status. Stops posting\n"
	"                            at the first error (drains what is in flight, exit 1) unless --keep-going\n"
	"  check                     the device checks on this node (the node is its own destination;\n"
	"                            uses context ids 11-15, which must be free)\n"
	"  check-driver              the driver's checks: bad arguments, ownership of contexts and QPs, context\n"
	"                            incarnations, segment full, wait and interrupt, doorbell revocation, close\n"
	"                            (uses context ids 9-10 and 14, which must be free)\n"
	"\n"
	"Context N must be registered on both nodes: run `rmc ctx-hold --id N ...` on the destination\n"
	"(and, for read/write/check-data/atomic, on this node too, or the command registers a scratch\n"
	"context N of the needed size for its own lifetime).\n"
	"\n"
	"--key K (a number, or @FILE holding it; default $RMC_KEY, else none): the context's access key.\n"
	"ctx-hold registers with K (none: a random key) and prints it; other commands attach a context\n"
	"another user holds with K and register scratch contexts with K. Nodes serve a request only if\n"
	"its key equals their context's, so every node of a context must use the same key. A key on the\n"
	"command line is visible to other users (ps): prefer RMC_KEY or @FILE.\n"
	"\n"
	"An option the command does not take (e.g. info --id) is refused; COMMAND --help prints this.\n";


/* What a byte of pattern `seed` holds before check-data's READ: never the pattern itself. */
static uint8_t poison(uint64_t seed, uint64_t i)
{
	return (uint8_t)(pattern_byte(seed, i) ^ 0xffu);
}

struct opts {
	long id, node, seconds, window, timeout_ms, version_off;
	uint64_t size, roff, loff, len, off, count, nodemask, seed, key;
	const char *perm, *op;
	int sabre, nospec, have_seed, keep_going;
};

/* Every option of every command, by its getopt value; commands[] says which ones each takes. */
static const struct option long_opts[] = {
	{ "id", 1, 0, 'i' }, { "node", 1, 0, 'n' }, { "size", 1, 0, 'z' }, { "roff", 1, 0, 'R' },
	{ "loff", 1, 0, 'L' }, { "len", 1, 0, 'l' }, { "off", 1, 0, 'o' }, { "count", 1, 0, 'c' },
	{ "window", 1, 0, 'w' }, { "timeout-ms", 1, 0, 't' }, { "seconds", 1, 0, 'S' }, { "nodemask", 1, 0, 'm' },
	{ "version-off", 1, 0, 'V' }, { "seed", 1, 0, 's' }, { "perm", 1, 0, 'p' }, { "key", 1, 0, 'k' },
	{ "op", 1, 0, 'O' }, { "sabre", 0, 0, 'b' }, { "nospec", 0, 0, 'N' }, { "keep-going", 0, 0, 'K' },
	{ "help", 0, 0, 'h' }, { 0 }
};

static const struct command {
	const char *name;
	const char *takes; /* getopt values of its options */
} commands[] = {
	{ "info", "" }, { "counters", "" }, { "ctx-hold", "izpmVsSk" }, { "fill", "iolsk" },
	{ "read", "inRLlbNk" }, { "write", "inRLlk" }, { "check-data", "inRLlsk" },
	{ "write-pattern", "inRLlsk" }, { "atomic", "inoOck" }, { "async-read", "inlcwtKk" },
	{ "check", "" }, { "check-driver", "" },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	die("unknown command '%s' (rmc --help)", name);
}

/* argv[0] is the command: its options into *o; one it does not take is a usage error. */
static void parse(int argc, char **argv, const struct command *cmd, struct opts *o)
{
	int c, li;

	memset(o, 0, sizeof(*o));
	o->id = o->node = -1;
	o->version_off = -1;
	o->window = 16;
	o->timeout_ms = 30000;
	o->perm = "rwas";
	o->nodemask = ~0ull;
	if (rmc_key_parse(NULL, &o->key))
		die("RMC_KEY: not a number");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", long_opts, &li)) != -1) {
		if (c == ':' || c == '?')
			bad_option(c, argv, "rmc --help");
		if (c == 'h') {
			fputs(usage, stdout);
			exit(0);
		}
		if (!strchr(cmd->takes, c))
			die("--%s does not apply to `rmc %s` (rmc --help)", long_opts[li].name, cmd->name);
		switch (c) {
		case 'b': o->sabre = 1; break;
		case 'K': o->keep_going = 1; break;
		case 'N': o->nospec = o->sabre = 1; break;
		case 'i': o->id = (long)num(optarg, "--id", RMC_CTX_COUNT - 1); break;
		case 'n': o->node = (long)num(optarg, "--node", 63); break;
		case 'z': o->size = num(optarg, "--size", 1ull << 34); break;
		case 'R': o->roff = num(optarg, "--roff", UINT64_MAX); break;
		case 'L': o->loff = num(optarg, "--loff", 1ull << 34); break;
		case 'l': o->len = num(optarg, "--len", RMC_XFER_MAX); break;
		case 'o': o->off = num(optarg, "--off", UINT64_MAX); break;
		case 'c': o->count = num(optarg, "--count", 100000000); break;
		case 'w': o->window = (long)num(optarg, "--window", 4096); break;
		case 't': o->timeout_ms = (long)num(optarg, "--timeout-ms", 3600000); break;
		case 'S': o->seconds = (long)num(optarg, "--seconds", 86400); break;
		case 'm': o->nodemask = num(optarg, "--nodemask", UINT64_MAX); break;
		case 'V': o->version_off = (long)num(optarg, "--version-off", 56); break;
		case 's':
			o->seed = num(optarg, "--seed", UINT64_MAX);
			o->have_seed = 1;
			break;
		case 'p': o->perm = optarg; break;
		case 'k':
			if (rmc_key_parse(optarg, &o->key))
				die("--key '%s': a number, or @FILE holding one", optarg);
			break;
		case 'O': o->op = optarg; break;
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (rmc --help)", argv[optind]);
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
static rmc_ctx_t *local_ctx(rmc_t *r, unsigned id, uint64_t size, uint64_t key)
{
	rmc_ctx_t *c;
	int e = rmc_ctx_attach_key(r, id, key, &c);

	if (e == -ENOENT)
		e = rmc_ctx_register_key(r, id, size < 4096 ? 4096 : size,
					 CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC, ~0ull, NULL, key, &c);
	if (e) {
		fprintf(stderr, "rmc: context %u on this node: %s%s\n", id, strerror(-e),
			e == -EACCES ? " (another user holds it: its key is needed, --key or RMC_KEY)" : "");
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
	e = rmc_ctx_register_key(r, (unsigned)o->id, o->size, parse_perm(o->perm), o->nodemask,
				 o->version_off >= 0 ? &lay : NULL, o->key, &c);
	if (e) {
		fprintf(stderr, "rmc: register context %ld: %s%s\n", o->id, strerror(-e),
			e == -EBUSY ? " (another process holds it)" : e == -ENOSPC ? " (the RMC segment is full)" : "");
		return 1;
	}
	if (o->have_seed) {
		uint8_t *b = rmc_ctx_base(c);

		for (size_t i = 0; i < rmc_ctx_size(c); i++)
			b[i] = pattern_byte(o->seed, i);
	}
	printf("ctx=%u size=%zu phys=0x%llx perm=%s nodemask=0x%llx version_off=%ld seconds=%ld key=0x%llx\n",
	       rmc_ctx_id(c), rmc_ctx_size(c), (unsigned long long)rmc_ctx_phys(c), o->perm,
	       (unsigned long long)o->nodemask, o->version_off, o->seconds, (unsigned long long)rmc_ctx_key(c));
	fflush(stdout);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	for (long t = 0; !stop && (!o->seconds || t < o->seconds * 10); t++)
		usleep(100000);
	rmc_close(r);
	return 0;
}

/* This node's segment of a context another process holds (fill, write from it). */
static rmc_ctx_t *held_ctx(rmc_t *r, unsigned id, uint64_t key)
{
	rmc_ctx_t *c;
	int e = rmc_ctx_attach_key(r, id, key, &c);

	if (e == -ENOENT) {
		fprintf(stderr, "rmc: context %u is not registered on this node: hold it first "
			"(rmc ctx-hold --id %u --size S &)\n", id, id);
		exit(1);
	}
	if (e) {
		fprintf(stderr, "rmc: attach context %u: %s\n", id, strerror(-e));
		exit(1);
	}
	return c;
}

static int cmd_fill(const struct opts *o)
{
	rmc_t *r;
	rmc_ctx_t *c;
	uint8_t *b;

	need(o, 1, 0);
	if (!o->len || !o->have_seed)
		die("--len and --seed are required");
	r = open_rmc();
	c = held_ctx(r, (unsigned)o->id, o->key);
	if (o->off > rmc_ctx_size(c) || o->len > rmc_ctx_size(c) - o->off) {
		fprintf(stderr, "rmc: fill [%llu, %llu) is beyond context %ld's %zu bytes\n", (unsigned long long)o->off,
			(unsigned long long)(o->off + o->len), o->id, rmc_ctx_size(c));
		return 1;
	}
	b = rmc_ctx_base(c);
	for (uint64_t i = o->off; i < o->off + o->len; i++)
		b[i] = pattern_byte(o->seed, i);
	printf("ctx=%ld off=%llu len=%llu seed=%llu filled=1\n", o->id, (unsigned long long)o->off,
	       (unsigned long long)o->len, (unsigned long long)o->seed);
	rmc_close(r);
	return 0;
}

/* One READ, SABRe or WRITE between node D's segment and this node's segment of context N. */
static int cmd_xfer(const struct opts *o, int write)
{
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	struct rmc_cqe cqe;
	int st;

	need(o, 1, 1);
	if (!o->len)
		die("--len is required");
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, o->loff + o->len, o->key);
	q = make_qp(r, c, 4);
	if (write)
		st = report("WRITE", rmc_write(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe), &cqe);
	else if (o->sabre)
		st = report("SABRE", rmc_sabre(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len,
				  o->nospec ? RMC_POST_NOSPEC : 0, &cqe), &cqe);
	else
		st = report("READ", rmc_read(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe), &cqe);
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
	c = local_ctx(r, (unsigned)o->id, o->loff + o->len, o->key);
	q = make_qp(r, c, 4);
	b = (uint8_t *)rmc_ctx_base(c) + o->loff;
	if (write) {
		for (uint64_t i = 0; i < o->len; i++)
			b[i] = pattern_byte(o->seed, o->roff + i);
		st = rmc_write(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe);
		st = report("WRITE", st, &cqe);
		rmc_close(r);
		return st;
	}
	/* poison: byte i starts as the complement of what it must become, so a byte the READ did
	 * not write is told from one it wrote with the wrong data */
	for (uint64_t i = 0; i < o->len; i++)
		b[i] = poison(o->seed, o->roff + i);
	st = rmc_read(q, (unsigned)o->node, o->roff, o->loff, (uint32_t)o->len, &cqe);
	if (report("READ", st, &cqe)) {
		rmc_close(r);
		return 1;
	}
	for (uint64_t i = 0; i < o->len; i++) {
		if (b[i] != pattern_byte(o->seed, o->roff + i)) {
			bad++;
			stale += b[i] == poison(o->seed, o->roff + i);
			if (first == UINT64_MAX)
				first = i;
		}
	}
	printf("len=%llu bad=%llu", (unsigned long long)o->len, (unsigned long long)bad);
	if (bad) {
		/* misplaced: the bytes at first_bad are the pattern of another remote offset */
		int64_t shift = 0;
		uint64_t run = o->len - first < 16 ? o->len - first : 16;

		for (int64_t d = -65536; d <= 65536 && !shift; d++) {
			uint64_t k;

			if (!d || (d < 0 && (uint64_t)-d > o->roff + first))
				continue;
			for (k = 0; k < run && b[first + k] == pattern_byte(o->seed, o->roff + first + k + (uint64_t)d); k++)
				;
			if (k == run)
				shift = d;
		}
		printf(" first_bad=%llu got=0x%02x want=0x%02x not_copied=%llu wrong=%llu verdict=%s",
		       (unsigned long long)first, b[first], pattern_byte(o->seed, o->roff + first), (unsigned long long)stale,
		       (unsigned long long)(bad - stale),
		       b[first] == poison(o->seed, o->roff + first) ? "not_copied" : shift ? "misplaced" : "corrupt");
		if (shift && b[first] != poison(o->seed, o->roff + first))
			printf(" source_shift=%lld", (long long)shift);
	}
	printf("\n");
	if (bad) {
		uint8_t got = b[first], before = poison(o->seed, o->roff + first);

		fprintf(stderr, "rmc: %llu of %llu bytes differ from pattern %llu; the first, local byte %llu (remote "
			"offset %llu), %s\n", (unsigned long long)bad, (unsigned long long)o->len,
			(unsigned long long)o->seed, (unsigned long long)(o->loff + first),
			(unsigned long long)(o->roff + first),
			got == before ? "was not copied: it still holds the value it had before the READ" :
			"was written with data that is not the pattern of its remote offset (misplaced if "
			"source_shift is printed: it came from remote offset + source_shift)");
	}
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
	if (!o->count)
		die("--count K (at least 1) is required");
	cas = !strcmp(o->op, "cas");
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, 4096, o->key);
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
	{
		uint64_t final = 0;

		/* the word after our increments (others may still be adding): a FAA of 0 reads it */
		st = rmc_faa(q, (unsigned)o->node, o->off, 0, &final, &cqe);
		printf("op=%s count=%llu first_old=%llu last_old=%llu retries=%llu final=%llu\n", o->op,
		       (unsigned long long)o->count, (unsigned long long)first, (unsigned long long)old,
		       (unsigned long long)retries, (unsigned long long)final);
		if (st != RMC_ST_OK)
			fprintf(stderr, "rmc: reading the final value failed: %s\n",
				st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
	}
	rmc_close(r);
	return 0;
}

static int cmd_async_read(const struct opts *o)
{
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	uint64_t posted = 0, done = 0, per[5] = { 0 }, other = 0, count = o->count;
	struct rmc_cqe cqe[64];
	int stopped = 0;
	unsigned depth = 2;
	time_t t0 = time(NULL);

	need(o, 1, 1);
	if (!o->len || !o->count)
		die("--len and --count are required");
	while (depth < (unsigned)o->window)
		depth <<= 1;
	r = open_rmc();
	c = local_ctx(r, (unsigned)o->id, o->len, o->key);
	q = make_qp(r, c, depth);
	while (done < count) {
		while (posted < count && rmc_qp_outstanding(q) < (unsigned)o->window &&
		       rmc_post_read(q, (unsigned)o->node, 0, 0, (uint32_t)o->len, posted, 0) == 0)
			posted++;
		int n = rmc_wait(q, cqe, 64, 1000);

		for (int i = 0; i < n; i++) {
			if (cqe[i].status < 5)
				per[cqe[i].status]++;
			else
				other++;
			if (cqe[i].status != RMC_ST_OK && cqe[i].status < 5 && per[cqe[i].status] == 1)
				printf("first_error=%s wr_id=%llu\n", rmc_status_str(cqe[i].status, cqe[i].info),
				       (unsigned long long)cqe[i].wr_id);
			if (cqe[i].status != RMC_ST_OK && !o->keep_going && !stopped) {
				/* the first failure ends the run: post nothing more, drain what is in flight */
				stopped = 1;
				count = posted;
			}
		}
		done += (uint64_t)(n > 0 ? n : 0);
		if (time(NULL) - t0 > o->timeout_ms / 1000 + 1) {
			printf("posted=%llu completed=%llu HUNG\n", (unsigned long long)posted, (unsigned long long)done);
			return 1;
		}
	}
	printf("posted=%llu completed=%llu ok=%llu abort=%llu remote_access=%llu bad_request=%llu unreachable=%llu "
	       "other=%llu stopped=%d\n",
	       (unsigned long long)posted, (unsigned long long)done, (unsigned long long)per[0],
	       (unsigned long long)per[1], (unsigned long long)per[2], (unsigned long long)per[3],
	       (unsigned long long)per[4], (unsigned long long)other, stopped);
	rmc_close(r);
	return stopped;
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
			b[roff + k] = pattern_byte(i, k);
		memset(b + CK_DST + 1, 0, len);
		st = rmc_read(q, me, roff, CK_DST + 1, len, &cqe);
		for (uint32_t k = 0; k < len; k++)
			bad += b[CK_DST + 1 + k] != pattern_byte(i, k);
		snprintf(name, sizeof(name), "read_%u", len);
		check(name, st == RMC_ST_OK && !bad, "status=%s bad=%llu modeled_ns=%u", rmc_status_str((unsigned)st, cqe.info),
		      (unsigned long long)bad, cqe.modeled_ns);
		memset(b + CK_DST + 4096, 0, len);
		st = rmc_write(q, me, CK_DST + 4096, roff, len, &cqe);
		bad = 0;
		for (uint32_t k = 0; k < len; k++)
			bad += b[CK_DST + 4096 + k] != pattern_byte(i, k);
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
		/* a read's 32 blocks go over the four R2P2s at 1 ns, a SABRe's over one at 3.2 ns (20 GB/s),
		 * plus registration and validation: 3 + 2.2 x 31 = 71 ns more (docs/sonuma.md) */
		check("sabre_modeled_like_read",
		      cqe.modeled_ns >= rd.modeled_ns + 69 && cqe.modeled_ns <= rd.modeled_ns + 73,
		      "sabre_ns=%u read_ns=%u", cqe.modeled_ns, rd.modeled_ns);
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

/* ---- check-driver: the driver's own rules, through the raw ioctls where librmc hides them ---- */

#define CD_ID 14     /* shared between two files */
#define CD_ID_BIG 9  /* the rest of the segment */
#define CD_ID_CHILD 10

static int raw_open(void)
{
	int fd = open(RMC_DEV_PATH, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "rmc: cannot open %s: %s\n", RMC_DEV_PATH, strerror(errno));
		exit(1);
	}
	return fd;
}

static int xioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) < 0 ? -errno : 0;
}

static int raw_register(int fd, unsigned id, uint64_t size, unsigned perm, int32_t version_off,
			struct rmc_uapi_ctx *out)
{
	struct rmc_uapi_ctx u = { .id = id, .perm = perm, .size = size, .nodemask = ~0ull, .version_off = version_off };
	int e = xioctl(fd, RMC_IOC_CTX_REGISTER, &u);

	if (out)
		*out = u;
	return e;
}

static int raw_qp(int fd, unsigned ctx, unsigned log2, unsigned flags, struct rmc_uapi_qp *out)
{
	struct rmc_uapi_qp u = { .ctx = ctx, .depth_log2 = log2, .flags = flags };
	int e = xioctl(fd, RMC_IOC_QP_CREATE, &u);

	if (out)
		*out = u;
	return e;
}

/* mmap that returns 0 or -errno (and unmaps what it mapped) */
static int try_map(int fd, uint64_t off, size_t len, int flags)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, (off_t)off);

	if (p == MAP_FAILED)
		return -errno;
	munmap(p, len);
	return 0;
}

/* The RMC segment as the device tree describes it (/reserved-memory/rmc-segment@...). */
static int dt_segment(uint64_t *base, uint64_t *size)
{
	const char *dir = "/proc/device-tree/reserved-memory";
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[512];
		uint8_t reg[16];
		FILE *f;

		if (strncmp(e->d_name, "rmc-segment", 11))
			continue;
		snprintf(path, sizeof(path), "%s/%s/reg", dir, e->d_name);
		f = fopen(path, "rb");
		if (f && fread(reg, 1, 16, f) == 16) {
			*base = *size = 0;
			for (int i = 0; i < 8; i++) {
				*base = *base << 8 | reg[i];
				*size = *size << 8 | reg[8 + i];
			}
			found = 1;
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return found;
}

/* Interrupts taken by the RMC's line so far (/proc/interrupts, every CPU). */
static uint64_t rmc_irqs(void)
{
	long long n = proc_irqs("sonuma-rmc");

	return n < 0 ? 0 : (uint64_t)n;
}

static int cmd_check_driver(void)
{
	rmc_t *r = open_rmc(), *rb;
	struct rmc_uapi_info info;
	struct rmc_uapi_ctx u, ub;
	struct rmc_uapi_qp qa, qb;
	struct rmc_uapi_wait w;
	struct rmc_cqe cqe;
	unsigned me = rmc_node_id(r);
	int fa, fb, e, ok;

	rmc_info(r, &info);

	/* bad arguments never reach the device */
	fa = raw_open();
	ok = raw_register(fa, RMC_CTX_COUNT, 4096, CTX_PERM_READ, -1, NULL) == -EINVAL;
	ok &= raw_register(fa, CD_ID, 0, CTX_PERM_READ, -1, NULL) == -EINVAL;
	ok &= raw_register(fa, CD_ID, info.seg_size + 1, CTX_PERM_READ, -1, NULL) == -EINVAL;
	ok &= raw_register(fa, CD_ID, 4096, 0x10, -1, NULL) == -EINVAL;
	ok &= raw_register(fa, CD_ID, 4096, CTX_PERM_READ, 12, NULL) == -EINVAL;
	ok &= raw_register(fa, CD_ID, 4096, CTX_PERM_READ, 64, NULL) == -EINVAL;
	ok &= raw_register(fa, CD_ID, 4096, CTX_PERM_READ, -2, NULL) == -EINVAL;
	u = (struct rmc_uapi_ctx){ .id = CD_ID, .perm = CTX_PERM_READ, .size = 4096, .version_off = -1, .reserved = 1 };
	ok &= xioctl(fa, RMC_IOC_CTX_REGISTER, &u) == -EINVAL;
	check("register_bad_args_einval", ok, "");

	/* the rest of the segment (first, before this suite fragments it): it ends where the segment
	 * ends, and one page more does not fit */
	{
		rmc_ctx_t *big;
		rmc_qp_t *q;
		uint64_t free0, dt_base = 0, dt_size = 0;
		int st = -1;

		rmc_info(r, &info);
		free0 = info.seg_free;
		e = rmc_ctx_register(r, CD_ID_BIG, free0, CTX_PERM_READ | CTX_PERM_WRITE, ~0ull, NULL, &big);
		check("register_rest_of_segment", e == 0, "free=%llu error=%d%s", (unsigned long long)free0, e,
		      e == -ENOSPC ? " (the free space is fragmented: other processes hold contexts)" : "");
		if (!e) {
			uint8_t *b = rmc_ctx_base(big);
			size_t sz = rmc_ctx_size(big), bad = 0;
			int have_dt = dt_segment(&dt_base, &dt_size);

			check("context_ends_at_segment_end", have_dt && rmc_ctx_phys(big) + sz == dt_base + dt_size &&
			      dt_size == info.seg_size, "ctx=0x%llx+0x%zx dt_segment=0x%llx+0x%llx", (unsigned long long)rmc_ctx_phys(big),
			      sz, (unsigned long long)dt_base, (unsigned long long)dt_size);
			e = raw_register(fa, CD_ID_CHILD, 4096, CTX_PERM_READ, -1, NULL);
			check("segment_full_enospc", e == -ENOSPC, "error=%d", e);
			for (size_t k = 0; k < 4096; k++)
				b[sz - 4096 + k] = pattern_byte(5, k);
			memset(b, 0, 4096);
			e = rmc_qp_create(r, big, 2, RMC_QP_IRQ, &q);
			if (!e)
				st = rmc_read(q, me, sz - 4096, 0, 4096, &cqe);
			for (size_t k = 0; k < 4096; k++)
				bad += b[k] != pattern_byte(5, k);
			check("read_last_page_of_segment", st == RMC_ST_OK && !bad, "status=%d bad=%zu", st, bad);
			st = e ? e : rmc_write(q, me, sz - 64, 0, 65, &cqe);
			check("write_past_segment_end", st == RMC_ST_REMOTE_ACCESS && cqe.info == RMC_INFO_BOUNDS, "status=%s",
			      st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
			rmc_ctx_release(big);
			rmc_info(r, &info);
			check("release_returns_memory", info.seg_free == free0, "free=%llu before=%llu",
			      (unsigned long long)info.seg_free, (unsigned long long)free0);
		}
	}

	e = raw_register(fa, CD_ID, 8192, CTX_PERM_READ | CTX_PERM_WRITE, -1, &u);
	check("register", e == 0, "error=%d (context %u must be free on this node)", e, CD_ID);
	if (e) {
		close(fa);
		rmc_close(r);
		return check_summary();
	}
	ok = raw_qp(fa, RMC_CTX_COUNT, 2, 0, NULL) == -EINVAL && raw_qp(fa, CD_ID, 0, 0, NULL) == -EINVAL &&
	     raw_qp(fa, CD_ID, 13, 0, NULL) == -EINVAL && raw_qp(fa, CD_ID, 2, 2, NULL) == -EINVAL &&
	     raw_qp(fa, CD_ID - 1, 2, 0, NULL) == -ENOENT;
	check("qp_create_bad_args", ok, "");
	w = (struct rmc_uapi_wait){ .qp = RMC_QP_COUNT };
	ok = xioctl(fa, RMC_IOC_WAIT, &w) == -EINVAL;
	ok &= xioctl(fa, RMC_IOC_QP_DESTROY, &(uint32_t){ RMC_QP_COUNT }) == -EINVAL;
	ok &= xioctl(fa, RMC_IOC_CTX_RELEASE, &(uint32_t){ 99 }) == -EINVAL;
	ok &= xioctl(fa, _IO(RMC_IOC_MAGIC, 0x7f), NULL) == -ENOTTY;
	ok &= xioctl(fa, RMC_IOC_INFO, (void *)16) == -EFAULT;
	check("ioctl_bad_args", ok, "");

	/* ownership: a second file maps nothing of the first's until it attaches */
	fb = raw_open();
	e = raw_qp(fa, CD_ID, 2, RMC_UAPI_QP_IRQ, &qa);
	check("qp_create", e == 0, "error=%d", e);
	ok = try_map(fb, u.mmap_off, 8192, MAP_SHARED) == -ENOENT && try_map(fb, qa.wq_mmap_off, 4096, MAP_SHARED) == -ENOENT &&
	     try_map(fb, qa.cq_mmap_off, 4096, MAP_SHARED) == -ENOENT && try_map(fb, qa.db_mmap_off, 4096, MAP_SHARED) == -ENOENT;
	check("foreign_maps_refused", ok, "");
	ok = try_map(fa, u.mmap_off, 8192, MAP_PRIVATE) == -EINVAL && try_map(fa, u.mmap_off, 3 * 4096, MAP_SHARED) == -EINVAL &&
	     try_map(fa, qa.db_mmap_off, 2 * 4096, MAP_SHARED) == -EINVAL && try_map(fa, 0, 4096, MAP_SHARED) == -ENOENT;
	check("mmap_bad_args", ok, "");
	w = (struct rmc_uapi_wait){ .qp = qa.qp, .timeout_ms = 10 };
	check("foreign_qp_refused", xioctl(fb, RMC_IOC_WAIT, &w) == -ENOENT &&
	      xioctl(fb, RMC_IOC_QP_DESTROY, &qa.qp) == -ENOENT, "");
	e = raw_register(fb, CD_ID, 4096, CTX_PERM_READ, -1, NULL);
	check("register_busy", e == -EBUSY, "error=%d", e);
	/* another uid attaches only with the key (docs/rmc-driver.md, "Who may use a context") */
	check("register_draws_a_key", u.key != 0, "key=0x%llx", (unsigned long long)u.key);
	{
		pid_t pid = fork();
		int status = -1;

		if (pid == 0) {
			struct rmc_uapi_ctx uc = { .id = CD_ID };
			int fc, bad = 0;

			if (setgid(1000) || setuid(1000))
				_exit(2);
			fc = raw_open();
			bad |= xioctl(fc, RMC_IOC_CTX_ATTACH, &uc) != -EACCES;
			uc = (struct rmc_uapi_ctx){ .id = CD_ID, .key = u.key ^ 1 };
			bad |= xioctl(fc, RMC_IOC_CTX_ATTACH, &uc) != -EACCES;
			bad |= try_map(fc, u.mmap_off, 8192, MAP_SHARED) != -ENOENT;
			bad |= raw_qp(fc, CD_ID, 2, 0, NULL) != -ENOENT;
			uc = (struct rmc_uapi_ctx){ .id = CD_ID, .key = u.key };
			bad |= xioctl(fc, RMC_IOC_CTX_ATTACH, &uc) != 0 || uc.key != u.key;
			bad |= try_map(fc, u.mmap_off, 8192, MAP_SHARED) != 0;
			_exit(bad ? 1 : 0);
		}
		if (pid > 0)
			waitpid(pid, &status, 0);
		check("other_uid_attaches_only_with_the_key", status == 0, "child status=%d", status);
	}
	ub = (struct rmc_uapi_ctx){ .id = CD_ID };
	e = xioctl(fb, RMC_IOC_CTX_ATTACH, &ub);
	{
		uint8_t *pa = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fa, (off_t)u.mmap_off);
		uint8_t *pb = e ? MAP_FAILED : mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fb, (off_t)ub.mmap_off);

		ok = !e && ub.size == 8192 && ub.phys == u.phys && ub.perm == u.perm && pa != MAP_FAILED && pb != MAP_FAILED;
		if (ok) {
			ok = pa[0] == 0 && pa[8191] == 0; /* registration zeroes */
			pa[100] = 0xa5;
			ok &= pb[100] == 0xa5;
		}
		check("attach_shares_memory", ok, "error=%d", e);
		if (pa != MAP_FAILED)
			munmap(pa, 8192);
		if (pb != MAP_FAILED)
			munmap(pb, 8192);
	}
	check("attached_file_still_cannot_map_foreign_qp", try_map(fb, qa.wq_mmap_off, 4096, MAP_SHARED) == -ENOENT, "");

	/* waiting: a timeout with nothing posted; a sleeping waiter woken by the interrupt */
	{
		struct timespec t0, t1;
		long ms;

		w = (struct rmc_uapi_wait){ .qp = qa.qp, .cq_index = 0, .timeout_ms = 50 };
		clock_gettime(CLOCK_MONOTONIC, &t0);
		e = xioctl(fa, RMC_IOC_WAIT, &w);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
		check("wait_times_out", e == -ETIMEDOUT && ms >= 40, "error=%d waited_ms=%ld", e, ms);
	}
	{
		rmc_ctx_t *c;
		rmc_qp_t *q;
		uint64_t before = rmc_irqs();
		int st = -1;

		e = rmc_ctx_attach(r, CD_ID, &c);
		if (!e)
			e = rmc_qp_create(r, c, 2, RMC_QP_IRQ, &q);
		if (!e)
			st = rmc_read(q, me, 0, 4096, 4096, &cqe);
		/* the CQE can be seen (spinning) before the interrupt is handled: give it a second */
		for (int k = 0; k < 100 && rmc_irqs() <= before; k++)
			usleep(10000);
		check("irq_completion", !e && st == RMC_ST_OK && rmc_irqs() > before, "error=%d status=%d irqs=%llu",
		      e, st, (unsigned long long)(rmc_irqs() - before));
		if (!e)
			rmc_ctx_release(c); /* an attacher's release: the context stays */
		check("attacher_release_keeps_context", xioctl(fb, RMC_IOC_CTX_ATTACH, &ub) == 0, "");
	}

	/* the owner releases: an attacher's QP completes NO_LOCAL_CTX; re-registration retires it */
	{
		rmc_ctx_t *cb;
		rmc_qp_t *qb2;
		int st = -1;

		e = rmc_open(&rb);
		if (!e)
			e = rmc_ctx_attach(rb, CD_ID, &cb);
		if (!e)
			e = rmc_qp_create(rb, cb, 2, RMC_QP_IRQ, &qb2);
		if (!e) {
			xioctl(fa, RMC_IOC_CTX_RELEASE, &(uint32_t){ CD_ID });
			st = rmc_read(qb2, me, 0, 0, 8, &cqe);
		}
		check("unknown_local_context", st == RMC_ST_BAD_REQUEST && cqe.info == RMC_INFO_NO_LOCAL_CTX, "status=%s",
		      st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
		check("released_context_unmappable", try_map(fb, ub.mmap_off, 4096, MAP_SHARED) == -ENOENT &&
		      xioctl(fb, RMC_IOC_CTX_ATTACH, &(struct rmc_uapi_ctx){ .id = CD_ID }) == -ENOENT, "");
		/* a new incarnation of the id: the old attacher neither maps it nor reaches it */
		e = raw_register(fa, CD_ID, 4096, CTX_PERM_READ | CTX_PERM_WRITE, -1, &u);
		st = e ? e : rmc_read(qb2, me, 0, 0, 8, &cqe);
		check("stale_qp_retired", !e && st == -ENOLINK, "error=%d result=%d (%s)", e, st,
		      st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
		check("stale_attach_unmappable", try_map(fb, ub.mmap_off, 4096, MAP_SHARED) == -ENOENT &&
		      raw_qp(fb, CD_ID, 2, 0, NULL) == -ENOENT, "");
		rmc_close(rb);
	}
	close(fb);

	/* QPs are a node-wide resource of RMC_QP_COUNT */
	{
		uint32_t made[RMC_QP_COUNT + 1];
		int n = 0;

		while (n <= (int)RMC_QP_COUNT && !(e = raw_qp(fa, CD_ID, 1, 0, &qb)))
			made[n++] = qb.qp;
		check("qp_exhaustion_ebusy", e == -EBUSY && n < (int)RMC_QP_COUNT, "created=%d then error=%d", n, e);
		while (n > 0)
			xioctl(fa, RMC_IOC_QP_DESTROY, &made[--n]);
		e = raw_qp(fa, CD_ID, 1, 0, &qb);
		check("qp_destroy_frees", e == 0, "error=%d", e);
		if (!e)
			xioctl(fa, RMC_IOC_QP_DESTROY, &qb.qp);
	}

	/* a process that dies: its doorbell page was revoked at destroy, its context goes at close */
	{
		pid_t pid = fork();
		int status = 0;

		if (pid == 0) {
			int fd = raw_open();
			struct rmc_uapi_qp cq;
			volatile uint64_t *db;

			if (raw_register(fd, CD_ID_CHILD, 4096, CTX_PERM_READ, -1, NULL) || raw_qp(fd, CD_ID_CHILD, 1, 0, &cq))
				_exit(3);
			db = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)cq.db_mmap_off);
			if (db == MAP_FAILED)
				_exit(4);
			(void)db[DB_WQ_HEAD / 8]; /* mapped: reads the device */
			if (xioctl(fd, RMC_IOC_QP_DESTROY, &cq.qp))
				_exit(5);
			db[DB_WQ_TAIL / 8] = 1; /* revoked: SIGBUS */
			_exit(6);
		}
		waitpid(pid, &status, 0);
		check("doorbell_revoked_after_destroy", WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "status=0x%x", status);
		ub = (struct rmc_uapi_ctx){ .id = CD_ID_CHILD };
		e = xioctl(fa, RMC_IOC_CTX_ATTACH, &ub);
		check("close_releases_context", e == -ENOENT, "error=%d", e);
	}

	close(fa);
	rmc_info(r, &info);
	rmc_close(r);
	return check_summary();
}

int main(int argc, char **argv)
{
	const struct command *cmd;
	struct opts o;

	tool_prog = "rmc";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	cmd = find_command(argv[1]);
	parse(argc - 1, argv + 1, cmd, &o);
	if (!strcmp(cmd->name, "info"))
		return cmd_info();
	if (!strcmp(cmd->name, "counters"))
		return cmd_counters();
	if (!strcmp(cmd->name, "ctx-hold"))
		return cmd_ctx_hold(&o);
	if (!strcmp(cmd->name, "fill"))
		return cmd_fill(&o);
	if (!strcmp(cmd->name, "read"))
		return cmd_xfer(&o, 0);
	if (!strcmp(cmd->name, "write"))
		return cmd_xfer(&o, 1);
	if (!strcmp(cmd->name, "check-driver"))
		return cmd_check_driver();
	if (!strcmp(cmd->name, "check-data"))
		return cmd_check_data(&o, 0);
	if (!strcmp(cmd->name, "write-pattern"))
		return cmd_check_data(&o, 1);
	if (!strcmp(cmd->name, "atomic"))
		return cmd_atomic(&o);
	if (!strcmp(cmd->name, "async-read"))
		return cmd_async_read(&o);
	return cmd_check();
}
