#!/usr/bin/env bash
# GACT's Figure 4 at small scale: training throughput against batch size for each storage level,
# and the largest batch whose training step fits in a memory budget (--find-max-batch), measured
# with the trainer on synthetic inputs of the dataset's shape (no data files needed).
#   experiments/gact/throughput.sh [OUT_DIR] [BUDGET]      (defaults: experiments/gact/results/throughput, 256M)
# Writes throughput.csv (level,batch,img_per_s,peak_bytes,saved_bytes), max_batch.csv
# (level,budget,max_batch,peak_bytes) and throughput.png. Environment: TRAINER (build/bin/trainer),
# BATCHES ("16 32 64 128 256"), STEPS (3), LEVELS ("gact-L0 gact-fix4 gact-L1 gact-adapt2"),
# SETS (extra --set overrides, e.g. "model.arch=resnet18 data.dataset=cifar10" for a larger model),
# PLOT_ONLY=1 (redraw throughput.png from the CSVs already in OUT_DIR).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/results/throughput}
budget=${2:-256M}
trainer=${TRAINER:-build/bin/trainer}
batches=${BATCHES:-16 32 64 128 256}
steps=${STEPS:-3}
levels=${LEVELS:-gact-L0 gact-fix4 gact-L1 gact-adapt2}
[[ -x $trainer ]] || { echo "throughput.sh: $trainer not found (build it: ninja -C build trainer)" >&2; exit 2; }
mkdir -p "$out"
sets=(--set "output.dir=$out/scratch")
for s in ${SETS:-}; do sets+=(--set "$s"); done

if [[ -z ${PLOT_ONLY:-} ]]; then
echo "level,batch,img_per_s,peak_bytes,saved_bytes" >"$out/throughput.csv"
echo "level,budget,max_batch,peak_bytes" >"$out/max_batch.csv"
for level in $levels; do
  for b in $batches; do
    json=$("$trainer" --config "$here/base.yaml" "${sets[@]}" --set "saved_tensors.default={scheme: $level}" \
      --set "data.batch_size=$b" --benchmark "$steps" 2>/dev/null | tail -n 1)
    echo "$level,$b,$(jq -r '[.img_per_s, .peak_bytes, .saved_bytes] | @csv' <<<"$json")" >>"$out/throughput.csv"
  done
  json=$("$trainer" --config "$here/base.yaml" "${sets[@]}" --set "saved_tensors.default={scheme: $level}" \
    --find-max-batch "$budget" 2>/dev/null | tail -n 1)
  echo "$level,$budget,$(jq -r '[.max_batch_size, .peak_bytes] | @csv' <<<"$json")" >>"$out/max_batch.csv"
done
rm -rf "$out/scratch"
fi

{
  echo "set terminal pngcairo size 1200,480 font ',10' noenhanced"
  echo "set output '$out/throughput.png'"
  echo "set datafile separator ','"
  echo "set multiplot layout 1,2"
  echo "set title 'training throughput vs batch size (synthetic inputs; $(nproc) shared cores)'"
  echo "set xlabel 'batch size'; set ylabel 'img/s'; set logscale x 2; set grid; set key top left"
  printf "plot "
  i=0
  for level in $levels; do
    ((i > 0)) && printf ", "
    printf "'%s' using (strcol(1) eq '%s' ? \$2 : NaN):3 with linespoints lw 2 title '%s'" "$out/throughput.csv" "$level" "$level"
    i=$((i + 1))
  done
  echo
  echo "unset logscale x; set title 'largest batch in $budget (--find-max-batch)'; set ylabel 'batch'; set xlabel ''"
  echo "set style data histograms; set style fill solid 0.7; set boxwidth 0.6; unset key; set yrange [0:*]"
  echo "plot '$out/max_batch.csv' using 3:xtic(1)"
  echo "unset multiplot"
} | gnuplot
echo "throughput.sh: wrote $out/throughput.csv, $out/max_batch.csv, $out/throughput.png"
