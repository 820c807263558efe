#!/usr/bin/env bash
# Build everything that runs in a node: fetch Debian's arm64 kernel, build the kernel module,
# the user programs and the agent, and pack the initramfs. Idempotent.
source "$(dirname "$0")/../platform/setup/lib.sh"
bash "$RACKEMU_ROOT/platform/setup/fetch-guest.sh"
bash "$RACKEMU_ROOT/guest/agent/build.sh"
bash "$RACKEMU_ROOT/guest/kmod/build.sh"
bash "$RACKEMU_ROOT/guest/user/build.sh"
bash "$RACKEMU_ROOT/guest/image/build-image.sh"
