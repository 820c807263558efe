// SPDX-License-Identifier: MIT
/*
 * The C table of device operations (rackemu/device.h) from a C++ core's methods, written once.
 * A core class `Core` provides what its table names:
 *
 *     void reset();
 *     void pause(bool on);
 *     bool irq_level(unsigned line) const;
 *     void save(StateOut &out) const;                       // hw/core/state.h
 *     bool load(StateIn &in, std::string *why);            // validate all, then apply
 *     uint64_t NAME(uint64_t offset, unsigned size);        // a region's read, or
 *     rk_status NAME(uint64_t offset, unsigned size, uint64_t *value);
 *     void NAME(uint64_t offset, uint64_t value, unsigned size);   // a region's write, or
 *     rk_status NAME(uint64_t offset, uint64_t value, unsigned size);
 *
 * and its C API file fills in an RkDeviceOps with DeviceOps<Core>::free, ::reset, ...,
 * ::read<&Core::ctrl_read>, ::write<&Core::ctrl_write>.
 */
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "rackemu/device.h"
#include "state.h"

namespace rackemu {

template <class T> struct member_fn;
template <class C, class R, class... A> struct member_fn<R (C::*)(A...)> {
    static constexpr size_t arity = sizeof...(A);
};

template <class Core> struct DeviceOps {
    static Core *of(void *c) { return static_cast<Core *>(c); }

    static void free(void *c) { delete of(c); }
    static void reset(void *c) { of(c)->reset(); }
    static void pause(void *c, int on) { of(c)->pause(on != 0); }
    static int irq_level(void *c, unsigned line) { return of(c)->irq_level(line) ? 1 : 0; }

    static int save(void *c, uint8_t **buf, uint64_t *len)
    {
        StateOut out;
        of(c)->save(out);
        auto &b = out.bytes();
        *buf = static_cast<uint8_t *>(malloc(b.size() ? b.size() : 1));
        if (!*buf) return -1;
        if (!b.empty()) memcpy(*buf, b.data(), b.size());
        *len = b.size();
        return 0;
    }

    // max_elems: the most entries any list in the state may have (the core's largest table).
    template <uint32_t max_elems>
    static int load(void *c, const uint8_t *buf, uint64_t len, char *msg, size_t msglen)
    {
        StateIn in(buf, len, max_elems);
        std::string why;
        if (of(c)->load(in, &why)) return 0;
        if (why.empty()) why = in.ok() ? "refused" : in.why();
        if (msg && msglen) snprintf(msg, msglen, "%s", why.c_str());
        return -EINVAL;
    }

    template <auto M> static rk_status read(void *c, uint64_t off, unsigned size, uint64_t *value)
    {
        if constexpr (member_fn<decltype(M)>::arity == 2) {
            *value = (of(c)->*M)(off, size);
            return RK_OK;
        } else {
            return (of(c)->*M)(off, size, value);
        }
    }

    template <auto M> static rk_status write(void *c, uint64_t off, uint64_t value, unsigned size)
    {
        using R = decltype((of(c)->*M)(off, value, size));
        if constexpr (std::is_void_v<R>) {
            (of(c)->*M)(off, value, size);
            return RK_OK;
        } else {
            return (of(c)->*M)(off, value, size);
        }
    }
};

} // namespace rackemu
