#!/usr/bin/env bash
# Fetch the few files of Debian's kernel source that rackemu builds out of tree for the guest
# kernel (drivers the Debian arm64 image does not build: xilinx_dma, dmatest), from the source of
# EXACTLY the guest kernel's package version, unmodified. Prints the source root
# ($RACKEMU_CACHE/kernel-src/<version>/linux) on stdout; files keep their kernel-tree paths.
#
# Source: Debian's linux-source-6.1 binary package (arch all) of that version, fetched through
# the private arm64 apt state of fetch-guest.sh (no change to the system's apt configuration).
# Only the listed files, and the quoted ("../x.h") headers they include, are pulled out of its
# inner /usr/src/linux-source-6.1.tar.xz; the .deb (~150 MB) is deleted afterwards. If that
# package version is not on the mirror, fall back to the `linux` source package's orig tarball
# (upstream files, Debian's patches NOT applied; a note says whether any patch touches them).
# Cached: a second run only checks the `ready` stamp.
source "$(dirname "$0")/lib.sh"

# Kernel-tree files to extract (their quoted includes are added automatically).
KSRC_FILES=(drivers/dma/xilinx/xilinx_dma.c drivers/dma/dmatest.c drivers/dma/dmaengine.h
            scripts/checkpatch.pl scripts/spelling.txt scripts/const_structs.checkpatch)

env_file=$RACKEMU_BUILD/guest/guest.env
[ -f "$env_file" ] || bash "$RACKEMU_ROOT/platform/setup/fetch-guest.sh"
# shellcheck disable=SC1090
source "$env_file"
kdir=$RACKEMU_CACHE/guest/$KVER
hdr_deb=$(ls "$kdir"/debs/linux-headers-"$KVER"_*.deb 2>/dev/null | head -n1)
[ -n "$hdr_deb" ] || die "no linux-headers-$KVER .deb in $kdir/debs: run platform/setup/fetch-guest.sh"
VER=$(dpkg-deb -f "$hdr_deb" Version)          # e.g. 6.1.192-2
UPSTREAM=${VER%-*}                              # e.g. 6.1.192
SERIES=$(echo "$UPSTREAM" | cut -d. -f1,2)      # e.g. 6.1
top=$RACKEMU_CACHE/kernel-src
dir=$top/$VER
src=$dir/linux

# (a cache from before checkpatch.pl was extracted is fetched again)
if [ -f "$dir/ready" ] && [ -f "$src/scripts/checkpatch.pl" ]; then
    echo "$src"
    exit 0
fi
mkdir -p "$dir"
rm -rf "$src" "$dir/dl" && mkdir -p "$src" "$dir/dl"

# quoted_includes FILE...: the tree paths of the "..." headers the files include (resolved
# relative to each file), that are not yet extracted.
quoted_includes() {
    local f inc p
    for f in "$@"; do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src/$f" |
        while read -r inc; do
            p=$(realpath -m --relative-to="$src" "$src/$(dirname "$f")/$inc")
            [ -f "$src/$p" ] || echo "$p"
        done
    done | sort -u
}

