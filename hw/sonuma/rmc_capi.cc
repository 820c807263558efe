// SPDX-License-Identifier: MIT
// C interface of the soNUMA RMC core; see rmc_capi.h.
#include "rmc_capi.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "rmc.h"

using namespace rackemu::sonuma;

struct RkRmc {
    std::unique_ptr<Rmc> core;
    RkFabricEndpoint *ep = nullptr; // RKF_SVC_RMC on the node's port; NULL: no fabric
};

namespace {

void on_request(void *opaque, RkFabricEndpoint *, const rkf_frame_hdr *h, const void *payload)
{
    auto *r = static_cast<RkRmc *>(opaque);
    if (r->core) r->core->on_frame(*h, payload);
}

void on_reply(void *opaque, const rkf_frame_hdr *h, const void *payload)
{
    auto *r = static_cast<RkRmc *>(opaque);
    if (r->core) r->core->on_reply(*h, payload);
}

void on_link(void *opaque, int up)
{
    auto *r = static_cast<RkRmc *>(opaque);
    if (r->core) r->core->on_link(up != 0);
}

} // namespace

extern "C" RkRmc *rk_rmc_new(const rk_rmc_config *c, const RkHost *host, char *err, unsigned errlen)
{
    auto bad = [&](const char *why) -> RkRmc * {
        std::snprintf(err, errlen, "rackemu-rmc: %s", why);
        return nullptr;
    };
    if (!host || !host->ops) return bad("no host interface");
    if (host->node_count < 1 || host->node_count > RKF_MAX_NODES || host->node_id >= host->node_count)
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
    cfg.timing.llc_resident = c->llc_resident != 0;
    cfg.speculation = c->speculation != 0;
    cfg.window_delay_ns = c->window_delay_ns;
    cfg.timeout_ms = c->timeout_ms;
    cfg.window_blocks = c->window_blocks;
    cfg.seg_base = c->seg_base;
    cfg.seg_size = c->seg_size;
    cfg.direct = c->direct != 0;

    auto *r = new RkRmc;
    // The RMC's link to the fabric: its service's endpoint on the host's port (bound before the
    // core exists, so the callbacks above check for it; the machine starts the port later).
    static const rk_fabric_service ops = {on_request, on_reply, on_link};
    r->ep = rk_fabric_bind(host->port, RKF_SVC_RMC, &ops, r);
    RmcFabric fab;
    if (r->ep) {
        fab.send = [r](rkf_frame_hdr &h, const void *p) { return rk_fabric_endpoint_send(r->ep, &h, p); };
        fab.reply = [r](const rkf_frame_hdr &req, uint16_t st, const void *p, uint16_t len) {
            return rk_fabric_endpoint_reply(r->ep, &req, st, p, len);
        };
        fab.up = [r] { return rk_fabric_endpoint_up(r->ep) != 0; };
    }
    // The direct path over the node's remote memory (its peers' RAM files, docs/sonuma.md "Direct
    // path"): on when the machine turned it on there (ram-dir) and property `direct` is on.
    RmcDirect direct;
    if (RkRemoteMem *m = host->rmem) {
        direct.own =
            static_cast<rmc_pub *>(rk_rmem_tail_area(m, RK_RMEM_TAIL_RMC_OFF, RK_RMEM_TAIL_RMC_SIZE));
        if (direct.own) {
            direct.run = [m](unsigned node, rk_rmem_direct_fn fn, void *opaque, int *ret) {
                return rk_rmem_direct_run(m, node, fn, opaque, ret);
            };
        }
    }
    r->core = std::make_unique<Rmc>(cfg, rackemu::Host(*host), std::move(fab), std::move(direct));
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

extern "C" const char *rk_rmc_reg_name(RkRmc *r, uint64_t offset)
{
    static thread_local std::string name;
    name = r->core->reg_name(offset);
    return name.c_str();
}

extern "C" void rk_rmc_pause(RkRmc *r, int on)
{
    r->core->pause(on != 0);
}

extern "C" void rk_rmc_save(RkRmc *r, rk_rmc_state *st, rk_rmc_xfer_state **xfer, uint32_t *nxfer)
{
    RmcState s = r->core->save();
    *st = s.regs;
    *nxfer = uint32_t(s.xfer.size());
    *xfer = nullptr;
    if (!s.xfer.empty()) {
        *xfer = static_cast<rk_rmc_xfer_state *>(std::calloc(s.xfer.size(), sizeof(rk_rmc_xfer_state)));
        if (!*xfer) {
            *nxfer = 0;
            return;
        }
        std::memcpy(*xfer, s.xfer.data(), s.xfer.size() * sizeof(rk_rmc_xfer_state));
    }
}

extern "C" int rk_rmc_load(RkRmc *r, const rk_rmc_state *st, const rk_rmc_xfer_state *xfer, uint32_t nxfer)
{
    if (nxfer > RmcState::kMaxXfers || (nxfer && !xfer)) return -EINVAL;
    RmcState s;
    s.regs = *st;
    s.xfer.assign(xfer, xfer + nxfer);
    return r->core->load(s) ? 0 : -EINVAL;
}
