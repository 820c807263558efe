/* SPDX-License-Identifier: MIT */
/*
 * libshmem: rackemu's OpenSHMEM subset over the RNIC's verbs library (docs/shmem.md, shmem.h).
 *
 * One PE per process. At shmem_init each PE opens /dev/rnic0, registers its symmetric heap and its
 * data+bss segment as memory regions, creates one RC QP per PE (its own PE: a loopback pair, so
 * every operation, even on this PE's memory, is done by the NIC and its atomic unit) on one send
 * and one receive CQ, and learns every peer's QPNs, PSN, rkeys and bases over TCP from PE 0
 * (environment from `rackemu shmemrun`: RACKEMU_SHMEM_PE, _NPES, _ROOT, _PORT, _SECRET). Before
 * any record is sent, PE 0 and each PE prove to each other that they know the job's secret
 * (HMAC-SHA-256 over fresh nonces, sha256.h): a connection that cannot is refused and counted,
 * learns nothing of the job and takes no PE's place (docs/shmem.md, "Start-up authentication").
 *
 * Puts are non-blocking (the source is copied to a registered bounce ring, the WRITE posted);
 * gets and fetching atomics wait for their completion; non-fetching atomics are posted and
 * complete by shmem_quiet. At most SHMEM_MAX_OUTSTANDING operations are in flight per PE (1024,
 * HPCC RandomAccess's look-ahead limit): posting waits for a completion beyond it. A failed
 * completion is fatal (the standard's error model): a message on stderr naming the operation,
 * the target PE and the status, then exit(1).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "librnic.h"
#include "spin.h"
#include "sha256.h"
#include "shmem.h"

#define MAX_PES          64
#define SQ_LOG2          10     /* 1024 send WQEs per QP: never full under MAX_OUT */
#define RQ_LOG2          6      /* 64 receive buffers per peer for the message channel */
#define RQ_DEPTH         (1u << RQ_LOG2)
#define CQ_LOG2          12     /* 4096 CQEs: > MAX_OUT sends, > MAX_PES * RQ_DEPTH receives */
#define MAX_OUT          1024u
#define BOUNCE_SIZE      (4u << 20)
#define CHUNK            (64u << 10)
#define FETCH_BIT        (1ull << 63)
#define BOOT_MAGIC       0x53484d32u /* "SHM2": the start record, sent after the proofs */
#define CHALLENGE_MAGIC  0x43484d32u /* "CHM2": PE 0's challenge */
#define PROOF_MAGIC      0x50484d32u /* "PHM2": a PE's proof */
#define SECRET_LEN       32     /* RACKEMU_SHMEM_SECRET: 64 hex digits */
#define NONCE_LEN        32
#define BOOT_WAIT_MS     120000 /* PE 0 waits this long for every PE */
#define BOOT_CONN_MS     10000  /* a connection's time for each step (proof, record) */
#define BOOT_PENDING     (MAX_PES + 16) /* connections PE 0 serves at once; then one evicts the oldest unproven */
#define DEFAULT_HEAP     (32ull << 20)
#define HEAP_RESERVED    4096u  /* the heap's first page is not handed out */
#define PAGE             4096ul

struct boot_rec {
	uint32_t magic, pe, n, node, psn, heap_rkey, data_rkey, reserved;
	uint64_t heap_base, heap_len, data_base, data_len;
	uint32_t qpn[MAX_PES]; /* the QP this PE uses towards PE j */
};

/* Start-up (docs/shmem.md): PE 0 -> a new connection; the PE -> PE 0 (mac: HMAC(secret,
 * "rackemu-shmem pe" | challenge nonce | nonce | pe | n)); PE 0 -> the PE: HMAC(secret,
 * "rackemu-shmem pe0" | nonce | challenge nonce | pe | n); then the PE's boot_rec, and the table. */
struct boot_challenge {
	uint32_t magic, reserved;
	uint8_t nonce[NONCE_LEN];
};

struct boot_proof {
	uint32_t magic, pe, n, reserved;
	uint8_t nonce[NONCE_LEN];
	uint8_t mac[SHA256_LEN];
};

struct peer {
	struct rnic_qp *qp;
	uint64_t heap_base, data_base;
	uint32_t heap_rkey, data_rkey;
	uint8_t fence; /* the next WQE to this PE carries RNIC_WQE_F_FENCE */
};

struct msg {
	struct msg *next;
	int pe;
	uint32_t len;
	uint8_t data[];
};

struct blk {
	size_t off, len;
	int used;
};

static struct {
	int up, me, n;
	struct rnic_ctx *ctx;
	uint32_t pd;
	struct rnic_cq *scq, *rcq;
	struct peer peer[MAX_PES];
	struct rnic_qp *self_rx; /* receives what peer[me].qp sends (loopback) */
	int8_t qp2pe[RNIC_MAX_QP];
	uint8_t *heap;
	size_t heap_len;
	struct rnic_mr heap_mr;
	uintptr_t data_lo, data_hi;
	struct rnic_mr data_mr;
	uint8_t *priv;
	size_t priv_len;
	struct rnic_mr priv_mr;
	uint64_t *fetch_slot, *sink;
	uint8_t *bounce, *rbuf;
	size_t bounce_head;
	unsigned outstanding;
	uint64_t fetch_seq, fetch_done;
	int sock[MAX_PES];
	struct msg *mq_head, *mq_tail;
	uint64_t model_start, model_end, model_ops;
	struct blk *blk;
	size_t nblk;
	int xatomic;
	uint8_t secret[SECRET_LEN];   /* the job's (RACKEMU_SHMEM_SECRET), for the start-up proofs */
	unsigned refused;             /* start-up connections that did not prove the secret */
	uint64_t epoch;               /* barriers entered */
	uint64_t arrivals[MAX_PES];   /* barrier notifications received from each PE */
} S;

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#include <stdarg.h>
static void fatal(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "shmem: PE %d: ", S.me);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void need_init(const char *what)
{
	if (!S.up) {
		fprintf(stderr, "shmem: %s called before shmem_init (or after shmem_finalize)\n", what);
		exit(1);
	}
}

/* ---- completions ---- */

static const char *op_name(unsigned op)
{
	switch (op) {
	case RNIC_CQE_OP_WRITE:
		return "put (RDMA WRITE)";
	case RNIC_CQE_OP_READ:
		return "get (RDMA READ)";
	case RNIC_CQE_OP_CMP_SWAP:
		return "atomic (COMPARE_SWAP)";
	case RNIC_CQE_OP_FETCH_ADD:
		return "atomic (FETCH_ADD)";
	case RNIC_CQE_OP_SEND:
		return "message (SEND)";
	case RNIC_CQE_OP_XATOMIC:
	case RNIC_CQE_OP_XATOMIC_POST:
		return "atomic (extended)";
	default:
		return "operation";
	}
}

static int qp_pe(uint32_t qpn)
{
	uint32_t i = RNIC_QP_INDEX(qpn);

	return i < RNIC_MAX_QP ? S.qp2pe[i] : -1;
}

