/* SPDX-License-Identifier: MIT */
/*
 * Shared by rackemu's guest command-line tools (gas, mbox, cdma): the usage-error exit and
 * number parsing. Each tool sets tool_prog in main() first.
 */
#ifndef RACKEMU_GUEST_TOOL_H
#define RACKEMU_GUEST_TOOL_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
