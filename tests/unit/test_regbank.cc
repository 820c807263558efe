// Unit tests of the declarative register bank (hw/core/regbank.h) every core decodes with.
#include <gtest/gtest.h>

#include <string>

#include "regbank.h"

using namespace rackemu;

namespace {

struct Dev {
    uint64_t hooked = 0x1234;
    std::string log;
};
struct Ctx {
    int writes = 0;
};
using R = Reg<Dev, Ctx>;

const R kRegs[] = {
    {"CTRL", 0x00, 4, RegAccess::RW, 0x00010002u, 0x0000ff0fu},
    {"STATUS", 0x04, 4, RegAccess::W1C, 0x00007002u, 0x00007000u},
    {"ID", 0x08, 8, RegAccess::RO, 0x524b000000000001ull, 0},
    {"HOOKED", 0x10, 8, RegAccess::RW, 0, ~0ull, [](Dev &d, const R &, unsigned, Ctx &) { return d.hooked; },
     [](Dev &d, const R &r, unsigned, uint64_t merged, uint64_t raw, Ctx &c) {
         d.hooked = merged;
         d.log += std::string(r.name) + ":" + std::to_string(raw) + ";";
         c.writes++;
     }},
};

} // namespace

TEST(RegBank, ResetValuesAndNamesComeFromTheTable)
{
    RegBank<Dev, Ctx> b(kRegs);
    Dev d;
    Ctx c;
    uint64_t v = 0;
    ASSERT_EQ(b.read(d, 0x00, 4, c, v), RegResult::Ok);
    EXPECT_EQ(v, 0x00010002u);
    ASSERT_EQ(b.read(d, 0x08, 8, c, v), RegResult::Ok);
    EXPECT_EQ(v, 0x524b000000000001ull);
    EXPECT_STREQ(b.name(0x04), "STATUS");
    EXPECT_STREQ(b.name(0x0c), "ID"); // inside the 8-byte register
    EXPECT_EQ(b.name(0x20), nullptr);
}

TEST(RegBank, ARwWriteChangesOnlyWritableBitsOfTheWrittenLanes)
{
    RegBank<Dev, Ctx> b(kRegs);
    Dev d;
    Ctx c;
    uint64_t v = 0;
    ASSERT_EQ(b.write(d, 0x00, 0xffffffffu, 4, c), RegResult::Ok);
    b.read(d, 0x00, 4, c, v);
    EXPECT_EQ(v, 0x0001ff0fu) << "bits outside the writable mask keep their value";
    ASSERT_EQ(b.write(d, 0x01, 0x00, 1, c), RegResult::Ok); // byte lane 1 only
    b.read(d, 0x00, 4, c, v);
    EXPECT_EQ(v, 0x0001000fu);
    b.read(d, 0x02, 2, c, v);
    EXPECT_EQ(v, 0x0001u) << "a sub-register read returns its lanes";
    b.reset();
    b.read(d, 0x00, 4, c, v);
    EXPECT_EQ(v, 0x00010002u);
}

TEST(RegBank, WriteOneToClearClearsOnlyWritableOnes)
{
    RegBank<Dev, Ctx> b(kRegs);
    Dev d;
    Ctx c;
    uint64_t v = 0;
    ASSERT_EQ(b.write(d, 0x04, 0x00001003u, 4, c), RegResult::Ok);
    b.read(d, 0x04, 4, c, v);
    EXPECT_EQ(v, 0x00006002u) << "bit 12 cleared; bit 1 is read-only, bit 0 was not set";
    b.write(d, 0x04, 0, 4, c);
    b.read(d, 0x04, 4, c, v);
    EXPECT_EQ(v, 0x00006002u) << "writing 0 changes nothing";
}

