#!/bin/bash
# The unit tests (tests/unit, meson) under sanitizers, each in a build directory of its own so the
# normal host build stays as it is (docs/fuzzing.md):
#   tests/fuzz/sanitize.sh            ASan+UBSan, then TSan
#   tests/fuzz/sanitize.sh asan|tsan  one of them
# Build directories: ${RACKEMU_BUILD:-<repo>/build}/san-asan and san-tsan. Any sanitizer report
# fails the test (halt_on_error / abort_on_error).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
base=${RACKEMU_BUILD:-$root/build}
kinds=${*:-asan tsan}

for k in $kinds; do
  case $k in
    asan) opt=address,undefined
          export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
          export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ;;
    tsan) opt=thread
          export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ;;
    *) echo "unknown sanitizer $k (asan, tsan)" >&2; exit 2 ;;
  esac
  dir=$base/san-$k
  start=$(date +%s)
  if [[ ! -f $dir/build.ninja ]]; then
    meson setup "$dir" "$root" -Db_sanitize=$opt -Db_lundef=false -Dbuildtype=debugoptimized >/dev/null
  fi
  ninja -C "$dir" >/dev/null
  # TSan slows the threaded tests ~5-15x: the same tests, with more time
  meson test -C "$dir" --print-errorlogs $([[ $k == tsan ]] && echo --timeout-multiplier=4) ||
    { echo "sanitize $k: FAILED (logs in $dir/meson-logs)" >&2; exit 1; }
  echo "sanitize $k: ok in $(( $(date +%s) - start )) s"
done
