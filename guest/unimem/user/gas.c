// SPDX-License-Identifier: MIT
/*
 * gas: loads and stores through the Unimem global address space window (/dev/unimem_gas).
 * `gas --help` lists the subcommands; output is key=value lines; exit 0 on success, 1 when an
 * access failed or data did not match, 2 for a usage error.
 *
 * Data pattern: byte i of a region filled with seed S is pat(S, i) below, so a check tells
 * "not written" (zeroes, or another seed's bytes) from "written at the wrong place".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rackemu/unimem_gas_uapi.h"
#include "rackemu/unimem_regs.h"
#include "tool.h"




static uint8_t pat(unsigned seed, uint64_t i)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ (seed * 0x9e3779b9u);

	return (uint8_t)((x >> 13) ^ (x >> 24) ^ (i >> 8));
}

static int gas_fd = -1;
static struct unimem_gas_info info;

static void gas_open(void)
{
	gas_fd = open(UNIMEM_GAS_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (gas_fd < 0)
		die("cannot open %s: %s (is unimem_gas.ko loaded? root only)", UNIMEM_GAS_DEV_PATH,
		    strerror(errno));
	if (ioctl(gas_fd, UNIMEM_GAS_IOC_INFO, &info) < 0)
		die("UNIMEM_GAS_IOC_INFO: %s", strerror(errno));
}

/* Map [gaddr, gaddr + len) of the window; returns the address of gaddr. */
static volatile uint8_t *gas_map(uint64_t gaddr, uint64_t len)
{
	uint64_t page = gaddr & ~4095ull, span = ((gaddr + len + 4095) & ~4095ull) - page;
	void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, gas_fd, (off_t)page);

	if (p == MAP_FAILED)
		die("mmap of global address 0x%llx + %llu: %s", (unsigned long long)gaddr,
		    (unsigned long long)len, strerror(errno));
	return (volatile uint8_t *)p + (gaddr - page);
}

/* A bus error (SIGBUS) from a window access is a result, not a crash. */
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;
static void on_sigbus(int sig)
{
	(void)sig;
	if (bus_armed)
		siglongjmp(bus_jmp, 1);
	_exit(3);
}

static void catch_bus_errors(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigbus;
	sa.sa_flags = SA_NODEFER; /* left by siglongjmp: SIGBUS must not stay blocked */
	sigaction(SIGBUS, &sa, NULL);
}

static void access_one(int w, volatile uint8_t *p, uint8_t *buf, int store);

/* One access; -1 if it ended in a bus error. */
static int guarded(int w, volatile uint8_t *p, uint8_t *buf, int store)
{
	if (sigsetjmp(bus_jmp, 0)) {
		bus_armed = 0;
		return -1;
	}
	bus_armed = 1;
	access_one(w, p, buf, store);
	bus_armed = 0;
	return 0;
}

/* Width codes: 1, 2, 4, 8 plain loads/stores; 16 = ldp/stp of two x registers; 17 = ld1/st1
 * of one q register; 64 = ld1/st1 of four q registers; 9 = 8 bytes at an odd address. */
static const int all_widths[] = { 1, 2, 4, 8, 16, 17, 64, 9 };

static const char *width_name(int w)
{
	switch (w) {
	case 1: return "ldrb";
	case 2: return "ldrh";
	case 4: return "ldr_w";
	case 8: return "ldr_x";
	case 16: return "ldp_x";
	case 17: return "ld1_q";
	case 64: return "ld1_4q";
	case 9: return "ldr_x_unaligned";
	default: return "?";
	}
}

static unsigned width_bytes(int w)
{
	return w == 17 ? 16 : w == 9 ? 8 : (unsigned)w;
}

