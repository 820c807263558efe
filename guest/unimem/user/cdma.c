// SPDX-License-Identifier: MIT
/*
 * cdma: copies with the node's cDMA engine (/dev/unimem_dma: dmaengine + xilinx_dma).
 * `cdma --help` lists the subcommands; key=value output; exit 0 on success, 1 when the
 * copy failed, 2 for a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rackemu/unimem_dma_uapi.h"
#include "rackemu/unimem_regs.h"
#include "rackemu/xilinx_cdma_regs.h"
#include "tool.h"




/* "g:G" = global address G (through the window), "p:P" or "P" = this node's physical address */
static uint64_t addr(const char *s, const char *what)
{
	if (!strncmp(s, "g:", 2)) {
		uint64_t g = num(s + 2, what, UINT64_MAX);

		if (g >> UNIMEM_GADDR_BITS)
			die("%s '%s': a global address has %u bits", what, s, UNIMEM_GADDR_BITS);
		return GAS_WINDOW_BASE + g;
	}
	return num(!strncmp(s, "p:", 2) ? s + 2 : s, what, UINT64_MAX);
}

static int cmd_copy(int argc, char **argv)
{
	static const struct option opts[] = { { "src", 1, 0, 's' }, { "dst", 1, 0, 'd' }, { "len", 1, 0, 'l' },
					       { "timeout", 1, 0, 't' }, { "repeat", 1, 0, 'r' }, { "help", 0, 0, 'h' },
					       { 0 } };
	struct unimem_dma_copy c = { 0 };
	int have_s = 0, have_d = 0, o, fd;
	long repeat = 1;
	uint64_t total_ns = 0;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's': c.src = addr(optarg, "--src"); have_s = 1; break;
		case 'd': c.dst = addr(optarg, "--dst"); have_d = 1; break;
		case 'l': c.len = num(optarg, "--len", UINT64_MAX); break;
		case 't': c.timeout_ms = (uint32_t)num(optarg, "--timeout", 600000); break;
		case 'r': repeat = (long)num(optarg, "--repeat", 1000000); break;
		case 'h':
			printf("usage: cdma copy --src A --dst A --len L [--timeout MS] [--repeat K]\n"
			       "Copy L bytes (1 .. 64M) with the cDMA engine. An address A is g:G (global address G:\n"
			       "another node's memory, or this node's, through the global address space window) or\n"
			       "p:P / P (this node's physical address). Prints status=ok|EIO|ETIMEDOUT src=.. dst=..\n"
			       "len=.. elapsed_us=.. mb_per_s=.. (the median copy of K). The first failed copy stops\n"
			       "the repetitions; its line adds done= (copies that succeeded before), error_after_us=\n"
			       "(how long the failing copy took) and since_last_ok_us= (from the last good copy).\n");
			return 0;
		default: return 2;
		}
	}
	if (!have_s || !have_d || !c.len)
		die("--src, --dst and --len are required; see --help");
	if (c.len > UNIMEM_DMA_MAX_LEN)
		die("--len at most %u", UNIMEM_DMA_MAX_LEN);
	if (repeat < 1 || repeat > 1000000)
		die("--repeat must be 1 .. 1000000");
	fd = open(UNIMEM_DMA_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("cannot open %s: %s (insmod xilinx_dma.ko and unimem_dma.ko from /lib/modules/extra; root)",
		    UNIMEM_DMA_DEV_PATH, strerror(errno));
	uint64_t *ns = calloc((size_t)repeat, sizeof(uint64_t));

	if (!ns)
		die("out of memory");
	struct timespec ts;
	double last_ok, t_err = 0, t0 = 0;
	long done = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	last_ok = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
	for (long i = 0; i < repeat; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
		if (ioctl(fd, UNIMEM_DMA_IOC_COPY, &c) < 0)
			die("UNIMEM_DMA_IOC_COPY: %s", strerror(errno));
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (c.status) {
			t_err = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
			break;
		}
		last_ok = ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
		done++;
		ns[i] = c.elapsed_ns;
		total_ns += c.elapsed_ns;
		/* insertion sort for the median */
		for (long j = i; j > 0 && ns[j - 1] > ns[j]; j--) {
			uint64_t t = ns[j];

			ns[j] = ns[j - 1];
			ns[j - 1] = t;
		}
	}
	uint64_t med = c.status ? c.elapsed_ns : ns[repeat / 2];

	if (c.status)
		printf("done=%ld error_after_us=%.0f since_last_ok_us=%.0f ", done, t_err - t0, t_err - last_ok);
	printf("status=%s src=0x%llx dst=0x%llx len=%llu elapsed_us=%.1f mb_per_s=%.1f engine_status=0x%x%s%s%s\n",
	       c.status == 0 ? "ok" : c.status == -ETIMEDOUT ? "ETIMEDOUT" : "EIO", (unsigned long long)c.src,
	       (unsigned long long)c.dst, (unsigned long long)c.len, med / 1e3, med ? c.len * 1e3 / med : 0.0,
	       c.engine_status, c.engine_status & XCDMA_SR_DMADECERR ? " error=DMADecErr" : "",
	       c.engine_status & XCDMA_SR_DMASLVERR ? " error=DMASlvErr" : "",
	       c.engine_status & XCDMA_SR_DMAINTERR ? " error=DMAIntErr" : "");
	(void)total_ns;
	free(ns);
	close(fd);
	return c.status ? 1 : 0;
}

