// SPDX-License-Identifier: GPL-2.0
/*
 * unimem: Linux driver for rackemu's Unimem virtualized mailbox and packetizer
 * (ExaNoDe D3.6 sec. 2.2.3, 5.1, 5.2; register layout in rackemu/unimem_regs.h).
 *
 * The driver owns both devices and keeps the packetizer's trust interface (TIF) to itself:
 * it programs BASE_DEST, one PIDT entry per handed-out PIF (PID = node, MIF, tgid, tid: see
 * UNIMEM_PID in rackemu/unimem_uapi.h) and the PID_CONF bits. It is the GSAS atomicity driver
 * (ExaNoDe D3.6 sec. 2.2.4): each open of /dev/unimem gets one mailbox interface (MIF) and one
 * packetizer interface (PIF) from 1..63 (0 is the atomic service's; the mailbox driver uses the
 * devices' kernel interface, KIF, by default, or holds interface `mailbox_if` if set to 1..63),
 * and only the opening process may map exactly those two pages (never inherited by fork
 * children), bind, wait or read. Arrival interrupts wake readers, pollers and UNIMEM_IOC_WAIT.
 */
#include <linux/bitmap.h>
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/of.h>
#include <linux/platform_device.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "rackemu/unimem_regs.h"
#include "rackemu/unimem_uapi.h"
#include "rackemu/unimem_mailbox.h"
#include "rackemu/gsas_proto.h"
#include "unimem_internal.h"

/* Interfaces an unprivileged user may hold at once (all its processes together). */
static unsigned int max_per_uid = 16;
module_param(max_per_uid, uint, 0644);
MODULE_PARM_DESC(max_per_uid, "interfaces one unprivileged user may hold at once (default 16)");
/* Send GSAS exit notices (tests that count packets exactly turn it off for a while; the notices
 * of processes that exit meanwhile are sent when it is turned on again).
 */
static bool exit_notify = true;
/*
 * The mailbox driver's interface (mailbox.c): 64 = the kernel interface (KIF) by default, which
 * leaves all 63 interfaces 1..63 to /dev/unimem users (ExaNoDe D3.6 sec. 2.2.3; on devices without
 * the KIF it means 63); any of 1..63 takes that user interface; 0 = mailbox off (the mailbox API
 * answers -ENODEV). Writable at run time: the mailbox moves (EBUSY if a file holds the new
 * interface). Every node must use the same value.
 */
static unsigned int mailbox_if = MAILBOX_IF;
static int mailbox_if_set(const char *val, const struct kernel_param *kp)
{
	struct unimem *um = &unimem_dev;
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v > UNIMEM_KIF)
		return -EINVAL;
	mutex_lock(&um->lock);
	if (um->registered)
		ret = unimem_mbox_attach(um, v);
	if (!ret)
		mailbox_if = v;
	mutex_unlock(&um->lock);
	return ret;
}
static const struct kernel_param_ops mailbox_if_ops = {
	.set = mailbox_if_set,
	.get = param_get_uint,
};
module_param_cb(mailbox_if, &mailbox_if_ops, &mailbox_if, 0644);
MODULE_PARM_DESC(mailbox_if, "the mailbox driver's interface: 64 = the kernel interface, KIF (default; 63 on devices without it), 1..63 a user interface, 0 = no mailbox");
static unsigned long refused_uid_cap, exit_notices;
module_param(refused_uid_cap, ulong, 0444);
module_param(exit_notices, ulong, 0444);

struct unimem_file {
	struct unimem *um;
	int mif, pif;
	bool mapped;
	bool priv;		/* opened with CAP_SYS_ADMIN: may hold interfaces 1..8 */
	kuid_t uid;		/* the opener's real uid: max_per_uid */
	struct list_head node;	/* in unimem_files, under um->lock */
	struct pid *owner;	/* the process that opened the file */
	u32 tgid, tid;		/* the opener's ids as the PIDT carries them */
};
static LIST_HEAD(unimem_files);

/*
 * Processes that opened /dev/unimem, watched until they exit: then every node's atomic service
 * (MIF 0) gets a GSAS_OP_EXITED notice from this kernel's PIF (docs/gsas.md), so it frees what
 * the process allocated. A struct pid reference cannot be confused with a later process that
 * reuses the number.
 */
struct unimem_proc {
	struct list_head node;
	struct pid *pid;
	u32 tgid;
	struct wait_queue_entry wait; /* on pid->wait_pidfd: woken when the process has exited */
};
static LIST_HEAD(unimem_procs);
static DEFINE_MUTEX(unimem_procs_lock);
/*
 * The notices go out this long after an exit (a request the process sent just before it died is
 * delivered by then); a round that found no free PIF is retried after UNIMEM_EXIT_RETRY_MS.
 */
#define UNIMEM_EXIT_GRACE_MS 50
#define UNIMEM_EXIT_RETRY_MS 250
static bool unimem_announce_boot = true; /* tell every service this node's earlier processes are gone */
static void unimem_exit_fn(struct work_struct *w);
static DECLARE_DELAYED_WORK(unimem_exit_work, unimem_exit_fn);

