// SPDX-License-Identifier: MIT
//
// The RNIC as a target (docs/rnic.md "FLUSH", docs/atomic-unit.md "In the RNIC"): the
// responder's remote accesses of RcEnv, each checked against the MR of its rkey before any byte
// moves (remote_mr, rnic_verbs.cc: the key byte, the QP's PD, the access flag, the bounds), then
// executed by the device on guest RAM, never by the guest's CPUs:
//   WRITE, READ      mr_rw through the MR's page list;
//   ATOMIC WRITE     8 bytes written;
//   FLUSH            a full barrier after the earlier WRITEs (global visibility), for persistence
//                    also the range written back to the RAM's backing file (the host's persist)
//                    or made durable in persistent memory (rnic_nvm.cc);
//   CMP_SWAP, FETCH_ADD, XATOMIC, XATOMIC_POST
//                    the atomic unit (atomic_unit.h): the value executed at arrival as one host
//                    atomic on the guest word (AmuDev::amo, rnic_objects.h: global atomicity), the
//                    unit's model timing it behind, up to each next arrival (amu_exec).
// Specification: IBA Vol 1 9.4 (RDMA READ/WRITE and atomic operations), 10.6.3 (memory access
// rights), IBA 1.5 Memory Placement Extensions (FLUSH placement and selectivity, ATOMIC WRITE);
// Underwood et al., "High Message Rate, NIC-Based Atomics", sec. III for the unit.
//
// Threading: with mu_ held, called by the engine inside on_frame / poll / a doorbell (a frame
// looped back on this node); the unit calls AmuDev from inside those calls.
//
// Caveat: a word the host cannot map (not plain RAM) is executed through DMA, atomic only among
// the device's own atomics (a guest error says so).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

// ---- WRITE and READ ----

Remote Rnic::check_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access)
{
    Mr *m = nullptr;
    return remote_mr(qpn, rkey, va, len, access, &m);
}

Remote Rnic::write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const uint8_t *src, uint32_t len)
{
    Mr *m = nullptr;
    const Remote r = remote_mr(qpn, rkey, va, len, RNIC_ACCESS_REMOTE_WRITE, &m);
    if (r != Remote::Ok) return r;
    const NvmAccept accept(*this); // persistent memory: acknowledged into the NIC's buffer
    if (!mr_rw(*m, va, const_cast<uint8_t *>(src), len, true)) return Remote::OpError;
    ctr_.payload_rx_bytes += len;
    return Remote::Ok;
}

Remote Rnic::read_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint8_t *dst, uint32_t len)
{
    Mr *m = nullptr;
    const Remote r = remote_mr(qpn, rkey, va, len, RNIC_ACCESS_REMOTE_READ, &m);
    if (r != Remote::Ok) return r;
    return mr_rw(*m, va, dst, len, false) ? Remote::Ok : Remote::OpError;
}

// ---- the atomic unit (docs/atomic-unit.md "In the RNIC") ----

void Rnic::amu_reset()
{
    amu_ = std::make_unique<AtomicUnit>(cfg_.amu, *amu_host_);
    amu_start_ps_ = UINT64_MAX;
    // The unloaded time of one operation that misses (a host read, the ALU): the requester's
    // timing model adds it for an atomic (every node's unit has the same properties).
    uint64_t word = 0;
    struct Done : AmuRamHost {
        using AmuRamHost::AmuRamHost;
        uint64_t at = 0;
        void complete(const AmoResult &r) override { at = r.done_ps; }
    } host(reinterpret_cast<uint8_t *>(&word), 0, 8);
    AtomicUnit one(cfg_.amu, host);
    AmoRequest rq;
    rq.op = ROCE_XOP_ADD;
    rq.operand = 1;
    one.submit(rq);
    one.drain();
    amu_unloaded_ns_ = host.at / 1000;
}

void Rnic::amu_sync()
{
    const AmuCounters &c = amu_->counters();
#define RNIC_AMU_SYNC_(name, doc) ctr_.amu_##name = amu_base_.amu_##name + c.name;
    AMU_COUNTERS(RNIC_AMU_SYNC_)
#undef RNIC_AMU_SYNC_
    ctr_.amu_max_outstanding = std::max(amu_base_.amu_max_outstanding, c.max_outstanding);
    ctr_.amu_busy_ns =
        amu_base_.amu_busy_ns + (amu_start_ps_ == UINT64_MAX ? 0 : (amu_->now_ps() - amu_start_ps_) / 1000);
    ctr_.amu_active_ns = amu_base_.amu_active_ns + amu_->active_ps() / 1000;
}

