/* SPDX-License-Identifier: MIT */
/* QEMU's generated trace points of the rackemu overlay (platform/qemu/overlay/trace-events). */
#include "trace/trace-hw_rackemu.h"
