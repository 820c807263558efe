#!/usr/bin/env bash
# Build the static aarch64 user programs into $RACKEMU_BUILD/guest/bin/, discovered. Their sources
# are in the folders of user code: guest/common/, each device family's guest/<family>/user/ and
# guest/workloads/ with guest/workloads/swordbox/ (a new family's user/ is found like the others). In
# those folders:
#   - every lib<name>.c is a guest library; they are linked as one archive, so a program gets
#     the ones it uses;
#   - every other <name>.c with a main() is a program (adding a tool is adding its file), linked
#     with the guest libraries, -lpthread and -lm. It is called <name> with '_' turned into '-'
#     (unimem_check.c: unimem-check), except *_test programs, which keep their file's name
#     (unim_dma_test, as ExaNoDe D3.6 sec. 3.4 names it). What each one does: the comment at the top
#     of its file;
#   - headers are included by their name alone (-I every folder of user code), so a file name is
#     unique among them.
# Then the libraries for programs built against rackemu's APIs: libunim_dma.a + unim_dma.h (seed
# 004 sec. 3.4), libgsas.a + atomic.h (sec. 2.3), librmc.a + librmc.h (the RMC,
# docs/rmc-driver.md), libshmem.a + shmem.h (docs/shmem.md) and the programs written against
# shmem.h alone (guest/workloads/shmem/tests/).
source "$(dirname "$0")/../../platform/setup/lib.sh"
out=$RACKEMU_BUILD/guest/bin
g=$RACKEMU_ROOT/guest
obj=$RACKEMU_BUILD/guest/user-obj
mkdir -p "$out" "$obj"
rel() { echo "${1#"$RACKEMU_ROOT"/}"; }
srcdirs=("$g/common")
for d in "$g"/*/user/; do srcdirs+=("${d%/}"); done
srcdirs+=("$g/workloads" "$g/workloads/swordbox")
unimem=$g/unimem/user sonuma=$g/sonuma/user rnic=$g/rnic/user shm=$g/workloads/shmem
CC=aarch64-linux-gnu-gcc
CFLAGS=(-O2 -Wall -Wextra -Werror -Wno-format-zero-length -I"$RACKEMU_ROOT/hw/include" -I"$g/include")
for d in "${srcdirs[@]}"; do CFLAGS+=(-I"$d"); done
# one header per name: a second one would be shadowed by the first folder on the -I list
dup=$(for d in "${srcdirs[@]}"; do find "$d" -maxdepth 1 -name '*.h' -printf '%f\n'; done | sort | uniq -d)
[ -z "$dup" ] || die "headers of the same name in two folders of guest user code: $dup"
# stale: TARGET is missing or older than a source or header of the guest tools or their headers
stale() {
    [ ! -f "$1" ] || [ -n "$(find "${srcdirs[@]}" "$RACKEMU_ROOT/hw/include" "$g/include" "$0" -newer "$1" \
        \( -name '*.[ch]' -o -name build-programs.sh \) | head -n1)" ]
}

libs=()
for d in "${srcdirs[@]}"; do
    for c in "$d"/lib*.c; do [ -f "$c" ] && libs+=("$c"); done
done
guestlib=$obj/libguest.a
if stale "$guestlib"; then
    rm -f "$guestlib" "$obj"/lib*.o
    for c in "${libs[@]}"; do
        $CC "${CFLAGS[@]}" -c -o "$obj/$(basename "$c" .c).o" "$c" || die "building $(rel "$c") failed"
    done
    aarch64-linux-gnu-ar rcs "$guestlib" "$obj"/lib*.o || die "building the guest tools' library failed"
fi
for d in "${srcdirs[@]}"; do
    for c in "$d"/*.c; do
        [ -f "$c" ] || continue
        stem=$(basename "$c" .c)
        case $stem in lib*) continue ;; esac
        grep -qE '^int main\(' "$c" || continue
        case $stem in *_test) name=$stem ;; *) name=${stem//_/-} ;; esac
        if stale "$out/$name"; then
            $CC -static "${CFLAGS[@]}" -o "$out/$name.tmp" "$c" "$guestlib" -lpthread -lm && mv "$out/$name.tmp" "$out/$name" ||
                die "building $(rel "$c") ($name) failed"
        fi
    done
done
# the library for programs written against the unim_dma API (link with -lunim_dma -lpthread)
lib=$RACKEMU_BUILD/guest/lib
mkdir -p "$lib"
if [ ! -f "$lib/libunim_dma.a" ] || [ "$unimem/libunim_dma.c" -nt "$lib/libunim_dma.a" ] || [ "$unimem/unim_dma.h" -nt "$lib/libunim_dma.a" ]; then
    aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$g/include" \
        -c -o "$lib/libunim_dma.o" "$unimem/libunim_dma.c" && aarch64-linux-gnu-ar rcs "$lib/libunim_dma.a" "$lib/libunim_dma.o" &&
        cp "$unimem/unim_dma.h" "$lib/" || die "building libunim_dma.a failed"
fi
# the GSAS library for programs written against atomic.h (link with -lgsas -lpthread; libgsas.a
# carries libunimem too)
if [ ! -f "$lib/libgsas.a" ] || [ -n "$(find "$unimem/libgsas.c" "$unimem/libunimem.c" "$unimem/atomic.h" "$unimem/libunimem.h" \
        "$g/common/spin.h" "$g/include" "$RACKEMU_ROOT/hw/include" -newer "$lib/libgsas.a" -name '*.[ch]' | head -n1)" ]; then
    for f in libgsas libunimem; do
        aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$g/include" -I"$g/common" \
            -c -o "$lib/$f.o" "$unimem/$f.c" || die "building libgsas.a ($f.c) failed"
    done
    rm -f "$lib/libgsas.a"
    aarch64-linux-gnu-ar rcs "$lib/libgsas.a" "$lib/libgsas.o" "$lib/libunimem.o" && cp "$unimem/atomic.h" "$lib/" ||
        die "building libgsas.a failed"
fi
# the RMC library (link with -lrmc; include librmc.h with -I for rackemu/sonuma_*.h)
if [ ! -f "$lib/librmc.a" ] || [ -n "$(find "$sonuma/librmc.c" "$sonuma/librmc.h" "$g/common/spin.h" "$g/include" \
        "$RACKEMU_ROOT/hw/include" -newer "$lib/librmc.a" -name '*.[ch]' | head -n1)" ]; then
    aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$g/include" -I"$g/common" \
        -c -o "$lib/librmc.o" "$sonuma/librmc.c" && rm -f "$lib/librmc.a" && aarch64-linux-gnu-ar rcs "$lib/librmc.a" "$lib/librmc.o" &&
        cp "$sonuma/librmc.h" "$lib/" || die "building librmc.a failed"
fi
# the OpenSHMEM library (docs/shmem.md; link with -lshmem -lpthread, include <shmem.h> with -I:
# libshmem.a carries librnic), then the programs written against it, guest/workloads/shmem/tests/*.c
# (shmem_check.c: shmem-check), compiled as a user would: only -I<lib> -L<lib> -lshmem.
if [ ! -f "$lib/libshmem.a" ] || [ -n "$(find "$shm" "$rnic/librnic.c" "$rnic/librnic.h" "$g/common/spin.h" "$g/include" \
        "$RACKEMU_ROOT/hw/include" "$0" -newer "$lib/libshmem.a" \( -name '*.[ch]' -o -name build-programs.sh \) | head -n1)" ]; then
    for f in "$shm/libshmem.c" "$rnic/librnic.c"; do
        $CC "${CFLAGS[@]}" -c -o "$lib/$(basename "$f" .c).o" "$f" || die "building libshmem.a ($(basename "$f")) failed"
    done
    rm -f "$lib/libshmem.a"
    aarch64-linux-gnu-ar rcs "$lib/libshmem.a" "$lib/libshmem.o" "$lib/librnic.o" && cp "$shm/shmem.h" "$lib/" ||
        die "building libshmem.a failed"
fi
for c in "$shm"/tests/*.c; do
    [ -f "$c" ] || continue
    name=$(basename "$c" .c)
    name=${name//_/-}
    if [ ! -f "$out/$name" ] || [ "$c" -nt "$out/$name" ] || [ "$lib/libshmem.a" -nt "$out/$name" ]; then
        $CC -static -O2 -Wall -Wextra -Werror -I"$lib" -o "$out/$name.tmp" "$c" -L"$lib" -lshmem -lpthread &&
            mv "$out/$name.tmp" "$out/$name" || die "building $(rel "$c") ($name) failed"
    fi
done
