/*
 * rk_insn: a QEMU 7.2 TCG plugin that counts the guest instructions each vCPU retires in
 * phases the guest marks (docs/insn-count.md). The marks are unallocated A64 HINT instructions
 * (NOPs everywhere), defined once in hw/include/rackemu/insn_mark.h.
 *
 * Arguments (-plugin rk_insn.so,out=FILE[,kernel=on]):
 *   out=FILE     where the counters go, as JSON: at every DUMP mark and at exit (written to
 *                FILE.tmp, then renamed, so a reader never sees half a file)
 *   kernel=on    also count instructions at kernel addresses (TTBR1, the top half); by default
 *                only user-space (TTBR0) code is instrumented and counted
 *
 * How it counts, exactly and cheaply: while counting is active, every translated user block gets
 * one callback at its entry that adds the block's instruction count to the executing vCPU's
 * current phase. A block that holds a mark also gets a callback on the mark, which moves the
 * instructions from the mark to the block's end from the old phase to the new one. So a phase's
 * count is exact for blocks that run to their end; an exception in the middle of a block (a page
 * fault, an undefined instruction) overcounts that block's remaining instructions (Caveat,
 * docs/insn-count.md).
 * Idle until a RESET mark: only blocks that hold a mark are instrumented, so a loaded plugin costs
 * nothing until a workload starts a measurement. RESET switches counting on, DUMP off again: each
 * switch flushes QEMU's translated code (qemu_plugin_reset), which takes effect within a block or
 * two of every vCPU; phase marks met while counting is off are counted in "idle_entries" (their
 * counts are incomplete).
 * Memory side (while counting): every user-space load and store (each memory operation TCG
 * emits: an LDP is two) calls on_mem, which adds to the current phase its loads or stores, the
 * 64-byte lines it touches for the first time in the current interval (a phase's interval runs
 * from the mark that opens it to the next mark; "lines" sums the distinct lines of each
 * interval) and the misses of a per-vCPU L1d model: the SABRes paper Table 2's 32 KiB, 2-way, 64-byte
 * lines, LRU, write-allocate, indexed by virtual address. The model sees only this vCPU's
 * user-space accesses: not the kernel's, not other vCPUs' stores, not device (DMA) writes, so a
 * line a device or another core wrote since this vCPU last touched it still hits here (Caveat,
 * docs/insn-count.md: the bench counts such lines from "lines").
 * State is per vCPU (QEMU 7.2 has no per-vCPU scoreboard: arrays indexed by vcpu_index), written
 * only by that vCPU's thread; DUMP reads the others' with relaxed atomic loads.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

#include "rackemu/insn_mark.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define RK_INSN_MAX_VCPUS 128
/* the L1d model: the SABRes paper Table 2 (32 KB 2-way L1d, 64-byte blocks) */
#define RK_L1_WAYS 2
#define RK_L1_SETS (32768 / 64 / RK_L1_WAYS)
/* distinct lines per interval: an open-addressing set of line addresses, tagged by interval */
#define RK_LSET_SLOTS 8192                /* power of two */
#define RK_LSET_CAP   (RK_LSET_SLOTS / 2) /* lines tracked per interval (256 KiB) */

struct rk_phase_ctr {
    uint64_t insns;   /* instructions retired in this phase */
    uint64_t entries; /* marks that switched into this phase */
    uint64_t start;   /* insns at the last entry */
    uint64_t min, max; /* shortest and longest closed interval */
    uint64_t loads, stores; /* memory operations */
    uint64_t lines;         /* distinct 64-byte lines per interval, summed over the intervals */
    uint64_t misses;        /* misses of the L1d model */
    uint64_t lines_capped;  /* intervals that touched more than RK_LSET_CAP lines (lines: a lower bound) */
};

struct rk_vcpu {
    uint64_t gen;   /* the reset generation these counters belong to */
    uint64_t phase; /* current phase */
    uint64_t marks; /* marks executed */
    struct rk_phase_ctr ph[RK_MARK_PHASES];
    /* memory side, touched only by this vCPU's thread */
    uint64_t l1[RK_L1_SETS][RK_L1_WAYS]; /* line addresses, most recently used first; ~0: invalid */
    uint32_t interval;                   /* the current interval's tag (a mark starts the next) */
    uint32_t set_n;                      /* distinct lines in the set for this interval */
    uint32_t set_tag[RK_LSET_SLOTS];
    uint64_t set_line[RK_LSET_SLOTS];
} __attribute__((aligned(64)));

