// SPDX-License-Identifier: MIT
//
// Unimem virtualized mailbox (vmbox) device core: 64 hardware FIFOs of 64-bit words, one
// 4 KiB MIF page each (seed 004 sec. 2.2.3 Fig. 6, sec. 5.1), plus rackemu's control page.
// QEMU-independent: the host (QEMU glue, unit test) injects interrupt and log callbacks.
//
// Thread safety: every public method may be called from any thread. Remote deliveries arrive
// on the fabric thread while vCPUs load and store through the MIF pages.
//
// Caveat: the hardware accepts multi-word AXI bursts. QEMU hands CPU bursts (stp, st1 of q
// registers) to the device as consecutive 64-bit accesses, so a CPU store enqueues one word at
// a time; multi-word bursts reach the core only from packetizers (deliver()).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "rackemu/unimem_regs.h"

namespace rackemu::unimem {

struct VmboxHost {
    // Level of the arrival interrupt changed (called without the core's lock held).
    std::function<void(bool level)> set_irq;
    // Wrong guest use (LOG_GUEST_ERROR in QEMU). The access still gets a defined result.
    std::function<void(const std::string &msg)> guest_error;
};

struct VmboxCounters {
    uint64_t enqueued = 0; // words enqueued (CPU stores and deliveries)
    uint64_t dequeued = 0; // words dequeued by loads
    uint64_t empty_reads = 0;
    uint64_t nacks = 0;      // stores or deliveries refused because the FIFO was full
    uint64_t truncated = 0;  // words dropped under the burst known-issue mode
    uint64_t bad_access = 0; // guest errors
};

class Vmbox {
public:
    enum class Result { Ok, BusError };
    enum class Delivery { Ack, Nack };

    // depth: words per FIFO (1..65536). burst_known_issue: model sec. 5.1.2 (a burst into an
    // almost full FIFO keeps the words that fit, drops the rest and is still acknowledged).
    Vmbox(VmboxHost host, unsigned depth = VMBOX_DEFAULT_DEPTH, bool burst_known_issue = false);

    Result read(uint64_t offset, unsigned size, uint64_t &value);
    Result write(uint64_t offset, uint64_t value, unsigned size);

    // A packetizer's burst for FIFO `mif` (local or from the fabric). All-or-nothing unless
    // the known-issue mode is on; a full FIFO always NACKs.
    Delivery deliver(unsigned mif, const uint64_t *words, unsigned nwords);

    void reset();
    bool irq_level() const;
    unsigned depth() const { return depth_; }
    unsigned fill(unsigned mif) const;
    VmboxCounters counters() const;

private:
    struct Fifo {
        std::vector<uint64_t> slots;
        unsigned head = 0, count = 0;
    };
    bool push_locked(unsigned mif, uint64_t word);
    bool level_locked() const;
    uint64_t nonempty_locked() const;
    void update_irq(bool before);
    void guest_error(const std::string &msg);

    VmboxHost host_;
    const unsigned depth_;
    const bool burst_known_issue_;
    mutable std::mutex mu_;
    std::array<Fifo, UNIMEM_IF_COUNT> fifos_;
    uint64_t irq_enable_ = 0;
    VmboxCounters ctr_;
};

} // namespace rackemu::unimem
