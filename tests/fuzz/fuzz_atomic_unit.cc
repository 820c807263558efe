// SPDX-License-Identifier: MIT
// libFuzzer harness of the NIC atomic unit (hw/rnic/atomic_unit.h; docs/fuzzing.md,
// docs/atomic-unit.md) against a 16-word target memory.
//
// Input: a config block (u8 geometry, u8 raw/rate-limit/atomicity/entry, u8 tags, u8 regs, u8
// lookahead, u8 host-lat), then operations: u8 word (>= 16: outside memory), u8 op (any value), u8
// size (any value), u8 byte offset, u64 operand, u64 compare, u64 mask, u16 arrival gap in ns, u8
// flags (bit 0: run the model up to the arrival first). The entry (modes bit 5, with atomicity
// Global): every operation goes in by execute(), its status and old value at once, as the RNIC
// does; else by submit(). One entry per run: execute() applies a value at arrival, ahead of
// operations submitted earlier that the model still holds, so a mixed stream is not in arrival
// order by design (the RNIC uses execute() only).
// Checked: every operation completes exactly once; refused ones (bad op/size, unaligned, outside)
// touch nothing; the others return the in-order reference's old value, and the final memory is
// the reference's; at most `tags` host requests are outstanding; the unit drains (no deadlock);
// an execute()'s immediate status and old value are its completion's.
#include "fuzz_input.h"

#include <cstring>
#include <vector>

#include "atomic_unit.h"

using namespace rackemu::rnic;
using rackemu::fuzz::Input;

namespace {

constexpr uint64_t kBase = 0x1000;
constexpr uint32_t kWords = 16;

struct Host : AmuRamHost {
    explicit Host(std::vector<uint64_t> &m)
        : AmuRamHost(reinterpret_cast<uint8_t *>(m.data()), kBase, m.size() * 8)
    {
    }
    void complete(const AmoResult &r) override
    {
        FUZZ_CHECK(r.id < seen.size() && !seen[r.id]);
        seen[r.id] = true;
        results[r.id] = r;
    }
    void guest_error(const std::string &m) override { FUZZ_CHECK(m.find("deadlock") == std::string::npos); }
    std::vector<bool> seen;
    std::vector<AmoResult> results;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    AmuConfig c;
    const uint8_t geo = in.u8(), modes = in.u8();
    static const uint32_t lines[] = {0, 1, 4, 32, 32, 16, 128, 8};
    static const uint32_t ways[] = {1, 1, 2, 1, 4, 16, 4, 8};
    c.cache_lines = lines[geo & 7];
    c.cache_ways = ways[geo & 7];
    c.raw = AmuRaw((modes & 3) % 3);
    c.rate_limit = AmuRateLimit((modes >> 2) & 3);
    // The data path of the model (Hca) is what the fuzzer checks; without a RAW buffer it is not
    // exact by design (the hazard), so that mode runs the Global path.
    c.atomicity = (modes & 16) || c.raw == AmuRaw::None ? AmuAtomicity::Global : AmuAtomicity::Hca;
    c.tags = 1 + in.u8() % 64;
    c.regs = in.u8() % 9;
    c.lookahead = 1 + in.u8() % 16;
    c.host_lat_ns = in.u8() * 2;
    c.raw_entries = 1 + (geo >> 3) % 8;
    if (amu_check_config(c)) return 0;

    std::vector<uint64_t> mem(kWords), ref(kWords);
    for (uint32_t i = 0; i < kWords; i++)
        mem[i] = ref[i] = 0x0101010101010101ull * i;
    Host h(mem);
    AtomicUnit u(c, h);
    const bool by_execute = (modes & 32) && c.atomicity == AmuAtomicity::Global;
    std::vector<AmoRequest> ops;
    std::vector<int> exec_status; // -1: submitted; else the AmoStatus execute() returned
    std::vector<uint64_t> exec_old;
    uint64_t t = 0;
    while (!in.empty() && ops.size() < 2000) {
        AmoRequest r;
        r.id = ops.size();
        const uint8_t w = in.u8();
        r.op = in.u8();
        r.size = in.u8();
        r.addr = kBase + uint64_t(w) * 8 + (in.u8() & 7);
        if (w >= 250) r.addr = ~0ull - (in.u8() & 15); // near the top of the address space
        r.operand = in.u64();
        r.compare = in.u64();
        r.mask = in.u64();
        t += uint64_t(in.u16()) * 1000;
        r.arrival_ps = t;
        const uint8_t flags = in.u8();
        ops.push_back(r);
        h.seen.push_back(false);
        h.results.push_back({});
        if (flags & 1) u.run_until(t);
        exec_status.push_back(-1);
        exec_old.push_back(0);
        if (by_execute)
            exec_status.back() = int(u.execute(r, &exec_old.back()));
        else
            u.submit(r);
    }
    u.drain();
    FUZZ_CHECK(u.idle());
    FUZZ_CHECK(u.counters().max_outstanding <= c.tags);
    uint64_t errors = 0;
    for (const auto &r : ops) {
        FUZZ_CHECK(h.seen[r.id]);
        const bool ok = r.op < ROCE_XOP_COUNT && (r.size == 4 || r.size == 8) && r.addr % r.size == 0 &&
                        r.addr >= kBase && r.addr - kBase <= kWords * 8 - r.size;
        const AmoResult &res = h.results[r.id];
        if (exec_status[r.id] >= 0) {
            FUZZ_CHECK(exec_status[r.id] == int(res.status));
            FUZZ_CHECK(exec_old[r.id] == res.old);
        }
        if (!ok) {
            FUZZ_CHECK(res.status != AmoStatus::Ok);
            errors++;
            continue;
        }
        FUZZ_CHECK(res.status == AmoStatus::Ok);
        uint8_t *p = reinterpret_cast<uint8_t *>(ref.data()) + (r.addr - kBase);
        uint64_t old = 0;
        std::memcpy(&old, p, r.size);
        FUZZ_CHECK(res.old == old);
        const uint64_t nv = amo_alu(r.op, r.size, old, r.operand, r.compare, r.mask);
        std::memcpy(p, &nv, r.size);
    }
    FUZZ_CHECK(u.counters().errors == errors);
    FUZZ_CHECK(mem == ref);
    return 0;
}
