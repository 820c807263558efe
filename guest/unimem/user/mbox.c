// SPDX-License-Identifier: MIT
/*
 * mbox: the Unimem mailbox from user space (ExaNoDe D3.6 sec. 3.2.2; docs/mailbox.md).
 * `mbox --help` lists the subcommands. Output is key=value lines; exit 0 on success, 1 when
 * the operation failed (a send refused, a receive that timed out), 2 for a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "rackemu/unimem_mailbox.h"
#include "rackemu/unimem_mailbox_action.h"
#include "rackemu/unimem_uapi.h"
#include "tool.h"




static void dev_path(unsigned node, char *out, size_t n)
{
	char l[3] = { 0 };

	if (node < 26) {
		l[0] = (char)('A' + node);
	} else {
		l[0] = (char)('A' + node / 26 - 1);
		l[1] = (char)('A' + node % 26);
	}
	snprintf(out, n, MAILBOX_DEV_DIR "/mailbox%s", l);
}

static int this_node(void)
{
	struct unimem_info info;
	int fd = open(UNIMEM_DEV_PATH, O_RDWR | O_CLOEXEC), r;

	if (fd < 0)
		die("cannot open %s: %s (is unimem.ko loaded?)", UNIMEM_DEV_PATH, strerror(errno));
	r = ioctl(fd, UNIMEM_IOC_INFO, &info);
	close(fd);
	if (r < 0)
		die("UNIMEM_IOC_INFO: %s", strerror(errno));
	return (int)info.node_id;
}

static int open_mailbox(unsigned node, int flags)
{
	char path[64];
	int fd;

	dev_path(node, path, sizeof(path));
	fd = open(path, flags | O_CLOEXEC);
	if (fd < 0)
		die("cannot open %s: %s", path, strerror(errno));
	return fd;
}

static int cmd_send(int argc, char **argv)
{
	static const struct option opts[] = { { "node", 1, 0, 'n' }, { "value", 1, 0, 'v' }, { "opcode", 1, 0, 'o' },
					       { "count", 1, 0, 'c' }, { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { 0 } };
	long node = -1, count = 1, opcode = -1, sent = 0, busy = 0;
	uint64_t value = 0;
	int have_v = 0, o, failed = 0, quiet = 0;
	struct timespec ts;
	double last_ok, t;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n': node = (long)num(optarg, "--node", 63); break;
		case 'v': value = num(optarg, "--value", UINT64_MAX); have_v = 1; break;
		case 'o': opcode = (long)num(optarg, "--opcode", 15); break;
		case 'c': count = (long)num(optarg, "--count", 100000000); break;
		case 'q': quiet = 1; break;
		case 'h':
			printf("usage: mbox send --node N --value V [--opcode OP] [--count K] [--quiet]\n"
			       "Write the 64-bit message V (bits [63:60] replaced by OP if given) to node N's\n"
			       "mailbox device, K times (message i carries V + i). One line per message (--quiet:\n"
			       "only failed ones):\n"
			       "  msg=0x.. node=N result=ok|EBUSY|EHOSTUNREACH|ETIMEDOUT|...\n"
			       "A full mailbox (EBUSY) is retried by the next message; any other error is\n"
			       "unrecoverable and stops the loop. Last line: sent= busy=, after an error also error=\n"
			       "error_after_us= (how long the failing write took) since_last_ok_us= (from the last\n"
			       "accepted message). Exit 0 only if every message was accepted.\n");
			return 0;
		default: return 2;
		}
	}
	if (node < 0 || !have_v)
		die("--node and --value are required; see --help");
	int fd = open_mailbox((unsigned)node, O_WRONLY);

	clock_gettime(CLOCK_MONOTONIC, &ts);
	last_ok = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
	for (long i = 0; i < count; i++) {
		uint64_t msg = value + (uint64_t)i;
		ssize_t w;
		int e;
		double t0;

		if (opcode >= 0)
			msg = (msg & ~(0xfull << MAILBOX_OPCODE_SHIFT)) | ((uint64_t)opcode << MAILBOX_OPCODE_SHIFT);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
		w = write(fd, &msg, sizeof(msg));
		e = errno;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
		if (!quiet || w != (ssize_t)sizeof(msg))
			printf("msg=0x%016llx node=%ld result=%s\n", (unsigned long long)msg, node,
			       w == (ssize_t)sizeof(msg) ? "ok" : strerrorname_np(e) ? strerrorname_np(e) : "error");
		if (w == (ssize_t)sizeof(msg)) {
			sent++;
			last_ok = t;
			continue;
		}
		failed = 1;
		if (e == EBUSY) {
			busy++;
			continue;
		}
		printf("sent=%ld busy=%ld error=%s error_after_us=%.0f since_last_ok_us=%.0f\n", sent, busy,
		       strerrorname_np(e) ? strerrorname_np(e) : "error", t - t0, t - last_ok);
		close(fd);
		return 1;
	}
	printf("sent=%ld busy=%ld\n", sent, busy);
	close(fd);
	return failed;
}

static int signals_seen;
static void on_signal_blocked(int sig)
{
	(void)sig; /* never runs: the signal stays blocked and is taken with sigtimedwait */
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmd_recv(int argc, char **argv)
{
	static const struct option opts[] = { { "opcode", 1, 0, 'o' }, { "action", 1, 0, 'a' }, { "count", 1, 0, 'c' },
					       { "timeout", 1, 0, 't' }, { "signal", 1, 0, 's' }, { "ready", 1, 0, 'r' },
					       { "help", 0, 0, 'h' }, { 0 } };
	unsigned opcodes = 0;
	char action = 'r';
	long count = 1, timeout = 10000, sig = SIGUSR1;
	const char *ready = NULL;
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'o': {
			char *tok, *save = NULL;

			for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
				opcodes |= 1u << num(tok, "--opcode", 15);
			break;
		}
		case 'a':
			if (strlen(optarg) != 1 || !strchr("rse", optarg[0]))
				die("--action must be r, s or e");
			action = optarg[0];
			break;
		case 'c': count = (long)num(optarg, "--count", 1000000); break;
		case 't': timeout = (long)num(optarg, "--timeout", 3600000); break;
		case 's': sig = (long)num(optarg, "--signal", 64); break;
		case 'r': ready = optarg; break;
		case 'h':
			printf("usage: mbox recv --opcode OP[,OP...] [--action r|s|e] [--count K] [--timeout MS]\n"
			       "                 [--signal SIG] [--ready FILE]\n"
			       "Register the opcodes on this node's mailbox device with struct mailbox_action_t and\n"
			       "receive K messages, oldest first. Notification (--action): r = poll() then read();\n"
			       "s = the driver sends signal SIG (default SIGUSR1) per message, then read(O_NONBLOCK);\n"
			       "e = the driver signals an eventfd, whose count says how many messages wait.\n"
			       "--ready FILE is created once the opcodes are registered. One line per message:\n"
			       "  msg=0x.. opcode=OP via=poll|signal|eventfd\n"
			       "then count=K received=N signals=S eventfd_total=E; exit 1 on timeout.\n");
			return 0;
		default: return 2;
		}
	}
	if (!opcodes)
		die("--opcode is required; see --help");
	int fd = open_mailbox((unsigned)this_node(), O_RDWR | O_NONBLOCK);
	int efd = -1;
	sigset_t block;

	(void)block;

	if (action == 'e') {
		efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (efd < 0)
			die("eventfd: %s", strerror(errno));
	}
	if (action == 's') {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal_blocked;
		sigaction((int)sig, &sa, NULL);
		sigemptyset(&block);
		sigaddset(&block, (int)sig);
		sigprocmask(SIG_BLOCK, &block, NULL);
	}
	for (unsigned op = 0; op < MAILBOX_OPCODES; op++) {
		if (!(opcodes & (1u << op)))
			continue;
		struct mailbox_action_t a = { .action = action, .opcode = op,
					      .val = action == 's' ? (int)sig : action == 'e' ? efd : 0 };

		if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a))
			die("registering opcode %u with action '%c': %s", op, action, strerror(errno));
	}
	if (ready) {
		FILE *f = fopen(ready, "w");

		if (f)
			fclose(f);
	}
	long got = 0;
	uint64_t efd_total = 0;
	double deadline = now_ms() + (double)timeout;

	while (got < count) {
		double left = deadline - now_ms();
		const char *via = "poll";

		if (left <= 0)
			break;
		if (action == 'r') {
			struct pollfd p = { fd, POLLIN, 0 };

			if (poll(&p, 1, (int)left) <= 0)
				continue;
		} else if (action == 'e') {
			struct pollfd p = { efd, POLLIN, 0 };
			uint64_t n;

			if (poll(&p, 1, (int)left) <= 0)
				continue;
			if (read(efd, &n, sizeof(n)) == (ssize_t)sizeof(n))
				efd_total += n;
			via = "eventfd";
		} else {
			/* wait for the driver's signal (blocked, so none is lost between the waits);
			 * signals coalesce, so every wake-up reads all that is queued */
			struct timespec ts = { (time_t)(left / 1000), (long)((long)left % 1000) * 1000000L };
			sigset_t set;
			siginfo_t si;

			sigemptyset(&set);
			sigaddset(&set, (int)sig);
			if (sigtimedwait(&set, &si, &ts) <= 0)
				continue;
			signals_seen++;
			via = "signal";
		}
		uint64_t msgs[64];
		ssize_t r = read(fd, msgs, sizeof(msgs));

		if (r < 0 && errno != EAGAIN)
			die("read: %s", strerror(errno));
		for (ssize_t i = 0; i < r / 8; i++, got++)
			printf("msg=0x%016llx opcode=%u via=%s\n", (unsigned long long)msgs[i], MAILBOX_OPCODE(msgs[i]), via);
	}
	if (efd >= 0) {
		/* the driver signals before a message becomes readable: collect what was not read yet */
		uint64_t n;

		if (read(efd, &n, sizeof(n)) == (ssize_t)sizeof(n))
			efd_total += n;
	}
	printf("count=%ld received=%ld signals=%d eventfd_total=%llu\n", count, got, (int)signals_seen,
	       (unsigned long long)efd_total);
	close(fd);
	return got >= count ? 0 : 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Round trips through the kernel interface of node N (mbox_echo.ko loaded there). */
