// SPDX-License-Identifier: MIT
//
// The rackemu RNIC device core: a PCIe RDMA NIC speaking RoCEv2 with InfiniBand RC semantics,
// QEMU-independent. Registers, command block, doorbells and queue entries are
// rackemu/rnic_regs.h; the wire is rackemu/roce.h and wire.h; the transport is the RC engine
// (rc.h), which this core drives through RcEnv implemented on guest RAM and the MR table.
// docs/rnic.md describes the interface a driver sees.
//
// Pipeline of a send work request:
//   SQ doorbell (SQ_PI) -> FETCH (DMA the 128-byte WQE from the ring, check opcode, SGE count,
//   every SGE's lkey/PD/bounds/access) -> POSTED to the engine (its wr_id is the core's sequence
//   number, its local buffer the copied SGE list) -> the engine gathers (read_local), sends,
//   retries, and scatters READ/atomic results (write_local) -> COMPLETED: complete() writes the
//   CQE (user wr_id, status, vendor_err, modeled_ns) into the send CQ -> CQ armed? interrupt.
//   A WQE that fails its checks completes with LOC_QP_OP_ERR / LOC_PROT_ERR in order (after
//   every earlier WR of the QP completed) and moves the QP to Error, which flushes the rest.
// Receive side: the engine asks recv_available() (the RQ's next WQE is fetched on demand),
// places bytes with recv_write() (lkey checks per SGE), and complete(recv) writes the CQE.
// Target side: every remote access (WRITE, READ, atomics, FLUSH, ATOMIC WRITE) is checked here
// against the MR of its rkey (index and key byte, PD of the QP, bounds, access flag) before any
// byte moves, and executed by the device on guest RAM; never by the guest's CPUs. Every atomic
// (COMPARE_SWAP, FETCH_ADD, the extended XATOMIC/XATOMIC_POST) is handed to the atomic unit
// (atomic_unit.h, docs/atomic-unit.md) at its arrival on the device's clock: the unit's ALU
// performs it as one host atomic on the mapped guest word (global atomicity: atomic with the
// guest CPUs' own atomics) and its timing model accounts the unit's cache, tags and host link
// (AMU_* counters). The engine calls in one at a time and needs the old value at once, so the
// value is executed at arrival (AtomicUnit::execute: arrival order is the ALU's order) and the
// model times the operation behind, up to each next arrival: operations that arrive while the
// unit is busy share its look-ahead window, registers, rate limiting and RAW buffer. Reading an
// AMU_* counter runs the model to the end of what it holds.
//
// Threading (one lock, mu_): ctrl_read/ctrl_write/db_read/db_write come from a vCPU thread
// (MMIO), on_frame from the fabric port's thread, poll() from the host's timer 0 in the main
// loop, tx_resume() from the host's transmit thread once the port has room again. Each takes
// mu_ for its whole run; the host (DMA, set_irq, guest_error, send_frame, timer_arm, tx_wait)
// is called with mu_ held and never calls back into the core (a frame to this node's own MAC
// is queued and delivered after the current call, under the same lock).
//
// Backpressure: a send the link cannot take now (LinkTx::Busy, the port's ring is full) is not
// dropped: the frame is held, later frames queue behind it in order, the engine's requesters
// pause at their next PSN (RcEnv::tx_ready), and host tx_wait() asks for a call of tx_resume()
// when the port has room. So a doorbell on a vCPU never waits for the link.
//
// Interrupts: line v of the host is MSI-X vector v (or INTx, the glue's OR): level = INT_STATUS
// bit v & INT_ENABLE bit v.
//
// Caveat: commands run synchronously in the MMIO write (a real NIC's firmware takes
// microseconds to milliseconds). FLUSH (IBTA Memory Placement Extensions) is done on the target
// before its response: a full memory barrier after the earlier WRITEs (all applied, in PSN
// order, by this thread) for global visibility; for persistence also a write-back of the range
// to the RAM's backing file (RkHostOps::persist, msync), the emulated persistence domain
// (docs/rnic.md "FLUSH").
//
// Migration (docs/rnic.md "Migration", rnic_state.h/.cc): pause(true) quiesces the device while
// the VM is stopped (frames from the link are held in order, up to kPausedFrames, beyond that
// dropped and counted in rx_paused_drops; timers and paused senders wait); save() exports the
// architectural state (registers, verbs objects, every QP's transport state and responder
// resources, counters); load() validates a state completely before it changes anything. Frames
// in flight are not state: RC retransmission recovers them (load() arms the retransmission timer
// of every QP with unacknowledged work).
// Caveat: CQ overflow puts the CQ into an error state (its CQEs are dropped and counted, async
// event CQ_ERRORS); the QPs using it are not moved to Error.
#pragma once

