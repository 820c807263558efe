// SPDX-License-Identifier: MIT
/*
 * rmc-kv: a FaRM-style key-value store over the soNUMA RMC (the SABRes paper sec. 6, 7.2, 7.3;
 * docs/sonuma-workloads.md). Objects live on one node (`serve`, with writer threads that update
 * them under the odd/even version protocol: concurrent reads, exclusive writes), readers on
 * another (`read`) fetch random objects one-sidedly and verify every object they accept.
 *
 * Two layouts of an object of SIZE bytes (a multiple of 64, at a 64-byte aligned offset):
 *  - sabre:    [u64 version][u32 key][u32 len][u64 csum][payload ...], contiguous. Readers issue
 *              one SABRe straight into the application buffer (zero copy) and retry on abort.
 *  - baseline: FaRM's per-cache-line versions. Line 0 starts with the same 24-byte header; the
 *              last 8-byte word of every line holds 6 payload bytes and the line version (low
 *              16 bits of the object version). Writers store a line's last word first, then its
 *              other words. Readers issue a plain remote read into a staging buffer, check that
 *              the header version is even and every line version matches it, and copy the
 *              payload out line by line (the copy SABRes remove).
 * Writers (serve --writers W, pinned to vCPUs, CREW: writer w owns the keys = w mod W) prepare
 * the next value (payload and checksum) unlocked, then begin (CAS even v -> v+1), the stores
 * above, end (dmb ishst, store-release v+2).
 * Every accepted object is verified twice: the checksum, and payload == gen(key, version) (and,
 * for SABRes, that its version is the one the CQE reports). `torn` counts accepted objects that
 * fail: it must stay 0. `--unsafe` is the negative control: it accepts objects without the
 * consistency check (plain read, version even), so with writers `torn` becomes > 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "librmc.h"
#include "rackemu/insn_mark.h"
#include "tool.h"

#define HDR 24u
#define MAX_THREADS 8

static const char usage[] =
	"usage: rmc-kv serve --ctx N --layout sabre|baseline --size S [--objects K] [--writers W] [--seconds T]\n"
	"       rmc-kv read  --node D --ctx N --layout sabre|baseline --size S [--objects K] [--threads R]\n"
	"                    [--seconds T] [--nospec] [--unsafe] [--csv FILE]\n"
	"  serve: register context N (objects of S bytes: 128, 1024, 8192, any multiple of 64 up to 64K),\n"
	"         lay out K objects (default 100) and update them from W writer threads (default 0) for T\n"
	"         seconds (0: until killed); prints writer updates per second\n"
	"  read:  R threads (default 1, one QP each) read uniformly random objects of node D for T seconds\n"
	"         (default 5) and verify every accepted one; prints reads/s, aborts and retries per read,\n"
	"         torn objects (must be 0; exit 1 otherwise), wall and modeled latencies; --csv appends a\n"
	"         row. --nospec: SABRes without speculation. --unsafe: negative control, accept objects\n"
	"         without the consistency check (torn > 0 expected under writers)\n"
	"  --key K (both; a number or @FILE, default $RMC_KEY): the context's access key. serve registers\n"
	"         with it (none: a random one) and prints it; the reader registers or attaches its own\n"
	"         context N with it: the destination serves only requests that carry its key\n"
	"       rmc-kv local --layout sabre|baseline --size S [--objects K] [--threads R] [--seconds T]\n"
	"  local: R threads (default 1) look up uniformly random objects laid out in this process's own\n"
	"         memory (no RMC) for T seconds (default 5): the baseline checks and strips the line\n"
	"         versions, the sabre layout reads the version, copies the object, reads the version again\n"
	"  Readers and writers execute instruction-count marks around their software phases (hint\n"
	"         instructions, NOPs without the plugin; docs/insn-count.md) and pin themselves to vCPUs;\n"
	"         --insn-count (all three): also reset the plugin's counters when the threads start and\n"
	"         dump them when they stop (the plugin counts only between the two)\n"
	"  An option the command does not take (e.g. serve --threads) is refused; --help prints this.\n";

struct cfg {
	int serve, local, sabre, nospec, unsafe, marks;
	unsigned ctx, node, size, objects, writers, threads, seconds;
	const char *csv;
	uint64_t key; /* --key / $RMC_KEY: the context's access key (0: serve draws one) */
};

static struct cfg cf;
static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	return x ^ (x >> 33);
}

/* The payload of key k at version v: byte i is byte (i & 7) of gen_word(k, v, i >> 3). */
static uint64_t gen_word(uint64_t k, uint64_t v, uint64_t w)
{
	return mix(k * 0x100000001b3ull ^ v * 0x9e3779b97f4a7c15ull ^ w);
}

