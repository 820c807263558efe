// SPDX-License-Identifier: MIT
// libFuzzer harness of the Unimem vmbox core (hw/unimem/vmbox.h); docs/fuzzing.md.
//
// Input: one config byte (FIFO depth, burst known-issue mode; depth bits 0x3f == 0x3e: a device
// without the KIF), then operations:
//   0 MMIO store (offset, value, size)   1 MMIO load (offset, size)
//   2 fabric frame for RKF_SVC_UNIMEM_MBOX (header fields + payload), parsed as the node does
//   3 packetizer burst deliver(mif, src_if, nwords, words) (mif, src_if mod 70: the KIF, 64,
//     and out-of-range ones)   4 reset
//   5 save, optionally corrupt one field, load into a second core: a corrupt state is refused,
//     a sound one reads back identically (every register and FIFO)
//   6 deliver(mif, src_if, nwords, words) answering first, with one nested operation
//     run inside the answer (none, a FIFO load or store, FLUSH, reset, save)
// Checked: while an answer runs (nothing nested) the packet is not visible: the FIFO's fill and
// the interrupt line are what they were before the delivery, and after it an accepted
// all-or-nothing packet is visible whole; after every operation the interrupt line the host saw
// equals irq_level(); a delivery
// into the KIF from anything but a KIF, or into a disabled KIF, is refused and changes no FIFO;
// at the end no FIFO (the KIF included) holds more than its depth.
#include "fuzz_input.h"

#include <cstddef>
#include <string>
#include <vector>

#include "rackemu/fabric_proto.h"
#include "test_host.h"
#include "vmbox.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {

// The host side: tests/unit/test_host.h, with the interrupt line recorded per call.
struct Host {
    rackemu::test::TestHost th;
    bool irq = false;
    unsigned irq_calls = 0;
    rackemu::Host make()
    {
        th.set_irq = [this](unsigned line, bool level) {
            FUZZ_CHECK(line == 0);
            irq = level;
            irq_calls++;
        };
        th.guest_error = [](const std::string &) {};
        return th.host();
    }
};

const unsigned kSizes[] = {1, 2, 4, 8, 3, 16, 0};

// Every register of the device, read as the guest would (FIFO fills, control page, counters).
std::vector<uint64_t> registers(Vmbox &v)
{
    std::vector<uint64_t> r;
    for (const auto &reg : Vmbox::reg_table()) {
        for (unsigned k = 0; k < reg.count; k++) {
            uint64_t val = 0;
            FUZZ_CHECK(v.read(reg.offset + uint64_t(k) * reg.step(), 8, val) == RK_OK);
            r.push_back(val);
        }
    }
    return r;
}

