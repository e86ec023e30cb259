#!/usr/bin/env bash
# Run Valgrind's own none/tests regression programs natively and under `rgrind --tool=none`.
#
# Fetches Debian's `valgrind` source package with `apt-get source` (adding deb-src entries
# when apt has none), configures it and builds only the test programs (not Valgrind; only
# its VEX library, which libvex_test links, unless --no-vex). Then runs each `.vgtest`
# program in none/tests and none/tests/{amd64,linux,amd64-linux,scripts} twice natively and
# once under rgrind, and compares stdout and exit status (vgrun.py does the runs).
#
# Usage: scripts/vg-none-tests/run.sh [--rgrind PATH] [--only NAME,...] [--jobs N]
#            [--timeout S] [--src DIR] [--log FILE] [--no-vex] [--no-build]
#   --rgrind PATH   rgrind binary (default: target/release/rgrind of this checkout)
#   --only A,B      run only these tests (name as printed, e.g. args or amd64/bug132918)
#   --jobs N        tests run in parallel (default: number of CPUs)
#   --timeout S     seconds per run before the program is killed (default 60)
#   --src DIR       where the source package goes (default ~/.cache/rgrind/valgrind-src)
#   --log FILE      details of every run (default ~/.cache/rgrind/vg-none-tests.log)
#   --no-vex        do not build VEX (about 2 minutes once): libvex_test* are then skipped
#   --no-build      use the tree as it is (no configure/make)
# Exit status: 0 when no test failed, 1 when some failed, 2 on a setup error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rgrind"

rgrind="$repo/target/release/rgrind"
only=""
jobs=$(nproc 2>/dev/null || echo 2)
timeout=60
src="$cache/valgrind-src"
log="$cache/vg-none-tests.log"
build_vex=1
build=1

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}
die() { echo "vg-none-tests: $*" >&2; exit 2; }
say() { echo "vg-none-tests: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --rgrind) rgrind=${2:?--rgrind needs a path}; shift 2 ;;
        --rgrind=*) rgrind=${1#*=}; shift ;;
        --only) only=${2:?--only needs names}; shift 2 ;;
        --only=*) only=${1#*=}; shift ;;
        --jobs|-j) jobs=${2:?--jobs needs a number}; shift 2 ;;
        --jobs=*) jobs=${1#*=}; shift ;;
        --timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
        --timeout=*) timeout=${1#*=}; shift ;;
        --src) src=${2:?--src needs a folder}; shift 2 ;;
        --src=*) src=${1#*=}; shift ;;
        --log) log=${2:?--log needs a file}; shift 2 ;;
        --log=*) log=${1#*=}; shift ;;
        --no-vex) build_vex=0; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
case "$jobs" in ''|*[!0-9]*|0) die "--jobs wants a positive whole number, not '$jobs'" ;; esac
case "$timeout" in ''|*[!0-9.]*) die "--timeout wants seconds, not '$timeout'" ;; esac
[ -x "$rgrind" ] || die "no rgrind at $rgrind (build it: cd $repo && cargo build --release; or pass --rgrind PATH)"
command -v python3 >/dev/null || die "python3 is needed"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $*"
    fi
}

# --- 1. deb-src entries (idempotent: only when apt knows no source for valgrind) ---------
have_source_index() { [ -n "$(apt-cache showsrc valgrind 2>/dev/null | head -1)" ]; }

