// SPDX-License-Identifier: MIT
//
// Xilinx AXI Central DMA (AXI CDMA v4.1, Xilinx/AMD PG034) device core: memory-to-memory DMA
// with a simple mode and a scatter-gather (SG) mode, register-compatible with the IP so that
// Linux's unmodified drivers/dma/xilinx/xilinx_dma.c ("xlnx,axi-cdma-1.00.a") drives it. The
// register map is rackemu/xilinx_cdma_regs.h. QEMU-independent: the host (QEMU glue through
// cdma_capi.h, a unit test) injects memory access, interrupt, log and wake-up callbacks.
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
// pending and calls host.kick() after releasing the lock; the host then calls process() (an
// engine thread in QEMU, synchronously in tests), which runs the work to completion, moving
// data in chunks through a bounce buffer with no lock held, so registers stay readable and a
// soft reset can stop a long transfer.
//
// Thread safety: read()/write()/reset() may be called from any thread (vCPUs) while process()
// runs on the engine thread. process() calls are serialised: a call made while another is
// running returns at once and the running one goes round again.
//
// Caveat: data movement is not cycle-timed: a transfer takes as long as the host's memory
// callbacks, not BTT / bus width cycles, and CDMASR.IRQDelaySts always reads 0. The IRQDelay
// timer is modelled at its only observable point: it "expires" when a chain ends with
// completions that the threshold has not signalled yet (no time elapses in the model).
// Caveat: the engine's address space is whatever the host's mem_read/mem_write decode: in
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

#include "rackemu/xilinx_cdma_regs.h"
#include "regbank.h"

namespace rackemu::unimem {

enum class MemStatus { Ok, DecodeError, SlaveError };

struct CdmaHost {
    // Read/write guest memory at an address of the node's physical address space (local RAM,
    // or the global address space window: the host decides). Called from whatever thread calls
    // process(), without the core's lock held. May block (remote memory).
    std::function<MemStatus(uint64_t addr, void *buf, uint64_t len)> mem_read;
    std::function<MemStatus(uint64_t addr, const void *buf, uint64_t len)> mem_write;
    // Level of cdma_introut changed. Called without the core's lock held, possibly from two
    // threads at once; the last call carries the current level (the host may as well re-read
    // irq_level()).
    std::function<void(bool level)> set_irq;
    // Wrong guest use (LOG_GUEST_ERROR in QEMU). The access still gets a defined result.
    std::function<void(const std::string &)> guest_error;
    // A register write started work: the host must arrange for process() to be called.
    std::function<void()> kick;
};

struct CdmaConfig {
    unsigned data_width = RACKEMU_CDMA_DATAWIDTH / 8; // bytes per beat (key-hole accesses)
    uint64_t chunk = 64 * 1024;                       // bytes per mem_read/mem_write pair
    uint64_t max_descriptors = 1u << 20;              // per SG session, then SGIntErr
    uint64_t cyclic_slice = 1024;                     // descriptors per process() in cyclic mode
};

struct CdmaCounters {
    uint64_t transfers = 0;   // simple-mode transfers completed
    uint64_t chains = 0;      // SG sessions that reached TAILDESC
    uint64_t descriptors = 0; // SG descriptors completed
    uint64_t bytes = 0;       // bytes written to destinations
    uint64_t dma_int_errors = 0, dma_slv_errors = 0, dma_dec_errors = 0;
    uint64_t sg_int_errors = 0, sg_slv_errors = 0, sg_dec_errors = 0;
    uint64_t soft_resets = 0; // CDMACR.Reset completions
    uint64_t aborted = 0;     // transfers or chains cut short by CDMACR.Reset
    uint64_t guest_errors = 0;
    uint64_t irqs_raised = 0; // rising edges of cdma_introut
};

enum class CdmaPhase : uint32_t { Idle, Simple, Fetch, Transfer, WriteBack, Halted };

// Registers and engine state as plain data (the glue maps it to a VMStateDescription).
struct CdmaState {
    uint32_t cr = XCDMA_CR_RESET_VALUE;             // CDMACR as read (Reset = reset pending)
    uint32_t sr = XCDMA_SR_IDLE | XCDMA_SR_SGINCLD; // CDMASR bits [15:0]; [31:16] composed on read
    uint64_t curdesc = 0, taildesc = 0;             // CURDESC/TAILDESC_PNTR(_MSB), bits [5:0] = 0
    uint64_t sa = 0, da = 0;                        // SA(_MSB), DA(_MSB)
    uint32_t btt = 0;                               // BTT [25:0]
    uint32_t irq_count = 1;                         // IRQThreshold counter (CDMASR.IRQThresholdSts)
    uint32_t unsignalled = 0;                       // SG completions since the last IOC/Dly event
    CdmaPhase phase = CdmaPhase::Idle;
    bool resume_valid = false; // paused at the tail: a TAILDESC write resumes at resume_next
    uint64_t resume_next = 0;
    uint64_t session_descriptors = 0; // descriptors completed since the SG session started
};

class Cdma {
public:
    explicit Cdma(CdmaHost host, CdmaConfig config = {});

    // 32-bit registers; 8-byte accesses at 8-aligned offsets act as low then high half.
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

    // Run all pending work to completion (see the header comment).
    void process();

    void reset(); // device (power-on) reset: registers, engine, counters; abandons process()
    bool irq_level() const;
    bool busy() const; // work started and not finished (CDMASR.Idle = 0)
    CdmaCounters counters() const;

    CdmaState state() const;
    // Load a saved state (migration). Returns false, changing nothing, if it is inconsistent.
    // A transfer or descriptor that was in flight restarts from its beginning.
    bool set_state(const CdmaState &st);

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
    std::string reg_name(uint64_t offset) const;
    uint32_t read32_locked(uint64_t offset, Pending &p);
    void write32_locked(uint64_t offset, uint32_t value, Pending &p);
    void write_cr_locked(uint32_t value, Pending &p);
    void write_desc_ptr_locked(uint64_t offset, uint32_t value, Pending &p);
    void write_simple_locked(uint64_t offset, uint32_t value, Pending &p);
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
    Move move(uint64_t src, uint64_t dst, uint64_t len, uint32_t cr, uint64_t epoch, MemStatus &st);
    MemStatus read_mem(uint64_t addr, void *buf, uint64_t len);
    MemStatus write_mem(uint64_t addr, const void *buf, uint64_t len);

    CdmaHost host_;
    const CdmaConfig cfg_;

    mutable std::mutex mu_; // guards s_, ctr_, epoch_, in_process_, reported_
    CdmaState s_;
    CdmaCounters ctr_;
    uint64_t epoch_ = 0;                       // bumped by reset()/set_state(): a running process() abandons
    bool in_process_ = false;                  // process() is between its first and last look at s_
    bool reported_ = false;                    // level last handed to host.set_irq
    RegBank<Cdma, Pending> bank_{reg_table()}; // every register is hooked: its state is s_

    std::mutex process_mu_; // serialises process(); guards buf_
    std::atomic<bool> rerun_{false};
    std::vector<uint8_t> buf_;
};

} // namespace rackemu::unimem
