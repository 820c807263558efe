/* SPDX-License-Identifier: MIT */
/*
 * liberda_format.c: the Erda store's on-media format, checks and recovery (erda_format.h,
 * docs/erda.md). Plain C with no system dependency beyond the optional arm64 CRC instructions,
 * so that the same code runs in the guest and in the host unit tests (tests/unit/test_erda.cc).
 */
#include "erda_format.h"

#include <errno.h>
#include <string.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

const char *erda_strerror(int e)
{
	switch (e) {
	case ERDA_OK: return "ok";
	case ERDA_E_RANGE: return "offset out of range";
	case ERDA_E_CRC: return "CRC mismatch (torn or unwritten object)";
	case ERDA_E_STALE: return "stale object (seq or length not the bucket's)";
	case ERDA_E_KEY: return "object of another key";
	case ERDA_E_FORMAT: return "bad object header";
	case ERDA_E_FORGED: return "forged word (reserved bit set)";
	case ERDA_E_EMPTY: return "no version";
	}
	return "unknown";
}

/* ---- CRC-32C ---- */

/* Reflected CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected 0x82F63B78), byte table. */
static const uint32_t crc32c_table[256] = {
	0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
	0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
	0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
	0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
	0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
	0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
	0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
	0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
	0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
	0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
	0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
	0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
	0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
	0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
	0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
	0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
	0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
	0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
	0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
	0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
	0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
	0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
	0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
	0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
	0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
	0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
	0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
	0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
	0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
	0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
	0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
	0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
	0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
	0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
	0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
	0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
	0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
	0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
	0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
	0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
	0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
	0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
	0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t n)
{
	while (n--)
		c = crc32c_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

#if defined(__aarch64__) && defined(__linux__)
__attribute__((target("+crc"))) static uint32_t crc32c_hw(uint32_t c, const uint8_t *p, size_t n)
{
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		__asm__("crc32cx %w0, %w0, %x1" : "+r"(c) : "r"(v));
	}
	for (; n; n--, p++)
		__asm__("crc32cb %w0, %w0, %w1" : "+r"(c) : "r"((uint32_t)*p));
	return c;
}
#endif

uint32_t erda_crc32c(uint32_t crc, const void *p, size_t n)
{
	uint32_t c = ~crc;

#if defined(__aarch64__) && defined(__linux__)
	/* getauxval is a read of the saved auxiliary vector: cheap enough per call */
	if (getauxval(AT_HWCAP) & HWCAP_CRC32)
		return ~crc32c_hw(c, (const uint8_t *)p, n);
#endif
	return ~crc32c_sw(c, (const uint8_t *)p, n);
}

/* ---- geometry ---- */

void erda_geom_default(struct erda_geom *g)
{
	g->heads = 4;
	g->regions_per_head = 2;
	g->region_size = 1u << 20;
	g->seg_size = 64u << 10;
	g->buckets = 4096;
	g->probe = 8;
}

const char *erda_geom_check(const struct erda_geom *g)
{
	if (g->heads < 1 || g->heads > ERDA_MAX_HEADS)
		return "heads must be 1..64";
	if (g->regions_per_head < 1 || g->regions_per_head > ERDA_MAX_CHAIN)
		return "regions per head must be 1..64";
	if (g->seg_size < 4096 || g->seg_size % 64)
		return "segment size must be a multiple of 64, at least 4096";
	if (g->region_size < g->seg_size || g->region_size % g->seg_size)
		return "region size must be a multiple of the segment size";
	if (erda_head_space(g) > (1ull << 31))
		return "a head's space (regions per head * region size) must fit 31-bit offsets";
	if (g->buckets < 1 || g->buckets > (1u << 26))
		return "buckets must be 1..2^26";
	if (g->probe < 1 || g->probe > 64)
		return "probe must be 1..64";
	if (erda_obj_len(ERDA_MAX_KEY, 0) + ERDA_REGION_HDR > g->seg_size)
		return "segment too small";
	return 0;
}

void erda_layout(const struct erda_geom *g, struct erda_layout *l)
{
	l->head_off = ERDA_SUPER_SIZE;
	l->bucket_off = (l->head_off + g->heads * ERDA_HEAD_SIZE + 4095) & ~4095u;
	l->nbuckets = g->buckets + g->probe - 1;
	l->pool_off = ((uint64_t)l->bucket_off + (uint64_t)l->nbuckets * ERDA_BUCKET_SIZE + 4095) & ~4095ull;
	l->size = l->pool_off + (uint64_t)g->heads * g->regions_per_head * g->region_size;
}

