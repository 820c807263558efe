/* SPDX-License-Identifier: MIT */
/*
 * The C face of the persistence-domain core (hw/pmem/pmem.h) for the QEMU glue: its device
 * operations (rackemu/device.h) and the reports the glue and the RNIC make (docs/pmem.md).
 * `core` is the pointer rk_pmem_ops.create returned.
 */
#ifndef RACKEMU_PMEM_CAPI_H
#define RACKEMU_PMEM_CAPI_H

#include <stdint.h>

#include "rackemu/device.h"
#include "rackemu/pmem_regs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The configuration rk_pmem_ops.create takes (the glue's QOM properties). */
typedef struct RkPmemConfig {
    uint64_t base;         /* guest physical base of the region, 64-byte aligned */
    uint64_t size;         /* bytes, a non-zero multiple of PMEM_LINE_SIZE */
    uint32_t mode;         /* PMEM_MODE_* */
    uint32_t nic_entries;  /* NIC buffer entries, 0..PMEM_NIC_ENTRIES_MAX (0: none) */
    uint64_t nic_delay_ns; /* acknowledgement to placement */
    uint32_t llc_lines;    /* 1..PMEM_LLC_LINES_MAX */
    uint64_t seed;         /* eviction victims */
    const char *image;     /* the durable image's file; NULL: memory (lost with the process) */
} RkPmemConfig;

extern const RkDeviceOps rk_pmem_ops;

/* The host's reports; each returns RK_OK, RK_DECODE_ERROR (a range outside the region),
 * RK_UNREACHABLE (after a cut), RK_SLAVE_ERROR (a NIC write of a bad length). */
rk_status rk_pmem_cpu_dirty(void *core, uint64_t addr, uint64_t len);
rk_status rk_pmem_cpu_writeback(void *core, uint64_t addr, uint64_t len);
rk_status rk_pmem_flush(void *core, uint64_t addr, uint64_t len);
rk_status rk_pmem_placed(void *core, uint64_t addr, uint64_t len);
rk_status rk_pmem_nic_accept(void *core, uint64_t addr, const void *data, uint64_t len, uint64_t *seq);
unsigned rk_pmem_nic_drain(void *core);
/* "none", "eadr", "adr", "adr-ddio" -> PMEM_MODE_*; 0 for anything else. */
int rk_pmem_parse_mode(const char *s, uint32_t *mode);
/* The durable image's bytes of [addr, addr + len) (RK_DECODE_ERROR outside the region). */
rk_status rk_pmem_durable_read(void *core, uint64_t addr, void *buf, uint64_t len);
/* Counter PMEM_CNT_INDEX_* (the gauges computed); 0 for an index beyond them. */
uint64_t rk_pmem_counter(void *core, unsigned idx);
/* The host's RkHostOps.nvm (rackemu/host.h) on this region: RK_DECODE_ERROR when [addr,
 * addr + len) is not inside it, else the op above it names. */
rk_status rk_pmem_nvm(void *core, unsigned op, uint64_t addr, const void *data, uint64_t len);
/* A power cut now, keeping the pending lines `pick` chooses (PMEM_PICK_NONE, _ALL, _RANDOM with
 * `seed`), then RAM loaded from the surviving image: the LOST_* counters say what was lost.
 * The glue reports the dirty log first (the stores made since its last report). */
#define PMEM_PICK_NONE   0u
#define PMEM_PICK_ALL    1u
#define PMEM_PICK_RANDOM 3u
rk_status rk_pmem_power_cut(void *core, uint32_t pick, uint64_t seed);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RACKEMU_PMEM_CAPI_H */
