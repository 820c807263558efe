// SPDX-License-Identifier: MIT
// libFuzzer harness of the Unimem global address space window core (hw/unimem/gas.h) over the
// one-sided remote memory transport it uses in a node (hw/fabric/rk_remote_mem.h);
// docs/fuzzing.md.
//
// The node's RAM is a small buffer (kRamSize bytes at kRamBase) filled from the input. The
// node's fabric port is replaced by the adapter below: it records the services registered with
// it, and answers every request the transport sends with a reply the input chooses (genuine,
// refused, wrong length, forged source or operation, link down during the call, or none: the
// call then times out after 1 ms, at most twice per run).
// Input: one config byte (node id, node count), then operations
//   0 window load (node, address, size)   1 window store (node, address, value, size)
//   2 control page load / store           3 write guest RAM (offset, length, bytes)
//   4 an RKF_SVC_MEM request from another node (header fields + payload), served by the transport
//   5 a stray or late RKF_SVC_MEM reply   6 link down
// Checked: a load's value fits its size; the counter registers are the core's counters and a
// saved state loads back; every reply the service sends is well formed (an OK read reply carries
// exactly the bytes asked for and they are the RAM's).
#include "fuzz_input.h"

#include <cerrno>
#include <string>
#include <vector>

#include "gas.h"
#include "rk_remote_mem.h"
#include "test_host.h"

using namespace rackemu::unimem;
using rackemu::fuzz::Input;

namespace {
constexpr uint64_t kRamBase = 0x40000000, kRamSize = 0x1000;
Input *g_in = nullptr; // the current input, for the replies the fake port makes up
} // namespace

// ---- adapter: the node's fabric port (rk_fabric_port.h) and the GAS core's host ----
struct RkFabricPort {
    unsigned node_id = 0;
    rk_fabric_request_fn on_request = nullptr;
    rk_fabric_reply_fn on_reply = nullptr;
    rk_fabric_link_fn on_link = nullptr;
    void *opaque = nullptr;
    unsigned timeouts_left = 2;
    // The last reply the service under test sent.
    bool replied = false;
    rkf_frame_hdr reply_hdr{};
    unsigned char reply_payload[RKF_MAX_PAYLOAD];
};

extern "C" {
void rk_fabric_port_register(RkFabricPort *p, unsigned svc, rk_fabric_request_fn on_request,
                             rk_fabric_reply_fn on_reply, rk_fabric_link_fn on_link, void *opaque)
{
    FUZZ_CHECK(svc == RKF_SVC_MEM);
    p->on_request = on_request;
    p->on_reply = on_reply;
    p->on_link = on_link;
    p->opaque = opaque;
}

// The link is up: remote memory's requests reach the fake port (rk_fabric_endpoint_up()).
int rk_fabric_port_is_up(RkFabricPort *)
{
    return 1;
}

// Replies come synchronously from rk_fabric_port_send below: nothing to drive.
int rk_fabric_port_drive(RkFabricPort *, int (*done)(void *), void *arg, uint64_t)
{
    return done(arg);
}

int rk_fabric_port_send(RkFabricPort *p, struct rkf_frame_hdr *h, const void *payload)
{
    FUZZ_CHECK(h->len <= RKF_MAX_PAYLOAD && (h->len == 0 || payload));
    FUZZ_CHECK(h->svc == RKF_SVC_MEM && h->type == RKF_T_REQ);
    h->src = uint16_t(p->node_id);
    Input &in = *g_in;
    rkf_mem_req req{};
    std::memcpy(&req, payload, sizeof req);
    FUZZ_CHECK(req.len >= 1 && req.len <= RKF_MEM_CHUNK);
    rkf_frame_hdr r{};
    r.magic = RKF_FRAME_MAGIC;
    r.type = RKF_T_REPLY;
    r.svc = h->svc;
    r.op = h->op;
    r.src = h->dst;
    r.dst = h->src;
    r.tag = h->tag;
    unsigned char data[RKF_MAX_PAYLOAD];
    const uint8_t mode = in.u8() % 8;
    switch (mode) {
    case 0: // genuine
    case 1:
        r.len = h->op == RKF_OP_MEM_READ ? uint16_t(req.len) : 0;
        in.bytes(data, r.len);
        break;
    case 2: // error status
        r.status = uint16_t(1 + in.u8() % 7);
        break;
    case 3: // wrong length
        r.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
        in.bytes(data, r.len);
        break;
    case 4: // forged source or operation, then the genuine one
    {
        rkf_frame_hdr f = r;
        if (in.u8() & 1)
            f.src = uint16_t(in.u8() % RKF_MAX_NODES);
        else
            f.op = in.u16();
        std::memset(data, 0, sizeof data);
        f.len = h->op == RKF_OP_MEM_READ ? uint16_t(req.len) : 0;
        p->on_reply(p->opaque, &f, data);
        r.len = f.len;
        break;
    }
    case 5: // the link goes down during the call
        p->on_link(p->opaque, 0);
        return in.u8() & 1 ? -ENOTCONN : 0;
    case 6: // the send fails
        return -int(in.u8() & 1 ? EAGAIN : ENOTCONN);
    case 7: // no answer: the call times out
        if (p->timeouts_left) {
            p->timeouts_left--;
            return 0;
        }
        break;
    }
    p->on_reply(p->opaque, &r, data);
    return 0;
}

int rk_fabric_port_reply(RkFabricPort *p, const struct rkf_frame_hdr *req, uint16_t status,
                         const void *payload, uint16_t len)
{
    FUZZ_CHECK(len <= RKF_MAX_PAYLOAD && (len == 0 || payload));
    p->replied = true;
    p->reply_hdr = rkf_frame_hdr{};
    p->reply_hdr.type = RKF_T_REPLY;
    p->reply_hdr.svc = req->svc;
    p->reply_hdr.op = req->op;
    p->reply_hdr.dst = req->src;
    p->reply_hdr.status = status;
    p->reply_hdr.len = len;
    p->reply_hdr.tag = req->tag;
    if (len) std::memcpy(p->reply_payload, payload, len);
    return 0;
}
} // extern "C"

