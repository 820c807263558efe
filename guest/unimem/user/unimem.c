/* SPDX-License-Identifier: MIT */
/*
 * unimem: command-line tool for the Unimem mailbox and packetizer of a rackemu node.
 * Output is one `key=value ...` line per event, for people and scripts alike.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "libunimem.h"
#include "spin.h"
#include "tool.h"

#define ACK_TIMEOUT_US 5000000u
#define NOWAIT_MAX 1024

/* A signed number in [lo, hi] (tool.h's num() is unsigned with K/M suffixes). */
static long num_range(const char *s, const char *what, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || *end || v < lo || v > hi)
		die("%s '%s': expected a number from %ld to %ld", what, s, lo, hi);
	return v;
}

static void open_dev(struct unimem *u, int mif, int pif)
{
	int rc = unimem_open(u);

	if (rc)
		die("cannot open %s: %s (is the unimem module loaded?)", UNIMEM_DEV_PATH, strerror(-rc));
	if ((mif >= 0 || pif >= 0) && (rc = unimem_bind(u, mif, pif)))
		die("cannot bind MIF %d / PIF %d: %s", mif, pif, strerror(-rc));
	if ((rc = unimem_map(u)))
		die("cannot map the interfaces: %s", strerror(-rc));
}

static void print_packet(unsigned i, const uint64_t w[4])
{
	uint64_t pid = UNIMEM_PACKET_PID(w[0]);

	printf("packet=%u pid=0x%012llx pid_node=%u pid_mif=%u pid_tgid=%u pid_tid=%u w0=0x%016llx w1=0x%016llx "
	       "w2=0x%016llx w3=0x%016llx\n", i, (unsigned long long)pid, UNIMEM_PID_NODE(pid),
	       UNIMEM_PID_MIF(pid), UNIMEM_PID_TGID(pid), UNIMEM_PID_TID(pid), (unsigned long long)w[0], (unsigned long long)w[1],
	       (unsigned long long)w[2], (unsigned long long)w[3]);
}

static int cmd_info(int argc, char **argv)
{
	struct unimem u;

	if (argc > 1 && !strcmp(argv[1], "--help")) {
		printf("usage: unimem info\nOpen /dev/unimem and print this node's and the allocated interfaces' facts.\n");
		return 0;
	}
	open_dev(&u, -1, -1);
	printf("node=%u node_count=%u mif=%u pif=%u pid=0x%012llx mif_gaddr=0x%010llx vmbox_base=0x%llx "
	       "fifo_depth=%u\n", u.info.node_id, u.info.node_count, u.info.mif, u.info.pif,
	       (unsigned long long)u.info.pid_prefix, (unsigned long long)u.info.mif_gaddr,
	       (unsigned long long)u.info.vmbox_base, u.info.fifo_depth);
	unimem_close(&u);
	return 0;
}

enum send_mode { MODE_SEND, MODE_FILL, MODE_PIDCONF };

static uint64_t num64(const char *s, const char *what)
{
	char *end;
	uint64_t v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || !*s)
		die("%s '%s': expected a 64-bit number", what, s);
	return v;
}