static void gen_payload(uint8_t *p, size_t n, uint64_t k, uint64_t v)
{
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t w = gen_word(k, v, i >> 3);

		memcpy(p + i, &w, 8);
	}
	if (i < n) {
		uint64_t w = gen_word(k, v, i >> 3);

		memcpy(p + i, &w, n - i);
	}
}

/* payload == gen(k, v)? */
static int payload_ok(const uint8_t *p, size_t n, uint64_t k, uint64_t v)
{
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		uint64_t w = gen_word(k, v, i >> 3), got;

		memcpy(&got, p + i, 8);
		if (got != w)
			return 0;
	}
	if (i < n) {
		uint64_t w = gen_word(k, v, i >> 3), got = 0;

		memcpy(&got, p + i, n - i);
		if ((got ^ w) & ((1ull << (8 * (n - i))) - 1))
			return 0;
	}
	return 1;
}

/* FNV-1a-style over 8-byte little-endian words (then the tail bytes), seeded by key and version */
static uint64_t csum(uint64_t k, uint64_t v, const uint8_t *p, size_t n)
{
	uint64_t h = mix(k ^ (v << 1)), w;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
	}
	for (; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* payload bytes an object of `size` carries */
static size_t payload_len(void)
{
	return cf.sabre ? cf.size - HDR : (cf.size / 64) * 62 - HDR;
}

/* Pin the calling thread to vCPU i mod #vCPUs: the instruction-count marks are per vCPU. */
static void pin_to_vcpu(unsigned i)
{
	cpu_set_t set;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	CPU_ZERO(&set);
	CPU_SET(i % (unsigned)(ncpu > 0 ? ncpu : 1), &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- writer side ---- */

struct writer {
	pthread_t t;
	unsigned id;
	uint8_t *seg;
	uint64_t updates;
	uint8_t *scratch;
};

/* The object's contents at version nv, header and payload as one stream, into `buf` (at least
 * cf.size + 64 bytes): the value a writer prepares before it locks the object. */
static void prepare_object(uint8_t *buf, unsigned key, uint64_t nv)
{
	size_t n = payload_len();
	uint32_t len = (uint32_t)n;
	uint8_t *pl = buf + HDR;

	gen_payload(pl, n, key, nv);
	uint64_t c = csum(key, nv, pl, n);

	memcpy(buf, &nv, 8);
	memcpy(buf + 8, &key, 4);
	memcpy(buf + 12, &len, 4);
	memcpy(buf + 16, &c, 8);
}

/* One update of the object at `o` under the odd/even protocol (the SABRes paper sec. 4.2): lock it, store
 * the value `buf` holds (prepared for version `v` + 2), unlock it at v + 2. Only the stores happen
 * under the lock, as in the paper's microbenchmark, whose writers write a predefined value (sec.
 * 7.2). CREW: the caller owns the object, so its version is still v; if it is not, the value is
 * prepared again for the version found (under the lock: correct, only slower). */
static void store_object(uint8_t *o, unsigned key, uint8_t *buf, uint64_t v)
{
	volatile uint64_t *ver = (volatile uint64_t *)o;
	uint64_t begun = rmc_obj_write_begin(ver), nv = begun + 2; /* now odd: readers back off */

	if (begun != v)
		prepare_object(buf, key, nv);
	if (cf.sabre) {
		/* contiguous: everything but the version word, which rmc_obj_write_end stores */
		memcpy(o + 8, buf + 8, cf.size - 8);
	} else {
		size_t lines = cf.size / 64;
		uint64_t lv = (uint64_t)(uint16_t)nv << 48; /* the line version: low 16 bits of nv */

		for (size_t l = 0; l < lines; l++) {
			/* the line: 62 bytes of the stream (little-endian words straight from the
			 * prepared value), then the line version */
			const uint8_t *src = buf + l * 62;
			uint64_t last = 0, x;

			memcpy(&last, src + 56, 6);
			/* the last word (6 data bytes + line version) first, then the others; never the
			 * object's version word (line 0, word 0): rmc_obj_write_end stores it */
			__atomic_store_n((uint64_t *)(o + l * 64 + 56), last | lv, __ATOMIC_RELAXED);
			__asm__ volatile("dmb ishst" ::: "memory");
			for (unsigned w = l ? 0 : 1; w < 7; w++) {
				memcpy(&x, src + 8 * w, 8);
				__atomic_store_n((uint64_t *)(o + l * 64 + 8 * w), x, __ATOMIC_RELAXED);
			}
		}
	}
	rmc_obj_write_end(ver, begun); /* dmb ishst, store-release v + 2 */
}

/* The object's current version: CREW, only the calling writer changes it. */
static uint64_t owned_version(const uint8_t *o)
{
	return __atomic_load_n((const uint64_t *)o, __ATOMIC_RELAXED);
}

/* One whole update (prepare, then store): lay_out's. */
static void write_object(uint8_t *o, unsigned key, uint8_t *buf)
{
	uint64_t v = owned_version(o);

	prepare_object(buf, key, v + 2);
	store_object(o, key, buf, v);
}

/* Lay the store out at `base`: every object at version 2, consistent (serve and local alike). */
static void lay_out(uint8_t *base)
{
	uint8_t *scratch = malloc(cf.size + 64);

	if (!scratch)
		die("out of memory");
	for (unsigned k = 0; k < cf.objects; k++)
		write_object(base + (size_t)k * cf.size, k, scratch);
	free(scratch);
}

/* A measurement starts: SIGINT/SIGTERM stop it, and with --insn-count the plugin's counters are
 * reset (docs/insn-count.md: it counts from here to the DUMP mark). Returns the start time. */
static uint64_t measure_start(void)
{
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (cf.marks)
		RK_MARK_RESET();
	return now_ns();
}

/* Run until a signal or `seconds` (0: no limit) after t0, then tell the threads to stop. */
static void run_until(uint64_t t0, unsigned seconds, unsigned poll_us)
{
	while (!stop && (!seconds || now_ns() - t0 < (uint64_t)seconds * 1000000000ull))
		usleep(poll_us);
	stop = 1;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	pin_to_vcpu(w->id);
	while (!stop) {
		for (unsigned k = w->id; k < cf.objects && !stop; k += cf.writers) {
			uint8_t *o = w->seg + (size_t)k * cf.size;
			uint64_t v = owned_version(o);

			RK_MARK(RK_PH_KV_PREPARE); /* the value, outside the lock */
			prepare_object(w->scratch, k, v + 2);
			RK_MARK(RK_PH_KV_WRITE); /* the update: lock, stores, unlock */
			store_object(o, k, w->scratch, v);
			RK_MARK(RK_PH_NONE);
			w->updates++;
		}
	}
	return NULL;
}

static int do_serve(void)
{
	struct rmc_layout lay = { 0 };
	struct writer ws[MAX_THREADS];
	rmc_t *r;
	rmc_ctx_t *c;
	uint8_t *seg;
	uint64_t t0, total = 0;
	int e = rmc_open(&r);

	if (e) {
		fprintf(stderr, "rmc-kv: %s: %s\n", RMC_DEV_PATH, strerror(-e));
		return 1;
	}
	e = rmc_ctx_register_key(r, cf.ctx, (size_t)cf.objects * cf.size,
				 CTX_PERM_READ | (cf.sabre ? CTX_PERM_SABRE : 0), ~0ull, cf.sabre ? &lay : NULL, cf.key, &c);
	if (e) {
		fprintf(stderr, "rmc-kv: register context %u (%u objects of %u bytes): %s\n", cf.ctx, cf.objects, cf.size,
			strerror(-e));
		return 1;
	}
	seg = rmc_ctx_base(c);
	lay_out(seg);
	printf("serving ctx=%u layout=%s objects=%u size=%u payload=%zu writers=%u key=0x%llx\n", cf.ctx,
	       cf.sabre ? "sabre" : "baseline", cf.objects, cf.size, payload_len(), cf.writers,
	       (unsigned long long)rmc_ctx_key(c));
	fflush(stdout);
	memset(ws, 0, sizeof(ws));
	t0 = measure_start(); /* the writers' updates are counted from here */
	for (unsigned i = 0; i < cf.writers; i++) {
		ws[i].id = i;
		ws[i].seg = seg;
		ws[i].scratch = malloc(cf.size + 64);
		pthread_create(&ws[i].t, NULL, writer_main, &ws[i]);
	}
	run_until(t0, cf.seconds, 100000);
	for (unsigned i = 0; i < cf.writers; i++) {
		pthread_join(ws[i].t, NULL);
		total += ws[i].updates;
	}
	if (cf.marks)
		RK_MARK_DUMP();
	printf("writers=%u updates=%llu updates_per_s=%.1f\n", cf.writers, (unsigned long long)total,
	       total / ((double)(now_ns() - t0) / 1e9));
	rmc_close(r);
	return 0;
}

/* ---- reader side ---- */

struct reader {
	pthread_t t;
	unsigned id;
	rmc_t *r;
	rmc_ctx_t *c;
	rmc_qp_t *q;
	uint64_t reads, aborts, retries, torn, verr, errors, max_attempts;
	uint64_t ab_info[4]; /* aborts by RMC_INFO_* (LOCKED, WINDOW, VALIDATE) */
	uint64_t *wall, *model, *op; /* samples: per request (wall, modeled), per accepted read */
	uint64_t sink;                /* lookups whose header matched (use_object) */
	size_t nsamples, nops, cap;
	char err[160];
};

/* An accepted object: key and length right, version even, checksum and payload those of gen(key,
 * version). 1 if it passes. */
static int verify(unsigned key, const uint8_t *hdr_src, const uint8_t *pl, uint64_t *version)
{
	uint64_t v, c;
	uint32_t k, n;
	size_t len = payload_len();

	memcpy(&v, hdr_src, 8);
	memcpy(&k, hdr_src + 8, 4);
	memcpy(&n, hdr_src + 12, 4);
	memcpy(&c, hdr_src + 16, 8);
	*version = v;
	return k == key && n == len && !(v & 1) && v >= 2 && c == csum(key, v, pl, len) && payload_ok(pl, len, key, v);
}

/* The baseline's atomicity check on a copy of the object: its header version is even and every
 * line's version equals the version's low 16 bits (--unsafe: the header version only). */
static int baseline_consistent(const uint8_t *obj, size_t lines)
{
	uint64_t v;
	uint16_t lv;

	memcpy(&v, obj, 8);
	if (v & 1)
		return 0;
	for (size_t l = 0; !cf.unsafe && l < lines; l++) {
		memcpy(&lv, obj + l * 64 + 62, 2);
		if (lv != (uint16_t)v)
			return 0;
	}
	return 1;
}

/* Strip the line versions: the 62 data bytes of every line of `obj` go to `dst` back to back. */
static void baseline_strip(uint8_t *dst, const uint8_t *obj, size_t lines)
{
	for (size_t l = 0; l < lines; l++)
		memcpy(dst + l * 62, obj + l * 64, 62);
}

/* The lookup's own work on the clean object, the same for both layouts: the header must name the
 * key looked up and the layout's length. The value is then the caller's (the store hands it over
 * in the application buffer); reading it is the same work for both layouts and is not part of the
 * store's cost. Returns 1 if the header is the key's. */
static uint64_t use_object(const uint8_t *hdr, unsigned key)
{
	uint32_t k, len;

	memcpy(&k, hdr + 8, 4);
	memcpy(&len, hdr + 12, 4);
	return k == key && len == payload_len();
}

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	uint8_t *seg = rmc_ctx_base(rd->c);
	uint8_t *app = seg + (size_t)rd->id * 2 * cf.size; /* sabre: the application buffer */
	uint8_t *staging = app + cf.size;                  /* baseline: the staging buffer */
	uint8_t *copy = malloc(cf.size), hdr[HDR];         /* baseline: the application buffer */
	unsigned seed = 12345 + rd->id * 7919 + rmc_node_id(rd->r) * 104729;
	size_t lines = cf.size / 64;

	pin_to_vcpu(rd->id);

	while (!stop) {
		unsigned key = (unsigned)(rand_r(&seed) % cf.objects);
		uint64_t roff = (uint64_t)key * cf.size, v, attempts = 0, t_start = now_ns();
		struct rmc_cqe cqe;
		int st, accepted = 0, ok = 0;

		while (!stop) {
			uint64_t t0 = now_ns();
			int n;

			memset(&cqe, 0, sizeof(cqe));
			attempts++;
			RK_MARK(RK_PH_KV_ISSUE);
			if (cf.sabre && !cf.unsafe)
				st = rmc_post_sabre(rd->q, cf.node, roff, (uint64_t)(app - seg), cf.size, 0,
						    cf.nospec ? RMC_POST_NOSPEC : 0);
			else
				st = rmc_post_read(rd->q, cf.node, roff, (uint64_t)(staging - seg), cf.size, 0, 0);
			RK_MARK(RK_PH_NONE);
			if (!st) { /* the wait (a spin, then a sleep) is not software cost: unmarked */
				n = rmc_wait(rd->q, &cqe, 1, 10000);
				st = n < 0 ? n : n == 0 ? -ETIMEDOUT : (int)cqe.status;
			}
			uint64_t t1 = now_ns();

			if (st < 0 || (st != RMC_ST_OK && st != RMC_ST_SABRE_ABORT)) {
				snprintf(rd->err, sizeof(rd->err), "key %u: %s", key,
					 st < 0 ? strerror(-st) : rmc_status_str((unsigned)st, cqe.info));
				rd->errors++;
				stop = 1;
				break;
			}
			if (rd->nsamples < rd->cap) {
				rd->wall[rd->nsamples] = t1 - t0;
				rd->model[rd->nsamples++] = cqe.modeled_ns;
			}
			if (cf.sabre && !cf.unsafe) {
				/* the atomicity check of a SABRe is the completion's status; the object is
				 * in the application buffer as it arrived (zero copy) */
				RK_MARK(RK_PH_KV_CHECK);
				accepted = st == RMC_ST_OK;
				RK_MARK(RK_PH_NONE);
				if (accepted)
					break;
				rd->aborts++;
				rd->ab_info[cqe.info < 4 ? cqe.info : 0]++;
				rd->retries++;
				continue;
			}
			if (cf.sabre) {
				/* --unsafe: a plain read of the SABRe layout, accepted if the version is even */
				memcpy(app, staging, cf.size);
				memcpy(&v, app, 8);
				if (v & 1) {
					rd->retries++;
					continue;
				}
				accepted = 1;
				break;
			}
			/* baseline: consistent only if the header version is even and every line agrees */
			RK_MARK(RK_PH_KV_CHECK);
			int consistent = baseline_consistent(staging, lines);
			RK_MARK(RK_PH_NONE);
			if (!consistent) {
				rd->retries++;
				continue;
			}
			/* strip the line versions: the 62 data bytes of every line into the application
			 * buffer (the copy SABRes remove) */
			RK_MARK(RK_PH_KV_COPY);
			baseline_strip(copy, staging, lines);
			RK_MARK(RK_PH_NONE);
			accepted = 1;
			break;
		}
		if (!accepted)
			break;
		/* the lookup's own work on the clean object, the same code for both layouts */
		RK_MARK(RK_PH_KV_USE);
		rd->sink += use_object(cf.sabre ? app : copy, key);
		RK_MARK(RK_PH_NONE);
		if (rd->nops < rd->cap)
			rd->op[rd->nops++] = now_ns() - t_start;
		if (cf.sabre) {
			ok = verify(key, app, app + HDR, &v);
			if (ok && !cf.unsafe && v != cqe.value) {
				/* consistent, but not the version the RMC says it validated */
				if (!rd->verr)
					snprintf(rd->err, sizeof(rd->err), "key %u: object version %llu, CQE version %llu",
						 key, (unsigned long long)v, (unsigned long long)cqe.value);
				rd->verr++;
			}
		} else {
			memcpy(hdr, copy, HDR);
			ok = verify(key, hdr, copy + HDR, &v);
		}
		if (!ok) {
			if (!rd->torn)
				fprintf(stderr, "rmc-kv: TORN: reader %u accepted key %u (version %llu) and it fails "
						"verification\n", rd->id, key, (unsigned long long)v);
			rd->torn++;
		}
		rd->reads++;
		if (attempts > rd->max_attempts)
			rd->max_attempts = attempts;
	}
	free(copy);
	return NULL;
}

static int do_read(void)
{
	struct reader rs[MAX_THREADS];
	rmc_t *r;
	rmc_ctx_t *c;
	uint64_t reads = 0, aborts = 0, retries = 0, torn = 0, verr = 0, errors = 0, maxat = 0, *wall, *model, *opl;
	uint64_t abi[4] = { 0 };
	size_t ns = 0, no = 0, cap = 200000;
	int e = rmc_open(&r);
	double secs;
	uint64_t t0;

	if (e) {
		fprintf(stderr, "rmc-kv: %s: %s\n", RMC_DEV_PATH, strerror(-e));
		return 1;
	}
	e = rmc_ctx_attach_key(r, cf.ctx, cf.key, &c);
	if (e == -ENOENT)
		e = rmc_ctx_register_key(r, cf.ctx, (size_t)cf.threads * 2 * cf.size, CTX_PERM_READ, ~0ull, NULL, cf.key,
					 &c);
	if (e || rmc_ctx_size(c) < (size_t)cf.threads * 2 * cf.size) {
		fprintf(stderr, "rmc-kv: local context %u: %s\n", cf.ctx, e ? strerror(-e) : "too small");
		return 1;
	}
	memset(rs, 0, sizeof(rs));
	for (unsigned i = 0; i < cf.threads; i++) {
		rs[i].id = i;
		rs[i].r = r;
		rs[i].c = c;
		rs[i].cap = cap;
		rs[i].wall = calloc(cap, 8);
		rs[i].model = calloc(cap, 8);
		rs[i].op = calloc(cap, 8);
		if (!rs[i].wall || !rs[i].model || !rs[i].op)
			die("out of memory");
		e = rmc_qp_create(r, c, 4, RMC_QP_IRQ, &rs[i].q); /* one QP per thread */
		if (e) {
			fprintf(stderr, "rmc-kv: queue pair: %s\n", strerror(-e));
			return 1;
		}
	}
	t0 = measure_start(); /* the readers' phases are counted from here */
	for (unsigned i = 0; i < cf.threads; i++)
		pthread_create(&rs[i].t, NULL, reader_main, &rs[i]);
	run_until(t0, cf.seconds, 20000);
	for (unsigned i = 0; i < cf.threads; i++)
		pthread_join(rs[i].t, NULL);
	secs = (double)(now_ns() - t0) / 1e9;
	if (cf.marks)
		RK_MARK_DUMP();
	wall = calloc(cf.threads * cap, 8);
	model = calloc(cf.threads * cap, 8);
	opl = calloc(cf.threads * cap, 8);
	if (!wall || !model || !opl)
		die("out of memory");
	for (unsigned i = 0; i < cf.threads; i++) {
		reads += rs[i].reads;
		aborts += rs[i].aborts;
		retries += rs[i].retries;
		torn += rs[i].torn;
		verr += rs[i].verr;
		for (unsigned k = 0; k < 4; k++)
			abi[k] += rs[i].ab_info[k];
		errors += rs[i].errors;
		maxat = rs[i].max_attempts > maxat ? rs[i].max_attempts : maxat;
		memcpy(wall + ns, rs[i].wall, rs[i].nsamples * 8);
		memcpy(model + ns, rs[i].model, rs[i].nsamples * 8);
		ns += rs[i].nsamples;
		memcpy(opl + no, rs[i].op, rs[i].nops * 8);
		no += rs[i].nops;
		if (rs[i].errors || rs[i].verr)
			fprintf(stderr, "rmc-kv: reader %u: %s\n", i, rs[i].err);
	}
	qsort(wall, ns, 8, cmp_u64);
	qsort(model, ns, 8, cmp_u64);
	qsort(opl, no, 8, cmp_u64);
	{
		double rps = reads / secs, ab = reads ? (double)aborts / reads : 0, rt = reads ? (double)retries / reads : 0;
		double wmed = ns ? wall[ns / 2] / 1000.0 : 0, wp99 = ns ? wall[ns * 99 / 100] / 1000.0 : 0;
		double omed = no ? opl[no / 2] / 1000.0 : 0;
		uint64_t mmed = ns ? model[ns / 2] : 0, mp99 = ns ? model[ns * 99 / 100] : 0;
		const char *lay = cf.unsafe ? (cf.sabre ? "sabre-unsafe" : "baseline-unsafe")
					    : cf.sabre ? (cf.nospec ? "sabre-nospec" : "sabre") : "baseline";

		printf("%-13s %6s %7s %8s %10s %10s %10s %6s %12s %12s %12s\n", "layout", "size", "threads", "reads",
		       "reads/s", "aborts/rd", "retries/rd", "torn", "wall_med_us", "wall_p99_us", "model_med_ns");
		printf("%-13s %6u %7u %8llu %10.1f %10.4f %10.4f %6llu %12.1f %12.1f %12llu\n", lay, cf.size, cf.threads,
		       (unsigned long long)reads, rps, ab, rt, (unsigned long long)torn, wmed, wp99,
		       (unsigned long long)mmed);
		printf("layout=%s size=%u objects=%u threads=%u node=%u seconds=%.2f reads=%llu reads_per_s=%.1f "
		       "aborts=%llu aborts_locked=%llu aborts_window=%llu aborts_validate=%llu retries=%llu aborts_per_read=%.4f retries_per_read=%.4f max_attempts=%llu torn=%llu "
		       "version_mismatch=%llu errors=%llu wall_med_us=%.1f wall_p99_us=%.1f read_med_us=%.1f "
		       "model_med_ns=%llu model_p99_ns=%llu\n",
		       lay, cf.size, cf.objects, cf.threads, rmc_node_id(r), secs, (unsigned long long)reads, rps,
		       (unsigned long long)aborts, (unsigned long long)abi[RMC_INFO_LOCKED],
		       (unsigned long long)abi[RMC_INFO_WINDOW], (unsigned long long)abi[RMC_INFO_VALIDATE],
		       (unsigned long long)retries, ab, rt, (unsigned long long)maxat,
		       (unsigned long long)torn, (unsigned long long)verr, (unsigned long long)errors, wmed, wp99, omed,
		       (unsigned long long)mmed, (unsigned long long)mp99);
		if (torn) {
			printf("TORN OBJECTS ACCEPTED: %llu\n", (unsigned long long)torn);
			fprintf(stderr, "rmc-kv: TORN OBJECTS ACCEPTED: %llu (of %llu reads)\n", (unsigned long long)torn,
				(unsigned long long)reads);
		}
		if (cf.csv) {
			FILE *f = fopen(cf.csv, "a");

			if (f) {
				if (ftell(f) == 0)
					fprintf(f, "layout,size,objects,threads,node,seconds,reads,reads_per_s,aborts,aborts_locked,"
						   "aborts_window,aborts_validate,retries,"
						   "aborts_per_read,retries_per_read,max_attempts,torn,version_mismatch,errors,"
						   "wall_med_us,wall_p99_us,read_med_us,model_med_ns,model_p99_ns\n");
				fprintf(f, "%s,%u,%u,%u,%u,%.2f,%llu,%.1f,%llu,%llu,%llu,%llu,%llu,%.4f,%.4f,%llu,%llu,%llu,%llu,%.1f,%.1f,%.1f,"
					   "%llu,%llu\n",
					lay, cf.size, cf.objects, cf.threads, rmc_node_id(r), secs, (unsigned long long)reads,
					rps, (unsigned long long)aborts, (unsigned long long)abi[RMC_INFO_LOCKED],
					(unsigned long long)abi[RMC_INFO_WINDOW], (unsigned long long)abi[RMC_INFO_VALIDATE],
					(unsigned long long)retries, ab, rt,
					(unsigned long long)maxat, (unsigned long long)torn, (unsigned long long)verr,
					(unsigned long long)errors, wmed, wp99, omed, (unsigned long long)mmed,
					(unsigned long long)mp99);
				fclose(f);
			} else {
				fprintf(stderr, "rmc-kv: %s: %s\n", cf.csv, strerror(errno));
			}
		}
	}
	rmc_close(r);
	return torn || verr || errors ? 1 : 0;
}

/* ---- local reads (rmc-kv local; the SABRes paper sec. 7.3, Fig. 10) ---- */

struct local_reader {
	pthread_t t;
	unsigned id;
	const uint8_t *objs;
	uint64_t reads, retries, torn, sink;
};

/* A read-only lookup kernel on objects in this process's memory: the baseline checks the line
 * versions and strips them; the SABRe layout (no line versions) reads the version, copies the
 * object and reads the version again. Both then do the lookup's work (use_object). */
static void *local_main(void *arg)
{
	struct local_reader *lr = arg;
	uint8_t *app = aligned_alloc(64, cf.size);
	unsigned seed = 777 + lr->id * 7919;
	size_t lines = cf.size / 64;

	if (!app)
		return NULL;
	pin_to_vcpu(lr->id);
	while (!stop) {
		unsigned key = (unsigned)(rand_r(&seed) % cf.objects);
		const uint8_t *o = lr->objs + (size_t)key * cf.size;
		uint64_t v, v2;
		int ok;

		if (cf.sabre) {
			const uint64_t *ver = (const uint64_t *)o;

			RK_MARK(RK_PH_LOCAL_CHECK);
			v = __atomic_load_n(ver, __ATOMIC_ACQUIRE);
			ok = !(v & 1);
			RK_MARK(RK_PH_LOCAL_COPY);
			memcpy(app, o, cf.size);
			RK_MARK(RK_PH_LOCAL_CHECK);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			v2 = __atomic_load_n(ver, __ATOMIC_RELAXED);
			ok = ok && v2 == v;
			RK_MARK(RK_PH_NONE);
		} else {
			RK_MARK(RK_PH_LOCAL_CHECK);
			ok = baseline_consistent(o, lines);
			RK_MARK(RK_PH_LOCAL_COPY);
			baseline_strip(app, o, lines);
			RK_MARK(RK_PH_NONE);
		}
		if (!ok) {
			lr->retries++;
			continue;
		}
		RK_MARK(RK_PH_LOCAL_USE);
		lr->sink += use_object(app, key);
		RK_MARK(RK_PH_NONE);
		if (!verify(key, app, app + HDR, &v)) {
			if (!lr->torn)
				fprintf(stderr, "rmc-kv: TORN: local reader %u, key %u\n", lr->id, key);
			lr->torn++;
		}
		lr->reads++;
	}
	free(app);
	return NULL;
}

static int do_local(void)
{
	struct local_reader rs[MAX_THREADS];
	uint8_t *objs = aligned_alloc(64, (size_t)cf.objects * cf.size);
	uint64_t reads = 0, retries = 0, torn = 0, t0;
	double secs;

	if (!objs)
		die("out of memory (%u objects of %u bytes)", cf.objects, cf.size);
	memset(objs, 0, (size_t)cf.objects * cf.size);
	lay_out(objs);
	memset(rs, 0, sizeof(rs));
	t0 = measure_start(); /* the readers' phases are counted from here */
	for (unsigned i = 0; i < cf.threads; i++) {
		rs[i].id = i;
		rs[i].objs = objs;
		pthread_create(&rs[i].t, NULL, local_main, &rs[i]);
	}
	run_until(t0, cf.seconds, 20000);
	for (unsigned i = 0; i < cf.threads; i++) {
		pthread_join(rs[i].t, NULL);
		reads += rs[i].reads;
		retries += rs[i].retries;
		torn += rs[i].torn;
	}
	secs = (double)(now_ns() - t0) / 1e9;
	if (cf.marks)
		RK_MARK_DUMP();
	printf("mode=local layout=%s size=%u objects=%u threads=%u seconds=%.2f reads=%llu reads_per_s=%.1f "
	       "retries=%llu torn=%llu\n",
	       cf.sabre ? "sabre" : "baseline", cf.size, cf.objects, cf.threads, secs, (unsigned long long)reads,
	       reads / secs, (unsigned long long)retries, (unsigned long long)torn);
	free(objs);
	return torn ? 1 : 0;
}

/* Every option, by its getopt value; SERVE_OPTS and READ_OPTS say which ones each command takes. */
static const struct option long_opts[] = {
	{ "ctx", 1, 0, 'c' }, { "node", 1, 0, 'n' }, { "size", 1, 0, 'z' }, { "objects", 1, 0, 'o' },
	{ "writers", 1, 0, 'w' }, { "threads", 1, 0, 't' }, { "seconds", 1, 0, 'S' }, { "csv", 1, 0, 'C' },
	{ "key", 1, 0, 'k' }, { "layout", 1, 0, 'l' }, { "nospec", 0, 0, 'N' }, { "unsafe", 0, 0, 'U' },
	{ "insn-count", 0, 0, 'I' }, { "help", 0, 0, 'h' }, { 0 }
};
#define SERVE_OPTS "czowSklI"
#define READ_OPTS "nczotSCklNUI"
#define LOCAL_OPTS "zotSlI"

int main(int argc, char **argv)
{
	int opt, li;

	tool_prog = "rmc-kv";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "serve") && strcmp(argv[1], "read") && strcmp(argv[1], "local"))
		die("unknown command '%s' (rmc-kv --help)", argv[1]);
	cf.serve = !strcmp(argv[1], "serve");
	cf.local = !strcmp(argv[1], "local");
	cf.objects = 100;
	cf.threads = 1;
	cf.seconds = cf.serve ? 0 : 5;
	cf.ctx = 16; /* none */
	cf.sabre = -1;
	if (rmc_key_parse(NULL, &cf.key))
		die("RMC_KEY: not a number");
	opterr = 0;
	while ((opt = getopt_long(argc - 1, argv + 1, ":", long_opts, &li)) != -1) {
		if (opt == ':' || opt == '?')
			bad_option(opt, argv + 1, "rmc-kv --help");
		if (opt == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (!strchr(cf.serve ? SERVE_OPTS : cf.local ? LOCAL_OPTS : READ_OPTS, opt))
			die("--%s does not apply to `rmc-kv %s` (rmc-kv --help)", long_opts[li].name, argv[1]);
		switch (opt) {
		case 'N': cf.nospec = 1; break;
		case 'U': cf.unsafe = 1; break;
		case 'I': cf.marks = 1; break;
		case 'c': cf.ctx = (unsigned)num(optarg, "--ctx", RMC_CTX_COUNT - 1); break;
		case 'n': cf.node = (unsigned)num(optarg, "--node", 63); break;
		case 'z': cf.size = (unsigned)num(optarg, "--size", RMC_SABRE_MAX); break;
		case 'o': cf.objects = (unsigned)num(optarg, "--objects", 1000000); break;
		case 'w': cf.writers = (unsigned)num(optarg, "--writers", MAX_THREADS); break;
		case 't': cf.threads = (unsigned)num(optarg, "--threads", MAX_THREADS); break;
		case 'S': cf.seconds = (unsigned)num(optarg, "--seconds", 86400); break;
		case 'C': cf.csv = optarg; break;
		case 'k':
			if (rmc_key_parse(optarg, &cf.key))
				die("--key '%s': a number, or @FILE holding one", optarg);
			break;
		case 'l':
			if (!strcmp(optarg, "sabre"))
				cf.sabre = 1;
			else if (!strcmp(optarg, "baseline"))
				cf.sabre = 0;
			else
				die("--layout sabre|baseline");
			break;
		}
	}
	if (optind < argc - 1)
		die("unexpected argument '%s' (rmc-kv --help)", argv[1 + optind]);
	if (cf.local && (cf.sabre < 0 || !cf.size))
		die("--layout and --size are required");
	if (!cf.local && (cf.ctx >= RMC_CTX_COUNT || cf.sabre < 0 || !cf.size))
		die("--ctx, --layout and --size are required");
	if (cf.size % 64 || cf.size < 128)
		die("--size %u: a multiple of 64, at least 128", cf.size);
	if (!cf.objects || cf.threads < 1)
		die("--objects and --threads must be at least 1");
	if (cf.nospec && !cf.sabre)
		die("--nospec applies to the sabre layout");
	if (cf.unsafe && cf.nospec)
		die("--unsafe is a reader option, without --nospec");
	return cf.serve ? do_serve() : cf.local ? do_local() : do_read();
}
