// SPDX-License-Identifier: MIT
// The R2P2's LightSABRes logic (hw/sonuma/r2p2.h; design docs/design/sonuma-rmc.md sec. 2.2, 3.7):
// the ATT state machine against a scripted memory whose loads complete when the test says and
// whose invalidations the test injects, and the production memory model (HostSabreServer)
// against memory mutated by test hooks and by real writer threads. Every test checks the bytes
// that reach the requester, not only states and counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "r2p2.h"

using namespace rackemu::sonuma;

namespace {

using Block = std::array<uint8_t, RMC_BLOCK_SIZE>;

// Block j of a scripted object: the version word v at offset 0 (meaningful in block 0 only), the
// other bytes a pattern of j, so a reply carrying another block's bytes is caught.
Block block(uint32_t j, uint64_t v = 0)
{
    Block b;
    for (unsigned k = 0; k < b.size(); k++)
        b[k] = uint8_t(0xa0 + j * 7 + k);
    std::memcpy(b.data(), &v, 8);
    return b;
}

struct ScriptMem : R2p2Mem {
    std::vector<std::pair<unsigned, uint32_t>> loads; // (att, blk) in issue order
    std::vector<std::pair<unsigned, uint64_t>> validates;
    std::function<void(unsigned)> on_confirm;
    void issue_load(unsigned att, uint32_t blk, uint64_t) override { loads.emplace_back(att, blk); }
    void issue_validate(unsigned att, uint64_t addr) override { validates.emplace_back(att, addr); }
    void before_confirm(unsigned att) override
    {
        if (on_confirm) on_confirm(att);
    }
};

struct Reply {
    SabreId id;
    uint32_t blk;
    bool has_data;
    Block data;
};

struct ScriptOut : R2p2Out {
    std::vector<Reply> replies;
    std::vector<AttEntry> validations;
    std::vector<size_t> replies_at_validation; // replies sent before each validation packet
    void block_reply(const SabreId &id, uint32_t blk, const uint8_t *data) override
    {
        Reply r{id, blk, data != nullptr, {}};
        if (data) std::memcpy(r.data.data(), data, RMC_BLOCK_SIZE);
        replies.push_back(r);
    }
    void validation(const SabreId &, const AttEntry &e) override
    {
        validations.push_back(e);
        replies_at_validation.push_back(replies.size());
    }
    std::vector<uint32_t> blocks(const SabreId &id, bool with_data) const
    {
        std::vector<uint32_t> v;
        for (auto &r : replies)
            if (r.id == id && r.has_data == with_data) v.push_back(r.blk);
        std::sort(v.begin(), v.end());
        return v;
    }
    // every block 0..n-1 answered exactly once
    bool each_once(const SabreId &id, uint32_t n) const
    {
        std::vector<unsigned> seen(n, 0);
        for (auto &r : replies)
            if (r.id == id) {
                if (r.blk >= n) return false;
                seen[r.blk]++;
            }
        return std::all_of(seen.begin(), seen.end(), [](unsigned s) { return s == 1; });
    }
    // the data replies of `id` carry the bytes of the scripted blocks (block 0 with version v)
    void expect_data(const SabreId &id, uint64_t v) const
    {
        for (auto &r : replies) {
            if (r.id == id && r.has_data) {
                EXPECT_EQ(r.data, block(r.blk, r.blk ? 0 : v)) << "block " << r.blk;
            }
        }
    }
};

std::vector<uint32_t> range(uint32_t a, uint32_t b) // [a, b)
{
    std::vector<uint32_t> v;
    for (uint32_t j = a; j < b; j++)
        v.push_back(j);
    return v;
}

constexpr uint64_t kBase = 0x10000;
const SabreId kA{1, 2, 3}, kB{1, 2, 4}, kC{2, 0, 9};

struct R2p2Test : ::testing::Test {
    ScriptMem mem;
    ScriptOut out;
    R2p2 r{mem, out, 16, 32};
    void run()
    {
        while (r.step()) {
        }
    }
    void start(const SabreId &id, uint32_t n, bool spec = true)
    {
        r.register_sabre(id, kBase, n, 0, spec);
        ASSERT_TRUE(r.add_requests(id, n));
        run();
    }
    void complete(unsigned att, uint32_t j, uint64_t v = 0) { r.load_done(att, j, block(j, v).data()); }
};

TEST_F(R2p2Test, ConflictInsideTheWindowAborts)
{
    start(kA, 8);
    ASSERT_EQ(mem.loads.size(), 8u) << "block 0 and blocks 1..7 issued speculatively";
    EXPECT_EQ(mem.loads[0].second, 0u) << "block 0 first";
    EXPECT_EQ(r.counters().spec_blocks, 7u);
    for (uint32_t j = 1; j <= 3; j++)
        complete(0, j);
    EXPECT_EQ(r.entry(0).state, AttState::Speculating);
    r.invalidate(kBase + 2 * 64 + 17); // a writer touched block 2, which the R2P2 already read
    EXPECT_EQ(r.entry(0).state, AttState::Aborting);
    EXPECT_EQ(r.entry(0).abort, Abort::Window);
    EXPECT_TRUE(out.validations.empty()) << "loads 0, 4..7 are still in flight";
    size_t issued = mem.loads.size();
    for (uint32_t j : {0u, 4u, 5u, 6u, 7u})
        complete(0, j, 4);
    run();
    EXPECT_EQ(mem.loads.size(), issued) << "nothing issued after the abort";
    EXPECT_EQ(out.blocks(kA, true), range(1, 4)) << "blocks 1..3 went out before the abort";
    EXPECT_EQ(out.blocks(kA, false), (std::vector<uint32_t>{0, 4, 5, 6, 7}))
        << "the rest answered without data";
    out.expect_data(kA, 0);
    EXPECT_TRUE(out.each_once(kA, 8));
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.replies_at_validation[0], 8u) << "the validation packet follows the last block reply";
    EXPECT_EQ(out.validations[0].abort, Abort::Window);
    EXPECT_EQ(out.validations[0].abort_block, 2u);
    EXPECT_EQ(out.validations[0].issued_at_abort, 8u);
    EXPECT_EQ(r.counters().abort_window, 1u);
    EXPECT_EQ(r.counters().sabre_ok, 0u);
    EXPECT_EQ(r.entry(0).state, AttState::Free);
}

