// SPDX-License-Identifier: MIT
// The soNUMA Remote Memory Controller (RMC) with LightSABRes: the device core, independent of
// QEMU (the SABRes paper sec. 4-5; interface in hw/include/rackemu/sonuma_regs.h, docs/sonuma.md).
//
// Pipelines (the SABRes paper sec. 5):
//  - RGP (request generation) runs on a thread of its own. A doorbell store only records the
//    new WQ tail and wakes it, so a vCPU never waits for the fabric. It fetches WQEs from guest
//    memory, checks them (a malformed request completes at once with BAD_REQUEST and nothing
//    is sent), unrolls them into request frames (READ: up to 128 block requests per frame; WRITE:
//    3 blocks of data per frame; SABRe: one frame, the registration packet followed by all of
//    its block requests) and sends them within a per-destination window of block requests.
//  - R2P2 (remote request processing) serves other nodes' frames on the fabric port thread
//    against this node's memory: context, node mask, permission and bounds checks, then reads
//    (DATA messages of up to 3 blocks), writes, atomics, and SABRes through the ATT and stream
//    buffers of HostSabreServer (r2p2.h), answering with the validation packet.
//  - RCP (request completion) writes reply data into the local segment as it arrives and the
//    CQ entry when the last frame of a transfer is answered, then raises the QP's interrupt.
// A request to this node itself takes the same path without the fabric (hops = 0), so a lone
// node (qtest, firmware) exercises all three pipelines.
//
// Host (rackemu/host.h): the core reaches guest memory, its interrupt line, the guest-error log
// and the clock only through a rackemu::Host; its fabric link (RmcFabric) is by default the RMC
// service's endpoint host.ep() (RKF_SVC_RMC, which the adapter binds to the node's port before it
// creates the core: rk_rmc_device_ops in rmc_capi.h), and the unit tests and the fuzzer give a
// link of their own (an in-process fabric). The RGP thread tells the host when it starts and
// ends (host.thread: an RCU reader in QEMU).
//  - Guest memory: every access (WQEs, CQEs, local buffers, the served side's segments, SABRe
//    objects) maps the range with host.dma_map for the duration of that access and unmaps it at
//    once (so QEMU's dirty tracking and translated-code invalidation see every write), and goes
//    through host.dma_read/dma_write if the range cannot be mapped. On a mapping, every aligned
//    8-byte word is one single-copy atomic access, in ascending order; CAS and FAA on the served
//    side map their 8-byte word and run the host's atomic instruction on it, so they are atomic
//    with respect to the vCPUs (TCG's atomics are host atomics on the same RAM) and to other
//    nodes' requests. A SABRe maps its whole object (read) for the time it is served: the
//    conflict detection reads live memory. WQ, CQ and context segments are checked mappable
//    (RAM) when the QP or context is enabled, as "entirely in RAM" was checked before.
//  - Time: transfer deadlines and the CQE's wall_ns use host.now_ns(), the VM's clock (in QEMU
//    QEMU_CLOCK_VIRTUAL: host speed while the VM runs, stopped while it is paused; under qtest
//    it moves only when the test steps it). The SABRe window delay is a host wall-clock spin in
//    r2p2.cc.
//  - Interrupt: line 0, its level (IRQ_STATUS & CTRL.EN) computed and passed to host.set_irq
//    under mu_, so the last call always carries the current level.
//
// Locks: mu_ guards the QP and context tables, transfers and the pending-tag table; every write
// into guest memory on the source side (reply data, CQ entries) happens under it, so disabling a
// QP or a context orphans its in-flight transfers before the register write returns. srv_mu_
// (shared by the R2P2, exclusive for context changes) keeps a segment from changing under a
// request being served. No lock is held while a frame is sent.
//
// Migration (docs/sonuma.md "Migration"): save() exports the architectural state (RmcState, its
// fields in the X-macros below, hw/core/state.h) with the threads quiesced (pause()); load()
// validates it and completes the transfers that were in flight with UNREACHABLE/LINK_DOWN
// (UNCERTAIN for a WRITE/CAS/FAA whose frame had left).
#ifndef RACKEMU_SONUMA_RMC_H
#define RACKEMU_SONUMA_RMC_H

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rackemu/fabric_proto.h"
#include "rackemu/host.h"
#include "rackemu/sonuma_regs.h"
#include "state.h"
#include "r2p2.h"
#include "rk_fabric_endpoint.h"
#include "rk_remote_mem.h"
#include "rmc_pub.h"
#include "timing.h"

