/* SPDX-License-Identifier: MIT */
/*
 * A program written against the mailbox driver's user interface as ExaNoDe D3.6 sec. 3.2.2 prints
 * it: it defines struct mailbox_action_t itself and includes rackemu's mailbox header for the
 * rest. It registers an opcode on this node's mailbox device, sends itself a message of that
 * type and reads it back (tests/e2e/test_unimem_seed_api.py).
 *
 *   mailbox_seed NODE   NODE: this node's id (its device is /dev/Unimem/mailbox<letter>)
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rackemu/unimem_mailbox.h"

/* sec. 3.2.2, as printed (the document omits the final semicolon) */
struct mailbox_action_t {
char action;
unsigned opcode;
int val;
};

int main(int argc, char **argv)
{
	char dev[64];
	struct mailbox_action_t a = { 'r', 0x9, 0 };
	long long unsigned msg = 0x9000000000c0ffeeull, got = 0;
	int node, fd;

	if (argc != 2 || (node = atoi(argv[1])) < 0 || node > 25) {
		fprintf(stderr, "usage: mailbox_seed NODE (0..25)\n");
		return 2;
	}
	snprintf(dev, sizeof(dev), "%s/mailbox%c", MAILBOX_DEV_DIR, 'A' + node);
	fd = open(dev, O_RDWR);
	if (fd < 0) {
		perror(dev);
		return 1;
	}
	if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a)) {
		perror("register");
		return 1;
	}
	if (write(fd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg)) {
		perror("send");
		return 1;
	}
	if (read(fd, &got, sizeof(got)) != (ssize_t)sizeof(got)) {
		perror("read");
		return 1;
	}
	a.action = 'u';
	if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a)) {
		perror("unregister");
		return 1;
	}
	printf("sent=0x%llx received=0x%llx opcode=%u\n", msg, got, MAILBOX_OPCODE(got));
	return got == msg ? 0 : 1;
}
