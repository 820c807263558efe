/* SPDX-License-Identifier: MIT */
/*
 * QOM glue of rackemu's persistent memory (docs/pmem.md): a node's NVM region and the
 * persistence-domain model of what a power cut keeps (hw/pmem/pmem.h, rk_pmem_ops).
 *
 * The device owns two MMIO regions: region 0 the model's control/status block (the generic
 * adapter, rackemu_device.h), region 1 the NVM region itself, plain guest RAM ("rackemu-pmem",
 * `size` bytes) that the machine maps at `base`. At realize RAM is loaded from the durable image
 * (`image`, a file that outlives QEMU): the node boots on what survived the last cut.
 *
 * What the model is told, and when:
 *   - CPU stores: through the region's dirty log (DIRTY_MEMORY_VGA, which TCG keeps by
 *     trapping the first store to a clean page). The log is reported (rk_pmem_cpu_dirty, runs
 *     of dirty pages) every RACKEMU_PMEM_SCAN_MS of virtual time, so that the LLC bound
 *     (llc-lines) applies while the guest runs, and before a power cut. A DMA write into the
 *     region (an RNIC placement, the model's own restart) dirties pages too: the model tells
 *     those bytes apart (pmem.h: a pending line's NIC bytes are not the CPU's; a placed line
 *     equals its durable image).
 *   - CPU write-backs: DC CVAP and DC CVAC (platform/qemu/qemu-pmem-hook.patch) reach
 *     memory_region_writeback, whose hook (rackemu_writeback_hook) calls rk_pmem_cpu_writeback
 *     for a line of this region, on the vCPU's thread. The model compares the line's RAM with
 *     its durable image, so a store the dirty log has not reported yet is written back too.
 *   - RNIC writes and FLUSHes: RkHostOps.nvm of every device on the node (rackemu_glue.c),
 *     registered here (rackemu_host_nvm_register).
 *
 * The power cut is a write of the property "power-cut" (QMP qom-set; the guest cannot reach
 * it): "none", "all" or "random:SEED" picks which pending lines survive (rk_pmem_power_cut).
 * The VM is stopped first; afterwards the durable image on disk is the surviving image and the
 * launcher ends QEMU (`rackemu node powercut`). "counters" reads the model's counters as
 * "name=value" pairs, comma-separated, in register order.
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qemu/cutils.h"
#include "qemu/units.h"
#include "qemu/error-report.h"
#include "qemu/timer.h"
#include "exec/memory.h"
#include "exec/target_page.h"
#include "hw/qdev-properties.h"
#include "hw/sysbus.h"
#include "migration/vmstate.h"
#include "sysemu/runstate.h"

#include "pmem_capi.h"
#include "rackemu_device.h"
#include "rackemu_pmem.h"

#define RACKEMU_PMEM_SCAN_MS 10 /* period of the dirty log's report, virtual time */

OBJECT_DECLARE_SIMPLE_TYPE(RackemuPmemState, RACKEMU_PMEM)

struct RackemuPmemState {
    SysBusDevice parent_obj;
    RackemuDevice rd;
    MemoryRegion ram; /* the NVM region: MMIO region 1 */
    QEMUTimer *scan;  /* the dirty log's report */
    uint64_t base, size;
    char *mode;
    uint32_t nic_entries;
    uint64_t nic_delay_ns;
    uint32_t llc_lines;
    uint64_t seed;
    char *image;
};

static const char *const rackemu_pmem_counter_names[] = { PMEM_CNT_NAMES };

/* One region per node: the write-back hook's target. */
static RackemuPmemState *rackemu_pmem_dev;

static void rackemu_pmem_writeback(MemoryRegion *mr, hwaddr addr, hwaddr size)
{
    RackemuPmemState *s = qatomic_read(&rackemu_pmem_dev);

    if (s && mr == &s->ram && s->rd.core) {
        /* RK_UNREACHABLE after a cut (the node is off): nothing to do */
        (void)rk_pmem_cpu_writeback(s->rd.core, s->base + addr, size);
    }
}

/*
 * Report the pages CPU stores dirtied since the last report, in runs, and clear the log. A clean
 * 2 MiB chunk is skipped with one test of its bits, so a scan of an idle region costs one pass
 * over its bitmap.
 */
static void rackemu_pmem_report_dirty(RackemuPmemState *s)
{
    const uint64_t page = qemu_target_page_size(), chunk = 2 * MiB;
    DirtyBitmapSnapshot *snap = memory_region_snapshot_and_clear_dirty(&s->ram, 0, s->size, DIRTY_MEMORY_VGA);
    uint64_t run = 0, len = 0;

    for (uint64_t off = 0; off < s->size; off += page) {
        if (off % chunk == 0 && !memory_region_snapshot_get_dirty(&s->ram, snap, off, MIN(chunk, s->size - off))) {
            if (len) {
                (void)rk_pmem_cpu_dirty(s->rd.core, s->base + run, len);
                len = 0;
            }
            off += MIN(chunk, s->size - off) - page;
            continue;
        }
        if (memory_region_snapshot_get_dirty(&s->ram, snap, off, page)) {
            if (!len) {
                run = off;
            }
            len += MIN(page, s->size - off);
            continue;
        }
        if (len) {
            (void)rk_pmem_cpu_dirty(s->rd.core, s->base + run, len);
            len = 0;
        }
    }
    if (len) {
        (void)rk_pmem_cpu_dirty(s->rd.core, s->base + run, len);
    }
    g_free(snap);
}

