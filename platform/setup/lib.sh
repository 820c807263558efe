# Shared helpers for rackemu's set-up scripts. Sourced, not executed.
# Every step is idempotent and caches what it downloads or builds under
# $RACKEMU_CACHE (default ~/.cache/rackemu), so a second run is fast.
set -euo pipefail

RACKEMU_ROOT=${RACKEMU_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
RACKEMU_CACHE=${RACKEMU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackemu}
RACKEMU_BUILD=${RACKEMU_BUILD:-$RACKEMU_ROOT/build}
export RACKEMU_ROOT RACKEMU_CACHE RACKEMU_BUILD
mkdir -p "$RACKEMU_CACHE" "$RACKEMU_BUILD"

say()  { printf '\033[1m[rackemu]\033[0m %s\n' "$*" >&2; }
die()  { printf '\033[1;31m[rackemu] error:\033[0m %s\n' "$*" >&2; exit 1; }

# as_root CMD...: run as root directly, through sudo, or fail with a message.
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $* (run as root or install sudo)"; fi
}

# The Debian mirror the host already uses (first URIs line of its deb822 sources), or the default.
debian_mirror() {
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
    [ -n "$m" ] || m=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    echo "${m:-http://deb.debian.org/debian}"
}
debian_security_mirror() {
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep security | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian-security}"
}

# private_apt DIR ARCH TYPE: prepare a private apt state in DIR (sources, lists, cache) that
# leaves the system's apt configuration alone; prints the apt options to use with it.
private_apt_opts() {
    local dir=$1 arch=$2
    echo "-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/dev/null" \
         "-o Dir::State::Lists=$dir/lists -o Dir::Cache=$dir/cache -o Dir::State::Status=$dir/status" \
         "-o APT::Architecture=$arch -o APT::Architectures=$arch -o Debug::NoLocking=1 -o APT::Sandbox::User=root"
}
private_apt_init() {
    local dir=$1 type=$2 arch=$3 keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    touch "$dir/status"
    cat > "$dir/sources.list" <<SRC
$type [signed-by=$keyring] $(debian_mirror) bookworm main
$type [signed-by=$keyring] $(debian_mirror) bookworm-updates main
$type [signed-by=$keyring] $(debian_security_mirror) bookworm-security main
SRC
    # Refresh the lists at most once a day.
    if [ -z "$(find "$dir/lists" -maxdepth 1 -name '*Packages*' -o -maxdepth 1 -name '*Sources*' -mtime -1 2>/dev/null | head -n1)" ]; then
        # shellcheck disable=SC2046
        apt-get -q $(private_apt_opts "$dir" "$arch") update >&2 || die "apt-get update for $dir failed (network or mirror problem)"
    fi
}
