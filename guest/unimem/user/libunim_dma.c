// SPDX-License-Identifier: MIT
/*
 * unim_dma library (ExaNoDe D3.6 sec. 3.4) over /dev/dmabuffers; see unim_dma.h and docs/rdma.md.
 *
 * State: one open /dev/dmabuffers, the buffers by ID, and a ring of the last UNIM_TRACKED
 * transfers by ID. As sec. 3.1.2 describes, a submitted transfer is stored in the library's
 * transfer list with status DMA_PENDING; the submitter thread takes the pending transfers in
 * the order they were submitted and hands them to the device (DMA_STARTED). A completion thread
 * reads finished transfers from the device, finishes the _to_mem copies, updates the statuses
 * and runs the callbacks. _from_mem/_to_mem stage the data in internal local RDMA buffers
 * (sec. 3.4.4), kept in a small pool for reuse.
 */
#define _GNU_SOURCE
#include "unim_dma.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rackemu/unimem_dma_uapi.h"

#define UNIM_TRACKED 4096u /* transfers whose status stays queryable */
#define UNIM_POOL 8u       /* staging buffers kept for reuse */

struct unim_dma_node {
	unim_node_id_t id;
};

struct unim_dma_buffer {
	unim_dma_buf_id_t id;
	unim_node_id_t node;
	uint64_t size, gaddr;
	void *mem;
	int staging; /* internal buffer of _from_mem/_to_mem */
};

struct unim_dma_transfer {
	unim_dma_transfer_id_t id;
	unim_dma_status_t status;
	unim_comp_cb_t cb;
	void *cb_arg;
	unim_dma_buffer_t *staging; /* returned to the pool when done */
	void *to_mem;               /* _to_mem: copy the staging buffer here when done */
	uint64_t to_mem_size;
	struct dmabuf_xfer xfer;    /* what the submitter writes to the device */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	pthread_cond_t pending_cv;	/* the submitter's: a transfer was queued, or resume/stop */
	int fd, stop_fd;
	pthread_t thread, submitter;
	int up, stopping, paused;
	/* the transfer list of sec. 3.1.2: IDs of DMA_PENDING transfers in submission order */
	unim_dma_transfer_id_t pending[UNIM_TRACKED];
	unsigned pending_head, pending_count;
	unim_node_id_t node, nodes;
	struct unim_dma_node node_objs[64];
	unim_dma_buffer_t *bufs[DMABUF_MAX_BUFFERS + 1];
	unim_dma_transfer_t xfers[UNIM_TRACKED];
	uint64_t seq;
	unim_dma_buffer_t *pool[UNIM_POOL];
} U = { .lock = PTHREAD_MUTEX_INITIALIZER,
	.changed = PTHREAD_COND_INITIALIZER,
	.pending_cv = PTHREAD_COND_INITIALIZER,
	.fd = -1,
	.stop_fd = -1 };

static unim_dma_transfer_t *slot(unim_dma_transfer_id_t id)
{
	return &U.xfers[(id & 0xffffffffffffull) % UNIM_TRACKED];
}

/* A finished transfer's internal buffer goes back to the pool (or is freed at cleanup); U.lock held. */
static void staging_put(unim_dma_transfer_t *t)
{
	unsigned k;

	if (!t->staging)
		return;
	for (k = 0; k < UNIM_POOL && U.pool[k]; k++)
		;
	if (k < UNIM_POOL)
		U.pool[k] = t->staging;
	else
		t->staging->staging = 2; /* freed by cleanup */
	t->staging = NULL;
}

/*
 * The submitter (sec. 3.1.2): scans the transfer list and submits every pending transfer, in the
 * order they were requested. A transfer the device refuses fails (DMA_FAILED, its callback runs).
 * At cleanup it submits what is still pending, then stops.
 */
static void *submitter_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&U.lock);
	for (;;) {
		unim_dma_transfer_id_t id;
		unim_dma_transfer_t *t;
		struct dmabuf_xfer x;
		unim_comp_cb_t cb;
		void *cb_arg;

		while (!U.stopping && (U.paused || !U.pending_count))
			pthread_cond_wait(&U.pending_cv, &U.lock);
		if (!U.pending_count)
			break; /* stopping, nothing left */
		id = U.pending[U.pending_head];
		U.pending_head = (U.pending_head + 1) % UNIM_TRACKED;
		U.pending_count--;
		t = slot(id);
		if (t->id != id || t->status != DMA_PENDING)
			continue;
		x = t->xfer;
		t->status = DMA_STARTED; /* before the write: the completion may come at once */
		pthread_cond_broadcast(&U.changed);
		pthread_mutex_unlock(&U.lock);
		if (write(U.fd, &x, sizeof(x)) == (ssize_t)sizeof(x)) {
			pthread_mutex_lock(&U.lock);
			continue;
		}
		pthread_mutex_lock(&U.lock);
		if (t->id != id || t->status != DMA_STARTED)
			continue;
		cb = t->cb;
		cb_arg = t->cb_arg;
		staging_put(t);
		pthread_mutex_unlock(&U.lock);
		if (cb)
			cb(cb_arg);
		pthread_mutex_lock(&U.lock);
		if (t->id == id)
			t->status = DMA_FAILED;
		pthread_cond_broadcast(&U.changed);
	}
	pthread_mutex_unlock(&U.lock);
	return NULL;
}

