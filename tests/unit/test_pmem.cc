// SPDX-License-Identifier: MIT
// The persistence-domain core (hw/pmem, docs/pmem.md): what each mode loses at a power cut, the
// NIC buffer, the crash states of a cut, state and registers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "crash.h"
#include "pmem.h"
#include "pmem_capi.h"
#include "test_host.h"

using namespace rackemu;
using namespace rackemu::pmem;
using rackemu::test::TestHost;

namespace {

constexpr uint64_t kBase = 0x40000000;
constexpr uint64_t kSize = 64 * 1024; // 1024 lines
constexpr uint64_t kLine = PMEM_LINE_SIZE;
const Mode kModes[] = {Mode::None, Mode::Eadr, Mode::Adr, Mode::AdrDdio};

struct Rig {
    explicit Rig(Mode m, uint32_t llc_lines = 4096, uint32_t nic_entries = 64, uint64_t seed = 1)
        : host(kSize, kBase)
    {
        Config c;
        c.base = kBase;
        c.size = kSize;
        c.mode = m;
        c.llc_lines = llc_lines;
        c.nic_entries = nic_entries;
        c.nic_delay_ns = 1000;
        c.seed = seed;
        std::string err;
        p = Pmem::create(host.host(), c, nullptr, &err);
        EXPECT_TRUE(p) << err;
    }
    // A CPU store the dirty log then reports (a page).
    void cpu_store(uint64_t off, uint8_t v, uint64_t len = 8)
    {
        memset(host.ram.data() + off, v, len);
        ASSERT_EQ(p->cpu_dirty(kBase + (off & ~4095ull), 4096), RK_OK);
    }
    // An RNIC write acknowledged now.
    void nic_write(uint64_t off, uint8_t v, uint64_t len = 8)
    {
        std::vector<uint8_t> d(len, v);
        ASSERT_EQ(p->nic_accept(kBase + off, d.data(), len, nullptr), RK_OK);
    }
    void advance(uint64_t ns)
    {
        host.clock_ns += ns;
        p->nic_place_due();
    }
    uint8_t durable(uint64_t off)
    {
        uint8_t b = 0xee;
        EXPECT_EQ(p->durable_read(kBase + off, &b, 1), RK_OK);
        return b;
    }
    // Power cut keeping `pick`'s state; returns the cut's record.
    Cut power_cut(Pick pick = Pick::None, uint64_t seed = 1)
    {
        Cut c = p->cut();
        EXPECT_EQ(p->finish_cut(c, pick_one(c, pick, seed)), RK_OK);
        return c;
    }
    uint64_t cnt(unsigned i) { return p->counter(i); }

    TestHost host;
    std::unique_ptr<Pmem> p;
};

} // namespace

// ---- modes: a line is lost or kept exactly as the mode says ----

TEST(Pmem, ModeNoneKeepsCpuStoresAndNicWritesAtOnce)
{
    Rig r(Mode::None);
    r.cpu_store(0, 0x11);
    r.nic_write(128, 0x22);
    EXPECT_EQ(r.host.ram[128], 0x22); // placed as acknowledged
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_NIC_PENDING), 0u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 0u);
    r.power_cut();
    EXPECT_EQ(r.durable(0), 0x11);
    EXPECT_EQ(r.durable(128), 0x22);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 0u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_STORE_BYTES), 8u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PLACE_BYTES), 8u);
}

TEST(Pmem, ModeEadrKeepsCpuStoresAndLosesOnlyUnplacedNicWrites)
{
    Rig r(Mode::Eadr);
    r.cpu_store(0, 0x11);
    r.nic_write(128, 0x22); // placed after the delay
    r.advance(1000);
    r.nic_write(256, 0x33); // still in the NIC at the cut
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 0u);
    r.power_cut();
    EXPECT_EQ(r.durable(0), 0x11);
    EXPECT_EQ(r.durable(128), 0x22);
    EXPECT_EQ(r.durable(256), 0x00);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_NIC), 1u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 8u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_LINES), 0u);
}