static void send_usage(enum send_mode mode)
{
	if (mode == MODE_PIDCONF) {
		printf("usage: unimem setpidconf 0|1 [--pif P] [--node N --mif M] [--count K] [--word0..3 X] [--dest GADDR]\n"
		       "Debug (root): set (1) or clear (0) the PID_CONF bit of this process's PIF (PIF P if\n"
		       "given) with UNIMEM_IOC_SET_PIDCONF, print `pif=P pid_conf=V`, then, if a destination is\n"
		       "given, send K packets through it as `unimem send` does. With 0 nothing leaves: every\n"
		       "packet reports status=NOT_SENT and the packetizer's NOPID counter grows. The bit is\n"
		       "owned by the open file: it is cleared again when the command exits.\n"
		       "Exit 0 if every packet was acknowledged (or none was asked for), 1 otherwise.\n");
		return;
	}
	printf("usage: unimem %s --node N --mif M%s [--pif P] [--word0..3 X] [--seq] [--dest GADDR]%s [--quiet]\n"
	       "Send %s through this process's PIF to MIF M of node N (or to the raw global address\n"
	       "GADDR). Packet contents (--seq, the default): word0 bits [63:48] = i, word1 = i,\n"
	       "word2 = 0x72636b656d75, word3 = i ^ word2; --wordK X fixes word K to X (word0 bits\n"
	       "[47:0] are always replaced by this PIF's PID). One line per packet:\n"
	       "  packet=i dest=GADDR status=S   (S: ACK, NACK, NACK|FABRIC_ERR, ILLEGAL, NOT_SENT, TIMEOUT)\n"
	       "then a summary `sent=.. acked=.. nacked=.. fabric_err=.. illegal=.. not_sent=.. timeout=.. pid=..`.\n"
	       "%s"
	       "  --no-pidconf  clear this PIF's PID_CONF bit first (debug, root): nothing is sent\n"
	       "  --quiet       print only the packets that were not acknowledged\n",
	       mode == MODE_FILL ? "fill" : "send", mode == MODE_FILL ? "" : " [--count K]",
	       mode == MODE_FILL ? " [--no-pidconf]" : " [--no-pidconf] [--no-wait]",
	       mode == MODE_FILL ? "packets until the first refusal (NACK), to fill a FIFO," : "K packets (default 1)",
	       mode == MODE_FILL ? "Last line: accepted=K. Exit 0 if the FIFO refused a packet with a plain NACK, 1 otherwise.\n"
				 : "Exit 0 only if every packet was acknowledged.\n"
				   "  --no-wait     write each packet's registers (K <= 1024) without waiting for the previous\n"
				   "                packet's PEND to clear (shows OVERWR_BUF); the line shows the status\n"
				   "                read right after the write; exit 0 if the last status is ACK without\n"
				   "                OVERWR_BUF (a local destination answers at once, so only a remote\n"
				   "                one shows the overwrite)\n");
}