/* ---- keys, objects, offsets ---- */

uint64_t erda_fp(const void *key, uint32_t klen)
{
	const uint8_t *p = (const uint8_t *)key;
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t i = 0; i < klen; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h ? h : 1;
}

uint32_t erda_obj_encode(void *out, uint32_t seq, const void *key, uint32_t klen, const void *val, uint32_t vlen,
			 int del)
{
	struct erda_obj_hdr h;
	uint8_t *o = (uint8_t *)out;

	if (del)
		vlen = 0;
	if (klen < 1 || klen > ERDA_MAX_KEY || vlen > ERDA_MAX_VALUE)
		return 0;
	h.crc = 0;
	h.seq = seq;
	h.klen = (uint16_t)klen;
	h.flags = del ? ERDA_F_DELETE : 0;
	h.vlen = vlen;
	memcpy(o, &h, sizeof(h));
	memcpy(o + ERDA_OBJ_HDR, key, klen);
	if (vlen)
		memcpy(o + ERDA_OBJ_HDR + klen, val, vlen);
	h.crc = erda_crc32c(0, o + 4, erda_obj_len(klen, vlen) - 4);
	memcpy(o, &h.crc, 4);
	return erda_obj_len(klen, vlen);
}

int erda_obj_check(const void *obj, uint32_t len, uint32_t seq, const void *key, uint32_t klen, uint64_t fp)
{
	struct erda_obj_hdr h;
	const uint8_t *o = (const uint8_t *)obj;

	if (len < ERDA_OBJ_HDR)
		return ERDA_E_FORMAT;
	memcpy(&h, o, sizeof(h));
	if (h.klen < 1 || h.klen > ERDA_MAX_KEY || h.vlen > ERDA_MAX_VALUE || (h.flags & ~ERDA_F_DELETE) ||
	    ((h.flags & ERDA_F_DELETE) && h.vlen) || erda_obj_len(h.klen, h.vlen) != len)
		return h.seq != seq ? ERDA_E_STALE : ERDA_E_FORMAT;
	if (erda_crc32c(0, o + 4, len - 4) != h.crc)
		return ERDA_E_CRC;
	if (h.seq != seq)
		return ERDA_E_STALE;
	if (key && (h.klen != klen || memcmp(o + ERDA_OBJ_HDR, key, klen)))
		return ERDA_E_KEY;
	if (!key && fp && erda_fp(o + ERDA_OBJ_HDR, h.klen) != fp)
		return ERDA_E_KEY;
	return ERDA_OK;
}

int erda_off_check(const struct erda_geom *g, uint32_t off, uint32_t len)
{
	uint32_t seg;

	if (off == 0)
		return ERDA_E_EMPTY;
	if (off % ERDA_OBJ_ALIGN || len < ERDA_OBJ_HDR || len > erda_obj_len(ERDA_MAX_KEY, ERDA_MAX_VALUE) ||
	    (uint64_t)off + len > erda_head_space(g))
		return ERDA_E_RANGE;
	seg = off / g->seg_size;
	if (off < erda_seg_start(g, seg) || (off + len - 1) / g->seg_size != seg)
		return ERDA_E_RANGE;
	return ERDA_OK;
}

/* ---- the store ---- */

static void persist(const struct erda_store *s, const void *p, size_t n)
{
	if (s->persist)
		s->persist(p, n);
}

static void seal64(void *p, uint32_t *crc)
{
	*crc = erda_crc32c(0, p, 60);
}

void erda_head_seal(struct erda_store *s, uint32_t h)
{
	struct erda_head *hd = erda_head_at(s, h);

	seal64(hd, &hd->crc);
	persist(s, hd, sizeof(*hd));
}

