// SPDX-License-Identifier: MIT
// Unimem vmbox core; see vmbox.h and docs/unimem.md.
#include "vmbox.h"

#include "format.h"

#include <algorithm>

namespace rackemu::unimem {

Vmbox::Vmbox(VmboxHost host, unsigned depth, bool burst_known_issue)
    : host_(std::move(host)), depth_(std::clamp(depth, 1u, 65536u)), burst_known_issue_(burst_known_issue)
{
    for (auto &f : fifos_) {
        f.slots.assign(depth_, 0);
    }
}

void Vmbox::guest_error(const std::string &msg)
{
    if (host_.guest_error) {
        host_.guest_error("rackemu-vmbox: " + msg);
    }
}

bool Vmbox::push_locked(unsigned mif, uint64_t word)
{
    Fifo &f = fifos_[mif];
    if (f.count == depth_) {
        return false;
    }
    f.slots[(f.head + f.count) % depth_] = word;
    f.count++;
    ctr_.enqueued++;
    return true;
}

uint64_t Vmbox::nonempty_locked() const
{
    uint64_t m = 0;
    for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
        if (fifos_[i].count) {
            m |= 1ull << i;
        }
    }
    return m;
}

bool Vmbox::level_locked() const
{
    return (nonempty_locked() & irq_enable_) != 0;
}

bool Vmbox::irq_level() const
{
    std::lock_guard lk(mu_);
    return level_locked();
}

void Vmbox::update_irq(bool before)
{
    bool now = irq_level();
    if (now != before && host_.set_irq) {
        host_.set_irq(now);
    }
}

unsigned Vmbox::fill(unsigned mif) const
{
    std::lock_guard lk(mu_);
    return mif < UNIMEM_IF_COUNT ? fifos_[mif].count : 0;
}

VmboxCounters Vmbox::counters() const
{
    std::lock_guard lk(mu_);
    return ctr_;
}

void Vmbox::reset()
{
    bool before;
    {
        std::lock_guard lk(mu_);
        before = level_locked();
        for (auto &f : fifos_) {
            f.head = f.count = 0;
        }
        irq_enable_ = 0;
        ctr_ = {};
    }
    update_irq(before);
}

Vmbox::Result Vmbox::read(uint64_t offset, unsigned size, uint64_t &value)
{
    value = 0;
    const unsigned page = offset >> UNIMEM_IF_PAGE_SHIFT;
    const uint64_t reg = offset & (UNIMEM_IF_PAGE_SIZE - 1);
    std::unique_lock lk(mu_);
    if (page < UNIMEM_IF_COUNT) {
        if (reg < VMBOX_MIF_DATA_SPAN) {
            if (size != 8 || (reg & 7)) {
                ctr_.bad_access++;
                lk.unlock();
                guest_error("MIF " + std::to_string(page) + ": " + std::to_string(size) + "-byte load at " +
                            hex(reg) + " (the FIFO is read with aligned 64-bit loads)");
                return Result::BusError;
            }
            Fifo &f = fifos_[page];
            if (f.count == 0) {
                ctr_.empty_reads++;
                value = VMBOX_EMPTY_PATTERN;
                return Result::Ok;
            }
            bool before = level_locked();
            value = f.slots[f.head];
            f.head = (f.head + 1) % depth_;
            f.count--;
            ctr_.dequeued++;
            lk.unlock();
            update_irq(before);
            return Result::Ok;
        }
        if (reg == VMBOX_MIF_COUNT) {
            value = fifos_[page].count;
            return Result::Ok;
        }
    } else if (page == UNIMEM_IF_COUNT) {
        switch (reg) {
        case VMBOX_CTRL_ID:
            value = VMBOX_ID_VALUE;
            return Result::Ok;
        case VMBOX_CTRL_DEPTH:
            value = depth_;
            return Result::Ok;
        case VMBOX_CTRL_IRQ_STATUS:
            value = nonempty_locked() & irq_enable_;
            return Result::Ok;
        case VMBOX_CTRL_IRQ_ENABLE:
            value = irq_enable_;
            return Result::Ok;
        case VMBOX_CTRL_NONEMPTY:
            value = nonempty_locked();
            return Result::Ok;
        case VMBOX_CTRL_FLUSH:
            value = 0;
            return Result::Ok;
        case VMBOX_CTRL_NACKS:
            value = ctr_.nacks;
            return Result::Ok;
        case VMBOX_CTRL_TRUNCATED:
            value = ctr_.truncated;
            return Result::Ok;
        case VMBOX_CTRL_ENQUEUED:
            value = ctr_.enqueued;
            return Result::Ok;
        case VMBOX_CTRL_DEQUEUED:
            value = ctr_.dequeued;
            return Result::Ok;
        default:
            break;
        }
    }
    ctr_.bad_access++;
    lk.unlock();
    guest_error("load from unmapped offset " + hex(offset) + " (reads as 0)");
    return Result::Ok;
}

Vmbox::Result Vmbox::write(uint64_t offset, uint64_t value, unsigned size)
{
    const unsigned page = offset >> UNIMEM_IF_PAGE_SHIFT;
    const uint64_t reg = offset & (UNIMEM_IF_PAGE_SIZE - 1);
    std::unique_lock lk(mu_);
    const bool before = level_locked();
    if (page < UNIMEM_IF_COUNT && reg < VMBOX_MIF_DATA_SPAN) {
        if (size != 8 || (reg & 7)) {
            ctr_.bad_access++;
            lk.unlock();
            guest_error("MIF " + std::to_string(page) + ": " + std::to_string(size) + "-byte store at " +
                        hex(reg) + " refused (the FIFO takes aligned 64-bit stores)");
            return Result::BusError;
        }
        if (!push_locked(page, value)) {
            // Sec. 5.1.1: a write to a full FIFO is negatively acknowledged (AXI SLVERR).
            ctr_.nacks++;
            return Result::BusError;
        }
        lk.unlock();
        update_irq(before);
        return Result::Ok;
    }
    if (page == UNIMEM_IF_COUNT && size == 8) {
        if (reg == VMBOX_CTRL_IRQ_ENABLE) {
            irq_enable_ = value;
            lk.unlock();
            update_irq(before);
            return Result::Ok;
        }
        if (reg == VMBOX_CTRL_FLUSH) {
            for (unsigned i = 0; i < UNIMEM_IF_COUNT; i++) {
                if (value & (1ull << i)) {
                    fifos_[i].head = fifos_[i].count = 0;
                }
            }
            lk.unlock();
            update_irq(before);
            return Result::Ok;
        }
    }
    ctr_.bad_access++;
    lk.unlock();
    guest_error(std::to_string(size) + "-byte store of " + hex(value) + " to " + hex(offset) +
                " ignored (read-only or unmapped register)");
    return Result::Ok;
}

Vmbox::Delivery Vmbox::deliver(unsigned mif, const uint64_t *words, unsigned nwords)
{
    if (mif >= UNIMEM_IF_COUNT || nwords == 0) {
        return Delivery::Nack;
    }
    std::unique_lock lk(mu_);
    const bool before = level_locked();
    Fifo &f = fifos_[mif];
    const unsigned room = depth_ - f.count;
    if (room == 0 || (room < nwords && !burst_known_issue_)) {
        ctr_.nacks++;
        return Delivery::Nack;
    }
    const unsigned n = std::min(room, nwords);
    for (unsigned i = 0; i < n; i++) {
        push_locked(mif, words[i]);
    }
    ctr_.truncated += nwords - n; // sec. 5.1.2: dropped, yet acknowledged
    lk.unlock();
    update_irq(before);
    return Delivery::Ack;
}

} // namespace rackemu::unimem
