// SPDX-License-Identifier: MIT
// The RNIC's state described once (hw/core/state.h), with initial values: an X-macro list
// X(type, name, init) per state struct, RNIC_FIELDS(LIST) declares the members `type name =
// init;` and visit(), which StateOut/StateIn walk. The live objects (the RC engine's QP, the
// device's MR/CQ/QP) are or inherit these structs, so a new field is one line in its list.
// Pod<T>: a C struct of the device's ABI (a WQE) saved as its bytes. Internal to hw/rnic.
#pragma once

#include <cstring>
#include <type_traits>

#include "state.h"

namespace rackemu::rnic {

#define RNIC_FIELD_DECLARE_(type, name, init) type name = init;
#define RNIC_FIELD_VISIT_(type, name, init)   v(#name, name);
#define RNIC_FIELDS(LIST) \
    LIST(RNIC_FIELD_DECLARE_) \
    template <class V> void visit(V &v) \
    { \
        LIST(RNIC_FIELD_VISIT_) \
    } \
    template <class V> void visit(V &v) const \
    { \
        LIST(RNIC_FIELD_VISIT_) \
    }

// A C struct without padding (rnic_regs.h's WQEs), used as itself and saved as its bytes.
template <class T> struct Pod : T {
    static_assert(std::has_unique_object_representations_v<T>,
                  "a Pod has no padding: its bytes are its value");
    template <class V> void visit(V &v)
    {
        Bytes<sizeof(T)> b;
        std::memcpy(b.data(), static_cast<T *>(this), sizeof(T));
        v("bytes", b);
        std::memcpy(static_cast<T *>(this), b.data(), sizeof(T));
    }
    template <class V> void visit(V &v) const
    {
        Bytes<sizeof(T)> b;
        std::memcpy(b.data(), static_cast<const T *>(this), sizeof(T));
        v("bytes", b);
    }
};

} // namespace rackemu::rnic
