// SPDX-License-Identifier: MIT
//
// The RNIC on the node's persistent memory (docs/rnic.md "Persistent memory", docs/pmem.md).
// Every access of the device to the memory of an MR goes through nvm_rw, which asks the host's
// nvm op (rackemu/host.h) about the range:
//   - a responder's write of a request's payload (WRITE, WRITE with immediate, ATOMIC WRITE, a
//     SEND scattered into a receive buffer: inside an NvmAccept scope) is acknowledged into the
//     NIC's volatile buffer (RK_NVM_WRITE, one entry per piece of at most PMEM_NIC_ENTRY_MAX
//     bytes) and placed in RAM by the persistence-domain core later. The ACK follows acceptance,
//     so an acknowledged WRITE is lost at a power cut until it is placed (and, in adr-ddio,
//     until a FLUSH, a write-back or an eviction): "a WRITE ACK only means the data reached the
//     NIC's volatile cache" (Erda, section 2);
//   - any other access (a READ, a local SGE, an atomic) first drains the buffer over the range
//     (RK_NVM_DRAIN: neither a read nor a write on RAM passes a buffered write), and a write the
//     device made on RAM itself is reported placed (RK_NVM_PLACED: the mode's placement rule);
//   - FLUSH: global visibility drains the range; persistence makes it durable (RK_NVM_FLUSH,
//     which places the buffer first) instead of the RAM file's msync.
// RK_DECODE_ERROR is plain RAM: the access goes on as without persistent memory (dma, persist).
// Any other status (RK_UNREACHABLE: the node's power is cut) fails the access, counted in
// NVM_ERRORS: a remote request gets a NAK remote operational error, a local one a local
// protection error (LERR_DATA_DMA).
//
// The direct path (rnic_direct.cc) copies into a peer's RAM file and cannot go through the
// peer's buffer: an MR with a page in persistent memory is published without its pages, so its
// READs and WRITEs take the wire (nvm_mr).
//
// Threading: with mu_ held (the host's nvm op never calls back).
#include <algorithm>

#include "rackemu/pmem_regs.h"
#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

bool Rnic::nvm_failed(const char *what, uint64_t pa, uint64_t len, Status st)
{
    ctr_.nvm_errors++;
    guest_error("persistent memory: %s of %llu bytes at 0x%llx failed: %s", what, (unsigned long long)len,
                (unsigned long long)pa, rk_status_name(st));
    return false;
}

bool Rnic::nvm_rw(uint64_t pa, uint8_t *buf, uint64_t len, bool write)
{
    if (write && nvm_accept_) {
        for (uint64_t at = 0; at < len;) {
            const uint64_t n = std::min<uint64_t>(len - at, PMEM_NIC_ENTRY_MAX);
            const Status st = host_.nvm(RK_NVM_WRITE, pa + at, buf + at, n);
            if (st == RK_DECODE_ERROR) {
                if (!dma(pa + at, buf + at, n, true)) return false;
            } else if (st != RK_OK) {
                return nvm_failed("NIC write", pa + at, n, st);
            } else {
                ctr_.nvm_writes++;
                ctr_.nvm_write_bytes += n;
                ctr_.modeled_pcie_ns += pcie_ns(n);
            }
            at += n;
        }
        return true;
    }
    const Status st = nvm_drain(pa, len);
    if (st != RK_OK && st != RK_DECODE_ERROR) return false;
    if (!dma(pa, buf, len, write)) return false;
    return !write || st != RK_OK || nvm_placed(pa, len);
}

Status Rnic::nvm_drain(uint64_t pa, uint64_t len)
{
    const Status st = host_.nvm(RK_NVM_DRAIN, pa, nullptr, len);
    if (st != RK_OK && st != RK_DECODE_ERROR) nvm_failed("drain", pa, len, st);
    return st;
}

bool Rnic::nvm_placed(uint64_t pa, uint64_t len)
{
    const Status st = host_.nvm(RK_NVM_PLACED, pa, nullptr, len);
    if (st == RK_OK || st == RK_DECODE_ERROR) return true;
    return nvm_failed("placement report", pa, len, st);
}

// FLUSH over an MR's range, after its checks: each piece of persistent memory drained (global
// visibility) or made durable (persistence); the RAM pieces written back by the host's persist
// (persistence). False: a piece failed (the range is not durable: NAK remote operational error).
bool Rnic::nvm_flush(const Mr &m, uint64_t va, uint64_t len, bool persist)
{
    uint64_t synced = 0, durable = 0;
    const bool ok = mr_walk(m, va, len, [&](uint64_t pa, uint64_t n) {
        if (!persist) {
            const Status st = nvm_drain(pa, n);
            return st == RK_OK || st == RK_DECODE_ERROR;
        }
        Status st = host_.nvm(RK_NVM_FLUSH, pa, nullptr, n);
        if (st == RK_OK) {
            durable += n;
            return true;
        }
        if (st != RK_DECODE_ERROR) return nvm_failed("FLUSH persistence", pa, n, st);
        st = host_.persist(pa, n, synced);
        if (st != RK_OK) ctr_.dma_errors++;
        return st == RK_OK;
    });
    ctr_.persist_bytes += synced;
    if (durable) {
        ctr_.nvm_flushes++;
        ctr_.nvm_flush_bytes += durable;
    }
    return ok;
}

// Whether any page of the MR is persistent memory (each page's first and last byte asked; a
// PHYS MR: its first and last byte). Asking drains the NIC buffer, as any access of the device.
bool Rnic::nvm_mr(const Mr &m)
{
    const auto in = [&](uint64_t pa) { return host_.nvm(RK_NVM_DRAIN, pa, nullptr, 1) == RK_OK; };
    if (m.phys) return in(m.iova) || in(m.iova + m.length - 1);
    const uint64_t ps = 1ull << m.page_shift;
    return std::any_of(m.pages.begin(), m.pages.end(), [&](uint64_t p) { return in(p) || in(p + ps - 1); });
}

} // namespace rackemu::rnic