TEST(Pmem, ModeAdrKeepsCpuStoresOnlyOnceWrittenBack)
{
    Rig r(Mode::Adr);
    r.cpu_store(0, 0x11);
    r.cpu_store(64, 0x12);
    EXPECT_TRUE(r.p->is_pending(kBase));
    EXPECT_EQ(r.durable(0), 0x00);
    ASSERT_EQ(r.p->cpu_writeback(kBase, 64), RK_OK); // DC CVAP on the first line only
    EXPECT_FALSE(r.p->is_pending(kBase));
    EXPECT_TRUE(r.p->is_pending(kBase + 64));
    r.power_cut();
    EXPECT_EQ(r.durable(0), 0x11);
    EXPECT_EQ(r.durable(64), 0x00);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_WB_LINES), 1u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_WB_BYTES), 8u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_LINES), 1u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 8u);
}

TEST(Pmem, ModeAdrMakesNicWritesDurableAtPlacement)
{
    Rig r(Mode::Adr);
    r.nic_write(60, 0x22, 13); // bytes 60..72: two lines
    r.advance(999);
    EXPECT_EQ(r.p->nic_pending(), 1u);
    r.advance(1);
    EXPECT_EQ(r.p->nic_pending(), 0u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 0u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PLACE_BYTES), 13u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PLACE_LINES), 2u);
    r.power_cut();
    EXPECT_EQ(r.durable(60), 0x22);
    EXPECT_EQ(r.durable(72), 0x22);
    EXPECT_EQ(r.durable(73), 0x00);
}

TEST(Pmem, ModeAdrDdioLosesPlacedNicWritesUntilFlushWriteBackOrEviction)
{
    Rig r(Mode::AdrDdio);
    r.nic_write(0, 0x21);
    r.nic_write(64, 0x22);
    r.nic_write(128, 0x23);
    r.advance(1000);
    EXPECT_EQ(r.host.ram[0], 0x21); // placed: visible to CPU loads, in the LLC
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 3u);
    ASSERT_EQ(r.p->flush(kBase, 64), RK_OK);
    ASSERT_EQ(r.p->cpu_writeback(kBase + 64, 64), RK_OK);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_FLUSH_BYTES), 8u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_WB_BYTES), 8u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PLACE_BYTES), 0u);
    r.power_cut();
    EXPECT_EQ(r.durable(0), 0x21);
    EXPECT_EQ(r.durable(64), 0x22);
    EXPECT_EQ(r.durable(128), 0x00);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_LINES), 1u);
}

TEST(Pmem, AdrDdioEvictsBeyondLlcLinesWithSeededVictims)
{
    auto run = [](uint64_t seed) {
        Rig r(Mode::AdrDdio, 4, 64, seed);
        for (unsigned i = 0; i < 8; i++) {
            r.nic_write(i * kLine, uint8_t(0x30 + i));
            r.advance(1000);
        }
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 4u);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_EVICT_LINES), 4u);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_EVICT_BYTES), 32u);
        std::vector<unsigned> evicted;
        for (unsigned i = 0; i < 8; i++) {
            if (!r.p->is_pending(kBase + i * kLine)) {
                evicted.push_back(i);
                EXPECT_EQ(r.durable(i * kLine), 0x30 + i);
            }
        }
        return evicted;
    };
    const auto a = run(7);
    EXPECT_EQ(a.size(), 4u);
    EXPECT_EQ(run(7), a); // the same seed evicts the same lines
}

TEST(Pmem, FlushPersistsBufferedAndCachedWritesUnderEachMode)
{
    for (Mode m : kModes) {
        SCOPED_TRACE(mode_name(m));
        Rig r(m);
        r.nic_write(0, 0x41);  // still in the NIC buffer (none: placed)
        r.cpu_store(64, 0x42); // pending in adr, adr-ddio
        ASSERT_EQ(r.p->flush(kBase, 128), RK_OK);
        EXPECT_EQ(r.p->nic_pending(), 0u);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 0u);
        r.power_cut();
        EXPECT_EQ(r.durable(0), 0x41);
        EXPECT_EQ(r.durable(64), 0x42);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 0u);
        const bool cached = m == Mode::Adr || m == Mode::AdrDdio;
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_FLUSH_LINES), m == Mode::AdrDdio ? 2u : cached ? 1u : 0u);
    }
}

// ---- the NIC buffer ----

