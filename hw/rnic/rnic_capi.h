/* SPDX-License-Identifier: MIT */
/*
 * The C API of the RNIC device core (hw/rnic/rnic.h) for its QEMU glue (hw/qemu/rackemu_rnic.c):
 * its configuration, the check of its atomic unit's properties, and its device operations
 * (rackemu/device.h), which the generic adapter (hw/qemu/rackemu_device.c) serves.
 */
#ifndef RACKEMU_RNIC_CAPI_H
#define RACKEMU_RNIC_CAPI_H

#include <stddef.h>
#include <stdint.h>

#include "rackemu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The timing model (docs/rnic.md "Timing model"); the glue's properties. */
typedef struct RkRnicTiming {
    uint32_t link_mbps; /* link bandwidth, Mbit/s */
    uint32_t hop_ns;    /* latency per hop */
    uint32_t nic_mhz;   /* NIC pipeline clock */
    uint32_t pcie_ns;   /* one-way PCIe latency */
    uint32_t pcie_mbps; /* PCIe bandwidth, MByte/s */
    uint32_t max_mtu;   /* largest path MTU, 256..4096 */
    /* the responder's rate ceilings (docs/rnic.md "Rate ceilings"), ns; 0: off */
    uint32_t atomic_host_ns; /* one atomic to host memory (serialized per device) */
    uint32_t atomic_dm_ns;   /* one atomic to device memory (serialized per device) */
    uint32_t qp_msg_ns;      /* one request message on its QP */
} RkRnicTiming;

/* The atomic unit's properties (docs/atomic-unit.md "Properties"; amu-* on the device). The
 * unit's clock is the NIC's (RkRnicTiming.nic_mhz). rate_limit: "off", "aging", "hostq", "both";
 * raw: "none", "ack", "flush"; NULL: the default (both, ack). */
typedef struct RkRnicAmu {
    uint32_t host_lat_ns, host_mbps, mem_ns, net_mbps;
    uint32_t msg_bytes, rdreq_bytes, wrreq_bytes, resp_bytes;
    uint32_t cache_lines, cache_ways, lookahead, regs, input_queue, host_queue, tags;
    uint32_t age_max, hostq_threshold, raw_entries, cache_cycles, conflict_bypass;
    const char *rate_limit;
    const char *raw;
} RkRnicAmu;

/* 0 if `a` is valid; else -1 and a message naming the bad property (amu-...) in msg. */
int rk_rnic_amu_check(const RkRnicAmu *a, uint32_t nic_mhz, char *msg, size_t len);

/* The version of the saved state (rk_rnic_device_ops.state_version, the glue's VMState version):
 * bump it with every change of hw/rnic/rnic_state.h's lists. */
#define RK_RNIC_STATE_VERSION 4u

/* The device's configuration (its QOM properties), rk_rnic_device_ops' create. */
typedef struct RkRnicConfig {
    RkRnicTiming timing;
    RkRnicAmu amu;
    /* the direct path over the host's remote memory (docs/rnic.md "Direct path"); 0: the
     * core ignores RkHost.rmem */
    int direct;
    /* bytes of device memory (dm-size; docs/rnic.md "Device memory"): a multiple of 64 up to
     * RNIC_DM_SIZE_MAX (create refuses others); 0: none */
    uint32_t dm_size;
    /* ACK coalescing (docs/rnic.md "ACK coalescing"): an owed ACK waits for ack_every (1..)
     * AckReq packets or ack_delay_ns; ack_delay_ns 0: ACK at the end of each receive burst */
    uint32_t ack_every;
    uint32_t ack_delay_ns;
} RkRnicConfig;

/*
 * The device operations (rackemu/device.h): BAR0 registers and BAR2 doorbell pages, 8 MSI-X
 * vectors (BAR4), the port's link state through the RKF_SVC_ETH service, RoCEv2 frames from
 * the port's Ethernet receiver, timer 0 (retransmission, RNR waits, ACKs owed), tx_resume after
 * backpressure, and the state (hw/rnic/rnic_state.h) as one string. create refuses a bad
 * configuration (an atomic unit property, a path MTU) with a message. Without a port
 * (RkHost.port NULL) frames to other nodes are dropped and counted.
 */
extern const RkDeviceOps rk_rnic_device_ops;

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_RNIC_CAPI_H */
