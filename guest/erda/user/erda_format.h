/* SPDX-License-Identifier: MIT */
/*
 * erda_format.h: the on-media format of the Erda store (docs/erda.md "Format"), after "Erda:
 * zero-copy log-structured memory for remote data atomicity" (Liu, Hua, Li, Liu), sec. 3 (log
 * structure, hash table, metadata word) and the recovery procedure rackemu specifies (the paper
 * gives one sentence; docs/erda.md "Recovery").
 *
 * One store is one contiguous area (the persistent-memory region, or DRAM without one), every
 * field little-endian:
 *
 *   [0, 64)                 superblock (struct erda_super), CRC-32C over bytes 0..59
 *   [head_off, +heads*64)   log heads at fixed addresses (struct erda_head), CRC-32C each
 *   [bucket_off, +nb*32)    hash table: buckets + probe - 1 buckets of 32 B (struct erda_bucket)
 *   [pool_off, +regions*R)  the region pool: regions of region_size bytes; each head links
 *                           regions_per_head of them (first_region, then each region's `next`)
 *
 * A head's log space is its regions in link order: the 31-bit offsets of the metadata word are
 * bytes in that space (chain position * region_size + offset in the region). Each region opens
 * with a 64-B region header (struct erda_region); regions are cut into segments of seg_size
 * bytes and an object never spans two segments. Objects are 8-byte aligned.
 *
 * Object (ERDA_OBJ_HDR = 16 bytes, then key and value; the paper's is a delete tag, a CRC, key
 * and value, 5 bytes of header; rackemu adds the lengths and a sequence number):
 *   0  u32 crc    CRC-32C over bytes 4 .. 16 + klen + vlen (header after the CRC, key, value)
 *   4  u32 seq    the head's allocation sequence number the server assigned to this write
 *   8  u16 klen   1 .. ERDA_MAX_KEY
 *   10 u16 flags  bit 0: delete tag (a tombstone, vlen 0); other bits 0
 *   12 u32 vlen   0 .. ERDA_MAX_VALUE
 * The bucket holds the seq and the length of each of its two versions: an object is the
 * version only if its CRC holds AND its seq and length are the bucket's. A stale, CRC-valid
 * object left at the same offset by an earlier use of the space has another seq: it is never
 * taken for a completed write.
 *
 * Bucket (32 B; the 8-byte word at byte 24 is written by one aligned 8-byte store or ATOMIC
 * WRITE; the other fields of the slot being replaced are written before it):
 *   0  u64 fp      fingerprint of the key (erda_fp; 0: empty bucket)
 *   8  u32 seq[2]  seq of the version at offset 0 / offset 1
 *   16 u32 len[2]  object length (16 + klen + vlen) of each version
 *   24 u64 word    bit 63 new tag (0: offset 0 is the new version, 1: offset 1), bits 62..32
 *                  offset 0, bits 31..1 offset 1, bit 0 reserved (0; a word with it set is
 *                  refused as forged). Offset 0 in a slot means "no version".
 * Key k lives in the first bucket of [erda_fp(k) % buckets, + probe) whose fp is erda_fp(k)
 * (the object's key is compared too), head = bucket index % heads.
 */
#ifndef RACKEMU_ERDA_FORMAT_H
#define RACKEMU_ERDA_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ERDA_MAGIC        0x314c4f4741445245ull /* "ERDALOG1" */
#define ERDA_VERSION      1u
#define ERDA_HEAD_MAGIC   0x44454845u /* "EHED" */
#define ERDA_REGION_MAGIC 0x4e475245u /* "ERGN" */
#define ERDA_SUPER_SIZE   64u
#define ERDA_HEAD_SIZE    64u
#define ERDA_REGION_HDR   64u
#define ERDA_BUCKET_SIZE  32u
#define ERDA_OBJ_HDR      16u
#define ERDA_OBJ_ALIGN    8u
#define ERDA_MAX_KEY      64u
#define ERDA_MAX_VALUE    65536u
#define ERDA_OFF_MASK     0x7fffffffu    /* a 31-bit offset */
#define ERDA_WORD_NEW     (1ull << 63)
#define ERDA_WORD_RSVD    1ull
#define ERDA_F_DELETE     1u
#define ERDA_MAX_HEADS    64u
#define ERDA_MAX_CHAIN    64u     /* regions per head */

