// SPDX-License-Identifier: GPL-2.0
/*
 * The Unimem mailbox driver (ExaNoDe D3.6 sec. 3.2), built on the vmbox and packetizer: 64-bit
 * messages between nodes, classified by their 4-bit opcode, delivered to kernel callbacks
 * (interrupt context) or to user processes (read, poll, a signal or an eventfd).
 * Interface: rackemu/unimem_mailbox.h; documentation: docs/mailbox.md.
 *
 * Transport: every node receives in one vmbox FIFO and sends from the packetizer interface with
 * the same number: `mailbox_if` (module parameter). By default (MAILBOX_IF) that is the devices'
 * kernel interface (KIF, UNIMEM_KIF): a FIFO and a packetizer interface outside 0..63, so all of
 * 1..63 stay with /dev/unimem users, and a KIF takes packets from other KIFs only (the hardware
 * refuses a user PIF's). On devices without the KIF the default is interface 63; 1..63 choose a
 * user interface, 0 turns the mailbox off. A message travels as one 256-bit packet whose word 1
 * is the message. The packetizer stamps the kernel's PID (UNIMEM_KERNEL_PID: node, MIF field 63,
 * tgid 0, tid 0), so packets a user process aims at a mailbox on a user interface are recognised
 * and dropped.
 */
#include <linux/delay.h>
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/kfifo.h>
#include <linux/cred.h>
#include <linux/ktime.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "rackemu/unimem_regs.h"
#include "rackemu/unimem_mailbox.h"
#include "rackemu/unimem_mailbox_action.h"
#include "rackemu/unimem_uapi.h"
#include "unimem_internal.h"

#define MBOX_SEND_TIMEOUT_US 200000

struct mbox_file;

/* The owner of one opcode: a kernel callback, or a local file with its notification. */
struct mbox_owner {
	mailbox_callback cb;		/* kernel owner */
	mailbox_sender_callback scb;	/* kernel owner that wants the sender */
	char desc[32];
	struct mbox_file *file;		/* user owner */
	char action;			/* 'r', 's' or 'e' */
	int sig;
	struct pid *pid;		/* 's': the registering process */
	struct eventfd_ctx *efd;	/* 'e' */
};

struct mbox_node_dev {
	struct miscdevice misc;
	char name[24], nodename[32];
	unsigned int node;
	bool registered;
};

struct mbox_file {
	struct mbox_node_dev *nd;
	DECLARE_KFIFO(fifo, u64, MAILBOX_FILE_QUEUE);	/* guarded by mbox.lock */
	wait_queue_head_t wq;
	u64 dropped;
};

static struct {
	spinlock_t lock;		/* owners, file queues, counters */
	spinlock_t tx_lock;		/* the sending PIF */
	struct mbox_owner owners[MAILBOX_OPCODES];
	struct mbox_node_dev *devs;
	unsigned int ndevs;
	unsigned int ifno;		/* the mailbox's interface, UNIMEM_KIF or 1..63, 0 = off; changed under tx_lock */
	bool up;			/* ifno is set up: messages can be sent (under tx_lock) */
	bool kif_ready;			/* the packetizer's KIF sends with the kernel's PID (under tx_lock) */
	u64 sent, send_errors, received, delivered_kernel, delivered_user, dropped, unclaimed, forged;
} mbox = {
	.lock = __SPIN_LOCK_UNLOCKED(mbox.lock),
	.tx_lock = __SPIN_LOCK_UNLOCKED(mbox.tx_lock),
};

/* ---- sending ---- */

unsigned int unimem_mbox_if(void)
{
	return READ_ONCE(mbox.ifno);
}

/*
 * A FIFO's page in the vmbox (as a global address's local part): 0..63, or UNIMEM_KIF.
 */
static u64 vmbox_page(unsigned int mif)
{
	return mif == UNIMEM_KIF ? VMBOX_KIF_OFFSET : VMBOX_MIF_OFFSET(mif);
}

static void clear_request(struct unimem *um, unsigned int pif_no)
{
	if (pif_no == UNIMEM_KIF)
		unimem_tif_write(um, PKTZ_TIF_KIF_CLR_REQ, 1);
	else
		unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(pif_no));
}