int erda_format(struct erda_store *s, void *base, uint64_t size, const struct erda_geom *g, erda_persist_fn pf)
{
	struct erda_super *sb = (struct erda_super *)base;
	uint32_t rph = g->regions_per_head;

	if (erda_geom_check(g))
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->base = (uint8_t *)base;
	s->size = size;
	s->g = *g;
	s->persist = pf;
	erda_layout(g, &s->l);
	if (s->l.size > size)
		return -ENOSPC;
	/* the superblock last: an area whose format was cut short does not open */
	memset(base, 0, ERDA_SUPER_SIZE);
	persist(s, base, ERDA_SUPER_SIZE);
	memset(s->base + s->l.head_off, 0, s->l.pool_off - s->l.head_off);
	for (uint32_t h = 0; h < g->heads; h++) {
		struct erda_head *hd = erda_head_at(s, h);

		hd->magic = ERDA_HEAD_MAGIC;
		hd->id = h;
		hd->first_region = h * rph + 1;
		hd->nregions = rph;
		hd->cur_seg = 0;
		hd->seq_floor = 1;
		seal64(hd, &hd->crc);
		for (uint32_t k = 0; k < rph; k++) {
			uint32_t r = h * rph + k;
			struct erda_region *rg = (struct erda_region *)(s->base + s->l.pool_off + (uint64_t)r * g->region_size);

			memset(rg, 0, sizeof(*rg));
			rg->magic = ERDA_REGION_MAGIC;
			rg->head = h;
			rg->chain_pos = k;
			rg->next = k + 1 < rph ? r + 2 : 0;
			seal64(rg, &rg->crc);
			persist(s, rg, sizeof(*rg));
			s->chain[h * rph + k] = r;
		}
	}
	persist(s, s->base + s->l.head_off, s->l.pool_off - s->l.head_off);
	sb->magic = ERDA_MAGIC;
	sb->version = ERDA_VERSION;
	sb->heads = g->heads;
	sb->regions_per_head = g->regions_per_head;
	sb->region_size = g->region_size;
	sb->seg_size = g->seg_size;
	sb->buckets = g->buckets;
	sb->probe = g->probe;
	sb->head_off = s->l.head_off;
	sb->bucket_off = s->l.bucket_off;
	sb->pool_off = s->l.pool_off;
	seal64(sb, &sb->crc);
	persist(s, sb, sizeof(*sb));
	return 0;
}

int erda_open(struct erda_store *s, void *base, uint64_t size, erda_persist_fn pf, const char **why)
{
	const struct erda_super *sb = (const struct erda_super *)base;
	const char *dummy;
	uint8_t seen[ERDA_MAX_HEADS * ERDA_MAX_CHAIN];

	if (!why)
		why = &dummy;
	memset(s, 0, sizeof(*s));
	s->base = (uint8_t *)base;
	s->size = size;
	s->persist = pf;
	if (size < ERDA_SUPER_SIZE || sb->magic != ERDA_MAGIC || sb->version != ERDA_VERSION) {
		*why = "no Erda superblock (not formatted)";
		return -ENODATA;
	}
	if (erda_crc32c(0, sb, 60) != sb->crc) {
		*why = "superblock CRC mismatch";
		return -EBADMSG;
	}
	s->g = (struct erda_geom){ sb->heads, sb->regions_per_head, sb->region_size, sb->seg_size, sb->buckets, sb->probe };
	if ((*why = erda_geom_check(&s->g)))
		return -EINVAL;
	erda_layout(&s->g, &s->l);
	if (s->l.head_off != sb->head_off || s->l.bucket_off != sb->bucket_off || s->l.pool_off != sb->pool_off) {
		*why = "superblock layout does not follow from its geometry";
		return -EINVAL;
	}
	if (s->l.size > size) {
		*why = "the area is smaller than the store's geometry";
		return -ENOSPC;
	}
	memset(seen, 0, sizeof(seen));
	for (uint32_t h = 0; h < s->g.heads; h++) {
		const struct erda_head *hd = erda_head_at(s, h);
		uint32_t r, nregions = s->g.heads * s->g.regions_per_head;

		if (hd->magic != ERDA_HEAD_MAGIC || hd->id != h || erda_crc32c(0, hd, 60) != hd->crc) {
			*why = "a log head is damaged (magic, id or CRC)";
			return -EBADMSG;
		}
		if (hd->nregions != s->g.regions_per_head || hd->cur_seg > erda_segs_per_head(&s->g)) {
			*why = "a log head's region count or current segment is out of range";
			return -EINVAL;
		}
		/* walk the chain: every link in the pool, each region once, positions in order */
		r = hd->first_region;
		for (uint32_t k = 0; k < s->g.regions_per_head; k++) {
			const struct erda_region *rg;

			if (r == 0 || r > nregions || seen[r - 1]) {
				*why = "a region link is out of range or cyclic";
				return -EINVAL;
			}
			seen[r - 1] = 1;
			rg = (const struct erda_region *)(s->base + s->l.pool_off + (uint64_t)(r - 1) * s->g.region_size);
			if (rg->magic != ERDA_REGION_MAGIC || rg->head != h || rg->chain_pos != k ||
			    erda_crc32c(0, rg, 60) != rg->crc) {
				*why = "a region header is damaged or linked to another head";
				return -EBADMSG;
			}
			s->chain[h * s->g.regions_per_head + k] = r - 1;
			r = rg->next;
		}
		if (r != 0) {
			*why = "a head's chain is longer than its region count";
			return -EINVAL;
		}
	}
	return 0;
}

