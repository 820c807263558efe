// SPDX-License-Identifier: GPL-2.0
/*
 * mbox_echo: a kernel user of the Unimem mailbox's kernel interface (ExaNoDe D3.6 sec. 3.2.1),
 * for tests and as an example. It registers opcode `opcode` (default 0xe) with
 * mailbox_register_callback(); the callback runs in interrupt context, so it queues the message
 * and a work item answers it with mailbox_send_message():
 *
 *   request: bits [63:60] opcode, [57:52] node to answer, [51:0] payload
 *   answer:  bits [63:60] reply_opcode (default 0xf), [57:52] this node, [51:0] payload + 1
 *
 * Not loaded at boot: `insmod /lib/modules/extra/mbox_echo.ko [opcode=N reply_opcode=M]`.
 * Counters in /sys/module/mbox_echo/parameters/{echoed,failed}.
 */
#include <linux/kfifo.h>
#include <linux/module.h>
#include <linux/of.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>

#include "rackemu/unimem_mailbox.h"

static unsigned int opcode = 0xe;
module_param(opcode, uint, 0444);
MODULE_PARM_DESC(opcode, "opcode answered (0..15, default 14)");
static unsigned int reply_opcode = 0xf;
module_param(reply_opcode, uint, 0444);
MODULE_PARM_DESC(reply_opcode, "opcode of the answers (0..15, default 15)");
static unsigned long echoed, failed;
module_param(echoed, ulong, 0444);
module_param(failed, ulong, 0444);

static DEFINE_SPINLOCK(echo_lock);
static DEFINE_KFIFO(echo_fifo, u64, 64);
static int this_node = -1;

#define ECHO_NODE(m) ((int)(((m) >> 52) & 0x3f))
#define ECHO_PAYLOAD(m) ((m) & ((1ull << 52) - 1))

static void echo_work_fn(struct work_struct *w)
{
	u64 msg, reply;
	int ret;

	while (kfifo_out_spinlocked(&echo_fifo, &msg, 1, &echo_lock)) {
		reply = ((u64)reply_opcode << MAILBOX_OPCODE_SHIFT) | ((u64)(this_node & 0x3f) << 52) |
			ECHO_PAYLOAD(ECHO_PAYLOAD(msg) + 1);
		ret = mailbox_send_message(ECHO_NODE(msg), reply);
		if (ret) {
			failed++;
			pr_warn("mbox_echo: answer to node %d failed: %d\n", ECHO_NODE(msg), ret);
		} else {
			echoed++;
		}
	}
}
static DECLARE_WORK(echo_work, echo_work_fn);

/* Interrupt context: queue and hand over to the work item. */
static int echo_cb(unsigned long long msg)
{
	if (!kfifo_in_spinlocked(&echo_fifo, &msg, 1, &echo_lock))
		failed++;
	schedule_work(&echo_work);
	return 0;
}

static int __init mbox_echo_init(void)
{
	int ret;

	if (opcode > 15 || reply_opcode > 15 || opcode == reply_opcode)
		return -EINVAL;
	/* this node's id, as the machine gives it in the device tree */
	if (of_property_read_u32(of_chosen, "rackemu,node-id", (u32 *)&this_node)) {
		pr_err("mbox_echo: no rackemu,node-id in /chosen\n");
		return -ENODEV;
	}
	ret = mailbox_register_callback(opcode, echo_cb, "mbox_echo");
	if (ret) {
		pr_err("mbox_echo: cannot register opcode %u: %d\n", opcode, ret);
		return ret;
	}
	pr_info("mbox_echo: answering opcode %u with opcode %u\n", opcode, reply_opcode);
	return 0;
}

static void __exit mbox_echo_exit(void)
{
	mailbox_unregister_callback(opcode);
	cancel_work_sync(&echo_work);
}

module_init(mbox_echo_init);
module_exit(mbox_echo_exit);
MODULE_DESCRIPTION("rackemu: answers Unimem mailbox messages from the kernel (example, tests)");
MODULE_AUTHOR("rackemu");
MODULE_LICENSE("GPL");
