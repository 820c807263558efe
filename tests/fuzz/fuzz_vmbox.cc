// SPDX-License-Identifier: MIT
// libFuzzer harness of the Unimem vmbox core (hw/unimem/vmbox.h); docs/fuzzing.md.
//
// Input: one config byte (FIFO depth, burst known-issue mode), then operations:
//   0 MMIO store (offset, value, size)   1 MMIO load (offset, size)
//   2 fabric frame for RKF_SVC_UNIMEM_MBOX (header fields + payload), parsed as the node does
//   3 packetizer burst deliver(mif, nwords, words)   4 reset
// Checked: after every operation the interrupt line the host saw equals irq_level(); at the end
// no FIFO holds more than its depth.
#include "fuzz_input.h"

#include <cstddef>
#include <string>

#include "rackemu/fabric_proto.h"
#include "vmbox.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {

// ---- adapter: the host side of the core (the one place that knows today's VmboxHost) ----
struct Host {
    bool irq = false;
    unsigned irq_calls = 0, errors = 0;
    VmboxHost make()
    {
        VmboxHost h;
        h.set_irq = [this](bool level) {
            irq = level;
            irq_calls++;
        };
        h.guest_error = [this](const std::string &) { errors++; };
        return h;
    }
    // The RKF_SVC_UNIMEM_MBOX request handler. Today it lives in the QEMU glue
    // (hw/qemu/rackemu_unimem.c, rackemu_unimem_on_request); this is the same validation, so that
    // the core sees what a peer can make it see. Returns the reply status (-1: no reply).
    int mbox_request(Vmbox &v, const rkf_frame_hdr &h, const void *payload)
    {
        rkf_mbox_deliver d{};
        const size_t hdr = offsetof(rkf_mbox_deliver, words);
        std::memcpy(&d, payload, std::min<size_t>(h.len, sizeof d));
        if (h.type != RKF_T_REQ || h.op != RKF_OP_MBOX_DELIVER || h.len < hdr + 8 || d.nwords < 1 ||
            d.nwords > 8 || h.len != hdr + d.nwords * 8 || d.mif >= UNIMEM_IF_COUNT) {
            return h.type == RKF_T_REQ ? int(RKF_ST_BAD_FRAME) : -1;
        }
        return v.deliver(d.mif, d.words, d.nwords) == Vmbox::Delivery::Ack ? int(RKF_ST_OK)
                                                                           : int(RKF_ST_REFUSED);
    }
};
// ---- end of adapter ----

const unsigned kSizes[] = {1, 2, 4, 8, 3, 16, 0};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    const uint8_t cfg = in.u8();
    const unsigned depth = 1u + (cfg & 0x3f) * ((cfg & 0x40) ? 8u : 1u);
    Host host;
    Vmbox v(host.make(), depth, (cfg & 0x80) != 0);
    FUZZ_CHECK(v.depth() == depth);
    for (unsigned ops = 0; !in.empty() && ops < 4096; ops++) {
        switch (in.u8() % 5) {
        case 0: {
            const uint64_t off = in.u32() % (VMBOX_MMIO_SIZE + 0x100);
            const uint64_t val = in.u64();
            v.write(off, val, kSizes[in.u8() % 7]);
            break;
        }
        case 1: {
            const uint64_t off = in.u32() % (VMBOX_MMIO_SIZE + 0x100);
            uint64_t val = 1;
            const unsigned sz = kSizes[in.u8() % 7];
            if (v.read(off, sz, val) == Vmbox::Result::BusError) FUZZ_CHECK(val == 0);
            break;
        }
        case 2: {
            rkf_frame_hdr h{};
            h.magic = RKF_FRAME_MAGIC;
            h.type = in.u8();
            h.svc = RKF_SVC_UNIMEM_MBOX;
            h.op = in.u16();
            h.src = in.u8() % RKF_MAX_NODES;
            h.len = in.u16() % (RKF_MAX_PAYLOAD + 1); // the port drops longer frames
            h.tag = in.u64();
            unsigned char payload[RKF_MAX_PAYLOAD];
            in.bytes(payload, h.len);
            const int st = host.mbox_request(v, h, payload);
            FUZZ_CHECK(st == -1 || st == int(RKF_ST_OK) || st == int(RKF_ST_REFUSED) ||
                       st == int(RKF_ST_BAD_FRAME));
            break;
        }
        case 3: {
            const unsigned mif = in.u8();
            const unsigned nwords = in.u8() % 20;
            uint64_t words[20];
            in.bytes(words, sizeof words);
            v.deliver(mif, words, nwords);
            break;
        }
        case 4:
            v.reset();
            break;
        }
        FUZZ_CHECK(host.irq == v.irq_level());
    }
    for (unsigned m = 0; m < UNIMEM_IF_COUNT; m++)
        FUZZ_CHECK(v.fill(m) <= depth);
    return 0;
}
