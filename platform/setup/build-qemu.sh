#!/usr/bin/env bash
# Build qemu-system-aarch64 with rackemu's devices and machine compiled in.
#
#  1. fetch-qemu.sh provides a QEMU 7.2 tree (Debian's source package, or RACKEMU_QEMU_SRC).
#  2. The overlay is applied: hw/rackemu/{meson.build,Kconfig,trace-events} link to
#     platform/qemu/overlay, hw/rackemu/src links to this checkout, qemu-trace-hook.patch lists
#     hw/rackemu among QEMU's trace-event directories, and platform/qemu/qemu-hook.patch adds the
#     subdir()/source lines to QEMU's hw/meson.build and hw/Kconfig; qemu-pmem-hook.patch routes
#     DC CVAC/DC CIVAC like DC CVAP and gives memory_region_writeback a hook for rackemu-pmem
#     (docs/pmem.md "CPU persist points"; inert while no rackemu-pmem device sets it).
#  3. QEMU is configured once for aarch64-softmmu only, with TCG plugins, and built with ninja
#     and ccache.
#     The build directory is kept in $RACKEMU_CACHE/qemu-build (shared by every checkout on
#     the machine, so a fresh clone does not pay the 7-minute cold build); the binary is
#     copied to $RACKEMU_BUILD/qemu/qemu-system-aarch64. A second run rebuilds nothing.
source "$(dirname "$0")/lib.sh"

src=$(bash "$RACKEMU_ROOT/platform/setup/fetch-qemu.sh")
bdir=${RACKEMU_QEMU_BUILD_DIR:-$RACKEMU_CACHE/qemu-build}
out=$RACKEMU_BUILD/qemu
mkdir -p "$bdir" "$out"

exec 9>"$RACKEMU_CACHE/qemu-build.lock"
flock -w 3600 9 || die "another rackemu QEMU build holds $RACKEMU_CACHE/qemu-build.lock"

# Overlay (idempotent; re-pointed at this checkout every time).
mkdir -p "$src/hw/rackemu"
ln -sfn "$RACKEMU_ROOT/platform/qemu/overlay/meson.build" "$src/hw/rackemu/meson.build"
ln -sfn "$RACKEMU_ROOT/platform/qemu/overlay/Kconfig" "$src/hw/rackemu/Kconfig"
ln -sfn "$RACKEMU_ROOT/platform/qemu/overlay/trace-events" "$src/hw/rackemu/trace-events"
ln -sfn "$RACKEMU_ROOT" "$src/hw/rackemu/src"
for hook in qemu-hook.patch qemu-trace-hook.patch qemu-pmem-hook.patch; do
    if patch -d "$src" -p1 -R --dry-run -s -f < "$RACKEMU_ROOT/platform/qemu/$hook" >/dev/null 2>&1; then
        : # already applied
    else
        patch -d "$src" -p1 -s -f < "$RACKEMU_ROOT/platform/qemu/$hook" ||
            die "could not apply platform/qemu/$hook to $src (is it a pristine QEMU 7.2 tree?)"
    fi
done

export CCACHE_DIR=${CCACHE_DIR:-$RACKEMU_CACHE/ccache}
export CCACHE_NOHASHDIR=1 CCACHE_BASEDIR=$src
ccache_opt=()
if command -v ccache >/dev/null; then
    ccache -M 5G >/dev/null 2>&1 || true
    ccache_opt=(--cc="ccache gcc" --cxx="ccache g++")
else
    say "ccache not found: QEMU rebuilds will be slower (install ccache)"
fi

# --enable-plugins: QEMU loads TCG plugins (-plugin), for the instruction-count plugin below
conf_args=(--target-list=aarch64-softmmu --without-default-features --enable-fdt=system
           --enable-plugins --disable-docs --disable-werror "${ccache_opt[@]}")
conf_key=$(printf '%s\n' "$src" "${conf_args[@]}" | sha256sum | cut -c1-16)
if [ ! -f "$bdir/build.ninja" ] || [ "$(cat "$bdir/.rackemu-conf" 2>/dev/null)" != "$conf_key" ]; then
    say "configuring QEMU ($(cat "$src/VERSION")) in $bdir"
    rm -rf "$bdir" && mkdir -p "$bdir"
    (cd "$bdir" && "$src/configure" "${conf_args[@]}" > configure.log 2>&1) ||
        { tail -n 30 "$bdir/configure.log" >&2; die "QEMU configure failed (log: $bdir/configure.log)"; }
    echo "$conf_key" > "$bdir/.rackemu-conf"
