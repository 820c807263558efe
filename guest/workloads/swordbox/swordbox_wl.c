// SPDX-License-Identifier: MIT
/*
 * swordbox-wl: the workloads of SwordBox's evaluation on the RNIC (docs/swordbox-workloads.md):
 * a lock microbenchmark, a Clover-style key-value store and a Sherman-style B+tree, clean-room
 * versions of the algorithms as the SwordBox dissertation (ch. 3), Sherman (SIGMOD 2022) and
 * Clover (ATC 2020) describe them. One memory server node holds the data; clients on other nodes
 * (one RC QP per client thread) reach it with READ, WRITE, CAS and SEND only, so the workloads
 * are correct end to end with or without a switch program rewriting their packets.
 *
 *   swordbox-wl server --peer-file F --clients N --mode lock|kv|btree [...]
 *   swordbox-wl lock|kv|btree --peer-file F [--threads T] [--ops N | --seconds S] [...]
 *   swordbox-wl kv-check --chain FILE LOG...
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "librnic.h"
#include "tool.h"
#include "ycsb.h"

static const char usage[] =
	"usage: swordbox-wl COMMAND [options]   (numbers take K and M suffixes)\n"
	"  server --peer-file F --clients N --mode lock|kv|btree [--mem BYTES] [--locks N]\n"
	"         [--lock-place host|dm] [--keys K] [--value-size B] [--dump FILE]\n"
	"        the memory server: one RC QP per client thread, the data in one MR of --mem bytes\n"
	"        (default 32M); answers HELLO (the layout) and CHUNK (64 KiB of its heap) requests\n"
	"        sent by SEND. Parameters are exchanged through files (as `rnic bench --peer-file`):\n"
	"        it prints N conn= lines, reads the clients' lines from F.0 .. F.N-1, prints\n"
	"        server=ready, serves until F.stop exists, then checks its memory and prints\n"
	"        server=done (lock: the counters' sum; kv: the version chains, dumped to --dump;\n"
	"        btree: the tree's invariants). --locks: lock words (lock: default 1, btree: 4096);\n"
	"        --keys/--value-size: the key-value store's keys (1024) and value bytes (128)\n"
	"  lock  --peer-file F [--threads T] [--ops N | --seconds S] [--dist uniform|zipf] [--theta X]\n"
	"        acquire a lock word by CAS(0, tag) (retrying), increment its counter by READ +\n"
	"        WRITE, release by WRITE 0; prints acquires/s, failed CAS per acquire, p50/p99\n"
	"        acquire latency, this node's RNIC bytes per acquire and increments= (the counters\n"
	"        must sum to every client's increments)\n"
	"  kv    --peer-file F [--threads T] [--ops N | --seconds S] [--workload A|B|C|U] [--theta X]\n"
	"        [--log FILE] [--ms-hints]   Clover: get = READ at the cached tail then walk, put = WRITE\n"
	"        the new version node, CAS the tail's next pointer; --log records every operation for\n"
	"        kv-check; --ms-hints: a key's first hint is its tail as the metadata server sees it\n"
	"  btree --peer-file F [--threads T] [--ops N | --seconds S] [--insert-share X] [--hand-over N]\n"
	"        Sherman: 1 KiB B-link pages, lookup = READs down the tree, insert = CAS lock, READ,\n"
	"        WRITE page + WRITE unlock; at the end every key the client inserted is looked up.\n"
	"        --hand-over N: the threads share a local lock table and pass a held lock to a local\n"
	"        waiter up to N times in a row without releasing it remotely (default 0: off)\n"
	"  kv-check --chain FILE LOG...\n"
	"        every put of the logs linked exactly once, gets return linked versions of their key,\n"
	"        per thread the versions seen of a key never go back, and within one log (one node's\n"
	"        clock) no get returns a version older than a put completed before the get started\n"
	"Client peer file F: one conn= line per thread (the server's); the client prints its own and\n"
	"starts when F.go exists. Defaults: --threads 1 --ops 1000 --dist zipf --theta 0.99\n"
	"--workload A --insert-share 0.5.\n";

/* ---- the server's layout and its messages ---- */

enum { MODE_LOCK = 1, MODE_KV, MODE_BTREE };
enum { REQ_HELLO = 1, REQ_CHUNK, REQ_HINT };

#define MSG_SIZE 256
#define RQ_SLOTS 8
#define CHUNK_SIZE (64u << 10)
#define PAGE_SIZE_B 1024u
#define NODE_HDR 32u

struct layout {
	uint32_t mode, nlocks;
	uint32_t keys, value_size;
	uint32_t node_size, page_size;
	uint32_t rkey, lock_rkey;
	uint64_t base, length;
	uint64_t lock_addr;    /* nlocks 8-byte lock words (lock_rkey) */
	uint64_t counter_addr; /* lock: nlocks 8-byte counters, each guarded by its lock */
	uint64_t kv_roots;     /* kv: keys version nodes of node_size, the chains' first versions */
	uint64_t super;        /* btree: the root page's address */
};

struct msg {
	uint32_t type, status; /* status: 0 or an errno */
	uint64_t a, b;         /* CHUNK: address and length; HINT: the key (request), its tail (answer) */
	struct layout l;
};

/* ---- shared helpers ---- */

/* A real number option; anything else is a usage error naming the option. */
static double dbl(const char *s, const char *what)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end)
		die("%s '%s': expected a number", what, s);
	return v;
}

static uint64_t mix64(uint64_t x) /* the splitmix64 finalizer: a bijection */
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void *xmap(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "swordbox-wl: cannot allocate %zu bytes: %s\n", n, strerror(errno));
		exit(1);
	}
	return p;
}