static int reap_send(void)
{
	struct rnic_cqe c[32];
	int got = rnic_poll_cq(S.scq, c, 32), i;

	if (got < 0)
		fatal("polling the send completion queue failed: %s", strerror(-got));
	for (i = 0; i < got; i++) {
		if (c[i].status != RNIC_WC_SUCCESS)
			fatal("%s to PE %d failed: %s (vendor_err %u); is PE %d still running?", op_name(c[i].opcode),
			      qp_pe(c[i].qpn), rnic_wc_status_str(c[i].status), c[i].vendor_err, qp_pe(c[i].qpn));
		S.outstanding--;
		if (c[i].wr_id & FETCH_BIT)
			S.fetch_done = c[i].wr_id;
		if (!S.model_ops || c[i].modeled_at_ns - c[i].modeled_ns < S.model_start)
			S.model_start = c[i].modeled_at_ns - c[i].modeled_ns;
		if (c[i].modeled_at_ns > S.model_end)
			S.model_end = c[i].modeled_at_ns;
		S.model_ops++;
	}
	return got;
}

static void post_recv(int pe, unsigned k)
{
	struct rnic_qp *qp = pe == S.me ? S.self_rx : S.peer[pe].qp;
	struct rnic_recv_wqe w = { .wr_id = (uint64_t)pe * RQ_DEPTH + k, .num_sge = 1 };
	int ret;

	w.sge[0].addr = (uintptr_t)(S.rbuf + ((size_t)pe * RQ_DEPTH + k) * SHMEMX_MSG_MAX);
	w.sge[0].length = SHMEMX_MSG_MAX;
	w.sge[0].lkey = S.priv_mr.lkey;
	ret = rnic_post_recv(qp, &w);
	if (ret)
		fatal("posting a receive buffer for PE %d failed: %s", pe, strerror(-ret));
}

/* Receive completions become queued messages (in arrival order) and their buffers are posted
 * again at once, so a sender never waits on this PE's application. */
static int reap_recv(void)
{
	struct rnic_cqe c[32];
	int got = rnic_poll_cq(S.rcq, c, 32), i;

	if (got < 0)
		fatal("polling the receive completion queue failed: %s", strerror(-got));
	for (i = 0; i < got; i++) {
		int pe = (int)(c[i].wr_id / RQ_DEPTH);
		unsigned k = (unsigned)(c[i].wr_id % RQ_DEPTH);
		struct msg *m;

		if (c[i].status != RNIC_WC_SUCCESS)
			fatal("receiving a message from PE %d failed: %s", pe, rnic_wc_status_str(c[i].status));
		if (pe >= S.n || c[i].byte_len > SHMEMX_MSG_MAX)
			fatal("receive completion with a bad wr_id %llu or length %u", (unsigned long long)c[i].wr_id,
			      c[i].byte_len);
		if (c[i].opcode == RNIC_CQE_OP_RECV_RDMA_IMM) { /* a barrier notification */
			S.arrivals[pe]++;
			post_recv(pe, k);
			continue;
		}
		m = malloc(sizeof(*m) + c[i].byte_len);
		if (!m)
			fatal("out of memory queueing a message");
		m->next = NULL;
		m->pe = pe;
		m->len = c[i].byte_len;
		memcpy(m->data, S.rbuf + ((size_t)pe * RQ_DEPTH + k) * SHMEMX_MSG_MAX, m->len);
		if (S.mq_tail)
			S.mq_tail->next = m;
		else
			S.mq_head = m;
		S.mq_tail = m;
		post_recv(pe, k);
	}
	return got;
}

static int progress(void)
{
	return reap_send() + reap_recv();
}

/* Wait until at least one completion arrived (or timeout_ms passed): spin ctx->spin_us with the
 * yield hint, then arm both CQs and block on the completion channel (the CQ interrupt). */
static void wait_progress(int timeout_ms)
{
	struct timespec t0, t;
	uint32_t cqns[4];

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (progress())
			return;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec - (uint64_t)t0.tv_nsec >=
		    (uint64_t)S.ctx->spin_us * 1000ull)
			break;
		spin_relax();
	}
	S.scq->db[RNIC_CQ_DB_ARM / 4] = RNIC_CQ_ARM_NEXT;
	S.rcq->db[RNIC_CQ_DB_ARM / 4] = RNIC_CQ_ARM_NEXT;
	if (progress())
		return;
	int ret = rnic_get_cq_events(S.ctx, cqns, 4, timeout_ms);
	if (ret < 0 && ret != -ETIMEDOUT && ret != -EINTR && ret != -EAGAIN)
		fatal("waiting for completions failed: %s", strerror(-ret));
	progress();
}

static void post(int pe, struct rnic_send_wqe *w)
{
	struct peer *p = &S.peer[pe];
	int ret;

	while (S.outstanding >= MAX_OUT)
		wait_progress(1000);
	w->flags |= RNIC_WQE_F_SIGNALED;
	if (p->fence) {
		w->flags |= RNIC_WQE_F_FENCE;
		p->fence = 0;
	}
	while ((ret = rnic_post_send(p->qp, w)) == -EAGAIN)
		wait_progress(1000);
	if (ret)
		fatal("posting to PE %d failed: %s", pe, strerror(-ret));
	S.outstanding++;
}

static void wait_fetch(uint64_t id)
{
	while (S.fetch_done != id)
		wait_progress(1000);
}

/* ---- addresses ---- */

static void check_pe(int pe, const char *what)
{
	if (pe < 0 || pe >= S.n)
		fatal("%s: PE %d does not exist (PEs 0..%d)", what, pe, S.n - 1);
}

/* The peer's address and rkey of [addr, addr + len) of this PE's symmetric objects. */
static void remote(const void *addr, size_t len, int pe, uint64_t *ra, uint32_t *rkey, const char *what)
{
	uintptr_t a = (uintptr_t)addr;

	check_pe(pe, what);
	if (a >= (uintptr_t)S.heap && a - (uintptr_t)S.heap <= S.heap_len && len <= S.heap_len - (a - (uintptr_t)S.heap)) {
		*ra = S.peer[pe].heap_base + (a - (uintptr_t)S.heap);
		*rkey = S.peer[pe].heap_rkey;
		return;
	}
	if (a >= S.data_lo && a - S.data_lo <= S.data_hi - S.data_lo && len <= S.data_hi - a) {
		*ra = S.peer[pe].data_base + (a - S.data_lo);
		*rkey = S.peer[pe].data_rkey;
		return;
	}
	fatal("%s: %p (+%zu bytes) is not a symmetric object (use shmem_malloc, or a global or static variable)",
	      what, addr, len);
}

/* ---- the private region: fetch slots, bounce ring, receive buffers ---- */

static uint8_t *bounce_alloc(size_t len)
{
	uint8_t *b;

	if (S.bounce_head + len > BOUNCE_SIZE)
		shmem_quiet(); /* every copy in the ring has been sent: start over */
	b = S.bounce + S.bounce_head;
	S.bounce_head += (len + 63) & ~(size_t)63;
	return b;
}

/* ---- bootstrap ---- */

/* All n bytes or -1 (a blocking stream send returns when all is queued; MSG_WAITALL fills) */
static int full_io(int fd, void *buf, size_t n, int send_it)
{
	ssize_t r;

	do
		r = send_it ? send(fd, buf, n, MSG_NOSIGNAL) : recv(fd, buf, n, MSG_WAITALL);
	while (r < 0 && errno == EINTR);
	return r == (ssize_t)n ? 0 : -1;
}