TEST(Pmem, NicWriteAcknowledgedButNotPlacedIsLostAtCut)
{
    for (Mode m : {Mode::Eadr, Mode::Adr, Mode::AdrDdio}) {
        SCOPED_TRACE(mode_name(m));
        Rig r(m);
        uint64_t seq = 99;
        std::vector<uint8_t> d(16, 0x55);
        ASSERT_EQ(r.p->nic_accept(kBase + 256, d.data(), d.size(), &seq), RK_OK); // the ACK
        EXPECT_EQ(seq, 0u);
        EXPECT_EQ(r.host.ram[256], 0x00); // a CPU load does not see it yet
        r.advance(500);
        r.power_cut(Pick::All);
        EXPECT_EQ(r.durable(256), 0x00);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_NIC), 1u);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 16u);
    }
}

TEST(Pmem, NicWritePlacedBeforeCutIsKept)
{
    for (Mode m : {Mode::Eadr, Mode::Adr}) {
        SCOPED_TRACE(mode_name(m));
        Rig r(m);
        r.nic_write(256, 0x55, 16);
        r.advance(1000);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_NIC_PLACED), 1u);
        r.power_cut();
        EXPECT_EQ(r.durable(256), 0x55);
        EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 0u);
    }
}

TEST(Pmem, FullNicBufferPlacesItsOldestEntryEarly)
{
    Rig r(Mode::Adr, 4096, 2);
    r.nic_write(0, 1);
    r.nic_write(64, 2);
    r.nic_write(128, 3);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_NIC_FORCED), 1u);
    EXPECT_EQ(r.p->nic_pending(), 2u);
    EXPECT_EQ(r.durable(0), 1);
    EXPECT_EQ(r.durable(64), 0);
}

TEST(Pmem, NicBufferPlacesInAcceptanceOrder)
{
    Rig r(Mode::Adr);
    r.nic_write(0, 0xaa, 8);
    r.host.clock_ns += 10;
    r.nic_write(4, 0xbb, 8); // overlaps the first: placed after it
    EXPECT_EQ(r.p->nic_drain(), 2u);
    EXPECT_EQ(r.host.ram[3], 0xaa);
    EXPECT_EQ(r.host.ram[4], 0xbb);
    EXPECT_EQ(r.durable(7), 0xbb);
}

TEST(Pmem, ResetPlacesTheNicBufferAndKeepsPendingLines)
{
    Rig r(Mode::Adr);
    r.nic_write(0, 0x61);
    r.cpu_store(64, 0x62);
    r.p->reset();
    EXPECT_EQ(r.p->nic_pending(), 0u);
    EXPECT_EQ(r.durable(0), 0x61);
    EXPECT_TRUE(r.p->is_pending(kBase + 64));
}

// ---- the cut and its crash states ----

namespace {
// n lines with CPU stores pending in mode adr, plus `noop` RNIC placements of unchanged bytes
// (adr-ddio: pending, changing nothing).
Cut pending_cut(Rig &r, unsigned n, unsigned noop = 0)
{
    for (unsigned i = 0; i < n; i++)
        r.cpu_store(i * kLine, uint8_t(0x70 + i));
    for (unsigned i = 0; i < noop; i++)
        EXPECT_EQ(r.p->placed(kBase + (n + i) * kLine, 8), RK_OK);
    return r.p->cut();
}
} // namespace

TEST(Pmem, SubsetsUpToTwoOfNPendingLinesAreOnePlusNPlusNChooseTwo)
{
    for (unsigned n : {0u, 1u, 2u, 5u, 12u}) {
        Rig r(Mode::Adr);
        const Cut c = pending_cut(r, n);
        ASSERT_EQ(c.lines.size(), n);
        CrashStates it(c, CutPolicy{Pick::UpToK, 2});
        EXPECT_EQ(it.total(), 1 + n + n * (n - 1) / 2);
        CrashState s;
        uint64_t states = 0;
        while (it.next(s))
            states++;
        EXPECT_EQ(states, 1 + n + n * (n - 1) / 2);
        EXPECT_EQ(it.pruned(), 0u);
    }
    EXPECT_EQ(CrashStates::subsets_up_to(10, 3), 1u + 10 + 45 + 120);
    EXPECT_EQ(CrashStates::subsets_up_to(3, 5), 8u);
    EXPECT_EQ(CrashStates::subsets_up_to(1ull << 40, 3), UINT64_MAX);
}

