/* SPDX-License-Identifier: MIT */
/*
 * Shared by rackemu's guest command-line tools (gas, mbox, cdma, gsas, rmc, ...): the usage-error
 * exit, getopt_long's errors, number parsing, check-suite lines, the monotonic clock, a qsort
 * comparator and the stop-on-signal flag. Each tool sets tool_prog in main() first.
 */
#ifndef RACKEMU_GUEST_TOOL_H
#define RACKEMU_GUEST_TOOL_H

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *tool_prog = "rackemu";

/* A usage error: the message on stderr, exit status 2. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn, unused));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tool_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* getopt_long's '?' or ':' (with opterr = 0 and an optstring starting with ':') as a usage error
 * that names the option; `help` says where the options are listed (e.g. "rmc --help"). */
static void bad_option(int c, char **argv, const char *help) __attribute__((noreturn, unused));
static void bad_option(int c, char **argv, const char *help)
{
	const char *a = argv[optind - 1];
	int is_long = !strncmp(a, "--", 2);

	if (c == ':')
		die("%s needs a value (%s)", is_long ? a : (char[]){ '-', (char)optopt, 0 }, help);
	if (is_long && optopt)
		die("%s takes no value (%s)", a, help);
	if (!is_long && optopt)
		die("unknown option '-%c' (%s)", optopt, help);
	die("unknown or ambiguous option '%s' (%s)", a, help);
}

/* An unsigned number (decimal, 0x hex, 0 octal), optionally with a K or M suffix, at most max;
 * anything else is a usage error naming the option. */
static uint64_t __attribute__((unused)) num(const char *s, const char *what, uint64_t max)
{
	char *end;
	uint64_t v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (!strcmp(end, "K"))
		shift = 10;
	else if (!strcmp(end, "M"))
		shift = 20;
	else if (*end)
		errno = EINVAL;
	if (errno || !*s || (shift && v > (UINT64_MAX >> shift)) || (v << shift) > max)
		die("%s '%s': expected a number up to %llu (K and M suffixes allowed)", what, s,
		    (unsigned long long)max);
	return v << shift;
}

/* Interrupts so far of the /proc/interrupts rows whose text contains `name` (every CPU's column
 * summed): a driver's action name, e.g. "sonuma-rmc" or "rackemu_rnic-v1". -1: no such row. */
static long long proc_irqs(const char *name) __attribute__((unused));
static long long proc_irqs(const char *name)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[1024];
	long long sum = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p;

		if (!strstr(line, name) || !(p = strchr(line, ':')))
			continue;
		if (sum < 0)
			sum = 0;
		for (p++;;) {
			char *end;
			long long v = strtoll(p, &end, 10);

			if (end == p)
				break;
			sum += v;
			p = end;
		}
	}
	fclose(f);
	return sum;
}

/* Check suites (`unimem-check`, `mbox check`, `unim_dma_test`, `gsas check`): one
 * `check=NAME ok=0|1 DETAILS` line per check; check_summary() prints `checks=N failed=F` and
 * returns the exit status (1 if any check failed). */
static int checks __attribute__((unused)), failures __attribute__((unused));

static void check(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4), unused));
static void check(const char *name, int ok, const char *fmt, ...)
{
	va_list ap;

	checks++;
	failures += !ok;
	printf("check=%s ok=%d ", name, ok);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static int __attribute__((unused)) check_summary(void)
{
	printf("checks=%d failed=%d\n", checks, failures);
	fflush(stdout);
	return failures ? 1 : 0;
}

/* The monotonic clock in nanoseconds. */
static uint64_t __attribute__((unused)) now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* qsort() comparator of uint64_t values, ascending. */
static int __attribute__((unused)) cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Byte i of test pattern `seed` (rmc, rnic): a byte that was not copied (0 or stale) or landed at
 * the wrong place does not match. */
static uint8_t __attribute__((unused)) pattern_byte(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ i * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 29;
	return (uint8_t)(x * 0x94d049bb133111ebull >> 56);
}

/* Long-running loops poll `stop`; on_signal (installed for SIGINT/SIGTERM) sets it. */
static volatile sig_atomic_t stop __attribute__((unused));

static void __attribute__((unused)) on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

#endif
