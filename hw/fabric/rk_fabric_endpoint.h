/* SPDX-License-Identifier: MIT */
/*
 * A device's endpoint on the node's fabric port: the only view of the fabric a device core or
 * its glue has (send a frame, answer a request, the link state, the node id). One call,
 * rk_fabric_bind(), binds any device's service to the port; the RMC, the Unimem packetizer and
 * vmbox, and one-sided remote memory (the GAS window, cDMA) all bind through it.
 *
 * A NULL endpoint is valid everywhere and stands for "this node has no fabric": sends fail with
 * -ENOTCONN and the link is down, so a device needs no special case beyond its log line.
 */
#ifndef RK_FABRIC_ENDPOINT_H
#define RK_FABRIC_ENDPOINT_H

#include <stdint.h>

#include "rk_fabric_port.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkFabricEndpoint RkFabricEndpoint;

/* The service's callbacks (any may be NULL). They run on the port thread and must not block
 * for long; see rk_fabric_port.h for the contract of each. A request must be answered with
 * rk_fabric_endpoint_reply() (now or later). */
struct rk_fabric_service {
    void (*on_request)(void *opaque, RkFabricEndpoint *ep, const struct rkf_frame_hdr *hdr,
                       const void *payload);
    void (*on_reply)(void *opaque, const struct rkf_frame_hdr *hdr, const void *payload);
    void (*on_link)(void *opaque, int up);
};

/* Register service `svc` (RKF_SVC_*) with `port` and return its endpoint; NULL if `port` is
 * NULL (no fabric) or `svc` is out of range. Bind before rk_fabric_port_start(). */
RkFabricEndpoint *rk_fabric_bind(RkFabricPort *port, unsigned svc, const struct rk_fabric_service *ops,
                                 void *opaque);
/* Unregister the service and free the endpoint (NULL: nothing). */
void rk_fabric_unbind(RkFabricEndpoint *ep);

/* Send a frame of this endpoint's service (hdr->svc is set to it). Returns 0 or a negative
 * errno as rk_fabric_port_send(); -ENOTCONN for a NULL endpoint. */
int rk_fabric_endpoint_send(RkFabricEndpoint *ep, struct rkf_frame_hdr *hdr, const void *payload);
/* Answer `req` with status and payload. */
int rk_fabric_endpoint_reply(RkFabricEndpoint *ep, const struct rkf_frame_hdr *req, uint16_t status,
                             const void *payload, uint16_t len);
/* Drive the endpoint's port from this thread while it waits for a reply: rk_fabric_port_drive().
 * Returns done(arg) for a NULL endpoint. */
int rk_fabric_endpoint_drive(RkFabricEndpoint *ep, int (*done)(void *arg), void *arg, uint64_t max_ns);
/* 1 if the link to the bridge is up, 0 otherwise (and for a NULL endpoint). */
int rk_fabric_endpoint_up(RkFabricEndpoint *ep);

#ifdef __cplusplus
}
#endif

#endif /* RK_FABRIC_ENDPOINT_H */
