/* SPDX-License-Identifier: MIT */
/*
 * Guest instruction-count marks (docs/insn-count.md): the one definition of the marker
 * instructions that guest code executes and the rk_insn QEMU TCG plugin
 * (platform/qemu/plugins/rk_insn.c) recognises.
 *
 * A mark is `hint #imm` with imm in RK_MARK_HINT_FIRST..RK_MARK_HINT_LAST (0x60..0x7f). The Arm
 * ARM leaves these HINT encodings unallocated and says an unallocated hint executes as a NOP, on
 * hardware and in QEMU (target/arm/translate-a64.c, handle_hint: "default specified as NOP
 * equivalent"), so a marked program runs unchanged without the plugin, on any ARMv8 CPU, and the
 * mark costs one instruction. The immediate says what the mark does, because a QEMU 7.2 plugin
 * cannot read guest registers:
 *   imm = 0x60 + p, p in 0..RK_MARK_PHASE_MAX  switch the executing vCPU to phase p (0: no phase);
 *                                               the instructions the vCPU retires at EL0 from
 *                                               this mark on count for phase p
 *   imm = RK_MARK_HINT_RESET                    zero every vCPU's counters (start of a measurement)
 *   imm = RK_MARK_HINT_DUMP                     write the counters to the plugin's file now
 * Counting: a phase's count includes the mark that opens it and excludes the one that closes it
 * (which counts for the next phase). Phases are per vCPU: a thread that marks must stay on its
 * vCPU (pin it) and nothing else should run there at EL0 meanwhile.
 *
 * Phase numbers belong to the workload that sets them; the ones the repository's workloads use
 * are listed here so that the plugin's readers (bench/sonuma.py) and the workloads agree.
 */
#ifndef RACKEMU_INSN_MARK_H
#define RACKEMU_INSN_MARK_H

#define RK_MARK_HINT_FIRST 0x60
#define RK_MARK_PHASE_MAX  29 /* phases 0..29: hint 0x60..0x7d */
#define RK_MARK_PHASES     (RK_MARK_PHASE_MAX + 1)
#define RK_MARK_HINT_RESET (RK_MARK_HINT_FIRST + RK_MARK_PHASES)     /* 0x7e */
#define RK_MARK_HINT_DUMP  (RK_MARK_HINT_FIRST + RK_MARK_PHASES + 1) /* 0x7f */
#define RK_MARK_HINT_LAST  RK_MARK_HINT_DUMP

/* A64 HINT #imm: 0xd503201f | imm << 5 (imm: CRm:op2, 7 bits). */
#define RK_A64_HINT(imm)      (0xd503201fu | ((unsigned)(imm) << 5))
#define RK_A64_HINT_MASK      0xfffff01fu
#define RK_A64_HINT_IMM(insn) (((insn) >> 5) & 0x7fu)

/* Phases of rmc-kv (guest/workloads/rmc_kv.c; docs/sonuma-workloads.md, "The measured software cost"). */
enum rk_phase {
    RK_PH_NONE = 0,
    // Remote reads of the store (rmc-kv read); ISSUE and CHECK per attempt, COPY and USE per
    // accepted read.
    RK_PH_KV_ISSUE = 1, // compute the offsets, build and post the WQE (rmc_post_read / _sabre)
    RK_PH_KV_CHECK = 2, // atomicity check: baseline: header + every line version; sabre: CQE status
    RK_PH_KV_COPY = 3,  // baseline: strip the line versions into the application buffer; sabre:
                        // never entered (zero copy)
    RK_PH_KV_USE = 4,   // the lookup on the clean object: its header names the key and the length
    // Local reads of the store (rmc-kv local), per accepted read.
    RK_PH_LOCAL_CHECK = 5, // baseline: header + line versions; sabre layout: version before/after
    RK_PH_LOCAL_COPY = 6,  // baseline: strip the line versions; sabre layout: copy the object
    RK_PH_LOCAL_USE = 7,   // as RK_PH_KV_USE
    // The writer's update (rmc-kv serve --writers), per update.
    RK_PH_KV_WRITE = 8,   // store_object: begin (lock), the stores of the prepared value, end
    RK_PH_KV_PREPARE = 9, // prepare_object: generate the next value and its checksum (unlocked)
    // The plugin's self-test (insn-count-check).
    RK_PH_CHECK_A = 20,
    RK_PH_CHECK_B = 21,
    RK_PH_CHECK_MEM_STREAM = 22, // loads streaming twice over 64 KiB: every access misses a 32 KiB L1d
    RK_PH_CHECK_MEM_REUSE = 23,  // 8 KiB loaded, stored, loaded: each line misses once
};

#if defined(__aarch64__) && !defined(__ASSEMBLER__)
/* Switch this vCPU to phase p (a constant 0..RK_MARK_PHASE_MAX). The memory clobber keeps the
 * compiler from moving loads and stores across the mark; register-only instructions next to it
 * may still move by a few places. */
#define RK_MARK(p)      __asm__ volatile("hint %0" ::"i"(RK_MARK_HINT_FIRST + (p)) : "memory")
#define RK_MARK_RESET() __asm__ volatile("hint %0" ::"i"(RK_MARK_HINT_RESET) : "memory")
#define RK_MARK_DUMP()  __asm__ volatile("hint %0" ::"i"(RK_MARK_HINT_DUMP) : "memory")
#endif

#endif /* RACKEMU_INSN_MARK_H */
