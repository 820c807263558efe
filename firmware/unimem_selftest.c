/* SPDX-License-Identifier: MIT */
/*
 * Bare-metal self-test of the Unimem vmbox and packetizer on a standalone rackemu-node
 * (node-id=0, node-count=1, no fabric): the first code that touches the hardware, no OS.
 * Prints one line per check on the PL011 and "rackemu-firmware: ALL PASS" or "... FAILED".
 */
#include <stdint.h>

#include "rackemu/board.h"
#include "rackemu/unimem_regs.h"
#include "fw.h"

#define VMBOX RACKEMU_VMBOX_BASE
#define PKTZ RACKEMU_PKTZ_BASE
#define TIF (PKTZ + PKTZ_TIF_OFFSET)
#define VCTRL (VMBOX + VMBOX_CTRL_OFFSET)

/* pif 0..63, or UNIMEM_KIF: the kernel interface's page */
static uint64_t pif_send(unsigned pif, uint64_t dest, uint64_t p0lo, uint64_t p0hi, uint64_t p1lo,
                         uint64_t p1hi)
{
    uint64_t b = PKTZ + (pif == UNIMEM_KIF ? PKTZ_KIF_OFFSET : PKTZ_PIF_OFFSET(pif)), st;
    int spins = 1000000;

    w64(b + PKTZ_PIF_PAYLOAD0, p0lo);
    w64(b + PKTZ_PIF_PAYLOAD0 + 8, p0hi);
    w64(b + PKTZ_PIF_PAYLOAD1, p1lo);
    w64(b + PKTZ_PIF_PAYLOAD1 + 8, p1hi);
    w64(b + PKTZ_PIF_DEST, dest);
    do {
        st = r64(b + PKTZ_PIF_STATUS);
    } while ((st & PKTZ_ST_PEND) && --spins);
    return st;
}