/* One packet from PIF `pif_no` (or the KIF), spinning until the destination answered or 200 ms
 * passed. `mif`: the destination FIFO, 0..63 or UNIMEM_KIF (from the KIF only).
 */
static int pif_send(struct unimem *um, unsigned int pif_no, u32 node, u32 mif, u64 w0, u64 w1, u64 w2, u64 w3)
{
	void __iomem *pif = um->pktz + (pif_no == UNIMEM_KIF ? PKTZ_KIF_OFFSET : PKTZ_PIF_OFFSET(pif_no));
	ktime_t deadline;
	u64 st;

	writeq(w0, pif + PKTZ_PIF_PAYLOAD0);
	writeq(w1, pif + PKTZ_PIF_PAYLOAD0 + 8);
	writeq(w2, pif + PKTZ_PIF_PAYLOAD1);
	writeq(w3, pif + PKTZ_PIF_PAYLOAD1 + 8);
	/* the third register sends the packet */
	writeq(UNIMEM_GADDR(node, um->vmbox_phys + vmbox_page(mif)), pif + PKTZ_PIF_DEST);
	deadline = ktime_add_us(ktime_get(), MBOX_SEND_TIMEOUT_US);
	while ((st = readq(pif + PKTZ_PIF_STATUS)) & PKTZ_ST_PEND) {
		if (ktime_after(ktime_get(), deadline))
			break;
		udelay(1);
	}
	if (st & PKTZ_ST_PEND) {
		clear_request(um, pif_no);
		return -ETIMEDOUT;
	}
	if (st & PKTZ_ST_ACK)
		return 0;
	if (st & PKTZ_ST_FABRIC_ERR)
		return -EHOSTUNREACH;
	if (st & PKTZ_ST_NACK)
		return -EBUSY;
	return -EINVAL; /* ILLEGAL: cannot happen with our own BASE_DEST */
}

/*
 * The mailbox is off and the devices have no KIF: send from a free PIF, programmed with the
 * kernel's PID for this one packet.
 * Process context. A trylock, because the driver's removal holds um->lock while it waits for
 * the exit-notice work, the only caller: -EAGAIN then, and when every PIF is taken.
 */
static int borrowed_send(struct unimem *um, u32 node, u32 mif, u64 w0, u64 w1, u64 w2, u64 w3)
{
	unsigned int pif;
	int ret;

	if (in_interrupt() || irqs_disabled())
		return -ENODEV;
	if (!mutex_trylock(&um->lock))
		return -EAGAIN;
	if (!um->registered) {
		mutex_unlock(&um->lock);
		return -ENODEV;
	}
	pif = find_next_zero_bit(um->pif_used, UNIMEM_IF_COUNT, 1);
	if (pif >= UNIMEM_IF_COUNT) {
		mutex_unlock(&um->lock);
		return -EAGAIN;
	}
	set_bit(pif, um->pif_used);
	unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(pif));
	unimem_tif_write(um, PKTZ_TIF_PIDT(pif), UNIMEM_KERNEL_PID(um->node_id));
	um->pid_conf |= BIT_ULL(pif);
	unimem_tif_write(um, PKTZ_TIF_PID_CONF, um->pid_conf);
	ret = pif_send(um, pif, node, mif, w0, w1, w2, w3);
	um->pid_conf &= ~BIT_ULL(pif);
	unimem_tif_write(um, PKTZ_TIF_PID_CONF, um->pid_conf);
	unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(pif));
	clear_bit(pif, um->pif_used);
	mutex_unlock(&um->lock);
	return ret;
}

/* mif == MBOX_DEST: the destination's mailbox FIFO (same number as ours); never borrows */
#define MBOX_DEST (UNIMEM_KIF + 1)

