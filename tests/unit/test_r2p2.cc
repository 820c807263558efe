// SPDX-License-Identifier: MIT
// The R2P2's LightSABRes logic (hw/sonuma/r2p2.h): the ATT state machine against a scripted
// memory whose loads complete when the test says and whose invalidations the test injects, and
// the production memory model against real writer threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "r2p2.h"

using namespace rackemu::sonuma;

namespace {

struct ScriptMem : R2p2Mem {
    std::vector<std::pair<unsigned, uint32_t>> loads; // (att, blk) in issue order
    std::vector<unsigned> validates;
    std::function<void(unsigned)> on_confirm;
    void issue_load(unsigned att, uint32_t blk, uint64_t) override { loads.emplace_back(att, blk); }
    void issue_validate(unsigned att, uint64_t) override { validates.push_back(att); }
    void before_confirm(unsigned att) override
    {
        if (on_confirm) on_confirm(att);
    }
    size_t count(unsigned att) const
    {
        return size_t(std::count_if(loads.begin(), loads.end(), [&](auto &l) { return l.first == att; }));
    }
};

struct Reply {
    SabreId id;
    uint32_t blk;
    bool data;
};

struct ScriptOut : R2p2Out {
    std::vector<Reply> replies;
    std::vector<AttEntry> validations;
    void block_reply(const SabreId &id, uint32_t blk, const uint8_t *data) override
    {
        replies.push_back({id, blk, data != nullptr});
    }
    void validation(const SabreId &, const AttEntry &e) override { validations.push_back(e); }
    unsigned with_data(const SabreId &id) const
    {
        return unsigned(std::count_if(replies.begin(), replies.end(), [&](auto &r) { return r.id == id && r.data; }));
    }
    unsigned without_data(const SabreId &id) const
    {
        return unsigned(std::count_if(replies.begin(), replies.end(), [&](auto &r) { return r.id == id && !r.data; }));
    }
};

// a block whose version word (offset 0) is v
std::array<uint8_t, 64> block(uint64_t v)
{
    std::array<uint8_t, 64> b{};
    std::memcpy(b.data(), &v, 8);
    return b;
}

constexpr uint64_t kBase = 0x10000;
const SabreId kA{1, 2, 3}, kB{1, 2, 4}, kC{2, 0, 9};

struct R2p2Test : ::testing::Test {
    ScriptMem mem;
    ScriptOut out;
    R2p2 r{mem, out, 16, 32};
    void run() { while (r.step()) {} }
    void start(const SabreId &id, uint32_t n, bool nospec = false)
    {
        r.register_sabre(id, kBase, n, 0, nospec);
        ASSERT_TRUE(r.add_requests(id, n));
        run();
    }
};

TEST_F(R2p2Test, ConflictInsideTheWindowAborts)
{
    start(kA, 8);
    ASSERT_EQ(mem.loads.size(), 8u) << "block 0 and blocks 1..7 issued speculatively";
    EXPECT_EQ(mem.loads[0].second, 0u) << "block 0 first";
    for (uint32_t j = 1; j <= 3; j++) r.load_done(0, j, block(0).data());
    EXPECT_EQ(r.entry(0).state, AttState::Speculating);
    r.invalidate(kBase + 2 * 64 + 17); // a writer touched block 2, which the R2P2 already read
    EXPECT_EQ(r.entry(0).state, AttState::Aborting);
    EXPECT_EQ(r.entry(0).abort, Abort::Window);
    size_t issued = mem.loads.size();
    for (uint32_t j : {0u, 4u, 5u, 6u, 7u}) r.load_done(0, j, block(2).data());
    run();
    EXPECT_EQ(mem.loads.size(), issued) << "nothing issued after the abort";
    EXPECT_EQ(out.with_data(kA), 3u) << "blocks 1..3 went out before the abort";
    EXPECT_EQ(out.without_data(kA), 5u) << "blocks 0, 4..7 answered without data";
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::Window);
    EXPECT_EQ(out.validations[0].abort_block, 2u);
    EXPECT_EQ(r.counters().abort_window, 1u);
    EXPECT_EQ(r.entry(0).state, AttState::Free);
}

