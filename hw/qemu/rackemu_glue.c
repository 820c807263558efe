/* SPDX-License-Identifier: MIT */
/* Helpers shared by every rackemu device's QOM glue; see rackemu_glue.h. */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "hw/irq.h"

#include "rackemu_glue.h"

static void rackemu_irq_bh(void *opaque)
{
    RackemuIrq *irq = opaque;

    qemu_set_irq(irq->line, irq->level(irq->opaque));
}

void rackemu_irq_init(RackemuIrq *irq, SysBusDevice *sbd, int (*level)(void *opaque), void *opaque)
{
    irq->level = level;
    irq->opaque = opaque;
    sysbus_init_irq(sbd, &irq->line);
    irq->bh = qemu_bh_new(rackemu_irq_bh, irq);
}

void rackemu_irq_update(RackemuIrq *irq)
{
    if (qemu_mutex_iothread_locked()) {
        qemu_set_irq(irq->line, irq->level(irq->opaque));
    } else {
        qemu_bh_schedule(irq->bh);
    }
}

void rackemu_irq_set(RackemuIrq *irq, int level)
{
    qemu_set_irq(irq->line, level);
}

void rackemu_guest_error(void *opaque, const char *msg)
{
    qemu_log_mask(LOG_GUEST_ERROR, "%s\n", msg);
}