/* One access of width w at p: copy between p and buf. */
static void access_one(int w, volatile uint8_t *p, uint8_t *buf, int store)
{
	uint64_t a, b;

	switch (w) {
	case 1:
		if (store) *(volatile uint8_t *)p = buf[0]; else buf[0] = *(volatile uint8_t *)p;
		break;
	case 2: {
		uint16_t v;

		if (store) { memcpy(&v, buf, 2); *(volatile uint16_t *)p = v; }
		else { v = *(volatile uint16_t *)p; memcpy(buf, &v, 2); }
		break;
	}
	case 4: {
		uint32_t v;

		if (store) { memcpy(&v, buf, 4); *(volatile uint32_t *)p = v; }
		else { v = *(volatile uint32_t *)p; memcpy(buf, &v, 4); }
		break;
	}
	case 8:
	case 9:
		if (store) { memcpy(&a, buf, 8); *(volatile uint64_t *)p = a; }
		else { a = *(volatile uint64_t *)p; memcpy(buf, &a, 8); }
		break;
	case 16:
		if (store) {
			memcpy(&a, buf, 8);
			memcpy(&b, buf + 8, 8);
			asm volatile("stp %0, %1, [%2]" : : "r"(a), "r"(b), "r"(p) : "memory");
		} else {
			asm volatile("ldp %0, %1, [%2]" : "=r"(a), "=r"(b) : "r"(p) : "memory");
			memcpy(buf, &a, 8);
			memcpy(buf + 8, &b, 8);
		}
		break;
	case 17:
		if (store)
			asm volatile("ld1 {v0.16b}, [%1]\n\tst1 {v0.16b}, [%0]" : : "r"(p), "r"(buf) : "v0", "memory");
		else
			asm volatile("ld1 {v0.16b}, [%1]\n\tst1 {v0.16b}, [%0]" : : "r"(buf), "r"(p) : "v0", "memory");
		break;
	case 64:
		if (store)
			asm volatile("ld1 {v0.16b-v3.16b}, [%1]\n\tst1 {v0.16b-v3.16b}, [%0]"
				     : : "r"(p), "r"(buf) : "v0", "v1", "v2", "v3", "memory");
		else
			asm volatile("ld1 {v0.16b-v3.16b}, [%1]\n\tst1 {v0.16b-v3.16b}, [%0]"
				     : : "r"(buf), "r"(p) : "v0", "v1", "v2", "v3", "memory");
		break;
	}
}

static double now_us(void);

struct region {
	uint64_t gaddr, len;
	unsigned seed;
	uint64_t poff; /* pattern index of the region's first byte */
};

static void region_opts(int argc, char **argv, struct region *r, int *widths, int *nwidths, const char *usage)
{
	static const struct option opts[] = {
		{ "gaddr", 1, 0, 'g' }, { "node", 1, 0, 'n' }, { "addr", 1, 0, 'a' }, { "len", 1, 0, 'l' },
		{ "seed", 1, 0, 's' }, { "width", 1, 0, 'w' }, { "pattern-offset", 1, 0, 'P' },
		{ "help", 0, 0, 'h' }, { 0 } };
	long node = -1;
	uint64_t addr = 0;
	int have_g = 0, have_a = 0, o;

	r->len = 4096;
	r->seed = 1;
	*nwidths = 0;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'g': r->gaddr = num(optarg, "--gaddr", UINT64_MAX); have_g = 1; break;
		case 'n': node = (long)num(optarg, "--node", 63); break;
		case 'a': addr = num(optarg, "--addr", UINT64_MAX); have_a = 1; break;
		case 'l': r->len = num(optarg, "--len", UINT64_MAX); break;
		case 's': r->seed = (unsigned)num(optarg, "--seed", UINT32_MAX); break;
		case 'P': r->poff = num(optarg, "--pattern-offset", UINT64_MAX); break;
		case 'w':
			if (!strcmp(optarg, "all")) {
				*nwidths = 0;
				break;
			}
			widths[(*nwidths)++ % 8] = (int)num(optarg, "--width", 64);
			break;
		case 'h': fputs(usage, stdout); exit(0);
		default: exit(2);
		}
	}
	if (!have_g && !(have_a && node >= 0))
		die("--gaddr G, or --node N --addr A, is required; see --help");
	if (!have_g)
		r->gaddr = UNIMEM_GADDR(node, addr);
	if (!r->len || r->len > (64u << 20))
		die("--len must be 1 .. 64M");
	if (*nwidths == 0) {
		memcpy(widths, all_widths, sizeof(all_widths));
		*nwidths = (int)(sizeof(all_widths) / sizeof(all_widths[0]));
	}
	for (int i = 0; i < *nwidths; i++)
		if (!strcmp(width_name(widths[i]), "?"))
			die("--width %d: one of 1 2 4 8 9 16 17 64 or all", widths[i]);
}

/* Access bytes [lo, hi) of the region with width w (a tail shorter than w byte by byte; width 9
 * starts one byte in, so that every 8-byte access is unaligned). Loads compare with the pattern. */
