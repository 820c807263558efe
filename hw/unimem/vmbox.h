// SPDX-License-Identifier: MIT
//
// Unimem virtualized mailbox (vmbox) device core: 64 hardware FIFOs of 64-bit words, one
// 4 KiB MIF page each (ExaNoDe D3.6 sec. 2.2.3 Fig. 6, sec. 5.1), plus rackemu's control page and
// the kernel interface (KIF, rackemu extension: a 65th FIFO for the node's kernel, filled only by
// other packetizers' KIFs; unimem_regs.h, docs/unimem.md).
// QEMU-independent: it reaches the outside world only through its rackemu::Host
// (rackemu/host.h): interrupt line 0 (the arrival interrupt), the guest-error log and the node's
// port, which a register read polls (region_read). Its state is described once, in the
// RK_VMBOX_REGS and RK_VMBOX_STATE X-macros below (hw/core/state.h).
//
// Decode: each MIF page's FIFO window [0x00, 0x40) is a data window decoded here (a load
// dequeues, a store enqueues); every register (MIF_COUNT of each page, the control page, the
// counters of VMBOX_COUNTER_TABLE) is a row of one register table decoded by the register bank
// (regbank.h), which also names offsets in the guest-error log.
//
// Thread safety: every public method may be called from any thread. Remote deliveries arrive
// on the fabric thread while vCPUs load and store through the MIF pages. The interrupt level is
// computed and handed to host.set_irq() under the core's lock, so the last call carries the
// current level.
//
// Caveat: the hardware accepts multi-word AXI bursts. QEMU hands CPU bursts (stp, st1 of q
// registers) to the device as consecutive 64-bit accesses, so a CPU store enqueues one word at
// a time; multi-word bursts reach the core only from packetizers (deliver()).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "rackemu/fabric_proto.h"
#include "rackemu/host.h"
#include "rackemu/unimem_regs.h"
#include "regbank.h"
#include "state.h"

namespace rackemu::unimem {

// A snapshot of the counters: those of VMBOX_COUNTER_TABLE (guest-visible registers of the
// control page) and the core-only ones (no register; tests and logs).
struct VmboxCounters {
#define VMBOX_COUNTERS_FIELD_(N, n, d) uint64_t n = 0;
    VMBOX_COUNTER_TABLE(VMBOX_COUNTERS_FIELD_)
#undef VMBOX_COUNTERS_FIELD_
    uint64_t empty_reads = 0; // loads of an empty FIFO (core only)
    uint64_t bad_access = 0;  // guest errors (core only)
    // the KIF's (VMBOX_KIF_COUNTER_TABLE, registers of the control page)
    std::array<uint64_t, VMBOX_KIF_CNT_COUNT> kif{};
};

using VmboxCnt = std::array<uint64_t, VMBOX_CNT_COUNT>;
using VmboxKifCnt = std::array<uint64_t, VMBOX_KIF_CNT_COUNT>;
using VmboxFifos = std::array<std::vector<uint64_t>, UNIMEM_IF_TOTAL>;

// The registers of the architectural state (hw/core/state.h): the live Vmbox inherits them, so
// a field added here is saved, loaded and compared with no other change.
#define RK_VMBOX_REGS(X) \
    X(uint64_t, irq_enable)  /* IRQ_ENABLE */ \
    X(uint64_t, kif_ctrl)    /* KIF_CTRL (VMBOX_KIF_* bits) */ \
    X(VmboxCnt, cnt)         /* VMBOX_COUNTER_TABLE */ \
    X(VmboxKifCnt, kif_cnt)  /* VMBOX_KIF_COUNTER_TABLE */ \
    X(uint64_t, empty_reads) /* loads of an empty FIFO (core only) */ \
    X(uint64_t, bad_access)  /* guest errors (core only) */
struct VmboxRegs {
    RK_STATE_FIELDS(RK_VMBOX_REGS)
};

// The saved state: the device's depth (a load requires its own), the registers, and each FIFO's
// contents oldest word first (MIFs 0..63, then the KIF at index UNIMEM_KIF).
#define RK_VMBOX_STATE(X) \
    X(uint32_t, depth) \
    X(VmboxRegs, regs) \
    X(VmboxFifos, fifos)
struct VmboxState {
    RK_STATE_FIELDS(RK_VMBOX_STATE)
};

// The device's configuration (the glue's QOM properties; C: RkVmboxConfig in unimem_capi.h).
struct VmboxConfig {
    unsigned depth = VMBOX_DEFAULT_DEPTH; // words per FIFO (1..65536)
    bool burst_known_issue = false;       // model sec. 5.1.2
    bool kif = true;                      // the kernel interface is present
};

class Vmbox : VmboxRegs {
public:
    // depth: words per FIFO (1..65536). burst_known_issue: model sec. 5.1.2 (a burst into an
    // almost full FIFO keeps the words that fit, drops the rest and is still acknowledged).
    // kif: the kernel interface is present (CAPS bit); without it its page and registers are
    // unmapped (guest errors) and every delivery into it is refused.
    explicit Vmbox(Host host, unsigned depth = VMBOX_DEFAULT_DEPTH, bool burst_known_issue = false,
                   bool kif = true);
    Vmbox(Host host, const VmboxConfig &cfg) : Vmbox(host, cfg.depth, cfg.burst_known_issue, cfg.kif) {}

    // The device's register region (rk_vmbox_device_ops): first dispatches what the node's port
    // has delivered (a guest polling STATUS or a FIFO takes the packet the bridge delivered
    // itself; host.port(), none without fabric), then refuses an access that is not naturally
    // aligned with RK_DECODE_ERROR (as the bus did), else read() / write().
    Status region_read(uint64_t offset, unsigned size, uint64_t *value);
    Status region_write(uint64_t offset, uint64_t value, unsigned size);

