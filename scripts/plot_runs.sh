#!/usr/bin/env bash
# Draws one PNG comparing trainer run directories: train loss, accuracy and learning rate by
# step (steps.csv, written every train.log_interval steps; metrics.csv's per-epoch rows where a
# run has no steps.csv), test accuracy at each evaluation (metrics.csv), and the bytes saved for backward per storage scheme in one training step
# (from saved_by_scheme.tsv, written with memory_report.json).
#   scripts/plot_runs.sh runs/compare.png runs/quickstart runs/quickstart_fewbit ...
# Needs gnuplot (Debian gnuplot-nox).
set -euo pipefail
if (($# < 2)); then
  echo "usage: $0 OUT.png RUN_DIR [RUN_DIR ...]" >&2
  exit 2
fi
out=$1
shift
command -v gnuplot >/dev/null || { echo "plot_runs: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
for d in "$@"; do
  [[ -f "$d/metrics.csv" ]] || { echo "plot_runs: $d/metrics.csv not found (not a trainer run directory?)" >&2; exit 2; }
done

# A run's name in the legends: its directory's name, with the parent's for a sweep's seedN runs.
label() {
  local b
  b=$(basename "$1")
  [[ $b == seed[0-9]* ]] && b="$(basename "$(dirname "$1")")/$b"
  printf '%s' "$b"
}

# The file a run's curves by step come from: steps.csv, or metrics.csv's per-epoch rows without it.
curve_of() {
  if [[ -f "$1/steps.csv" ]]; then printf '%s' "$1/steps.csv"; else printf '%s' "$1/metrics.csv"; fi
}

# One gnuplot `plot` of column expression $1 by step, a line per run (the runs follow). Run i is
# drawn in colour i + 1 in every panel, whatever the panel's other curves.
plot_by_step() {
  local expr=$1 i=0 d
  shift
  printf "plot "
  for d in "$@"; do
    ((i > 0)) && printf ", "
    printf "'%s' using (column('step')):(%s) with lines lw 1.5 lc %d title '%s'" "$(curve_of "$d")" "$expr" \
      $((i + 1)) "$(label "$d")"
    i=$((i + 1))
  done
  echo
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Saved bytes per scheme: one row per run, one column per scheme (MiB), for a stacked histogram.
# (`if`, not `[[ ]] &&`: under pipefail a run without the file would fail the pipeline and end the script.)
schemes=$(for d in "$@"; do if [[ -f "$d/saved_by_scheme.tsv" ]]; then tail -n +2 "$d/saved_by_scheme.tsv" | cut -f1; fi; done | sort -u)
{
  printf 'run'
  for s in $schemes; do printf '\t%s' "$s"; done
  printf '\n'
  for d in "$@"; do
    printf '%s' "$(label "$d")"
    for s in $schemes; do
      b=0
      if [[ -f "$d/saved_by_scheme.tsv" ]]; then b=$(awk -F'\t' -v s="$s" '$1 == s { print $2 }' "$d/saved_by_scheme.tsv"); fi
      awk -v b="${b:-0}" 'BEGIN { printf "\t%.3f", b / 1048576 }'
    done
    printf '\n'
  done
} >"$tmp/schemes.tsv"
nschemes=$(echo "$schemes" | grep -c . || true)

{
  echo "set terminal pngcairo size 1400,900 font ',10' noenhanced"
  echo "set output '$out'"
  echo "set datafile separator ','"
  echo "set key top right"
  echo "set grid"
  echo "set multiplot layout 2,2"
  echo "set title 'train loss'; set xlabel 'step'; set ylabel 'loss'"
  plot_by_step "column('train_loss')" "$@"
  echo "set title 'accuracy (lines: train by step, points: test)'; set ylabel 'accuracy (%)'; set key bottom right"
  printf "plot "
  i=0
  for d in "$@"; do
    ((i > 0)) && printf ", "
    printf "'%s' using (column('step')):(100*column('train_acc')) with lines lw 1.5 lc %d title '%s train', " \
      "$(curve_of "$d")" $((i + 1)) "$(label "$d")"
    printf "'%s' using (column('step')):(100*column('test_acc')) with points pt 7 ps 1.2 lc %d title '%s test'" \
      "$d/metrics.csv" $((i + 1)) "$(label "$d")"
    i=$((i + 1))
  done
  echo
  echo "set title 'learning rate'; set ylabel 'lr'; set key top right"
  plot_by_step "column('lr')" "$@"
  echo "set datafile separator '\t'"
  echo "set title 'saved for backward, one step'; set xlabel ''; set ylabel 'MiB'; set key top right"
  echo "set style data histograms; set style histogram rowstacked; set style fill solid 0.8 border -1"
  echo "set boxwidth 0.6; set xtics rotate by -20; unset grid; set grid ytics"
  if ((nschemes > 0)); then
    echo "plot for [c=2:$((nschemes + 1))] '$tmp/schemes.tsv' using c:xtic(1) title columnheader(c)"
  else
    echo "set label 'no saved_by_scheme.tsv in the runs' at graph 0.2, 0.5; plot NaN notitle"
  fi
  echo "unset multiplot"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "plot_runs: wrote $out"
