#!/usr/bin/env bash
# Builds packrat and runs the whole test suite; exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP threads sleep at a barrier instead of spinning: 4-15x faster steps on a shared machine, no
# slower on a quiet one (docs/measurements-cpu.md, "Training step of EfficientNet, ViT and the GPT against PyTorch").
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
./scripts/build.sh
cd build && OMP_NUM_THREADS=2 ctest --output-on-failure -j1 --timeout 900
