/* SPDX-License-Identifier: MIT */
/*
 * unimem-check: drives /dev/unimem with wrong and hostile input and checks that each gets the
 * documented error (docs/unimem.md, "Linux driver"), never a crash. Run as root: some checks
 * drop to an unprivileged uid in a child. One `check=NAME ok=0|1 ...` line per check, then
 * `checks=N failed=F`; exit 1 if any failed. Afterwards dmesg must show no oops.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libunimem.h"
#include "tool.h"


/* errno of a failed call, 0 if it succeeded */
#define ERR(call) ((call) < 0 ? errno : 0)

static int open_dev(void)
{
	int fd = open(UNIMEM_DEV_PATH, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("cannot open %s: %s\n", UNIMEM_DEV_PATH, strerror(errno));
		exit(2);
	}
	return fd;
}

static int mmap_errno(int fd, size_t len, int flags, off_t off)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, off);

	if (p == MAP_FAILED)
		return errno;
	munmap(p, len);
	return 0;
}

/* Run fn in a child under uid 65534 without capabilities, on a file the child opened itself;
 * its exit status is the errno seen. */
static int as_nobody(int (*fn)(int))
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(255);
		_exit(fn(open_dev()));
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Run fn(fd) in a fork child (root, same uid): the parent's file in another process. */
static int in_child(int (*fn)(int), int fd)
{
	pid_t pid = fork();
	int st;

	if (pid == 0)
		_exit(fn(fd));
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int child_mmap(int fd)
{
	return mmap_errno(fd, 4096, MAP_SHARED, UNIMEM_MMAP_MIF);
}

static int child_bind(int fd)
{
	struct unimem_bind b = { -1, -1 };

	return ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
}

static int child_wait(int fd)
{
	struct unimem_wait w = { 10, 0 };

	return ERR(ioctl(fd, UNIMEM_IOC_WAIT, &w));
}

static int child_read(int fd)
{
	uint64_t word;

	return ERR(read(fd, &word, 8));
}

static int child_poll(int fd)
{
	struct pollfd pfd = { fd, POLLIN, 0 };

	return poll(&pfd, 1, 10) == 1 && (pfd.revents & POLLERR) ? 0 : 1;
}

static int child_info(int fd)
{
	struct unimem_info i;

	return ERR(ioctl(fd, UNIMEM_IOC_INFO, &i));
}

/* The user interface (1..63) the mailbox driver holds: 0 when it is on the kernel interface
 * (KIF, the default on devices that have it) or off; -1 if unreadable. From the `interface=`
 * field of /sys/class/misc/unimem/mailbox (kif, off or the number; docs/unimem.md). */
static int mailbox_interface(void)
{
	FILE *f = fopen("/sys/class/misc/unimem/mailbox", "r");
	char line[512], *at;
	int v = -1;

	if (f) {
		if (fgets(line, sizeof(line), f) && (at = strstr(line, "interface="))) {
			at += strlen("interface=");
			if (!strncmp(at, "kif", 3) || !strncmp(at, "off", 3))
				v = 0;
			else if (sscanf(at, "%d", &v) != 1 || v < 1 || v > 63)
				v = -1;
		}
		fclose(f);
	}
	return v;
}

/* Interfaces 1..63 other processes hold (sysfs `mif_used=HI,LO pif_used=HI,LO`; the mailbox's
 * does not count), -1 if unreadable. */
static int in_use_by_others(void)
{
	unsigned mh, ml, ph, pl;
	FILE *f = fopen("/sys/class/misc/unimem/interfaces", "r");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "mif_used=%x,%x pif_used=%x,%x", &mh, &ml, &ph, &pl);
	fclose(f);
	if (n != 4 || mailbox_interface() < 0)
		return -1;
	/* an open needs a free MIF and a free PIF */
	uint64_t mask = ~(1ull | 1ull << mailbox_interface());
	n = __builtin_popcountll(((uint64_t)mh << 32 | ml) & mask);
	return n > __builtin_popcountll(((uint64_t)ph << 32 | pl) & mask) ? n
									 : __builtin_popcountll(((uint64_t)ph << 32 | pl) & mask);
}

static volatile uint64_t *parent_mif; /* the parent's MIF mapping, for the fork check */

