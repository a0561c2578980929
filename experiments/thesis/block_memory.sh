#!/usr/bin/env bash
# The thesis's Table 4.1: saved-activation memory per block, FP32 against 4-bit (and 2-bit),
# measured by the allocator on one training step (bytes per saved tensor, a tensor two ops save
# counted once) (trainer --memory-report-only), never from
# nominal sizes: the quantized columns include the per-bucket scales.
#   experiments/thesis/block_memory.sh [OUT_DIR] [ARCH] [BATCH]
#     defaults: experiments/thesis/results, efficientnet_v2_s (from the efficientnet branch),
#     batch 128 on CIFAR-10-shaped synthetic inputs (as the thesis's "per batch" table).
# A block is the layer name up to its second dot-separated part ("features.3.0.conv" -> "features.3",
# "layer2.1.conv1" -> "layer2.1"). With an architecture this build does not have, it says so and
# exits 2; e.g. ARCH=resnet20 for the small model.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/results}
arch=${2:-efficientnet_v2_s}
batch=${3:-128}
trainer=${TRAINER:-build/bin/trainer}
[[ -x $trainer ]] || { echo "block_memory.sh: $trainer not found" >&2; exit 2; }
mkdir -p "$out/scratch"
declare -A schemes=([fp32]="fp32" [4bit]="{scheme: mixed, base_bits: 4, mix_bits: 4, mix_prob: 0}"
                    [2bit]="{scheme: mixed, base_bits: 2, mix_bits: 2, mix_prob: 0}")
for s in fp32 4bit 2bit; do
  "$trainer" --config "$here/base.yaml" --set "model.arch=$arch" --set data.dataset=cifar10 \
    --set 'data.train_transforms=[]' --set "data.batch_size=$batch" --set "saved_tensors.default=${schemes[$s]}" \
    --set "output.dir=$out/scratch/$s" --memory-report-only >/dev/null 2>"$out/scratch/log" ||
    { echo "block_memory.sh: $(tail -n 1 "$out/scratch/log")" >&2; exit 2; }
  jq -r '.tensors[] | [(if .layer == "" then "(loss)" else (.layer | split(".") | .[0:2] | join(".")) end), .bytes] | @tsv' \
    "$out/scratch/$s/memory_report.json" | awk -v s="$s" -F'\t' '{ print $1 "\t" s "\t" $2 }'
done >"$out/scratch/all.tsv"
{
  echo "# Saved-activation memory by block: $arch, batch $batch, CIFAR-10 shape (MiB, allocator bytes)"
  echo
  echo "| block | FP32 | 4-bit | 2-bit | saved at 4-bit |"
  echo "|---|---|---|---|---|"
  awk -F'\t' '{ if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
                b[$1, $2] += $3; tb[$2] += $3 }
              END { m = 1048576
                    for (i = 1; i <= n; ++i) { k = order[i]
                      printf "| %s | %.2f | %.2f | %.2f | %.2f |\n", k, b[k, "fp32"] / m, b[k, "4bit"] / m,
                             b[k, "2bit"] / m, (b[k, "fp32"] - b[k, "4bit"]) / m }
                    printf "| **total** | %.2f | %.2f | %.2f | %.2f |\n", tb["fp32"] / m, tb["4bit"] / m,
                           tb["2bit"] / m, (tb["fp32"] - tb["4bit"]) / m }' "$out/scratch/all.tsv"
} >"$out/block_memory_$arch.md"
rm -rf "$out/scratch"
echo "block_memory.sh: wrote $out/block_memory_$arch.md"
