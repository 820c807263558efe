/* SPDX-License-Identifier: MIT */
/*
 * rackemu-agent: the guest side of the host-to-guest command channel (docs/agent.md).
 *
 * Single-threaded event loop over the virtio-serial port and the pipes of the commands it
 * runs: requests are parsed as they arrive, each EXEC forks a /bin/sh -c in its own process
 * group, output is collected, and the whole response is written when the command has exited.
 * A malformed frame is answered with an error and skipped (the reader resynchronises on the
 * magic); nothing the host sends can crash the agent.
 *
 * Idle means asleep: poll() has no timeout unless a command has a deadline or a grace period
 * running. Children's exits arrive as SIGCHLD on a signalfd. While no host is connected the
 * port reports POLLHUP at once, so it leaves the poll set; the driver sends SIGIO (O_ASYNC)
 * when the host opens the port again, which brings it back.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_proto.h"

struct buf {
	unsigned char *p;
	size_t len, cap;
};

struct job {
	int used;
	uint32_t id;
	pid_t pid;
	int out_fd, err_fd, in_fd;
	struct buf out, err, in;
	size_t in_off;
	uint32_t flags;
	int exited, status;
	uint64_t deadline_ms, exit_ms;
};

static int port = -1;
static sigset_t old_mask; /* the mask commands start with (the agent blocks SIGCHLD and SIGIO) */
static struct buf rx;
static struct job jobs[AG_MAX_JOBS];

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void logmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "rackemu-agent: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

