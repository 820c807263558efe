// SPDX-License-Identifier: MIT
/*
 * rnic: the rackemu RNIC from the shell (docs/rnic-verbs.md). Every command prints key=value lines.
 *
 *   rnic info | counters
 *   rnic check                               every operation and refusal, two QPs of this node
 *   rnic bench [--ops LIST] [--sizes LIST] [--iters N] [--window W] [--server | --client HOST] [--port P]
 *   rnic faa --client HOST [--port P] --count K   FETCH_ADD K times on the server's counter
 *   rnic pmem --server | --client HOST ...        a WRITE (and FLUSH) into a persistent MR
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "librnic.h"
#include "rackemu/roce.h"
#include "tool.h"

static const char usage[] =
	"usage: rnic COMMAND [options]   (sizes take K and M suffixes)\n"
	"  info                 this node's RNIC: node, MAC, IPv4, capabilities, limits, timing model\n"
	"  counters             the device counters (key=value; root only: they count every user's traffic)\n"
	"  check                every verbs operation and every refusal between two QPs of this node\n"
	"                       (loopback through the device); one check=NAME ok=0|1 line each\n"
	"  bench [--ops LIST] [--sizes LIST] [--iters N] [--window W] [--rate-windows LIST]\n"
	"        [--server [--clients N] | --client HOST [--verify]] [--port P] [--peer-file F]\n"
	"        [--mtu M] [--timeout T] [--retry R]\n"
	"                       perftest-like latency (one WR at a time: wall and modeled, median) and\n"
	"                       bandwidth (W in flight) per op (write,read,send,faa,cas) and size, then the\n"
	"                       8-byte WRITE message rate per outstanding count. Without --server/--client\n"
	"                       between two QPs of this node; else against `rnic bench --server` on HOST\n"
	"                       (connection set-up over TCP port P, default 18515, as perftest). The server\n"
	"                       serves N clients on one MR whose first 8 bytes are a FETCH_ADD counter and\n"
	"                       prints it when all have hung up. --peer-file F exchanges the parameters\n"
	"                       through files instead of TCP (a harness relays the conn= lines): the client\n"
	"                       reads F, prints its own line and starts when F.go exists; the server prints\n"
	"                       one line per client, reads F.0, F.1, ... and stops when F.stop exists.\n"
	"                       --timeout/--retry: the QPs' transport timeout code and retry count\n"
	"  faa (--client HOST [--port P] | --peer-file F) --count K\n"
	"                       K FETCH_ADDs of 1 on the counter of `rnic bench --server` on HOST; prints the\n"
	"                       values seen (first, last) and the errors\n"
	"  xatomic (--client HOST [--port P] | --peer-file F) --count K [--window W]\n"
	"                       every atomic kind K times on the server's words (docs/rnic-verbs.md \"rnic\n"
	"                       xatomic\"): word 0 posted ADD 1, 1 fetching ADD 1, 2 XOR, 3 OR, 4 AND of this\n"
	"                       node's bit, 5 SWAP, 6 32-bit fetching ADD, 7 COMPARE_SWAP increments, 8 masked\n"
	"                       compare-swap increments of the low half; W posted in flight (non-blocking\n"
	"                       posting, then quiet). The server prints the words when it is done;\n"
	"                       `bench --server --cpu-adds N` also adds 1 to word 0 N times on its own CPU\n"
	"  pmem --server [--port P] [--len L]\n"
	"                       map L bytes (default 1M) of the node's persistent memory (/dev/rkpmem0),\n"
	"                       register them as a persistent MR and serve one `pmem --client` until it\n"
	"                       hangs up (docs/rnic-verbs.md \"Persistent memory regions\")\n"
	"  pmem --client HOST [--port P] --off O --len N [--seed S] [--flush]\n"
	"                       RDMA WRITE N bytes of pattern S at offset O of the server's persistent MR,\n"
	"                       then with --flush a FLUSH with persistence over them; one pmem_write line\n"
	"\n"
	"Defaults: --ops write,read,send,faa,cas --sizes 8,64,1K,4K,64K,1M --iters 200 --window 16\n"
	"--rate-windows 1,2,4,8,16,32,64. RNIC_SPIN_US sets how long waits spin before blocking.\n";

/* The server's words for `rnic xatomic` (offsets in 8-byte words of its MR) and their start values. */
enum { XW_ADD, XW_FADD, XW_XOR, XW_OR, XW_AND, XW_SWAP, XW_ADD32, XW_CAS, XW_MCSWAP, XW_COUNT };
static const uint64_t xw_init[XW_COUNT] = { 0, 0, 0, 0, ~0ull, 0, 0x5A5A5A5A00000000ull, 0, 0xABCD000000000000ull };

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern_byte(seed, i);
}

/* The first offset where p differs from pattern seed, or -1. */
static long mismatch(const uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern_byte(seed, i))
			return (long)i;
	return -1;
}

static void *xmap(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "rnic: cannot allocate %zu bytes: %s\n", n, strerror(errno));
		exit(1);
	}
	return p;
}

static struct rnic_ctx *open_dev(void)
{
	struct rnic_ctx *ctx = rnic_open(NULL);

	if (!ctx) {
		fprintf(stderr, "rnic: cannot open %s: %s (is the rackemu_rnic driver loaded and the node started with "
				"-device rackemu-rnic?)\n", RNIC_DEV_PATH, strerror(errno));
		exit(1);
	}
	return ctx;
}

