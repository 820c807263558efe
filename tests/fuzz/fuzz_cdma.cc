// SPDX-License-Identifier: MIT
// libFuzzer harness of the Xilinx AXI CDMA core (hw/unimem/cdma.h); docs/fuzzing.md.
//
// Guest memory is a small buffer (kRamSize bytes at guest address kRamBase) filled from the
// input; [kSlvBase, +kSlvSize) answers SLVERR, everything else DECERR, and the memory stops
// answering (SLVERR) once kBudget bytes moved in one run, so a 64 MiB BTT costs no time.
// Input: one config byte (data width, chunk), then operations
//   0 register store (offset, value, size)   1 register load (offset, size)
//   2 write guest memory (offset, length, bytes): descriptors, chains, data
//   3 process() (the engine thread's turn; also run after every store that kicked)
//   4 reset()   5 load() of a state from the input, as a byte string (StateIn), perhaps damaged
//     (the migration stream is untrusted)
//   6 pause(true), save() -> load() round trip (must be accepted), pause(false)
// Checked: the engine never touches memory outside what it was asked to (the buffer's guard
// bytes), IRQ line seen by the host == irq_level(), CDMASR.Idle agrees with busy().
#include "fuzz_input.h"

#include <string>
#include <vector>

#include "cdma.h"
#include "test_host.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {

constexpr uint64_t kRamBase = 0x1000, kRamSize = 0x2000;
constexpr uint64_t kSlvBase = 0x8000, kSlvSize = 0x1000;
constexpr uint64_t kBudget = 1 << 20;

// ---- adapter: the core's host (rackemu/host.h through TestHost) and its engine wake-up ----
struct Host {
    rackemu::test::TestHost th;
    uint64_t moved = 0;
    bool irq = false, kicked = false;
    unsigned errors = 0;
    rackemu::Status decode(uint64_t addr, uint64_t len, uint8_t **p)
    {
        if (moved + len > kBudget) return RK_SLAVE_ERROR;
        moved += len;
        if (th.in_ram(addr, len)) {
            *p = th.ram.data() + (addr - kRamBase);
            return RK_OK;
        }
        if (addr >= kSlvBase && addr - kSlvBase < kSlvSize) return RK_SLAVE_ERROR;
        return RK_DECODE_ERROR;
    }
    Host() : th(kRamSize, kRamBase)
    {
        th.dma_rw = [this](uint64_t addr, void *buf, uint64_t len, bool write) {
            uint8_t *p = nullptr;
            const rackemu::Status st = decode(addr, len, &p);
            if (st == RK_OK) write ? std::memcpy(p, buf, len) : std::memcpy(buf, p, len);
            return st;
        };
        th.set_irq = [this](unsigned line, bool level) {
            FUZZ_CHECK(line == 0);
            irq = level;
        };
        th.guest_error = [this](const std::string &) { errors++; };
    }
    std::function<void()> kick()
    {
        return [this] { kicked = true; };
    }
};
// ---- end of adapter ----

const unsigned kSizes[] = {4, 8, 1, 2, 16};

void check(Host &host, Cdma &c)
{
    FUZZ_CHECK(host.irq == c.irq_level());
    const uint32_t sr = uint32_t(c.read(XCDMA_CDMASR, 4));
    FUZZ_CHECK(((sr & XCDMA_SR_IDLE) != 0) == !c.busy());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    const uint8_t cfg_byte = in.u8();
    CdmaConfig cfg;
    cfg.data_width = 1u << (cfg_byte & 7);    // 1..128 bytes per key-hole beat
    cfg.chunk = 64u << ((cfg_byte >> 3) & 7); // 64 B .. 8 KiB per chunk
    cfg.max_descriptors = 64;
    cfg.cyclic_slice = 16;
    Host host;
    Cdma c(host.th.host(), host.kick(), cfg);
    for (unsigned ops = 0; !in.empty() && ops < 1024; ops++) {
        switch (in.u8() % 7) {
        case 0: {
            const uint64_t off = in.u16() % (RACKEMU_CDMA_SIZE + 0x40);
            const uint64_t val = in.u64();
            c.write(off, val, kSizes[in.u8() % 5]);
            break;
        }
        case 1: {
            const uint64_t off = in.u16() % (RACKEMU_CDMA_SIZE + 0x40);
            (void)c.read(off, kSizes[in.u8() % 5]);
            break;
        }
        case 2: {
            const uint32_t off = in.u16() % kRamSize;
            const uint32_t len = std::min<uint32_t>(in.u8(), uint32_t(kRamSize - off));
            in.bytes(host.th.ram.data() + off, len);
            break;
        }
        case 3:
            host.kicked = true;
            break;
        case 4:
            c.reset();
            break;
        case 5: {
            CdmaState st;
            st.cr = in.u32();
            st.sr = in.u32();
            st.curdesc = in.u64();
            st.taildesc = in.u64();
            st.sa = in.u64();
            st.da = in.u64();
            st.btt = in.u32();
            st.irq_count = in.u32();
            st.unsignalled = in.u32();
            st.phase = CdmaPhase(in.u8() % 8);
            st.resume_valid = in.u8() & 1;
            st.resume_next = in.u64();
            st.session_descriptors = in.u64();
            // as the adapter hands it over: one byte string, perhaps damaged
            rackemu::StateOut out;
            out.put(st);
            std::vector<uint8_t> b = out.bytes();
            const uint8_t how = in.u8();
            if (how & 1) b[in.u8() % b.size()] ^= uint8_t(1 + in.u8() % 255);
            if (how & 2) b.resize(in.u8() % (b.size() + 8));
            rackemu::StateIn sin(b.data(), b.size(), 0);
            std::string why;
            (void)c.load(sin, &why);
            break;
        }
        case 6: // quiesce, save, load back (a consistent state is always accepted), go on
            c.pause(true);
            FUZZ_CHECK(c.load(c.save()));
            c.pause(false);
            break;
        }
        if (host.kicked) {
            host.kicked = false;
            c.process();
        }
        check(host, c);
    }
    return 0;
}