static int buf_add(struct buf *b, const void *d, size_t n, size_t limit)
{
	if (b->len + n > limit)
		n = limit > b->len ? limit - b->len : 0;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		unsigned char *p;

		while (cap < b->len + n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
	return (int)n;
}

static void buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static uint32_t get32(const unsigned char *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v;
	p[1] = v >> 8;
	p[2] = v >> 16;
	p[3] = v >> 24;
}

/* Write all of it; give up (dropping the response) if the host stops reading for 10 s. */
static void port_write(const unsigned char *p, size_t n)
{
	uint64_t deadline = now_ms() + 10000;

	while (n) {
		ssize_t w = write(port, p, n);

		if (w > 0) {
			p += w;
			n -= w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR) {
			logmsg("write to the port failed: %s", strerror(errno));
			return;
		}
		if (now_ms() > deadline) {
			logmsg("host not reading; %zu bytes of a response dropped", n);
			return;
		}
		struct pollfd pfd = { port, POLLOUT, 0 };
		poll(&pfd, 1, 100);
	}
}

static void respond(uint16_t type, uint32_t id, int32_t status, uint32_t flags, const void *out,
		    uint32_t out_len, const void *err, uint32_t err_len)
{
	unsigned char h[AG_HDR_SIZE + 16];

	put32(h, AG_MAGIC);
	h[4] = AG_VERSION;
	h[5] = 0;
	h[6] = type | AG_RESPONSE;
	h[7] = 0;
	put32(h + 8, id);
	put32(h + 12, 16 + out_len + err_len);
	put32(h + 16, (uint32_t)status);
	put32(h + 20, flags);
	put32(h + 24, out_len);
	put32(h + 28, err_len);
	port_write(h, sizeof(h));
	port_write(out, out_len);
	port_write(err, err_len);
}

static void respond_error(uint16_t type, uint32_t id, int32_t status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	respond(type, id, status, AG_F_ERROR, NULL, 0, msg, strlen(msg));
}

static void start_exec(uint32_t id, const unsigned char *b, uint32_t len)
{
	int o[2], e[2], in[2];
	struct job *j = NULL;
	uint32_t timeout, stdin_len, cmd_len;
	char *cmd;

	if (len < 12 || (cmd_len = get32(b + 8)) > len - 12 || (stdin_len = get32(b + 4)) > len - 12 - cmd_len) {
		respond_error(AG_EXEC, id, -EINVAL, "malformed EXEC request (%u bytes)", len);
		return;
	}
	timeout = get32(b);
	for (unsigned int i = 0; i < AG_MAX_JOBS; i++)
		if (!jobs[i].used) {
			j = &jobs[i];
			break;
		}
	if (!j) {
		respond_error(AG_EXEC, id, -EBUSY, "%u commands already running", AG_MAX_JOBS);
		return;
	}
	cmd = strndup((const char *)b + 12, cmd_len);
	if (!cmd || pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC) || pipe2(in, O_CLOEXEC)) {
		respond_error(AG_EXEC, id, -errno, "cannot start command: %s", strerror(errno));
		free(cmd);
		return;
	}
	memset(j, 0, sizeof(*j));
	j->pid = fork();
	if (j->pid == 0) {
		setsid();
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		dup2(in[0], 0);
		dup2(o[1], 1);
		dup2(e[1], 2);
		signal(SIGPIPE, SIG_DFL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	free(cmd);
	close(o[1]);
	close(e[1]);
	close(in[0]);
	if (j->pid < 0) {
		respond_error(AG_EXEC, id, -errno, "fork failed: %s", strerror(errno));
		close(o[0]);
		close(e[0]);
		close(in[1]);
		return;
	}
	j->used = 1;
	j->id = id;
	j->out_fd = o[0];
	j->err_fd = e[0];
	j->in_fd = in[1];
	fcntl(j->in_fd, F_SETFL, O_NONBLOCK);
	buf_add(&j->in, b + 12 + cmd_len, stdin_len, AG_MAX_BODY);
	if (!stdin_len) {
		close(j->in_fd);
		j->in_fd = -1;
	}
	j->deadline_ms = timeout ? now_ms() + timeout : 0;
}

static void do_put(uint32_t id, const unsigned char *b, uint32_t len)
{
	uint32_t mode, plen;
	char *path, tmp[4096];
	int fd;

	if (len < 8 || (plen = get32(b + 4)) == 0 || plen > len - 8 || plen > 4000) {
		respond_error(AG_PUT, id, -EINVAL, "malformed PUT request");
		return;
	}
	mode = get32(b) & 07777;
	path = strndup((const char *)b + 8, plen);
	snprintf(tmp, sizeof(tmp), "%s.rackemu-tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode ? mode : 0644);
	if (fd < 0) {
		respond_error(AG_PUT, id, -errno, "cannot create %s: %s", path, strerror(errno));
		free(path);
		return;
	}
	const unsigned char *d = b + 8 + plen;
	size_t n = len - 8 - plen;
	while (n) {
		ssize_t w = write(fd, d, n);
		if (w <= 0) {
			respond_error(AG_PUT, id, -errno, "write %s: %s", path, strerror(errno));
			close(fd);
			unlink(tmp);
			free(path);
			return;
		}
		d += w;
		n -= w;
	}
	fchmod(fd, mode ? mode : 0644);
	if (close(fd) || rename(tmp, path)) {
		respond_error(AG_PUT, id, -errno, "cannot finish %s: %s", path, strerror(errno));
		unlink(tmp);
	} else {
		respond(AG_PUT, id, 0, 0, NULL, 0, NULL, 0);
	}
	free(path);
}

static void do_get(uint32_t id, const unsigned char *b, uint32_t len)
{
	struct buf data = { 0 };
	char *path = strndup((const char *)b, len);
	unsigned char chunk[65536];
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	ssize_t n;

	if (fd < 0) {
		respond_error(AG_GET, id, -errno, "cannot open %s: %s", path ? path : "?", strerror(errno));
		free(path);
		return;
	}
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		if (buf_add(&data, chunk, n, AG_MAX_BODY) < n)
			break;
	close(fd);
	if (n < 0)
		respond_error(AG_GET, id, -errno, "read %s: %s", path, strerror(errno));
	else if (data.len >= AG_MAX_BODY)
		respond_error(AG_GET, id, -EFBIG, "%s is larger than %u bytes", path, AG_MAX_BODY);
	else
		respond(AG_GET, id, 0, 0, data.p, data.len, NULL, 0);
	buf_free(&data);
	free(path);
}

/* CLOCK: set the wall clock and mix host randomness into the pool, without starting a process
 * (a restored snapshot's first process spawn is slow under TCG: its code is translated afresh). */
static void do_clock(uint32_t id, const unsigned char *b, uint32_t len)
{
	struct timespec ts;
	uint64_t ns;
	int fd;

	if (len < 8 || len - 8 > AG_MAX_ENTROPY) {
		respond_error(AG_CLOCK, id, -EINVAL, "malformed CLOCK request (%u bytes, at most %u of entropy)",
			      len, AG_MAX_ENTROPY);
		return;
	}
	ns = (uint64_t)get32(b) | (uint64_t)get32(b + 4) << 32;
	ts.tv_sec = (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
		respond_error(AG_CLOCK, id, -errno, "clock_settime: %s", strerror(errno));
		return;
	}
	if (len > 8) {
		fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, b + 8, len - 8) != (ssize_t)(len - 8)) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			respond_error(AG_CLOCK, id, -e, "writing /dev/urandom: %s", strerror(e));
			return;
		}
		close(fd);
	}
	respond(AG_CLOCK, id, 0, 0, NULL, 0, NULL, 0);
}

