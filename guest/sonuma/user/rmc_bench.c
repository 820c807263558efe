// SPDX-License-Identifier: MIT
/*
 * rmc-bench: remote read vs SABRe vs SABRe without speculation (the SABRes paper sec. 7.1, Fig. 7a;
 * docs/sonuma-workloads.md). Synchronous latency (wall clock and the device's modeled latency per
 * completion) and asynchronous throughput, per object size. Prints a table per mode, appends CSV.
 *
 *   rmc-bench serve --ctx N [--size S] [--seconds T]      on the destination
 *   rmc-bench [run] --node D --ctx N [--op read|sabre|sabre-nospec|all] [--sizes 64,...,8192]
 *                   [--mode lat|tput|both] [--iters K] [--window W] [--csv FILE]
 *
 * Both nodes use the same context id: the destination's segment holds the objects (`serve`
 * fills it: every 64-byte block starts with an even version word, the rest is a pattern of the
 * segment offset), the reader's own segment is the local buffer (it attaches to the context if
 * this node already has it, else registers it). Both use the context's access key (--key or
 * $RMC_KEY; serve draws one if none is given and prints it).
 *
 * A run stops at the first unrecoverable completion (anything but OK and SABRE_ABORT, or a failed
 * wait): it says what failed, after how many requests and how long since the last success, and
 * exits 1. Throughput figures count successful completions only.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "librmc.h"
#include "tool.h"

static const char usage[] =
	"usage: rmc-bench serve --ctx N [--size S] [--seconds T] [--key K]\n"
	"       rmc-bench [run] --node D --ctx N [--key K] [--op read|sabre|sabre-nospec|all] [--sizes 64,128,...]\n"
	"                       [--mode lat|tput|both] [--iters K] [--window W] [--tput-ops M] [--spin]\n"
	"                       [--no-verify] [--csv FILE]\n"
	"  serve: register context N (default 1 MiB, perm read + SABRe, version word at offset 0) and\n"
	"         fill it with objects whose version words are even (every 64-byte block starts with\n"
	"         one), hold it until killed or T seconds\n"
	"  run:   for each size and op (--op takes a comma list; all = read,sabre,sabre-nospec; --ops is\n"
	"         the same): --mode lat: K synchronous requests (default 200): wall median/p99 (us,\n"
	"         clock_gettime around the call) and modeled median (ns, the CQE's modeled_ns); the data\n"
	"         read is compared with the served pattern (a mismatch counts as an error) unless\n"
	"         --no-verify. --mode tput: W requests in flight (default 16), M requests (default\n"
	"         max(4K, 2000)): ops/s and MB/s wall, and the modeled throughput min(W*size/modeled\n"
	"         latency, Table 2's R2P2 and link bandwidths; SABRes: at most R2P2s*ATT entries in\n"
	"         flight) in MB/s. --spin: the QP has no completion interrupt (the wait spins).\n"
	"         --csv appends one row per (mode, op, size) with every column. The run stops at the first\n"
	"         unrecoverable error (exit 1); ops/s and MB/s count successful requests only\n"
	"  --key K: the context's access key (a number or @FILE; default $RMC_KEY; serve: none = random,\n"
	"         printed as key=): the destination serves only requests carrying its key\n"
	"  An option the command does not take (e.g. run --seconds) is refused; --help prints this.\n";

/* A completion after which going on measures nothing: the destination refused, or is gone. */
static int unrecoverable(int st)
{
	return st < 0 || (st != RMC_ST_OK && st != RMC_ST_SABRE_ABORT);
}

static void stopped(const char *op, unsigned size, unsigned done, uint64_t since_ok_ns, const char *why)
{
	fprintf(stderr, "rmc-bench: stopped at the first unrecoverable error: %s %u: %s (after %u requests, %.3f s "
			"after the last success)\n", op, size, why, done, since_ok_ns / 1e9);
	printf("stopped=1 op=%s size=%u error=%s completed=%u since_last_ok_s=%.3f\n", op, size, why, done,
	       since_ok_ns / 1e9);
	fflush(stdout);
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	return x ^ (x >> 33);
}

/* The served content: the 8-byte word at segment offset `off` (8-aligned). Word 0 of every
 * 64-byte block is an even version, so a SABRe at any 64-byte aligned offset can succeed. */
static uint64_t pat_word(uint64_t off)
{
	return off % 64 == 0 ? ((off >> 6) & 0xffffu) << 1 : mix(off ^ 0x5eed5eedull);
}