static int cmd_send(int argc, char **argv, enum send_mode mode)
{
	static const struct option opts[] = {
		{ "node", 1, 0, 'n' }, { "mif", 1, 0, 'm' }, { "count", 1, 0, 'c' }, { "dest", 1, 0, 'd' },
		{ "word0", 1, 0, '0' }, { "word1", 1, 0, '1' }, { "word2", 1, 0, '2' }, { "word3", 1, 0, '3' },
		{ "seq", 0, 0, 'S' }, { "pif", 1, 0, 'p' }, { "no-pidconf", 0, 0, 'x' }, { "no-wait", 0, 0, 'w' },
		{ "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { 0 } };
	long node = -1, mif = -1, count = mode == MODE_FILL ? 1000000 : 1, pif = -1, pidconf = -1;
	uint64_t dest = 0, fixed[4] = { 0, 0, 0x72636b656d75ull, 0 };
	int have_dest = 0, have_word[4] = { 0 }, nopid = 0, nowait = 0, quiet = 0, o;
	unsigned acked = 0, nacked = 0, illegal = 0, fabric = 0, notsent = 0, other = 0;
	int after[NOWAIT_MAX];
	struct unimem u;
	char sbuf[64];

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n': node = num_range(optarg, "--node", 0, UNIMEM_GADDR_NODE_MASK); break;
		case 'm': mif = num_range(optarg, "--mif", 0, UNIMEM_IF_COUNT - 1); break;
		case 'c': count = num_range(optarg, "--count", mode == MODE_PIDCONF ? 0 : 1, 100000000); break;
		case 'd': dest = num64(optarg, "--dest"); have_dest = 1; break;
		case '0': case '1': case '2': case '3':
			fixed[o - '0'] = num64(optarg, "--wordN");
			have_word[o - '0'] = 1;
			break;
		case 'S': break; /* the default */
		case 'p': pif = num_range(optarg, "--pif", 0, UNIMEM_IF_COUNT - 1); break;
		case 'x': nopid = 1; break;
		case 'w':
			if (mode != MODE_SEND)
				die("--no-wait is an option of `unimem send`");
			nowait = 1;
			break;
		case 'q': quiet = 1; break;
		case 'h': send_usage(mode); return 0;
		default: return 2;
		}
	}
	if (mode == MODE_PIDCONF) {
		if (optind >= argc)
			die("setpidconf needs 0 or 1; see --help");
		pidconf = num_range(argv[optind++], "PID_CONF value", 0, 1);
		if (!have_dest && node < 0 && mif < 0)
			count = 0;
	}
	if (optind < argc)
		die("unexpected argument '%s'; see --help", argv[optind]);
	if (nowait && count > NOWAIT_MAX)
		die("--no-wait sends at most %d packets", NOWAIT_MAX);
	if (count && !have_dest && (node < 0 || mif < 0))
		die("--node and --mif (or --dest) are required; see --help");
	open_dev(&u, -1, pif);
	if (!have_dest)
		dest = unimem_mif_gaddr(&u, node < 0 ? 0 : node, mif < 0 ? 0 : mif);
	if (nopid)
		pidconf = 0;
	if (pidconf >= 0) {
		uint32_t v = (uint32_t)pidconf;

		if (ioctl(u.fd, UNIMEM_IOC_SET_PIDCONF, &v) < 0)
			die("cannot set PID_CONF: %s (needs root)", strerror(errno));
		if (mode == MODE_PIDCONF)
			printf("pif=%u pid_conf=%ld pid=0x%012llx\n", u.info.pif, pidconf,
			       (unsigned long long)u.info.pid_prefix);
	}
	for (long i = 0; i < count; i++) {
		uint64_t w[4] = { (uint64_t)(i & 0xffff) << 48, (uint64_t)i, fixed[2], (uint64_t)i ^ fixed[2] };
		int st;

		for (int k = 0; k < 4; k++)
			if (have_word[k])
				w[k] = fixed[k];
		if (nowait) {
			/* back to back: printing here would give the acknowledgement time to arrive */
			after[i] = unimem_post(&u, dest, w);
			continue;
		}
		st = unimem_send(&u, dest, w, ACK_TIMEOUT_US);
		if (st > 0 && (st & PKTZ_ST_ACK))
			acked++;
		else if (st > 0 && (st & PKTZ_ST_FABRIC_ERR))
			fabric++, nacked++;
		else if (st > 0 && (st & PKTZ_ST_NACK))
			nacked++;
		else if (st > 0 && (st & PKTZ_ST_ILLEGAL))
			illegal++;
		else if (st == 0)
			notsent++;
		else
			other++;
		if (!quiet || !(st > 0 && (st & PKTZ_ST_ACK)))
			printf("packet=%ld dest=0x%010llx status=%s\n", i, (unsigned long long)dest,
			       unimem_status_str(st, sbuf, sizeof(sbuf)));
		if (mode == MODE_FILL && !(st > 0 && (st & PKTZ_ST_ACK)))
			break;
	}
	if (nowait) {
		int st = unimem_wait_status(&u, ACK_TIMEOUT_US);

		for (long i = 0; i < count; i++)
			printf("packet=%ld dest=0x%010llx status_after_write=%s\n", i, (unsigned long long)dest,
			       unimem_status_str(after[i], sbuf, sizeof(sbuf)));

		printf("final_status=%s pid=0x%012llx\n", unimem_status_str(st, sbuf, sizeof(sbuf)),
		       (unsigned long long)u.info.pid_prefix);
		unimem_close(&u);
		return st > 0 && (st & PKTZ_ST_ACK) && !(st & PKTZ_ST_OVERWR_BUF) ? 0 : 1;
	}
	if (count)
		printf("sent=%u acked=%u nacked=%u fabric_err=%u illegal=%u not_sent=%u timeout=%u pid=0x%012llx\n",
		       acked + nacked + illegal + notsent + other, acked, nacked, fabric, illegal, notsent, other,
		       (unsigned long long)u.info.pid_prefix);
	if (mode == MODE_FILL)
		printf("accepted=%u\n", acked);
	unimem_close(&u);
	if (mode == MODE_FILL)
		return nacked && !fabric ? 0 : 1;
	return acked == (unsigned)count ? 0 : 1;
}

