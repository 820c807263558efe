/* SPDX-License-Identifier: GPL-2.0 */
/* Internals of unimem.ko shared by unimem.c (devices, /dev/unimem) and mailbox.c. */
#ifndef UNIMEM_INTERNAL_H
#define UNIMEM_INTERNAL_H

#include <linux/bitmap.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>

#include "rackemu/unimem_regs.h"

struct unimem {
	struct mutex lock;		/* interface allocation, TIF programming */
	spinlock_t irq_lock;		/* irq_enable shadow */
	void __iomem *vmbox;
	void __iomem *pktz;
	phys_addr_t vmbox_phys, pktz_phys;
	struct device *vmbox_dev, *pktz_dev;
	int vmbox_irq;
	u32 node_id, node_count, depth;
	u64 irq_enable;
	u64 kif_ctrl;			/* the vmbox's KIF_CTRL shadow (irq_lock) */
	bool vmbox_kif, pktz_kif;	/* CAPS: the devices have the kernel interface */
	u64 pid_conf;
	u64 irqs;
	DECLARE_BITMAP(mif_used, UNIMEM_IF_COUNT);
	DECLARE_BITMAP(pif_used, UNIMEM_IF_COUNT);
	wait_queue_head_t wq[UNIMEM_IF_COUNT];
	bool registered;
	struct miscdevice misc;
};

extern struct unimem unimem_dev;

/*
 * Both devices have the kernel interface (KIF, UNIMEM_CAP_KIF): the mailbox and the kernel's
 * packets use it and leave all of 1..63 to /dev/unimem users.
 */
static inline bool unimem_has_kif(const struct unimem *um)
{
	return um->vmbox_kif && um->pktz_kif;
}

/* mif 0..63, or UNIMEM_KIF: its interrupt enable (the KIF's in KIF_CTRL) */
void unimem_irq_mask(struct unimem *um, int mif, bool enable);
/* The vmbox KIF takes deliveries (KIF_CTRL.ENABLE) while the mailbox listens there. */
void unimem_kif_enable(struct unimem *um, bool enable);
void unimem_tif_write(struct unimem *um, u32 reg, u64 val);

/* mailbox.c (ExaNoDe D3.6 sec. 3.2) */
int unimem_mbox_publish(struct unimem *um, unsigned int ifno);	/* um->lock held, both devices bound */
void unimem_mbox_unpublish(struct unimem *um);	/* um->lock held */
/*
 * The interface the mailbox uses now: UNIMEM_KIF (the kernel interface), 1..63, 0 while it is
 * off (mailbox_if=0).
 */
unsigned int unimem_mbox_if(void);
/*
 * Move the mailbox to interface `ifno` (UNIMEM_KIF: the KIF, or 63 on devices without it;
 * 0: off); um->lock held. -EBUSY if a file holds it.
 */
int unimem_mbox_attach(struct unimem *um, unsigned int ifno);
void unimem_mbox_irq(struct unimem *um);	/* hard irq: the mailbox FIFO is non-empty */
/* Where the mailbox runs, for sysfs and logs: "kif", "1".."63" or "off" (in buf). */
const char *unimem_mbox_where(char *buf, size_t len);
ssize_t unimem_mbox_show(char *buf);
/* One 256-bit packet from the kernel (PID UNIMEM_KERNEL_PID(node)) to MIF `mif` of node `node`;
 * w0 bits [63:48] are sent, [47:0] become the PID. Sent from the mailbox's interface (the KIF by
 * default); while the mailbox is off, from the KIF, or on devices without one from a free PIF
 * borrowed for the one packet (process context only; -EAGAIN when every PIF is taken). Errors
 * otherwise as mailbox_send_message.
 */
int unimem_kernel_send(struct unimem *um, u32 node, u32 mif, u64 w0, u64 w1, u64 w2, u64 w3);

#endif
