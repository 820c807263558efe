// SPDX-License-Identifier: MIT
//
// Unimem virtualized packetizer device core (ExaNoDe D3.6 sec. 2.2.3 Fig. 7-8, sec. 5.2,
// Tables 4-5, Fig. 17-18): 64 packetizer interfaces (PIFs) and the trust interface (TIF), plus
// the kernel interface (KIF, rackemu extension): a 65th interface with the PIF
// registers, whose PID is KIF_PIDT (valid while KIF_CONF is set) and whose destination may also
// be another node's KIF (unimem_regs.h, docs/unimem.md). Index UNIMEM_KIF in tags and links.
//
// PIF pipeline, per interface:
//   IDLE --(payload0, payload1, dest all written)--> check PID_CONF and BASE_DEST
//     PID_CONF bit clear  -> dropped, status 0, NOPID counter          -> IDLE
//     dest outside window -> ILLEGAL                                   -> IDLE
//     otherwise           -> PEND, packet handed to the transmit link   -> WAIT_ACK
//   WAIT_ACK --complete(tag, RK_OK | RK_NACK | other)--> ACK | NACK | NACK+FABRIC_ERR -> IDLE
// Writes during WAIT_ACK set OVERWR_BUF and are dropped (one hardware buffer per PIF,
// sec. 5.2.4). CLR_REQ returns the PIF to IDLE and forgets the outstanding tag.
//
// A 128-bit register counts as written once all of its valid bytes have been stored since the
// last packet: payload0 and payload1 need both 64-bit halves, dest needs bytes 0-4 (bits 39:0).
//
// Host and link: the core gets the guest-error log from its rackemu::Host (rackemu/host.h; the
// packetizer raises no interrupt: the seed defines none). Its transmit link carries a packet to
// the destination vmbox and the answer comes back through complete(). In a node (the
// PacketizerConfig constructor) the link is built in: a packet for this node goes into the
// node's vmbox (a device link: the Vmbox core given in the configuration), one for another node
// over the fabric as a RKF_SVC_UNIMEM_MBOX request on the core's endpoint (host.ep()). The
// packetizer is that service's core (rk_pktz_device_ops.fabric): it serves other nodes'
// deliveries into the node's vmbox (serve_request, answering first: docs/mailbox.md) and takes
// the replies to its own (serve_reply). Tests and fuzzers give their own PacketizerTransmit.
//
// State: PacketizerState below, described once in the RK_PKTZ_PIF_STATE and RK_PKTZ_STATE
// X-macros (hw/core/state.h); the live core keeps it as s_.
//
// Decode: every register (PIF registers as arrays of 64, one per PIF page; PIDT as an array of
// 64; BASE_DEST, PID_CONF, CLR_REQ, ID and the counters of PKTZ_COUNTER_TABLE) is a row of one
// register table decoded by the register bank (regbank.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>

#include "rackemu/fabric_proto.h"
#include "rackemu/host.h"
#include "rackemu/unimem_regs.h"
#include "regbank.h"
#include "state.h"
#include "unimem_capi.h"

struct RkFabricEndpoint;