static int cmd_recv(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mif", 1, 0, 'm' }, { "count", 1, 0, 'c' }, { "timeout", 1, 0, 't' }, { "start-delay", 1, 0, 's' },
		{ "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { 0 } };
	long mif = -1, count = 1, timeout = 10000, delay = 0;
	int quiet = 0, o;
	struct unimem u;
	long got = 0;
	uint64_t pids[8];
	unsigned npids = 0;
	char pidlist[8 * 16 + 1] = "";

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'm': mif = num_range(optarg, "--mif", 0, 63); break;
		case 'c': count = num_range(optarg, "--count", 0, 100000000); break;
		case 't': timeout = num_range(optarg, "--timeout", 0, 86400000); break;
		case 's': delay = num_range(optarg, "--start-delay", 0, 86400000); break;
		case 'q': quiet = 1; break;
		case 'h':
			printf("usage: unimem recv [--mif M] [--count K] [--timeout MS] [--start-delay MS] [--quiet]\n"
			       "Take MIF M (or any free one), print `ready mif=.. mif_gaddr=..`, wait --start-delay ms\n"
			       "without reading (lets a sender fill the FIFO), then receive K packets, printing the\n"
			       "sender's PID prefix (node, tgid) and the words. Exit 1 if a packet does not arrive\n"
			       "within --timeout ms (default 10000, 0 = forever).\n");
			return 0;
		default: return 2;
		}
	}
	open_dev(&u, mif, -1);
	printf("ready mif=%u mif_gaddr=0x%010llx\n", u.info.mif, (unsigned long long)u.info.mif_gaddr);
	fflush(stdout);
	if (delay)
		usleep(delay * 1000);
	for (; got < count; got++) {
		uint64_t w[4];
		int rc = unimem_recv(&u, w, (int)timeout);

		if (rc) {
			printf("received=%ld timeout=1 error=%s\n", got, strerror(-rc));
			unimem_close(&u);
			return 1;
		}
		if (!quiet)
			print_packet(got, w);
		unsigned k;
		for (k = 0; k < npids && pids[k] != UNIMEM_PACKET_PID(w[0]); k++)
			;
		if (k == npids && npids < 8)
			pids[npids++] = UNIMEM_PACKET_PID(w[0]);
	}
	for (unsigned k = 0; k < npids; k++)
		snprintf(pidlist + strlen(pidlist), sizeof(pidlist) - strlen(pidlist), "%s0x%012llx", k ? "," : "",
			 (unsigned long long)pids[k]);
	printf("received=%ld pids=%s\n", got, npids ? pidlist : "none");
	unimem_close(&u);
	return 0;
}

static int cmd_peek(int argc, char **argv)
{
	long mif = -1;
	struct unimem u;

	if (argc > 1 && !strcmp(argv[1], "--help")) {
		printf("usage: unimem peek [--mif M]\nTake MIF M (freshly flushed) and print one raw 64-bit load of it:\n"
		       "an empty FIFO reads 0xcafebebedeadbeaf.\n");
		return 0;
	}
	if (argc > 2 && !strcmp(argv[1], "--mif"))
		mif = num_range(argv[2], "--mif", 0, 63);
	open_dev(&u, mif, -1);
	printf("mif=%u word=0x%016llx count=%u\n", u.info.mif, (unsigned long long)u.mif[VMBOX_MIF_DATA / 8],
	       unimem_pending(&u));
	unimem_close(&u);
	return 0;
}

/* A reply's or request's status once it has left: 0 if acknowledged, else prints why and 1. */
static int pingpong_acked(struct unimem *u, const char *what, long i, long peer)
{
	char sbuf[64];
	int st = unimem_wait_status(u, ACK_TIMEOUT_US);

	if (st > 0 && (st & PKTZ_ST_ACK))
		return 0;
	printf("%s=%ld %s_status=%s (is the %s running on node %ld?)\n", strcmp(what, "reply") ? "round" : "served",
	       i, what, unimem_status_str(st, sbuf, sizeof(sbuf)), strcmp(what, "reply") ? "server" : "client", peer);
	return 1;
}

