#!/usr/bin/env bash
# rackemu's style check (docs/style.md): run by `./rackemu test` before the unit tests.
#
#   tests/style/check.sh          check; list every violation; exit 1 if there is one
#   tests/style/check.sh --fix    reformat the C++ in scope with clang-format (the only
#                                 mechanical fix), then check the rest
#   tests/style/check.sh --list   print the files each tool covers, and exit
#
# What is checked, with which tool (scope and exceptions are explained in docs/style.md):
#   clang-format    the project's C++: device cores and register headers (hw/, not the QEMU
#                   glue hw/qemu), the fabric (platform/fabric), unit tests and fuzzers
#                   (tests/unit, tests/fuzz); config: .clang-format
#   QEMU checkpatch the QEMU glue (hw/qemu, platform/machine), QEMU 7.2's scripts/checkpatch.pl
#                   from the QEMU source tree set-up unpacked; one exception: line length
#   kernel checkpatch  the kernel modules (guest/*/kmod), the guest kernel's own
#                   scripts/checkpatch.pl from Debian's linux-source package
#   flake8, mypy    the launcher (platform/rackemu), benches (bench), pytest suites (tests),
#                   this folder's scripts; config: setup.cfg
#   doc tables      the counter tables in docs/*.md are what tests/style/doc_tables.py generates
#                   from the register headers' <DEV>_COUNTER_TABLE X-macros (--fix rewrites them)
# Nothing is installed here: the tools come from platform/setup/packages.txt (set-up). A missing
# tool is a failure, except the kernel checkpatch, which is reported as skipped until set-up
# has extracted it (see KERNEL_CHECKPATCH below).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${RACKEMU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackemu}
BUILD=${RACKEMU_BUILD:-$ROOT/build}
PY=${RACKEMU_STYLE_PYTHON:-/usr/bin/python3}
cd "$ROOT" || exit 2

mode=check
case "${1:-}" in
    "") ;;
    --fix) mode=fix ;;
    --list) mode=list ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: tests/style/check.sh [--fix | --list]" >&2; exit 2 ;;
esac

# ---- scope (globs are matched against paths relative to the repository root) ----
# clang-format: the project's own C++ and the C/C++ register headers they share with the
# drivers and firmware. Not: hw/qemu (QEMU style), guest/ (kernel style), firmware/ (bare-metal
# C in kernel style, built with the cross compiler).
CXX_GLOBS=('hw/*.cc' 'hw/*.h' 'hw/*.cpp' 'hw/*.hpp' 'platform/fabric/*.cc' 'platform/fabric/*.h'
           'tests/unit/*.cc' 'tests/unit/*.h' 'tests/fuzz/*.cc' 'tests/fuzz/*.h')
CXX_EXCLUDE='^hw/qemu/'
QEMU_GLOBS=('hw/qemu/*.c' 'hw/qemu/*.h' 'platform/machine/*.c' 'platform/machine/*.h' 'platform/qemu/plugins/*.c')
KMOD_GLOBS=('guest/*/kmod/*.c' 'guest/*/kmod/*.h')
PY_DIRS=()
for d in platform/rackemu bench tests/e2e tests/launcher tests/style; do [ -d "$d" ] && PY_DIRS+=("$d"); done

# files GLOB...: tracked and new (not ignored) files matching the globs; `*` crosses folders.
files() {
    if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$ROOT" ls-files --cached --others --exclude-standard -- "$@" |
            while read -r f; do [ -f "$f" ] && echo "$f"; done | LC_ALL=C sort -u
    else
        local g
        for g in "$@"; do
            find "${g%%/\**}" -type f -path "$g" 2>/dev/null   # -path's * also crosses folders
        done | LC_ALL=C sort -u
    fi
}

mapfile -t CXX < <(files "${CXX_GLOBS[@]}" | grep -Ev "$CXX_EXCLUDE")
mapfile -t QEMU_GLUE < <(files "${QEMU_GLOBS[@]}")
mapfile -t KMOD < <(files "${KMOD_GLOBS[@]}")