static int kernel_send(struct unimem *um, u32 node, u32 mif, u64 w0, u64 w1, u64 w2, u64 w3)
{
	unsigned long flags;
	int ret;

	if (node >= um->node_count || mif > MBOX_DEST)
		return -EINVAL;
	spin_lock_irqsave(&mbox.tx_lock, flags);
	if (mbox.up) {
		ret = pif_send(um, mbox.ifno, node, mif == MBOX_DEST ? mbox.ifno : mif, w0, w1, w2, w3);
		spin_unlock_irqrestore(&mbox.tx_lock, flags);
		return ret;
	}
	/* the mailbox is off: the kernel still has its KIF (registered: KIF_PIDT and KIF_CONF set) */
	if (mif != MBOX_DEST && mbox.kif_ready) {
		ret = pif_send(um, UNIMEM_KIF, node, mif, w0, w1, w2, w3);
		spin_unlock_irqrestore(&mbox.tx_lock, flags);
		return ret;
	}
	spin_unlock_irqrestore(&mbox.tx_lock, flags);
	if (mif == MBOX_DEST)
		return -ENODEV; /* the mailbox is off (mailbox_if=0) or not bound */
	return borrowed_send(um, node, mif, w0, w1, w2, w3);
}

int unimem_kernel_send(struct unimem *um, u32 node, u32 mif, u64 w0, u64 w1, u64 w2, u64 w3)
{
	return mif < UNIMEM_IF_COUNT ? kernel_send(um, node, mif, w0, w1, w2, w3) : -EINVAL;
}

/* origin: word 2 of the packet, MAILBOX_ORIGIN_KERNEL or MAILBOX_ORIGIN_USER | uid */
static int mbox_send(int rnode, u64 val, u64 origin)
{
	struct unimem *um = &unimem_dev;
	unsigned long flags;
	int ret;

	if (!READ_ONCE(mbox.up))
		return -ENODEV; /* not bound, or mailbox_if=0 */
	if (rnode < 0 || rnode >= (int)um->node_count)
		return -EINVAL;
	ret = kernel_send(um, rnode, MBOX_DEST, (u64)MAILBOX_PKT_MAGIC << 48, val, origin, 0);
	spin_lock_irqsave(&mbox.lock, flags);
	if (ret)
		mbox.send_errors++;
	else
		mbox.sent++;
	spin_unlock_irqrestore(&mbox.lock, flags);
	return ret;
}

int mailbox_send_message(int rnode, unsigned long long val)
{
	return mbox_send(rnode, val, MAILBOX_ORIGIN_KERNEL);
}
EXPORT_SYMBOL(mailbox_send_message);

/* ---- kernel registrations ---- */

static int mbox_register(unsigned int opcode, mailbox_callback cb, mailbox_sender_callback scb, char *description)
{
	struct mbox_owner *o;
	unsigned long flags;
	int ret = 0;

	if (opcode >= MAILBOX_OPCODES || (!cb && !scb))
		return -EINVAL;
	spin_lock_irqsave(&mbox.lock, flags);
	o = &mbox.owners[opcode];
	if (o->cb || o->scb || o->file) {
		ret = -EBUSY;
	} else {
		o->cb = cb;
		o->scb = scb;
		strscpy(o->desc, description ? description : "kernel", sizeof(o->desc));
	}
	spin_unlock_irqrestore(&mbox.lock, flags);
	return ret;
}

int mailbox_register_callback(unsigned int opcode, mailbox_callback cb, char *description)
{
	return cb ? mbox_register(opcode, cb, NULL, description) : -EINVAL;
}
EXPORT_SYMBOL(mailbox_register_callback);

int mailbox_register_sender_callback(unsigned int opcode, mailbox_sender_callback cb, char *description)
{
	return cb ? mbox_register(opcode, NULL, cb, description) : -EINVAL;
}
EXPORT_SYMBOL(mailbox_register_sender_callback);

int mailbox_unregister_callback(unsigned int opcode)
{
	unsigned long flags;
	int ret = 0;

	if (opcode >= MAILBOX_OPCODES)
		return -EINVAL;
	spin_lock_irqsave(&mbox.lock, flags);
	if (!mbox.owners[opcode].cb && !mbox.owners[opcode].scb)
		ret = -ENOENT;
	else
		memset(&mbox.owners[opcode], 0, sizeof(mbox.owners[opcode]));
	spin_unlock_irqrestore(&mbox.lock, flags);
	return ret;
}
EXPORT_SYMBOL(mailbox_unregister_callback);

/* ---- receiving (hard interrupt context) ---- */