static void rackemu_pmem_scan(void *opaque)
{
    RackemuPmemState *s = opaque;

    rackemu_pmem_report_dirty(s);
    timer_mod(s->scan, qemu_clock_get_ms(QEMU_CLOCK_VIRTUAL) + RACKEMU_PMEM_SCAN_MS);
}

/* RAM := the durable image (the model holds nothing pending at creation). */
static bool rackemu_pmem_load_ram(RackemuPmemState *s, Error **errp)
{
    uint8_t *ram = memory_region_get_ram_ptr(&s->ram);
    const uint64_t chunk = 1 << 20;

    for (uint64_t off = 0; off < s->size; off += chunk) {
        uint64_t n = MIN(chunk, s->size - off);
        rk_status st = rk_pmem_durable_read(s->rd.core, s->base + off, ram + off, n);

        if (st != RK_OK) {
            error_setg(errp, "rackemu-pmem: reading the durable image at 0x%" PRIx64 " failed (%s)", off,
                       rk_status_name(st));
            return false;
        }
    }
    return true;
}

static void rackemu_pmem_realize(DeviceState *dev, Error **errp)
{
    RackemuPmemState *s = RACKEMU_PMEM(dev);
    RkPmemConfig cfg = {
        .base = s->base,
        .size = s->size,
        .nic_entries = s->nic_entries,
        .nic_delay_ns = s->nic_delay_ns,
        .llc_lines = s->llc_lines,
        .seed = s->seed,
        .image = s->image && *s->image ? s->image : NULL,
    };
    const uint64_t page = qemu_target_page_size();

    if (!rk_pmem_parse_mode(s->mode ?: "adr", &cfg.mode)) {
        error_setg(errp, "rackemu-pmem: mode=%s is not none, eadr, adr or adr-ddio", s->mode);
        return;
    }
    if (s->size == 0 || s->size % page || s->base % page) {
        error_setg(errp, "rackemu-pmem: base=0x%" PRIx64 " and size=0x%" PRIx64 " must be non-zero multiples of %" PRIu64
                   " bytes (a page)", s->base, s->size, page);
        return;
    }
    if (qatomic_read(&rackemu_pmem_dev)) {
        error_setg(errp, "rackemu-pmem: a node has one persistent-memory region");
        return;
    }
    if (!rackemu_device_realize(&s->rd, dev, &rk_pmem_ops, &cfg, NULL, 0, 1, false, errp)) {
        return;
    }
    memory_region_init_ram(&s->ram, OBJECT(dev), "rackemu-pmem", s->size, errp);
    if (!s->ram.ram_block) {
        rackemu_device_unrealize(&s->rd);
        return;
    }
    if (!rackemu_pmem_load_ram(s, errp)) {
        rackemu_device_unrealize(&s->rd);
        return;
    }
    sysbus_init_mmio(SYS_BUS_DEVICE(dev), &s->ram);
    memory_region_set_log(&s->ram, true, DIRTY_MEMORY_VGA);
    memory_region_reset_dirty(&s->ram, 0, s->size, DIRTY_MEMORY_VGA); /* RAM equals the image */
    s->scan = timer_new_ms(QEMU_CLOCK_VIRTUAL, rackemu_pmem_scan, s);
    timer_mod(s->scan, qemu_clock_get_ms(QEMU_CLOCK_VIRTUAL) + RACKEMU_PMEM_SCAN_MS);
    qatomic_set(&rackemu_pmem_dev, s);
    qatomic_set(&rackemu_writeback_hook, rackemu_pmem_writeback);
    rackemu_host_nvm_register(s->rd.core);
}

static void rackemu_pmem_unrealize(DeviceState *dev)
{
    RackemuPmemState *s = RACKEMU_PMEM(dev);

    rackemu_host_nvm_register(NULL);
    qatomic_set(&rackemu_writeback_hook, NULL);
    qatomic_set(&rackemu_pmem_dev, NULL);
    if (s->scan) {
        timer_free(s->scan);
        s->scan = NULL;
    }
    memory_region_set_log(&s->ram, false, DIRTY_MEMORY_VGA);
    rackemu_device_unrealize(&s->rd);
}

static void rackemu_pmem_reset(DeviceState *dev)
{
    rackemu_device_reset(&RACKEMU_PMEM(dev)->rd);
}

