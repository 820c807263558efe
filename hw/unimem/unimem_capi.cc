// SPDX-License-Identifier: MIT
// C wrappers over the Unimem device cores; see unimem_capi.h.
#include "unimem_capi.h"

#include "gas.h"
#include "packetizer.h"
#include "vmbox.h"

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

RkVmbox *rk_vmbox_new(unsigned depth, int burst_known_issue, rk_irq_fn irq, rk_log_fn log, void *opaque)
{
    VmboxHost h{[irq, opaque](bool level) { irq(opaque, level); },
                [log, opaque](const std::string &m) { log(opaque, m.c_str()); }};
    return new RkVmbox{Vmbox(std::move(h), depth, burst_known_issue != 0)};
}
void rk_vmbox_free(RkVmbox *v)
{
    delete v;
}
int rk_vmbox_read(RkVmbox *v, uint64_t offset, unsigned size, uint64_t *value)
{
    return v->core.read(offset, size, *value) == Vmbox::Result::Ok ? 0 : -1;
}
int rk_vmbox_write(RkVmbox *v, uint64_t offset, uint64_t value, unsigned size)
{
    return v->core.write(offset, value, size) == Vmbox::Result::Ok ? 0 : -1;
}
int rk_vmbox_deliver(RkVmbox *v, unsigned mif, const uint64_t *words, unsigned nwords)
{
    return v->core.deliver(mif, words, nwords) == Vmbox::Delivery::Ack;
}
int rk_vmbox_irq_level(RkVmbox *v)
{
    return v->core.irq_level();
}
void rk_vmbox_reset(RkVmbox *v)
{
    v->core.reset();
}

RkPacketizer *rk_pktz_new(rk_pktz_tx_fn tx, rk_log_fn log, void *opaque)
{
    PacketizerHost h{[tx, opaque](unsigned pif, uint64_t tag, uint64_t dest, const uint64_t w[4]) {
                         tx(opaque, pif, tag, dest, w);
                     },
                     [log, opaque](const std::string &m) { log(opaque, m.c_str()); }};
    return new RkPacketizer{Packetizer(std::move(h))};
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
void rk_pktz_complete(RkPacketizer *p, uint64_t tag, int result)
{
    p->core.complete(tag, result == RK_PKTZ_ACK    ? Completion::Ack
                          : result == RK_PKTZ_NACK ? Completion::Nack
                                                   : Completion::FabricError);
}
void rk_pktz_fail_all(RkPacketizer *p)
{
    p->core.fail_all_pending();
}
void rk_pktz_reset(RkPacketizer *p)
{
    p->core.reset();
}

RkGas *rk_gas_new(unsigned node_id, unsigned node_count, rk_gas_access_fn access, rk_gas_counter_fn counter,
                  rk_log_fn log, void *opaque)
{
    GasHost h{[access, opaque](bool write, unsigned node, uint64_t local, void *buf, unsigned len) {
                  switch (access(opaque, write, node, local, buf, len)) {
                  case RK_GAS_OK:
                      return GasAccess::Ok;
                  case RK_GAS_DECODE_ERR:
                      return GasAccess::DecodeError;
                  default:
                      return GasAccess::Unreachable;
                  }
              },
              [counter, opaque](unsigned off) { return counter ? counter(opaque, off) : 0; },
              [log, opaque](const std::string &m) { log(opaque, m.c_str()); }};
    return new RkGas{Gas(std::move(h), node_id, node_count)};
}
void rk_gas_free(RkGas *g)
{
    delete g;
}
uint64_t rk_gas_window_size(RkGas *g)
{
    return g->core.window_size();
}
int rk_gas_window_read(RkGas *g, uint64_t offset, unsigned size, uint64_t *value)
{
    return g->core.window_read(offset, size, *value) == Gas::Result::Ok ? 0 : -1;
}
int rk_gas_window_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size)
{
    return g->core.window_write(offset, value, size) == Gas::Result::Ok ? 0 : -1;
}
uint64_t rk_gas_ctrl_read(RkGas *g, uint64_t offset, unsigned size)
{
    return g->core.ctrl_read(offset, size);
}
void rk_gas_ctrl_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size)
{
    g->core.ctrl_write(offset, value, size);
}

} // extern "C"
