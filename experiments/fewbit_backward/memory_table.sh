#!/usr/bin/env bash
# The paper's appendix B memory table: per sample at 224x224, the bytes saved for backward by all
# ops and by the nonlinearities alone, in FP32 and with few-bit nonlinearities (2 bits; ReLU keeps
# its exact 1-bit mask), for ResNet-18/50, EfficientNet-B0 and ViT. Measured by the allocator
# (trainer --memory-report-only on synthetic inputs), never from nominal sizes.
#   experiments/fewbit_backward/memory_table.sh [OUT_DIR] [BATCH]   (default results/, batch 4)
# ARCHS overrides the models ("resnet18 resnet50 efficientnet_b0 vit_b_16"); a model that fails
# (e.g. one this build does not know) is listed as not measured, with the reason in memory_table.errors.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/results}
batch=${2:-4}
trainer=${TRAINER:-build/bin/trainer}
archs=${ARCHS:-resnet18 resnet50 efficientnet_b0 vit_b_16}
[[ -x $trainer ]] || { echo "memory_table.sh: $trainer not found" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out/memory_table.errors"
acts='["relu","gelu","silu","selu","sigmoid","tanh","softplus","elu","mish","hardswish"]'
csv=$out/memory_table.csv
echo "arch,scheme,batch,saved_bytes_per_sample,nonlinearity_bytes_per_sample" >"$csv"
for arch in $archs; do
  for scheme in fp32 fewbit2; do
    rules='[]'
    [[ $scheme == fewbit2 ]] && rules='[{ops: [relu, gelu, silu, selu, sigmoid, tanh, softplus, elu, mish], scheme: fewbit, bits: 2}]'
    dir=$out/scratch/$arch-$scheme
    own=()  # each model's own stem and activation, over base.yaml's CIFAR ResNet-20 with GELU
    case $arch in
      resnet*) own=(--set model.stem=imagenet) ;;
      efficientnet*) own=(--set model.stem=imagenet --set model.activation=silu) ;;
      vit_*) own=(--set 'model.stem=""') ;;  # a ViT has no stem option
    esac
    if ! "$trainer" --config "$here/base.yaml" --set "model.arch=$arch" "${own[@]}" --set data.dataset=cifar10 \
        --set 'data.train_transforms=["resize(224, 224)"]' --set "data.batch_size=$batch" \
        --set saved_tensors.default=fp32 --set "saved_tensors.rules=$rules" --set "output.dir=$dir" \
        --memory-report-only >"$out/scratch.log" 2>&1; then
      echo "$arch,$scheme,$batch,unavailable,unavailable" >>"$csv"
      echo "memory_table.sh: $arch ($scheme): $(tail -n 1 "$out/scratch.log")" | tee -a "$out/memory_table.errors" >&2
      continue
    fi
    jq -r --arg a "$arch" --arg s "$scheme" --argjson acts "$acts" '
      (.batch_size) as $b |
      [$a, $s, $b, (.totals.saved_bytes / $b),
       ([.tensors[] | select(.op as $o | $acts | index($o)) | .bytes] | add // 0) / $b] | @csv' \
      "$dir/memory_report.json" | tr -d '"' >>"$csv"
  done
done
rm -rf "$out/scratch" "$out/scratch.log"
{
  echo "# Saved-for-backward memory per sample at 224x224 (MiB; allocator bytes / batch $batch)"
  echo
  echo "| model | all, FP32 | nonlinearities, FP32 | all, few-bit 2-bit | nonlinearities, few-bit | saving | paper: all / nonlin. (Mb) |"
  echo "|---|---|---|---|---|---|---|"
  awk -F, 'NR > 1 { k = $1; if ($4 == "unavailable") { na[k] = 1; order[++n] = k; next }
                    a[k, $2] = $4 / 1048576; nl[k, $2] = $5 / 1048576; if ($2 == "fp32") order[++n] = k }
           END { # the paper'"'"'s appendix B table (per sample, 224x224; "Mb" as printed there)
                 paper["resnet18"] = "40.0 / 11.5"; paper["resnet50"] = "156.8 / 47.9"; paper["efficientnet_b0"] = "112.4 / 32.4"
                 for (i = 1; i <= n; ++i) { k = order[i]; if (k in seen) continue; seen[k] = 1
                   if (k in na) { print "| " k " | not measured: see memory_table.errors | | | | | " paper[k] " |"; continue }
                   printf "| %s | %.2f | %.2f | %.2f | %.2f | %.1f%% | %s |\n", k, a[k, "fp32"], nl[k, "fp32"],
                          a[k, "fewbit2"], nl[k, "fewbit2"], 100 * (1 - a[k, "fewbit2"] / a[k, "fp32"]), paper[k] } }' "$csv"
} >"$out/memory_table.md"
echo "memory_table.sh: wrote $csv and $out/memory_table.md"