int erda_slot_check(const struct erda_store *s, uint32_t b, const struct erda_bucket *bk, unsigned slot)
{
	uint32_t h = b % s->g.heads, off, len = bk->len[slot];
	int ret;

	if (bk->word & ERDA_WORD_RSVD)
		return ERDA_E_FORGED;
	off = erda_word_off(bk->word, slot);
	if ((ret = erda_off_check(&s->g, off, len)))
		return ret;
	return erda_obj_check(s->base + erda_addr(s, h, off), len, bk->seq[slot], NULL, 0, bk->fp);
}

int erda_repair_bucket(struct erda_store *s, uint32_t b, struct erda_recovery *r)
{
	struct erda_recovery dummy;
	struct erda_bucket *bk = erda_bucket_at(s, b), c = *bk;
	unsigned nw;
	int cn, co, forged = 0;

	if (!r)
		r = &dummy;
	if (!c.fp)
		return ERDA_OK;
	if (c.word & ERDA_WORD_RSVD) {
		/* forged: the bit is refused; the offsets are checked like any others */
		r->forged++;
		forged = 1;
		c.word &= ~ERDA_WORD_RSVD;
	}
	nw = erda_word_new_slot(c.word);
	cn = erda_slot_check(s, b, &c, nw);
	if (cn == ERDA_OK && !forged)
		return ERDA_OK;
	if (cn == ERDA_OK) {
		bk->word = c.word;
		persist(s, &bk->word, 8);
		r->reverted++;
		return 1;
	}
	if (cn == ERDA_E_RANGE)
		r->out_of_range++;
	co = erda_slot_check(s, b, &c, !nw);
	if (co == ERDA_OK) {
		/* revert: the other version becomes the new one; the failed offset stays in the old
		 * slot, the next write replaces it */
		bk->word = erda_word_make(!nw, erda_word_off(c.word, 0), erda_word_off(c.word, 1));
		persist(s, &bk->word, 8);
		r->reverted++;
		return 1;
	}
	/* no version holds: the key's first write never completed (or both offsets were forged) */
	bk->word = 0;
	persist(s, &bk->word, 8);
	memset(bk, 0, 24);
	persist(s, bk, 24);
	r->emptied++;
	return 2;
}

int erda_recover(struct erda_store *s, struct erda_recovery *r)
{
	uint32_t maxseq[ERDA_MAX_HEADS];

	memset(r, 0, sizeof(*r));
	memset(maxseq, 0, sizeof(maxseq));
	for (uint32_t b = 0; b < s->l.nbuckets; b++) {
		struct erda_bucket *bk = erda_bucket_at(s, b);
		uint32_t h = b % s->g.heads;

		r->buckets_scanned++;
		if (!bk->fp)
			continue;
		r->entries++;
		erda_repair_bucket(s, b, r);
		for (unsigned k = 0; k < 2; k++)
			if (bk->fp && bk->seq[k] > maxseq[h] && erda_off_check(&s->g, erda_word_off(bk->word, k), bk->len[k]) == ERDA_OK)
				maxseq[h] = bk->seq[k];
	}
	for (uint32_t h = 0; h < s->g.heads; h++) {
		struct erda_head *hd = erda_head_at(s, h);
		uint32_t segs = erda_segs_per_head(&s->g);

		/* the segment allocation was in may hold torn objects of any length: start afresh after it */
		hd->cur_seg = hd->cur_seg < segs ? hd->cur_seg + 1 : segs; /* segs: the head is full */
		if (maxseq[h] + 1 > hd->seq_floor)
			hd->seq_floor = maxseq[h] + 1;
		hd->recoveries++;
		erda_head_seal(s, h);
		r->next_seg[h] = hd->cur_seg;
		r->next_seq[h] = hd->seq_floor;
	}
	return 0;
}

