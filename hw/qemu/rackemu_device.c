/* SPDX-License-Identifier: MIT */
/* The generic adapter between QOM and a device core's operations; see rackemu_device.h. */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "hw/pci/msix.h"
#include "sysemu/runstate.h"

#include "rk_fabric_port.h"
#include "rackemu_device.h"
#include "trace.h"

/* ---- register regions ---- */

static MemTxResult rackemu_device_read(void *opaque, hwaddr addr, uint64_t *data, unsigned size,
                                       MemTxAttrs attrs)
{
    RackemuDeviceRegion *r = opaque;
    rk_status st;

    *data = 0;
    st = r->ops->read(r->d->core, addr, size, data);
    trace_rackemu_mmio_read(r->ops->name, r->d->host.host.node_id, addr, size, *data);
    return rackemu_status_to_memtx(st);
}

static MemTxResult rackemu_device_write(void *opaque, hwaddr addr, uint64_t data, unsigned size,
                                        MemTxAttrs attrs)
{
    RackemuDeviceRegion *r = opaque;

    trace_rackemu_mmio_write(r->ops->name, r->d->host.host.node_id, addr, size, data);
    if (r->ops->reg_name && trace_event_get_state_backends(TRACE_RACKEMU_REG_WRITE)) {
        trace_rackemu_reg_write(r->ops->name, r->d->host.host.node_id, r->ops->reg_name(r->d->core, addr), data);
    }
    return rackemu_status_to_memtx(r->ops->write(r->d->core, addr, data, size));
}

/*
 * Every size 1..8 reaches the core, which refuses what it does not take; an unaligned access is
 * refused by the bus (the guest takes a data abort), as on the AXI/PCIe register interfaces.
 */
static const MemoryRegionOps rackemu_device_region_ops = {
    .read_with_attrs = rackemu_device_read,
    .write_with_attrs = rackemu_device_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 8 },
    .impl = { .min_access_size = 1, .max_access_size = 8 },
};

/* ---- life cycle ---- */

static void rackemu_device_frame(void *opaque, const uint8_t *frame, size_t len, unsigned src_node)
{
    RackemuDevice *d = opaque;

    trace_rackemu_frame(d->ops->name, d->host.host.node_id, "in", (uint64_t)len, (int)src_node);
    d->ops->frame(d->core, frame, len);
}

/* The core's fabric service, bound before the core exists (the port starts after realize). */
static void rackemu_device_on_request(void *opaque, RkFabricEndpoint *ep, const struct rkf_frame_hdr *hdr,
                                      const void *payload)
{
    RackemuDevice *d = opaque;

    if (d->core && d->ops->fabric->on_request) {
        d->ops->fabric->on_request(d->core, ep, hdr, payload);
    }
}

static void rackemu_device_on_reply(void *opaque, const struct rkf_frame_hdr *hdr, const void *payload)
{
    RackemuDevice *d = opaque;

    if (d->core && d->ops->fabric->on_reply) {
        d->ops->fabric->on_reply(d->core, hdr, payload);
    }
}

static void rackemu_device_on_link(void *opaque, int up)
{
    RackemuDevice *d = opaque;

    if (d->core && d->ops->fabric->on_link) {
        d->ops->fabric->on_link(d->core, up);
    }
}

static const struct rk_fabric_service rackemu_device_service = {
    rackemu_device_on_request,
    rackemu_device_on_reply,
    rackemu_device_on_link,
};

static void rackemu_device_link_now(RackemuDevice *d)
{
    if (d->ops->fabric && d->ops->fabric->on_link && d->host.host.port) {
        d->ops->fabric->on_link(d->core, rk_fabric_port_is_up(d->host.host.port));
    }
}

