#!/usr/bin/env bash
# Builds packrat and runs the whole test suite; exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build && OMP_NUM_THREADS=2 ctest --output-on-failure -j1 --timeout 900