TEST(Pmem, IdenticalImagesArePrunedAndCounted)
{
    Rig r(Mode::AdrDdio);
    const Cut c = pending_cut(r, 5, 1); // 6 candidates, one of which changes nothing
    ASSERT_EQ(c.lines.size(), 6u);
    CrashStates it(c, CutPolicy{Pick::UpToK, 2});
    CrashState s;
    std::vector<uint8_t> image(kSize, 0); // the durable image: zeros
    std::set<std::vector<uint8_t>> images;
    while (it.next(s)) {
        apply(c, s, image.data());
        EXPECT_TRUE(images.insert(image).second) << "state " << s.index << " repeats an image";
        revert(c, s, image.data());
        EXPECT_EQ(image, std::vector<uint8_t>(kSize, 0));
    }
    EXPECT_EQ(it.explored(), 1u + 5 + 10);
    EXPECT_EQ(it.pruned(), (1u + 6 + 15) - (1 + 5 + 10));
    EXPECT_EQ(images.size(), it.explored());
}

TEST(Pmem, RandomSubsetsAreSeededAndPrunedToDistinctImages)
{
    Rig r(Mode::Adr);
    const Cut c = pending_cut(r, 3);
    auto run = [&](uint64_t seed) {
        CrashStates it(c, CutPolicy{Pick::Random, 2, 64, seed});
        std::vector<std::vector<uint32_t>> out;
        CrashState s;
        while (it.next(s))
            out.push_back(s.chosen);
        EXPECT_EQ(it.explored() + it.pruned(), 64u);
        EXPECT_EQ(it.explored(), out.size());
        EXPECT_LE(out.size(), 8u); // 2^3 images at most
        return out;
    };
    const auto a = run(42);
    EXPECT_EQ(run(42), a);
    EXPECT_EQ(std::set<std::vector<uint32_t>>(a.begin(), a.end()).size(), a.size());
}

TEST(Pmem, NoneAndAllPoliciesGiveOneStateEach)
{
    Rig r(Mode::Adr);
    const Cut c = pending_cut(r, 4);
    CrashState s;
    CrashStates none(c, CutPolicy{Pick::None});
    ASSERT_TRUE(none.next(s));
    EXPECT_TRUE(s.chosen.empty());
    EXPECT_FALSE(none.next(s));
    CrashStates all(c, CutPolicy{Pick::All});
    ASSERT_TRUE(all.next(s));
    EXPECT_EQ(s.chosen, (std::vector<uint32_t>{0, 1, 2, 3}));
    EXPECT_FALSE(all.next(s));
}

TEST(Pmem, AlignedWordsAndLinesAreNeverTornInAnyState)
{
    Rig r(Mode::Adr);
    // Words in two lines and a line written in two places; the durable image first gets a
    // pattern, so "old" and "new" differ per word.
    for (unsigned i = 0; i < 3 * kLine; i++)
        r.host.ram[i] = uint8_t(i);
    ASSERT_EQ(r.p->flush(kBase, 3 * kLine), RK_OK);
    r.cpu_store(56, 0xa1, 16); // the last word of line 0, the first of line 1
    r.cpu_store(128, 0xa2, 8);
    r.cpu_store(128 + 32, 0xa3, 8);
    const Cut c = r.p->cut();
    ASSERT_EQ(c.lines.size(), 3u);
    std::vector<uint8_t> old(kSize), image;
    ASSERT_EQ(r.p->durable_read(kBase, old.data(), kSize), RK_OK);
    CrashStates it(c, CutPolicy{Pick::UpToK, 3});
    CrashState s;
    while (it.next(s)) {
        image = old;
        apply(c, s, image.data());
        for (const CutLine &l : c.lines) {
            const uint8_t *img = image.data() + l.line * kLine;
            const bool is_new = memcmp(img, l.new_bytes.data(), kLine) == 0;
            EXPECT_TRUE(is_new || memcmp(img, l.old_bytes.data(), kLine) == 0)
                << "line " << l.line << " torn";
            for (unsigned w = 0; w < kLine; w += PMEM_WORD_SIZE) {
                EXPECT_TRUE(memcmp(img + w, (is_new ? l.new_bytes : l.old_bytes).data() + w, 8) == 0);
            }
        }
    }
    EXPECT_EQ(it.explored(), 8u);
}

