// SPDX-License-Identifier: MIT
// The soNUMA Remote Memory Controller (RMC) with LightSABRes: the device core, independent of
// QEMU (seed 000 sec. 4-5; interface in hw/include/rackemu/sonuma_regs.h, docs/sonuma.md).
//
// Pipelines (seed 000 sec. 5):
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
// Locks: mu_ guards the QP and context tables, transfers and the pending-tag table; every write
// into guest memory on the source side (reply data, CQ entries) happens under it, so disabling a
// QP or a context orphans its in-flight transfers before the register write returns. srv_mu_
// (shared by the R2P2, exclusive for context changes) keeps a segment from changing under a
// request being served. No lock is held while a frame is sent or a callback runs.
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
#include "rackemu/sonuma_regs.h"
#include "r2p2.h"
#include "timing.h"

namespace rackemu::sonuma {

struct RmcConfig {
    unsigned node_id = 0;
    unsigned node_count = 1;
    Timing timing;
    bool speculation = true;      // LightSABRes speculation (false: sec. 7.1 "no speculation")
    uint64_t window_delay_ns = 0; // test property: widen the host window of vulnerability
    uint32_t timeout_ms = 2000;   // a transfer not answered by then completes UNREACHABLE
    uint32_t window_blocks = RMC_DEF_WINDOW_BLOCKS; // block requests in flight per destination
    uint64_t seg_base = 0, seg_size = 0;            // the machine's reserved segment (informational)
};

// What the core needs from its host (the QEMU glue, or a test).
struct RmcHost {
    uint8_t *ram = nullptr; // host mapping of guest RAM [ram_base, ram_base + ram_size)
    uint64_t ram_base = 0, ram_size = 0;
    // Send a frame through the node's fabric port (null: no fabric, only this node is reachable).
    // Returns 0 or -errno (-ENOTCONN link down, -EAGAIN congested).
    std::function<int(rkf_frame_hdr &, const void *)> send;
    // Answer a request frame.
    std::function<int(const rkf_frame_hdr &, uint16_t status, const void *, uint16_t)> reply;
    std::function<bool()> fabric_up;
    std::function<void()> irq_changed;                    // any thread; the glue re-reads irq_level()
    std::function<void(const std::string &)> guest_error; // rate limiting is the host's business
};

class Rmc {
public:
    Rmc(const RmcConfig &, RmcHost);
    ~Rmc();
    Rmc(const Rmc &) = delete;
    Rmc &operator=(const Rmc &) = delete;

    // MMIO (offset from the device base). Registers are 64-bit; other widths read 0, writes are
    // ignored, both logged.
    uint64_t mmio_read(uint64_t off, unsigned size);
    void mmio_write(uint64_t off, uint64_t value, unsigned size);
    void reset();
    bool irq_level() const;

    // Fabric port callbacks (port thread).
    void on_frame(const rkf_frame_hdr &, const void *payload); // REQ or MSG for RKF_SVC_RMC
    void on_reply(const rkf_frame_hdr &, const void *payload);
    void on_link(bool up);

    uint64_t counter(unsigned cnt_off) const; // RMC_CNT_* offset
    HostSabreServer &sabre_server() { return sabre_; }

private:
    struct Qp {
        uint64_t wq_base = 0, cq_base = 0, depth_log2 = 0, ctx = 0, ctrl = 0;
        bool cfg_err = false, err = false;
        uint32_t wq_tail = 0, wq_head = 0, cq_head = 0, cq_tail = 0;
        uint32_t inflight = 0;
        uint32_t gen = 0; // bumped when the QP is disabled: its transfers are orphaned
        bool enabled() const { return ctrl & QP_CTRL_EN; }
        uint32_t depth() const { return 1u << depth_log2; }
    };
    struct Ctx {
        uint64_t base = 0, size = 0, perm = 0, nodemask = 0, layout = 0, ctrl = 0, key = 0;
        bool cfg_err = false;
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
        uint64_t start_ns = 0, deadline_ns = 0;
        // WRITE/CAS/FAA frames that left for another node and were not answered "not delivered"
        // (bridge NOROUTE/CONGESTED, failed send): if the transfer then fails UNREACHABLE, the
        // destination may have applied them and the CQE says UNCERTAIN.
        uint32_t maybe_applied = 0;
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

    void rgp_main();
    bool rgp_round(std::vector<std::pair<Frame, bool>> &out); // under mu_
    bool fetch_one(unsigned q);                               // under mu_
    void build_frames(Transfer &t);                           // under mu_
    void fail_locked(Transfer &t, uint8_t st, uint8_t info);  // under mu_
    void finish_locked(Transfer &t);                          // under mu_: CQE if done
    void write_cqe_locked(Qp &qp, unsigned q, const Transfer &t);
    void complete_now_locked(unsigned q, const rmc_wqe &w, uint16_t idx, uint8_t st, uint8_t info);
    static uint64_t qp_status(const Qp &qp);
    void cancel_pending_locked(uint64_t xfer_id);
    void orphan_qp_locked(unsigned q);
    void orphan_ctx_locked(unsigned c);
    void check_timeouts_locked(uint64_t now);
    void frame_failed(uint64_t tag, uint8_t st, uint8_t info);
    void not_applied_locked(const Pending &pd);

    void serve(const rkf_frame_hdr &h, const uint8_t *p, const Sink &sink);
    void serve_sabre(const rkf_frame_hdr &h, const rkf_rmc_req &r, uint8_t *obj, unsigned ver_off,
                     const Sink &sink);
    void rcp_data(const rkf_frame_hdr &h, const uint8_t *p);
    void rcp_reply(const rkf_frame_hdr &h, const uint8_t *p);

    uint64_t global_read(uint64_t off);
    void global_write(uint64_t off, uint64_t v);
    bool in_ram(uint64_t addr, uint64_t len) const;
    uint8_t *host(uint64_t addr) const { return host_.ram + (addr - host_.ram_base); }
    void gerr(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    void count(unsigned cnt_off, uint64_t n = 1)
    {
        cnt_[cnt_off / 8].fetch_add(n, std::memory_order_relaxed);
    }
    void kick();
    void notify_irq();

    RmcConfig cfg_;
    RmcHost host_;
    HostSabreServer sabre_;

    mutable std::mutex mu_;
    std::shared_mutex srv_mu_;
    std::condition_variable cv_;
    bool stop_ = false, kicked_ = false;
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
    std::thread rgp_;
};

} // namespace rackemu::sonuma

#endif