ensure_deb_src() {
    have_source_index && return 0
    local out=/etc/apt/sources.list.d/rgrind-deb-src.sources
    say "adding deb-src entries for apt in $out"
    # Same archives, suites and components as the enabled Debian/Ubuntu `deb` entries.
    local tmp
    tmp=$(mktemp)
    python3 - "$out" >"$tmp" <<'PY' || { rm -f "$tmp"; die "cannot write deb-src entries"; }
import glob, os, re, sys
out = sys.argv[1]
stanzas = []
def official(uris):
    return any(re.search(r"(debian\.org|ubuntu\.com|debian-security|ubuntu)", u) for u in uris)
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    if os.path.abspath(path) == os.path.abspath(out):
        continue
    for block in re.split(r"\n\s*\n", open(path).read()):
        fields = {}
        for line in block.splitlines():
            m = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
            if m:
                fields[m.group(1).lower()] = m.group(2).strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
            continue
        if not official(fields.get("uris", "").split()):
            continue
        st = ["Types: deb-src", "URIs: " + fields["uris"], "Suites: " + fields.get("suites", "")]
        if fields.get("components"):
            st.append("Components: " + fields["components"])
        if fields.get("signed-by"):
            st.append("Signed-By: " + fields["signed-by"])
        stanzas.append("\n".join(st))
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    if not os.path.isfile(path):
        continue
    for line in open(path):
        m = re.match(r"^\s*deb\s+(\[[^]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
        if m and official([m.group(2)]):
            opts = m.group(1) or ""
            st = ["Types: deb-src", "URIs: " + m.group(2), "Suites: " + m.group(3)]
            if m.group(4):
                st.append("Components: " + m.group(4))
            sb = re.search(r"signed-by=(\S+?)\]?(\s|$)", opts)
            if sb:
                st.append("Signed-By: " + sb.group(1))
            stanzas.append("\n".join(st))
if not stanzas:
    sys.exit("no Debian/Ubuntu deb entries found to copy")
print("# Written by rgrind scripts/vg-none-tests/run.sh: source entries for apt-get source.")
print("\n\n".join(stanzas))
PY
    as_root install -m 644 "$tmp" "$out"
    rm -f "$tmp"
    as_root apt-get update -qq || die "apt-get update failed"
    have_source_index || die "apt still has no source for valgrind after adding $out"
}

# --- 2. build tools (the minimal set: no full `apt-get build-dep valgrind`) ---------------
ensure_tools() {
    local need=()
    command -v dpkg-source >/dev/null || need+=(dpkg-dev)
    command -v gcc >/dev/null || need+=(gcc)
    command -v g++ >/dev/null || need+=(g++)
    command -v make >/dev/null || need+=(make)
    command -v perl >/dev/null || need+=(perl)
    command -v nm >/dev/null || need+=(binutils)
    [ -e /usr/include/stdio.h ] || need+=(libc6-dev)
    command -v bzip2 >/dev/null || need+=(bzip2)
    command -v xz >/dev/null || need+=(xz-utils)
    if [ ${#need[@]} -gt 0 ]; then
        say "installing ${need[*]}"
        as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
            || die "apt-get install ${need[*]} failed"
    fi
}

# --- 3. the source tree (reused when present) ---------------------------------------------
find_tree() {
    local d
    for d in "$src"/valgrind-[0-9]*/; do
        if [ -d "$d" ]; then printf '%s\n' "${d%/}"; fi
    done | sort -V | tail -1
}

ensure_source() {
    tree=$(find_tree)
    if [ -n "$tree" ] && [ -d "$tree/none/tests" ]; then return 0; fi
    ensure_deb_src
    mkdir -p "$src"
    say "apt-get source valgrind into $src"
    (cd "$src" && apt-get source -qq valgrind >"$src/apt-get-source.log" 2>&1) \
        || die "apt-get source valgrind failed (see $src/apt-get-source.log)"
    tree=$(find_tree)
    [ -n "$tree" ] && [ -d "$tree/none/tests" ] || die "no valgrind source tree under $src"
}

# --- 4. configure and build only the test programs ----------------------------------------
build_tests() {
    local blog="$src/build.log"
    if [ ! -f "$tree/config.status" ] || [ ! -f "$tree/none/tests/Makefile" ]; then
        say "configuring $tree (log: $blog)"
        (cd "$tree" && ./configure) >"$blog" 2>&1 || die "configure failed (see $blog)"
    fi
    say "building the test programs (log: $blog)"
    {
        # tests/: helpers the prereq lines use (x86_amd64_features, os_test, arch_test, true).
        make -C "$tree/tests" -k -j"$jobs" check
        if [ "$build_vex" = 1 ]; then
            make -C "$tree/VEX" -j"$jobs" libvex-amd64-linux.a libvexmultiarch-amd64-linux.a
        fi
        # none/tests and its platform subfolders. With --no-vex, libvex_test and
        # libvexmultiarch_test fail to link (they need Valgrind's VEX library): keep going.
        make -C "$tree/none/tests" -k -j"$jobs" check
        # bigcode.vgtest runs ../../perf/bigcode.
        make -C "$tree/perf" -k bigcode
    } >>"$blog" 2>&1 || true
    [ -x "$tree/tests/x86_amd64_features" ] || die "tests/x86_amd64_features was not built (see $blog)"
}

ensure_tools
ensure_source
if [ "$build" = 1 ]; then build_tests; fi

mkdir -p "$(dirname "$log")"
say "rgrind: $rgrind; tests: $tree/none/tests"
args=(--src "$tree" --rgrind "$rgrind" --jobs "$jobs" --timeout "$timeout" --log "$log")
[ -n "$only" ] && args+=(--only "$only")
exec python3 "$here/vgrun.py" "${args[@]}"
