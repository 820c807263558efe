// SPDX-License-Identifier: MIT
// C interface of the soNUMA RMC core; see rmc_capi.h.
#include "rmc_capi.h"

#include <cstdio>
#include <memory>

#include "rmc.h"

using namespace rackemu::sonuma;

struct RkRmc {
    std::unique_ptr<Rmc> core;
    RkFabricEndpoint *ep = nullptr; // RKF_SVC_RMC on the node's port; NULL: no fabric
};

namespace {

void on_request(void *opaque, RkFabricEndpoint *, const rkf_frame_hdr *h, const void *payload)
{
    static_cast<RkRmc *>(opaque)->core->on_frame(*h, payload);
}

void on_reply(void *opaque, const rkf_frame_hdr *h, const void *payload)
{
    static_cast<RkRmc *>(opaque)->core->on_reply(*h, payload);
}

void on_link(void *opaque, int up)
{
    static_cast<RkRmc *>(opaque)->core->on_link(up != 0);
}

} // namespace

extern "C" RkRmc *rk_rmc_new(const rk_rmc_config *c, RkFabricPort *port, rk_rmc_irq_fn irq, rk_rmc_log_fn log,
                             void *opaque, char *err, unsigned errlen)
{
    auto bad = [&](const char *why) -> RkRmc * {
        std::snprintf(err, errlen, "rackemu-rmc: %s", why);
        return nullptr;
    };
    if (c->node_count < 1 || c->node_count > RKF_MAX_NODES || c->node_id >= c->node_count)
        return bad("node-id/node-count out of range (node-id < node-count <= 64)");
    if (c->att_entries < 1 || c->att_entries > RMC_ATT_MAX) return bad("att-entries out of range 1..64");
    if (c->sb_depth < 1 || c->sb_depth > RMC_SB_MAX) return bad("sb-depth out of range 1..64");
    if (c->rmc_mhz < 1 || c->link_gbps < 1 || c->r2p2_gbps < 1 || c->r2p2_count < 1 || c->issue_cycles < 1)
        return bad("rmc-mhz, link-gbps, r2p2-gbps, r2p2-count and r2p2-issue-cycles must be at least 1");
    if (c->timeout_ms < 1 || c->timeout_ms > 600000) return bad("timeout-ms out of range 1..600000");
    if (c->window_blocks < RMC_SABRE_MAX / RMC_BLOCK_SIZE || c->window_blocks > 65536)
        return bad("rgp-window-blocks out of range 1024..65536 (a whole SABRe must fit)");
    if (c->window_delay_ns > 1000000000ull) return bad("sabre-window-delay-ns above 1 s");

    RmcConfig cfg;
    cfg.node_id = c->node_id;
    cfg.node_count = c->node_count;
    cfg.timing.rmc_mhz = c->rmc_mhz;
    cfg.timing.mem_ns = c->mem_ns;
    cfg.timing.llc_ns = c->llc_ns;
    cfg.timing.hop_ns = c->hop_ns;
    cfg.timing.hops = c->hops;
    cfg.timing.link_gbps = c->link_gbps;
    cfg.timing.r2p2_gbps = c->r2p2_gbps;
    cfg.timing.r2p2_count = c->r2p2_count;
    cfg.timing.issue_cycles = c->issue_cycles;
    cfg.timing.pkt_hdr = c->pkt_hdr;
    cfg.timing.att_entries = c->att_entries;
    cfg.timing.sb_depth = c->sb_depth;
    cfg.speculation = c->speculation != 0;
    cfg.window_delay_ns = c->window_delay_ns;
    cfg.timeout_ms = c->timeout_ms;
    cfg.window_blocks = c->window_blocks;
    cfg.seg_base = c->seg_base;
    cfg.seg_size = c->seg_size;

    auto *r = new RkRmc;
    RmcHost host;
    host.ram = static_cast<uint8_t *>(c->ram_host);
    host.ram_base = c->ram_base;
    host.ram_size = c->ram_host ? c->ram_size : 0;
    if (port) {
        host.send = [r](rkf_frame_hdr &h, const void *p) { return rk_fabric_endpoint_send(r->ep, &h, p); };
        host.reply = [r](const rkf_frame_hdr &req, uint16_t st, const void *p, uint16_t len) {
            return rk_fabric_endpoint_reply(r->ep, &req, st, p, len);
        };
        host.fabric_up = [r] { return rk_fabric_endpoint_up(r->ep) != 0; };
    }
    host.irq_changed = [irq, opaque] {
        if (irq) irq(opaque);
    };
    host.guest_error = [log, opaque](const std::string &m) {
        if (log) log(opaque, m.c_str());
    };
    r->core = std::make_unique<Rmc>(cfg, std::move(host));
    static const rk_fabric_service ops = {on_request, on_reply, on_link};
    r->ep = rk_fabric_bind(port, RKF_SVC_RMC, &ops, r);
    return r;
}

extern "C" void rk_rmc_free(RkRmc *r)
{
    if (!r) return;
    rk_fabric_unbind(r->ep);
    delete r;
}

extern "C" uint64_t rk_rmc_read(RkRmc *r, uint64_t offset, unsigned size)
{
    return r->core->mmio_read(offset, size);
}

extern "C" void rk_rmc_write(RkRmc *r, uint64_t offset, uint64_t value, unsigned size)
{
    r->core->mmio_write(offset, value, size);
}

extern "C" void rk_rmc_reset(RkRmc *r)
{
    r->core->reset();
}

extern "C" int rk_rmc_irq_level(RkRmc *r)
{
    return r->core->irq_level() ? 1 : 0;
}