/* "none", "all" or "random:SEED" */
static bool rackemu_pmem_parse_pick(const char *v, uint32_t *pick, uint64_t *seed)
{
    *seed = 0;
    if (strcmp(v, "none") == 0) {
        *pick = PMEM_PICK_NONE;
        return true;
    }
    if (strcmp(v, "all") == 0) {
        *pick = PMEM_PICK_ALL;
        return true;
    }
    if (strncmp(v, "random:", 7) == 0 && v[7] && qemu_strtou64(v + 7, NULL, 0, seed) == 0) {
        *pick = PMEM_PICK_RANDOM;
        return true;
    }
    return false;
}

static void rackemu_pmem_set_power_cut(Object *obj, const char *value, Error **errp)
{
    RackemuPmemState *s = RACKEMU_PMEM(obj);
    uint32_t pick;
    uint64_t seed;
    rk_status st;

    if (!DEVICE(obj)->realized) {
        error_setg(errp, "rackemu-pmem: power-cut on a device that is not realized");
        return;
    }
    if (!rackemu_pmem_parse_pick(value, &pick, &seed)) {
        error_setg(errp, "rackemu-pmem: power-cut=%s is not none, all or random:SEED", value);
        return;
    }
    if (runstate_is_running()) {
        vm_stop(RUN_STATE_PAUSED); /* no store after the cut */
    }
    rackemu_pmem_report_dirty(s);
    st = rk_pmem_power_cut(s->rd.core, pick, seed);
    if (st != RK_OK) {
        error_setg(errp, "rackemu-pmem: the power cut failed (%s)", rk_status_name(st));
        return;
    }
    memory_region_reset_dirty(&s->ram, 0, s->size, DIRTY_MEMORY_VGA); /* RAM is the image again */
}

static char *rackemu_pmem_get_power_cut(Object *obj, Error **errp)
{
    return g_strdup("");
}

static char *rackemu_pmem_get_counters(Object *obj, Error **errp)
{
    RackemuPmemState *s = RACKEMU_PMEM(obj);
    GString *out = g_string_new("");

    for (unsigned i = 0; i < PMEM_CNT_COUNT; i++) {
        g_string_append_printf(out, "%s%s=%" PRIu64, i ? "," : "", rackemu_pmem_counter_names[i],
                               s->rd.core ? rk_pmem_counter(s->rd.core, i) : 0);
    }
    return g_string_free(out, false);
}

/*
 * The model's state (hw/pmem/pmem.h PmemArch: pending lines, the NIC buffer, counters); the
 * region's RAM migrates as RAM. The durable image is the file, which stays with the node as a
 * RAM file does (docs/pmem.md "Save and restore").
 */
static const VMStateDescription rackemu_pmem_vmstate = {
    .name = "rackemu-pmem",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_RACKEMU_DEVICE(rd, RackemuPmemState),
        VMSTATE_END_OF_LIST()
    },
};

static Property rackemu_pmem_props[] = {
    DEFINE_PROP_UINT64("base", RackemuPmemState, base, 0),
    DEFINE_PROP_UINT64("size", RackemuPmemState, size, 0),
    DEFINE_PROP_STRING("mode", RackemuPmemState, mode),
    DEFINE_PROP_UINT32("nic-entries", RackemuPmemState, nic_entries, 64),
    DEFINE_PROP_UINT64("nic-delay-ns", RackemuPmemState, nic_delay_ns, 2000),
    DEFINE_PROP_UINT32("llc-lines", RackemuPmemState, llc_lines, 4096),
    DEFINE_PROP_UINT64("seed", RackemuPmemState, seed, 1),
    DEFINE_PROP_STRING("image", RackemuPmemState, image),
    DEFINE_PROP_END_OF_LIST(),
};

static void rackemu_pmem_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);

    dc->desc = "rackemu persistent memory: NVM region and persistence domain";
    dc->realize = rackemu_pmem_realize;
    dc->unrealize = rackemu_pmem_unrealize;
    dc->reset = rackemu_pmem_reset;
    dc->vmsd = &rackemu_pmem_vmstate;
    dc->user_creatable = false; /* created and wired by the rackemu-node machine */
    device_class_set_props(dc, rackemu_pmem_props);
    object_class_property_add_str(oc, "power-cut", rackemu_pmem_get_power_cut, rackemu_pmem_set_power_cut);
    object_class_property_set_description(oc, "power-cut",
                                          "write none|all|random:SEED: cut the power now (the VM stops); "
                                          "the durable image keeps what survived");
    object_class_property_add_str(oc, "counters", rackemu_pmem_get_counters, NULL);
    object_class_property_set_description(oc, "counters", "the model's counters, name=value,...");
}

static const TypeInfo rackemu_pmem_types[] = {
    {
        .name = TYPE_RACKEMU_PMEM,
        .parent = TYPE_SYS_BUS_DEVICE,
        .instance_size = sizeof(RackemuPmemState),
        .class_init = rackemu_pmem_class_init,
    },
};

DEFINE_TYPES(rackemu_pmem_types)
