/* SPDX-License-Identifier: MIT */
/*
 * ycsb.h: YCSB's key choice and operation mix for the guest workloads (Erda, SwordBox's lock,
 * B+tree and Clover workloads), as YCSB's core workload generates them.
 *
 * `requestdistribution=zipfian` in YCSB is its ScrambledZipfianGenerator: Gray et al.'s zipfian
 * generator ("Quickly Generating Billion-Record Synthetic Databases", SIGMOD 1994) over
 * YCSB_ZIPF_ITEMS = 10^10 items with the constant 0.99 and the zeta of those items precomputed
 * (YCSB_ZIPF_ZETAN), then FNV-1a-64 of the drawn value, modulo the key count. So the hottest
 * keys are scattered over the key space rather than being keys 0, 1, 2, ...; the skew is that of
 * 10^10 items folded onto the key count. YCSB also offers a plain zipfian over the key count
 * (ycsb_zipf_init with scrambled = 0 here): its zeta is computed for the key count.
 *
 * The uniform source is splitmix64 (YCSB uses Java's ThreadLocalRandom): the same seed gives the
 * same sequence on every node and on the host, not the sequence YCSB would draw.
 *
 * Workloads (YCSB's workloads/workload{a,b,c}, and update-only):
 *   A  50% read, 50% update     B  95% read, 5% update     C  100% read     U  100% update
 */
#ifndef RACKEMU_GUEST_YCSB_H
#define RACKEMU_GUEST_YCSB_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define YCSB_ZIPF_CONSTANT 0.99
#define YCSB_ZIPF_ITEMS 10000000000ull     /* ScrambledZipfianGenerator.ITEM_COUNT */
#define YCSB_ZIPF_ZETAN 26.46902820178302  /* zeta(ITEM_COUNT, 0.99), YCSB's precomputed ZETAN */

/* splitmix64: the uniform source. */
static inline uint64_t ycsb_rand64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A double in [0, 1) with 53 random bits. */
static inline double ycsb_rand01(uint64_t *s)
{
	return (double)(ycsb_rand64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* YCSB's Utils.fnvhash64: FNV-1a over the 8 bytes of v, low byte first, then Math.abs. */
static inline uint64_t ycsb_fnvhash64(uint64_t v)
{
	int64_t h = (int64_t)0xcbf29ce484222325ull;

	for (int i = 0; i < 8; i++) {
		h ^= (int64_t)(v & 0xff);
		h = (int64_t)((uint64_t)h * 1099511628211ull);
		v >>= 8;
	}
	/* Math.abs(Long.MIN_VALUE) stays negative in Java; the unsigned value is used here */
	return h < 0 ? (uint64_t)0 - (uint64_t)h : (uint64_t)h;
}

/* zeta(n, theta) = sum_{i=1..n} 1 / i^theta (O(n): for key counts, not for 10^10). */
static inline double ycsb_zeta(uint64_t n, double theta)
{
	double sum = 0;

	for (uint64_t i = 1; i <= n; i++)
		sum += 1.0 / pow((double)i, theta);
	return sum;
}

struct ycsb_zipf {
	uint64_t keys;  /* values 0 .. keys - 1 */
	uint64_t items; /* the zipfian's item count (YCSB_ZIPF_ITEMS when scrambled) */
	int scrambled;
	double theta, alpha, zetan, eta, half_pow_theta;
	uint64_t rng;
};

/* A zipfian over `keys` keys with constant `theta` (YCSB: 0.99); scrambled as YCSB's
 * `requestdistribution=zipfian`, else the plain generator (key 0 the hottest). Returns 0, or -1
 * when keys is 0 or theta is not in (0, 1). */
static inline int ycsb_zipf_init(struct ycsb_zipf *z, uint64_t keys, double theta, int scrambled, uint64_t seed)
{
	double zeta2;

	memset(z, 0, sizeof(*z));
	if (keys == 0 || !(theta > 0 && theta < 1))
		return -1;
	z->keys = keys;
	z->scrambled = scrambled;
	z->theta = theta;
	z->items = scrambled ? YCSB_ZIPF_ITEMS : keys;
	z->zetan = scrambled && theta == YCSB_ZIPF_CONSTANT ? YCSB_ZIPF_ZETAN : ycsb_zeta(z->items, theta);
	zeta2 = ycsb_zeta(2, theta);
	z->alpha = 1.0 / (1.0 - theta);
	z->eta = (1 - pow(2.0 / (double)z->items, 1 - theta)) / (1 - zeta2 / z->zetan);
	z->half_pow_theta = pow(0.5, theta);
	z->rng = seed;
	return 0;
}

/* ZipfianGenerator.nextLong over [0, items). */
static inline uint64_t ycsb_zipf_raw(struct ycsb_zipf *z)
{
	double u = ycsb_rand01(&z->rng);
	double uz = u * z->zetan;
	uint64_t v;

	if (uz < 1.0)
		return 0;
	if (uz < 1.0 + z->half_pow_theta)
		return 1;
	v = (uint64_t)((double)z->items * pow(z->eta * u - z->eta + 1, z->alpha));
	return v < z->items ? v : z->items - 1;
}

/* The next key, 0 .. keys - 1. */
static inline uint64_t ycsb_zipf_next(struct ycsb_zipf *z)
{
	uint64_t v = ycsb_zipf_raw(z);

	return z->scrambled ? ycsb_fnvhash64(v) % z->keys : v;
}

enum ycsb_op { YCSB_READ = 0, YCSB_UPDATE = 1 };

struct ycsb_workload {
	char name;          /* 'A', 'B', 'C', 'U' */
	double read_share;  /* the rest are updates */
};

/* The workload named by `name` ("A", "B", "C", "U"; case-insensitive), NULL if none. */
static inline const struct ycsb_workload *ycsb_workload(const char *name)
{
	static const struct ycsb_workload w[] = {{'A', 0.50}, {'B', 0.95}, {'C', 1.00}, {'U', 0.00}};

	if (!name || !name[0] || name[1])
		return NULL;
	for (unsigned i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		if ((name[0] & ~0x20) == w[i].name)
			return &w[i];
	return NULL;
}

/* The next operation of workload `w`, drawn from the zipfian's own uniform source. */
static inline enum ycsb_op ycsb_next_op(struct ycsb_zipf *z, const struct ycsb_workload *w)
{
	return ycsb_rand01(&z->rng) < w->read_share ? YCSB_READ : YCSB_UPDATE;
}

#endif /* RACKEMU_GUEST_YCSB_H */
