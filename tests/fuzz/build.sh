#!/bin/bash
# Build the libFuzzer harnesses (docs/fuzzing.md) with clang, ASan and UBSan, into
# ${RACKEMU_BUILD:-<repo>/build}/fuzz. Separate from the main (gcc) host build. The harnesses
# compile the core sources directly.
#   tests/fuzz/build.sh            build every harness
#   tests/fuzz/build.sh NAME...    build some (vmbox packetizer gas cdma rmc r2p2 bridge port)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${RACKEMU_BUILD:-$root/build}/fuzz
mkdir -p "$out"
CXX=${CXX_FUZZ:-clang++}

# The core sources each harness links (the coordinator switches these to the shared source list).
declare -A SRCS=(
  [vmbox]="hw/unimem/vmbox.cc"
  [packetizer]="hw/unimem/packetizer.cc"
  [gas]="hw/unimem/gas.cc hw/fabric/remote_mem.cc hw/fabric/endpoint.cc"
  [cdma]="hw/unimem/cdma.cc"
  [rmc]="hw/sonuma/rmc.cc hw/sonuma/r2p2.cc hw/sonuma/timing.cc"
  [r2p2]="hw/sonuma/r2p2.cc hw/sonuma/timing.cc"
  [bridge]="platform/fabric/bridge.cc"
  [port]="hw/fabric/port.cc"
)
ALL="vmbox packetizer gas cdma rmc r2p2 bridge port"
names=${*:-$ALL}

FLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror -Wno-unused-parameter
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root/hw/include" -I"$root/hw/unimem" -I"$root/hw/sonuma" -I"$root/hw/core" -I"$root/hw/fabric" -I"$root/platform/fabric" -I"$here")

pids=()
for n in $names; do
  [[ -n "${SRCS[$n]:-}" ]] || { echo "unknown harness $n (known: $ALL)" >&2; exit 2; }
  srcs=()
  for s in ${SRCS[$n]}; do srcs+=("$root/$s"); done
  # up to date: newer than its sources, every header of the tree and this script
  if [[ -x $out/fuzz_$n ]] && [[ -z $(find "$here/fuzz_$n.cc" "$here/fuzz_input.h" "$0" "${srcs[@]}" \
        "$root/hw" "$root/platform/fabric" -name '*.h' -newer "$out/fuzz_$n" -o \
        \( -name '*.cc' -o -name build.sh \) -newer "$out/fuzz_$n" 2>/dev/null | grep -E "fuzz_$n.cc|fuzz_input.h|build.sh|\.h$|$(echo ${SRCS[$n]} | tr ' ' '|')" | head -1) ]]; then
    continue
  fi
  (
    "$CXX" "${FLAGS[@]}" -o "$out/fuzz_$n.tmp" "$here/fuzz_$n.cc" "${srcs[@]}" -lpthread &&
      mv "$out/fuzz_$n.tmp" "$out/fuzz_$n" && echo "built $out/fuzz_$n"
  ) &
  pids+=($!)
  # two compilers at a time: the machine has 2 cores
  if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
