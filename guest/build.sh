#!/usr/bin/env bash
# Build everything that runs in a node: fetch Debian's arm64 kernel, build the agent, every
# device family's kernel modules (guest/*/kmod/) and the user programs (guest/common/,
# guest/*/user/, guest/workloads/), and pack the initramfs. Idempotent.
source "$(dirname "$0")/../platform/setup/lib.sh"
bash "$RACKEMU_ROOT/platform/setup/fetch-guest.sh"
bash "$RACKEMU_ROOT/guest/agent/build.sh"
bash "$RACKEMU_ROOT/guest/image/build-modules.sh"
bash "$RACKEMU_ROOT/guest/image/build-programs.sh"
bash "$RACKEMU_ROOT/guest/image/build-image.sh"
