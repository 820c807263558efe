// SPDX-License-Identifier: MIT
// The byte reader every rackemu fuzz harness parses its input with (docs/fuzzing.md). Fields are
// taken little-endian from the front of the input, so seeds are easy to write by hand
// (corpus/gen_seeds.py); past the end every field reads as zero. Also the harnesses' other
// shared pieces: the invariant check and a scratch directory for their sockets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace rackemu::fuzz {

class Input {
public:
    Input(const uint8_t *data, size_t size) : p_(data), n_(size) {}
    bool empty() const { return n_ == 0; }
    size_t left() const { return n_; }
    template <typename T> T get()
    {
        T v{};
        const size_t k = std::min(sizeof v, n_);
        std::memcpy(&v, p_, k);
        p_ += k;
        n_ -= k;
        return v;
    }
    uint8_t u8() { return get<uint8_t>(); }
    uint16_t u16() { return get<uint16_t>(); }
    uint32_t u32() { return get<uint32_t>(); }
    uint64_t u64() { return get<uint64_t>(); }
    // Copies up to `len` bytes into `dst`, zero-filling what the input lacks.
    void bytes(void *dst, size_t len)
    {
        const size_t k = std::min(len, n_);
        std::memcpy(dst, p_, k);
        std::memset(static_cast<uint8_t *>(dst) + k, 0, len - k);
        p_ += k;
        n_ -= k;
    }

private:
    const uint8_t *p_;
    size_t n_;
};

// A broken invariant: report it and abort, so libFuzzer saves the input as a crash.
[[noreturn]] inline void invariant_failed(const char *file, int line, const char *what)
{
    std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", file, line, what);
    std::abort();
}

// A new directory /tmp/<prefix>-XXXXXX, removed with what it holds when the process exits.
inline std::string temp_dir_removed_at_exit(const char *prefix)
{
    static std::vector<std::string> dirs;
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
        std::perror("mkdtemp");
        std::abort();
    }
    if (dirs.empty()) {
        std::atexit([] {
            for (const std::string &d : dirs) {
                std::error_code ec;
                std::filesystem::remove_all(d, ec);
            }
        });
    }
    dirs.push_back(tmpl);
    return tmpl;
}

} // namespace rackemu::fuzz

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) ::rackemu::fuzz::invariant_failed(__FILE__, __LINE__, #cond); \
    } while (0)