static struct rk_vcpu vcpus[RK_INSN_MAX_VCPUS];
static uint64_t reset_gen = 1; /* vcpus[].gen starts at 0: zeroed on first use */
static uint64_t dumps, dropped_vcpus;
static char *out_path;
static bool count_kernel;
static qemu_plugin_id_t plugin_id;
/*
 * counting on (blocks translated with the entry callback); changed only in reset_done, which runs
 * with every vCPU stopped after the code cache was flushed
 */
static bool active;
static bool want_active, switch_pending; /* under mode_lock */
static uint64_t idle_entries;             /* phase marks met while not counting */
static pthread_mutex_t mode_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

static void vcpu_zero(struct rk_vcpu *v, uint64_t gen)
{
    ST(v->phase, 0);
    ST(v->marks, 0);
    for (int p = 0; p < RK_MARK_PHASES; p++) {
        ST(v->ph[p].insns, 0);
        ST(v->ph[p].entries, 0);
        ST(v->ph[p].start, 0);
        ST(v->ph[p].min, UINT64_MAX);
        ST(v->ph[p].max, 0);
        ST(v->ph[p].loads, 0);
        ST(v->ph[p].stores, 0);
        ST(v->ph[p].lines, 0);
        ST(v->ph[p].misses, 0);
        ST(v->ph[p].lines_capped, 0);
    }
    memset(v->l1, 0xff, sizeof(v->l1));
    memset(v->set_tag, 0, sizeof(v->set_tag));
    v->interval = 1;
    v->set_n = 0;
    __atomic_store_n(&v->gen, gen, __ATOMIC_RELEASE);
}

static inline struct rk_vcpu *vcpu_get(unsigned int idx)
{
    struct rk_vcpu *v;
    uint64_t gen;

    if (idx >= RK_INSN_MAX_VCPUS) {
        return NULL;
    }
    v = &vcpus[idx];
    gen = __atomic_load_n(&reset_gen, __ATOMIC_ACQUIRE);
    if (__builtin_expect(v->gen != gen, 0)) {
        vcpu_zero(v, gen);
    }
    return v;
}

static void on_tb(unsigned int vcpu_index, void *udata)
{
    struct rk_vcpu *v = vcpu_get(vcpu_index);
    struct rk_phase_ctr *c;

    if (!v) {
        return;
    }
    c = &v->ph[v->phase];
    ST(c->insns, c->insns + (uintptr_t)udata);
}

/* A new interval of distinct lines (at every phase mark). */
static void interval_next(struct rk_vcpu *v)
{
    v->set_n = 0;
    if (++v->interval == 0) { /* the tags wrapped: forget them all */
        memset(v->set_tag, 0, sizeof(v->set_tag));
        v->interval = 1;
    }
}

/* One access to line `la`: the L1d model and the interval's distinct lines. */
static void touch_line(struct rk_vcpu *v, struct rk_phase_ctr *c, uint64_t la)
{
    uint64_t *way = v->l1[la % RK_L1_SETS];
    uint32_t i = (uint32_t)((la * 0x9e3779b97f4a7c15ull) >> 51) & (RK_LSET_SLOTS - 1);
    int w = 0;

    while (w < RK_L1_WAYS && way[w] != la) {
        w++;
    }
    if (w == RK_L1_WAYS) { /* miss: allocate, evicting the least recently used */
        ST(c->misses, c->misses + 1);
        w = RK_L1_WAYS - 1;
    }
    for (; w > 0; w--) {
        way[w] = way[w - 1];
    }
    way[0] = la;

    /* never full: at most RK_LSET_CAP of the RK_LSET_SLOTS slots belong to this interval */
    while (v->set_tag[i] == v->interval && v->set_line[i] != la) {
        i = (i + 1) & (RK_LSET_SLOTS - 1);
    }
    if (v->set_tag[i] == v->interval) {
        return; /* touched before in this interval */
    }
    if (v->set_n >= RK_LSET_CAP) {
        if (v->set_n++ == RK_LSET_CAP) {
            ST(c->lines_capped, c->lines_capped + 1);
        }
        return;
    }
    v->set_tag[i] = v->interval;
    v->set_line[i] = la;
    v->set_n++;
    ST(c->lines, c->lines + 1);
}