static int cmd_pingpong(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peer", 1, 0, 'p' }, { "role", 1, 0, 'r' }, { "count", 1, 0, 'c' }, { "client-mif", 1, 0, 'C' },
		{ "server-mif", 1, 0, 'S' }, { "timeout", 1, 0, 't' }, { "spin", 0, 0, 's' },
		{ "sync-ack", 0, 0, 'a' }, { "help", 0, 0, 'h' }, { 0 } };
	long peer = -1, count = 100, cmif = 20, smif = 21, timeout = 30000;
	int server = -1, spin = 0, sync_ack = 0, o;
	struct unimem u;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'p': peer = num_range(optarg, "--peer", 0, 63); break;
		case 'r':
			if (!strcmp(optarg, "client")) server = 0;
			else if (!strcmp(optarg, "server")) server = 1;
			else die("--role must be client or server");
			break;
		case 'c': count = num_range(optarg, "--count", 1, 10000000); break;
		case 'C': cmif = num_range(optarg, "--client-mif", 1, 63); break;
		case 'S': smif = num_range(optarg, "--server-mif", 1, 63); break;
		case 't': timeout = num_range(optarg, "--timeout", 1, 86400000); break;
		case 's': spin = 1; break;
		case 'a': sync_ack = 1; break;
		case 'h':
			printf("usage: unimem pingpong --peer N --role client|server [--count K] [--client-mif C]\n"
			       "                       [--server-mif S] [--timeout MS] [--spin] [--sync-ack]\n"
			       "Round trips packetizer -> mailbox between this node and node N. The server takes MIF S\n"
			       "(default 21) and echoes each packet back to the client's MIF C (default 20). The client\n"
			       "times K round trips with CLOCK_MONOTONIC and prints rtt_min_us, rtt_median_us,\n"
			       "rtt_p99_us, rtt_max_us, and its 8 slowest rounds (slowest=ROUND:US,...). Start the\n"
			       "server first. The client always polls its MIF; the server sleeps until the arrival\n"
			       "interrupt, or polls too with --spin.\n"
			       "Each packet's acknowledgement is checked (any other answer ends the run) when the\n"
			       "side needs its PIF again: the server after the next request arrived, the client after\n"
			       "the echo (or as soon as the request failed). The acknowledgement of a reply travels\n"
			       "with the next request, so waiting for it at once kept the server from seeing that\n"
			       "request (the PIF status wait naps, and the arrival interrupt is off meanwhile);\n"
			       "--sync-ack waits for each acknowledgement right after the post, as before.\n");
			return 0;
		default: return 2;
		}
	}
	if (peer < 0 || server < 0)
		die("--peer and --role are required; see --help");
	open_dev(&u, server ? smif : cmif, -1);
	if (server) {
		uint64_t dest = unimem_mif_gaddr(&u, peer, cmif);
		printf("ready role=server mif=%u\n", u.info.mif);
		fflush(stdout);
		for (long i = 0; i < count; i++) {
			uint64_t w[4], deadline = now_ns() + (uint64_t)timeout * 1000000ull;
			int rc = 0;

			if (spin) {
				while (unimem_pending(&u) < UNIMEM_PACKET_WORDS && now_ns() < deadline)
					spin_relax();
				rc = unimem_pending(&u) < UNIMEM_PACKET_WORDS ? -ETIMEDOUT : unimem_recv(&u, w, -1);
			} else {
				rc = unimem_recv(&u, w, (int)timeout);
			}
			if (rc) {
				printf("served=%ld timeout=1\n", i);
				return 1;
			}
			/* one buffer per PIF: the previous reply has left (its acknowledgement) */
			if (i && !sync_ack && pingpong_acked(&u, "reply", i - 1, peer))
				return 1;
			unimem_post(&u, dest, w);
			if (sync_ack && pingpong_acked(&u, "reply", i, peer))
				return 1;
		}
		if (!sync_ack && pingpong_acked(&u, "reply", count - 1, peer))
			return 1;
		printf("served=%ld\n", count);
		unimem_close(&u);
		return 0;
	}
	uint64_t *rtt = calloc(count, sizeof(*rtt)), dest = unimem_mif_gaddr(&u, peer, smif);
	if (!rtt)
		die("out of memory");
	for (long i = 0; i < count; i++) {
		uint64_t w[4] = { 0, (uint64_t)i, u.info.node_id, 0x9090 }, r[4], t0 = now_ns(), deadline;
		uint32_t st, polls = 0;

		unimem_post(&u, dest, w);
		if (sync_ack && pingpong_acked(&u, "send", i, peer))
			return 1;
		deadline = t0 + (uint64_t)timeout * 1000000ull;
		while (unimem_pending(&u) < UNIMEM_PACKET_WORDS) {
			/* a request refused or lost (no echo will come): say so soon, not at the timeout
			 * (every 64th poll: each status read is a device access, like the MIF's) */
			if (!(++polls & 63)) {
				st = (uint32_t)u.pif[PKTZ_PIF_STATUS / 8];
				if (!(st & (PKTZ_ST_PEND | PKTZ_ST_ACK)) && pingpong_acked(&u, "send", i, peer))
					return 1;
			}
			if (now_ns() > deadline) {
				printf("round=%ld timeout=1\n", i);
				return 1;
			}
			spin_relax();
		}
		unimem_recv(&u, r, -1);
		rtt[i] = now_ns() - t0;
		if (r[1] != (uint64_t)i) {
			printf("round=%ld bad_echo=0x%llx\n", i, (unsigned long long)r[1]);
			return 1;
		}
		/* the request was delivered (its echo is here): its acknowledgement came before it */
		if (!sync_ack && pingpong_acked(&u, "send", i, peer))
			return 1;
	}
	/* the slowest rounds with their index: where in the run the tail falls */
	{
		long top[8];
		int ntop = 0;

		for (long i = 0; i < count; i++) {
			int k;

			if (ntop == 8 && rtt[i] <= rtt[top[7]])
				continue;
			k = ntop < 8 ? ntop++ : 7;
			for (; k > 0 && rtt[top[k - 1]] < rtt[i]; k--)
				top[k] = top[k - 1];
			top[k] = i;
		}
		printf("slowest=");
		for (int k = 0; k < ntop; k++)
			printf("%s%ld:%.1f", k ? "," : "", top[k], rtt[top[k]] / 1e3);
		printf("\n");
	}
	qsort(rtt, count, sizeof(*rtt), cmp_u64);
	printf("count=%ld rtt_min_us=%.2f rtt_median_us=%.2f rtt_p99_us=%.2f rtt_max_us=%.2f\n", count,
	       rtt[0] / 1e3, rtt[count / 2] / 1e3, rtt[(long)(count * 0.99) < count ? (long)(count * 0.99) : count - 1] / 1e3,
	       rtt[count - 1] / 1e3);
	free(rtt);
	unimem_close(&u);
	return 0;
}