TEST_F(R2p2Test, InvalidationAfterTheVersionWasReadIsIgnored)
{
    start(kA, 8);
    complete(0, 0, 6);
    EXPECT_EQ(r.entry(0).state, AttState::Streaming);
    EXPECT_FALSE(r.entry(0).spec);
    for (uint32_t j = 1; j <= 4; j++)
        complete(0, j);
    r.invalidate(kBase + 5 * 64);
    r.invalidate(kBase + 2 * 64); // even a block read in the window: the window is closed
    r.invalidate(kBase + 8 * 64); // outside the object: not this entry's business, not counted
    for (uint32_t j = 5; j <= 7; j++)
        complete(0, j);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_EQ(out.validations[0].version, 6u);
    EXPECT_FALSE(out.validations[0].validated);
    EXPECT_TRUE(mem.validates.empty()) << "no validate read";
    EXPECT_EQ(r.counters().inval_ignored, 2u);
    EXPECT_EQ(r.counters().sabre_ok, 1u);
    EXPECT_EQ(out.blocks(kA, true), range(0, 8));
    out.expect_data(kA, 6);
}

TEST_F(R2p2Test, BaseBlockInvalidationLeadsToTheValidateStage)
{
    r.register_sabre(kA, kBase, 4, 24, true); // version word at byte 24 of block 0
    ASSERT_TRUE(r.add_requests(kA, 4));
    run();
    Block b0 = block(0);
    uint64_t v = 10;
    std::memcpy(b0.data() + 24, &v, 8);
    r.load_done(0, 0, b0.data());
    EXPECT_EQ(r.entry(0).version, 10u);
    r.invalidate(kBase + 8); // the base block, after the version was read
    for (uint32_t j = 1; j < 4; j++)
        complete(0, j);
    EXPECT_EQ(r.entry(0).state, AttState::Validating);
    ASSERT_EQ(mem.validates.size(), 1u);
    EXPECT_EQ(mem.validates[0].second, kBase + 24) << "the validate stage re-reads the version word";
    EXPECT_TRUE(out.validations.empty());
    EXPECT_EQ(out.blocks(kA, true), range(0, 4)) << "every block went out before the verdict";
    r.validate_done(0, 10); // same version: atomic after all
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_TRUE(out.validations[0].validated);
    EXPECT_EQ(out.validations[0].version, 10u);
    EXPECT_EQ(out.replies[0].data, b0);
    EXPECT_EQ(r.counters().validate_stage, 1u);
    EXPECT_EQ(r.counters().sabre_ok, 1u);
}

