// SPDX-License-Identifier: MIT
//
// The seqlock of a published table (docs/fabric.md, "Published tables"): a table in memory
// shared between host processes (a node's RAM-file tail, rk_remote_mem.h) that one writer
// changes and readers in other processes check before they act on the writer's memory
// directly. The RMC's context table (hw/sonuma/rmc_pub.h) and the RNIC's QP and MR tables
// (hw/rnic/rnic_pub.h) are such tables; this is their one seqlock.
//
// Who does what:
//  - One writer per table (the owner's device thread, under the device's lock): write_begin(),
//    its stores with shared_store(), write_end(). The writer never waits for readers, except
//    for holders (below).
//  - Any number of readers, in any process: read_begin(), their loads with shared_load(),
//    read_valid(); what they read is the table of one write section, or they look again. A
//    reader that goes on to copy memory the table grants (a READ of the owner's RAM) calls
//    copy_valid() after the copy: true means no write section began before the copy ended, so
//    the copy holds nothing written after a change that withdrew the grant.
//  - A reader whose effect cannot be discarded (a WRITE into the owner's RAM) holds a word of
//    the table from before read_begin() until its copy is done (hold(), unhold()); the writer,
//    after write_begin() and before its first store, waits until no word is held (holder()).
//    One of the two sees the other, so no such copy overlaps a write section.
//
// Memory orders, stated once (the C++20 memory model; accesses to the table are atomic on both
// sides, fields relaxed, so that ThreadSanitizer sees no race; seq is the 64-bit word):
//  - write_begin: seq <- odd (relaxed), then a seq_cst fence. The fence keeps every later store
//    of the writer's thread, and of every thread that synchronizes with it afterwards (the
//    guest's later stores to memory the table granted), from being seen before the odd seq: as
//    a release fence for read_valid's acquire fence, and as a seq_cst fence for copy_valid's
//    and hold()'s (below). A release fence would do for the table alone, not for the others.
//  - write_end: seq <- odd + 1 (release): a reader whose acquire load in read_begin sees it sees
//    every store of the section.
//  - read_begin: seq (acquire); odd means a writer is inside: look again.
//  - read_valid: an acquire fence, then seq (relaxed) equal to read_begin's. If a field load
//    saw a store of a later section, the fence synchronizes with that section's write_begin
//    fence, so this load sees its odd seq or later: the snapshot is refused.
//  - copy_valid: a seq_cst fence, then seq (relaxed) equal. The copy's loads may read memory
//    written by other threads than the writer (the owner's vCPUs, after the change returned),
//    which the release/acquire pairing does not cover; two seq_cst fences do: if the copy saw
//    such a store, write_begin's fence precedes this fence in the single total order, and this
//    load sees the odd seq or later.
//  - hold: word <- holder (relaxed), then a seq_cst fence, before read_begin. Dekker with
//    write_begin: two seq_cst fences between a store and a load of the other side's word, so
//    the writer's holder() sees the hold or the reader's read_begin sees the odd seq.
//  - unhold: word <- 0 (release), after the copy; holder() loads with acquire, so the writer
//    goes on only after the copy's stores.
// Every access is also a single-copy atomic access of its width, so the same words work between
// processes (the RAM-file mapping) as between threads.
//
// Caveat: the readers are untrusted peers of the owner and the owner is one of theirs: a
// scribbled seq or field gives a refused snapshot or wrong values, never more; every reader
// checks what it read against its own bounds before it uses it. A writer that died inside a
// section leaves seq odd; the next writer (a new incarnation) starts from whatever it finds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace rackemu::fabric {

namespace seqlock_detail {
// The word a record is accessed in: its alignment, at most 8 bytes.
template <typename T> struct Word {
    using type =
        std::conditional_t<alignof(T) >= 8, uint64_t,
                           std::conditional_t<alignof(T) >= 4, uint32_t,
                                              std::conditional_t<alignof(T) >= 2, uint16_t, uint8_t>>>;
};
} // namespace seqlock_detail