/* Turning exit_notify on sends what was held back. */
static int exit_notify_set(const char *val, const struct kernel_param *kp)
{
	int ret = param_set_bool(val, kp);

	if (!ret && READ_ONCE(exit_notify) && READ_ONCE(unimem_dev.registered))
		schedule_delayed_work(&unimem_exit_work, 0);
	return ret;
}

static const struct kernel_param_ops exit_notify_ops = {
	.set = exit_notify_set,
	.get = param_get_bool,
};
module_param_cb(exit_notify, &exit_notify_ops, &exit_notify, 0644);
MODULE_PARM_DESC(exit_notify, "tell the atomic services when a process exits (default on)");

/*
 * The exit of a watched process wakes its pid's pidfd waiters (do_notify_pidfd, with
 * tasklist_lock held and interrupts off): queue the round, nothing more. Event driven, so an
 * idle node has no timer running for the processes it watches.
 */
static int unimem_proc_exited(struct wait_queue_entry *wait, unsigned int mode, int sync, void *key)
{
	if (READ_ONCE(unimem_dev.registered)) /* unbound: the next publish runs a round */
		schedule_delayed_work(&unimem_exit_work, msecs_to_jiffies(UNIMEM_EXIT_GRACE_MS));
	return 0;
}

static void unimem_proc_free(struct unimem_proc *p)
{
	remove_wait_queue(&p->pid->wait_pidfd, &p->wait);
	put_pid(p->pid);
	kfree(p);
}

/* Every thread of the process has exited (a zombie waiting for its parent counts as gone). */
static bool unimem_proc_gone(struct pid *pid)
{
	struct task_struct *t;
	bool gone;

	rcu_read_lock();
	t = pid_task(pid, PIDTYPE_TGID);
	gone = !t || atomic_read(&t->signal->live) == 0;
	rcu_read_unlock();
	return gone;
}

static void unimem_exit_fn(struct work_struct *w)
{
	struct unimem *um = &unimem_dev;
	struct unimem_proc *p, *tmp;
	LIST_HEAD(gone);
	bool retry = false;
	u32 n;

	if (!READ_ONCE(exit_notify))
		return; /* exit_notify_set runs the round when it is turned on again */
	if (xchg(&unimem_announce_boot, false)) {
		/* tgid 0: every process of this node (it (re)started: earlier ones are gone) */
		for (n = 0; n < um->node_count; n++)
			if (unimem_kernel_send(um, n, UNIMEM_IF_SERVICE, GSAS_W0(GSAS_OP_EXITED, 0), 0, 0, 0) == -EAGAIN)
				retry = true;
		if (retry)
			WRITE_ONCE(unimem_announce_boot, true);
	}
	mutex_lock(&unimem_procs_lock);
	list_for_each_entry_safe(p, tmp, &unimem_procs, node)
		if (unimem_proc_gone(p->pid))
			list_move(&p->node, &gone);
	mutex_unlock(&unimem_procs_lock);
	list_for_each_entry_safe(p, tmp, &gone, node) {
		bool again = false;

		/* -EAGAIN: the mailbox is off and no PIF was free to borrow; try again next round */
		for (n = 0; n < um->node_count; n++)
			if (unimem_kernel_send(um, n, UNIMEM_IF_SERVICE, GSAS_W0(GSAS_OP_EXITED, 0), p->tgid, 0, 0) == -EAGAIN)
				again = true;
		if (again) {
			retry = true;
			mutex_lock(&unimem_procs_lock);
			list_move(&p->node, &unimem_procs);
			mutex_unlock(&unimem_procs_lock);
			continue;
		}
		exit_notices++;
		list_del(&p->node);
		unimem_proc_free(p);
	}
	if (retry)
		schedule_delayed_work(&unimem_exit_work, msecs_to_jiffies(UNIMEM_EXIT_RETRY_MS));
}

/* Watch the calling process (once). */
static void unimem_watch_current(void)
{
	struct pid *pid = task_tgid(current);
	struct unimem_proc *p;

	mutex_lock(&unimem_procs_lock);
	list_for_each_entry(p, &unimem_procs, node)
		if (p->pid == pid)
			goto out;
	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		goto out; /* Caveat: its GSAS allocations then live until the service restarts */
	p->pid = get_pid(pid);
	p->tgid = task_tgid_nr(current);
	init_waitqueue_func_entry(&p->wait, unimem_proc_exited);
	add_wait_queue(&p->pid->wait_pidfd, &p->wait);
	list_add(&p->node, &unimem_procs);
out:
	mutex_unlock(&unimem_procs_lock);
}

/* Interfaces uid holds now; um->lock held. */
static unsigned int unimem_uid_count(kuid_t uid)
{
	struct unimem_file *f;
	unsigned int n = 0;

	list_for_each_entry(f, &unimem_files, node)
		if (uid_eq(f->uid, uid))
			n++;
	return n;
}

/* Only the process that opened a file may use its interfaces (ExaNoDe D3.6 sec. 2.2.4). */
static bool unimem_owner(struct unimem_file *uf)
{
	return task_tgid(current) == uf->owner;
}

