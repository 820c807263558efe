#!/bin/bash
# Build the libFuzzer harnesses (docs/fuzzing.md) with clang, ASan and UBSan, into
# ${RACKEMU_BUILD:-<repo>/build}/fuzz. Separate from the main (gcc) host build. The hardware's
# C++ sources come from the one build list, hw/sources.list (its *.cc lines): they are compiled
# once, with coverage instrumentation, into librackemu_hw.a, which every harness links.
#   tests/fuzz/build.sh            build every harness (every tests/fuzz/fuzz_NAME.cc)
#   tests/fuzz/build.sh NAME...    build some
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${RACKEMU_BUILD:-$root/build}/fuzz
mkdir -p "$out/obj"
CXX=${CXX_FUZZ:-clang++}

# Sources a harness needs beyond the hardware: programs under platform/ (not in the build list).
stage="platform/fabric/stage/stage.cc platform/fabric/stage/programs.cc platform/fabric/stage/opcount.cc platform/fabric/stage/swordbox.cc"
declare -A EXTRA=(
  [bridge]="platform/fabric/bridge.cc platform/fabric/faults.cc platform/fabric/capture.cc $stage"
  [switch_stage]="$stage"
)
ALL=$(cd "$here" && ls fuzz_*.cc | sed 's/^fuzz_//; s/\.cc$//' | tr '\n' ' ')
names=${*:-$ALL}

SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
FLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror -Wno-unused-parameter
       -I"$root/hw/include" -I"$root/hw/unimem" -I"$root/hw/sonuma" -I"$root/hw/rnic" -I"$root/hw/pmem" -I"$root/hw/core" -I"$root/hw/fabric" -I"$root/platform/fabric" -I"$root/platform/fabric/stage" -I"$root/tests/unit" -I"$here")

# newer TARGET PATH...: TARGET is missing, or older than a PATH that is a file, or than a header
# under a PATH that is a directory
newer() {
  local t=$1 p; shift
  [[ -e $t ]] || return 0
  for p in "$@"; do
    if [[ -d $p ]]; then
      [[ -n $(find "$p" -name '*.h' -newer "$t" -print -quit) ]] && return 0
    elif [[ $p -nt $t ]]; then
      return 0
    fi
  done
  return 1
}

# 1. the hardware library, from the build list
hw_srcs=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$root/hw/sources.list" | grep '\.cc$')
lib=$out/librackemu_hw.a
objs=()
pids=()
for s in $hw_srcs; do
  o=$out/obj/${s//\//_}.o
  objs+=("$o")
  newer "$o" "$root/hw/$s" "$root/hw" "$0" || continue
  ( "$CXX" "${FLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer-no-link -c -o "$o.tmp" "$root/hw/$s" && mv "$o.tmp" "$o" ) &
  pids+=($!)
  # two compilers at a time: the machine has 2 cores
  if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
(( rc == 0 )) || { echo "fuzz: building the hardware library failed" >&2; exit 1; }
if newer "$lib" "${objs[@]}" "$root/hw/sources.list"; then
  rm -f "$lib" && ar rcs "$lib" "${objs[@]}"
fi

# 2. the harnesses
pids=()
for n in $names; do
  [[ -f $here/fuzz_$n.cc ]] || { echo "unknown harness $n (known: $ALL)" >&2; exit 2; }
  extra=()
  for s in ${EXTRA[$n]:-}; do extra+=("$root/$s"); done
  # up to date: newer than its sources, the library, every header of the tree and this script
  newer "$out/fuzz_$n" "$here/fuzz_$n.cc" "$lib" "${extra[@]}" "$root/hw" "$root/platform/fabric" \
    "$root/tests/unit" "$here/fuzz_input.h" "$0" || continue
  (
    "$CXX" "${FLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer -o "$out/fuzz_$n.tmp" "$here/fuzz_$n.cc" "${extra[@]}" \
      "$lib" -lpthread &&
      mv "$out/fuzz_$n.tmp" "$out/fuzz_$n" && echo "built $out/fuzz_$n"
  ) &
  pids+=($!)
  if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
