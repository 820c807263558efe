// SPDX-License-Identifier: MIT
// The RNIC core's C API (rnic_capi.h).
#include "rnic_capi.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rackemu/fabric_proto.h"
#include "rnic.h"

#include <cstdio>

using rackemu::Host;
using rackemu::rnic::AmuConfig;
using rackemu::rnic::LinkTx;
using rackemu::rnic::Rnic;
using rackemu::rnic::RnicConfig;

struct RkRnic {
    std::unique_ptr<Rnic> core;
};

namespace {

// A malloc()ed copy of a record array (NULL when empty), for the C side to free().
template <typename T> T *dup_records(const std::vector<T> &v)
{
    if (v.empty()) return nullptr;
    T *p = static_cast<T *>(malloc(v.size() * sizeof(T)));
    if (!p) abort(); // as the glue's g_malloc: out of memory is fatal
    std::memcpy(p, v.data(), v.size() * sizeof(T));
    return p;
}

// The records of a C array (none when NULL).
template <typename T> std::vector<T> to_vector(const T *p, uint32_t n)
{
    return p ? std::vector<T>(p, p + n) : std::vector<T>{};
}

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

} // namespace

extern "C" {

void rk_rnic_amu_defaults(RkRnicAmu *a)
{
    const AmuConfig c;
    *a = RkRnicAmu{
        c.host_lat_ns,  c.host_mbps,       c.mem_ns,      c.net_mbps,   c.msg_bytes,       c.rdreq_bytes,
        c.wrreq_bytes,  c.resp_bytes,      c.cache_lines, c.cache_ways, c.lookahead,       c.regs,
        c.input_queue,  c.host_queue,      c.tags,        c.age_max,    c.hostq_threshold, c.raw_entries,
        c.cache_cycles, c.conflict_bypass, nullptr,       nullptr};
}

int rk_rnic_amu_check(const RkRnicAmu *a, uint32_t nic_mhz, char *msg, size_t len)
{
    const char *err = nullptr;
    amu_config(*a, nic_mhz, &err);
    if (!err) return 0;
    if (msg && len) std::snprintf(msg, len, "amu-%s (docs/atomic-unit.md \"Properties\")", err);
    return -1;
}

RkRnic *rk_rnic_new(const RkHost *host, const RkRnicTiming *t, const RkRnicAmu *amu, int link,
                    rk_rnic_send_fn send, rk_rnic_timer_fn timer, rk_rnic_tx_wait_fn tx_wait, void *opaque)
{
    RnicConfig cfg;
    if (t) cfg.timing = {t->link_mbps, t->hop_ns, t->nic_mhz, t->pcie_ns, t->pcie_mbps, t->max_mtu};
    if (amu) {
        const char *err = nullptr;
        cfg.amu = amu_config(*amu, cfg.timing.nic_mhz, &err);
        if (err) { // the glue refuses these at realize: a defined result for any other caller
            Host(*host).guest_errorf("rnic: atomic unit property refused (amu-%s): the defaults are used",
                                     err);
            cfg.amu = AmuConfig{};
            cfg.amu.nic_mhz = cfg.timing.nic_mhz;
        }
    } else {
        cfg.amu.nic_mhz = cfg.timing.nic_mhz;
    }
    cfg.link = link != 0;
    rkf_eth_node_mac(host->node_id, cfg.mac);
    cfg.ip = rkf_eth_node_ipv4(host->node_id);
    // The direct path over the node's remote memory (docs/rnic.md "Direct path"): on when the
    // machine turned it on there (ram-dir) and the glue passed it (property `direct`).
    if (RkRemoteMem *m = host->rmem) {
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
void rk_rnic_set_link(RkRnic *r, int up)
{
    r->core->set_link(up != 0);
}
int rk_rnic_irq_level(RkRnic *r, unsigned v)
{
    return r->core->irq_level(v) ? 1 : 0;
}

void rk_rnic_pause(RkRnic *r, int on)
{
    r->core->pause(on != 0);
}

void rk_rnic_save(RkRnic *r, RkRnicSaved *out)
{
    const rackemu::rnic::RnicSnapshot s = r->core->save();
    *out = RkRnicSaved{};
    out->st = s.st;
    out->mr = dup_records(s.mr);
    out->pages = dup_records(s.pages);
    out->cq = dup_records(s.cq);
    out->qp = dup_records(s.qp);
    out->wr = dup_records(s.wr);
    out->sqe = dup_records(s.sqe);
    out->res = dup_records(s.res);
}

void rk_rnic_saved_free(RkRnicSaved *s)
{
    free(s->mr);
    free(s->pages);
    free(s->cq);
    free(s->qp);
    free(s->wr);
    free(s->sqe);
    free(s->res);
    *s = RkRnicSaved{};
}

int rk_rnic_load(RkRnic *r, const RkRnicSaved *in, char *msg, size_t len)
{
    rackemu::rnic::RnicSnapshot s;
    s.st = in->st;
    // the counts are checked against the records by load(); here only what the arrays hold
    s.mr = to_vector(in->mr, in->st.n_mr);
    s.pages = to_vector(in->pages, in->st.n_pages);
    s.cq = to_vector(in->cq, in->st.n_cq);
    s.qp = to_vector(in->qp, in->st.n_qp);
    s.wr = to_vector(in->wr, in->st.n_wr);
    s.sqe = to_vector(in->sqe, in->st.n_sqe);
    s.res = to_vector(in->res, in->st.n_res);
    std::string why;
    if (r->core->load(s, &why)) return 0;
    if (msg && len) snprintf(msg, len, "%s", why.c_str());
    return -EINVAL;
}

} // extern "C"
