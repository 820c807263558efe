// SPDX-License-Identifier: MIT
// libFuzzer harness of a node's fabric port (platform/fabric/port.cc with shm_ring.h): the
// handshake answer and the shared memory it hands over, and the to_node ring the bridge
// produces, both from an untrusted peer; docs/fuzzing.md.
//
// The harness plays the bridge: a thread answers the port's rkf_hello with a welcome made from
// the input (status, magic, ring geometry) and two memfds (sealed or not, large enough or not,
// with a good or bad magic). If the port comes up, the input's frames are written into the
// to_node ring as raw slots (any header, any length) and the port's thread dispatches them to
// the services registered below; a bogus head index must take the link down.
// Input: welcome byte, then operations
//   0 a frame into to_node (header fields, payload)   1 bogus to_node head index
//   2 let the port consume what is queued
//   3 an Ethernet frame as fragments (fabric_proto.h), one field of one fragment maybe mutated
// Checked: the port never sends an invalid frame (every frame in to_bridge passes
// frame_defect and carries the port's node id; its Ethernet fragments reassemble without a
// defect); services see only valid frames of their svc; an Ethernet receiver sees only whole
// frames of 14..9216 bytes (and echoes each, so the send path runs too).
#include "fuzz_input.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fabric_handshake.h" // tests/unit: the handshake the unit tests' fake bridge speaks
#include "rk_fabric_port.h"
#include "eth_frag.h"
#include "shm_ring.h"

using namespace rackemu::fabric;
using namespace rackemu::fabric::test;
using rackemu::fuzz::Input;

namespace {

constexpr unsigned kNode = 1;

// ---- adapter: a fake bridge (handshake answers from the input) and the port's services ----
struct Plan { // the welcome the fake bridge gives the next handshake
    bool armed = false;
    rkf_welcome w{};
    int shm_fd = -1, bell_fd = -1;
    bool send_fds = true;
};

struct FakeBridge {
    std::string dir, path;
    int lfd = -1;
    std::mutex mu;
    Plan plan;
    std::thread thr;
    FakeBridge()
    {
        dir = rackemu::fuzz::temp_dir_removed_at_exit("rackemu-fuzz-port");
        path = dir + "/fabric.sock";
        lfd = unix_listen(path, 16);
        if (lfd < 0) std::abort();
        thr = std::thread([this] { serve(); });
        thr.detach(); // lives as long as the process
    }
    void serve()
    {
        for (;;) {
            int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            rkf_hello h{};
            pollfd pfd{c, POLLIN, 0};
            if (poll(&pfd, 1, 1000) <= 0 || recv(c, &h, sizeof h, 0) != sizeof h) {
                close(c);
                continue;
            }
            Plan p;
            {
                std::lock_guard lk(mu);
                p = plan;
                plan.armed = false; // one handshake per run; a reconnect is refused
            }
            rkf_welcome w{};
            if (p.armed) {
                w = p.w;
            } else {
                w.magic = RKF_HELLO_MAGIC;
                w.version = RKF_PROTO_VERSION;
                w.status = RKF_WELCOME_BAD_NODE;
            }
            if (p.armed && p.send_fds)
                (void)send_welcome(c, w, p.shm_fd, p.bell_fd);
            else
                (void)send_welcome(c, w);
            // keep the connection open while the port lives (its hang-up means "bridge gone")
            std::lock_guard lk(mu);
            conns.push_back(c);
        }
    }
    std::vector<int> conns;
    void close_conns()
    {
        std::lock_guard lk(mu);
        for (int c : conns)
            close(c);
        conns.clear();
    }
};

FakeBridge *bridge()
{
    static FakeBridge *b = new FakeBridge;
    return b;
}

struct Services {
    std::atomic<unsigned> requests{0}, replies{0}, links{0};
    static void on_request(void *o, RkFabricPort *port, const rkf_frame_hdr *h, const void *payload)
    {
        auto *s = static_cast<Services *>(o);
        FUZZ_CHECK(frame_defect(*h) == nullptr && h->type != RKF_T_REPLY);
        FUZZ_CHECK(h->len == 0 || payload);
        s->requests++;
        if (h->type == RKF_T_REQ) rk_fabric_port_reply(port, h, RKF_ST_OK, payload, h->len);
    }
    static void on_reply(void *o, const rkf_frame_hdr *h, const void *)
    {
        FUZZ_CHECK(frame_defect(*h) == nullptr && h->type == RKF_T_REPLY);
        static_cast<Services *>(o)->replies++;
    }
    static void on_link(void *o, int) { static_cast<Services *>(o)->links++; }
    static void on_eth(void *o, const uint8_t *f, size_t len, unsigned src)
    {
        FUZZ_CHECK(f && len >= RKF_ETH_MIN_FRAME && len <= RKF_ETH_MAX_FRAME && src < RKF_MAX_NODES);
        static_cast<Services *>(o)->frames++;
        (void)rk_fabric_port_eth_send(static_cast<Services *>(o)->port, f, len); // may be -EAGAIN
    }
    std::atomic<unsigned> frames{0};
    RkFabricPort *port = nullptr;
};
// ---- end of adapter ----

int sealed(const char *name, size_t size, bool seal)
{
    int fd = memfd_create(name, MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0u));
    if (fd < 0 || ftruncate(fd, off_t(size)) < 0) std::abort();
    if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) std::abort();
    return fd;
}