namespace {
// The core's host: the window's DMA goes through remote memory, as the QEMU glue routes it.
struct Host {
    RkRemoteMem *rmem = nullptr;
    rackemu::test::TestHost th;
    rackemu::Host make(RkFabricPort *port, unsigned node_id, unsigned node_count)
    {
        th.dma_rw = [this](uint64_t addr, void *buf, uint64_t len, bool write) {
            FUZZ_CHECK(addr >= GAS_WINDOW_BASE && len >= 1 && len <= 8);
            const uint64_t g = addr - GAS_WINDOW_BASE;
            const unsigned node = unsigned(UNIMEM_GADDR_NODE(g));
            const int rc = write ? rk_rmem_write(rmem, node, UNIMEM_GADDR_LOCAL(g), buf, len)
                                 : rk_rmem_read(rmem, node, UNIMEM_GADDR_LOCAL(g), buf, len);
            return rc == RK_RMEM_OK ? RK_OK : rc == RK_RMEM_DECODE_ERR ? RK_DECODE_ERROR : RK_UNREACHABLE;
        };
        th.guest_error = [](const std::string &) {};
        return th.host(port, rmem, node_id, node_count);
    }
};
// ---- end of adapter ----

const unsigned kSizes[] = {1, 2, 4, 8, 3, 0, 16};

uint64_t window_offset(Input &in, unsigned node_count)
{
    const unsigned node = in.u8() % (node_count + 1);
    const uint8_t kind = in.u8();
    uint64_t local;
    if (kind < 0xc0)
        local = kRamBase - 0x10 + in.u16() % (kRamSize + 0x20);
    else if (kind < 0xe0)
        local = GAS_WINDOW_NODE_SIZE - 1 - in.u8() % 16;
    else
        local = in.u64();
    return uint64_t(node) * GAS_WINDOW_NODE_SIZE + local;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    g_in = &in;
    const uint8_t cfg = in.u8();
    const unsigned node_count = 1 + (cfg & 3), node_id = (cfg >> 2) % node_count;
    std::vector<uint8_t> ram(kRamSize);
    RkFabricPort port;
    port.node_id = node_id;
    RkRemoteMem *rmem = rk_rmem_new((cfg & 0x80) ? nullptr : &port, node_id, kRamBase, kRamSize, ram.data(),
                                    1, nullptr, nullptr);
    Host host;
    host.rmem = rmem;
    Gas gas(host.make((cfg & 0x80) ? nullptr : &port, node_id, node_count));
    for (unsigned ops = 0; !in.empty() && ops < 1024; ops++) {
        switch (in.u8() % 7) {
        case 0: {
            const uint64_t off = window_offset(in, node_count);
            const unsigned sz = kSizes[in.u8() % 7];
            uint64_t v = ~0ull;
            if (gas.window_read(off, sz, v) == RK_OK && sz < 8) FUZZ_CHECK(v >> (8 * sz) == 0);
            break;
        }
        case 1: {
            const uint64_t off = window_offset(in, node_count);
            const uint64_t v = in.u64();
            gas.window_write(off, v, kSizes[in.u8() % 7]);
            break;
        }
        case 2: {
            const uint64_t off = in.u16() % (GAS_CTRL_SIZE + 0x10);
            const unsigned sz = kSizes[in.u8() % 7];
            if (in.u8() & 1)
                gas.ctrl_write(off, in.u64(), sz);
            else
                (void)gas.ctrl_read(off, sz);
            // the counter registers are the core's counters; a saved state loads back unchanged
            FUZZ_CHECK(gas.ctrl_read(GAS_CTRL_BUS_ERRORS, 8) == gas.counters().bus_errors);
            FUZZ_CHECK(gas.load(gas.save()));
            FUZZ_CHECK(gas.ctrl_read(GAS_CTRL_LOADS, 8) == gas.counters().loads);
            break;
        }
        case 3: {
            const uint32_t off = in.u16() % kRamSize;
            in.bytes(ram.data() + off, std::min<uint32_t>(in.u8(), uint32_t(kRamSize - off)));
            break;
        }
        case 4: {
            if (!port.on_request) break;
            rkf_frame_hdr h{};
            h.magic = RKF_FRAME_MAGIC;
            h.type = uint8_t(1 + in.u8() % 3);
            h.svc = RKF_SVC_MEM;
            h.op = in.u8() % 4;
            h.src = in.u8() % RKF_MAX_NODES;
            h.dst = uint16_t(node_id);
            h.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
            h.tag = in.u64();
            unsigned char payload[RKF_MAX_PAYLOAD] = {};
            if (in.u8() & 1) { // a request shaped like a real one, mostly inside RAM
                rkf_mem_req req{};
                req.addr = kRamBase - 8 + in.u16() % (kRamSize + 16);
                req.len = in.u8();
                std::memcpy(payload, &req, sizeof req);
                h.len = uint16_t(std::min<uint32_t>(
                    uint32_t(sizeof req) + (h.op == RKF_OP_MEM_WRITE ? req.len : 0), RKF_MAX_PAYLOAD));
                in.bytes(payload + sizeof req, h.len - sizeof req);
            } else {
                in.bytes(payload, h.len);
            }
            port.replied = false;
            port.on_request(port.opaque, &port, &h, payload);
            if (port.replied && port.reply_hdr.status == RKF_ST_OK && h.op == RKF_OP_MEM_READ) {
                rkf_mem_req req;
                std::memcpy(&req, payload, sizeof req);
                FUZZ_CHECK(port.reply_hdr.len == req.len);
                FUZZ_CHECK(std::memcmp(port.reply_payload, ram.data() + (req.addr - kRamBase), req.len) == 0);
            }
            if (h.type != RKF_T_REQ) FUZZ_CHECK(!port.replied);
            break;
        }
        case 5: {
            if (!port.on_reply) break;
            rkf_frame_hdr h{};
            h.type = RKF_T_REPLY;
            h.svc = RKF_SVC_MEM;
            h.op = in.u8() % 4;
            h.src = in.u8() % RKF_MAX_NODES;
            h.status = in.u8() % 8;
            h.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
            h.tag = in.u64();
            unsigned char payload[RKF_MAX_PAYLOAD] = {};
            port.on_reply(port.opaque, &h, payload);
            break;
        }
        case 6:
            if (port.on_link) port.on_link(port.opaque, in.u8() & 1);
            break;
        }
    }
    rk_rmem_free(rmem);
    g_in = nullptr;
    return 0;
}