int main(void)
{
    const uint64_t mif7 = UNIMEM_GADDR(0, VMBOX + VMBOX_MIF_OFFSET(7));

    puts_("rackemu-firmware: unimem self-test\n");
    check("vmbox id", r64(VCTRL + VMBOX_CTRL_ID), VMBOX_ID_VALUE);
    check("packetizer id", r64(TIF + PKTZ_TIF_ID), PKTZ_ID_VALUE);
    check("empty fifo pattern", r64(VMBOX + VMBOX_MIF_OFFSET(3)), VMBOX_EMPTY_PATTERN);

    /* CPU stores and loads through a MIF */
    w64(VMBOX + VMBOX_MIF_OFFSET(3), 0x1122334455667788ull);
    check("mif count after store", r64(VMBOX + VMBOX_MIF_OFFSET(3) + VMBOX_MIF_COUNT), 1);
    check("mif load returns the stored word", r64(VMBOX + VMBOX_MIF_OFFSET(3)), 0x1122334455667788ull);

    /* Trust interface, as the atomicity driver programs it (Table 4's own example PID) */
    w64(TIF + PKTZ_TIF_BASE_DEST, VMBOX);
    w64(TIF + PKTZ_TIF_PIDT(2), 0x123456CABEBEull);
    w64(TIF + PKTZ_TIF_PID_CONF, 1ull << 2);
    w64(VCTRL + VMBOX_CTRL_IRQ_ENABLE, 1ull << 7);

    check("local packet acknowledged", pif_send(2, mif7, 0xFFFFull << 48, 0xA1, 0xB2, 0xC3), PKTZ_ST_ACK);
    check("arrival interrupt pending", r64(VCTRL + VMBOX_CTRL_IRQ_STATUS), 1ull << 7);
    check("word 0 carries the PIDT prefix", r64(VMBOX + VMBOX_MIF_OFFSET(7)),
          (0xFFFFull << 48) | 0x123456CABEBEull);
    check("word 1", r64(VMBOX + VMBOX_MIF_OFFSET(7)), 0xA1);
    check("word 2", r64(VMBOX + VMBOX_MIF_OFFSET(7)), 0xB2);
    check("word 3", r64(VMBOX + VMBOX_MIF_OFFSET(7)), 0xC3);
    check("interrupt clears when drained", r64(VCTRL + VMBOX_CTRL_IRQ_STATUS), 0);

    check("illegal destination", pif_send(2, UNIMEM_GADDR(0, 0x0c000000), 0, 1, 2, 3), PKTZ_ST_ILLEGAL);
    check("remote node without fabric", pif_send(2, UNIMEM_GADDR(1, VMBOX + VMBOX_MIF_OFFSET(7)), 0, 1, 2, 3),
          PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR);
    check("PIF without PID_CONF bit sends nothing", pif_send(5, mif7, 0, 1, 2, 3), 0);
    check("no packet arrived", r64(VMBOX + VMBOX_MIF_OFFSET(7)), VMBOX_EMPTY_PATTERN);
    check("NOPID counter", r64(TIF + PKTZ_TIF_NOPID), 1);

    /* The kernel interface (KIF, rackemu extension): its own FIFO, PID and interrupt enable */
    const uint64_t kif = UNIMEM_GADDR(0, VMBOX + VMBOX_KIF_OFFSET);
    check("vmbox has the KIF", r64(VCTRL + VMBOX_CTRL_CAPS), UNIMEM_CAP_KIF);
    check("packetizer has the KIF", r64(TIF + PKTZ_TIF_CAPS), UNIMEM_CAP_KIF);
    w64(TIF + PKTZ_TIF_KIF_PIDT, 0xFC0000000000ull);
    w64(TIF + PKTZ_TIF_KIF_CONF, 1);
    check("disabled KIF refuses the packet", pif_send(UNIMEM_KIF, kif, 0, 1, 2, 3), PKTZ_ST_NACK);
    w64(VCTRL + VMBOX_CTRL_KIF_CTRL, VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE);
    check("a PIF cannot name the KIF", pif_send(2, kif, 0, 1, 2, 3), PKTZ_ST_ILLEGAL);
    check("KIF to KIF acknowledged", pif_send(UNIMEM_KIF, kif, 0xEEEEull << 48, 0xD1, 0xD2, 0xD3), PKTZ_ST_ACK);
    check("KIF interrupt pending", r64(VCTRL + VMBOX_CTRL_KIF_STATUS), VMBOX_KIF_NONEMPTY | VMBOX_KIF_IRQ);
    check("no MIF interrupt for it", r64(VCTRL + VMBOX_CTRL_IRQ_STATUS), 0);
    check("KIF count", r64(VMBOX + VMBOX_KIF_OFFSET + VMBOX_MIF_COUNT), 4);
    check("KIF word 0 carries KIF_PIDT", r64(VMBOX + VMBOX_KIF_OFFSET), (0xEEEEull << 48) | 0xFC0000000000ull);
    check("KIF word 1", r64(VMBOX + VMBOX_KIF_OFFSET), 0xD1);
    w64(VCTRL + VMBOX_CTRL_KIF_FLUSH, 1);
    check("KIF flushed, interrupt clear", r64(VCTRL + VMBOX_CTRL_KIF_STATUS), 0);
    check("KIF to a MIF acknowledged", pif_send(UNIMEM_KIF, mif7, 0, 1, 2, 3), PKTZ_ST_ACK);
    check("KIF counters: sent", r64(TIF + PKTZ_TIF_KIF_COUNTERS + PKTZ_KIF_CNT_SENT), 3);
    check("KIF counters: refused", r64(VCTRL + VMBOX_CTRL_KIF_COUNTERS + VMBOX_KIF_CNT_REFUSED), 1);

    puts_(failures ? "rackemu-firmware: FAILED\n" : "rackemu-firmware: ALL PASS\n");
    return failures;
}