fi

# The build tree is shared by every checkout on the machine, and ninja decides by mtimes: after
# another checkout built, ours may hold different files with older mtimes. So when the checkout
# changes, drop rackemu's objects - the overlay's libraries (hw/rackemu/), the glue and machine
# objects in QEMU's target library (hw_rackemu_*) - and the trace files generated from the
# overlay's trace-events (ccache makes their rebuild cheap when nothing differs), and make meson
# re-read the overlay (its file list may differ). QEMU's own objects do not depend on the
# checkout and stay.
if [ "$(cat "$bdir/.rackemu-src" 2>/dev/null)" != "$RACKEMU_ROOT" ]; then
    find "$bdir" \( -path "$bdir/hw/rackemu/*" -o -name 'hw_rackemu_*' -o -name '*trace-hw_rackemu*' \) \
        \( -name '*.o' -o -name '*.a' \) -delete
    rm -f "$bdir"/trace/trace-hw_rackemu.[ch]
    touch "$RACKEMU_ROOT/platform/qemu/overlay/meson.build"
    echo "$RACKEMU_ROOT" > "$bdir/.rackemu-src"
fi
# The generated trace files follow the trace-events' content, not its mtime: a checkout's file can
# be older than a header generated from another checkout's (ninja would then keep the stale one).
trace_key=$(sha256sum < "$RACKEMU_ROOT/platform/qemu/overlay/trace-events" | cut -c1-16)
if [ "$(cat "$bdir/.rackemu-trace" 2>/dev/null)" != "$trace_key" ]; then
    rm -f "$bdir"/trace/trace-hw_rackemu.[ch]
    find "$bdir" -name '*trace-hw_rackemu*.o' -delete
    echo "$trace_key" > "$bdir/.rackemu-trace"
fi

if ninja -C "$bdir" -n qemu-system-aarch64 2>/dev/null | grep -q '^\['; then
    say "building qemu-system-aarch64 (cold build takes ~7 min on 2 cores; log: $bdir/ninja.log.txt)"
fi
start=$(date +%s)
if ! ninja -C "$bdir" qemu-system-aarch64 > "$bdir/ninja.log.txt" 2>&1; then
    grep -E 'error|Error' -m 20 "$bdir/ninja.log.txt" >&2 || tail -n 30 "$bdir/ninja.log.txt" >&2
    die "QEMU build failed (full log: $bdir/ninja.log.txt)"
fi
secs=$(( $(date +%s) - start ))
if ! cmp -s "$bdir/qemu-system-aarch64" "$out/qemu-system-aarch64"; then
    cp -f "$bdir/qemu-system-aarch64" "$out/qemu-system-aarch64.tmp"
    mv -f "$out/qemu-system-aarch64.tmp" "$out/qemu-system-aarch64"
    say "qemu-system-aarch64 ready (${secs}s): $out/qemu-system-aarch64"
fi
echo "$(cat "$src/VERSION") $(cat "$RACKEMU_CACHE/qemu-source/debian-version" 2>/dev/null || echo custom-tree)" > "$out/VERSION"

# The instruction-count plugin (docs/insn-count.md): a shared object built against this tree's
# plugin API header, loaded by a node's QEMU only when the cluster asks (insn_count). Rebuilt when
# its source, the marks' header or the API header is newer than the .so.
plugin_src=$RACKEMU_ROOT/platform/qemu/plugins/rk_insn.c
plugin=$out/rk_insn.so
if [ ! -f "$plugin" ] || [ -n "$(find "$plugin_src" "$RACKEMU_ROOT/hw/include/rackemu/insn_mark.h" \
        "$src/include/qemu/qemu-plugin.h" "$0" -newer "$plugin" | head -n1)" ]; then
    gcc -O2 -g -fPIC -shared -Wall -Wextra -Wno-unused-parameter -Werror -I"$src/include/qemu" \
        -I"$RACKEMU_ROOT/hw/include" -o "$plugin.tmp" "$plugin_src" -lpthread ||
        die "building the instruction-count plugin ($plugin_src) failed"
    mv -f "$plugin.tmp" "$plugin"
    say "TCG plugin ready: $plugin"
fi