static rmc_t *open_or_die(void)
{
	rmc_t *r;
	int e = rmc_open(&r);

	if (e) {
		fprintf(stderr, "rmc-bench: %s: %s (is sonuma_rmc.ko loaded?)\n", RMC_DEV_PATH, strerror(-e));
		exit(1);
	}
	return r;
}

static int serve(unsigned ctx, uint64_t size, unsigned seconds, uint64_t key)
{
	struct rmc_layout lay = { 0 };
	rmc_t *r = open_or_die();
	rmc_ctx_t *c;
	int e = rmc_ctx_register_key(r, ctx, size, CTX_PERM_READ | CTX_PERM_SABRE, ~0ull, &lay, key, &c);

	if (e) {
		fprintf(stderr, "rmc-bench: register context %u: %s\n", ctx, strerror(-e));
		return 1;
	}
	uint64_t *seg = rmc_ctx_base(c);
	size_t n = rmc_ctx_size(c) / 8;

	for (size_t i = 0; i < n; i++)
		seg[i] = pat_word(i * 8);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	printf("serving ctx=%u size=%zu version_off=0 objects=every_64B_block key=0x%llx\n", ctx, rmc_ctx_size(c),
	       (unsigned long long)rmc_ctx_key(c));
	fflush(stdout);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	for (unsigned t = 0; !stop && (!seconds || t < seconds * 10); t++)
		usleep(100000);
	rmc_close(r);
	return 0;
}

enum { OP_READ, OP_SABRE, OP_NOSPEC };
static const char *const op_names[] = { "read", "sabre", "sabre-nospec" };

static int post(rmc_qp_t *q, int op, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t id, unsigned fl)
{
	if (op == OP_READ)
		return rmc_post_read(q, node, roff, loff, len, id, fl);
	return rmc_post_sabre(q, node, roff, loff, len, id, fl | (op == OP_NOSPEC ? RMC_POST_NOSPEC : 0));
}

/* bytes of buf[0..len) that differ from the served content at roff */
static unsigned bad_bytes(const uint8_t *buf, uint64_t roff, uint32_t len)
{
	unsigned bad = 0;

	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t want = pat_word(roff + i), got;

		memcpy(&got, buf + i, 8);
		if (got != want)
			for (unsigned b = 0; b < 8; b++)
				bad += (uint8_t)(got >> (8 * b)) != (uint8_t)(want >> (8 * b));
	}
	return bad;
}

static const char csv_head[] =
	"mode,op,size,iters,window,errors,wall_med_us,wall_p99_us,model_med_ns,ops_per_s,wall_mb_per_s,"
	"model_gb_per_s,model_mb_per_s,model_p99_ns,wall_mean_us,wall_min_us,dev_wall_med_us,bad_bytes,"
	"src_node,dst_node,spin\n";

static void add_ops(int *ops, unsigned *nops, const char *s)
{
	char buf[128], *tok, *save;

	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int k;

		if (!strcmp(tok, "all")) {
			add_ops(ops, nops, "read,sabre,sabre-nospec");
			continue;
		}
		for (k = 0; k < 3 && strcmp(tok, op_names[k]); k++)
			;
		if (k == 3)
			die("--op: '%s' is not read, sabre, sabre-nospec or all", tok);
		for (unsigned i = 0; i < *nops; i++)
			if (ops[i] == k)
				k = -1;
		if (k >= 0)
			ops[(*nops)++] = k;
	}
}

/* Every option, by its getopt value; SERVE_OPTS and RUN_OPTS say which ones each command takes. */
static const struct option long_opts[] = {
	{ "node", 1, 0, 'n' }, { "ctx", 1, 0, 'c' }, { "size", 1, 0, 'z' }, { "seconds", 1, 0, 'S' },
	{ "iters", 1, 0, 'i' }, { "window", 1, 0, 'w' }, { "tput-ops", 1, 0, 'T' }, { "csv", 1, 0, 'C' },
	{ "key", 1, 0, 'k' }, { "sizes", 1, 0, 's' }, { "ops", 1, 0, 'O' }, { "op", 1, 0, 'O' },
	{ "mode", 1, 0, 'm' }, { "no-verify", 0, 0, 'V' }, { "spin", 0, 0, 'P' }, { "help", 0, 0, 'h' },
	{ 0 }
};
#define SERVE_OPTS "czSk"
#define RUN_OPTS "nciwTCksOmVP"

