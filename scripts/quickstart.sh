#!/usr/bin/env bash
# Builds packrat and runs the main job: ResNet-20 on Fashion-MNIST (configs/quickstart.yaml).
# Extra arguments go to the trainer, e.g. --set train.epochs=1
set -euo pipefail
cd "$(dirname "$0")/.."
# The trainer chooses how idle OpenMP threads wait unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set:
# a short spin, then sleep (experiments/lib/trainer_main.h, docs/measurements-cpu.md).
./scripts/build.sh
exec build/bin/trainer --config configs/quickstart.yaml "$@"