TEST(Pmem, FinishCutKeepsTheChosenLinesAndRestartBootsOnThem)
{
    Rig r(Mode::Adr);
    Cut c = pending_cut(r, 3);
    EXPECT_EQ(r.p->cpu_dirty(kBase, 64), RK_UNREACHABLE); // the node is off
    EXPECT_EQ(r.p->nic_accept(kBase, "x", 1, nullptr), RK_UNREACHABLE);
    CrashState keep;
    keep.chosen = {1};
    Cut stale = c;
    stale.id++;
    EXPECT_EQ(r.p->finish_cut(stale, keep), RK_SLAVE_ERROR);
    CrashState bad;
    bad.chosen = {2, 1};
    EXPECT_EQ(r.p->finish_cut(c, bad), RK_SLAVE_ERROR);
    ASSERT_EQ(r.p->finish_cut(c, keep), RK_OK);
    EXPECT_EQ(r.durable(0), 0);
    EXPECT_EQ(r.durable(64), 0x71);
    EXPECT_EQ(r.durable(128), 0);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_LINES), 2u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_LOST_BYTES), 16u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_CUTS), 1u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 0u);
    ASSERT_EQ(r.p->restart(), RK_OK);
    EXPECT_EQ(r.host.ram[0], 0);
    EXPECT_EQ(r.host.ram[64], 0x71);
    EXPECT_EQ(r.host.ram[128], 0);
    EXPECT_EQ(r.p->finish_cut(c, keep), RK_SLAVE_ERROR); // no cut in progress
}

// ---- bad input ----

TEST(Pmem, RangesOutsideTheRegionAndOverflowingLengthsAreRefused)
{
    Rig r(Mode::Adr);
    r.cpu_store(0, 0x11);
    const uint8_t d[8] = {};
    struct {
        uint64_t addr, len;
    } bad[] = {
        {kBase - 64, 64},            // below
        {kBase + kSize, 1},          // past the end
        {kBase + kSize - 8, 16},     // straddles the end
        {kBase + 8, UINT64_MAX - 4}, // the end overflows
        {UINT64_MAX - 7, 16},        // the address wraps
        {kBase, kSize + 64},         // longer than the region
    };
    for (const auto &b : bad) {
        SCOPED_TRACE(b.addr);
        EXPECT_EQ(r.p->cpu_dirty(b.addr, b.len), RK_DECODE_ERROR);
        EXPECT_EQ(r.p->cpu_writeback(b.addr, b.len), RK_DECODE_ERROR);
        EXPECT_EQ(r.p->flush(b.addr, b.len), RK_DECODE_ERROR);
        EXPECT_EQ(r.p->placed(b.addr, b.len), RK_DECODE_ERROR);
        EXPECT_EQ(r.p->nic_accept(b.addr, d, b.len, nullptr), RK_DECODE_ERROR);
    }
    EXPECT_EQ(r.p->nic_accept(kBase, d, 0, nullptr), RK_SLAVE_ERROR);
    std::vector<uint8_t> big(PMEM_NIC_ENTRY_MAX + 1);
    EXPECT_EQ(r.p->nic_accept(kBase, big.data(), big.size(), nullptr), RK_SLAVE_ERROR);
    EXPECT_EQ(r.p->cpu_dirty(kBase, 0), RK_OK);
    // nothing changed
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 1u);
    EXPECT_EQ(r.p->nic_pending(), 0u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_NIC_ACCEPTED), 0u);
    EXPECT_EQ(r.durable(0), 0);
}

TEST(Pmem, BadConfigurationsAreRefusedWithAReason)
{
    TestHost host(kSize, kBase);
    std::string err;
    Config c;
    c.base = kBase;
    c.size = 100;
    EXPECT_FALSE(Pmem::create(host.host(), c, nullptr, &err));
    EXPECT_NE(err.find("64-byte lines"), std::string::npos);
    c.size = kSize;
    c.llc_lines = 0;
    EXPECT_FALSE(Pmem::create(host.host(), c, nullptr, &err));
    c.llc_lines = 16;
    c.mode = Mode(7);
    EXPECT_FALSE(Pmem::create(host.host(), c, nullptr, &err));
    Mode m;
    EXPECT_TRUE(parse_mode("adr-ddio", &m));
    EXPECT_EQ(m, Mode::AdrDdio);
    EXPECT_FALSE(parse_mode("adr_ddio", &m));
}

// ---- state and registers through the device operations ----

