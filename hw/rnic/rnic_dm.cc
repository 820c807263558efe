// SPDX-License-Identifier: MIT
//
// The RNIC's device memory (docs/rnic.md "Device memory"): a small memory on the NIC
// (cfg_.dm_size bytes, ConnectX-5 has 256 KiB; Sherman keeps its locks there) that a driver
// allocates (ALLOC_DM / FREE_DM, RNIC_DM_ALIGN units, first fit), registers as an MR with its own
// keys (REG_DM_MR, as ibv_reg_dm_mr) and reads or writes locally through a copy command
// (DM_COPY, the ibv_memcpy_to/from_dm analogue). Its bytes are device state (saved, loaded,
// zeroed at reset). Remote READ/WRITE through the MR copy into or out of it (dm_rw, from mr_rw);
// remote COMPARE_SWAP / FETCH_ADD are executed here on the device's bytes (dm_atomic): no host
// memory is involved, so they skip the atomic unit and take the serializer's faster service time
// (atomic-dm-ns, rnic_ceiling.cc).
//
// Threading: with mu_ held (commands from a vCPU's MMIO write, remote accesses from the engine).
// Every access to dm_ is under mu_, so an atomic here is atomic against every other access.
#include <cstring>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

void Rnic::dm_clear()
{
    if (cfg_.dm_size % RNIC_DM_ALIGN || cfg_.dm_size > RNIC_DM_SIZE_MAX) {
        const uint32_t want = cfg_.dm_size;
        cfg_.dm_size = std::min<uint32_t>(want, RNIC_DM_SIZE_MAX) / RNIC_DM_ALIGN * RNIC_DM_ALIGN;
        guest_error("dm-size %u is not a multiple of %u up to %u: %u bytes used", want, RNIC_DM_ALIGN,
                    RNIC_DM_SIZE_MAX, cfg_.dm_size);
    }
    dm_.assign(cfg_.dm_size, 0);
    dms_.assign(RNIC_MAX_DM, DmAlloc{});
}

// Bytes [va, va + len) of an MR over device memory (bounds checked by the caller: remote_mr,
// check_local), moved to or from buf.
bool Rnic::dm_rw(const Mr &m, uint64_t va, uint8_t *buf, uint64_t len, bool write)
{
    const uint64_t at = m.dm_off + (va - m.iova);
    if (at > dm_.size() || len > dm_.size() - at) return false; // never: REG_DM_MR checked it
    if (write) {
        std::memcpy(dm_.data() + at, buf, len);
        ctr_.dm_rx_bytes += len;
    } else {
        std::memcpy(buf, dm_.data() + at, len);
    }
    return true;
}

Remote Rnic::dm_atomic(const Mr &m, uint8_t opcode, uint64_t va, uint64_t swap_add, uint64_t compare,
                       uint64_t *orig)
{
    const uint64_t at = m.dm_off + (va - m.iova);
    if (at + 8 > dm_.size()) return Remote::OpError; // never: bounds checked
    uint64_t v;
    std::memcpy(&v, dm_.data() + at, 8);
    *orig = v;
    if (opcode == ROCE_OP_CMP_SWAP) {
        if (v == compare) v = swap_add;
    } else {
        v += swap_add;
    }
    std::memcpy(dm_.data() + at, &v, 8);
    ctr_.dm_atomics++;
    ceil_atomic_dm_ = true;
    return Remote::Ok;
}

