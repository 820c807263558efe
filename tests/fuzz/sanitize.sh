#!/bin/bash
# The unit tests (tests/unit, meson) under sanitizers, each in a build directory of its own so the
# normal host build stays as it is (docs/fuzzing.md):
#   tests/fuzz/sanitize.sh            ASan+UBSan, then TSan
#   tests/fuzz/sanitize.sh asan|tsan  one of them
#   RACKEMU_SAN_TESTS="rmc cdma" tests/fuzz/sanitize.sh tsan   only those unit tests (and only
#                                     their targets are built)
# Build directories: ${RACKEMU_BUILD:-<repo>/build}/san-asan and san-tsan. Any sanitizer report
# fails the test (halt_on_error / abort_on_error).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
base=${RACKEMU_BUILD:-$root/build}
kinds=${*:-asan tsan}

for k in $kinds; do
  case $k in
    asan) opt=address,undefined extra=
          export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
          export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ;;
    # gcc warns that TSan does not model std::atomic_thread_fence (shm_ring.h's futex_wake,
    # the RMC's WQE fetch); the warning would be an error under werror
    tsan) opt=thread extra=-Wno-tsan
          export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ;;
    *) echo "unknown sanitizer $k (asan, tsan)" >&2; exit 2 ;;
  esac
  dir=$base/san-$k
  start=$(date +%s)
  if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" "$root" -Db_sanitize=$opt -Db_lundef=false -Dbuildtype=debugoptimized \
      ${extra:+-Dcpp_args=$extra} >/dev/null
  fi
  tests=${RACKEMU_SAN_TESTS:-}
  # TSan: every unit test (tests/unit/meson.build) but remote_mem(_direct) and bridge, whose bridge and
  # ports share one process and map each ring twice, which TSan cannot follow (docs/fuzzing.md,
  # "What they found"), and roce_vectors (a script, not a binary)
  if [[ $k == tsan && -z $tests ]]; then
    tests=$(meson test -C "$dir" --no-rebuild --list 2>/dev/null | grep -v "^ninja:" | sed 's/^.* \/ //' | grep -vxE 'remote_mem|remote_mem_direct|bridge|roce_vectors' | tr '\n' ' ')
  fi
  targets=()
  for t in $tests; do targets+=("tests/unit/test_$t"); done
  ninja -C "$dir" "${targets[@]}" >"$dir.build.log" 2>&1 || { tail -20 "$dir.build.log" >&2; exit 1; }
  # TSan slows the threaded tests ~5-15x: the same tests, with more time
  meson test -C "$dir" --no-rebuild --print-errorlogs $([[ $k == tsan ]] && echo --timeout-multiplier=4) $tests ||
    { echo "sanitize $k: FAILED (logs in $dir/meson-logs)" >&2; exit 1; }
  echo "sanitize $k: ok in $(( $(date +%s) - start )) s"
done
