/* SPDX-License-Identifier: MIT */
/*
 * Bare-metal self-test of the soNUMA RMC on a standalone rackemu-node (node-id=0, node-count=1,
 * no fabric): the node is its own destination, so the RGP, the R2P2 (ATT included) and the RCP all
 * run. Programs a context over the machine's reserved segment and one QP, posts WQEs, polls the
 * CQ. Prints one line per check and "rackemu-firmware: ALL PASS" or "... FAILED".
 */
#include <stdint.h>

#include "rackemu/board.h"
#include "rackemu/sonuma_regs.h"
#include "fw.h"

#define RMC RACKEMU_RMC_BASE
#define WQ 0x41000000ull /* 16 MiB into RAM: clear of this image and its stack */
#define CQ 0x41010000ull
#define DEPTH_LOG2 2u     /* 4 entries: the CQ wraps during the test */

static uint64_t seg;
static uint32_t posted;

static void post(uint8_t op, uint8_t flags, uint64_t roff, uint64_t loff, uint32_t len, uint64_t a0, uint64_t a1)
{
    volatile uint64_t *w = (volatile uint64_t *)(WQ + 64 * (posted & ((1u << DEPTH_LOG2) - 1)));

    w[0] = (uint64_t)op | (uint64_t)flags << 8 | (uint64_t)len << 32; /* node 0 */
    w[1] = posted + 1000;                                             /* wr_id */
    w[2] = roff;
    w[3] = loff;
    w[4] = a0;
    w[5] = a1;
    w[6] = 0;
    w[7] = 0;
    posted++;
    __asm__ volatile("dsb sy" ::: "memory");
    w64(RMC + RMC_DB_REG(0, DB_WQ_TAIL), posted);
}

/* Wait for the CQE of the request just posted (one at a time); returns status | info << 8, and
 * its value through *value. */
static uint64_t complete(uint64_t *value, uint32_t *modeled)
{
    uint32_t k = posted - 1;
    volatile uint8_t *c = (volatile uint8_t *)(CQ + 32 * (k & ((1u << DEPTH_LOG2) - 1)));
    uint8_t phase = 1 ^ ((k >> DEPTH_LOG2) & 1);
    long spins = 100000000;

    while ((c[31] & RMC_CQE_F_PHASE) != phase && --spins)
        ;
    if (!spins)
        return 0xdead;
    __asm__ volatile("dsb sy" ::: "memory");
    if (value)
        *value = *(volatile uint64_t *)(c + 8);
    if (modeled)
        *modeled = *(volatile uint32_t *)(c + 16);
    w64(RMC + RMC_DB_REG(0, DB_CQ_HEAD), posted);
    return c[0x1b] | (uint64_t)c[0x1c] << 8;
}