uint16_t Rnic::cmd_dm(struct rnic_cmd &c)
{
    const struct rnic_cmd_dm &a = c.params.dm;
    if (a.reserved) return RNIC_CMD_ST_BAD_PARAM;
    switch (c.opcode) {
    case RNIC_CMD_ALLOC_DM: {
        if (a.length == 0 || a.length > dm_.size()) return RNIC_CMD_ST_BAD_PARAM;
        const uint64_t len = (a.length + RNIC_DM_ALIGN - 1) / RNIC_DM_ALIGN * RNIC_DM_ALIGN;
        uint32_t slot = RNIC_MAX_DM;
        for (uint32_t i = 0; i < RNIC_MAX_DM && slot == RNIC_MAX_DM; i++)
            if (!dms_[i].len) slot = i;
        if (slot == RNIC_MAX_DM) return RNIC_CMD_ST_NO_RESOURCE;
        // first fit: the lowest offset whose range overlaps no allocation
        uint64_t off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (const DmAlloc &d : dms_)
                if (d.len && off < d.off + d.len && d.off < off + len) {
                    off = d.off + d.len;
                    moved = true;
                }
        }
        if (off + len > dm_.size()) return RNIC_CMD_ST_NO_RESOURCE;
        dms_[slot] = DmAlloc{off, len, 0};
        std::memset(dm_.data() + off, 0, len); // a new allocation holds no earlier user's bytes
        c.handle = slot + 1;
        c.out0 = uint32_t(off);
        return RNIC_CMD_ST_OK;
    }
    case RNIC_CMD_FREE_DM: {
        if (c.handle == 0 || c.handle > RNIC_MAX_DM || !dms_[c.handle - 1].len) return RNIC_CMD_ST_BAD_PARAM;
        DmAlloc &d = dms_[c.handle - 1];
        if (d.users) return RNIC_CMD_ST_BUSY;
        d = DmAlloc{};
        return RNIC_CMD_ST_OK;
    }
    case RNIC_CMD_REG_DM_MR: {
        const uint32_t pdi = c.handle - 1;
        if (c.handle == 0 || pdi >= RNIC_MAX_PD || !pds_[pdi].valid) return RNIC_CMD_ST_BAD_PD;
        if (a.dm == 0 || a.dm > RNIC_MAX_DM || !dms_[a.dm - 1].len || a.dir) return RNIC_CMD_ST_BAD_PARAM;
        DmAlloc &d = dms_[a.dm - 1];
        if (a.access & ~RNIC_ACCESS_ALL) return RNIC_CMD_ST_BAD_ACCESS;
        if (a.access & RNIC_ACCESS_FLUSH_PERSIST) return RNIC_CMD_ST_BAD_ACCESS; // not a persistence domain
        if ((a.access & (RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_ATOMIC)) &&
            !(a.access & RNIC_ACCESS_LOCAL_WRITE))
            return RNIC_CMD_ST_BAD_ACCESS;
        if (a.length == 0 || a.offset > d.len || a.length > d.len - a.offset || a.addr + a.length < a.addr)
            return RNIC_CMD_ST_BAD_PARAM;
        uint32_t i = 0;
        while (i < RNIC_MAX_MR && mrs_[i])
            i++;
        if (i == RNIC_MAX_MR) return RNIC_CMD_ST_NO_RESOURCE;
        auto m = std::make_unique<Mr>();
        m->pdn = c.handle;
        m->iova = a.addr;
        m->length = a.length;
        m->access = a.access;
        m->dm = a.dm;
        m->dm_off = d.off + a.offset;
        mr_tag_[i] = next_key_tag(mr_tag_[i]);
        mrs_[i] = std::move(m);
        pds_[pdi].users++;
        d.users++;
        c.out0 = c.out1 = i << 8 | mr_tag_[i];
        return RNIC_CMD_ST_OK;
    }
    case RNIC_CMD_DM_COPY: {
        if (c.handle == 0 || c.handle > RNIC_MAX_DM || !dms_[c.handle - 1].len) return RNIC_CMD_ST_BAD_PARAM;
        const DmAlloc &d = dms_[c.handle - 1];
        if (a.dir > RNIC_DM_COPY_FROM_DM || a.dm || a.access || a.length == 0 || a.offset > d.len ||
            a.length > d.len - a.offset)
            return RNIC_CMD_ST_BAD_PARAM;
        if (!probe_ram(a.addr, a.length)) return RNIC_CMD_ST_BAD_ADDR;
        if (!dma(a.addr, dm_.data() + d.off + a.offset, a.length, a.dir == RNIC_DM_COPY_FROM_DM))
            return RNIC_CMD_ST_BAD_ADDR;
        ctr_.dm_copy_bytes += a.length;
        ctr_.modeled_pcie_ns += 2 * uint64_t(cfg_.timing.pcie_ns) + pcie_ns(a.length);
        return RNIC_CMD_ST_OK;
    }
    default:
        return RNIC_CMD_ST_BAD_OPCODE;
    }
}

} // namespace rackemu::rnic
