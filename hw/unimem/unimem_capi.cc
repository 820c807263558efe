// SPDX-License-Identifier: MIT
// The Unimem cores' device operations; see unimem_capi.h.
#include "unimem_capi.h"

#include "device_ops.h"
#include "gas.h"
#include "packetizer.h"
#include "rk_fabric_endpoint.h"
#include "vmbox.h"

#include <cstdio>
#include <new>

using namespace rackemu::unimem;
using rackemu::DeviceOps;

namespace {

void *vmbox_create(const RkHost *host, const void *cfg, char *err, size_t errlen)
{
    const auto *c = static_cast<const RkVmboxConfig *>(cfg);
    if (!c || c->depth < 1 || c->depth > 65536) {
        snprintf(err, errlen, "fifo-depth %u out of range 1..65536", c ? c->depth : 0);
        return nullptr;
    }
    VmboxConfig vc;
    vc.depth = c->depth;
    vc.burst_known_issue = c->burst_known_issue != 0;
    vc.kif = c->kif != 0;
    return new (std::nothrow) Vmbox(rackemu::Host(*host), vc);
}

void *pktz_create(const RkHost *host, const void *cfg, char *err, size_t errlen)
{
    const auto *c = static_cast<const RkPktzConfig *>(cfg);
    if (!c || !c->vmbox) {
        snprintf(err, errlen, "the 'vmbox' link (this node's mailbox) is not set");
        return nullptr;
    }
    PacketizerConfig pc;
    pc.vmbox = static_cast<Vmbox *>(c->vmbox);
    pc.kif = c->kif != 0;
    pc.ack_first = c->ack_first != 0;
    pc.trace = c->trace;
    pc.trace_opaque = c->trace_opaque;
    return new (std::nothrow) Packetizer(rackemu::Host(*host), pc);
}

void *gas_create(const RkHost *host, const void *, char *, size_t)
{
    return new (std::nothrow) Gas(rackemu::Host(*host));
}

// RKF_SVC_UNIMEM_MBOX, with the packetizer as the opaque (rackemu/device.h).
void pktz_on_request(void *core, RkFabricEndpoint *ep, const rkf_frame_hdr *h, const void *payload)
{
    static_cast<Packetizer *>(core)->serve_request(ep, *h, payload);
}
void pktz_on_reply(void *core, const rkf_frame_hdr *h, const void *)
{
    static_cast<Packetizer *>(core)->serve_reply(*h);
}
void pktz_on_link(void *core, int up)
{
    if (!up) static_cast<Packetizer *>(core)->fail_all_pending();
}
const rk_fabric_service pktz_service = {pktz_on_request, pktz_on_reply, pktz_on_link};

using V = DeviceOps<Vmbox>;
using P = DeviceOps<Packetizer>;
using G = DeviceOps<Gas>;

// the largest state: every FIFO full at the largest depth, plus the registers
constexpr uint64_t kVmboxStateMax = uint64_t(UNIMEM_IF_TOTAL) * (4 + 65536 * 8) + 4096;

} // namespace

extern "C" {

const RkDeviceOps rk_vmbox_device_ops = {
    .name = "rackemu-vmbox",
    .create = vmbox_create,
    .free = V::free,
    .nregions = 1,
    .regions = {{"rackemu-vmbox", VMBOX_MMIO_SIZE, 0, V::read<&Vmbox::region_read>,
                 V::write<&Vmbox::region_write>, nullptr}},
    .nirqs = 1,
    .msix_bar = -1,
    .reset = V::reset,
    .pause = V::pause,
    .irq_level = V::irq_level,
    .state_version = 1,
    .state_max = kVmboxStateMax,
    .save = V::save,
    .load = V::load<65536>,
    .fabric_svc = -1,
    .fabric = nullptr,
    .eth_class = -1,
    .frame = nullptr,
    .ntimers = 0,
    .timer = nullptr,
    .tx_resume = nullptr,
};

const RkDeviceOps rk_pktz_device_ops = {
    .name = "rackemu-packetizer",
    .create = pktz_create,
    .free = P::free,
    .nregions = 1,
    .regions = {{"rackemu-packetizer", PKTZ_MMIO_SIZE, 0, P::read<&Packetizer::region_read>,
                 P::write<&Packetizer::region_write>, nullptr}},
    .nirqs = 1,
    .msix_bar = -1,
    .reset = P::reset,
    .pause = nullptr,
    .irq_level = nullptr,
    .state_version = 1,
    .state_max = 64 * 1024,
    .save = P::save,
    .load = P::load<0>,
    .fabric_svc = RKF_SVC_UNIMEM_MBOX,
    .fabric = &pktz_service,
    .eth_class = -1,
    .frame = nullptr,
    .ntimers = 0,
    .timer = nullptr,
    .tx_resume = nullptr,
};

const RkDeviceOps rk_gas_device_ops = {
    .name = "rackemu-gas",
    .create = gas_create,
    .free = G::free,
    .nregions = 2,
    .regions = {{"rackemu-gas", GAS_CTRL_SIZE, 0, G::read<&Gas::ctrl_region_read>,
                 G::write<&Gas::ctrl_region_write>, nullptr},
                {"rackemu-gas-window", 64 * GAS_WINDOW_NODE_SIZE, 0, G::read<&Gas::window_region_read>,
                 G::write<&Gas::window_region_write>, nullptr}},
    .nirqs = 0,
    .msix_bar = -1,
    .reset = nullptr,
    .pause = nullptr,
    .irq_level = nullptr,
    .state_version = 1,
    .state_max = 4096,
    .save = G::save,
    .load = G::load<0>,
    .fabric_svc = -1,
    .fabric = nullptr,
    .eth_class = -1,
    .frame = nullptr,
    .ntimers = 0,
    .timer = nullptr,
    .tx_resume = nullptr,
};

int rk_pktz_ack_first(void *core)
{
    return static_cast<Packetizer *>(core)->ack_first() ? 1 : 0;
}
void rk_pktz_set_ack_first(void *core, int on)
{
    static_cast<Packetizer *>(core)->set_ack_first(on != 0);
}
uint64_t rk_pktz_acks(void *core, int first)
{
    return static_cast<Packetizer *>(core)->acks(first != 0);
}

} // extern "C"
