// SPDX-License-Identifier: MIT
// C wrappers over the Unimem device cores; see unimem_capi.h.
#include "unimem_capi.h"

#include "packetizer.h"
#include "vmbox.h"

using namespace rackemu::unimem;

struct RkVmbox {
    Vmbox core;
};
struct RkPacketizer {
    Packetizer core;
};

extern "C" {

RkVmbox *rk_vmbox_new(unsigned depth, int burst_known_issue, rk_irq_fn irq, rk_log_fn log, void *opaque)
{
    VmboxHost h{[irq, opaque](bool level) { irq(opaque, level); },
                [log, opaque](const std::string &m) { log(opaque, m.c_str()); }};
    return new RkVmbox{Vmbox(std::move(h), depth, burst_known_issue != 0)};
}
void rk_vmbox_free(RkVmbox *v) { delete v; }
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
int rk_vmbox_irq_level(RkVmbox *v) { return v->core.irq_level(); }
void rk_vmbox_reset(RkVmbox *v) { v->core.reset(); }

RkPacketizer *rk_pktz_new(rk_pktz_tx_fn tx, rk_log_fn log, void *opaque)
{
    PacketizerHost h{[tx, opaque](unsigned pif, uint64_t tag, uint64_t dest, const uint64_t w[4]) {
                         tx(opaque, pif, tag, dest, w);
                     },
                     [log, opaque](const std::string &m) { log(opaque, m.c_str()); }};
    return new RkPacketizer{Packetizer(std::move(h))};
}
void rk_pktz_free(RkPacketizer *p) { delete p; }
uint64_t rk_pktz_read(RkPacketizer *p, uint64_t offset, unsigned size) { return p->core.read(offset, size); }
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
void rk_pktz_fail_all(RkPacketizer *p) { p->core.fail_all_pending(); }
void rk_pktz_reset(RkPacketizer *p) { p->core.reset(); }

} // extern "C"
