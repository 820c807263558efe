// SPDX-License-Identifier: MIT
// libFuzzer harness of the persistence-domain core (hw/pmem/pmem.h); docs/fuzzing.md, docs/pmem.md.
//
// The region is kSize bytes of RAM at kBase. Input: one config byte (mode, NIC buffer entries,
// LLC lines), then operations
//   0 CPU store (offset, length, byte) inside the region, reported with its pages
//   1 dirty report   2 write-back   3 FLUSH   (address, length: anywhere, any length)
//   4 an RNIC write the RNIC made itself (address, length, byte): RAM written if in the region
//   5 an RNIC write acknowledged into the NIC buffer (address, length, byte)
//   6 time passes (ns), due entries placed   7 nic_drain   8 reset
//   9 register load (offset, size)   10 register store (offset, value, size)
//   11 save -> load round trip (must be accepted, and save again identically)
//   12 load of a state from the input (untrusted), then a dirty report of the whole region
//   13 power cut: every state up to k (1..3) enumerated, one applied, restart
// Checked after each: at most llc-lines pending lines, the gauges equal the model's sizes, and
// every line that is not pending holds the same bytes in RAM and in the durable image (every
// RAM change is reported); after a cut: enumeration counts add up, apply/revert are inverse,
// RAM equals the durable image after restart.
#include <algorithm>
#include <cstring>
#include <vector>

#include "crash.h"
#include "fuzz_input.h"
#include "pmem.h"
#include "pmem_capi.h"
#include "test_host.h"

using namespace rackemu;
using namespace rackemu::pmem;
using rackemu::fuzz::Input;