/* Geometry (sizes scaled down from the paper's 1 GB regions and 8 MB segments; configurable). */
struct erda_geom {
	uint32_t heads;            /* 1 .. ERDA_MAX_HEADS */
	uint32_t regions_per_head; /* regions linked to each head */
	uint32_t region_size;      /* bytes, a multiple of seg_size; regions_per_head * region_size <= 2^31 */
	uint32_t seg_size;         /* bytes, a multiple of 64, >= 4096 */
	uint32_t buckets;          /* hash table size (probe - 1 more are allocated past it) */
	uint32_t probe;            /* buckets a key may occupy from its home bucket: 1 .. 64 */
};

struct erda_super {
	uint64_t magic;
	uint32_t version;
	uint32_t heads, regions_per_head, region_size, seg_size, buckets, probe;
	uint32_t head_off, bucket_off;
	uint32_t reserved0;
	uint64_t pool_off;
	uint32_t reserved1;
	uint32_t crc;              /* CRC-32C over bytes 0..59 */
};

struct erda_head {
	uint32_t magic;            /* ERDA_HEAD_MAGIC */
	uint32_t id;
	uint32_t first_region;     /* pool index + 1 (0: none) */
	uint32_t nregions;         /* regions linked */
	uint32_t cur_seg;          /* the segment (index in the head's space) allocation is in; segments per head: full */
	uint32_t seq_floor;        /* every seq handed out in cur_seg is below this */
	uint32_t recoveries;       /* recoveries run on this head */
	uint32_t reserved[8];
	uint32_t crc;              /* CRC-32C over bytes 0..59 */
};

struct erda_region {
	uint32_t magic;            /* ERDA_REGION_MAGIC */
	uint32_t head;             /* the head it is linked to */
	uint32_t chain_pos;        /* its position in the head's chain */
	uint32_t next;             /* the next region's pool index + 1 (0: last) */
	uint32_t reserved[11];
	uint32_t crc;              /* CRC-32C over bytes 0..59 */
};

struct erda_bucket {
	uint64_t fp;
	uint32_t seq[2];
	uint32_t len[2];
	uint64_t word;
};

struct erda_obj_hdr {
	uint32_t crc;
	uint32_t seq;
	uint16_t klen;
	uint16_t flags;
	uint32_t vlen;
};

#ifdef __cplusplus
#define ERDA_STATIC_ASSERT static_assert
#else
#define ERDA_STATIC_ASSERT _Static_assert
#endif
ERDA_STATIC_ASSERT(sizeof(struct erda_super) == ERDA_SUPER_SIZE, "superblock is 64 bytes");
ERDA_STATIC_ASSERT(sizeof(struct erda_head) == ERDA_HEAD_SIZE, "head is 64 bytes");
ERDA_STATIC_ASSERT(sizeof(struct erda_region) == ERDA_REGION_HDR, "region header is 64 bytes");
ERDA_STATIC_ASSERT(sizeof(struct erda_bucket) == ERDA_BUCKET_SIZE, "bucket is 32 bytes");
ERDA_STATIC_ASSERT(offsetof(struct erda_bucket, word) == 24, "the word is at byte 24");
ERDA_STATIC_ASSERT(sizeof(struct erda_obj_hdr) == ERDA_OBJ_HDR, "object header is 16 bytes");

/* Results of the checks (negative) */
enum {
	ERDA_OK = 0,
	ERDA_E_RANGE = -1,   /* offset or length outside the head's space, across a segment, unaligned */
	ERDA_E_CRC = -2,     /* CRC mismatch: torn, never written, or garbage */
	ERDA_E_STALE = -3,   /* CRC-valid but not the bucket's version (seq or length differ) */
	ERDA_E_KEY = -4,     /* another key */
	ERDA_E_FORMAT = -5,  /* bad lengths or flags in the header */
	ERDA_E_FORGED = -6,  /* a word with the reserved bit set */
	ERDA_E_EMPTY = -7,   /* the slot holds no version */
};
const char *erda_strerror(int e);

/* ---- CRC-32C (Castagnoli, reflected 0x82F63B78; arm64 crc32c instructions when present) ---- */
uint32_t erda_crc32c(uint32_t crc, const void *p, size_t n); /* crc: 0 to start */

