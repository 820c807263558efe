/* SPDX-License-Identifier: MIT */
/*
 * Unimem mailbox driver interface (seed 004 sec. 3.2; docs/mailbox.md). Shared by the driver
 * (guest/kmod/unimem/mailbox.c), kernel users of the mailbox, and user programs.
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

/* The mailbox uses the vmbox FIFO and the packetizer interface with this number on every node
 * (never handed out to /dev/unimem users). On the wire a message is a 256-bit packet:
 * word0 [63:48] = MAILBOX_PKT_MAGIC, [47:0] = the sending kernel's PID, UNIMEM_PID(node, 63,
 * 0, 0), stamped by the packetizer; word1 = the message; word2 = its origin, written by the
 * sending kernel: MAILBOX_ORIGIN_KERNEL, or MAILBOX_ORIGIN_USER | the writing process's uid for
 * a message written to /dev/Unimem/mailbox*; word3 = 0. Packets with another magic or a user
 * process's PID are dropped and counted as forged. */
#define MAILBOX_IF 63u
#define MAILBOX_PKT_MAGIC 0x4d42u /* "MB" */
#define MAILBOX_ORIGIN_KERNEL 0ull
#define MAILBOX_ORIGIN_USER (1ull << 63)

/* Written to the local mailbox device (seed 004 sec. 3.2.2). */
struct mailbox_action_t {
	char action;     /* 'r' register (read), 's' register + signal `val`,
	                  * 'e' register + eventfd descriptor `val`, 'u' unregister */
	unsigned opcode; /* 0x0 .. 0xf */
	int val;
};

#ifdef __KERNEL__
/* Kernel interface (seed 004 sec. 3.2.1). Callbacks run in interrupt context and receive the
 * whole 64-bit message, opcode included. All return 0 on success or a negative errno:
 * register: -EINVAL (opcode > 0xf, no callback), -EBUSY (opcode taken), -ENODEV (no mailbox);
 * unregister: -EINVAL, -ENOENT (not registered by a kernel callback);
 * send: -EINVAL (no such node), -EBUSY (the destination mailbox is full), -EHOSTUNREACH (node
 * absent, down, or the fabric is down), -ETIMEDOUT (no answer within 200 ms), -ENODEV. */
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