if [ "$mode" = list ]; then
    echo "clang-format (${#CXX[@]}):"; printf '  %s\n' "${CXX[@]}"
    echo "QEMU checkpatch (${#QEMU_GLUE[@]}):"; printf '  %s\n' "${QEMU_GLUE[@]}"
    echo "kernel checkpatch (${#KMOD[@]}):"; printf '  %s\n' "${KMOD[@]}"
    echo "flake8 + mypy: ${PY_DIRS[*]}"
    exit 0
fi

failed=()          # one entry per failed tool
fail() { failed+=("$1"); }
section() { printf 'style: %-18s ' "$1"; }

# ---- clang-format ----
section clang-format
if ! command -v clang-format >/dev/null; then
    echo "MISSING: clang-format is not installed (run ./rackemu setup: platform/setup/packages.txt)"
    fail clang-format
elif [ ${#CXX[@]} -eq 0 ]; then
    echo "no files"
else
    [ "$mode" = fix ] && clang-format -i --style=file "${CXX[@]}"
    # One run over all files; each finding is FILE:LINE:COL: warning: ... (a place to change).
    out=$(clang-format --dry-run --style=file "${CXX[@]}" 2>&1)
    rc=$?
    places=$(printf '%s\n' "$out" | grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error): ' | cut -d: -f1,2 | sort -u)
    if [ $rc -ne 0 ] || { [ -n "$out" ] && [ -z "$places" ]; }; then
        echo "ERROR: clang-format failed (exit $rc)"
        printf '%s\n' "$out" | head -n 20 | sed 's/^/  /'
        fail clang-format
    elif [ -z "$places" ]; then
        echo "ok (${#CXX[@]} files)"
    else
        nfiles=$(printf '%s\n' "$places" | cut -d: -f1 | sort -u | wc -l)
        echo "FAIL: $(printf '%s\n' "$places" | wc -l) line(s) in $nfiles of ${#CXX[@]} files are not formatted"
        printf '%s\n' "$places" | cut -d: -f1 | uniq -c | awk '{printf "  %s: %d line(s)\n", $2, $1}'
        echo "  fix: tests/style/check.sh --fix (review with git diff)"
        fail clang-format
    fi
fi

# ---- QEMU checkpatch on the glue ----
# Exception: QEMU's checkpatch warns above 80 and fails above 90 columns. The glue is written to
# the project's 110 columns (the same limit clang-format holds the C++ to): its lines are QEMU
# API calls with long rackemu names and register macros, and wrapping them at 80 hurt more than
# helped. Everything else checkpatch reports is enforced.
QEMU_IGNORE='line over (80|90) characters'
section "QEMU checkpatch"
qemu_src=${RACKEMU_QEMU_SRC:-}
if [ -z "$qemu_src" ] && [ -f "$CACHE/qemu-source/unpacked.stamp" ]; then
    qemu_src=$(cat "$CACHE/qemu-source/unpacked.stamp")
fi
qcp=$qemu_src/scripts/checkpatch.pl
if [ ${#QEMU_GLUE[@]} -eq 0 ]; then
    echo "no files"
elif [ -z "$qemu_src" ] || [ ! -f "$qcp" ]; then
    echo "MISSING: QEMU's scripts/checkpatch.pl (the QEMU source tree is unpacked by ./rackemu setup)"
    fail "QEMU checkpatch"
else
    out=$(perl "$qcp" --no-tree --terse -f "${QEMU_GLUE[@]}" 2>&1 |
          grep -E ': (ERROR|WARNING):' | grep -Ev "$QEMU_IGNORE")
    if [ -z "$out" ]; then
        echo "ok (${#QEMU_GLUE[@]} files; line length excepted)"
    else
        echo "FAIL: $(printf '%s\n' "$out" | wc -l) problem(s)"
        printf '%s\n' "$out" | sed 's/^/  /'
        echo "  fix by hand (QEMU's style: docs/devel/style.rst in the QEMU tree)"
        fail "QEMU checkpatch"
    fi
fi

# ---- kernel checkpatch on the modules ----
# Run at checkpatch's default level (errors and warnings, not --strict's CHECKs), --no-tree
# (out-of-tree modules). No type is ignored. KERNEL_CHECKPATCH: the guest kernel's own script,
# extracted by set-up from Debian's linux-source package next to the out-of-tree drivers
# (platform/setup/fetch-kernel-src.sh), or RACKEMU_KERNEL_CHECKPATCH.
KMOD_IGNORE=""
section "kernel checkpatch"
kcp=${RACKEMU_KERNEL_CHECKPATCH:-}
if [ -z "$kcp" ]; then
    kcp=$(ls -1d "$CACHE"/kernel-src/*/linux/scripts/checkpatch.pl 2>/dev/null | tail -n1)
fi
if [ ${#KMOD[@]} -eq 0 ]; then
    echo "no files"
elif [ -z "$kcp" ] || [ ! -f "$kcp" ]; then
    echo "SKIPPED: no kernel scripts/checkpatch.pl in $CACHE/kernel-src (set-up extracts it)"
else
    out=$(for f in "${KMOD[@]}"; do
              perl "$kcp" --no-tree --terse --show-types ${KMOD_IGNORE:+--ignore "$KMOD_IGNORE"} -f "$f" 2>&1
          done | grep -E ': (ERROR|WARNING|CHECK):')
    if [ -z "$out" ]; then
        echo "ok (${#KMOD[@]} files)"
    else
        echo "FAIL: $(printf '%s\n' "$out" | wc -l) problem(s)"
        printf '%s\n' "$out" | sed 's/^/  /'
        echo "  fix by hand (Documentation/process/coding-style.rst)"
        fail "kernel checkpatch"
    fi
fi

# ---- Python: flake8 and mypy (config: setup.cfg) ----
section flake8
if [ ${#PY_DIRS[@]} -eq 0 ]; then
    echo "no files"
elif ! "$PY" -c 'import flake8' 2>/dev/null; then
    echo "MISSING: flake8 for $PY (run ./rackemu setup: platform/setup/packages.txt)"
    fail flake8
else
    out=$("$PY" -m flake8 "${PY_DIRS[@]}" 2>&1)
    if [ -z "$out" ]; then
        echo "ok (${PY_DIRS[*]})"
    else
        echo "FAIL: $(printf '%s\n' "$out" | wc -l) problem(s)"
        printf '%s\n' "$out" | sed 's/^/  /'
        fail flake8
    fi
fi

section mypy
if [ ${#PY_DIRS[@]} -eq 0 ]; then
    echo "no files"
elif ! "$PY" -c 'import mypy' 2>/dev/null; then
    echo "MISSING: mypy for $PY (run ./rackemu setup: platform/setup/packages.txt)"
    fail mypy
else
    # One run per folder: the e2e and launcher suites each have a conftest.py (two modules of
    # one name for mypy). The cache lives in the build folder.
    out=""
    for d in "${PY_DIRS[@]}"; do
        out+=$("$PY" -m mypy --cache-dir "$BUILD/mypy-cache" "$d" 2>&1 | grep -v '^Success:')
    done
    if [ -z "$out" ]; then
        echo "ok (${PY_DIRS[*]})"
    else
        echo "FAIL"
        printf '%s\n' "$out" | sed 's/^/  /'
        fail mypy
    fi
fi

# ---- generated doc tables (counters declared once, in the register headers) ----
section "doc tables"
if [ "$mode" = fix ]; then
    out=$("$PY" tests/style/doc_tables.py --fix 2>&1)
else
    out=$("$PY" tests/style/doc_tables.py 2>&1)
fi
if [ $? -eq 0 ]; then
    echo "ok ($out)"
else
    echo "FAIL: $out"
    fail "doc tables"
fi

if [ ${#failed[@]} -gt 0 ]; then
    echo "style: FAILED: ${failed[*]}. C++ formatting and doc tables: run tests/style/check.sh --fix;" \
         "the rest is fixed by hand (docs/style.md)."
    exit 1
fi
echo "style: all checks passed"