TEST_F(R2p2Test, BaseBlockInvalidationLeadsToTheValidateStageThatSeesAnotherVersionAndAborts)
{
    start(kA, 4);
    complete(0, 0, 10);
    r.invalidate(kBase);
    for (uint32_t j = 1; j < 4; j++)
        complete(0, j);
    ASSERT_EQ(mem.validates.size(), 1u);
    r.validate_done(0, 12);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::Validate);
    EXPECT_FALSE(out.validations[0].validated);
    EXPECT_EQ(out.validations[0].version, 10u) << "the version read at the window close";
    EXPECT_TRUE(out.each_once(kA, 4));
    EXPECT_EQ(r.counters().abort_validate, 1u);
    EXPECT_EQ(r.counters().validate_stage, 1u);
    EXPECT_EQ(r.counters().sabre_ok, 0u);
}

TEST_F(R2p2Test, BaseBlockInvalidationBeforeBlock0IsReadIsIgnored)
{
    start(kA, 4);
    complete(0, 1);
    r.invalidate(kBase); // block 0 not read yet: nothing to lose
    EXPECT_EQ(r.entry(0).state, AttState::Speculating) << "no abort either";
    complete(0, 0, 10);
    for (uint32_t j = 2; j < 4; j++)
        complete(0, j);
    EXPECT_TRUE(mem.validates.empty());
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_FALSE(out.validations[0].validated);
    EXPECT_EQ(r.counters().validate_stage, 0u);
    out.expect_data(kA, 10);
}

TEST_F(R2p2Test, InvalidationAtTheConfirmPointStillReachesTheValidateStage)
{
    // before_confirm is the last moment for invalidations (production re-reads block 0 there)
    mem.on_confirm = [&](unsigned) { r.invalidate(kBase + 63); };
    start(kA, 2);
    complete(0, 0, 8);
    complete(0, 1);
    ASSERT_EQ(mem.validates.size(), 1u);
    r.validate_done(0, 8);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_TRUE(out.validations[0].validated);
}