    // MMIO. RK_OK; RK_NACK: a store to a full FIFO (the bus answers SLVERR, sec. 5.1.1);
    // RK_SLAVE_ERROR: a FIFO access other than an aligned 64-bit one. Register loads and stores
    // never fault: unmapped or read-only ones are logged, loads read 0, stores are ignored.
    Status read(uint64_t offset, unsigned size, uint64_t &value);
    Status write(uint64_t offset, uint64_t value, unsigned size);

    // A packetizer's burst for FIFO `mif` (0..63, or UNIMEM_KIF) sent from its interface
    // `src_if` (0..63 a PIF, UNIMEM_KIF a KIF), local or from the fabric: RK_OK (ACK) or RK_NACK.
    // All-or-nothing unless the known-issue mode is on (never for the KIF); a full FIFO always
    // NACKs. The KIF takes bursts from a KIF only, and only while KIF_CTRL.ENABLE is set: any
    // other delivery into it is refused (NACK, counter REFUSED, logged).
    Status deliver(unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords);

    // A RKF_SVC_UNIMEM_MBOX request from another node's packetizer (`payload`: h.len bytes).
    // Validates it, delivers it and returns the reply status (RKF_ST_OK = ACK, RKF_ST_REFUSED =
    // NACK, RKF_ST_BAD_FRAME = malformed, logged), or -1 when no reply is due (not a request).
    int serve_frame(const rkf_frame_hdr &h, const void *payload);

    // The same, answering first: the words are taken into the FIFO (or refused) at
    // once, then `answer` runs with the result (deliver: RK_OK / RK_NACK; serve_frame: the reply
    // status, or -1) on the calling thread without the core lock, and only after it returned do
    // the words become visible: MIF_COUNT, NONEMPTY, the data window, save() aside, and the
    // arrival interrupt. So the sender's acknowledgement is on its way before the receiving guest
    // can see the packet, and a reply the guest posts cannot overtake it. Meanwhile the taken
    // words hold their room (a later packet is refused if they filled the FIFO), and words that
    // arrive behind them (a guest store, another delivery) wait with them: FIFO order holds.
    // A reset during the answer discards them; FLUSH empties only the words visible before them.
    using Answer = std::function<void(Status)>;
    using FrameAnswer = std::function<void(int)>;
    Status deliver(unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords,
                   const Answer &answer);
    int serve_frame(const rkf_frame_hdr &h, const void *payload, const FrameAnswer &answer);

    // While paused (the VM is stopped: savevm, migration, gdb) deliveries are refused with
    // RK_NACK and not counted, so that none is acknowledged after a snapshot of the state.
    void pause(bool on);

    // reset() also marks the device ready (the machine's first reset is done: deliveries before
    // it would be wiped by it; the packetizer's fabric service holds them until then).
    void reset();
    bool ready() const { return ready_.load(std::memory_order_acquire); }
    bool irq_level(unsigned line = 0) const; // line 0 only
    unsigned depth() const { return depth_; }
    bool has_kif() const { return kif_; }
    unsigned fill(unsigned mif) const; // mif 0..63, or UNIMEM_KIF
    VmboxCounters counters() const;

    // Migration: save() is a consistent snapshot (core lock held); load() validates everything
    // (depth, FIFO sizes, KIF_CTRL bits; a KIF holding words, or enabled, on a device without one)
    // and returns false, changing nothing, on any inconsistency, with the field named in *why.
    // The byte-string forms are the device's save/load ops (hw/core/state.h).
    VmboxState save() const;
    bool load(const VmboxState &st, std::string *why = nullptr);
    void save(StateOut &out) const;
    bool load(StateIn &in, std::string *why);

    // The register table (for tests and docs).
    struct Ctx {};
    static std::span<const Reg<Vmbox, Ctx>> reg_table();

private:
    struct Fifo {
        std::vector<uint64_t> slots;
        unsigned head = 0, count = 0; // the words the guest sees: slots [head, head + count)
        unsigned held = 0;            // taken, not yet visible: the next `held` slots
        unsigned holders = 0;         // deliveries with an answer that hold words here now
    };
    bool push_locked(unsigned mif, uint64_t word);
    Status take_locked(unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords);
    void publish(unsigned mif);
    void drop_visible_locked(Fifo &f);
    int check_frame(const rkf_frame_hdr &h, const void *payload, rkf_mbox_deliver &d);
    uint64_t nonempty_locked() const;
    bool level_locked() const;
    void sync_irq_locked();
    void guest_error_locked(const std::string &msg);
    void flush_locked(uint64_t mask);
    Status fifo_access_locked(unsigned mif, uint64_t reg, bool is_write, unsigned size, uint64_t &value);
    Status kif_deliver_locked(unsigned src_if, const uint64_t *words, unsigned nwords);
    bool kif_absent(uint64_t offset) const; // a KIF offset on a device without the KIF

    Host host_;
    const unsigned depth_;
    const bool burst_known_issue_;
    const bool kif_;
    mutable std::mutex mu_;                   // guards everything below
    std::array<Fifo, UNIMEM_IF_TOTAL> fifos_; // MIFs 0..63, then the KIF
    // the registers (VmboxRegs) are inherited
    bool reported_ = false; // level last handed to host.set_irq
    bool paused_ = false;
    std::atomic<bool> ready_{false};
    RegBank<Vmbox, Ctx> bank_{reg_table()}; // the KIF's rows are decoded only when kif_
};

} // namespace rackemu::unimem