TEST_F(R2p2Test, InvalidationAfterTheVersionWasReadIsIgnored)
{
    start(kA, 8);
    r.load_done(0, 0, block(6).data());
    EXPECT_EQ(r.entry(0).state, AttState::Streaming);
    EXPECT_FALSE(r.entry(0).spec);
    for (uint32_t j = 1; j <= 4; j++) r.load_done(0, j, block(0).data());
    r.invalidate(kBase + 5 * 64);
    r.invalidate(kBase + 2 * 64); // even a block read in the window: the window is closed
    for (uint32_t j = 5; j <= 7; j++) r.load_done(0, j, block(0).data());
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_EQ(out.validations[0].version, 6u);
    EXPECT_FALSE(out.validations[0].validated);
    EXPECT_TRUE(mem.validates.empty()) << "no validate read";
    EXPECT_EQ(r.counters().inval_ignored, 2u);
    EXPECT_EQ(r.counters().sabre_ok, 1u);
    EXPECT_EQ(out.with_data(kA), 8u);
}

TEST_F(R2p2Test, BaseBlockInvalidationLeadsToTheValidateStage)
{
    start(kA, 4);
    r.load_done(0, 0, block(10).data());
    r.invalidate(kBase + 8); // the base block, after the version was read
    for (uint32_t j = 1; j < 4; j++) r.load_done(0, j, block(0).data());
    EXPECT_EQ(r.entry(0).state, AttState::Validating);
    ASSERT_EQ(mem.validates.size(), 1u);
    EXPECT_TRUE(out.validations.empty());
    r.validate_done(0, 10); // same version: atomic after all
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_TRUE(out.validations[0].validated);
    EXPECT_EQ(r.counters().validate_stage, 1u);
}

TEST_F(R2p2Test, ValidateStageSeeingAnotherVersionAborts)
{
    start(kA, 4);
    r.load_done(0, 0, block(10).data());
    r.invalidate(kBase);
    for (uint32_t j = 1; j < 4; j++) r.load_done(0, j, block(0).data());
    r.validate_done(0, 12);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::Validate);
    EXPECT_EQ(r.counters().abort_validate, 1u);
}

TEST_F(R2p2Test, BaseBlockInvalidationBeforeTheVersionReadIsIgnored)
{
    start(kA, 4);
    r.invalidate(kBase); // block 0 not read yet: nothing to lose
    r.load_done(0, 0, block(10).data());
    for (uint32_t j = 1; j < 4; j++) r.load_done(0, j, block(0).data());
    EXPECT_TRUE(mem.validates.empty());
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
    EXPECT_FALSE(out.validations[0].validated);
}

TEST_F(R2p2Test, OddVersionAbortsLocked)
{
    start(kA, 3);
    r.load_done(0, 1, block(0).data());
    r.load_done(0, 0, block(7).data());
    EXPECT_EQ(r.entry(0).state, AttState::Aborting);
    r.load_done(0, 2, block(0).data());
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::Locked);
    EXPECT_EQ(out.without_data(kA), 2u); // blocks 0 and 2
    EXPECT_EQ(r.counters().abort_locked, 1u);
}

TEST_F(R2p2Test, NoSpeculationIssuesTheVersionAlone)
{
    start(kA, 6, /*nospec=*/true);
    ASSERT_EQ(mem.loads.size(), 1u);
    EXPECT_EQ(mem.loads[0].second, 0u);
    r.load_done(0, 0, block(2).data());
    run();
    EXPECT_EQ(mem.loads.size(), 6u);
    EXPECT_EQ(r.counters().spec_blocks, 0u);
    for (uint32_t j = 1; j < 6; j++) r.load_done(0, j, block(0).data());
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
}

TEST_F(R2p2Test, RequestCounterBoundsTheUnroll)
{
    r.register_sabre(kA, kBase, 8, 0, false);
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
    r.register_sabre(kA, kBase, 8, 0, false);
    ASSERT_TRUE(r.add_requests(kA, 4));
    run();
    r.load_done(0, 0, block(1).data()); // locked
    EXPECT_EQ(out.validations.size(), 0u) << "requests 4..7 are still to come";
    r.load_done(0, 1, block(0).data());
    r.load_done(0, 2, block(0).data());
    r.load_done(0, 3, block(0).data());
    ASSERT_TRUE(r.add_requests(kA, 4));
    EXPECT_EQ(out.without_data(kA), 8u);
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::Locked);
}