TEST_F(R2p2Test, ResourceExhaustionStallsInsteadOfFailing)
{
    // (1) ATT of 2 entries, three SABRes: the third waits in the registration queue
    {
        ScriptMem m;
        ScriptOut o;
        R2p2 x(m, o, 2, 32);
        EXPECT_TRUE(x.register_sabre(kA, kBase, 2, 0, true));
        EXPECT_TRUE(x.register_sabre(kB, kBase + 4096, 2, 0, true));
        EXPECT_FALSE(x.register_sabre(kC, kBase + 8192, 2, 0, true)) << "the third waits";
        for (auto id : {kA, kB, kC})
            ASSERT_TRUE(x.add_requests(id, 2)) << "requests of a queued SABRe accumulate";
        while (x.step()) {
        }
        EXPECT_EQ(m.loads.size(), 4u) << "only the two registered SABRes issue";
        EXPECT_EQ(x.counters().att_stalls, 1u);
        EXPECT_EQ(x.counters().sabre_reg, 2u);
        EXPECT_EQ(x.queued(), 1u);
        x.load_done(1, 0, block(0, 2).data());
        x.load_done(1, 1, block(1).data()); // B completes, its entry goes to C
        EXPECT_EQ(o.blocks(kC, true).size() + o.blocks(kC, false).size(), 0u)
            << "no reply of any kind for the queued one";
        ASSERT_EQ(o.validations.size(), 1u);
        EXPECT_TRUE(o.validations[0].id == kB);
        EXPECT_EQ(x.queued(), 0u);
        EXPECT_TRUE(x.entry(1).id == kC);
        EXPECT_EQ(x.entry(1).requests, 2u) << "the queued requests came along";
        while (x.step()) {
        }
        ASSERT_EQ(m.loads.size(), 6u);
        EXPECT_EQ(m.loads[4], std::make_pair(1u, 0u)) << "C starts with its block 0";
        x.load_done(1, 0, block(0, 4).data());
        x.load_done(1, 1, block(1).data());
        x.load_done(0, 0, block(0, 6).data());
        x.load_done(0, 1, block(1).data());
        ASSERT_EQ(o.validations.size(), 3u);
        for (auto &v : o.validations)
            EXPECT_EQ(v.abort, Abort::None);
        EXPECT_EQ(o.validations[1].version, 4u);
        EXPECT_TRUE(o.validations[2].id == kA);
        o.expect_data(kC, 4);
        o.expect_data(kA, 6);
        EXPECT_EQ(x.counters().sabre_ok, 3u);
        EXPECT_EQ(x.counters().sabre_reg, 3u);
    }
    // (2) a 4-block stream buffer and a 10-block SABRe: the unroll stops at 4 until the version
    {
        ScriptMem m;
        ScriptOut o;
        R2p2 x(m, o, 16, 4);
        x.register_sabre(kA, kBase, 10, 0, true);
        ASSERT_TRUE(x.add_requests(kA, 10));
        while (x.step()) {
        }
        while (x.step()) {
        }
        EXPECT_EQ(m.loads.size(), 4u) << "block 0 + 3: the 4-block stream buffer is full";
        EXPECT_EQ(x.counters().sb_stalls, 1u) << "one stall, however often step() finds it";
        EXPECT_EQ(x.counters().spec_blocks, 3u);
        for (uint32_t j = 1; j < 4; j++)
            x.load_done(0, j, block(j).data());
        EXPECT_EQ(m.loads.size(), 4u) << "completions inside the window do not free a slot";
        x.load_done(0, 0, block(0, 2).data());
        while (x.step()) {
        }
        EXPECT_EQ(m.loads.size(), 10u);
        EXPECT_EQ(x.counters().spec_blocks, 3u);
        for (uint32_t j = 4; j < 10; j++)
            x.load_done(0, j, block(j).data());
        ASSERT_EQ(o.validations.size(), 1u);
        EXPECT_EQ(o.validations[0].abort, Abort::None);
        EXPECT_EQ(o.blocks(kA, true), range(0, 10));
        o.expect_data(kA, 2);
    }
}

TEST_F(R2p2Test, OddVersionAbortsLocked)
{
    start(kA, 3);
    complete(0, 1);
    complete(0, 0, 7);
    EXPECT_EQ(r.entry(0).state, AttState::Aborting);
    complete(0, 2);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::Locked);
    EXPECT_EQ(out.validations[0].version, 7u);
    EXPECT_EQ(out.blocks(kA, false), (std::vector<uint32_t>{0, 2})) << "block 0 and the late block 2";
    EXPECT_EQ(out.blocks(kA, true), (std::vector<uint32_t>{1})) << "block 1 went out before the version";
    EXPECT_EQ(r.counters().abort_locked, 1u);
}

