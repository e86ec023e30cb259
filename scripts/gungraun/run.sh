#!/usr/bin/env bash
# gungraun (formerly iai-callgrind) end to end: builds a small Rust benchmark crate with
# gungraun's library benchmarks, runs it with Valgrind and then with rgrind standing in for
# `valgrind` (a shim first on PATH), and prints gungraun's comparison of the two runs: each
# metric as "rgrind|valgrind (change)". Needs network access to crates.io (the crate and
# `gungraun-runner`, which it installs into the work folder), so it is a manual check, not
# part of scripts/test.sh. HARNESS=iai-callgrind VERSION=0.16.1 checks gungraun's former
# name (the same benchmarks through the `iai_callgrind` crate).
#   bash scripts/gungraun/run.sh [work-folder]      (default: a fresh temporary folder)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
harness=${HARNESS:-gungraun}
version=${VERSION:-0.20.0}
work=${1:-$(mktemp -d)}
rgrind=${RGRIND:-$root/target/release/rgrind}
[ -x "$rgrind" ] || { echo "build rgrind first: cargo build --release" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is needed for the reference run" >&2; exit 1; }

mkdir -p "$work/crate/src" "$work/crate/benches" "$work/shim"
cat > "$work/crate/Cargo.toml" <<TOML
[package]
name = "rgrind-gungraun-check"
version = "0.1.0"
edition = "2021"

[dev-dependencies]
$harness = "=$version"

[[bench]]
name = "lib_bench"
harness = false
TOML
: > "$work/crate/src/lib.rs"
sed "s/gungraun::/${harness//-/_}::/" "$here/lib_bench.rs" > "$work/crate/benches/lib_bench.rs"
[ -x "$work/runner/bin/$harness-runner" ] ||
    cargo install -q "$harness-runner" --version "$version" --root "$work/runner"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$rgrind" > "$work/shim/valgrind"
chmod +x "$work/shim/valgrind"

cd "$work/crate"
echo "== Valgrind ($(command -v valgrind))"
PATH="$work/runner/bin:$PATH" cargo bench -q --bench lib_bench
echo "== rgrind ($rgrind) against the Valgrind run: rgrind|valgrind"
PATH="$work/shim:$work/runner/bin:$PATH" cargo bench -q --bench lib_bench
grep -h "Using" target/"${harness%-callgrind}"/*/*/*/*/*.log | sed 's/^==[0-9]*== //' | sort | uniq -c