static unsigned long env_ul(const char *name, unsigned long def, unsigned long max)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || end == s || v > max)
		goto bad;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	if (*end || v > max)
		goto bad;
	return v;
bad:
	fprintf(stderr, "shmem: %s=%s is not a number up to %lu\n", name, s, max);
	exit(1);
}

/* The job's secret from RACKEMU_SHMEM_SECRET, then gone from the environment (a program's
 * children need not see it). */
static void read_secret(void)
{
	char *s = getenv("RACKEMU_SHMEM_SECRET");
	int i;

	if (!s || strlen(s) != 2 * SECRET_LEN)
		fatal("RACKEMU_SHMEM_SECRET is %s: the PEs of a job prove a secret of %d hex digits to each "
		      "other at start-up (rackemu shmemrun sets it; docs/shmem.md)",
		      s ? "not 64 hex digits" : "not set", 2 * SECRET_LEN);
	for (i = 0; i < SECRET_LEN; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", s[2 * i]) ||
		    !strchr("0123456789abcdefABCDEF", s[2 * i + 1]))
			fatal("RACKEMU_SHMEM_SECRET is not 64 hex digits");
		S.secret[i] = (uint8_t)v;
	}
	memset(s, 'x', strlen(s));
	unsetenv("RACKEMU_SHMEM_SECRET");
}

static void random_bytes(uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			fatal("getrandom failed: %s", strerror(errno));
		p += r, n -= (size_t)r;
	}
}

