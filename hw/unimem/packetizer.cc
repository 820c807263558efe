// SPDX-License-Identifier: MIT
// Unimem packetizer core; see packetizer.h and docs/unimem.md.
#include "packetizer.h"

#include "format.h"

#include <cstring>

namespace rackemu::unimem {

namespace {
// Valid bytes per PIF register (Table 5): payload0 and payload1 all 16, dest bits [39:0].
constexpr unsigned kNeeded[3] = {16, 16, 5};
} // namespace

Packetizer::Packetizer(PacketizerHost host) : host_(std::move(host)) {}

void Packetizer::guest_error(const std::string &msg)
{
    if (host_.guest_error) {
        host_.guest_error("rackemu-packetizer: " + msg);
    }
}

void Packetizer::reset()
{
    std::lock_guard lk(mu_);
    for (auto &p : pifs_) {
        uint32_t seq = p.seq + 1; // outstanding acknowledgements become stale
        p = Pif{};
        p.seq = seq;
    }
    pidt_.fill(0);
    base_dest_ = pid_conf_ = 0;
    ctr_ = {};
}

uint32_t Packetizer::status(unsigned pif) const
{
    std::lock_guard lk(mu_);
    return pif < UNIMEM_IF_COUNT ? pifs_[pif].status : 0;
}

PacketizerCounters Packetizer::counters() const
{
    std::lock_guard lk(mu_);
    return ctr_;
}

bool Packetizer::setup_complete(const Pif &p) const
{
    for (unsigned r = 0; r < 3; r++) {
        for (unsigned b = 0; b < kNeeded[r]; b++) {
            if (!p.written[r][b]) {
                return false;
            }
        }
    }
    return true;
}

void Packetizer::clear_setup(Pif &p)
{
    std::memset(p.written, 0, sizeof p.written);
}

uint64_t Packetizer::read(uint64_t offset, unsigned size)
{
    const unsigned page = offset >> UNIMEM_IF_PAGE_SHIFT;
    const uint64_t reg = offset & (UNIMEM_IF_PAGE_SIZE - 1);
    const unsigned shift = (reg & 7) * 8;
    const uint64_t mask = size >= 8 ? ~0ull : ((1ull << (size * 8)) - 1);
    std::unique_lock lk(mu_);
    uint64_t v = 0;
    bool ok = true;
    if (page < UNIMEM_IF_COUNT) {
        const Pif &p = pifs_[page];
        if (reg < PKTZ_PIF_STATUS) {
            v = p.regs[reg / 8];
        } else if (reg < PKTZ_PIF_END) {
            v = reg < PKTZ_PIF_STATUS_HI ? p.status : 0; // status is [4:0] of a 128-bit register
        } else {
            ok = false;
        }
    } else if (page == UNIMEM_IF_COUNT) {
        if (reg < PKTZ_TIF_BASE_DEST) {
            v = pidt_[reg / 8];
        } else {
            switch (reg & ~7ull) {
            case PKTZ_TIF_BASE_DEST:
                v = base_dest_;
                break;
            case PKTZ_TIF_PID_CONF:
                v = pid_conf_;
                break;
            case PKTZ_TIF_CLR_REQ:
                v = 0;
                break;
            case PKTZ_TIF_ID:
                v = PKTZ_ID_VALUE;
                break;
            case PKTZ_TIF_SENT:
                v = ctr_.sent;
                break;
            case PKTZ_TIF_ACKED:
                v = ctr_.acked;
                break;
            case PKTZ_TIF_NACKED:
                v = ctr_.nacked;
                break;
            case PKTZ_TIF_ILLEGAL:
                v = ctr_.illegal;
                break;
            case PKTZ_TIF_NOPID:
                v = ctr_.nopid;
                break;
            default:
                ok = false;
                break;
            }
        }
    } else {
        ok = false;
    }
    if (!ok) {
        ctr_.bad_access++;
        lk.unlock();
        guest_error("load from unmapped offset " + hex(offset) + " (reads as 0)");
        return 0;
    }
    return (v >> shift) & mask;
}

void Packetizer::write(uint64_t offset, uint64_t value, unsigned size)
{
    const unsigned page = offset >> UNIMEM_IF_PAGE_SHIFT;
    const uint64_t reg = offset & (UNIMEM_IF_PAGE_SIZE - 1);
    const unsigned byte = reg & 7;
    if (size == 0 || size > 8 || byte + size > 8) {
        guest_error("unsupported " + std::to_string(size) + "-byte store at " + hex(offset));
        return;
    }
    const uint64_t fieldmask = size == 8 ? ~0ull : ((1ull << (size * 8)) - 1);
    auto merge = [&](uint64_t old) {
        return (old & ~(fieldmask << (byte * 8))) | ((value & fieldmask) << (byte * 8));
    };

    std::unique_lock lk(mu_);
    if (page == UNIMEM_IF_COUNT) { // TIF
        if (reg < PKTZ_TIF_BASE_DEST) {
            uint64_t &e = pidt_[reg / 8];
            e = merge(e) & PKTZ_PID_MASK;
            return;
        }
        switch (reg & ~7ull) {
        case PKTZ_TIF_BASE_DEST:
            base_dest_ = merge(base_dest_) & PKTZ_BASE_DEST_MASK;
            return;
        case PKTZ_TIF_PID_CONF:
            pid_conf_ = merge(pid_conf_);
            return;
        case PKTZ_TIF_CLR_REQ: {
            const uint64_t bits = (value & fieldmask) << (byte * 8);
            for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
                if (bits & (1ull << i)) {
                    Pif &p = pifs_[i];
                    clear_setup(p);
                    p.status = 0;
                    p.waiting = false;
                    p.seq++; // a late acknowledgement is now stale
                }
            }
            return;
        }
        default:
            ctr_.bad_access++;
            lk.unlock();
            guest_error("store to read-only or unmapped TIF offset " + hex(reg) + " ignored");
            return;
        }
    }
    if (page >= UNIMEM_IF_COUNT || reg >= PKTZ_PIF_STATUS) {
        ctr_.bad_access++;
        lk.unlock();
        guest_error("store to read-only or unmapped offset " + hex(offset) + " ignored");
        return;
    }

