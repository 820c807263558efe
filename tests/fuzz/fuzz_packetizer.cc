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
//   6 save, optionally corrupt one field, load into a second core: a corrupt state is refused,
//     a sound one reads back identically, its waiting PIFs completed with NACK|FABRIC_ERR
// Checked: every packet handed to transmit() has a PIF in range and a destination inside the
// 40-bit global address space; a PIF's status never shows ACK and NACK together.
#include "fuzz_input.h"

#include <string>
#include <vector>

#include "packetizer.h"
#include "rackemu/fabric_proto.h"
#include "test_host.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {

// The host side (tests/unit/test_host.h) and the transmit link, which answers at once or later.
struct Host {
    rackemu::test::TestHost th;
    Packetizer *core = nullptr;
    int inline_answer = -1; // -1: answer later; else the rk_status to give inside transmit()
    std::vector<uint64_t> tags;
    rackemu::Host make()
    {
        th.guest_error = [](const std::string &) {};
        return th.host();
    }
    PacketizerTransmit link()
    {
        return [this](unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t words[4]) {
            FUZZ_CHECK(pif < UNIMEM_IF_TOTAL && mif < UNIMEM_IF_TOTAL);
            FUZZ_CHECK(mif != UNIMEM_KIF || pif == UNIMEM_KIF); // only the KIF names a KIF
            FUZZ_CHECK((dest & ~PKTZ_DEST_MASK) == 0);
            FUZZ_CHECK(tag >> 56 == pif);
            (void)words[3];
            tags.push_back(tag);
            if (inline_answer >= 0) core->complete(tag, rackemu::Status(inline_answer));
        };
    }
};

const unsigned kSizes[] = {1, 2, 4, 8, 3, 16, 0};

// Every register of the device, read as the guest would.
std::vector<uint64_t> registers(Packetizer &p)
{
    std::vector<uint64_t> r;
    for (const auto &reg : Packetizer::reg_table()) {
        for (unsigned k = 0; k < reg.count; k++)
            r.push_back(p.read(reg.offset + uint64_t(k) * reg.step(), 8));
    }
    return r;
}

void save_load(Packetizer &p, uint8_t how, uint8_t which, uint64_t val)
{
    PacketizerState st = p.save();
    auto &pif = st.pifs[which % UNIMEM_IF_TOTAL];
    switch (how % 6) {
    case 1:
        if (which & 0x80) {
            st.kif_pidt = val; // the KIF's TIF registers
            st.kif_conf = val >> 56;
        } else {
            st.pidt[which % UNIMEM_IF_COUNT] = val;
        }
        break;
    case 2:
        st.base_dest = val;
        break;
    case 3:
        pif.status = uint32_t(val);
        break;
    case 4:
        pif.waiting = (val & 1) != 0;
        break;
    case 5:
        pif.written[val % 3] = uint16_t(val >> 8);
        break;
    }
    // a device without the KIF loads only a KIF in its reset state
    const bool q_kif = (how & 0x40) == 0;
    const auto &k = st.pifs[UNIMEM_KIF];
    const bool kif_reset = k.status == 0 && !k.waiting && !(k.written[0] | k.written[1] | k.written[2]) &&
                           k.regs == decltype(k.regs){} && st.kif_pidt == 0 && st.kif_conf == 0;
    Host h2;
    Packetizer q(h2.make(), h2.link(), q_kif);
    h2.core = &q;
    const std::vector<uint64_t> before = registers(q);
    if (!q.load(st)) {
        FUZZ_CHECK(how % 6 != 0 || (!q_kif && !kif_reset)); // an unchanged state always loads
        FUZZ_CHECK(registers(q) == before);
        return;
    }
    FUZZ_CHECK(q_kif || kif_reset);
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        const uint32_t s = q.status(i);
        FUZZ_CHECK(!(s & PKTZ_ST_PEND)); // nothing waits after a load
        if (st.pifs[i].waiting)
            FUZZ_CHECK((s & (PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR)) == (PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR));
    }
    const PacketizerState back = q.save();
    FUZZ_CHECK(back.pidt == st.pidt && back.base_dest == st.base_dest && back.pid_conf == st.pid_conf);
    FUZZ_CHECK(back.kif_pidt == st.kif_pidt && back.kif_conf == st.kif_conf);
    if (how % 6 == 0 && q_kif) {
        bool waiting = false;
        for (const auto &f : st.pifs)
            waiting |= f.waiting;
        if (!waiting) FUZZ_CHECK(registers(q) == registers(p));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    Host host;
    Packetizer p(host.make(), host.link());
    host.core = &p;
    unsigned saves = 0;
    for (unsigned ops = 0; !in.empty() && ops < 4096; ops++) {
        switch (in.u8() % 7) {
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
            p.serve_reply(h); // the node's RKF_SVC_UNIMEM_MBOX reply handler
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
            host.inline_answer = m == 3   ? -1
                                 : m == 2 ? int(RK_UNREACHABLE)
                                          : int(m); // OK, NACK, fabric error
            break;
        }
        case 6: {
            const uint8_t how = in.u8(), which = in.u8();
            const uint64_t val = in.u64();
            if (saves++ < 2) save_load(p, how, which, val); // costly: twice per input is enough
            break;
        }
        }
    }
    for (unsigned i = 0; i < UNIMEM_IF_TOTAL; i++) {
        const uint32_t st = p.status(i);
        FUZZ_CHECK(!((st & PKTZ_ST_ACK) && (st & PKTZ_ST_NACK)));
    }
    return 0;
}