#include <bitset>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "rackemu/host.h"
#include "rackemu/rnic_regs.h"
#include "rk_remote_mem.h"
#include "atomic_unit.h"
#include "rc.h"
#include "regbank.h"
#include "rnic_pub.h"
#include "rnic_state.h"

struct rkf_live_table;

namespace rackemu::rnic {

// The timing model (docs/rnic.md "Timing model"). The glue's properties.
struct RnicTiming {
    uint32_t link_mbps = 100000; // link bandwidth, Mbit/s
    uint32_t hop_ns = 300;       // per hop; NIC -> switch -> NIC is 2 hops
    uint32_t nic_mhz = 500;      // NIC pipeline clock
    uint32_t pcie_ns = 400;      // one-way PCIe latency (a read costs 2)
    uint32_t pcie_mbps = 16000;  // PCIe bandwidth, MByte/s
    uint32_t max_mtu = 4096;     // largest path MTU modify QP accepts
    // The responder's rate ceilings (docs/rnic.md "Rate ceilings"; 0 turns one off): service
    // time of one atomic to host memory and to device memory, serialized per device (ConnectX-5:
    // about 2.9 M and 9 M serialized CAS/s), and the time one request message occupies its QP
    // (about 18 M messages/s on one QP).
    uint32_t atomic_host_ns = 345;
    uint32_t atomic_dm_ns = 111;
    uint32_t qp_msg_ns = 55;
};

// Fixed pipeline costs (cycles of the NIC clock), documented with the timing model.
constexpr uint32_t kCyclesPerWqe = 20;
constexpr uint32_t kCyclesPerPacket = 10;
// Preamble, start delimiter, FCS and inter-frame gap: bytes a frame occupies on the link beyond
// what the device hands to the port.
constexpr uint32_t kWireOverhead = 24;

// Frames (bytes) the device holds while the link pushes back: READ responses and ACKs the
// responder owes (the requester itself pauses instead). Beyond it frames are dropped and counted
// in link_tx_drops; RC retransmission recovers them. RnicConfig::tx_hold_max_bytes (tests).
constexpr size_t kTxHoldMaxBytes = 64u << 20;

// The direct path (docs/rnic.md "Direct path"): READs and WRITEs to a live peer copied from or
// into its RAM file. Longest message done so (longer ones take the wire).
constexpr uint32_t kDirectMax = 256u << 10;
struct RnicDirect {
    // This node's published table (its area of the RAM-file tail, RK_RMEM_TAIL_RNIC_OFF) and
    // its size; null: nothing published, peers' READs of this node take the wire.
    rnic_pub *own = nullptr;
    size_t own_bytes = 0;
    uint32_t node = UINT32_MAX; // this node's fabric id
    // rk_rmem_direct_run on the node's remote memory; empty: this node's requests take the wire.
    std::function<int(unsigned node, rk_rmem_direct_fn fn, void *opaque, int *fn_ret)> run;
    // The node's view of the bridge's liveness table (rk_fabric_port_liveness): a WRITE's busy
    // word holds its node's word, and the owner clears a word whose holder is no longer live
    // (while its table is valid). Null: 1 is held and never cleared by the owner.
    const rkf_live_table *live = nullptr;
};

struct RnicConfig {
    RnicTiming timing;
    uint8_t mac[6] = {0x02, 0x52, 0x4b, 0, 0, 0};
    uint32_t ip = 0xC6120001u; // host order
    bool link = true;          // a fabric port is attached (RNIC_CAP_LINK, STATUS.LINK_UP)
    // A peer node's MAC and IPv4 (modify QP's dest_node). Default: the fabric's rule
    // (rnic_default_peer_addr); the glue may set the port library's.
    std::function<bool(uint32_t node, uint8_t mac[6], uint32_t *ip)> peer_addr;
    RcConfig rc;
    // The atomic unit's properties (the glue's amu-*; must pass amu_check_config, else the
    // defaults are used and a guest error says so). atomicity is always Global in the device.
    AmuConfig amu;
    // Bytes of frames held while the link pushes back (kTxHoldMaxBytes; smaller in tests, to
    // reach the limit quickly).
    size_t tx_hold_max_bytes = kTxHoldMaxBytes;
    RnicDirect direct;
    // Bytes of device memory (docs/rnic.md "Device memory"; the glue's dm-size): a multiple of
    // RNIC_DM_ALIGN up to RNIC_DM_SIZE_MAX (else rounded down and a guest error says so); 0: none.
    uint32_t dm_size = 256u << 10;
};

// The fabric's addressing rule for a node (rkf_eth_node_mac/rkf_eth_node_ipv4, fabric_proto.h:
// MAC 02:52:4b:00:00:<id>, IPv4 198.18.0.<id + 1>). Refuses ids the rule cannot express.
bool rnic_default_peer_addr(uint32_t node, uint8_t mac[6], uint32_t *ip);

struct RnicCounters {
#define RNIC_CNT_X_FIELD_(N, n, d) uint64_t n = 0;
    RNIC_DEV_COUNTERS(RNIC_CNT_X_FIELD_)
#undef RNIC_CNT_X_FIELD_
};

// What the link did with a frame: queued it, could not take it now (the port's ring is full:
// the device holds it and pauses), or dropped it (no link, a bad frame; counted).
enum class LinkTx : uint8_t { Sent, Busy, Dropped };

// The asynchronous event queue (RNIC_REG_EQ_*, docs/rnic.md "Async events"): its whole state,
// in one struct so that migration can carry it (with link_up, the port state events report).
struct RnicEq {
    uint64_t base = 0;   // the ring's guest-physical address (EQ_BASE_LO/HI, 64-aligned)
    uint32_t ctrl = 0;   // EQ_CTRL as accepted: ENABLE, DEPTH_LOG2, VECTOR
    uint32_t pi = 0;     // events written since ENABLE (free-running)
    uint32_t ci = 0;     // the driver's consumer index (EQ_CI)
    uint32_t seq = 0;    // events generated since ENABLE, dropped ones included (rnic_eqe.seq)
    uint32_t status = 0; // RNIC_EQ_ST_* (W1C)
    bool armed = false;  // EQ_ARM: interrupt on the next event
    bool link_up = true; // the port's state as last reported (STATUS.LINK_UP, PORT_* events)
};

// A frame whose delivery (on_frame) starts within this many ns of the previous one's end was
// waiting behind it (the port dispatches what its ring holds back to back): the frames of one
// such pass reach the atomic unit at the pass's start (docs/atomic-unit.md "In the RNIC").
constexpr uint64_t kRxPassGapNs = 2000;

class Rnic : private RcEnv {
public:
    // The link, the retransmission timer (timer 0) and backpressure are the host's (send_frame,
    // timer_arm, tx_wait: rackemu/host.h).
    Rnic(Host host, RnicConfig cfg);
    ~Rnic() override;
    Rnic(const Rnic &) = delete;
    Rnic &operator=(const Rnic &) = delete;

