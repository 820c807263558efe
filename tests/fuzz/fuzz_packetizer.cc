// SPDX-License-Identifier: MIT
// libFuzzer harness of the Unimem packetizer core (hw/unimem/packetizer.h); docs/fuzzing.md.
//
// Input: operations
//   0 MMIO store (offset, value, size)   1 MMIO load (offset, size)
//   2 fabric reply for RKF_SVC_UNIMEM_MBOX (tag: one the core sent or forged; status), as the
//     node's reply handler turns it into a completion
//   3 link down (fail_all_pending)       4 reset
//   5 set the host's mode: transmit answers at once (ACK/NACK/fabric error, inside transmit) or
//     later (op 2)
// Checked: every packet handed to transmit() has a PIF in range and a destination inside the
// 40-bit global address space; a PIF's status never shows ACK and NACK together.
#include "fuzz_input.h"

#include <string>
#include <vector>

#include "rackemu/fabric_proto.h"
#include "packetizer.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {

// ---- adapter: the host side of the core (the one place that knows today's PacketizerHost) ----
struct Host {
    Packetizer *core = nullptr;
    int inline_answer = -1; // -1: answer later; else Completion to give inside transmit()
    std::vector<uint64_t> tags;
    unsigned errors = 0;
    PacketizerHost make()
    {
        PacketizerHost h;
        h.transmit = [this](unsigned pif, uint64_t tag, uint64_t dest, const uint64_t words[4]) {
            FUZZ_CHECK(pif < UNIMEM_IF_COUNT);
            FUZZ_CHECK((dest & ~PKTZ_DEST_MASK) == 0);
            FUZZ_CHECK(tag >> 56 == pif);
            (void)words[3];
            tags.push_back(tag);
            if (inline_answer >= 0) core->complete(tag, Completion(inline_answer));
        };
        h.guest_error = [this](const std::string &) { errors++; };
        return h;
    }
    // The RKF_SVC_UNIMEM_MBOX reply handler (today in hw/qemu/rackemu_unimem.c,
    // rackemu_unimem_on_reply).
    void mbox_reply(const rkf_frame_hdr &h)
    {
        core->complete(h.tag, h.status == RKF_ST_OK        ? Completion::Ack
                              : h.status == RKF_ST_REFUSED ? Completion::Nack
                                                           : Completion::FabricError);
    }
};
// ---- end of adapter ----

const unsigned kSizes[] = {1, 2, 4, 8, 3, 16, 0};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    Host host;
    Packetizer p(host.make());
    host.core = &p;
    for (unsigned ops = 0; !in.empty() && ops < 4096; ops++) {
        switch (in.u8() % 6) {
        case 0: {
            const uint64_t off = in.u32() % (PKTZ_MMIO_SIZE + 0x100);
            const uint64_t val = in.u64();
            p.write(off, val, kSizes[in.u8() % 7]);
            break;
        }
        case 1: {
            const uint64_t off = in.u32() % (PKTZ_MMIO_SIZE + 0x100);
            (void)p.read(off, kSizes[in.u8() % 7]);
            break;
        }
        case 2: {
            rkf_frame_hdr h{};
            h.type = RKF_T_REPLY;
            h.svc = RKF_SVC_UNIMEM_MBOX;
            h.op = RKF_OP_MBOX_DELIVER;
            const uint8_t which = in.u8();
            h.status = in.u8() % 8;
            if (which < 0xc0 && !host.tags.empty()) {
                h.tag = host.tags[which % host.tags.size()];
            } else {
                h.tag = in.u64();
            }
            host.mbox_reply(h);
            break;
        }
        case 3:
            p.fail_all_pending();
            break;
        case 4:
            p.reset();
            break;
        case 5: {
            const uint8_t m = in.u8() % 4;
            host.inline_answer = m == 3 ? -1 : int(m);
            break;
        }
        }
    }
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        const uint32_t st = p.status(i);
        FUZZ_CHECK(!((st & PKTZ_ST_ACK) && (st & PKTZ_ST_NACK)));
    }
    return 0;
}
