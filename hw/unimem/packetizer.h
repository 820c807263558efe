// SPDX-License-Identifier: MIT
//
// Unimem virtualized packetizer device core (seed 004 sec. 2.2.3 Fig. 7-8, sec. 5.2,
// Tables 4-5, Fig. 17-18): 64 packetizer interfaces (PIFs) and the trust interface (TIF).
//
// PIF pipeline, per interface:
//   IDLE --(payload0, payload1, dest all written)--> check PID_CONF and BASE_DEST
//     PID_CONF bit clear  -> dropped, status 0, NOPID counter          -> IDLE
//     dest outside window -> ILLEGAL                                   -> IDLE
//     otherwise           -> PEND, packet handed to the host (transmit) -> WAIT_ACK
//   WAIT_ACK --complete(tag, ACK|NACK|FABRIC_ERR)--> status bits       -> IDLE
// Writes during WAIT_ACK set OVERWR_BUF and are dropped (one hardware buffer per PIF,
// sec. 5.2.4). CLR_REQ returns the PIF to IDLE and forgets the outstanding tag.
//
// A 128-bit register counts as written once all of its valid bytes have been stored since the
// last packet: payload0 and payload1 need both 64-bit halves, dest needs bytes 0-4 (bits 39:0).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "rackemu/unimem_regs.h"

namespace rackemu::unimem {

enum class Completion { Ack, Nack, FabricError };

struct PacketizerHost {
    // Send the 256-bit packet of PIF `pif` to global address `dest`. Called without the core
    // lock held; the answer comes back through Packetizer::complete(tag, ...), possibly
    // before transmit() returns.
    std::function<void(unsigned pif, uint64_t tag, uint64_t dest, const uint64_t words[4])> transmit;
    std::function<void(const std::string &msg)> guest_error;
};

struct PacketizerCounters {
    uint64_t sent = 0, acked = 0, nacked = 0, fabric_errors = 0, illegal = 0, nopid = 0, overwrites = 0,
             stale_completions = 0, bad_access = 0;
};

class Packetizer {
public:
    explicit Packetizer(PacketizerHost host);

    // MMIO. Loads never fault; stores to read-only or unmapped offsets are logged and ignored.
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

    // The acknowledgement for a transmitted packet. Unknown or stale tags are counted and
    // ignored (a reply after CLR_REQ, a forged reply).
    void complete(uint64_t tag, Completion c);
    // The fabric went down: every PIF waiting for an acknowledgement gets NACK|FABRIC_ERR.
    void fail_all_pending();

    void reset();
    uint32_t status(unsigned pif) const;
    PacketizerCounters counters() const;

private:
    struct Pif {
        std::array<uint64_t, 6> regs{}; // payload0 lo/hi, payload1 lo/hi, dest lo/hi
        uint8_t written[3][16]{};       // bytes stored since the last packet, per register
        uint32_t status = 0;
        uint32_t seq = 0;
        bool waiting = false;
    };
    bool setup_complete(const Pif &p) const;
    void clear_setup(Pif &p);
    void guest_error(const std::string &msg);

    PacketizerHost host_;
    mutable std::mutex mu_;
    std::array<Pif, UNIMEM_IF_COUNT> pifs_;
    std::array<uint64_t, UNIMEM_IF_COUNT> pidt_{};
    uint64_t base_dest_ = 0;
    uint64_t pid_conf_ = 0;
    PacketizerCounters ctr_;
};

// tag layout: PIF index in bits [63:56], sequence number in [31:0]
constexpr uint64_t pktz_tag(unsigned pif, uint32_t seq)
{
    return (uint64_t(pif) << 56) | seq;
}

} // namespace rackemu::unimem