static int cmd_counters(int argc, char **argv)
{
	static const char *const vmbox_names[] = { UNIMEM_UAPI_VMBOX_COUNTER_NAMES };
	static const char *const pktz_names[] = { UNIMEM_UAPI_PKTZ_COUNTER_NAMES };
	struct unimem_counters c;
	struct unimem u;

	if (argc > 1 && !strcmp(argv[1], "--help")) {
		printf("usage: unimem counters\nPrint the vmbox and packetizer counters of this node.\n");
		return 0;
	}
	open_dev(&u, -1, -1);
	if (ioctl(u.fd, UNIMEM_IOC_COUNTERS, &c) < 0)
		die("UNIMEM_IOC_COUNTERS: %s", strerror(errno));
	for (unsigned i = 0; i < VMBOX_CNT_COUNT; i++)
		printf("vmbox_%s=%llu ", vmbox_names[i], (unsigned long long)c.vmbox[i]);
	for (unsigned i = 0; i < PKTZ_CNT_COUNT; i++)
		printf("pktz_%s=%llu ", pktz_names[i], (unsigned long long)c.pktz[i]);
	printf("irqs=%llu\n", (unsigned long long)c.irqs);
	unimem_close(&u);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: unimem COMMAND [--help]\n"
		   "Commands for the Unimem mailbox and packetizer of this node (/dev/unimem):\n"
		   "  info       this node and the interfaces a process gets\n"
		   "  send       send packets to a MIF of any node\n"
		   "  fill       send until a FIFO refuses (NACK)\n"
		   "  recv       receive packets on a MIF\n"
		   "  peek       one raw load of a fresh MIF (shows the empty pattern)\n"
		   "  pingpong   round-trip times between two nodes\n"
		   "  setpidconf set/clear this process's PID_CONF bit, then send (debug, root)\n"
		   "  counters   device counters\n");
}

int main(int argc, char **argv)
{
	tool_prog = "unimem";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	argv++, argc--;
	if (!strcmp(argv[0], "info")) return cmd_info(argc, argv);
	if (!strcmp(argv[0], "send")) return cmd_send(argc, argv, MODE_SEND);
	if (!strcmp(argv[0], "fill")) return cmd_send(argc, argv, MODE_FILL);
	if (!strcmp(argv[0], "setpidconf")) return cmd_send(argc, argv, MODE_PIDCONF);
	if (!strcmp(argv[0], "recv")) return cmd_recv(argc, argv);
	if (!strcmp(argv[0], "peek")) return cmd_peek(argc, argv);
	if (!strcmp(argv[0], "pingpong")) return cmd_pingpong(argc, argv);
	if (!strcmp(argv[0], "counters")) return cmd_counters(argc, argv);
	fprintf(stderr, "unimem: unknown command '%s'\n", argv[0]);
	usage(stderr);
	return 2;
}
