// SPDX-License-Identifier: MIT
/*
 * A declarative register bank for rackemu's device cores (no QEMU headers), in the spirit of
 * QEMU's RegisterAccessInfo (include/hw/register.h) and gem5's RegisterBank: a device lists its
 * registers once, each with its name, offset, width, access type, reset value, writable mask and
 * hooks, and the bank decodes every access against that one table (sub-register byte lanes
 * included) instead of a hand-written switch per direction.
 *
 * Storage: a register with no read hook keeps its value in the bank (reset() loads `reset`); a
 * register with hooks keeps it where the core wants it (its plain state struct, which the glue
 * migrates), and the hooks carry the side effects. Either way a write is merged first:
 *   RW  : bits of `writable` in the written byte lanes take the new value, others keep theirs;
 *   RO  : nothing changes; write() reports it so the core can log a guest error;
 *   W1C : a 1 in a bit of `writable` clears it, everything else keeps its value;
 * and the write hook (if any) receives the merged full-width value and the raw one.
 * `Ctx` is whatever the core's hooks need beside the device (e.g. its deferred-work record).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rackemu {

enum class RegAccess : uint8_t { RW, RO, W1C };

template <class Dev, class Ctx> struct Reg {
    const char *name; // as in the source document's register table
    uint32_t offset;  // from the start of the bank
    uint8_t width;    // bytes: 1, 2, 4 or 8
    RegAccess access;
    uint64_t reset;    // value after reset (bank-stored registers)
    uint64_t writable; // bits a write may change (RW) or clear (W1C)
    // Current value; nullptr: the bank's stored value.
    uint64_t (*read)(Dev &dev, const Reg &reg, Ctx &ctx) = nullptr;
    // After the merge: `merged` is the register's new full-width value, `raw` the bytes written
    // (shifted to their lanes). nullptr: the bank stores `merged`.
    void (*write)(Dev &dev, const Reg &reg, uint64_t merged, uint64_t raw, Ctx &ctx) = nullptr;
};

enum class RegResult : uint8_t {
    Ok,
    Unmapped, // no register there, or the access straddles a register's end
    ReadOnly, // a write to an RO register (nothing changed)
};

template <class Dev, class Ctx> class RegBank {
public:
    using R = Reg<Dev, Ctx>;

    explicit RegBank(std::span<const R> regs) : regs_(regs), vals_(regs.size()) { reset(); }

    // Reload the reset value of every bank-stored register.
    void reset()
    {
        for (size_t i = 0; i < regs_.size(); i++)
            vals_[i] = regs_[i].reset;
    }

    // The register that contains `offset`, or nullptr.
    const R *find(uint64_t offset) const
    {
        for (const R &r : regs_) {
            if (offset >= r.offset && offset < uint64_t(r.offset) + r.width) return &r;
        }
        return nullptr;
    }

    // The register's name at `offset`, or nullptr.
    const char *name(uint64_t offset) const
    {
        const R *r = find(offset);
        return r ? r->name : nullptr;
    }

    RegResult read(Dev &dev, uint64_t offset, unsigned size, Ctx &ctx, uint64_t &out) const
    {
        out = 0;
        const R *r = lanes(offset, size);
        if (!r) return RegResult::Unmapped;
        out = (value(dev, *r, ctx) >> shift(*r, offset)) & mask(size);
        return RegResult::Ok;
    }

    RegResult write(Dev &dev, uint64_t offset, uint64_t data, unsigned size, Ctx &ctx)
    {
        const R *r = lanes(offset, size);
        if (!r) return RegResult::Unmapped;
        if (r->access == RegAccess::RO) return RegResult::ReadOnly;
        const unsigned sh = shift(*r, offset);
        const uint64_t lane = mask(size) << sh, raw = (data & mask(size)) << sh;
        const uint64_t old = value(dev, *r, ctx);
        const uint64_t bits = r->writable & lane;
        const uint64_t merged =
            r->access == RegAccess::W1C ? old & ~(raw & bits) : (old & ~bits) | (raw & bits);
        if (r->write) {
            r->write(dev, *r, merged & mask(r->width), raw, ctx);
        } else {
            vals_[size_t(r - regs_.data())] = merged & mask(r->width);
        }
        return RegResult::Ok;
    }

    std::span<const R> regs() const { return regs_; }

private:
    static uint64_t mask(unsigned bytes) { return bytes >= 8 ? ~0ull : (1ull << (bytes * 8)) - 1; }
    static unsigned shift(const R &r, uint64_t offset) { return unsigned(offset - r.offset) * 8; }

    const R *lanes(uint64_t offset, unsigned size) const
    {
        const R *r = find(offset);
        if (!r || size == 0 || size > 8 || offset + size > uint64_t(r->offset) + r->width) return nullptr;
        return r;
    }

    uint64_t value(Dev &dev, const R &r, Ctx &ctx) const
    {
        return r.read ? r.read(dev, r, ctx) : vals_[size_t(&r - regs_.data())];
    }

    std::span<const R> regs_;
    std::vector<uint64_t> vals_;
};

} // namespace rackemu