static void on_mem(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    struct rk_vcpu *v = vcpu_get(vcpu_index);
    struct rk_phase_ctr *c;
    uint64_t first, last;

    if (!v) {
        return;
    }
    c = &v->ph[v->phase];
    if (qemu_plugin_mem_is_store(info)) {
        ST(c->stores, c->stores + 1);
    } else {
        ST(c->loads, c->loads + 1);
    }
    first = vaddr >> 6;
    last = (vaddr + (1u << qemu_plugin_mem_size_shift(info)) - 1) >> 6;
    touch_line(v, c, first);
    if (last != first) { /* an access that straddles two lines touches both */
        touch_line(v, c, last);
    }
}

static void write_json(FILE *f)
{
    uint64_t gen = __atomic_load_n(&reset_gen, __ATOMIC_ACQUIRE);
    struct rk_phase_ctr tot[RK_MARK_PHASES];
    bool first = true;

    memset(tot, 0, sizeof(tot));
    for (int p = 0; p < RK_MARK_PHASES; p++) {
        tot[p].min = UINT64_MAX;
    }
    fprintf(f, "{\"plugin\": \"rk_insn\", \"format\": 2, \"l1d\": {\"bytes\": %d, \"ways\": %d, "
            "\"line\": 64}, ", RK_L1_SETS * RK_L1_WAYS * 64, RK_L1_WAYS);
    fprintf(f, "\"dumps\": %" PRIu64
            ", \"kernel\": %s, \"vcpus\": [", dumps, count_kernel ? "true" : "false");
    for (int i = 0; i < RK_INSN_MAX_VCPUS; i++) {
        struct rk_vcpu *v = &vcpus[i];
        bool vfirst = true;

        if (__atomic_load_n(&v->gen, __ATOMIC_ACQUIRE) != gen) {
            continue; /* zero since the last reset (or never ran user code) */
        }
        fprintf(f, "%s\n  {\"vcpu\": %d, \"phase\": %" PRIu64 ", \"marks\": %" PRIu64
                ", \"phases\": {", first ? "" : ",", i, LD(v->phase), LD(v->marks));
        first = false;
        for (int p = 0; p < RK_MARK_PHASES; p++) {
            uint64_t n = LD(v->ph[p].insns), e = LD(v->ph[p].entries);
            uint64_t mn = LD(v->ph[p].min), mx = LD(v->ph[p].max);
            uint64_t ld = LD(v->ph[p].loads), sto = LD(v->ph[p].stores), li = LD(v->ph[p].lines);
            uint64_t mi = LD(v->ph[p].misses), cap = LD(v->ph[p].lines_capped);

            if (!n && !e && !ld && !sto) {
                continue;
            }
            fprintf(f, "%s\"%d\": {\"insns\": %" PRIu64 ", \"entries\": %" PRIu64
                    ", \"min\": %" PRIu64 ", \"max\": %" PRIu64 ", \"loads\": %" PRIu64
                    ", \"stores\": %" PRIu64 ", \"lines\": %" PRIu64 ", \"misses\": %" PRIu64
                    ", \"lines_capped\": %" PRIu64 "}",
                    vfirst ? "" : ", ", p, n, e, mn == UINT64_MAX ? 0 : mn, mx, ld, sto, li, mi, cap);
            vfirst = false;
            tot[p].insns += n;
            tot[p].entries += e;
            tot[p].loads += ld;
            tot[p].stores += sto;
            tot[p].lines += li;
            tot[p].misses += mi;
            tot[p].lines_capped += cap;
            tot[p].min = mn < tot[p].min ? mn : tot[p].min;
            tot[p].max = mx > tot[p].max ? mx : tot[p].max;
        }
        fprintf(f, "}}");
    }
    fprintf(f, "\n], \"phases\": {");
    first = true;
    for (int p = 0; p < RK_MARK_PHASES; p++) {
        if (!tot[p].insns && !tot[p].entries && !tot[p].loads && !tot[p].stores) {
            continue;
        }
        fprintf(f, "%s\n  \"%d\": {\"insns\": %" PRIu64 ", \"entries\": %" PRIu64
                ", \"min\": %" PRIu64 ", \"max\": %" PRIu64 ", \"loads\": %" PRIu64
                ", \"stores\": %" PRIu64 ", \"lines\": %" PRIu64 ", \"misses\": %" PRIu64
                ", \"lines_capped\": %" PRIu64 "}",
                first ? "" : ",", p, tot[p].insns, tot[p].entries,
                tot[p].min == UINT64_MAX ? 0 : tot[p].min, tot[p].max, tot[p].loads, tot[p].stores,
                tot[p].lines, tot[p].misses, tot[p].lines_capped);
        first = false;
    }
    fprintf(f, "\n}, \"dropped_vcpus\": %" PRIu64 ", \"idle_entries\": %" PRIu64 ", \"counting\": %s}\n",
            dropped_vcpus, LD(idle_entries), LD(active) ? "true" : "false");
}

