/* SPDX-License-Identifier: MIT */
/* Bare-metal entry for rackemu firmware: set a stack, run main(), power off through PSCI. */
    .section .text.boot, "ax"
    .global _start
_start:
    ldr     x0, =__stack_top
    mov     sp, x0
    bl      main
    /* PSCI SYSTEM_OFF (QEMU's virt provides PSCI over HVC when no EL3 firmware runs). */
    ldr     x0, =0x84000008
    hvc     #0
1:  wfe
    b       1b
