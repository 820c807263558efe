#!/bin/bash
# Run the fuzz harnesses (docs/fuzzing.md). Builds them first (tests/fuzz/build.sh).
#   tests/fuzz/run.sh --smoke [SECONDS]     every harness for SECONDS (default 5) over its seed
#                                           corpus; fails if any finds a crash (part of the test command)
#   tests/fuzz/run.sh --minutes N NAME...   a longer run of some harnesses (all if none named)
#   tests/fuzz/run.sh --repro NAME FILE     run one input (a crash artifact) once, with the full report
# Work corpora and crash artifacts go to ${RACKEMU_BUILD:-<repo>/build}/fuzz/{work,artifacts}/NAME;
# the seeds in tests/fuzz/corpus/NAME are only read. A run judges only the artifacts it creates:
# those an earlier run left in artifacts/NAME are first moved aside to artifacts/NAME.old-<time>
# (with a message), so they are kept for --repro but do not fail this run.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${RACKEMU_BUILD:-$root/build}/fuzz
# every harness: each tests/fuzz/fuzz_NAME.cc (a new harness is a new file and its seed corpus)
ALL=$(cd "$here" && ls fuzz_*.cc | sed "s/^fuzz_//; s/\.cc$//" | tr "\n" " ")

mode=${1:---smoke}
shift || true
case "$mode" in
  --smoke) secs=${1:-5}; names=$ALL ;;
  --minutes) secs=$(( ${1:?minutes} * 60 )); shift; names=${*:-$ALL} ;;
  --repro)
    name=${1:?harness}; file=${2:?input file}
    "$here/build.sh" "$name" >/dev/null || exit 1
    exec "$out/fuzz_$name" -runs=1 "$file" ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac

"$here/build.sh" $names || { echo "fuzz: build failed" >&2; exit 1; }
[[ -d "$here/corpus/vmbox" ]] || python3 "$here/gen_corpus.py"

fail=0
for n in $names; do
  work=$out/work/$n art=$out/artifacts/$n log=$out/$n.log
  if [[ $mode == --smoke ]]; then
    # from the seeds alone, so its time does not grow with earlier runs' corpora, and apart from
    # a long run that may be going on
    work=$out/smoke/$n art=$out/smoke/artifacts/$n log=$out/smoke/$n.log
    rm -rf "$work" "$art"
  fi
  if [[ -d "$art" ]] && ls -A "$art" | grep -q .; then
    old=$art.old-$(date +%Y%m%d-%H%M%S)
    mv "$art" "$old" && echo "fuzz $n: $(ls -A "$old" | wc -l) artifact(s) of an earlier run moved to $old" >&2
  fi
  mkdir -p "$work" "$art"
  start=$(date +%s)
  "$out/fuzz_$n" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$art/" "$work" "$here/corpus/$n" >"$log" 2>&1
  rc=$?
  stats=$(grep -aE '^#[0-9]+.*(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+.*exec/s: [0-9]+' || true)
  if (( rc != 0 )) || ls "$art" | grep -q .; then
    echo "fuzz $n: FAILED after $(( $(date +%s) - start )) s ($stats); artifacts in $art, log $log" >&2
    grep -aE 'ERROR|SUMMARY|invariant|runtime error' "$log" | head -5 >&2
    fail=1
  else
    echo "fuzz $n: ok, $(( $(date +%s) - start )) s, $stats"
  fi
done
exit $fail