# extract_closure STREAM_CMD PREFIX: run STREAM_CMD (writes a .tar.xz to stdout), extract
# PREFIX/<file> for every wanted file into $src, then repeat for headers found missing.
extract_closure() {
    local stream=$1 prefix=$2 want=("${KSRC_FILES[@]}") pass=1 members tmp
    while [ ${#want[@]} -gt 0 ]; do
        [ $pass -le 4 ] || die "kernel source: include closure did not settle (missing: ${want[*]})"
        say "extracting ${#want[@]} file(s) from the kernel source tarball (pass $pass; the whole tarball is decompressed, 10-30 s)"
        members=(); for f in "${want[@]}"; do members+=("$prefix/$f"); done
        tmp=$dir/dl/x; rm -rf "$tmp"; mkdir -p "$tmp"
        eval "$stream" | tar -xJ -C "$tmp" "${members[@]}" ||
            die "kernel source: extracting ${want[*]} failed (not in the tarball under $prefix/?)"
        (cd "$tmp/$prefix" && cp --parents "${want[@]}" "$src/")
        rm -rf "$tmp"
        # shellcheck disable=SC2046  # kernel tree paths have no spaces
        mapfile -t want < <(cd "$src" && quoted_includes $(find . -type f \( -name '*.c' -o -name '*.h' \) -printf '%P\n'))
        pass=$((pass + 1))
    done
}

origin=
apt_arm=$RACKEMU_CACHE/guest-apt/arm64
private_apt_init "$apt_arm" deb arm64
arm=$(private_apt_opts "$apt_arm" arm64)
say "downloading linux-source-$SERIES=$VER (Debian, ~150 MB) for the guest kernel $KVER"
# shellcheck disable=SC2086
if (cd "$dir/dl" && apt-get -q $arm download "linux-source-$SERIES=$VER" >&2); then
    deb=$(ls "$dir"/dl/linux-source-"$SERIES"_*.deb | head -n1)
    got=$(dpkg-deb -f "$deb" Version)
    [ "$got" = "$VER" ] || die "downloaded linux-source-$SERIES $got, expected $VER"
    extract_closure "dpkg-deb --fsys-tarfile '$deb' | tar -xO ./usr/src/linux-source-$SERIES.tar.xz" \
        "linux-source-$SERIES"
    origin="Debian binary package linux-source-$SERIES $VER ($(basename "$deb"), sha256 $(sha256sum "$deb" | cut -c1-64)), inner /usr/src/linux-source-$SERIES.tar.xz; Debian's patches are applied in it"
else
    say "linux-source-$SERIES=$VER is not on the mirror; falling back to the 'linux' source package $VER"
    apt_src=$top/apt-src
    private_apt_init "$apt_src" deb-src amd64
    # shellcheck disable=SC2046
    (cd "$dir/dl" && apt-get -q $(private_apt_opts "$apt_src" amd64) source --download-only "linux=$VER" >&2) ||
        die "neither linux-source-$SERIES=$VER nor the source package linux=$VER is available from the mirror; the guest kernel's exact source cannot be fetched (is the guest kernel newer than the mirror's lists? rerun after 'rm -rf $apt_arm/lists $apt_src/lists')"
    orig=$(ls "$dir"/dl/linux_"$UPSTREAM".orig.tar.xz 2>/dev/null | head -n1)
    [ -n "$orig" ] || die "linux source package: no linux_$UPSTREAM.orig.tar.xz in $dir/dl"
    prefix=$( (tar -tJf "$orig" || true) | head -n1 | cut -d/ -f1)
    [ -n "$prefix" ] || die "cannot list $orig"
    extract_closure "cat '$orig'" "$prefix"
    patched=$(tar -xJOf "$dir"/dl/linux_"$VER".debian.tar.xz --wildcards 'debian/patches/*' 2>/dev/null |
        grep -E '^\+\+\+ ' | grep -F -f <(cd "$src" && find . -type f -printf '%P\n') | sort -u || true)
    origin="Debian source package linux $VER, upstream orig tarball $(basename "$orig") (sha256 $(sha256sum "$orig" | cut -c1-64)); Debian's patches NOT applied; patches touching these files: ${patched:-none}"
fi
rm -rf "$dir/dl"
{
    echo "guest kernel: $KVER (package version $VER)"
    echo "origin: $origin"
    echo "fetched: $(date -u +%Y-%m-%dT%H:%M:%SZ) by platform/setup/fetch-kernel-src.sh"
    echo "note: the downloaded package/tarball was deleted after extraction (~150 MB); delete this"
    echo "      directory to fetch again. Files (sha256):"
    (cd "$src" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs sha256sum | sed 's/^/  /')
} > "$dir/SOURCE"
touch "$dir/ready"
say "kernel source files for $VER ready in $src ($(du -sh "$dir" | cut -f1))"
echo "$src"
