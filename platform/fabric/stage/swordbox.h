// SPDX-License-Identifier: MIT
// `swordbox`: the on-path serializer of "In-network Contention Resolution for Disaggregated
// Memory" (Grant and Snoeren, WORDS 2021) and chapter 3 "On-path serialization" of Grant's 2024
// dissertation, as a program of the switch stage (docs/swordbox.md): lock acceleration (CAS on a
// cached lock word -> RDMA WRITE, its ACK -> ATOMIC ACKNOWLEDGE), QP multiplexing (every client
// connection to the memory server onto one server QP, PSN and MSN stitched) and Clover steering
// (write and read steering to a key's cached tail). Each behaviour is switched by a parameter.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "stage.h"

namespace rackemu::fabric::sw {

extern const char kSwordboxSummary[];
std::vector<ParamSpec> swordbox_params();
std::unique_ptr<Program> make_swordbox(const Params &p);

// The program's own counters (also in `switch stats` under program_stats), for tests and tools.
struct SwordboxStats {
    // connections
    uint64_t untracked = 0, learn_overflow = 0, engaged = 0, learning_requests = 0;
    // request mapping
    uint64_t mapped = 0, retransmissions = 0, retrans_unmapped = 0, gap_drops = 0, ring_full = 0,
             not_ready = 0, mux_busy = 0, mux_unsupported = 0;
    // response mapping
    uint64_t responses = 0, acks_expanded = 0, covered_skipped = 0, duplicates = 0, stray = 0, naks_in = 0,
             naks_out = 0;
    // locks
    uint64_t lock_rewrites = 0, lock_acquired = 0, lock_failed = 0, lock_releases = 0, lock_misses = 0,
             lock_fills = 0, lock_fills_stale = 0, lock_invalidations = 0;
    // steering
    uint64_t steer_cas = 0, steer_cas_at_tail = 0, steer_reads = 0, read_hits = 0, read_misses = 0,
             hot_key_overflow = 0;
};
const SwordboxStats &swordbox_stats(const Program &p); // p made by make_swordbox

} // namespace rackemu::fabric::sw
