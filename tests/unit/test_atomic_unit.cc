// Unit tests of the NIC atomic unit (hw/rnic/atomic_unit.h, the NIC-atomics paper sec. III): the ALU's
// arithmetic, exactness against in-order execution for every cache geometry, RAW buffer approach
// and rate-limiting policy, the RAW hazard itself, the tag limit, refused operations, global
// atomicity against concurrent CPU atomics, and timing rules computed by hand.
#include <algorithm>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "atomic_unit.h"

using namespace rackemu::rnic;

namespace {

// Target memory of `words` 8-byte words at address 0x1000, results kept by id.
struct Host : AmuRamHost {
    explicit Host(std::vector<uint64_t> &m)
        : AmuRamHost(reinterpret_cast<uint8_t *>(m.data()), 0x1000, m.size() * 8)
    {
    }
    void complete(const AmoResult &r) override
    {
        if (results.size() <= r.id) results.resize(r.id + 1);
        results[r.id] = r;
        done++;
    }
    void guest_error(const std::string &m) override { errors.push_back(m); }
    std::vector<AmoResult> results;
    std::vector<std::string> errors;
    uint64_t done = 0;
};

constexpr uint64_t kBase = 0x1000;

// The reference: execute `ops` in order on `mem`, returning the old values.
std::vector<uint64_t> reference(std::vector<uint64_t> &mem, const std::vector<AmoRequest> &ops)
{
    std::vector<uint64_t> old;
    for (const auto &r : ops) {
        auto *p = reinterpret_cast<uint8_t *>(mem.data()) + (r.addr - kBase);
        if (r.size == 4) {
            uint32_t v;
            std::memcpy(&v, p, 4);
            old.push_back(v);
            const uint32_t n = uint32_t(amo_alu(r.op, 4, v, r.operand, r.compare, r.mask));
            std::memcpy(p, &n, 4);
        } else {
            uint64_t v;
            std::memcpy(&v, p, 8);
            old.push_back(v);
            const uint64_t n = amo_alu(r.op, 8, v, r.operand, r.compare, r.mask);
            std::memcpy(p, &n, 8);
        }
    }
    return old;
}

// A random stream over `words` words: every op kind, both sizes, bursts and gaps in arrival.
std::vector<AmoRequest> random_ops(uint32_t seed, size_t n, uint32_t words)
{
    std::mt19937_64 g(seed);
    std::vector<AmoRequest> ops;
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        AmoRequest r;
        r.id = i;
        r.op = uint8_t(g() % ROCE_XOP_COUNT);
        r.size = (g() % 3 == 0) ? 4 : 8;
        const uint64_t w = g() % words;
        r.addr = kBase + w * 8 + (r.size == 4 ? (g() % 2) * 4 : 0);
        r.operand = g();
        r.compare = (g() % 2) ? 0 : g();
        r.mask = (g() % 2) ? ~0ull : g();
        r.fetch = g() % 2;
        t += (g() % 4 == 0) ? g() % 2000000 : 0; // mostly back to back, some gaps up to 2 us
        r.arrival_ps = t;
        ops.push_back(r);
    }
    return ops;
}

struct Geometry {
    uint32_t lines, ways;
};
const Geometry kGeometries[] = {{0, 1}, {32, 1}, {32, 4}, {16, 16}, {1, 1}, {128, 4}};

void expect_exact(const AmuConfig &c, uint32_t seed, size_t n, uint32_t words, const std::string &what)
{
    std::vector<uint64_t> mem(words), ref(words);
    std::mt19937_64 g(seed ^ 0x55);
    for (uint32_t i = 0; i < words; i++)
        mem[i] = ref[i] = g();
    const auto ops = random_ops(seed, n, words);
    const auto old = reference(ref, ops);
    Host h(mem);
    AtomicUnit u(c, h);
    for (const auto &r : ops)
        u.submit(r);
    u.drain();
    ASSERT_TRUE(u.idle()) << what;
    ASSERT_EQ(h.done, n) << what;
    ASSERT_TRUE(h.errors.empty()) << what << ": " << h.errors.front();
    for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(h.results[i].status, AmoStatus::Ok) << what << " op " << i;
        ASSERT_EQ(h.results[i].old, old[i]) << what << " op " << i;
    }
    EXPECT_EQ(mem, ref) << what;
    EXPECT_LE(u.counters().max_outstanding, c.tags) << what;
}

} // namespace

TEST(AtomicUnit, AluComputesEveryOperation)
{
    EXPECT_EQ(amo_alu(ROCE_XOP_ADD, 8, ~0ull, 2, 0, 0), 1u);
    EXPECT_EQ(amo_alu(ROCE_XOP_ADD, 4, 0xFFFFFFFFull, 2, 0, 0), 1u); // wraps at 32 bits
    EXPECT_EQ(amo_alu(ROCE_XOP_SWAP, 8, 5, 9, 0, 0), 9u);
    EXPECT_EQ(amo_alu(ROCE_XOP_SWAP, 4, 5, 0x1234567890ull, 0, 0), 0x34567890u);
    EXPECT_EQ(amo_alu(ROCE_XOP_XOR, 8, 0xF0F0, 0xFF00, 0, 0), 0x0FF0u);
    EXPECT_EQ(amo_alu(ROCE_XOP_AND, 8, 0xF0F0, 0xFF00, 0, 0), 0xF000u);
    EXPECT_EQ(amo_alu(ROCE_XOP_OR, 8, 0xF0F0, 0xFF00, 0, 0), 0xFFF0u);
    // masked compare-swap: compare and replace only under the mask
    EXPECT_EQ(amo_alu(ROCE_XOP_MCSWAP, 8, 0x12345678, 0xAB00, 0x00005600, 0xFF00), 0x1234AB78u);
    EXPECT_EQ(amo_alu(ROCE_XOP_MCSWAP, 8, 0x12345678, 0xAB00, 0x00005700, 0xFF00), 0x12345678u);
    EXPECT_EQ(amo_alu(ROCE_XOP_MCSWAP, 8, 7, 9, 7, ~0ull), 9u); // = COMPARE_SWAP
    EXPECT_EQ(amo_alu(ROCE_XOP_MCSWAP, 4, 7, 9, 0xFFFFFFFF00000007ull, ~0ull), 9u);
}