namespace {
struct Dev {
    explicit Dev(uint32_t mode, const char *image = nullptr) : host(kSize, kBase)
    {
        RkPmemConfig c{kBase, kSize, mode, 8, 1000, 64, 3, image};
        const RkHost h = host.raw();
        char err[128] = "";
        core = rk_pmem_ops.create(&h, &c, err, sizeof(err));
        EXPECT_TRUE(core) << err;
    }
    ~Dev() { rk_pmem_ops.free(core); }
    Pmem *p() { return static_cast<Pmem *>(core); }
    uint64_t reg(uint64_t off)
    {
        uint64_t v = 0;
        EXPECT_EQ(rk_pmem_ops.regions[0].read(core, off, 8, &v), RK_OK);
        return v;
    }
    std::vector<uint8_t> save()
    {
        uint8_t *b = nullptr;
        uint64_t n = 0;
        EXPECT_EQ(rk_pmem_ops.save(core, &b, &n), 0);
        std::vector<uint8_t> v(b, b + n);
        free(b);
        return v;
    }
    int load(const std::vector<uint8_t> &s, std::string *msg = nullptr)
    {
        char m[256] = "";
        const int rc = rk_pmem_ops.load(core, s.data(), s.size(), m, sizeof(m));
        if (msg) *msg = m;
        return rc;
    }
    TestHost host;
    void *core = nullptr;
};
} // namespace

TEST(Pmem, StateRoundTripKeepsPendingLinesNicEntriesAndCounters)
{
    Dev a(PMEM_MODE_ADR_DDIO);
    memset(a.host.ram.data() + 64, 0x81, 8);
    ASSERT_EQ(rk_pmem_cpu_dirty(a.core, kBase, 4096), RK_OK);
    const uint8_t d[4] = {1, 2, 3, 4};
    ASSERT_EQ(rk_pmem_nic_accept(a.core, kBase + 512, d, 4, nullptr), RK_OK);
    ASSERT_EQ(rk_pmem_placed(a.core, kBase + 1024, 8), RK_OK);
    const auto s = a.save();

    Dev b(PMEM_MODE_ADR_DDIO);
    b.host.ram = a.host.ram; // the region's RAM migrates with the node
    std::string msg;
    ASSERT_EQ(b.load(s, &msg), 0) << msg;
    EXPECT_EQ(b.save(), s);
    EXPECT_TRUE(b.p()->is_pending(kBase + 64));
    EXPECT_TRUE(b.p()->is_pending(kBase + 1024));
    EXPECT_EQ(b.p()->nic_pending(), 1u);
    EXPECT_EQ(b.reg(PMEM_COUNTERS + PMEM_CNT_NIC_ACCEPTED), 1u);
    // the loaded buffer places, and a FLUSH persists, as the saved one would
    ASSERT_EQ(rk_pmem_flush(b.core, kBase, kSize), RK_OK);
    uint8_t got[4] = {};
    ASSERT_EQ(b.p()->durable_read(kBase + 512, got, 4), RK_OK);
    EXPECT_EQ(memcmp(got, d, 4), 0);
    EXPECT_EQ(b.reg(PMEM_COUNTERS + PMEM_CNT_PENDING_LINES), 0u);
}

TEST(Pmem, TruncatedOrForeignStateIsRefusedAndChangesNothing)
{
    Dev a(PMEM_MODE_ADR);
    memset(a.host.ram.data(), 0x81, 8);
    ASSERT_EQ(rk_pmem_cpu_dirty(a.core, kBase, 4096), RK_OK);
    const uint8_t d[4] = {1, 2, 3, 4};
    ASSERT_EQ(rk_pmem_nic_accept(a.core, kBase + 512, d, 4, nullptr), RK_OK);
    const auto s = a.save();

    Dev b(PMEM_MODE_ADR);
    const auto before = b.save();
    std::string msg;
    for (size_t cut : {s.size() - 1, s.size() / 2, size_t(3)}) {
        EXPECT_EQ(b.load(std::vector<uint8_t>(s.begin(), s.begin() + cut), &msg), -EINVAL);
        EXPECT_NE(msg.find("ends"), std::string::npos) << msg;
    }
    auto longer = s;
    longer.push_back(0);
    EXPECT_EQ(b.load(longer, &msg), -EINVAL);
    EXPECT_NE(msg.find("left over"), std::string::npos) << msg;
    Dev eadr(PMEM_MODE_EADR);
    EXPECT_EQ(eadr.load(s, &msg), -EINVAL);
    EXPECT_NE(msg.find("mode"), std::string::npos) << msg;
    EXPECT_EQ(b.save(), before);
    EXPECT_FALSE(b.p()->is_pending(kBase));
}

