#!/usr/bin/env bash
# The memory levers side by side (docs/recompute.md): for one model, under L0 (FP32 saves),
# gact-L1 (adaptive 4-bit storage), recomputation of every block alone (memory.recompute:
# [blocks], FP32 saves) and gact-CB1 (both), the largest batch whose training step fits in
# BUDGET bytes of tensor memory (trainer --find-max-batch: the allocator's limit counts every
# tagged byte) and the training throughput at that batch (trainer --benchmark STEPS: forward,
# recompute and backward ms per step), in one run on synthetic inputs. GACT's levels allocate
# their bits as training does: every tensor's sensitivity estimated at the first refresh, on 8
# samples (the search's warm-up and the benchmark's, as experiments/frontier/frontier.py does).
# Prints a Markdown table with each level's batch and throughput against L0's.
# Usage: bench/recompute_levels.sh resnet50|vit [BUDGET] [STEPS]   (build/bin/trainer must exist)
#   resnet50: torchvision's ResNet-50 on 112x112 inputs (CIFAR-10's images resized), conv_algorithm direct
#   vit:      vit_tiny_cifar (32x32, patch 4, 6 blocks of width 192) on CIFAR-10-shaped inputs
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/recompute_levels.sh resnet50|vit [BUDGET] [STEPS]}
budget=${2:-1G}
steps=${3:-3}
trainer=build/bin/trainer
case "$model" in
  resnet50) base=(--config configs/quickstart.yaml --set model.arch=resnet50 --set model.stem=imagenet
                  --set data.dataset=cifar10 --set 'data.train_transforms=["resize(112)"]' --set conv_algorithm=direct) ;;
  vit) base=(--config configs/vit_cifar10.yaml --set 'data.train_transforms=[]') ;;
  *) echo "recompute_levels: unknown model '$model' (resnet50 or vit)" >&2; exit 2 ;;
esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
levels=("L0|saved_tensors={default: fp32, rules: []}"
        "gact-L1|saved_tensors={default: gact-L1, rules: []}"
        "recompute|saved_tensors={default: fp32, rules: []}|memory.recompute=[blocks]"
        "gact-CB1|saved_tensors={default: gact-CB1, rules: []}")
json() { grep '^{' "$1" | tail -1; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); model $model, budget $budget, $steps timed steps"
echo
echo "| level | max batch in $budget | x L0 | img/s at that batch | x L0 | forward / recompute / backward ms a step |"
echo "|---|---|---|---|---|---|"
l0_batch=0
l0_ips=0
for level in "${levels[@]}"; do
  IFS='|' read -r name sets extra <<<"$level"
  args=("${base[@]}" --set "$sets" --set output.dir="$out/run")
  [ -n "${extra:-}" ] && args+=(--set "$extra")
  "$trainer" "${args[@]}" --find-max-batch "$budget" >"$out/find" 2>&1 || { cat "$out/find" >&2; exit 1; }
  batch=$(field "$(json "$out/find")" max_batch_size)
  "$trainer" "${args[@]}" --set data.batch_size="$batch" --benchmark "$steps" >"$out/bench" 2>&1 || { cat "$out/bench" >&2; exit 1; }
  b=$(json "$out/bench")
  ips=$(field "$b" img_per_s)
  if [ "$name" = L0 ]; then l0_batch=$batch; l0_ips=$ips; fi
  python3 - "$name" "$batch" "$l0_batch" "$ips" "$l0_ips" "$b" <<'EOF'
import json, sys
name, batch, l0_batch, ips, l0_ips, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), json.loads(sys.argv[6])
print(f"| {name} | {batch} | {batch / l0_batch:.2f}x | {ips:.1f} | {ips / l0_ips:.2f}x | "
      f"{b['forward_ms']:.0f} / {b['recompute_ms']:.0f} / {b['backward_ms']:.0f} |")
EOF
done