TEST_F(R2p2Test, NoSpeculationIssuesTheVersionAlone)
{
    start(kA, 6, /*spec=*/false);
    ASSERT_EQ(mem.loads.size(), 1u);
    EXPECT_EQ(mem.loads[0].second, 0u);
    EXPECT_EQ(r.counters().sb_stalls, 0u) << "waiting for the version is not a stream-buffer stall";
    complete(0, 0, 2);
    run();
    EXPECT_EQ(mem.loads.size(), 6u);
    EXPECT_EQ(r.counters().spec_blocks, 0u);
    r.invalidate(kBase + 3 * 64); // after the version: ignored, as in the speculative case
    for (uint32_t j = 1; j < 6; j++)
        complete(0, j);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_TRUE(out.validations[0].nospec);
    EXPECT_EQ(out.blocks(kA, true), range(0, 6));
    out.expect_data(kA, 2);
}

TEST_F(R2p2Test, RequestCounterBoundsTheUnroll)
{
    r.register_sabre(kA, kBase, 8, 0, true);
    run();
    EXPECT_TRUE(mem.loads.empty()) << "no block request yet";
    ASSERT_TRUE(r.add_requests(kA, 3));
    run();
    EXPECT_EQ(mem.loads.size(), 3u);
    ASSERT_TRUE(r.add_requests(kA, 5));
    EXPECT_FALSE(r.add_requests(kA, 1)) << "more requests than blocks is malformed";
    EXPECT_FALSE(r.add_requests(kC, 1)) << "unknown SABRe";
    run();
    EXPECT_EQ(mem.loads.size(), 8u);
}

TEST_F(R2p2Test, AbortStillAnswersEveryRequest)
{
    r.register_sabre(kA, kBase, 8, 0, true);
    ASSERT_TRUE(r.add_requests(kA, 4));
    run();
    complete(0, 0, 1); // locked
    EXPECT_TRUE(out.validations.empty()) << "requests 4..7 are still to come";
    for (uint32_t j = 1; j < 4; j++)
        complete(0, j);
    EXPECT_TRUE(out.validations.empty());
    ASSERT_TRUE(r.add_requests(kA, 4));
    EXPECT_EQ(out.blocks(kA, false), range(0, 8)) << "late requests answered at once, without data";
    EXPECT_TRUE(out.each_once(kA, 8));
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.replies_at_validation[0], 8u);
    EXPECT_EQ(out.validations[0].abort, Abort::Locked);
    EXPECT_EQ(mem.loads.size(), 4u) << "no load for the requests that came after the abort";
}

TEST_F(R2p2Test, LateOrForeignCompletionsAreIgnored)
{
    start(kA, 2);
    r.load_done(5, 0, block(0).data()); // a free entry
    r.load_done(0, 7, block(7).data()); // beyond the object
    r.validate_done(0, 0);              // not validating
    EXPECT_TRUE(out.replies.empty());
    complete(0, 1);
    r.load_done(0, 1, block(1).data()); // twice
    EXPECT_EQ(out.replies.size(), 1u);
    complete(0, 0);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
}

// ---- the production memory model (HostSabreServer, design sec. 3.3) ----

struct Obj {
    std::vector<uint8_t> mem;
    explicit Obj(size_t n) : mem(n + 64) {}
    uint8_t *p() { return mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64; }
    uint64_t *word(unsigned k) { return reinterpret_cast<uint64_t *>(p()) + k; }
};

SabreOutcome serve(HostSabreServer &s, Obj &o, uint32_t n, std::vector<uint8_t> *got = nullptr,
                   bool spec = true, unsigned ver_off = 0)
{
    SabreRequest rq;
    rq.id = {3, 1, 77};
    rq.obj = o.p();
    rq.nblocks = n;
    rq.spec = spec;
    rq.ver_off = ver_off;
    if (got) got->assign(size_t(n) * 64, 0xee);
    std::vector<unsigned> calls(n, 0);
    auto out = s.serve(rq, [&](uint32_t j, const uint8_t *d) {
        if (j >= n) {
            ADD_FAILURE() << "block " << j << " beyond the object";
            return;
        }
        calls[j]++;
        if (d && got) std::memcpy(got->data() + size_t(j) * 64, d, 64);
    });
    for (uint32_t j = 0; j < n; j++)
        EXPECT_EQ(calls[j], 1u) << "block " << j << " answered once";
    return out;
}