static int cmd_ping(int argc, char **argv)
{
	static const struct option opts[] = { { "node", 1, 0, 'n' }, { "count", 1, 0, 'c' }, { "help", 0, 0, 'h' },
					       { 0 } };
	long node = -1, count = 100;
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n': node = (long)num(optarg, "--node", 63); break;
		case 'c': count = (long)num(optarg, "--count", 1000000); break;
		case 'h':
			printf("usage: mbox ping --node N [--count K]\n"
			       "Round trips to the kernel of node N, which must run mbox_echo.ko (opcode 14 answered\n"
			       "with opcode 15): send, wait for the answer (poll), K times. Prints\n"
			       "count=K rtt_min_us= rtt_median_us= rtt_p99_us= rtt_max_us=; exit 1 on a lost answer.\n");
			return 0;
		default: return 2;
		}
	}
	if (node < 0 || count < 1)
		die("--node is required; see --help");
	int me = this_node();
	int lfd = open_mailbox((unsigned)me, O_RDWR | O_NONBLOCK), rfd = open_mailbox((unsigned)node, O_WRONLY);
	struct mailbox_action_t a = { 'r', 15, 0 };
	double *t = malloc(sizeof(double) * (size_t)count), *ts = malloc(sizeof(double) * (size_t)count);

	if (!t || !ts)
		die("out of memory");
	if (write(lfd, &a, sizeof(a)) != (ssize_t)sizeof(a))
		die("registering opcode 15: %s", strerror(errno));
	for (long i = 0; i < count; i++) {
		uint64_t msg = (14ull << MAILBOX_OPCODE_SHIFT) | ((uint64_t)me << 52) | (uint64_t)i, ans = 0;
		struct pollfd p = { lfd, POLLIN, 0 };
		double t0 = now_ms();

		if (write(rfd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
			die("send to node %ld: %s", node, strerror(errno));
		ts[i] = (now_ms() - t0) * 1000.0;
		if (poll(&p, 1, 5000) <= 0 || read(lfd, &ans, sizeof(ans)) != (ssize_t)sizeof(ans)) {
			printf("lost=%ld\n", i);
			return 1;
		}
		t[i] = (now_ms() - t0) * 1000.0;
		if ((ans & ((1ull << 52) - 1)) != (uint64_t)i + 1)
			die("answer 0x%llx does not match request %ld", (unsigned long long)ans, i);
	}
	qsort(t, (size_t)count, sizeof(double), cmp_double);
	qsort(ts, (size_t)count, sizeof(double), cmp_double);
	printf("count=%ld rtt_min_us=%.1f rtt_median_us=%.1f rtt_p99_us=%.1f rtt_max_us=%.1f send_median_us=%.1f\n",
	       count, t[0], t[count / 2], t[(long)(count * 0.99)], t[count - 1], ts[count / 2]);
	free(t);
	free(ts);
	return 0;
}


static int cmd_check(void)
{
	int me = this_node(), e;
	int fd = open_mailbox((unsigned)me, O_RDWR | O_NONBLOCK);
	int fd2 = open_mailbox((unsigned)me, O_RDWR | O_NONBLOCK);
	struct mailbox_action_t a = { 'r', 9, 0 };
	uint64_t buf[2];
	char path[64];
	ssize_t r;

	r = write(fd, buf, 5);
	e = errno;
	check("write_odd_size_einval", r < 0 && e == EINVAL, "errno=%d", e);
	a.opcode = 16;
	r = write(fd, &a, sizeof(a));
	e = errno;
	check("opcode_16_einval", r < 0 && e == EINVAL, "errno=%d", e);
	a.opcode = 9;
	a.action = 'x';
	r = write(fd, &a, sizeof(a));
	e = errno;
	check("unknown_action_einval", r < 0 && e == EINVAL, "errno=%d", e);
	a.action = 'e';
	a.val = 1000; /* not an eventfd */
	r = write(fd, &a, sizeof(a));
	e = errno;
	check("eventfd_not_an_eventfd", r < 0 && (e == EBADF || e == EINVAL), "errno=%d", e);
	a.action = 's';
	a.val = SIGKILL;
	r = write(fd, &a, sizeof(a));
	e = errno;
	check("signal_sigkill_einval", r < 0 && e == EINVAL, "errno=%d", e);
	a.action = 'r';
	a.val = 0;
	r = write(fd, &a, sizeof(a));
	check("register_r", r == (ssize_t)sizeof(a), "r=%zd errno=%d", r, errno);
	r = write(fd2, &a, sizeof(a));
	e = errno;
	check("register_taken_ebusy", r < 0 && e == EBUSY, "errno=%d", e);
	a.action = 'u';
	r = write(fd2, &a, sizeof(a));
	e = errno;
	check("unregister_not_owner_eperm", r < 0 && e == EPERM, "errno=%d", e);
	a.opcode = 10;
	r = write(fd2, &a, sizeof(a));
	e = errno;
	check("unregister_unregistered_enoent", r < 0 && e == ENOENT, "errno=%d", e);
	r = read(fd, buf, sizeof(buf));
	e = errno;
	check("read_empty_nonblock_eagain", r < 0 && e == EAGAIN, "errno=%d", e);
	r = read(fd, buf, 4);
	e = errno;
	check("read_short_buffer_einval", r < 0 && e == EINVAL, "errno=%d", e);
	/* a message to itself, through the packetizer and the vmbox */
	buf[0] = (9ull << MAILBOX_OPCODE_SHIFT) | 0x5e1f;
	r = write(fd, buf, 8);
	check("send_to_self", r == 8, "r=%zd errno=%d", r, errno);
	{
		struct pollfd p = { fd, POLLIN, 0 };

		poll(&p, 1, 5000);
		r = read(fd, buf, sizeof(buf));
		check("receive_from_self", r == 8 && buf[0] == ((9ull << MAILBOX_OPCODE_SHIFT) | 0x5e1f), "r=%zd msg=0x%llx",
		      r, (unsigned long long)buf[0]);
	}
	a.opcode = 9;
	r = write(fd, &a, sizeof(a));
	check("unregister_owner", r == (ssize_t)sizeof(a), "r=%zd errno=%d", r, errno);
	r = write(fd2, &(struct mailbox_action_t){ 'r', 9, 0 }, sizeof(a));
	check("register_after_unregister", r == (ssize_t)sizeof(a), "r=%zd errno=%d", r, errno);
	close(fd2); /* closing releases its opcodes */
	r = write(fd, &(struct mailbox_action_t){ 'r', 9, 0 }, sizeof(a));
	check("close_releases_opcodes", r == (ssize_t)sizeof(a), "r=%zd errno=%d", r, errno);
	close(fd);
	if (me + 1 < 64) {
		dev_path((unsigned)(me ? 0 : 1), path, sizeof(path));
		int rfd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);

		if (rfd >= 0) {
			r = read(rfd, buf, 8);
			e = errno;
			check("read_remote_device_einval", r < 0 && e == EINVAL, "errno=%d", e);
			r = write(rfd, &(struct mailbox_action_t){ 'r', 3, 0 }, sizeof(a));
			e = errno;
			check("register_on_remote_device_einval", r < 0 && e == EINVAL, "errno=%d", e);
			close(rfd);
		}
	}
	return check_summary();
}