TEST(Pmem, ControlBlockReadsModeGeometryAndCounters)
{
    Dev d(PMEM_MODE_ADR_DDIO);
    EXPECT_EQ(d.reg(PMEM_REG_ID), PMEM_ID_VALUE);
    EXPECT_EQ(d.reg(PMEM_REG_MODE), PMEM_MODE_ADR_DDIO);
    EXPECT_EQ(d.reg(PMEM_REG_REGION_BASE), kBase);
    EXPECT_EQ(d.reg(PMEM_REG_REGION_SIZE), kSize);
    EXPECT_EQ(d.reg(PMEM_REG_NIC_DELAY_NS), 1000u);
    EXPECT_EQ(d.reg(PMEM_REG_NIC_ENTRIES), 8u);
    EXPECT_EQ(d.reg(PMEM_REG_LLC_LINES), 64u);
    ASSERT_EQ(rk_pmem_placed(d.core, kBase, 100), RK_OK);
    ASSERT_EQ(rk_pmem_cpu_writeback(d.core, kBase, 128), RK_OK);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_WB_BYTES), 100u);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_WB_LINES), 2u);
    EXPECT_STREQ(rk_pmem_ops.regions[0].reg_name(d.core, PMEM_REG_MODE), "MODE");
    // a write to a read-only register: a guest error, nothing changes
    EXPECT_EQ(rk_pmem_ops.regions[0].write(d.core, PMEM_REG_MODE, 0, 8), RK_OK);
    EXPECT_EQ(d.reg(PMEM_REG_MODE), PMEM_MODE_ADR_DDIO);
    uint64_t v = 1;
    EXPECT_EQ(rk_pmem_ops.regions[0].read(d.core, 0x800, 8, &v), RK_OK);
    EXPECT_EQ(v, 0u);
    EXPECT_EQ(d.host.guest_errors().size(), 2u);
    // CNT_CLEAR zeroes the counters; the gauges stay
    ASSERT_EQ(rk_pmem_placed(d.core, kBase + 256, 8), RK_OK);
    EXPECT_EQ(rk_pmem_ops.regions[0].write(d.core, PMEM_REG_CTRL, PMEM_CTRL_CNT_CLEAR, 8), RK_OK);
    EXPECT_EQ(d.reg(PMEM_REG_CTRL), 0u);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_WB_BYTES), 0u);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_PENDING_LINES), 1u);
}

TEST(Pmem, DurableImageFileOutlivesTheCore)
{
    char path[] = "/tmp/rackemu-pmem-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    {
        Dev a(PMEM_MODE_ADR, path);
        memset(a.host.ram.data() + 4096, 0x91, 64);
        memset(a.host.ram.data() + 8192, 0x92, 64);
        ASSERT_EQ(rk_pmem_cpu_dirty(a.core, kBase + 4096, 8192), RK_OK);
        ASSERT_EQ(rk_pmem_cpu_writeback(a.core, kBase + 4096, 64), RK_OK);
    } // the process ends: the second line was never written back
    Dev b(PMEM_MODE_ADR, path);
    ASSERT_EQ(b.p()->restart(), RK_OK);
    EXPECT_EQ(b.host.ram[4096], 0x91);
    EXPECT_EQ(b.host.ram[8192], 0x00);
    unlink(path);
}

TEST(Pmem, PowerCutThroughTheCApiKeepsWhatItsPickChoosesAndReloadsRam)
{
    Dev d(PMEM_MODE_ADR);
    memset(d.host.ram.data(), 0xc1, 8);
    memset(d.host.ram.data() + 64, 0xc2, 8);
    ASSERT_EQ(rk_pmem_cpu_dirty(d.core, kBase, 4096), RK_OK);
    const uint8_t w[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    ASSERT_EQ(rk_pmem_nic_accept(d.core, kBase + 128, w, 8, nullptr), RK_OK);
    EXPECT_EQ(rk_pmem_power_cut(d.core, 2 /* UpToK: not one state */, 0), RK_SLAVE_ERROR);
    ASSERT_EQ(rk_pmem_power_cut(d.core, PMEM_PICK_ALL, 0), RK_OK);
    EXPECT_EQ(d.host.ram[0], 0xc1);
    EXPECT_EQ(d.host.ram[64], 0xc2);
    EXPECT_EQ(d.host.ram[128], 0); // acknowledged, never placed
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_LOST_NIC), 1u);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_LOST_BYTES), 8u);
    // PICK_NONE drops a store that was never written back
    memset(d.host.ram.data() + 192, 0xc3, 8);
    ASSERT_EQ(rk_pmem_cpu_dirty(d.core, kBase, 4096), RK_OK);
    ASSERT_EQ(rk_pmem_power_cut(d.core, PMEM_PICK_NONE, 0), RK_OK);
    EXPECT_EQ(d.host.ram[192], 0);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_LOST_LINES), 1u);
    EXPECT_EQ(d.reg(PMEM_COUNTERS + PMEM_CNT_CUTS), 2u);
}

