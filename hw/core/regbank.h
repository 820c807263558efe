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
 *
 * Register arrays: a row with count = N > 1 declares N registers of the same shape at
 * offset, offset + stride, ... (stride 0: packed, = width), e.g. one register per queue pair;
 * the hooks receive the element's index (0 for a plain register) and name() appends "[i]".
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
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
    // Current value of element `idx`; nullptr: the bank's stored value.
    uint64_t (*read)(Dev &dev, const Reg &reg, unsigned idx, Ctx &ctx) = nullptr;
    // After the merge: `merged` is the register's new full-width value, `raw` the bytes written
    // (shifted to their lanes). nullptr: the bank stores `merged`.
    void (*write)(Dev &dev, const Reg &reg, unsigned idx, uint64_t merged, uint64_t raw, Ctx &ctx) = nullptr;
    uint32_t count = 1;  // elements (register arrays)
    uint32_t stride = 0; // bytes from one element to the next (0: width)

    uint32_t step() const { return stride ? stride : width; }
    uint64_t end() const { return offset + uint64_t(step()) * (count - 1) + width; }
};

enum class RegResult : uint8_t {
    Ok,
    Unmapped, // no register there, or the access straddles a register's end
    ReadOnly, // a write to an RO register (nothing changed)
};

template <class Dev, class Ctx> class RegBank {
public:
    using R = Reg<Dev, Ctx>;

    explicit RegBank(std::span<const R> regs) : regs_(regs), first_(regs.size())
    {
        size_t n = 0;
        for (size_t i = 0; i < regs_.size(); i++) {
            first_[i] = n;
            n += regs_[i].count;
        }
        vals_.resize(n);
        reset();
    }

    // Reload the reset value of every bank-stored register.
    void reset()
    {
        for (size_t i = 0; i < regs_.size(); i++) {
            for (uint32_t k = 0; k < regs_[i].count; k++)
                vals_[first_[i] + k] = regs_[i].reset;
        }
    }

    // The register that contains `offset` (its element index in *idx), or nullptr.
    const R *find(uint64_t offset, unsigned *idx = nullptr) const
    {
        for (const R &r : regs_) {
            if (offset < r.offset || offset >= r.end()) continue;
            const uint64_t k = (offset - r.offset) / r.step();
            if (offset - r.offset - k * r.step() >= r.width) continue; // a gap between elements
            if (idx) *idx = unsigned(k);
            return &r;
        }
        return nullptr;
    }

    // The register's name at `offset`, or nullptr (the row's name; see describe()).
    const char *name(uint64_t offset) const
    {
        const R *r = find(offset);
        return r ? r->name : nullptr;
    }

    // "NAME" or "NAME[i]" for logs and traces; "unmapped" where nothing decodes.
    std::string describe(uint64_t offset) const
    {
        unsigned k = 0;
        const R *r = find(offset, &k);
        if (!r) return "unmapped";
        return r->count > 1 ? std::string(r->name) + "[" + std::to_string(k) + "]" : std::string(r->name);
    }

    RegResult read(Dev &dev, uint64_t offset, unsigned size, Ctx &ctx, uint64_t &out) const
    {
        out = 0;
        unsigned k = 0;
        const R *r = lanes(offset, size, k);
        if (!r) return RegResult::Unmapped;
        out = (value(dev, *r, k, ctx) >> shift(*r, k, offset)) & mask(size);
        return RegResult::Ok;
    }

    RegResult write(Dev &dev, uint64_t offset, uint64_t data, unsigned size, Ctx &ctx)
    {
        unsigned k = 0;
        const R *r = lanes(offset, size, k);
        if (!r) return RegResult::Unmapped;
        if (r->access == RegAccess::RO) return RegResult::ReadOnly;
        const unsigned sh = shift(*r, k, offset);
        const uint64_t lane = mask(size) << sh, raw = (data & mask(size)) << sh;
        const uint64_t old = value(dev, *r, k, ctx);
        const uint64_t bits = r->writable & lane;
        const uint64_t merged =
            r->access == RegAccess::W1C ? old & ~(raw & bits) : (old & ~bits) | (raw & bits);
        if (r->write) {
            r->write(dev, *r, k, merged & mask(r->width), raw, ctx);
        } else {
            vals_[slot(*r, k)] = merged & mask(r->width);
        }
        return RegResult::Ok;
    }

    // The stored value of a bank-stored register (element `idx`), e.g. for the core's own use
    // or for saving state; set() loads one (restore) without side effects.
    uint64_t stored(const R &r, unsigned idx = 0) const { return vals_[slot(r, idx)]; }
    void set(const R &r, unsigned idx, uint64_t v) { vals_[slot(r, idx)] = v & mask(r.width); }

    std::span<const R> regs() const { return regs_; }

private:
    static uint64_t mask(unsigned bytes) { return bytes >= 8 ? ~0ull : (1ull << (bytes * 8)) - 1; }
    static unsigned shift(const R &r, unsigned k, uint64_t offset)
    {
        return unsigned(offset - r.offset - uint64_t(k) * r.step()) * 8;
    }
    size_t slot(const R &r, unsigned k) const { return first_[size_t(&r - regs_.data())] + k; }

    const R *lanes(uint64_t offset, unsigned size, unsigned &k) const
    {
        const R *r = find(offset, &k);
        if (!r || size == 0 || size > 8) return nullptr;
        if (offset + size > uint64_t(r->offset) + uint64_t(k) * r->step() + r->width) return nullptr;
        return r;
    }

    uint64_t value(Dev &dev, const R &r, unsigned k, Ctx &ctx) const
    {
        return r.read ? r.read(dev, r, k, ctx) : vals_[slot(r, k)];
    }

    std::span<const R> regs_;
    std::vector<size_t> first_; // index in vals_ of each row's element 0
    std::vector<uint64_t> vals_;
};

} // namespace rackemu
