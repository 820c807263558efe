// SPDX-License-Identifier: MIT
//
// What the RMC publishes for its peers' direct READs (docs/sonuma.md "Direct path"): a table
// shared between host processes only, at RK_RMEM_TAIL_RMC_OFF of the node's RAM-file tail
// (hw/fabric/rk_remote_mem.h), outside guest memory. Not part of the guest interface: the
// driver, the library and the firmware never see it (hence not in rackemu/sonuma_regs.h).
// The owner writes it under the table's seqlock (hw/fabric/seqlock.h) whenever CTRL.EN, a
// context's validity or the VM's run state changes; a requester reads a context's entry and
// copies the data between read_begin and copy_valid, or takes the fabric.
#pragma once

#include "rackemu/rk_types.h"
#include "rackemu/sonuma_regs.h"
#include "rk_remote_mem.h"

#define RMC_PUB_MAGIC     0x504d4352u /* "RCMP" */
#define RMC_PUB_F_SERVING (1u << 0)   /* CTRL.EN set and the VM running: direct reads allowed */
#define RMC_PUB_F_LLC     (1u << 1)   /* llc-resident: the data it serves is LLC-resident (timing) */

struct rmc_pub_ctx {
    rk_u64 valid;      // CTX_CTRL_VALID
    rk_u64 base, size; // CTX_BASE, CTX_SIZE (guest physical)
    rk_u64 perm;       // CTX_PERM
    rk_u64 nodemask;   // CTX_NODEMASK
    rk_u64 key;        // CTX_KEY
};

struct rmc_pub {
    rk_u32 magic;         // RMC_PUB_MAGIC once published
    rk_u32 flags;         // RMC_PUB_F_* (under seq)
    rk_u64 seq;           // the seqlock (hw/fabric/seqlock.h)
    rk_u64 srv_rd_blocks; // blocks that peers read directly: the owner's SRV_RD_BLOCKS counts them
    rk_u64 reserved;
    struct rmc_pub_ctx ctx[RMC_CTX_COUNT];
};

static_assert(sizeof(struct rmc_pub_ctx) == 48 && sizeof(struct rmc_pub) == 32 + 48 * RMC_CTX_COUNT,
              "published table");
static_assert(sizeof(struct rmc_pub) <= RK_RMEM_TAIL_RMC_SIZE,
              "the RMC's table fits its area of the tail page");