    // BAR0 (registers; 4- or 8-byte accesses) and BAR2 (doorbell pages; 4-byte accesses).
    uint64_t ctrl_read(uint64_t offset, unsigned size);
    void ctrl_write(uint64_t offset, uint64_t value, unsigned size);
    uint64_t db_read(uint64_t offset, unsigned size);
    void db_write(uint64_t offset, uint64_t value, unsigned size);

    // One Ethernet frame from the link (any bytes: bad frames are counted and dropped).
    void on_frame(const uint8_t *frame, size_t len);
    // Timers due by host.now_ns() (retransmission, RNR waits), then ACKs owed.
    void poll();
    uint64_t next_deadline_ns();
    // The link has room again: send the held frames in order, then let the paused send queues
    // continue. Returns true while the link still pushes back (wait for room and call again).
    bool tx_resume();
    // The fabric port's link went up or down (the glue watches the port): STATUS.LINK_UP and a
    // PORT_ACTIVE / PORT_ERR async event on a change. Ignored without a link (RnicConfig::link).
    void set_link(bool up);

    // Device reset: every object destroyed, registers and counters at reset values.
    void reset();

    // Migration (rnic_state.cc). pause(true): the device changes nothing while the VM is
    // stopped: frames from the link are held in order (kPausedFrames; beyond, dropped and
    // counted), timers and paused senders wait; pause(false) delivers the held frames and goes
    // on. save(): the state (any time, under the lock). load(): validate `s` completely (false
    // and a reason in *why, nothing changed) then replace the device's state with it; frames
    // held while paused belonged to the old state and are dropped (counted).
    void pause(bool on);
    RnicSnapshot save();
    bool load(const RnicSnapshot &s, std::string *why);
    // The same as one string (hw/core/state.h; the device ops' save/load): load refuses a
    // short or overlong string, a list beyond kListMax, and whatever load(RnicSnapshot) refuses.
    void save(StateOut &out);
    bool load(StateIn &in, std::string *why);
    static constexpr size_t kPausedFrames = 4096;