// A field or a whole entry of a published table, as relaxed atomic accesses of its alignment's
// width (an entry with a u64 member in 8-byte words, one of u32s in 4-byte words), so that both
// sides access every word with the same width.
template <typename T> T shared_load(const T &shared)
{
    static_assert(std::is_trivially_copyable_v<T>);
    using W = typename seqlock_detail::Word<T>::type;
    static_assert(sizeof(T) % sizeof(W) == 0, "an entry is a whole number of its words");
    W w[sizeof(T) / sizeof(W)];
    const W *src = reinterpret_cast<const W *>(&shared);
    for (size_t i = 0; i < sizeof(T) / sizeof(W); i++)
        w[i] = __atomic_load_n(src + i, __ATOMIC_RELAXED);
    T v;
    std::memcpy(&v, w, sizeof v);
    return v;
}

template <typename T> void shared_store(T &shared, const std::type_identity_t<T> &value)
{
    static_assert(std::is_trivially_copyable_v<T>);
    using W = typename seqlock_detail::Word<T>::type;
    static_assert(sizeof(T) % sizeof(W) == 0, "an entry is a whole number of its words");
    W w[sizeof(T) / sizeof(W)];
    std::memcpy(w, &value, sizeof w);
    W *dst = reinterpret_cast<W *>(&shared);
    for (size_t i = 0; i < sizeof(T) / sizeof(W); i++)
        __atomic_store_n(dst + i, w[i], __ATOMIC_RELAXED);
}

// The table's magic word: set (release) once the writer has filled the table, checked (acquire)
// by a reader before it reads anything else.
inline void publish_table(uint32_t &magic, uint32_t value)
{
    __atomic_store_n(&magic, value, __ATOMIC_RELEASE);
}

inline bool table_published(const uint32_t &magic, uint32_t value)
{
    return __atomic_load_n(&magic, __ATOMIC_ACQUIRE) == value;
}

// A view of a table's sequence word. The writer makes one per write section; a reader one per
// table it reads.
class Seqlock {
public:
    explicit Seqlock(uint64_t &seq) : seq_(&seq) {}

    // ---- the writer (one at a time: the caller's lock) ----
    void write_begin()
    {
        odd_ = __atomic_load_n(seq_, __ATOMIC_RELAXED) | 1;
        __atomic_store_n(seq_, odd_, __ATOMIC_RELAXED);
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    void write_end() { __atomic_store_n(seq_, odd_ + 1, __ATOMIC_RELEASE); }

    // ---- readers ----
    // false: a writer is inside (seq odd), look again
    bool read_begin(uint64_t &seq) const
    {
        seq = __atomic_load_n(seq_, __ATOMIC_ACQUIRE);
        return !(seq & 1);
    }
    // after the table's loads: true if they are one section's table
    bool read_valid(uint64_t seq) const
    {
        std::atomic_thread_fence(std::memory_order_acquire);
        return __atomic_load_n(seq_, __ATOMIC_RELAXED) == seq;
    }
    // after a copy of memory the table granted: true if no write section began before it ended
    bool copy_valid(uint64_t seq) const
    {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        return __atomic_load_n(seq_, __ATOMIC_RELAXED) == seq;
    }

    // ---- holders: readers whose effect cannot be discarded ----
    // The reader's word (non-zero `holder`, naming it), before read_begin
    static void hold(uint64_t &word, uint64_t holder)
    {
        __atomic_store_n(&word, holder, __ATOMIC_RELAXED);
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    // after its copy (the copy's stores before it)
    static void unhold(uint64_t &word) { __atomic_store_n(&word, uint64_t(0), __ATOMIC_RELEASE); }
    // The writer, after write_begin: 0, or the holder of a hold in progress
    static uint64_t holder(const uint64_t &word) { return __atomic_load_n(&word, __ATOMIC_ACQUIRE); }
    // The writer takes back a hold whose holder is gone (its process died in the copy): cleared
    // only if it still names that holder.
    static bool take_back(uint64_t &word, uint64_t holder)
    {
        return __atomic_compare_exchange_n(&word, &holder, uint64_t(0), false, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE);
    }

private:
    uint64_t *seq_;
    uint64_t odd_ = 0;
};

} // namespace rackemu::fabric
