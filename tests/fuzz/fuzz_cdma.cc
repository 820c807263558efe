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
//   4 reset()   5 set_state() with a state from the input (migration stream is untrusted)
//   6 state() -> set_state() round trip (must be accepted)
// Checked: the engine never touches memory outside what it was asked to (the buffer's guard
// bytes), IRQ line seen by the host == irq_level(), CDMASR.Idle agrees with busy().
#include "fuzz_input.h"

#include <string>
#include <vector>

#include "cdma.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {

constexpr uint64_t kRamBase = 0x1000, kRamSize = 0x2000;
constexpr uint64_t kSlvBase = 0x8000, kSlvSize = 0x1000;
constexpr uint64_t kBudget = 1 << 20;

// ---- adapter: the host side of the core (the one place that knows today's CdmaHost) ----
struct Host {
    std::vector<uint8_t> ram = std::vector<uint8_t>(kRamSize);
    uint64_t moved = 0;
    bool irq = false, kicked = false;
    unsigned errors = 0;
    MemStatus decode(uint64_t addr, uint64_t len, uint8_t **p)
    {
        if (moved + len > kBudget) return MemStatus::SlaveError;
        moved += len;
        if (addr >= kRamBase && addr - kRamBase <= kRamSize && len <= kRamSize - (addr - kRamBase)) {
            *p = ram.data() + (addr - kRamBase);
            return MemStatus::Ok;
        }
        if (addr >= kSlvBase && addr - kSlvBase < kSlvSize) return MemStatus::SlaveError;
        return MemStatus::DecodeError;
    }
    CdmaHost make()
    {
        CdmaHost h;
        h.mem_read = [this](uint64_t addr, void *buf, uint64_t len) {
            uint8_t *p = nullptr;
            MemStatus st = decode(addr, len, &p);
            if (st == MemStatus::Ok) std::memcpy(buf, p, len);
            return st;
        };
        h.mem_write = [this](uint64_t addr, const void *buf, uint64_t len) {
            uint8_t *p = nullptr;
            MemStatus st = decode(addr, len, &p);
            if (st == MemStatus::Ok) std::memcpy(p, buf, len);
            return st;
        };
        h.set_irq = [this](bool level) { irq = level; };
        h.guest_error = [this](const std::string &) { errors++; };
        h.kick = [this] { kicked = true; };
        return h;
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
    Cdma c(host.make(), cfg);
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
            in.bytes(host.ram.data() + off, len);
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
            (void)c.set_state(st);
            break;
        }
        case 6:
            FUZZ_CHECK(c.set_state(c.state()));
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
