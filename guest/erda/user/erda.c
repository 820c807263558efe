// SPDX-License-Identifier: MIT
/*
 * erda: the Erda store and its two baselines on the RNIC (docs/erda.md), after "Erda: zero-copy
 * log-structured memory for remote data atomicity" (Liu, Hua, Li, Liu) sec. 3-4. One server
 * holds the log and the hash table (erda_format.h) in the node's persistent memory
 * (/dev/rkpmem0) or, without one, in DRAM; clients on any node connect over TCP (the RC QP's
 * parameters) and then use RDMA. Every command prints key=value lines.
 *
 *   erda server [--port P] [geometry] [--grace-ms G] [--format]
 *   erda put|del|get --server HOST [--scheme erda|redo|raw] [--durable] KEY [VALUE]
 *   erda forge --server HOST KEY (--reserved-bit | --offset OFF)   a malicious client's word
 *   erda stats --server HOST                                        the server's counters
 *   erda ycsb --server HOST --workload A|B|C|U [--keys K] [--ops N] [--value-size S] ...
 *
 * Schemes (the paper's sec. 4 baselines use the same hash table and region):
 *   erda  write: WRITE_WITH_IMM request (client id in the immediate) -> the server reserves log
 *         space, updates the word and replies with the address -> the client WRITEs the object
 *         (2 round trips). --durable: the server does not write the word; the client WRITEs
 *         the object, FLUSHes it (persistence), ATOMIC WRITEs the word, FLUSHes it, and tells
 *         the server (the put returns only when durable). read: READ the bucket window, READ
 *         the object, check CRC and seq; on failure read the old version and report it to the
 *         server, which restores the entry (no server CPU on a good read).
 *   redo  write: SEND of the record (CRC-32C) into the server's redo log; the server checks it,
 *         writes the object into the log, updates the word, replies. read: a request answered
 *         by the server with the value.
 *   raw   write: WRITE of the record into the client's ring in the region, an 8-byte READ of it
 *         (read-after-write: the data is placed before the READ returns), a request; the server
 *         checks, applies, replies. read: as redo.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "erda_format.h"
#include "librnic.h"
#include "ycsb.h"

#define ERDA_PORT        18700
#define MAX_CONN         32
#define RECV_SLOTS       8          /* redo-log slots (receive buffers) per connection */
#define RAW_SLOTS        8          /* read-after-write ring slots per connection */
#define SLOT_SIZE        8192u      /* one record: request header + key + value */
#define MAX_VAL          4096u      /* the paper's largest value */
#define MBOX_SLOTS       2          /* request mailboxes per connection (alternate) */
#define MBOX_SIZE        256u
#define CONN_AREA        ((RECV_SLOTS + RAW_SLOTS) * SLOT_SIZE)
#define PMEM_PATH        "/dev/rkpmem0"
#define TIMEOUT_MS       10000

static const char usage[] =
	"usage: erda COMMAND [options]\n"
	"  server [--port P] [--heads N] [--regions-per-head N] [--region-size B] [--seg-size B]\n"
	"         [--buckets N] [--probe N] [--grace-ms G] [--format] [--max-conn N]\n"
	"      hold the store (persistent memory " PMEM_PATH " if present, else DRAM); a store found in\n"
	"      persistent memory is recovered (docs/erda.md \"Recovery\") unless --format; none there:\n"
	"      formatted; a damaged one: refused.\n"
	"  put --server HOST KEY VALUE [--scheme erda|redo|raw] [--durable] [--skip-object-write]\n"
	"      [--as-client ID]: claim another client's id in the request (refused by the server)\n"
	"  del --server HOST KEY [--scheme S] [--durable]\n"
	"  get --server HOST KEY [--scheme S]\n"
	"  forge --server HOST KEY (--reserved-bit | --offset OFF)\n"
	"      overwrite KEY's word as a malicious client could (the MR allows RDMA WRITE)\n"
	"  stats --server HOST\n"
	"  ycsb --server HOST --workload A|B|C|U [--scheme S] [--durable] [--keys K] [--ops N]\n"
	"       [--value-size S] [--threads T] [--seed X] [--load] [--verify]\n"
	"      YCSB (guest/common/ycsb.h: scrambled zipfian 0.99); --load writes every key first;\n"
	"      --verify checks every value read was written for its key.\n"
	"  --port P (default 18700) on every command.\n";

/* ---- the wire: requests (mailbox or SEND/WRITE records) and replies ---- */

enum { OP_PUT = 1, OP_DEL, OP_GET, OP_REPAIR, OP_DONE, OP_APPLY, OP_STATS, OP_MAX };
enum { SCH_ERDA = 0, SCH_REDO, SCH_RAW, SCH_COUNT };
enum { K_CREATE = 0, K_UPDATE, K_DELETE, K_COUNT };
static const char *const scheme_names[SCH_COUNT] = { "erda", "redo", "raw" };
static const char *const kind_names[K_COUNT] = { "create", "update", "delete" };

/* The immediate of a request: op [31:24], mailbox slot [23:16], client id [15:0]. */
#define IMM(op, slot, id) (((uint32_t)(op) << 24) | ((uint32_t)(slot) << 16) | (uint32_t)(id))

struct req {
	uint32_t crc;            /* redo/raw records: CRC-32C over the rest of the record */
	uint16_t op, scheme;
	uint16_t klen, flags;    /* flags: REQ_F_DURABLE */
	uint32_t vlen;
	uint32_t bucket;         /* REPAIR, DONE */
	uint32_t slot;           /* APPLY: the RAW ring slot */
	uint64_t word_seen;      /* REPAIR: the word the reader saw */
	uint8_t key[ERDA_MAX_KEY];
	/* records: the value follows */
};
#define REQ_F_DURABLE 1u
_Static_assert(sizeof(struct req) == 96, "request header");

struct rep {
	int32_t status;          /* 0 or a negative errno; REPAIR: 1 restored, 2 emptied, 3 pending */
	uint32_t kind;           /* K_* of a write */
	uint32_t bucket, head, off, seq, len, vlen;
	uint64_t addr;           /* erda write: the object's address (IOVA) */
	uint64_t word;           /* durable: the word to ATOMIC WRITE */
	uint64_t word_addr;
	uint32_t flags, pad;
	/* GET: the value follows at REP_DATA; STATS: the counters */
};
#define REP_DATA 64u
_Static_assert(sizeof(struct rep) <= REP_DATA, "reply header");

/* What the server tells a client over TCP after the RC parameters. */
struct hello {
	uint32_t id;
	uint32_t scheme_ok;
	struct erda_geom g;
	uint32_t bucket_off, pmem;
	uint64_t pool_off;
	uint64_t base;           /* the region MR's IOVA (= rnic_conn.addr) */
	uint64_t mbox_addr;      /* this client's mailboxes */
	uint32_t mbox_rkey, pad;
	uint64_t ring_addr;      /* this client's area: RECV_SLOTS redo slots, then RAW_SLOTS */
	uint32_t chain[ERDA_MAX_HEADS * ERDA_MAX_CHAIN];
};

/* The server's counters (erda stats; docs/erda.md "Counters"). */
#define SERVER_COUNTERS(X) \
	X(requests, "requests handled") \
	X(creates, "writes that created a key") \
	X(updates, "writes that replaced a version") \
	X(deletes, "tombstones installed") \
	X(gets, "two-sided reads (baselines)") \
	X(repairs, "readers' reports of a failed version") \
	X(restored, "entries restored after a report (reverted or emptied)") \
	X(repair_pending, "reports on an in-flight write, left alone") \
	X(refused, "requests refused: bad op, lengths, slot, bucket") \
	X(forged_requests, "requests whose immediate's client id is not the connection's") \
	X(crc_refused, "redo/raw records whose CRC failed") \
	X(forged_entries, "words with the reserved bit set, found by the server") \
	X(out_of_range, "words with an offset outside the head's space, found by the server") \
	X(enospc, "writes refused: log or probe window full") \
	X(busy, "durable writes refused while another on the key was pending") \
	X(durable_done, "durable writes completed by their client") \
	X(connections, "clients connected since start")
#define C_ENUM(n, d) SC_##n,
enum { SERVER_COUNTERS(C_ENUM) SC_COUNT };
#define C_NAME(n, d) #n,
static const char *const sc_names[SC_COUNT] = { SERVER_COUNTERS(C_NAME) };
/* after the named counters in a STATS reply: bytes written into the region by the server's CPU
 * per scheme and kind, then the region's size and whether it is persistent memory */
#define SC_BYTES_AT SC_COUNT
#define SC_TOTAL (SC_COUNT + SCH_COUNT * K_COUNT + 2)

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "erda: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(2);
}

