// SPDX-License-Identifier: MIT
// The program table: name -> summary, parameters, factory. A new program is one row here
// (docs/switch.md, "Writing a program").
#include "programs.h"

namespace rackemu::fabric::sw {

const std::vector<ProgramInfo> &programs()
{
    static const std::vector<ProgramInfo> table = {
        {"opcount", kOpcountSummary, opcount_params(), make_opcount},
    };
    return table;
}

} // namespace rackemu::fabric::sw
