// SPDX-License-Identifier: MIT
// The soNUMA RMC core as a rackemu device; see rmc_capi.h.
#include "rmc_capi.h"

#include <cstdio>
#include <string>

#include "device_ops.h"
#include "rk_fabric_endpoint.h"
#include "rmc.h"

using namespace rackemu::sonuma;
using Ops = rackemu::DeviceOps<Rmc>;

namespace {

void *create(const RkHost *host, const void *config, char *err, size_t errlen)
{
    auto bad = [&](const char *why) -> void * {
        std::snprintf(err, errlen, "%s", why);
        return nullptr;
    };
    const auto *c = static_cast<const rk_rmc_config *>(config);
    if (!host || !host->ops || !c) return bad("no host interface or configuration");
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
    // the fabric link is the service's endpoint host->ep, the direct path host->rmem (rmc.h)
    return new Rmc(cfg, rackemu::Host(*host));
}

const char *reg_name(void *core, uint64_t offset)
{
    static thread_local std::string name;
    name = Ops::of(core)->reg_name(offset);
    return name.c_str();
}

// RKF_SVC_RMC, with the core as the opaque (the adapter calls these once the core exists).
void on_request(void *core, RkFabricEndpoint *, const rkf_frame_hdr *h, const void *payload)
{
    Ops::of(core)->on_frame(*h, payload);
}
void on_reply(void *core, const rkf_frame_hdr *h, const void *payload)
{
    Ops::of(core)->on_reply(*h, payload);
}
void on_link(void *core, int up)
{
    Ops::of(core)->on_link(up != 0);
}
const rk_fabric_service service = {on_request, on_reply, on_link};

// A saved state: the fixed part, and at most every WQ slot in flight (RmcXferState, < 64 bytes).
constexpr uint64_t kStateMax = (64u << 10) + uint64_t(RmcState::kMaxXfers) * 64;

} // namespace

extern "C" const RkDeviceOps rk_rmc_device_ops = {
    .name = "rackemu-rmc",
    .create = create,
    .free = Ops::free,
    .nregions = 1,
    .regions = {{"rackemu-rmc", RMC_MMIO_SIZE, 0, Ops::read<&Rmc::mmio_read>, Ops::write<&Rmc::mmio_write>,
                 reg_name}},
    .nirqs = 1,
    .msix_bar = -1,
    .reset = Ops::reset,
    .pause = Ops::pause,
    .irq_level = Ops::irq_level,
    .state_version = 1,
    .state_max = kStateMax,
    .save = Ops::save,
    .load = Ops::load<RmcState::kMaxXfers>,
    .fabric_svc = RKF_SVC_RMC,
    .fabric = &service,
    .eth_class = -1,
    .frame = nullptr,
    .ntimers = 0,
    .timer = nullptr,
    .tx_resume = nullptr,
};
