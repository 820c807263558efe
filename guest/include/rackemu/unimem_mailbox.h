/* SPDX-License-Identifier: MIT */
/*
 * Unimem mailbox driver interface (ExaNoDe D3.6 sec. 3.2; docs/mailbox.md). Shared by the driver
 * (guest/unimem/kmod/unimem/mailbox.c), kernel users of the mailbox, and user programs.
 *
 * A message is 64 bits; bits [63:60] are its opcode (message type, 0x0-0xf). Each opcode has
 * at most one owner at a time: a kernel callback or an open local mailbox file.
 *
 * User space: /dev/Unimem/mailboxA, B, ... (the letter names the node: A = node 0, ..., Z =
 * node 25, AA = node 26, ...). An 8-byte write to node N's device sends the message to node N.
 * On this node's own device, a write of struct mailbox_action_t registers or unregisters an
 * opcode, and read() returns the messages of the opcodes this file registered, 8 bytes each,
 * oldest first (blocking unless O_NONBLOCK; poll/select/epoll report POLLIN).
 */
#ifndef RACKEMU_UNIMEM_MAILBOX_H
#define RACKEMU_UNIMEM_MAILBOX_H

#define MAILBOX_OPCODE_SHIFT 60
#define MAILBOX_OPCODE(msg) ((unsigned)((msg) >> MAILBOX_OPCODE_SHIFT) & 0xfu)
#define MAILBOX_OPCODES 16u
#define MAILBOX_DEV_DIR "/dev/Unimem" /* the seed's path; /dev/unimem is the vmbox/packetizer device */
#define MAILBOX_FILE_QUEUE 256u /* messages queued per open file; more are dropped and counted */

/* The mailbox uses the vmbox FIFO and the packetizer interface with the number given by
 * unimem.ko's `mailbox_if` parameter, on every node. MAILBOX_IF (64, UNIMEM_KIF), the default,
 * is the devices' kernel interface (KIF): a FIFO and a packetizer interface of their own, so all
 * of 1..63 stay with /dev/unimem users, as ExaNoDe D3.6 sec. 2.2.3 counts them, and only another
 * node's kernel can post into the mailbox (on devices without the KIF it means MAILBOX_IF_NO_KIF).
 * 1..63 put the mailbox on that user interface (never handed out while the mailbox holds it);
 * 0 turns it off (docs/mailbox.md). The value must be the same on every node. On the wire a
 * message is a 256-bit packet:
 * word0 [63:48] = MAILBOX_PKT_MAGIC, [47:0] = the sending kernel's PID, UNIMEM_KERNEL_PID(node)
 * = UNIMEM_PID(node, 63, 0, 0), stamped by the packetizer; word1 = the message; word2 = its
 * origin, written by the sending kernel: MAILBOX_ORIGIN_KERNEL, or MAILBOX_ORIGIN_USER | the
 * writing process's uid for a message written to /dev/Unimem/mailbox*; word3 = 0. Packets with
 * another magic or a user process's PID are dropped and counted as forged. */
#define MAILBOX_IF 64u        /* UNIMEM_KIF */
#define MAILBOX_IF_NO_KIF 63u /* what MAILBOX_IF means on devices without the KIF */
#define MAILBOX_PKT_MAGIC 0x4d42u /* "MB" */
#define MAILBOX_ORIGIN_KERNEL 0ull
#define MAILBOX_ORIGIN_USER (1ull << 63)

/* The registration record written to the local mailbox device (ExaNoDe D3.6 sec. 3.2.2) is
 * struct mailbox_action_t { char action; unsigned opcode; int val; }: 12 bytes on every Linux
 * ABI rackemu guests use (action at 0, opcode at 4, val at 8). This header does not define it,
 * so that a program written as the seed shows, which defines the struct itself, can include
 * this header; rackemu/unimem_mailbox_action.h defines it for everyone else. */
#define MAILBOX_ACTION_SIZE 12u
#define MAILBOX_ACTION_REGISTER 'r'     /* register the opcode; messages are read with read() */
#define MAILBOX_ACTION_SIGNAL 's'       /* register, and send signal `val` per message */
#define MAILBOX_ACTION_EVENTFD 'e'      /* register, and signal eventfd descriptor `val` */
#define MAILBOX_ACTION_UNREGISTER 'u'

#ifdef __KERNEL__
/* Kernel interface (ExaNoDe D3.6 sec. 3.2.1), exported with EXPORT_SYMBOL (not _GPL): modules
 * under any license may use it, as the seed presents it to "kernel drivers" without condition
 * (docs/mailbox.md). Callbacks run in interrupt context and receive the
 * whole 64-bit message, opcode included. All return 0 on success or a negative errno:
 * register: -EINVAL (opcode > 0xf, no callback), -EBUSY (opcode taken), -ENODEV (no mailbox);
 * unregister: -EINVAL, -ENOENT (not registered by a kernel callback);
 * send: -EINVAL (no such node), -EBUSY (the destination mailbox is full), -EHOSTUNREACH (node
 * absent, down, or the fabric is down), -ETIMEDOUT (no answer within 200 ms), -ENODEV (the
 * driver is not bound, or the mailbox is off: mailbox_if=0). */
typedef int (*mailbox_callback)(long long unsigned);
int mailbox_register_callback(unsigned opcode, mailbox_callback cb, char *description);
int mailbox_unregister_callback(unsigned opcode);
int mailbox_send_message(int rnode, long long unsigned val);

/* rackemu: who sent a message. `node` comes from the packet's hardware-stamped PID; `user` and
 * `uid` from the sending node's kernel (word 2): a kernel service must not act on a message a
 * user process wrote (docs/mailbox.md, "Senders"). */
struct mailbox_sender {
	unsigned node;
	bool user;     /* written by a user process through /dev/Unimem/mailbox* */
	unsigned uid;  /* that process's uid (user only) */
};
typedef int (*mailbox_sender_callback)(long long unsigned msg, const struct mailbox_sender *from);
/* As mailbox_register_callback; the callback also gets the sender. */
int mailbox_register_sender_callback(unsigned opcode, mailbox_sender_callback cb, char *description);
#endif

#endif /* RACKEMU_UNIMEM_MAILBOX_H */
