// SPDX-License-Identifier: MIT
//
// Xilinx AXI Central DMA (AXI CDMA v4.1, Xilinx/AMD PG034) device core: memory-to-memory DMA
// with a simple mode and a scatter-gather (SG) mode, register-compatible with the IP so that
// Linux's unmodified drivers/dma/xilinx/xilinx_dma.c ("xlnx,axi-cdma-1.00.a") drives it. The
// register map is rackemu/xilinx_cdma_regs.h. QEMU-independent: it reaches memory, its
// interrupt line (line 0, cdma_introut) and the guest-error log through the one host interface
// (rackemu/host.h; the QEMU glue through rk_cdma_device_ops in cdma_capi.h, a unit test through
// TestHost), and asks for its engine to run through a wake-up link of its own (`kick`, not a
// host service): CdmaDevice (cdma_capi.cc) runs process() on an engine thread of its own.
//
// Engine states (CdmaPhase) and the pipeline process() walks:
//
//   IDLE ---- BTT write, SGMode = 0 ----> SIMPLE ---- data moved ----> IDLE (+ IOC_Irq)
//   IDLE ---- TAILDESC_PNTR_MSB write, SGMode = 1 ----> FETCH (read the 8-word descriptor at
//        CURDESC) ----> TRANSFER (move CONTROL.BTT bytes SA -> DA) ----> WRITEBACK (STATUS word:
//        Cmplt, or the error bit) ----> descriptor was TAILDESC? IDLE (+ Dly_Irq if IRQDelay and
//        completions are unsignalled) : CURDESC = NXTDESC, FETCH again.
//   Every completed descriptor decrements the IRQThreshold counter; at 0 IOC_Irq is set and
//   the counter reloads (PG034 "SG Interrupt Threshold and Interrupt Coalescing").
//   Any error -> HALTED: the error bit and Err_Irq are set, CDMASR.Idle reads 1 and the engine
//   accepts no work until a reset (CDMACR.Reset or reset()).
//   CDMACR.Reset while process() moves data: CDMACR.Reset reads 1 until process() reaches the
//   next chunk or descriptor boundary, abandons the work and restores every register's reset
//   value; then it reads 0 (the driver polls it). With no process() running it completes at once.
//
// Register writes never move data: a write that starts work (BTT, TAILDESC_PNTR_MSB) marks it
// pending and calls kick() after releasing the lock; the host then calls process() (an
// engine thread in QEMU, synchronously in tests), which runs the work to completion, moving
// data in chunks through a bounce buffer with no lock held, so registers stay readable and a
// soft reset can stop a long transfer.
//
// Thread safety: read()/write()/reset() may be called from any thread (vCPUs) while process()
// runs on the engine thread. process() calls are serialised: a call made while another is
// running returns at once and the running one goes round again.
//
// Quiescing (migration, a stopped VM): pause(true) lets a running process() finish the data
// movement it is in (a simple transfer, or the current descriptor up to its STATUS write-back)
// and stop at the next boundary; work stays pending (CDMASR.Idle = 0) until pause(false). save()
// is then a consistent snapshot. load() (migration) halts a transfer or chain that was in flight at
// save with DMASlvErr: see load().
//
// Caveat: data movement is not cycle-timed: a transfer takes as long as the host's DMA, not BTT / bus width cycles, and CDMASR.IRQDelaySts always reads 0. The IRQDelay
// timer is modelled at its only observable point: it "expires" when a chain ends with
// completions that the threshold has not signalled yet (no time elapses in the model).
// Caveat: the engine's address space is whatever the host's dma_read/dma_write decode: in
// rackemu the node's physical map (its RAM) plus the global address space window at
// GAS_WINDOW_BASE, so one descriptor can copy between nodes; a remote access may block.
// Caveat: the data realignment engine is always present: any source/destination alignment
// and any BTT work. Key-hole accesses repeat one data-width beat (CdmaConfig::data_width) at a
// fixed address, in both modes.
// Caveat: a transfer aborted by a soft reset has written whole chunks (CdmaConfig::chunk) only;
// the hardware would stop at an AXI burst boundary.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "rackemu/host.h"
#include "rackemu/xilinx_cdma_regs.h"
#include "regbank.h"
#include "state.h"

namespace rackemu::unimem {

struct CdmaConfig {
    unsigned data_width = RACKEMU_CDMA_DATAWIDTH / 8; // bytes per beat (key-hole accesses)
    uint64_t chunk = 64 * 1024;                       // bytes per dma_read/dma_write pair
    uint64_t max_descriptors = 1u << 20;              // per SG session, then SGIntErr
    uint64_t cyclic_slice = 1024;                     // descriptors per process() in cyclic mode
};

// The model's counters, named as in CDMA_COUNTER_TABLE (rackemu/xilinx_cdma_regs.h).
struct CdmaCounters {
#define CDMA_CNT_X_FIELD_(N, n, d) uint64_t n = 0;
    CDMA_COUNTER_TABLE(CDMA_CNT_X_FIELD_)
#undef CDMA_CNT_X_FIELD_
};

enum class CdmaPhase : uint32_t { Idle, Simple, Fetch, Transfer, WriteBack, Halted };

// Registers and engine state (save()/load(); docs/cdma.md "Migration"), described once
// (hw/core/state.h): a field is one line here. A default-constructed state is the reset state.
#define RK_CDMA_STATE(X) \
    X(uint32_t, cr)                  /* CDMACR as read (Reset = reset pending) */ \
    X(uint32_t, sr)                  /* CDMASR bits [15:0]; [31:16] composed on read */ \
    X(uint64_t, curdesc)             /* CURDESC_PNTR(_MSB), bits [5:0] = 0 */ \
    X(uint64_t, taildesc)            /* TAILDESC_PNTR(_MSB), bits [5:0] = 0 */ \
    X(uint64_t, sa)                  /* SA(_MSB) */ \
    X(uint64_t, da)                  /* DA(_MSB) */ \
    X(uint32_t, btt)                 /* BTT [25:0] */ \
    X(uint32_t, irq_count)           /* IRQThreshold counter (CDMASR.IRQThresholdSts), 1..255 */ \
    X(uint32_t, unsignalled)         /* SG completions since the last IOC/Dly event */ \
    X(CdmaPhase, phase)              /* the engine's state */ \
    X(bool, resume_valid)            /* paused at the tail: a TAILDESC write resumes at resume_next */ \
    X(uint64_t, resume_next)         /* the descriptor it resumes at */ \
    X(uint64_t, session_descriptors) /* descriptors completed since the SG session started */
struct CdmaState {
    RK_STATE_FIELDS(RK_CDMA_STATE)
    CdmaState() : cr(XCDMA_CR_RESET_VALUE), sr(XCDMA_SR_IDLE | XCDMA_SR_SGINCLD), irq_count(1) {}
};

class Cdma {
public:
    // `kick`: a register write started work; the caller must arrange for process() to be called
    // (the engine thread's wake-up in cdma_capi.cc; process() itself in a synchronous test).
    Cdma(Host host, std::function<void()> kick, CdmaConfig config = {});

