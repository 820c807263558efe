#!/usr/bin/env bash
# Build the static aarch64 user programs into $RACKEMU_BUILD/guest/bin/.
source "$(dirname "$0")/../../platform/setup/lib.sh"
out=$RACKEMU_BUILD/guest/bin
src=$RACKEMU_ROOT/guest/user
mkdir -p "$out"
if [ ! -f "$out/unimem" ] || [ -n "$(find "$src" "$RACKEMU_ROOT/hw/include" "$RACKEMU_ROOT/guest/include" -newer "$out/unimem" -name '*.[ch]' | head -n1)" ]; then
    aarch64-linux-gnu-gcc -static -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$RACKEMU_ROOT/guest/include" \
        -o "$out/unimem.tmp" "$src/unimem.c" "$src/libunimem.c" && mv "$out/unimem.tmp" "$out/unimem" ||
        die "building guest/user failed"
fi
