// SPDX-License-Identifier: MIT
// The RMC timing model (hw/sonuma/timing.h) against the table of docs/design/sonuma-rmc.md sec. 5
// (Table 2's parameters) and the shape of the SABRes paper Fig. 7a.
#include <algorithm>

#include <gtest/gtest.h>

#include "timing.h"

using namespace rackemu::sonuma;

namespace {

double sabre(const Timing &t, uint32_t bytes, bool spec)
{
    SabreTrace tr;
    tr.nblocks = (bytes + 63) / 64;
    tr.spec = spec;
    return model_sabre_ns(t, model_r2p2_sabre_ns(t, tr), false);
}

// Table 2 / sec. 5.1 by hand: c = 1 ns (1 GHz), M = 90, L = 10, H = 35 (1 hop), s = (64 + 16) B /
// 100 GB/s = 0.8 ns; one R2P2: g = max(1 cycle, 64 B / 20 GB/s = 3.2 ns) = 3.2 ns per block; a
// read over 4 R2P2s: g_r = max(3.2 / 4 = 0.8, s = 0.8, c = 1) = 1 ns per block (the RCP's cycle).
// F = L + c + 2H + s + c + L = 92.8. read(n) = F + c + M + (n-1) g_r = 183.8 + (n-1);
// SABRe(n) = F + c + R, R = 2c + M + (n-1) g + c: 186.8 + 3.2 (n-1); no speculation: + M (n > 1).
TEST(SonumaTiming, TableOfTheDesign)
{
    Timing t;
    struct Row {
        uint32_t bytes;
        double read, spec, nospec;
    } rows[] = {{64, 183.8, 186.8, 186.8},   {128, 184.8, 190.0, 280.0},  {1024, 198.8, 234.8, 324.8},
                {2048, 214.8, 286.0, 376.0}, {4096, 246.8, 388.4, 478.4}, {8192, 310.8, 593.2, 683.2}};
    for (auto &r : rows) {
        EXPECT_NEAR(model_read_ns(t, 0, r.bytes, false), r.read, 0.1) << r.bytes;
        EXPECT_NEAR(sabre(t, r.bytes, true), r.spec, 0.1) << r.bytes;
        EXPECT_NEAR(sabre(t, r.bytes, false), r.nospec, 0.1) << r.bytes;
    }
}

TEST(SonumaTiming, PaceComesFromR2p2Gbps)
{
    Timing t;
    EXPECT_NEAR(r2p2_block_ns(t), 3.2, 1e-9); // 64 B / 20 GB/s
    EXPECT_NEAR(read_block_ns(t), 1.0, 1e-9); // 4 R2P2s: 0.8 ns, but the RCP takes a cycle per block
    t.r2p2_gbps = 10;                         // 6.4 ns per block; over 4 R2P2s 1.6 ns
    EXPECT_NEAR(r2p2_block_ns(t), 6.4, 1e-9);
    EXPECT_NEAR(read_block_ns(t), 1.6, 1e-9);
    EXPECT_NEAR(model_read_ns(t, 0, 8192, false), 183.8 + 127 * 1.6, 1e-9);
    EXPECT_NEAR(sabre(t, 8192, true), 186.8 + 127 * 6.4, 1e-9);
    t.r2p2_gbps = 100; // 0.64 ns: the issue cycle (1 ns) paces one R2P2
    EXPECT_NEAR(r2p2_block_ns(t), 1.0, 1e-9);
    t.rmc_mhz = 4000; // c = 0.25: now the link's serialisation (0.8 ns)
    EXPECT_NEAR(r2p2_block_ns(t), 0.8, 1e-9);
    t = Timing{};
    t.issue_cycles = 5; // 5 cycles per block issued is slower than 20 GB/s
    EXPECT_NEAR(r2p2_block_ns(t), 5.0, 1e-9);
    EXPECT_NEAR(read_block_ns(t), 1.25, 1e-9);
}

TEST(SonumaTiming, ReadsAreSpreadOverTheR2p2sASabreIsServedByOne)
{
    Timing t;
    t.rmc_mhz = 4000;  // c = 0.25 ns and a 400 GB/s link: the R2P2s alone pace a read
    t.link_gbps = 400; // s = 0.2 ns
    // F = 10 + 0.25 + 70 + 0.2 + 0.25 + 10 = 90.7; read = F + c + M + (n-1) * 3.2 / count
    for (uint32_t count : {1u, 2u, 4u, 8u}) {
        t.r2p2_count = count;
        double g_r = 3.2 / count;
        EXPECT_NEAR(read_block_ns(t), g_r, 1e-9) << count;
        EXPECT_NEAR(model_read_ns(t, 0, 4096, false), 90.7 + 0.25 + 90 + 63 * g_r, 1e-9) << count;
        // a SABRe does not gain from more R2P2s: R = 2c + M + 63 g + c
        EXPECT_NEAR(sabre(t, 4096, true), 90.7 + 0.25 + 0.5 + 90 + 63 * 3.2 + 0.25, 1e-9) << count;
    }
}

TEST(SonumaTiming, TheGapToAReadIsTheLoadDistribution)
{
    // sec. 7.1: the SABRe - read gap comes from the one R2P2 (g) against the spread read (g_r)
    Timing t;
    for (uint32_t n = 1; n <= 256; n *= 2) {
        double rd = model_read_ns(t, 0, n * 64, false);
        EXPECT_NEAR(sabre(t, n * 64, true) - rd, 3.0 + (3.2 - 1.0) * (n - 1), 1e-9) << n;
        if (n >= 2)
            EXPECT_NEAR(sabre(t, n * 64, false) - sabre(t, n * 64, true), t.mem_ns, 1e-9) << n;
        else
            EXPECT_NEAR(sabre(t, 64, false), sabre(t, 64, true), 1e-9);
    }
    t.r2p2_count = 1; // one R2P2 serves everything: a read is paced like a SABRe
    EXPECT_NEAR(sabre(t, 8192, true) - model_read_ns(t, 0, 8192, false), 3.0, 1e-9);
}

TEST(SonumaTiming, StreamBufferStallAppearsOnlyWhenItIsTooSmall)
{
    Timing t;
    // sec. 5.1's sizing: D * g = 32 * 3.2 = 102.4 >= M = 90: the buffer never runs dry
    EXPECT_NEAR(sabre(t, 128 * 64, true), 186.8 + 127 * 3.2, 1e-9);
    t.sb_depth = 8; // 8 * 3.2 = 25.6 < 90: block 8 waits for the version: issue = tv + g = 92 + 3.2
    SabreTrace tr;
    tr.nblocks = 9;
    // t0 = 2, tv = 92; block 8: max(2 + 8 * 3.2, 92 + 1 * 3.2) = 95.2, ready 185.2, + c
    EXPECT_NEAR(model_r2p2_sabre_ns(t, tr), 95.2 + 90 + 1, 1e-9);
}

TEST(SonumaTiming, LlcResidentDataCostsTheLlcLatency)
{
    Timing t;
    EXPECT_NEAR(model_read_ns(t, 0, 64, false, true), 183.8 - 90 + 10, 1e-9);
    EXPECT_NEAR(model_atomic_ns(t, false, true), model_atomic_ns(t, false) - 80, 1e-9);
    SabreTrace tr;
    tr.nblocks = 16;
    double mem = model_r2p2_sabre_ns(t, tr);
    tr.llc = true;
    EXPECT_NEAR(model_r2p2_sabre_ns(t, tr), mem - 80, 1e-9);
    tr.spec = false; // the version-then-data serialisation costs L, not M
    EXPECT_NEAR(model_r2p2_sabre_ns(t, tr) - (mem - 80), 10, 1e-9);
}

TEST(SonumaTiming, LoadAloneIsTheClosedForm)
{
    Timing t;
    for (uint32_t size : {64u, 1024u, 8192u})
        for (uint8_t op : {uint8_t(RMC_OP_READ), uint8_t(RMC_OP_SABRE)})
            for (bool spec : {true, false}) {
                LoadMix m;
                m.op = op;
                m.spec = spec;
                m.size = size;
                m.threads = 1;
                m.window = 1;
                LoadResult r = model_load(t, m);
                ASSERT_TRUE(r.ok);
                EXPECT_NEAR(r.mean_ns, r.unloaded_ns, 1e-6) << size;
                EXPECT_EQ(r.bound, "latency");
            }
}

TEST(SonumaTiming, LoadSaturatesAtTheBoundingResource)
{
    // 16 threads x 16 in flight (sec. 7.1 Fig. 7b): 4 R2P2s x 20 GB/s = 80 GB/s, and the link
    // carries 64 B of every 80-byte packet: 100 x 64 / 80 = 80 GB/s: both bound reads
    Timing t;
    LoadMix m;
    m.size = 4096;
    LoadResult r = model_load(t, m);
    ASSERT_TRUE(r.ok);
    EXPECT_NEAR(r.gbps, 80.0, 0.5);
    EXPECT_EQ(r.bound, "r2p2+link");
    m.op = RMC_OP_SABRE; // "identical throughput curves": the SABRes reach the same peak
    EXPECT_NEAR(model_load(t, m).gbps, 80.0, 0.5);
    t.link_gbps = 200; // now only the R2P2s: 4 x 20
    m.op = RMC_OP_READ;
    r = model_load(t, m);
    EXPECT_NEAR(r.gbps, 80.0, 0.5);
    EXPECT_EQ(r.bound, "r2p2");
    t = Timing{};
    t.r2p2_gbps = 40; // now only the link: 100 x 64 / 80
    r = model_load(t, m);
    EXPECT_NEAR(r.gbps, 80.0, 0.5);
    EXPECT_EQ(r.bound, "link");
    t.link_gbps = 50; // 50 x 64 / 80 = 40
    EXPECT_NEAR(model_load(t, m).gbps, 40.0, 0.3);
    t = Timing{};
    t.r2p2_gbps = 10; // 4 x 10 = 40
    EXPECT_NEAR(model_load(t, m).gbps, 40.0, 0.3);
}

TEST(SonumaTiming, SmallSabresAreBoundByTheAtt)
{
    // 64-byte SABRes, 256 in flight: each holds an ATT entry for R = 2 + 90 + 1 = 93 ns from
    // registration to validation; 4 R2P2s x 16 entries: 64 x 64 B / 93 ns = 44 GB/s, below the
    // 80 GB/s that reads of 64 B reach (the R2P2 queues lengthen the holds a little)
    Timing t;
    LoadMix m;
    m.op = RMC_OP_SABRE;
    LoadResult r = model_load(t, m);
    ASSERT_TRUE(r.ok);
    EXPECT_NEAR(r.gbps, 64 * 64 / 93.0, 1.0);
    EXPECT_EQ(r.bound, "att");
    EXPECT_GT(r.att_stalls, 0u);
    t.att_entries = 64;   // an entry for each of the 256 requests: the link bounds, carrying a block
    r = model_load(t, m); // reply (0.8 ns) and the validation packet (16 B: 0.16 ns) per SABRe
    EXPECT_NEAR(r.gbps, 64 / 0.96, 1.0);
    EXPECT_EQ(r.bound, "link");
    EXPECT_EQ(r.att_stalls, 0u);
    t = Timing{};
    m.window = 4; // 64 in flight fit the 64 entries: no stall, the curve is the read's
    r = model_load(t, m);
    m.op = RMC_OP_READ;
    EXPECT_EQ(r.att_stalls, 0u);
    EXPECT_NEAR(r.gbps, model_load(t, m).gbps, 0.5);
}

TEST(SonumaTiming, ThinkTimeFollowsEachCompletion)
{
    // synchronous threads (window 1) that are latency-bound: each request takes the unloaded
    // latency, then the thread's software takes think_ns before it issues the next one, so
    // threads / (latency + think) requests per ns (the software cost of Figs. 8 and 9)
    Timing t;
    LoadMix m;
    m.size = 128;
    m.threads = 4;
    m.window = 1;
    for (double think : {0.0, 60.0, 500.0}) {
        m.think_ns = think;
        LoadResult r = model_load(t, m);
        ASSERT_TRUE(r.ok);
        EXPECT_EQ(r.bound, "latency");
        EXPECT_NEAR(r.mops, 4 * 1000.0 / (r.unloaded_ns + think), 0.01 * r.mops) << think;
        EXPECT_NEAR(r.mean_ns, r.unloaded_ns, 1.0) << think; // think time is not request latency
    }
    // many in flight: one core's software serialises its requests: at most 1 / think each
    m.window = 16;
    m.think_ns = 100;
    EXPECT_NEAR(model_load(t, m).mops, 4 * 1000.0 / 100, 0.4);
}

TEST(SonumaTiming, SixteenSynchronousReadersOf8KiBLlcObjectsMeetTheTable2Bound)
{
    // Fig. 8's 8 KiB point (sec. 7.2: 16 synchronous readers, LLC-resident objects). Table 2's
    // configuration (4 R2P2s at sec. 7.1's 20 GB/s each, a 100 GB/s link) caps them at 80 GB/s:
    // with no software between requests both ops are at the bound, and only a reader whose time
    // per request exceeds 16 x 8 KiB / 80 GB/s = 1.64 us (latency + software) falls below it
    Timing t;
    LoadMix m;
    m.llc = true;
    m.size = 8192;
    m.threads = 16;
    m.window = 1;
    for (uint8_t op : {uint8_t(RMC_OP_READ), uint8_t(RMC_OP_SABRE)}) {
        m.op = op;
        m.think_ns = 0;
        LoadResult r = model_load(t, m);
        ASSERT_TRUE(r.ok);
        EXPECT_NEAR(r.gbps, 80.0, 0.8) << int(op);
        EXPECT_NE(r.bound, "latency") << int(op);
        for (double think : {1000.0, 1300.0, 3000.0}) { // the 16 requests of a round fit the bound
            m.think_ns = think;
            r = model_load(t, m);
            ASSERT_TRUE(r.ok);
            double want = std::min(80.0, 16 * 8192 / (r.unloaded_ns + think));
            EXPECT_NEAR(r.gbps, want, 0.05 * want) << int(op) << " " << think;
        }
    }
}

TEST(SonumaTiming, AbortedSabresOccupyTheR2p2ForTheBlocksTheyIssuedAndACycleForEachOther)
{
    // Fig. 8's conflicts under load: a LOCKED SABRe issues the blocks it can before the odd version
    // returns (LLC-resident: M / g + 1 = 10 / 3.2 + 1 = 4 at 20 GB/s), then answers the other
    // request packets at once without data, a cycle each (sec. 5.1: one reply per request)
    Timing t;
    LoadMix m;
    m.op = RMC_OP_SABRE;
    m.llc = true;
    m.size = 8192;
    m.threads = 16;
    m.window = 1;
    LoadResult none = model_load(t, m);
    ASSERT_TRUE(none.ok);
    m.abort_frac = 0.5;
    LoadResult half = model_load(t, m);
    ASSERT_TRUE(half.ok);
    const double g = 64.0 / 20, c = 1.0;
    const double occ = 0.5 * 128 * g + 0.5 * (4 * g + 124 * c);        // R2P2 ns per request, on average
    EXPECT_NEAR(half.mops, 4 * 1000.0 / occ, 0.03 * 4 * 1000.0 / occ); // the 4 R2P2s bound it
    EXPECT_NE(half.bound.find("r2p2"), std::string::npos);
    EXPECT_NEAR(half.gbps, half.mops / 1000.0 * 8192 * 0.5, 1e-6); // aborts carry no payload
    EXPECT_GT(half.mops, none.mops);                               // an abort is cheaper than a read,
    EXPECT_LT(half.gbps, none.gbps);                               // and delivers nothing
    // one thread, one request at a time, every other one aborted: each its closed form, unloaded
    m.threads = 1;
    m.requests = 100;
    LoadResult one = model_load(t, m);
    SabreTrace ta;
    ta.nblocks = 128;
    ta.llc = true;
    ta.abort = Abort::Locked;
    ta.issued_at_abort = 4;
    const double aborted = model_sabre_ns(t, model_r2p2_sabre_ns(t, ta), false);
    EXPECT_LT(aborted, one.unloaded_ns);
    EXPECT_NEAR(one.mean_ns, (aborted + one.unloaded_ns) / 2, 1e-6);
    // refused: reads do not abort, nor can every request
    m.abort_frac = 1.0;
    EXPECT_FALSE(model_load(t, m).ok);
    m.abort_frac = 0.5;
    m.op = RMC_OP_READ;
    EXPECT_FALSE(model_load(t, m).ok);
}

TEST(SonumaTiming, LoadRefusesWhatItCannotModel)
{
    Timing t;
    LoadMix m;
    m.op = RMC_OP_CAS;
    EXPECT_FALSE(model_load(t, m).ok);
    m.op = RMC_OP_SABRE;
    m.size = RMC_SABRE_MAX + 1;
    EXPECT_FALSE(model_load(t, m).ok);
    m.size = 64;
    m.threads = 0;
    EXPECT_FALSE(model_load(t, m).ok);
    m.threads = 1;
    m.think_ns = -1;
    EXPECT_FALSE(model_load(t, m).ok);
    m.think_ns = 0;
    m.threads = 4096; // x 64 requests each at least: fine; x 1000 each: too long a run
    m.requests = 1000;
    EXPECT_FALSE(model_load(t, m).ok);
    m.threads = 16;
    t.r2p2_count = 100000; // the device accepts it (closed forms); the load model refuses
    EXPECT_FALSE(model_load(t, m).ok);
    EXPECT_GT(model_read_ns(t, 0, 64, false), 0);
}

TEST(SonumaTiming, AbortsAndTheValidateStage)
{
    Timing t;
    SabreTrace ok;
    ok.nblocks = 16;
    double base = model_r2p2_sabre_ns(t, ok);
    SabreTrace v = ok;
    v.validated = true;
    EXPECT_NEAR(model_r2p2_sabre_ns(t, v) - base, t.llc_ns + 1.0, 1e-9); // one LLC access + a cycle
    SabreTrace locked = ok;
    locked.abort = Abort::Locked;
    locked.issued_at_abort = 16;
    EXPECT_LE(model_r2p2_sabre_ns(t, locked), base);
    SabreTrace early = ok; // no speculation: only block 0 issued when the odd version comes back
    early.spec = false;
    early.abort = Abort::Locked;
    early.issued_at_abort = 1;
    EXPECT_NEAR(model_r2p2_sabre_ns(t, early), 2 + 90 + 15 + 1, 1e-9);
    SabreTrace val = ok;
    val.abort = Abort::Validate;
    val.issued_at_abort = 16;
    EXPECT_GT(model_r2p2_sabre_ns(t, val), base);
}

TEST(SonumaTiming, BlocksTouchedCountTheMisalignedEdges)
{
    Timing t;
    // 64 bytes starting mid-block touch two blocks: one more pipelined block (g_r = 1 ns)
    EXPECT_NEAR(model_read_ns(t, 32, 64, false) - model_read_ns(t, 0, 64, false), 1.0, 1e-9);
    EXPECT_NEAR(model_read_ns(t, 63, 2, false), model_read_ns(t, 0, 128, false), 1e-9);
    EXPECT_NEAR(model_read_ns(t, 64, 64, false), model_read_ns(t, 0, 64, false), 1e-9);
    // WRITE: F + L + (n-1) max(c, s) + c + L
    EXPECT_NEAR(model_write_ns(t, 0, 64, false), 92.8 + 10 + 1 + 10, 1e-9);
    EXPECT_NEAR(model_write_ns(t, 0, 4096, false), 92.8 + 10 + 63 + 1 + 10, 1e-9);
}

TEST(SonumaTiming, PropertiesMoveTheModel)
{
    Timing t;
    t.hops = 3;
    EXPECT_NEAR(model_read_ns(t, 0, 64, false), 183.8 + 4 * 35, 1e-9);
    t = Timing{};
    t.link_gbps = 10; // s = 8 ns: serialisation, not the R2P2, paces the blocks
    EXPECT_NEAR(model_read_ns(t, 0, 128, false) - model_read_ns(t, 0, 64, false), 8.0, 1e-9);
    t = Timing{};
    t.rmc_mhz = 500; // c = 2 ns
    EXPECT_NEAR(sabre(t, 64, true) - model_read_ns(t, 0, 64, false), 6.0, 1e-9);
}

TEST(SonumaTiming, LocalRequestsSkipTheNetwork)
{
    Timing t;
    EXPECT_NEAR(model_read_ns(t, 0, 64, false) - model_read_ns(t, 0, 64, true), 2.0 * t.hop_ns * t.hops,
                1e-9);
    EXPECT_NEAR(model_atomic_ns(t, false), 183.8 + 1, 0.1);
    EXPECT_GT(model_write_ns(t, 0, 4096, false), model_write_ns(t, 0, 64, false));
}

} // namespace
