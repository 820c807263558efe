#!/usr/bin/env bash
# Fetch the guest's parts from Debian bookworm (arm64), without touching the system's apt
# configuration: the kernel image and its modules, the headers + kbuild tree to cross-build
# out-of-tree modules, and a static busybox. Idempotent; writes $RACKEMU_BUILD/guest/guest.env.
source "$(dirname "$0")/lib.sh"

apt_dir=$RACKEMU_CACHE/guest-apt
private_apt_init "$apt_dir/arm64" deb arm64
private_apt_init "$apt_dir/amd64" deb amd64
arm=$(private_apt_opts "$apt_dir/arm64" arm64)
amd=$(private_apt_opts "$apt_dir/amd64" amd64)

# shellcheck disable=SC2086
abi_pkg=$(apt-cache $arm depends linux-image-arm64 2>/dev/null | awk '/Depends: linux-image-6/{print $2; exit}')
[ -n "$abi_pkg" ] || die "cannot resolve the kernel ABI from linux-image-arm64's dependencies"
KVER=${abi_pkg#linux-image-}
abi=${KVER%-arm64}
dir=$RACKEMU_CACHE/guest/$KVER
env_file=$RACKEMU_BUILD/guest/guest.env
mkdir -p "$dir/debs" "$RACKEMU_BUILD/guest"

if [ ! -f "$dir/ready" ]; then
    say "fetching guest kernel $KVER, headers and busybox (Debian arm64)"
    # shellcheck disable=SC2086
    (cd "$dir/debs" && apt-get -q $arm download "linux-image-$KVER" "linux-headers-$KVER" \
        "linux-headers-$abi-common" busybox-static >&2) || die "apt-get download (arm64) failed"
    # linux-kbuild-6.1 comes from the same source package: use the headers' version.
    kbuild_ver=$(dpkg-deb -f "$dir"/debs/linux-headers-"$KVER"_*.deb Version)
    # shellcheck disable=SC2086
    (cd "$dir/debs" && apt-get -q $amd download "linux-kbuild-6.1=$kbuild_ver" >&2) ||
        die "apt-get download linux-kbuild-6.1=$kbuild_ver (amd64) failed"
    rm -rf "$dir/root" && mkdir -p "$dir/root"
    for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/root"; done
    # The arm64 headers' Makefile includes the common tree by its absolute installed path.
    hdr=$dir/root/usr/src/linux-headers-$KVER
    sed -i "s|/usr/src/linux-headers-$abi-common|$dir/root/usr/src/linux-headers-$abi-common|g" "$hdr/Makefile"
    vmlinuz=$(ls "$dir"/root/boot/vmlinuz-"$KVER")
    if gzip -t "$vmlinuz" 2>/dev/null; then gzip -dc "$vmlinuz" > "$dir/Image"; else cp "$vmlinuz" "$dir/Image"; fi
    touch "$dir/ready"
fi
cat > "$env_file.tmp" <<ENV
# written by platform/setup/fetch-guest.sh
KVER=$KVER
KERNEL_IMAGE=$dir/Image
KBUILD_DIR=$dir/root/usr/src/linux-headers-$KVER
MODULES_DIR=$dir/root/lib/modules/$KVER
BUSYBOX=$dir/root/bin/busybox
ENV
mv "$env_file.tmp" "$env_file"
say "guest kernel $KVER ready ($env_file)"