    Pif &p = pifs_[page];
    if (p.waiting) {
        // Sec. 5.2.4: one hardware buffer per PIF; the write is lost, OVERWR_BUF records it.
        p.status |= PKTZ_ST_OVERWR_BUF;
        ctr_.overwrites++;
        lk.unlock();
        guest_error("PIF " + std::to_string(page) + " written while a packet is pending (OVERWR_BUF)");
        return;
    }
    const unsigned r = reg / 16, half = (reg / 8) & 1;
    p.regs[reg / 8] = merge(p.regs[reg / 8]);
    for (unsigned b = 0; b < size; b++) {
        p.written[r][half * 8 + byte + b] = 1;
    }
    if (!setup_complete(p)) {
        return;
    }

    // Third write: the PIF setup is complete (sec. 5.2.3).
    clear_setup(p);
    const uint64_t dest = p.regs[PKTZ_PIF_DEST / 8] & PKTZ_DEST_MASK;
    if (!(pid_conf_ & (1ull << page))) {
        // Table 4: with the PID_CONF bit clear a PIF setup initiates no packet.
        p.status = 0;
        ctr_.nopid++;
        lk.unlock();
        guest_error("PIF " + std::to_string(page) + ": PID_CONF bit clear, no packet initiated");
        return;
    }
    if ((dest & PKTZ_BASE_DEST_MASK) != base_dest_) {
        p.status = PKTZ_ST_ILLEGAL;
        ctr_.illegal++;
        lk.unlock();
        guest_error("PIF " + std::to_string(page) + ": destination " + hex(dest) +
                    " outside BASE_DEST window " + hex(base_dest_) + " (ILLEGAL)");
        return;
    }
    uint64_t words[UNIMEM_PACKET_WORDS];
    words[0] = (p.regs[0] & ~PKTZ_PID_MASK) | pidt_[page]; // PID from the PIDT only
    words[1] = p.regs[1];
    words[2] = p.regs[2];
    words[3] = p.regs[3];
    p.status = PKTZ_ST_PEND;
    p.waiting = true;
    const uint64_t tag = pktz_tag(page, ++p.seq);
    ctr_.sent++;
    lk.unlock();
    if (host_.transmit) {
        host_.transmit(page, tag, dest, words);
    } else {
        complete(tag, Completion::FabricError);
    }
}

void Packetizer::complete(uint64_t tag, Completion c)
{
    const unsigned pif = tag >> 56;
    std::lock_guard lk(mu_);
    if (pif >= UNIMEM_IF_COUNT || !pifs_[pif].waiting || pifs_[pif].seq != uint32_t(tag)) {
        ctr_.stale_completions++;
        return;
    }
    Pif &p = pifs_[pif];
    p.waiting = false;
    const uint32_t keep = p.status & PKTZ_ST_OVERWR_BUF;
    switch (c) {
    case Completion::Ack:
        p.status = keep | PKTZ_ST_ACK;
        ctr_.acked++;
        break;
    case Completion::Nack:
        p.status = keep | PKTZ_ST_NACK;
        ctr_.nacked++;
        break;
    case Completion::FabricError:
        p.status = keep | PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR;
        ctr_.nacked++;
        ctr_.fabric_errors++;
        break;
    }
}

void Packetizer::fail_all_pending()
{
    std::lock_guard lk(mu_);
    for (auto &p : pifs_) {
        if (p.waiting) {
            p.waiting = false;
            p.seq++;
            p.status = (p.status & PKTZ_ST_OVERWR_BUF) | PKTZ_ST_NACK | PKTZ_ST_FABRIC_ERR;
            ctr_.nacked++;
            ctr_.fabric_errors++;
        }
    }
}

} // namespace rackemu::unimem