/* ---- geometry ---- */
/* Returns 0 or a message saying what is wrong. */
const char *erda_geom_check(const struct erda_geom *g);
void erda_geom_default(struct erda_geom *g);
struct erda_layout {
	uint32_t head_off, bucket_off, nbuckets; /* nbuckets = buckets + probe - 1 */
	uint64_t pool_off, size;                 /* size: bytes of the whole store */
};
void erda_layout(const struct erda_geom *g, struct erda_layout *l);
static inline uint64_t erda_head_space(const struct erda_geom *g)
{
	return (uint64_t)g->regions_per_head * g->region_size;
}
static inline uint32_t erda_segs_per_head(const struct erda_geom *g)
{
	return (uint32_t)(erda_head_space(g) / g->seg_size);
}
/* The first byte objects may use in segment s of a head (past the region header). */
static inline uint32_t erda_seg_start(const struct erda_geom *g, uint32_t s)
{
	uint64_t off = (uint64_t)s * g->seg_size;

	return (uint32_t)(off % g->region_size == 0 ? off + ERDA_REGION_HDR : off);
}

/* ---- the word ---- */
static inline unsigned erda_word_new_slot(uint64_t w) { return (unsigned)(w >> 63); }
static inline uint32_t erda_word_off(uint64_t w, unsigned slot)
{
	return slot ? (uint32_t)(w >> 1) & ERDA_OFF_MASK : (uint32_t)(w >> 32) & ERDA_OFF_MASK;
}
static inline uint64_t erda_word_make(unsigned new_slot, uint32_t off0, uint32_t off1)
{
	return ((uint64_t)(new_slot & 1) << 63) | ((uint64_t)(off0 & ERDA_OFF_MASK) << 32) |
	       ((uint64_t)(off1 & ERDA_OFF_MASK) << 1);
}

/* ---- keys and objects ---- */
uint64_t erda_fp(const void *key, uint32_t klen); /* never 0 */
static inline uint32_t erda_obj_len(uint32_t klen, uint32_t vlen) { return ERDA_OBJ_HDR + klen + vlen; }
static inline uint32_t erda_obj_span(uint32_t len) { return (len + ERDA_OBJ_ALIGN - 1) & ~(ERDA_OBJ_ALIGN - 1); }
/* Encode an object into out (erda_obj_len bytes); returns its length, or 0 if the lengths are
 * out of range. del: a tombstone (value ignored, vlen 0). */
uint32_t erda_obj_encode(void *out, uint32_t seq, const void *key, uint32_t klen, const void *val, uint32_t vlen,
			 int del);
/* Check that the len bytes at obj are the version (seq, len) of key (klen bytes; NULL: any key,
 * whose fingerprint must then be fp unless fp is 0). Returns ERDA_OK or an ERDA_E_*. */
int erda_obj_check(const void *obj, uint32_t len, uint32_t seq, const void *key, uint32_t klen, uint64_t fp);
/* An offset/length in a head's space that an object may occupy: 8-aligned, past the region
 * header, inside one segment. ERDA_OK, ERDA_E_EMPTY (offset 0) or ERDA_E_RANGE. */
int erda_off_check(const struct erda_geom *g, uint32_t off, uint32_t len);

/* ---- the store in memory (server side, recovery, tests) ---- */
typedef void (*erda_persist_fn)(const void *p, size_t n); /* make [p, p+n) durable; NULL: nothing */
struct erda_store {
	uint8_t *base;
	uint64_t size;
	struct erda_geom g;
	struct erda_layout l;
	uint32_t chain[ERDA_MAX_HEADS * ERDA_MAX_CHAIN]; /* head h's k-th region: chain[h * regions_per_head + k] */
	erda_persist_fn persist;
};
/* Format an area of `size` bytes: superblock, heads, region chains (head h gets the regions
 * h*rph .. h*rph+rph-1), empty buckets. Returns 0 or a negative errno. */
int erda_format(struct erda_store *s, void *base, uint64_t size, const struct erda_geom *g, erda_persist_fn persist);
/* Open a formatted area: check the superblock, the heads and the region chains (bounded,
 * out-of-range or cyclic links refused). Returns 0 or a negative errno; why in *why. */