struct unimem unimem_dev = {
	.lock = __MUTEX_INITIALIZER(unimem_dev.lock),
	.irq_lock = __SPIN_LOCK_UNLOCKED(unimem_dev.irq_lock),
};

static void __iomem *mif_reg(struct unimem *um, int mif, u32 reg)
{
	return um->vmbox + VMBOX_MIF_OFFSET(mif) + reg;
}

static u64 mif_count(struct unimem *um, int mif)
{
	return readq(mif_reg(um, mif, VMBOX_MIF_COUNT));
}

/* Set or clear `bits` of the vmbox's KIF_CTRL (its shadow under irq_lock). */
static void unimem_kif_ctrl(struct unimem *um, u64 bits, bool set)
{
	unsigned long flags;

	spin_lock_irqsave(&um->irq_lock, flags);
	if (set)
		um->kif_ctrl |= bits;
	else
		um->kif_ctrl &= ~bits;
	writeq(um->kif_ctrl, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL);
	spin_unlock_irqrestore(&um->irq_lock, flags);
}

void unimem_kif_enable(struct unimem *um, bool enable)
{
	unimem_kif_ctrl(um, VMBOX_KIF_ENABLE, enable);
}

void unimem_irq_mask(struct unimem *um, int mif, bool enable)
{
	unsigned long flags;

	if (mif == UNIMEM_KIF) {
		unimem_kif_ctrl(um, VMBOX_KIF_IRQ_ENABLE, enable);
		return;
	}
	spin_lock_irqsave(&um->irq_lock, flags);
	if (enable)
		um->irq_enable |= BIT_ULL(mif);
	else
		um->irq_enable &= ~BIT_ULL(mif);
	writeq(um->irq_enable, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_ENABLE);
	spin_unlock_irqrestore(&um->irq_lock, flags);
}

/* Level interrupt: mask the FIFOs that fired and wake their waiters, who re-enable. */
static irqreturn_t unimem_irq(int irq, void *data)
{
	struct unimem *um = data;
	unsigned long flags;
	unsigned int mbox_if;
	u64 status, kif = 0;
	int i;

	spin_lock_irqsave(&um->irq_lock, flags);
	status = readq(um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_STATUS);
	if (status) {
		um->irq_enable &= ~status;
		writeq(um->irq_enable, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_ENABLE);
	}
	if (um->vmbox_kif)
		kif = readq(um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_STATUS) & VMBOX_KIF_IRQ;
	if (kif) {
		um->kif_ctrl &= ~VMBOX_KIF_IRQ_ENABLE;
		writeq(um->kif_ctrl, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL);
	}
	if (status || kif)
		um->irqs++;
	spin_unlock_irqrestore(&um->irq_lock, flags);
	if (!status && !kif)
		return IRQ_NONE;
	mbox_if = unimem_mbox_if();
	/* drains the mailbox FIFO (the KIF, or a MIF) here and re-enables it */
	if ((kif && mbox_if == UNIMEM_KIF) || (mbox_if && mbox_if < UNIMEM_IF_COUNT && (status & BIT_ULL(mbox_if))))
		unimem_mbox_irq(um);
	for (i = 0; i < UNIMEM_IF_COUNT; i++)
		if ((!mbox_if || i != mbox_if) && (status & BIT_ULL(i)))
			wake_up_interruptible(&um->wq[i]);
	return IRQ_HANDLED;
}

void unimem_tif_write(struct unimem *um, u32 reg, u64 val)
{
	writeq(val, um->pktz + PKTZ_TIF_OFFSET + reg);
}

/* The PIDT value of a file's PIF: the atomic service's PIF 0 carries tgid = tid = 0. */
static u64 unimem_file_pid(struct unimem *um, struct unimem_file *uf)
{
	if (uf->pif == UNIMEM_IF_SERVICE)
		return UNIMEM_PID(um->node_id, uf->mif, 0, 0);
	return UNIMEM_PID(um->node_id, uf->mif, uf->tgid, uf->tid);
}

/* Called with um->lock held. */
static void unimem_pif_setup(struct unimem *um, struct unimem_file *uf, bool enable)
{
	int pif = uf->pif;
	u64 pid = unimem_file_pid(um, uf);

	if (enable) {
		unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(pif));
		unimem_tif_write(um, PKTZ_TIF_PIDT(pif), pid & PKTZ_PID_MASK);
		um->pid_conf |= BIT_ULL(pif);
	} else {
		um->pid_conf &= ~BIT_ULL(pif);
	}
	unimem_tif_write(um, PKTZ_TIF_PID_CONF, um->pid_conf);
	if (!enable)
		unimem_tif_write(um, PKTZ_TIF_CLR_REQ, BIT_ULL(pif));
}

static void unimem_mif_setup(struct unimem *um, int mif, bool enable)
{
	unimem_irq_mask(um, mif, false);
	writeq(BIT_ULL(mif), um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_FLUSH);
	if (enable)
		unimem_irq_mask(um, mif, true);
}

/*
 * A free interface: privileged openers take 1..8 first, then the rest; others only 9..63 (the
 * mailbox's interface is marked used).
 */