/* The proof of the secret by PE `pe` (to_pe0) or by PE 0 (!to_pe0), bound to both nonces. */
static void boot_mac(int to_pe0, const uint8_t *chal, const uint8_t *nonce, uint32_t pe, uint8_t out[SHA256_LEN])
{
	static const char label_pe[] = "rackemu-shmem pe", label_pe0[] = "rackemu-shmem pe0";
	const uint32_t n = (uint32_t)S.n;
	const void *part[5] = { to_pe0 ? label_pe : label_pe0, to_pe0 ? chal : nonce, to_pe0 ? nonce : chal, &pe, &n };
	const size_t len[5] = { to_pe0 ? sizeof(label_pe) : sizeof(label_pe0), NONCE_LEN, NONCE_LEN, 4, 4 };

	hmac_sha256(S.secret, SECRET_LEN, part, len, 5, out);
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* A connection to PE 0's port that has not yet given its start record. */
struct boot_conn {
	int fd;
	int proven;                 /* 0: its proof is awaited; 1: proven, its record is awaited */
	uint32_t pe;                /* proven: the PE it proved to be */
	size_t got;
	uint64_t deadline;
	uint8_t chal[NONCE_LEN];
	char who[32];
	union {
		struct boot_proof proof;
		struct boot_rec rec;
	} in;
};

static void refuse(struct boot_conn *c, const char *why)
{
	if (++S.refused <= 8)
		fprintf(stderr, "shmem: PE 0: refused a start-up connection from %s: %s\n", c->who, why);
	close(c->fd);
	c->fd = -1;
}

static void boot_accept(int l, struct boot_conn *pend, int *npend)
{
	struct boot_challenge ch = { .magic = CHALLENGE_MAGIC };
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	struct boot_conn *c;
	int fd = rnic_tcp_accept(l);

	if (fd < 0)
		return;
	if (*npend == BOOT_PENDING) { /* a flood of silent connections cannot lock the PEs out */
		int k, old = -1;

		for (k = 0; k < *npend; k++) /* at most NPES - 1 are proven: one is not */
			if (!pend[k].proven && (old < 0 || pend[k].deadline < pend[old].deadline))
				old = k;
		refuse(&pend[old], "too many start-up connections at once (the oldest goes)");
		pend[old] = pend[--(*npend)];
	}
	c = &pend[(*npend)++];
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->deadline = now_ms() + BOOT_CONN_MS;
	if (getpeername(fd, (struct sockaddr *)&a, &alen) || a.sin_family != AF_INET ||
	    !inet_ntop(AF_INET, &a.sin_addr, c->who, sizeof(c->who)))
		strcpy(c->who, "?");
	else
		snprintf(c->who + strlen(c->who), sizeof(c->who) - strlen(c->who), ":%u", ntohs(a.sin_port));
	random_bytes(c->chal, NONCE_LEN);
	memcpy(ch.nonce, c->chal, NONCE_LEN);
	if (send(fd, &ch, sizeof(ch), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(ch))
		refuse(c, "it did not take the challenge");
}

/* Progress one connection on PE 0; 1 when its PE joined (all[pe] and S.sock[pe] set). */
static int boot_serve(struct boot_conn *c, struct boot_rec *all)
{
	size_t want = c->proven ? sizeof(c->in.rec) : sizeof(c->in.proof);
	ssize_t r = recv(c->fd, (uint8_t *)&c->in + c->got, want - c->got, MSG_DONTWAIT);
	uint8_t mac[SHA256_LEN];

	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r <= 0) {
		if (c->proven)
			fatal("PE %u left (exited or died) before sending its start record", c->pe);
		refuse(c, "it left without proving the job's secret");
		return 0;
	}
	c->got += (size_t)r;
	if (c->got < want)
		return 0;
	if (!c->proven) {
		struct boot_proof *p = &c->in.proof;
		uint32_t pe = p->pe;

		boot_mac(1, c->chal, p->nonce, pe, mac);
		if (p->magic != PROOF_MAGIC || p->n != (uint32_t)S.n || pe == 0 || pe >= (uint32_t)S.n ||
		    !sha256_equal(mac, p->mac, SHA256_LEN)) {
			refuse(c, "it did not prove the job's secret (RACKEMU_SHMEM_SECRET)");
			return 0;
		}
		if (S.sock[pe] >= 0)
			fatal("two PEs proved the job's secret as PE %u: every PE must have its own "
			      "RACKEMU_SHMEM_PE", pe);
		boot_mac(0, c->chal, p->nonce, pe, mac);
		if (send(c->fd, mac, sizeof(mac), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(mac))
			fatal("sending PE 0's proof to PE %u failed", pe);
		c->proven = 1;
		c->pe = pe;
		c->got = 0;
		c->deadline = now_ms() + BOOT_CONN_MS;
		return 0;
	}
	if (c->in.rec.magic != BOOT_MAGIC || c->in.rec.n != (uint32_t)S.n || c->in.rec.pe != c->pe || S.sock[c->pe] >= 0)
		fatal("PE %u sent a bad start record (pe %u of %u), or two PEs proved to be PE %u", c->pe,
		      c->in.rec.pe, c->in.rec.n, c->pe);
	all[c->pe] = c->in.rec;
	S.sock[c->pe] = c->fd;
	c->fd = -1;
	return 1;
}

static void exchange(struct boot_rec *all)
{
	const char *root = getenv("RACKEMU_SHMEM_ROOT");
	unsigned port = (unsigned)env_ul("RACKEMU_SHMEM_PORT", 18600, 65535);
	int i;

	if (!root || !*root)
		root = "node0";
	if (S.me == 0) {
		struct boot_conn pend[BOOT_PENDING];
		struct pollfd pfd[BOOT_PENDING + 1];
		uint64_t end = now_ms() + BOOT_WAIT_MS;
		int l = rnic_tcp_listen((uint16_t)port), npend = 0, joined = 1;

		if (l < 0)
			fatal("listening on TCP port %u failed: %s (RACKEMU_SHMEM_PORT)", port, strerror(-l));
		while (joined < S.n) {
			uint64_t now = now_ms(), wake = end;
			int k;

			if (now >= end)
				fatal("only %d of %d PEs connected within %d s", joined, S.n, BOOT_WAIT_MS / 1000);
			pfd[0] = (struct pollfd){ .fd = l, .events = POLLIN };
			for (k = 0; k < npend; k++) {
				pfd[k + 1] = (struct pollfd){ .fd = pend[k].fd, .events = POLLIN };
				if (pend[k].deadline < wake)
					wake = pend[k].deadline;
			}
			if (poll(pfd, (nfds_t)npend + 1, wake > now ? (int)(wake - now) : 0) < 0 && errno != EINTR)
				fatal("waiting for the PEs failed: %s", strerror(errno));
			now = now_ms();
			for (k = 0; k < npend; k++) {
				if (pfd[k + 1].revents)
					joined += boot_serve(&pend[k], all);
				if (pend[k].fd < 0 || now < pend[k].deadline) /* a trickle of bytes does not extend it */
					continue;
				if (pend[k].proven)
					fatal("PE %u proved the job's secret but sent no start record within %d s",
					      pend[k].pe, BOOT_CONN_MS / 1000);
				refuse(&pend[k], "no proof of the job's secret in time");
			}
			for (k = 0; k < npend;) /* drop the finished ones (joined or refused) */
				if (pend[k].fd < 0)
					pend[k] = pend[--npend];
				else
					k++;
			if (pfd[0].revents & POLLIN)
				boot_accept(l, pend, &npend);
		}
		close(l);
		for (i = 0; i < npend; i++)
			refuse(&pend[i], "still unproven when every PE had joined");
		if (S.refused)
			fprintf(stderr, "shmem: PE 0: refused %u start-up connection(s) that did not prove the job's secret\n",
				S.refused);
		for (i = 1; i < S.n; i++)
			if (full_io(S.sock[i], all, sizeof(*all) * (size_t)S.n, 1))
				fatal("sending the PE table to PE %d failed", i);
	} else {
		struct boot_challenge ch;
		struct boot_proof p = { .magic = PROOF_MAGIC, .pe = (uint32_t)S.me, .n = (uint32_t)S.n };
		struct timeval tv = { .tv_sec = BOOT_WAIT_MS / 1000 + 30 };
		uint8_t mac[SHA256_LEN], want[SHA256_LEN];
		int c = -1, tries;

		for (tries = 0; tries < 12 && c < 0; tries++) /* rnic_tcp_connect retries 10 s itself */
			c = rnic_tcp_connect(root, (uint16_t)port);
		if (c < 0)
			fatal("connecting to PE 0 at %s:%u failed: %s", root, port, strerror(-c));
		S.sock[0] = c;
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)); /* a silent impostor fails us */
		if (full_io(c, &ch, sizeof(ch), 0) || ch.magic != CHALLENGE_MAGIC)
			fatal("%s:%u did not answer as PE 0 of a job (no start-up challenge)", root, port);
		random_bytes(p.nonce, NONCE_LEN);
		boot_mac(1, ch.nonce, p.nonce, p.pe, p.mac);
		if (full_io(c, &p, sizeof(p), 1) || full_io(c, mac, sizeof(mac), 0))
			fatal("PE 0 at %s:%u refused this PE's proof of the job's secret (not the same "
			      "RACKEMU_SHMEM_SECRET, or another job on that port)",
			      root, port);
		boot_mac(0, ch.nonce, p.nonce, p.pe, want);
		if (!sha256_equal(mac, want, SHA256_LEN))
			fatal("the process at %s:%u does not know the job's secret: it is not this job's PE 0", root,
			      port);
		if (full_io(c, &all[S.me], sizeof(*all), 1) || full_io(c, all, sizeof(*all) * (size_t)S.n, 0))
			fatal("exchanging the start records with PE 0 failed (did it exit?)");
		tv.tv_sec = 0;
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
}

/* One byte each way between PE 0 and every PE, while progressing completions (a peer's message
 * may need this PE's receive buffers before it reaches the barrier). */
static void tcp_barrier(void)
{
	char b = 'b';
	int i;

	if (S.n == 1)
		return;
	if (S.me == 0) {
		for (i = 1; i < S.n; i++) {
			for (;;) {
				struct pollfd p = { .fd = S.sock[i], .events = POLLIN };

				if (poll(&p, 1, 1) == 1)
					break;
				progress();
			}
			if (full_io(S.sock[i], &b, 1, 0))
				fatal("PE %d left (exited or died) before the barrier", i);
		}
		for (i = 1; i < S.n; i++)
			if (full_io(S.sock[i], &b, 1, 1))
				fatal("PE %d left (exited or died) during the barrier", i);
	} else {
		if (full_io(S.sock[0], &b, 1, 1))
			fatal("PE 0 left (exited or died) before the barrier");
		for (;;) {
			struct pollfd p = { .fd = S.sock[0], .events = POLLIN };

			if (poll(&p, 1, 1) == 1)
				break;
			progress();
		}
		if (full_io(S.sock[0], &b, 1, 0))
			fatal("PE 0 left (exited or died) during the barrier");
	}
}

extern char __data_start[], _end[];

static void reg(void *addr, size_t len, struct rnic_mr *mr, const char *what)
{
	int ret = rnic_reg_mr(S.ctx, S.pd, addr, len, RNIC_ACCESS_ALL, mr);

	if (ret)
		fatal("registering the %s (%zu bytes) failed: %s%s", what, len, strerror(-ret),
		      ret == -ENOMEM ? " (raise `ulimit -l` or SHMEM_SYMMETRIC_SIZE down)" : "");
}

void shmem_init(void)
{
	struct rnic_conn_opts opts = { .rd_atomic = 64 };
	struct boot_rec *all;
	uint32_t psn;
	int i, ret;

	if (S.up)
		return;
	memset(&S, 0, sizeof(S));
	for (i = 0; i < MAX_PES; i++)
		S.sock[i] = -1;
	memset(S.qp2pe, -1, sizeof(S.qp2pe));
	S.n = (int)env_ul("RACKEMU_SHMEM_NPES", 1, MAX_PES);
	S.me = (int)env_ul("RACKEMU_SHMEM_PE", 0, MAX_PES - 1);
	if (S.n < 1 || S.me >= S.n)
		fatal("RACKEMU_SHMEM_PE=%d is not below RACKEMU_SHMEM_NPES=%d (run the program with rackemu shmemrun)",
		      S.me, S.n);
	if (S.n > 1)
		read_secret();
	S.ctx = rnic_open(NULL);
	if (!S.ctx)
		fatal("opening the RNIC (%s) failed: %s (does the node have -device rackemu-rnic?)", RNIC_DEV_PATH,
		      strerror(errno));
	/* the extended atomics when the device has them; RACKEMU_SHMEM_XATOMIC=0 forces the
	 * compare-swap loops (for comparison) */
	S.xatomic = (S.ctx->info.caps & RNIC_CAP_XATOMIC) && env_ul("RACKEMU_SHMEM_XATOMIC", 1, 1);
	ret = rnic_alloc_pd(S.ctx, &S.pd);
	if (ret)
		fatal("allocating a protection domain failed: %s", strerror(-ret));
	S.scq = rnic_create_cq(S.ctx, CQ_LOG2);
	S.rcq = rnic_create_cq(S.ctx, CQ_LOG2);
	if (!S.scq || !S.rcq)
		fatal("creating the completion queues failed: %s", strerror(errno));

	S.heap_len = (size_t)env_ul("SHMEM_SYMMETRIC_SIZE", DEFAULT_HEAP, 1ul << 30);
	S.heap_len = (S.heap_len + PAGE - 1) & ~(PAGE - 1);
	if (S.heap_len < 2 * PAGE)
		S.heap_len = 2 * PAGE;
	S.heap = mmap(NULL, S.heap_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (S.heap == MAP_FAILED)
		fatal("mapping a symmetric heap of %zu bytes failed (SHMEM_SYMMETRIC_SIZE)", S.heap_len);
	reg(S.heap, S.heap_len, &S.heap_mr, "symmetric heap");
	S.data_lo = (uintptr_t)__data_start & ~(PAGE - 1);
	S.data_hi = ((uintptr_t)_end + PAGE - 1) & ~(PAGE - 1);
	if (rnic_reg_mr(S.ctx, S.pd, (void *)S.data_lo, S.data_hi - S.data_lo, RNIC_ACCESS_ALL, &S.data_mr)) {
		/* the first page may be read-only (RELRO): start at the next one */
		S.data_lo = ((uintptr_t)__data_start + PAGE - 1) & ~(PAGE - 1);
		reg((void *)S.data_lo, S.data_hi - S.data_lo, &S.data_mr, "data segment");
	}
	S.priv_len = 4096 + BOUNCE_SIZE + (size_t)S.n * RQ_DEPTH * SHMEMX_MSG_MAX;
	S.priv = mmap(NULL, S.priv_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (S.priv == MAP_FAILED)
		fatal("mapping %zu bytes of buffers failed", S.priv_len);
	reg(S.priv, S.priv_len, &S.priv_mr, "buffers");
	S.fetch_slot = (uint64_t *)S.priv;
	S.sink = (uint64_t *)(S.priv + 64);
	S.bounce = S.priv + 4096;
	S.rbuf = S.bounce + BOUNCE_SIZE;

	for (i = 0; i < S.n; i++) {
		S.peer[i].qp = rnic_create_qp(S.ctx, S.pd, S.scq, S.rcq, SQ_LOG2, RQ_LOG2);
		if (!S.peer[i].qp)
			fatal("creating the QP for PE %d failed: %s", i, strerror(errno));
		S.qp2pe[RNIC_QP_INDEX(S.peer[i].qp->qpn)] = (int8_t)i;
	}
	S.self_rx = rnic_create_qp(S.ctx, S.pd, S.scq, S.rcq, 1, RQ_LOG2);
	if (!S.self_rx)
		fatal("creating the loopback QP failed: %s", strerror(errno));
	S.qp2pe[RNIC_QP_INDEX(S.self_rx->qpn)] = (int8_t)S.me;

	all = calloc((size_t)S.n, sizeof(*all));
	if (!all)
		fatal("out of memory");
	psn = rnic_random_psn();
	all[S.me] = (struct boot_rec){ .magic = BOOT_MAGIC, .pe = (uint32_t)S.me, .n = (uint32_t)S.n,
				       .node = S.ctx->info.node_id, .psn = psn, .heap_rkey = S.heap_mr.rkey,
				       .data_rkey = S.data_mr.rkey, .heap_base = (uintptr_t)S.heap,
				       .heap_len = S.heap_len, .data_base = S.data_lo, .data_len = S.data_hi - S.data_lo };
	for (i = 0; i < S.n; i++)
		all[S.me].qpn[i] = S.peer[i].qp->qpn;
	if (S.n > 1)
		exchange(all);
	for (i = 0; i < S.n; i++) {
		struct rnic_conn local = { .node = S.ctx->info.node_id, .qpn = S.peer[i].qp->qpn, .psn = psn };
		struct rnic_conn rem = { .node = all[i].node, .qpn = all[i].qpn[S.me], .psn = all[i].psn };

		if (all[i].heap_len != S.heap_len || all[i].data_len != S.data_hi - S.data_lo)
			fatal("PE %d has another symmetric layout (heap %llu, data %llu bytes; here %zu, %zu): every PE "
			      "must run the same program with the same SHMEM_SYMMETRIC_SIZE",
			      i, (unsigned long long)all[i].heap_len, (unsigned long long)all[i].data_len, S.heap_len,
			      (size_t)(S.data_hi - S.data_lo));
		S.peer[i].heap_base = all[i].heap_base;
		S.peer[i].heap_rkey = all[i].heap_rkey;
		S.peer[i].data_base = all[i].data_base;
		S.peer[i].data_rkey = all[i].data_rkey;
		if (i == S.me) {
			struct rnic_conn rx = { .node = S.ctx->info.node_id, .qpn = S.self_rx->qpn, .psn = psn };

			ret = rnic_qp_connect(S.peer[i].qp, &local, &rx, &opts);
			if (!ret)
				ret = rnic_qp_connect(S.self_rx, &rx, &local, &opts);
		} else {
			ret = rnic_qp_connect(S.peer[i].qp, &local, &rem, &opts);
		}
		if (ret)
			fatal("connecting the QP to PE %d (node %u) failed: %s", i, all[i].node, strerror(-ret));
	}
	free(all);
	for (i = 0; i < S.n; i++)
		for (unsigned k = 0; k < RQ_DEPTH; k++)
			post_recv(i, k);
	S.blk = malloc(sizeof(*S.blk));
	if (!S.blk)
		fatal("out of memory");
	S.blk[0] = (struct blk){ HEAP_RESERVED, S.heap_len - HEAP_RESERVED, 0 };
	S.nblk = 1;
	S.up = 1;
	tcp_barrier(); /* every QP is ready to receive before anyone sends */
}

void shmem_finalize(void)
{
	int i;

	if (!S.up)
		return;
	shmem_barrier_all();
	shmem_quiet();
	tcp_barrier(); /* every PE's last operations completed before anyone destroys its QPs */
	S.up = 0;
	for (i = 0; i < S.n; i++) {
		rnic_destroy_qp(S.peer[i].qp);
		if (S.sock[i] >= 0)
			close(S.sock[i]);
	}
	rnic_destroy_qp(S.self_rx);
	rnic_dereg_mr(S.ctx, &S.heap_mr);
	rnic_dereg_mr(S.ctx, &S.data_mr);
	rnic_dereg_mr(S.ctx, &S.priv_mr);
	rnic_destroy_cq(S.scq);
	rnic_destroy_cq(S.rcq);
	rnic_dealloc_pd(S.ctx, S.pd);
	rnic_close(S.ctx);
	munmap(S.heap, S.heap_len);
	munmap(S.priv, S.priv_len);
	while (S.mq_head) {
		struct msg *m = S.mq_head;

		S.mq_head = m->next;
		free(m);
	}
	free(S.blk);
}

void shmem_global_exit(int status)
{
	fflush(NULL);
	exit(status);
}

int shmem_my_pe(void)
{
	return S.me;
}

int shmem_n_pes(void)
{
	return S.n;
}

int _my_pe(void)
{
	return S.me;
}

int _num_pes(void)
{
	return S.n;
}

void shmem_info_get_version(int *major, int *minor)
{
	*major = SHMEM_MAJOR_VERSION;
	*minor = SHMEM_MINOR_VERSION;
}

void shmem_info_get_name(char *name)
{
	snprintf(name, SHMEM_MAX_NAME_LEN, "%s", SHMEM_VENDOR_STRING);
}

/* ---- the symmetric heap: first fit over a block list kept outside the heap (peers write into
 * the heap; they cannot corrupt the allocator). Every PE calls in the same order, so every PE
 * hands out the same offsets. ---- */

static void *heap_alloc(size_t align, size_t size)
{
	size_t i;

	if (!size || (align & (align - 1)))
		return NULL;
	if (align < 64)
		align = 64;
	size = (size + 63) & ~(size_t)63;
	for (i = 0; i < S.nblk; i++) {
		struct blk b = S.blk[i];
		size_t a = (b.off + align - 1) & ~(align - 1);
		struct blk *nb;
		size_t k = 0, parts;

		if (b.used || a < b.off || a - b.off > b.len || size > b.len - (a - b.off))
			continue;
		parts = (a > b.off) + 1 + (a + size < b.off + b.len);
		nb = realloc(S.blk, (S.nblk + parts - 1) * sizeof(*nb));
		if (!nb)
			return NULL;
		S.blk = nb;
		memmove(&S.blk[i + parts], &S.blk[i + 1], (S.nblk - i - 1) * sizeof(*nb));
		if (a > b.off)
			S.blk[i + k++] = (struct blk){ b.off, a - b.off, 0 };
		S.blk[i + k++] = (struct blk){ a, size, 1 };
		if (a + size < b.off + b.len)
			S.blk[i + k++] = (struct blk){ a + size, b.off + b.len - a - size, 0 };
		S.nblk += parts - 1;
		return S.heap + a;
	}
	return NULL;
}

void *shmem_align(size_t alignment, size_t size)
{
	void *p;

	need_init("shmem_align");
	p = heap_alloc(alignment, size);
	shmem_barrier_all();
	return p;
}

void *shmem_malloc(size_t size)
{
	return shmem_align(64, size);
}

void *shmem_calloc(size_t count, size_t size)
{
	void *p;

	if (size && count > SIZE_MAX / size)
		return NULL;
	need_init("shmem_calloc");
	p = heap_alloc(64, count * size);
	if (p)
		memset(p, 0, count * size);
	shmem_barrier_all();
	return p;
}

void shmem_free(void *ptr)
{
	size_t i, off;

	if (!ptr)
		return;
	need_init("shmem_free");
	shmem_barrier_all();
	off = (size_t)((uint8_t *)ptr - S.heap);
	for (i = 0; i < S.nblk; i++)
		if (S.blk[i].used && S.blk[i].off == off)
			break;
	if (i == S.nblk)
		fatal("shmem_free(%p): not a block shmem_malloc returned (or freed twice)", ptr);
	S.blk[i].used = 0;
	if (i + 1 < S.nblk && !S.blk[i + 1].used) {
		S.blk[i].len += S.blk[i + 1].len;
		memmove(&S.blk[i + 1], &S.blk[i + 2], (S.nblk - i - 2) * sizeof(*S.blk));
		S.nblk--;
	}
	if (i > 0 && !S.blk[i - 1].used) {
		S.blk[i - 1].len += S.blk[i].len;
		memmove(&S.blk[i], &S.blk[i + 1], (S.nblk - i - 1) * sizeof(*S.blk));
		S.nblk--;
	}
}

int shmem_addr_accessible(const void *addr, int pe)
{
	uintptr_t a = (uintptr_t)addr;

	if (pe < 0 || pe >= S.n)
		return 0;
	return (a >= (uintptr_t)S.heap && a < (uintptr_t)S.heap + S.heap_len) || (a >= S.data_lo && a < S.data_hi);
}

int shmem_pe_accessible(int pe)
{
	return pe >= 0 && pe < S.n;
}

void *shmem_ptr(const void *dest, int pe)
{
	(void)dest;
	(void)pe;
	return NULL; /* no load/store path to another PE's memory through the RNIC */
}

/* ---- RMA ---- */

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe)
{
	const uint8_t *s = source;
	uint8_t *d = dest;

	need_init("shmem_putmem");
	while (nelems) {
		size_t c = nelems < CHUNK ? nelems : CHUNK;
		struct rnic_send_wqe w = { .opcode = RNIC_WR_WRITE, .num_sge = 1 };
		uint8_t *b;

		remote(d, c, pe, &w.remote_addr, &w.rkey, "shmem_put");
		b = bounce_alloc(c);
		memcpy(b, s, c);
		w.sge[0] = (struct rnic_sge){ (uintptr_t)b, (uint32_t)c, S.priv_mr.lkey };
		post(pe, &w);
		d += c;
		s += c;
		nelems -= c;
	}
}

void shmem_getmem(void *dest, const void *source, size_t nelems, int pe)
{
	const uint8_t *s = source;
	uint8_t *d = dest;

	need_init("shmem_getmem");
	while (nelems) {
		size_t c = nelems < BOUNCE_SIZE / 2 ? nelems : BOUNCE_SIZE / 2;
		struct rnic_send_wqe w = { .opcode = RNIC_WR_READ, .num_sge = 1 };
		uint8_t *b;

		remote(s, c, pe, &w.remote_addr, &w.rkey, "shmem_get");
		b = bounce_alloc(c);
		w.wr_id = FETCH_BIT | ++S.fetch_seq;
		w.sge[0] = (struct rnic_sge){ (uintptr_t)b, (uint32_t)c, S.priv_mr.lkey };
		post(pe, &w);
		wait_fetch(w.wr_id);
		memcpy(d, b, c);
		d += c;
		s += c;
		nelems -= c;
	}
}

#define RMA(NAME, TYPE)                                                                 \
	void shmem_##NAME##_put(TYPE *dest, const TYPE *source, size_t nelems, int pe) \
	{                                                                               \
		shmem_putmem(dest, source, nelems * sizeof(TYPE), pe);                  \
	}                                                                               \
	void shmem_##NAME##_get(TYPE *dest, const TYPE *source, size_t nelems, int pe) \
	{                                                                               \
		shmem_getmem(dest, source, nelems * sizeof(TYPE), pe);                  \
	}                                                                               \
	void shmem_##NAME##_p(TYPE *dest, TYPE value, int pe)                          \
	{                                                                               \
		shmem_putmem(dest, &value, sizeof(TYPE), pe);                           \
	}                                                                               \
	TYPE shmem_##NAME##_g(const TYPE *source, int pe)                              \
	{                                                                               \
		TYPE v;                                                                 \
		shmem_getmem(&v, source, sizeof(TYPE), pe);                             \
		return v;                                                               \
	}
RMA(char, char)
RMA(short, short)
RMA(int, int)
RMA(long, long)
RMA(longlong, long long)
RMA(int32, int32_t)
RMA(int64, int64_t)
RMA(uint64, uint64_t)
RMA(double, double)
#undef RMA

#define SIZED(BITS, BYTES)                                                     \
	void shmem_put##BITS(void *dest, const void *source, size_t nelems, int pe) \
	{                                                                      \
		shmem_putmem(dest, source, nelems * (BYTES), pe);              \
	}                                                                      \
	void shmem_get##BITS(void *dest, const void *source, size_t nelems, int pe) \
	{                                                                      \
		shmem_getmem(dest, source, nelems * (BYTES), pe);              \
	}
SIZED(8, 1)
SIZED(16, 2)
SIZED(32, 4)
SIZED(64, 8)
SIZED(128, 16)
#undef SIZED

/* ---- atomics ---- */

enum amo_op { AMO_ADD, AMO_CSWAP, AMO_SWAP, AMO_XOR, AMO_AND, AMO_OR };

/* One IB atomic (FETCH_ADD or CMP_SWAP) on the 8 bytes at dest of pe; with fetch, waits and
 * returns the value before it; without, it completes by shmem_quiet. */
static uint64_t ib_atomic(int pe, void *dest, unsigned opcode, uint64_t swap_add, uint64_t compare, int fetch,
			  const char *what)
{
	struct rnic_send_wqe w = { .opcode = (uint8_t)opcode, .num_sge = 1, .swap_add = swap_add, .compare = compare };

	remote(dest, 8, pe, &w.remote_addr, &w.rkey, what);
	if (w.remote_addr & 7)
		fatal("%s: %p is not 8-byte aligned", what, dest);
	w.wr_id = fetch ? FETCH_BIT | ++S.fetch_seq : 0;
	w.sge[0] = (struct rnic_sge){ (uintptr_t)(fetch ? S.fetch_slot : S.sink), 8, S.priv_mr.lkey };
	post(pe, &w);
	if (!fetch)
		return 0;
	wait_fetch(w.wr_id);
	return *(volatile uint64_t *)S.fetch_slot;
}

static uint64_t apply(enum amo_op op, uint64_t old, uint64_t v)
{
	switch (op) {
	case AMO_XOR:
		return old ^ v;
	case AMO_AND:
		return old & v;
	case AMO_OR:
		return old | v;
	default:
		return v; /* SWAP */
	}
}

/* One extended atomic (the RNIC's atomic unit, RNIC_CAP_XATOMIC): fetch waits and returns the
 * old value; without fetch it is posted (XATOMIC_POST) and completes by shmem_quiet. */
static uint64_t x_atomic(int pe, void *dest, unsigned xop, uint64_t operand, int fetch, const char *what)
{
	struct rnic_xatomic x = { .op = (uint8_t)xop, .size = ROCE_XATOMIC_SIZE64, .operand = operand,
				  .mask = ~0ull };
	struct rnic_send_wqe w;

	remote(dest, 8, pe, &x.remote_addr, &x.rkey, what);
	if (x.remote_addr & 7)
		fatal("%s: %p is not 8-byte aligned", what, dest);
	if (fetch) {
		x.wr_id = FETCH_BIT | ++S.fetch_seq;
		x.result = S.fetch_slot;
		x.result_lkey = S.priv_mr.lkey;
	}
	rnic_wqe_xatomic(&w, &x);
	post(pe, &w);
	if (!fetch)
		return 0;
	wait_fetch(x.wr_id);
	return *(volatile uint64_t *)S.fetch_slot;
}

static uint64_t amo(int pe, void *dest, enum amo_op op, uint64_t v, uint64_t cmp, int fetch, const char *what)
{
	static const unsigned xop[] = { [AMO_ADD] = ROCE_XOP_ADD, [AMO_SWAP] = ROCE_XOP_SWAP,
					[AMO_XOR] = ROCE_XOP_XOR, [AMO_AND] = ROCE_XOP_AND, [AMO_OR] = ROCE_XOP_OR };
	uint64_t old, got;

	need_init(what);
	if (op == AMO_CSWAP)
		return ib_atomic(pe, dest, RNIC_WR_CMP_SWAP, v, cmp, 1, what);
	if (op == AMO_ADD && (fetch || !S.xatomic))
		return ib_atomic(pe, dest, RNIC_WR_FETCH_ADD, v, 0, fetch, what);
	if (S.xatomic)
		return x_atomic(pe, dest, xop[op], v, fetch, what);
	/* without the extended atomics: swap and the bitwise operations as a compare-swap loop over
	 * the IB atomics (each step one atomic at the target; it ends when no other update came in
	 * between) */
	old = ib_atomic(pe, dest, RNIC_WR_FETCH_ADD, 0, 0, 1, what);
	for (;;) {
		got = ib_atomic(pe, dest, RNIC_WR_CMP_SWAP, apply(op, old, v), old, 1, what);
		if (got == old)
			return old;
		old = got;
	}
}

#define AMO(NAME, TYPE)                                                                              \
	TYPE shmem_##NAME##_atomic_fetch(const TYPE *source, int pe)                                   \
	{                                                                                            \
		return (TYPE)amo(pe, (void *)source, AMO_ADD, 0, 0, 1, "shmem_atomic_fetch");          \
	}                                                                                            \
	void shmem_##NAME##_atomic_set(TYPE *dest, TYPE value, int pe)                                 \
	{                                                                                            \
		amo(pe, dest, AMO_SWAP, (uint64_t)value, 0, 0, "shmem_atomic_set");                    \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_compare_swap(TYPE *dest, TYPE cond, TYPE value, int pe)             \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_CSWAP, (uint64_t)value, (uint64_t)cond, 1,              \
				 "shmem_atomic_compare_swap");                                        \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_swap(TYPE *dest, TYPE value, int pe)                                \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_SWAP, (uint64_t)value, 0, 1, "shmem_atomic_swap");      \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_fetch_inc(TYPE *dest, int pe)                                       \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_ADD, 1, 0, 1, "shmem_atomic_fetch_inc");                \
	}                                                                                            \
	void shmem_##NAME##_atomic_inc(TYPE *dest, int pe)                                             \
	{                                                                                            \
		amo(pe, dest, AMO_ADD, 1, 0, 0, "shmem_atomic_inc");                                   \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_fetch_add(TYPE *dest, TYPE value, int pe)                           \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_ADD, (uint64_t)value, 0, 1, "shmem_atomic_fetch_add");  \
	}                                                                                            \
	void shmem_##NAME##_atomic_add(TYPE *dest, TYPE value, int pe)                                 \
	{                                                                                            \
		amo(pe, dest, AMO_ADD, (uint64_t)value, 0, 0, "shmem_atomic_add");                     \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_fetch_and(TYPE *dest, TYPE value, int pe)                           \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_AND, (uint64_t)value, 0, 1, "shmem_atomic_fetch_and");  \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_fetch_or(TYPE *dest, TYPE value, int pe)                            \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_OR, (uint64_t)value, 0, 1, "shmem_atomic_fetch_or");    \
	}                                                                                            \
	TYPE shmem_##NAME##_atomic_fetch_xor(TYPE *dest, TYPE value, int pe)                           \
	{                                                                                            \
		return (TYPE)amo(pe, dest, AMO_XOR, (uint64_t)value, 0, 1, "shmem_atomic_fetch_xor");  \
	}                                                                                            \
	void shmem_##NAME##_atomic_and(TYPE *dest, TYPE value, int pe)                                 \
	{                                                                                            \
		amo(pe, dest, AMO_AND, (uint64_t)value, 0, 0, "shmem_atomic_and");                     \
	}                                                                                            \
	void shmem_##NAME##_atomic_or(TYPE *dest, TYPE value, int pe)                                  \
	{                                                                                            \
		amo(pe, dest, AMO_OR, (uint64_t)value, 0, 0, "shmem_atomic_or");                       \
	}                                                                                            \
	void shmem_##NAME##_atomic_xor(TYPE *dest, TYPE value, int pe)                                 \
	{                                                                                            \
		amo(pe, dest, AMO_XOR, (uint64_t)value, 0, 0, "shmem_atomic_xor");                     \
	}
