// SPDX-License-Identifier: MIT
/*
 * Device state described once (no QEMU headers). A core lists the fields of each piece of its
 * architectural state in one X-macro, X(type, name), and RK_STATE_FIELDS declares them as members
 * and generates visit(), the one walk over them that saving, loading and comparing share:
 *
 *     #define RK_CDMA_STATE(X) X(uint32_t, cr) X(uint32_t, sr) X(uint64_t, sa)
 *     struct CdmaArch { RK_STATE_FIELDS(RK_CDMA_STATE) };
 *     class Cdma : CdmaArch { ... uses cr, sr, sa as plain members ... };
 *
 * A live object that inherits its state struct keeps using the fields as plain members, so a
 * new field is one line in the X-macro: the member, its place in the saved state and its load
 * come from it. What a value may be (a QP state, an index below a bound) is the core's own
 * check after the load, with a message that names the field.
 *
 * Types a field may have: integers, bool, enums (saved as their underlying type), std::array of
 * those, another struct with visit() (StatePod<T>: a C struct saved as its bytes), and
 * std::vector of any of these (saved with its length;
 * load refuses more than the reader's `max_elems`). Byte order little-endian, no padding. A type
 * with a comma needs an alias (a macro argument cannot hold one): Bytes<64>, Words<4>.
 *
 * The saved state ("blob") is what the generic adapter migrates (rackemu/device.h): a core's
 * save op writes it with StateOut, its load op reads it with StateIn, which never reads past the
 * end, refuses what is left over and says where it stopped. The core validates, then applies:
 * a refused state changes nothing.
 */
#pragma once

#include <array>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace rackemu {

#define RK_STATE_DECLARE_(type, name) type name{};
#define RK_STATE_VISIT_(type, name)   v(#name, name);
/* The members of X-macro LIST and visit(v), which calls v("name", member) for each in order. */
#define RK_STATE_FIELDS(LIST) \
    LIST(RK_STATE_DECLARE_) \
    template <class V> void visit(V &v) \
    { \
        LIST(RK_STATE_VISIT_) \
    } \
    template <class V> void visit(V &v) const \
    { \
        LIST(RK_STATE_VISIT_) \
    }

/* The same with initial values: X(type, name, init) declares `type name = init;` (an engine's
 * reset values: a retry count of 7, an MTU of 1024). */
#define RK_STATE_INIT_DECLARE_(type, name, init) type name = init;
#define RK_STATE_INIT_VISIT_(type, name, init)   v(#name, name);
#define RK_STATE_FIELDS_INIT(LIST) \
    LIST(RK_STATE_INIT_DECLARE_) \
    template <class V> void visit(V &v) \
    { \
        LIST(RK_STATE_INIT_VISIT_) \
    } \
    template <class V> void visit(V &v) const \
    { \
        LIST(RK_STATE_INIT_VISIT_) \
    }

template <size_t N> using Bytes = std::array<uint8_t, N>;
template <size_t N> using Words = std::array<uint64_t, N>;

template <class T> struct is_std_array : std::false_type {
};
template <class T, size_t N> struct is_std_array<std::array<T, N>> : std::true_type {
};
template <class T> struct is_std_vector : std::false_type {
};
template <class T, class A> struct is_std_vector<std::vector<T, A>> : std::true_type {
};

/* A C struct of a device's ABI without padding (a work-queue entry), used as itself and saved as
 * its bytes. */
template <class T> struct StatePod : T {
    static_assert(std::has_unique_object_representations_v<T>,
                  "a StatePod has no padding: its bytes are its value");
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

/* Writes a state: out.put("name", value) per field (visit() does it). */
class StateOut {
public:
    template <class T> void operator()(const char *, const T &v) { put(v); }

    template <class T> void put(const T &v)
    {
        if constexpr (std::is_enum_v<T>) {
            put(static_cast<std::underlying_type_t<T>>(v));
        } else if constexpr (std::is_same_v<T, bool>) {
            put(uint8_t(v ? 1 : 0));
        } else if constexpr (std::is_integral_v<T>) {
            using U = std::make_unsigned_t<T>;
            U u = static_cast<U>(v);
            for (size_t i = 0; i < sizeof(T); i++)
                buf_.push_back(uint8_t(u >> (8 * i)));
        } else if constexpr (is_std_array<T>::value) {
            for (const auto &e : v)
                put(e);
        } else if constexpr (is_std_vector<T>::value) {
            put(uint32_t(v.size()));
            for (const auto &e : v)
                put(e);
        } else {
            v.visit(*this);
        }
    }

    std::vector<uint8_t> &bytes() { return buf_; }

private:
    std::vector<uint8_t> buf_;
};

/* Reads a state written by StateOut. ok() false after the first short read or refused length;
 * why() says which field. */
class StateIn {
public:
    StateIn(const uint8_t *p, size_t len, uint32_t max_elems) : p_(p), left_(len), max_elems_(max_elems) {}

    template <class T> void operator()(const char *name, T &v)
    {
        field_ = name;
        get(v);
    }

    template <class T> void get(T &v)
    {
        if (!ok_) return;
        if constexpr (std::is_enum_v<T>) {
            std::underlying_type_t<T> u{};
            get(u);
            v = static_cast<T>(u);
        } else if constexpr (std::is_same_v<T, bool>) {
            uint8_t b = 0;
            get(b);
            if (ok_ && b > 1) fail("%s: %u is not a boolean", field_, b);
            v = b != 0;
        } else if constexpr (std::is_integral_v<T>) {
            if (left_ < sizeof(T)) {
                fail("%s: the state ends %zu bytes early", field_, sizeof(T) - left_);
                return;
            }
            std::make_unsigned_t<T> u = 0;
            for (size_t i = 0; i < sizeof(T); i++)
                u |= std::make_unsigned_t<T>(p_[i]) << (8 * i);
            v = static_cast<T>(u);
            p_ += sizeof(T);
            left_ -= sizeof(T);
        } else if constexpr (is_std_array<T>::value) {
            for (auto &e : v)
                get(e);
        } else if constexpr (is_std_vector<T>::value) {
            uint32_t n = 0;
            const char *f = field_;
            get(n);
            if (ok_ && n > max_elems_) fail("%s: %u entries, at most %u", f, n, max_elems_);
            if (ok_ && n > left_) fail("%s: %u entries in %zu bytes", f, n, left_); // before allocating
            if (!ok_) return;
            v.clear();
            v.resize(n);
            for (auto &e : v) {
                get(e);
                field_ = f;
                if (!ok_) return;
            }
        } else {
            v.visit(*this);
        }
    }

    /* After the last field: nothing may be left over. */
    bool finish()
    {
        if (ok_ && left_) fail("%zu bytes left over after the last field", left_);
        return ok_;
    }
    bool ok() const { return ok_; }
    const std::string &why() const { return why_; }

    __attribute__((format(printf, 2, 3))) void fail(const char *fmt, ...)
    {
        char buf[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (ok_) why_ = buf;
        ok_ = false;
    }

private:
    const uint8_t *p_;
    size_t left_;
    uint32_t max_elems_;
    const char *field_ = "state";
    bool ok_ = true;
    std::string why_;
};

} // namespace rackemu