TEST(R2p2Resources, ExhaustedAttStallsInsteadOfFailing)
{
    ScriptMem mem;
    ScriptOut out;
    R2p2 r(mem, out, 2, 32);
    EXPECT_TRUE(r.register_sabre(kA, kBase, 2, 0, false));
    EXPECT_TRUE(r.register_sabre(kB, kBase + 4096, 2, 0, false));
    EXPECT_FALSE(r.register_sabre(kC, kBase + 8192, 2, 0, false)) << "the third waits";
    for (auto id : {kA, kB, kC}) ASSERT_TRUE(r.add_requests(id, 2));
    while (r.step()) {}
    EXPECT_EQ(mem.loads.size(), 4u) << "only the two registered SABRes issue";
    EXPECT_EQ(r.counters().att_stalls, 1u);
    EXPECT_EQ(r.queued(), 1u);
    EXPECT_EQ(out.with_data(kC) + out.without_data(kC), 0u) << "no reply of any kind for the queued one";
    r.load_done(0, 0, block(0).data());
    r.load_done(0, 1, block(0).data()); // A completes, its entry goes to C
    EXPECT_EQ(r.queued(), 0u);
    EXPECT_TRUE(r.entry(0).id == kC);
    while (r.step()) {}
    r.load_done(0, 0, block(0).data());
    r.load_done(0, 1, block(0).data());
    r.load_done(1, 0, block(0).data());
    r.load_done(1, 1, block(0).data());
    ASSERT_EQ(out.validations.size(), 3u);
    for (auto &v : out.validations) EXPECT_EQ(v.abort, Abort::None);
    EXPECT_EQ(r.counters().sabre_ok, 3u);
}

TEST(R2p2Resources, FullStreamBufferStallsUntilTheVersionIsKnown)
{
    ScriptMem mem;
    ScriptOut out;
    R2p2 r(mem, out, 16, 4);
    r.register_sabre(kA, kBase, 10, 0, false);
    r.add_requests(kA, 10);
    while (r.step()) {}
    EXPECT_EQ(mem.loads.size(), 4u) << "block 0 + 3: the 4-block stream buffer is full";
    EXPECT_GE(r.counters().sb_stalls, 1u);
    EXPECT_EQ(r.counters().spec_blocks, 3u);
    r.load_done(0, 0, block(0).data());
    while (r.step()) {}
    EXPECT_EQ(mem.loads.size(), 10u);
    for (uint32_t j = 1; j < 10; j++) r.load_done(0, j, block(0).data());
    ASSERT_EQ(out.validations.size(), 1u);
    EXPECT_EQ(out.validations[0].abort, Abort::None);
}

// ---- the production memory model ----

struct Obj {
    std::vector<uint8_t> mem;
    explicit Obj(size_t n) : mem(n + 64) {}
    uint8_t *p() { return mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64; }
    uint64_t *ver() { return reinterpret_cast<uint64_t *>(p()); }
};

SabreOutcome serve(HostSabreServer &s, Obj &o, uint32_t n, std::vector<uint8_t> *got = nullptr, bool spec = true)
{
    SabreRequest rq;
    rq.obj = o.p();
    rq.nblocks = n;
    rq.spec = spec;
    if (got) got->assign(size_t(n) * 64, 0);
    unsigned calls = 0;
    auto out = s.serve(rq, [&](uint32_t j, const uint8_t *d) {
        calls++;
        if (d && got) std::memcpy(got->data() + size_t(j) * 64, d, 64);
    });
    EXPECT_EQ(calls, n) << "every block answered once";
    return out;
}

TEST(HostMem, AMutatedSpeculativeBlockAbortsWindow)
{
    HostSabreServer s(16, 32);
    Obj o(1024);
    *o.ver() = 4;
    s.hook_window_close = [&] { o.p()[3 * 64 + 5] ^= 1; };
    auto r = serve(s, o, 16);
    EXPECT_EQ(r.abort, Abort::Window);
    EXPECT_EQ(r.abort_block, 3u);
    EXPECT_EQ(s.counters().abort_window, 1u);
}

TEST(HostMem, HeaderBytesChangedButNotTheVersionValidates)
{
    HostSabreServer s(16, 32);
    Obj o(256);
    *o.ver() = 4;
    s.hook_before_confirm = [&] { o.p()[20] ^= 0xff; };
    std::vector<uint8_t> got;
    auto r = serve(s, o, 4, &got);
    EXPECT_EQ(r.abort, Abort::None);
    EXPECT_TRUE(r.validated);
    EXPECT_EQ(s.counters().validate_stage, 1u);
}

