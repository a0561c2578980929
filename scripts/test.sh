#!/usr/bin/env bash
# Builds packrat and runs the whole test suite; exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP threads sleep at a barrier at once instead of spinning: tests run processes side by side
# (MPI ranks, trainers a test starts), where a spinning thread holds a core its sibling waits for
# (docs/measurements-cpu.md, "OpenMP threads spin briefly before they sleep").
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
./scripts/build.sh
cd build && OMP_NUM_THREADS=2 ctest --output-on-failure -j1 --timeout 900
