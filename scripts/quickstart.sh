#!/usr/bin/env bash
# Builds packrat and runs the main job: ResNet-20 on Fashion-MNIST (configs/quickstart.yaml).
# Extra arguments go to the trainer, e.g. --set train.epochs=1
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP threads sleep at a barrier instead of spinning: 4-15x faster steps on a shared machine, no
# slower on a quiet one (docs/measurements-cpu.md, "Training step of EfficientNet, ViT and the GPT against PyTorch").
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
./scripts/build.sh
exec build/bin/trainer --config configs/quickstart.yaml "$@"