namespace rackemu::sonuma {

struct RmcConfig {
    Timing timing;
    bool speculation = true;      // LightSABRes speculation (false: sec. 7.1 "no speculation")
    uint64_t window_delay_ns = 0; // test property: widen the host window of vulnerability
    uint32_t timeout_ms = 2000;   // a transfer not answered by then completes UNREACHABLE
    uint32_t window_blocks = RMC_DEF_WINDOW_BLOCKS; // block requests in flight per destination
    uint64_t seg_base = 0, seg_size = 0;            // the machine's reserved segment (informational)
    bool direct = true; // the direct path (RmcDirect): this node's READs, and its published table
};

// The RMC service's link to the node's fabric port (a device-specific link, not a host service):
// by default (empty) the endpoint host.ep() (from_endpoint); in the unit tests and the fuzzer an
// in-process fabric. Empty `send` and no endpoint: no fabric, only this node is reachable.
struct RmcFabric {
    // Send a frame; 0 or -errno (-ENOTCONN link down, -EAGAIN congested).
    std::function<int(rkf_frame_hdr &, const void *)> send;
    // Answer a request frame.
    std::function<int(const rkf_frame_hdr &, uint16_t status, const void *, uint16_t)> reply;
    std::function<bool()> up; // the link state (empty: up whenever `send` exists)

    static RmcFabric from_endpoint(RkFabricEndpoint *ep); // NULL: empty
};

// The direct path (docs/sonuma.md "Direct path"): in QEMU the node's one-sided remote memory
// (rk_rmem_direct_run, rk_rmem_tail_area: peers' RAM files mapped under the bridge's liveness
// table); in the unit tests and the fuzzer an in-process stand-in. Empty `run` or NULL `own`: off.
struct RmcDirect {
    // Run fn against `node`'s mapped RAM and tail page: RK_RMEM_OK (fn ran, the peer stayed the
    // same live incarnation; its result in *fn_ret), RK_RMEM_UNREACHABLE, RK_RMEM_NO_DIRECT.
    std::function<int(unsigned node, rk_rmem_direct_fn fn, void *opaque, int *fn_ret)> run;
    rmc_pub *own = nullptr; // this node's published table (in its tail page)

