// SPDX-License-Identifier: MIT
// guest/common/ycsb.h: YCSB's scrambled zipfian and workload mix, checked on the host.
#include <gtest/gtest.h>

#include <map>
#include <vector>

extern "C" {
#include "ycsb.h"
}

// FNV-1a-64 over 8 bytes, low first; expected values computed independently with Python:
//   h = 0xcbf29ce484222325; for b in v.to_bytes(8, 'little'): h = ((h ^ b) * 1099511628211) % 2**64
TEST(Ycsb, FnvHashIsYcsbsWithItsAbs)
{
    // 0 hashes to 0xa8c7f832281a39c5, negative as a Java long: Math.abs gives 2^64 minus it
    EXPECT_EQ(ycsb_fnvhash64(0), 0x573807cdd7e5c63bull);
    EXPECT_EQ(ycsb_fnvhash64(0x0102030405060708ull), 0x0c6d4496e17859d5ull);
}

TEST(Ycsb, PlainZipfianMatchesTheDistributionForTheTwoHottestRanks)
{
    struct ycsb_zipf z;
    const uint64_t n = 100, draws = 400000;
    ASSERT_EQ(ycsb_zipf_init(&z, n, 0.99, 0, 7), 0);
    std::vector<uint64_t> count(n);
    for (uint64_t i = 0; i < draws; i++) {
        uint64_t k = ycsb_zipf_next(&z);
        ASSERT_LT(k, n);
        count[k]++;
    }
    const double zeta = ycsb_zeta(n, 0.99);
    // ranks 0 and 1 are exact in Gray's generator: 1/zeta and 2^-theta/zeta
    EXPECT_NEAR(double(count[0]) / draws, 1.0 / zeta, 0.01 / zeta);
    EXPECT_NEAR(double(count[1]) / draws, pow(0.5, 0.99) / zeta, 0.02 / zeta);
    EXPECT_GT(count[0], count[10]);
    EXPECT_GT(count[10], count[90]);
}

TEST(Ycsb, ScrambledZipfianScattersTheHottestKey)
{
    struct ycsb_zipf z;
    const uint64_t n = 1024, draws = 200000;
    ASSERT_EQ(ycsb_zipf_init(&z, n, YCSB_ZIPF_CONSTANT, 1, 1), 0);
    std::map<uint64_t, uint64_t> count;
    for (uint64_t i = 0; i < draws; i++) {
        uint64_t k = ycsb_zipf_next(&z);
        ASSERT_LT(k, n);
        count[k]++;
    }
    uint64_t hottest = 0, most = 0;
    for (auto [k, c] : count)
        if (c > most) most = c, hottest = k;
    // the zipfian's value 0 (probability 1/ZETAN) lands on fnvhash64(0) % 1024 = 571
    EXPECT_EQ(hottest, 571u);
    EXPECT_GE(double(most) / draws, 0.95 / YCSB_ZIPF_ZETAN);
    EXPECT_GT(count.size(), n / 2); // spread over the key space
}

TEST(Ycsb, SameSeedSameSequence)
{
    struct ycsb_zipf a, b;
    ycsb_zipf_init(&a, 1000, 0.99, 1, 42);
    ycsb_zipf_init(&b, 1000, 0.99, 1, 42);
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(ycsb_zipf_next(&a), ycsb_zipf_next(&b));
}

TEST(Ycsb, RefusesBadParametersAndNamesWorkloads)
{
    struct ycsb_zipf z;
    EXPECT_EQ(ycsb_zipf_init(&z, 0, 0.99, 1, 1), -1);
    EXPECT_EQ(ycsb_zipf_init(&z, 10, 1.0, 1, 1), -1);
    EXPECT_EQ(ycsb_zipf_init(&z, 10, 0.0, 0, 1), -1);
    ASSERT_NE(ycsb_workload("a"), nullptr);
    EXPECT_EQ(ycsb_workload("A")->read_share, 0.5);
    EXPECT_EQ(ycsb_workload("B")->read_share, 0.95);
    EXPECT_EQ(ycsb_workload("c")->read_share, 1.0);
    EXPECT_EQ(ycsb_workload("U")->read_share, 0.0);
    EXPECT_EQ(ycsb_workload("D"), nullptr);
    EXPECT_EQ(ycsb_workload("AB"), nullptr);
    EXPECT_EQ(ycsb_workload(""), nullptr);
    // workload mix: B draws about 95% reads
    ycsb_zipf_init(&z, 10, 0.99, 1, 3);
    int reads = 0;
    for (int i = 0; i < 100000; i++)
        reads += ycsb_next_op(&z, ycsb_workload("B")) == YCSB_READ;
    EXPECT_NEAR(reads / 100000.0, 0.95, 0.005);
}
