#!/usr/bin/env bash
# GACT's level L2 on a GPU: the largest batch whose step fits in a memory budget (--find-max-batch)
# and the throughput at that batch, for plain training (gact-L0), compression (gact-L1),
# compression then offload (gact-L2), and offload without compression ("offload-fp32": every FP32
# saved tensor moved, the plain swap GACT beat), side by side for ResNet-50 at 224 and a BERT
# encoder; and how much of the copy streams' time the compute hid: gact-L1 and gact-L2 timed at
# gact-L1's largest batch, hidden = 1 - (t_L2 - t_L1) / copy time, the copy time from CUDA events.
#   experiments/gact/offload.sh [OUT_DIR] [BUDGET]   (defaults: experiments/gact/results/offload, 16G)
# Writes offload.csv (model,level,budget,max_batch,img_per_s,peak_bytes,copy_busy_ms,synchronous_loads)
# and hidden.csv (model,batch,step_ms_l1,step_ms_l2,copy_ms,hidden). Needs a GPU (memory.offload
# refuses the CPU). Environment: TRAINER (build/bin/trainer), DEVICE (cuda:0), STEPS (5), MODELS
# ("resnet50 bert"), LEVELS ("gact-L0 gact-L1 gact-L2 offload-fp32").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/results/offload}
budget=${2:-16G}
read -r -a trainer <<<"${TRAINER:-build/bin/trainer}"  # a command: ".device/run trainer" on a lent GPU
device=${DEVICE:-cuda:0}
steps=${STEPS:-5}
models=${MODELS:-resnet50 bert}
levels=${LEVELS:-gact-L0 gact-L1 gact-L2 offload-fp32}
[[ -x ${trainer[0]} ]] || { echo "offload.sh: ${trainer[0]} not found (build it: make -C build trainer)" >&2; exit 2; }
mkdir -p "$out"

# The model's config and overrides: synthetic inputs of the dataset's shape, no data files read.
model_args() {
  case $1 in
    resnet50) echo "--config $here/base.yaml --set model.arch=resnet50 --set model.stem=imagenet \
--set data.dataset=image_folder --set data.root=/nonexistent --set data.height=224 --set data.width=224 \
--set data.channels=3 --set model.classes=1000 --set data.train_transforms=[] --set data.test_transforms=[]" ;;
    bert) echo "--config $root/configs/bert_fortunes.yaml --set model.arch=bert_base --set data.seq_len=512" ;;
    *) echo "offload.sh: unknown model '$1' (resnet50, bert)" >&2; exit 2 ;;
  esac
}
level_args() {  # offload-fp32: FP32 storage, every saved tensor offloaded
  if [[ $1 == offload-fp32 ]]; then echo "--set saved_tensors.default=fp32 --set memory.offload={}"
  else echo "--set saved_tensors.default=$1"; fi
}
run() { "${trainer[@]}" $(model_args "$1") --set device=$device --set output.dir=$out/scratch $(level_args "$2") "${@:3}" 2>/dev/null | tail -n 1; }

echo "model,level,budget,max_batch,img_per_s,peak_bytes,copy_busy_ms,synchronous_loads" >"$out/offload.csv"
echo "model,batch,step_ms_l1,step_ms_l2,copy_ms,hidden" >"$out/hidden.csv"
for m in $models; do
  declare -A max=()
  for level in $levels; do
    max[$level]=$(run "$m" "$level" --find-max-batch "$budget" | jq -r .max_batch_size)
    json=$(run "$m" "$level" --set "data.batch_size=${max[$level]}" --benchmark "$steps")
    echo "$m,$level,$budget,${max[$level]},$(jq -r '[.img_per_s, .peak_bytes, (.offload.copy_busy_ms // 0),
      (.offload.synchronous_loads // 0)] | @csv' <<<"$json")" >>"$out/offload.csv"
  done
  b=${max[gact-L1]:-}
  if [[ -n $b ]]; then
    l1=$(run "$m" gact-L1 --set "data.batch_size=$b" --benchmark "$steps")
    l2=$(run "$m" gact-L2 --set "data.batch_size=$b" --benchmark "$steps")
    jq -rn --argjson a "$l1" --argjson c "$l2" --arg m "$m" --arg b "$b" '
      ($a.batch_size / $a.img_per_s * 1000) as $t1 | ($c.batch_size / $c.img_per_s * 1000) as $t2 |
      $c.offload.copy_busy_ms as $copy |
      [$m, $b, $t1, $t2, $copy, (if $copy > 0 then 1 - ([($t2 - $t1), 0] | max) / $copy else null end)] | @csv' \
      >>"$out/hidden.csv"
  fi
  unset max
done
rm -rf "$out/scratch"
column -s, -t "$out/offload.csv"; echo; column -s, -t "$out/hidden.csv"