static void fatal(const char *what, int err)
{
	fprintf(stderr, "rnic: %s: %s (dmesg has the driver's reason)\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

/* ---- one side: PD, buffer + MR, CQ, QP ---- */

struct side {
	struct rnic_ctx *ctx;
	uint32_t pd;
	uint8_t *buf;
	size_t len;
	struct rnic_mr mr;
	struct rnic_cq *cq;
	struct rnic_qp *qp;
	struct rnic_conn me;
};

/* A side whose MR is over buf (len bytes), or over fresh anonymous memory (buf NULL). */
static void side_init_buf(struct side *s, struct rnic_ctx *ctx, void *buf, size_t len, uint32_t psn)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->ctx = ctx;
	s->len = len;
	s->buf = buf ? buf : xmap(len);
	if ((ret = rnic_alloc_pd(ctx, &s->pd)))
		fatal("alloc PD", ret);
	if ((ret = rnic_reg_mr(ctx, s->pd, s->buf, len, RNIC_ACCESS_ALL, &s->mr)))
		fatal("register MR", ret);
	s->cq = rnic_create_cq(ctx, 10);
	if (!s->cq)
		fatal("create CQ", errno);
	s->qp = rnic_create_qp(ctx, s->pd, s->cq, s->cq, 8, 8);
	if (!s->qp)
		fatal("create QP", errno);
	s->me = (struct rnic_conn){ ctx->info.node_id, s->qp->qpn, psn, s->mr.rkey, (uintptr_t)s->buf, len };
}

static void side_init(struct side *s, struct rnic_ctx *ctx, size_t len, uint32_t psn)
{
	side_init_buf(s, ctx, NULL, len, psn);
}

static struct rnic_send_wqe wr(uint8_t op, uint64_t id, const struct side *s, uint64_t loff, uint32_t len,
			       uint64_t raddr, uint32_t rkey)
{
	struct rnic_send_wqe w;

	memset(&w, 0, sizeof(w));
	w.wr_id = id;
	w.opcode = op;
	w.flags = RNIC_WQE_F_SIGNALED;
	w.remote_addr = raddr;
	w.rkey = rkey;
	if (len || op == RNIC_WR_SEND || op == RNIC_WR_WRITE || op == RNIC_WR_READ) {
		w.num_sge = 1;
		w.sge[0] = (struct rnic_sge){ (uintptr_t)s->buf + loff, len, s->mr.lkey };
	}
	return w;
}

static struct rnic_recv_wqe rwr(uint64_t id, const struct side *s, uint64_t off, uint32_t len)
{
	struct rnic_recv_wqe r;

	memset(&r, 0, sizeof(r));
	r.wr_id = id;
	r.num_sge = 1;
	r.sge[0] = (struct rnic_sge){ (uintptr_t)s->buf + off, len, s->mr.lkey };
	return r;
}

/* One completion from cq within timeout_ms; status 0xff if none came. */
static struct rnic_cqe wait1(struct rnic_cq *cq, int timeout_ms)
{
	struct rnic_cqe c;
	int n = rnic_wait_cq(cq, &c, 1, timeout_ms);

	if (n != 1) {
		memset(&c, 0, sizeof(c));
		c.status = 0xff;
		c.vendor_err = (uint32_t)-n;
	}
	return c;
}

static void drain(struct rnic_cq *cq)
{
	struct rnic_cqe c[16];

	while (rnic_wait_cq(cq, c, 16, 20) > 0)
		;
}

/* ---- info, counters ---- */

static int cmd_info(void)
{
	struct rnic_ctx *ctx = open_dev();
	struct rnic_uinfo *i = &ctx->info;

	printf("node=%u version=0x%08x caps=0x%x flush=%d atomic_write=%d link=%d link_up=%u\n", i->node_id,
	       i->version, i->caps, !!(i->caps & RNIC_CAP_FLUSH), !!(i->caps & RNIC_CAP_ATOMIC_WRITE),
	       !!(i->caps & RNIC_CAP_LINK), i->link_up);
	printf("mac=%02x:%02x:%02x:%02x:%02x:%02x ipv4=%u.%u.%u.%u\n", i->mac[0], i->mac[1], i->mac[2], i->mac[3],
	       i->mac[4], i->mac[5], i->ipv4 >> 24, (i->ipv4 >> 16) & 255, (i->ipv4 >> 8) & 255, i->ipv4 & 255);
	printf("max_pd=%u max_mr=%u max_cq=%u max_qp=%u max_mtu=%u irq_vectors=%u\n", i->max_pd, i->max_mr, i->max_cq,
	       i->max_qp, i->max_mtu, i->irq_vectors);
	printf("link_mbps=%u hop_ns=%u nic_mhz=%u pcie_ns=%u pcie_mbps=%u\n", i->link_mbps, i->hop_ns, i->nic_mhz,
	       i->pcie_ns, i->pcie_mbps);
	rnic_close(ctx);
	return 0;
}

static int cmd_counters(void)
{
	static const char *const names[] = { RNIC_CNT_NAMES };
	struct rnic_ctx *ctx = open_dev();
	uint64_t c[RNIC_CNT_COUNT];
	int ret = rnic_counters(ctx, c);

	if (ret == -EPERM) {
		fprintf(stderr, "rnic: the device counters count every user's traffic: only root (CAP_SYS_ADMIN) may read "
				"them (docs/rnic-verbs.md \"Counters\")\n");
		exit(1);
	}
	if (ret)
		fatal("read counters", ret);
	for (unsigned i = 0; i < RNIC_CNT_COUNT; i++)
		printf("%s=%llu\n", names[i], (unsigned long long)c[i]);
	rnic_close(ctx);
	return 0;
}

/* ---- check ---- */

/* The device counters, or zeros where this user may not read them (only root may): the checks
 * that compare counters then check everything else. */
static int counters_readable;

static void counters(struct rnic_ctx *ctx, uint64_t c[RNIC_CNT_COUNT])
{
	if (rnic_counters(ctx, c))
		memset(c, 0, RNIC_CNT_COUNT * sizeof(*c));
}

struct pair {
	struct rnic_ctx *ctx;
	struct side a, b;
	uint32_t psn;
};

/* (Re)connect a and b to each other (RESET first: after an error both may be in ERR). */
static int pair_connect(struct pair *p, const struct rnic_conn_opts *o)
{
	struct rnic_cmd_modify_qp r = { .attr_mask = RNIC_QP_ATTR_STATE, .state = RNIC_QPS_RESET };
	int ret;

	drain(p->a.cq);
	drain(p->b.cq);
	rnic_modify_qp(p->a.qp, &r);
	rnic_modify_qp(p->b.qp, &r);
	p->psn = (p->psn + 0x12345) & 0xffffff;
	p->a.me.psn = p->psn;
	p->b.me.psn = (p->psn + 0x777) & 0xffffff;
	ret = rnic_qp_connect(p->a.qp, &p->a.me, &p->b.me, o);
	if (!ret)
		ret = rnic_qp_connect(p->b.qp, &p->b.me, &p->a.me, o);
	return ret;
}

/* Post w on a, wait for its CQE. */
static struct rnic_cqe run(struct pair *p, struct rnic_send_wqe w)
{
	int ret = rnic_post_send(p->a.qp, &w);

	if (ret) {
		struct rnic_cqe c = { .status = 0xfe, .vendor_err = (uint32_t)-ret };
		return c;
	}
	return wait1(p->a.cq, 5000);
}

static void check_data_path(struct pair *p)
{
	const uint32_t mtu = p->ctx->info.max_mtu;
	const uint32_t sizes[] = { 1, mtu - 1, mtu, mtu + 1, 1u << 20 };
	const size_t mrlen = p->b.len;
	struct rnic_cqe c, r;
	char name[64];
	long bad;

	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint32_t n = sizes[k];

		for (int where = 0; where < 2; where++) { /* the middle, and ending at the MR's last byte */
			uint64_t roff = where ? mrlen - n : mrlen / 2 - n / 2;
			uint64_t seed = k * 2 + (uint64_t)where + 1;
			const char *w = where ? "end" : "middle";

			/* WRITE a -> b */
			fill(p->a.buf, n, seed);
			memset(p->b.buf + roff, 0, n);
			c = run(p, wr(RNIC_WR_WRITE, 1, &p->a, 0, n, (uintptr_t)p->b.buf + roff, p->b.mr.rkey));
			bad = mismatch(p->b.buf + roff, n, seed);
			snprintf(name, sizeof(name), "write_%u_%s", n, w);
			check(name, c.status == RNIC_WC_SUCCESS && c.opcode == RNIC_CQE_OP_WRITE && bad < 0,
			      "status=%u opcode=%u first_bad=%ld modeled_ns=%llu", c.status, c.opcode, bad,
			      (unsigned long long)c.modeled_ns);

			/* READ b -> a */
			fill(p->b.buf + roff, n, seed + 100);
			memset(p->a.buf, 0, n);
			c = run(p, wr(RNIC_WR_READ, 2, &p->a, 0, n, (uintptr_t)p->b.buf + roff, p->b.mr.rkey));
			bad = mismatch(p->a.buf, n, seed + 100);
			snprintf(name, sizeof(name), "read_%u_%s", n, w);
			check(name, c.status == RNIC_WC_SUCCESS && c.opcode == RNIC_CQE_OP_READ && c.byte_len == n && bad < 0,
			      "status=%u byte_len=%u first_bad=%ld", c.status, c.byte_len, bad);

			/* SEND WITH IMMEDIATE a -> b, into a receive at roff */
			struct rnic_recv_wqe rv = rwr(77, &p->b, roff, n);
			struct rnic_send_wqe s = wr(RNIC_WR_SEND_IMM, 3, &p->a, 0, n, 0, 0);

			s.imm = 0xabcd0000u + n;
			fill(p->a.buf, n, seed + 200);
			memset(p->b.buf + roff, 0, n);
			rnic_post_recv(p->b.qp, &rv);
			c = run(p, s);
			r = wait1(p->b.cq, 5000);
			bad = mismatch(p->b.buf + roff, n, seed + 200);
			snprintf(name, sizeof(name), "send_imm_%u_%s", n, w);
			check(name, c.status == RNIC_WC_SUCCESS && r.status == RNIC_WC_SUCCESS && r.opcode == RNIC_CQE_OP_RECV &&
				    r.wr_id == 77 && r.byte_len == n && (r.flags & RNIC_CQE_F_WITH_IMM) && r.imm == s.imm && bad < 0,
			      "send_status=%u recv_status=%u recv_len=%u imm=0x%x first_bad=%ld", c.status, r.status,
			      r.byte_len, r.imm, bad);
		}
	}

	/* WRITE WITH IMMEDIATE consumes a zero-length receive */
	{
		struct rnic_recv_wqe rv;
		struct rnic_send_wqe s = wr(RNIC_WR_WRITE_IMM, 4, &p->a, 0, 100, (uintptr_t)p->b.buf, p->b.mr.rkey);

		memset(&rv, 0, sizeof(rv));
		rv.wr_id = 78;
		s.imm = 0x1234;
		fill(p->a.buf, 100, 9);
		rnic_post_recv(p->b.qp, &rv);
		c = run(p, s);
		r = wait1(p->b.cq, 5000);
		bad = mismatch(p->b.buf, 100, 9);
		check("write_imm", c.status == 0 && r.status == 0 && r.opcode == RNIC_CQE_OP_RECV_RDMA_IMM && r.imm == 0x1234 &&
				   bad < 0, "status=%u recv_status=%u recv_opcode=%u imm=0x%x first_bad=%ld", c.status, r.status,
		      r.opcode, r.imm, bad);
	}

	/* atomics on b's word at offset 64 */
	{
		volatile uint64_t *word = (volatile uint64_t *)(p->b.buf + 64);
		uint64_t *orig = (uint64_t *)p->a.buf;
		struct rnic_send_wqe s = wr(RNIC_WR_FETCH_ADD, 5, &p->a, 0, 8, (uintptr_t)word, p->b.mr.rkey);

		*word = 1000;
		s.swap_add = 5;
		c = run(p, s);
		check("fetch_add", c.status == 0 && c.opcode == RNIC_CQE_OP_FETCH_ADD && *orig == 1000 && *word == 1005,
		      "status=%u original=%llu now=%llu", c.status, (unsigned long long)*orig, (unsigned long long)*word);
		s = wr(RNIC_WR_CMP_SWAP, 6, &p->a, 0, 8, (uintptr_t)word, p->b.mr.rkey);
		s.compare = 1005;
		s.swap_add = 7;
		c = run(p, s);
		check("cmp_swap_hit", c.status == 0 && *orig == 1005 && *word == 7, "status=%u original=%llu now=%llu",
		      c.status, (unsigned long long)*orig, (unsigned long long)*word);
		s.compare = 1005;
		s.swap_add = 9;
		c = run(p, s);
		check("cmp_swap_miss", c.status == 0 && *orig == 7 && *word == 7, "status=%u original=%llu now=%llu",
		      c.status, (unsigned long long)*orig, (unsigned long long)*word);
		if (p->ctx->info.caps & RNIC_CAP_ATOMIC_WRITE) {
			s = wr(RNIC_WR_ATOMIC_WRITE, 7, &p->a, 0, 0, (uintptr_t)word, p->b.mr.rkey);
			s.swap_add = 0x1122334455667788ull;
			c = run(p, s);
			check("atomic_write", c.status == 0 && c.opcode == RNIC_CQE_OP_ATOMIC_WRITE && *word == 0x1122334455667788ull,
			      "status=%u now=0x%llx", c.status, (unsigned long long)*word);
		}
		if (p->ctx->info.caps & RNIC_CAP_FLUSH) {
			/* the target's counters say what FLUSH placed: global visibility counts the range,
			 * persistence also writes it back to the node's RAM file (docs/rnic.md "FLUSH") */
			uint64_t k0[RNIC_CNT_COUNT], k1[RNIC_CNT_COUNT], k2[RNIC_CNT_COUNT];
#define RNIC_DELTA(a, b, n) ((unsigned long long)((b)[RNIC_CNT_##n / 8] - (a)[RNIC_CNT_##n / 8]))

			counters(p->ctx, k0);
			s = wr(RNIC_WR_FLUSH, 8, &p->a, 0, 0, (uintptr_t)p->b.buf, p->b.mr.rkey);
			s.flush_type = ROCE_FETH_PLT_GLOBAL | (ROCE_FETH_SEL_RANGE << 4);
			s.flush_len = 4096;
			c = run(p, s);
			counters(p->ctx, k1);
			check("flush", c.status == 0 && c.opcode == RNIC_CQE_OP_FLUSH &&
					       (!counters_readable || (RNIC_DELTA(k0, k1, FLUSHES) == 1 &&
					       RNIC_DELTA(k0, k1, FLUSH_BYTES) == 4096 && RNIC_DELTA(k0, k1, PERSIST_BYTES) == 0)),
			      "status=%u opcode=%u flushes=+%llu flush_bytes=+%llu persist_bytes=+%llu", c.status, c.opcode,
			      RNIC_DELTA(k0, k1, FLUSHES), RNIC_DELTA(k0, k1, FLUSH_BYTES), RNIC_DELTA(k0, k1, PERSIST_BYTES));
			s.wr_id = 9;
			s.flush_type = ROCE_FETH_PLT_PERSIST | (ROCE_FETH_SEL_RANGE << 4);
			s.remote_addr = (uintptr_t)p->b.buf + 100;
			s.flush_len = 10000; /* over three pages of the MR's page list */
			c = run(p, s);
			counters(p->ctx, k2);
			/* the node's RAM is a file (memory-backend-file): every byte is written back */
			check("flush_persist", c.status == 0 && (!counters_readable || (RNIC_DELTA(k1, k2, FLUSHES) == 1 &&
						       RNIC_DELTA(k1, k2, FLUSH_BYTES) == 10000 &&
						       RNIC_DELTA(k1, k2, PERSIST_BYTES) == 10000)),
			      "status=%u flushes=+%llu flush_bytes=+%llu persist_bytes=+%llu", c.status,
			      RNIC_DELTA(k1, k2, FLUSHES), RNIC_DELTA(k1, k2, FLUSH_BYTES), RNIC_DELTA(k1, k2, PERSIST_BYTES));
#undef RNIC_DELTA
		}
	}
}