AMO(long, long)
AMO(longlong, long long)
AMO(int64, int64_t)
AMO(uint64, uint64_t)
#undef AMO

/* ---- ordering and synchronisation ---- */

void shmem_quiet(void)
{
	need_init("shmem_quiet");
	while (S.outstanding)
		wait_progress(1000);
	S.bounce_head = 0;
}

/* Puts to one PE are delivered in order on its RC QP; the fence flag on the next WQE to each PE
 * also orders it after earlier READs and atomics to that PE (IBV_SEND_FENCE). */
void shmem_fence(void)
{
	int i;

	need_init("shmem_fence");
	for (i = 0; i < S.n; i++)
		S.peer[i].fence = 1;
}

/* A PE that exited closes its start-up connection: PE 0 sees it from any PE, every PE from PE 0
 * (which then exits too). A waiting barrier checks, so a dead PE fails the barrier, never hangs it. */
static void check_alive(void)
{
	int i;

	for (i = 0; i < S.n; i++) {
		struct pollfd p = { .fd = S.sock[i], .events = POLLIN };
		char c;

		if (S.sock[i] < 0 || poll(&p, 1, 0) != 1)
			continue;
		if (recv(S.sock[i], &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0 || (p.revents & (POLLHUP | POLLERR)))
			fatal("PE %d left (exited or died) while this PE waited in shmem_barrier_all", i);
	}
}

/* A dissemination barrier over the RNIC: in round r (distance d = 2^r < N) each PE sends a
 * zero-length RDMA WRITE WITH IMMEDIATE to PE me + d and waits for the one of PE me - d (its
 * receive completion counts an arrival from that PE; distances differ, so do the senders of one
 * barrier). Waiting blocks on the receive CQ's interrupt after the spin budget. */
void shmem_barrier_all(void)
{
	int d;

	need_init("shmem_barrier_all");
	shmem_quiet();
	if (S.n == 1)
		return;
	S.epoch++;
	for (d = 1; d < S.n; d <<= 1) {
		int to = (S.me + d) % S.n, from = (S.me + S.n - d) % S.n;
		struct rnic_send_wqe w = { .opcode = RNIC_WR_WRITE_IMM, .imm = (uint32_t)S.epoch,
					   .remote_addr = S.peer[to].heap_base, .rkey = S.peer[to].heap_rkey };

		post(to, &w);
		while (S.arrivals[from] < S.epoch) {
			wait_progress(1000);
			check_alive();
		}
	}
}

/* A lock is the long at `lock` on PE 0: 0 when free, holder + 1 when taken. */
void shmem_set_lock(long *lock)
{
	unsigned nap = 1;

	while (amo(0, lock, AMO_CSWAP, (uint64_t)S.me + 1, 0, 1, "shmem_set_lock") != 0)
		spin_nap(&nap);
}

int shmem_test_lock(long *lock)
{
	return amo(0, lock, AMO_CSWAP, (uint64_t)S.me + 1, 0, 1, "shmem_test_lock") != 0;
}

void shmem_clear_lock(long *lock)
{
	uint64_t old;

	shmem_quiet(); /* what was done under the lock is complete before it is released */
	old = amo(0, lock, AMO_CSWAP, 0, (uint64_t)S.me + 1, 1, "shmem_clear_lock");
	if (old != (uint64_t)S.me + 1)
		fatal("shmem_clear_lock(%p): the lock is held by %s, not this PE", (void *)lock,
		      old ? "another PE" : "nobody");
}

/* ---- extensions ---- */

int shmemx_msg_send(int pe, const void *buf, size_t len)
{
	struct rnic_send_wqe w = { .opcode = RNIC_WR_SEND, .num_sge = 1 };
	uint8_t *b;

	need_init("shmemx_msg_send");
	if (pe < 0 || pe >= S.n || !len || len > SHMEMX_MSG_MAX)
		return -1;
	b = bounce_alloc(len);
	memcpy(b, buf, len);
	w.sge[0] = (struct rnic_sge){ (uintptr_t)b, (uint32_t)len, S.priv_mr.lkey };
	post(pe, &w);
	return 0;
}

long shmemx_msg_recv(void *buf, size_t cap, int *pe, int timeout_ms)
{
	struct timespec t0, t;
	struct msg *m;
	long len;

	need_init("shmemx_msg_recv");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		progress();
		if (S.mq_head)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms >= timeout_ms)
			return 0;
		wait_progress((int)(timeout_ms - ms));
	}
	m = S.mq_head;
	S.mq_head = m->next;
	if (!S.mq_head)
		S.mq_tail = NULL;
	len = m->len;
	memcpy(buf, m->data, m->len < cap ? m->len : cap);
	if (pe)
		*pe = m->pe;
	free(m);
	return len;
}

