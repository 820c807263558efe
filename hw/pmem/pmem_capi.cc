// SPDX-License-Identifier: MIT
// The C face of the persistence-domain core (pmem_capi.h).
#include "pmem_capi.h"

#include <cstdio>

#include "device_ops.h"
#include "pmem.h"

using rackemu::DeviceOps;
using rackemu::pmem::Pmem;

namespace {

Pmem *of(void *c)
{
    return static_cast<Pmem *>(c);
}

void *pmem_create(const RkHost *host, const void *cfgp, char *err, size_t errlen)
{
    auto fail = [&](const std::string &why) -> void * {
        if (err && errlen) snprintf(err, errlen, "%s", why.c_str());
        return nullptr;
    };
    if (!host || !cfgp) return fail("no host or configuration");
    const auto *c = static_cast<const RkPmemConfig *>(cfgp);
    rackemu::pmem::Config cfg;
    cfg.base = c->base;
    cfg.size = c->size;
    cfg.mode = rackemu::pmem::Mode(c->mode);
    cfg.nic_entries = c->nic_entries;
    cfg.nic_delay_ns = c->nic_delay_ns;
    cfg.llc_lines = c->llc_lines;
    cfg.seed = c->seed;
    std::string why = rackemu::pmem::check(cfg);
    if (!why.empty()) return fail(why);
    std::unique_ptr<rackemu::pmem::Media> media;
    if (c->image) {
        media = rackemu::pmem::file_media(c->image, cfg.size, &why);
        if (!media) return fail(why);
    }
    auto p = Pmem::create(rackemu::Host(*host), cfg, std::move(media), &why);
    if (!p) return fail(why);
    return p.release();
}

void pmem_timer(void *c, unsigned id)
{
    of(c)->timer(id);
}

const char *pmem_reg_name(void *c, uint64_t offset)
{
    return of(c)->reg_name(offset);
}

RkDeviceOps make_ops()
{
    RkDeviceOps o{};
    o.name = "rackemu-pmem";
    o.create = pmem_create;
    o.free = DeviceOps<Pmem>::free;
    o.nregions = 1;
    o.regions[0] = RkDeviceRegion{"rackemu-pmem-ctrl",
                                  PMEM_MMIO_SIZE,
                                  -1,
                                  DeviceOps<Pmem>::read<&Pmem::ctrl_read>,
                                  DeviceOps<Pmem>::write<&Pmem::ctrl_write>,
                                  pmem_reg_name};
    o.nirqs = 0;
    o.msix_bar = -1;
    o.reset = DeviceOps<Pmem>::reset;
    o.pause = DeviceOps<Pmem>::pause;
    o.irq_level = nullptr;
    o.state_version = 1;
    // the largest state: llc-lines pending lines and a full buffer of full entries
    o.state_max = 64 + uint64_t(PMEM_LLC_LINES_MAX) * 17 +
                  uint64_t(PMEM_NIC_ENTRIES_MAX) * (28 + PMEM_NIC_ENTRY_MAX) + 8 * PMEM_CNT_COUNT;
    o.save = DeviceOps<Pmem>::save;
    o.load = DeviceOps<Pmem>::load<PMEM_LLC_LINES_MAX>;
    o.fabric_svc = -1;
    o.eth_class = -1;
    o.ntimers = 1;
    o.timer = pmem_timer;
    return o;
}

} // namespace

extern "C" {

const RkDeviceOps rk_pmem_ops = make_ops();

rk_status rk_pmem_cpu_dirty(void *core, uint64_t addr, uint64_t len)
{
    return of(core)->cpu_dirty(addr, len);
}
rk_status rk_pmem_cpu_writeback(void *core, uint64_t addr, uint64_t len)
{
    return of(core)->cpu_writeback(addr, len);
}
rk_status rk_pmem_flush(void *core, uint64_t addr, uint64_t len)
{
    return of(core)->flush(addr, len);
}
rk_status rk_pmem_placed(void *core, uint64_t addr, uint64_t len)
{
    return of(core)->placed(addr, len);
}
rk_status rk_pmem_nic_accept(void *core, uint64_t addr, const void *data, uint64_t len, uint64_t *seq)
{
    return of(core)->nic_accept(addr, data, len, seq);
}
unsigned rk_pmem_nic_drain(void *core)
{
    return of(core)->nic_drain();
}

int rk_pmem_parse_mode(const char *s, uint32_t *mode)
{
    rackemu::pmem::Mode m;
    if (!rackemu::pmem::parse_mode(s, &m)) return 0;
    *mode = uint32_t(m);
    return 1;
}

rk_status rk_pmem_durable_read(void *core, uint64_t addr, void *buf, uint64_t len)
{
    return of(core)->durable_read(addr, buf, len);
}

uint64_t rk_pmem_counter(void *core, unsigned idx)
{
    return of(core)->counter(idx);
}

rk_status rk_pmem_nvm(void *core, unsigned op, uint64_t addr, const void *data, uint64_t len)
{
    const rackemu::pmem::Config &c = of(core)->config();
    if (len > c.size || addr < c.base || addr - c.base > c.size - len) return RK_DECODE_ERROR;
    switch (op) {
    case RK_NVM_WRITE:
        return of(core)->nic_accept(addr, data, len, nullptr);
    case RK_NVM_DRAIN:
        of(core)->nic_drain();
        return RK_OK;
    case RK_NVM_PLACED:
        return of(core)->placed(addr, len);
    case RK_NVM_FLUSH:
        return of(core)->flush(addr, len);
    default:
        return RK_SLAVE_ERROR;
    }
}

rk_status rk_pmem_power_cut(void *core, uint32_t pick, uint64_t seed)
{
    using rackemu::pmem::Pick;
    static_assert(PMEM_PICK_NONE == uint32_t(Pick::None) && PMEM_PICK_ALL == uint32_t(Pick::All) &&
                  PMEM_PICK_RANDOM == uint32_t(Pick::Random));
    if (pick != PMEM_PICK_NONE && pick != PMEM_PICK_ALL && pick != PMEM_PICK_RANDOM) return RK_SLAVE_ERROR;
    const rackemu::pmem::Cut c = of(core)->cut();
    const rk_status st = of(core)->finish_cut(c, rackemu::pmem::pick_one(c, Pick(pick), seed));
    return st != RK_OK ? st : of(core)->restart();
}

} // extern "C"
