// SPDX-License-Identifier: MIT
//
// What the RNIC publishes for its peers' direct READs and WRITEs (docs/rnic.md "Direct path"): a
// table shared between host processes only, at RK_RMEM_TAIL_RNIC_OFF of the node's RAM-file tail
// (hw/fabric/rk_remote_mem.h), outside guest memory. Not part of the guest interface: the
// driver, the library and the firmware never see it (hence not in rackemu/rnic_regs.h).
//
// The owner writes it under the table's seqlock (hw/fabric/seqlock.h) whenever what its
// responder checks for a READ or WRITE changes: CTRL.ENABLE, the VM's run state, a QP's state,
// PD, access flags, source address or P_Key, an MR registered or deregistered. A requester reads
// a QP's and an MR's entries, the page list and (a READ) the data between read_begin and
// copy_valid, or sends the request on the wire. A WRITE also holds busy[its node] (its liveness
// word, non-zero) from before read_begin until its copy is done (the seqlock's holders), and the
// owner, after write_begin, waits until no peer holds it (or the holder is not that live
// incarnation any more): so no direct WRITE lands in memory an MR no longer covers. An MR whose
// page list does not fit `pages` is published without it (npages 0, not phys): its READs and
// WRITEs take the wire.
#pragma once

#include <cstddef>

#include "rackemu/rk_types.h"
#include "rackemu/rnic_regs.h"
#include "rk_remote_mem.h"

#define RNIC_PUB_MAGIC     0x42504e52u // "RNPB"
#define RNIC_PUB_F_SERVING (1u << 0)   // CTRL.ENABLE set and the VM running: direct accesses allowed
#define RNIC_PUB_NODES     64u         // busy words: one per fabric node (RKF_MAX_NODES)

struct rnic_pub_qp {
    rk_u32 pdn;  // 0: no QP at this index
    rk_u8 state; // RNIC_QPS_* as the transport has it
    rk_u8 reserved[3];
    rk_u32 access; // the QP's RNIC_ACCESS_REMOTE_*
    rk_u32 src_ip; // the only source its responder takes requests from (the path's peer), host order
    rk_u16 pkey;
    rk_u16 reserved2;
    rk_u32 dest_qpn; // the connected peer QP: the only requester QP its responder serves
};

struct rnic_pub_mr {
    rk_u64 iova, length;
    rk_u32 key; // lkey = rkey; 0: no MR at this index
    rk_u32 pdn;
    rk_u32 access; // RNIC_ACCESS_*
    rk_u8 phys;    // 1: iova is guest physical (RNIC_MR_F_PHYS)
    rk_u8 page_shift;
    rk_u16 reserved;
    rk_u32 first_page; // index into the pages after the table
    rk_u32 npages;     // 0 (and not phys): not published, READs take the wire
};

struct rnic_pub {
    rk_u32 magic;        // RNIC_PUB_MAGIC once published
    rk_u32 flags;        // RNIC_PUB_F_* (under seq)
    rk_u64 seq;          // the seqlock (hw/fabric/seqlock.h)
    rk_u64 served_reads; // READs of this node's memory that peers completed directly (peers add)
    rk_u64 served_read_bytes;
    rk_u64 served_writes; // WRITEs likewise
    rk_u64 served_write_bytes;
    rk_u64 busy[RNIC_PUB_NODES]; // a peer's direct WRITE in progress: its liveness word (UP set), else 0
    struct rnic_pub_qp qp[RNIC_MAX_QP];
    struct rnic_pub_mr mr[RNIC_MAX_MR];
    // then, up to the end of the area, rk_u64 pages[]: the published MRs' page lists (guest
    // physical), from RNIC_PUB_PAGES_OFF
};
#define RNIC_PUB_PAGES_OFF sizeof(struct rnic_pub)

static_assert(sizeof(struct rnic_pub_qp) == 24 && sizeof(struct rnic_pub_mr) == 40, "published entries");
static_assert(offsetof(struct rnic_pub, qp) % 8 == 0 && offsetof(struct rnic_pub, mr) % 8 == 0 &&
                  RNIC_PUB_PAGES_OFF % 8 == 0,
              "entries and the page list on 8-byte boundaries (single-copy atomic words)");
static_assert(RNIC_PUB_PAGES_OFF <= RK_RMEM_TAIL_RNIC_SIZE, "the RNIC's table fits its area of the tail");