static int child_touch(int fd)
{
	(void)fd;
	return (int)(parent_mif[VMBOX_MIF_COUNT / 8] & 0) + 7; /* SIGSEGV before this returns */
}

static int bind_service(int fd)
{
	struct unimem_bind b = { UNIMEM_IF_SERVICE, -1 };

	return ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
}

static int bind_privileged(int fd)
{
	struct unimem_bind b = { UNIMEM_IF_PRIV_LAST, -1 };

	return ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
}

/* 0 if an unprivileged opener got interfaces above the privileged ones. */
static int unprivileged_interfaces(int fd)
{
	struct unimem_info i;

	if (ioctl(fd, UNIMEM_IOC_INFO, &i))
		return errno;
	return i.mif > UNIMEM_IF_PRIV_LAST && i.pif > UNIMEM_IF_PRIV_LAST && UNIMEM_PID_PRIVILEGED(i.pid_prefix) == 0
		       ? 0
		       : 1;
}

/* 0 if one unprivileged user gets exactly max_per_uid interfaces, then EBUSY (fd is the first). */
static int per_uid_cap(int fd)
{
	FILE *f = fopen("/sys/module/unimem/parameters/max_per_uid", "r");
	unsigned cap = 0, k = 1;
	int e = 0;

	(void)fd;
	if (!f || fscanf(f, "%u", &cap) != 1)
		return 3;
	fclose(f);
	for (; k < 64; k++) {
		if (open(UNIMEM_DEV_PATH, O_RDWR | O_CLOEXEC) < 0) {
			e = errno;
			break;
		}
	}
	return k == cap && e == EBUSY ? 0 : 1;
}

static int clear_pidconf(int fd)
{
	__u32 v = 0;

	return ERR(ioctl(fd, UNIMEM_IOC_SET_PIDCONF, &v));
}

