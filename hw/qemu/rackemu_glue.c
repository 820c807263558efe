/* SPDX-License-Identifier: MIT */
/* Helpers shared by every rackemu device's QOM glue; see rackemu_glue.h. */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
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

RkFabricEndpoint *rackemu_fabric_bind(RackemuFabric *f, unsigned svc, const struct rk_fabric_service *ops,
                                      void *opaque)
{
    return rk_fabric_bind(rackemu_fabric_port(f), svc, ops, opaque);
}

RkFabricPort *rackemu_fabric_port(RackemuFabric *f)
{
    return f ? f->port : NULL;
}

RkRemoteMem *rackemu_fabric_rmem(RackemuFabric *f)
{
    return f ? f->rmem : NULL;
}

static const TypeInfo rackemu_fabric_info = {
    .name = TYPE_RACKEMU_FABRIC,
    .parent = TYPE_OBJECT,
    .instance_size = sizeof(RackemuFabric),
};

static void rackemu_fabric_register(void)
{
    type_register_static(&rackemu_fabric_info);
}

type_init(rackemu_fabric_register)