    static RmcDirect from_rmem(RkRemoteMem *m); // NULL, or no tail page: empty
};

// The architectural state (save()/load(); docs/sonuma.md "Migration"), described once
// (hw/core/state.h): the registers of every QP and context (the live Qp and Ctx inherit these
// structs, so a register is one line here), the global registers, the counters (as the guest
// reads them), and one record per transfer in flight, which completes after load with
// UNREACHABLE (UNCERTAIN for a WRITE, CAS or FAA whose request had left), info LINK_DOWN.
#define RK_RMC_QP_STATE(X) \
    X(uint64_t, wq_base) \
    X(uint64_t, cq_base) \
    X(uint64_t, depth_log2) \
    X(uint64_t, ctx) \
    X(uint64_t, ctrl) \
    X(uint32_t, wq_tail) \
    X(uint32_t, wq_head) \
    X(uint32_t, cq_head) \
    X(uint32_t, cq_tail) \
    X(uint32_t, inflight) \
    X(bool, cfg_err) \
    X(bool, err)
struct RmcQpState {
    RK_STATE_FIELDS(RK_RMC_QP_STATE)
};

#define RK_RMC_CTX_STATE(X) \
    X(uint64_t, base) \
    X(uint64_t, size) \
    X(uint64_t, perm) \
    X(uint64_t, nodemask) \
    X(uint64_t, layout) \
    X(uint64_t, ctrl) \
    X(uint64_t, key) \
    X(bool, cfg_err)
struct RmcCtxState {
    RK_STATE_FIELDS(RK_RMC_CTX_STATE)
};

// A transfer in flight: wr_id from its WQE, start_ns the host clock at fetch (the CQE's wall_ns
// counts from it), op RMC_OP_*, status what it completes with (UNREACHABLE or UNCERTAIN).
#define RK_RMC_XFER_STATE(X) \
    X(uint64_t, wr_id) \
    X(uint64_t, start_ns) \
    X(uint32_t, qp) \
    X(uint32_t, wq_index) \
    X(uint8_t, op) \
    X(uint8_t, status)
struct RmcXferState {
    RK_STATE_FIELDS(RK_RMC_XFER_STATE)
};

using RmcQpStates = std::array<RmcQpState, RMC_QP_COUNT>;
using RmcCtxStates = std::array<RmcCtxState, RMC_CTX_COUNT>;
using RmcCounterWords = Words<RMC_CNT_COUNT>;
using RmcXferStates = std::vector<RmcXferState>;
#define RK_RMC_STATE(X) \
    X(uint64_t, ctrl) \
    X(uint64_t, irq_status) \
    X(RmcQpStates, qp) \
    X(RmcCtxStates, ctx) \
    X(RmcCounterWords, counters) \
    X(RmcXferStates, xfer)
struct RmcState {
    static constexpr uint32_t kMaxXfers = RMC_QP_COUNT << RMC_DEPTH_LOG2_MAX; // every WQ slot
    RK_STATE_FIELDS(RK_RMC_STATE)
};

struct RmcWrite; // what a register write leaves to do after the locks (rmc.cc)
struct RmcRegs;  // the register bank's table and hooks (rmc.cc)

class Rmc {
public:
    Rmc(const RmcConfig &, Host host, RmcFabric fabric = {}, RmcDirect direct = {});
    ~Rmc();
    Rmc(const Rmc &) = delete;
    Rmc &operator=(const Rmc &) = delete;

    // MMIO (offset from the device base), decoded by the register bank (rmc.cc). Registers are
    // 64-bit; other widths read 0, writes are ignored, both logged.
    uint64_t mmio_read(uint64_t off, unsigned size);
    void mmio_write(uint64_t off, uint64_t value, unsigned size);
    void reset();
    bool irq_level(unsigned line = 0) const; // line 0, the only one

    // Fabric port callbacks (port thread).
    void on_frame(const rkf_frame_hdr &, const void *payload); // REQ or MSG for RKF_SVC_RMC
    void on_reply(const rkf_frame_hdr &, const void *payload);
    void on_link(bool up);

    uint64_t counter(unsigned cnt_off) const; // RMC_CNT_* offset
    HostSabreServer &sabre_server() { return sabre_; }
    // "NAME" or "NAME[i]" of the register at `off` (logs, traces), "unmapped" if none.
    std::string reg_name(uint64_t off) const;

