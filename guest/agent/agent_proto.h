/* SPDX-License-Identifier: MIT */
/*
 * rackemu guest agent protocol (docs/agent.md): the host runs commands in a node and moves
 * files over a virtio-serial port named "rackemu.agent". Shared by the guest agent
 * (rackemu-agent.c); the host client (platform/rackemu/agent.py) mirrors these constants.
 *
 * Every message is a 16-byte header followed by `len` body bytes, all little-endian:
 *   u32 magic = AG_MAGIC, u16 version = AG_VERSION, u16 type, u32 id, u32 len
 * Requests (host -> guest) and their responses (guest -> host, type | AG_RESPONSE, same id):
 *   PING  body: empty                      -> status 0
 *   EXEC  body: u32 timeout_ms (0: none), u32 stdin_len, u32 cmd_len, cmd (for /bin/sh -c), stdin
 *         -> status = exit code, or -signal; flags TIMED_OUT when killed at the timeout
 *   PUT   body: u32 mode, u32 path_len, path, data  -> status 0 or -errno, error text in err
 *   GET   body: path                       -> out = file contents, or status -errno
 *   CLOCK body: u64 realtime_ns, entropy (0..AG_MAX_ENTROPY bytes)
 *         -> status 0 or -errno, error text in err: sets CLOCK_REALTIME and mixes the bytes into
 *         the kernel's pool (as a write to /dev/urandom), with no process started: what the
 *         launcher sends a node restored from a snapshot (docs/launcher.md)
 * Response body: i32 status, u32 flags, u32 out_len, u32 err_len, out, err.
 * Several EXECs run at once; their responses come back in completion order.
 */
#ifndef RACKEMU_AGENT_PROTO_H
#define RACKEMU_AGENT_PROTO_H

#define AG_MAGIC 0x47414b52u /* "RKAG" */
#define AG_VERSION 1u
#define AG_HDR_SIZE 16u

#define AG_PING 1u
#define AG_EXEC 2u
#define AG_PUT 3u
#define AG_GET 4u
#define AG_CLOCK 5u
#define AG_RESPONSE 0x80u

#define AG_F_TIMED_OUT 1u  /* the command was killed at its timeout */
#define AG_F_ERROR 2u      /* the request failed; err holds the reason */
#define AG_F_TRUNCATED 4u  /* out or err exceeded AG_MAX_OUTPUT and was cut */

#define AG_MAX_BODY (64u << 20)   /* largest request body accepted (PUT data) */
#define AG_MAX_OUTPUT (16u << 20) /* per stream of a command */
#define AG_MAX_JOBS 64u           /* commands running at once */
#define AG_MAX_ENTROPY 4096u      /* bytes of host randomness a CLOCK request may carry */

#endif
