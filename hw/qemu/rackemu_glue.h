/* SPDX-License-Identifier: MIT */
/*
 * What every rackemu device's QOM glue shares, written once: the interrupt line that a device
 * core may report changed from any thread, and the guest-error log callback of every core.
 */
#ifndef RACKEMU_GLUE_H
#define RACKEMU_GLUE_H

#include "hw/sysbus.h"

/*
 * An interrupt line whose level the device core computes. The core reports "the level may have
 * changed" from whatever thread it runs on: a vCPU in an MMIO handler (big lock held: the line
 * is set at once, so a W1C or a disable lowers it before the guest's handler returns), or a
 * thread of its own, the fabric port thread, a DMA engine (no big lock: a bottom half sets the
 * line in the main loop and reads the level only then, so no thread ever waits for the big lock
 * and a burst of changes costs one update). The line is level-triggered: coalesced reports
 * lose nothing.
 */
typedef struct RackemuIrq {
    qemu_irq line;
    QEMUBH *bh;
    int (*level)(void *opaque); /* the core's current level (0/1) */
    void *opaque;
} RackemuIrq;

/* Create the sysbus interrupt output (index = the order of the calls) and its bottom half. */
void rackemu_irq_init(RackemuIrq *irq, SysBusDevice *sbd, int (*level)(void *opaque), void *opaque);
/* From any thread: bring the line to the core's level. */
void rackemu_irq_update(RackemuIrq *irq);
/* With the big lock held (reset): set the line to `level` now. */
void rackemu_irq_set(RackemuIrq *irq, int level);

/* The guest-error log callback of every core: one LOG_GUEST_ERROR line (-d guest_errors). */
void rackemu_guest_error(void *opaque, const char *msg);

#endif /* RACKEMU_GLUE_H */
