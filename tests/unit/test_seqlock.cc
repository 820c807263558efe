// Unit tests of the published tables' seqlock (hw/fabric/seqlock.h): the writer's sections, the
// readers' snapshot and copy validation, and the holders' handshake, each first alone and then
// under threads that race (run under TSan too: tests/fuzz/sanitize.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "seqlock.h"

using namespace rackemu::fabric;

namespace {

using Clock = std::chrono::steady_clock;

// A racing test runs at least kRaceMin, and then until each reader has accepted enough_each
// snapshots (or copies) or kRaceMax has passed (the host may be loaded: the threads then rarely overlap).
constexpr auto kRaceMin = std::chrono::milliseconds(200);
constexpr auto kRaceMax = std::chrono::seconds(10);
void race(const std::vector<std::atomic<uint64_t>> &accepted, uint64_t enough_each = 20000)
{
    const auto start = Clock::now();
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        const auto t = Clock::now() - start;
        bool enough = true;
        for (const auto &a : accepted)
            enough = enough && a.load(std::memory_order_relaxed) >= enough_each;
        if (t >= kRaceMax || (t >= kRaceMin && enough)) return;
    }
}

// A record of several words that the writer sets all equal: a reader that accepts a record whose
// words differ accepted a torn one.
struct Record {
    uint64_t w[8];
};
struct Table {
    uint32_t magic;
    uint32_t flags;
    uint64_t seq;
    Record rec;
};

void relax()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// A short pause that widens the window inside a section (in another thread's view).
void dawdle()
{
    for (int i = 0; i < 16; i++)
        relax();
}

} // namespace

TEST(Seqlock, AReaderRefusesATableChangedSinceItsFirstLook)
{
    Table t{};
    Seqlock w(t.seq), r(t.seq);
    uint64_t seq = 0;
    ASSERT_TRUE(r.read_begin(seq));
    w.write_begin();
    shared_store(t.rec.w[0], uint64_t(1));
    w.write_end();
    EXPECT_FALSE(r.read_valid(seq));
    EXPECT_FALSE(r.copy_valid(seq));
    ASSERT_TRUE(r.read_begin(seq));
    EXPECT_TRUE(r.read_valid(seq));
    EXPECT_TRUE(r.copy_valid(seq));
    EXPECT_EQ(shared_load(t.rec).w[0], 1u);
}

TEST(Seqlock, NoSnapshotBeginsWhileAWriterIsInside)
{
    Table t{};
    Seqlock w(t.seq), r(t.seq);
    w.write_begin();
    uint64_t seq = 0;
    EXPECT_FALSE(r.read_begin(seq));
    EXPECT_EQ(seq & 1, 1u);
    w.write_end();
    EXPECT_TRUE(r.read_begin(seq));
    EXPECT_EQ(seq, 2u);
}

TEST(Seqlock, AWriterThatDiedInsideASectionLeavesTheTableRefusedUntilTheNextWriter)
{
    Table t{};
    t.seq = 7; // a writer's section never ended (its process died)
    Seqlock r(t.seq);
    uint64_t seq = 0;
    EXPECT_FALSE(r.read_begin(seq));
    Seqlock w(t.seq); // the next incarnation
    w.write_begin();
    EXPECT_EQ(t.seq, 7u);
    w.write_end();
    EXPECT_TRUE(r.read_begin(seq));
    EXPECT_EQ(seq, 8u);
}

TEST(Seqlock, EntriesTravelWholeInTheirWordsBothWays)
{
    struct Narrow {
        uint32_t a;
        uint8_t b, c;
        uint16_t d;
    } n{0x11223344u, 5, 6, 0x7788};
    Narrow m{};
    shared_store(m, n);
    const Narrow back = shared_load(m);
    EXPECT_EQ(back.a, n.a);
    EXPECT_EQ(back.b, n.b);
    EXPECT_EQ(back.c, n.c);
    EXPECT_EQ(back.d, n.d);
    uint32_t magic = 0;
    EXPECT_FALSE(table_published(magic, 0x1234u));
    publish_table(magic, 0x1234u);
    EXPECT_TRUE(table_published(magic, 0x1234u));
}