TEST(HostMem, ABumpedVersionBeforeTheConfirmAbortsValidate)
{
    HostSabreServer s(16, 32);
    Obj o(256);
    *o.ver() = 4;
    s.hook_before_confirm = [&] { *o.ver() = 6; };
    auto r = serve(s, o, 4);
    EXPECT_EQ(r.abort, Abort::Validate);
    EXPECT_EQ(r.version, 4u);
}

TEST(HostMem, NoSpeculationReadsNothingBeforeTheVersion)
{
    HostSabreServer s(16, 32);
    Obj o(1024);
    *o.ver() = 2;
    // a change inside the (empty) window is not seen: every block is read after the version
    s.hook_window_close = [&] { o.p()[5 * 64] = 0x55; };
    std::vector<uint8_t> got;
    auto r = serve(s, o, 16, &got, false);
    EXPECT_EQ(r.abort, Abort::None);
    EXPECT_EQ(got[5 * 64], 0x55);
    EXPECT_EQ(s.counters().spec_blocks, 0u);
}

// Writers follow sec. 4.2 on real threads; every SABRe that succeeds must be one consistent
// version of its object. Payload word k of object i at version v is f(i, v, k).
uint64_t f(uint64_t i, uint64_t v, uint64_t k)
{
    return (i * 0x9e3779b97f4a7c15ull) ^ (v * 0xbf58476d1ce4e5b9ull) ^ (k * 0x94d049bb133111ebull);
}

TEST(HostMem, StressNeverAcceptsATornObject)
{
    constexpr unsigned kObjs = 8, kWriters = 3;
    const uint32_t sizes[] = {1, 2, 16, 64, 128}; // blocks: 64 B .. 8 KiB
    std::vector<Obj> objs;
    for (unsigned i = 0; i < kObjs; i++) objs.emplace_back(128 * 64);
    for (unsigned i = 0; i < kObjs; i++) {
        uint64_t *w = objs[i].ver();
        for (unsigned k = 1; k < 128 * 8; k++) w[k] = f(i, 0, k);
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    for (unsigned t = 0; t < kWriters; t++) {
        writers.emplace_back([&, t] {
            std::mt19937 rng(t);
            while (!stop.load(std::memory_order_relaxed)) {
                unsigned i = rng() % kObjs;
                uint64_t *w = objs[i].ver();
                uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED);
                if ((v & 1) || !__atomic_compare_exchange_n(w, &v, v + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                    continue;
                std::atomic_thread_fence(std::memory_order_release);
                for (unsigned k = 1; k < 128 * 8; k++) __atomic_store_n(&w[k], f(i, v + 2, k), __ATOMIC_RELAXED);
                __atomic_store_n(w, v + 2, __ATOMIC_RELEASE);
            }
        });
    }
    HostSabreServer s(16, 32);
    uint64_t ok = 0, aborted = 0;
    std::vector<uint8_t> got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (unsigned it = 0; std::chrono::steady_clock::now() < deadline; it++) {
        unsigned i = it % kObjs;
        uint32_t n = sizes[it % 5];
        auto r = serve(s, objs[i], n, &got, it % 7 != 0);
        if (r.abort != Abort::None) {
            aborted++;
            continue;
        }
        ok++;
        const uint64_t *w = reinterpret_cast<const uint64_t *>(got.data());
        ASSERT_EQ(w[0], r.version);
        for (unsigned k = 1; k < n * 8; k++)
            ASSERT_EQ(w[k], f(i, r.version, k)) << "torn object accepted: obj " << i << " word " << k << " version "
                                                << r.version << " blocks " << n;
    }
    stop = true;
    for (auto &t : writers) t.join();
    EXPECT_GT(ok, 100u);
    EXPECT_GT(aborted, 0u) << "writers never caught a reader: the race was not exercised";
    auto c = s.counters();
    EXPECT_EQ(c.sabre_ok, ok);
    EXPECT_EQ(c.abort_locked + c.abort_window + c.abort_validate, aborted);
    std::printf("[ stress ] %llu ok, %llu aborted (locked %llu, window %llu, validate %llu)\n",
                (unsigned long long)ok, (unsigned long long)aborted, (unsigned long long)c.abort_locked,
                (unsigned long long)c.abort_window, (unsigned long long)c.abort_validate);
}

} // namespace
