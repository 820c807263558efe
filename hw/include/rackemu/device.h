/* SPDX-License-Identifier: MIT */
/*
 * The one set of device operations every rackemu device core exports, and that one generic
 * QEMU adapter serves (hw/qemu/rackemu_device.c; docs/adding-a-device.md).
 *
 * A core is a C++ object behind a `void *`. It reaches the outside world only through its host
 * (rackemu/host.h); the outside world reaches it only through this table:
 *   - create/free, with the device's own configuration (the glue's QOM properties);
 *   - register regions: read/write per region, each returning an rk_status (a bus error for the
 *     guest where the hardware gives one);
 *   - reset, pause(on) (the VM stopped: the core changes nothing, touches no guest memory, holds
 *     what arrives), the level of each interrupt line;
 *   - save/load of its architectural state as one byte string (hw/core/state.h), which the
 *     adapter migrates; load validates all of it and changes nothing when it refuses;
 *   - what the host delivers: a fabric service's requests, replies and link changes, Ethernet
 *     frames of one class, the expiry of a timer, room on the link after a push-back.
 * Every entry but create, free and the regions may be NULL (the core has no such thing).
 *
 * Threading: region ops, reset, pause, save and load run on a vCPU or the main loop with QEMU's
 * big lock held; fabric and frame callbacks on the port's thread, timers in the main loop,
 * tx_resume on the adapter's transmit thread. A core takes its own locks.
 */
#ifndef RACKEMU_DEVICE_H
#define RACKEMU_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "rackemu/host.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rk_fabric_service;

#define RK_DEVICE_MAX_REGIONS 4
#define RK_DEVICE_MAX_TIMERS  4

typedef struct RkDeviceRegion {
    const char *name; /* the MemoryRegion's and the traces' name ("rackemu-rnic-db") */
    uint64_t size;
    int pci_bar; /* the BAR a PCI function maps it at; ignored on the system bus */
    /* Every naturally aligned access of size 1..8 reaches the core, which refuses what it does
     * not take with a guest error and a defined value (the bus refuses unaligned ones). */
    rk_status (*read)(void *core, uint64_t offset, unsigned size, uint64_t *value);
    rk_status (*write)(void *core, uint64_t offset, uint64_t value, unsigned size);
    /* the register's name at `offset` for traces (NULL: none) */
    const char *(*reg_name)(void *core, uint64_t offset);
} RkDeviceRegion;

typedef struct RkDeviceOps {
    const char *name; /* the QOM type name */
    /* `cfg` is the device's own configuration struct; NULL and a message in err on a bad one */
    void *(*create)(const RkHost *host, const void *cfg, char *err, size_t errlen);
    void (*free)(void *core);

    unsigned nregions;
    RkDeviceRegion regions[RK_DEVICE_MAX_REGIONS];
    unsigned nirqs; /* interrupt lines: sysbus outputs, or a PCI function's MSI-X vectors */
    int msix_bar;   /* PCI: the BAR of the MSI-X table and PBA (-1: INTx only) */

    void (*reset)(void *core);
    void (*pause)(void *core, int on);
    int (*irq_level)(void *core, unsigned line);

    /* The state: a malloc()ed string the adapter free()s, and its validating load (0, or
     * -EINVAL with the reason in msg and nothing changed). state_max bounds what load is
     * offered (a hostile stream must not allocate more). */
    uint32_t state_version; /* the adapter's VMState version: bump it with the state's layout */
    uint64_t state_max;
    int (*save)(void *core, uint8_t **buf, uint64_t *len);
    int (*load)(void *core, const uint8_t *buf, uint64_t len, char *msg, size_t msglen);

    /* Fabric service fabric_svc (RKF_SVC_*; -1: none): the adapter binds it before it creates
     * the core (RkHost.ep is its endpoint, for the core's own sends) and calls these with the
     * core as the opaque. on_link is also called when the VM runs again (a loaded state
     * carries the saving node's link). */
    int fabric_svc;
    const struct rk_fabric_service *fabric;
    /* Ethernet frames of class eth_class (enum rk_fabric_eth_rx_class; -1: none) from the port. */
    int eth_class;
    void (*frame)(void *core, const uint8_t *frame, size_t len);
    /* Timer `id` (armed with the host's timer_arm) expired. */
    unsigned ntimers;
    void (*timer)(void *core, unsigned id);
    /* After the host's tx_wait: send what was held; 1 while the link still pushes back. */
    int (*tx_resume)(void *core);
} RkDeviceOps;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RACKEMU_DEVICE_H */