static int unimem_take(unsigned long *used, int want, bool priv)
{
	int i;

	if (want >= 0) {
		if (want >= UNIMEM_IF_COUNT || test_bit(want, used))
			return -EBUSY;
		set_bit(want, used);
		return want;
	}
	for (i = priv ? 1 : UNIMEM_IF_PRIV_LAST + 1; i < UNIMEM_IF_COUNT; i++)
		if (!test_and_set_bit(i, used))
			return i;
	return -EBUSY;
}

static int unimem_open(struct inode *inode, struct file *file)
{
	struct unimem *um = &unimem_dev;
	struct unimem_file *uf;
	int ret;

	if (task_tgid_nr(current) > UNIMEM_PID_ID_MAX || task_pid_nr(current) > UNIMEM_PID_ID_MAX) {
		pr_warn_ratelimited("unimem: pid %d/%d does not fit the %d-bit PID fields; lower kernel.pid_max\n",
				    task_tgid_nr(current), task_pid_nr(current), UNIMEM_PID_ID_BITS);
		return -EOVERFLOW;
	}
	uf = kzalloc(sizeof(*uf), GFP_KERNEL);
	if (!uf)
		return -ENOMEM;
	uf->um = um;
	uf->tgid = task_tgid_nr(current);
	uf->tid = task_pid_nr(current);
	uf->priv = capable(CAP_SYS_ADMIN);
	uf->uid = current_uid();
	mutex_lock(&um->lock);
	if (!uf->priv && unimem_uid_count(uf->uid) >= READ_ONCE(max_per_uid)) {
		refused_uid_cap++;
		ret = -EBUSY;
		goto err_unlock;
	}
	uf->mif = unimem_take(um->mif_used, -1, uf->priv);
	if (uf->mif < 0) {
		ret = -EBUSY;
		goto err_unlock;
	}
	uf->pif = unimem_take(um->pif_used, -1, uf->priv);
	if (uf->pif < 0) {
		clear_bit(uf->mif, um->mif_used);
		ret = -EBUSY;
		goto err_unlock;
	}
	unimem_mif_setup(um, uf->mif, true);
	unimem_pif_setup(um, uf, true);
	list_add(&uf->node, &unimem_files);
	mutex_unlock(&um->lock);
	unimem_watch_current();
	uf->owner = get_task_pid(current, PIDTYPE_TGID);
	file->private_data = uf;
	return nonseekable_open(inode, file);

err_unlock:
	mutex_unlock(&um->lock);
	kfree(uf);
	return ret;
}

static int unimem_release(struct inode *inode, struct file *file)
{
	struct unimem_file *uf = file->private_data;
	struct unimem *um = uf->um;

	mutex_lock(&um->lock);
	unimem_pif_setup(um, uf, false);
	unimem_mif_setup(um, uf->mif, false);
	clear_bit(uf->pif, um->pif_used);
	clear_bit(uf->mif, um->mif_used);
	list_del(&uf->node);
	mutex_unlock(&um->lock);
	put_pid(uf->owner);
	kfree(uf);
	return 0;
}

static long unimem_bind(struct unimem_file *uf, struct unimem_bind *b)
{
	struct unimem *um = uf->um;
	long ret = 0;
	int m = -1, p = -1;

	if (uf->mapped)
		return -EBUSY;
	if (b->mif < -1 || b->mif >= (int)UNIMEM_IF_COUNT || b->pif < -1 || b->pif >= (int)UNIMEM_IF_COUNT)
		return -EINVAL;
	/* 0 is the atomic service's; 1..8 mark a privileged sender in the PID */
	if (((b->mif >= 0 && b->mif <= (int)UNIMEM_IF_PRIV_LAST) || (b->pif >= 0 && b->pif <= (int)UNIMEM_IF_PRIV_LAST)) &&
	    !(uf->priv && capable(CAP_SYS_ADMIN)))
		return -EPERM;
	mutex_lock(&um->lock);
	if (b->mif >= 0 && b->mif != uf->mif) {
		m = unimem_take(um->mif_used, b->mif, uf->priv);
		if (m < 0) {
			ret = m;
			goto out;
		}
	}
	if (b->pif >= 0 && b->pif != uf->pif) {
		p = unimem_take(um->pif_used, b->pif, uf->priv);
		if (p < 0) {
			if (m >= 0)
				clear_bit(m, um->mif_used);
			ret = p;
			goto out;
		}
	}
	/* the PIDT entry names the MIF replies go to: reprogram it on either change */
	if (m >= 0 || p >= 0) {
		unimem_pif_setup(um, uf, false);
		if (m >= 0) {
			unimem_mif_setup(um, uf->mif, false);
			clear_bit(uf->mif, um->mif_used);
			uf->mif = m;
			unimem_mif_setup(um, m, true);
		}
		if (p >= 0) {
			clear_bit(uf->pif, um->pif_used);
			uf->pif = p;
		}
		unimem_pif_setup(um, uf, true);
	}
out:
	mutex_unlock(&um->lock);
	return ret;
}

/*
 * Wait until the FIFO holds a word. The interrupt is re-armed before the check, so an arrival
 * between the check and the sleep still raises it and wakes us (the handler masks it again).
 */