// One writer rewrites the record (every word the section's number, one word at a time) as fast
// as it can while readers take snapshots: no accepted snapshot mixes two sections. Without
// read_valid's second look at seq this fails within milliseconds.
TEST(Seqlock, AReaderNeverAcceptsATornRecord)
{
    Table t{};
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        Seqlock lock(t.seq);
        for (uint64_t g = 1; !stop.load(std::memory_order_relaxed); g++) {
            lock.write_begin();
            for (auto &w : t.rec.w) {
                shared_store(w, g);
                dawdle();
            }
            lock.write_end();
            for (int i = 0; i < 8; i++) // as long outside a section as inside
                dawdle();
        }
    });
    struct Seen {
        uint64_t refused = 0, torn = 0, last = 0;
        bool backwards = false;
    };
    std::vector<Seen> seen(2);
    std::vector<std::atomic<uint64_t>> accepted(2);
    std::vector<std::thread> readers;
    for (unsigned i = 0; i < 2; i++)
        readers.emplace_back([&t, &stop, &s = seen[i], &n = accepted[i]] {
            const Seqlock lock(t.seq);
            while (!stop.load(std::memory_order_relaxed)) {
                uint64_t seq;
                if (!lock.read_begin(seq)) {
                    s.refused++;
                    continue;
                }
                const Record r = shared_load(t.rec);
                if (!lock.read_valid(seq)) {
                    s.refused++;
                    continue;
                }
                n.fetch_add(1, std::memory_order_relaxed);
                for (uint64_t w : r.w)
                    if (w != r.w[0]) {
                        s.torn++;
                        break;
                    }
                if (r.w[0] < s.last) s.backwards = true; // snapshots never go back in time
                s.last = r.w[0];
            }
        });
    race(accepted);
    stop = true;
    writer.join();
    for (auto &r : readers)
        r.join();
    for (unsigned i = 0; i < 2; i++) {
        const Seen &s = seen[i];
        EXPECT_EQ(s.torn, 0u) << "of " << accepted[i] << " snapshots accepted (" << s.refused << " refused)";
        EXPECT_GT(accepted[i], 0u);
        EXPECT_FALSE(s.backwards);
    }
}

// The RMC's and the RNIC's READ: a reader looks at the grant, copies the memory it grants, and
// keeps the copy only if copy_valid says the table did not change meanwhile. The owner withdraws
// the grant (a section), then overwrites the memory with the next epoch's bytes, then grants it
// again with the next epoch. A kept copy holds only the bytes of the epoch whose grant it saw,
// never bytes written after that grant was withdrawn. Without copy_valid's look at seq this
// fails within milliseconds.
TEST(Seqlock, ACopyKeptAfterValidationHoldsNothingWrittenAfterItsGrantWasWithdrawn)
{
    struct Grant {
        uint64_t granted, epoch;
    };
    struct {
        uint64_t seq;
        Grant g;
    } t{};
    uint64_t data[32] = {}; // the owner's memory (not in the table)
    t.g = {1, 0};
    std::atomic<bool> stop{false};
    std::thread owner([&] {
        Seqlock lock(t.seq);
        for (uint64_t e = 1; !stop.load(std::memory_order_relaxed); e++) {
            lock.write_begin(); // withdraw
            shared_store(t.g, Grant{0, e - 1});
            lock.write_end();
            for (auto &w : data) { // the owner's later stores, no longer granted
                shared_store(w, e);
                dawdle();
            }
            lock.write_begin(); // grant again
            shared_store(t.g, Grant{1, e});
            lock.write_end();
            for (int i = 0; i < 32; i++) // granted as long as not
                dawdle();
        }
    });
    struct Seen {
        uint64_t discarded = 0, wrong = 0;
    };
    std::vector<Seen> seen(2);
    std::vector<std::atomic<uint64_t>> kept(2);
    std::vector<std::thread> readers;
    for (unsigned i = 0; i < 2; i++)
        readers.emplace_back([&t, &data, &stop, &s = seen[i], &n = kept[i]] {
            const Seqlock lock(t.seq);
            uint64_t copy[32];
            while (!stop.load(std::memory_order_relaxed)) {
                uint64_t seq;
                if (!lock.read_begin(seq)) continue;
                const Grant g = shared_load(t.g);
                if (!lock.read_valid(seq) || !g.granted) continue;
                for (size_t i = 0; i < 32; i++)
                    copy[i] = shared_load(data[i]);
                if (!lock.copy_valid(seq)) {
                    s.discarded++;
                    continue;
                }
                n.fetch_add(1, std::memory_order_relaxed);
                for (uint64_t w : copy)
                    if (w != g.epoch) {
                        s.wrong++;
                        break;
                    }
            }
        });
    race(kept);
    stop = true;
    owner.join();
    for (auto &r : readers)
        r.join();
    for (unsigned i = 0; i < 2; i++) {
        EXPECT_EQ(seen[i].wrong, 0u) << "of " << kept[i] << " copies kept (" << seen[i].discarded
                                     << " discarded)";
        EXPECT_GT(kept[i], 0u);
    }
}

