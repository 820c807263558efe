#!/usr/bin/env bash
# Build the static aarch64 user programs into $RACKEMU_BUILD/guest/bin/:
#   unimem        the Unimem tool (unimem.c + libunimem.c)
#   unimem-check  bad-input checks of /dev/unimem (unimem_check.c + libunimem.c)
#   gas           loads and stores through the global address space window (gas.c)
#   mbox          the mailbox from user space (mbox.c)
#   cdma          copies with the cDMA engine, local and remote (cdma.c)
#   unim_dma_test the unim_dma RDMA API against every node (unim_dma_test.c + libunim_dma.c)
#   gsasd         the GSAS atomic service (gsasd.c + libunimem.c)
#   gsas          the GSAS environment from the shell, tests and benchmarks (gsas.c + libgsas.c)
#   rmc           the soNUMA RMC from the shell and its check suite (rmc.c + librmc.c)
#   rmc-bench     remote read vs SABRe microbenchmark (rmc_bench.c + librmc.c)
#   rmc-kv        the FaRM-style key-value store (rmc_kv.c + librmc.c)
# and libunim_dma.a + unim_dma.h (seed 004 sec. 3.4), libgsas.a + atomic.h (sec. 2.3), librmc.a +
# librmc.h (the RMC, docs/rmc-driver.md) for
# programs built against those APIs.
source "$(dirname "$0")/../../platform/setup/lib.sh"
out=$RACKEMU_BUILD/guest/bin
src=$RACKEMU_ROOT/guest/user
mkdir -p "$out"
build() { # build NAME SOURCES...
    local name=$1; shift
    if [ ! -f "$out/$name" ] || [ -n "$(find "$src" "$RACKEMU_ROOT/hw/include" "$RACKEMU_ROOT/guest/include" -newer "$out/$name" -name '*.[ch]' | head -n1)" ]; then
        aarch64-linux-gnu-gcc -static -O2 -Wall -Wextra -Werror -Wno-format-zero-length -I"$RACKEMU_ROOT/hw/include" -I"$RACKEMU_ROOT/guest/include" \
            -o "$out/$name.tmp" "$@" && mv "$out/$name.tmp" "$out/$name" || die "building guest/user ($name) failed"
    fi
}
build unimem "$src/unimem.c" "$src/libunimem.c"
build unimem-check "$src/unimem_check.c" "$src/libunimem.c"
build gas "$src/gas.c"
build mbox "$src/mbox.c"
build cdma "$src/cdma.c"
build unim_dma_test "$src/unim_dma_test.c" "$src/libunim_dma.c" -lpthread
build gsasd "$src/gsasd.c" "$src/libunimem.c"
build gsas "$src/gsas.c" "$src/libgsas.c" "$src/libunimem.c" -lpthread
build rmc "$src/rmc.c" "$src/librmc.c"
build rmc-kv "$src/rmc_kv.c" "$src/librmc.c" -lpthread
build rmc-bench "$src/rmc_bench.c" "$src/librmc.c"
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
