// SPDX-License-Identifier: MIT
// C wrappers over the Unimem device cores; see unimem_capi.h.
#include "unimem_capi.h"

#include "gas.h"
#include "packetizer.h"
#include "vmbox.h"

#include <algorithm>
#include <cstdlib>

using namespace rackemu::unimem;

struct RkVmbox {
    Vmbox core;
};
struct RkPacketizer {
    Packetizer core;
};
struct RkGas {
    Gas core;
};

extern "C" {

RkVmbox *rk_vmbox_new(const RkHost *host, unsigned depth, int burst_known_issue, int kif)
{
    return new RkVmbox{Vmbox(rackemu::Host(*host), depth, burst_known_issue != 0, kif != 0)};
}
void rk_vmbox_free(RkVmbox *v)
{
    delete v;
}
rk_status rk_vmbox_read(RkVmbox *v, uint64_t offset, unsigned size, uint64_t *value)
{
    return v->core.read(offset, size, *value);
}
rk_status rk_vmbox_write(RkVmbox *v, uint64_t offset, uint64_t value, unsigned size)
{
    return v->core.write(offset, value, size);
}
rk_status rk_vmbox_deliver(RkVmbox *v, unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords)
{
    return v->core.deliver(mif, src_if, words, nwords);
}
int rk_vmbox_serve_frame(RkVmbox *v, const struct rkf_frame_hdr *h, const void *payload)
{
    return v->core.serve_frame(*h, payload);
}
rk_status rk_vmbox_deliver_answer_first(RkVmbox *v, unsigned mif, unsigned src_if, const uint64_t *words,
                                        unsigned nwords, rk_vmbox_answer_fn answer, void *opaque)
{
    return v->core.deliver(mif, src_if, words, nwords, [&](rk_status st) { answer(opaque, int(st)); });
}
int rk_vmbox_serve_frame_answer_first(RkVmbox *v, const struct rkf_frame_hdr *h, const void *payload,
                                      rk_vmbox_answer_fn answer, void *opaque)
{
    return v->core.serve_frame(*h, payload, [&](int reply) { answer(opaque, reply); });
}
int rk_vmbox_irq_level(RkVmbox *v)
{
    return v->core.irq_level();
}
void rk_vmbox_reset(RkVmbox *v)
{
    v->core.reset();
}
void rk_vmbox_freeze(RkVmbox *v, int on)
{
    v->core.freeze(on != 0);
}
void rk_vmbox_state_free(RkVmboxState *st)
{
    free(st->words);
    st->words = nullptr;
    st->nwords = 0;
}
void rk_vmbox_save(RkVmbox *v, RkVmboxState *st)
{
    const VmboxState s = v->core.save();
    rk_vmbox_state_free(st);
    st->depth = s.depth;
    st->irq_enable = s.irq_enable;
    size_t n = 0;
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        st->fill[i] = uint32_t(s.fifos[i].size());
        n += s.fifos[i].size();
    }
    st->kif_fill = uint32_t(s.fifos[UNIMEM_KIF].size());
    n += s.fifos[UNIMEM_KIF].size();
    st->kif_ctrl = s.kif_ctrl;
    std::copy(s.kif_counters.begin(), s.kif_counters.end(), st->kif_counters);
    st->words = static_cast<uint64_t *>(malloc(std::max<size_t>(n, 1) * sizeof(uint64_t)));
    for (const auto &f : s.fifos) {
        std::copy(f.begin(), f.end(), st->words + st->nwords);
        st->nwords += uint32_t(f.size());
    }
    for (unsigned i = 0; i < VMBOX_CNT_COUNT; i++)
        st->counters[i] = s.counters[i];
    st->counters[VMBOX_CNT_COUNT] = s.empty_reads;
    st->counters[VMBOX_CNT_COUNT + 1] = s.bad_access;
}
int rk_vmbox_load(RkVmbox *v, const RkVmboxState *st)
{
    VmboxState s;
    s.depth = st->depth;
    s.irq_enable = st->irq_enable;
    uint64_t total = 0;
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        const uint32_t fill = i == UNIMEM_KIF ? st->kif_fill : st->fill[i];
        if (fill > st->depth) return -1;
        total += fill;
    }
    if (total != st->nwords || (total && !st->words)) return -1;
    uint64_t at = 0;
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        const uint32_t fill = i == UNIMEM_KIF ? st->kif_fill : st->fill[i];
        s.fifos[i].assign(st->words + at, st->words + at + fill);
        at += fill;
    }
    s.kif_ctrl = st->kif_ctrl;
    std::copy(st->kif_counters, st->kif_counters + VMBOX_KIF_CNT_COUNT, s.kif_counters.begin());
    for (unsigned i = 0; i < VMBOX_CNT_COUNT; i++)
        s.counters[i] = st->counters[i];
    s.empty_reads = st->counters[VMBOX_CNT_COUNT];
    s.bad_access = st->counters[VMBOX_CNT_COUNT + 1];
    return v->core.load(s) ? 0 : -1;
}