/* While the VM is stopped the core changes nothing (rackemu/device.h "pause"). */
static void rackemu_device_vm_state(void *opaque, bool running, RunState state)
{
    RackemuDevice *d = opaque;

    trace_rackemu_pause(d->ops->name, d->host.host.node_id, !running);
    if (d->ops->pause) {
        d->ops->pause(d->core, !running);
    }
    if (running) {
        rackemu_device_link_now(d); /* a loaded state carries the saving node's link */
    }
}

static void rackemu_device_sync_irqs(RackemuDevice *d)
{
    for (unsigned i = 0; i < d->ops->nirqs; i++) {
        rackemu_host_irq_sync(&d->host, i, d->ops->irq_level ? d->ops->irq_level(d->core, i) : 0);
    }
}

bool rackemu_device_realize(RackemuDevice *d, DeviceState *dev, const RkDeviceOps *ops, const void *cfg,
                            RackemuFabric *fabric, unsigned node_id, unsigned node_count, bool msix,
                            Error **errp)
{
    PCIDevice *pdev = (PCIDevice *)object_dynamic_cast(OBJECT(dev), TYPE_PCI_DEVICE);
    char err[256] = "";

    assert(ops->nregions <= RK_DEVICE_MAX_REGIONS && ops->nirqs <= RACKEMU_HOST_MAX_IRQS &&
           ops->ntimers <= RACKEMU_HOST_MAX_TIMERS);
    d->ops = ops;
    d->dev = dev;
    if (pdev && msix && ops->msix_bar >= 0) {
        /* no MSI on the machine (e.g. no ITS/v2m): INTx only, which a driver falls back to */
        msix = msix_init_exclusive_bar(pdev, ops->nirqs, ops->msix_bar, NULL) == 0;
        for (unsigned v = 0; msix && v < ops->nirqs; v++) {
            msix_vector_use(pdev, v);
        }
    } else {
        msix = false;
    }
    rackemu_host_init(&d->host, dev, ops->name, ops->nirqs, msix, fabric, node_id, node_count);
    if (ops->fabric_svc >= 0 && ops->fabric) {
        d->ep = rackemu_fabric_bind(fabric, ops->fabric_svc, &rackemu_device_service, d);
        d->host.host.ep = d->ep;
    }
    d->core = ops->create(&d->host.host, cfg, err, sizeof(err));
    if (!d->core) {
        error_setg(errp, "%s: %s", ops->name, err[0] ? err : "the core refused its configuration");
        rk_fabric_unbind(d->ep);
        d->ep = NULL;
        rackemu_host_fini(&d->host);
        if (msix) {
            msix_uninit_exclusive_bar(pdev);
        }
        return false;
    }
    d->host.core = d->core;
    d->host.on_timer = ops->timer;
    d->host.tx_resume = ops->tx_resume;
    rackemu_host_start(&d->host, ops->ntimers);
    for (unsigned i = 0; i < ops->nregions; i++) {
        RackemuDeviceRegion *r = &d->regions[i];

        r->d = d;
        r->ops = &ops->regions[i];
        memory_region_init_io(&r->mr, OBJECT(dev), &rackemu_device_region_ops, r, r->ops->name, r->ops->size);
        if (pdev) {
            pci_register_bar(pdev, r->ops->pci_bar, PCI_BASE_ADDRESS_SPACE_MEMORY, &r->mr);
        } else {
            sysbus_init_mmio(SYS_BUS_DEVICE(dev), &r->mr);
        }
    }
    if (ops->eth_class >= 0 && ops->frame && d->host.host.port) {
        rk_fabric_port_eth_attach(d->host.host.port, ops->eth_class, rackemu_device_frame, d);
        d->eth_attached = true;
    }
    rackemu_device_link_now(d); /* a change before the bind */
    d->vmse = qemu_add_vm_change_state_handler(rackemu_device_vm_state, d);
    return true;
}