/* Remote violations: the NAK's status at a, b's memory unchanged, a WR behind it flushed. */
static void check_violations(struct pair *p)
{
	const size_t win = 65536, woff = p->b.len / 2;
	uint8_t *wbuf = p->b.buf + woff;
	struct rnic_mr good, ro, noatomic, otherpd;
	uint32_t pd2;
	struct {
		const char *what;
		uint8_t op;
		uint32_t *rkey;
		int64_t roff;
		uint32_t len;
		uint8_t status;
	} cases[] = {
		{ "bad_rkey", RNIC_WR_WRITE, NULL, 0, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "stale_rkey", RNIC_WR_WRITE, NULL, 0, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "past_end", RNIC_WR_WRITE, &good.rkey, (int64_t)win - 63, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "before_start", RNIC_WR_WRITE, &good.rkey, -1, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "write_read_only", RNIC_WR_WRITE, &ro.rkey, 0, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "other_pd", RNIC_WR_WRITE, &otherpd.rkey, 0, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "read_past_end", RNIC_WR_READ, &good.rkey, (int64_t)win - 10, 64, RNIC_WC_REM_ACCESS_ERR },
		{ "atomic_no_flag", RNIC_WR_FETCH_ADD, &noatomic.rkey, 0, 8, RNIC_WC_REM_ACCESS_ERR },
		{ "unaligned_atomic", RNIC_WR_FETCH_ADD, &good.rkey, 4, 8, RNIC_WC_REM_INV_REQ_ERR },
		{ "atomic_write_read_only", RNIC_WR_ATOMIC_WRITE, &ro.rkey, 0, 0, RNIC_WC_REM_ACCESS_ERR },
	};
	uint32_t stale, unknown = (RNIC_MAX_MR - 1) << 8 | 1;
	uint8_t *before = malloc(win + 128);
	char name[64];
	int ret;

	ret = rnic_reg_mr(p->ctx, p->b.pd, wbuf, win, RNIC_ACCESS_ALL, &good);
	ret = ret ? ret : rnic_reg_mr(p->ctx, p->b.pd, wbuf, win, RNIC_ACCESS_REMOTE_READ, &ro);
	ret = ret ? ret : rnic_reg_mr(p->ctx, p->b.pd, wbuf, win,
				      RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ, &noatomic);
	ret = ret ? ret : rnic_alloc_pd(p->ctx, &pd2);
	ret = ret ? ret : rnic_reg_mr(p->ctx, pd2, wbuf, win, RNIC_ACCESS_ALL, &otherpd);
	if (ret || !before) {
		check("violation_setup", 0, "err=%d", ret);
		return;
	}
	{ /* a stale key: register, deregister */
		struct rnic_mr t;

		rnic_reg_mr(p->ctx, p->b.pd, wbuf, win, RNIC_ACCESS_ALL, &t);
		stale = t.rkey;
		rnic_dereg_mr(p->ctx, &t);
	}
	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		uint32_t rkey = cases[k].rkey ? *cases[k].rkey : (k == 0 ? unknown : stale);
		struct rnic_send_wqe w = wr(cases[k].op, 9, &p->a, 0, cases[k].len, (uintptr_t)wbuf + cases[k].roff, rkey);
		struct rnic_send_wqe w2 = wr(RNIC_WR_WRITE, 10, &p->a, 0, 8, (uintptr_t)wbuf, good.rkey);
		struct rnic_cqe c1, c2;
		uint32_t sa, sb;

		if (pair_connect(p, NULL)) {
			check("violation_connect", 0, "case=%s", cases[k].what);
			continue;
		}
		w.swap_add = 1;
		fill(p->a.buf, 64, 1);
		memcpy(before, wbuf - 64, win + 128);
		rnic_post_send(p->a.qp, &w);
		rnic_post_send(p->a.qp, &w2);
		c1 = wait1(p->a.cq, 5000);
		c2 = wait1(p->a.cq, 5000);
		sa = rnic_qp_state(p->a.qp);
		sb = rnic_qp_state(p->b.qp);
		snprintf(name, sizeof(name), "refuse_%s", cases[k].what);
		check(name, c1.wr_id == 9 && c1.status == cases[k].status && c2.wr_id == 10 &&
				    c2.status == RNIC_WC_WR_FLUSH_ERR && !memcmp(before, wbuf - 64, win + 128) &&
				    sa == RNIC_QPS_ERR,
		      "status=%u (%s) vendor_err=0x%x next_status=%u target_unchanged=%d requester=%s responder=%s", c1.status,
		      rnic_wc_status_str(c1.status), c1.vendor_err, c2.status, !memcmp(before, wbuf - 64, win + 128),
		      rnic_qp_state_str(sa), rnic_qp_state_str(sb));
	}
	rnic_dereg_mr(p->ctx, &good);
	rnic_dereg_mr(p->ctx, &ro);
	rnic_dereg_mr(p->ctx, &noatomic);
	rnic_dereg_mr(p->ctx, &otherpd);
	rnic_dealloc_pd(p->ctx, pd2);
	free(before);
}

/* The extended atomics (the atomic unit) through the library's tracked posting: every op at 32 and
 * 64 bits with and without the old value, many outstanding then rnic_quiet, a fence, and the
 * refusals (the right status, nothing written, rnic_quiet reporting the error). */
static void check_xatomics(struct pair *p)
{
	static const char *const xop_name[ROCE_XOP_COUNT] = { "add", "swap", "xor", "and", "or", "mcswap" };
	volatile uint64_t *w64 = (volatile uint64_t *)(p->b.buf + 128);
	volatile uint32_t *w32 = (volatile uint32_t *)(p->b.buf + 136), *w32n = w32 + 1;
	uint64_t *res = (uint64_t *)(p->a.buf + 256);
	char name[64];
	int ret;

	if (!(p->ctx->info.caps & RNIC_CAP_XATOMIC)) {
		check("xatomic_cap", 0, "caps=0x%x: the device has no atomic unit", p->ctx->info.caps);
		return;
	}
	pair_connect(p, NULL);
	for (unsigned op = 0, k = 1; op < ROCE_XOP_COUNT; op++)
		for (unsigned size = 8; size >= 4; size -= 4)
			for (int fetch = 1; fetch >= 0; fetch--, k++) {
				/* every case from a fresh value, with an operand that changes it */
				const uint64_t start = 0x9E3779B97F4A7C15ull * k ^ 0x00FF00FF00FF00FFull;
				uint64_t before, want, got;
				struct rnic_xatomic x = {
					.wr_id = 100 + op, .remote_addr = (uintptr_t)(size == 8 ? (void *)w64 : (void *)w32),
					.rkey = p->b.mr.rkey, .op = (uint8_t)op, .size = (uint8_t)size,
					.operand = 0xC2B2AE3D27D4EB4Full * k + 0x1234567, .mask = 0xFFFF0000FFFF0000ull,
					.result = fetch ? res : NULL, .result_lkey = p->a.mr.lkey,
				};
				uint64_t m = size == 8 ? ~0ull : 0xFFFFFFFFull, o = x.operand & m;

				if (size == 8)
					*w64 = start;
				else
					*w32 = (uint32_t)start;
				before = start & m;
				x.compare = before;
				*w32n = 0x5A5A5A5A;
				*res = 0xdeadbeefdeadbeefull;
				switch (op) {
				case ROCE_XOP_ADD: want = (before + o) & m; break;
				case ROCE_XOP_SWAP: want = o; break;
				case ROCE_XOP_XOR: want = before ^ o; break;
				case ROCE_XOP_AND: want = before & o; break;
				case ROCE_XOP_OR: want = before | o; break;
				default: want = ((before & ~x.mask) | (o & x.mask)) & m; break;
				}
				ret = rnic_post_xatomic(p->a.qp, &x, 5000);
				ret = ret ? ret : rnic_quiet(p->a.qp, 5000);
				got = size == 8 ? *w64 : *w32;
				snprintf(name, sizeof(name), "xatomic_%s%u%s", xop_name[op], size * 8, fetch ? "_fetch" : "");
				check(name,
				      ret == 0 && got == want && want != before && *w32n == 0x5A5A5A5A &&
					      (!fetch || (size == 8 ? *res : (*res & 0xFFFFFFFFull)) == before),
				      "err=%d before=0x%llx now=0x%llx want=0x%llx fetched=0x%llx", ret,
				      (unsigned long long)before, (unsigned long long)got, (unsigned long long)want,
				      (unsigned long long)*res);
			}
	{ /* many outstanding: 1000 posted adds with the SQ (256) and CQ (1024) as the only limits */
		uint64_t c0 = p->a.qp->done;

		*w64 = 0;
		ret = 0;
		for (unsigned i = 0; i < 1000 && !ret; i++) {
			struct rnic_xatomic x = { .wr_id = i, .remote_addr = (uintptr_t)w64, .rkey = p->b.mr.rkey,
						  .op = ROCE_XOP_ADD, .size = 8, .operand = i + 1 };

			ret = rnic_post_xatomic(p->a.qp, &x, 5000);
		}
		/* a fenced fetch: waits in the device for earlier atomics, sees them all */
		if (!ret) {
			struct rnic_xatomic x = { .wr_id = 1000, .remote_addr = (uintptr_t)w64, .rkey = p->b.mr.rkey,
						  .op = ROCE_XOP_ADD, .size = 8, .operand = 0, .result = res,
						  .result_lkey = p->a.mr.lkey };

			rnic_fence(p->a.qp);
			ret = rnic_post_xatomic(p->a.qp, &x, 5000);
		}
		ret = ret ? ret : rnic_quiet(p->a.qp, 20000);
		check("xatomic_many_outstanding_quiet", ret == 0 && *w64 == 500500 && *res == 500500 &&
								p->a.qp->done - c0 == 1001 && p->a.qp->posted == p->a.qp->done,
		      "err=%d sum=%llu fenced_fetch=%llu completed=%llu", ret, (unsigned long long)*w64,
		      (unsigned long long)*res, (unsigned long long)(p->a.qp->done - c0));
	}
	/* refusals: the target's NAK, the requester's status, nothing written; rnic_quiet says which */
	{
		struct rnic_mr noatomic;
		struct {
			const char *what;
			uint64_t off;
			uint8_t op, size;
			int noatomic;
			uint8_t status;
		} cases[] = {
			{ "unaligned64", 132, ROCE_XOP_ADD, 8, 0, RNIC_WC_REM_INV_REQ_ERR },
			{ "unaligned32", 134, ROCE_XOP_OR, 4, 0, RNIC_WC_REM_INV_REQ_ERR },
			{ "no_atomic_access", 128, ROCE_XOP_XOR, 8, 1, RNIC_WC_REM_ACCESS_ERR },
			{ "past_end", 0, ROCE_XOP_SWAP, 8, 0, RNIC_WC_REM_ACCESS_ERR },
			{ "bad_op", 128, ROCE_XOP_COUNT, 8, 0, RNIC_WC_LOC_QP_OP_ERR },
			{ "bad_size", 128, ROCE_XOP_ADD, 2, 0, RNIC_WC_LOC_QP_OP_ERR },
		};

		ret = rnic_reg_mr(p->ctx, p->b.pd, p->b.buf, 4096,
				  RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ, &noatomic);
		for (unsigned k = 0; !ret && k < sizeof(cases) / sizeof(cases[0]); k++) {
			uint64_t before = *w64;
			struct rnic_xatomic x = {
				.wr_id = 77, .remote_addr = (uintptr_t)p->b.buf + (cases[k].off ? cases[k].off : p->b.len),
				.rkey = cases[k].noatomic ? noatomic.rkey : p->b.mr.rkey, .op = cases[k].op,
				.size = cases[k].size, .operand = 1, .result = res, .result_lkey = p->a.mr.lkey,
			};
			int r;

			pair_connect(p, NULL);
			r = rnic_post_xatomic(p->a.qp, &x, 5000);
			r = r ? r : rnic_quiet(p->a.qp, 5000);
			snprintf(name, sizeof(name), "refuse_xatomic_%s", cases[k].what);
			check(name, r == -EIO && p->a.qp->first_error.status == cases[k].status &&
					    p->a.qp->first_error.wr_id == 77 && *w64 == before,
			      "err=%d status=%u (%s) vendor_err=0x%x", r, p->a.qp->first_error.status,
			      rnic_wc_status_str(p->a.qp->first_error.status), p->a.qp->first_error.vendor_err);
		}
		if (!ret)
			rnic_dereg_mr(p->ctx, &noatomic);
		else
			check("refuse_xatomic_setup", 0, "err=%d", ret);
	}
}

