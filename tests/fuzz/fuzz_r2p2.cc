// SPDX-License-Identifier: MIT
// libFuzzer harness of the RMC's R2P2 LightSABRes state machine (hw/sonuma/r2p2.h: ATT, stream
// buffers, speculation, validate stage) against a scripted memory; docs/fuzzing.md. Part of the
// RMC core's fuzzing (fuzz_rmc drives the whole device).
//
// Input: one config byte (ATT entries, stream-buffer depth), then events
//   0 registration (id, base, nblocks, version offset, speculation)   1 block requests (id, k)
//   2 step()   3 complete an issued load (data from the input)   4 complete a validate read
//   5 coherence invalidation of an address (near an issued block, or anywhere)
// Checked: loads stay inside their SABRe's blocks; each block of a SABRe is answered at most
// once and only after it was requested; a SABRe's validation comes once, after all its replies.
#include "fuzz_input.h"

#include <map>
#include <tuple>
#include <vector>

#include "r2p2.h"

using namespace rackemu::sonuma;
using rackemu::fuzz::Input;

namespace {

// ---- adapter: the scripted memory and the requester (R2p2Mem, R2p2Out) ----
struct Load {
    unsigned att;
    uint32_t blk;
    uint64_t addr;
};
struct Script : R2p2Mem, R2p2Out {
    R2p2 *r2p2 = nullptr;
    std::vector<Load> loads; // issued, not completed
    std::vector<std::pair<unsigned, uint64_t>> validates;
    // per SABRe id: blocks answered, validation seen
    std::map<std::tuple<uint16_t, uint16_t, uint32_t>, std::vector<uint8_t>> answered;
    std::map<std::tuple<uint16_t, uint16_t, uint32_t>, uint32_t> requested;
    std::map<std::tuple<uint16_t, uint16_t, uint32_t>, bool> validated;
    static std::tuple<uint16_t, uint16_t, uint32_t> key(const SabreId &id)
    {
        return {id.src, id.qp, id.xfer};
    }

    void issue_load(unsigned att, uint32_t blk, uint64_t addr) override
    {
        const AttEntry &e = r2p2->entry(att);
        FUZZ_CHECK(att < r2p2->att_entries() && blk < e.nblocks);
        FUZZ_CHECK(addr == e.base + uint64_t(blk) * RMC_BLOCK_SIZE);
        loads.push_back({att, blk, addr});
    }
    void issue_validate(unsigned att, uint64_t version_addr) override
    {
        const AttEntry &e = r2p2->entry(att);
        FUZZ_CHECK(version_addr >= e.base && version_addr + 8 <= e.base + RMC_BLOCK_SIZE);
        validates.push_back({att, version_addr});
    }
    void block_reply(const SabreId &id, uint32_t blk, const uint8_t *) override
    {
        auto &a = answered[key(id)];
        FUZZ_CHECK(blk < a.size());
        FUZZ_CHECK(!a[blk]);
        FUZZ_CHECK(blk < requested[key(id)]);
        a[blk] = 1;
    }
    void validation(const SabreId &id, const AttEntry &e) override
    {
        FUZZ_CHECK(!validated[key(id)]);
        validated[key(id)] = true;
        (void)e;
    }
};
// ---- end of adapter ----

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    const uint8_t cfg = in.u8();
    Script s;
    R2p2 r2p2(s, s, 1 + (cfg & 7), 1 + ((cfg >> 3) & 15));
    s.r2p2 = &r2p2;
    std::vector<SabreId> ids;
    for (unsigned ops = 0; !in.empty() && ops < 4096; ops++) {
        switch (in.u8() % 6) {
        case 0: {
            SabreId id{uint16_t(in.u8() % 4), uint16_t(in.u8() % 4), in.u8() % 8u};
            const uint64_t base = 0x10000 + uint64_t(in.u8()) * RMC_BLOCK_SIZE;
            const uint32_t nblocks = in.u8() % 40;
            const unsigned ver_off = in.u8();
            const bool spec = in.u8() & 1;
            const auto k = Script::key(id);
            if (s.answered.count(k) && !s.validated[k]) break; // ids are unique while in flight
            s.answered[k].assign(std::max(1u, nblocks), 0);
            s.requested[k] = 0;
            s.validated[k] = false;
            r2p2.register_sabre(id, base, nblocks, ver_off, spec);
            ids.push_back(id);
            break;
        }
        case 1: {
            if (ids.empty()) break;
            const SabreId id = ids[in.u8() % ids.size()];
            const uint32_t k = in.u8() % 48;
            s.requested[Script::key(id)] += k; // before the call: it may answer them at once
            if (!r2p2.add_requests(id, k)) s.requested[Script::key(id)] -= k;
            break;
        }
        case 2:
            r2p2.step();
            break;
        case 3: {
            if (s.loads.empty()) break;
            const size_t i = in.u8() % s.loads.size();
            const Load l = s.loads[i];
            s.loads.erase(s.loads.begin() + long(i));
            uint8_t blk[RMC_BLOCK_SIZE];
            in.bytes(blk, sizeof blk);
            r2p2.load_done(l.att, l.blk, blk);
            break;
        }
        case 4: {
            if (s.validates.empty()) break;
            const size_t i = in.u8() % s.validates.size();
            const auto v = s.validates[i];
            s.validates.erase(s.validates.begin() + long(i));
            r2p2.validate_done(v.first, in.u64());
            break;
        }
        case 5: {
            uint64_t addr = in.u64();
            if (!s.loads.empty() && (addr & 1))
                addr = s.loads[(addr >> 8) % s.loads.size()].addr + ((addr >> 1) & 63);
            r2p2.invalidate(addr);
            break;
        }
        }
    }
    return 0;
}