static int walk(const struct region *r, volatile uint8_t *p, int w, int store, uint64_t lo, uint64_t hi,
		uint64_t *mismatches, uint64_t *first_bad)
{
	unsigned n = width_bytes(w);
	uint64_t i = lo;
	uint8_t buf[64];

	while (i < hi) {
		unsigned k = (w == 9 && i == lo) || hi - i < n ? 1 : n;

		if (store) {
			for (unsigned j = 0; j < k; j++)
				buf[j] = pat(r->seed, r->poff + i + j);
			if (guarded(k == 1 ? 1 : w, p + i, buf, 1))
				return -1;
		} else {
			if (guarded(k == 1 ? 1 : w, p + i, buf, 0))
				return -1;
			for (unsigned j = 0; j < k; j++)
				if (buf[j] != pat(r->seed, r->poff + i + j)) {
					if (!*mismatches)
						*first_bad = i + j;
					(*mismatches)++;
				}
		}
		i += k;
	}
	return 0;
}

static const char check_usage[] =
	"usage: gas check (--gaddr G | --node N --addr A) [--len L] [--seed S] [--pattern-offset K]\n"
	"                 [--width W|all]...\n"
	"Load the region through the window with each access width (default all: ldrb ldrh ldr_w\n"
	"ldr_x ldp_x ld1_q ld1_4q ldr_x_unaligned) and compare with the pattern of seed S. One line\n"
	"per width: width=NAME ok=0|1 mismatches=N first_bad=OFFSET bus_error=0|1 elapsed_us=T mb_per_s=B.\n"
	"Byte i of the region\n"
	"is compared with pattern byte K + i (K: --pattern-offset, default 0).\n";

static const char fill_usage[] =
	"usage: gas fill (--gaddr G | --node N --addr A) [--len L] [--seed S] [--pattern-offset K] [--width W]\n"
	"Store the pattern of seed S into the region through the window with accesses of width W\n"
	"(default: the widths take turns, one per 4 KiB page). Prints bytes=L bus_error=0|1.\n";

static int cmd_check(int argc, char **argv)
{
	struct region r = { 0 };
	int widths[8], nw, failed = 0;

	region_opts(argc, argv, &r, widths, &nw, check_usage);
	gas_open();
	catch_bus_errors();
	volatile uint8_t *p = gas_map(r.gaddr, r.len);
	for (int i = 0; i < nw; i++) {
		uint64_t bad = 0, first = ~0ull;
		double t0 = now_us();
		int rc = walk(&r, p, widths[i], 0, 0, r.len, &bad, &first);
		double us = now_us() - t0;

		printf("width=%s ok=%d mismatches=%llu first_bad=%lld bus_error=%d elapsed_us=%.0f mb_per_s=%.2f\n",
		       width_name(widths[i]), rc == 0 && !bad, (unsigned long long)bad,
		       first == ~0ull ? -1ll : (long long)first, rc != 0, us, us > 0 ? r.len / us : 0.0);
		failed |= rc != 0 || bad;
	}
	return failed;
}

static int cmd_fill(int argc, char **argv)
{
	struct region r = { 0 };
	int widths[8], nw, explicit_width = 0, rc = 0;
	uint64_t unused = 0, unused_first = 0;

	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], "--width", 7) && !(i + 1 < argc && !strcmp(argv[i + 1], "all")) &&
		    strcmp(argv[i], "--width=all"))
			explicit_width = 1;
	region_opts(argc, argv, &r, widths, &nw, fill_usage);
	gas_open();
	catch_bus_errors();
	volatile uint8_t *p = gas_map(r.gaddr, r.len);
	/* page by page, the widths taking turns unless one was given */
	for (uint64_t off = 0, k = 0; off < r.len && rc == 0; off += 4096, k++) {
		uint64_t end = r.len - off < 4096 ? r.len : off + 4096;

		rc = walk(&r, p, explicit_width ? widths[0] : widths[k % (uint64_t)nw], 1, off, end, &unused,
			  &unused_first);
	}
	printf("bytes=%llu seed=%u bus_error=%d\n", (unsigned long long)r.len, r.seed, rc != 0);
	return rc != 0;
}

