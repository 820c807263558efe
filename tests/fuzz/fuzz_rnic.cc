// SPDX-License-Identifier: MIT
// libFuzzer harness of the RNIC device core (hw/rnic/rnic.h); docs/fuzzing.md.
//
// One node with kRamSize bytes of guest memory at kRamBase (everything else: DECERR); the frames
// the device sends are kept (up to 64) and may be fed back to it, mutated. Input: operations
//   0 BAR0 store (offset, value, size)      1 BAR0 load (offset, size)
//   2 doorbell store (offset, value, size)  3 doorbell load (offset, size)
//   4 write guest memory (offset, length, bytes): rings, WQEs, page lists
//   5 command: 128 bytes of struct rnic_cmd at kRamBase, then CMD_ADDR and CMD_EXEC
//   6 a frame from the input (length, bytes)  7 a sent frame back, one bit flipped (index, bit)
//   8 time passes (ns) and poll()             9 reset()
//   10 the link: refuse sends (Busy: backpressure) or take them again, then tx_resume()
//   11 the port's link state (set_link: PORT_ACTIVE / PORT_ERR events)
//   12 the async event queue: a ring at a RAM offset, depth and vector from the input, enabled
//      and armed (its events then land in RAM the other operations also use)
//   13 pause / resume (frames arriving meanwhile are held)
//   14 save as a string -> (optionally corrupted: one byte flipped, cut short, one byte more)
//      load into the same core; an intact state must load (docs/rnic.md "Migration")
// Checked (besides the sanitizers): the interrupt line the host sees is the core's level, and
// the core never asks for memory outside RAM without getting an error (TestHost's decode), and a
// saved state loads.
#include "fuzz_input.h"

#include <cerrno>
#include <deque>
#include <string>
#include <vector>

#include "rnic.h"
#include "test_host.h"

using namespace rackemu::rnic;
using rackemu::fuzz::Input;

namespace {

constexpr uint64_t kRamBase = 0x40000000, kRamSize = 0x10000;
const unsigned kSizes[] = {4, 8, 1, 2};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    rackemu::test::TestHost th(kRamSize, kRamBase);
    th.guest_error = [](const std::string &) {};
    std::deque<std::vector<uint8_t>> sent;
    RnicConfig cfg;
    rnic_default_peer_addr(0, cfg.mac, &cfg.ip);
    cfg.rc.sq_depth = 64;
    bool busy = false, paused = false;
    th.send_frame = [&sent, &busy](const uint8_t *f, size_t n) {
        if (busy) return -EAGAIN;
        if (sent.size() >= 64) sent.pop_front();
        sent.emplace_back(f, f + n);
        return 0;
    };
    Rnic nic(th.host(nullptr, nullptr, 0, 2), cfg);
    for (unsigned ops = 0; !in.empty() && ops < 512; ops++) {
        switch (in.u8() % 15) {
        case 0: {
            const uint64_t off = in.u16() % 0x2000;
            const uint64_t val = in.u64();
            nic.ctrl_write(off, val, kSizes[in.u8() % 4]);
            break;
        }
        case 1: {
            const uint64_t off = in.u16() % 0x2000;
            (void)nic.ctrl_read(off, kSizes[in.u8() % 4]);
            break;
        }
        case 2: {
            const uint64_t off = in.u32() % (RNIC_BAR_DB_SIZE + 0x1000);
            const uint64_t val = in.u32();
            nic.db_write(off, val, kSizes[in.u8() % 4]);
            break;
        }
        case 3: {
            const uint64_t off = in.u32() % (RNIC_BAR_DB_SIZE + 0x1000);
            (void)nic.db_read(off, kSizes[in.u8() % 4]);
            break;
        }
        case 4: {
            const uint32_t off = in.u16() % kRamSize;
            const uint32_t len = std::min<uint32_t>(in.u8(), uint32_t(kRamSize - off));
            in.bytes(th.ram.data() + off, len);
            break;
        }
        case 5:
            in.bytes(th.ram.data(), RNIC_CMD_SIZE);
            nic.ctrl_write(RNIC_REG_CMD_ADDR_LO, uint32_t(kRamBase), 4);
            nic.ctrl_write(RNIC_REG_CMD_ADDR_HI, uint32_t(kRamBase >> 32), 4);
            nic.ctrl_write(RNIC_REG_CMD_EXEC, RNIC_CMD_EXEC_GO, 4);
            break;
        case 6: {
            std::vector<uint8_t> f(in.u16() % 4300 + 1); // never empty: data() is then a real pointer
            in.bytes(f.data(), f.size());
            nic.on_frame(f.data(), f.size());
            break;
        }
        case 7: {
            if (sent.empty()) break;
            std::vector<uint8_t> f = sent[in.u8() % sent.size()];
            const uint16_t at = in.u16();
            const uint8_t bit = in.u8();
            if (!f.empty() && (bit & 0x80)) f[at % f.size()] ^= uint8_t(1u << (bit & 7));
            nic.on_frame(f.data(), f.size());
            break;
        }
        case 8:
            th.clock_ns += in.u32();
            nic.poll();
            break;
        case 9:
            nic.reset();
            nic.ctrl_write(RNIC_REG_CTRL, RNIC_CTRL_ENABLE, 4);
            break;
        case 10:
            busy = in.u8() & 1;
            (void)nic.tx_resume();
            break;
        case 11:
            nic.set_link(in.u8() & 1);
            break;
        case 12: {
            const uint64_t ring = kRamBase + (in.u16() % kRamSize);
            const uint32_t ctrl = RNIC_EQ_CTRL_ENABLE | uint32_t(in.u8() % 14) << RNIC_EQ_CTRL_DEPTH_SHIFT |
                                  uint32_t(in.u8() % 8) << RNIC_EQ_CTRL_VECTOR_SHIFT;
            nic.ctrl_write(RNIC_REG_EQ_CTRL, 0, 4);
            nic.ctrl_write(RNIC_REG_EQ_BASE_LO, uint32_t(ring), 4);
            nic.ctrl_write(RNIC_REG_EQ_BASE_HI, uint32_t(ring >> 32), 4);
            nic.ctrl_write(RNIC_REG_EQ_CTRL, ctrl, 4);
            nic.ctrl_write(RNIC_REG_EQ_ARM, 1, 4);
            break;
        }
        case 13:
            paused = !paused;
            nic.pause(paused);
            break;
        case 14: {
            rackemu::StateOut out;
            nic.save(out);
            std::vector<uint8_t> b = out.bytes();
            const uint8_t how = in.u8() % 4;
            std::string why;
            if (how == 0) { // an intact state always loads
                rackemu::StateIn sin(b.data(), b.size(), kListMax);
                FUZZ_CHECK(nic.load(sin, &why));
                break;
            }
            if (how == 1 && !b.empty()) b[in.u32() % b.size()] ^= uint8_t(1 + in.u8() % 255); // a byte
            if (how == 2) b.resize(in.u32() % (b.size() + 1));                                // cut short
            if (how == 3) b.push_back(in.u8());                                               // one more
            rackemu::StateIn sin(b.data(), b.size(), kListMax);
            (void)nic.load(sin, &why);
            break;
        }
        }
        for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++)
            FUZZ_CHECK(th.irq_level(v) == nic.irq_level(v));
    }
    if (paused) nic.pause(false);
    return 0;
}
