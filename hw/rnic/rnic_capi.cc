// SPDX-License-Identifier: MIT
// The RNIC core's C API (rnic_capi.h).
#include "rnic_capi.h"

#include <cerrno>

#include "rackemu/fabric_proto.h"
#include "rnic.h"

using rackemu::Host;
using rackemu::rnic::LinkTx;
using rackemu::rnic::Rnic;
using rackemu::rnic::RnicConfig;

struct RkRnic {
    std::unique_ptr<Rnic> core;
};

extern "C" {

RkRnic *rk_rnic_new(const RkHost *host, const RkRnicTiming *t, int link, rk_rnic_send_fn send,
                    rk_rnic_timer_fn timer, rk_rnic_tx_wait_fn tx_wait, void *opaque)
{
    RnicConfig cfg;
    if (t) cfg.timing = {t->link_mbps, t->hop_ns, t->nic_mhz, t->pcie_ns, t->pcie_mbps, t->max_mtu};
    cfg.link = link != 0;
    rkf_eth_node_mac(host->node_id, cfg.mac);
    cfg.ip = rkf_eth_node_ipv4(host->node_id);
    auto *r = new RkRnic;
    r->core = std::make_unique<Rnic>(
        Host(*host), cfg,
        [send, opaque](const uint8_t *f, size_t n) {
            const int rc = send ? send(opaque, f, n) : -ENOTCONN;
            return rc == 0 ? LinkTx::Sent : rc == -EAGAIN ? LinkTx::Busy : LinkTx::Dropped;
        },
        [timer, opaque](uint64_t d) {
            if (timer) timer(opaque, d);
        },
        [tx_wait, opaque]() {
            if (tx_wait) tx_wait(opaque);
        });
    return r;
}

void rk_rnic_free(RkRnic *r)
{
    delete r;
}
uint64_t rk_rnic_ctrl_read(RkRnic *r, uint64_t o, unsigned s)
{
    return r->core->ctrl_read(o, s);
}
void rk_rnic_ctrl_write(RkRnic *r, uint64_t o, uint64_t v, unsigned s)
{
    r->core->ctrl_write(o, v, s);
}
uint64_t rk_rnic_db_read(RkRnic *r, uint64_t o, unsigned s)
{
    return r->core->db_read(o, s);
}
void rk_rnic_db_write(RkRnic *r, uint64_t o, uint64_t v, unsigned s)
{
    r->core->db_write(o, v, s);
}
void rk_rnic_on_frame(RkRnic *r, const uint8_t *f, size_t n)
{
    r->core->on_frame(f, n);
}
void rk_rnic_poll(RkRnic *r)
{
    r->core->poll();
}
int rk_rnic_tx_resume(RkRnic *r)
{
    return r->core->tx_resume() ? 1 : 0;
}
void rk_rnic_reset(RkRnic *r)
{
    r->core->reset();
}
int rk_rnic_irq_level(RkRnic *r, unsigned v)
{
    return r->core->irq_level(v) ? 1 : 0;
}

} // extern "C"