static int cmd_load_store(int argc, char **argv, int store)
{
	static const struct option opts[] = {
		{ "gaddr", 1, 0, 'g' }, { "node", 1, 0, 'n' }, { "addr", 1, 0, 'a' }, { "size", 1, 0, 'z' },
		{ "value", 1, 0, 'v' }, { "help", 0, 0, 'h' }, { 0 } };
	uint64_t gaddr = 0, addr = 0, value = 0;
	long node = -1, size = 8;
	int have_g = 0, have_a = 0, have_v = 0, o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'g': gaddr = num(optarg, "--gaddr", UINT64_MAX); have_g = 1; break;
		case 'n': node = (long)num(optarg, "--node", 63); break;
		case 'a': addr = num(optarg, "--addr", UINT64_MAX); have_a = 1; break;
		case 'z': size = (long)num(optarg, "--size", 1u << 30); break;
		case 'v': value = num(optarg, "--value", UINT64_MAX); have_v = 1; break;
		case 'h':
			printf("usage: gas %s (--gaddr G | --node N --addr A) [--size 1|2|4|8]%s\n"
			       "One %s of SIZE bytes through the window. Prints gaddr=.. size=..%s, or bus_error=1\n"
			       "(exit 1) when the owner refused the access or is unreachable.\n",
			       store ? "store" : "load", store ? " --value V" : "", store ? "store" : "load",
			       store ? "" : " value=..");
			return 0;
		default: return 2;
		}
	}
	if (!have_g && !(have_a && node >= 0))
		die("--gaddr G, or --node N --addr A, is required; see --help");
	if (size != 1 && size != 2 && size != 4 && size != 8)
		die("--size must be 1, 2, 4 or 8");
	if (store && !have_v)
		die("--value is required");
	if (!have_g)
		gaddr = UNIMEM_GADDR(node, addr);
	gas_open();
	catch_bus_errors();
	volatile uint8_t *p = gas_map(gaddr, (uint64_t)size);
	uint8_t buf[8];

	memcpy(buf, &value, 8);
	if (guarded((int)size, p, buf, store)) {
		printf("gaddr=0x%010llx size=%ld bus_error=1\n", (unsigned long long)gaddr, size);
		return 1;
	}
	if (store) {
		printf("gaddr=0x%010llx size=%ld stored=0x%llx\n", (unsigned long long)gaddr, size,
		       (unsigned long long)value);
	} else {
		value = 0;
		memcpy(&value, buf, (size_t)size);
		printf("gaddr=0x%010llx size=%ld value=0x%llx\n", (unsigned long long)gaddr, size,
		       (unsigned long long)value);
	}
	return 0;
}

static int cmd_export(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", 1, 0, 'z' }, { "seed", 1, 0, 's' }, { "out", 1, 0, 'o' }, { "hold", 1, 0, 'H' },
		{ "help", 0, 0, 'h' }, { 0 } };
	struct unimem_gas_export e = { .size = 65536 };
	const char *out = NULL;
	long hold = -1;
	unsigned seed = 0;
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'z': e.size = num(optarg, "--size", 1u << 30); break;
		case 's': seed = (unsigned)num(optarg, "--seed", UINT32_MAX); break;
		case 'o': out = optarg; break;
		case 'H': hold = (long)num(optarg, "--hold", 100000000); break;
		case 'h':
			printf("usage: gas export [--size BYTES] [--seed S] [--out FILE] [--hold SECONDS]\n"
			       "Allocate physically contiguous memory on this node (UNIMEM_GAS_IOC_EXPORT, at most\n"
			       "4M), fill it with the pattern of seed S (default: leave it zeroed), print\n"
			       "gaddr=G local=P size=BYTES (also into FILE), then keep it alive for SECONDS (default:\n"
			       "until killed). Other nodes reach it at global address G.\n");
			return 0;
		default: return 2;
		}
	}
	gas_open();
	if (ioctl(gas_fd, UNIMEM_GAS_IOC_EXPORT, &e) < 0) {
		fprintf(stderr, "%s: UNIMEM_GAS_IOC_EXPORT of %llu bytes: %s\n", tool_prog, (unsigned long long)e.size,
			strerror(errno));
		return 1;
	}
	if (seed) {
		volatile uint8_t *p = gas_map(e.gaddr, e.size);

		for (uint64_t i = 0; i < e.size; i++)
			p[i] = pat(seed, i);
	}
	char line[128];
	snprintf(line, sizeof(line), "gaddr=0x%010llx local=0x%llx size=%llu\n", (unsigned long long)e.gaddr,
		 (unsigned long long)e.local_phys, (unsigned long long)e.size);
	fputs(line, stdout);
	fflush(stdout);
	if (out) {
		FILE *f = fopen(out, "w");

		if (!f || fputs(line, f) < 0 || fclose(f))
			die("cannot write %s: %s", out, strerror(errno));
	}
	if (hold < 0)
		for (;;)
			pause();
	sleep((unsigned)hold);
	return 0;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int cmd_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "gaddr", 1, 0, 'g' }, { "node", 1, 0, 'n' }, { "addr", 1, 0, 'a' }, { "count", 1, 0, 'c' },
		{ "help", 0, 0, 'h' }, { 0 } };
	uint64_t gaddr = 0, addr = 0;
	long node = -1, count = 1000;
	int have_g = 0, have_a = 0, o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'g': gaddr = num(optarg, "--gaddr", UINT64_MAX); have_g = 1; break;
		case 'n': node = (long)num(optarg, "--node", 63); break;
		case 'a': addr = num(optarg, "--addr", UINT64_MAX); have_a = 1; break;
		case 'c': count = (long)num(optarg, "--count", UINT64_MAX); break;
		case 'h':
			printf("usage: gas bench (--gaddr G | --node N --addr A) [--count K]\n"
			       "Latency of K 8-byte loads and K 8-byte stores through the window, one at a time\n"
			       "(wall clock in the guest). Prints op=load|store count= min_us= median_us= p99_us= max_us=.\n"
			       "Stops at the first bus error: op= done= bus_error=1 error_after_us= (the failing\n"
			       "access's duration), exit 1.\n");
			return 0;
		default: return 2;
		}
	}
	if (!have_g && !(have_a && node >= 0))
		die("--gaddr G, or --node N --addr A, is required; see --help");
	if (count < 1 || count > 10000000)
		die("--count must be 1 .. 10000000");
	if (!have_g)
		gaddr = UNIMEM_GADDR(node, addr);
	gas_open();
	catch_bus_errors();
	volatile uint64_t *p = (volatile uint64_t *)gas_map(gaddr & ~7ull, 8);
	double *t = malloc(sizeof(double) * (size_t)count);

	if (!t)
		die("out of memory");
	for (int op = 0; op < 2; op++) {
		for (long i = 0; i < count; i++) {
			uint8_t buf[8];
			double t0 = now_us();

			memcpy(buf, &i, 8);
			if (guarded(8, (volatile uint8_t *)p, buf, op)) {
				/* unrecoverable: stop; how long the failing access took to become an error */
				printf("op=%s done=%ld bus_error=1 error_after_us=%.0f\n", op ? "store" : "load", i,
				       now_us() - t0);
				free(t);
				return 1;
			}
			asm volatile("dsb sy" ::: "memory");
			t[i] = now_us() - t0;
		}
		qsort(t, (size_t)count, sizeof(double), cmp_double);
		printf("op=%s count=%ld min_us=%.2f median_us=%.2f p99_us=%.2f max_us=%.2f\n", op ? "store" : "load", count,
		       t[0], t[count / 2], t[(long)(count * 0.99)], t[count - 1]);
	}
	free(t);
	return 0;
}

