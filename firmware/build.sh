#!/usr/bin/env bash
# Build the bare-metal firmware images into $RACKEMU_BUILD/firmware/.
source "$(dirname "$0")/../platform/setup/lib.sh"
out=$RACKEMU_BUILD/firmware
mkdir -p "$out"
src=$RACKEMU_ROOT/firmware
cc=aarch64-linux-gnu-gcc
command -v $cc >/dev/null || die "$cc not found: install gcc-aarch64-linux-gnu"
# Every firmware/<name>_selftest.c is a self-test (discovered: a new device adds its file, nothing
# else); each becomes $RACKEMU_BUILD/firmware/<name>-selftest.elf.
for c in "$src"/*_selftest.c; do
    t=$(basename "$c" _selftest.c)
    elf=$out/$t-selftest.elf
    if [ ! -f "$elf" ] || [ -n "$(find "$src" "$RACKEMU_ROOT/hw/include" -newer "$elf" -type f | head -n1)" ]; then
        $cc -O2 -g -Wall -Wextra -Werror -ffreestanding -nostdlib -Wl,--no-warn-rwx-segments -mgeneral-regs-only -mstrict-align \
            -I"$RACKEMU_ROOT/hw/include" -T "$src/firmware.ld" -o "$elf" "$src/start.S" "$src/${t}_selftest.c" ||
            die "building the $t firmware self-test failed"
        say "firmware: $elf"
    fi
done