// The unit's model run to the end of the operations it holds, its counters into ctr_ (reading
// an AMU_* counter; every value was executed at arrival, only the modeled timing was pending).
void Rnic::amu_settle()
{
    if (!amu_->idle()) amu_->drain();
    amu_sync();
}

// One atomic through the unit, at the device's current time: its value now (the unit's
// execute(): the host atomic on the guest word, in arrival order), its timing by the unit's model
// behind, which runs up to each arrival, so the operations that arrive while the unit is still
// busy (a burst drained from the link at once, or queued behind a miss) share its look-ahead
// window, registers, rate limiting and RAW buffer (docs/atomic-unit.md "In the RNIC").
Remote Rnic::amu_exec(const Mr &m, uint64_t va, const AmoRequest &req, uint64_t *orig)
{
    // the guest-physical address of the operand (aligned to its size: never across a page)
    uint64_t pa = va;
    if (!m.phys) {
        const uint64_t ps = 1ull << m.page_shift, rel = va - (m.iova & ~(ps - 1));
        pa = m.pages[rel >> m.page_shift] + (rel & (ps - 1));
    }
    AmoRequest rq = req;
    rq.addr = pa;
    // its arrival: the start of the receive pass that delivered it (frames dispatched back to
    // back were waiting in the port's ring together), else now
    const uint64_t arrival = (in_rx_ ? std::min(rx_pass_ns_, host_.now_ns()) : host_.now_ns()) * 1000;
    rq.arrival_ps = arrival;
    if (amu_->now_ps() < arrival) amu_->run_until(arrival);
    if (amu_start_ps_ == UINT64_MAX) amu_start_ps_ = std::max(arrival, amu_->now_ps());
    // persistent memory: the NIC's buffer drained before, the word reported placed after
    const Status nv = nvm_drain(pa, rq.size);
    if (nv != RK_OK && nv != RK_DECODE_ERROR) return Remote::OpError;
    const AmoStatus s = amu_->execute(rq, orig);
    amu_sync();
    if (s == AmoStatus::Ok && nv == RK_OK && !nvm_placed(pa, rq.size)) return Remote::OpError;
    if (s != AmoStatus::Ok) {
        guest_error("atomic unit: operation at guest address 0x%llx refused: %s", (unsigned long long)pa,
                    amo_status_name(s));
        return Remote::OpError;
    }
    return Remote::Ok;
}

Remote Rnic::atomic_remote(uint32_t qpn, uint8_t opcode, uint32_t rkey, uint64_t va, uint64_t swap_add,
                           uint64_t compare, uint64_t *orig)
{
    Mr *m = nullptr;
    const Remote r = remote_mr(qpn, rkey, va, 8, RNIC_ACCESS_REMOTE_ATOMIC, &m);
    if (r != Remote::Ok) {
        guest_error("QP 0x%x: %s at 0x%llx rkey 0x%x refused by the MR check", qpn,
                    opcode == ROCE_OP_CMP_SWAP ? "COMPARE_SWAP" : "FETCH_ADD", (unsigned long long)va, rkey);
        return r;
    }
    if (va & 7) { // the engine refuses it first (invalid request)
        ctr_.remote_violations++;
        return Remote::AccessError;
    }
    if (m->dm) return dm_atomic(*m, opcode, va, swap_add, compare, orig); // rnic_dm.cc
    AmoRequest rq;
    rq.size = 8;
    if (opcode == ROCE_OP_CMP_SWAP) { // a masked compare-swap with every bit
        rq.op = ROCE_XOP_MCSWAP;
        rq.compare = compare;
        rq.mask = ~0ull;
    } else {
        rq.op = ROCE_XOP_ADD;
    }
    rq.operand = swap_add;
    const Remote e = amu_exec(*m, va, rq, orig);
    ctr_.modeled_pcie_ns += 2 * pcie_ns(8);
    return e;
}

