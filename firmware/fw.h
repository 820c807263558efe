/* SPDX-License-Identifier: MIT */
/* Helpers shared by rackemu's bare-metal self-tests: MMIO, the PL011 console, check lines. */
#ifndef RACKEMU_FW_H
#define RACKEMU_FW_H

#include <stdint.h>

#define UART0 0x09000000ull

static inline void w64(uint64_t a, uint64_t v) { *(volatile uint64_t *)a = v; }
static inline uint64_t r64(uint64_t a) { return *(volatile uint64_t *)a; }

static void putc_(char c)
{
    while (*(volatile uint32_t *)(UART0 + 0x18) & (1u << 5)) /* FR.TXFF */
        ;
    *(volatile uint32_t *)UART0 = (uint32_t)c;
}

static void puts_(const char *s)
{
    while (*s) {
        if (*s == '\n')
            putc_('\r');
        putc_(*s++);
    }
}

static void puthex(uint64_t v)
{
    puts_("0x");
    for (int i = 60; i >= 0; i -= 4)
        putc_("0123456789abcdef"[(v >> i) & 0xf]);
}

static int failures; /* checks that failed */

static void check(const char *what, uint64_t got, uint64_t want)
{
    puts_("rackemu-firmware: ");
    puts_(what);
    if (got == want) {
        puts_(" ok\n");
        return;
    }
    failures++;
    puts_(" FAIL got ");
    puthex(got);
    puts_(" want ");
    puthex(want);
    puts_("\n");
}

#endif /* RACKEMU_FW_H */
