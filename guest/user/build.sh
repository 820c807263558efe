#!/usr/bin/env bash
# Build the static aarch64 user programs into $RACKEMU_BUILD/guest/bin/, discovered: every
# guest/user/<name>.c with a main() is a program (adding a tool is adding its file), linked
# with the guest libraries (every guest/user/lib*.c, as one archive: a program gets the ones it
# uses) and -lpthread. The program is called <name> with '_' turned into '-' (unimem_check.c:
# unimem-check), except *_test programs, which keep their file's name (unim_dma_test, as seed
# 004 sec. 3.4 names it). What each one does: the comment at the top of its file (e.g. unimem,
# gas, mbox, cdma, gsasd, gsas, rmc, rmc-bench, rmc-kv, unimem-check, unim_dma_test).
# Then the libraries for programs built against rackemu's APIs: libunim_dma.a + unim_dma.h (seed
# 004 sec. 3.4), libgsas.a + atomic.h (sec. 2.3), librmc.a + librmc.h (the RMC,
# docs/rmc-driver.md).
source "$(dirname "$0")/../../platform/setup/lib.sh"
out=$RACKEMU_BUILD/guest/bin
src=$RACKEMU_ROOT/guest/user
obj=$RACKEMU_BUILD/guest/user-obj
mkdir -p "$out" "$obj"
CC=aarch64-linux-gnu-gcc
CFLAGS=(-O2 -Wall -Wextra -Werror -Wno-format-zero-length -I"$RACKEMU_ROOT/hw/include" -I"$RACKEMU_ROOT/guest/include")
# stale: TARGET is missing or older than a source or header of the guest tools or their headers
stale() { [ ! -f "$1" ] || [ -n "$(find "$src" "$RACKEMU_ROOT/hw/include" "$RACKEMU_ROOT/guest/include" "$0" -newer "$1" \( -name '*.[ch]' -o -name build.sh \) | head -n1)" ]; }

guestlib=$obj/libguest.a
if stale "$guestlib"; then
    rm -f "$guestlib"
    for c in "$src"/lib*.c; do
        $CC "${CFLAGS[@]}" -c -o "$obj/$(basename "$c" .c).o" "$c" || die "building guest/user/$(basename "$c") failed"
    done
    aarch64-linux-gnu-ar rcs "$guestlib" "$obj"/lib*.o || die "building the guest tools' library failed"
fi
for c in "$src"/*.c; do
    stem=$(basename "$c" .c)
    case $stem in lib*) continue ;; esac
    grep -qE '^int main\(' "$c" || continue
    case $stem in *_test) name=$stem ;; *) name=${stem//_/-} ;; esac
    if stale "$out/$name"; then
        $CC -static "${CFLAGS[@]}" -o "$out/$name.tmp" "$c" "$guestlib" -lpthread && mv "$out/$name.tmp" "$out/$name" ||
            die "building guest/user ($name) failed"
    fi
done
# the library for programs written against the unim_dma API (link with -lunim_dma -lpthread)
lib=$RACKEMU_BUILD/guest/lib
mkdir -p "$lib"
if [ ! -f "$lib/libunim_dma.a" ] || [ "$src/libunim_dma.c" -nt "$lib/libunim_dma.a" ] || [ "$src/unim_dma.h" -nt "$lib/libunim_dma.a" ]; then
    aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$RACKEMU_ROOT/guest/include" \
        -c -o "$lib/libunim_dma.o" "$src/libunim_dma.c" && aarch64-linux-gnu-ar rcs "$lib/libunim_dma.a" "$lib/libunim_dma.o" &&
        cp "$src/unim_dma.h" "$lib/" || die "building libunim_dma.a failed"
fi
# the GSAS library for programs written against atomic.h (link with -lgsas -lpthread; libgsas.a
# carries libunimem too)
if [ ! -f "$lib/libgsas.a" ] || [ -n "$(find "$src/libgsas.c" "$src/libunimem.c" "$src/atomic.h" "$src/libunimem.h" \
        "$RACKEMU_ROOT/guest/include" "$RACKEMU_ROOT/hw/include" -newer "$lib/libgsas.a" -name '*.[ch]' | head -n1)" ]; then
    for f in libgsas libunimem; do
        aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$RACKEMU_ROOT/guest/include" \
            -c -o "$lib/$f.o" "$src/$f.c" || die "building libgsas.a ($f.c) failed"
    done
    rm -f "$lib/libgsas.a"
    aarch64-linux-gnu-ar rcs "$lib/libgsas.a" "$lib/libgsas.o" "$lib/libunimem.o" && cp "$src/atomic.h" "$lib/" ||
        die "building libgsas.a failed"
fi
# the RMC library (link with -lrmc; include librmc.h with -I for rackemu/sonuma_*.h)
if [ ! -f "$lib/librmc.a" ] || [ -n "$(find "$src/librmc.c" "$src/librmc.h" "$RACKEMU_ROOT/guest/include" \
        "$RACKEMU_ROOT/hw/include" -newer "$lib/librmc.a" -name '*.[ch]' | head -n1)" ]; then
    aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -I"$RACKEMU_ROOT/hw/include" -I"$RACKEMU_ROOT/guest/include" \
        -c -o "$lib/librmc.o" "$src/librmc.c" && rm -f "$lib/librmc.a" && aarch64-linux-gnu-ar rcs "$lib/librmc.a" "$lib/librmc.o" &&
        cp "$src/librmc.h" "$lib/" || die "building librmc.a failed"
fi
# the OpenSHMEM library (docs/shmem.md; link with -lshmem -lpthread, include <shmem.h> with -I:
# libshmem.a carries librnic), then the programs written against it, guest/user/shmem/tests/*.c
# (shmem_check.c: shmem-check), compiled as a user would: only -I<lib> -L<lib> -lshmem.
shm=$src/shmem
if [ ! -f "$lib/libshmem.a" ] || [ -n "$(find "$shm" "$src/librnic.c" "$src/librnic.h" "$src/spin.h" "$RACKEMU_ROOT/guest/include" \
        "$RACKEMU_ROOT/hw/include" "$0" -newer "$lib/libshmem.a" \( -name '*.[ch]' -o -name build.sh \) | head -n1)" ]; then
    for f in "$shm/libshmem.c" "$src/librnic.c"; do
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
            mv "$out/$name.tmp" "$out/$name" || die "building guest/user/shmem/tests ($name) failed"
    fi
done