void wait_consumed(RkFabricPort *port, Ring &ring)
{
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (rk_fabric_port_is_up(port) && !ring_empty(ring) && std::chrono::steady_clock::now() < end) {
        futex_wake(&ring.ctl.sleeping);
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

void check_sent(PortShm *shm)
{
    rkf_frame_hdr h;
    unsigned char payload[RKF_SLOT_SIZE];
    PopResult r;
    static EthReassembler as;
    as.reset();
    while ((r = ring_pop(shm->to_bridge, h, payload)) == PopResult::Ok) {
        FUZZ_CHECK(frame_defect(h) == nullptr);
        FUZZ_CHECK(h.src == kNode);
        if (h.svc == RKF_SVC_ETH) {
            FUZZ_CHECK(as.feed(h, payload) != EthReassembler::Result::Bad);
        } else {
            FUZZ_CHECK(!as.interrupt());
        }
    }
    FUZZ_CHECK(r == PopResult::Empty);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FakeBridge *b = bridge();
    Input in(data, size);
    const uint8_t wb = in.u8();
    // the welcome and the shared memory: mostly right, each defect chosen by a bit
    const bool seal = !(wb & 1), short_shm = wb & 2, bad_magic = wb & 4, bad_geometry = wb & 8,
               refuse = wb & 16, no_fds = wb & 32;
    const int shm_fd = sealed("fuzz-port", short_shm ? 4096 : sizeof(PortShm), seal);
    const int bell_fd = sealed("fuzz-bell", sizeof(Doorbell), seal);
    PortShm *shm = static_cast<PortShm *>(
        mmap(nullptr, short_shm ? 4096 : sizeof(PortShm), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0));
    FUZZ_CHECK(shm != MAP_FAILED);
    shm->magic = bad_magic ? in.u32() : RKF_SHM_MAGIC;
    if (bad_magic && shm->magic == RKF_SHM_MAGIC) shm->magic ^= 2;
    shm->version = RKF_PROTO_VERSION;
    {
        std::lock_guard lk(b->mu);
        Plan &p = b->plan;
        p = Plan{};
        p.armed = true;
        p.w = make_welcome_ok();
        if (refuse) p.w.status = uint16_t(in.u16());
        if (bad_geometry) {
            p.w.ring_slots = in.u32();
            p.w.slot_size = in.u32();
            if (p.w.ring_slots == RKF_RING_SLOTS && p.w.slot_size == RKF_SLOT_SIZE) p.w.slot_size++;
        }
        in.bytes(p.w.message, (wb & 64) ? sizeof p.w.message : 0); // not NUL-terminated
        p.shm_fd = shm_fd;
        p.bell_fd = bell_fd;
        p.send_fds = !no_fds;
    }
    char err[256] = "";
    RkFabricPort *port = rk_fabric_port_new(b->path.c_str(), kNode, 4, 0 /* caps */, 0, err, sizeof err);
    FUZZ_CHECK(std::strlen(err) < sizeof err);
    Services svc;
    if (port && rk_fabric_port_is_up(port) && !short_shm) {
        for (unsigned s : {RKF_SVC_UNIMEM_MBOX, RKF_SVC_MEM, RKF_SVC_RMC})
            rk_fabric_port_register(port, s, Services::on_request, Services::on_reply, Services::on_link,
                                    &svc);
        svc.port = port;
        rk_fabric_port_eth_attach(port, RK_FABRIC_ETH_NET, Services::on_eth, &svc);
        rk_fabric_port_start(port);
        Ring &ring = shm->to_node;
        for (unsigned ops = 0; !in.empty() && ops < 512; ops++) {
            switch (in.u8() % 4) {
            case 0: {
                rkf_frame_hdr h{};
                const uint8_t flags = in.u8();
                h.magic = (flags & 1) ? in.u32() : RKF_FRAME_MAGIC;
                h.type = (flags & 2) ? in.u8() : uint8_t(1 + in.u8() % 3);
                h.svc = (flags & 4) ? in.u8() : uint8_t(in.u8() % RKF_SVC_COUNT);
                h.op = in.u8();
                h.src = in.u8() % 8;
                h.dst = (flags & 8) ? in.u16() : uint16_t(kNode);
                h.len = (flags & 16) ? in.u16() : uint16_t(in.u8() % (RKF_MAX_PAYLOAD + 1));
                h.status = in.u8() % 8;
                h.tag = in.u8();
                const uint32_t head = ring.ctl.head.load(std::memory_order_relaxed);
                if (head - ring.ctl.tail.load(std::memory_order_acquire) >= RKF_RING_SLOTS) {
                    wait_consumed(port, ring);
                    if (head - ring.ctl.tail.load(std::memory_order_acquire) >= RKF_RING_SLOTS) break;
                }
                unsigned char *slot = ring.slots[head % RKF_RING_SLOTS];
                std::memcpy(slot, &h, sizeof h);
                in.bytes(slot + sizeof h, std::min<uint32_t>(h.len, RKF_MAX_PAYLOAD));
                ring.ctl.head.store(head + 1, std::memory_order_release);
                futex_wake(&ring.ctl.sleeping);
                break;
            }
            case 1: {
                wait_consumed(port, ring);
                ring.ctl.head.store(ring.ctl.tail.load() + (in.u32() | 0x800), std::memory_order_release);
                futex_wake(&ring.ctl.sleeping);
                const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                while (rk_fabric_port_is_up(port) || svc.links == 0) { // corrupt: the link must go down
                    FUZZ_CHECK(std::chrono::steady_clock::now() < end);
                    futex_wake(&ring.ctl.sleeping);
                    std::this_thread::sleep_for(std::chrono::microseconds(20));
                }
                break;
            }
            case 2:
                wait_consumed(port, ring);
                break;
            case 3: {
                static unsigned char frame[RKF_ETH_MAX_FRAME];
                const uint16_t len =
                    uint16_t(RKF_ETH_MIN_FRAME + in.u16() % (RKF_ETH_MAX_FRAME - RKF_ETH_MIN_FRAME + 1));
                in.bytes(frame, std::min<size_t>(len, 64));
                const unsigned n = RKF_ETH_FRAGS(len);
                const uint8_t mutate = in.u8(); // which fragment (if < n) and which field
                const unsigned which = in.u8();
                rkf_frame_hdr t{};
                t.magic = RKF_FRAME_MAGIC;
                t.src = in.u8() % 8;
                t.dst = kNode;
                wait_consumed(port, ring);
                if (ring_room(ring) < n) break;
                const uint32_t head = ring.ctl.head.load(std::memory_order_relaxed);
                for (unsigned i = 0; i < n; i++) {
                    unsigned char *slot = ring.slots[(head + i) % RKF_RING_SLOTS];
                    eth_frag_write(slot, t, frame, len, 7, i);
                    if (i == mutate) { // one field of this fragment replaced from the input
                        const size_t off = which % (sizeof(rkf_frame_hdr) + sizeof(rkf_eth_frag));
                        slot[off] = in.u8();
                    }
                }
                ring.ctl.head.store(head + n, std::memory_order_release);
                futex_wake(&ring.ctl.sleeping);
                break;
            }
            }
            if (!rk_fabric_port_is_up(port)) break;
        }
        wait_consumed(port, ring);
        check_sent(shm);
    } else if (port) {
        FUZZ_CHECK(!rk_fabric_port_is_up(port) || (!short_shm && !bad_magic && !refuse && !no_fds && seal));
    }
    if (port) {
        // the port must not have accepted memory it should have refused
        if (short_shm || !seal || no_fds || bad_geometry || bad_magic) FUZZ_CHECK(svc.requests == 0);
    }
    rk_fabric_port_free(port);
    b->close_conns();
    munmap(shm, short_shm ? 4096 : sizeof(PortShm));
    close(shm_fd);
    close(bell_fd);
    return 0;
}