namespace rackemu::unimem {

// The transmit link: send the 256-bit packet of interface `pif` (0..63, or UNIMEM_KIF) to global
// address `dest`, whose FIFO the core resolved to `mif` (0..63, or UNIMEM_KIF: the destination
// node's KIF). The link hands `pif` to the destination as the sending interface. Called without
// the core lock held; the answer comes back through Packetizer::complete(tag, ...), possibly
// before the call returns. An empty function: every packet fails with FABRIC_ERR.
using PacketizerTransmit =
    std::function<void(unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t words[4])>;

// A snapshot of the counters: those of PKTZ_COUNTER_TABLE (guest-visible TIF registers) and the
// core-only ones (no register; tests and logs).
struct PacketizerCounters {
#define PKTZ_COUNTERS_FIELD_(N, n, d) uint64_t n = 0;
    PKTZ_COUNTER_TABLE(PKTZ_COUNTERS_FIELD_)
#undef PKTZ_COUNTERS_FIELD_
    uint64_t fabric_errors = 0, overwrites = 0, stale_completions = 0, bad_access = 0;
    std::array<uint64_t, PKTZ_KIF_CNT_COUNT> kif{}; // PKTZ_KIF_COUNTER_TABLE (KIF's TIF registers)
};

using PktzWritten = std::array<uint16_t, 3>;
using PktzPidt = std::array<uint64_t, UNIMEM_IF_COUNT>;
using PktzCnt = std::array<uint64_t, PKTZ_CNT_COUNT>;
using PktzKifCnt = std::array<uint64_t, PKTZ_KIF_CNT_COUNT>;

// One interface's state (a PIF, or the KIF).
#define RK_PKTZ_PIF_STATE(X) \
    X(Words<6>, regs)       /* payload0 lo/hi, payload1 lo/hi, dest lo/hi */ \
    X(PktzWritten, written) /* bit b: byte b of payload0/payload1/dest stored since the last packet */ \
    X(uint32_t, status)     /* PKTZ_ST_* */ \
    X(bool, waiting)        /* a packet awaits its acknowledgement (status PEND) */
struct PktzPif {
    RK_STATE_FIELDS(RK_PKTZ_PIF_STATE)
};
using PktzPifs = std::array<PktzPif, UNIMEM_IF_TOTAL>;

// The architectural state, what the core saves and loads (hw/core/state.h).
#define RK_PKTZ_STATE(X) \
    X(PktzPifs, pifs) /* PIFs 0..63, then the KIF */ \
    X(PktzPidt, pidt) \
    X(uint64_t, base_dest) \
    X(uint64_t, pid_conf) \
    X(uint64_t, kif_pidt)       /* KIF_PIDT */ \
    X(uint64_t, kif_conf)       /* KIF_CONF */ \
    X(PktzCnt, counters)        /* PKTZ_COUNTER_TABLE order */ \
    X(PktzKifCnt, kif_counters) /* PKTZ_KIF_COUNTER_TABLE order */ \
    X(uint64_t, fabric_errors) \
    X(uint64_t, overwrites) \
    X(uint64_t, stale_completions) \
    X(uint64_t, bad_access)
struct PacketizerState {
    using Pif = PktzPif;
    RK_STATE_FIELDS(RK_PKTZ_STATE)
};

class Vmbox;

// The device's configuration in a node (C: RkPktzConfig in unimem_capi.h).
struct PacketizerConfig {
    Vmbox *vmbox = nullptr; // the node's vmbox: local packets, and other nodes' deliveries
    bool kif = true;        // the kernel interface is present
    // Deliveries into the vmbox answer first (docs/mailbox.md): the sender's ACK or NACK leaves
    // before the packet becomes visible and raises the interrupt. false: the old order.
    bool ack_first = true;
    // the glue's trace points of the link and the service (nullptr: none)
    const RkPktzTrace *trace = nullptr;
    void *trace_opaque = nullptr;
};

class Packetizer {
public:
    // kif: the kernel interface is present (CAPS bit); without it its page and TIF rows are
    // unmapped (guest errors).
    Packetizer(Host host, PacketizerTransmit transmit, bool kif = true);
    // In a node: the built-in link (this node's vmbox, other nodes over host.ep()).
    Packetizer(Host host, const PacketizerConfig &cfg);

    // The device's register region (rk_pktz_device_ops): a read first dispatches what the node's
    // port has delivered (a guest polling a PIF's status takes its acknowledgement itself); an
    // access that is not naturally aligned is refused with RK_DECODE_ERROR (as the bus did).
    Status region_read(uint64_t offset, unsigned size, uint64_t *value);
    Status region_write(uint64_t offset, uint64_t value, unsigned size);

    // MMIO. Loads never fault; stores to read-only or unmapped offsets are logged and ignored.
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