RkPacketizer *rk_pktz_new(const RkHost *host, rk_pktz_tx_fn tx, void *tx_opaque, int kif)
{
    PacketizerTransmit link;
    if (tx) {
        link = [tx, tx_opaque](unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t w[4]) {
            tx(tx_opaque, pif, tag, dest, mif, w);
        };
    }
    return new RkPacketizer{Packetizer(rackemu::Host(*host), std::move(link), kif != 0)};
}
void rk_pktz_free(RkPacketizer *p)
{
    delete p;
}
uint64_t rk_pktz_read(RkPacketizer *p, uint64_t offset, unsigned size)
{
    return p->core.read(offset, size);
}
void rk_pktz_write(RkPacketizer *p, uint64_t offset, uint64_t value, unsigned size)
{
    p->core.write(offset, value, size);
}
void rk_pktz_complete(RkPacketizer *p, uint64_t tag, rk_status st)
{
    p->core.complete(tag, st);
}
void rk_pktz_serve_reply(RkPacketizer *p, const struct rkf_frame_hdr *h)
{
    p->core.serve_reply(*h);
}
void rk_pktz_fail_all(RkPacketizer *p)
{
    p->core.fail_all_pending();
}
void rk_pktz_reset(RkPacketizer *p)
{
    p->core.reset();
}
uint32_t rk_pktz_status(RkPacketizer *p, unsigned pif)
{
    return p->core.status(pif);
}
void rk_pktz_save(RkPacketizer *p, RkPktzState *st)
{
    const PacketizerState s = p->core.save();
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        const auto &f = s.pifs[i];
        std::copy(f.regs.begin(), f.regs.end(), st->pif_regs + 6 * i);
        std::copy(f.written.begin(), f.written.end(), st->pif_written + 3 * i);
        st->pif_status[i] = f.status;
        st->pif_waiting[i] = f.waiting;
        st->pidt[i] = s.pidt[i];
    }
    st->base_dest = s.base_dest;
    st->pid_conf = s.pid_conf;
    const auto &k = s.pifs[UNIMEM_KIF];
    std::copy(k.regs.begin(), k.regs.end(), st->kif_regs);
    std::copy(k.written.begin(), k.written.end(), st->kif_written);
    st->kif_status = k.status;
    st->kif_waiting = k.waiting;
    st->kif_pidt = s.kif_pidt;
    st->kif_conf = s.kif_conf;
    std::copy(s.kif_counters.begin(), s.kif_counters.end(), st->kif_counters);
    for (unsigned i = 0; i < PKTZ_CNT_COUNT; i++)
        st->counters[i] = s.counters[i];
    st->counters[PKTZ_CNT_COUNT] = s.fabric_errors;
    st->counters[PKTZ_CNT_COUNT + 1] = s.overwrites;
    st->counters[PKTZ_CNT_COUNT + 2] = s.stale_completions;
    st->counters[PKTZ_CNT_COUNT + 3] = s.bad_access;
}
int rk_pktz_load(RkPacketizer *p, const RkPktzState *st)
{
    PacketizerState s;
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        auto &f = s.pifs[i];
        if (st->pif_waiting[i] > 1) return -1;
        std::copy(st->pif_regs + 6 * i, st->pif_regs + 6 * i + 6, f.regs.begin());
        std::copy(st->pif_written + 3 * i, st->pif_written + 3 * i + 3, f.written.begin());
        f.status = st->pif_status[i];
        f.waiting = st->pif_waiting[i] != 0;
        s.pidt[i] = st->pidt[i];
    }
    s.base_dest = st->base_dest;
    s.pid_conf = st->pid_conf;
    if (st->kif_waiting > 1) return -1;
    auto &k = s.pifs[UNIMEM_KIF];
    std::copy(st->kif_regs, st->kif_regs + 6, k.regs.begin());
    std::copy(st->kif_written, st->kif_written + 3, k.written.begin());
    k.status = st->kif_status;
    k.waiting = st->kif_waiting != 0;
    s.kif_pidt = st->kif_pidt;
    s.kif_conf = st->kif_conf;
    std::copy(st->kif_counters, st->kif_counters + PKTZ_KIF_CNT_COUNT, s.kif_counters.begin());
    for (unsigned i = 0; i < PKTZ_CNT_COUNT; i++)
        s.counters[i] = st->counters[i];
    s.fabric_errors = st->counters[PKTZ_CNT_COUNT];
    s.overwrites = st->counters[PKTZ_CNT_COUNT + 1];
    s.stale_completions = st->counters[PKTZ_CNT_COUNT + 2];
    s.bad_access = st->counters[PKTZ_CNT_COUNT + 3];
    return p->core.load(s) ? 0 : -1;
}

RkGas *rk_gas_new(const RkHost *host)
{
    return new RkGas{Gas(rackemu::Host(*host))};
}
void rk_gas_free(RkGas *g)
{
    delete g;
}
uint64_t rk_gas_window_size(RkGas *g)
{
    return g->core.window_size();
}
rk_status rk_gas_window_read(RkGas *g, uint64_t offset, unsigned size, uint64_t *value)
{
    return g->core.window_read(offset, size, *value);
}
rk_status rk_gas_window_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size)
{
    return g->core.window_write(offset, value, size);
}
uint64_t rk_gas_ctrl_read(RkGas *g, uint64_t offset, unsigned size)
{
    return g->core.ctrl_read(offset, size);
}
void rk_gas_ctrl_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size)
{
    g->core.ctrl_write(offset, value, size);
}
static_assert(RK_GAS_STATE_COUNTERS == kGasOwnCounters, "RkGasState carries the window's own counters");
void rk_gas_save(RkGas *g, RkGasState *st)
{
    const GasState s = g->core.save();
    st->node_id = s.node_id;
    st->node_count = s.node_count;
    for (unsigned i = 0; i < RK_GAS_STATE_COUNTERS; i++)
        st->counters[i] = s.counters[i];
}
int rk_gas_load(RkGas *g, const RkGasState *st)
{
    GasState s;
    s.node_id = st->node_id;
    s.node_count = st->node_count;
    for (unsigned i = 0; i < RK_GAS_STATE_COUNTERS; i++)
        s.counters[i] = st->counters[i];
    return g->core.load(s) ? 0 : -1;
}

} // extern "C"