static long unimem_wait_nonempty(struct unimem_file *uf, long timeout_jiffies)
{
	struct unimem *um = uf->um;
	long ret;

	unimem_irq_mask(um, uf->mif, true);
	ret = wait_event_interruptible_timeout(um->wq[uf->mif], mif_count(um, uf->mif) > 0,
					       timeout_jiffies);
	if (ret < 0)
		return ret;
	return ret ? 0 : -ETIMEDOUT;
}

/* Callers make sure the device they read is bound (um->vmbox / um->pktz set). */
static void unimem_read_vmbox_counters(struct unimem *um, struct unimem_counters *k)
{
	void __iomem *c = um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_COUNTERS;
	unsigned int i;

	BUILD_BUG_ON(ARRAY_SIZE(k->vmbox) != VMBOX_CNT_COUNT);
	for (i = 0; i < VMBOX_CNT_COUNT; i++)
		k->vmbox[i] = readq(c + 8 * i);
	k->irqs = um->irqs;
}

static void unimem_read_pktz_counters(struct unimem *um, struct unimem_counters *k)
{
	void __iomem *c = um->pktz + PKTZ_TIF_OFFSET + PKTZ_TIF_COUNTERS;
	unsigned int i;

	BUILD_BUG_ON(ARRAY_SIZE(k->pktz) != PKTZ_CNT_COUNT);
	for (i = 0; i < PKTZ_CNT_COUNT; i++)
		k->pktz[i] = readq(c + 8 * i);
}

static void unimem_read_counters(struct unimem *um, struct unimem_counters *k)
{
	unimem_read_vmbox_counters(um, k);
	unimem_read_pktz_counters(um, k);
}

static const char *const unimem_vmbox_counter_names[] = { UNIMEM_UAPI_VMBOX_COUNTER_NAMES };
static const char *const unimem_pktz_counter_names[] = { UNIMEM_UAPI_PKTZ_COUNTER_NAMES };

/* Append " <prefix><name>=<value>" for n counters to a sysfs buffer holding `at` bytes. */
static int unimem_emit_counters(char *buf, int at, const char *prefix, const char *const *names,
				const u64 *c, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		at += sysfs_emit_at(buf, at, "%s%s%s=%llu", at ? " " : "", prefix, names[i], c[i]);
	return at;
}

static long unimem_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct unimem_file *uf = file->private_data;
	struct unimem *um = uf->um;
	void __user *uarg = (void __user *)arg;

	/* INFO and COUNTERS only read; everything else is the owning process's */
	if (cmd != UNIMEM_IOC_INFO && cmd != UNIMEM_IOC_COUNTERS && !unimem_owner(uf))
		return -EPERM;
	switch (cmd) {
	case UNIMEM_IOC_INFO: {
		struct unimem_info info = {
			.node_id = um->node_id,
			.node_count = um->node_count,
			.mif = uf->mif,
			.pif = uf->pif,
			.pid_prefix = readq(um->pktz + PKTZ_TIF_OFFSET + PKTZ_TIF_PIDT(uf->pif)),
			.mif_gaddr = UNIMEM_GADDR(um->node_id, um->vmbox_phys + VMBOX_MIF_OFFSET(uf->mif)),
			.vmbox_base = um->vmbox_phys,
			.fifo_depth = um->depth,
		};
		return copy_to_user(uarg, &info, sizeof(info)) ? -EFAULT : 0;
	}
	case UNIMEM_IOC_BIND: {
		struct unimem_bind b;

		if (copy_from_user(&b, uarg, sizeof(b)))
			return -EFAULT;
		return unimem_bind(uf, &b);
	}
	case UNIMEM_IOC_WAIT: {
		struct unimem_wait w;
		long ret;

		if (copy_from_user(&w, uarg, sizeof(w)))
			return -EFAULT;
		ret = unimem_wait_nonempty(uf, w.timeout_ms ? msecs_to_jiffies(w.timeout_ms)
							    : MAX_SCHEDULE_TIMEOUT);
		w.count = mif_count(um, uf->mif);
		if (copy_to_user(uarg, &w, sizeof(w)))
			return -EFAULT;
		return ret;
	}
	case UNIMEM_IOC_SET_PIDCONF: {
		u32 on;

		if (!capable(CAP_SYS_ADMIN))
			return -EPERM;
		if (get_user(on, (u32 __user *)uarg))
			return -EFAULT;
		if (on > 1)
			return -EINVAL;
		mutex_lock(&um->lock);
		if (on)
			um->pid_conf |= BIT_ULL(uf->pif);
		else
			um->pid_conf &= ~BIT_ULL(uf->pif);
		unimem_tif_write(um, PKTZ_TIF_PID_CONF, um->pid_conf);
		mutex_unlock(&um->lock);
		return 0;
	}
	case UNIMEM_IOC_COUNTERS: {
		struct unimem_counters k;

		unimem_read_counters(um, &k);
		return copy_to_user(uarg, &k, sizeof(k)) ? -EFAULT : 0;
	}
	}
	return -ENOTTY;
}

