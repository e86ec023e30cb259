#!/usr/bin/env bash
# The project's test command: installs what the tests need, builds rgrind, runs every test.
#   bash scripts/test.sh            (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gcc >/dev/null || need+=(gcc)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "scripts/test.sh: please install: ${need[*]}" >&2
        exit 1
    fi
fi

# gprof2dot lets the dumper's tests check that a second reader accepts rgrind's callgrind
# files; without network access those checks say so and pass.
bash dumper/scripts/install-test-tools.sh >/dev/null 2>&1 || echo "scripts/test.sh: gprof2dot not installed; its checks are skipped" >&2

cargo build --release -p launcher
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --workspace 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo prints one per test binary, the last often a
# doc-test binary with 0 tests).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
