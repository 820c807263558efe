#!/usr/bin/env bash
# Everything rackemu needs on a fresh Debian 12 machine, idempotent and fast when nothing
# changed:
#   1. host packages (platform/setup/packages.txt) through apt, as root or with sudo
#   2. the project's own build: device cores, fabric bridge, host tools, unit tests (meson)
#   3. qemu-system-aarch64 7.2 with rackemu's devices (platform/setup/build-qemu.sh)
#   4. the guest image: Debian arm64 kernel, modules, agent, initramfs (guest/build.sh)
source "$(dirname "$0")/lib.sh"

step() { say "[$1/4] $2"; }
t0=$(date +%s)

step 1 "host packages"
mapfile -t pkgs < <(grep -v '^\s*#' "$RACKEMU_ROOT/platform/setup/packages.txt" | awk 'NF{print $1}')
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing: ${missing[*]}"
    if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
        die "missing packages: ${missing[*]}. Run as root, install sudo, or: apt-get install ${missing[*]}"
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null ||
        die "apt-get update failed (network or mirror problem)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null ||
        die "apt-get install failed for: ${missing[*]}"
fi

step 2 "rackemu host build (meson: cores, bridge, tools, unit tests; firmware)"
host=$RACKEMU_BUILD/host
export CCACHE_DIR=${CCACHE_DIR:-$RACKEMU_CACHE/ccache}
if [ ! -f "$host/build.ninja" ]; then
    meson setup "$host" "$RACKEMU_ROOT" >"$RACKEMU_BUILD/meson-setup.log" 2>&1 ||
        { tail -n 20 "$RACKEMU_BUILD/meson-setup.log" >&2; die "meson setup failed (log: $RACKEMU_BUILD/meson-setup.log)"; }
fi
ninja -C "$host" >"$RACKEMU_BUILD/ninja-host.log" 2>&1 ||
    { grep -E 'error|FAILED' -A3 "$RACKEMU_BUILD/ninja-host.log" | head -n 40 >&2; die "host build failed (log: $RACKEMU_BUILD/ninja-host.log)"; }
ln -sfn host/rackemu-bridge "$RACKEMU_BUILD/rackemu-bridge"
bash "$RACKEMU_ROOT/firmware/build.sh"

step 3 "QEMU with rackemu's machine and devices"
bash "$RACKEMU_ROOT/platform/setup/build-qemu.sh"

step 4 "guest image (kernel, modules, agent, initramfs)"
if [ -f "$RACKEMU_ROOT/guest/build.sh" ]; then
    bash "$RACKEMU_ROOT/guest/build.sh"
else
    die "guest/build.sh is missing from this checkout"
fi
say "set-up complete in $(( $(date +%s) - t0 ))s"
