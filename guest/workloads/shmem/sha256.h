/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 (FIPS 180-4, sec. 4.1.2, 5.1.1, 6.2) and HMAC-SHA-256 (FIPS 198-1 / RFC 2104), for
 * libshmem's start-up exchange: the PEs of a job prove to each other that they know the job's
 * secret (docs/shmem.md, "Start-up"). Small and unoptimised: a few hashes per PE per job. The
 * round constants are the first 32 bits of the fractional parts of the cube roots of the first 64
 * primes (sec. 4.2.2), the initial value those of the square roots of the first 8 (sec. 5.3.3).
 */
#ifndef RACKEMU_SHMEM_SHA256_H
#define RACKEMU_SHMEM_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHA256_LEN   32
#define SHA256_BLOCK 64

struct sha256 {
	uint32_t h[8];
	uint64_t bytes;              /* message length so far */
	uint8_t buf[SHA256_BLOCK];   /* a partial block */
	size_t fill;
};

static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t sha256_rotr(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static inline void sha256_init(struct sha256 *s)
{
	static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };

	memcpy(s->h, h0, sizeof(h0));
	s->bytes = 0;
	s->fill = 0;
}

/* One 64-byte block into the state (sec. 6.2.2). */
static inline void sha256_block(struct sha256 *s, const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (i = 16; i < 64; i++) {
		uint32_t s0 = sha256_rotr(w[i - 15], 7) ^ sha256_rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = sha256_rotr(w[i - 2], 17) ^ sha256_rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
	e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
	for (i = 0; i < 64; i++) {
		t1 = h + (sha256_rotr(e, 6) ^ sha256_rotr(e, 11) ^ sha256_rotr(e, 25)) + ((e & f) ^ (~e & g)) +
		     sha256_k[i] + w[i];
		t2 = (sha256_rotr(a, 2) ^ sha256_rotr(a, 13) ^ sha256_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		h = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
	s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static inline void sha256_update(struct sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	while (len) {
		size_t n = SHA256_BLOCK - s->fill < len ? SHA256_BLOCK - s->fill : len;

		memcpy(s->buf + s->fill, p, n);
		s->fill += n, p += n, len -= n;
		if (s->fill == SHA256_BLOCK) {
			sha256_block(s, s->buf);
			s->fill = 0;
		}
	}
}

/* Padding (sec. 5.1.1): a 1 bit, zeros, the length in bits as 64 bits big-endian. */
static inline void sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN])
{
	uint64_t bits = s->bytes * 8;
	uint8_t pad[SHA256_BLOCK + 8] = { 0x80 };
	size_t n = (s->fill < 56 ? 56 : 120) - s->fill;
	int i;

	for (i = 0; i < 8; i++)
		pad[n + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
	sha256_update(s, pad, n + 8);
	for (i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

/* HMAC-SHA-256 of the concatenation of `nparts` parts under `key`. */
static inline void hmac_sha256(const uint8_t *key, size_t key_len, const void *const *part, const size_t *part_len,
			       int nparts, uint8_t out[SHA256_LEN])
{
	uint8_t k[SHA256_BLOCK] = { 0 }, inner[SHA256_LEN];
	struct sha256 s;
	int i;

	if (key_len > SHA256_BLOCK) { /* a long key is replaced by its hash */
		sha256_init(&s);
		sha256_update(&s, key, key_len);
		sha256_final(&s, k);
	} else {
		memcpy(k, key, key_len);
	}
	for (i = 0; i < SHA256_BLOCK; i++)
		k[i] ^= 0x36;
	sha256_init(&s);
	sha256_update(&s, k, SHA256_BLOCK);
	for (i = 0; i < nparts; i++)
		sha256_update(&s, part[i], part_len[i]);
	sha256_final(&s, inner);
	for (i = 0; i < SHA256_BLOCK; i++)
		k[i] ^= 0x36 ^ 0x5c;
	sha256_init(&s);
	sha256_update(&s, k, SHA256_BLOCK);
	sha256_update(&s, inner, SHA256_LEN);
	sha256_final(&s, out);
	memset(k, 0, sizeof(k));
}

/* Equal, in a time that does not depend on where they differ. */
static inline int sha256_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t d = 0;
	size_t i;

	for (i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

#endif