    // The acknowledgement for a transmitted packet: RK_OK = ACK, RK_NACK = NACK (the vmbox was
    // full), anything else = NACK | FABRIC_ERR. Unknown or stale tags are counted and ignored
    // (a reply after CLR_REQ, a forged reply).
    void complete(uint64_t tag, Status st);
    // A RKF_SVC_UNIMEM_MBOX reply frame from the destination node (or the bridge).
    void serve_reply(const rkf_frame_hdr &h);
    // The fabric went down: every PIF waiting for an acknowledgement gets NACK|FABRIC_ERR.
    void fail_all_pending();
    // A RKF_SVC_UNIMEM_MBOX request from another node's packetizer, on the port thread or a vCPU
    // that polls: delivered into the node's vmbox (validated by Vmbox::serve_frame), answered on
    // `ep`. Held until the vmbox's first reset (at most 5 s), refused with BAD_FRAME after that.
    void serve_request(RkFabricEndpoint *ep, const rkf_frame_hdr &h, const void *payload);

    // The delivery order into the vmbox (QOM "ack-first") and how many deliveries were answered
    // each way (QOM "acks-first" / "acks-after"), local and remote.
    bool ack_first() const { return ack_first_.load(); }
    void set_ack_first(bool on) { ack_first_.store(on); }
    uint64_t acks(bool first) const { return (first ? acks_first_ : acks_after_).load(); }

    void reset();
    bool has_kif() const { return kif_; }
    uint32_t status(unsigned pif) const; // pif 0..63, or UNIMEM_KIF
    PacketizerCounters counters() const;

    // Migration: save() is a consistent snapshot (core lock held); load() validates everything
    // and returns false, changing nothing, on any inconsistency. A PIF that was waiting for its
    // acknowledgement at save completes in load() with NACK | FABRIC_ERR (as fail_all_pending():
    // the answer went to the saved machine), and every tag sent before load() is stale.
    // *why names the refused field. The byte-string forms are the device's save/load ops.
    PacketizerState save() const;
    bool load(const PacketizerState &st, std::string *why = nullptr);
    void save(StateOut &out) const;
    bool load(StateIn &in, std::string *why);

    // The register table (for tests and docs).
    struct Ctx {
        uint64_t offset = 0; // the access being decoded
        unsigned size = 0;
        bool send = false;         // a setup completed: transmit after the lock is released
        unsigned pif = 0, mif = 0; // sending interface, destination FIFO (either may be UNIMEM_KIF)
        uint64_t tag = 0, dest = 0;
        uint64_t words[UNIMEM_PACKET_WORDS] = {};
    };
    static std::span<const Reg<Packetizer, Ctx>> reg_table();

private:
    static bool setup_complete(const PacketizerState::Pif &p);
    static const char *invalid_pif(const PacketizerState::Pif &p); // why it is unreachable, or nullptr
    void link(unsigned pif, uint64_t tag, uint64_t dest, unsigned mif, const uint64_t words[4]);
    void answered(uint64_t tag, Status st); // the link's completions: traced, then complete()
    void write_pif_locked(unsigned pif, unsigned reg, uint64_t merged, Ctx &ctx);
    void clear_request_locked(uint64_t mask, bool kif);
    void fail_locked(unsigned pif);
    void count_locked(unsigned pif, unsigned pktz_index, unsigned kif_index);
    void guest_error_locked(const std::string &msg);
    bool kif_absent(uint64_t offset) const; // a KIF offset on a device without the KIF

    Host host_;
    PacketizerTransmit transmit_;
    const bool kif_;
    Vmbox *const vmbox_ = nullptr; // the built-in link's local vmbox
    const RkPktzTrace *const trace_ = nullptr;
    void *const trace_opaque_ = nullptr;
    std::atomic<bool> ack_first_{true};
    std::atomic<uint64_t> acks_first_{0}, acks_after_{0};
    mutable std::mutex mu_; // guards everything below
    PacketizerState s_;
    std::array<uint32_t, UNIMEM_IF_TOTAL> seq_{}; // tag sequence per PIF and the KIF (not architectural)
    RegBank<Packetizer, Ctx> bank_{reg_table()};
};

// tag layout: PIF index (or UNIMEM_KIF) in bits [63:56], sequence number in [31:0]
constexpr uint64_t pktz_tag(unsigned pif, uint32_t seq)
{
    return (uint64_t(pif) << 56) | seq;
}

} // namespace rackemu::unimem