static void dump(void)
{
    char *tmp;
    FILE *f;

    pthread_mutex_lock(&dump_lock);
    dumps++;
    tmp = malloc(strlen(out_path) + 5);
    if (!tmp) {
        pthread_mutex_unlock(&dump_lock);
        return;
    }
    sprintf(tmp, "%s.tmp", out_path);
    f = fopen(tmp, "w");
    if (!f) {
        char msg[512];

        snprintf(msg, sizeof(msg), "rk_insn: cannot write %s: %s\n", tmp, strerror(errno));
        qemu_plugin_outs(msg);
    } else {
        write_json(f);
        if (fclose(f) == 0) {
            rename(tmp, out_path);
        }
    }
    free(tmp);
    pthread_mutex_unlock(&dump_lock);
}

static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
static void rk_at_exit(qemu_plugin_id_t id, void *p);

/* After the code cache was flushed (every vCPU stopped): callbacks anew, the wanted mode. */
static void reset_done(qemu_plugin_id_t id)
{
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
    qemu_plugin_register_atexit_cb(id, rk_at_exit, NULL);
    pthread_mutex_lock(&mode_lock);
    ST(active, want_active);
    switch_pending = false;
    pthread_mutex_unlock(&mode_lock);
}

static void set_counting(bool on)
{
    bool go;

    pthread_mutex_lock(&mode_lock);
    want_active = on;
    go = !switch_pending && LD(active) != on;
    switch_pending |= go;
    pthread_mutex_unlock(&mode_lock);
    if (go) {
        qemu_plugin_reset(plugin_id, reset_done);
    }
}

/* udata: imm | counted << 7 | k << 8 (counted: the block has the entry callback), k = instructions from the mark to the end of its block (the mark included) */
static void on_mark(unsigned int vcpu_index, void *udata)
{
    uintptr_t u = (uintptr_t)udata;
    unsigned imm = u & 0x7f;
    bool counted = u & 0x80;
    uint64_t k = counted ? u >> 8 : 0;
    struct rk_vcpu *v = vcpu_get(vcpu_index);
    struct rk_phase_ctr *old, *nw;

    if (!v) {
        __atomic_fetch_add(&dropped_vcpus, 1, __ATOMIC_RELAXED);
        return;
    }
    ST(v->marks, v->marks + 1);
    if (imm == RK_MARK_HINT_RESET) {
        /* every vCPU zeroes itself when it next runs; this one now, with its block's rest */
        __atomic_fetch_add(&reset_gen, 1, __ATOMIC_ACQ_REL);
        __atomic_store_n(&idle_entries, 0, __ATOMIC_RELAXED);
        v = vcpu_get(vcpu_index);
        ST(v->ph[0].insns, k);
        set_counting(true);
        return;
    }
    if (imm == RK_MARK_HINT_DUMP) {
        dump();
        set_counting(false);
        return;
    }
    if (!counted && imm != RK_MARK_HINT_FIRST) {
        __atomic_fetch_add(&idle_entries, 1, __ATOMIC_RELAXED);
    }
    old = &v->ph[v->phase];
    nw = &v->ph[imm - RK_MARK_HINT_FIRST];
    /* (a reset by another vCPU since this block's entry leaves less than k: clamp) */
    ST(old->insns, old->insns >= k ? old->insns - k : 0);
    if (v->phase) {
        uint64_t len = old->insns - old->start;

        ST(old->min, len < old->min ? len : old->min);
        ST(old->max, len > old->max ? len : old->max);
    }
    ST(nw->start, nw->insns);
    ST(nw->insns, nw->insns + k);
    ST(nw->entries, nw->entries + 1);
    ST(v->phase, (uint64_t)(imm - RK_MARK_HINT_FIRST));
    interval_next(v);
}

