// SPDX-License-Identifier: MIT
// The RMC timing model (hw/sonuma/timing.h) against the table of docs/design/sonuma-rmc.md sec. 5
// (Table 2's parameters) and the shape of seed 000 Fig. 7a.
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

TEST(SonumaTiming, TableOfTheDesign)
{
    Timing t;
    struct Row {
        uint32_t bytes;
        double read, spec, nospec;
    } rows[] = {{64, 183.8, 186.8, 186.8},   {128, 184.8, 187.8, 277.8},  {1024, 198.8, 201.8, 291.8},
                {2048, 214.8, 217.8, 307.8}, {4096, 246.8, 308.8, 339.8}, {8192, 310.8, 372.8, 403.8}};
    for (auto &r : rows) {
        EXPECT_NEAR(model_read_ns(t, 0, r.bytes, false), r.read, 0.1) << r.bytes;
        EXPECT_NEAR(sabre(t, r.bytes, true), r.spec, 0.1) << r.bytes;
        EXPECT_NEAR(sabre(t, r.bytes, false), r.nospec, 0.1) << r.bytes;
    }
}

TEST(SonumaTiming, SpeculationMatchesAReadUpToTheStreamBuffer)
{
    Timing t;
    for (uint32_t n = 1; n <= t.sb_depth; n++) {
        double rd = model_read_ns(t, 0, n * 64, false);
        EXPECT_NEAR(sabre(t, n * 64, true) - rd, 3.0, 1e-9) << n; // registration, register stage, validation
        if (n >= 2)
            EXPECT_NEAR(sabre(t, n * 64, false) - sabre(t, n * 64, true), t.mem_ns, 1e-9) << n;
        else
            EXPECT_NEAR(sabre(t, 64, false), sabre(t, 64, true), 1e-9);
    }
}

TEST(SonumaTiming, StreamBufferStallAppearsOnlyWhenItIsTooSmall)
{
    Timing t;
    // D * g < M: a 32-entry buffer at one block per cycle runs dry before the version arrives
    EXPECT_GT(sabre(t, 64 * 64, true) - model_read_ns(t, 0, 64 * 64, false), 3.5);
    t.sb_depth = 64; // D * g = 64 < 90: still stalls beyond 64 blocks, not below
    EXPECT_NEAR(sabre(t, 64 * 64, true) - model_read_ns(t, 0, 64 * 64, false), 3.0, 1e-9);
    t.sb_depth = 32;
    t.issue_cycles = 3; // ~20 GB/s per R2P2: D * g = 96 >= M, no stall
    SabreTrace tr;
    tr.nblocks = 64;
    double r3 = model_r2p2_sabre_ns(t, tr);
    tr.spec = false;
    EXPECT_NEAR(model_r2p2_sabre_ns(t, tr) - r3, 88.0, 1e-9);
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

TEST(SonumaTiming, SlowerR2p2IssueGivesThePapersGapBeyondOneBlock)
{
    // design sec. 5: r2p2-issue-cycles=3 (about 20 GB/s per R2P2) is the paper's >2 KB variant
    Timing t;
    t.issue_cycles = 3;
    for (uint32_t n : {2u, 16u, 32u, 64u, 128u}) {
        double rd = model_read_ns(t, 0, n * 64, false), sp = sabre(t, n * 64, true);
        EXPECT_NEAR(sp - rd, 3.0 + 2.0 * (n - 1), 1e-9) << n;
        EXPECT_NEAR(sabre(t, n * 64, false) - sp, 88.0, 1e-9) << n;
    }
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