static void fatal(const char *what, int err)
{
	fprintf(stderr, "erda: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- persistence of CPU stores, and the region provider ---- */

static int have_dpb;

/* DC CVAP (FEAT_DPB) per 64-byte line, else DC CVAC (what Linux uses without DPB), then DSB. */
static void persist_range(const void *p, size_t n)
{
#if defined(__aarch64__)
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)p + n;

	for (; a < e; a += 64) {
		if (have_dpb)
			__asm__ volatile("sys #3, c7, c12, #1, %0" : : "r"(a) : "memory"); /* dc cvap */
		else
			__asm__ volatile("dc cvac, %0" : : "r"(a) : "memory");
	}
	__asm__ volatile("dsb sy" : : : "memory");
#else
	(void)p;
	(void)n;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* The memory the log and the hash table live in: the node's persistent memory when it exists
 * (mapped shared from PMEM_PATH), else anonymous DRAM with a notice. *pmem says which. */
static void *region_map(size_t want, int *pmem)
{
	int fd = open(PMEM_PATH, O_RDWR);
	void *p;

#if defined(__aarch64__)
	have_dpb = (getauxval(AT_HWCAP) & (1ul << 16)) != 0; /* HWCAP_DCPOP */
#endif
	if (fd >= 0) {
		off_t size = lseek(fd, 0, SEEK_END);

		if (size > 0 && (uint64_t)size < want) {
			fprintf(stderr, "erda: %s has %lld bytes, the store needs %zu\n", PMEM_PATH, (long long)size, want);
			exit(1);
		}
		p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			fatal("mapping " PMEM_PATH, errno);
		*pmem = 1;
		return p;
	}
	printf("no persistent memory on this node: log in DRAM\n");
	p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		fatal("allocating the store", errno);
	*pmem = 0;
	return p;
}

/* ---- server ---- */

struct sconn {
	int sock;                /* -1: free */
	uint32_t id;
	struct rnic_qp *qp;
	struct rnic_conn peer;   /* the client's reply buffer */
	uint64_t area;           /* offset in the region of its redo/raw area */
};

struct server {
	struct rnic_ctx *ctx;
	uint32_t pd;
	uint8_t *region;
	uint64_t region_size;
	int pmem;
	struct rnic_mr mr, mbox_mr;
	uint8_t *mbox;           /* MAX_CONN * MBOX_SLOTS * MBOX_SIZE */
	struct rnic_cq *scq, *rcq;
	struct erda_store st;
	struct erda_alloc al;
	struct sconn conn[MAX_CONN];
	unsigned max_conn;
	uint64_t c[SC_TOTAL];
	/* the reservation not yet known complete, per bucket: when and by whom (id + 1; 0: none) */
	uint64_t *resv_at;
	uint16_t *resv_by;
	uint16_t *pending_by;    /* durable writes whose client has not said DONE (id + 1) */
	uint64_t grace_ns;
	uint8_t *staging;        /* server replies are written from here (in the mbox MR) */
};

static struct sconn *conn_by_qpn(struct server *s, uint32_t qpn)
{
	for (unsigned i = 0; i < s->max_conn; i++)
		if (s->conn[i].sock >= 0 && s->conn[i].qp && s->conn[i].qp->qpn == qpn)
			return &s->conn[i];
	return NULL;
}

static void post_recv_slot(struct server *s, struct sconn *k, unsigned slot)
{
	struct rnic_recv_wqe r;
	int ret;

	memset(&r, 0, sizeof(r));
	r.wr_id = ((uint64_t)k->id << 32) | slot;
	r.num_sge = 1;
	r.sge[0] = (struct rnic_sge){ (uintptr_t)s->region + k->area + (uint64_t)slot * SLOT_SIZE, SLOT_SIZE, s->mr.lkey };
	if ((ret = rnic_post_recv(k->qp, &r)))
		fatal("posting a receive", ret);
}

/* Reply to connection k: the header and `extra` bytes after REP_DATA, one WRITE_WITH_IMM. */
static void reply(struct server *s, struct sconn *k, const struct rep *r, const void *extra, uint32_t extra_len)
{
	uint8_t *b = s->staging + (uint64_t)k->id * 16384;
	struct rnic_send_wqe w;
	int ret;

	memcpy(b, r, sizeof(*r));
	if (extra_len)
		memcpy(b + REP_DATA, extra, extra_len);
	memset(&w, 0, sizeof(w));
	w.opcode = RNIC_WR_WRITE_IMM;
	w.imm = (uint32_t)r->status;
	w.remote_addr = k->peer.addr;
	w.rkey = k->peer.rkey;
	w.num_sge = 1;
	w.sge[0] = (struct rnic_sge){ (uintptr_t)b, REP_DATA + extra_len, s->mbox_mr.lkey };
	if ((ret = rnic_post(k->qp, &w, TIMEOUT_MS)))
		fprintf(stderr, "erda: reply to client %u: %s\n", k->id, strerror(-ret));
}

static void bytes(struct server *s, unsigned scheme, unsigned kind, uint64_t n)
{
	s->c[SC_BYTES_AT + scheme * K_COUNT + kind] += n;
}

/* Bytes erda_lookup/prepare/install write into the bucket: fp (create), seq + len, the word. */
static uint64_t bucket_bytes(unsigned kind, int word)
{
	return (kind == K_CREATE ? 8 : 0) + 8 + (word ? 8 : 0);
}

static int req_valid(const struct req *q, uint32_t max_len)
{
	if (q->klen < 1 || q->klen > ERDA_MAX_KEY || q->vlen > MAX_VAL)
		return 0;
	if (max_len && sizeof(*q) + q->vlen > max_len)
		return 0;
	return 1;
}

/* Reserve a version of q's key and fill r; install: write the word now (Erda's write), else only
 * the slot's seq and length (the word follows: durable Erda by the client's ATOMIC WRITE, the
 * baselines after the server wrote the object). */
static int write_begin(struct server *s, struct sconn *k, const struct req *q, unsigned scheme, int install,
		       struct rep *r)
{
	int del = q->op == OP_DEL;
	uint32_t b, len = erda_obj_len(q->klen, del ? 0 : q->vlen), h;
	int ret, existed;

	ret = erda_lookup(&s->st, q->key, q->klen, 0, &b);
	existed = ret == 0 && erda_bucket_at(&s->st, b)->word != 0;
	if (ret && del)
		return -ENOENT;
	if (ret && (ret = erda_lookup(&s->st, q->key, q->klen, 1, &b))) {
		s->c[SC_enospc]++;
		return ret;
	}
	if (s->pending_by[b] && s->pending_by[b] != k->id + 1) {
		s->c[SC_busy]++;
		return -EBUSY;
	}
	h = b % s->st.g.heads;
	if ((ret = erda_reserve(&s->st, &s->al, h, len, &r->off, &r->seq))) {
		s->c[SC_enospc]++;
		return ret;
	}
	r->kind = del ? K_DELETE : existed ? K_UPDATE : K_CREATE;
	r->bucket = b;
	r->head = h;
	r->len = len;
	r->addr = (uintptr_t)s->region + erda_addr(&s->st, h, r->off);
	r->word_addr = (uintptr_t)s->region + s->st.l.bucket_off + (uint64_t)b * ERDA_BUCKET_SIZE + 24;
	r->word = install ? erda_install(&s->st, b, r->off, r->seq, len) : erda_prepare(&s->st, b, r->off, r->seq, len);
	s->resv_at[b] = now_ns();
	s->resv_by[b] = (uint16_t)(k->id + 1);
	bytes(s, scheme, r->kind, bucket_bytes(r->kind, install));
	s->c[r->kind == K_CREATE ? SC_creates : r->kind == K_UPDATE ? SC_updates : SC_deletes]++;
	return 0;
}

/* Redo / RAW: a record in the region (written by the NIC) checked and applied by the CPU: the
 * object into the log, persisted, then the word. */
static int apply_record(struct server *s, struct sconn *k, const uint8_t *rec, uint32_t got, unsigned scheme,
			struct rep *r)
{
	const struct req *q = (const struct req *)rec;
	struct erda_bucket *bk;
	uint8_t *obj;
	int ret;

	if (got < sizeof(*q) || !req_valid(q, got) || (q->op != OP_PUT && q->op != OP_DEL)) {
		s->c[SC_refused]++;
		return -EINVAL;
	}
	if (erda_crc32c(0, rec + 4, sizeof(*q) - 4 + q->vlen) != q->crc) {
		s->c[SC_crc_refused]++;
		return -EBADMSG;
	}
	if ((ret = write_begin(s, k, q, scheme, 0, r)))
		return ret;
	obj = (uint8_t *)(uintptr_t)r->addr;
	erda_obj_encode(obj, r->seq, q->key, q->klen, rec + sizeof(*q), q->vlen, q->op == OP_DEL);
	persist_range(obj, r->len);
	bk = erda_bucket_at(&s->st, r->bucket);
	__atomic_store_n(&bk->word, r->word, __ATOMIC_RELEASE);
	persist_range(&bk->word, 8);
	bytes(s, scheme, r->kind, r->len + 8);
	s->resv_by[r->bucket] = 0;
	return 0;
}

/* A reader's report that the version its word names failed: restore the entry, unless a write
 * reserved there is younger than the grace period and its client is still connected. */
static int repair(struct server *s, const struct req *q)
{
	struct erda_recovery rc;
	uint32_t b = q->bucket;
	struct erda_bucket *bk;
	int ret;

	if (b >= s->st.l.nbuckets) {
		s->c[SC_refused]++;
		return -EINVAL;
	}
	s->c[SC_repairs]++;
	bk = erda_bucket_at(&s->st, b);
	if (bk->word != q->word_seen)
		return 0;  /* it changed since: the reader retries */
	if (s->pending_by[b] || (s->resv_by[b] && s->conn[s->resv_by[b] - 1].sock >= 0 &&
				 now_ns() - s->resv_at[b] < s->grace_ns)) {
		s->c[SC_repair_pending]++;
		return 3;
	}
	memset(&rc, 0, sizeof(rc));
	ret = erda_repair_bucket(&s->st, b, &rc);
	s->c[SC_forged_entries] += rc.forged;
	s->c[SC_out_of_range] += rc.out_of_range;
	if (ret > 0)
		s->c[SC_restored]++;
	return ret;
}

static void get_value(struct server *s, struct sconn *k, const struct req *q)
{
	struct rep r;
	uint32_t b;
	struct erda_bucket c;
	const uint8_t *o;
	struct erda_obj_hdr h;

	memset(&r, 0, sizeof(r));
	s->c[SC_gets]++;
	if (erda_lookup(&s->st, q->key, q->klen, 0, &b)) {
		r.status = -ENOENT;
		reply(s, k, &r, NULL, 0);
		return;
	}
	c = *erda_bucket_at(&s->st, b);
	for (unsigned i = 0; i < 2; i++) {
		unsigned slot = i ? !erda_word_new_slot(c.word) : erda_word_new_slot(c.word);

		if (erda_slot_check(&s->st, b, &c, slot) != ERDA_OK)
			continue;
		o = s->region + erda_addr(&s->st, b % s->st.g.heads, erda_word_off(c.word, slot));
		memcpy(&h, o, sizeof(h));
		if (h.klen != q->klen || memcmp(o + ERDA_OBJ_HDR, q->key, q->klen))
			continue;
		r.status = (h.flags & ERDA_F_DELETE) ? -ENOENT : 0;
		r.vlen = h.vlen;
		r.flags = i; /* 1: the old version */
		reply(s, k, &r, o + ERDA_OBJ_HDR + h.klen, r.status ? 0 : h.vlen);
		return;
	}
	r.status = -EIO;
	reply(s, k, &r, NULL, 0);
}

static void handle(struct server *s, const struct rnic_cqe *c)
{
	struct sconn *k = conn_by_qpn(s, c->qpn);
	uint32_t slot = (uint32_t)(c->wr_id & 0xffffffffu);
	struct rep r;
	uint8_t *rec;

	if (!k)
		return;
	memset(&r, 0, sizeof(r));
	s->c[SC_requests]++;
	if (c->status != RNIC_WC_SUCCESS) {
		fprintf(stderr, "erda: client %u: receive completed with %s\n", k->id, rnic_wc_status_str(c->status));
		return;
	}
	rec = s->region + k->area + (uint64_t)slot * SLOT_SIZE;
	if (c->opcode == RNIC_CQE_OP_RECV) {
		/* redo logging: the record is in the redo log slot */
		r.status = apply_record(s, k, rec, c->byte_len, SCH_REDO, &r);
		post_recv_slot(s, k, slot);
		reply(s, k, &r, NULL, 0);
		return;
	}
	post_recv_slot(s, k, slot);
	{
		uint32_t imm = c->imm, op = imm >> 24, mslot = (imm >> 16) & 0xff, id = imm & 0xffff;
		struct req q;

		if (id != k->id) {
			s->c[SC_forged_requests]++;
			r.status = -EPERM;
			reply(s, k, &r, NULL, 0);
			return;
		}
		if (op == 0 || op >= OP_MAX || mslot >= MBOX_SLOTS) {
			s->c[SC_refused]++;
			r.status = -EINVAL;
			reply(s, k, &r, NULL, 0);
			return;
		}
		memcpy(&q, s->mbox + ((uint64_t)k->id * MBOX_SLOTS + mslot) * MBOX_SIZE, sizeof(q));
		switch (op) {
		case OP_PUT:
		case OP_DEL:
			if (!req_valid(&q, 0) || q.op != op) {
				s->c[SC_refused]++;
				r.status = -EINVAL;
			} else {
				r.status = write_begin(s, k, &q, SCH_ERDA, !(q.flags & REQ_F_DURABLE), &r);
				if (r.status == 0 && (q.flags & REQ_F_DURABLE))
					s->pending_by[r.bucket] = (uint16_t)(k->id + 1); /* until its DONE */
			}
			reply(s, k, &r, NULL, 0);
			return;
		case OP_DONE:
			if (q.bucket < s->st.l.nbuckets && s->pending_by[q.bucket] == k->id + 1) {
				s->pending_by[q.bucket] = 0;
				s->resv_by[q.bucket] = 0;
				s->c[SC_durable_done]++;
			} else {
				s->c[SC_refused]++;
			}
			return; /* no reply: the client's put returned when the word was durable */
		case OP_REPAIR:
			r.status = repair(s, &q);
			reply(s, k, &r, NULL, 0);
			return;
		case OP_GET:
			if (!req_valid(&q, 0)) {
				s->c[SC_refused]++;
				r.status = -EINVAL;
				reply(s, k, &r, NULL, 0);
				return;
			}
			get_value(s, k, &q);
			return;
		case OP_APPLY:
			if (q.slot >= RAW_SLOTS) {
				s->c[SC_refused]++;
				r.status = -EINVAL;
			} else {
				r.status = apply_record(s, k, s->region + k->area + (uint64_t)(RECV_SLOTS + q.slot) * SLOT_SIZE,
							SLOT_SIZE, SCH_RAW, &r);
			}
			reply(s, k, &r, NULL, 0);
			return;
		case OP_STATS:
			s->c[SC_TOTAL - 2] = s->region_size;
			s->c[SC_TOTAL - 1] = (uint64_t)s->pmem;
			reply(s, k, &r, s->c, sizeof(s->c));
			return;
		}
	}
}

static void conn_close(struct server *s, struct sconn *k)
{
	close(k->sock);
	k->sock = -1;
	for (uint32_t b = 0; b < s->st.l.nbuckets; b++)
		if (s->pending_by[b] == k->id + 1)
			s->pending_by[b] = 0;
	/* its tracked replies complete or flush before the QP goes */
	rnic_quiet(k->qp, 1000);
	if (rnic_destroy_qp(k->qp))
		fprintf(stderr, "erda: client %u: its QP could not be destroyed\n", k->id);
	k->qp = NULL;
}

static void conn_accept(struct server *s, int lfd)
{
	struct sconn *k = NULL;
	struct rnic_conn mine, peer;
	struct hello *hl;
	int sock = rnic_tcp_accept(lfd), ret;

	if (sock < 0)
		return;
	for (unsigned i = 0; i < s->max_conn; i++)
		if (s->conn[i].sock < 0) {
			k = &s->conn[i];
			break;
		}
	if (!k) {
		fprintf(stderr, "erda: refusing a client: %u connected\n", s->max_conn);
		close(sock);
		return;
	}
	k->qp = rnic_create_qp(s->ctx, s->pd, s->scq, s->rcq, 6, 6);
	if (!k->qp) {
		fprintf(stderr, "erda: creating a client's QP: %s\n", strerror(errno));
		close(sock);
		return;
	}
	mine = (struct rnic_conn){ s->ctx->info.node_id, k->qp->qpn, rnic_random_psn(), s->mr.rkey,
				   (uintptr_t)s->region, s->region_size };
	if ((ret = rnic_exchange(sock, &mine, &peer)) || (ret = rnic_qp_connect(k->qp, &mine, &peer, NULL))) {
		fprintf(stderr, "erda: connecting a client: %s\n", strerror(-ret));
		rnic_destroy_qp(k->qp);
		k->qp = NULL;
		close(sock);
		return;
	}
	k->sock = sock;
	k->peer = peer;
	for (unsigned i = 0; i < RECV_SLOTS; i++)
		post_recv_slot(s, k, i);
	hl = calloc(1, sizeof(*hl));
	if (!hl)
		fatal("hello", ENOMEM);
	hl->id = k->id;
	hl->g = s->st.g;
	hl->bucket_off = s->st.l.bucket_off;
	hl->pool_off = s->st.l.pool_off;
	hl->pmem = (uint32_t)s->pmem;
	hl->base = (uintptr_t)s->region;
	hl->mbox_addr = (uintptr_t)s->mbox + (uint64_t)k->id * MBOX_SLOTS * MBOX_SIZE;
	hl->mbox_rkey = s->mbox_mr.rkey;
	hl->ring_addr = (uintptr_t)s->region + k->area;
	memcpy(hl->chain, s->st.chain, sizeof(hl->chain));
	if (send(sock, hl, sizeof(*hl), MSG_NOSIGNAL) != (ssize_t)sizeof(*hl))
		conn_close(s, k);
	else
		s->c[SC_connections]++;
	free(hl);
}

static volatile sig_atomic_t server_stop;

static void on_term(int sig)
{
	(void)sig;
	server_stop = 1;
}

static void print_counters(const uint64_t *c)
{
	printf("server");
	for (unsigned i = 0; i < SC_COUNT; i++)
		printf(" %s=%llu", sc_names[i], (unsigned long long)c[i]);
	printf("\n");
	for (unsigned sc = 0; sc < SCH_COUNT; sc++) {
		printf("server_bytes scheme=%s", scheme_names[sc]);
		for (unsigned kd = 0; kd < K_COUNT; kd++)
			printf(" %s=%llu", kind_names[kd], (unsigned long long)c[SC_BYTES_AT + sc * K_COUNT + kd]);
		printf("\n");
	}
	printf("server_region bytes=%llu pmem=%llu\n", (unsigned long long)c[SC_TOTAL - 2],
	       (unsigned long long)c[SC_TOTAL - 1]);
}

static uint32_t parse_size(const char *v)
{
	char *e;
	unsigned long long x = strtoull(v, &e, 0);

	if (e == v)
		die("bad size %s", v);
	if (*e == 'K' || *e == 'k')
		x <<= 10, e++;
	else if (*e == 'M' || *e == 'm')
		x <<= 20, e++;
	if (*e || x > 0x80000000ull)
		die("bad size %s", v);
	return (uint32_t)x;
}

static int cmd_server(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "port", 1, 0, 'p' }, { "heads", 1, 0, 'H' }, { "regions-per-head", 1, 0, 'R' },
		{ "region-size", 1, 0, 'r' }, { "seg-size", 1, 0, 's' }, { "buckets", 1, 0, 'b' },
		{ "probe", 1, 0, 'P' }, { "grace-ms", 1, 0, 'g' }, { "format", 0, 0, 'f' },
		{ "max-conn", 1, 0, 'm' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	struct server *s = calloc(1, sizeof(*s));
	struct erda_geom g;
	struct erda_layout l;
	unsigned port = ERDA_PORT, format = 0, grace_ms = 200;
	uint64_t conn_off;
	int o, ret, lfd;
	const char *why = NULL;

	if (!s)
		fatal("server", ENOMEM);
	erda_geom_default(&g);
	s->max_conn = 16;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'p': port = parse_size(optarg); break;
		case 'H': g.heads = parse_size(optarg); break;
		case 'R': g.regions_per_head = parse_size(optarg); break;
		case 'r': g.region_size = parse_size(optarg); break;
		case 's': g.seg_size = parse_size(optarg); break;
		case 'b': g.buckets = parse_size(optarg); break;
		case 'P': g.probe = parse_size(optarg); break;
		case 'g': grace_ms = parse_size(optarg); break;
		case 'f': format = 1; break;
		case 'm': s->max_conn = parse_size(optarg); break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if ((why = erda_geom_check(&g)))
		die("geometry: %s", why);
	if (s->max_conn < 1 || s->max_conn > MAX_CONN || port < 1 || port > 65535)
		die("%s", "--max-conn must be 1..32 and --port 1..65535");
	erda_layout(&g, &l);
	conn_off = (l.size + 4095) & ~4095ull;
	s->region_size = conn_off + (uint64_t)MAX_CONN * CONN_AREA;
	s->grace_ns = (uint64_t)grace_ms * 1000000ull;
	s->region = region_map(s->region_size, &s->pmem);
	if (s->pmem && !format && (ret = erda_open(&s->st, s->region, conn_off, persist_range, &why))) {
		if (ret != -ENODATA)
			die("the store in persistent memory does not open (%s): start with --format", why);
		printf("no store in persistent memory: formatting\n");
		format = 1;
	}
	if (s->pmem && !format) {
		struct erda_recovery rc;
		uint64_t t0;

		t0 = now_ns();
		erda_recover(&s->st, &rc);
		printf("recovery buckets=%llu entries=%llu reverted=%llu emptied=%llu forged=%llu out_of_range=%llu ns=%llu\n",
		       (unsigned long long)rc.buckets_scanned, (unsigned long long)rc.entries,
		       (unsigned long long)rc.reverted, (unsigned long long)rc.emptied, (unsigned long long)rc.forged,
		       (unsigned long long)rc.out_of_range, (unsigned long long)(now_ns() - t0));
	} else {
		struct erda_recovery rc;

		if ((ret = erda_format(&s->st, s->region, conn_off, &g, persist_range)))
			fatal("formatting the store", ret);
		erda_recover(&s->st, &rc);
	}
	erda_alloc_init(&s->st, &s->al);
	s->resv_at = calloc(s->st.l.nbuckets, sizeof(uint64_t));
	s->resv_by = calloc(s->st.l.nbuckets, sizeof(uint16_t));
	s->pending_by = calloc(s->st.l.nbuckets, sizeof(uint16_t));
	s->mbox = mmap(NULL, MAX_CONN * (MBOX_SLOTS * MBOX_SIZE + 16384), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (!s->resv_at || !s->resv_by || !s->pending_by || s->mbox == MAP_FAILED)
		fatal("server state", ENOMEM);
	s->staging = s->mbox + MAX_CONN * MBOX_SLOTS * MBOX_SIZE;
	s->ctx = rnic_open(NULL);
	if (!s->ctx)
		fatal("opening " RNIC_DEV_PATH " (is the node started with the RNIC?)", errno);
	if ((ret = rnic_alloc_pd(s->ctx, &s->pd)) ||
	    (ret = rnic_reg_mr(s->ctx, s->pd, s->region, s->region_size, RNIC_ACCESS_ALL, &s->mr)) ||
	    (ret = rnic_reg_mr(s->ctx, s->pd, s->mbox, MAX_CONN * (MBOX_SLOTS * MBOX_SIZE + 16384), RNIC_ACCESS_ALL,
			       &s->mbox_mr)))
		fatal("registering the store", ret);
	s->scq = rnic_create_cq(s->ctx, 10);
	s->rcq = rnic_create_cq(s->ctx, 10);
	if (!s->scq || !s->rcq)
		fatal("creating CQs", errno);
	for (unsigned i = 0; i < MAX_CONN; i++) {
		s->conn[i].sock = -1;
		s->conn[i].id = i;
		s->conn[i].area = conn_off + (uint64_t)i * CONN_AREA;
	}
	lfd = rnic_tcp_listen((uint16_t)port);
	if (lfd < 0)
		fatal("listening", lfd);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	signal(SIGPIPE, SIG_IGN);
	printf("server=ready port=%u heads=%u regions_per_head=%u region_size=%u seg_size=%u buckets=%u probe=%u "
	       "pmem=%d region_bytes=%llu\n", port, g.heads, g.regions_per_head, g.region_size, g.seg_size, g.buckets,
	       g.probe, s->pmem, (unsigned long long)s->region_size);
	fflush(stdout);
	while (!server_stop) {
		struct rnic_cqe c[16];
		struct pollfd pf[MAX_CONN + 1];
		unsigned np = 0, idx[MAX_CONN + 1];
		int n = rnic_wait_cq(s->rcq, c, 16, 20);

		for (int i = 0; i < n; i++)
			handle(s, &c[i]);
		rnic_reap(s->scq, 0);
		if (n > 0)
			continue;
		pf[np] = (struct pollfd){ lfd, POLLIN, 0 };
		idx[np++] = MAX_CONN;
		for (unsigned i = 0; i < s->max_conn; i++)
			if (s->conn[i].sock >= 0) {
				pf[np] = (struct pollfd){ s->conn[i].sock, POLLIN, 0 };
				idx[np++] = i;
			}
		if (poll(pf, np, 0) <= 0)
			continue;
		for (unsigned i = 0; i < np; i++) {
			char x;

			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (idx[i] == MAX_CONN)
				conn_accept(s, lfd);
			else if (recv(pf[i].fd, &x, 1, MSG_DONTWAIT) <= 0)
				conn_close(s, &s->conn[idx[i]]);
		}
	}
	print_counters(s->c);
	return 0;
}

/* ---- client ---- */

#define CB_REPLY   0u        /* reply buffer (the server WRITEs here) */
#define CB_STAGE   16384u    /* what this client WRITEs or SENDs from */
#define CB_READ    32768u    /* READ landing area */
#define CB_SIZE    65536u

struct client {
	struct rnic_ctx *ctx;
	uint32_t pd;
	uint8_t *buf;
	struct rnic_mr mr;
	struct rnic_cq *scq, *rcq;
	struct rnic_qp *qp;
	int sock;
	struct rnic_conn srv;
	struct hello hl;
	struct erda_store st;    /* geometry and chain only: erda_addr, erda_off_check */
	unsigned mslot, raw_slot;
	int as_id;              /* >= 0: the client id this client claims in its immediates (a forger) */
	/* what this client measured */
	uint64_t rt;                         /* round trips */
	uint64_t bytes[SCH_COUNT][K_COUNT];  /* written by its RDMA into the server's region */
	uint64_t refused, fallbacks, retries, repairs_sent, busy;
};

static void client_connect(struct client *c, const char *host, unsigned port)
{
	struct rnic_conn mine;
	uint8_t *p;
	size_t got = 0;
	int ret;

	memset(c, 0, sizeof(*c));
	c->as_id = -1;
	c->ctx = rnic_open(NULL);
	if (!c->ctx)
		fatal("opening " RNIC_DEV_PATH " (is the node started with the RNIC?)", errno);
	c->buf = mmap(NULL, CB_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (c->buf == MAP_FAILED)
		fatal("client buffer", errno);
	if ((ret = rnic_alloc_pd(c->ctx, &c->pd)) ||
	    (ret = rnic_reg_mr(c->ctx, c->pd, c->buf, CB_SIZE, RNIC_ACCESS_ALL, &c->mr)))
		fatal("registering the client buffer", ret);
	c->scq = rnic_create_cq(c->ctx, 8);
	c->rcq = rnic_create_cq(c->ctx, 8);
	c->qp = c->scq && c->rcq ? rnic_create_qp(c->ctx, c->pd, c->scq, c->rcq, 6, 6) : NULL;
	if (!c->qp)
		fatal("creating the QP", errno);
	c->sock = rnic_tcp_connect(host, (uint16_t)port);
	if (c->sock < 0)
		fatal("connecting to the server", c->sock);
	mine = (struct rnic_conn){ c->ctx->info.node_id, c->qp->qpn, rnic_random_psn(), c->mr.rkey,
				   (uintptr_t)c->buf + CB_REPLY, CB_STAGE };
	if ((ret = rnic_exchange(c->sock, &mine, &c->srv)) || (ret = rnic_qp_connect(c->qp, &mine, &c->srv, NULL)))
		fatal("connecting the QP", ret);
	for (p = (uint8_t *)&c->hl; got < sizeof(c->hl);) {
		ssize_t n = recv(c->sock, p + got, sizeof(c->hl) - got, 0);

		if (n <= 0)
			fatal("receiving the store's geometry", n < 0 ? errno : ECONNRESET);
		got += (size_t)n;
	}
	if (erda_geom_check(&c->hl.g) || c->hl.base != c->srv.addr)
		fatal("the server's geometry", EPROTO);
	c->st.g = c->hl.g;
	erda_layout(&c->st.g, &c->st.l);
	memcpy(c->st.chain, c->hl.chain, sizeof(c->st.chain));
	for (unsigned i = 0; i < 4; i++) {
		struct rnic_recv_wqe r;

		memset(&r, 0, sizeof(r));
		r.wr_id = i;
		if ((ret = rnic_post_recv(c->qp, &r)))
			fatal("posting a receive", ret);
	}
}

static void client_close(struct client *c)
{
	rnic_quiet(c->qp, 1000);
	close(c->sock);
	rnic_destroy_qp(c->qp);
	rnic_destroy_cq(c->scq);
	rnic_destroy_cq(c->rcq);
	rnic_dereg_mr(c->ctx, &c->mr);
	rnic_close(c->ctx);
	munmap(c->buf, CB_SIZE);
}

/* One one-sided verb on the server's region (or mailbox), waited for: a round trip. */
static int verb(struct client *c, uint8_t op, uint64_t loff, uint32_t len, uint64_t raddr, uint32_t rkey,
		uint64_t value, uint32_t imm)
{
	struct rnic_send_wqe w;
	int ret;

	memset(&w, 0, sizeof(w));
	w.opcode = op;
	w.remote_addr = raddr;
	w.rkey = rkey;
	w.imm = imm;
	if (op == RNIC_WR_ATOMIC_WRITE) {
		w.swap_add = value;
	} else if (op == RNIC_WR_FLUSH) {
		w.flush_type = ROCE_FETH_PLT_PERSIST | (ROCE_FETH_SEL_RANGE << ROCE_FETH_SEL_SHIFT);
		w.flush_len = len;
	} else if (len) {
		w.num_sge = 1;
		w.sge[0] = (struct rnic_sge){ (uintptr_t)c->buf + loff, len, c->mr.lkey };
	}
	if ((ret = rnic_post(c->qp, &w, TIMEOUT_MS)) || (ret = rnic_quiet(c->qp, TIMEOUT_MS))) {
		fprintf(stderr, "erda: RDMA op %u: %s (%s)\n", op, strerror(-ret),
			ret == -EIO ? rnic_wc_status_str(c->qp->first_error.status) : "");
		return ret;
	}
	c->rt++;
	return 0;
}

/* A request (WRITE_WITH_IMM of q into a mailbox, or a SEND of a record) and its reply. */
static int request(struct client *c, uint32_t op, const struct req *q, uint32_t qlen, int send_record, struct rep *r)
{
	struct rnic_recv_wqe rw;
	struct rnic_cqe cqe;
	int n, ret;

	if (!send_record)
		memcpy(c->buf + CB_STAGE, q, qlen);
	if (send_record)
		ret = verb(c, RNIC_WR_SEND, CB_STAGE, qlen, 0, 0, 0, 0);
	else
		ret = verb(c, RNIC_WR_WRITE_IMM, CB_STAGE, qlen, c->hl.mbox_addr + (uint64_t)c->mslot * MBOX_SIZE,
			   c->hl.mbox_rkey, 0, IMM(op, c->mslot, c->as_id >= 0 ? (uint32_t)c->as_id : c->hl.id));
	c->mslot ^= 1;
	if (ret)
		return ret;
	if (op == OP_DONE)
		return 0;
	c->rt--; /* the request and its reply are one round trip */
	n = rnic_wait_cq(c->rcq, &cqe, 1, TIMEOUT_MS);
	if (n != 1)
		return n < 0 ? n : -EIO;
	if (cqe.status != RNIC_WC_SUCCESS)
		return -EIO;
	c->rt++;
	memset(&rw, 0, sizeof(rw));
	if ((ret = rnic_post_recv(c->qp, &rw)))
		return ret;
	memcpy(r, c->buf + CB_REPLY, sizeof(*r));
	return 0;
}

static void req_init(struct req *q, uint32_t op, unsigned scheme, const char *key, uint32_t klen, uint32_t vlen,
		     int durable)
{
	memset(q, 0, sizeof(*q));
	q->op = (uint16_t)op;
	q->scheme = (uint16_t)scheme;
	q->klen = (uint16_t)klen;
	q->vlen = vlen;
	q->flags = durable ? REQ_F_DURABLE : 0;
	memcpy(q->key, key, klen);
}

struct wopts {
	unsigned scheme;
	int durable;
	int skip_object;   /* a client that crashes between the reservation and its WRITE */
};

/* put (del: a tombstone). Returns 0 or a negative errno; kind of write in *kind. */
static int client_write(struct client *c, const struct wopts *wo, const char *key, uint32_t klen, const void *val,
			uint32_t vlen, int del, unsigned *kind)
{
	uint32_t op = del ? OP_DEL : OP_PUT;
	struct req q;
	struct rep r;
	int ret;

	if (klen < 1 || klen > ERDA_MAX_KEY || vlen > MAX_VAL)
		return -EINVAL;
	if (del)
		vlen = 0;
	req_init(&q, op, wo->scheme, key, klen, vlen, wo->durable);
	if (wo->scheme != SCH_ERDA) {
		uint8_t *rec = c->buf + CB_STAGE;
		uint32_t len = sizeof(q) + vlen;

		memcpy(rec, &q, sizeof(q));
		memcpy(rec + sizeof(q), val, vlen);
		((struct req *)rec)->crc = erda_crc32c(0, rec + 4, len - 4);
		if (wo->scheme == SCH_REDO) {
			if ((ret = request(c, op, NULL, len, 1, &r)))
				return ret;
		} else {
			uint64_t slot = c->hl.ring_addr + (uint64_t)(RECV_SLOTS + c->raw_slot) * SLOT_SIZE;

			if ((ret = verb(c, RNIC_WR_WRITE, CB_STAGE, len, slot, c->srv.rkey, 0, 0)) ||
			    (ret = verb(c, RNIC_WR_READ, CB_READ, 8, slot, c->srv.rkey, 0, 0)))
				return ret;
			req_init(&q, OP_APPLY, SCH_RAW, key, klen, 0, 0);
			q.slot = c->raw_slot;
			c->raw_slot = (c->raw_slot + 1) % RAW_SLOTS;
			if ((ret = request(c, OP_APPLY, &q, sizeof(q), 0, &r)))
				return ret;
		}
		if (r.status == 0) {
			c->bytes[wo->scheme][r.kind] += len;
			*kind = r.kind;
		}
		return r.status;
	}
	for (unsigned tries = 0;; tries++) {
		if ((ret = request(c, op, &q, sizeof(q), 0, &r)))
			return ret;
		if (r.status != -EBUSY || tries >= 1000)
			break;
		c->busy++;
		usleep(200);
	}
	if (r.status)
		return r.status;
	*kind = r.kind;
	if (r.len != erda_obj_len(klen, vlen) || r.addr < c->hl.base || r.addr + r.len > c->hl.base + c->srv.length)
		return -EPROTO;
	erda_obj_encode(c->buf + CB_STAGE, r.seq, key, klen, val, vlen, del);
	if (wo->skip_object)
		return 0;
	if ((ret = verb(c, RNIC_WR_WRITE, CB_STAGE, r.len, r.addr, c->srv.rkey, 0, 0)))
		return ret;
	c->bytes[SCH_ERDA][r.kind] += r.len;
	if (wo->durable) {
		struct req d;

		if ((ret = verb(c, RNIC_WR_FLUSH, 0, r.len, r.addr, c->srv.rkey, 0, 0)) ||
		    (ret = verb(c, RNIC_WR_ATOMIC_WRITE, 0, 0, r.word_addr, c->srv.rkey, r.word, 0)) ||
		    (ret = verb(c, RNIC_WR_FLUSH, 0, 8, r.word_addr, c->srv.rkey, 0, 0)))
			return ret;
		c->bytes[SCH_ERDA][r.kind] += 8;
		req_init(&d, OP_DONE, SCH_ERDA, key, klen, 0, 1);
		d.bucket = r.bucket;
		if ((ret = request(c, OP_DONE, &d, sizeof(d), 0, &r)))
			return ret;
	}
	return 0;
}

/* Check the version in `slot` of a bucket copy: READ the object, verify. *out: value bytes. */
static int read_version(struct client *c, uint32_t b, const struct erda_bucket *bk, unsigned slot, const char *key,
			uint32_t klen, const uint8_t **val, uint32_t *vlen, int *del)
{
	uint32_t off, len = bk->len[slot], h = b % c->st.g.heads;
	struct erda_obj_hdr oh;
	int ret;

	if (bk->word & ERDA_WORD_RSVD)
		return ERDA_E_FORGED;
	off = erda_word_off(bk->word, slot);
	if ((ret = erda_off_check(&c->st.g, off, len)))
		return ret;
	if (verb(c, RNIC_WR_READ, CB_READ, len, c->hl.base + c->hl.pool_off - c->st.l.pool_off + erda_addr(&c->st, h, off),
		 c->srv.rkey, 0, 0))
		return -EIO;
	if ((ret = erda_obj_check(c->buf + CB_READ, len, bk->seq[slot], key, klen, 0)))
		return ret;
	memcpy(&oh, c->buf + CB_READ, sizeof(oh));
	*val = c->buf + CB_READ + ERDA_OBJ_HDR + klen;
	*vlen = oh.vlen;
	*del = oh.flags & ERDA_F_DELETE;
	return 0;
}

struct rinfo {
	int fallback;      /* the value is the old version */
	int repaired;      /* the server's answer to the report (0: none sent) */
	int refused;       /* the new version was refused: ERDA_E_* */
};

/* get: 0 with the value in c->buf (*val, *vlen), -ENOENT, or a negative errno. */
static int client_read(struct client *c, unsigned scheme, const char *key, uint32_t klen, const uint8_t **val,
		       uint32_t *vlen, struct rinfo *ri)
{
	uint64_t fp = erda_fp(key, klen);
	uint32_t home = (uint32_t)(fp % c->st.g.buckets), win = c->st.g.probe * ERDA_BUCKET_SIZE;
	uint64_t baddr = c->hl.base + c->hl.bucket_off + (uint64_t)home * ERDA_BUCKET_SIZE;
	struct rep r;
	int ret, del = 0;

	memset(ri, 0, sizeof(*ri));
	if (klen < 1 || klen > ERDA_MAX_KEY)
		return -EINVAL;
	if (scheme != SCH_ERDA) {
		struct req q;

		req_init(&q, OP_GET, scheme, key, klen, 0, 0);
		if ((ret = request(c, OP_GET, &q, sizeof(q), 0, &r)))
			return ret;
		if (r.status)
			return r.status;
		if (r.vlen > MAX_VAL)
			return -EPROTO;
		*val = c->buf + CB_REPLY + REP_DATA;
		*vlen = r.vlen;
		ri->fallback = (int)r.flags;
		return 0;
	}
	for (unsigned attempt = 0; attempt < 8; attempt++) {
		struct erda_bucket bk;
		uint32_t b = UINT32_MAX;
		unsigned nw;
		int cn, co;

		if ((ret = verb(c, RNIC_WR_READ, CB_READ + 16384, win, baddr, c->srv.rkey, 0, 0)))
			return ret;
		for (uint32_t i = 0; i < c->st.g.probe; i++) {
			memcpy(&bk, c->buf + CB_READ + 16384 + i * ERDA_BUCKET_SIZE, sizeof(bk));
			if (bk.fp == fp) {
				b = home + i;
				break;
			}
		}
		if (b == UINT32_MAX || bk.word == 0)
			return -ENOENT;
		nw = erda_word_new_slot(bk.word);
		cn = read_version(c, b, &bk, nw, key, klen, val, vlen, &del);
		if (cn == 0)
			return del ? -ENOENT : 0;
		ri->refused = cn;
		if (cn == ERDA_E_RANGE || cn == ERDA_E_FORGED)
			c->refused++;
		/* the word may have changed since the bucket was read: read it again */
		if ((ret = verb(c, RNIC_WR_READ, CB_READ + 16384, 8, baddr + (uint64_t)(b - home) * ERDA_BUCKET_SIZE + 24,
				c->srv.rkey, 0, 0)))
			return ret;
		if (memcmp(c->buf + CB_READ + 16384, &bk.word, 8)) {
			c->retries++;
			continue;
		}
		co = cn == ERDA_E_FORGED ? cn : read_version(c, b, &bk, !nw, key, klen, val, vlen, &del);
		/* tell the server (it checks the version itself, and restores the entry) */
		{
			struct req q;
			struct rep rr;
			uint8_t keep[MAX_VAL];
			uint32_t kv = co == 0 ? *vlen : 0;

			if (co == 0)
				memcpy(keep, *val, kv);
			req_init(&q, OP_REPAIR, SCH_ERDA, key, klen, 0, 0);
			q.bucket = b;
			q.word_seen = bk.word;
			c->repairs_sent++;
			if ((ret = request(c, OP_REPAIR, &q, sizeof(q), 0, &rr)))
				return ret;
			ri->repaired = rr.status;
			if (co == 0) {
				memcpy(c->buf + CB_READ, keep, kv);
				*val = c->buf + CB_READ;
			}
		}
		if (co == 0) {
			c->fallbacks++;
			ri->fallback = 1;
			return del ? -ENOENT : 0;
		}
		if (ri->repaired == 0 || ri->repaired == 1)
			continue; /* it changed, or the server restored it: look again */
		return -EIO;
	}
	return -EAGAIN;
}

static int client_forge(struct client *c, const char *key, uint32_t klen, int reserved, uint32_t off)
{
	uint64_t fp = erda_fp(key, klen);
	uint32_t home = (uint32_t)(fp % c->st.g.buckets);
	uint64_t baddr = c->hl.base + c->hl.bucket_off + (uint64_t)home * ERDA_BUCKET_SIZE;
	struct erda_bucket bk;
	uint64_t w;
	int ret;

	if ((ret = verb(c, RNIC_WR_READ, CB_READ, c->st.g.probe * ERDA_BUCKET_SIZE, baddr, c->srv.rkey, 0, 0)))
		return ret;
	for (uint32_t i = 0; i < c->st.g.probe; i++) {
		memcpy(&bk, c->buf + CB_READ + i * ERDA_BUCKET_SIZE, sizeof(bk));
		if (bk.fp != fp)
			continue;
		if (reserved) {
			w = bk.word | ERDA_WORD_RSVD;
		} else {
			unsigned nw = erda_word_new_slot(bk.word);
			uint32_t o[2] = { erda_word_off(bk.word, 0), erda_word_off(bk.word, 1) };

			o[nw] = off;
			w = erda_word_make(nw, o[0], o[1]);
		}
		memcpy(c->buf + CB_STAGE, &w, 8);
		printf("forged bucket=%u word=0x%016llx was=0x%016llx\n", home + i, (unsigned long long)w,
		       (unsigned long long)bk.word);
		return verb(c, RNIC_WR_WRITE, CB_STAGE, 8, baddr + i * ERDA_BUCKET_SIZE + 24, c->srv.rkey, 0, 0);
	}
	return -ENOENT;
}

static int client_stats(struct client *c, uint64_t *out)
{
	struct req q;
	struct rep r;
	int ret;

	req_init(&q, OP_STATS, SCH_ERDA, "s", 1, 0, 0);
	if ((ret = request(c, OP_STATS, &q, sizeof(q), 0, &r)))
		return ret;
	memcpy(out, c->buf + CB_REPLY + REP_DATA, SC_TOTAL * sizeof(uint64_t));
	return r.status;
}

static void print_client_bytes(const struct client *c)
{
	for (unsigned sc = 0; sc < SCH_COUNT; sc++) {
		uint64_t any = 0;

		for (unsigned k = 0; k < K_COUNT; k++)
			any |= c->bytes[sc][k];
		if (!any)
			continue;
		printf("client_bytes scheme=%s", scheme_names[sc]);
		for (unsigned k = 0; k < K_COUNT; k++)
			printf(" %s=%llu", kind_names[k], (unsigned long long)c->bytes[sc][k]);
		printf("\n");
	}
}

/* ---- the YCSB driver ---- */

struct yargs {
	const char *host;
	unsigned port, scheme, tid, threads, value_size, verify, load;
	int durable;
	uint64_t keys, ops, seed;
	const struct ycsb_workload *w;
	/* results */
	uint64_t *lat[2];          /* ns per op, reads and updates */
	uint64_t nlat[2];
	uint64_t bad, missing, errors, rt[2];
	uint64_t bytes[SCH_COUNT][K_COUNT];
	uint64_t fallbacks, refused, busy;
	uint64_t wall_ns;
	unsigned writer;           /* this thread's writer id */
	pthread_barrier_t *loaded; /* every thread loaded its keys before any runs */
};

static void ykey(char *k, uint64_t i)
{
	snprintf(k, 32, "user%llu", (unsigned long long)i);
}

/* A value for key i by writer w, its n-th write: "key=<i> w=<w> n=<n> " then a pattern of them. */
static uint32_t yvalue(uint8_t *v, uint32_t size, uint64_t i, unsigned w, uint64_t n)
{
	char head[64];
	int hl = snprintf(head, sizeof(head), "key=%llu w=%u n=%llu ", (unsigned long long)i, w, (unsigned long long)n);
	uint64_t x = i * 0x9e3779b97f4a7c15ull ^ ((uint64_t)w << 40) ^ n;

	for (uint32_t j = 0; j < size; j++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		v[j] = (uint8_t)('a' + (x >> 59));
	}
	memcpy(v, head, (uint32_t)hl < size ? (uint32_t)hl : size);
	return size;
}

/* A value read for key i: written for it (by any writer, any n)? */
static int yvalue_ok(const uint8_t *v, uint32_t len, uint32_t size, uint64_t i)
{
	unsigned long long k, n;
	unsigned w;
	uint8_t want[MAX_VAL];
	char head[64];

	if (len != size)
		return 0;
	memcpy(head, v, len < 63 ? len : 63);
	head[len < 63 ? len : 63] = 0;
	if (sscanf(head, "key=%llu w=%u n=%llu ", &k, &w, &n) != 3)
		return size < 24; /* too small to carry the header: only the length is checked */
	if (k != i)
		return 0;
	yvalue(want, size, i, w, n);
	return memcmp(want, v, len) == 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void *ycsb_thread(void *arg)
{
	struct yargs *y = arg;
	struct client *c = calloc(1, sizeof(*c));
	struct wopts wo = { y->scheme, y->durable, 0 };
	struct ycsb_zipf z;
	uint8_t *v = malloc(MAX_VAL);
	char key[32];
	uint64_t n = 0, t0;
	unsigned kind;

	if (!c || !v)
		fatal("ycsb", ENOMEM);
	client_connect(c, y->host, y->port);
	y->writer = c->hl.id * 1000 + y->tid;
	if (y->load) {
		for (uint64_t i = y->tid; i < y->keys; i += y->threads) {
			ykey(key, i);
			yvalue(v, y->value_size, i, y->writer, n++);
			if (client_write(c, &wo, key, (uint32_t)strlen(key), v, y->value_size, 0, &kind))
				y->errors++;
		}
	}
	pthread_barrier_wait(y->loaded);
	ycsb_zipf_init(&z, y->keys, YCSB_ZIPF_CONSTANT, 1, y->seed + y->tid * 7919);
	t0 = now_ns();
	for (uint64_t op = 0; op < y->ops; op++) {
		enum ycsb_op o = ycsb_next_op(&z, y->w);
		uint64_t i = ycsb_zipf_next(&z), s = now_ns(), rt0 = c->rt;
		int ret;

		ykey(key, i);
		if (o == YCSB_READ) {
			const uint8_t *val;
			uint32_t vlen;
			struct rinfo ri;

			ret = client_read(c, y->scheme, key, (uint32_t)strlen(key), &val, &vlen, &ri);
			if (ret == -ENOENT)
				y->missing++;
			else if (ret)
				y->errors++;
			else if (y->verify && !yvalue_ok(val, vlen, y->value_size, i))
				y->bad++;
		} else {
			yvalue(v, y->value_size, i, y->writer, n++);
			ret = client_write(c, &wo, key, (uint32_t)strlen(key), v, y->value_size, 0, &kind);
			if (ret)
				y->errors++;
		}
		y->lat[o][y->nlat[o]++] = now_ns() - s;
		y->rt[o] += c->rt - rt0;
	}
	y->wall_ns = now_ns() - t0;
	memcpy(y->bytes, c->bytes, sizeof(y->bytes));
	y->fallbacks = c->fallbacks;
	y->refused = c->refused;
	y->busy = c->busy;
	client_close(c);
	free(c);
	free(v);
	return NULL;
}

static int cmd_ycsb(const char *host, unsigned port, struct yargs *base)
{
	struct yargs *y = calloc(base->threads, sizeof(*y));
	pthread_t *th = calloc(base->threads, sizeof(*th));
	uint64_t all[2] = { 0, 0 }, bad = 0, missing = 0, errors = 0, rt[2] = { 0, 0 }, wall = 0, fb = 0, refused = 0;
	uint64_t bytes[SCH_COUNT][K_COUNT], counters[SC_TOTAL];
	uint64_t *lat[2];

	(void)host;
	(void)port;
	if (!y || !th)
		fatal("ycsb", ENOMEM);
	pthread_barrier_t loaded;

	memset(bytes, 0, sizeof(bytes));
	pthread_barrier_init(&loaded, NULL, base->threads);
	for (unsigned t = 0; t < base->threads; t++) {
		y[t] = *base;
		y[t].loaded = &loaded;
		y[t].tid = t;
		for (int o = 0; o < 2; o++)
			y[t].lat[o] = calloc(base->ops ? base->ops : 1, sizeof(uint64_t));
		if (pthread_create(&th[t], NULL, ycsb_thread, &y[t]))
			fatal("starting a thread", errno);
	}
	for (unsigned t = 0; t < base->threads; t++) {
		pthread_join(th[t], NULL);
		for (int o = 0; o < 2; o++) {
			all[o] += y[t].nlat[o];
			rt[o] += y[t].rt[o];
		}
		bad += y[t].bad;
		missing += y[t].missing;
		errors += y[t].errors;
		fb += y[t].fallbacks;
		refused += y[t].refused;
		if (y[t].wall_ns > wall)
			wall = y[t].wall_ns;
		for (unsigned s = 0; s < SCH_COUNT; s++)
			for (unsigned k = 0; k < K_COUNT; k++)
				bytes[s][k] += y[t].bytes[s][k];
	}
	printf("ycsb=%c scheme=%s durable=%d threads=%u keys=%llu ops=%llu value_size=%u reads=%llu updates=%llu "
	       "kops=%.3f bad_reads=%llu missing=%llu errors=%llu fallbacks=%llu refused=%llu\n",
	       base->w->name, scheme_names[base->scheme], base->durable, base->threads,
	       (unsigned long long)base->keys, (unsigned long long)base->ops, base->value_size,
	       (unsigned long long)all[0], (unsigned long long)all[1],
	       wall ? (double)(all[0] + all[1]) / ((double)wall / 1e9) / 1000.0 / 1.0 : 0.0,
	       (unsigned long long)bad, (unsigned long long)missing, (unsigned long long)errors,
	       (unsigned long long)fb, (unsigned long long)refused);
	for (int o = 0; o < 2; o++) {
		uint64_t m = 0;

		if (!all[o])
			continue;
		lat[o] = calloc(all[o], sizeof(uint64_t));
		for (unsigned t = 0; t < base->threads; t++) {
			memcpy(lat[o] + m, y[t].lat[o], y[t].nlat[o] * sizeof(uint64_t));
			m += y[t].nlat[o];
		}
		qsort(lat[o], m, sizeof(uint64_t), cmp_u64);
		printf("latency op=%s n=%llu p50_us=%.1f p99_us=%.1f round_trips_per_op=%.2f\n", o ? "update" : "read",
		       (unsigned long long)m, (double)lat[o][m / 2] / 1000.0, (double)lat[o][(m * 99) / 100] / 1000.0,
		       (double)rt[o] / (double)m);
		free(lat[o]);
	}
	{
		struct client c;

		memset(&c, 0, sizeof(c));
		memcpy(c.bytes, bytes, sizeof(bytes));
		print_client_bytes(&c);
		client_connect(&c, base->host, base->port);
		if (client_stats(&c, counters) == 0)
			print_counters(counters);
		client_close(&c);
	}
	return bad || errors ? 1 : 0;
}

/* ---- main ---- */

static unsigned parse_scheme(const char *s)
{
	for (unsigned i = 0; i < SCH_COUNT; i++)
		if (!strcmp(s, scheme_names[i]))
			return i;
	die("unknown scheme %s (erda, redo, raw)", s);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "server", 1, 0, 'S' }, { "port", 1, 0, 'p' }, { "scheme", 1, 0, 'c' }, { "durable", 0, 0, 'd' },
		{ "skip-object-write", 0, 0, 'k' }, { "reserved-bit", 0, 0, 'r' }, { "offset", 1, 0, 'o' },
		{ "workload", 1, 0, 'w' }, { "keys", 1, 0, 'K' }, { "ops", 1, 0, 'n' }, { "value-size", 1, 0, 'v' },
		{ "threads", 1, 0, 't' }, { "seed", 1, 0, 's' }, { "load", 0, 0, 'l' }, { "verify", 0, 0, 'V' },
		{ "as-client", 1, 0, 'A' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	const char *cmd, *host = NULL;
	int as_id = -1;
	struct wopts wo = { SCH_ERDA, 0, 0 };
	struct yargs ya;
	int o, reserved = 0, have_off = 0;
	uint32_t off = 0;
	unsigned port = ERDA_PORT;
	struct client c;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "server"))
		return cmd_server(argc - 1, argv + 1);
	memset(&ya, 0, sizeof(ya));
	ya.keys = 1000;
	ya.ops = 1000;
	ya.value_size = 64;
	ya.threads = 1;
	ya.seed = 1;
	optind = 2;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'S': host = optarg; break;
		case 'p': port = parse_size(optarg); break;
		case 'c': wo.scheme = parse_scheme(optarg); break;
		case 'd': wo.durable = 1; break;
		case 'k': wo.skip_object = 1; break;
		case 'r': reserved = 1; break;
		case 'o': off = parse_size(optarg); have_off = 1; break;
		case 'w':
			if (!(ya.w = ycsb_workload(optarg)))
				die("unknown workload %s (A, B, C, U)", optarg);
			break;
		case 'K': ya.keys = parse_size(optarg); break;
		case 'n': ya.ops = parse_size(optarg); break;
		case 'v': ya.value_size = parse_size(optarg); break;
		case 't': ya.threads = parse_size(optarg); break;
		case 's': ya.seed = parse_size(optarg); break;
		case 'l': ya.load = 1; break;
		case 'V': ya.verify = 1; break;
		case 'A': as_id = (int)(parse_size(optarg) & 0xffff); break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (!host)
		die("%s needs --server HOST (a node running erda server)", cmd);
	if (port < 1 || port > 65535)
		die("%s", "--port must be 1..65535");
	if (!strcmp(cmd, "ycsb")) {
		if (!ya.w)
			die("%s", "ycsb needs --workload A|B|C|U");
		if (ya.keys < 1 || ya.value_size < 1 || ya.value_size > MAX_VAL || ya.threads < 1 || ya.threads > 16)
			die("%s", "--keys >= 1, --value-size 1..4096, --threads 1..16");
		if (wo.durable && wo.scheme != SCH_ERDA)
			die("%s", "--durable is Erda's variant (the baselines apply on the server)");
		ya.host = host;
		ya.port = port;
		ya.scheme = wo.scheme;
		ya.durable = wo.durable;
		return cmd_ycsb(host, port, &ya);
	}
	if (!strcmp(cmd, "stats")) {
		uint64_t cs[SC_TOTAL];
		int ret;

		client_connect(&c, host, port);
		if ((ret = client_stats(&c, cs)))
			fatal("stats", ret);
		print_counters(cs);
		client_close(&c);
		return 0;
	}
	if (optind >= argc)
		die("%s needs a KEY", cmd);
	{
		const char *key = argv[optind];
		uint32_t klen = (uint32_t)strlen(key);
		int ret = 0;
		unsigned kind = 0;

		if (klen < 1 || klen > ERDA_MAX_KEY)
			die("a key is 1..64 bytes: %s", key);
		if (!strcmp(cmd, "put") || !strcmp(cmd, "del")) {
			int del = cmd[0] == 'd';
			const char *val = del ? "" : optind + 1 < argc ? argv[optind + 1] : NULL;

			if (!val)
				die("%s", "put needs KEY VALUE");
			if (strlen(val) > MAX_VAL)
				die("%s", "a value is at most 4096 bytes");
			if (wo.durable && wo.scheme != SCH_ERDA)
				die("%s", "--durable is Erda's variant");
			client_connect(&c, host, port);
			c.as_id = as_id;
			ret = client_write(&c, &wo, key, klen, val, (uint32_t)strlen(val), del, &kind);
			printf("%s key=%s scheme=%s status=%d kind=%s round_trips=%llu skipped_object=%d\n", cmd, key,
			       scheme_names[wo.scheme], ret, ret ? "-" : kind_names[kind], (unsigned long long)c.rt,
			       wo.skip_object);
			print_client_bytes(&c);
		} else if (!strcmp(cmd, "get")) {
			const uint8_t *val;
			uint32_t vlen = 0;
			struct rinfo ri;

			client_connect(&c, host, port);
			ret = client_read(&c, wo.scheme, key, klen, &val, &vlen, &ri);
			printf("get key=%s scheme=%s status=%d fallback=%d refused=%d repaired=%d round_trips=%llu value=%.*s\n",
			       key, scheme_names[wo.scheme], ret, ri.fallback, ri.refused, ri.repaired,
			       (unsigned long long)c.rt, ret ? 0 : (int)vlen, ret ? "" : (const char *)val);
		} else if (!strcmp(cmd, "forge")) {
			if (reserved == have_off)
				die("%s", "forge needs one of --reserved-bit, --offset OFF");
			client_connect(&c, host, port);
			ret = client_forge(&c, key, klen, reserved, off);
			printf("forge key=%s status=%d\n", key, ret);
		} else {
			die("unknown command %s (see erda --help)", cmd);
		}
		client_close(&c);
		return ret && ret != -ENOENT ? 1 : 0;
	}
}