unsigned shmemx_max_outstanding(void)
{
	return MAX_OUT;
}

int shmemx_rnic_counters(uint64_t *c, int n)
{
	uint64_t all[RNIC_CNT_COUNT];
	int ret;

	need_init("shmemx_rnic_counters");
	ret = rnic_counters(S.ctx, all);
	if (ret)
		return ret;
	if (n > (int)RNIC_CNT_COUNT)
		n = (int)RNIC_CNT_COUNT;
	memcpy(c, all, (size_t)n * sizeof(*c));
	return n;
}

const char *shmemx_rnic_counter_name(int i)
{
	static const char *const names[] = { RNIC_CNT_NAMES };

	return i >= 0 && i < (int)RNIC_CNT_COUNT ? names[i] : NULL;
}

long long shmemx_rnic_counter(const char *name)
{
	uint64_t all[RNIC_CNT_COUNT];
	int i;

	need_init("shmemx_rnic_counter");
	for (i = 0; shmemx_rnic_counter_name(i); i++)
		if (!strcmp(shmemx_rnic_counter_name(i), name))
			return rnic_counters(S.ctx, all) ? -1 : (long long)all[i];
	return -1;
}

int shmemx_native_bitwise_atomics(void)
{
	return S.xatomic;
}

void shmemx_model_window(uint64_t *start_ns, uint64_t *end_ns, uint64_t *ops)
{
	*start_ns = S.model_start;
	*end_ns = S.model_end;
	*ops = S.model_ops;
}

void shmemx_model_window_reset(void)
{
	S.model_start = S.model_end = S.model_ops = 0;
}