// `held`: called while a delivery's answer runs: the state includes its held words, which the
// live core does not show yet, so their registers may differ.
void save_load(Vmbox &v, uint8_t how, uint8_t which, uint16_t val, bool held = false)
{
    VmboxState st = v.save();
    bool corrupt = false;
    switch (how % 4) {
    case 1: // another depth
        st.depth = val;
        corrupt = val != v.depth();
        break;
    case 2: // a FIFO fuller than the depth
        st.fifos[which % UNIMEM_IF_TOTAL].resize(v.depth() + 1 + val % 4);
        corrupt = true;
        break;
    case 3: // any contents that fit (the KIF's: only on a device with one)
        st.fifos[which % UNIMEM_IF_TOTAL].resize(val % (v.depth() + 1), val);
        corrupt = !v.has_kif() && !st.fifos[UNIMEM_KIF].empty();
        break;
    }
    if (which & 0x80) { // any KIF_CTRL: only its two bits, and only on a device with the KIF
        st.regs.kif_ctrl = val >> 8;
        corrupt |= (st.regs.kif_ctrl & ~(VMBOX_KIF_ENABLE | VMBOX_KIF_IRQ_ENABLE)) != 0 ||
                   (!v.has_kif() && st.regs.kif_ctrl);
    }
    Host h2;
    Vmbox w(h2.make(), v.depth(), false, v.has_kif());
    const std::vector<uint64_t> before = registers(w);
    FUZZ_CHECK(w.load(st) == !corrupt);
    if (corrupt) {
        FUZZ_CHECK(registers(w) == before);
        return;
    }
    FUZZ_CHECK(h2.irq == w.irq_level());
    const VmboxState back = w.save();
    FUZZ_CHECK(back.fifos == st.fifos && back.regs.cnt == st.regs.cnt &&
               back.regs.irq_enable == st.regs.irq_enable);
    FUZZ_CHECK(back.regs.kif_ctrl == st.regs.kif_ctrl && back.regs.kif_cnt == st.regs.kif_cnt);
    // the byte string (the device's save/load ops) carries the same state
    rackemu::StateOut out;
    w.save(out);
    Host h3;
    Vmbox x(h3.make(), v.depth(), false, v.has_kif());
    rackemu::StateIn sin(out.bytes().data(), out.bytes().size(), 65536);
    std::string why;
    FUZZ_CHECK(x.load(sin, &why));
    rackemu::StateOut again;
    x.save(again);
    FUZZ_CHECK(again.bytes() == out.bytes());
    if ((how % 4) == 0 && !(which & 0x80) && !held) FUZZ_CHECK(registers(w) == registers(v));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    const uint8_t cfg = in.u8();
    const unsigned depth = 1u + (cfg & 0x3f) * ((cfg & 0x40) ? 8u : 1u);
    Host host;
    Vmbox v(host.make(), depth, (cfg & 0x80) != 0, (cfg & 0x3f) != 0x3e);
    FUZZ_CHECK(v.depth() == depth);
    unsigned saves = 0;
    for (unsigned ops = 0; !in.empty() && ops < 4096; ops++) {
        switch (in.u8() % 7) {
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
            const rackemu::Status st = v.read(off, sz, val);
            FUZZ_CHECK(st == RK_OK || st == RK_SLAVE_ERROR);
            if (st != RK_OK) FUZZ_CHECK(val == 0);
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
            const int st = v.serve_frame(h, payload); // the node's RKF_SVC_UNIMEM_MBOX handler
            FUZZ_CHECK(st == -1 || st == int(RKF_ST_OK) || st == int(RKF_ST_REFUSED) ||
                       st == int(RKF_ST_BAD_FRAME));
            break;
        }
        case 3: {
            const unsigned mif = in.u8() % 70, src_if = in.u8() % 70;
            const unsigned nwords = in.u8() % 20;
            uint64_t words[20];
            in.bytes(words, sizeof words);
            const unsigned kif_before = v.fill(UNIMEM_KIF);
            uint64_t ctrl = 0;
            FUZZ_CHECK(v.read(VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL, 8, ctrl) == RK_OK);
            const rackemu::Status st = v.deliver(mif, src_if, words, nwords);
            FUZZ_CHECK(st == RK_OK || st == RK_NACK);
            if (mif == UNIMEM_KIF && (src_if != UNIMEM_KIF || !(ctrl & VMBOX_KIF_ENABLE) || !v.has_kif()))
                FUZZ_CHECK(st == RK_NACK && v.fill(UNIMEM_KIF) == kif_before);
            if (mif == UNIMEM_KIF && st == RK_OK) FUZZ_CHECK(v.fill(UNIMEM_KIF) == kif_before + nwords);
            break;
        }
        case 4:
            v.reset();
            break;
        case 5: {
            const uint8_t how = in.u8(), which = in.u8();
            const uint16_t val = in.u16();
            if (saves++ < 2) save_load(v, how, which, val); // costly: twice per input is enough
            break;
        }
        case 6: {
            const unsigned mif = in.u8() % 70, src_if = in.u8() % 70;
            const unsigned nwords = in.u8() % 20, nested = in.u8() % 6;
            const uint64_t nested_val = in.u64();
            uint64_t words[20];
            in.bytes(words, sizeof words);
            const unsigned before = mif < UNIMEM_IF_TOTAL ? v.fill(mif) : 0;
            const bool line = host.irq;
            unsigned answers = 0;
            const rackemu::Status st = v.deliver(mif, src_if, words, nwords, [&](rackemu::Status a) {
                answers++;
                FUZZ_CHECK(a == RK_OK || a == RK_NACK);
                uint64_t val = 0;
                const uint64_t fifo = VMBOX_MIF_OFFSET(mif % UNIMEM_IF_COUNT);
                switch (nested) {
                case 0: // the packet is held: nothing of it is visible yet
                    if (mif < UNIMEM_IF_TOTAL) FUZZ_CHECK(v.fill(mif) == before);
                    FUZZ_CHECK(host.irq == line && v.irq_level() == line);
                    break;
                case 1:
                    v.read(fifo, 8, val);
                    break;
                case 2:
                    v.write(fifo, nested_val, 8);
                    break;
                case 3:
                    v.write(VMBOX_CTRL_OFFSET + VMBOX_CTRL_FLUSH, nested_val, 8);
                    break;
                case 4:
                    v.reset();
                    break;
                case 5:
                    if (saves++ < 2)
                        save_load(v, uint8_t(nested_val), uint8_t(nested_val >> 8),
                                  uint16_t(nested_val >> 16), true);
                    break;
                }
            });
            FUZZ_CHECK(answers == 1);
            FUZZ_CHECK(st == RK_OK || st == RK_NACK);
            if (nested == 0 && st == RK_OK && mif < UNIMEM_IF_TOTAL && (mif == UNIMEM_KIF || !(cfg & 0x80)))
                FUZZ_CHECK(v.fill(mif) == before + nwords); // all or nothing, visible now
            break;
        }
        }
        FUZZ_CHECK(host.irq == v.irq_level());
    }
    for (unsigned m = 0; m < UNIMEM_IF_TOTAL; m++)
        FUZZ_CHECK(v.fill(m) <= depth);
    return 0;
}
