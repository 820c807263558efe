#!/usr/bin/env bash
# Build the static aarch64 guest agent into $RACKEMU_BUILD/guest/bin/.
source "$(dirname "$0")/../../platform/setup/lib.sh"
out=$RACKEMU_BUILD/guest/bin/rackemu-agent
src=$RACKEMU_ROOT/guest/agent
mkdir -p "$(dirname "$out")"
if [ ! -f "$out" ] || [ -n "$(find "$src" -newer "$out" -name '*.[ch]' | head -n1)" ]; then
    aarch64-linux-gnu-gcc -static -O2 -Wall -Wextra -Werror -o "$out.tmp" "$src/rackemu-agent.c" &&
        mv "$out.tmp" "$out" || die "building the guest agent failed"
fi