Remote Rnic::xatomic_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const XAtomicEth &x, bool fetch,
                            uint64_t *orig)
{
    if (x.op >= ROCE_XOP_COUNT || (x.size != ROCE_XATOMIC_SIZE32 && x.size != ROCE_XATOMIC_SIZE64)) {
        guest_error("QP 0x%x: extended atomic with op %u size %u: no such operation (ops 0..%u, size 4 or 8)",
                    qpn, x.op, x.size, ROCE_XOP_COUNT - 1);
        ctr_.remote_violations++;
        return Remote::InvalidRequest;
    }
    Mr *m = nullptr;
    const Remote r = remote_mr(qpn, rkey, va, x.size, RNIC_ACCESS_REMOTE_ATOMIC, &m);
    if (r != Remote::Ok) {
        guest_error(
            "QP 0x%x: extended atomic at 0x%llx rkey 0x%x refused by the MR check (rkey, PD, bounds, "
            "REMOTE_ATOMIC)",
            qpn, (unsigned long long)va, rkey);
        return r;
    }
    if (va & (x.size - 1u)) {
        guest_error("QP 0x%x: extended atomic at 0x%llx not aligned to its %u bytes", qpn,
                    (unsigned long long)va, x.size);
        ctr_.remote_violations++;
        return Remote::InvalidRequest;
    }
    if (m->dm) { // the atomic unit works on host memory only
        guest_error("QP 0x%x: extended atomic on device memory (rkey 0x%x): refused", qpn, rkey);
        ctr_.remote_violations++;
        return Remote::OpError;
    }
    AmoRequest rq;
    rq.op = x.op;
    rq.size = x.size;
    rq.fetch = fetch;
    rq.operand = x.operand;
    rq.compare = x.compare;
    rq.mask = x.mask;
    const Remote e = amu_exec(*m, va, rq, orig);
    ctr_.modeled_pcie_ns += 2 * pcie_ns(x.size);
    return e;
}

// ---- ATOMIC WRITE and FLUSH ----

Remote Rnic::atomic_write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t value)
{
    Mr *m = nullptr;
    const Remote r = remote_mr(qpn, rkey, va, 8, RNIC_ACCESS_REMOTE_WRITE, &m);
    if (r != Remote::Ok) return r;
    uint8_t b[8];
    std::memcpy(b, &value, 8);
    const NvmAccept accept(*this); // persistent memory: acknowledged into the NIC's buffer
    if (!mr_rw(*m, va, b, 8, true)) return Remote::OpError;
    ctr_.payload_rx_bytes += 8;
    return Remote::Ok;
}

// FLUSH (IBTA Memory Placement Extensions, FETH placement type and selectivity level). The
// responder executes requests in PSN order on this thread, so every earlier RDMA WRITE (and
// ATOMIC WRITE) to the range has already been copied into guest RAM when this runs.
//  - global visibility: a full barrier, so those stores are visible to every CPU and agent before
//    the response leaves (the requester may then tell a third party to read them);
//  - persistence (implies global visibility): the range is written back to the node's
//    persistence domain, the RAM's backing file (host persist op: msync), before the response;
//    a range of persistent memory is made durable by its persistence-domain core instead
//    (RK_NVM_FLUSH; global visibility alone drains the NIC's buffer over it: rnic_nvm.cc).
// The MR needs FLUSH_GLOBAL for the visibility bit and FLUSH_PERSIST for the persistence bit.
Remote Rnic::flush_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint8_t placement,
                          uint8_t selectivity)
{
    const uint32_t need = ((placement & ROCE_FETH_PLT_GLOBAL) ? RNIC_ACCESS_FLUSH_GLOBAL : 0u) |
                          ((placement & ROCE_FETH_PLT_PERSIST) ? RNIC_ACCESS_FLUSH_PERSIST : 0u);
    Mr *m = mr_by_key(rkey);
    if (selectivity == ROCE_FETH_SEL_MR && m) {
        va = m->iova;
        len = m->length;
    }
    // a zero-length range still names a byte of the MR (rxe checks the VA) but flushes nothing
    const uint64_t named = len;
    Mr *mm = nullptr;
    const Remote r = remote_mr(qpn, rkey, va, len ? len : 1, need, &mm);
    if (r != Remote::Ok) return r;
    // persistent memory: its NIC buffer drained over the range, or (persistence) the range made
    // durable in the persistence domain; RAM: the backing file's write-back (rnic_nvm.cc)
    if (named && !nvm_flush(*mm, va, named, placement & ROCE_FETH_PLT_PERSIST))
        return Remote::OpError; // NAK remote operational error: the range is not durable
    std::atomic_thread_fence(std::memory_order_seq_cst);
    ctr_.flushes++;
    ctr_.flush_bytes += named;
    return Remote::Ok;
}

} // namespace rackemu::rnic
