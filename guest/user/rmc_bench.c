// SPDX-License-Identifier: MIT
/*
 * rmc-bench: remote read vs SABRe vs SABRe without speculation (seed 000 sec. 7.1, Fig. 7a;
 * docs/sonuma-workloads.md). Synchronous latency (wall clock and the device's modeled latency per
 * completion) and asynchronous throughput, per object size. Prints a table, appends CSV.
 *
 *   rmc-bench serve --ctx N [--size S] [--seconds T]      on the destination
 *   rmc-bench run --node D --ctx N [--ops read,sabre,sabre-nospec] [--sizes 64,...,8192]
 *                 [--mode lat|tput|both] [--iters K] [--window W] [--csv FILE]
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
	"usage: rmc-bench serve --ctx N [--size S] [--seconds T]\n"
	"       rmc-bench run --node D --ctx N [--ops read,sabre,sabre-nospec] [--sizes 64,128,...]\n"
	"                     [--mode lat|tput|both] [--iters K] [--window W] [--csv FILE]\n"
	"  serve: register context N (default 1 MiB, read + SABRe, version word at offset 0) with even\n"
	"         versions everywhere, hold it until killed or T seconds\n"
	"  run:   for each op and size: K synchronous requests (default 200): wall median/p99 (us) and\n"
	"         modeled median (ns); then W requests in flight (default 16) for K*4 requests: ops/s,\n"
	"         MB/s wall, and the modeled throughput W*size/modeled latency, capped by Table 2's\n"
	"         R2P2 and link bandwidths (GB/s)\n";

static volatile int stop;
static void on_signal(int s) { (void)s; stop = 1; }

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
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

static int serve(unsigned ctx, uint64_t size, unsigned seconds)
{
	struct rmc_layout lay = { 0 };
	rmc_t *r = open_or_die();
	rmc_ctx_t *c;
	int e = rmc_ctx_register(r, ctx, size, CTX_PERM_READ | CTX_PERM_SABRE, ~0ull, &lay, &c);

	if (e) {
		fprintf(stderr, "rmc-bench: register context %u: %s\n", ctx, strerror(-e));
		return 1;
	}
	/* versions are the zeroed segment's 0: even, so every SABRe can succeed */
	printf("serving ctx=%u size=%zu\n", ctx, rmc_ctx_size(c));
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