TEST(RegBank, ReadOnlyUnmappedAndStraddlingAccessesAreReported)
{
    RegBank<Dev, Ctx> b(kRegs);
    Dev d;
    Ctx c;
    uint64_t v = 7;
    EXPECT_EQ(b.write(d, 0x08, 0, 8, c), RegResult::ReadOnly);
    b.read(d, 0x08, 8, c, v);
    EXPECT_EQ(v, 0x524b000000000001ull);
    EXPECT_EQ(b.read(d, 0x18, 4, c, v), RegResult::Unmapped);
    EXPECT_EQ(v, 0u) << "an unmapped read yields 0";
    EXPECT_EQ(b.write(d, 0x18, 1, 4, c), RegResult::Unmapped);
    EXPECT_EQ(b.read(d, 0x04, 8, c, v), RegResult::Unmapped) << "an access past a register's end";
    EXPECT_EQ(b.write(d, 0x00, 1, 0, c), RegResult::Unmapped);
    EXPECT_EQ(b.write(d, 0x00, 1, 16, c), RegResult::Unmapped);
}

TEST(RegBank, HooksHoldTheStateAndSeeTheMergedAndRawValues)
{
    RegBank<Dev, Ctx> b(kRegs);
    Dev d;
    Ctx c;
    uint64_t v = 0;
    b.read(d, 0x10, 8, c, v);
    EXPECT_EQ(v, 0x1234u);
    ASSERT_EQ(b.write(d, 0x14, 0xab, 1, c), RegResult::Ok); // lane 4 of the 8-byte register
    EXPECT_EQ(d.hooked, 0x000000ab00001234ull);
    EXPECT_EQ(d.log, "HOOKED:" + std::to_string(0xabull << 32) + ";");
    EXPECT_EQ(c.writes, 1);
    b.reset(); // hooked registers keep their state where the core keeps it
    EXPECT_EQ(d.hooked, 0x000000ab00001234ull);
}

namespace {

struct QDev {
    uint64_t base[4] = {};
};
using QR = Reg<QDev, Ctx>;

// Four queue-pair registers 0x20 apart (hooked), and four packed bank-stored 4-byte registers.
const QR kArrays[] = {
    {"QP_BASE", 0x100, 8, RegAccess::RW, 0, ~0ull,
     [](QDev &d, const QR &, unsigned i, Ctx &) { return d.base[i]; },
     [](QDev &d, const QR &, unsigned i, uint64_t merged, uint64_t, Ctx &) { d.base[i] = merged; }, 4, 0x20},
    {"LANE", 0x200, 4, RegAccess::RW, 0x5a, 0xffffffffu, nullptr, nullptr, 4},
};

} // namespace

TEST(RegBank, ArraysDecodeEachElementAndItsIndex)
{
    RegBank<QDev, Ctx> b(kArrays);
    QDev d;
    Ctx c;
    uint64_t v = 0;
    ASSERT_EQ(b.write(d, 0x100 + 2 * 0x20, 0xabcdef, 8, c), RegResult::Ok);
    EXPECT_EQ(d.base[2], 0xabcdefu);
    EXPECT_EQ(d.base[1], 0u);
    ASSERT_EQ(b.read(d, 0x140, 8, c, v), RegResult::Ok);
    EXPECT_EQ(v, 0xabcdefu);
    EXPECT_EQ(b.describe(0x164), "QP_BASE[3]");
    EXPECT_EQ(b.read(d, 0x108, 8, c, v), RegResult::Unmapped) << "the gap between two elements";
    EXPECT_EQ(b.read(d, 0x180, 8, c, v), RegResult::Unmapped) << "past the last element";
    ASSERT_EQ(b.write(d, 0x20c, 0x77, 4, c), RegResult::Ok);
    b.read(d, 0x20c, 4, c, v);
    EXPECT_EQ(v, 0x77u);
    b.read(d, 0x208, 4, c, v);
    EXPECT_EQ(v, 0x5au) << "each stored element has its own value";
    EXPECT_EQ(b.stored(kArrays[1], 3), 0x77u);
    b.set(kArrays[1], 0, 9);
    b.read(d, 0x200, 4, c, v);
    EXPECT_EQ(v, 9u);
    EXPECT_EQ(b.read(d, 0x20e, 4, c, v), RegResult::Unmapped) << "straddles two elements";
    b.reset();
    EXPECT_EQ(b.stored(kArrays[1], 3), 0x5au);
}