int main(void)
{
    uint64_t v = 0, i, bad = 0;
    uint32_t m_read = 0, m_sabre = 0, m_nospec = 0;
    volatile uint64_t *s;

    puts_("rackemu-firmware: rmc self-test\n");
    check("rmc id", r64(RMC + RMC_REG_ID), RMC_ID_VALUE);
    check("qp count", r64(RMC + RMC_REG_QP_COUNT), RMC_QP_COUNT);
    seg = r64(RMC + RMC_REG_SEG_BASE);
    check("segment present", seg != 0 && r64(RMC + RMC_REG_SEG_SIZE) >= 0x10000, 1);
    s = (volatile uint64_t *)seg;

    w64(RMC + RMC_REG_CTRL, RMC_CTRL_EN);
    w64(RMC + RMC_CTX_REG(2, CTX_BASE), seg);
    w64(RMC + RMC_CTX_REG(2, CTX_SIZE), 0x10000);
    w64(RMC + RMC_CTX_REG(2, CTX_PERM), CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC | CTX_PERM_SABRE);
    w64(RMC + RMC_CTX_REG(2, CTX_NODEMASK), 1);
    w64(RMC + RMC_CTX_REG(2, CTX_LAYOUT), CTX_LAYOUT_VALID | 0);
    w64(RMC + RMC_CTX_REG(2, CTX_CTRL), CTX_CTRL_VALID);
    check("context valid", r64(RMC + RMC_CTX_REG(2, CTX_CTRL)), CTX_CTRL_VALID);
    for (i = 0; i < 4 * 64 / 8; i++) { /* zero WQ and CQ */
        *(volatile uint64_t *)(WQ + 8 * i) = 0;
        *(volatile uint64_t *)(CQ + 8 * i) = 0;
    }
    w64(RMC + RMC_QP_REG(0, QP_WQ_BASE), WQ);
    w64(RMC + RMC_QP_REG(0, QP_CQ_BASE), CQ);
    w64(RMC + RMC_QP_REG(0, QP_DEPTH_LOG2), DEPTH_LOG2);
    w64(RMC + RMC_QP_REG(0, QP_CTX), 2);
    w64(RMC + RMC_QP_REG(0, QP_CTRL), QP_CTRL_EN);
    check("qp enabled", r64(RMC + RMC_QP_REG(0, QP_CTRL)), QP_CTRL_EN);

    for (i = 0; i < 128; i++) /* a 1 KiB object at 0: version 0 (even), then data */
        s[i] = i ? 0x0101010101010101ull * i : 0;
    post(RMC_OP_READ, 0, 0, 0x4000, 1024, 0, 0);
    check("read completes ok", complete(0, &m_read), RMC_ST_OK);
    for (i = 0; i < 128; i++)
        bad += s[0x4000 / 8 + i] != s[i];
    check("read data", bad, 0);

    s[0x5000 / 8] = 0x1122334455667788ull;
    post(RMC_OP_WRITE, 0, 0x6008, 0x5000, 8, 0, 0);
    check("write completes ok", complete(0, 0), RMC_ST_OK);
    check("write data", s[0x6008 / 8], 0x1122334455667788ull);

    s[0x7000 / 8] = 40;
    post(RMC_OP_FAA, 0, 0x7000, 0, 8, 2, 0);
    check("faa ok", complete(&v, 0), RMC_ST_OK);
    check("faa old value", v, 40);
    post(RMC_OP_CAS, 0, 0x7000, 0, 8, 42, 7);
    check("cas ok", complete(&v, 0), RMC_ST_OK);
    check("cas old value", v, 42);
    check("cas swapped", s[0x7000 / 8], 7);

    post(RMC_OP_SABRE, 0, 0, 0x8000, 1024, 0, 0);
    check("sabre ok", complete(&v, &m_sabre), RMC_ST_OK);
    check("sabre version", v, 0);
    post(RMC_OP_SABRE, RMC_WQE_F_NOSPEC, 0, 0x8000, 1024, 0, 0);
    check("sabre without speculation ok", complete(0, &m_nospec), RMC_ST_OK);
    /* 16 blocks: a read over four R2P2s at 1 ns, a SABRe on one at 3.2 ns: 3 + 2.2 x 15 = 36 ns more */
    check("sabre modeled like a read", m_sabre - m_read >= 34 && m_sabre - m_read <= 38, 1);
    check("no speculation is slower", m_nospec > m_sabre, 1);
    s[0] = 5; /* odd: a writer holds the object */
    post(RMC_OP_SABRE, 0, 0, 0x8000, 1024, 0, 0);
    check("odd version aborts", complete(0, 0), RMC_ST_SABRE_ABORT | (uint64_t)RMC_INFO_LOCKED << 8);

    post(RMC_OP_CAS, 0, 0x7004, 0, 8, 0, 0);
    check("unaligned cas refused", complete(0, 0), RMC_ST_BAD_REQUEST | (uint64_t)RMC_INFO_UNALIGNED << 8);
    post(RMC_OP_READ, 0, 0xfff8, 0, 16, 0, 0);
    check("read past the segment refused", complete(0, 0), RMC_ST_REMOTE_ACCESS | (uint64_t)RMC_INFO_BOUNDS << 8);
    post(9, 0, 0, 0, 8, 0, 0);
    check("bad opcode refused", complete(0, 0), RMC_ST_BAD_REQUEST | (uint64_t)RMC_INFO_BAD_OP << 8);
    check("cq wrapped", r64(RMC + RMC_QP_REG(0, QP_CQ_TAIL)), posted);

    puts_(failures ? "rackemu-firmware: FAILED\n" : "rackemu-firmware: ALL PASS\n");
    return failures;
}