static void fatal(const char *what, int err)
{
	fprintf(stderr, "swordbox-wl: %s: %s (dmesg has the driver's reason)\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static struct rnic_ctx *open_dev(void)
{
	struct rnic_ctx *ctx = rnic_open(NULL);

	if (!ctx) {
		fprintf(stderr, "swordbox-wl: cannot open %s: %s (rackemu_rnic driver loaded, -device rackemu-rnic?)\n",
			RNIC_DEV_PATH, strerror(errno));
		exit(1);
	}
	return ctx;
}

static void conn_print(unsigned idx, const struct rnic_conn *c)
{
	printf("conn=%u node=%u qpn=0x%x psn=0x%x rkey=0x%x addr=0x%llx length=%llu\n", idx, c->node, c->qpn, c->psn,
	       c->rkey, (unsigned long long)c->addr, (unsigned long long)c->length);
	fflush(stdout);
}

/* Line `line` (0-based) of path as a conn= line, waiting up to 120 s for it to appear. */
static void conn_read(const char *path, unsigned line, struct rnic_conn *c)
{
	unsigned long long addr, len;
	unsigned idx;
	char buf[256];

	for (unsigned i = 0; i < 120 * 20; i++, usleep(50000)) {
		FILE *f = fopen(path, "r");
		unsigned n = 0;

		if (!f)
			continue;
		while (fgets(buf, sizeof(buf), f)) {
			if (sscanf(buf, "conn=%u node=%u qpn=0x%x psn=0x%x rkey=0x%x addr=0x%llx length=%llu", &idx, &c->node,
				   &c->qpn, &c->psn, &c->rkey, &addr, &len) != 7)
				continue;
			if (n++ == line) {
				fclose(f);
				c->addr = addr;
				c->length = len;
				return;
			}
		}
		fclose(f);
	}
	fprintf(stderr, "swordbox-wl: no conn= line %u in %s within 120 s\n", line, path);
	exit(1);
}

static int wait_file(const char *path, unsigned seconds)
{
	for (unsigned i = 0; i < seconds * 20; i++) {
		if (!access(path, F_OK))
			return 0;
		usleep(50000);
	}
	fprintf(stderr, "swordbox-wl: %s did not appear within %u s\n", path, seconds);
	return -ETIMEDOUT;
}

static uint64_t counter(struct rnic_ctx *ctx, unsigned off)
{
	uint64_t c[RNIC_CNT_COUNT];

	return rnic_counters(ctx, c) ? 0 : c[off / 8]; /* root only: 0 otherwise */
}

/* ---- the memory server ---- */

struct srv_qp {
	struct rnic_qp *qp;
	struct rnic_cq *cq;
	uint32_t psn;
};

struct server {
	struct rnic_ctx *ctx;
	uint32_t pd;
	uint8_t *mem, *msgs;
	uint64_t len, heap, heap_end;
	struct rnic_mr mr, msg_mr;
	struct layout l;
	unsigned clients;
	struct srv_qp *q;
};

/* Where the lock words live. `host`: carved from the server's MR at *off (host memory, as
 * SwordBox's baseline); `dm` is NIC device memory (Sherman's on-chip lock table), which this
 * RNIC does not offer yet: refused with a message. The one place lock placement is decided. */
static int lock_region(struct server *s, const char *place, uint64_t bytes, uint64_t *off)
{
	if (!strcmp(place, "host")) {
		s->l.lock_addr = (uintptr_t)s->mem + *off;
		s->l.lock_rkey = s->mr.rkey;
		memset(s->mem + *off, 0, bytes);
		*off += (bytes + 4095) & ~4095ull;
		return 0;
	}
	if (!strcmp(place, "dm"))
		fprintf(stderr, "swordbox-wl: --lock-place dm: this RNIC has no device memory to allocate yet\n");
	else
		fprintf(stderr, "swordbox-wl: --lock-place must be host or dm\n");
	return -1;
}

/* kv: the version node at addr (a server address) and its fields. */
struct vnode {
	uint64_t next;   /* the next version's address, 0 at the tail: the word put CASes */
	uint64_t key;
	uint64_t tag;    /* the writer: thread id << 32 | sequence; 0 for the first version */
	uint64_t pad;
	uint8_t value[]; /* value_size bytes: pattern_byte(tag ^ key * K, i) */
};

static void srv_post_recv(struct server *s, unsigned qi, unsigned slot)
{
	struct rnic_recv_wqe r;
	int ret;

	memset(&r, 0, sizeof(r));
	r.wr_id = slot;
	r.num_sge = 1;
	r.sge[0] = (struct rnic_sge){ (uintptr_t)s->msgs + ((uint64_t)qi * (RQ_SLOTS + 1) + slot) * MSG_SIZE, MSG_SIZE,
				      s->msg_mr.lkey };
	if ((ret = rnic_post_recv(s->q[qi].qp, &r)))
		fatal("posting a receive", ret);
}

static void srv_answer(struct server *s, unsigned qi, unsigned slot)
{
	struct msg *req = (struct msg *)(s->msgs + ((uint64_t)qi * (RQ_SLOTS + 1) + slot) * MSG_SIZE);
	struct msg *rep = (struct msg *)(s->msgs + ((uint64_t)qi * (RQ_SLOTS + 1) + RQ_SLOTS) * MSG_SIZE);
	struct rnic_send_wqe w;
	int ret;

	memset(rep, 0, sizeof(*rep));
	rep->type = req->type;
	rep->l = s->l;
	if (req->type == REQ_CHUNK) {
		if (s->heap + CHUNK_SIZE > s->heap_end) {
			rep->status = ENOMEM;
		} else {
			rep->a = (uintptr_t)s->mem + s->heap;
			rep->b = CHUNK_SIZE;
			s->heap += CHUNK_SIZE;
		}
	} else if (req->type == REQ_HINT) {
		if (s->l.mode != MODE_KV || req->a >= s->l.keys) {
			rep->status = EINVAL;
		} else { /* walk the chain in local memory: a linked node is complete (WRITE before CAS) */
			uint64_t a = s->l.kv_roots + req->a * s->l.node_size, steps = 0, next;

			while ((next = __atomic_load_n(&((struct vnode *)(uintptr_t)a)->next, __ATOMIC_ACQUIRE)) &&
			       next >= (uintptr_t)s->mem && next + s->l.node_size <= (uintptr_t)s->mem + s->len &&
			       ++steps < s->len / s->l.node_size)
				a = next;
			rep->a = a;
		}
	} else if (req->type != REQ_HELLO) {
		rep->status = EINVAL;
	}
	srv_post_recv(s, qi, slot);
	memset(&w, 0, sizeof(w));
	w.opcode = RNIC_WR_SEND;
	w.num_sge = 1;
	w.sge[0] = (struct rnic_sge){ (uintptr_t)rep, sizeof(*rep), s->msg_mr.lkey };
	ret = rnic_post(s->q[qi].qp, &w, 10000);
	ret = ret ? ret : rnic_quiet(s->q[qi].qp, 10000);
	if (ret) /* that client's QP failed: the others go on */
		fprintf(stderr, "swordbox-wl server: answering client QP %u: %s\n", qi, strerror(-ret));
}

static uint64_t value_seed(uint64_t key, uint64_t tag)
{
	return tag ^ (key * 0x9e3779b97f4a7c15ull);
}

/* btree page (1 KiB). front == rear when the page was read whole. */
#define BT_MAX 60
struct bt_page {
	uint64_t front;
	uint32_t level, nkeys;
	uint64_t lo, hi; /* the keys this page holds: [lo, hi); hi UINT64_MAX: no upper bound */
	uint64_t sibling, leftmost;
	struct {
		uint64_t k, v;
	} e[BT_MAX];
	uint64_t pad, rear;
};
_Static_assert(sizeof(struct bt_page) == PAGE_SIZE_B, "a page is 1 KiB");

static uint64_t bt_value(uint64_t key)
{
	return ~key * 3;
}

static int kv_audit(struct server *s, const char *dump)
{
	FILE *f = dump ? fopen(dump, "w") : NULL;
	uint64_t nodes = 0, maxlen = 0, bad = 0, limit = s->len / s->l.node_size + 1;

	if (dump && !f) {
		fprintf(stderr, "swordbox-wl: cannot write %s: %s\n", dump, strerror(errno));
		return 1;
	}
	for (uint64_t k = 0; k < s->l.keys; k++) {
		uint64_t a = s->l.kv_roots + k * s->l.node_size, pos = 0;

		for (;;) {
			const struct vnode *n;
			long mis = -1;

			if (a < (uintptr_t)s->mem || a + s->l.node_size > (uintptr_t)s->mem + s->len || pos > limit) {
				fprintf(stderr, "kv audit: key %llu: pointer 0x%llx outside the region or a cycle\n",
					(unsigned long long)k, (unsigned long long)a);
				bad++;
				break;
			}
			n = (const struct vnode *)(uintptr_t)a;
			for (uint32_t i = 0; i < s->l.value_size && mis < 0; i++)
				if (n->value[i] != pattern_byte(value_seed(k, n->tag), i))
					mis = i;
			if (n->key != k || mis >= 0) {
				fprintf(stderr, "kv audit: key %llu pos %llu: node key %llu value byte %ld wrong\n",
					(unsigned long long)k, (unsigned long long)pos, (unsigned long long)n->key, mis);
				bad++;
			}
			if (f)
				fprintf(f, "c %llu %llu %llx\n", (unsigned long long)k, (unsigned long long)pos,
					(unsigned long long)n->tag);
			if (!n->next)
				break;
			a = n->next;
			pos++;
		}
		nodes += pos;
		maxlen = pos > maxlen ? pos : maxlen;
	}
	if (f)
		fclose(f);
	printf("server=done mode=kv keys=%u chain_nodes=%llu longest_chain=%llu bad=%llu\n", s->l.keys,
	       (unsigned long long)nodes, (unsigned long long)maxlen, (unsigned long long)bad);
	return bad ? 1 : 0;
}

static int bt_audit(struct server *s)
{
	const struct bt_page *root = (const struct bt_page *)(uintptr_t) * (volatile uint64_t *)(uintptr_t)s->l.super;
	uint64_t keys = 0, pages = 0, bad = 0, leftmost = (uintptr_t)root, prev_leaf_key = 0;
	int have_prev = 0;
	uint32_t levels = root->level + 1;

#define BT_BAD(...)                                       \
	do {                                              \
		if (bad++ < 10)                           \
			fprintf(stderr, "btree audit: " __VA_ARGS__); \
	} while (0)
	for (int lvl = (int)root->level; lvl >= 0; lvl--) {
		const struct bt_page *p = (const struct bt_page *)(uintptr_t)leftmost;
		uint64_t expect_lo = 0, steps = 0;

		if (p->lo != 0)
			BT_BAD("level %d: the leftmost page's low fence is %llu\n", lvl, (unsigned long long)p->lo);
		for (;;) {
			pages++;
			if (p->level != (uint32_t)lvl || p->front != p->rear || p->nkeys > BT_MAX)
				BT_BAD("page %p: level %u (want %d) front %llu rear %llu nkeys %u\n", (const void *)p, p->level,
				       lvl, (unsigned long long)p->front, (unsigned long long)p->rear, p->nkeys);
			if (p->lo != expect_lo)
				BT_BAD("page %p: low fence %llu, the left sibling's high fence %llu\n", (const void *)p,
				       (unsigned long long)p->lo, (unsigned long long)expect_lo);
			for (uint32_t i = 0; i < p->nkeys && i < BT_MAX; i++) {
				if (p->e[i].k < p->lo || p->e[i].k >= p->hi || (i && p->e[i].k <= p->e[i - 1].k))
					BT_BAD("page %p: key %u (%llu) unsorted or outside [%llu, %llu)\n", (const void *)p, i,
					       (unsigned long long)p->e[i].k, (unsigned long long)p->lo,
					       (unsigned long long)p->hi);
				if (lvl == 0) {
					if (p->e[i].v != bt_value(p->e[i].k))
						BT_BAD("key %llu: value %llx\n", (unsigned long long)p->e[i].k,
						       (unsigned long long)p->e[i].v);
					if (have_prev && p->e[i].k <= prev_leaf_key)
						BT_BAD("leaf keys out of order at %llu\n", (unsigned long long)p->e[i].k);
					prev_leaf_key = p->e[i].k;
					have_prev = 1;
					keys++;
				} else {
					const struct bt_page *c = (const struct bt_page *)(uintptr_t)p->e[i].v;

					if (c->level != (uint32_t)lvl - 1 || c->lo != p->e[i].k)
						BT_BAD("page %p: child %u: level %u low fence %llu, separator %llu\n",
						       (const void *)p, i, c->level, (unsigned long long)c->lo,
						       (unsigned long long)p->e[i].k);
				}
			}
			if (lvl > 0) {
				const struct bt_page *c = (const struct bt_page *)(uintptr_t)p->leftmost;

				if (c->level != (uint32_t)lvl - 1 || c->lo != p->lo)
					BT_BAD("page %p: leftmost child's level %u low fence %llu\n", (const void *)p, c->level,
					       (unsigned long long)c->lo);
			}
			expect_lo = p->hi;
			if (!p->sibling || ++steps > s->len / PAGE_SIZE_B)
				break;
			p = (const struct bt_page *)(uintptr_t)p->sibling;
		}
		if (expect_lo != UINT64_MAX)
			BT_BAD("level %d: the last page's high fence is %llu\n", lvl, (unsigned long long)expect_lo);
		if (lvl > 0)
			leftmost = ((const struct bt_page *)(uintptr_t)leftmost)->leftmost;
	}
	for (uint32_t i = 0; i < s->l.nlocks; i++)
		if (((volatile uint64_t *)(uintptr_t)s->l.lock_addr)[i])
			BT_BAD("lock %u still held\n", i);
	printf("server=done mode=btree levels=%u pages=%llu keys=%llu bad=%llu\n", levels, (unsigned long long)pages,
	       (unsigned long long)keys, (unsigned long long)bad);
	return bad ? 1 : 0;
}

static int cmd_server(int argc, char **argv)
{
	static const struct option opts[] = { { "peer-file", 1, 0, 'P' }, { "clients", 1, 0, 'C' },
					      { "mode", 1, 0, 'm' },	  { "mem", 1, 0, 'M' },
					      { "locks", 1, 0, 'L' },	  { "lock-place", 1, 0, 'p' },
					      { "keys", 1, 0, 'K' },	  { "value-size", 1, 0, 'V' },
					      { "dump", 1, 0, 'D' },	  { "help", 0, 0, 'h' },
					      { 0, 0, 0, 0 } };
	const char *peer = NULL, *place = "host", *dump = NULL, *mode = NULL;
	uint64_t mem = 32u << 20, off = 4096, tx0, nlocks = 0;
	struct server s;
	char path[512];
	int c, ret;

	memset(&s, 0, sizeof(s));
	s.l.keys = 1024;
	s.l.value_size = 128;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'P': peer = optarg; break;
		case 'C': s.clients = (unsigned)num(optarg, "--clients", 64); break;
		case 'm': mode = optarg; break;
		case 'M': mem = num(optarg, "--mem", 1u << 30); break;
		case 'L': nlocks = num(optarg, "--locks", 1u << 20); break;
		case 'p': place = optarg; break;
		case 'K': s.l.keys = (uint32_t)num(optarg, "--keys", 1u << 20); break;
		case 'V': s.l.value_size = (uint32_t)num(optarg, "--value-size", 4096); break;
		case 'D': dump = optarg; break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad_option(c, argv, "swordbox-wl --help");
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (swordbox-wl --help)", argv[optind]);
	if (!peer || !s.clients || !mode)
		die("server needs --peer-file F, --clients 1..64 and --mode lock|kv|btree");
	s.l.mode = !strcmp(mode, "lock") ? MODE_LOCK : !strcmp(mode, "kv") ? MODE_KV : !strcmp(mode, "btree") ? MODE_BTREE : 0;
	if (!s.l.mode)
		die("--mode must be lock, kv or btree");
	if (!s.l.keys)
		die("--keys must be at least 1");
	if (nlocks == 0 && s.l.mode != MODE_KV)
		nlocks = s.l.mode == MODE_LOCK ? 1 : 4096;
	s.l.nlocks = (uint32_t)nlocks;
	s.l.page_size = PAGE_SIZE_B;
	s.l.node_size = (NODE_HDR + s.l.value_size + 63) & ~63u;
	s.ctx = open_dev();
	s.len = mem;
	s.mem = xmap(mem);
	if ((ret = rnic_alloc_pd(s.ctx, &s.pd)))
		fatal("alloc PD", ret);
	if ((ret = rnic_reg_mr(s.ctx, s.pd, s.mem, mem, RNIC_ACCESS_ALL, &s.mr)))
		fatal("register the server's MR", ret);
	s.msgs = xmap((size_t)s.clients * (RQ_SLOTS + 1) * MSG_SIZE);
	if ((ret = rnic_reg_mr(s.ctx, s.pd, s.msgs, (uint64_t)s.clients * (RQ_SLOTS + 1) * MSG_SIZE, RNIC_ACCESS_ALL,
			       &s.msg_mr)))
		fatal("register the message buffers", ret);
	s.l.base = (uintptr_t)s.mem;
	s.l.length = mem;
	s.l.rkey = s.mr.rkey;
	s.l.super = (uintptr_t)s.mem;
	if (s.l.nlocks && lock_region(&s, place, (uint64_t)s.l.nlocks * 8, &off))
		return 2;
	if (s.l.mode == MODE_LOCK) {
		s.l.counter_addr = (uintptr_t)s.mem + off;
		off += ((uint64_t)s.l.nlocks * 8 + 4095) & ~4095ull;
	}
	if (s.l.mode == MODE_KV) {
		s.l.kv_roots = (uintptr_t)s.mem + off;
		off += ((uint64_t)s.l.keys * s.l.node_size + 4095) & ~4095ull;
	}
	s.heap = (off + CHUNK_SIZE - 1) & ~(uint64_t)(CHUNK_SIZE - 1);
	s.heap_end = mem;
	if (s.heap + (s.l.mode == MODE_BTREE ? CHUNK_SIZE : 0) > mem)
		die("--mem %llu is too small for this layout (%llu bytes before the heap)", (unsigned long long)mem,
		    (unsigned long long)s.heap);
	if (s.l.mode == MODE_KV) {
		for (uint64_t k = 0; k < s.l.keys; k++) {
			struct vnode *n = (struct vnode *)(s.mem + (s.l.kv_roots - s.l.base) + k * s.l.node_size);

			n->key = k;
			for (uint32_t i = 0; i < s.l.value_size; i++)
				n->value[i] = pattern_byte(value_seed(k, 0), i);
		}
	}
	if (s.l.mode == MODE_BTREE) { /* the root: one empty leaf over every key */
		struct bt_page *r = (struct bt_page *)(s.mem + s.heap);

		r->hi = UINT64_MAX;
		*(uint64_t *)s.mem = (uintptr_t)r;
		s.heap += CHUNK_SIZE;
	}
	s.q = calloc(s.clients, sizeof(*s.q));
	for (unsigned i = 0; i < s.clients; i++) {
		struct rnic_conn mine = { s.ctx->info.node_id, 0, rnic_random_psn(), s.mr.rkey, (uintptr_t)s.mem, mem };

		s.q[i].cq = rnic_create_cq(s.ctx, 8);
		s.q[i].qp = s.q[i].cq ? rnic_create_qp(s.ctx, s.pd, s.q[i].cq, s.q[i].cq, 6, 4) : NULL;
		if (!s.q[i].qp)
			fatal("creating a client's CQ and QP", errno);
		mine.qpn = s.q[i].qp->qpn;
		s.q[i].psn = mine.psn;
		conn_print(i, &mine);
	}
	for (unsigned i = 0; i < s.clients; i++) {
		struct rnic_conn mine = { s.ctx->info.node_id, s.q[i].qp->qpn, s.q[i].psn, s.mr.rkey, (uintptr_t)s.mem, mem }, p;

		snprintf(path, sizeof(path), "%s.%u", peer, i);
		conn_read(path, 0, &p);
		if ((ret = rnic_qp_connect(s.q[i].qp, &mine, &p, NULL)))
			fatal("connecting a client's QP", ret);
		for (unsigned k = 0; k < RQ_SLOTS; k++)
			srv_post_recv(&s, i, k);
		printf("client=%u node=%u qpn=0x%x peer_qpn=0x%x\n", i, p.node, s.q[i].qp->qpn, p.qpn);
	}
	tx0 = counter(s.ctx, RNIC_CNT_TX_BYTES);
	printf("server=ready mode=%s clients=%u locks=%u lock_place=%s keys=%u value_size=%u mem=%llu\n", mode, s.clients,
	       s.l.nlocks, place, s.l.keys, s.l.value_size, (unsigned long long)mem);
	fflush(stdout);
	snprintf(path, sizeof(path), "%s.stop", peer);
	for (unsigned polls = 0;;) {
		unsigned busy = 0;

		for (unsigned i = 0; i < s.clients; i++) {
			struct rnic_cqe cqe[8];
			int got = rnic_poll_cq(s.q[i].cq, cqe, 8);

			for (int k = 0; k < got; k++) {
				if (!(cqe[k].flags & RNIC_CQE_F_RECV))
					continue;
				if (cqe[k].status == RNIC_WC_SUCCESS)
					srv_answer(&s, i, (unsigned)cqe[k].wr_id);
				else
					fprintf(stderr, "swordbox-wl server: client QP %u: receive status %u (%s)\n", i,
						cqe[k].status, rnic_wc_status_str(cqe[k].status));
			}
			busy |= got > 0;
		}
		if (!busy && (++polls % 64 == 0)) {
			if (!access(path, F_OK))
				break;
			usleep(1000);
		}
	}
	printf("server_tx_bytes=%llu heap_used=%llu\n", (unsigned long long)(counter(s.ctx, RNIC_CNT_TX_BYTES) - tx0),
	       (unsigned long long)(s.heap - ((off + CHUNK_SIZE - 1) & ~(uint64_t)(CHUNK_SIZE - 1))));
	if (s.l.mode == MODE_LOCK) {
		const volatile uint64_t *cnt = (const volatile uint64_t *)(uintptr_t)s.l.counter_addr;
		const volatile uint64_t *lk = (const volatile uint64_t *)(uintptr_t)s.l.lock_addr;
		uint64_t sum = 0, held = 0;

		for (uint32_t i = 0; i < s.l.nlocks; i++) {
			sum += cnt[i];
			held += lk[i] != 0;
		}
		printf("server=done mode=lock locks=%u counter_sum=%llu locks_held=%llu\n", s.l.nlocks,
		       (unsigned long long)sum, (unsigned long long)held);
		return held ? 1 : 0;
	}
	return s.l.mode == MODE_KV ? kv_audit(&s, dump) : bt_audit(&s);
}

/* ---- clients ---- */

#define LBUF (64u << 10)
/* a thread's local buffer: offsets */
enum { L_RES = 0, L_ZERO = 8, L_U64 = 16, L_CNT = 32, L_CNTNEW = 40, L_MSG = 256, L_RMSG = 512, L_PAGE = 1024,
       L_PAGE2 = 2048, L_PAGE3 = 3072, L_PAGE4 = 4096, L_NODE = 8192, L_NODEW = 16384 };

struct opts {
	const char *peer, *log;
	unsigned threads;
	uint64_t ops;
	double seconds, theta, insert_share;
	int zipf;
	const struct ycsb_workload *wl;
	int ms_hints;
};

struct thr {
	unsigned idx;
	uint64_t id; /* unique among the run's threads: node << 24 | pid-ish << 8 | thread */
	struct rnic_ctx *ctx;
	struct rnic_qp *qp;
	struct rnic_cq *cq;
	uint8_t *buf;
	uint32_t lkey;
	struct rnic_conn me, peer;
	struct layout l;
	const struct opts *o;
	uint64_t chunk, chunk_left;
	/* results */
	uint64_t handovers, hint_rpcs;
	uint64_t ops, acquires, failed_cas, increments, reads, retries, gets, puts, inserts, lookups, found, errors;
	uint64_t *lat, nlat, *lat2, nlat2;
	FILE *log;
	char *logbuf;
	size_t loglen;
	uint64_t *incr; /* lock: per lock */
	uint64_t *mykeys, nmykeys;
};

static void thr_fail(struct thr *t, const char *what, int ret)
{
	if (ret == -EIO)
		fprintf(stderr, "swordbox-wl: thread %u: %s: completion status %u (%s) vendor_err 0x%x\n", t->idx, what,
			t->qp->first_error.status, rnic_wc_status_str(t->qp->first_error.status),
			t->qp->first_error.vendor_err);
	else
		fprintf(stderr, "swordbox-wl: thread %u: %s: %s\n", t->idx, what, strerror(-ret));
	exit(1);
}

/* A signal while waiting for a lock (held by a client that died, or by a long run) ends the run:
 * the lock loops spin on the remote word and would not otherwise notice. */
static void check_stop(struct thr *t, const char *what)
{
	if (stop) {
		fprintf(stderr, "swordbox-wl: thread %u: stopped by a signal while %s\n", t->idx, what);
		exit(1);
	}
}

static void post(struct thr *t, uint8_t op, uint32_t loff, uint32_t len, uint64_t raddr, uint32_t rkey, uint64_t cmp,
		 uint64_t swp)
{
	struct rnic_send_wqe w;
	int ret;

	memset(&w, 0, sizeof(w));
	w.opcode = op;
	w.flags = RNIC_WQE_F_SIGNALED;
	w.remote_addr = raddr;
	w.rkey = rkey;
	w.compare = cmp;
	w.swap_add = swp;
	if (len) {
		w.num_sge = 1;
		w.sge[0] = (struct rnic_sge){ (uintptr_t)t->buf + loff, len, t->lkey };
	}
	if ((ret = rnic_post(t->qp, &w, 10000)))
		thr_fail(t, "posting", ret);
	t->ops++;
}

static void quiet(struct thr *t)
{
	int ret = rnic_quiet(t->qp, 30000);

	if (ret)
		thr_fail(t, "waiting for completions", ret);
}

static void rd(struct thr *t, uint32_t loff, uint32_t len, uint64_t raddr)
{
	post(t, RNIC_WR_READ, loff, len, raddr, t->l.rkey, 0, 0);
	quiet(t);
}

/* CAS(addr: compare -> swap); the value it found. */
static uint64_t cas(struct thr *t, uint64_t raddr, uint32_t rkey, uint64_t compare, uint64_t swap)
{
	post(t, RNIC_WR_CMP_SWAP, L_RES, 8, raddr, rkey, compare, swap);
	quiet(t);
	return *(volatile uint64_t *)(t->buf + L_RES);
}

static struct msg rpc_arg(struct thr *t, uint32_t type, uint64_t arg)
{
	struct rnic_recv_wqe r;
	struct rnic_cqe c;
	struct msg m;
	int ret;

	memset(&r, 0, sizeof(r));
	r.wr_id = 1;
	r.num_sge = 1;
	r.sge[0] = (struct rnic_sge){ (uintptr_t)t->buf + L_RMSG, MSG_SIZE, t->lkey };
	if ((ret = rnic_post_recv(t->qp, &r)))
		thr_fail(t, "posting a receive", ret);
	memset(t->buf + L_MSG, 0, sizeof(struct msg));
	((struct msg *)(t->buf + L_MSG))->type = type;
	((struct msg *)(t->buf + L_MSG))->a = arg;
	post(t, RNIC_WR_SEND, L_MSG, sizeof(struct msg), 0, 0, 0, 0);
	quiet(t);
	ret = rnic_wait_cq(t->cq, &c, 1, 30000);
	if (ret != 1 || c.status != RNIC_WC_SUCCESS || !(c.flags & RNIC_CQE_F_RECV))
		thr_fail(t, "waiting for the server's answer", ret < 0 ? ret : -EIO);
	memcpy(&m, t->buf + L_RMSG, sizeof(m));
	return m;
}

static struct msg rpc(struct thr *t, uint32_t type)
{
	return rpc_arg(t, type, 0);
}

/* A slot of `size` bytes from this thread's chunk (a new chunk from the server when it is used up). */
static uint64_t alloc_remote(struct thr *t, uint32_t size)
{
	if (t->chunk_left < size) {
		struct msg m = rpc(t, REQ_CHUNK);

		if (m.status) {
			fprintf(stderr, "swordbox-wl: thread %u: the server has no memory left (--mem): %s\n", t->idx,
				strerror((int)m.status));
			exit(1);
		}
		t->chunk = m.a;
		t->chunk_left = m.b;
	}
	t->chunk += size;
	t->chunk_left -= size;
	return t->chunk - size;
}

static int time_up(const struct thr *t, uint64_t i, uint64_t t0)
{
	if (t->o->seconds > 0)
		return stop || (double)(now_ns() - t0) / 1e9 >= t->o->seconds;
	return i >= t->o->ops;
}

static void lat_add(uint64_t **a, uint64_t *n, uint64_t v)
{
	if ((*n & (*n - 1)) == 0 && *n >= 1024) /* grow at powers of two */
		*a = realloc(*a, (size_t)*n * 2 * sizeof(**a));
	else if (!*a)
		*a = malloc(1024 * sizeof(**a));
	if (!*a)
		fatal("allocating latency samples", ENOMEM);
	(*a)[(*n)++] = v;
}

/* ---- lock ---- */

static void *lock_thread(void *arg)
{
	struct thr *t = arg;
	struct ycsb_zipf z;
	uint64_t seed = mix64(t->id), tag = t->id | 1ull << 63, t0 = now_ns();
	volatile uint64_t *res = (volatile uint64_t *)(t->buf + L_RES);

	ycsb_zipf_init(&z, t->l.nlocks, t->o->theta, t->o->theta == YCSB_ZIPF_CONSTANT, seed);
	t->incr = calloc(t->l.nlocks, sizeof(uint64_t));
	for (uint64_t i = 0; !time_up(t, i, t0); i++) {
		uint64_t k = t->o->zipf ? ycsb_zipf_next(&z) : ycsb_rand64(&seed) % t->l.nlocks;
		uint64_t lock = t->l.lock_addr + 8 * k, ctr = t->l.counter_addr + 8 * k, a0 = now_ns();

		for (;;) { /* Sherman's acquire: CAS(0, tag) until it finds the lock free */
			post(t, RNIC_WR_CMP_SWAP, L_RES, 8, lock, t->l.lock_rkey, 0, tag);
			quiet(t);
			if (*res == 0)
				break;
			if (*res == tag) {
				fprintf(stderr, "swordbox-wl: thread %u: lock %llu found held by this thread\n", t->idx,
					(unsigned long long)k);
				exit(1);
			}
			t->failed_cas++;
			check_stop(t, "acquiring a lock");
		}
		lat_add(&t->lat, &t->nlat, now_ns() - a0);
		t->acquires++;
		rd(t, L_CNT, 8, ctr); /* the critical section: READ, WRITE counter + 1 */
		*(volatile uint64_t *)(t->buf + L_CNTNEW) = *(volatile uint64_t *)(t->buf + L_CNT) + 1;
		post(t, RNIC_WR_WRITE, L_CNTNEW, 8, ctr, t->l.rkey, 0, 0);
		post(t, RNIC_WR_WRITE, L_ZERO, 8, lock, t->l.lock_rkey, 0, 0); /* release: WRITE 0, same QP */
		quiet(t);
		t->increments++;
		t->incr[k]++;
	}
	return NULL;
}

/* ---- kv (Clover) ---- */

static void kv_log(struct thr *t, char op, uint64_t key, uint64_t tag, uint64_t t0, uint64_t t1, uint64_t walked)
{
	char line[128];
	int n;

	if (!t->o->log)
		return;
	n = snprintf(line, sizeof(line), "%c %llu %llx %llu %llu %u %llu\n", op, (unsigned long long)key,
		     (unsigned long long)tag, (unsigned long long)t0, (unsigned long long)t1, t->idx,
		     (unsigned long long)walked);
	t->logbuf = realloc(t->logbuf, t->loglen + (size_t)n + 1);
	if (!t->logbuf)
		fatal("growing the log", ENOMEM);
	memcpy(t->logbuf + t->loglen, line, (size_t)n + 1);
	t->loglen += (size_t)n;
}

/* Walk key k's chain from *hint to its tail, reading whole nodes into L_NODE; the tail's tag. */
static uint64_t kv_walk(struct thr *t, uint64_t k, uint64_t *hint, uint64_t *reads)
{
	const struct vnode *n = (const struct vnode *)(t->buf + L_NODE);

	for (;;) {
		rd(t, L_NODE, t->l.node_size, *hint);
		(*reads)++;
		if (n->key != k) {
			fprintf(stderr, "swordbox-wl: key %llu: the node at 0x%llx holds key %llu\n", (unsigned long long)k,
				(unsigned long long)*hint, (unsigned long long)n->key);
			exit(1);
		}
		if (!n->next)
			return n->tag;
		*hint = n->next;
	}
}

static void *kv_thread(void *arg)
{
	struct thr *t = arg;
	struct ycsb_zipf z;
	uint64_t *hint = malloc(t->l.keys * sizeof(uint64_t)), seq = 0, t0 = now_ns();
	uint64_t *seen = calloc(t->l.keys / 64 + 1, sizeof(uint64_t)); /* keys whose hint came from the MS */
	const struct vnode *rn = (const struct vnode *)(t->buf + L_NODE);
	struct vnode *wn = (struct vnode *)(t->buf + L_NODEW);

	if (!hint || !seen)
		fatal("allocating hints", ENOMEM);
	for (uint64_t k = 0; k < t->l.keys; k++)
		hint[k] = t->l.kv_roots + k * t->l.node_size;
	ycsb_zipf_init(&z, t->l.keys, t->o->theta, t->o->theta == YCSB_ZIPF_CONSTANT, mix64(t->id));
	for (uint64_t i = 0; !time_up(t, i, t0); i++) {
		enum ycsb_op op = ycsb_next_op(&z, t->o->wl);
		uint64_t k = ycsb_zipf_next(&z), a0 = now_ns(), reads = 0, tag;

		if (t->o->ms_hints && !(seen[k / 64] & 1ull << (k % 64))) { /* first touch: the tail from the MS */
			struct msg m;

			m = rpc_arg(t, REQ_HINT, k);
			if (m.status) {
				fprintf(stderr, "swordbox-wl: the metadata server refused a hint for key %llu: %s\n",
					(unsigned long long)k, strerror((int)m.status));
				exit(1);
			}
			hint[k] = m.a;
			seen[k / 64] |= 1ull << (k % 64);
			t->hint_rpcs++;
		}
		if (op == YCSB_READ) {
			long mis = -1;

			tag = kv_walk(t, k, &hint[k], &reads);
			for (uint32_t b = 0; b < t->l.value_size && mis < 0; b++)
				if (rn->value[b] != pattern_byte(value_seed(k, tag), b))
					mis = b;
			if (mis >= 0) {
				fprintf(stderr, "swordbox-wl: get key %llu: version %llx value byte %ld wrong\n",
					(unsigned long long)k, (unsigned long long)tag, mis);
				t->errors++;
			}
			lat_add(&t->lat, &t->nlat, now_ns() - a0);
			t->gets++;
			kv_log(t, 'G', k, tag, a0, now_ns(), reads);
		} else {
			uint64_t node = alloc_remote(t, t->l.node_size);

			tag = t->id << 32 | ++seq;
			memset(wn, 0, t->l.node_size);
			wn->key = k;
			wn->tag = tag;
			for (uint32_t b = 0; b < t->l.value_size; b++)
				wn->value[b] = pattern_byte(value_seed(k, tag), b);
			post(t, RNIC_WR_WRITE, L_NODEW, t->l.node_size, node, t->l.rkey, 0, 0); /* the new version */
			for (;;) { /* link it: CAS the tail's next pointer from 0 */
				uint64_t old = cas(t, hint[k], t->l.rkey, 0, node);

				if (old == 0)
					break;
				t->retries++;
				hint[k] = old;
				kv_walk(t, k, &hint[k], &reads);
			}
			hint[k] = node;
			lat_add(&t->lat2, &t->nlat2, now_ns() - a0);
			t->puts++;
			kv_log(t, 'P', k, tag, a0, now_ns(), reads);
		}
		t->reads += reads;
	}
	free(hint);
	free(seen);
	return NULL;
}

/* ---- btree (Sherman) ---- */

static uint64_t bt_lock_addr(const struct thr *t, uint64_t page)
{
	return t->l.lock_addr + 8 * (mix64(page) % t->l.nlocks);
}

/* Sherman's node-local lock table with hand-over (--hand-over N): the threads of this process
 * queue on a mutex per lock word before the remote CAS; a releaser with a local waiter passes the
 * remote lock on without the WRITE 0 (its page WRITE completed first), at most N times in a row,
 * then releases it remotely so that other nodes get their turn. NULL: every acquire is a CAS. */
struct local_lock {
	pthread_mutex_t m;
	uint32_t waiters; /* atomic: threads queued on m */
	int held;	  /* under m: this process holds the remote lock word */
	unsigned handed;  /* under m: hand-overs since the remote acquire */
};
static struct local_lock *local_locks;
static unsigned hand_over_max;

static void bt_lock(struct thr *t, uint64_t page)
{
	struct local_lock *e = local_locks ? &local_locks[mix64(page) % t->l.nlocks] : NULL;

	if (e) {
		__atomic_add_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&e->m);
		__atomic_sub_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
		if (e->held) { /* handed over: the remote lock is already this process's */
			t->handovers++;
			return;
		}
	}
	while (cas(t, bt_lock_addr(t, page), t->l.lock_rkey, 0, t->id | 1ull << 63)) {
		t->failed_cas++;
		check_stop(t, "acquiring a page lock");
	}
	if (e) {
		e->held = 1;
		e->handed = 0;
	}
}

/* Release page's lock: WRITE 0 behind the writes already posted (or hand it over), wait for all. */
static void bt_release(struct thr *t, uint64_t page)
{
	struct local_lock *e = local_locks ? &local_locks[mix64(page) % t->l.nlocks] : NULL;

	if (e && e->handed < hand_over_max && __atomic_load_n(&e->waiters, __ATOMIC_SEQ_CST)) {
		e->handed++;
		quiet(t);
		pthread_mutex_unlock(&e->m);
		return;
	}
	post(t, RNIC_WR_WRITE, L_ZERO, 8, bt_lock_addr(t, page), t->l.lock_rkey, 0, 0);
	quiet(t);
	if (e) {
		e->held = 0;
		pthread_mutex_unlock(&e->m);
	}
}

/* READ a page whole (front == rear) into loff. */
static struct bt_page *bt_read(struct thr *t, uint32_t loff, uint64_t page)
{
	struct bt_page *p = (struct bt_page *)(t->buf + loff);

	for (;;) {
		rd(t, loff, PAGE_SIZE_B, page);
		t->reads++;
		if (p->front == p->rear)
			return p;
		t->retries++;
	}
}

static uint64_t bt_root(struct thr *t)
{
	rd(t, L_U64, 8, t->l.super);
	return *(volatile uint64_t *)(t->buf + L_U64);
}

static uint64_t bt_child(const struct bt_page *p, uint64_t key)
{
	uint64_t c = p->leftmost;

	for (uint32_t i = 0; i < p->nkeys && p->e[i].k <= key; i++)
		c = p->e[i].v;
	return c;
}

/* The page at `level` whose range holds key, read into L_PAGE (B-link: right siblings followed). */
static uint64_t bt_descend(struct thr *t, uint32_t level, uint64_t key)
{
	uint64_t a = bt_root(t);

	for (;;) {
		struct bt_page *p = bt_read(t, L_PAGE, a);

		if (key < p->lo) { /* a page's low fence never changes: a stale path, start again */
			a = bt_root(t);
			continue;
		}
		if (key >= p->hi && p->sibling) {
			a = p->sibling;
			continue;
		}
		if (p->level == level)
			return a;
		if (p->level < level) {
			fprintf(stderr, "swordbox-wl: btree: descending to level %u met a page of level %u\n", level, p->level);
			exit(1);
		}
		a = bt_child(p, key);
	}
}

static int bt_lookup(struct thr *t, uint64_t key, uint64_t *val)
{
	const struct bt_page *p;

	bt_descend(t, 0, key);
	p = (const struct bt_page *)(t->buf + L_PAGE);
	for (uint32_t i = 0; i < p->nkeys; i++)
		if (p->e[i].k == key) {
			*val = p->e[i].v;
			return 1;
		}
	return 0;
}

static void bt_put_entry(struct bt_page *p, uint64_t key, uint64_t val)
{
	uint32_t i = 0;

	while (i < p->nkeys && p->e[i].k < key)
		i++;
	memmove(&p->e[i + 1], &p->e[i], (p->nkeys - i) * sizeof(p->e[0]));
	p->e[i].k = key;
	p->e[i].v = val;
	p->nkeys++;
}

/* Insert (key, val) into the page of `level` holding key; splits go up a level. */
static void bt_insert(struct thr *t, uint32_t level, uint64_t key, uint64_t val)
{
	uint64_t a = bt_descend(t, level, key);
	struct bt_page *p;
	int present = 0;

	for (;;) { /* lock the page, READ it, move right while the key is beyond it */
		bt_lock(t, a);
		p = bt_read(t, L_PAGE2, a);
		if (key >= p->hi || key < p->lo) {
			uint64_t next = key >= p->hi ? p->sibling : 0;

			bt_release(t, a);
			a = next ? next : bt_descend(t, level, key);
			continue;
		}
		break;
	}
	for (uint32_t i = 0; i < p->nkeys && !present; i++) {
		if (p->e[i].k == key) { /* present: the value is rewritten */
			p->e[i].v = val;
			present = 1;
		}
	}
	if (present || p->nkeys < BT_MAX) {
		if (!present)
			bt_put_entry(p, key, val);
		p->front++;
		p->rear = p->front;
		post(t, RNIC_WR_WRITE, L_PAGE2, PAGE_SIZE_B, a, t->l.rkey, 0, 0);
		bt_release(t, a); /* the unlock batched behind the page */
		return;
	}
	/* split: the upper half to a new right sibling */
	{
		struct bt_page *r = (struct bt_page *)(t->buf + L_PAGE3);
		uint64_t ra = alloc_remote(t, PAGE_SIZE_B), sep;
		uint32_t mid = p->nkeys / 2;

		memset(r, 0, sizeof(*r));
		r->level = p->level;
		sep = p->e[mid].k;
		if (p->level == 0) {
			r->nkeys = p->nkeys - mid;
			memcpy(r->e, &p->e[mid], r->nkeys * sizeof(p->e[0]));
		} else {
			r->leftmost = p->e[mid].v;
			r->nkeys = p->nkeys - mid - 1;
			memcpy(r->e, &p->e[mid + 1], r->nkeys * sizeof(p->e[0]));
		}
		p->nkeys = mid;
		r->lo = sep;
		r->hi = p->hi;
		r->sibling = p->sibling;
		p->hi = sep;
		p->sibling = ra;
		bt_put_entry(key < sep ? p : r, key, val);
		r->front = r->rear = 1;
		p->front++;
		p->rear = p->front;
		post(t, RNIC_WR_WRITE, L_PAGE3, PAGE_SIZE_B, ra, t->l.rkey, 0, 0); /* the sibling before the link */
		if (bt_root(t) == a) { /* the root split (it changes only under its lock): a new root above */
			struct bt_page *n = (struct bt_page *)(t->buf + L_PAGE4);
			uint64_t na = alloc_remote(t, PAGE_SIZE_B);

			memset(n, 0, sizeof(*n));
			n->level = p->level + 1;
			n->hi = UINT64_MAX;
			n->leftmost = a;
			n->nkeys = 1;
			n->e[0].k = sep;
			n->e[0].v = ra;
			n->front = n->rear = 1;
			post(t, RNIC_WR_WRITE, L_PAGE4, PAGE_SIZE_B, na, t->l.rkey, 0, 0);
			post(t, RNIC_WR_WRITE, L_PAGE2, PAGE_SIZE_B, a, t->l.rkey, 0, 0);
			*(volatile uint64_t *)(t->buf + L_U64) = na;
			post(t, RNIC_WR_WRITE, L_U64, 8, t->l.super, t->l.rkey, 0, 0);
			bt_release(t, a);
			return;
		}
		post(t, RNIC_WR_WRITE, L_PAGE2, PAGE_SIZE_B, a, t->l.rkey, 0, 0);
		bt_release(t, a);
		bt_insert(t, level + 1, sep, ra);
	}
}

/* This thread's i-th key: distinct across threads (a bijection of id and i), never 0 or ~0. */
static uint64_t bt_key(const struct thr *t, uint64_t i)
{
	uint64_t k = mix64(t->id << 32 | i);

	return k == 0 || k == UINT64_MAX ? 1 + (t->id << 32 | i) : k;
}

static void *bt_thread(void *arg)
{
	struct thr *t = arg;
	uint64_t seed = mix64(t->id ^ 0x5eed), t0 = now_ns(), v;

	for (uint64_t i = 0; !time_up(t, i, t0); i++) {
		uint64_t a0 = now_ns();

		if (ycsb_rand01(&seed) < t->o->insert_share || t->nmykeys == 0) {
			uint64_t k = bt_key(t, t->nmykeys);

			bt_insert(t, 0, k, bt_value(k));
			t->nmykeys++;
			t->inserts++;
			lat_add(&t->lat2, &t->nlat2, now_ns() - a0);
		} else { /* one of this thread's keys (must be there) or, every 4th, any key */
			int any = ycsb_rand64(&seed) % 4 == 0;
			uint64_t k = any ? ycsb_rand64(&seed) : bt_key(t, ycsb_rand64(&seed) % t->nmykeys);
			int hit = bt_lookup(t, k, &v);

			if (!any && (!hit || v != bt_value(k))) {
				fprintf(stderr, "swordbox-wl: btree: inserted key %llx %s\n", (unsigned long long)k,
					hit ? "has a wrong value" : "not found");
				t->errors++;
			}
			t->found += hit;
			t->lookups++;
			lat_add(&t->lat, &t->nlat, now_ns() - a0);
		}
	}
	for (uint64_t i = 0; i < t->nmykeys; i++) { /* every key inserted is found */
		uint64_t k = bt_key(t, i);

		if (!bt_lookup(t, k, &v) || v != bt_value(k)) {
			if (t->errors++ < 10)
				fprintf(stderr, "swordbox-wl: btree: final lookup of key %llx failed\n", (unsigned long long)k);
		}
	}
	return NULL;
}

/* ---- client driver ---- */

static double pct(uint64_t *a, uint64_t n, double p)
{
	if (!n)
		return 0;
	return (double)a[(uint64_t)((double)(n - 1) * p)] / 1e3;
}

static uint64_t *merge_lat(struct thr *t, unsigned n, int second, uint64_t *count)
{
	uint64_t total = 0, *all;

	for (unsigned i = 0; i < n; i++)
		total += second ? t[i].nlat2 : t[i].nlat;
	all = malloc((total + 1) * sizeof(*all));
	if (!all)
		fatal("allocating latency samples", ENOMEM);
	total = 0;
	for (unsigned i = 0; i < n; i++) {
		memcpy(all + total, second ? t[i].lat2 : t[i].lat, (second ? t[i].nlat2 : t[i].nlat) * sizeof(*all));
		total += second ? t[i].nlat2 : t[i].nlat;
	}
	qsort(all, total, sizeof(*all), cmp_u64);
	*count = total;
	return all;
}

static int cmd_client(int argc, char **argv, int mode)
{
	static const struct option lopts[] = { { "peer-file", 1, 0, 'P' }, { "threads", 1, 0, 'T' },
					       { "ops", 1, 0, 'n' },	   { "seconds", 1, 0, 's' },
					       { "dist", 1, 0, 'd' },	   { "theta", 1, 0, 't' },
					       { "workload", 1, 0, 'w' },  { "log", 1, 0, 'l' },
					       { "insert-share", 1, 0, 'i' }, { "hand-over", 1, 0, 'H' },
					       { "ms-hints", 0, 0, 'M' },
					       { "help", 0, 0, 'h' },
					       { 0, 0, 0, 0 } };
	struct opts o = { .threads = 1, .ops = 1000, .theta = YCSB_ZIPF_CONSTANT, .insert_share = 0.5, .zipf = 1 };
	const char *name = mode == MODE_LOCK ? "lock" : mode == MODE_KV ? "kv" : "btree";
	struct rnic_ctx *ctx;
	struct thr *t;
	pthread_t *th;
	struct rnic_mr mr;
	uint8_t *buf;
	uint32_t pd;
	uint64_t tx0, fr0, t0, wall, sum[12] = { 0 }, handovers = 0, hint_rpcs = 0;
	char go[512];
	int c, ret, rc = 0, dist_set = 0, wl_set = 0, share_set = 0;

	o.wl = ycsb_workload("A");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", lopts, NULL)) != -1) {
		switch (c) {
		case 'P': o.peer = optarg; break;
		case 'T': o.threads = (unsigned)num(optarg, "--threads", 64); break;
		case 'n': o.ops = num(optarg, "--ops", 1ull << 40); break;
		case 's': o.seconds = dbl(optarg, "--seconds"); break;
		case 'd':
			if (strcmp(optarg, "zipf") && strcmp(optarg, "uniform"))
				die("--dist must be uniform or zipf");
			o.zipf = !strcmp(optarg, "zipf");
			dist_set = 1;
			break;
		case 't': o.theta = dbl(optarg, "--theta"); break;
		case 'w':
			if (!(o.wl = ycsb_workload(optarg)))
				die("--workload must be A, B, C or U");
			wl_set = 1;
			break;
		case 'l': o.log = optarg; break;
		case 'M': o.ms_hints = 1; break;
		case 'H': hand_over_max = (unsigned)num(optarg, "--hand-over", 1000); break;
		case 'i': o.insert_share = dbl(optarg, "--insert-share"); share_set = 1; break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad_option(c, argv, "swordbox-wl --help");
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (swordbox-wl --help)", argv[optind]);
	if (mode != MODE_LOCK && dist_set)
		die("--dist goes with lock (kv draws YCSB's zipfian keys; btree inserts its own keys)");
	if (mode != MODE_KV && (o.log || wl_set || o.ms_hints))
		die("--workload, --log and --ms-hints go with kv");
	if (mode != MODE_BTREE && (share_set || hand_over_max))
		die("--insert-share and --hand-over go with btree");
	if (!o.peer)
		die("%s needs --peer-file F (the server's conn= lines, one per thread)", name);
	if (!o.threads)
		die("--threads must be 1..64");
	if (!(o.theta > 0 && o.theta < 1))
		die("--theta must be in (0, 1)");
	if (!(o.insert_share >= 0 && o.insert_share <= 1))
		die("--insert-share must be in [0, 1]");
	if (o.seconds < 0 || (o.seconds == 0 && o.ops == 0))
		die("--ops or --seconds must be positive");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	ctx = open_dev();
	buf = xmap((size_t)LBUF * o.threads);
	if ((ret = rnic_alloc_pd(ctx, &pd)))
		fatal("alloc PD", ret);
	if ((ret = rnic_reg_mr(ctx, pd, buf, (uint64_t)LBUF * o.threads, RNIC_ACCESS_ALL, &mr)))
		fatal("register MR", ret);
	t = calloc(o.threads, sizeof(*t));
	th = calloc(o.threads, sizeof(*th));
	for (unsigned i = 0; i < o.threads; i++) {
		t[i].idx = i;
		t[i].id = ((uint64_t)ctx->info.node_id << 24 | ((uint64_t)getpid() & 0xffff) << 8 | i) & 0x7fffffff;
		t[i].ctx = ctx;
		t[i].o = &o;
		t[i].buf = buf + (size_t)LBUF * i;
		t[i].lkey = mr.lkey;
		t[i].cq = rnic_create_cq(ctx, 8);
		t[i].qp = t[i].cq ? rnic_create_qp(ctx, pd, t[i].cq, t[i].cq, 6, 2) : NULL;
		if (!t[i].qp)
			fatal("create CQ and QP", errno);
		t[i].me = (struct rnic_conn){ ctx->info.node_id, t[i].qp->qpn, rnic_random_psn(), mr.rkey, (uintptr_t)t[i].buf,
					      LBUF };
		conn_read(o.peer, i, &t[i].peer);
		conn_print(i, &t[i].me);
		if ((ret = rnic_qp_connect(t[i].qp, &t[i].me, &t[i].peer, NULL)))
			fatal("connecting a QP", ret);
	}
	snprintf(go, sizeof(go), "%s.go", o.peer);
	if (wait_file(go, 120))
		return 1;
	for (unsigned i = 0; i < o.threads; i++) {
		struct msg m = rpc(&t[i], REQ_HELLO);

		t[i].l = m.l;
		if ((int)m.l.mode != mode) {
			fprintf(stderr, "swordbox-wl: the server runs another workload (mode %u, this is %s)\n", m.l.mode, name);
			return 1;
		}
		if (mode != MODE_KV && !m.l.nlocks) {
			fprintf(stderr, "swordbox-wl: the server has no lock words\n");
			return 1;
		}
	}
	if (hand_over_max) {
		local_locks = calloc(t[0].l.nlocks, sizeof(*local_locks));
		if (!local_locks)
			fatal("allocating the local lock table", ENOMEM);
		for (uint32_t i = 0; i < t[0].l.nlocks; i++)
			pthread_mutex_init(&local_locks[i].m, NULL);
	}
	tx0 = counter(ctx, RNIC_CNT_TX_BYTES);
	fr0 = counter(ctx, RNIC_CNT_TX_FRAMES);
	t0 = now_ns();
	for (unsigned i = 0; i < o.threads; i++)
		if (pthread_create(&th[i], NULL, mode == MODE_LOCK ? lock_thread : mode == MODE_KV ? kv_thread : bt_thread,
				   &t[i]))
			fatal("starting a thread", EAGAIN);
	for (unsigned i = 0; i < o.threads; i++)
		pthread_join(th[i], NULL);
	wall = now_ns() - t0;
	tx0 = counter(ctx, RNIC_CNT_TX_BYTES) - tx0;
	fr0 = counter(ctx, RNIC_CNT_TX_FRAMES) - fr0;
	for (unsigned i = 0; i < o.threads; i++) {
		handovers += t[i].handovers;
		hint_rpcs += t[i].hint_rpcs;
	}
	for (unsigned i = 0; i < o.threads; i++) {
		uint64_t v[12] = { t[i].ops, t[i].acquires, t[i].failed_cas, t[i].increments, t[i].reads, t[i].retries,
				   t[i].gets, t[i].puts, t[i].inserts, t[i].lookups, t[i].found, t[i].errors };

		for (int k = 0; k < 12; k++)
			sum[k] += v[k];
	}
	{
		uint64_t n1, n2, *l1 = merge_lat(t, o.threads, 0, &n1), *l2 = merge_lat(t, o.threads, 1, &n2);
		uint64_t done = mode == MODE_LOCK ? sum[1] : mode == MODE_KV ? sum[6] + sum[7] : sum[8] + sum[9];
		double secs = (double)wall / 1e9, per = done ? 1.0 / (double)done : 0;

		if (mode == MODE_LOCK)
			printf("lock=done node=%u threads=%u acquires=%llu increments=%llu failed_cas=%llu "
			       "failed_per_acquire=%.3f acquires_per_s=%.1f p50_us=%.1f p99_us=%.1f tx_bytes_per_op=%.1f "
			       "tx_frames_per_op=%.2f seconds=%.3f\n",
			       ctx->info.node_id, o.threads, (unsigned long long)sum[1], (unsigned long long)sum[3],
			       (unsigned long long)sum[2], (double)sum[2] * per, (double)done / secs, pct(l1, n1, 0.5),
			       pct(l1, n1, 0.99), (double)tx0 * per, (double)fr0 * per, secs);
		else if (mode == MODE_KV)
			printf("kv=done node=%u threads=%u workload=%c gets=%llu puts=%llu ops_per_s=%.1f reads_per_op=%.3f "
			       "cas_retries_per_put=%.3f hint_rpcs=%llu get_p50_us=%.1f get_p99_us=%.1f put_p50_us=%.1f put_p99_us=%.1f "
			       "tx_bytes_per_op=%.1f errors=%llu seconds=%.3f\n",
			       ctx->info.node_id, o.threads, o.wl->name, (unsigned long long)sum[6], (unsigned long long)sum[7],
			       (double)done / secs, (double)sum[4] * per, sum[7] ? (double)sum[5] / (double)sum[7] : 0,
			       (unsigned long long)hint_rpcs,
			       pct(l1, n1, 0.5), pct(l1, n1, 0.99), pct(l2, n2, 0.5), pct(l2, n2, 0.99), (double)tx0 * per,
			       (unsigned long long)sum[11], secs);
		else
			printf("btree=done node=%u threads=%u inserts=%llu lookups=%llu found=%llu ops_per_s=%.1f "
			       "reads_per_op=%.2f failed_cas=%llu handovers=%llu torn_reads=%llu lookup_p50_us=%.1f lookup_p99_us=%.1f "
			       "insert_p50_us=%.1f insert_p99_us=%.1f tx_bytes_per_op=%.1f errors=%llu seconds=%.3f\n",
			       ctx->info.node_id, o.threads, (unsigned long long)sum[8], (unsigned long long)sum[9],
			       (unsigned long long)sum[10], (double)done / secs, (double)sum[4] * per,
			       (unsigned long long)sum[2], (unsigned long long)handovers, (unsigned long long)sum[5],
			       pct(l1, n1, 0.5), pct(l1, n1, 0.99),
			       pct(l2, n2, 0.5), pct(l2, n2, 0.99), (double)tx0 * per, (unsigned long long)sum[11], secs);
		free(l1);
		free(l2);
	}
	if (o.log) {
		FILE *f = fopen(o.log, "w");

		if (!f) {
			fprintf(stderr, "swordbox-wl: cannot write %s: %s\n", o.log, strerror(errno));
			return 1;
		}
		fprintf(f, "# node=%u pid=%d\n", ctx->info.node_id, (int)getpid());
		for (unsigned i = 0; i < o.threads; i++)
			if (t[i].loglen)
				fwrite(t[i].logbuf, 1, t[i].loglen, f);
		rc |= fclose(f) != 0;
	}
	fflush(stdout);
	return rc || sum[11] ? 1 : 0;
}

/* ---- kv-check ---- */

struct crec {
	uint64_t tag, key, pos;
	int used;
};

struct ctab {
	struct crec *s;
	uint64_t cap;
};

static struct crec *ctab_find(struct ctab *h, uint64_t tag, int insert)
{
	uint64_t i = mix64(tag) & (h->cap - 1);

	for (;; i = (i + 1) & (h->cap - 1)) {
		if (!h->s[i].used) {
			if (!insert)
				return NULL;
			h->s[i].used = 1;
			h->s[i].tag = tag;
			return &h->s[i];
		}
		if (h->s[i].tag == tag)
			return insert ? NULL : &h->s[i]; /* insert of a present tag: NULL (a duplicate) */
	}
}

struct op {
	char kind;
	uint64_t key, tag, t0, t1, pos;
	unsigned thread;
};

static int cmp_t1(const void *a, const void *b)
{
	const struct op *x = a, *y = b;

	return x->key != y->key ? (x->key < y->key ? -1 : 1) : x->t1 < y->t1 ? -1 : x->t1 > y->t1;
}

static int cmd_kv_check(int argc, char **argv)
{
	const char *chain = NULL;
	struct ctab h = { 0 };
	uint64_t nchain = 0, bad = 0, nputs = 0, gets = 0, stale = 0, backwards = 0;
	char line[256];
	FILE *f;
	int i = 1;

	if (argc > 1 && !strcmp(argv[1], "--help")) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "--chain")) {
		chain = argv[2];
		i = 3;
	}
	if (!chain || i >= argc)
		die("kv-check needs --chain FILE and at least one LOG (swordbox-wl --help)");
	if (!(f = fopen(chain, "r")))
		die("cannot read %s: %s", chain, strerror(errno));
	while (fgets(line, sizeof(line), f))
		nchain++;
	h.cap = 1024;
	while (h.cap < nchain * 2 + 2)
		h.cap *= 2;
	h.s = calloc(h.cap, sizeof(*h.s));
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long k, p, tag;
		struct crec *r;

		if (sscanf(line, "c %llu %llu %llx", &k, &p, &tag) != 3)
			continue;
		if (tag == 0) /* a chain's first version */
			continue;
		if (!(r = ctab_find(&h, tag, 1))) {
			printf("kvcheck_violation=duplicate_link tag=%llx key=%llu\n", tag, k);
			bad++;
			continue;
		}
		r->key = k;
		r->pos = p;
	}
	fclose(f);
	for (; i < argc; i++) {
		struct op *ops = NULL;
		uint64_t n = 0, cap = 0;

		if (!(f = fopen(argv[i], "r")))
			die("cannot read %s: %s", argv[i], strerror(errno));
		while (fgets(line, sizeof(line), f)) {
			unsigned long long k, tag, t0, t1, walked;
			unsigned thr;
			char kind;
			struct op o;
			struct crec *r;

			if (line[0] == '#' ||
			    sscanf(line, "%c %llu %llx %llu %llu %u %llu", &kind, &k, &tag, &t0, &t1, &thr, &walked) != 7)
				continue;
			o = (struct op){ kind, k, tag, t0, t1, 0, thr };
			r = tag ? ctab_find(&h, tag, 0) : NULL;
			if (tag && (!r || r->key != k)) {
				printf("kvcheck_violation=%s kind=%c key=%llu tag=%llx\n", r ? "wrong_key" : "not_linked", kind, k, tag);
				bad++;
				continue;
			}
			o.pos = r ? r->pos : 0;
			if (kind == 'P') {
				nputs++;
			} else {
				gets++;
			}
			if (n == cap) {
				cap = cap ? cap * 2 : 4096;
				ops = realloc(ops, cap * sizeof(*ops));
				if (!ops)
					fatal("allocating the log", ENOMEM);
			}
			ops[n++] = o;
		}
		fclose(f);
		/* per thread and key, in program order: versions never go back, a put is beyond what came before */
		for (uint64_t a = 0; a < n; a++) {
			for (uint64_t b = a + 1; b < n; b++) {
				if (ops[b].thread != ops[a].thread || ops[b].key != ops[a].key)
					continue;
				if (ops[b].kind == 'P' ? ops[b].pos <= ops[a].pos : ops[b].pos < ops[a].pos) {
					if (backwards++ < 10)
						printf("kvcheck_violation=backwards key=%llu thread=%u %c pos %llu then %c pos %llu\n",
						       (unsigned long long)ops[a].key, ops[a].thread, ops[a].kind,
						       (unsigned long long)ops[a].pos, ops[b].kind, (unsigned long long)ops[b].pos);
				}
				break; /* the next op of this thread on this key: pairwise by induction */
			}
		}
		/* one clock (one node): a get is not older than any put of the log that completed before it began */
		qsort(ops, n, sizeof(*ops), cmp_t1);
		for (uint64_t a = 0; a < n; a++) {
			if (ops[a].kind != 'G')
				continue;
			for (uint64_t b = 0; b < n; b++) {
				if (ops[b].key != ops[a].key || ops[b].kind != 'P')
					continue;
				if (ops[b].t1 >= ops[a].t0)
					continue;
				if (ops[b].pos > ops[a].pos && stale++ < 10)
					printf("kvcheck_violation=stale_read key=%llu get_pos=%llu put_pos=%llu\n",
					       (unsigned long long)ops[a].key, (unsigned long long)ops[a].pos,
					       (unsigned long long)ops[b].pos);
			}
		}
		free(ops);
	}
	bad += backwards + stale;
	printf("kvcheck=%s chain_versions=%llu puts=%llu gets=%llu backwards=%llu stale_reads=%llu violations=%llu\n",
	       bad ? "fail" : "ok", (unsigned long long)nchain, (unsigned long long)nputs, (unsigned long long)gets,
	       (unsigned long long)backwards, (unsigned long long)stale, (unsigned long long)bad);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	tool_prog = "swordbox-wl";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "server"))
		return cmd_server(argc - 1, argv + 1);
	if (!strcmp(argv[1], "lock"))
		return cmd_client(argc - 1, argv + 1, MODE_LOCK);
	if (!strcmp(argv[1], "kv"))
		return cmd_client(argc - 1, argv + 1, MODE_KV);
	if (!strcmp(argv[1], "btree"))
		return cmd_client(argc - 1, argv + 1, MODE_BTREE);
	if (!strcmp(argv[1], "kv-check"))
		return cmd_kv_check(argc - 1, argv + 1);
	die("unknown command '%s' (swordbox-wl --help)", argv[1]);
}