TEST(Pmem, AdrEvictsCpuStoresBeyondLlcLinesToo)
{
    Rig r(Mode::Adr, 2);
    for (unsigned i = 0; i < 5; i++)
        r.cpu_store(i * kLine, uint8_t(0x50 + i));
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_PENDING_LINES), 2u);
    EXPECT_EQ(r.cnt(PMEM_CNT_INDEX_EVICT_LINES), 3u);
    unsigned durable = 0;
    for (unsigned i = 0; i < 5; i++)
        durable += r.durable(i * kLine) == 0x50 + i;
    EXPECT_EQ(durable, 3u);
}

TEST(Pmem, PausedModelPlacesNothingUntilItRunsAgain)
{
    Rig r(Mode::Adr);
    r.nic_write(0, 0x66);
    r.p->pause(true);
    r.advance(5000);
    EXPECT_EQ(r.p->nic_pending(), 1u);
    EXPECT_EQ(r.host.ram[0], 0);
    r.p->pause(false);
    r.advance(0);
    EXPECT_EQ(r.p->nic_pending(), 0u);
    EXPECT_EQ(r.durable(0), 0x66);
}

TEST(Pmem, CApiParsesModesReadsTheDurableImageAndCounters)
{
    uint32_t m = 99;
    EXPECT_EQ(rk_pmem_parse_mode("eadr", &m), 1);
    EXPECT_EQ(m, PMEM_MODE_EADR);
    EXPECT_EQ(rk_pmem_parse_mode("adr-ddio", &m), 1);
    EXPECT_EQ(m, PMEM_MODE_ADR_DDIO);
    EXPECT_EQ(rk_pmem_parse_mode("ADR", &m), 0);
    EXPECT_EQ(rk_pmem_parse_mode("", &m), 0);
    EXPECT_EQ(m, PMEM_MODE_ADR_DDIO); // unchanged by a refused name

    Dev d(PMEM_MODE_ADR);
    memset(d.host.ram.data() + 256, 0xd7, 64);
    ASSERT_EQ(rk_pmem_cpu_dirty(d.core, kBase, 4096), RK_OK);
    uint8_t buf[64];
    ASSERT_EQ(rk_pmem_durable_read(d.core, kBase + 256, buf, 64), RK_OK);
    EXPECT_EQ(buf[0], 0); // pending, not durable
    EXPECT_EQ(rk_pmem_counter(d.core, PMEM_CNT_INDEX_PENDING_LINES), 1u);
    ASSERT_EQ(rk_pmem_cpu_writeback(d.core, kBase + 256 + 8, 8), RK_OK); // one line, whole
    ASSERT_EQ(rk_pmem_durable_read(d.core, kBase + 256, buf, 64), RK_OK);
    for (uint8_t b : buf)
        EXPECT_EQ(b, 0xd7);
    EXPECT_EQ(rk_pmem_counter(d.core, PMEM_CNT_INDEX_WB_LINES), 1u);
    EXPECT_EQ(rk_pmem_counter(d.core, PMEM_CNT_INDEX_WB_BYTES), 64u);
    EXPECT_EQ(rk_pmem_counter(d.core, PMEM_CNT_INDEX_PENDING_LINES), 0u);
    EXPECT_EQ(rk_pmem_counter(d.core, PMEM_CNT_COUNT), 0u); // beyond the counters
    EXPECT_EQ(rk_pmem_durable_read(d.core, kBase + kSize - 8, buf, 16), RK_DECODE_ERROR);
    EXPECT_EQ(rk_pmem_durable_read(d.core, kBase - 64, buf, 64), RK_DECODE_ERROR);
}
