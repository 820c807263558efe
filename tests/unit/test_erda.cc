// SPDX-License-Identifier: MIT
// guest/erda/user/erda_format.h: the Erda store's on-media format, its checks and recovery,
// checked on the host against fabricated images (docs/erda.md).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "erda_format.h"
}

namespace {

struct Image {
    struct erda_geom g;
    std::vector<uint8_t> mem;
    struct erda_store s;
    struct erda_alloc a;

    explicit Image(uint32_t heads = 2, uint32_t rph = 2, uint32_t region = 64 << 10, uint32_t seg = 16 << 10)
    {
        g = {heads, rph, region, seg, 256, 4};
        struct erda_layout l;
        erda_layout(&g, &l);
        mem.assign(l.size, 0xA5); // not zero: the format must not rely on zeroed media
        EXPECT_EQ(erda_format(&s, mem.data(), mem.size(), &g, nullptr), 0);
        struct erda_recovery r;
        EXPECT_EQ(erda_recover(&s, &r), 0);
        erda_alloc_init(&s, &a);
    }
    // A complete write of key=value: reserve, install, then the object (the client's WRITE);
    // write_object false leaves the object unwritten (the client crashed after the reservation).
    uint32_t put(const std::string &k, const std::string &v, bool write_object = true, bool del = false)
    {
        uint32_t b, off, seq, len = erda_obj_len(uint32_t(k.size()), del ? 0 : uint32_t(v.size()));
        EXPECT_EQ(erda_lookup(&s, k.data(), uint32_t(k.size()), 1, &b), 0);
        EXPECT_EQ(erda_reserve(&s, &a, b % g.heads, len, &off, &seq), 0);
        erda_install(&s, b, off, seq, len);
        if (write_object) {
            EXPECT_EQ(erda_obj_encode(s.base + erda_addr(&s, b % g.heads, off), seq, k.data(),
                                      uint32_t(k.size()), v.data(), uint32_t(v.size()), del),
                      len);
        }
        return b;
    }
    // What a reader gets: the new version, else the old one; "" with ok false if neither holds.
    std::string get(const std::string &k, bool *ok, bool *deleted = nullptr)
    {
        uint32_t b;
        *ok = false;
        if (erda_lookup(&s, k.data(), uint32_t(k.size()), 0, &b)) return "";
        struct erda_bucket c = *erda_bucket_at(&s, b);
        for (unsigned slot : {erda_word_new_slot(c.word), 1 - erda_word_new_slot(c.word)}) {
            if (erda_slot_check(&s, b, &c, slot) != ERDA_OK) continue;
            const uint8_t *o = s.base + erda_addr(&s, b % g.heads, erda_word_off(c.word, slot));
            struct erda_obj_hdr h;
            memcpy(&h, o, sizeof(h));
            if (memcmp(o + ERDA_OBJ_HDR, k.data(), k.size())) continue;
            *ok = true;
            if (deleted) *deleted = h.flags & ERDA_F_DELETE;
            return std::string(reinterpret_cast<const char *>(o) + ERDA_OBJ_HDR + h.klen, h.vlen);
        }
        return "";
    }
    void reopen(struct erda_recovery *r)
    {
        const char *why = nullptr;
        ASSERT_EQ(erda_open(&s, mem.data(), mem.size(), nullptr, &why), 0) << why;
        ASSERT_EQ(erda_recover(&s, r), 0);
        erda_alloc_init(&s, &a);
    }
};

} // namespace