TEST(AtomicUnit, HpccStartsMatchesTheStream)
{
    uint64_t r = 1;
    for (int i = 0; i < 1000; i++)
        r = hpcc_next(r);
    EXPECT_EQ(hpcc_starts(1000), r);
    EXPECT_EQ(hpcc_starts(0), 1u);
    for (int i = 0; i < 12345; i++)
        r = hpcc_next(r);
    EXPECT_EQ(hpcc_starts(13345), r);
}

// Every geometry (no cache, direct-mapped, 4-way, fully associative, one line), both data paths:
// the results and the final memory are those of in-order execution.
TEST(AtomicUnit, RandomStreamsAreExactForEveryGeometry)
{
    for (auto at : {AmuAtomicity::Global, AmuAtomicity::Hca})
        for (const auto &geo : kGeometries)
            for (uint32_t words : {1u, 5u, 300u}) {
                AmuConfig c;
                c.atomicity = at;
                c.cache_lines = geo.lines;
                c.cache_ways = geo.ways;
                c.tags = 8;
                expect_exact(c, words * 31 + geo.lines, 3000, words,
                             std::string(at == AmuAtomicity::Hca ? "hca" : "global") + " lines " +
                                 std::to_string(geo.lines) + " ways " + std::to_string(geo.ways) + " words " +
                                 std::to_string(words));
            }
}

TEST(AtomicUnit, RandomStreamsAreExactForEveryPolicyAndRawApproach)
{
    for (auto raw : {AmuRaw::Ack, AmuRaw::Flush})
        for (auto rl : {AmuRateLimit::Off, AmuRateLimit::Aging, AmuRateLimit::HostQueue, AmuRateLimit::Both})
            for (uint32_t lines : {0u, 4u, 32u}) {
                AmuConfig c;
                c.atomicity = AmuAtomicity::Hca;
                c.raw = raw;
                c.raw_entries = 2;
                c.rate_limit = rl;
                c.cache_lines = lines;
                c.cache_ways = lines ? 2 : 1;
                c.host_lat_ns = 50;
                c.regs = 2;
                expect_exact(c, uint32_t(lines + 7 * int(rl) + 100 * int(raw)), 2000, 9,
                             "raw " + std::to_string(int(raw)) + " rate-limit " + std::to_string(int(rl)) +
                                 " lines " + std::to_string(lines));
            }
}

// Sec. III.B: a word written through and read again at once (no cache: every op reads the host).
// With no RAW buffer the read passes the write (it reaches memory mem-ns later) and updates are
// lost; both approaches keep the result exact, each with its own counters.
TEST(AtomicUnit, RawHazardBufferAckAndFlush)
{
    auto run = [](AmuRaw raw, AmuCounters *ctr) {
        std::vector<uint64_t> mem(64, 0);
        Host h(mem);
        AmuConfig c;
        c.atomicity = AmuAtomicity::Hca;
        c.cache_lines = 0;
        c.raw = raw;
        c.raw_entries = 4;
        c.mem_ns = 200;
        AtomicUnit u(c, h);
        for (uint64_t i = 0; i < 400; i++) {
            AmoRequest r;
            r.id = i;
            r.addr = kBase + (i % 2) * 8;
            r.operand = 1;
            u.submit(r);
        }
        u.drain();
        *ctr = u.counters();
        return mem[0] + mem[1];
    };
    AmuCounters none, ack, flush;
    EXPECT_LT(run(AmuRaw::None, &none), 400u); // the hazard is real in the model
    EXPECT_EQ(run(AmuRaw::Ack, &ack), 400u);
    EXPECT_GT(ack.raw_hits, 0u);
    EXPECT_EQ(ack.raw_flushes, 0u);
    EXPECT_EQ(run(AmuRaw::Flush, &flush), 400u);
    EXPECT_GT(flush.raw_flushes, 0u);
    EXPECT_GT(flush.raw_hits, 0u);
}