int main(int argc, char **argv)
{
	unsigned node = 0, ctx = RMC_CTX_COUNT, iters = 200, window = 16, seconds = 0, nsizes = 0, nops = 0;
	unsigned tput_ops = 0;
	uint32_t sizes[32];
	int ops[3], lat = 1, tput = 1, have_node = 0, verify = 1, spin = 0, is_serve = 0, opt, li;
	uint64_t size = 1 << 20, key = 0;
	const char *csv = NULL, *sizes_s = "64,128,256,512,1024,2048,4096,8192", *ops_s = "all";

	tool_prog = "rmc-bench";
	if (rmc_key_parse(NULL, &key))
		die("RMC_KEY: not a number");
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "serve") || !strcmp(argv[1], "run")) {
		is_serve = !strcmp(argv[1], "serve");
		argc--, argv++; /* argv[0]: the command; without one (an option first): run */
	} else if (strncmp(argv[1], "--", 2))
		die("unknown command '%s' (rmc-bench --help)", argv[1]);
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":", long_opts, &li)) != -1) {
		if (opt == ':' || opt == '?')
			bad_option(opt, argv, "rmc-bench --help");
		if (opt == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (!strchr(is_serve ? SERVE_OPTS : RUN_OPTS, opt))
			die("--%s does not apply to `rmc-bench %s` (rmc-bench --help)", long_opts[li].name,
			    is_serve ? "serve" : "run");
		switch (opt) {
		case 'V': verify = 0; break;
		case 'P':
			spin = 1;
			/* spin the whole wait (librmc naps after RMC_SPIN_US), unless the caller chose */
			setenv("RMC_SPIN_US", "1000000", 0);
			break;
		case 'n':
			node = (unsigned)num(optarg, "--node", 63);
			have_node = 1;
			break;
		case 'c': ctx = (unsigned)num(optarg, "--ctx", RMC_CTX_COUNT - 1); break;
		case 'z': size = num(optarg, "--size", 1ull << 30); break;
		case 'S': seconds = (unsigned)num(optarg, "--seconds", 86400); break;
		case 'i': iters = (unsigned)num(optarg, "--iters", 1000000); break;
		case 'w': window = (unsigned)num(optarg, "--window", 1024); break;
		case 'T': tput_ops = (unsigned)num(optarg, "--tput-ops", 100000000); break;
		case 'C': csv = optarg; break;
		case 'k':
			if (rmc_key_parse(optarg, &key))
				die("--key '%s': a number, or @FILE holding one", optarg);
			break;
		case 's': sizes_s = optarg; break;
		case 'O': ops_s = optarg; break;
		case 'm':
			lat = !strcmp(optarg, "lat") || !strcmp(optarg, "both");
			tput = !strcmp(optarg, "tput") || !strcmp(optarg, "both");
			if (!lat && !tput)
				die("--mode lat|tput|both");
			break;
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (rmc-bench --help)", argv[optind]);
	if (ctx >= RMC_CTX_COUNT)
		die("--ctx is required");
	if (is_serve) {
		if (size < 64 || size % 64)
			die("--size: a non-zero multiple of 64");
		return serve(ctx, size, seconds, key);
	}
	if (!have_node)
		die("--node is required");
	if (!iters || !window)
		die("--iters and --window must be at least 1");
	if (!tput_ops)
		tput_ops = iters * 4 > 2000 ? iters * 4 : 2000;
	{
		char buf[256], *tok, *save;

		snprintf(buf, sizeof(buf), "%s", sizes_s);
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (nsizes == 32)
				die("--sizes: at most 32 sizes");
			sizes[nsizes] = (uint32_t)num(tok, "--sizes", RMC_SABRE_MAX);
			if (sizes[nsizes] < 64 || sizes[nsizes] % 64)
				die("--sizes: %u is not a non-zero multiple of 64", sizes[nsizes]);
			nsizes++;
		}
		if (!nsizes)
			die("--sizes: no size given");
		add_ops(ops, &nops, ops_s);
	}

	rmc_t *r = open_or_die();
	rmc_ctx_t *c;
	rmc_qp_t *q;
	uint32_t maxsize = 0;
	struct rmc_uapi_info info;
	FILE *out = NULL;
	int e, failed = 0;

	for (unsigned i = 0; i < nsizes; i++)
		maxsize = sizes[i] > maxsize ? sizes[i] : maxsize;
	memset(&info, 0, sizeof(info));
	e = rmc_info(r, &info);
	if (e) {
		fprintf(stderr, "rmc-bench: info: %s\n", strerror(-e));
		return 1;
	}
	/* the local buffers: 16 objects of the largest size in this node's segment of the context */
	e = rmc_ctx_attach_key(r, ctx, key, &c);
	if (e == -ENOENT)
		e = rmc_ctx_register_key(r, ctx, (size_t)maxsize * 16, CTX_PERM_READ, ~0ull, NULL, key, &c);
	if (e || rmc_ctx_size(c) < (size_t)maxsize * 16) {
		fprintf(stderr, "rmc-bench: local context %u: %s\n", ctx, e ? strerror(-e) : "smaller than 16 objects");
		return 1;
	}
	uint8_t *lbuf = rmc_ctx_base(c);
	unsigned depth = 2;

	while (depth < window)
		depth <<= 1;
	e = rmc_qp_create(r, c, depth, spin ? 0 : RMC_QP_IRQ, &q);
	if (e) {
		fprintf(stderr, "rmc-bench: queue pair: %s\n", strerror(-e));
		return 1;
	}
	if (csv) {
		out = fopen(csv, "a");
		if (!out) {
			fprintf(stderr, "rmc-bench: %s: %s\n", csv, strerror(errno));
			return 1;
		}
		if (ftell(out) == 0)
			fputs(csv_head, out);
	}
	double cap_gbps = (double)info.t_r2p2_gbps * info.t_r2p2_count;

	if ((double)info.t_link_gbps < cap_gbps)
		cap_gbps = (double)info.t_link_gbps;
	unsigned att_cap = info.att_entries * info.t_r2p2_count; /* SABRes in flight at one destination */
	/* latency: every sample; throughput: the modeled latencies of the first 1 M completions */
	unsigned tput_samp = tput_ops < (1u << 20) ? tput_ops : (1u << 20);
	unsigned nsamp = iters > tput_samp ? iters : tput_samp;
	uint64_t *wall = calloc(nsamp, 8), *model = calloc(nsamp, 8), *dev = calloc(nsamp, 8);

	if (!wall || !model || !dev)
		die("out of memory");
	if (lat) {
		printf("latency (node %u -> node %u, %u synchronous requests each)\n", rmc_node_id(r), node, iters);
		printf("%-13s %6s %12s %12s %13s %7s\n", "op", "size", "wall_med_us", "wall_p99_us", "model_med_ns", "errors");
		for (unsigned s = 0; s < nsizes; s++) {
			for (unsigned o = 0; o < nops; o++) {
				unsigned errors = 0, bad = 0, first_err = 1;
				uint64_t wsum = 0, last_ok = now_ns();

				for (unsigned k = 0; k < iters; k++) {
					struct rmc_cqe cqe;
					uint64_t roff = (uint64_t)(k % 16) * maxsize;

					memset(&cqe, 0, sizeof(cqe));
					if (verify)
						memset(lbuf, 0xa5, sizes[s]);
					uint64_t t0 = now_ns();
					int st = ops[o] == OP_READ
							 ? rmc_read(q, node, roff, 0, sizes[s], &cqe)
							 : rmc_sabre(q, node, roff, 0, sizes[s],
								     ops[o] == OP_NOSPEC ? RMC_POST_NOSPEC : 0, &cqe);

					wall[k] = now_ns() - t0;
					wsum += wall[k];
					model[k] = cqe.modeled_ns;
					dev[k] = cqe.wall_ns;
					if (unrecoverable(st)) {
						stopped(op_names[ops[o]], sizes[s], k,  now_ns() - last_ok,
							st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
						return 1;
					}
					last_ok = now_ns();
					if (st != RMC_ST_OK) {
						if (first_err)
							fprintf(stderr, "rmc-bench: %s %u at %llu: %s\n", op_names[ops[o]], sizes[s],
								(unsigned long long)roff,
								st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
						first_err = 0;
						errors++;
						continue;
					}
					if (verify) {
						unsigned b = bad_bytes(lbuf, roff, sizes[s]);

						if (b && first_err)
							fprintf(stderr, "rmc-bench: %s %u at %llu: %u bytes differ from the served "
									"content (is `rmc-bench serve` the destination?)\n",
								op_names[ops[o]], sizes[s], (unsigned long long)roff, b);
						first_err &= !b;
						bad += b;
						errors += b != 0;
					}
				}
				double wmean = (double)wsum / iters / 1e3;

				qsort(wall, iters, 8, cmp_u64);
				qsort(model, iters, 8, cmp_u64);
				qsort(dev, iters, 8, cmp_u64);
				printf("%-13s %6u %12.1f %12.1f %13llu %7u\n", op_names[ops[o]], sizes[s], wall[iters / 2] / 1e3,
				       wall[iters * 99 / 100] / 1e3, (unsigned long long)model[iters / 2], errors);
				fflush(stdout);
				if (out)
					fprintf(out, "lat,%s,%u,%u,1,%u,%.2f,%.2f,%llu,,,,,%llu,%.2f,%.2f,%.2f,%u,%u,%u,%d\n",
						op_names[ops[o]], sizes[s], iters, errors, wall[iters / 2] / 1e3,
						wall[iters * 99 / 100] / 1e3, (unsigned long long)model[iters / 2],
						(unsigned long long)model[iters * 99 / 100], wmean, wall[0] / 1e3,
						dev[iters / 2] / 1e3, bad, rmc_node_id(r), node, spin);
				failed |= errors != 0;
			}
		}
	}
	if (tput) {
		unsigned total = tput_ops;

		printf("throughput (node %u -> node %u, %u requests in flight, %u requests each)\n", rmc_node_id(r), node,
		       window, total);
		printf("%-13s %6s %10s %12s %12s %13s %7s\n", "op", "size", "ops/s", "wall_MB/s", "model_MB/s",
		       "model_med_ns", "errors");
		for (unsigned s = 0; s < nsizes; s++) {
			for (unsigned o = 0; o < nops; o++) {
				unsigned posted = 0, done = 0, errors = 0, nm = 0, ok = 0;
				uint64_t t0 = now_ns(), last_ok = t0;
				struct rmc_cqe cs[64];

				while (done < total) {
					while (posted < total && rmc_qp_outstanding(q) < window) {
						e = post(q, ops[o], node, (uint64_t)(posted % 16) * maxsize,
							 (uint64_t)(posted % 16) * maxsize, sizes[s], posted, RMC_POST_DEFER);
						if (e == -EAGAIN)
							break;
						if (e) {
							fprintf(stderr, "rmc-bench: post %s %u: %s\n", op_names[ops[o]], sizes[s],
								strerror(-e));
							return 1;
						}
						posted++;
					}
					rmc_doorbell(q);
					int n = rmc_wait(q, cs, 64, 10000);

					if (n <= 0) {
						stopped(op_names[ops[o]], sizes[s], done, now_ns() - last_ok,
							n ? strerror(-n) : "no completion for 10 s");
						return 1;
					}
					for (int k = 0; k < n; k++) {
						if (unrecoverable(cs[k].status)) {
							stopped(op_names[ops[o]], sizes[s], done + (unsigned)k, now_ns() - last_ok,
								rmc_status_str(cs[k].status, cs[k].info));
							return 1;
						}
						if (cs[k].status != RMC_ST_OK) {
							errors++;
							continue;
						}
						ok++;
						last_ok = now_ns();
						if (nm < nsamp)
							model[nm++] = cs[k].modeled_ns;
					}
					done += (unsigned)n;
				}
				double secs = (double)(now_ns() - t0) / 1e9;

				qsort(model, nm, 8, cmp_u64);
				double mlat = nm && model[nm / 2] ? (double)model[nm / 2] : 1;
				unsigned w = window;

				if (ops[o] != OP_READ && att_cap && w > att_cap)
					w = att_cap; /* the destination's ATTs bound the SABRes in flight */
				double mg = (double)w * sizes[s] / mlat; /* bytes per ns = GB/s */

				if (mg > cap_gbps)
					mg = cap_gbps;
				/* successful requests only: a failure is no throughput */
				printf("%-13s %6u %10.0f %12.2f %12.0f %13.0f %7u\n", op_names[ops[o]], sizes[s], ok / secs,
				       ok * (double)sizes[s] / secs / 1e6, mg * 1e3, mlat, errors);
				fflush(stdout);
				if (out)
					fprintf(out, "tput,%s,%u,%u,%u,%u,,,%.0f,%.0f,%.2f,%.2f,%.0f,%llu,,,,,%u,%u,%d\n",
						op_names[ops[o]], sizes[s], total, window, errors, mlat, ok / secs,
						ok * (double)sizes[s] / secs / 1e6, mg, mg * 1e3,
						(unsigned long long)(nm ? model[nm * 99 / 100] : 0), rmc_node_id(r), node, spin);
				failed |= errors != 0;
			}
		}
	}
	if (out)
		fclose(out);
	rmc_close(r);
	return failed;
}