/* read(): dequeue whole 64-bit words from this file's MIF (blocking unless O_NONBLOCK). */
static ssize_t unimem_read(struct file *file, char __user *buf, size_t len, loff_t *ppos)
{
	struct unimem_file *uf = file->private_data;
	struct unimem *um = uf->um;
	size_t done = 0;
	long ret;

	if (!unimem_owner(uf))
		return -EPERM;
	if (len < 8 || len % 8)
		return -EINVAL;
	if (!mif_count(um, uf->mif)) {
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = unimem_wait_nonempty(uf, MAX_SCHEDULE_TIMEOUT);
		if (ret)
			return ret;
	}
	while (done < len && mif_count(um, uf->mif)) {
		u64 w = readq(mif_reg(um, uf->mif, VMBOX_MIF_DATA));

		if (put_user(w, (u64 __user *)(buf + done)))
			return done ? done : -EFAULT;
		done += 8;
	}
	return done;
}

static __poll_t unimem_poll(struct file *file, poll_table *wait)
{
	struct unimem_file *uf = file->private_data;
	struct unimem *um = uf->um;

	if (!unimem_owner(uf))
		return EPOLLERR;
	poll_wait(file, &um->wq[uf->mif], wait);
	unimem_irq_mask(um, uf->mif, true);
	return mif_count(um, uf->mif) ? EPOLLIN | EPOLLRDNORM : 0;
}

static int unimem_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct unimem_file *uf = file->private_data;
	struct unimem *um = uf->um;
	phys_addr_t phys;

	if (!unimem_owner(uf))
		return -EPERM;
	/* A private mapping would copy the device page on the first write fault. */
	if (vma->vm_end - vma->vm_start != PAGE_SIZE || !(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_pgoff == UNIMEM_MMAP_MIF >> PAGE_SHIFT)
		phys = um->vmbox_phys + VMBOX_MIF_OFFSET(uf->mif);
	else if (vma->vm_pgoff == UNIMEM_MMAP_PIF >> PAGE_SHIFT)
		phys = um->pktz_phys + PKTZ_PIF_OFFSET(uf->pif);
	else
		return -EINVAL;
	/* the pages are fixed from now on: UNIMEM_IOC_BIND answers EBUSY */
	uf->mapped = true;
	/* VM_DONTCOPY: a fork child does not inherit the interfaces (sec. 2.2.4) */
	vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
	vma->vm_page_prot = pgprot_device(vma->vm_page_prot);
	return io_remap_pfn_range(vma, vma->vm_start, phys >> PAGE_SHIFT, PAGE_SIZE, vma->vm_page_prot);
}

static const struct file_operations unimem_fops = {
	.owner = THIS_MODULE,
	.open = unimem_open,
	.release = unimem_release,
	.unlocked_ioctl = unimem_ioctl,
	.read = unimem_read,
	.poll = unimem_poll,
	.mmap = unimem_mmap,
	.llseek = no_llseek,
};

/* /sys/class/misc/unimem/counters: both devices (the misc device exists only while both are bound). */
static ssize_t counters_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct unimem_counters k;
	int at;

	unimem_read_counters(&unimem_dev, &k);
	at = unimem_emit_counters(buf, 0, "vmbox_", unimem_vmbox_counter_names, k.vmbox, VMBOX_CNT_COUNT);
	at = unimem_emit_counters(buf, at, "pktz_", unimem_pktz_counter_names, k.pktz, PKTZ_CNT_COUNT);
	return at + sysfs_emit_at(buf, at, " irqs=%llu\n", k.irqs);
}
static DEVICE_ATTR_RO(counters);

/*
 * /sys/bus/platform/devices/<dev>/counters: one device's own counters. The driver core creates
 * these after a successful probe and removes them before remove(), so the device is bound
 * while they are read.
 */
static ssize_t unimem_dev_counters_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct unimem *um = &unimem_dev;
	struct unimem_counters k;
	int at;

	if (dev == um->vmbox_dev) {
		unimem_read_vmbox_counters(um, &k);
		at = unimem_emit_counters(buf, 0, "", unimem_vmbox_counter_names, k.vmbox, VMBOX_CNT_COUNT);
		return at + sysfs_emit_at(buf, at, " irqs=%llu\n", k.irqs);
	}
	unimem_read_pktz_counters(um, &k);
	at = unimem_emit_counters(buf, 0, "", unimem_pktz_counter_names, k.pktz, PKTZ_CNT_COUNT);
	return at + sysfs_emit_at(buf, at, "\n");
}
static struct device_attribute dev_attr_dev_counters =
	__ATTR(counters, 0444, unimem_dev_counters_show, NULL);

static ssize_t node_id_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", unimem_dev.node_id);
}
static DEVICE_ATTR_RO(node_id);

static ssize_t interfaces_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "mif_used=%*pb pif_used=%*pb\n", UNIMEM_IF_COUNT, unimem_dev.mif_used,
			  UNIMEM_IF_COUNT, unimem_dev.pif_used);
}
static DEVICE_ATTR_RO(interfaces);

static ssize_t mailbox_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return unimem_mbox_show(buf);
}
static DEVICE_ATTR_RO(mailbox);