    // Counter i (RNIC_CNT_INDEX_*), as the register reads it.
    uint64_t counter(unsigned index);
    uint32_t int_status();
    // Interrupt line levels, for the glue after reset (line = vector).
    bool irq_level(unsigned vector);

    struct Pending; // per-call deferred work (the register bank's context)

private:
    struct Mr;
    struct Cq;
    struct Qp;
    struct Pd {
        bool valid = false;
        uint32_t users = 0; // MRs and QPs on it
    };
    using RegRow = Reg<Rnic, Pending>;
    static std::span<const RegRow> reg_table();

    // RcEnv
    uint64_t now_ns() override;
    void send_frame(const uint8_t *frame, size_t len) override;
    bool tx_ready() override { return !tx_blocked_; }
    WcStatus read_local(uint32_t qpn, const SendWr &wr, uint64_t off, uint8_t *dst, uint32_t len) override;
    WcStatus write_local(uint32_t qpn, const SendWr &wr, uint64_t off, const uint8_t *src,
                         uint32_t len) override;
    Remote check_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access) override;
    Remote write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const uint8_t *src, uint32_t len) override;
    Remote read_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint8_t *dst, uint32_t len) override;
    Remote atomic_remote(uint32_t qpn, uint8_t opcode, uint32_t rkey, uint64_t va, uint64_t swap_add,
                         uint64_t compare, uint64_t *orig) override;
    Remote xatomic_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const XAtomicEth &x, bool fetch,
                          uint64_t *orig) override;
    Remote atomic_write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t value) override;
    Remote flush_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint8_t placement,
                        uint8_t selectivity) override;
    bool recv_available(uint32_t qpn) override;
    WcStatus recv_write(uint32_t qpn, uint64_t off, const uint8_t *src, uint32_t len) override;
    void flush_recv(uint32_t qpn) override;
    void complete(const Completion &c) override;
    void qp_event(uint32_t qpn, RcEvent ev, WcStatus why, uint8_t syndrome) override;
    void request_executed(uint32_t qpn, uint8_t opcode) override;

    // registers and commands
    void guest_error(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    void exec_command();
    uint16_t cmd_reg_mr(struct rnic_cmd &c);
    uint16_t cmd_create_cq(struct rnic_cmd &c);
    uint16_t cmd_create_qp(struct rnic_cmd &c);
    uint16_t cmd_modify_qp(struct rnic_cmd &c);
    uint16_t cmd_query_qp(struct rnic_cmd &c);
    uint16_t cmd_destroy_qp(uint32_t qpn);
    bool probe_ram(uint64_t addr, uint64_t len);

    // memory
    Mr *mr_by_key(uint32_t key);
    // Walk [va, va + len) of an MR (bounds already checked) in physically contiguous pieces.
    template <typename F> bool mr_walk(const Mr &m, uint64_t va, uint64_t len, F &&piece);
    bool mr_rw(const Mr &m, uint64_t va, uint8_t *buf, uint64_t len, bool write);
    uint32_t check_local(const Qp &q, const struct rnic_sge &s, bool write); // RNIC_LERR_*
    WcStatus sge_rw(const Qp &q, const struct rnic_sge *sge, unsigned nsge, uint64_t off, uint8_t *buf,
                    uint32_t len, bool write, uint32_t *lerr);
    Remote remote_mr(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access, Mr **out);
    bool dma(uint64_t addr, void *buf, uint64_t len, bool write);

    // persistent memory (rnic_nvm.cc): every MR access's piece goes through nvm_rw; inside an
    // NvmAccept scope a write is a responder's payload, acknowledged into the NIC's buffer
    bool nvm_rw(uint64_t pa, uint8_t *buf, uint64_t len, bool write);
    Status nvm_drain(uint64_t pa, uint64_t len); // RK_OK: persistent memory, drained
    bool nvm_placed(uint64_t pa, uint64_t len);
    bool nvm_flush(const Mr &m, uint64_t va, uint64_t len, bool persist);
    bool nvm_mr(const Mr &m);                                                // any page in persistent memory
    bool nvm_failed(const char *what, uint64_t pa, uint64_t len, Status st); // counted, false
    struct NvmAccept {
        explicit NvmAccept(Rnic &d) : d_(d) { d_.nvm_accept_ = true; }
        ~NvmAccept() { d_.nvm_accept_ = false; }
        NvmAccept(const NvmAccept &) = delete;
        NvmAccept &operator=(const NvmAccept &) = delete;
        Rnic &d_;
    };
    bool nvm_accept_ = false;

    // the atomic unit
    class AmuDev;
    Remote amu_exec(const Mr &m, uint64_t va, const AmoRequest &rq, uint64_t *orig);
    void amu_reset();
    void amu_sync();   // the unit's counters into ctr_.amu_*
    void amu_settle(); // the model run to the end of what it holds, then amu_sync

    // queues
    Qp *qp_by_qpn(uint32_t qpn);
    void sq_doorbell(Qp &q, uint32_t pi);
    void rq_doorbell(Qp &q, uint32_t pi);
    void pump_sq(Qp &q);
    void complete_bad_wqe(Qp &q); // a WQE held for failing its checks: its CQE, the QP to Error
    bool fetch_rwqe(Qp &q);
    void write_cqe(uint32_t cqn, struct rnic_cqe &e, bool solicited_event);
    void qp_fail(Qp &q, const char *why);
    void after_engine();
    void raise(unsigned vector);
    void eq_event(uint8_t type, uint32_t element, uint32_t detail);
    void eq_write_ctrl(uint32_t merged);
    void update_irq();
    void arm_timer();
    LinkTx link_send(const uint8_t *frame, size_t len);
    void hold_frame(const uint8_t *frame, size_t len);
    void drain_held();
    bool check_state(const RnicSnapshot &s, std::string *why); // load(), before any change
    void clear_objects(); // reset(), load(): a new engine, an empty atomic unit, no verbs objects

    // the direct path (rnic_direct.cc)
    bool direct_op(Qp &q, uint64_t seq, const SendWr &wr); // true: done (completed or failed)
    void pub_wait_writers();
    void pub_init();
    void pub_all_dirty();
    void pub_qp_changed(uint32_t index);
    void pub_mr_changed(uint32_t index);
    void publish();
    void sync_served();

    // timing model
    uint64_t ser_ns(uint64_t frame_bytes) const;
    uint64_t pcie_ns(uint64_t bytes) const;
    uint64_t nic_ns(uint64_t cycles) const;
    uint64_t model_wr_ns(uint8_t wr_op, uint64_t len, uint32_t mtu) const;
    uint64_t model_recv_ns(uint64_t len, uint32_t mtu) const;
    // device memory (rnic_dm.cc)
    uint16_t cmd_dm(struct rnic_cmd &c); // ALLOC_DM, FREE_DM, REG_DM_MR, DM_COPY
    bool dm_rw(const Mr &m, uint64_t va, uint8_t *buf, uint64_t len, bool write);
    Remote dm_atomic(const Mr &m, uint8_t opcode, uint64_t va, uint64_t swap_add, uint64_t compare,
                     uint64_t *orig);
    void dm_clear();
    // the responder's rate ceilings (rnic_ceiling.cc)
    uint64_t arrival_ns();
    void ceil_reset();

    Host host_;
    RnicConfig cfg_;
    std::mutex mu_;
    RegBank<Rnic, Pending> bank_;
    std::unique_ptr<RcEngine> rc_;

    // registers
    uint32_t ctrl_ = 0, cmd_addr_lo_ = 0, cmd_addr_hi_ = 0, cmd_status_ = 0, cmd_count_ = 0;
    uint32_t int_status_ = 0, int_enable_ = 0, model_hi_latch_ = 0;
    uint64_t cq_events_[RNIC_BITMAP_WORDS(RNIC_MAX_CQ)] = {};
    uint64_t qp_errors_[RNIC_BITMAP_WORDS(RNIC_MAX_QP)] = {};
    uint64_t cq_errors_[RNIC_BITMAP_WORDS(RNIC_MAX_CQ)] = {};
    RnicCounters ctr_;
    uint64_t cnt_base_[RNIC_CNT_COUNT] = {}; // values at the last CNT_CLEAR
    bool irq_[RNIC_MSIX_VECTORS] = {};
    RnicEq eq_;

    // verbs objects
    std::vector<Pd> pds_;
    std::vector<std::unique_ptr<Mr>> mrs_;
    std::vector<uint8_t> mr_tag_;
    std::mt19937 key_rng_{std::random_device{}()}; // when getrandom() fails
    uint8_t next_key_tag(uint8_t prev);
    std::vector<std::unique_ptr<Cq>> cqs_;
    std::vector<std::unique_ptr<Qp>> qps_;
    uint64_t next_seq_ = 1;

    std::deque<std::vector<uint8_t>> loop_; // frames to this node's own MAC
    // Backpressure: set when the link returned Busy, cleared when every held frame went out.
    // While set, frames are held in order and the engine's requesters pause (tx_ready()).
    bool tx_blocked_ = false;
    std::deque<std::vector<uint8_t>> held_;
    size_t held_bytes_ = 0;

    std::unique_ptr<AmuDev> amu_host_;
    std::unique_ptr<AtomicUnit> amu_;
    uint64_t amu_unloaded_ns_ = 0; // the unit's time for one atomic that misses, unloaded
    uint64_t amu_start_ps_ = 0;    // the unit's first arrival
    // the receive pass (kRxPassGapNs): its start, the end of the last delivery, inside one
    uint64_t rx_pass_ns_ = 0, rx_end_ns_ = 0;
    bool in_rx_ = false;
    // The rate ceilings' modeled clocks (rnic_ceiling.cc): when the atomic serializer is next
    // free, and whether the atomic being executed is to device memory (set by atomic_remote and
    // xatomic_remote for request_executed). Each QP's clock is Qp::ceil_free_ns.
    uint64_t ceil_atomic_free_ns_ = 0;
    bool ceil_atomic_dm_ = false;

    // Device memory (rnic_dm.cc): its bytes (cfg_.dm_size) and the allocations (dm id = index + 1;
    // len 0: free); users: MRs registered over it.
    struct DmAlloc {
        uint64_t off = 0, len = 0;
        uint32_t users = 0;
    };
    std::vector<uint8_t> dm_;
    std::vector<DmAlloc> dms_;

    // The unit's counters before the last load (the unit restarts empty: rnic_state.cc).
    RnicCounters amu_base_;

    // The direct path: the published table, its page list area and what is used of it, the
    // flags as published, what changed since, peers' served READs already counted, the bounce
    // buffer of this node's direct READs.
    rnic_pub *pub_ = nullptr;
    uint64_t *pub_pages_ = nullptr;
    uint64_t pub_page_cap_ = 0, pub_pages_used_ = 0;
    uint32_t pub_unplaced_ = 0; // MRs published without their page list (no room)
    uint32_t pub_flags_ = 0;
    uint64_t pub_reads_seen_ = 0, pub_writes_seen_ = 0;
    std::bitset<RNIC_MAX_QP> pub_qp_dirty_;
    std::bitset<RNIC_MAX_MR> pub_mr_dirty_;
    std::vector<uint8_t> direct_buf_;

    // Migration: paused while the VM is stopped; frames from the link wait here.
    bool paused_ = false;
    int link_pending_ = -1; // set_link() while paused: the state to apply at pause(false), or -1
    std::deque<std::vector<uint8_t>> rx_paused_;
};

} // namespace rackemu::rnic
