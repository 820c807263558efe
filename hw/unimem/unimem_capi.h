/* SPDX-License-Identifier: MIT */
/*
 * C interface of the Unimem device cores, for the QEMU glue (hw/qemu/rackemu_unimem.c), which
 * is C. Thin wrappers over rackemu::unimem::Vmbox and Packetizer; see vmbox.h, packetizer.h.
 */
#ifndef RACKEMU_UNIMEM_CAPI_H
#define RACKEMU_UNIMEM_CAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkVmbox RkVmbox;
typedef struct RkPacketizer RkPacketizer;
typedef void (*rk_irq_fn)(void *opaque, int level);
typedef void (*rk_log_fn)(void *opaque, const char *msg);
typedef void (*rk_pktz_tx_fn)(void *opaque, unsigned pif, uint64_t tag, uint64_t dest,
                              const uint64_t words[4]);

enum { RK_PKTZ_ACK = 0, RK_PKTZ_NACK = 1, RK_PKTZ_FABRIC_ERR = 2 };

RkVmbox *rk_vmbox_new(unsigned depth, int burst_known_issue, rk_irq_fn irq, rk_log_fn log, void *opaque);
void rk_vmbox_free(RkVmbox *v);
/* 0 on success, -1 when the access must end in a bus error (full FIFO, bad access size). */
int rk_vmbox_read(RkVmbox *v, uint64_t offset, unsigned size, uint64_t *value);
int rk_vmbox_write(RkVmbox *v, uint64_t offset, uint64_t value, unsigned size);
/* 1 = acknowledged, 0 = refused (NACK). */
int rk_vmbox_deliver(RkVmbox *v, unsigned mif, const uint64_t *words, unsigned nwords);
int rk_vmbox_irq_level(RkVmbox *v);
void rk_vmbox_reset(RkVmbox *v);

RkPacketizer *rk_pktz_new(rk_pktz_tx_fn tx, rk_log_fn log, void *opaque);
void rk_pktz_free(RkPacketizer *p);
uint64_t rk_pktz_read(RkPacketizer *p, uint64_t offset, unsigned size);
void rk_pktz_write(RkPacketizer *p, uint64_t offset, uint64_t value, unsigned size);
void rk_pktz_complete(RkPacketizer *p, uint64_t tag, int result);
void rk_pktz_fail_all(RkPacketizer *p);
void rk_pktz_reset(RkPacketizer *p);

/* Global address space window (gas.h). The access callback returns RK_GAS_*. */
typedef struct RkGas RkGas;
enum { RK_GAS_OK = 0, RK_GAS_DECODE_ERR = 1, RK_GAS_UNREACHABLE = 2 };
typedef int (*rk_gas_access_fn)(void *opaque, int write, unsigned node, uint64_t local, void *buf,
                                unsigned len);
typedef uint64_t (*rk_gas_counter_fn)(void *opaque, unsigned ctrl_offset);

RkGas *rk_gas_new(unsigned node_id, unsigned node_count, rk_gas_access_fn access, rk_gas_counter_fn counter,
                  rk_log_fn log, void *opaque);
void rk_gas_free(RkGas *g);
uint64_t rk_gas_window_size(RkGas *g);
/* 0 on success, -1 when the access must end in a bus error. */
int rk_gas_window_read(RkGas *g, uint64_t offset, unsigned size, uint64_t *value);
int rk_gas_window_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size);
uint64_t rk_gas_ctrl_read(RkGas *g, uint64_t offset, unsigned size);
void rk_gas_ctrl_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_UNIMEM_CAPI_H */
