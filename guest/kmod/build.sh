#!/usr/bin/env bash
# Cross-build rackemu's kernel modules for the guest kernel (headers from fetch-guest.sh) into
# $RACKEMU_BUILD/guest/modules/, with the load order the image's /init follows.
source "$(dirname "$0")/../../platform/setup/lib.sh"
env_file=$RACKEMU_BUILD/guest/guest.env
[ -f "$env_file" ] || bash "$RACKEMU_ROOT/platform/setup/fetch-guest.sh"
source "$env_file"
out=$RACKEMU_BUILD/guest/modules
bdir=$RACKEMU_BUILD/guest/kmod-build
mkdir -p "$out" "$bdir"
: > "$out/load-order.tmp"
for m in unimem unimem_gas; do
    # Build out of tree in a copy, so the checkout stays clean.
    mkdir -p "$bdir/$m"
    for f in "$RACKEMU_ROOT/guest/kmod/$m"/*; do cmp -s "$f" "$bdir/$m/$(basename "$f")" || cp "$f" "$bdir/$m/"; done
    make -s -C "$KBUILD_DIR" M="$bdir/$m" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- \
        RACKEMU_ROOT="$RACKEMU_ROOT" modules > "$bdir/$m.log" 2>&1 ||
        { cat "$bdir/$m.log" >&2; die "building kernel module $m failed (log: $bdir/$m.log)"; }
    if grep -q "warning:" "$bdir/$m.log"; then cat "$bdir/$m.log" >&2; die "kernel module $m built with warnings"; fi
    cmp -s "$bdir/$m/$m.ko" "$out/$m.ko" || cp "$bdir/$m/$m.ko" "$out/$m.ko"
    echo "$m.ko" >> "$out/load-order.tmp"
done
mv "$out/load-order.tmp" "$out/load-order"

# Modules that are packed into the image but not loaded at boot (tests and examples insmod them
# from /lib/modules/extra/); they may use the symbols of the boot modules above.
mkdir -p "$out/extra"
for m in mbox_echo; do
    mkdir -p "$bdir/$m"
    for f in "$RACKEMU_ROOT/guest/kmod/$m"/*; do cmp -s "$f" "$bdir/$m/$(basename "$f")" || cp "$f" "$bdir/$m/"; done
    make -s -C "$KBUILD_DIR" M="$bdir/$m" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- \
        KBUILD_EXTRA_SYMBOLS="$bdir/unimem/Module.symvers" RACKEMU_ROOT="$RACKEMU_ROOT" modules > "$bdir/$m.log" 2>&1 ||
        { cat "$bdir/$m.log" >&2; die "building kernel module $m failed (log: $bdir/$m.log)"; }
    if grep -q "warning:" "$bdir/$m.log"; then cat "$bdir/$m.log" >&2; die "kernel module $m built with warnings"; fi
    cmp -s "$bdir/$m/$m.ko" "$out/extra/$m.ko" || cp "$bdir/$m/$m.ko" "$out/extra/$m.ko"
done