/* /dev/dmabuffers against bad input: one line per check (tool.h), then checks=N failed=F. */
static void check_errno(const char *name, int ok, int e)
{
	check(name, ok, "errno=%d", e);
}

static int cmd_dmabuf_check(void)
{
	int fd = open(DMABUF_DEV_PATH, O_RDWR | O_CLOEXEC);
	struct dmabuf_info info;
	struct dmabuf_alloc a = { 0 }, b = { 0 };
	struct dmabuf_xfer x;
	uint32_t id;
	ssize_t r;
	void *m;

	if (fd < 0 || ioctl(fd, DMABUF_IOC_INFO, &info) < 0)
		die("cannot use %s: %s (insmod xilinx_dma.ko and unimem_dma.ko)", DMABUF_DEV_PATH, strerror(errno));
	a.node = info.node_id;
	a.size = 8192;
	check_errno("alloc_local", ioctl(fd, DMABUF_IOC_ALLOC, &a) == 0 && a.id >= 1, errno);
	b.node = info.node_count; /* no such node */
	b.size = 4096;
	check_errno("alloc_no_such_node_einval", ioctl(fd, DMABUF_IOC_ALLOC, &b) < 0 && errno == EINVAL, errno);
	b.node = info.node_id;
	b.size = DMABUF_MAX_SIZE + 1;
	check_errno("alloc_too_big_einval", ioctl(fd, DMABUF_IOC_ALLOC, &b) < 0 && errno == EINVAL, errno);
	b.size = 0;
	check_errno("alloc_zero_einval", ioctl(fd, DMABUF_IOC_ALLOC, &b) < 0 && errno == EINVAL, errno);
	/* transfers may only touch this file's buffers */
	x = (struct dmabuf_xfer){ .src = a.gaddr, .dst = a.gaddr + 4096, .size = 4096, .tid = 1 };
	r = write(fd, &x, sizeof(x));
	check_errno("transfer_inside_own_buffer", r == (ssize_t)sizeof(x), errno);
	x.dst = UNIMEM_GADDR(info.node_id, 0x40000000); /* somebody else's memory */
	r = write(fd, &x, sizeof(x));
	check_errno("transfer_to_foreign_memory_einval", r < 0 && errno == EINVAL, errno);
	x = (struct dmabuf_xfer){ .src = UNIMEM_GADDR(info.node_id, 0x40000000), .dst = a.gaddr, .size = 64 };
	r = write(fd, &x, sizeof(x));
	check_errno("transfer_from_foreign_memory_einval", r < 0 && errno == EINVAL, errno);
	x = (struct dmabuf_xfer){ .src = a.gaddr + 4096, .dst = a.gaddr, .size = 8192 }; /* runs past the end */
	r = write(fd, &x, sizeof(x));
	check_errno("transfer_past_buffer_end_einval", r < 0 && errno == EINVAL, errno);
	x.size = 0;
	r = write(fd, &x, sizeof(x));
	check_errno("transfer_zero_size_einval", r < 0 && errno == EINVAL, errno);
	r = write(fd, &x, 5);
	check_errno("write_odd_size_einval", r < 0 && errno == EINVAL, errno);
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, (off_t)(63 * DMABUF_MMAP_STRIDE));
	check_errno("mmap_unknown_buffer_einval", m == MAP_FAILED && errno == EINVAL, errno);
	m = mmap(NULL, 16384, PROT_READ, MAP_SHARED, fd, (off_t)(a.id * DMABUF_MMAP_STRIDE));
	check_errno("mmap_beyond_buffer_einval", m == MAP_FAILED && errno == EINVAL, errno);
	m = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, (off_t)(a.id * DMABUF_MMAP_STRIDE));
	check_errno("mmap_private_einval", m == MAP_FAILED && errno == EINVAL, errno);
	id = 60;
	check_errno("free_unknown_enoent", ioctl(fd, DMABUF_IOC_FREE, &id) < 0 && errno == ENOENT, errno);
	id = 0;
	check_errno("free_id_0_einval", ioctl(fd, DMABUF_IOC_FREE, &id) < 0 && errno == EINVAL, errno);
	{
		struct dmabuf_done d[4];

		usleep(100000);
		r = read(fd, d, sizeof(d));
		check_errno("completion_of_the_good_transfer", r == (ssize_t)sizeof(d[0]) && d[0].tid == 1 && d[0].status == 0,
		      errno);
	}
	id = a.id;
	check_errno("free_own_buffer", ioctl(fd, DMABUF_IOC_FREE, &id) == 0, errno);
	close(fd);
	return check_summary();
}