int erda_open(struct erda_store *s, void *base, uint64_t size, erda_persist_fn persist, const char **why);
static inline struct erda_bucket *erda_bucket_at(const struct erda_store *s, uint32_t b)
{
	return (struct erda_bucket *)(s->base + s->l.bucket_off + (uint64_t)b * ERDA_BUCKET_SIZE);
}
static inline struct erda_head *erda_head_at(const struct erda_store *s, uint32_t h)
{
	return (struct erda_head *)(s->base + s->l.head_off + (uint64_t)h * ERDA_HEAD_SIZE);
}
/* Byte offset in the store of offset `off` of head h's space. */
static inline uint64_t erda_addr(const struct erda_store *s, uint32_t h, uint32_t off)
{
	uint32_t k = off / s->g.region_size;

	return s->l.pool_off + (uint64_t)s->chain[h * s->g.regions_per_head + k] * s->g.region_size +
	       off % s->g.region_size;
}
/* Check the version in `slot` of bucket b (a copy: the caller's snapshot). */
int erda_slot_check(const struct erda_store *s, uint32_t b, const struct erda_bucket *bk, unsigned slot);
void erda_head_seal(struct erda_store *s, uint32_t h); /* the CRC of head h, then persist it */

/* Recovery (docs/erda.md "Recovery"): for every occupied bucket, check the version its word
 * names new; if it fails, point the word at the other version if that one holds, else empty
 * the bucket; a forged word (reserved bit, out-of-range offsets) is treated the same way. Then
 * the allocator: each head continues in the segment after its last one (the partly written
 * segment is never handed out again) with seqs above every seq in use. Bounded by the number
 * of buckets; the area must have passed erda_open. A word with the reserved bit set is counted
 * as forged and the bit cleared; its offsets are then checked like any others. */
struct erda_recovery {
	uint64_t buckets_scanned, entries, reverted, emptied, forged, out_of_range;
	uint32_t next_seg[ERDA_MAX_HEADS], next_seq[ERDA_MAX_HEADS];
};
int erda_recover(struct erda_store *s, struct erda_recovery *r);
/* The per-bucket step of recovery, also the server's answer to a reader's report: ERDA_OK if
 * the new version holds (nothing done), else 1 reverted, 2 emptied; r (may be NULL) counts. */
int erda_repair_bucket(struct erda_store *s, uint32_t b, struct erda_recovery *r);

/* ---- the server's allocator and entry updates (DRAM state, rebuilt by recovery) ---- */
struct erda_alloc {
	uint32_t seg[ERDA_MAX_HEADS];      /* current segment of each head (segments per head: full) */
	uint32_t tail[ERDA_MAX_HEADS];     /* next free offset in the head's space */
	uint32_t next_seq[ERDA_MAX_HEADS];
};
/* After erda_recover: each head from its cur_seg and seq_floor (persisted). */
void erda_alloc_init(struct erda_store *s, struct erda_alloc *a);
/* Reserve len bytes (an object of that length) in head h: *off and *seq. Opening a segment
 * persists the head (cur_seg, seq_floor) before any offset in it is handed out. 0 or -ENOSPC. */
int erda_reserve(struct erda_store *s, struct erda_alloc *a, uint32_t h, uint32_t len, uint32_t *off, uint32_t *seq);
/* The bucket of key: its index in *b. create: claim the first empty bucket of the probe window
 * (fp written and persisted). 0, -ENOENT (absent, not create) or -ENOSPC (window full). */
int erda_lookup(struct erda_store *s, const void *key, uint32_t klen, int create, uint32_t *b);
/* Install the version (off, seq, len) in bucket b: if the new version holds it becomes the old
 * one (the new tag flips), else it is replaced (the old version stays the fallback). The slot's
 * seq and len are written and persisted before the word (one 8-byte store, persisted). Returns
 * the word written. */
uint64_t erda_install(struct erda_store *s, uint32_t b, uint32_t off, uint32_t seq, uint32_t len);
/* The word erda_install would write and the slot it fills, without writing (the durable
 * variant: the client writes the word with ATOMIC WRITE); the slot's seq/len are written. */
uint64_t erda_prepare(struct erda_store *s, uint32_t b, uint32_t off, uint32_t seq, uint32_t len);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_ERDA_FORMAT_H */
