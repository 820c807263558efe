// SPDX-License-Identifier: MIT
// libFuzzer harness of the soNUMA RMC core (hw/sonuma/rmc.h, with the R2P2's HostSabreServer);
// docs/fuzzing.md. The R2P2 state machine alone is fuzzed by fuzz_r2p2.
//
// Guest RAM is a 64 KiB buffer at kRamBase filled from the input (WQs, CQs, segments). The
// node's fabric is the adapter below: frames the RGP sends are recorded; the input answers them.
// Input: one config byte (node count, speculation), then operations
//   0 MMIO store (region, register, value, size)   1 MMIO load
//   2 write guest RAM (offset, length, bytes)       3 a request frame from another node (R2P2)
//   4 answer a recorded frame: DATA chunk(s) and/or reply, faithful or made up by the input
//   5 a stray DATA message or reply (random tag)   6 link down / up
//   7 let the RGP run (wait until it fetched every posted WQE, at most ~2 ms)   8 reset
//   9 shortcut: configure a valid context and QP (so the input reaches the pipelines at once)
//  10 pause / resume (frames arriving meanwhile are held)
//  11 save -> (optionally corrupted, truncated or extended) load of the state's byte string into
//     the same core; an intact state must load, a truncated or extended one must not
//  12 host faults: DMA maps refused (the core falls back to dma_read/dma_write) or DMA failing
//  13 the direct path's peer (every other node): its RAM and its published table (struct rmc_pub,
//     made up by the input or a valid one), and what the direct run answers (no direct path,
//     ran, unreachable); this node's own table is published into its tail page
// The RGP runs on its own thread as in QEMU, so a run is not exactly repeatable; the checks are
// the sanitizers' plus: every frame the core sends or replies with is well formed, every DMA map
// is unmapped, and a saved state loads.
// The host (RAM, interrupt line, guest errors, clock) is tests/unit/test_host.h.
#include "fuzz_input.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rmc.h"
#include "test_host.h"

using namespace rackemu::sonuma;
using rackemu::fuzz::Input;
using rackemu::test::TestHost;

namespace {

constexpr uint64_t kRamBase = 0x40000000, kRamSize = 0x10000;

// ---- adapter: the core's fabric link (RmcFabric) and its host (TestHost) ----
struct Sent {
    rkf_frame_hdr h;
    std::vector<uint8_t> payload;
};
struct Host {
    TestHost th{kRamSize, kRamBase};
    uint8_t *ram = th.ram.data();
    std::mutex mu;
    std::vector<Sent> sent; // frames the core sent (RGP thread, R2P2 data messages)
    std::vector<Sent> replies;
    bool up = true;
    unsigned irqs = 0, errors = 0;
    std::atomic<unsigned> fault{0}; // op 12: 1 maps refused, 2 DMA fails too
    Host()
    {
        auto set_irq = th.set_irq;
        th.set_irq = [this, set_irq](unsigned line, bool level) {
            FUZZ_CHECK(line == 0);
            __atomic_fetch_add(&irqs, 1, __ATOMIC_RELAXED);
            set_irq(line, level);
        };
        th.guest_error = [this](const std::string &) { __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED); };
        auto map = th.dma_map;
        th.dma_map = [this, map](uint64_t addr, uint64_t &len, bool write) -> void * {
            return fault.load() ? nullptr : map(addr, len, write);
        };
        auto rw = th.dma_rw;
        th.dma_rw = [this, rw](uint64_t addr, void *buf, uint64_t len, bool write) {
            return fault.load() == 2 ? RK_SLAVE_ERROR : rw(addr, buf, len, write);
        };
        th.now_ns = [] {
            return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count());
        };
    }
    static void check_frame(const rkf_frame_hdr &h, const void *p)
    {
        FUZZ_CHECK(h.len <= RKF_MAX_PAYLOAD && (h.len == 0 || p));
        FUZZ_CHECK(h.svc == RKF_SVC_RMC && h.dst < RKF_MAX_NODES);
    }
    RmcFabric make()
    {
        RmcFabric h;
        h.send = [this](rkf_frame_hdr &f, const void *p) {
            check_frame(f, p);
            std::lock_guard lk(mu);
            if (!up) return -ENOTCONN;
            if (sent.size() < 4096) {
                const auto *b = static_cast<const uint8_t *>(p);
                sent.push_back(Sent{f, std::vector<uint8_t>(b, b + f.len)});
            }
            return 0;
        };
        h.reply = [this](const rkf_frame_hdr &req, uint16_t st, const void *p, uint16_t len) {
            FUZZ_CHECK(len <= RKF_MAX_PAYLOAD && (len == 0 || p));
            FUZZ_CHECK(st != RKF_ST_OK || len == sizeof(rkf_rmc_done));
            std::lock_guard lk(mu);
            rkf_frame_hdr r = req;
            r.type = RKF_T_REPLY;
            r.status = st;
            r.len = len;
            const auto *b = static_cast<const uint8_t *>(p);
            if (replies.size() < 4096) replies.push_back(Sent{r, std::vector<uint8_t>(b, b + len)});
            return 0;
        };
        h.up = [this] {
            std::lock_guard lk(mu);
            return up;
        };
        return h;
    }
};
// ---- end of adapter ----