void rackemu_device_unrealize(RackemuDevice *d)
{
    PCIDevice *pdev = d->dev ? (PCIDevice *)object_dynamic_cast(OBJECT(d->dev), TYPE_PCI_DEVICE) : NULL;

    if (!d->core) {
        return;
    }
    if (d->vmse) {
        qemu_del_vm_change_state_handler(d->vmse);
        d->vmse = NULL;
    }
    if (d->eth_attached) {
        rk_fabric_port_eth_attach(d->host.host.port, d->ops->eth_class, NULL, NULL);
        d->eth_attached = false;
    }
    rk_fabric_unbind(d->ep); /* waits for a callback that is running */
    d->ep = NULL;
    rackemu_host_fini(&d->host); /* the transmit thread and the timers stop */
    d->ops->free(d->core);
    d->core = NULL;
    if (pdev && d->host.msix) {
        msix_uninit_exclusive_bar(pdev);
    }
    g_free(d->state);
    d->state = NULL;
}

void rackemu_device_reset(RackemuDevice *d)
{
    if (!d->core) {
        return;
    }
    if (d->ops->reset) {
        d->ops->reset(d->core);
    }
    rackemu_device_sync_irqs(d);
}

/* ---- migration ---- */

static int rackemu_device_pre_save(void *opaque)
{
    RackemuDevice *d = opaque;
    uint64_t len = 0;
    int rc;

    g_free(d->state);
    d->state = NULL;
    d->state_len = 0;
    if (!d->core || !d->ops->save) {
        return 0;
    }
    /* the VM is stopped: the core is paused (rackemu_device_vm_state), its state is still */
    rc = d->ops->save(d->core, &d->state, &len);
    trace_rackemu_state(d->ops->name, d->host.host.node_id, "saved", len, rc);
    if (rc == 0 && len > UINT32_MAX) {
        rc = -E2BIG;
    }
    if (rc) {
        error_report("%s node %u: the device's state could not be saved (%d)", d->ops->name,
                     d->host.host.node_id, rc);
        return rc;
    }
    d->state_len = (uint32_t)len;
    return 0;
}

static int rackemu_device_post_save(void *opaque)
{
    RackemuDevice *d = opaque;

    free(d->state); /* malloc()ed by the core's save */
    d->state = NULL;
    d->state_len = 0;
    return 0;
}

static int rackemu_device_pre_load(void *opaque)
{
    RackemuDevice *d = opaque;

    g_free(d->state);
    d->state = NULL;
    d->state_len = 0;
    return 0;
}

/* Before the buffer is allocated: a hostile length must not allocate gigabytes. */
static bool rackemu_device_len_valid(void *opaque, int version_id)
{
    RackemuDevice *d = opaque;

    return d->state_len <= d->ops->state_max;
}

static int rackemu_device_post_load(void *opaque, int version_id)
{
    RackemuDevice *d = opaque;
    char msg[300] = "";
    int rc = -EINVAL;

    if (d->core && d->ops->load) {
        rc = d->ops->load(d->core, d->state, d->state_len, msg, sizeof(msg));
    }
    trace_rackemu_state(d->ops->name, d->host.host.node_id, "loaded", d->state_len, rc);
    g_free(d->state);
    d->state = NULL;
    d->state_len = 0;
    if (rc) {
        error_report("%s node %u: migration state refused: %s", d->ops->name, d->host.host.node_id, msg);
        return rc;
    }
    rackemu_device_sync_irqs(d);
    return 0;
}

const VMStateDescription vmstate_rackemu_device = {
    .name = "rackemu-device",
    .version_id = 1,
    .minimum_version_id = 1,
    .pre_save = rackemu_device_pre_save,
    .post_save = rackemu_device_post_save,
    .pre_load = rackemu_device_pre_load,
    .post_load = rackemu_device_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT32(state_len, RackemuDevice),
        VMSTATE_VALIDATE("rackemu device state length", rackemu_device_len_valid),
        VMSTATE_VBUFFER_ALLOC_UINT32(state, RackemuDevice, 1, NULL, state_len),
        VMSTATE_END_OF_LIST()
    },
};
