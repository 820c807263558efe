// SPDX-License-Identifier: MIT
// Small formatting helpers shared by the device cores' guest-error messages.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rackemu {

inline std::string hex(uint64_t v)
{
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
    return buf;
}

} // namespace rackemu
