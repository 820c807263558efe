// The fabric handshake played by hand (docs/fabric.md: rkf_hello, rkf_welcome and the port's
// shared memory and doorbell as SCM_RIGHTS descriptors), for the tests and fuzz harnesses that
// act as a node or as the bridge: tests/unit/bridge_rig.h, tests/fuzz/fuzz_bridge.cc and
// tests/fuzz/fuzz_port.cc. No GoogleTest here: the fuzz harnesses include it too.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rackemu/fabric_proto.h"

namespace rackemu::fabric::test {

// A connected AF_UNIX socket of `type` (SOCK_SEQPACKET for the fabric, SOCK_STREAM for the
// control socket), or -1.
inline int unix_connect(const std::string &path, int type, int flags = 0)
{
    int s = socket(AF_UNIX, type | SOCK_CLOEXEC | flags, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    if (s >= 0 && connect(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) < 0) {
        close(s);
        return -1;
    }
    return s;
}

// A listening SOCK_SEQPACKET socket at `path` (what the bridge offers the nodes), or -1.
inline int unix_listen(const std::string &path, int backlog)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    if (s >= 0 && (bind(s, reinterpret_cast<sockaddr *>(&sa), sizeof sa) < 0 || listen(s, backlog) < 0)) {
        close(s);
        return -1;
    }
    return s;
}

// A valid hello of node `id` in a rack of `node_count`, named `name` (name_len bytes of it, all
// of it and its NUL if 0; at most the field's size).
inline rkf_hello make_hello(unsigned id, unsigned node_count, const char *name, size_t name_len = 0)
{
    rkf_hello h{};
    h.magic = RKF_HELLO_MAGIC;
    h.version = RKF_PROTO_VERSION;
    h.node_id = uint16_t(id);
    h.node_count = uint16_t(node_count);
    std::memcpy(h.name, name, std::min(sizeof h.name, name_len ? name_len : std::strlen(name) + 1));
    return h;
}

// The node's side after its hello: wait up to timeout_ms for the welcome and receive it with
// the descriptors handed over (fds[0] the port's shared memory, fds[1] the doorbell; -1 where
// none came). Returns recvmsg()'s result (sizeof(rkf_welcome) for a whole welcome), or -1
// with errno = ETIMEDOUT when nothing came in time.
inline ssize_t recv_welcome(int s, rkf_welcome &w, int fds[2], int timeout_ms = 5000)
{
    fds[0] = fds[1] = -1;
    pollfd pfd{s, POLLIN, 0};
    const int pr = poll(&pfd, 1, timeout_ms);
    if (pr <= 0) {
        if (pr == 0) errno = ETIMEDOUT;
        return -1;
    }
    iovec iov{&w, sizeof w};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    const ssize_t got = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
    if (got < 0) return got;
    for (cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            std::memcpy(fds, CMSG_DATA(c),
                        std::min<size_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int), 2) * sizeof(int));
    }
    return got;
}

// The welcome of a bridge that accepts: status RKF_WELCOME_OK and the ring geometry.
inline rkf_welcome make_welcome_ok()
{
    rkf_welcome w{};
    w.magic = RKF_HELLO_MAGIC;
    w.version = RKF_PROTO_VERSION;
    w.status = RKF_WELCOME_OK;
    w.ring_slots = RKF_RING_SLOTS;
    w.slot_size = RKF_SLOT_SIZE;
    w.max_nodes = RKF_MAX_NODES;
    return w;
}

// The bridge's side: send `w` on connection `c`, with the port's shared memory and doorbell
// descriptors when shm_fd >= 0. True if the whole welcome went out.
inline bool send_welcome(int c, const rkf_welcome &w, int shm_fd = -1, int bell_fd = -1)
{
    iovec iov{const_cast<rkf_welcome *>(&w), sizeof w};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))]{};
    if (shm_fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
        int fds[2] = {shm_fd, bell_fd};
        std::memcpy(CMSG_DATA(cm), fds, sizeof fds);
    }
    return sendmsg(c, &mh, MSG_NOSIGNAL) == ssize_t(sizeof w);
}

} // namespace rackemu::fabric::test