/*
 * An A64 load or store that QEMU 7.2 translates inline, without a helper: the load/store class
 * (op0 = x1x0) except the exclusives (LDXR/STXR, CAS, CASP; LDAR/STLR stay) and the LSE atomic
 * memory operations (LDADD/SWP/...). Only these get the memory callback: QEMU 7.2 runs the others
 * through helpers that report their accesses through CPUState.plugin_mem_cbs, a pointer it can
 * leave set after the instruction; once a code flush (qemu_plugin_reset at every RESET and DUMP)
 * freed what it points to, the next helper access anywhere (the kernel's atomics) aborted QEMU in
 * qemu_plugin_vcpu_mem_cb ("code should not be reached"). Caveat (docs/insn-count.md): exclusive
 * and atomic accesses are not counted.
 */
static bool rk_plain_ldst(uint32_t w)
{
    if ((w & 0x0a000000u) != 0x08000000u) {
        return false; /* not a load or store */
    }
    if ((w & 0x3f000000u) == 0x08000000u) {
        /* exclusives, CAS, CASP (o2 = 0 or o1 = 1) use helpers; LDAR/STLR (o2 = 1, o1 = 0) do not */
        return (w & 0x00a00000u) == 0x00800000u;
    }
    if ((w & 0x3b200c00u) == 0x38200000u) {
        return false; /* LSE atomic memory operations */
    }
    return true;
}

static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    bool counted = LD(active);

    if (!count_kernel && (int64_t)qemu_plugin_tb_vaddr(tb) < 0) {
        return; /* kernel (TTBR1) code: not counted, not instrumented */
    }
    if (counted) {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb, QEMU_PLUGIN_CB_NO_REGS,
                                             (void *)(uintptr_t)n);
    }
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w;
        unsigned imm;

        if (qemu_plugin_insn_size(insn) != 4) {
            continue;
        }
        memcpy(&w, qemu_plugin_insn_data(insn), 4); /* A64 is little-endian in instruction memory */
        if (counted && rk_plain_ldst(w)) {
            qemu_plugin_register_vcpu_mem_cb(insn, on_mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
                                             NULL);
        }

        if ((w & RK_A64_HINT_MASK) != RK_A64_HINT(0)) {
            continue;
        }
        imm = RK_A64_HINT_IMM(w);
        if (imm < RK_MARK_HINT_FIRST || imm > RK_MARK_HINT_LAST) {
            continue;
        }
        qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS,
                                               (void *)(uintptr_t)(imm | (counted ? 0x80 : 0) |
                                                                   (n - i) << 8));
    }
}

static void rk_at_exit(qemu_plugin_id_t id, void *p)
{
    dump();
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv)
{
    char msg[256];

    if (strcmp(info->target_name, "aarch64") != 0) {
        snprintf(msg, sizeof(msg), "rk_insn: needs an aarch64 guest, not %s\n", info->target_name);
        qemu_plugin_outs(msg);
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');

        if (eq && !strncmp(argv[i], "out", eq - argv[i]) && eq - argv[i] == 3 && eq[1]) {
            free(out_path);
            out_path = strdup(eq + 1);
        } else if (eq && !strncmp(argv[i], "kernel=", 7)) {
            if (!qemu_plugin_bool_parse("kernel", eq + 1, &count_kernel)) {
                qemu_plugin_outs("rk_insn: kernel= takes on or off\n");
                return -1;
            }
        } else {
            snprintf(msg, sizeof(msg), "rk_insn: unknown argument '%s' (out=FILE, kernel=on|off)\n",
                     argv[i]);
            qemu_plugin_outs(msg);
            return -1;
        }
    }
    if (!out_path) {
        qemu_plugin_outs("rk_insn: needs out=FILE (where the counters go)\n");
        return -1;
    }
    plugin_id = id;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
    qemu_plugin_register_atexit_cb(id, rk_at_exit, NULL);
    return 0;
}
