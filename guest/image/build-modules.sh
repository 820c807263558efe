#!/usr/bin/env bash
# Cross-build rackemu's kernel modules for the guest kernel (headers from fetch-guest.sh) into
# $RACKEMU_BUILD/guest/modules/, with the load order the image's /init follows.
source "$(dirname "$0")/../../platform/setup/lib.sh"
env_file=$RACKEMU_BUILD/guest/guest.env
[ -f "$env_file" ] || bash "$RACKEMU_ROOT/platform/setup/fetch-guest.sh"
source "$env_file"
out=$RACKEMU_BUILD/guest/modules
bdir=$RACKEMU_BUILD/guest/kmod-build
mkdir -p "$out/extra" "$bdir"

# rackemu's modules are discovered: every guest/<family>/kmod/<m>/ with a Kbuild building <m>.ko
# (guest/unimem/kmod/xilinx/, below, is Linux's own code and built apart). Adding a module is
# adding its directory; a module's name is unique across the families. A module that uses
# another's symbols is built after it (tried again once the others are built). Where it goes
# follows from what it is:
#   - a driver, i.e. a module with an OF or PCI device table (modinfo alias of:... or pci:...),
#     binds to the device-tree node or PCI function of its device and is loaded at boot: $out/<m>.ko, in load order
#     (dependencies first, then by name) in $out/load-order;
#   - any other module (examples, test helpers, modules tests insmod with parameters) is packed
#     but not loaded at boot: $out/extra/<m>.ko (tests insmod them from /lib/modules/extra/).
mods=()
declare -A moddir=()   # module name -> its source directory
for d in "$RACKEMU_ROOT"/guest/*/kmod/*/; do
    d=${d%/}
    m=$(basename "$d")
    [ "$m" != xilinx ] && [ -f "$d/Kbuild" ] && grep -q "^obj-m *:= *$m\.o" "$d/Kbuild" || continue
    [ -z "${moddir[$m]:-}" ] || die "two kernel modules named $m: ${moddir[$m]#"$RACKEMU_ROOT"/} and ${d#"$RACKEMU_ROOT"/}"
    moddir[$m]=$d
    mods+=("$m")
