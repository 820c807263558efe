// SPDX-License-Identifier: MIT
// The switch programs (docs/switch.md, "Programs"): one factory per program, listed in the one
// program table of programs.cc.
#pragma once

#include <memory>

#include "stage.h"

namespace rackemu::fabric::sw {

// opcount.cc: per-QP opcode, payload byte, NAK and retransmission counters; no rewrite.
std::unique_ptr<Program> make_opcount(const Params &p);
extern const char kOpcountSummary[];
std::vector<ParamSpec> opcount_params();

} // namespace rackemu::fabric::sw