/* Allocate on a node through the remote allocator and print the global address. */
static int cmd_alloc(int argc, char **argv)
{
	struct dmabuf_alloc a = { .size = 4096 };
	int fd, have_n = 0;
	long count = 1, hold = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--node") && i + 1 < argc) {
			a.node = (uint32_t)num(argv[++i], "--node", 63);
			have_n = 1;
		} else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
			a.size = num(argv[++i], "--size", UINT32_MAX);
		} else if (!strcmp(argv[i], "--count") && i + 1 < argc) {
			count = (long)num(argv[++i], "--count", DMABUF_MAX_BUFFERS);
		} else if (!strcmp(argv[i], "--hold") && i + 1 < argc) {
			hold = (long)num(argv[++i], "--hold", 86400);
		} else if (!strcmp(argv[i], "--help")) {
			printf("usage: cdma alloc --node N [--size BYTES] [--count K] [--hold SECONDS]\nAllocate K (1..64) "
			       "RDMA buffers on node N through /dev/dmabuffers (remote: that node's allocator, over\n"
			       "the mailbox), print id=.. gaddr=.. size=.. for each, keep them SECONDS (default 0), free\n"
			       "them again (closing the file). Exit 1 with error=.. at the first that fails.\n");
			return 0;
		} else {
			die("unknown argument '%s'; see cdma alloc --help", argv[i]);
		}
	}
	if (!have_n)
		die("--node is required");
	fd = open(DMABUF_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die("cannot open %s: %s", DMABUF_DEV_PATH, strerror(errno));
	if (count < 1)
		die("--count must be 1 .. %u", DMABUF_MAX_BUFFERS);
	for (long i = 0; i < count; i++) {
		struct dmabuf_alloc b = a;

		if (ioctl(fd, DMABUF_IOC_ALLOC, &b) < 0) {
			printf("node=%u error=%s\n", b.node, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
			return 1;
		}
		printf("node=%u id=%u gaddr=0x%010llx size=%llu\n", b.node, b.id, (unsigned long long)b.gaddr,
		       (unsigned long long)b.size);
	}
	if (hold)
		sleep((unsigned)hold);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	tool_prog = "cdma";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fprintf(argc < 2 ? stderr : stdout, "usage: cdma COMMAND   (every command has --help)\n"
			"  copy          copy with the engine (/dev/unimem_dma, root)\n"
			"  alloc         an RDMA buffer on a node (/dev/dmabuffers)\n"
			"  dmabuf-check  /dev/dmabuffers against bad input\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "copy"))
		return cmd_copy(argc - 1, argv + 1);
	if (!strcmp(argv[1], "alloc"))
		return cmd_alloc(argc - 1, argv + 1);
	if (!strcmp(argv[1], "dmabuf-check"))
		return cmd_dmabuf_check();
	fprintf(stderr, "%s: unknown command '%s'\n", tool_prog, argv[1]);
	return 2;
}
