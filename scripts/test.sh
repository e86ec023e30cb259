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

cargo build --release -p launcher
cargo test --release --workspace