void unim_dma_submitter_pause(int paused)
{
	pthread_mutex_lock(&U.lock);
	U.paused = !!paused;
	pthread_cond_broadcast(&U.pending_cv);
	pthread_mutex_unlock(&U.lock);
}

static void *completion_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[2] = { { U.fd, POLLIN, 0 }, { U.stop_fd, POLLIN, 0 } };
		struct dmabuf_done d[64];
		ssize_t n;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		n = read(U.fd, d, sizeof(d));
		if (n <= 0)
			continue;
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(d[0]); i++) {
			unim_comp_cb_t cb = NULL;
			void *arg_ = NULL;
			int known;

			pthread_mutex_lock(&U.lock);
			unim_dma_transfer_t *t = slot(d[i].tid);

			known = t->id == d[i].tid;
			if (known) {
				if (!d[i].status && t->to_mem)
					memcpy(t->to_mem, t->staging->mem, t->to_mem_size);
				cb = t->cb;
				arg_ = t->cb_arg;
				staging_put(t);
			}
			pthread_mutex_unlock(&U.lock);
			if (!known)
				continue;
			/* the status turns final once the callback has returned, so a caller that sees
			 * COMPLETED (or returns from unim_dma_wait) knows its callback ran */
			if (cb)
				cb(arg_);
			pthread_mutex_lock(&U.lock);
			if (t->id == d[i].tid)
				t->status = d[i].status ? DMA_FAILED : DMA_COMPLETED;
			pthread_cond_broadcast(&U.changed);
			pthread_mutex_unlock(&U.lock);
		}
	}
	return NULL;
}