int main(int argc, char **argv)
{
	unsigned node = 0, ctx = RMC_CTX_COUNT, iters = 200, window = 16, seconds = 0, nsizes = 0, nops = 0;
	uint32_t sizes[32];
	int ops[3], lat = 1, tput = 1, have_node = 0;
	uint64_t size = 1 << 20;
	const char *csv = NULL, *sizes_s = "64,128,256,512,1024,2048,4096,8192", *ops_s = "read,sabre,sabre-nospec";

	tool_prog = "rmc-bench";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			die("%s needs a value", a);
		i++;
		if (!strcmp(a, "--node")) {
			node = (unsigned)num(v, a, 63);
			have_node = 1;
		} else if (!strcmp(a, "--ctx"))
			ctx = (unsigned)num(v, a, RMC_CTX_COUNT - 1);
		else if (!strcmp(a, "--size"))
			size = num(v, a, 1ull << 30);
		else if (!strcmp(a, "--seconds"))
			seconds = (unsigned)num(v, a, 86400);
		else if (!strcmp(a, "--iters"))
			iters = (unsigned)num(v, a, 1000000);
		else if (!strcmp(a, "--window"))
			window = (unsigned)num(v, a, 1024);
		else if (!strcmp(a, "--csv"))
			csv = v;
		else if (!strcmp(a, "--sizes"))
			sizes_s = v;
		else if (!strcmp(a, "--ops"))
			ops_s = v;
		else if (!strcmp(a, "--mode")) {
			lat = !strcmp(v, "lat") || !strcmp(v, "both");
			tput = !strcmp(v, "tput") || !strcmp(v, "both");
			if (!lat && !tput)
				die("--mode lat|tput|both");
		} else
			die("unknown option '%s' (rmc-bench --help)", a);
	}
	if (ctx >= RMC_CTX_COUNT)
		die("--ctx is required");
	if (!strcmp(argv[1], "serve"))
		return serve(ctx, size, seconds);
	if (strcmp(argv[1], "run"))
		die("unknown command '%s' (rmc-bench --help)", argv[1]);
	if (!have_node)
		die("--node is required");
	if (!iters || !window)
		die("--iters and --window must be at least 1");
	{
		char buf[256], *tok, *save;

		snprintf(buf, sizeof(buf), "%s", sizes_s);
		for (tok = strtok_r(buf, ",", &save); tok && nsizes < 32; tok = strtok_r(NULL, ",", &save)) {
			sizes[nsizes] = (uint32_t)num(tok, "--sizes", RMC_SABRE_MAX);
			if (sizes[nsizes] < 64 || sizes[nsizes] % 64)
				die("--sizes: %u is not a multiple of 64", sizes[nsizes]);
			nsizes++;
		}
		snprintf(buf, sizeof(buf), "%s", ops_s);
		for (tok = strtok_r(buf, ",", &save); tok && nops < 3; tok = strtok_r(NULL, ",", &save)) {
			int k;

			for (k = 0; k < 3 && strcmp(tok, op_names[k]); k++)
				;
			if (k == 3)
				die("--ops: '%s' is not read, sabre or sabre-nospec", tok);
			ops[nops++] = k;
		}
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
	rmc_info(r, &info);
	e = rmc_ctx_attach(r, ctx, &c);
	if (e == -ENOENT)
		e = rmc_ctx_register(r, ctx, (size_t)maxsize * 16, CTX_PERM_READ, ~0ull, NULL, &c);
	if (e || rmc_ctx_size(c) < (size_t)maxsize * 16) {
		fprintf(stderr, "rmc-bench: local context %u: %s\n", ctx, e ? strerror(-e) : "smaller than 16 objects");
		return 1;
	}
	unsigned depth = 2;

	while (depth < window)
		depth <<= 1;
	e = rmc_qp_create(r, c, depth, RMC_QP_IRQ, &q);
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
			fprintf(out, "mode,op,size,iters,window,errors,wall_med_us,wall_p99_us,model_med_ns,ops_per_s,"
				     "wall_mb_per_s,model_gb_per_s\n");
	}
	double cap_gbps = (double)info.t_r2p2_gbps * info.t_r2p2_count;

	if ((double)info.t_link_gbps < cap_gbps)
		cap_gbps = (double)info.t_link_gbps;
	uint64_t *wall = calloc(iters, 8), *model = calloc(iters, 8);

	if (lat) {
		printf("latency (node %u -> node %u, %u synchronous requests each)\n", rmc_node_id(r), node, iters);
		printf("%-13s %6s %12s %12s %13s %7s\n", "op", "size", "wall_med_us", "wall_p99_us", "model_med_ns", "errors");
		for (unsigned s = 0; s < nsizes; s++) {
			for (unsigned o = 0; o < nops; o++) {
				unsigned errors = 0;

				for (unsigned k = 0; k < iters; k++) {
					struct rmc_cqe cqe;
					uint64_t t0 = now_ns();
					int st = ops[o] == OP_READ
							 ? rmc_read(q, node, (uint64_t)(k % 16) * maxsize, 0, sizes[s], &cqe)
							 : rmc_sabre(q, node, (uint64_t)(k % 16) * maxsize, 0, sizes[s],
								     ops[o] == OP_NOSPEC ? RMC_POST_NOSPEC : 0, &cqe);

					wall[k] = now_ns() - t0;
					model[k] = cqe.modeled_ns;
					errors += st != RMC_ST_OK;
				}
				qsort(wall, iters, 8, cmp_u64);
				qsort(model, iters, 8, cmp_u64);
				printf("%-13s %6u %12.1f %12.1f %13llu %7u\n", op_names[ops[o]], sizes[s], wall[iters / 2] / 1e3,
				       wall[iters * 99 / 100] / 1e3, (unsigned long long)model[iters / 2], errors);
				if (out)
					fprintf(out, "lat,%s,%u,%u,1,%u,%.2f,%.2f,%llu,,,\n", op_names[ops[o]], sizes[s], iters,
						errors, wall[iters / 2] / 1e3, wall[iters * 99 / 100] / 1e3,
						(unsigned long long)model[iters / 2]);
				failed |= errors != 0;
			}
		}
	}
	if (tput) {
		unsigned total = iters * 4;

		printf("throughput (%u requests in flight, %u requests each)\n", window, total);
		printf("%-13s %6s %10s %12s %14s %7s\n", "op", "size", "ops/s", "wall_MB/s", "model_GB/s", "errors");
		for (unsigned s = 0; s < nsizes; s++) {
			for (unsigned o = 0; o < nops; o++) {
				unsigned posted = 0, done = 0, errors = 0, nm = 0;
				uint64_t t0 = now_ns();
				struct rmc_cqe cs[64];

				while (done < total) {
					while (posted < total && rmc_qp_outstanding(q) < window &&
					       post(q, ops[o], node, (uint64_t)(posted % 16) * maxsize,
						    (uint64_t)(posted % 16) * maxsize, sizes[s], posted, RMC_POST_DEFER) == 0)
						posted++;
					rmc_doorbell(q);
					int n = rmc_wait(q, cs, 64, 10000);

					if (n <= 0) {
						fprintf(stderr, "rmc-bench: no completion for 10 s (%u of %u done)\n", done, total);
						return 1;
					}
					for (int k = 0; k < n; k++) {
						errors += cs[k].status != RMC_ST_OK;
						if (nm < iters)
							model[nm++] = cs[k].modeled_ns;
					}
					done += (unsigned)n;
				}
				double secs = (double)(now_ns() - t0) / 1e9;

				qsort(model, nm, 8, cmp_u64);
				double mlat = nm ? (double)model[nm / 2] : 1;
				double mg = (double)window * sizes[s] / mlat; /* bytes per ns = GB/s */

				if (mg > cap_gbps)
					mg = cap_gbps;
				printf("%-13s %6u %10.0f %12.2f %14.2f %7u\n", op_names[ops[o]], sizes[s], total / secs,
				       total * (double)sizes[s] / secs / 1e6, mg, errors);
				if (out)
					fprintf(out, "tput,%s,%u,%u,%u,%u,,,%.0f,%.0f,%.2f,%.2f\n", op_names[ops[o]], sizes[s],
						total, window, errors, mlat, total / secs, total * (double)sizes[s] / secs / 1e6, mg);
				failed |= errors != 0;
			}
		}
	}
	if (out)
		fclose(out);
	rmc_close(r);
	return failed;
}