/* Local refusals and state rules on the data path. */
static void check_local(struct pair *p)
{
	struct rnic_send_wqe w;
	struct rnic_cqe c;
	struct rnic_conn_opts o = { .rnr_retry = 1, .min_rnr_timer = 1 };

	pair_connect(p, NULL);
	w = wr(RNIC_WR_WRITE, 20, &p->a, 0, 64, (uintptr_t)p->b.buf, p->b.mr.rkey);
	w.sge[0].lkey ^= 0x80; /* stale lkey */
	c = run(p, w);
	check("refuse_bad_lkey", c.status == RNIC_WC_LOC_PROT_ERR && c.vendor_err == RNIC_LERR_LKEY,
	      "status=%u vendor_err=%u", c.status, c.vendor_err);

	pair_connect(p, NULL);
	w = wr(RNIC_WR_WRITE, 21, &p->a, p->a.len - 8, 64, (uintptr_t)p->b.buf, p->b.mr.rkey);
	c = run(p, w);
	check("refuse_sge_bounds", c.status == RNIC_WC_LOC_PROT_ERR && c.vendor_err == RNIC_LERR_BOUNDS,
	      "status=%u vendor_err=%u", c.status, c.vendor_err);

	pair_connect(p, NULL);
	w = wr(0x3f, 22, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey);
	c = run(p, w);
	check("refuse_bad_opcode", c.status == RNIC_WC_LOC_QP_OP_ERR && c.vendor_err == RNIC_LERR_OPCODE,
	      "status=%u vendor_err=%u", c.status, c.vendor_err);

	pair_connect(p, NULL);
	w = wr(RNIC_WR_FETCH_ADD, 23, &p->a, 0, 4, (uintptr_t)p->b.buf, p->b.mr.rkey);
	c = run(p, w);
	check("refuse_atomic_sge_len", c.status == RNIC_WC_LOC_QP_OP_ERR && c.vendor_err == RNIC_LERR_LENGTH,
	      "status=%u vendor_err=%u", c.status, c.vendor_err);

	/* a QP in ERR flushes what is posted */
	pair_connect(p, NULL);
	{
		struct rnic_cmd_modify_qp e = { .attr_mask = RNIC_QP_ATTR_STATE, .state = RNIC_QPS_ERR };

		rnic_modify_qp(p->a.qp, &e);
		c = run(p, wr(RNIC_WR_WRITE, 24, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey));
		check("err_state_flushes", c.status == RNIC_WC_WR_FLUSH_ERR && c.wr_id == 24, "status=%u state=%s", c.status,
		      rnic_qp_state_str(rnic_qp_state(p->a.qp)));
	}

	/* RNR: a SEND with no receive posted, rnr_retry 1 */
	pair_connect(p, &o);
	c = run(p, wr(RNIC_WR_SEND, 25, &p->a, 0, 8, 0, 0));
	check("rnr_retry_exceeded", c.status == RNIC_WC_RNR_RETRY_EXC_ERR, "status=%u (%s)", c.status,
	      rnic_wc_status_str(c.status));

	/* transitions: RESET -> RTS is refused; RTR without its attributes is refused */
	{
		struct rnic_cmd_modify_qp m = { .attr_mask = RNIC_QP_ATTR_STATE, .state = RNIC_QPS_RESET };
		int r1, r2;

		rnic_modify_qp(p->a.qp, &m);
		m.state = RNIC_QPS_RTS;
		r1 = rnic_modify_qp(p->a.qp, &m);
		m = (struct rnic_cmd_modify_qp){ .attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_ACCESS_FLAGS,
						 .state = RNIC_QPS_INIT, .access = RNIC_ACCESS_REMOTE_WRITE };
		rnic_modify_qp(p->a.qp, &m);
		m = (struct rnic_cmd_modify_qp){ .attr_mask = RNIC_QP_ATTR_STATE, .state = RNIC_QPS_RTR };
		r2 = rnic_modify_qp(p->a.qp, &m);
		check("refuse_reset_to_rts", r1 == -EPERM, "err=%d", r1);
		check("refuse_rtr_without_attrs", r2 == -EINVAL, "err=%d", r2);
	}
}

/* The driver's refusals: bad arguments, ownership, release at process death. */
static void check_driver(struct pair *p)
{
	struct rnic_ctx *other = rnic_open(NULL);
	struct rnic_mr m;
	uint32_t pd;
	int r;
	void *q;

	r = rnic_reg_mr(p->ctx, p->a.pd, p->a.buf, 0, RNIC_ACCESS_ALL, &m);
	check("refuse_mr_len0", r == -EINVAL, "err=%d", r);
	r = rnic_reg_mr(p->ctx, p->a.pd, p->a.buf, 4096, 1u << 20, &m);
	check("refuse_mr_bad_access", r == -EINVAL, "err=%d", r);
	r = rnic_reg_mr(p->ctx, p->a.pd, p->a.buf, 4096, RNIC_ACCESS_REMOTE_WRITE, &m);
	check("refuse_mr_remote_write_without_local", r == -EACCES, "err=%d", r);
	r = rnic_reg_mr(p->ctx, p->a.pd, (void *)0x1000, 4096, RNIC_ACCESS_ALL, &m);
	check("refuse_mr_unmapped", r == -EFAULT, "err=%d", r);
	/* a PFN mapping that is not the node's persistent memory (the CQ's doorbell page): a user
	 * never registers other physical memory (docs/rnic-verbs.md "Persistent memory regions") */
	r = rnic_reg_mr(p->ctx, p->a.pd, (void *)((uintptr_t)p->a.cq->db & ~(uintptr_t)4095), 4096, RNIC_ACCESS_ALL,
			&m);
	check("refuse_mr_pfnmap_not_pmem", r == -EINVAL, "err=%d", r);
	r = rnic_reg_mr(p->ctx, 999, p->a.buf, 4096, RNIC_ACCESS_ALL, &m);
	check("refuse_mr_bad_pd", r == -ENOENT, "err=%d", r);
	m.lkey = 0x12345;
	r = rnic_dereg_mr(p->ctx, &m);
	check("refuse_dereg_unknown", r == -ENOENT, "err=%d", r);
	r = rnic_dealloc_pd(p->ctx, p->a.pd);
	check("refuse_dealloc_busy_pd", r == -EBUSY, "err=%d", r);
	q = rnic_create_cq(p->ctx, 13);
	check("refuse_cq_depth", !q && errno == EINVAL, "errno=%d", errno);
	r = rnic_destroy_cq(p->a.cq);
	check("refuse_destroy_busy_cq", r == -EBUSY, "err=%d", r);
	if (!other) {
		check("second_open", 0, "errno=%d", errno);
		return;
	}
	/* another file sees none of this file's objects */
	r = rnic_dealloc_pd(other, p->a.pd);
	check("refuse_foreign_pd", r == -ENOENT, "err=%d", r);
	r = rnic_dereg_mr(other, &p->a.mr);
	check("refuse_foreign_mr", r == -ENOENT, "err=%d", r);
	{
		uint32_t qpn = p->a.qp->qpn;
		struct rnic_umodify_qp u = { .qpn = qpn };

		r = ioctl(other->fd, RNIC_IOC_DESTROY_QP, &qpn) ? -errno : 0;
		check("refuse_foreign_qp_destroy", r == -ENOENT, "err=%d", r);
		r = ioctl(other->fd, RNIC_IOC_QUERY_QP, &u) ? -errno : 0;
		check("refuse_foreign_qp_query", r == -ENOENT, "err=%d", r);
		q = mmap(NULL, RNIC_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, other->fd,
			 (off_t)RNIC_MAP_OFF(RNIC_MAP_QPDB, RNIC_QP_INDEX(qpn), 12));
		check("refuse_foreign_doorbell_mmap", q == MAP_FAILED, "mapped=%d", q != MAP_FAILED);
		if (q != MAP_FAILED)
			munmap(q, RNIC_PAGE_SIZE);
	}
	rnic_close(other);

	/* a child registers an MR and dies: its rkey stops working (the driver released it) */
	{
		int fds[2];
		uint32_t rkey = 0;
		pid_t pid;
		struct rnic_cqe c;
		uint64_t addr = 0, cnt0[RNIC_CNT_COUNT], cnt1[RNIC_CNT_COUNT];

		if (pipe(fds))
			return;
		counters(p->ctx, cnt0);
		pid = fork();
		if (pid == 0) {
			struct rnic_ctx *cc = rnic_open(NULL);
			uint8_t *buf = xmap(65536);
			struct rnic_mr cm;
			uint32_t cpd;
			uint64_t msg[2] = { 0, 0 };

			if (cc && !rnic_alloc_pd(cc, &cpd) && !rnic_reg_mr(cc, cpd, buf, 65536, RNIC_ACCESS_ALL, &cm)) {
				struct rnic_cq *ccq = rnic_create_cq(cc, 4); /* mapped ring and doorbell, left behind */

				if (ccq && rnic_create_qp(cc, cpd, ccq, ccq, 4, 4))
					msg[0] = cm.rkey, msg[1] = (uintptr_t)buf;
			}
			if (write(fds[1], msg, sizeof(msg)) != sizeof(msg))
				_exit(1);
			_exit(0); /* no dereg, no close: the driver cleans up */
		}
		close(fds[1]);
		{
			uint64_t msg[2] = { 0, 0 };

			if (read(fds[0], msg, sizeof(msg)) == sizeof(msg))
				rkey = (uint32_t)msg[0], addr = msg[1];
		}
		close(fds[0]);
		waitpid(pid, NULL, 0);
		counters(p->ctx, cnt1);
		/* PD, MR, CQ, QP created; QP, CQ, MR, PD destroyed by the driver at exit; nothing refused */
		check("objects_released_at_exit",
		      rkey && (!counters_readable || (cnt1[RNIC_CNT_COMMANDS / 8] - cnt0[RNIC_CNT_COMMANDS / 8] == 8 &&
			      cnt1[RNIC_CNT_COMMAND_ERRORS / 8] == cnt0[RNIC_CNT_COMMAND_ERRORS / 8])),
		      "commands=+%llu refused=+%llu", (unsigned long long)(cnt1[RNIC_CNT_COMMANDS / 8] - cnt0[RNIC_CNT_COMMANDS / 8]),
		      (unsigned long long)(cnt1[RNIC_CNT_COMMAND_ERRORS / 8] - cnt0[RNIC_CNT_COMMAND_ERRORS / 8]));
		pair_connect(p, NULL);
		c = run(p, wr(RNIC_WR_WRITE, 30, &p->a, 0, 8, addr, rkey));
		check("mr_released_at_exit", rkey && c.status == RNIC_WC_REM_ACCESS_ERR, "child_rkey=0x%x status=%u", rkey,
		      c.status);
	}
	(void)pd;
}

/* Completion interrupt: with no spinning, the wait blocks and the CQ's interrupt wakes it. */
static void check_interrupt(struct pair *p)
{
	uint64_t c0[RNIC_CNT_COUNT], c1[RNIC_CNT_COUNT];
	struct rnic_cqe c;
	uint64_t ev0 = p->a.cq->events;

	pair_connect(p, NULL);
	unsigned spin = p->ctx->spin_us;

	p->ctx->spin_us = 0; /* block at once */
	counters(p->ctx, c0);
	/* the device completes before the doorbell write returns in loopback: arm, then post */
	c = run(p, wr(RNIC_WR_READ, 40, &p->a, 0, 1u << 20, (uintptr_t)p->b.buf, p->b.mr.rkey));
	counters(p->ctx, c1);
	check("cq_wait", c.status == 0 && c.wr_id == 40, "status=%u events_before=%llu events_after=%llu irqs=%llu",
	      c.status, (unsigned long long)ev0, (unsigned long long)p->a.cq->events,
	      (unsigned long long)(c1[RNIC_CNT_IRQS / 8] - c0[RNIC_CNT_IRQS / 8]));
	/* arm explicitly, complete a WR, wait: exactly one interrupt more than before the arm */
	{
		struct rnic_uwait_cq now = { .cqn = p->a.cq->cqn, .timeout_ms = 0, .events = UINT64_MAX };
		struct rnic_uwait_cq w = { .cqn = p->a.cq->cqn, .timeout_ms = 2000 };
		struct rnic_send_wqe s = wr(RNIC_WR_WRITE, 41, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey);
		int r0, r;

		r0 = ioctl(p->ctx->fd, RNIC_IOC_WAIT_CQ, &now) ? -errno : 0; /* the count now */
		w.events = now.events;
		counters(p->ctx, c0);
		p->a.cq->db[RNIC_CQ_DB_ARM / 4] = RNIC_CQ_ARM_NEXT;
		rnic_post_send(p->a.qp, &s);
		r = ioctl(p->ctx->fd, RNIC_IOC_WAIT_CQ, &w) ? -errno : 0;
		c = wait1(p->a.cq, 2000);
		counters(p->ctx, c1);
		check("cq_armed_interrupt", r0 == 0 && r == 0 && w.events == now.events + 1 && c.wr_id == 41 &&
						 (!counters_readable || c1[RNIC_CNT_CQ_EVENTS / 8] == c0[RNIC_CNT_CQ_EVENTS / 8] + 1),
		      "err=%d events=%llu->%llu cq_events=+%llu", r, (unsigned long long)now.events,
		      (unsigned long long)w.events, (unsigned long long)(c1[RNIC_CNT_CQ_EVENTS / 8] - c0[RNIC_CNT_CQ_EVENTS / 8]));
		p->a.cq->events = w.events;
	}
	/* the completion channel: poll() on the file, read() names the CQ that fired */
	{
		uint32_t cqns[8];
		struct rnic_send_wqe s = wr(RNIC_WR_WRITE, 42, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey);
		int n0, n1, n2;

		while (rnic_get_cq_events(p->ctx, cqns, 8, 0) > 0) /* what earlier arms left */
			;
		n0 = rnic_get_cq_events(p->ctx, cqns, 8, 0);
		p->a.cq->db[RNIC_CQ_DB_ARM / 4] = RNIC_CQ_ARM_NEXT;
		rnic_post_send(p->a.qp, &s);
		n1 = rnic_get_cq_events(p->ctx, cqns, 8, 2000);
		c = wait1(p->a.cq, 2000);
		n2 = rnic_get_cq_events(p->ctx, cqns + 1, 7, 0);
		check("cq_channel_poll_read", n0 == -ETIMEDOUT && n1 == 1 && cqns[0] == p->a.cq->cqn && c.wr_id == 42 &&
						  n2 == -ETIMEDOUT,
		      "before=%d events=%d cq=%u (want %u) after=%d", n0, n1, cqns[0], p->a.cq->cqn, n2);
		p->a.cq->events++; /* the interrupt counted by the driver's WAIT_CQ count too */
	}
	/* a wait with nothing to come times out */
	{
		struct rnic_uwait_cq w = { .cqn = p->a.cq->cqn, .timeout_ms = 50, .events = p->a.cq->events };
		int r = ioctl(p->ctx->fd, RNIC_IOC_WAIT_CQ, &w) ? -errno : 0;

		check("cq_wait_times_out", r == -ETIMEDOUT, "err=%d", r);
	}
	p->ctx->spin_us = spin;
}