// Rate limiting keeps results in the register file: host writes are saved, no update is lost,
// and every op is either written through or suppressed.
TEST(AtomicUnit, RateLimitingNeverLosesAnUpdate)
{
    for (auto rl : {AmuRateLimit::Aging, AmuRateLimit::HostQueue, AmuRateLimit::Both}) {
        std::vector<uint64_t> mem(4, 0);
        Host h(mem);
        AmuConfig c;
        c.atomicity = AmuAtomicity::Hca;
        c.rate_limit = rl;
        c.hostq_threshold = 1;
        c.net_mbps = 100000; // arrivals outrun the host link: the input queue backs up
        AtomicUnit u(c, h);
        for (uint64_t i = 0; i < 5000; i++) {
            AmoRequest r;
            r.id = i;
            r.addr = kBase + 8;
            r.operand = 3;
            u.submit(r);
        }
        u.drain();
        const auto &k = u.counters();
        EXPECT_EQ(mem[1], 15000u) << int(rl);
        EXPECT_GT(k.writes_suppressed, 1000u) << int(rl);
        EXPECT_EQ(k.host_writes + k.writes_suppressed, 5000u) << int(rl);
        EXPECT_EQ(k.forwards, k.writes_suppressed) << int(rl);
        if (rl != AmuRateLimit::HostQueue) { // at most age-max register writes in a row
            EXPECT_GE(k.host_writes * c.age_max + k.host_writes, 5000u) << int(rl);
        }
    }
    // Off: every result is written through.
    std::vector<uint64_t> mem(1, 0);
    Host h(mem);
    AmuConfig c;
    c.rate_limit = AmuRateLimit::Off;
    AtomicUnit u(c, h);
    for (uint64_t i = 0; i < 100; i++)
        u.submit(AmoRequest{i, kBase, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
    u.drain();
    EXPECT_EQ(u.counters().host_writes, 100u);
    EXPECT_EQ(mem[0], 100u);
}

TEST(AtomicUnit, TagLimitIsRespected)
{
    for (uint32_t tags : {1u, 4u, 32u}) {
        std::vector<uint64_t> mem(4096, 0);
        Host h(mem);
        AmuConfig c;
        c.cache_lines = 0;
        c.tags = tags;
        AtomicUnit u(c, h);
        for (uint64_t i = 0; i < 2000; i++)
            u.submit(AmoRequest{i, kBase + (i * 97 % 4096) * 8, ROCE_XOP_XOR, 8, false, i, 0, 0, 0});
        u.drain();
        EXPECT_EQ(u.counters().max_outstanding, tags);
        EXPECT_GT(u.counters().stall_tags, 0u);
        EXPECT_LE(u.mean_outstanding(), double(tags));
    }
}

TEST(AtomicUnit, MalformedOperationsCompleteWithErrors)
{
    std::vector<uint64_t> mem(4, 0x1111);
    Host h(mem);
    AtomicUnit u(AmuConfig{}, h);
    u.submit(AmoRequest{0, kBase + 4, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0});             // unaligned
    u.submit(AmoRequest{1, kBase + 2, ROCE_XOP_ADD, 4, true, 1, 0, 0, 0});             // unaligned
    u.submit(AmoRequest{2, kBase, ROCE_XOP_COUNT, 8, true, 1, 0, 0, 0});               // bad op
    u.submit(AmoRequest{3, kBase, ROCE_XOP_ADD, 3, true, 1, 0, 0, 0});                 // bad size
    u.submit(AmoRequest{4, kBase + 32, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0});            // beyond memory
    u.submit(AmoRequest{5, 0, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0});                     // below memory
    u.submit(AmoRequest{6, kBase + 8, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0});             // fine
    u.submit(AmoRequest{7, 0xFFFFFFFFFFFFFFF8ull, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0}); // wraps
    u.drain();
    ASSERT_EQ(h.done, 8u);
    EXPECT_EQ(h.results[0].status, AmoStatus::Unaligned);
    EXPECT_EQ(h.results[1].status, AmoStatus::Unaligned);
    EXPECT_EQ(h.results[2].status, AmoStatus::BadOp);
    EXPECT_EQ(h.results[3].status, AmoStatus::BadOp);
    EXPECT_EQ(h.results[4].status, AmoStatus::AccessError);
    EXPECT_EQ(h.results[5].status, AmoStatus::AccessError);
    EXPECT_EQ(h.results[6].status, AmoStatus::Ok);
    EXPECT_EQ(h.results[6].old, 0x1111u);
    EXPECT_EQ(h.results[7].status, AmoStatus::AccessError);
    EXPECT_EQ(u.counters().errors, 7u);
    EXPECT_EQ(h.errors.size(), 7u);
    EXPECT_NE(h.errors[0].find("unaligned"), std::string::npos);
    EXPECT_EQ(mem, (std::vector<uint64_t>{0x1111, 0x1112, 0x1111, 0x1111}));
}

// Global atomicity: the unit's operations and a CPU's own atomics on the same word, at the same
// time, lose nothing (docs/atomic-unit.md "Atomicity").
TEST(AtomicUnit, GlobalAtomicityWithConcurrentCpuAtomics)
{
    std::vector<uint64_t> mem(2, 0);
    Host h(mem);
    AmuConfig c;
    c.atomicity = AmuAtomicity::Global;
    c.cache_lines = 32;
    AtomicUnit u(c, h);
    constexpr uint64_t kNic = 200000, kCpu = 200000;
    std::atomic<bool> go{false};
    std::thread cpu([&] {
        while (!go.load()) {
        }
        for (uint64_t i = 0; i < kCpu; i++) {
            __atomic_fetch_add(&mem[0], 1, __ATOMIC_SEQ_CST);
            __atomic_fetch_xor(&mem[1], uint64_t(1) << (i % 64), __ATOMIC_SEQ_CST);
        }
    });
    go = true;
    for (uint64_t i = 0; i < kNic; i++) {
        u.submit(AmoRequest{2 * i, kBase, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
        u.submit(AmoRequest{2 * i + 1, kBase + 8, ROCE_XOP_XOR, 8, false, uint64_t(1) << (i % 64), 0, 0, 0});
        if (i % 1000 == 999) u.run_until(u.now_ps() + 1000000);
    }
    u.drain();
    cpu.join();
    EXPECT_EQ(mem[0], kNic + kCpu);
    EXPECT_EQ(mem[1], 0u); // each bit flipped an even number of times in all
    EXPECT_GT(u.counters().hits, 0u);
}

// Timing rules, computed by hand from the defaults (500 MHz: 2 ns cycles; 48 B at 4 GB/s: 12 ns;
// 8 B at 2.3 GB/s: 3.478 ns; 12 B: 5.217 ns; host latency 250 ns; memory 70 ns).
TEST(AtomicUnit, TimingOfOneMissByHand)
{
    std::vector<uint64_t> mem(1, 0);
    Host h(mem);
    AmuConfig c;
    c.cache_lines = 0;
    AtomicUnit u(c, h);
    u.submit(AmoRequest{0, kBase, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0});
    u.drain();
    // in the input queue at 12 ns; issued in that cycle; the read leaves the next cycle (14 ns),
    // reaches the host at 14 + 3.478 + 250, the memory answers 70 ns later, the response takes
    // 5.217 ns on the link and 250 ns back: 592.695 ns; operand ready a cycle later (594.695);
    // the ALU runs at the next cycle boundary (596 ns) and completes at 598 ns.
    EXPECT_EQ(h.results[0].done_ps, 598000u);
    EXPECT_EQ(u.counters().host_reads, 1u);
    EXPECT_EQ(u.counters().host_writes, 1u);
    // Tag times (AmuStats): the read from its departure (14 ns) to its response (592.695 ns); the
    // write (16 B: 6.956 ns) leaves the cycle after the ALU (598 ns) and holds its tag 250 ns more.
    const AmuStats &s = u.stats();
    EXPECT_EQ(s.reads, 1u);
    EXPECT_EQ(s.read_hold_ps, 578695u);
    EXPECT_EQ(s.writes, 1u);
    EXPECT_EQ(s.write_hold_ps, 256956u);
    EXPECT_EQ(s.resp_wait_ps, 0u);
}

// Sec. III.A: "A cache entry is busy if it has been read and not yet written back (either to the
// cache or the register file)", and sec. V-A on Fig. 3: a conflicting access waits "while the
// first access is serviced and then consumed". One line, two words: the second op's miss blocks
// the issue unit while the first's read is outstanding, and issues the cycle its op is executed
// (written to the line), not when the write-through reaches the host (250 ns later) or completes.
TEST(AtomicUnit, ConflictWaitsForTheCacheWriteNotTheHostWrite)
{
    std::vector<uint64_t> mem(2, 0);
    Host h(mem);
    AmuConfig c;
    c.cache_lines = 1;
    AtomicUnit u(c, h);
    u.submit(AmoRequest{0, kBase, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
    u.submit(AmoRequest{1, kBase + 8, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
    u.drain();
    EXPECT_EQ(h.results[0].done_ps, 598000u); // TimingOfOneMissByHand
    // op 1 issues at 596 ns with the ALU's write of op 0; the host queue sends that write at 598 ns
    // (6.956 ns on the link), then op 1's read at 606 ns: 578.695 ns round trip, operand a cycle
    // later (1186.695), the ALU at 1188, done at 1190 ns.
    EXPECT_EQ(h.results[1].done_ps, 1190000u);
    EXPECT_EQ(u.counters().stall_conflict, 1u);
    const AmuStats &s = u.stats();
    // blocked from op 1's arrival in the queue (24 ns) to 596 ns: on the filling line until the
    // response is in (the instant 594 ns), then one cycle for the ALU to execute op 0
    EXPECT_EQ(s.block_ps[size_t(AmuBlock::ConflictFill)], 570000u);
    EXPECT_EQ(s.block_ps[size_t(AmuBlock::ConflictAlu)], 2000u);
    EXPECT_EQ(mem[0], 1u);
    EXPECT_EQ(mem[1], 1u);
}

// The host->NIC direction is first come, first served in time (RandomAccess: the node's own
// 32-byte commands and the 12-byte read responses, eq. 4). A command that is ready while a
// response is still in host memory goes first; the link is not held idle for the response.
TEST(AtomicUnit, HostToNicDirectionServesInTimeOrder)
{
    std::vector<uint64_t> mem(2, 0);
    Host h(mem);
    AmuConfig c;
    c.cache_lines = 0;
    c.symmetric = true;
    AtomicUnit u(c, h);
    // op 0's read reaches the host at 267.478 ns, its response is ready at 337.478 ns; op 1's
    // message is in at 292 ns and its command takes the direction 292..305.9 ns.
    u.submit(AmoRequest{0, kBase, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
    u.submit(AmoRequest{1, kBase + 8, ROCE_XOP_ADD, 8, false, 1, 0, 0, 280000});
    u.drain();
    const AmuStats &s = u.stats();
    EXPECT_EQ(s.cmds, 2u);
    EXPECT_EQ(s.cmd_wait_ps, 0u);  // not behind op 0's response, which was not ready
    EXPECT_EQ(s.resp_wait_ps, 0u); // nor the response behind the command, done before it was ready
    EXPECT_EQ(h.results[0].done_ps, 598000u);
    // Saturated: RandomAccess with no tag limit runs near the bound of eq. 5 (the host->NIC
    // direction, 44 bytes per update), which the direction then fills; the rest of a read's tag
    // time is the unloaded round trip (TimingOfOneMissByHand) plus its response's queueing there.
    AmuConfig g;
    g.cache_lines = 0;
    g.symmetric = true;
    g.tags = 4096;
    const auto r = amu_model_gups(g, GupsMix{});
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.exact);
    const double bound = amu_bounds(g).amu_rate / 1e6;
    EXPECT_GT(r.mops, 0.95 * bound);
    EXPECT_LE(r.mops, bound * 1.001);
    EXPECT_GT(double(r.s.h2n_busy_ps) / 1000.0, 0.95 * r.active_ns);
    EXPECT_EQ(r.s.read_hold_ps - r.s.resp_wait_ps, r.s.reads * 578695u);
    // Offered evenly at 2 M updates/s (almost) nothing queues: each update holds tags for eq. 6's
    // RdLat + MemLat + WrLat (820 ns) plus serialisation, 835.651 ns.
    GupsMix light;
    light.offered_mups = 2;
    const auto l = amu_model_gups(g, light);
    ASSERT_TRUE(l.ok) << l.error;
    EXPECT_NEAR(l.mops, 2.0, 0.01);
    EXPECT_LT(l.s.resp_wait_ps, l.s.reads * 100u); // a response rarely meets a command (< 0.1 ns each)
    EXPECT_EQ(l.s.read_hold_ps - l.s.resp_wait_ps, l.s.reads * 578695u);
    EXPECT_EQ(l.s.write_hold_ps, l.s.writes * 256956u);
}

// One word, 63 sources, a cache: the register file absorbs the updates and the rate is the
// network's, 48-byte messages at 4 GB/s = 83.33 M/s = 666.7 MB/s (sec. V-A, Fig. 3) at every
// host latency; without a cache every update waits a host round trip and its RAW acknowledgement.
TEST(AtomicUnit, HotSpotRatesFollowTheRules)
{
    HotspotMix m;
    m.pes = 64;
    m.ops_per_pe = 200;
    for (uint32_t lat : {50u, 250u}) {
        AmuConfig c;
        c.host_lat_ns = lat;
        const auto r = amu_model_hotspot(c, m);
        ASSERT_TRUE(r.ok) << r.error;
        EXPECT_TRUE(r.exact);
        EXPECT_NEAR(r.mops, 83.33, 0.5) << lat;
        c.cache_lines = 0;
        const auto n = amu_model_hotspot(c, m);
        ASSERT_TRUE(n.ok);
        EXPECT_TRUE(n.exact);
        // per update: read round trip + ack of the write, about 4 x latency + 2 x memory
        const double per_ns = 1000.0 / n.mops, by_hand = 4.0 * lat + 2 * c.mem_ns;
        EXPECT_GT(per_ns, by_hand) << lat;
        EXPECT_LT(per_ns, by_hand + 40) << lat;
    }
}

// Fig. 3 at 16 addresses per PE depends on the order in which the sources' messages reach the
// target (HotspotMix::order; docs/atomic-unit.md): sources in turn line up their i-th words, which
// map to 2 of the 32 direct-mapped sets, so nearly every op waits for its set; a random source each
// finds its set taken after ~7 sets, and so does the torus's per-packet round-robin (the default);
// a PE's 16 words back to back take 16 distinct sets. Every
// order delivers every op (exact memory), and refuses a burst longer than a PE's ops.
TEST(AtomicUnit, HotSpotArrivalOrderDecidesTheReadsInFlight)
{
    AmuConfig c;
    c.cache_lines = 32;
    c.tags = 32;
    HotspotMix m;
    m.pes = 64;
    m.ops_per_pe = 160;
    m.addrs_per_pe = 16;
    AmuLoadResult r[4];
    const HotspotOrder orders[4] = {HotspotOrder::RoundRobin, HotspotOrder::Random, HotspotOrder::Bursts,
                                    HotspotOrder::Torus};
    for (int k = 0; k < 4; k++) {
        m.order = orders[k];
        r[k] = amu_model_hotspot(c, m);
        ASSERT_TRUE(r[k].ok) << r[k].error;
        EXPECT_TRUE(r[k].exact) << k;
        EXPECT_EQ(r[k].ops, 63u * 160u);
    }
    for (int k = 0; k < 4; k++)
        std::printf("order %d: %.1f MB/s, %.1f in flight, %llu conflict stalls\n", k, r[k].mbps,
                    r[k].mean_outstanding, (unsigned long long)r[k].c.stall_conflict);
    EXPECT_LT(r[0].mean_outstanding, 4.0);
    EXPECT_LT(r[0].mean_outstanding, r[1].mean_outstanding);
    EXPECT_GT(r[2].mean_outstanding, 2 * r[1].mean_outstanding);
    EXPECT_GT(r[2].mbps, 2 * r[1].mbps);
    EXPECT_GT(r[1].mbps, 2 * r[0].mbps);
    // the torus interleaves its inputs per packet: close to a random source each, far from bursts
    EXPECT_GT(r[3].mean_outstanding, 0.75 * r[1].mean_outstanding);
    EXPECT_LT(r[3].mean_outstanding, 1.25 * r[1].mean_outstanding);
    m.order = HotspotOrder::Bursts;
    m.burst = 161;
    EXPECT_FALSE(amu_model_hotspot(c, m).ok);
}

// The network of sec. IV (torus.h): the cube-like factorisation, the latencies by hand, and
// round-robin arbitration at every router sharing the target's port among its inputs.
TEST(Torus, DimensionsAreTheFactorisationClosestToACube)
{
    using D = std::array<uint32_t, 3>;
    EXPECT_EQ(torus_dims(32), (D{4, 4, 2})); // 64 PEs on 32 dual-processor nodes
    EXPECT_EQ(torus_dims(27), (D{3, 3, 3}));
    EXPECT_EQ(torus_dims(4), (D{2, 2, 1}));
    EXPECT_EQ(torus_dims(7), (D{7, 1, 1}));
    EXPECT_EQ(torus_dims(1), (D{1, 1, 1}));
}

TEST(Torus, TwoNodesShareTheTargetsPortRoundRobin)
{
    // PEs 0 and 1 on node 0 (PE 0 the target), PEs 2 and 3 on node 1, one link between them
    const TorusOrder o = torus_hotspot_order(TorusNet{}, 4, 400);
    ASSERT_TRUE(o.ok) << o.error;
    ASSERT_EQ(o.src.size(), 1200u);
    // PE 1: injected in 6 cycles (48 B at 4 GB/s, 2 ns cycles), 25 in the router, 6 to eject
    EXPECT_EQ(o.src[0], 1u);
    EXPECT_EQ(o.at_cycle[0], 37u);
    EXPECT_EQ(o.at_cycle[1], 43u);
    // PE 2: one more link time and router, ready to eject at 31 + 6 + 25 = 62, but the port is
    // PE 1's until 67 (its sixth message, ready at 61): out at 73
    const size_t first2 = size_t(std::find(o.src.begin(), o.src.end(), 2u) - o.src.begin());
    ASSERT_EQ(first2, 6u);
    EXPECT_EQ(o.at_cycle[first2], 73u);
    // then the ejection alternates between its two inputs, and node 1's link between its PEs
    uint32_t n[4] = {};
    for (size_t i = 100; i < 500; i++)
        n[o.src[i]]++;
    EXPECT_EQ(n[1], 200u);
    EXPECT_EQ(n[2], 100u);
    EXPECT_EQ(n[3], 100u);
    uint32_t all[4] = {};
    for (uint32_t p : o.src)
        all[p]++;
    EXPECT_EQ(all[0], 0u);
    EXPECT_EQ(all[1], 400u);
    EXPECT_EQ(all[3], 400u);
    TorusNet bad;
    bad.msg_bytes = 0;
    EXPECT_FALSE(torus_hotspot_order(bad, 4, 10).ok);
    EXPECT_FALSE(torus_hotspot_order(TorusNet{}, 1, 10).ok);
    const TorusOrder huge = torus_hotspot_order(TorusNet{}, 4096, 100000); // hours: refused at once
    EXPECT_FALSE(huge.ok);
    EXPECT_NE(huge.error.find("router-cycles"), std::string::npos) << huge.error;
}

TEST(Torus, SixtyFourPEsKeepTheTargetsLinkBusy)
{
    const TorusOrder o = torus_hotspot_order(TorusNet{}, 64, 300);
    ASSERT_TRUE(o.ok) << o.error;
    EXPECT_EQ(o.dims, (std::array<uint32_t, 3>{4, 4, 2}));
    std::vector<uint32_t> per(64, 0);
    for (uint32_t p : o.src)
        per[p]++;
    for (uint32_t p = 1; p < 64; p++)
        EXPECT_EQ(per[p], 300u) << p;
    // buffers covering the credit round trip: from the first arrival on, a message every 6 cycles
    EXPECT_EQ(o.ejection_busy, 63u * 300u * 6u);
    EXPECT_EQ(o.cycles - o.at_cycle[0] + 6, o.ejection_busy);
    // node 0's router has six inputs with traffic (+x, -x, +y, -y, +z, its own NIC): the local
    // PE 1 gets a sixth of the port at first, PE 2 and 3 (on node 1, behind -x) a twelfth each
    uint32_t early[64] = {};
    for (size_t i = 60; i < 660; i++)
        early[o.src[i]]++;
    EXPECT_NEAR(early[1], 100, 2);
    EXPECT_NEAR(early[2], 50, 2);
    EXPECT_NEAR(early[3], 50, 2);
    // shallow buffers (2 packets) cannot cover the round trip: the target's link idles
    TorusNet shallow;
    shallow.vc_packets = 2;
    const TorusOrder s = torus_hotspot_order(shallow, 64, 300);
    ASSERT_TRUE(s.ok);
    EXPECT_LT(double(s.ejection_busy) / double(s.cycles), 0.8);
    // many nodes, one-packet buffers: the dateline VCs keep it moving
    TorusNet one;
    one.vc_packets = 1;
    const TorusOrder big = torus_hotspot_order(one, 256, 10);
    ASSERT_TRUE(big.ok) << big.error;
    EXPECT_EQ(big.src.size(), 255u * 10u);
}

// The default arrival order is the torus's; a kept order serves a sweep and is checked.
TEST(AtomicUnit, HotSpotTakesItsOrderFromTheTorus)
{
    AmuConfig c;
    HotspotMix m;
    m.pes = 16;
    m.ops_per_pe = 50;
    m.addrs_per_pe = 16;
    EXPECT_EQ(m.order, HotspotOrder::Torus);
    const auto a = amu_model_hotspot(c, m);
    ASSERT_TRUE(a.ok) << a.error;
    EXPECT_TRUE(a.exact);
    TorusOrder o = torus_hotspot_order(m.net, m.pes, m.ops_per_pe);
    ASSERT_TRUE(o.ok);
    m.arrivals = std::make_shared<const std::vector<uint32_t>>(o.src);
    const auto b = amu_model_hotspot(c, m);
    ASSERT_TRUE(b.ok) << b.error;
    EXPECT_EQ(b.elapsed_ns, a.elapsed_ns);
    EXPECT_EQ(b.c.misses, a.c.misses);
    std::vector<uint32_t> dup(o.src.size(), 1u); // PE 1 named 15 times too often
    m.arrivals = std::make_shared<const std::vector<uint32_t>>(dup);
    const auto d = amu_model_hotspot(c, m);
    EXPECT_FALSE(d.ok);
    EXPECT_NE(d.error.find("PE 1, not a source with messages left"), std::string::npos) << d.error;
    std::vector<uint32_t> zero(o.src);
    zero[0] = 0; // the target itself
    m.arrivals = std::make_shared<const std::vector<uint32_t>>(zero);
    const auto z = amu_model_hotspot(c, m);
    EXPECT_FALSE(z.ok);
    EXPECT_NE(z.error.find("PE 0,"), std::string::npos) << z.error;
    m.arrivals = std::make_shared<const std::vector<uint32_t>>(o.src.begin(), o.src.end() - 1);
    EXPECT_FALSE(amu_model_hotspot(c, m).ok);
}

TEST(AtomicUnit, BoundsAreSectionSixs)
{
    AmuConfig c;
    const AmuBounds b = amu_bounds(c);
    EXPECT_NEAR(b.amu_rate / 1e6, 52.27, 0.01);    // 2.3 GB/s / 44 B
    EXPECT_NEAR(b.base_rate / 1e6, 71.88, 0.01);   // 2.3 GB/s / 32 B
    EXPECT_NEAR(b.target_rate / 1e6, 83.33, 0.01); // network: 4 GB/s / 48 B
    EXPECT_NEAR(b.req_gups, 42.86, 0.01);          // Table III: 43
    EXPECT_NEAR(b.req_target, 68.33, 0.01);        // Table IV: 69
}

TEST(AtomicUnit, ConfigCheckNamesTheProperty)
{
    AmuConfig c;
    EXPECT_EQ(amu_check_config(c), nullptr);
    c.cache_lines = 32;
    c.cache_ways = 64;
    ASSERT_NE(amu_check_config(c), nullptr);
    EXPECT_NE(std::string(amu_check_config(c)).find("cache-ways"), std::string::npos);
    c = AmuConfig{};
    c.tags = 0;
    EXPECT_NE(amu_check_config(c), nullptr);
    c = AmuConfig{};
    c.lookahead = 100;
    EXPECT_NE(amu_check_config(c), nullptr);
    c = AmuConfig{};
    c.cache_lines = 30;
    c.cache_ways = 4;
    EXPECT_NE(amu_check_config(c), nullptr);
}

// The RNIC's way in (AtomicUnit::execute): each value at submission, the model run up to each next
// arrival before it is submitted (the device runs it to the arrival on its clock). For every
// geometry, rate-limit policy and RAW approach, on random streams of every op kind with bursts
// (operations that share the window) and gaps: the old values and memory are the in-order
// reference, and the model's timing and counters are exactly those of the same stream submitted
// and executed at the ALU (submit + drain): forwarding, suppressed writes, stalls, RAW hits and
// flushes, the tag limit and the busy time act the same.
TEST(AtomicUnit, ExecuteAtArrivalTimesTheSameWindowAsTheAlu)
{
    uint64_t forwards = 0, suppressed = 0, raw_hits = 0, raw_flushes = 0, stall_tags = 0, stall_busy = 0,
             stall_conflict = 0;
    for (auto raw : {AmuRaw::Ack, AmuRaw::Flush})
        for (auto rl : {AmuRateLimit::Off, AmuRateLimit::Aging, AmuRateLimit::HostQueue, AmuRateLimit::Both})
            for (const auto &geo : kGeometries) {
                AmuConfig c;
                c.raw = raw;
                c.raw_entries = 2;
                c.rate_limit = rl;
                c.cache_lines = geo.lines;
                c.cache_ways = geo.ways;
                c.tags = 4;
                c.regs = 2;
                const uint32_t words = 6, seed = geo.lines * 13 + 7 * uint32_t(rl) + 100 * uint32_t(raw);
                const std::string what = "raw " + std::to_string(int(raw)) + " rate-limit " +
                                         std::to_string(int(rl)) + " lines " + std::to_string(geo.lines) +
                                         " ways " + std::to_string(geo.ways);
                std::vector<uint64_t> init(words);
                std::mt19937_64 g(seed ^ 0x55);
                for (auto &w : init)
                    w = g();
                auto ops = random_ops(seed, 2000, words);
                std::vector<uint64_t> ref = init;
                const auto old = reference(ref, ops);

                std::vector<uint64_t> mem_a = init, mem_b = init;
                Host ha(mem_a), hb(mem_b);
                AtomicUnit a(c, ha), b(c, hb);
                for (const auto &r : ops)
                    a.submit(r);
                a.drain();
                std::vector<uint64_t> got(ops.size());
                for (const auto &r : ops) {
                    if (b.now_ps() < r.arrival_ps) b.run_until(r.arrival_ps);
                    ASSERT_EQ(b.execute(r, &got[r.id]), AmoStatus::Ok) << what;
                    ASSERT_EQ(got[r.id], old[r.id]) << what << " op " << r.id; // at once
                }
                b.drain();
                ASSERT_EQ(hb.done, ops.size()) << what;
                EXPECT_TRUE(hb.errors.empty()) << what;
                EXPECT_EQ(mem_b, ref) << what;
                for (size_t i = 0; i < ops.size(); i++) {
                    ASSERT_EQ(hb.results[i].old, old[i]) << what << " op " << i;
                    ASSERT_EQ(hb.results[i].done_ps, ha.results[i].done_ps) << what << " op " << i;
                }
                const AmuCounters &ka = a.counters(), &kb = b.counters();
#define AMU_SAME_(name, doc) EXPECT_EQ(kb.name, ka.name) << what << ": " #name;
                AMU_COUNTERS(AMU_SAME_)
#undef AMU_SAME_
                EXPECT_EQ(b.active_ps(), a.active_ps()) << what;
                EXPECT_LE(kb.max_outstanding, c.tags) << what;
                EXPECT_EQ(kb.host_writes + kb.writes_suppressed, ops.size()) << what; // none lost
                forwards += kb.forwards;
                suppressed += kb.writes_suppressed;
                raw_hits += kb.raw_hits;
                raw_flushes += kb.raw_flushes;
                stall_tags += kb.stall_tags;
                stall_busy += kb.stall_busy;
                stall_conflict += kb.stall_conflict;
            }
    // the streams exercised what the window and the buffers do
    EXPECT_GT(forwards, 0u);
    EXPECT_GT(suppressed, 0u);
    EXPECT_GT(raw_hits, 0u);
    EXPECT_GT(raw_flushes, 0u);
    EXPECT_GT(stall_tags, 0u);
    EXPECT_GT(stall_busy, 0u);
    EXPECT_GT(stall_conflict, 0u);
}

// execute() refuses what submit() would refuse at issue (no memory touched, the error completed
// and counted by the model), and with atomicity Hca it queues nothing.
TEST(AtomicUnit, ExecuteRefusalsAndHca)
{
    std::vector<uint64_t> mem(4, 7);
    Host h(mem);
    AtomicUnit u(AmuConfig{}, h);
    uint64_t old = 1;
    EXPECT_EQ(u.execute(AmoRequest{0, kBase + 4, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0}, &old),
              AmoStatus::Unaligned);
    EXPECT_EQ(old, 0u);
    EXPECT_EQ(u.execute(AmoRequest{1, kBase, 9, 8, true, 1, 0, 0, 0}, &old), AmoStatus::BadOp);
    EXPECT_EQ(u.execute(AmoRequest{2, kBase + 64, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0}, &old),
              AmoStatus::AccessError);
    EXPECT_EQ(u.execute(AmoRequest{3, kBase + 8, ROCE_XOP_ADD, 8, true, 5, 0, 0, 0}, &old), AmoStatus::Ok);
    EXPECT_EQ(old, 7u);
    EXPECT_EQ(mem, (std::vector<uint64_t>{7, 12, 7, 7}));
    u.drain();
    EXPECT_EQ(h.done, 4u);
    EXPECT_EQ(u.counters().errors, 3u);
    EXPECT_EQ(h.errors.size(), 3u);
    EXPECT_EQ(h.results[3].status, AmoStatus::Ok);
    EXPECT_EQ(h.results[3].old, 7u);
    EXPECT_EQ(mem, (std::vector<uint64_t>{7, 12, 7, 7})) << "the ALU did not execute it twice";

    AmuConfig hca;
    hca.atomicity = AmuAtomicity::Hca;
    AtomicUnit v(hca, h);
    EXPECT_EQ(v.execute(AmoRequest{0, kBase, ROCE_XOP_ADD, 8, true, 1, 0, 0, 0}, &old), AmoStatus::BadOp);
    EXPECT_TRUE(v.idle());
    EXPECT_EQ(mem[0], 7u);
}

// The busy time excludes idle gaps: two isolated misses take twice one miss's time, however far
// apart they arrive.
TEST(AtomicUnit, ActiveTimeExcludesIdleGaps)
{
    std::vector<uint64_t> mem(2, 0);
    Host h(mem);
    AtomicUnit one(AmuConfig{}, h);
    one.submit(AmoRequest{0, kBase, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
    one.drain();
    const uint64_t t1 = one.active_ps();
    EXPECT_GT(t1, 0u);
    AtomicUnit two(AmuConfig{}, h);
    two.submit(AmoRequest{0, kBase, ROCE_XOP_ADD, 8, false, 1, 0, 0, 0});
    two.submit(AmoRequest{1, kBase + 8, ROCE_XOP_ADD, 8, false, 1, 0, 0, 1000000000});
    two.drain();
    EXPECT_EQ(two.active_ps(), 2 * t1);
    EXPECT_GT(two.now_ps(), 1000000000u);
}