static struct attribute *unimem_attrs[] = {
	&dev_attr_mailbox.attr,
	&dev_attr_counters.attr,
	&dev_attr_node_id.attr,
	&dev_attr_interfaces.attr,
	NULL,
};
ATTRIBUTE_GROUPS(unimem);

static struct attribute *unimem_pdev_attrs[] = {
	&dev_attr_dev_counters.attr,
	&dev_attr_node_id.attr,
	NULL,
};
ATTRIBUTE_GROUPS(unimem_pdev);

/* Both devices bound: take the TIF into service and publish /dev/unimem. */
static int unimem_publish(struct unimem *um)
{
	char where[8];
	int ret;

	if (!um->vmbox || !um->pktz || um->registered)
		return 0;
	unimem_tif_write(um, PKTZ_TIF_BASE_DEST, um->vmbox_phys & PKTZ_BASE_DEST_MASK);
	unimem_tif_write(um, PKTZ_TIF_PID_CONF, 0);
	unimem_tif_write(um, PKTZ_TIF_CLR_REQ, ~0ULL);
	um->pid_conf = 0;
	if (unimem_has_kif(um)) {
		/* the kernel's own interface: its packets carry the kernel's PID */
		unimem_tif_write(um, PKTZ_TIF_KIF_CLR_REQ, 1);
		unimem_tif_write(um, PKTZ_TIF_KIF_PIDT, UNIMEM_KERNEL_PID(um->node_id));
		unimem_tif_write(um, PKTZ_TIF_KIF_CONF, 1);
	}
	/* the mailbox takes its interface before any file can */
	ret = unimem_mbox_publish(um, mailbox_if);
	if (ret) {
		dev_err(um->vmbox_dev, "cannot set up the mailbox on interface %u: %d\n", mailbox_if, ret);
		return ret;
	}
	um->misc.minor = MISC_DYNAMIC_MINOR;
	um->misc.name = "unimem";
	um->misc.fops = &unimem_fops;
	um->misc.groups = unimem_groups;
	um->misc.mode = 0666;
	ret = misc_register(&um->misc);
	if (ret) {
		dev_err(um->vmbox_dev, "cannot register /dev/unimem: %d\n", ret);
		unimem_mbox_unpublish(um);
		return ret;
	}
	um->registered = true;
	unimem_announce_boot = true;
	schedule_delayed_work(&unimem_exit_work, 0);
	dev_info(um->vmbox_dev, "node %u of %u: /dev/unimem ready (64 MIFs x %u words, 64 PIFs%s), mailbox interface=%s\n",
		 um->node_id, um->node_count, um->depth, unimem_has_kif(um) ? ", kernel interface" : "",
		 unimem_mbox_where(where, sizeof(where)));
	return 0;
}

static void unimem_unpublish(struct unimem *um)
{
	if (um->registered) {
		/* no file is open (module references): only exit notices may still be queued */
		cancel_delayed_work_sync(&unimem_exit_work);
		unimem_mbox_unpublish(um);
		if (unimem_has_kif(um)) {
			unimem_tif_write(um, PKTZ_TIF_KIF_CONF, 0);
			unimem_tif_write(um, PKTZ_TIF_KIF_CLR_REQ, 1);
		}
		misc_deregister(&um->misc);
		um->registered = false;
	}
}