TEST(Erda, Crc32cIsCastagnoli)
{
    // the check value of CRC-32C (RFC 3720 appendix B.4 / the CRC catalogue): "123456789"
    EXPECT_EQ(erda_crc32c(0, "123456789", 9), 0xE3069283u);
    // 32 bytes of zeros (RFC 3720 B.4): 0x8A9136AA
    uint8_t z[32] = {};
    EXPECT_EQ(erda_crc32c(0, z, 32), 0x8A9136AAu);
    // incremental = one shot
    EXPECT_EQ(erda_crc32c(erda_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

TEST(Erda, WordLayoutIsTheBucketsByteTwentyFour)
{
    uint64_t w = erda_word_make(1, 0x7fffffff, 0x12345678);
    EXPECT_EQ(erda_word_new_slot(w), 1u);
    EXPECT_EQ(erda_word_off(w, 0), 0x7fffffffu);
    EXPECT_EQ(erda_word_off(w, 1), 0x12345678u);
    EXPECT_EQ(w & 1, 0u); // reserved bit
    EXPECT_EQ(w, (1ull << 63) | (0x7fffffffull << 32) | (0x12345678ull << 1));
    EXPECT_EQ(offsetof(struct erda_bucket, word), 24u);
}

TEST(Erda, ObjectEncodesByteByByteAndDecodes)
{
    uint8_t buf[64];
    uint32_t n = erda_obj_encode(buf, 0x01020304, "key", 3, "value", 5, 0);
    ASSERT_EQ(n, 16u + 3 + 5);
    EXPECT_EQ(buf[4], 0x04); // seq little-endian at byte 4
    EXPECT_EQ(buf[7], 0x01);
    EXPECT_EQ(buf[8], 3);  // klen
    EXPECT_EQ(buf[10], 0); // flags
    EXPECT_EQ(buf[12], 5); // vlen
    EXPECT_EQ(memcmp(buf + 16, "keyvalue", 8), 0);
    uint32_t crc;
    memcpy(&crc, buf, 4);
    EXPECT_EQ(crc, erda_crc32c(0, buf + 4, n - 4));
    EXPECT_EQ(erda_obj_check(buf, n, 0x01020304, "key", 3, 0), ERDA_OK);
    EXPECT_EQ(erda_obj_check(buf, n, 0x01020304, nullptr, 0, erda_fp("key", 3)), ERDA_OK);
    // tombstone
    n = erda_obj_encode(buf, 9, "key", 3, "ignored", 7, 1);
    ASSERT_EQ(n, 19u);
    EXPECT_EQ(buf[10], ERDA_F_DELETE);
    EXPECT_EQ(erda_obj_check(buf, n, 9, "key", 3, 0), ERDA_OK);
    // lengths out of range are not encoded
    EXPECT_EQ(erda_obj_encode(buf, 1, "", 0, "v", 1, 0), 0u);
    std::string big(ERDA_MAX_KEY + 1, 'k');
    EXPECT_EQ(erda_obj_encode(buf, 1, big.data(), uint32_t(big.size()), "v", 1, 0), 0u);
}

TEST(Erda, TornStaleAndForeignObjectsAreRefused)
{
    uint8_t buf[64], t[64];
    uint32_t n = erda_obj_encode(buf, 7, "key", 3, "value", 5, 0);
    for (uint32_t i = 0; i < n; i++) { // any one byte torn
        memcpy(t, buf, n);
        t[i] ^= 0x40;
        EXPECT_NE(erda_obj_check(t, n, 7, "key", 3, 0), ERDA_OK) << "byte " << i;
    }
    // a never-written object: zeros or the 0xA5 of fresh media
    memset(t, 0, sizeof(t));
    EXPECT_NE(erda_obj_check(t, n, 7, "key", 3, 0), ERDA_OK);
    memset(t, 0xA5, sizeof(t));
    EXPECT_NE(erda_obj_check(t, n, 7, "key", 3, 0), ERDA_OK);
    // CRC-valid but of an earlier use of the space: another seq
    EXPECT_EQ(erda_obj_check(buf, n, 8, "key", 3, 0), ERDA_E_STALE);
    // the bucket's length differs
    EXPECT_NE(erda_obj_check(buf, n + 8, 7, "key", 3, 0), ERDA_OK);
    // another key
    EXPECT_EQ(erda_obj_check(buf, n, 7, "kez", 3, 0), ERDA_E_KEY);
    EXPECT_EQ(erda_obj_check(buf, n, 7, nullptr, 0, erda_fp("kez", 3)), ERDA_E_KEY);
    // an unknown flag, even with a fixed-up CRC
    memcpy(t, buf, n);
    t[10] = 2;
    uint32_t crc = erda_crc32c(0, t + 4, n - 4);
    memcpy(t, &crc, 4);
    EXPECT_EQ(erda_obj_check(t, n, 7, "key", 3, 0), ERDA_E_FORMAT);
}

TEST(Erda, OffsetsOutsideTheHeadOrAcrossSegmentsAreRefused)
{
    struct erda_geom g = {2, 2, 64 << 10, 16 << 10, 256, 4};
    ASSERT_EQ(erda_geom_check(&g), nullptr);
    EXPECT_EQ(erda_off_check(&g, 0, 32), ERDA_E_EMPTY);
    EXPECT_EQ(erda_off_check(&g, 64, 32), ERDA_OK);
    EXPECT_EQ(erda_off_check(&g, 8, 32), ERDA_E_RANGE);               // inside the region header
    EXPECT_EQ(erda_off_check(&g, (64 << 10) + 8, 32), ERDA_E_RANGE);  // the second region's header
    EXPECT_EQ(erda_off_check(&g, 68, 32), ERDA_E_RANGE);              // unaligned
    EXPECT_EQ(erda_off_check(&g, (16 << 10) - 16, 32), ERDA_E_RANGE); // spans two segments
    EXPECT_EQ(erda_off_check(&g, (128 << 10) - 32, 32), ERDA_OK);
    EXPECT_EQ(erda_off_check(&g, (128 << 10) - 24, 32), ERDA_E_RANGE); // past the head's space
    EXPECT_EQ(erda_off_check(&g, ERDA_OFF_MASK & ~7u, 32), ERDA_E_RANGE);
    EXPECT_EQ(erda_off_check(&g, 64, 8), ERDA_E_RANGE); // shorter than a header
    // geometry refusals
    struct erda_geom bad = g;
    bad.region_size = 3 << 13;
    EXPECT_NE(erda_geom_check(&bad), nullptr);
    bad = g;
    bad.regions_per_head = 64;
    bad.region_size = 64 << 20; // 4 GiB per head: offsets would not fit 31 bits
    EXPECT_NE(erda_geom_check(&bad), nullptr);
}

TEST(Erda, FormatOpenRoundTripAndDamagedMetadataRefused)
{
    Image im;
    const char *why = nullptr;
    struct erda_store s2;
    ASSERT_EQ(erda_open(&s2, im.mem.data(), im.mem.size(), nullptr, &why), 0) << why;
    EXPECT_EQ(s2.g.heads, 2u);
    EXPECT_EQ(s2.chain[1], 1u);
    // superblock CRC
    std::vector<uint8_t> m = im.mem;
    m[20] ^= 1;
    EXPECT_EQ(erda_open(&s2, m.data(), m.size(), nullptr, &why), -EBADMSG);
    // the area is smaller than the geometry
    EXPECT_EQ(erda_open(&s2, im.mem.data(), im.mem.size() - 1, nullptr, &why), -ENOSPC);
    // a region link out of range, and a cyclic one (CRCs fixed up: a forger would)
    for (uint32_t next : {uint32_t(99), uint32_t(1)}) {
        m = im.mem;
        struct erda_store t = im.s;
        t.base = m.data();
        auto *rg = reinterpret_cast<struct erda_region *>(m.data() + t.l.pool_off); // head 0, region 0
        rg->next = next;
        rg->crc = erda_crc32c(0, rg, 60);
        EXPECT_EQ(erda_open(&s2, m.data(), m.size(), nullptr, &why), -EINVAL) << next;
    }
    // never formatted
    std::vector<uint8_t> z(4096, 0);
    EXPECT_EQ(erda_open(&s2, z.data(), z.size(), nullptr, &why), -ENODATA);
}

TEST(Erda, CreateUpdateDeleteReadBack)
{
    Image im;
    bool ok, del;
    im.put("user1", "v1");
    EXPECT_EQ(im.get("user1", &ok), "v1");
    EXPECT_TRUE(ok);
    im.put("user1", "v2-longer");
    EXPECT_EQ(im.get("user1", &ok), "v2-longer");
    im.put("user1", "", true, true);
    im.get("user1", &ok, &del);
    EXPECT_TRUE(ok && del);
    im.get("nobody", &ok);
    EXPECT_FALSE(ok);
}

TEST(Erda, AnUnwrittenUpdateFallsBackToTheOldValueAndRecoveryRevertsIt)
{
    Image im;
    bool ok;
    uint32_t b = im.put("k", "old");
    im.put("k", "new", false); // reserved, word updated, object never written
    EXPECT_EQ(im.get("k", &ok), "old");
    EXPECT_TRUE(ok);
    // a second unwritten update replaces the torn new version: the old one stays the fallback
    im.put("k", "newer", false);
    EXPECT_EQ(im.get("k", &ok), "old");
    struct erda_recovery r;
    im.reopen(&r);
    EXPECT_EQ(r.reverted, 1u);
    EXPECT_EQ(r.emptied, 0u);
    struct erda_bucket c = *erda_bucket_at(&im.s, b);
    EXPECT_EQ(erda_slot_check(&im.s, b, &c, erda_word_new_slot(c.word)), ERDA_OK);
    EXPECT_EQ(im.get("k", &ok), "old");
    // and the store goes on: a new write lands after the torn segment, with a higher seq
    uint32_t seg_before = r.next_seg[b % im.g.heads];
    im.put("k", "after");
    EXPECT_EQ(im.get("k", &ok), "after");
    c = *erda_bucket_at(&im.s, b);
    EXPECT_GE(erda_word_off(c.word, erda_word_new_slot(c.word)) / im.g.seg_size, seg_before);
}

TEST(Erda, ATornCreateIsEmptiedByRecovery)
{
    Image im;
    bool ok;
    im.put("fresh", "x", false);
    im.get("fresh", &ok);
    EXPECT_FALSE(ok);
    struct erda_recovery r;
    im.reopen(&r);
    EXPECT_EQ(r.emptied, 1u);
    uint32_t b;
    EXPECT_EQ(erda_lookup(&im.s, "fresh", 5, 0, &b), -ENOENT);
}

TEST(Erda, TornObjectByteOfAnUpdateIsReverted)
{
    Image im;
    bool ok;
    uint32_t b = im.put("k", "old");
    im.put("k", std::string(200, 'n'));
    struct erda_bucket c = *erda_bucket_at(&im.s, b);
    unsigned nw = erda_word_new_slot(c.word);
    // a power cut kept all but the last 64-byte line of the object
    uint8_t *o = im.s.base + erda_addr(&im.s, b % im.g.heads, erda_word_off(c.word, nw));
    o[c.len[nw] - 1] ^= 0xff;
    struct erda_recovery r;
    im.reopen(&r);
    EXPECT_EQ(r.reverted, 1u);
    EXPECT_EQ(im.get("k", &ok), "old");
}

TEST(Erda, AStaleValidObjectAtTheSameOffsetIsNotTakenForTheWrite)
{
    Image im;
    bool ok;
    uint32_t b = im.put("k", "v1");
    struct erda_bucket c = *erda_bucket_at(&im.s, b);
    uint32_t off = erda_word_off(c.word, erda_word_new_slot(c.word));
    // a CRC-valid object of the same key and length sits where the next write is reserved
    // (an earlier use of the space), and that write never completes
    uint32_t h = b % im.g.heads, o2, s2;
    uint32_t len = erda_obj_len(1, 2);
    ASSERT_EQ(erda_reserve(&im.s, &im.a, h, len, &o2, &s2), 0);
    erda_obj_encode(im.s.base + erda_addr(&im.s, h, o2), s2 - 100, "k", 1, "v0", 2, 0);
    erda_install(&im.s, b, o2, s2, len);
    EXPECT_EQ(im.get("k", &ok), "v1");
    struct erda_recovery r;
    im.reopen(&r);
    EXPECT_EQ(r.reverted, 1u);
    c = *erda_bucket_at(&im.s, b);
    EXPECT_EQ(erda_word_off(c.word, erda_word_new_slot(c.word)), off);
}

TEST(Erda, ForgedAndOutOfRangeWordsAreRefusedByRecoveryAndReaders)
{
    Image im;
    bool ok;
    uint32_t b1 = im.put("a", "1"), b2 = im.put("b", "2");
    im.put("b", "22");
    auto *k1 = erda_bucket_at(&im.s, b1);
    auto *k2 = erda_bucket_at(&im.s, b2);
    k1->word |= ERDA_WORD_RSVD; // forged
    unsigned nw = erda_word_new_slot(k2->word);
    uint32_t offs[2] = {erda_word_off(k2->word, 0), erda_word_off(k2->word, 1)};
    offs[nw] = ERDA_OFF_MASK & ~7u; // out of range
    k2->word = erda_word_make(nw, offs[0], offs[1]);
    struct erda_bucket c1 = *k1, c2 = *k2;
    EXPECT_EQ(erda_slot_check(&im.s, b1, &c1, 0), ERDA_E_FORGED);
    EXPECT_EQ(erda_slot_check(&im.s, b2, &c2, nw), ERDA_E_RANGE);
    im.get("a", &ok);
    EXPECT_FALSE(ok);
    EXPECT_EQ(im.get("b", &ok), "2"); // the old version
    struct erda_recovery r;
    im.reopen(&r);
    EXPECT_EQ(r.forged, 1u);
    EXPECT_EQ(r.out_of_range, 1u);
    EXPECT_EQ(r.reverted, 2u); // the bit cleared on "a", "b" back to its old version
    EXPECT_EQ(r.emptied, 0u);
    EXPECT_EQ(erda_bucket_at(&im.s, b1)->word & ERDA_WORD_RSVD, 0u);
    EXPECT_EQ(im.get("a", &ok), "1");
    EXPECT_EQ(im.get("b", &ok), "2");
    // both offsets forged out of range: nothing holds, the bucket is emptied
    k2->word = erda_word_make(0, ERDA_OFF_MASK & ~7u, 8);
    struct erda_recovery r2;
    im.reopen(&r2);
    EXPECT_EQ(r2.emptied, 1u);
    im.get("b", &ok);
    EXPECT_FALSE(ok);
}

TEST(Erda, ObjectsNeverSpanSegmentsAndAFullHeadIsRefused)
{
    Image im(1, 1, 16 << 10, 4096); // one head, one region of four segments
    uint32_t off, seq, prev_seq = 0;
    int n = 0, ret;
    while ((ret = erda_reserve(&im.s, &im.a, 0, 1000, &off, &seq)) == 0) {
        EXPECT_EQ(erda_off_check(&im.g, off, 1000), ERDA_OK) << off;
        EXPECT_GT(seq, prev_seq);
        prev_seq = seq;
        n++;
    }
    EXPECT_EQ(ret, -ENOSPC);
    // the recovery at open moved past segment 0: 3 segments of 4 objects
    EXPECT_EQ(n, 12);
    EXPECT_EQ(erda_reserve(&im.s, &im.a, 0, 5000, &off, &seq), -EINVAL); // larger than a segment
}

TEST(Erda, RecoveryMovesPastTheLastSegmentAndAboveEverySeq)
{
    Image im;
    for (int i = 0; i < 50; i++)
        im.put("key" + std::to_string(i % 7), std::string(300, char('a' + i % 26)));
    struct erda_recovery r;
    uint32_t seg0 = im.a.seg[0], seq0 = im.a.next_seq[0];
    im.reopen(&r);
    EXPECT_EQ(r.next_seg[0], seg0 + 1);
    EXPECT_GE(r.next_seq[0], seq0);
    EXPECT_EQ(r.entries, 7u);
    EXPECT_EQ(r.reverted + r.emptied, 0u);
    bool ok;
    for (int i = 43; i < 50; i++)
        EXPECT_EQ(im.get("key" + std::to_string(i % 7), &ok), std::string(300, char('a' + i % 26)));
}

TEST(Erda, PrepareLeavesTheWordToTheDurableClientsAtomicWrite)
{
    Image im;
    bool ok;
    uint32_t b = im.put("d", "v1");
    uint64_t before = erda_bucket_at(&im.s, b)->word;
    uint32_t h = b % im.g.heads, off, seq, len = erda_obj_len(1, 2);
    ASSERT_EQ(erda_reserve(&im.s, &im.a, h, len, &off, &seq), 0);
    uint64_t w = erda_prepare(&im.s, b, off, seq, len);
    // the word is untouched until the client writes it: readers still get v1
    EXPECT_EQ(erda_bucket_at(&im.s, b)->word, before);
    EXPECT_EQ(im.get("d", &ok), "v1");
    // the object, then the word (the client's WRITE + FLUSH, ATOMIC WRITE + FLUSH)
    erda_obj_encode(im.s.base + erda_addr(&im.s, h, off), seq, "d", 1, "v2", 2, 0);
    erda_bucket_at(&im.s, b)->word = w;
    EXPECT_EQ(im.get("d", &ok), "v2");
    EXPECT_EQ(erda_word_off(w, 1 - erda_word_new_slot(w)), erda_word_off(before, erda_word_new_slot(before)));
    // recovery keeps the whole version the word names
    struct erda_recovery r;
    im.reopen(&r);
    EXPECT_EQ(r.reverted, 0u);
    EXPECT_EQ(im.get("d", &ok), "v2");
}