const unsigned kSizes[] = {8, 8, 8, 4, 1, 16};

uint64_t reg_offset(Input &in)
{
    const uint8_t region = in.u8();
    const uint16_t r = in.u16();
    switch (region % 6) {
    case 0:
        return (r % 0xc0) & ~7u; // global
    case 1:
        return RMC_QP_REG(r % 4, (r >> 8) % RMC_QP_STRIDE & ~7u); // QP 0..3
    case 2:
        return RMC_CTX_REG(r % 4, (r >> 8) % RMC_CTX_STRIDE & ~7u); // context 0..3
    case 3:
        return RMC_DB_REG(r % 4, (r >> 8) % 0x28 & ~7u); // doorbells
    case 4:
        return RMC_COUNTERS + (r % (RMC_CNT_COUNT * 8 + 16)); // counters
    default:
        return in.u32() % (RMC_MMIO_SIZE + 0x100); // anywhere
    }
}

void settle(Rmc &rmc)
{
    for (int i = 0; i < 100; i++) {
        bool idle = true;
        for (unsigned q = 0; q < 4 && idle; q++)
            idle =
                rmc.mmio_read(RMC_DB_REG(q, DB_WQ_HEAD), 8) == rmc.mmio_read(RMC_DB_REG(q, DB_WQ_TAIL), 8) ||
                !(rmc.mmio_read(RMC_QP_REG(q, QP_CTRL), 8) & QP_CTRL_EN);
        if (idle) return;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

void answer(Host &host, Rmc &rmc, Input &in)
{
    Sent f;
    {
        std::lock_guard lk(host.mu);
        if (host.sent.empty()) return;
        f = host.sent[in.u16() % host.sent.size()];
    }
    if (f.h.type != RKF_T_REQ || f.payload.size() < sizeof(rkf_rmc_req)) return;
    rkf_rmc_req req;
    std::memcpy(&req, f.payload.data(), sizeof req);
    rkf_frame_hdr h{};
    h.magic = RKF_FRAME_MAGIC;
    h.svc = RKF_SVC_RMC;
    h.src = in.u8() < 0xf0 ? f.h.dst : uint16_t(in.u8() % RKF_MAX_NODES);
    h.dst = f.h.src;
    h.tag = f.h.tag;
    const uint8_t mode = in.u8();
    uint8_t buf[RKF_MAX_PAYLOAD] = {};
    const bool data_op = f.h.op == RKF_OP_RMC_READ || f.h.op == RKF_OP_RMC_SABRE;
    if (data_op && (mode & 1)) { // DATA chunks, faithful unless the input bends them
        for (uint32_t x = 0; x < req.len; x += RMC_WIRE_DATA_MAX) {
            rkf_rmc_data d{};
            d.off = x;
            d.len = uint16_t(std::min<uint32_t>(RMC_WIRE_DATA_MAX, req.len - x));
            d.nblocks = uint16_t((d.len + RMC_BLOCK_SIZE - 1) / RMC_BLOCK_SIZE);
            if (mode & 4) {
                d.off = in.u32() % (req.len + 256);
                d.len = in.u16() % 256;
                d.flags = in.u8() % 4;
                d.nblocks = in.u16();
            }
            std::memcpy(buf, &d, sizeof d);
            in.bytes(buf + sizeof d, std::min<size_t>(d.len, RMC_WIRE_DATA_MAX));
            h.type = RKF_T_MSG;
            h.op = RKF_OP_RMC_DATA;
            h.len = uint16_t(sizeof d + std::min<size_t>(d.len, RMC_WIRE_DATA_MAX));
            if (mode & 8) h.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
            rmc.on_frame(h, buf);
            if (mode & 4) break;
        }
    }
    if (mode & 2) { // the reply
        rkf_rmc_done d{};
        d.status = mode & 0x10 ? in.u8() % 8 : RMC_ST_OK;
        d.info = in.u8();
        d.flags = in.u8() % 4;
        d.nblocks = req.nblocks;
        d.value = in.u64();
        d.r2p2_ns = in.u32();
        h.type = RKF_T_REPLY;
        h.op = f.h.op;
        h.status = mode & 0x20 ? in.u8() % 8 : RKF_ST_OK;
        h.len = mode & 0x40 ? in.u8() % (RKF_MAX_PAYLOAD + 1) : sizeof d;
        std::memcpy(buf, &d, sizeof d);
        rmc.on_reply(h, buf);
    }
}

void incoming_request(Rmc &rmc, Input &in, unsigned node_count)
{
    rkf_frame_hdr h{};
    h.magic = RKF_FRAME_MAGIC;
    h.type = in.u8() % 4;
    h.svc = RKF_SVC_RMC;
    h.op = in.u8() % 8;
    h.src = in.u8() % (node_count + 1);
    h.tag = in.u64();
    uint8_t buf[RKF_MAX_PAYLOAD] = {};
    const uint8_t shape = in.u8();
    if (shape & 1) { // shaped like a real request
        rkf_rmc_req r{};
        r.ctx = in.u8() % 5;
        r.qp = in.u8();
        r.xfer = in.u32();
        r.off = (shape & 2) ? in.u64() : in.u16() % 0x2100;
        r.len = (shape & 4) ? in.u32() : in.u16() % 0x2100;
        r.nblocks =
            uint16_t(r.len ? ((r.off % RMC_BLOCK_SIZE) + r.len + RMC_BLOCK_SIZE - 1) / RMC_BLOCK_SIZE : 0);
        if (shape & 8) r.nblocks = in.u16();
        r.flags = (shape & 0x10) ? in.u16() : (h.op == RKF_OP_RMC_SABRE ? RKF_RMC_F_REG : 0);
        r.key = (shape & 0x20) ? in.u64() : 0;
        std::memcpy(buf, &r, sizeof r);
        size_t extra = h.op == RKF_OP_RMC_WRITE                             ? r.len
                       : (h.op == RKF_OP_RMC_CAS || h.op == RKF_OP_RMC_FAA) ? 16
                                                                            : 0;
        h.len = uint16_t(std::min<size_t>(sizeof r + extra, RKF_MAX_PAYLOAD));
        if (shape & 0x40) h.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
        in.bytes(buf + sizeof r, h.len > sizeof r ? h.len - sizeof r : 0);
    } else {
        h.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
        in.bytes(buf, h.len);
    }
    rmc.on_frame(h, buf);
}

// The direct path's other side: every other node's RAM and tail page, and what
// rk_rmem_direct_run answers (0 no direct path, 1 runs the core's copy on them, 2 unreachable).
struct Peer {
    alignas(64) std::array<uint8_t, kRamSize> ram{};
    // the tails up to the end of the RMC's area, all the RMC reads of them (a whole tail is 1 MiB:
    // too much to clear for every input)
    alignas(64) std::array<uint8_t, RK_RMEM_TAIL_RMC_OFF + RK_RMEM_TAIL_RMC_SIZE> tail{};
    alignas(64) std::array<uint8_t, RK_RMEM_TAIL_RMC_OFF + RK_RMEM_TAIL_RMC_SIZE> own{}; // this node's
    std::atomic<unsigned> mode{0};
    RmcDirect make()
    {
        RmcDirect d;
        d.own = reinterpret_cast<rmc_pub *>(own.data() + RK_RMEM_TAIL_RMC_OFF);
        d.run = [this](unsigned node, rk_rmem_direct_fn fn, void *op, int *ret) -> int {
            FUZZ_CHECK(node != 0); // never this node itself
            const unsigned m = mode.load();
            if (m == 0) return RK_RMEM_NO_DIRECT;
            if (m == 2) return RK_RMEM_UNREACHABLE;
            const rk_rmem_view v{ram.data(), kRamBase, kRamSize, tail.data(), 0};
            *ret = fn(op, &v);
            return RK_RMEM_OK;
        };
        return d;
    }
    // op 13: the input sets the mode and writes the peer's RAM or table, or publishes a valid one
    void change(Input &in)
    {
        mode = in.u8() % 3;
        auto *pub = reinterpret_cast<rmc_pub *>(tail.data() + RK_RMEM_TAIL_RMC_OFF);
        switch (in.u8() % 3) {
        case 0: { // bytes of the table
            const uint32_t off = in.u16() % sizeof(rmc_pub);
            const uint32_t len = std::min<uint32_t>(in.u8() % 64, uint32_t(sizeof(rmc_pub) - off));
            uint8_t tmp[64];
            in.bytes(tmp, len);
            for (uint32_t i = 0; i < len; i++)
                __atomic_store_n(tail.data() + RK_RMEM_TAIL_RMC_OFF + off + i, tmp[i], __ATOMIC_RELAXED);
            break;
        }
        case 1: { // a valid table: context c readable by everyone with key k, over the peer's segment
            const unsigned c = in.u8() % RMC_CTX_COUNT;
            __atomic_store_n(&pub->magic, RMC_PUB_MAGIC, __ATOMIC_RELAXED);
            __atomic_store_n(&pub->flags, RMC_PUB_F_SERVING | (in.u8() & RMC_PUB_F_LLC), __ATOMIC_RELAXED);
            __atomic_store_n(&pub->ctx[c].valid, uint64_t(CTX_CTRL_VALID), __ATOMIC_RELAXED);
            __atomic_store_n(&pub->ctx[c].base, kRamBase + 0x8000 - (in.u8() & 1) * 0x100, __ATOMIC_RELAXED);
            __atomic_store_n(&pub->ctx[c].size, uint64_t(0x8000) << (in.u8() & 1), __ATOMIC_RELAXED);
            __atomic_store_n(&pub->ctx[c].perm, uint64_t(in.u8() & 0xf), __ATOMIC_RELAXED);
            __atomic_store_n(&pub->ctx[c].nodemask, ~0ull, __ATOMIC_RELAXED);
            __atomic_store_n(&pub->ctx[c].key, uint64_t(in.u8() & 1), __ATOMIC_RELAXED);
            __atomic_store_n(&pub->seq, uint64_t(in.u8() & 3), __ATOMIC_RELAXED); // odd: being changed
            break;
        }
        case 2: { // the peer's RAM
            const uint32_t off = in.u16() % kRamSize;
            const uint32_t len = std::min<uint32_t>(in.u8(), uint32_t(kRamSize - off));
            uint8_t tmp[256];
            in.bytes(tmp, len);
            for (uint32_t i = 0; i < len; i++)
                __atomic_store_n(ram.data() + off + i, tmp[i], __ATOMIC_RELAXED);
            break;
        }
        }
    }
};

void configure(Rmc &rmc, Input &in)
{
    const unsigned c = in.u8() % 4, q = in.u8() % 4;
    const uint8_t v = in.u8();
    rmc.mmio_write(RMC_CTX_REG(c, CTX_CTRL), 0, 8);
    rmc.mmio_write(RMC_CTX_REG(c, CTX_BASE), kRamBase + 0x8000, 8);
    rmc.mmio_write(RMC_CTX_REG(c, CTX_SIZE), 0x8000, 8);
    rmc.mmio_write(RMC_CTX_REG(c, CTX_PERM), 0xf, 8);
    rmc.mmio_write(RMC_CTX_REG(c, CTX_NODEMASK), ~0ull, 8);
    rmc.mmio_write(RMC_CTX_REG(c, CTX_LAYOUT), CTX_LAYOUT_VALID | ((v & 7) * 8), 8);
    rmc.mmio_write(RMC_CTX_REG(c, CTX_CTRL), CTX_CTRL_VALID, 8);
    rmc.mmio_write(RMC_QP_REG(q, QP_CTRL), 0, 8);
    rmc.mmio_write(RMC_QP_REG(q, QP_WQ_BASE), kRamBase + q * 0x1000, 8);
    rmc.mmio_write(RMC_QP_REG(q, QP_CQ_BASE), kRamBase + 0x4000 + q * 0x800, 8);
    rmc.mmio_write(RMC_QP_REG(q, QP_DEPTH_LOG2), 1 + (v >> 4) % 5, 8);
    rmc.mmio_write(RMC_QP_REG(q, QP_CTX), c, 8);
    rmc.mmio_write(RMC_QP_REG(q, QP_CTRL), QP_CTRL_EN | QP_CTRL_IRQ_EN, 8);
    rmc.mmio_write(RMC_REG_CTRL, RMC_CTRL_EN, 8);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in(data, size);
    const uint8_t cfg_byte = in.u8();
    RmcConfig cfg;
    const unsigned node_count = 1 + (cfg_byte & 3);
    cfg.speculation = !(cfg_byte & 4);
    cfg.timing.att_entries = 1 + ((cfg_byte >> 3) & 3);
    cfg.timing.sb_depth = 1 + ((cfg_byte >> 5) & 7);
    Host host;
    Peer peer;
    {
        Rmc rmc(cfg, host.th.host(nullptr, nullptr, 0, node_count), host.make(), peer.make());
        bool paused = false;
        for (unsigned ops = 0; !in.empty() && ops < 512; ops++) {
            switch (in.u8() % 14) {
            case 0: {
                const uint64_t off = reg_offset(in);
                const uint64_t v = in.u64();
                rmc.mmio_write(off, v, kSizes[in.u8() % 6]);
                break;
            }
            case 1: {
                const uint64_t off = reg_offset(in);
                (void)rmc.mmio_read(off, kSizes[in.u8() % 6]);
                break;
            }
            case 2: {
                const uint32_t off = in.u16() % kRamSize;
                const uint32_t len = std::min<uint32_t>(in.u8(), uint32_t(kRamSize - off));
                uint8_t tmp[256];
                in.bytes(tmp, len);
                for (uint32_t i = 0; i < len; i++)
                    __atomic_store_n(host.ram + off + i, tmp[i], __ATOMIC_RELAXED);
                break;
            }
            case 3:
                incoming_request(rmc, in, node_count);
                break;
            case 4:
                answer(host, rmc, in);
                break;
            case 5: {
                rkf_frame_hdr h{};
                h.magic = RKF_FRAME_MAGIC;
                h.svc = RKF_SVC_RMC;
                h.type = (in.u8() & 1) ? RKF_T_MSG : RKF_T_REPLY;
                h.op = h.type == RKF_T_MSG ? RKF_OP_RMC_DATA : in.u8() % 8;
                h.src = in.u8() % RKF_MAX_NODES;
                h.tag = in.u8();
                h.status = in.u8() % 8;
                h.len = in.u8() % (RKF_MAX_PAYLOAD + 1);
                uint8_t buf[RKF_MAX_PAYLOAD];
                in.bytes(buf, h.len);
                if (h.type == RKF_T_MSG)
                    rmc.on_frame(h, buf);
                else
                    rmc.on_reply(h, buf);
                break;
            }
            case 6: {
                const bool up = in.u8() & 1;
                {
                    std::lock_guard lk(host.mu);
                    host.up = up;
                }
                rmc.on_link(up);
                break;
            }
            case 7:
                settle(rmc);
                break;
            case 8:
                rmc.reset();
                break;
            case 9:
                configure(rmc, in);
                break;
            case 10:
                paused = !paused;
                rmc.pause(paused);
                break;
            case 11: { // the state as the adapter migrates it: one byte string
                rackemu::StateOut out;
                rmc.save(out);
                std::vector<uint8_t> b = out.bytes();
                const size_t len = b.size();
                const uint8_t how = in.u8();
                if ((how & 1) && !b.empty()) // corrupt one byte
                    b[in.u32() % b.size()] ^= uint8_t(1 + in.u8() % 255);
                else if (how & 2) // truncated, or with bytes left over
                    b.resize((how & 4) ? len + 1 + in.u8() % 16 : in.u32() % (len + 1));
                rackemu::StateIn sin(b.data(), b.size(), RmcState::kMaxXfers);
                std::string why;
                const bool ok = rmc.load(sin, &why);
                if (!(how & 1) && b.size() != len) FUZZ_CHECK(!ok && !sin.why().empty());
                if (!(how & 3) && !host.fault.load())
                    FUZZ_CHECK(ok); // an intact state always loads (RAM is mappable)
                break;
            }
            case 12:
                host.fault = in.u8() % 3;
                break;
            case 13:
                peer.change(in);
                break;
            }
        }
        if (paused) rmc.pause(false);
        host.fault = 0;
        settle(rmc);
    }
    FUZZ_CHECK(host.th.maps.load() == 0);
    return 0;
}
