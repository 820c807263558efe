/* SPDX-License-Identifier: MIT */
/* Fixed-width types of the register headers: the kernel's in kernel builds, <stdint.h> elsewhere. */
#ifndef RACKEMU_RK_TYPES_H
#define RACKEMU_RK_TYPES_H

#ifdef __KERNEL__
#include <linux/types.h>
typedef __u64 rk_u64;
typedef __u32 rk_u32;
typedef __u16 rk_u16;
typedef __u8 rk_u8;
#else
#include <stdint.h>
typedef uint64_t rk_u64;
typedef uint32_t rk_u32;
typedef uint16_t rk_u16;
typedef uint8_t rk_u8;
#endif

#endif /* RACKEMU_RK_TYPES_H */