void fill(Obj &o, size_t bytes, uint8_t seed)
{
    for (size_t k = 0; k < bytes; k++)
        o.p()[k] = uint8_t(seed + k * 13);
}

TEST(R2p2, HostMemQuietObjectIsReturnedExactly)
{
    HostSabreServer s(16, 32);
    Obj o(100 * 64);
    fill(o, 100 * 64, 1);
    *o.word(5) = 42; // version at byte 40
    std::vector<uint8_t> got;
    auto r = serve(s, o, 100, &got, true, 40); // beyond the stream buffer: spec and non-spec blocks
    EXPECT_EQ(r.abort, Abort::None);
    EXPECT_EQ(r.version, 42u);
    EXPECT_FALSE(r.validated);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), o.p()));
    auto c = s.counters();
    EXPECT_EQ(c.sabre_ok, 1u);
    EXPECT_EQ(c.spec_blocks, 31u);
    EXPECT_EQ(c.sb_stalls, 1u);
    EXPECT_EQ(r.trace.nblocks, 100u);
    EXPECT_TRUE(r.trace.spec);
}

TEST(R2p2, HostMemOddVersionAbortsLocked)
{
    HostSabreServer s(16, 32);
    Obj o(8 * 64);
    *o.word(0) = 9;
    auto r = serve(s, o, 8);
    EXPECT_EQ(r.abort, Abort::Locked);
    EXPECT_EQ(r.version, 9u);
    EXPECT_EQ(r.trace.abort, Abort::Locked);
    EXPECT_EQ(r.trace.issued_at_abort, 8u);
    EXPECT_EQ(s.counters().abort_locked, 1u);
}

TEST(R2p2, HostMemSpeculativeBlockMutatedAtTheWindowCloseAbortsWindow)
{
    HostSabreServer s(16, 32);
    Obj o(1024);
    *o.word(0) = 4;
    s.hook_window_close = [&] { o.p()[3 * 64 + 5] ^= 1; };
    auto r = serve(s, o, 16);
    EXPECT_EQ(r.abort, Abort::Window);
    EXPECT_EQ(r.abort_block, 3u);
    EXPECT_EQ(r.trace.abort, Abort::Window);
    EXPECT_EQ(r.trace.issued_at_abort, 16u);
    EXPECT_EQ(s.counters().abort_window, 1u);
    // the same mutation of a block beyond the stream buffer is read after the version: no abort
    Obj big(64 * 64);
    *big.word(0) = 4;
    s.hook_window_close = [&] { big.p()[40 * 64 + 5] = 0x77; };
    std::vector<uint8_t> got;
    r = serve(s, big, 64, &got);
    EXPECT_EQ(r.abort, Abort::None);
    EXPECT_EQ(got[40 * 64 + 5], 0x77);
}

TEST(R2p2, HostMemHeaderBytesChangedBeforeTheConfirmValidate)
{
    HostSabreServer s(16, 32);
    Obj o(256);
    fill(o, 256, 9);
    *o.word(0) = 4;
    std::vector<uint8_t> before(o.p(), o.p() + 256);
    s.hook_before_confirm = [&] { o.p()[20] ^= 0xff; }; // block 0, not the version
    std::vector<uint8_t> got;
    auto r = serve(s, o, 4, &got);
    EXPECT_EQ(r.abort, Abort::None);
    EXPECT_TRUE(r.validated);
    EXPECT_TRUE(r.trace.validated);
    EXPECT_EQ(r.version, 4u);
    EXPECT_EQ(got, before) << "the object as it was at the version read";
    EXPECT_EQ(s.counters().validate_stage, 1u);
}

TEST(R2p2, HostMemVersionBumpedBeforeTheConfirmAbortsValidate)
{
    HostSabreServer s(16, 32);
    Obj o(256);
    *o.word(1) = 4;
    s.hook_before_confirm = [&] { *o.word(1) = 6; };
    auto r = serve(s, o, 4, nullptr, true, 8);
    EXPECT_EQ(r.abort, Abort::Validate);
    EXPECT_EQ(r.version, 4u);
    EXPECT_EQ(s.counters().abort_validate, 1u);
    EXPECT_EQ(s.counters().validate_stage, 1u);
}