/* Interrupts of vector v of this driver so far (its /proc/interrupts row); -1 if none. */
static long long vector_irqs(unsigned v)
{
	char name[32];

	snprintf(name, sizeof(name), " rackemu_rnic-v%u\n", v);
	return proc_irqs(name);
}

/* Arm cq, post w on qp, block in WAIT_CQ until the interrupt, then take the CQE: 0 when the event
 * and a successful CQE came. */
static int armed_round(struct rnic_ctx *ctx, struct rnic_cq *cq, struct rnic_qp *qp, struct rnic_send_wqe w)
{
	struct rnic_uwait_cq now = { .cqn = cq->cqn, .timeout_ms = 0, .events = UINT64_MAX };
	struct rnic_uwait_cq ev = { .cqn = cq->cqn, .timeout_ms = 2000 };
	struct rnic_cqe c;

	if (ioctl(ctx->fd, RNIC_IOC_WAIT_CQ, &now))
		return -errno;
	ev.events = now.events;
	cq->db[RNIC_CQ_DB_ARM / 4] = RNIC_CQ_ARM_NEXT;
	if (rnic_post_send(qp, &w))
		return -EIO;
	if (ioctl(ctx->fd, RNIC_IOC_WAIT_CQ, &ev))
		return -errno;
	cq->events = ev.events;
	c = wait1(cq, 2000);
	return c.status == RNIC_WC_SUCCESS && c.wr_id == w.wr_id ? 0 : -EIO;
}

/* Completion vectors: a CQ names its interrupt vector (verbs' comp_vector); one beyond the
 * driver's vectors is refused; two CQs on vectors 0 and 1 raise each their own interrupt. */
static void check_vectors(struct pair *p)
{
	const unsigned nvec = p->ctx->info.irq_vectors, n0 = 3, n1 = 5;
	struct rnic_cq *bad = rnic_create_cq_vec(p->ctx, 4, nvec);
	int bad_errno = errno;
	struct rnic_cq *cq1 = NULL;
	struct rnic_qp *x = NULL, *y = NULL;
	long long v0 = -1, v1 = -1, d0 = -1, d1 = -1;
	unsigned ok0 = 0, ok1 = 0;

	check("refuse_cq_vector_beyond_count", !bad && bad_errno == EINVAL, "vectors=%u errno=%d", nvec,
	      bad ? 0 : bad_errno);
	if (bad)
		rnic_destroy_cq(bad);
	if (nvec >= 2)
		cq1 = rnic_create_cq_vec(p->ctx, 6, 1);
	if (cq1) {
		x = rnic_create_qp(p->ctx, p->a.pd, cq1, cq1, 4, 4);
		y = rnic_create_qp(p->ctx, p->b.pd, p->b.cq, p->b.cq, 4, 4);
	}
	if (x && y) {
		struct rnic_conn cx = p->a.me, cy = p->b.me;
		unsigned spin = p->ctx->spin_us;

		cx.qpn = x->qpn;
		cy.qpn = y->qpn;
		pair_connect(p, NULL);
		if (!rnic_qp_connect(x, &cx, &cy, NULL) && !rnic_qp_connect(y, &cy, &cx, NULL)) {
			p->ctx->spin_us = 0;
			v0 = vector_irqs(0);
			v1 = vector_irqs(1);
			for (unsigned i = 0; i < n0; i++)
				ok0 += !armed_round(p->ctx, p->a.cq, p->a.qp,
						    wr(RNIC_WR_WRITE, 60 + i, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey));
			for (unsigned i = 0; i < n1; i++) {
				struct rnic_send_wqe w = wr(RNIC_WR_WRITE, 70 + i, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey);

				ok1 += !armed_round(p->ctx, cq1, x, w);
			}
			d0 = vector_irqs(0) - v0;
			d1 = vector_irqs(1) - v1;
			p->ctx->spin_us = spin;
		}
	}
	/* vector 1 carries only cq1's events; vector 0 those of the pair's CQ (and async events) */
	check("cq_vectors_own_interrupts",
	      nvec >= 2 && cq1 && cq1->comp_vector == 1 && v0 >= 0 && v1 >= 0 && ok0 == n0 && ok1 == n1 && d1 == n1 &&
		      d0 >= n0,
	      "vectors=%u rounds_v0=%u/%u rounds_v1=%u/%u irqs_v0=+%lld irqs_v1=+%lld", nvec, ok0, n0, ok1, n1, d0,
	      d1);
	if (x)
		rnic_destroy_qp(x);
	if (y)
		rnic_destroy_qp(y);
	if (cq1)
		rnic_destroy_cq(cq1);
}

/* Async events of ctx until one of `type` for `element` (others acknowledged and skipped), up to
 * timeout_ms. Returns 0 with *out (not yet acknowledged), or the last error (-ETIMEDOUT, ...). */
static int await_event(struct rnic_ctx *ctx, unsigned type, uint32_t element, int timeout_ms,
		       struct rnic_async_event *out)
{
	struct timespec t0, t;
	int ret, left = timeout_ms;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ret = rnic_get_async_event(ctx, out, left);
		if (ret)
			return ret;
		if (out->type == type && out->element == element)
			return 0;
		rnic_ack_async_event(out);
		clock_gettime(CLOCK_MONOTONIC, &t);
		left = timeout_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			return -ETIMEDOUT;
	}
}

/* The async event queue: a QP whose retries run out reports QP_FATAL (RETRY_EXC) to its owner
 * only; a CQ that overflows reports CQ_ERR; objects with events not acknowledged are not
 * destroyed. */
static void check_async(struct pair *p)
{
	struct rnic_ctx *other = rnic_open(NULL);
	struct rnic_async_event ev, stray;
	struct rnic_conn nowhere = p->b.me;
	struct rnic_conn_opts o = { .timeout = 8, .retry_cnt = 1 };
	struct rnic_cqe c;
	struct rnic_cq *small;
	struct rnic_qp *x;
	int r, r2, r3;

	if (!(p->ctx->info.caps & RNIC_CAP_EQ)) {
		check("async_cap", 0, "caps=0x%x: the device has no event queue", p->ctx->info.caps);
		return;
	}
	if (!other) {
		check("async_setup", 0, "second open: errno=%d", errno);
		return;
	}
	while (rnic_get_async_event(p->ctx, &ev, 0) == 0) /* the earlier checks' events */
		rnic_ack_async_event(&ev);

	/* retries exhausted: A toward a QP number nobody has, 1 ms timeout, one retry */
	{
		struct rnic_cmd_modify_qp m = { .attr_mask = RNIC_QP_ATTR_STATE, .state = RNIC_QPS_RESET };

		drain(p->a.cq);
		rnic_modify_qp(p->a.qp, &m);
	}
	nowhere.qpn = 0xfffff0;
	r = rnic_qp_connect(p->a.qp, &p->a.me, &nowhere, &o);
	c = r ? (struct rnic_cqe){ .status = 0xfe } : run(p, wr(RNIC_WR_WRITE, 60, &p->a, 0, 8, (uintptr_t)p->b.buf, p->b.mr.rkey));
	r = await_event(p->ctx, RNIC_EV_QP_FATAL, p->a.qp->qpn, 5000, &ev);
	r2 = rnic_get_async_event(other, &stray, 0);
	r3 = rnic_destroy_qp(p->a.qp); /* not acknowledged yet: refused */
	check("async_qp_fatal_retry_exceeded",
	      c.status == RNIC_WC_RETRY_EXC_ERR && r == 0 && ev.detail == RNIC_WC_RETRY_EXC_ERR && ev.qp == p->a.qp &&
		      r2 == -EAGAIN && r3 == -EBUSY,
	      "cqe_status=%u event_err=%d type=%s detail=%u qp_known=%d other_process_event=%d destroy_unacked=%d",
	      c.status, r, r ? "-" : rnic_event_type_str(ev.type), ev.detail, ev.qp == p->a.qp, r2, r3);
	if (!r)
		rnic_ack_async_event(&ev);

	/* CQ overflow: 4 receives flushed into a CQ of 2 entries */
	small = rnic_create_cq(p->ctx, 1);
	x = small ? rnic_create_qp(p->ctx, p->a.pd, small, small, 4, 4) : NULL;
	if (!x) {
		check("async_cq_setup", 0, "errno=%d", errno);
	} else {
		struct rnic_cmd_modify_qp m = { .attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_ACCESS_FLAGS,
						.state = RNIC_QPS_INIT, .access = RNIC_ACCESS_REMOTE_WRITE };

		rnic_modify_qp(x, &m);
		for (unsigned i = 0; i < 4; i++) {
			struct rnic_recv_wqe rw = rwr(70 + i, &p->a, 0, 8);

			rnic_post_recv(x, &rw);
		}
		m = (struct rnic_cmd_modify_qp){ .attr_mask = RNIC_QP_ATTR_STATE, .state = RNIC_QPS_ERR };
		rnic_modify_qp(x, &m);
		r = await_event(p->ctx, RNIC_EV_CQ_ERR, small->cqn, 5000, &ev);
		r2 = rnic_get_async_event(other, &stray, 0);
		rnic_destroy_qp(x);
		r3 = rnic_destroy_cq(small);
		check("async_cq_err_overflow",
		      r == 0 && ev.cq == small && ev.detail == RNIC_EV_CQ_ERR_OVERFLOW && r2 == -EAGAIN && r3 == -EBUSY,
		      "event_err=%d detail=%u cq_known=%d other_process_event=%d destroy_unacked=%d", r, ev.detail,
		      ev.cq == small, r2, r3);
		if (!r)
			rnic_ack_async_event(&ev);
		if (rnic_destroy_cq(small))
			check("async_cq_destroy_after_ack", 0, "the CQ could not be destroyed");
	}
	r = rnic_get_async_event(p->ctx, &ev, 0);
	check("async_nothing_left", r == -EAGAIN, "err=%d type=%s element=0x%x", r,
	      r ? "-" : rnic_event_type_str(ev.type), r ? 0 : ev.element);
	if (!r)
		rnic_ack_async_event(&ev);
	rnic_close(other);
	pair_connect(p, NULL); /* the later checks start from a connected pair */
}

