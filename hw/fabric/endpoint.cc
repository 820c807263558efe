// SPDX-License-Identifier: MIT
// A device's endpoint on the node's fabric port; see rk_fabric_endpoint.h.
#include "rk_fabric_endpoint.h"

#include <cerrno>

struct RkFabricEndpoint {
    RkFabricPort *port;
    unsigned svc;
    rk_fabric_service ops;
    void *opaque;
};

namespace {

void ep_on_request(void *opaque, RkFabricPort *, const rkf_frame_hdr *h, const void *payload)
{
    auto *ep = static_cast<RkFabricEndpoint *>(opaque);
    if (ep->ops.on_request) {
        ep->ops.on_request(ep->opaque, ep, h, payload);
    } else if (h->type == RKF_T_REQ) {
        rk_fabric_port_reply(ep->port, h, RKF_ST_BAD_FRAME, nullptr, 0);
    }
}

void ep_on_reply(void *opaque, const rkf_frame_hdr *h, const void *payload)
{
    auto *ep = static_cast<RkFabricEndpoint *>(opaque);
    if (ep->ops.on_reply) ep->ops.on_reply(ep->opaque, h, payload);
}

void ep_on_link(void *opaque, int up)
{
    auto *ep = static_cast<RkFabricEndpoint *>(opaque);
    if (ep->ops.on_link) ep->ops.on_link(ep->opaque, up);
}

} // namespace

extern "C" {

RkFabricEndpoint *rk_fabric_bind(RkFabricPort *port, unsigned svc, const rk_fabric_service *ops, void *opaque)
{
    if (!port || svc >= RKF_SVC_COUNT) return nullptr;
    auto *ep = new RkFabricEndpoint{port, svc, ops ? *ops : rk_fabric_service{}, opaque};
    rk_fabric_port_register(port, svc, ep_on_request, ep_on_reply, ep_on_link, ep);
    return ep;
}

void rk_fabric_unbind(RkFabricEndpoint *ep)
{
    if (!ep) return;
    rk_fabric_port_register(ep->port, ep->svc, nullptr, nullptr, nullptr, nullptr);
    delete ep;
}

int rk_fabric_endpoint_send(RkFabricEndpoint *ep, struct rkf_frame_hdr *hdr, const void *payload)
{
    if (!ep) return -ENOTCONN;
    hdr->svc = uint8_t(ep->svc);
    return rk_fabric_port_send(ep->port, hdr, payload);
}

int rk_fabric_endpoint_reply(RkFabricEndpoint *ep, const struct rkf_frame_hdr *req, uint16_t status,
                             const void *payload, uint16_t len)
{
    if (!ep) return -ENOTCONN;
    return rk_fabric_port_reply(ep->port, req, status, payload, len);
}

int rk_fabric_endpoint_drive(RkFabricEndpoint *ep, int (*done)(void *), void *arg, uint64_t max_ns)
{
    return ep ? rk_fabric_port_drive(ep->port, done, arg, max_ns) : done(arg);
}

int rk_fabric_endpoint_up(RkFabricEndpoint *ep)
{
    return ep ? rk_fabric_port_is_up(ep->port) : 0;
}

} // extern "C"