/* ---- allocator and entry updates ---- */

static uint32_t seg_objects_max(const struct erda_store *s)
{
	return s->g.seg_size / ERDA_OBJ_ALIGN;
}

static void open_seg(struct erda_store *s, struct erda_alloc *a, uint32_t h, uint32_t seg)
{
	struct erda_head *hd = erda_head_at(s, h);

	a->seg[h] = seg;
	a->tail[h] = seg < erda_segs_per_head(&s->g) ? erda_seg_start(&s->g, seg) : 0;
	hd->cur_seg = seg;
	hd->seq_floor = a->next_seq[h] + seg_objects_max(s);
	erda_head_seal(s, h);
}

void erda_alloc_init(struct erda_store *s, struct erda_alloc *a)
{
	memset(a, 0, sizeof(*a));
	for (uint32_t h = 0; h < s->g.heads; h++) {
		a->next_seq[h] = erda_head_at(s, h)->seq_floor;
		open_seg(s, a, h, erda_head_at(s, h)->cur_seg);
	}
}

int erda_reserve(struct erda_store *s, struct erda_alloc *a, uint32_t h, uint32_t len, uint32_t *off, uint32_t *seq)
{
	uint32_t span = erda_obj_span(len), segs = erda_segs_per_head(&s->g);

	if (h >= s->g.heads || len < ERDA_OBJ_HDR || span > s->g.seg_size - ERDA_REGION_HDR)
		return -EINVAL;
	if (a->seg[h] < segs && (uint64_t)a->tail[h] + span > (uint64_t)(a->seg[h] + 1) * s->g.seg_size)
		open_seg(s, a, h, a->seg[h] + 1);
	if (a->seg[h] >= segs)
		return -ENOSPC;
	*off = a->tail[h];
	*seq = a->next_seq[h]++;
	a->tail[h] += span;
	return 0;
}

int erda_lookup(struct erda_store *s, const void *key, uint32_t klen, int create, uint32_t *b)
{
	uint64_t fp = erda_fp(key, klen);
	uint32_t home = (uint32_t)(fp % s->g.buckets), empty = UINT32_MAX;

	for (uint32_t i = 0; i < s->g.probe; i++) {
		struct erda_bucket *bk = erda_bucket_at(s, home + i);

		if (bk->fp == fp) {
			*b = home + i;
			return 0;
		}
		if (!bk->fp && empty == UINT32_MAX)
			empty = home + i;
	}
	if (!create)
		return -ENOENT;
	if (empty == UINT32_MAX)
		return -ENOSPC;
	erda_bucket_at(s, empty)->fp = fp;
	persist(s, erda_bucket_at(s, empty), 8);
	*b = empty;
	return 0;
}

uint64_t erda_prepare(struct erda_store *s, uint32_t b, uint32_t off, uint32_t seq, uint32_t len)
{
	struct erda_bucket *bk = erda_bucket_at(s, b), c = *bk;
	unsigned nw = erda_word_new_slot(c.word), slot;
	uint32_t o[2] = { erda_word_off(c.word, 0), erda_word_off(c.word, 1) };

	if (c.word & ERDA_WORD_RSVD) {
		/* forged: nothing in it is trusted */
		o[0] = o[1] = 0;
		nw = 0;
		slot = 0;
	} else if (o[nw] == 0 || erda_slot_check(s, b, &c, nw) != ERDA_OK) {
		slot = nw;               /* the new version does not hold: replace it */
	} else {
		slot = !nw;              /* it holds: it becomes the old one */
	}
	o[slot] = off;
	bk->seq[slot] = seq;
	bk->len[slot] = len;
	persist(s, &bk->seq[slot], 4);
	persist(s, &bk->len[slot], 4);
	return erda_word_make(slot, o[0], o[1]);
}

uint64_t erda_install(struct erda_store *s, uint32_t b, uint32_t off, uint32_t seq, uint32_t len)
{
	struct erda_bucket *bk = erda_bucket_at(s, b);
	uint64_t w = erda_prepare(s, b, off, seq, len);

	__atomic_store_n(&bk->word, w, __ATOMIC_RELEASE);
	persist(s, &bk->word, 8);
	return w;
}