/* Parse every complete frame in rx. */
static void handle_rx(void)
{
	size_t off = 0;

	while (rx.len - off >= AG_HDR_SIZE) {
		const unsigned char *h = rx.p + off;
		uint32_t len, id;
		unsigned int type;

		if (get32(h) != AG_MAGIC) {
			/* resynchronise: skip to the next possible magic */
			size_t skip = 1;
			while (off + skip + 4 <= rx.len && get32(rx.p + off + skip) != AG_MAGIC)
				skip++;
			logmsg("skipped %zu bytes of garbage on the port", skip);
			respond_error(0, 0, -EPROTO, "garbage on the port (%zu bytes skipped)", skip);
			off += skip;
			continue;
		}
		type = h[6];
		id = get32(h + 8);
		len = get32(h + 12);
		if (h[4] != AG_VERSION || len > AG_MAX_BODY) {
			respond_error(type, id, -EPROTO, "unsupported version %u or oversized body %u", h[4], len);
			off += 4; /* drop the magic, resync */
			continue;
		}
		if (rx.len - off < AG_HDR_SIZE + len)
			break;
		const unsigned char *b = h + AG_HDR_SIZE;
		switch (type) {
		case AG_PING:
			respond(AG_PING, id, 0, 0, NULL, 0, NULL, 0);
			break;
		case AG_EXEC:
			start_exec(id, b, len);
			break;
		case AG_PUT:
			do_put(id, b, len);
			break;
		case AG_GET:
			do_get(id, b, len);
			break;
		case AG_CLOCK:
			do_clock(id, b, len);
			break;
		default:
			respond_error(type, id, -ENOSYS, "unknown request type %u", type);
		}
		off += AG_HDR_SIZE + len;
	}
	memmove(rx.p, rx.p + off, rx.len - off);
	rx.len -= off;
}

static void finish(struct job *j)
{
	if (j->out_fd >= 0)
		close(j->out_fd);
	if (j->err_fd >= 0)
		close(j->err_fd);
	if (j->in_fd >= 0)
		close(j->in_fd);
	respond(AG_EXEC, j->id, j->status, j->flags, j->out.p, j->out.len, j->err.p, j->err.len);
	buf_free(&j->out);
	buf_free(&j->err);
	buf_free(&j->in);
	j->used = 0;
}

static int open_port(void)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *de;
	char path[512], name[64];
	int fd = -1;

	while (d && (de = readdir(d))) {
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f) && !strncmp(name, "rackemu.agent", 13)) {
			snprintf(path, sizeof(path), "/dev/%s", de->d_name);
			fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	return fd;
}

/* Milliseconds until the next job deadline or end of a grace period; -1: none (sleep until an event). */
static int next_timeout(uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (unsigned int i = 0; i < AG_MAX_JOBS; i++) {
		const struct job *j = &jobs[i];

		if (!j->used)
			continue;
		if (!j->exited && j->deadline_ms && j->deadline_ms < next)
			next = j->deadline_ms;
		if (j->exited && j->exit_ms + 201 < next)
			next = j->exit_ms + 201;
	}
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)(next - now > 60000 ? 60000 : next - now);
}