static void mbox_dispatch(u64 msg, const struct mailbox_sender *from)
{
	struct mbox_owner *o = &mbox.owners[MAILBOX_OPCODE(msg)];
	mailbox_callback cb = NULL;
	mailbox_sender_callback scb = NULL;

	spin_lock(&mbox.lock);
	mbox.received++;
	if (o->cb || o->scb) {
		cb = o->cb;
		scb = o->scb;
		mbox.delivered_kernel++;
	} else if (o->file) {
		if (kfifo_put(&o->file->fifo, msg)) {
			mbox.delivered_user++;
			wake_up_interruptible(&o->file->wq);
			if (o->action == 's' && o->pid)
				kill_pid(o->pid, o->sig, 1);
			else if (o->action == 'e' && o->efd)
				eventfd_signal(o->efd, 1);
		} else {
			o->file->dropped++;
			mbox.dropped++;
		}
	} else {
		mbox.unclaimed++;
	}
	spin_unlock(&mbox.lock);
	/* outside the lock: a callback may send or (un)register */
	if (cb)
		cb(msg);
	else if (scb)
		scb(msg, from);
}

void unimem_mbox_irq(struct unimem *um)
{
	unsigned int ifno = READ_ONCE(mbox.ifno);
	void __iomem *mif = um->vmbox + vmbox_page(ifno);
	u64 w[UNIMEM_PACKET_WORDS];
	struct mailbox_sender from;
	int i;

	if (!ifno)
		return;
	while (readq(mif + VMBOX_MIF_COUNT) >= UNIMEM_PACKET_WORDS) {
		for (i = 0; i < UNIMEM_PACKET_WORDS; i++)
			w[i] = readq(mif + VMBOX_MIF_DATA);
		/* only a node's kernel (tgid = tid = 0, MIF field 63) may post here (into the KIF the
		 * hardware takes other KIFs' packets only: this is the check of a user-interface mailbox)
		 */
		if ((w[0] >> 48) != MAILBOX_PKT_MAGIC ||
		    UNIMEM_PACKET_PID(w[0]) != UNIMEM_KERNEL_PID(UNIMEM_PID_NODE(UNIMEM_PACKET_PID(w[0])))) {
			spin_lock(&mbox.lock);
			mbox.forged++;
			spin_unlock(&mbox.lock);
			continue;
		}
		/* the node from the hardware-stamped PID; the origin word from that node's kernel */
		from.node = UNIMEM_PID_NODE(UNIMEM_PACKET_PID(w[0]));
		from.user = !!(w[2] & MAILBOX_ORIGIN_USER);
		from.uid = (u32)w[2];
		mbox_dispatch(w[1], &from);
	}
	unimem_irq_mask(um, ifno, true);
}

/* ---- user interface: /dev/unimem/mailboxX ---- */

static bool mbox_is_local(struct mbox_file *f)
{
	return f->nd->node == unimem_dev.node_id;
}

static int mbox_open(struct inode *inode, struct file *file)
{
	struct miscdevice *misc = file->private_data;
	struct mbox_file *f;

	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	f->nd = container_of(misc, struct mbox_node_dev, misc);
	INIT_KFIFO(f->fifo);
	init_waitqueue_head(&f->wq);
	file->private_data = f;
	return nonseekable_open(inode, file);
}

/* Called with mbox.lock held; returns what must be released outside it. */
static void mbox_owner_clear(struct mbox_owner *o, struct pid **pid, struct eventfd_ctx **efd)
{
	*pid = o->pid;
	*efd = o->efd;
	memset(o, 0, sizeof(*o));
}

static int mbox_release(struct inode *inode, struct file *file)
{
	struct mbox_file *f = file->private_data;
	struct pid *pids[MAILBOX_OPCODES] = { };
	struct eventfd_ctx *efds[MAILBOX_OPCODES] = { };
	unsigned long flags;
	unsigned int i;

	spin_lock_irqsave(&mbox.lock, flags);
	for (i = 0; i < MAILBOX_OPCODES; i++)
		if (mbox.owners[i].file == f)
			mbox_owner_clear(&mbox.owners[i], &pids[i], &efds[i]);
	spin_unlock_irqrestore(&mbox.lock, flags);
	for (i = 0; i < MAILBOX_OPCODES; i++) {
		put_pid(pids[i]);
		if (efds[i])
			eventfd_ctx_put(efds[i]);
	}
	kfree(f);
	return 0;
}

static_assert(sizeof(struct mailbox_action_t) == MAILBOX_ACTION_SIZE, "the seed's record, as user space writes it");

