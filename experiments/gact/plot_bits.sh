#!/usr/bin/env bash
# The bits GACT gave each saved tensor (the paper's Figure 3(a)), from a run's gact_bits.csv
# (step,index,layer,op,numel,sensitivity,bits; one block per refresh): the last refresh, bits and
# sensitivity per tensor in forward order.
#   experiments/gact/plot_bits.sh RUN_DIR [OUT.png]
#   e.g. experiments/gact/plot_bits.sh experiments/gact/results/gact_accuracy/small/runs/level=adapt2/seed0
set -euo pipefail
run=${1:?usage: plot_bits.sh RUN_DIR [OUT.png]}
out=${2:-$run/gact_bits.png}
csv=$run/gact_bits.csv
[[ -f $csv ]] || { echo "plot_bits.sh: $csv not found (a run with a gact-* storage level writes it)" >&2; exit 2; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
last=$(tail -n +2 "$csv" | cut -d, -f1 | sort -n | tail -n 1)
awk -F, -v s="$last" 'NR > 1 && $1 == s { print $2, $3 "(" $4 ")", $6, $7 }' "$csv" >"$tmp"
n=$(wc -l <"$tmp")
gnuplot <<GP
set terminal pngcairo size 1200,$((300 + 14 * n)) font ',9' noenhanced
set output '$out'
set multiplot layout 1,2 title 'GACT bits per saved tensor, refresh at step $last ($(basename "$run"))'
set yrange [-1:$n] reverse
set ytics nomirror font ',7'
set grid x
set style fill solid 0.7
set title 'bits'
set xrange [0:*]
plot '$tmp' using (\$4/2):0:(\$4/2):(0.4):ytic(2) with boxxyerror notitle
set title 'sensitivity (log)'
set logscale x
set xrange [*:*]
set format y ''
plot '$tmp' using (\$3 > 0 ? \$3 : 1e-20):0 with points pt 7 notitle
unset multiplot
GP
echo "plot_bits.sh: wrote $out"