    // Migration. pause(true) quiesces the core: the RGP thread stops, and frames arriving from
    // the fabric are queued (up to kPausedFrames; beyond, a request is answered CONGESTED and a
    // data message or reply is dropped: its transfer times out) until pause(false) handles them
    // in order. The adapter pauses while the VM is stopped. save() takes the state (any time:
    // under the locks); load() validates `s`, refuses anything out of range (false, the reason
    // naming the field in *why, nothing changed), else replaces the state, forgets the transfers
    // in flight here and completes those of `s`. The StateOut/StateIn forms are the device ops'
    // (rackemu/device.h: the state as one byte string).
    void pause(bool on);
    RmcState save() const;
    bool load(const RmcState &s, std::string *why = nullptr);
    void save(StateOut &out) const;
    bool load(StateIn &in, std::string *why);
    static constexpr size_t kPausedFrames = 4096;

private:
    struct Qp : RmcQpState {
        uint32_t gen = 0; // bumped when the QP is disabled: its transfers are orphaned
        bool enabled() const { return ctrl & QP_CTRL_EN; }
        uint32_t depth() const { return 1u << depth_log2; }
    };
    struct Ctx : RmcCtxState {
        uint32_t gen = 0;
        bool valid() const { return ctrl & CTX_CTRL_VALID; }
    };
    struct Frame {
        rkf_frame_hdr hdr{};
        std::vector<uint8_t> payload;
        uint64_t xoff = 0;
        uint32_t len = 0;
        uint32_t blocks = 0;
    };
    struct Transfer {
        uint64_t id = 0;
        unsigned qp = 0;
        uint32_t qp_gen = 0, ctx_gen = 0;
        rmc_wqe wqe{};
        uint16_t wq_index = 0;
        uint64_t local_addr = 0; // guest physical address of the local buffer (READ/SABRE)
        std::deque<Frame> unsent;
        unsigned outstanding = 0;
        uint8_t status = RMC_ST_OK, info = RMC_INFO_NONE;
        uint8_t cqe_flags = 0;
        uint64_t value = 0;
        double r2p2_ns = 0;
        bool llc = false; // the destination's data is LLC-resident (its reply's RKF_RMC_RF_LLC)
        uint64_t start_ns = 0, deadline_ns = 0; // mono_ns()
        // WRITE/CAS/FAA frames that left for another node and were not answered "not delivered"
        // (bridge NOROUTE/CONGESTED, failed send): if the transfer then fails UNREACHABLE, the
        // destination may have applied them and the CQE says UNCERTAIN.
        uint32_t maybe_applied = 0;
        uint32_t frames_sent = 0; // frames that left the RGP (to the fabric or this node's R2P2)
    };
    struct Pending {
        uint64_t xfer;
        uint64_t xoff;
        uint32_t len;
        uint32_t blocks;
        uint32_t next = 0; // bytes of the frame's range answered so far
        uint16_t dst;
        bool modifies = false; // a WRITE/CAS/FAA frame to another node (counted in maybe_applied)
    };
    // Where the R2P2 sends its answers: the fabric, or this node's own RCP.
    struct Sink {
        std::function<void(rkf_frame_hdr &, const void *)> msg;
        std::function<void(uint16_t status, const void *, uint16_t)> reply;
    };

    using Frames = std::vector<std::pair<Frame, bool>>; // (frame, to this node itself)
    void rgp_main();
    bool rgp_round(Frames &out);   // under mu_: fetch_round, then take_frames
    void fetch_round();            // under mu_
    bool take_frames(Frames &out); // under mu_
    void send_frames(Frames &out); // no lock held; the caller set sending_
    void rgp_inline();             // a doorbell's round on the writing thread
    bool fetch_one(unsigned q);    // under mu_
    bool direct_read_locked(unsigned q, const rmc_wqe &w, uint32_t idx, const Ctx &cx);
    void publish_locked();          // this node's table for its peers' direct reads (mu_ held)
    void build_frames(Transfer &t); // under mu_
    void fail_locked(Transfer &t, uint8_t st, uint8_t info); // under mu_
    void finish_locked(Transfer &t);                         // under mu_: CQE if done
    void write_cqe_locked(Qp &qp, unsigned q, const Transfer &t);
    void complete_now_locked(unsigned q, const rmc_wqe &w, uint16_t idx, uint8_t st, uint8_t info);
    static uint64_t qp_status(const Qp &qp);
    void cancel_pending_locked(uint64_t xfer_id);
    void orphan_qp_locked(unsigned q);
    void orphan_ctx_locked(unsigned c);
    void check_timeouts_locked(uint64_t now);
    void frame_failed(uint64_t tag, uint8_t st, uint8_t info);
    void not_applied_locked(const Pending &pd);