static ssize_t mbox_action(struct mbox_file *f, const struct mailbox_action_t *a)
{
	struct mbox_owner *o;
	struct eventfd_ctx *efd = NULL, *old_efd = NULL;
	struct pid *pid = NULL, *old_pid = NULL;
	unsigned long flags;
	ssize_t ret = sizeof(*a);

	if (!mbox_is_local(f))
		return -EINVAL; /* registrations go to this node's own mailbox device */
	if (a->opcode >= MAILBOX_OPCODES)
		return -EINVAL;
	switch (a->action) {
	case 'r':
	case 'u':
		break;
	case 's':
		if (a->val < 1 || a->val > _NSIG || a->val == SIGKILL || a->val == SIGSTOP)
			return -EINVAL;
		pid = get_task_pid(current, PIDTYPE_TGID);
		break;
	case 'e':
		efd = eventfd_ctx_fdget(a->val);
		if (IS_ERR(efd))
			return PTR_ERR(efd);
		break;
	default:
		return -EINVAL;
	}
	spin_lock_irqsave(&mbox.lock, flags);
	o = &mbox.owners[a->opcode];
	if (a->action == 'u') {
		if (o->file != f)
			ret = o->file || o->cb || o->scb ? -EPERM : -ENOENT;
		else
			mbox_owner_clear(o, &old_pid, &old_efd);
	} else if (o->cb || o->scb || (o->file && o->file != f)) {
		ret = -EBUSY;
	} else {
		/* (re-)registration by the owner replaces its notification */
		mbox_owner_clear(o, &old_pid, &old_efd);
		o->file = f;
		o->action = a->action;
		o->sig = a->val;
		o->pid = pid;
		o->efd = efd;
		pid = NULL;
		efd = NULL;
	}
	spin_unlock_irqrestore(&mbox.lock, flags);
	put_pid(pid);
	put_pid(old_pid);
	if (efd)
		eventfd_ctx_put(efd);
	if (old_efd)
		eventfd_ctx_put(old_efd);
	return ret;
}

static ssize_t mbox_write(struct file *file, const char __user *buf, size_t len, loff_t *ppos)
{
	struct mbox_file *f = file->private_data;
	struct mailbox_action_t a;
	u64 msg;
	int ret;

	if (len == sizeof(msg)) {
		if (copy_from_user(&msg, buf, sizeof(msg)))
			return -EFAULT;
		/* the receiver learns that a user process, and which, wrote this message */
		ret = mbox_send(f->nd->node, msg,
				MAILBOX_ORIGIN_USER | from_kuid_munged(&init_user_ns, current_uid()));
		return ret ? ret : sizeof(msg);
	}
	if (len == sizeof(a)) {
		if (copy_from_user(&a, buf, sizeof(a)))
			return -EFAULT;
		return mbox_action(f, &a);
	}
	return -EINVAL;
}

static bool mbox_has_message(struct mbox_file *f)
{
	unsigned long flags;
	bool ret;

	spin_lock_irqsave(&mbox.lock, flags);
	ret = !kfifo_is_empty(&f->fifo);
	spin_unlock_irqrestore(&mbox.lock, flags);
	return ret;
}

static ssize_t mbox_read(struct file *file, char __user *buf, size_t len, loff_t *ppos)
{
	struct mbox_file *f = file->private_data;
	size_t done = 0;
	unsigned long flags;
	u64 msg;
	int ret;

	if (!mbox_is_local(f))
		return -EINVAL; /* messages are read from this node's own mailbox device */
	if (len < sizeof(msg))
		return -EINVAL;
	for (;;) {
		if (mbox_has_message(f))
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(f->wq, mbox_has_message(f));
		if (ret)
			return ret;
	}
	while (done + sizeof(msg) <= len) {
		spin_lock_irqsave(&mbox.lock, flags);
		ret = kfifo_get(&f->fifo, &msg);
		spin_unlock_irqrestore(&mbox.lock, flags);
		if (!ret)
			break;
		if (copy_to_user(buf + done, &msg, sizeof(msg)))
			return done ? done : -EFAULT; /* Caveat: that message is lost */
		done += sizeof(msg);
	}
	return done;
}