static int cmd_info(void)
{
	static const char *const names[] = { UNIMEM_GAS_UAPI_COUNTER_NAMES };
	uint64_t c[GAS_CNT_COUNT];

	gas_open();
	if (ioctl(gas_fd, UNIMEM_GAS_IOC_COUNTERS, c) < 0)
		die("UNIMEM_GAS_IOC_COUNTERS: %s", strerror(errno));
	printf("node=%u node_count=%u window_base=0x%llx window_size=0x%llx node_shift=%u\n", info.node_id,
	       info.node_count, (unsigned long long)info.window_base, (unsigned long long)info.window_size,
	       info.node_shift);
	for (unsigned i = 0; i < GAS_CNT_COUNT; i++)
		printf("%s%s=%llu", i ? " " : "", names[i], (unsigned long long)c[i]);
	printf("\n");
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gas COMMAND [options]   (every command has --help)\n"
		   "  info     this node, the window, the counters\n"
		   "  export   allocate memory here that other nodes can reach; prints its global address\n"
		   "  load     one load through the window\n"
		   "  store    one store through the window\n"
		   "  fill     store a data pattern into a region, widths taking turns\n"
		   "  check    load a region with every access width and compare with the pattern\n"
		   "  bench    load/store latency through the window\n");
}

int main(int argc, char **argv)
{
	tool_prog = "gas";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	argv++, argc--;
	if (!strcmp(argv[0], "info")) return cmd_info();
	if (!strcmp(argv[0], "export")) return cmd_export(argc, argv);
	if (!strcmp(argv[0], "load")) return cmd_load_store(argc, argv, 0);
	if (!strcmp(argv[0], "store")) return cmd_load_store(argc, argv, 1);
	if (!strcmp(argv[0], "fill")) return cmd_fill(argc, argv);
	if (!strcmp(argv[0], "check")) return cmd_check(argc, argv);
	if (!strcmp(argv[0], "bench")) return cmd_bench(argc, argv);
	fprintf(stderr, "%s: unknown command '%s'\n", tool_prog, argv[0]);
	usage(stderr);
	return 2;
}
