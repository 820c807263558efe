#!/usr/bin/env bash
# Fetch Debian bookworm's QEMU 7.2 source package into the cache and unpack it with Debian's
# patches. Prints the path of the unpacked tree. Set RACKEMU_QEMU_SRC to use an existing
# QEMU 7.2 tree instead (it is used as is; rackemu's overlay is applied to it).
source "$(dirname "$0")/lib.sh"

check_version() {
    local tree=$1 v
    [ -f "$tree/VERSION" ] || die "$tree does not look like a QEMU source tree (no VERSION file)"
    v=$(cat "$tree/VERSION")
    case "$v" in
        7.2.*) ;;
        *) die "QEMU source at $tree is version $v; rackemu's machine and overlay need QEMU 7.2.x" ;;
    esac
    echo "$v"
}

if [ -n "${RACKEMU_QEMU_SRC:-}" ]; then
    check_version "$RACKEMU_QEMU_SRC" >/dev/null
    echo "$RACKEMU_QEMU_SRC"
    exit 0
fi

dir=$RACKEMU_CACHE/qemu-source
stamp=$dir/unpacked.stamp
if [ -f "$stamp" ] && [ -d "$(cat "$stamp")" ]; then
    cat "$stamp"
    exit 0
fi
command -v dpkg-source >/dev/null || die "dpkg-source not found: install dpkg-dev"
mkdir -p "$dir"
private_apt_init "$dir/apt" deb-src amd64
say "downloading Debian's qemu source package (bookworm)"
# shellcheck disable=SC2046
(cd "$dir" && rm -rf dl && mkdir dl && cd dl &&
    apt-get -q $(private_apt_opts "$dir/apt" amd64) source --download-only qemu >&2) ||
    die "apt-get source qemu failed; check the network or set RACKEMU_QEMU_SRC to a QEMU 7.2 tree"
dsc=$(ls "$dir"/dl/qemu_*.dsc | head -n1)
debver=$(sed -n 's/^Version: //p' "$dsc")
say "unpacking qemu $debver with Debian's patches"
rm -rf "$dir/tree"
(cd "$dir/dl" && dpkg-source --no-check -x "$dsc" "$dir/tree" >&2) || die "dpkg-source failed on $dsc"
v=$(check_version "$dir/tree")
echo "$debver" > "$dir/debian-version"
say "QEMU source: upstream $v, Debian package $debver"
echo "$dir/tree" > "$stamp"
echo "$dir/tree"