static __poll_t mbox_poll(struct file *file, poll_table *wait)
{
	struct mbox_file *f = file->private_data;
	__poll_t mask = EPOLLOUT | EPOLLWRNORM;

	poll_wait(file, &f->wq, wait);
	if (mbox_is_local(f) && mbox_has_message(f))
		mask |= EPOLLIN | EPOLLRDNORM;
	return mask;
}

static const struct file_operations mbox_fops = {
	.owner = THIS_MODULE,
	.open = mbox_open,
	.release = mbox_release,
	.read = mbox_read,
	.write = mbox_write,
	.poll = mbox_poll,
	.llseek = no_llseek,
};

/* A = 0 .. Z = 25, AA = 26, AB = 27, ... */
static void mbox_letters(unsigned int node, char *out)
{
	if (node < 26) {
		out[0] = 'A' + node;
		out[1] = 0;
	} else {
		out[0] = 'A' + node / 26 - 1;
		out[1] = 'A' + node % 26;
		out[2] = 0;
	}
}

/* Stop the transport and give its interface back; um->lock held. */
static void mbox_detach(struct unimem *um)
{
	unsigned int old = mbox.ifno;
	unsigned long flags;

	/* sends hold tx_lock for their whole packet: none is in flight after this */
	spin_lock_irqsave(&mbox.tx_lock, flags);
	WRITE_ONCE(mbox.up, false);
	WRITE_ONCE(mbox.ifno, 0);
	spin_unlock_irqrestore(&mbox.tx_lock, flags);
	if (!old)
		return;
	if (old == UNIMEM_KIF) {
		/* the KIF refuses other kernels' messages again; the packetizer's KIF stays the kernel's */
		if (um->vmbox) {
			unimem_kif_enable(um, false);
			unimem_irq_mask(um, UNIMEM_KIF, false);
			synchronize_irq(um->vmbox_irq);
			unimem_irq_mask(um, UNIMEM_KIF, false);
			writeq(1, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_FLUSH);
		}
		return;
	}
	if (um->vmbox) {
		unimem_irq_mask(um, old, false);
		synchronize_irq(um->vmbox_irq); /* a handler still draining the old FIFO is done */
		unimem_irq_mask(um, old, false); /* which re-enabled it on its way out */
		writeq(BIT_ULL(old), um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_FLUSH);
	}
	if (um->pktz) {
		um->pid_conf &= ~BIT_ULL(old);
		unimem_tif_write(um, PKTZ_TIF_PID_CONF, um->pid_conf);
		unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(old));
	}
	clear_bit(old, um->mif_used);
	clear_bit(old, um->pif_used);
}

int unimem_mbox_attach(struct unimem *um, unsigned int ifno)
{
	unsigned long flags;

	if (ifno > UNIMEM_KIF)
		return -EINVAL;
	if (ifno == UNIMEM_KIF && !unimem_has_kif(um))
		ifno = MAILBOX_IF_NO_KIF; /* devices without the kernel interface */
	spin_lock_irqsave(&mbox.tx_lock, flags);
	mbox.kif_ready = unimem_has_kif(um); /* unimem_publish set up the KIF before this */
	spin_unlock_irqrestore(&mbox.tx_lock, flags);
	if (ifno == mbox.ifno)
		return 0;
	if (ifno && ifno != UNIMEM_KIF && (test_bit(ifno, um->mif_used) || test_bit(ifno, um->pif_used)))
		return -EBUSY; /* a /dev/unimem file (or the atomic service, for 0) holds it */
	mbox_detach(um);
	if (!ifno)
		return 0;
	if (ifno == UNIMEM_KIF) {
		/* the packetizer's KIF was set up with the kernel's PID when the devices were bound */
		writeq(1, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_FLUSH);
		spin_lock_irqsave(&mbox.tx_lock, flags);
		WRITE_ONCE(mbox.ifno, ifno);
		WRITE_ONCE(mbox.up, true);
		spin_unlock_irqrestore(&mbox.tx_lock, flags);
		unimem_kif_enable(um, true);
		unimem_irq_mask(um, UNIMEM_KIF, true);
		return 0;
	}
	set_bit(ifno, um->mif_used);
	set_bit(ifno, um->pif_used);
	/* the kernel's sending PIF: PID = (node, MIF field 63, tgid 0, tid 0) */
	unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(ifno));
	unimem_tif_write(um, PKTZ_TIF_PIDT(ifno), UNIMEM_KERNEL_PID(um->node_id));
	um->pid_conf |= BIT_ULL(ifno);
	unimem_tif_write(um, PKTZ_TIF_PID_CONF, um->pid_conf);
	writeq(BIT_ULL(ifno), um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_FLUSH);
	spin_lock_irqsave(&mbox.tx_lock, flags);
	WRITE_ONCE(mbox.ifno, ifno);
	WRITE_ONCE(mbox.up, true);
	spin_unlock_irqrestore(&mbox.tx_lock, flags);
	unimem_irq_mask(um, ifno, true);
	return 0;
}

