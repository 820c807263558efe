// SPDX-License-Identifier: MIT
// The program table: name -> summary, parameters, factory. A new program is one row here
// (docs/switch.md, "Writing a program").
#include "programs.h"
#include "swordbox.h"

namespace rackemu::fabric::sw {

const std::vector<ProgramInfo> &programs()
{
    static const std::vector<ProgramInfo> table = {
        {"opcount", kOpcountSummary, opcount_params(), make_opcount},
        {"swordbox", kSwordboxSummary, swordbox_params(), make_swordbox},
    };
    return table;
}

} // namespace rackemu::fabric::sw