TEST(R2p2, HostMemNoSpeculationReadsNothingBeforeTheVersion)
{
    HostSabreServer s(16, 32);
    Obj o(1024);
    *o.word(0) = 2;
    // a change at the (empty) window close is not an abort: every block is read after the version
    s.hook_window_close = [&] { o.p()[5 * 64] = 0x55; };
    std::vector<uint8_t> got;
    auto r = serve(s, o, 16, &got, false);
    EXPECT_EQ(r.abort, Abort::None);
    EXPECT_EQ(got[5 * 64], 0x55);
    EXPECT_FALSE(r.trace.spec);
    EXPECT_EQ(s.counters().spec_blocks, 0u);
    EXPECT_EQ(s.counters().sb_stalls, 0u);
}

// Writers follow seed sec. 4.2 on real threads: CAS v -> v+1, stores, release-store v+2. Object i
// keeps its version at byte ver_off(i); word k of block b at version v is f(i, v, 8b+k), except
// one checksum word per block (the xor of the block's payload words). Every SABRe that succeeds
// must be one consistent version.
uint64_t f(uint64_t i, uint64_t v, uint64_t k)
{
    return (i * 0x9e3779b97f4a7c15ull) ^ (v * 0xbf58476d1ce4e5b9ull) ^ (k * 0x94d049bb133111ebull);
}
unsigned ver_word(unsigned i)
{
    return (i * 3) % 8;
}
unsigned ck_word(unsigned i, unsigned blk)
{
    return blk == 0 && ver_word(i) == 7 ? 6 : 7;
}

// The value word k of object i should hold at version v (the version word itself is separate).
void object_words(unsigned i, uint64_t v, unsigned nblocks, uint64_t *w)
{
    for (unsigned b = 0; b < nblocks; b++) {
        uint64_t ck = 0;
        for (unsigned k = 0; k < 8; k++) {
            unsigned x = 8 * b + k;
            if ((b == 0 && k == ver_word(i)) || k == ck_word(i, b)) continue;
            w[x] = f(i, v, x);
            ck ^= w[x];
        }
        w[8 * b + ck_word(i, b)] = ck;
    }
}