// The RNIC's WRITE: a reader that cannot discard its effect holds its word from before its
// look at the table to the end of its "copy"; the writer, after write_begin, waits until no word
// is held. Then no holder is ever inside its copy while the writer changes the table (one of the
// two sees the other). Without hold()'s seq_cst fence (or write_begin's) x86's store buffer
// lets both miss each other.
TEST(Seqlock, AWriterNeverChangesTheTableWhileAHolderCopies)
{
    struct {
        uint64_t seq;
        uint64_t granted;
        uint64_t busy[2];
    } t{};
    t.granted = 1;
    std::atomic<int> copying{0};
    std::atomic<bool> stop{false};
    uint64_t sections = 0, overlaps = 0;
    std::thread owner([&] {
        Seqlock lock(t.seq);
        while (!stop.load(std::memory_order_relaxed)) {
            lock.write_begin();
            for (auto &b : t.busy)
                while (Seqlock::holder(b) != 0)
                    relax();
            if (copying.load(std::memory_order_relaxed) != 0) overlaps++;
            shared_store(t.granted, shared_load(t.granted) ^ 1);
            sections++;
            lock.write_end();
            for (int i = 0; i < 4; i++)
                dawdle();
        }
    });
    std::vector<std::atomic<uint64_t>> copies(2);
    std::vector<std::thread> holders;
    for (unsigned i = 0; i < 2; i++)
        holders.emplace_back([&, i] {
            const Seqlock lock(t.seq);
            while (!stop.load(std::memory_order_relaxed)) {
                Seqlock::hold(t.busy[i], i + 1);
                for (int tries = 0; tries < 4; tries++) {
                    uint64_t seq;
                    if (!lock.read_begin(seq)) continue;
                    const uint64_t granted = shared_load(t.granted);
                    if (!lock.read_valid(seq)) continue;
                    if (granted) {
                        copying.fetch_add(1, std::memory_order_relaxed);
                        dawdle();
                        copying.fetch_sub(1, std::memory_order_relaxed);
                        copies[i].fetch_add(1, std::memory_order_relaxed);
                    }
                    break;
                }
                Seqlock::unhold(t.busy[i]);
                for (int k = 0; k < 4; k++) // a WRITE now and then, not one after another
                    dawdle();
            }
        });
    race(copies, 2000);
    stop = true;
    owner.join();
    for (auto &h : holders)
        h.join();
    EXPECT_EQ(overlaps, 0u) << "of " << sections << " sections";
    EXPECT_GT(sections, 0u);
    EXPECT_GT(copies[0] + copies[1], 0u);
}
