#!/usr/bin/env bash
# Installs the external readers the dumper's tests run when present:
# gprof2dot from PyPI (cg_annotate and callgrind_annotate come with Valgrind).
set -euo pipefail
if ! command -v gprof2dot >/dev/null 2>&1; then
    python3 -m pip install --quiet gprof2dot
fi
command -v gprof2dot