int unimem_mbox_publish(struct unimem *um, unsigned int ifno)
{
	unsigned int i;
	char letters[4];
	int ret;

	ret = unimem_mbox_attach(um, ifno);
	if (ret)
		return ret;
	mbox.devs = kcalloc(um->node_count, sizeof(*mbox.devs), GFP_KERNEL);
	if (!mbox.devs) {
		mbox_detach(um);
		return -ENOMEM;
	}
	mbox.ndevs = um->node_count;
	for (i = 0; i < mbox.ndevs; i++) {
		struct mbox_node_dev *nd = &mbox.devs[i];

		mbox_letters(i, letters);
		snprintf(nd->name, sizeof(nd->name), "unimem_mailbox%s", letters);
		snprintf(nd->nodename, sizeof(nd->nodename), "Unimem/mailbox%s", letters);
		nd->node = i;
		nd->misc.minor = MISC_DYNAMIC_MINOR;
		nd->misc.name = nd->name;
		nd->misc.nodename = nd->nodename;
		nd->misc.fops = &mbox_fops;
		nd->misc.mode = 0666;
		ret = misc_register(&nd->misc);
		if (ret) {
			dev_err(um->vmbox_dev, "cannot register /dev/%s: %d\n", nd->nodename, ret);
			unimem_mbox_unpublish(um);
			return ret;
		}
		nd->registered = true;
	}
	return 0;
}

void unimem_mbox_unpublish(struct unimem *um)
{
	unsigned long flags;
	unsigned int i;

	mbox_detach(um);
	spin_lock_irqsave(&mbox.tx_lock, flags);
	mbox.kif_ready = false; /* the caller clears KIF_CONF next */
	spin_unlock_irqrestore(&mbox.tx_lock, flags);
	for (i = 0; i < mbox.ndevs; i++)
		if (mbox.devs[i].registered)
			misc_deregister(&mbox.devs[i].misc);
	kfree(mbox.devs);
	mbox.devs = NULL;
	mbox.ndevs = 0;
}

const char *unimem_mbox_where(char *buf, size_t len)
{
	unsigned int ifno = unimem_mbox_if();

	if (ifno == UNIMEM_KIF)
		strscpy(buf, "kif", len);
	else if (ifno)
		snprintf(buf, len, "%u", ifno);
	else
		strscpy(buf, "off", len);
	return buf;
}

ssize_t unimem_mbox_show(char *buf)
{
	unsigned long flags;
	u64 c[8];
	u16 kernel = 0, user = 0;
	unsigned int i;
	char where[8];

	unimem_mbox_where(where, sizeof(where));

	spin_lock_irqsave(&mbox.lock, flags);
	c[0] = mbox.sent;
	c[1] = mbox.send_errors;
	c[2] = mbox.received;
	c[3] = mbox.delivered_kernel;
	c[4] = mbox.delivered_user;
	c[5] = mbox.dropped;
	c[6] = mbox.unclaimed;
	c[7] = mbox.forged;
	for (i = 0; i < MAILBOX_OPCODES; i++) {
		if (mbox.owners[i].cb || mbox.owners[i].scb)
			kernel |= BIT(i);
		if (mbox.owners[i].file)
			user |= BIT(i);
	}
	spin_unlock_irqrestore(&mbox.lock, flags);
	return sysfs_emit(buf,
			  "sent=%llu send_errors=%llu received=%llu delivered_kernel=%llu delivered_user=%llu dropped=%llu unclaimed=%llu forged=%llu kernel_opcodes=0x%04x user_opcodes=0x%04x interface=%s\n",
			  c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], kernel, user, where);
}