static void usage(FILE *f)
{
	fprintf(f, "usage: mbox COMMAND [options]   (every command has --help)\n"
		   "  send    send 64-bit messages to a node's mailbox\n"
		   "  recv    register opcodes and receive messages (read/poll, signal or eventfd)\n"
		   "  check   the driver's answers to bad input (one line per check)\n"
		   "  ping    round trips to another node's kernel (mbox_echo.ko there)\n"
		   "  stats   the mailbox counters (/sys/class/misc/unimem/mailbox)\n");
}

int main(int argc, char **argv)
{
	tool_prog = "mbox";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	argv++, argc--;
	if (!strcmp(argv[0], "send")) return cmd_send(argc, argv);
	if (!strcmp(argv[0], "recv")) return cmd_recv(argc, argv);
	if (!strcmp(argv[0], "check")) return cmd_check();
	if (!strcmp(argv[0], "ping")) return cmd_ping(argc, argv);
	if (!strcmp(argv[0], "stats")) {
		char line[512];
		FILE *f = fopen("/sys/class/misc/unimem/mailbox", "r");

		if (!f || !fgets(line, sizeof(line), f))
			die("cannot read /sys/class/misc/unimem/mailbox: %s", strerror(errno));
		fputs(line, stdout);
		fclose(f);
		return 0;
	}
	fprintf(stderr, "%s: unknown command '%s'\n", tool_prog, argv[0]);
	usage(stderr);
	return 2;
}