done
[ ${#mods[@]} -gt 0 ] || die "no kernel modules found under guest/*/kmod"
build_mod() { # build_mod M: 0 built, 2 needs symbols of a module not built yet; dies on an error
    local m=$1 syms=() b
    for b in "${built[@]}"; do syms+=("$bdir/$b/Module.symvers"); done
    # Build out of tree in a copy, so the checkout stays clean.
    mkdir -p "$bdir/$m"
    for f in "${moddir[$m]}"/*; do cmp -s "$f" "$bdir/$m/$(basename "$f")" || cp "$f" "$bdir/$m/"; done
    make -s -C "$KBUILD_DIR" M="$bdir/$m" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- \
        KBUILD_EXTRA_SYMBOLS="${syms[*]}" RACKEMU_ROOT="$RACKEMU_ROOT" modules > "$bdir/$m.log" 2>&1 || {
        # modpost refuses symbols no module built so far exports: try again after the others
        if grep -q "modpost: .* undefined!" "$bdir/$m.log"; then return 2; fi
        cat "$bdir/$m.log" >&2; die "building kernel module $m failed (log: $bdir/$m.log)"
    }
    if grep -q "warning:" "$bdir/$m.log"; then cat "$bdir/$m.log" >&2; die "kernel module $m built with warnings"; fi
    return 0
}
built=()
pending=("${mods[@]}")
while [ ${#pending[@]} -gt 0 ]; do
    left=()
    for m in "${pending[@]}"; do
        if build_mod "$m"; then built+=("$m"); else left+=("$m"); fi
    done
    if [ ${#left[@]} -eq ${#pending[@]} ]; then
        cat "$bdir/${left[0]}.log" >&2
        die "kernel modules ${left[*]} need symbols no module of guest/*/kmod exports (logs: $bdir/*.log)"
    fi
    pending=("${left[@]}")
done
# boot drivers in load order: depth in the dependency graph among them first, then by name
depth() { # depth M: 0 for a module without rackemu dependencies
    local d n=0 x
    for d in $(modinfo -F depends "$bdir/$1/$1.ko" | tr ',' ' '); do
        case " ${mods[*]} " in *" $d "*) x=$(( $(depth "$d") + 1 )); [ $x -gt $n ] && n=$x ;; esac
    done
    echo $n
}
order=()
for m in "${built[@]}"; do
    ko=$bdir/$m/$m.ko
    if modinfo -F alias "$ko" | grep -q -e '^of:' -e '^pci:'; then
        order+=("$(depth "$m") $m")
        rm -f "$out/extra/$m.ko"
        cmp -s "$ko" "$out/$m.ko" || cp "$ko" "$out/$m.ko"
    else
        rm -f "$out/$m.ko"
        cmp -s "$ko" "$out/extra/$m.ko" || cp "$ko" "$out/extra/$m.ko"
    fi
done
printf '%s\n' "${order[@]}" | sort -k1,1n -k2 | awk 'NF {print $2 ".ko"}' > "$out/load-order.tmp"
mv "$out/load-order.tmp" "$out/load-order"

# Linux's own xilinx_dma and dmatest drivers, unmodified, from the guest kernel's exact Debian
# source version (platform/setup/fetch-kernel-src.sh): Debian's arm64 kernel does not build them.
# They go to extra/ too (the cDMA tests insmod them with parameters). Warnings in these upstream
# files are logged, not fatal; an unresolved symbol or a build error is.
ksrc=$(bash "$RACKEMU_ROOT/platform/setup/fetch-kernel-src.sh")
m=xilinx
xb=$bdir/$m      # laid out as the kernel's drivers/dma/
mkdir -p "$xb/xilinx"
sync_file() { cmp -s "$1" "$2" || cp "$1" "$2"; }
sync_file "$RACKEMU_ROOT/guest/unimem/kmod/xilinx/Kbuild" "$xb/Kbuild"
sync_file "$ksrc/drivers/dma/xilinx/xilinx_dma.c" "$xb/xilinx/xilinx_dma.c"
sync_file "$ksrc/drivers/dma/dmatest.c" "$xb/dmatest.c"
sync_file "$ksrc/drivers/dma/dmaengine.h" "$xb/dmaengine.h"
make -s -C "$KBUILD_DIR" M="$xb" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- modules > "$bdir/$m.log" 2>&1 ||
    { cat "$bdir/$m.log" >&2; die "building the upstream xilinx_dma/dmatest modules failed (log: $bdir/$m.log)"; }
if grep -q "warning:" "$bdir/$m.log"; then
    say "warnings in the unmodified upstream xilinx_dma/dmatest sources (tolerated; log: $bdir/$m.log):"
    grep "warning:" "$bdir/$m.log" >&2
fi
# Every undefined symbol must be exported by the guest kernel or one of its modules; symbols
# from a module (not vmlinux) make that module a load-time dependency, handled below.
for ko in "$xb/xilinx/xilinx_dma.ko" "$xb/dmatest.ko"; do
    missing=$(aarch64-linux-gnu-nm -u "$ko" | awk '{print $2}' | sort -u |
        comm -23 - <(awk '{print $2}' "$KBUILD_DIR/Module.symvers" | sort -u))
    [ -z "$missing" ] || die "$(basename "$ko") needs symbols the guest kernel $KVER does not export: $missing"
    sync_file "$ko" "$out/extra/$(basename "$ko")"
done
# In-kernel modules they need at load time (modinfo depends), with their own dependencies, in
# load order: listed in extra/sys-deps (paths under $MODULES_DIR) for the image builder.
sys_deps=()
add_deps() {   # add_deps KO: append KO's dependencies (depth first) to sys_deps
    local d p
    for d in $(modinfo -F depends "$1" | tr ',' ' '); do
        p=$(awk -F: -v n="$d" '{b=$1; sub(/.*\//,"",b); sub(/\.ko.*$/,"",b); gsub(/-/,"_",b); x=n; gsub(/-/,"_",x); if (b==x) {print $1; exit}}' "$MODULES_DIR/modules.dep")
        [ -n "$p" ] || die "$(basename "$1") depends on module $d, which is not in $MODULES_DIR/modules.dep"
        case " ${sys_deps[*]} " in *" $p "*) continue ;; esac
        add_deps "$MODULES_DIR/$p"
        sys_deps+=("$p")
    done
}
for ko in "$out/extra/xilinx_dma.ko" "$out/extra/dmatest.ko"; do add_deps "$ko"; done
printf '%s\n' "${sys_deps[@]}" | sed '/^$/d' > "$out/extra/sys-deps.tmp"
sync_file "$out/extra/sys-deps.tmp" "$out/extra/sys-deps"; rm -f "$out/extra/sys-deps.tmp"
