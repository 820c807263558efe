// SPDX-License-Identifier: MIT
// The RNIC core's C API (rnic_capi.h): its configuration and its device operations.
#include "rnic_capi.h"

#include <cstdio>

#include "device_ops.h"
#include "rackemu/fabric_proto.h"
#include "rk_fabric_endpoint.h"
#include "rk_fabric_port.h"
#include "rnic.h"

using rackemu::DeviceOps;
using rackemu::Host;
using rackemu::rnic::AmuConfig;
using rackemu::rnic::Rnic;
using rackemu::rnic::RnicConfig;

namespace {

// The unit's configuration of `a`; what is wrong with it in *err (nullptr: nothing).
AmuConfig amu_config(const RkRnicAmu &a, uint32_t nic_mhz, const char **err)
{
    AmuConfig c;
    c.nic_mhz = nic_mhz;
    c.host_lat_ns = a.host_lat_ns;
    c.host_mbps = a.host_mbps;
    c.mem_ns = a.mem_ns;
    c.net_mbps = a.net_mbps;
    c.msg_bytes = a.msg_bytes;
    c.rdreq_bytes = a.rdreq_bytes;
    c.wrreq_bytes = a.wrreq_bytes;
    c.resp_bytes = a.resp_bytes;
    c.cache_lines = a.cache_lines;
    c.cache_ways = a.cache_ways;
    c.lookahead = a.lookahead;
    c.regs = a.regs;
    c.input_queue = a.input_queue;
    c.host_queue = a.host_queue;
    c.tags = a.tags;
    c.age_max = a.age_max;
    c.hostq_threshold = a.hostq_threshold;
    c.raw_entries = a.raw_entries;
    c.cache_cycles = a.cache_cycles;
    c.conflict_bypass = a.conflict_bypass;
    *err = nullptr;
    if (a.rate_limit && !rackemu::rnic::amu_rate_limit_from(a.rate_limit, &c.rate_limit))
        *err = "rate-limit must be off, aging, hostq or both";
    else if (a.raw && !rackemu::rnic::amu_raw_from(a.raw, &c.raw))
        *err = "raw must be none, ack or flush";
    else
        *err = rackemu::rnic::amu_check_config(c);
    return c;
}

Rnic *of(void *core)
{
    return static_cast<Rnic *>(core);
}

void *create(const RkHost *host, const void *config, char *err, size_t errlen)
{
    const RkRnicConfig &c = *static_cast<const RkRnicConfig *>(config);
    const RkRnicTiming &t = c.timing;
    RnicConfig cfg;
    cfg.timing = {t.link_mbps, t.hop_ns,         t.nic_mhz,      t.pcie_ns,  t.pcie_mbps,
                  t.max_mtu,   t.atomic_host_ns, t.atomic_dm_ns, t.qp_msg_ns};
    const char *bad = nullptr;
    cfg.amu = amu_config(c.amu, cfg.timing.nic_mhz, &bad);
    if (bad) {
        std::snprintf(err, errlen, "atomic unit: amu-%s (docs/atomic-unit.md \"Properties\")", bad);
        return nullptr;
    }
    if (c.dm_size % RNIC_DM_ALIGN || c.dm_size > RNIC_DM_SIZE_MAX) {
        std::snprintf(err, errlen,
                      "dm-size %u: a multiple of %u up to %u bytes (docs/rnic.md \"Device memory\")",
                      c.dm_size, RNIC_DM_ALIGN, RNIC_DM_SIZE_MAX);
        return nullptr;
    }
    cfg.dm_size = c.dm_size;
    if (c.ack_every == 0) {
        std::snprintf(err, errlen,
                      "ack-every 0: an ACK answers at least 1 request (docs/rnic.md \"ACK coalescing\")");
        return nullptr;
    }
    cfg.rc.ack_every = c.ack_every;
    cfg.rc.ack_delay_ns = c.ack_delay_ns;
    cfg.link = host->port != nullptr; // without a port, frames to other nodes are dropped
    rkf_eth_node_mac(host->node_id, cfg.mac);
    cfg.ip = rkf_eth_node_ipv4(host->node_id);
    // The direct path over the node's remote memory (docs/rnic.md "Direct path"): on when the
    // machine turned it on there (ram-dir) and the configuration asks for it (property `direct`).
    if (RkRemoteMem *m = c.direct ? host->rmem : nullptr) {
        cfg.direct.own =
            static_cast<rnic_pub *>(rk_rmem_tail_area(m, RK_RMEM_TAIL_RNIC_OFF, RK_RMEM_TAIL_RNIC_SIZE));
        if (cfg.direct.own) {
            cfg.direct.own_bytes = RK_RMEM_TAIL_RNIC_SIZE;
            cfg.direct.node = host->node_id;
            if (host->port) cfg.direct.live = rk_fabric_port_liveness(host->port);
            cfg.direct.run = [m](unsigned node, rk_rmem_direct_fn fn, void *opaque, int *ret) {
                return rk_rmem_direct_run(m, node, fn, opaque, ret);
            };
        }
    }
    return new Rnic(Host(*host), cfg);
}

// The port's link state (STATUS.LINK_UP, PORT_ACTIVE / PORT_ERR): the RNIC's frames take the
// port's Ethernet receiver, so its RKF_SVC_ETH service carries only link changes.
void on_link(void *core, int up)
{
    of(core)->set_link(up != 0);
}

const struct rk_fabric_service kLinkService = {nullptr, nullptr, on_link};

void on_frame(void *core, const uint8_t *frame, size_t len)
{
    of(core)->on_frame(frame, len);
}

void on_timer(void *core, unsigned)
{
    of(core)->poll();
}

int tx_resume(void *core)
{
    return of(core)->tx_resume() ? 1 : 0;
}

} // namespace

extern "C" {

int rk_rnic_amu_check(const RkRnicAmu *a, uint32_t nic_mhz, char *msg, size_t len)
{
    const char *err = nullptr;
    amu_config(*a, nic_mhz, &err);
    if (!err) return 0;
    if (msg && len) std::snprintf(msg, len, "amu-%s (docs/atomic-unit.md \"Properties\")", err);
    return -1;
}

using Ops = DeviceOps<Rnic>;

const RkDeviceOps rk_rnic_device_ops = {
    .name = RACKEMU_RNIC_TYPE,
    .create = create,
    .free = Ops::free,
    .nregions = 2,
    .regions = {{RACKEMU_RNIC_TYPE, RNIC_BAR_CTRL_SIZE, RNIC_BAR_CTRL, Ops::read<&Rnic::ctrl_read>,
                 Ops::write<&Rnic::ctrl_write>, nullptr},
                {"rackemu-rnic-db", RNIC_BAR_DB_SIZE, RNIC_BAR_DB, Ops::read<&Rnic::db_read>,
                 Ops::write<&Rnic::db_write>, nullptr}},
    .nirqs = RNIC_MSIX_VECTORS,
    .msix_bar = RNIC_BAR_MSIX,
    .reset = Ops::reset,
    .pause = Ops::pause,
    .irq_level = Ops::irq_level,
    .state_version = rackemu::rnic::kRnicStateVersion,
    .state_max = rackemu::rnic::kStateMax,
    .save = Ops::save,
    .load = Ops::load<rackemu::rnic::kListMax>,
    .fabric_svc = RKF_SVC_ETH,
    .fabric = &kLinkService,
    .eth_class = RK_FABRIC_ETH_ROCE,
    .frame = on_frame,
    .ntimers = 1,
    .timer = on_timer,
    .tx_resume = tx_resume,
};

} // extern "C"