    // `now`: handle it even while paused (the RGP's own requests, frames held while paused).
    void serve(const rkf_frame_hdr &h, const uint8_t *p, const Sink &sink, bool now);
    void serve_sabre(const rkf_frame_hdr &h, const rkf_rmc_req &r, uint64_t addr, unsigned ver_off,
                     const Sink &sink);
    Sink fabric_sink(const rkf_frame_hdr &req);
    void rcp_data(const rkf_frame_hdr &h, const uint8_t *p, bool now);
    void rcp_reply(const rkf_frame_hdr &h, const uint8_t *p, bool now);
    bool fabric_up() const;

    // Guest memory (see "Host" above): word-atomic through a mapping, else dma_read/dma_write.
    Status mem_read(uint64_t addr, void *dst, uint64_t len) const;
    Status mem_write(uint64_t addr, const void *src, uint64_t len) const;
    bool mappable(uint64_t addr, uint64_t len) const; // every byte is RAM the host maps
    uint64_t counter_locked(unsigned cnt_off) const;
    bool irq_level_locked() const { return irq_status_ != 0 && (ctrl_ & RMC_CTRL_EN); }
    void gerr(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    void count(unsigned cnt_off, uint64_t n = 1)
    {
        cnt_[cnt_off / 8].fetch_add(n, std::memory_order_relaxed);
    }
    void kick();
    void notify_irq(); // host.set_irq(0, level) under mu_

    friend struct RmcRegs;
    struct Bank; // the register bank (rmc.cc)

    RmcConfig cfg_;
    Host host_;
    RmcFabric fab_;
    RmcDirect direct_;
    uint64_t pub_rd_base_ = 0; // direct_.own->srv_rd_blocks at the last counter clear (under mu_)
    unsigned node_id_, node_count_;
    HostSabreServer sabre_;

    mutable std::mutex mu_;
    std::shared_mutex srv_mu_;
    std::condition_variable cv_;
    bool stop_ = false, kicked_ = false;
    bool paused_ = false;    // pause(): the RGP waits, frames are queued (under mu_)
    bool link_lost_ = false; // the link went down while paused
    struct Held {
        enum Kind : uint8_t { Request, Data, Reply };
        rkf_frame_hdr h{};
        std::vector<uint8_t> payload;
        Kind kind = Request;
    };
    std::deque<Held> held_; // frames that arrived while paused (under mu_)
    bool hold_locked(const rkf_frame_hdr &h, const uint8_t *p, Held::Kind kind);
    uint64_t ctrl_ = 0, irq_status_ = 0;
    std::array<Qp, RMC_QP_COUNT> qps_{};
    std::array<Ctx, RMC_CTX_COUNT> ctxs_{};
    std::map<uint64_t, Transfer> xfers_;            // by id; ordered so the RGP serves old transfers first
    std::unordered_map<uint64_t, Pending> pending_; // by tag
    std::vector<uint32_t> window_;                  // block requests in flight per destination
    uint64_t next_xfer_ = 1, next_tag_ = 1;
    uint64_t cqe_seq_ = 0, irq_seq_ = 0; // CQEs written / CQEs the RGP has notified the host of
    unsigned rr_qp_ = 0;
    std::array<std::atomic<uint64_t>, RMC_CNT_COUNT> cnt_{};
    R2p2Counters sabre_base_{}; // the SABRe server's counters at the last clear (under mu_)
    std::unique_ptr<Bank> bank_;
    std::thread rgp_;
    // One sender at a time (the RGP thread or a doorbell's inline round), so that frames leave in
    // the order their round took them: set under mu_ by the thread that took frames, which sends
    // them with mu_ released.
    bool sending_ = false;
    std::condition_variable idle_cv_; // sending_ went false
    bool rgp_sleeps_forever_ = false; // the RGP waits for a kick only (no deadline): under mu_
};

} // namespace rackemu::sonuma

#endif