int main(void)
{
	sigset_t mask;
	int sfd, port_hup = 0;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGIO);
	sigprocmask(SIG_BLOCK, &mask, &old_mask);
	sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		logmsg("signalfd: %s", strerror(errno));
		return 1;
	}
	for (int tries = 0; (port = open_port()) < 0; tries++) {
		if (tries == 50) {
			logmsg("no virtio-serial port named rackemu.agent (is virtio_console loaded and the "
			       "virtserialport configured?)");
			return 1;
		}
		usleep(100000);
	}
	/* SIGIO when the host opens or closes the port, or data arrives */
	if (fcntl(port, F_SETOWN, getpid()) < 0 || fcntl(port, F_SETFL, O_NONBLOCK | O_ASYNC) < 0) {
		logmsg("cannot enable SIGIO on the port: %s", strerror(errno));
		return 1;
	}
	logmsg("serving on the rackemu.agent port");
	for (;;) {
		struct pollfd pfds[2 + 3 * AG_MAX_JOBS];
		struct job *owner[2 + 3 * AG_MAX_JOBS];
		int n = 0, first_job;
		uint64_t now = now_ms();

		pfds[n] = (struct pollfd){ sfd, POLLIN, 0 };
		owner[n++] = NULL;
		if (!port_hup) {
			pfds[n] = (struct pollfd){ port, POLLIN, 0 };
			owner[n++] = NULL;
		}
		first_job = n;
		for (unsigned int i = 0; i < AG_MAX_JOBS; i++) {
			struct job *j = &jobs[i];
			if (!j->used)
				continue;
			if (j->out_fd >= 0) {
				pfds[n] = (struct pollfd){ j->out_fd, POLLIN, 0 };
				owner[n++] = j;
			}
			if (j->err_fd >= 0) {
				pfds[n] = (struct pollfd){ j->err_fd, POLLIN, 0 };
				owner[n++] = j;
			}
			if (j->in_fd >= 0) {
				pfds[n] = (struct pollfd){ j->in_fd, POLLOUT, 0 };
				owner[n++] = j;
			}
		}
		poll(pfds, n, next_timeout(now));
		if (pfds[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
				if (si.ssi_signo == SIGIO)
					port_hup = 0; /* the host may have connected: look again */
		}
		if (first_job == 2 && (pfds[1].revents & POLLIN)) {
			unsigned char chunk[65536];
			ssize_t r = read(port, chunk, sizeof(chunk));
			if (r > 0) {
				buf_add(&rx, chunk, r, (size_t)AG_MAX_BODY + AG_HDR_SIZE * 2);
				handle_rx();
			} else if (r == 0) {
				port_hup = 1; /* host not connected: wait for its SIGIO */
			}
		} else if (first_job == 2 && (pfds[1].revents & (POLLHUP | POLLERR))) {
			port_hup = 1;
		}
		for (int k = first_job; k < n; k++) {
			struct job *j = owner[k];
			unsigned char chunk[65536];
			ssize_t r;

			if (!pfds[k].revents)
				continue;
			if (pfds[k].fd == j->in_fd) {
				r = write(j->in_fd, j->in.p + j->in_off, j->in.len - j->in_off);
				if (r > 0)
					j->in_off += r;
				if ((r < 0 && errno != EAGAIN) || j->in_off == j->in.len) {
					close(j->in_fd);
					j->in_fd = -1;
				}
				continue;
			}
			r = read(pfds[k].fd, chunk, sizeof(chunk));
			if (r > 0) {
				struct buf *b = pfds[k].fd == j->out_fd ? &j->out : &j->err;
				if (buf_add(b, chunk, r, AG_MAX_OUTPUT) < r)
					j->flags |= AG_F_TRUNCATED;
			} else if (r == 0 || errno != EAGAIN) {
				close(pfds[k].fd);
				if (pfds[k].fd == j->out_fd)
					j->out_fd = -1;
				else
					j->err_fd = -1;
			}
		}
		now = now_ms();
		for (unsigned int i = 0; i < AG_MAX_JOBS; i++) {
			struct job *j = &jobs[i];
			int st;

			if (!j->used)
				continue;
			if (!j->exited && waitpid(j->pid, &st, WNOHANG) == j->pid) {
				j->exited = 1;
				j->exit_ms = now;
				j->status = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
			}
			if (!j->exited && j->deadline_ms && now >= j->deadline_ms) {
				kill(-j->pid, SIGKILL);
				kill(j->pid, SIGKILL);
				j->flags |= AG_F_TIMED_OUT;
				j->deadline_ms = 0;
			}
			/* Done when the command exited and its output is drained; background children
			 * that keep the pipes open get 200 ms of grace, then are left behind. */
			if (j->exited && ((j->out_fd < 0 && j->err_fd < 0) || now - j->exit_ms > 200))
				finish(j);
		}
	}
}