TEST(R2p2, HostMemStressNeverAcceptsATornObject)
{
    constexpr unsigned kObjs = 8, kWriters = 3, kReaders = 2, kBlocks = 128;
    const uint32_t sizes[] = {1, 2, 16, 31, 32, 33, 64, 128}; // 64 B .. 8 KiB, around the stream buffer
    std::vector<Obj> objs;
    for (unsigned i = 0; i < kObjs; i++)
        objs.emplace_back(kBlocks * 64);
    std::vector<std::vector<uint64_t>> image(kObjs, std::vector<uint64_t>(kBlocks * 8));
    for (unsigned i = 0; i < kObjs; i++) {
        object_words(i, 0, kBlocks, image[i].data());
        for (unsigned x = 0; x < kBlocks * 8; x++)
            if (x != ver_word(i)) *objs[i].word(x) = image[i][x];
        *objs[i].word(ver_word(i)) = 0;
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> writes{0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kWriters; t++) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(t);
            std::vector<uint64_t> w(kBlocks * 8);
            while (!stop.load(std::memory_order_relaxed)) {
                unsigned i = rng() % kObjs;
                uint64_t *ver = objs[i].word(ver_word(i));
                uint64_t v = __atomic_load_n(ver, __ATOMIC_RELAXED);
                if ((v & 1) ||
                    !__atomic_compare_exchange_n(ver, &v, v + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                    continue;
                std::atomic_thread_fence(std::memory_order_release); // the odd version before the data
                object_words(i, v + 2, kBlocks, w.data());
                for (unsigned x = 0; x < kBlocks * 8; x++)
                    if (x != ver_word(i)) __atomic_store_n(objs[i].word(x), w[x], __ATOMIC_RELAXED);
                __atomic_store_n(ver, v + 2, __ATOMIC_RELEASE);
                writes.fetch_add(1, std::memory_order_relaxed);
            }
        });
    }
    // Two readers share one server, as the port thread and the local RGP thread do.
    HostSabreServer s(16, 32);
    std::atomic<uint64_t> ok{0}, aborted{0}, validated{0}, torn{0};
    std::mutex first_mu;
    std::string first_torn;
    std::vector<std::thread> readers;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
    for (unsigned t = 0; t < kReaders; t++) {
        readers.emplace_back([&, t] {
            std::vector<uint64_t> want(kBlocks * 8);
            std::vector<uint8_t> got;
            for (unsigned it = t; std::chrono::steady_clock::now() < deadline; it += kReaders) {
                unsigned i = it % kObjs;
                uint32_t n = sizes[(it / kObjs) % 8];
                SabreRequest rq;
                rq.id = {uint16_t(t), 0, it};
                rq.obj = objs[i].p();
                rq.nblocks = n;
                rq.ver_off = 8 * ver_word(i);
                rq.spec = it % 7 != 0;
                rq.window_delay_ns = it % 16 == 5 ? 2000 : 0; // sometimes widen the window
                got.assign(size_t(n) * 64, 0xee);
                auto r = s.serve(rq, [&](uint32_t j, const uint8_t *d) {
                    if (d && j < n) std::memcpy(got.data() + size_t(j) * 64, d, 64);
                });
                if (r.abort != Abort::None) {
                    aborted++;
                    continue;
                }
                ok++;
                if (r.validated) validated++;
                const uint64_t *w = reinterpret_cast<const uint64_t *>(got.data());
                object_words(i, r.version, n, want.data());
                std::string bad;
                if (r.version & 1) bad = "odd version accepted";
                if (w[ver_word(i)] != r.version) bad = "version word differs from the reported version";
                for (unsigned b = 0; b < n && bad.empty(); b++) {
                    uint64_t ck = 0;
                    for (unsigned k = 0; k < 8; k++)
                        if (!(b == 0 && k == ver_word(i)) && k != ck_word(i, b)) ck ^= w[8 * b + k];
                    if (ck != w[8 * b + ck_word(i, b)]) bad = "checksum of block " + std::to_string(b);
                    for (unsigned k = 0; k < 8 && bad.empty(); k++) {
                        unsigned x = 8 * b + k;
                        if (x != ver_word(i) && w[x] != want[x]) bad = "word " + std::to_string(x);
                    }
                }
                if (!bad.empty()) {
                    if (torn++ == 0) {
                        std::lock_guard lk(first_mu);
                        first_torn = "obj " + std::to_string(i) + " version " + std::to_string(r.version) +
                                     " blocks " + std::to_string(n) + ": " + bad;
                    }
                }
            }
        });
    }
    for (auto &t : readers)
        t.join();
    stop = true;
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(torn.load(), 0u) << "torn object accepted, first: " << first_torn;
    EXPECT_GT(ok.load(), 1000u);
    EXPECT_GT(writes.load(), 100u);
    EXPECT_GT(aborted.load(), 0u) << "writers never caught a reader: the race was not exercised";
    auto c = s.counters();
    EXPECT_EQ(c.sabre_ok, ok.load());
    EXPECT_EQ(c.abort_locked + c.abort_window + c.abort_validate, aborted.load());
    std::printf(
        "[ stress ] %llu writes; %llu ok (%llu validated), %llu aborted (locked %llu, window %llu, "
        "validate %llu)\n",
        (unsigned long long)writes.load(), (unsigned long long)ok.load(),
        (unsigned long long)validated.load(), (unsigned long long)aborted.load(),
        (unsigned long long)c.abort_locked, (unsigned long long)c.abort_window,
        (unsigned long long)c.abort_validate);
}

} // namespace