    // 32-bit registers; 8-byte accesses at 8-aligned offsets act as low then high half.
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

    // Run all pending work to completion (see the header comment).
    void process();

    void reset(); // device (power-on) reset: registers, engine, counters; abandons process()
    bool irq_level() const;
    bool busy() const; // work started and not finished (CDMASR.Idle = 0)
    CdmaCounters counters() const;
    std::string reg_name(uint64_t offset) const; // the register at `offset` (logs, traces)

    // on: stop the engine at its next boundary and wait for it (see the header comment); work
    // that is started meanwhile stays pending. off: let it go on (and kick it if work is
    // pending). May be called from any thread but process()'s own.
    void pause(bool on);

    // Migration. save(): the registers and the engine state (pause first for a snapshot at a
    // boundary; without it, a consistent snapshot of a moving engine).
    CdmaState save() const;
    // Load a saved state. Returns false, changing nothing and saying why (naming the field), if
    // anything is out of range or inconsistent. A soft reset pending at save completes at load. A
    // transfer or chain in flight at save (phase Simple, Fetch, Transfer or WriteBack) does not
    // resume: the engine is halted with CDMASR.DMASlvErr + Err_Irq (Idle = 1; CURDESC_PNTR still
    // points at the descriptor that did not complete, whose STATUS is not written), as if the
    // data mover had got a slave error, so the driver's error path resets the engine and
    // resubmits.
    bool load(const CdmaState &st, std::string *why = nullptr);
    // The same as the device ops' byte string (rackemu/device.h, hw/core/state.h).
    void save(StateOut &out) const;
    bool load(StateIn &in, std::string *why);

private:
    struct Pending {
        std::vector<std::string> errors;
        bool kick = false;
    };
    struct Desc {
        uint64_t addr = 0, next = 0, sa = 0, da = 0;
        uint32_t control = 0, status = 0;
    };
    enum class Move { Done, Failed, Aborted, Stale };

    bool valid_access(uint64_t offset, unsigned size, const std::string &what);
    // The register file (PG034 Table 2-1): one table, decoded by bank_ (regbank.h).
    static std::span<const Reg<Cdma, Pending>> reg_table();
    uint32_t read32_locked(uint64_t offset, Pending &p);
    void write32_locked(uint64_t offset, uint32_t value, Pending &p);
    void write_cr_locked(uint32_t value, Pending &p);
    void write_desc_ptr_locked(const Reg<Cdma, Pending> &r, bool tail, bool msb, uint32_t value, Pending &p);
    bool simple_writable_locked(const Reg<Cdma, Pending> &r, uint32_t value, Pending &p);
    void write_btt_locked(uint32_t value, Pending &p);
    void finish(Pending &p);
    void note_locked(Pending &p, std::string msg);

    bool idle_locked() const { return (s_.sr & XCDMA_SR_IDLE) != 0; }
    uint32_t threshold_locked() const;
    bool level_locked() const;
    void soft_reset_locked();
    void halt_locked(uint32_t sr_errors);
    void complete_descriptor_locked(const Desc &d, Pending &p);
    void update_irq();

    bool run_engine(); // true: a cyclic slice ended with work left
    Move move(uint64_t src, uint64_t dst, uint64_t len, uint32_t cr, uint64_t epoch, Status &st);
    Status read_mem(uint64_t addr, void *buf, uint64_t len);
    Status write_mem(uint64_t addr, const void *buf, uint64_t len);

    Host host_;
    std::function<void()> kick_;
    const CdmaConfig cfg_;

    mutable std::mutex mu_; // guards s_, ctr_, epoch_, in_process_, reported_, paused_
    CdmaState s_;
    CdmaCounters ctr_;
    uint64_t epoch_ = 0;                       // bumped by reset()/load(): a running process() abandons
    bool in_process_ = false;                  // process() is between its first and last look at s_
    bool reported_ = false;                    // level last handed to host.set_irq
    bool paused_ = false;                      // pause(): process() stops at the next boundary
    RegBank<Cdma, Pending> bank_{reg_table()}; // every register is hooked: its state is s_

    std::mutex process_mu_; // serialises process(); guards buf_
    std::atomic<bool> rerun_{false};
    std::vector<uint8_t> buf_;
};

} // namespace rackemu::unimem