namespace {

constexpr uint64_t kBase = 0x80000000, kSize = 16 * 1024, kLine = PMEM_LINE_SIZE;
const unsigned kSizes[] = {8, 4, 1, 2, 3};

void check(test::TestHost &h, Pmem &p, const Config &cfg)
{
    const uint64_t pend = p.counter(PMEM_CNT_INDEX_PENDING_LINES);
    FUZZ_CHECK(pend <= cfg.llc_lines);
    FUZZ_CHECK(p.counter(PMEM_CNT_INDEX_NIC_PENDING) == p.nic_pending());
    FUZZ_CHECK(p.nic_pending() <= cfg.nic_entries);
    std::vector<uint8_t> dur(kSize);
    FUZZ_CHECK(p.durable_read(kBase, dur.data(), kSize) == RK_OK);
    uint64_t seen = 0;
    for (uint64_t off = 0; off < kSize; off += kLine) {
        if (p.is_pending(kBase + off)) {
            seen++;
            continue;
        }
        FUZZ_CHECK(memcmp(dur.data() + off, h.ram.data() + off, kLine) == 0);
    }
    FUZZ_CHECK(seen == pend);
}

void power_cut(test::TestHost &h, Pmem &p, Input &in)
{
    const Cut c = p.cut();
    // k up to 3 while the cut is small (C(36, 3) images of 16 KiB would make a slow input)
    const unsigned k = 1u + in.u8() % 3;
    const CutPolicy pol{Pick::UpToK, c.lines.size() > 12 ? std::min(k, 2u) : k};
    CrashStates it(c, pol);
    std::vector<uint8_t> image(kSize), base(kSize);
    FUZZ_CHECK(p.durable_read(kBase, base.data(), kSize) == RK_OK);
    image = base;
    CrashState s, last;
    const unsigned want = in.u8();
    while (it.next(s)) {
        apply(c, s, image.data());
        revert(c, s, image.data());
        FUZZ_CHECK(image == base);
        if (s.index <= want) last = s;
    }
    FUZZ_CHECK(it.explored() + it.pruned() == it.total());
    FUZZ_CHECK(p.finish_cut(c, last) == RK_OK);
    FUZZ_CHECK(p.counter(PMEM_CNT_INDEX_LOST_BYTES) == lost_bytes(c, last));
    FUZZ_CHECK(p.restart() == RK_OK);
    FUZZ_CHECK(p.durable_read(kBase, base.data(), kSize) == RK_OK);
    FUZZ_CHECK(memcmp(base.data(), h.ram.data(), kSize) == 0);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    const uint8_t conf = in.u8();
    test::TestHost h(kSize, kBase);
    h.guest_error = [](const std::string &) {};
    Config cfg;
    cfg.base = kBase;
    cfg.size = kSize;
    cfg.mode = Mode(conf & 3);
    cfg.nic_entries = (conf >> 2) & 7;
    cfg.llc_lines = 1u + (conf >> 5) * 5;
    cfg.nic_delay_ns = 100;
    std::string err;
    auto p = Pmem::create(h.host(), cfg, nullptr, &err);
    FUZZ_CHECK(p);
    if (cfg.mode == Mode::None) cfg.nic_entries = 0; // the buffer holds nothing in mode none
    for (unsigned ops = 0; !in.empty() && ops < 256; ops++) {
        const uint8_t op = in.u8() % 14;
        switch (op) {
        case 0: {
            const uint64_t off = in.u16() % kSize, len = std::min<uint64_t>(in.u8() % 65, kSize - off);
            memset(h.ram.data() + off, in.u8(), len);
            const uint64_t first = off & ~4095ull,
                           end = std::min<uint64_t>(kSize, (off + len + 4095) & ~4095ull);
            FUZZ_CHECK(p->cpu_dirty(kBase + first, std::max<uint64_t>(end - first, 4096)) == RK_OK);
            break;
        }
        case 1:
        case 2:
        case 3: {
            const uint64_t addr = kBase - 64 + in.u16(), len = in.u8() == 0xff ? in.u64() : in.u16();
            const Status st = op == 1   ? p->cpu_dirty(addr, len)
                              : op == 2 ? p->cpu_writeback(addr, len)
                                        : p->flush(addr, len);
            const bool inside = addr >= kBase && len <= kSize && addr - kBase <= kSize - len;
            FUZZ_CHECK((st == RK_OK) == inside);
            break;
        }
        case 4:
        case 5: {
            const uint64_t addr = kBase - 64 + in.u16(), len = in.u16() % (PMEM_NIC_ENTRY_MAX + 2);
            const uint8_t b = in.u8();
            const bool inside = addr >= kBase && len <= kSize && addr - kBase <= kSize - len;
            if (op == 4) {
                if (inside) memset(h.ram.data() + (addr - kBase), b, len);
                FUZZ_CHECK((p->placed(addr, len) == RK_OK) == inside);
            } else {
                std::vector<uint8_t> d(len, b);
                const Status st = p->nic_accept(addr, d.data(), len, nullptr);
                FUZZ_CHECK((st == RK_OK) == (inside && len > 0 && len <= PMEM_NIC_ENTRY_MAX));
            }
            break;
        }
        case 6:
            h.clock_ns += in.u16();
            p->nic_place_due();
            break;
        case 7:
            p->nic_drain();
            FUZZ_CHECK(p->nic_pending() == 0);
            break;
        case 8:
            p->reset();
            break;
        case 9: {
            uint64_t v = 0;
            FUZZ_CHECK(p->ctrl_read(in.u16() % PMEM_MMIO_SIZE, kSizes[in.u8() % 5], &v) == RK_OK);
            break;
        }
        case 10: {
            const uint64_t off = in.u16() % PMEM_MMIO_SIZE, v = in.u64();
            FUZZ_CHECK(p->ctrl_write(off, v, kSizes[in.u8() % 5]) == RK_OK);
            break;
        }
        case 11: {
            uint8_t *b = nullptr;
            uint64_t n = 0;
            FUZZ_CHECK(rk_pmem_ops.save(p.get(), &b, &n) == 0);
            char msg[200];
            FUZZ_CHECK(rk_pmem_ops.load(p.get(), b, n, msg, sizeof(msg)) == 0);
            uint8_t *b2 = nullptr;
            uint64_t n2 = 0;
            FUZZ_CHECK(rk_pmem_ops.save(p.get(), &b2, &n2) == 0);
            FUZZ_CHECK(n == n2 && memcmp(b, b2, n) == 0);
            free(b);
            free(b2);
            break;
        }
        case 12: {
            std::vector<uint8_t> s(in.u16() % 512);
            if (!s.empty()) in.bytes(s.data(), s.size());
            char msg[200];
            if (rk_pmem_ops.load(p.get(), s.data(), s.size(), msg, sizeof(msg)) == 0) {
                // a loaded state may drop pending lines: report the region so RAM and image agree
                FUZZ_CHECK(p->cpu_dirty(kBase, kSize) == RK_OK);
            }
            break;
        }
        case 13:
            power_cut(h, *p, in);
            break;
        }
        check(h, *p, cfg);
    }
    return 0;
}