static int cmd_check(void)
{
	struct pair p;

	uint64_t c[RNIC_CNT_COUNT];

	memset(&p, 0, sizeof(p));
	p.ctx = open_dev();
	counters_readable = !rnic_counters(p.ctx, c);
	if (!counters_readable)
		printf("counters=root-only counter_comparisons=skipped\n");
	check("identity", (p.ctx->info.version >> 16) == (RNIC_VERSION_VALUE >> 16) && p.ctx->info.max_qp == RNIC_MAX_QP,
	      "version=0x%x node=%u max_mtu=%u irq_vectors=%u", p.ctx->info.version, p.ctx->info.node_id,
	      p.ctx->info.max_mtu, p.ctx->info.irq_vectors);
	side_init(&p.a, p.ctx, 2u << 20, 0); /* 2 x 2 MiB + windows: under the default 8 MiB RLIMIT_MEMLOCK */
	side_init(&p.b, p.ctx, 2u << 20, 0);
	check("connect", pair_connect(&p, NULL) == 0 && rnic_qp_state(p.a.qp) == RNIC_QPS_RTS &&
				 rnic_qp_state(p.b.qp) == RNIC_QPS_RTS,
	      "qpn_a=0x%x qpn_b=0x%x state_a=%s", p.a.qp->qpn, p.b.qp->qpn, rnic_qp_state_str(rnic_qp_state(p.a.qp)));
	check_data_path(&p);
	check_violations(&p);
	check_xatomics(&p);
	check_local(&p);
	check_interrupt(&p);
	check_vectors(&p);
	check_async(&p);
	check_driver(&p);
	rnic_close(p.ctx);
	return check_summary();
}

/* ---- bench ---- */

enum { OP_WRITE, OP_READ, OP_SEND, OP_FAA, OP_CAS, OP_COUNT };
static const char *const op_names[OP_COUNT] = { "write", "read", "send", "faa", "cas" };

struct bench {
	struct rnic_ctx *ctx;
	struct side me;
	struct rnic_conn peer;
	struct side srv;   /* loopback: the passive side */
	int loopback;
	int sock;
	unsigned iters, window;
};

static struct rnic_send_wqe bench_wr(struct bench *b, int op, uint32_t size, uint64_t id)
{
	static const uint8_t wr_op[OP_COUNT] = { RNIC_WR_WRITE, RNIC_WR_READ, RNIC_WR_SEND, RNIC_WR_FETCH_ADD,
						 RNIC_WR_CMP_SWAP };
	uint32_t len = op >= OP_FAA ? 8 : size;
	uint64_t roff = op >= OP_FAA ? 0 : 4096;
	struct rnic_send_wqe w = wr(wr_op[op], id, &b->me, 4096, len, b->peer.addr + roff, b->peer.rkey);

	w.swap_add = 1;
	return w;
}

/* Post n WRs of op with up to `window` in flight; returns wall ns, modeled ns of each in lat[]. */
static int bench_run(struct bench *b, int op, uint32_t size, unsigned n, unsigned window, uint64_t *wall,
		     uint64_t *lat_wall, uint64_t *lat_model)
{
	unsigned posted = 0, done = 0;
	uint64_t t0 = now_ns(), post_t[4096];
	struct rnic_cqe c[32];

	while (done < n) {
		while (posted < n && posted - done < window) {
			struct rnic_send_wqe w = bench_wr(b, op, size, posted);

			if (op == OP_SEND && b->loopback) {
				struct rnic_recv_wqe r = rwr(posted, &b->srv, 4096, size);

				if (rnic_post_recv(b->srv.qp, &r))
					break;
			}
			post_t[posted % 4096] = now_ns();
			if (rnic_post_send(b->me.qp, &w))
				break;
			posted++;
		}
		int got = rnic_wait_cq(b->me.cq, c, 32, 10000);

		if (got < 0) {
			fprintf(stderr, "rnic bench: %s %u: no completion (%s)\n", op_names[op], size, strerror(-got));
			return got;
		}
		for (int i = 0; i < got; i++) {
			if (c[i].status) {
				fprintf(stderr, "rnic bench: %s %u: completion status %u (%s)\n", op_names[op], size,
					c[i].status, rnic_wc_status_str(c[i].status));
				return -EIO;
			}
			if (lat_wall)
				lat_wall[done] = now_ns() - post_t[c[i].wr_id % 4096];
			if (lat_model)
				lat_model[done] = c[i].modeled_ns;
			done++;
		}
		if (op == OP_SEND && b->loopback) /* the passive side's receive CQEs, without waiting */
			while (rnic_poll_cq(b->srv.cq, c, 32) > 0)
				;
	}
	*wall = now_ns() - t0;
	return 0;
}

