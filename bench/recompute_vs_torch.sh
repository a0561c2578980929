#!/usr/bin/env bash
# What recomputing every bottleneck costs a ResNet-50 training step, packrat's and PyTorch's, in
# one run (docs/recompute.md): packrat's step (trainer --benchmark, FP32 saves) without and with
# memory.recompute: [blocks], alternated REPEATS times, then bench/torch_recompute_step.py (the
# same model, optimizer, batch and input size; torch.utils.checkpoint around each block).
# Prints every packrat run, the medians and both ratios (step with recompute / step without).
# Usage: bench/recompute_vs_torch.sh [BATCH] [SIZE] [REPEATS] [STEPS]   (build/bin/trainer must exist)
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${1:-32}
size=${2:-112}
repeats=${3:-3}
steps=${4:-3}
trainer=build/bin/trainer
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(--config configs/quickstart.yaml --set model.arch=resnet50 --set model.stem=imagenet --set data.dataset=cifar10
      --set "data.train_transforms=[\"resize($size)\"]" --set data.batch_size="$batch" --set conv_algorithm=direct
      --set 'saved_tensors={default: fp32, rules: []}' --set output.dir="$out/run" --benchmark "$steps")
json() { grep '^{' "$1" | tail -1; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); ResNet-50, batch $batch, ${size}x${size}, $steps steps x $repeats"
: >"$out/plain.txt"
: >"$out/recompute.txt"
for r in $(seq 1 "$repeats"); do
  "$trainer" "${args[@]}" >"$out/a" 2>&1 || { cat "$out/a" >&2; exit 1; }
  "$trainer" "${args[@]}" --set 'memory.recompute=[blocks]' >"$out/b" 2>&1 || { cat "$out/b" >&2; exit 1; }
  echo "packrat run $r: plain $(json "$out/a")"
  echo "packrat run $r: recompute $(json "$out/b")"
  json "$out/a" >>"$out/plain.txt"
  json "$out/b" >>"$out/recompute.txt"
done
torch=$(/usr/bin/python3 bench/torch_recompute_step.py --batch "$batch" --size "$size" --steps "$steps" --repeats "$repeats")
echo "pytorch: $torch"
python3 - "$out/plain.txt" "$out/recompute.txt" "$torch" <<'EOF'
import json, statistics, sys
def step_ms(path):
    # img/s of the timed steps -> ms an image
    return [1e3 / json.loads(l)["img_per_s"] for l in open(path)]
plain, rc = statistics.median(step_ms(sys.argv[1])), statistics.median(step_ms(sys.argv[2]))
t = json.loads(sys.argv[3])
print(f"packrat: {plain:.2f} ms an image without, {rc:.2f} with recompute: {rc / plain:.2f}x")
print(f"pytorch: {t['plain_ms']:.0f} ms a step without, {t['recompute_ms']:.0f} with: {t['ratio']:.2f}x")
print(f"packrat's step against pytorch's: {plain * t['batch'] / t['plain_ms']:.2f}x without recompute, "
      f"{rc * t['batch'] / t['recompute_ms']:.2f}x with (below 1: packrat faster)")
EOF
