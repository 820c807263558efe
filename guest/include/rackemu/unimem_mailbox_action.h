/* SPDX-License-Identifier: MIT */
/*
 * struct mailbox_action_t, the record written to this node's mailbox device to register or
 * unregister a message type (ExaNoDe D3.6 sec. 3.2.2; docs/mailbox.md). Kept apart from
 * rackemu/unimem_mailbox.h so that programs which define the struct themselves, as the seed
 * prints it, can include that header; everyone else includes this one.
 */
#ifndef RACKEMU_UNIMEM_MAILBOX_ACTION_H
#define RACKEMU_UNIMEM_MAILBOX_ACTION_H

#include "rackemu/unimem_mailbox.h"

struct mailbox_action_t {
	char action;     /* 'r' register (read), 's' register + signal `val`,
	                  * 'e' register + eventfd descriptor `val`, 'u' unregister */
	unsigned opcode; /* 0x0 .. 0xf */
	int val;
};

#endif /* RACKEMU_UNIMEM_MAILBOX_ACTION_H */