static uint64_t median(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

/* The passive side of a remote bench: one QP per client on one PD and MR (its first 8 bytes are
 * the FETCH_ADD counter), receives kept posted; ends when every client has hung up. */
struct srv_conn {
	int sock;
	struct rnic_cq *cq;
	struct rnic_qp *qp;
};

static int srv_repost(struct side *me, struct rnic_qp *qp, uint64_t id)
{
	struct rnic_recv_wqe r = rwr(id, me, 4096, (uint32_t)(me->len - 4096));

	return rnic_post_recv(qp, &r);
}

/* The target CPU's own atomics on word 0 while the NICs' atomics arrive (global atomicity). */
struct cpu_adder {
	volatile uint64_t *word;
	unsigned long n;
	pthread_t t;
	int started;
};

static void *cpu_add_thread(void *arg)
{
	struct cpu_adder *a = arg;

	for (unsigned long i = 0; i < a->n; i++)
		__atomic_fetch_add(a->word, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void cpu_adds_start(struct cpu_adder *a, struct side *me)
{
	a->word = (volatile uint64_t *)me->buf;
	if (a->n && !pthread_create(&a->t, NULL, cpu_add_thread, a))
		a->started = 1;
	else if (a->n)
		fatal("starting the CPU-adds thread", errno);
}

static void server_words_init(struct side *me)
{
	memcpy(me->buf, xw_init, sizeof(xw_init));
}

static void server_done(struct side *me, unsigned clients, struct cpu_adder *a)
{
	const volatile uint64_t *w = (const volatile uint64_t *)me->buf;

	if (a->started)
		pthread_join(a->t, NULL);
	printf("server=done clients=%u counter=%llu cpu_adds=%lu", clients, (unsigned long long)w[0], a->n);
	for (unsigned i = 0; i < XW_COUNT; i++)
		printf(" word%u=0x%llx", i, (unsigned long long)w[i]);
	printf("\n");
}

static int bench_server(struct side *me, unsigned port, unsigned clients, const struct rnic_conn_opts *co,
			struct cpu_adder *cpu)
{
	struct srv_conn conn[64];
	unsigned accepted = 0, closed = 0;
	int lfd = rnic_tcp_listen((uint16_t)port);
	struct rnic_cqe c[32];

	if (lfd < 0)
		fatal("listening on the TCP port", lfd);
	server_words_init(me);
	printf("server=ready port=%u clients=%u rkey=0x%x addr=0x%llx\n", port, clients, me->mr.rkey,
	       (unsigned long long)me->me.addr);
	fflush(stdout);
	while (closed < clients) {
		struct pollfd pf[65];
		unsigned np = 0, busy = 0;

		for (unsigned i = 0; i < accepted; i++) {
			int got = conn[i].sock >= 0 ? rnic_poll_cq(conn[i].cq, c, 32) : 0;

			for (int k = 0; k < got; k++)
				if (c[k].status == RNIC_WC_SUCCESS && (c[k].flags & RNIC_CQE_F_RECV))
					srv_repost(me, conn[i].qp, c[k].wr_id);
			busy |= got > 0;
		}
		unsigned base = 0, nconn = accepted;

		if (accepted < clients)
			pf[np++] = (struct pollfd){ lfd, POLLIN, 0 };
		base = np;
		for (unsigned i = 0; i < nconn; i++)
			pf[np++] = (struct pollfd){ conn[i].sock, POLLIN, 0 }; /* -1: ignored by poll */
		if (poll(pf, np, busy ? 0 : 1) <= 0)
			continue;
		for (unsigned i = 0; i < nconn; i++) {
			char x;

			if (conn[i].sock >= 0 && (pf[base + i].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    recv(conn[i].sock, &x, 1, 0) <= 0) {
				close(conn[i].sock);
				conn[i].sock = -1;
				closed++;
			}
		}
		if (base && (pf[0].revents & POLLIN)) {
			struct srv_conn *k = &conn[accepted];
			struct rnic_conn mine = me->me, peer;
			int ret;

			k->sock = rnic_tcp_accept(lfd);
			if (k->sock < 0)
				fatal("accepting a client", k->sock);
			k->cq = rnic_create_cq(me->ctx, 10);
			k->qp = k->cq ? rnic_create_qp(me->ctx, me->pd, k->cq, k->cq, 8, 8) : NULL;
			if (!k->qp)
				fatal("creating a client's CQ and QP", errno);
			mine.qpn = k->qp->qpn;
			mine.psn = rnic_random_psn();
			ret = rnic_exchange(k->sock, &mine, &peer);
			ret = ret ? ret : rnic_qp_connect(k->qp, &mine, &peer, co);
			if (ret)
				fatal("connecting a client's QP", ret);
			/* a SEND that arrives before these is RNR-NAKed and retried (rnr_retry 7: forever) */
			for (unsigned i = 0; i < (1u << 8); i++)
				srv_repost(me, k->qp, i);
			printf("client=%u node=%u qpn=0x%x peer_qpn=0x%x\n", accepted, peer.node, k->qp->qpn, peer.qpn);
			fflush(stdout);
			if (++accepted == clients)
				cpu_adds_start(cpu, me);
		}
	}
	server_done(me, accepted, cpu);
	return 0;
}

/* Parameter exchange through files, for harnesses that relay between nodes without an IP network:
 * each side prints its `conn=` line and reads the peer's from a file the harness writes. */
static void conn_print(unsigned idx, const struct rnic_conn *c)
{
	printf("conn=%u node=%u qpn=0x%x psn=0x%x rkey=0x%x addr=0x%llx length=%llu\n", idx, c->node, c->qpn, c->psn,
	       c->rkey, (unsigned long long)c->addr, (unsigned long long)c->length);
	fflush(stdout);
}

static int wait_file(const char *path, unsigned seconds)
{
	for (unsigned i = 0; i < seconds * 20; i++) {
		if (!access(path, F_OK))
			return 0;
		usleep(50000);
	}
	fprintf(stderr, "rnic: %s did not appear within %u s\n", path, seconds);
	return -ETIMEDOUT;
}

static void conn_read_file(const char *path, struct rnic_conn *c)
{
	unsigned idx;
	unsigned long long addr, len;
	char line[256];
	FILE *f;

	for (unsigned i = 0; i < 120 * 20; i++, usleep(50000)) {
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f) &&
		    sscanf(line, "conn=%u node=%u qpn=0x%x psn=0x%x rkey=0x%x addr=0x%llx length=%llu", &idx, &c->node,
			   &c->qpn, &c->psn, &c->rkey, &addr, &len) == 7) {
			fclose(f);
			c->addr = addr;
			c->length = len;
			return;
		}
		fclose(f);
	}
	fprintf(stderr, "rnic: no conn= line in %s within 120 s\n", path);
	exit(1);
}

/* The server with file exchange: QP i's peer in PEER.i; serves until PEER.stop exists. */
static int bench_server_files(struct side *me, const char *peer, unsigned clients, const struct rnic_conn_opts *co,
			      struct cpu_adder *cpu)
{
	struct srv_conn conn[64];
	struct rnic_cqe c[32];
	char path[512];
	unsigned polls = 0;

	server_words_init(me);
	for (unsigned i = 0; i < clients; i++) {
		struct rnic_conn mine = me->me;

		conn[i].cq = rnic_create_cq(me->ctx, 10);
		conn[i].qp = conn[i].cq ? rnic_create_qp(me->ctx, me->pd, conn[i].cq, conn[i].cq, 8, 8) : NULL;
		if (!conn[i].qp)
			fatal("creating a client's CQ and QP", errno);
		mine.qpn = conn[i].qp->qpn;
		mine.psn = rnic_random_psn();
		conn_print(i, &mine);
		conn[i].sock = (int)mine.psn; /* kept for the connect below */
	}
	for (unsigned i = 0; i < clients; i++) {
		struct rnic_conn mine = me->me, p;
		int ret;

		snprintf(path, sizeof(path), "%s.%u", peer, i);
		conn_read_file(path, &p);
		mine.qpn = conn[i].qp->qpn;
		mine.psn = (uint32_t)conn[i].sock;
		ret = rnic_qp_connect(conn[i].qp, &mine, &p, co);
		if (ret)
			fatal("connecting a client's QP", ret);
		for (unsigned k = 0; k < (1u << 8); k++)
			srv_repost(me, conn[i].qp, k);
		printf("client=%u node=%u qpn=0x%x peer_qpn=0x%x\n", i, p.node, conn[i].qp->qpn, p.qpn);
	}
	printf("server=ready clients=%u\n", clients);
	fflush(stdout);
	cpu_adds_start(cpu, me);
	snprintf(path, sizeof(path), "%s.stop", peer);
	for (;;) {
		unsigned busy = 0;

		for (unsigned i = 0; i < clients; i++) {
			int got = rnic_poll_cq(conn[i].cq, c, 32);

			for (int k = 0; k < got; k++)
				if (c[k].status == RNIC_WC_SUCCESS && (c[k].flags & RNIC_CQE_F_RECV))
					srv_repost(me, conn[i].qp, c[k].wr_id);
			busy |= got > 0;
		}
		if (!busy && (++polls % 64 == 0)) {
			if (!access(path, F_OK))
				break;
			usleep(1000);
		}
	}
	server_done(me, clients, cpu);
	return 0;
}

/* Across nodes: WRITE, READ and SEND patterns into the middle and the end of the server's MR,
 * read back with RDMA READ and compared. */
static void bench_verify(struct bench *b, const uint64_t *sizes, int nsizes)
{
	uint8_t *lbuf = b->me.buf + 4096;
	char name[64];

	for (int si = 0; si < nsizes; si++) {
		uint32_t n = (uint32_t)sizes[si];

		for (int where = 0; where < 3; where++) { /* the middle, the end of the MR; the receive area */
			uint64_t roff = where == 2 ? 4096 : where ? b->peer.length - n : b->peer.length / 2 - n / 2;
			uint64_t seed = (uint64_t)si * 4 + (uint64_t)where + 40;
			const char *w = where == 2 ? "recv" : where ? "end" : "middle";
			struct send_op {
				uint8_t op;
				const char *name;
			} ops[2] = { { where == 2 ? RNIC_WR_SEND : RNIC_WR_WRITE, where == 2 ? "send" : "write" },
				     { RNIC_WR_READ, "read" } };

			for (int k = 0; k < (where == 2 ? 1 : 2); k++) {
				struct rnic_send_wqe rd = wr(RNIC_WR_READ, 2, &b->me, 4096, n, b->peer.addr + roff, b->peer.rkey);
				struct rnic_cqe c1 = { 0 }, c2;
				long bad;

				if (k == 0) { /* WRITE or SEND the pattern, then READ it back */
					struct rnic_send_wqe w0 = wr(ops[0].op, 1, &b->me, 4096, n, b->peer.addr + roff, b->peer.rkey);

					fill(lbuf, n, seed);
					rnic_post_send(b->me.qp, &w0);
					c1 = wait1(b->me.cq, 10000);
				} /* k == 1: a second READ of what is there */
				memset(lbuf, 0, n);
				rnic_post_send(b->me.qp, &rd);
				c2 = wait1(b->me.cq, 10000);
				bad = mismatch(lbuf, n, seed);
				snprintf(name, sizeof(name), "%s_%u_%s", ops[k].name, n, w);
				check(name, c1.status == 0 && c2.status == 0 && c2.byte_len == n && bad < 0,
				      "status=%u read_status=%u first_bad=%ld", c1.status, c2.status, bad);
			}
		}
	}
}

static int parse_list(const char *s, uint64_t *out, int max, int ops)
{
	char *dup = strdup(s), *save, *t;
	int n = 0;

	for (t = strtok_r(dup, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
		if (ops) {
			int k;

			for (k = 0; k < OP_COUNT && strcmp(t, op_names[k]); k++)
				;
			if (k == OP_COUNT)
				die("unknown op '%s' (write, read, send, faa, cas)", t);
			out[n++] = (uint64_t)k;
		} else {
			out[n++] = num(t, "size", 1u << 30);
		}
	}
	free(dup);
	return n;
}

/* `rnic xatomic`: every atomic kind `count` times on the server's words (XW_*), `window` posted
 * atomics in flight (tracked posting), the compare-swap increments one at a time. */
static int xatomic_hammer(struct bench *b, unsigned count, unsigned window)
{
	struct rnic_qp *qp = b->me.qp;
	const uint32_t node = b->ctx->info.node_id, bit = 1u << (node % 64);
	uint64_t *res = (uint64_t *)(b->me.buf + 4096);
	unsigned errors = 0, cas_retries = 0, mc_retries = 0;
	int ret = 0;
	struct {
		unsigned word;
		uint8_t op, size;
		int fetch;
	} kinds[] = {
		{ XW_ADD, ROCE_XOP_ADD, 8, 0 },	  { XW_FADD, ROCE_XOP_ADD, 8, 1 }, { XW_XOR, ROCE_XOP_XOR, 8, 0 },
		{ XW_OR, ROCE_XOP_OR, 8, 1 },	  { XW_AND, ROCE_XOP_AND, 8, 0 },  { XW_SWAP, ROCE_XOP_SWAP, 8, 1 },
		{ XW_ADD32, ROCE_XOP_ADD, 4, 1 },
	};

	for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && !ret; k++) {
		for (unsigned i = 0; i < count && !ret && !qp->errors; i++) { /* an error: stop, report */
			struct rnic_xatomic x = {
				.wr_id = i, .remote_addr = b->peer.addr + 8 * kinds[k].word, .rkey = b->peer.rkey,
				.op = kinds[k].op, .size = kinds[k].size,
				.operand = kinds[k].op == ROCE_XOP_ADD	 ? 1
					   : kinds[k].op == ROCE_XOP_AND ? ~(uint64_t)bit
					   : kinds[k].op == ROCE_XOP_SWAP ? ((uint64_t)node << 32 | i)
									  : bit,
				.result = kinds[k].fetch ? res + (i % 1024) : NULL, .result_lkey = b->me.mr.lkey,
			};

			while (!ret && qp->posted - qp->done >= window)
				ret = rnic_reap(qp->send_cq, 10000) < 0 ? -ETIMEDOUT : 0;
			ret = ret ? ret : rnic_post_xatomic(qp, &x, 10000);
		}
		ret = ret ? ret : rnic_quiet(qp, 30000);
		if (ret == -EIO) /* the QP is in Error: the rest would only be flushed */
			fprintf(stderr, "rnic xatomic: word %u: completion status %u (%s) vendor_err 0x%x\n", kinds[k].word,
				qp->first_error.status, rnic_wc_status_str(qp->first_error.status), qp->first_error.vendor_err);
	}
	/* increments by compare-swap: IB COMPARE_SWAP on word 7, masked (low 32 bits) on word 8 */
	for (int masked = 0; masked <= 1 && !ret; masked++) {
		const uint64_t mask = masked ? 0xFFFFFFFFull : ~0ull;
		uint64_t expect = 0;

		for (unsigned i = 0; i < count && !ret;) {
			struct rnic_send_wqe w = wr(RNIC_WR_CMP_SWAP, i, &b->me, 4096, 8,
						    b->peer.addr + 8 * (masked ? XW_MCSWAP : XW_CAS), b->peer.rkey);

			if (masked) {
				struct rnic_xatomic x = { .wr_id = i, .remote_addr = w.remote_addr, .rkey = b->peer.rkey,
							  .op = ROCE_XOP_MCSWAP, .size = 8, .operand = expect + 1,
							  .compare = expect, .mask = mask, .result = res,
							  .result_lkey = b->me.mr.lkey };
				rnic_wqe_xatomic(&w, &x);
			} else {
				w.compare = expect;
				w.swap_add = expect + 1;
			}
			ret = rnic_post(qp, &w, 10000);
			ret = ret ? ret : rnic_quiet(qp, 10000);
			if (ret)
				break;
			if ((*res & mask) == expect) {
				i++;
				expect++;
			} else {
				expect = *res & mask;
				masked ? mc_retries++ : cas_retries++;
			}
		}
	}
	if (ret && ret != -EIO)
		fprintf(stderr, "rnic xatomic: %s\n", strerror(-ret));
	if (ret == -EIO)
		errors++;
	printf("xatomic=done node=%u count=%u errors=%u cas_retries=%u mcswap_retries=%u\n", node, count, errors,
	       cas_retries, mc_retries);
	return ret || errors ? 1 : 0;
}

static int cmd_bench(int argc, char **argv, int faa_only)
{
	static const struct option opts[] = {
		{ "ops", 1, 0, 'o' }, { "sizes", 1, 0, 's' }, { "iters", 1, 0, 'n' }, { "window", 1, 0, 'w' },
		{ "rate-windows", 1, 0, 'r' }, { "server", 0, 0, 'S' }, { "client", 1, 0, 'c' }, { "port", 1, 0, 'p' },
		{ "mtu", 1, 0, 'm' }, { "count", 1, 0, 'k' }, { "clients", 1, 0, 'C' }, { "verify", 0, 0, 'v' },
		{ "timeout", 1, 0, 't' }, { "retry", 1, 0, 'R' }, { "peer-file", 1, 0, 'P' }, { "help", 0, 0, 'h' },
		{ "cpu-adds", 1, 0, 'A' }, { 0, 0, 0, 0 }
	};
	uint64_t ops[OP_COUNT], sizes[32], rates[16], maxsize = 0;
	int nops = parse_list("write,read,send,faa,cas", ops, OP_COUNT, 1);
	int nsizes = parse_list("8,64,1K,4K,64K,1M", sizes, 32, 0);
	int nrates = parse_list("1,2,4,8,16,32,64", rates, 16, 0);
	const char *host = NULL, *peer = NULL;
	int server = 0, verify = 0, c, ret = 0;
	unsigned port = 18515, count = 100, clients = 1;
	struct rnic_conn_opts co = { 0 };
	struct bench b;
	struct cpu_adder cpu;

	memset(&b, 0, sizeof(b));
	memset(&cpu, 0, sizeof(cpu));
	b.iters = 200;
	b.window = 16;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'o': nops = parse_list(optarg, ops, OP_COUNT, 1); break;
		case 's': nsizes = parse_list(optarg, sizes, 32, 0); break;
		case 'r': nrates = parse_list(optarg, rates, 16, 0); break;
		case 'n': b.iters = (unsigned)num(optarg, "--iters", 100000); break;
		case 'w': b.window = (unsigned)num(optarg, "--window", 256); break;
		case 'S': server = 1; break;
		case 'c': host = optarg; break;
		case 'p': port = (unsigned)num(optarg, "--port", 65535); break;
		case 'm': co.mtu = (uint16_t)num(optarg, "--mtu", 4096); break;
		case 'k': count = (unsigned)num(optarg, "--count", 100000000); break;
		case 'C': clients = (unsigned)num(optarg, "--clients", 64); break;
		case 'v': verify = 1; break;
		case 'P': peer = optarg; break;
		case 't': co.timeout = (uint8_t)num(optarg, "--timeout", 31); break;
		case 'R': co.retry_cnt = (uint8_t)num(optarg, "--retry", 7); break;
		case 'A': cpu.n = (unsigned long)num(optarg, "--cpu-adds", 1000000000); break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad_option(c, argv, "rnic --help");
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (rnic --help)", argv[optind]);
	if (server && host)
		die("--server and --client exclude each other");
	if (peer && host)
		die("--peer-file replaces --client HOST (the parameters come from the file, not over TCP)");
	if (faa_only && !host && !peer)
		die("%s needs --client HOST or --peer-file FILE (a node running rnic bench --server)",
		    faa_only == 2 ? "xatomic" : "faa");
	if (cpu.n && !server)
		die("--cpu-adds goes with --server (the server's CPU adds to its own word 0)");
	if (!clients)
		die("--clients must be 1..64");
	if (verify && !host && !peer)
		die("--verify goes with --client HOST (rnic check verifies data on one node)");
	if (!b.iters || !b.window || b.window > 256)
		die("--iters and --window must be 1.. (window at most 256)");
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > maxsize)
			maxsize = sizes[i];
	b.ctx = open_dev();
	side_init(&b.me, b.ctx, (size_t)maxsize + 8192 < (2u << 20) ? (2u << 20) : (size_t)maxsize + 8192,
		  rnic_random_psn());
	if (server)
		return peer ? bench_server_files(&b.me, peer, clients, &co, &cpu)
			    : bench_server(&b.me, port, clients, &co, &cpu);
	b.loopback = !host && !peer;
	if (peer) {
		char go[512];

		conn_read_file(peer, &b.peer);
		conn_print(0, &b.me.me);
		ret = rnic_qp_connect(b.me.qp, &b.me.me, &b.peer, &co);
		if (ret)
			fatal("connecting the QP", ret);
		snprintf(go, sizeof(go), "%s.go", peer); /* the server's QP is connected too */
		if (wait_file(go, 120))
			return 1;
	} else if (b.loopback) {
		side_init(&b.srv, b.ctx, b.me.len, rnic_random_psn());
		b.peer = b.srv.me;
		ret = rnic_qp_connect(b.srv.qp, &b.srv.me, &b.me.me, &co);
	} else {
		b.sock = rnic_tcp_connect(host, (uint16_t)port);
		if (b.sock < 0)
			fatal("connecting over TCP (is `rnic bench --server` running there?)", b.sock);
		ret = rnic_exchange(b.sock, &b.me.me, &b.peer);
		if (ret)
			fatal("exchanging QP parameters", ret);
	}
	if (!peer) {
		ret = ret ? ret : rnic_qp_connect(b.me.qp, &b.me.me, &b.peer, &co);
		if (ret)
			fatal("connecting the QP", ret);
	}
	if (faa_only == 2) {
		ret = xatomic_hammer(&b, count, b.window);
		if (host) {
			shutdown(b.sock, SHUT_WR);
			close(b.sock);
		}
		return ret;
	}
	if (faa_only) {
		uint64_t *orig = (uint64_t *)(b.me.buf + 4096), first = 0, last = 0;
		unsigned errs = 0, status = 0, done = 0;

		for (unsigned i = 0; i < count; i++) {
			struct rnic_send_wqe w = bench_wr(&b, OP_FAA, 8, i);
			struct rnic_cqe cq;

			rnic_post_send(b.me.qp, &w);
			cq = wait1(b.me.cq, 10000);
			if (cq.status) {
				errs++;
				status = cq.status;
				fprintf(stderr, "rnic faa: completion status %u (%s)\n", cq.status, rnic_wc_status_str(cq.status));
				break;
			}
			if (i == 0)
				first = *orig;
			last = *orig;
			done++;
		}
		printf("faa=%u done=%u errors=%u first=%llu last=%llu status=%u qp_state=%s\n", count, done, errs,
		       (unsigned long long)first, (unsigned long long)last, status,
		       rnic_qp_state_str(rnic_qp_state(b.me.qp)));
		if (host) {
			shutdown(b.sock, SHUT_WR);
			close(b.sock);
		}
		return errs ? 1 : 0;
	}
	printf("bench=%s node=%u mtu=%u iters=%u window=%u\n", b.loopback ? "loopback" : host ? host : "peer-file", b.ctx->info.node_id,
	       co.mtu ? co.mtu : b.ctx->info.max_mtu, b.iters, b.window);
	uint64_t *lw = calloc(b.iters, 8), *lm = calloc(b.iters, 8);

	if (verify)
		bench_verify(&b, sizes, nsizes);

	for (int oi = 0; oi < nops; oi++) {
		int op = (int)ops[oi];

		for (int si = 0; si < nsizes; si++) {
			uint32_t size = op >= OP_FAA ? 8 : (uint32_t)sizes[si];
			uint64_t wall, bw_wall;

			if (op >= OP_FAA && si > 0)
				break; /* atomics have one size */
			if (bench_run(&b, op, size, b.iters, 1, &wall, lw, lm) ||
			    bench_run(&b, op, size, b.iters, b.window, &bw_wall, NULL, NULL))
				return 1;
			printf("op=%s size=%u lat_us=%.2f lat_modeled_us=%.3f bw_mbps=%.3f msg_rate_kps=%.2f\n", op_names[op],
			       size, median(lw, b.iters) / 1e3, median(lm, b.iters) / 1e3,
			       (double)size * b.iters * 8 / (bw_wall / 1e3), b.iters / (bw_wall / 1e6));
			fflush(stdout);
		}
	}
	for (int ri = 0; ri < nrates; ri++) {
		uint64_t wall;

		if (bench_run(&b, OP_WRITE, 8, b.iters, (unsigned)rates[ri], &wall, NULL, NULL))
			return 1;
		printf("rate outstanding=%llu msg_rate_kps=%.1f\n", (unsigned long long)rates[ri], b.iters / (wall / 1e6));
	}
	free(lw);
	free(lm);
	if (host) {
		shutdown(b.sock, SHUT_WR);
		close(b.sock);
	}
	rnic_close(b.ctx);
	return verify ? check_summary() : 0;
}

/* ---- pmem: a WRITE (and FLUSH) into a persistent MR on another node ---- */

static int cmd_pmem(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", 0, 0, 'S' }, { "client", 1, 0, 'c' }, { "port", 1, 0, 'p' }, { "off", 1, 0, 'o' },
		{ "len", 1, 0, 'l' },	 { "seed", 1, 0, 's' },	  { "flush", 0, 0, 'f' }, { "help", 0, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	const char *host = NULL;
	int server = 0, flush = 0, c, ret, sock;
	unsigned port = 18516;
	uint64_t off = 0, len = 0, seed = 1;
	struct rnic_conn peer;
	struct side me;
	struct rnic_cqe cw, cf;
	struct rnic_send_wqe w;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'S': server = 1; break;
		case 'c': host = optarg; break;
		case 'p': port = (unsigned)num(optarg, "--port", 65535); break;
		case 'o': off = num(optarg, "--off", 1ull << 40); break;
		case 'l': len = num(optarg, "--len", 1ull << 30); break;
		case 's': seed = num(optarg, "--seed", ~0ull); break;
		case 'f': flush = 1; break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad_option(c, argv, "rnic --help");
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (rnic --help)", argv[optind]);
	if (server == !!host)
		die("pmem needs one of --server and --client HOST");
	if (server) {
		int fd = open("/dev/rkpmem0", O_RDWR), lfd;
		void *pm;
		char b;

		if (!len)
			len = 1u << 20;
		if (fd < 0)
			die("cannot open /dev/rkpmem0: %s (a node with pmem, the rackemu_pmem driver, root)", strerror(errno));
		pm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (pm == MAP_FAILED)
			die("cannot map %llu bytes of /dev/rkpmem0: %s", (unsigned long long)len, strerror(errno));
		side_init_buf(&me, open_dev(), pm, len, rnic_random_psn());
		lfd = rnic_tcp_listen((uint16_t)port);
		if (lfd < 0)
			fatal("listening on TCP", lfd);
		printf("pmem_server ready=1 len=%llu rkey=0x%x\n", (unsigned long long)len, me.mr.rkey);
		fflush(stdout);
		sock = rnic_tcp_accept(lfd);
		if (sock < 0)
			fatal("accepting the client", sock);
		ret = rnic_exchange(sock, &me.me, &peer);
		ret = ret ? ret : rnic_qp_connect(me.qp, &me.me, &peer, NULL);
		if (ret)
			fatal("connecting the QP", ret);
		while (read(sock, &b, 1) > 0) /* the client hangs up when it is done */
			;
		printf("pmem_server done=1\n");
		return 0;
	}
	if (!len)
		die("--client needs --len N (1..1G)");
	side_init(&me, open_dev(), (size_t)len, rnic_random_psn());
	fill(me.buf, (size_t)len, seed);
	sock = rnic_tcp_connect(host, (uint16_t)port);
	if (sock < 0)
		fatal("connecting over TCP (is `rnic pmem --server` running there?)", sock);
	ret = rnic_exchange(sock, &me.me, &peer);
	ret = ret ? ret : rnic_qp_connect(me.qp, &me.me, &peer, NULL);
	if (ret)
		fatal("connecting the QP", ret);
	if (off > peer.length || len > peer.length - off)
		die("[%llu, +%llu) is beyond the server's %llu bytes", (unsigned long long)off, (unsigned long long)len,
		    (unsigned long long)peer.length);
	w = wr(RNIC_WR_WRITE, 1, &me, 0, (uint32_t)len, peer.addr + off, peer.rkey);
	rnic_post_send(me.qp, &w);
	cw = wait1(me.cq, 10000);
	memset(&cf, 0, sizeof(cf));
	if (flush && !cw.status) {
		w = wr(RNIC_WR_FLUSH, 2, &me, 0, 0, peer.addr + off, peer.rkey);
		w.flush_type = ROCE_FETH_PLT_PERSIST | (ROCE_FETH_SEL_RANGE << 4);
		w.flush_len = (uint32_t)len;
		rnic_post_send(me.qp, &w);
		cf = wait1(me.cq, 10000);
	}
	printf("pmem_write ok=%d write_status=%u flush=%d flush_status=%u off=%llu len=%llu seed=%llu\n",
	       !cw.status && !cf.status, cw.status, flush, cf.status, (unsigned long long)off,
	       (unsigned long long)len, (unsigned long long)seed);
	shutdown(sock, SHUT_WR);
	close(sock);
	return cw.status || cf.status;
}

int main(int argc, char **argv)
{
	tool_prog = "rnic";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (argc > 2 && strcmp(argv[1], "bench") && strcmp(argv[1], "faa") && strcmp(argv[1], "xatomic") &&
	    strcmp(argv[1], "pmem"))
		die("'%s' takes no options (rnic --help)", argv[1]);
	if (!strcmp(argv[1], "info"))
		return cmd_info();
	if (!strcmp(argv[1], "counters"))
		return cmd_counters();
	if (!strcmp(argv[1], "check"))
		return cmd_check();
	if (!strcmp(argv[1], "bench"))
		return cmd_bench(argc - 1, argv + 1, 0);
	if (!strcmp(argv[1], "faa"))
		return cmd_bench(argc - 1, argv + 1, 1);
	if (!strcmp(argv[1], "xatomic"))
		return cmd_bench(argc - 1, argv + 1, 2);
	if (!strcmp(argv[1], "pmem"))
		return cmd_pmem(argc - 1, argv + 1);
	die("unknown command '%s' (rnic --help)", argv[1]);
}