int unim_dma_init(unim_node_id_t node_id)
{
	struct dmabuf_info info;

	pthread_mutex_lock(&U.lock);
	if (U.up) {
		pthread_mutex_unlock(&U.lock);
		return 0;
	}
	U.fd = open(DMABUF_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (U.fd < 0) {
		pthread_mutex_unlock(&U.lock);
		errno = ENODEV; /* insmod xilinx_dma.ko and unimem_dma.ko (from /lib/modules/extra) */
		return -1;
	}
	if (ioctl(U.fd, DMABUF_IOC_INFO, &info) < 0 || info.node_id != node_id) {
		close(U.fd);
		U.fd = -1;
		pthread_mutex_unlock(&U.lock);
		errno = EINVAL;
		return -1;
	}
	U.node = info.node_id;
	U.nodes = info.node_count;
	for (unsigned i = 0; i < 64; i++)
		U.node_objs[i].id = i;
	U.stop_fd = eventfd(0, EFD_CLOEXEC);
	U.stopping = U.paused = 0;
	U.pending_head = U.pending_count = 0;
	if (U.stop_fd < 0 || pthread_create(&U.thread, NULL, completion_thread, NULL)) {
		int e = errno ? errno : EAGAIN;

		if (U.stop_fd >= 0)
			close(U.stop_fd);
		close(U.fd);
		U.fd = U.stop_fd = -1;
		pthread_mutex_unlock(&U.lock);
		errno = e;
		return -1;
	}
	if (pthread_create(&U.submitter, NULL, submitter_thread, NULL)) {
		uint64_t one = 1;
		int e = errno ? errno : EAGAIN;

		if (write(U.stop_fd, &one, sizeof(one)) != sizeof(one))
			abort();
		pthread_join(U.thread, NULL);
		close(U.stop_fd);
		close(U.fd);
		U.fd = U.stop_fd = -1;
		pthread_mutex_unlock(&U.lock);
		errno = e;
		return -1;
	}
	U.up = 1;
	pthread_mutex_unlock(&U.lock);
	return 0;
}

static void buf_release(unim_dma_buffer_t *b)
{
	munmap(b->mem, b->size);
	ioctl(U.fd, DMABUF_IOC_FREE, &b->id);
	U.bufs[b->id] = NULL;
	free(b);
}

void unim_dma_cleanup(void)
{
	uint64_t one = 1;

	pthread_mutex_lock(&U.lock);
	if (!U.up) {
		pthread_mutex_unlock(&U.lock);
		return;
	}
	U.up = 0;
	U.stopping = 1; /* the submitter hands over what is still pending, then ends */
	pthread_cond_broadcast(&U.pending_cv);
	pthread_mutex_unlock(&U.lock);
	pthread_join(U.submitter, NULL);
	if (write(U.stop_fd, &one, sizeof(one)) != sizeof(one))
		abort();
	pthread_join(U.thread, NULL);
	for (unsigned i = 1; i <= DMABUF_MAX_BUFFERS; i++)
		if (U.bufs[i])
			buf_release(U.bufs[i]);
	memset(U.pool, 0, sizeof(U.pool));
	close(U.fd); /* the driver waits for transfers still in flight, then frees everything */
	close(U.stop_fd);
	U.fd = U.stop_fd = -1;
}

static unim_dma_buffer_t *alloc_buf(uint32_t size, unim_node_id_t node, int staging)
{
	struct dmabuf_alloc a = { .node = node, .size = size };
	unim_dma_buffer_t *b;
	void *mem;

	if (!U.up) {
		errno = ENODEV;
		return NULL;
	}
	if (ioctl(U.fd, DMABUF_IOC_ALLOC, &a) < 0)
		return NULL;
	mem = mmap(NULL, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, U.fd, (off_t)(a.id * DMABUF_MMAP_STRIDE));
	b = calloc(1, sizeof(*b));
	if (mem == MAP_FAILED || !b) {
		int e = mem == MAP_FAILED ? errno : ENOMEM;

		if (mem != MAP_FAILED)
			munmap(mem, a.size);
		free(b);
		ioctl(U.fd, DMABUF_IOC_FREE, &a.id);
		errno = e;
		return NULL;
	}
	b->id = a.id;
	b->node = node;
	b->size = a.size;
	b->gaddr = a.gaddr;
	b->mem = mem;
	b->staging = staging;
	pthread_mutex_lock(&U.lock);
	U.bufs[b->id] = b;
	pthread_mutex_unlock(&U.lock);
	return b;
}

unim_dma_buffer_t *unim_alloc_buf_l(uint32_t size)
{
	return alloc_buf(size, U.node, 0);
}

unim_dma_buffer_t *unim_alloc_buf_r(uint32_t size, unim_dma_node_t node)
{
	if (!node || node->id >= U.nodes) {
		errno = EINVAL;
		return NULL;
	}
	return alloc_buf(size, node->id, 0);
}

void unim_free_buf(unim_dma_buffer_t *buf)
{
	if (!buf || !U.up || buf->staging)
		return;
	pthread_mutex_lock(&U.lock);
	if (U.bufs[buf->id] != buf) {
		pthread_mutex_unlock(&U.lock);
		return;
	}
	U.bufs[buf->id] = NULL;
	pthread_mutex_unlock(&U.lock);
	munmap(buf->mem, buf->size);
	ioctl(U.fd, DMABUF_IOC_FREE, &buf->id); /* waits for this process's transfers in flight */
	free(buf);
}

unim_dma_buffer_t *unim_get_buf(unim_dma_buf_id_t id)
{
	unim_dma_buffer_t *b = NULL;

	pthread_mutex_lock(&U.lock);
	if (U.up && id >= 1 && id <= DMABUF_MAX_BUFFERS && U.bufs[id] && !U.bufs[id]->staging)
		b = U.bufs[id];
	pthread_mutex_unlock(&U.lock);
	return b;
}

unim_dma_buf_id_t unim_get_buf_id(unim_dma_buffer_t *buf) { return buf ? buf->id : 0; }
void *unim_buf_get_memory(unim_dma_buffer_t *buf) { return buf ? buf->mem : NULL; }
uint64_t unim_buf_get_size(unim_dma_buffer_t *buf) { return buf ? buf->size : 0; }
unim_node_id_t unim_buf_get_node(unim_dma_buffer_t *buf) { return buf ? buf->node : 0; }
uint64_t unim_buf_get_gaddr(unim_dma_buffer_t *buf) { return buf ? buf->gaddr : 0; }

unim_dma_node_t unim_dma_get_node(unim_node_id_t id)
{
	return U.up && id < U.nodes ? &U.node_objs[id] : NULL;
}

/* Queue one transfer between two buffers (staging: internal buffer to give back when done). */
static unim_dma_transfer_id_t submit(unim_dma_buffer_t *src, unim_dma_buffer_t *dst, uint64_t src_off,
				     uint64_t dst_off, uint64_t size, unim_comp_cb_t cb, void *cb_arg,
				     unim_dma_buffer_t *staging, void *to_mem)
{
	unim_dma_transfer_t *t;
	unim_dma_transfer_id_t id;

	if (!U.up || !src || !dst || !size || src_off > src->size || size > src->size - src_off ||
	    dst_off > dst->size || size > dst->size - dst_off)
		return 0;
	pthread_mutex_lock(&U.lock);
	id = ((uint64_t)U.node << 48) | ((U.seq + 1) & 0xffffffffffffull);
	t = slot(id);
	/* the list holds at most UNIM_TRACKED pending transfers: their slots are not reused */
	if (t->id && t->status == DMA_PENDING) {
		pthread_mutex_unlock(&U.lock);
		errno = EAGAIN;
		return 0;
	}
	U.seq++;
	*t = (unim_dma_transfer_t){ .id = id, .status = DMA_PENDING, .cb = cb, .cb_arg = cb_arg,
				    .staging = staging, .to_mem = to_mem, .to_mem_size = size };
	t->xfer = (struct dmabuf_xfer){ .src = src->gaddr + src_off, .dst = dst->gaddr + dst_off, .size = size, .tid = id };
	U.pending[(U.pending_head + U.pending_count) % UNIM_TRACKED] = id;
	U.pending_count++;
	pthread_cond_signal(&U.pending_cv);
	pthread_mutex_unlock(&U.lock);
	return id;
}

unim_dma_transfer_id_t unim_dma_submit_transfer(unim_dma_buffer_t *src, unim_dma_buffer_t *dst, uint64_t src_off,
						uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb, void *cb_arg)
{
	return submit(src, dst, src_off, dst_off, size, comp_cb, cb_arg, NULL, NULL);
}

/* An internal local buffer of at least size bytes, from the pool or new. */
static unim_dma_buffer_t *staging_get(uint64_t size)
{
	unim_dma_buffer_t *b = NULL;

	pthread_mutex_lock(&U.lock);
	for (unsigned k = 0; k < UNIM_POOL; k++) {
		if (U.pool[k] && U.pool[k]->size >= size) {
			b = U.pool[k];
			U.pool[k] = NULL;
			break;
		}
	}
	pthread_mutex_unlock(&U.lock);
	return b ? b : size <= DMABUF_MAX_SIZE ? alloc_buf((uint32_t)size, U.node, 1) : NULL;
}

unim_dma_transfer_id_t unim_dma_submit_transfer_from_mem(void *src, unim_dma_buffer_t *dst, uint64_t src_off,
							 uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb,
							 void *cb_arg)
{
	unim_dma_buffer_t *st;
	unim_dma_transfer_id_t id;

	if (!src || !dst || !size || dst_off > dst->size || size > dst->size - dst_off || !(st = staging_get(size)))
		return 0;
	memcpy(st->mem, (const char *)src + src_off, size); /* stage 1 (sec. 3.4.4) */
	id = submit(st, dst, 0, dst_off, size, comp_cb, cb_arg, st, NULL);
	if (!id) {
		pthread_mutex_lock(&U.lock);
		st->staging = 2; /* freed at cleanup */
		pthread_mutex_unlock(&U.lock);
	}
	return id;
}

unim_dma_transfer_id_t unim_dma_submit_transfer_to_mem(unim_dma_buffer_t *src, void *dst, uint64_t src_off,
						       uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb,
						       void *cb_arg)
{
	unim_dma_buffer_t *st;
	unim_dma_transfer_id_t id;

	if (!src || !dst || !size || src_off > src->size || size > src->size - src_off || !(st = staging_get(size)))
		return 0;
	id = submit(src, st, src_off, 0, size, comp_cb, cb_arg, st, (char *)dst + dst_off);
	if (!id) {
		pthread_mutex_lock(&U.lock);
		st->staging = 2;
		pthread_mutex_unlock(&U.lock);
	}
	return id;
}

unim_dma_status_t unim_dma_status(unim_dma_transfer_id_t tID)
{
	unim_dma_status_t s = DMA_FAILED;

	pthread_mutex_lock(&U.lock);
	if (tID && slot(tID)->id == tID)
		s = slot(tID)->status;
	pthread_mutex_unlock(&U.lock);
	return s;
}

unim_dma_status_t unim_dma_wait(unim_dma_transfer_id_t tID, int timeout_ms)
{
	struct timespec dl;
	unim_dma_status_t s;

	clock_gettime(CLOCK_REALTIME, &dl);
	if (timeout_ms >= 0) {
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&U.lock);
	for (;;) {
		s = tID && slot(tID)->id == tID ? slot(tID)->status : DMA_FAILED;
		if (s == DMA_COMPLETED || s == DMA_FAILED)
			break;
		if (timeout_ms < 0)
			pthread_cond_wait(&U.changed, &U.lock);
		else if (pthread_cond_timedwait(&U.changed, &U.lock, &dl) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&U.lock);
	return s;
}