static int unimem_probe(struct platform_device *pdev)
{
	struct unimem *um = &unimem_dev;
	struct device *dev = &pdev->dev;
	bool is_vmbox = of_device_is_compatible(dev->of_node, RACKEMU_VMBOX_COMPAT);
	struct resource *res;
	void __iomem *base;
	int irq, ret, i;

	base = devm_platform_get_and_ioremap_resource(pdev, 0, &res);
	if (IS_ERR(base))
		return PTR_ERR(base);
	if (resource_size(res) < (is_vmbox ? VMBOX_MMIO_SIZE : PKTZ_MMIO_SIZE)) {
		dev_err(dev, "register window %pR too small\n", res);
		return -EINVAL;
	}
	mutex_lock(&um->lock);
	if (is_vmbox ? um->vmbox_dev != NULL : um->pktz_dev != NULL) {
		dev_err(dev, "a second Unimem %s is not supported\n", is_vmbox ? "vmbox" : "packetizer");
		ret = -EBUSY;
		goto err_unlock;
	}
	if (is_vmbox) {
		if (readq(base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_ID) != VMBOX_ID_VALUE) {
			dev_err(dev, "no Unimem vmbox at %pR (bad id register)\n", res);
			ret = -ENODEV;
			goto err_unlock;
		}
		if (of_property_read_u32(dev->of_node, "rackemu,node-id", &um->node_id) ||
		    of_property_read_u32(dev->of_node, "rackemu,node-count", &um->node_count)) {
			dev_err(dev, "rackemu,node-id / rackemu,node-count missing from the device tree\n");
			ret = -EINVAL;
			goto err_unlock;
		}
		for (i = 0; i < UNIMEM_IF_COUNT; i++)
			init_waitqueue_head(&um->wq[i]);
		um->depth = readq(base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_DEPTH);
		writeq(0, base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_ENABLE);
		writeq(~0ULL, base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_FLUSH);
		um->irq_enable = 0;
		um->vmbox_kif = readq(base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_CAPS) & UNIMEM_CAP_KIF;
		um->kif_ctrl = 0;
		if (um->vmbox_kif) {
			writeq(0, base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL);
			writeq(1, base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_FLUSH);
		}
		irq = platform_get_irq(pdev, 0);
		if (irq < 0) {
			ret = irq;
			goto err_unlock;
		}
		um->vmbox = base;
		um->vmbox_phys = res->start;
		um->vmbox_dev = dev;
		um->vmbox_irq = irq;
		/* open() hands out 1..63: 0 is the atomic service's (UNIMEM_IOC_BIND, root); the
		 * mailbox takes its interface when both devices are bound (unimem_publish)
		 */
		bitmap_zero(um->mif_used, UNIMEM_IF_COUNT);
		ret = devm_request_irq(dev, irq, unimem_irq, 0, "unimem-vmbox", um);
		if (ret) {
			dev_err(dev, "cannot request irq %d: %d\n", irq, ret);
			goto err_forget;
		}
	} else {
		if (readq(base + PKTZ_TIF_OFFSET + PKTZ_TIF_ID) != PKTZ_ID_VALUE) {
			dev_err(dev, "no Unimem packetizer at %pR (bad id register)\n", res);
			ret = -ENODEV;
			goto err_unlock;
		}
		um->pktz_kif = readq(base + PKTZ_TIF_OFFSET + PKTZ_TIF_CAPS) & UNIMEM_CAP_KIF;
		if (um->pktz_kif)
			writeq(0, base + PKTZ_TIF_OFFSET + PKTZ_TIF_KIF_CONF);
		um->pktz = base;
		um->pktz_phys = res->start;
		um->pktz_dev = dev;
		bitmap_zero(um->pif_used, UNIMEM_IF_COUNT);
	}
	ret = unimem_publish(um);
	if (ret)
		goto err_forget;
	mutex_unlock(&um->lock);
	return 0;

err_forget:
	/* devm unmaps the window (and frees the irq) after a failed probe: drop our pointers */
	if (is_vmbox) {
		writeq(0, base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_ENABLE);
		if (um->vmbox_kif)
			writeq(0, base + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL);
		um->vmbox = NULL;
		um->vmbox_dev = NULL;
	} else {
		um->pktz = NULL;
		um->pktz_dev = NULL;
	}
err_unlock:
	mutex_unlock(&um->lock);
	return ret;
}

static int unimem_remove(struct platform_device *pdev)
{
	struct unimem *um = &unimem_dev;

	mutex_lock(&um->lock);
	unimem_unpublish(um);
	if (&pdev->dev == um->vmbox_dev) {
		writeq(0, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_IRQ_ENABLE);
		if (um->vmbox_kif)
			writeq(0, um->vmbox + VMBOX_CTRL_OFFSET + VMBOX_CTRL_KIF_CTRL);
		/* the handler dereferences um->vmbox: free the irq before forgetting the window */
		devm_free_irq(&pdev->dev, um->vmbox_irq, um);
		um->vmbox = NULL;
		um->vmbox_dev = NULL;
	} else {
		unimem_tif_write(um, PKTZ_TIF_PID_CONF, 0);
		if (um->pktz_kif)
			unimem_tif_write(um, PKTZ_TIF_KIF_CONF, 0);
		um->pktz = NULL;
		um->pktz_dev = NULL;
	}
	mutex_unlock(&um->lock);
	return 0;
}

static const struct of_device_id unimem_of_match[] = {
	{ .compatible = RACKEMU_VMBOX_COMPAT },
	{ .compatible = RACKEMU_PKTZ_COMPAT },
	{ }
};
MODULE_DEVICE_TABLE(of, unimem_of_match);

static struct platform_driver unimem_driver = {
	.probe = unimem_probe,
	.remove = unimem_remove,
	.driver = {
		.name = "rackemu-unimem",
		.of_match_table = unimem_of_match,
		.dev_groups = unimem_pdev_groups,
		/*
		 * Open files use both windows: unbinding through sysfs while one is open would pull
		 * them away. Removal happens only at rmmod, which the open files' module
		 * references prevent.
		 */
		.suppress_bind_attrs = true,
	},
};
static int __init unimem_init(void)
{
	return platform_driver_register(&unimem_driver);
}

static void __exit unimem_exit(void)
{
	struct unimem_proc *p, *tmp;

	platform_driver_unregister(&unimem_driver);
	cancel_delayed_work_sync(&unimem_exit_work);
	mutex_lock(&unimem_procs_lock);
	list_for_each_entry_safe(p, tmp, &unimem_procs, node) {
		list_del(&p->node);
		unimem_proc_free(p); /* off the pid's wait queue: no wake can queue the work after this */
	}
	mutex_unlock(&unimem_procs_lock);
	cancel_delayed_work_sync(&unimem_exit_work);
}
module_init(unimem_init);
module_exit(unimem_exit);

MODULE_DESCRIPTION("rackemu Unimem virtualized mailbox and packetizer");
MODULE_AUTHOR("rackemu");
MODULE_LICENSE("GPL");