int main(void)
{
	struct unimem_info info, info2;
	struct unimem_bind b;
	struct unimem_wait w;
	struct pollfd pfd;
	int fd, fd2, e, n;
	uint64_t buf[4];
	__u32 v;

	setvbuf(stdout, NULL, _IOLBF, 0);
	fd = open_dev();
	fd2 = open_dev();
	check("info", ioctl(fd, UNIMEM_IOC_INFO, &info) == 0 && info.mif >= 1 && info.mif < UNIMEM_IF_COUNT &&
		      info.pif >= 1 && info.pif < UNIMEM_IF_COUNT,
	      "mif=%u pif=%u", info.mif, info.pif);
	ioctl(fd2, UNIMEM_IOC_INFO, &info2);
	check("two_opens_get_different_interfaces", info.mif != info2.mif && info.pif != info2.pif,
	      "mif=%u,%u pif=%u,%u", info.mif, info2.mif, info.pif, info2.pif);

	/* mmap: only offset 0 and 4096, exactly one page, shared */
	e = mmap_errno(fd, 4096, MAP_SHARED, 2 * 4096);
	check("mmap_other_offset_einval", e == EINVAL, "errno=%d", e);
	e = mmap_errno(fd, 4096, MAP_SHARED, 0x40000);
	check("mmap_tif_offset_einval", e == EINVAL, "errno=%d", e);
	e = mmap_errno(fd, 8192, MAP_SHARED, 0);
	check("mmap_two_pages_einval", e == EINVAL, "errno=%d", e);
	e = mmap_errno(fd, 4096, MAP_PRIVATE, 0);
	check("mmap_private_einval", e == EINVAL, "errno=%d", e);
	e = mmap_errno(fd, 4096, MAP_SHARED, 0x7ffffffffffff000ll);
	check("mmap_huge_offset_einval", e != 0, "errno=%d", e);

	/* bind */
	b = (struct unimem_bind){ 64, -1 };
	e = ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
	check("bind_mif_64_einval", e == EINVAL, "errno=%d", e);
	b = (struct unimem_bind){ -1, -7 };
	e = ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
	check("bind_pif_negative_einval", e == EINVAL, "errno=%d", e);
	b = (struct unimem_bind){ (int)info2.mif, -1 };
	e = ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
	check("bind_taken_mif_ebusy", e == EBUSY, "errno=%d", e);
	b = (struct unimem_bind){ -1, (int)info2.pif };
	e = ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
	check("bind_taken_pif_ebusy", e == EBUSY, "errno=%d", e);
	e = as_nobody(bind_service);
	check("bind_service_unprivileged_eperm", e == EPERM, "errno=%d", e);
	e = as_nobody(bind_privileged);
	check("bind_privileged_unprivileged_eperm", e == EPERM, "errno=%d", e);
	e = as_nobody(unprivileged_interfaces);
	check("unprivileged_opener_gets_interfaces_above_8", e == 0, "status=%d", e);
	e = as_nobody(per_uid_cap);
	check("unprivileged_user_capped_at_max_per_uid", e == 0, "status=%d", e);
	e = ERR(ioctl(fd, UNIMEM_IOC_BIND, NULL));
	check("bind_null_efault", e == EFAULT, "errno=%d", e);
	b = (struct unimem_bind){ 62, 62 };
	e = ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
	ioctl(fd, UNIMEM_IOC_INFO, &info);
	check("bind_62", e == 0 && info.mif == 62 && info.pif == 62, "errno=%d mif=%u pif=%u", e, info.mif,
	      info.pif);
	e = mmap_errno(fd, 4096, MAP_SHARED, UNIMEM_MMAP_PIF);
	b = (struct unimem_bind){ 61, -1 };
	n = ERR(ioctl(fd, UNIMEM_IOC_BIND, &b));
	check("bind_after_mmap_ebusy", e == 0 && n == EBUSY, "mmap_errno=%d errno=%d", e, n);

	/* debug ioctl */
	v = 2;
	e = ERR(ioctl(fd, UNIMEM_IOC_SET_PIDCONF, &v));
	check("setpidconf_2_einval", e == EINVAL, "errno=%d", e);
	e = as_nobody(clear_pidconf);
	check("setpidconf_unprivileged_eperm", e == EPERM, "errno=%d", e);
	e = ERR(ioctl(fd, _IO(UNIMEM_IOC_MAGIC, 99)));
	check("unknown_ioctl_enotty", e == ENOTTY, "errno=%d", e);
	e = ERR(ioctl(fd, UNIMEM_IOC_INFO, (void *)16));
	check("info_bad_pointer_efault", e == EFAULT, "errno=%d", e);

	/* read, wait, poll on the empty MIF */
	e = ERR(read(fd, buf, 5));
	check("read_odd_length_einval", e == EINVAL, "errno=%d", e);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	e = ERR(read(fd, buf, 8));
	check("read_empty_nonblock_eagain", e == EAGAIN, "errno=%d", e);
	fcntl(fd, F_SETFL, 0);
	w = (struct unimem_wait){ 200, 0 };
	e = ERR(ioctl(fd, UNIMEM_IOC_WAIT, &w));
	check("wait_empty_etimedout", e == ETIMEDOUT && w.count == 0, "errno=%d count=%u", e, w.count);
	pfd = (struct pollfd){ fd, POLLIN, 0 };
	n = poll(&pfd, 1, 100);
	check("poll_empty_times_out", n == 0, "poll=%d", n);

	/* a packet from fd2 to fd's MIF: poll, wait and read see it */
	{
		struct unimem u2 = { .fd = fd2 };
		uint64_t words[4] = { 0xabcdull << 48, 1, 2, 3 };
		int st;

		ioctl(fd2, UNIMEM_IOC_INFO, &u2.info);
		if (unimem_map(&u2)) {
			check("send_to_self", 0, "map failed");
		} else {
			st = unimem_send(&u2, info.mif_gaddr, words, 5000000);
			check("send_to_self", st > 0 && (st & PKTZ_ST_ACK), "status=0x%x", st);
			n = poll(&pfd, 1, 5000);
			check("poll_pollin", n == 1 && (pfd.revents & POLLIN), "poll=%d revents=0x%x", n, pfd.revents);
			w = (struct unimem_wait){ 1000, 0 };
			e = ERR(ioctl(fd, UNIMEM_IOC_WAIT, &w));
			check("wait_nonempty", e == 0 && w.count == UNIMEM_PACKET_WORDS, "errno=%d count=%u", e, w.count);
			n = read(fd, buf, sizeof(buf));
			check("read_packet", n == 32 && UNIMEM_PACKET_PID(buf[0]) == u2.info.pid_prefix &&
						   buf[0] >> 48 == 0xabcd && buf[1] == 1 && buf[2] == 2 && buf[3] == 3,
			      "n=%d w0=0x%016llx", n, (unsigned long long)buf[0]);
		}
		/* the mappings hold the file: release() runs only after munmap and close */
		unimem_close(&u2);
	}

	/* the atomicity driver (ExaNoDe D3.6 sec. 2.2.4): a file's interfaces are its opener's only;
	 * another process holding the descriptor (here a fork child) cannot use them, and a fork
	 * child does not inherit the mappings */
	{
		struct unimem u3;

		e = unimem_open(&u3);
		if (!e)
			e = -unimem_map(&u3);
		check("owner_maps", e == 0, "errno=%d", e);
		if (!e) {
			parent_mif = u3.mif;
			e = in_child(child_mmap, u3.fd);
			check("other_process_mmap_eperm", e == EPERM, "errno=%d", e);
			e = in_child(child_bind, u3.fd);
			check("other_process_bind_eperm", e == EPERM, "errno=%d", e);
			e = in_child(child_wait, u3.fd);
			check("other_process_wait_eperm", e == EPERM, "errno=%d", e);
			e = in_child(child_read, u3.fd);
			check("other_process_read_eperm", e == EPERM, "errno=%d", e);
			e = in_child(child_poll, u3.fd);
			check("other_process_poll_pollerr", e == 0, "status=%d", e);
			e = in_child(child_info, u3.fd);
			check("other_process_info_allowed", e == 0, "errno=%d", e);
			e = in_child(child_touch, u3.fd);
			check("fork_child_does_not_inherit_mapping", e == 128 + SIGSEGV, "status=%d", e);
			check("pid_names_node_mif_tgid_tid",
			      UNIMEM_PID_NODE(u3.info.pid_prefix) == u3.info.node_id &&
				      UNIMEM_PID_MIF(u3.info.pid_prefix) == u3.info.mif &&
				      UNIMEM_PID_TGID(u3.info.pid_prefix) == (unsigned)getpid() &&
				      UNIMEM_PID_TID(u3.info.pid_prefix) == (unsigned)gettid(),
			      "pid=0x%012llx", (unsigned long long)u3.info.pid_prefix);
			unimem_close(&u3);
		}
	}

	/* a user store into its own full FIFO is a bus error: SIGBUS for the process, nothing else */
	{
		pid_t pid = fork();
		int st = 0;

		if (pid == 0) {
			struct unimem u;

			if (unimem_open(&u) || unimem_map(&u))
				_exit(3);
			for (unsigned k = 0; k <= u.info.fifo_depth; k++)
				u.mif[VMBOX_MIF_DATA / 8] = k;
			_exit(0); /* the store after the FIFO filled up did not fault */
		}
		waitpid(pid, &st, 0);
		check("store_to_full_fifo_sigbus", WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status=0x%x", st);
	}

	/* interfaces run out: 63 opens at most (0 is the atomic service's), 62 while the mailbox
	 * holds a user interface (mailbox_if=1..63, or a device without the KIF), minus those other
	 * processes hold now, the next one is EBUSY */
	{
		/* (the name is kept from when the mailbox always held one: 63 with the KIF) */
		int fds[64], k, last = 0, held, room = mailbox_interface() ? 62 : 63;

		close(fd);
		held = in_use_by_others();
		for (k = 0; k < 64; k++) {
			fds[k] = open(UNIMEM_DEV_PATH, O_RDWR | O_CLOEXEC);
			if (fds[k] < 0) {
				last = errno;
				break;
			}
		}
		check("open_62_then_ebusy", held >= 0 && k == room - held && last == EBUSY,
		      "opened=%d held_by_others=%d room=%d errno=%d", k, held, room, last);
		while (k-- > 0)
			close(fds[k]);
		fd = open(UNIMEM_DEV_PATH, O_RDWR | O_CLOEXEC);
		check("interfaces_freed_on_close", fd >= 0, "fd=%d", fd);
		close(fd);
	}
	return check_summary();
}
