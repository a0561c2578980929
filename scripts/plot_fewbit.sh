#!/usr/bin/env bash
# Plots each built-in activation's derivative f' with its 1- to 4-bit few-bit approximations
# (as the paper's figures 1 and 11) into docs/fewbit/<fn>.png, from the tables the library ships.
#
#   scripts/plot_fewbit.sh [build-dir] [out-dir]     (defaults: build, docs/fewbit)
#
# Needs gnuplot (Debian's gnuplot-nox) and the `fewbit` tool built in <build-dir>/bin.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$root/docs/fewbit}"
tool="$build/bin/fewbit"
[[ -x "$tool" ]] || { echo "plot_fewbit: $tool not found; build the 'fewbit' target first" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot_fewbit: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 2; }
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$tool" errors > "$tmp/errors.csv"
fns=$(tail -n +2 "$tmp/errors.csv" | cut -d, -f1 | uniq)

for fn in $fns; do
  "$tool" plot-data --fn "$fn" --from -6 --to 6 --step 0.004 > "$tmp/$fn.dat"
  # Per-panel titles carry the table error (eq. 3, uniform weight on [-10, 10]).
  titles=()
  for b in 1 2 3 4; do
    e=$(grep "^$fn,$b," "$tmp/errors.csv" | cut -d, -f3)
    titles+=("$b-bit (error $e)")
  done
  gnuplot <<GP
set terminal pngcairo size 1200,800 font "sans,11"
set output "$out/$fn.png"
set multiplot layout 2,2 title "$fn: f'(x) and its few-bit piecewise-constant approximations"
set grid
set key top left
set xrange [-6:6]
do for [b=1:4] {
  if (b == 1) { t = "${titles[0]}" }
  if (b == 2) { t = "${titles[1]}" }
  if (b == 3) { t = "${titles[2]}" }
  if (b == 4) { t = "${titles[3]}" }
  set title t
  plot "$tmp/$fn.dat" using 1:2 with lines lw 2 lc rgb "#1f77b4" title "f'(x)", \
       "$tmp/$fn.dat" using 1:(column(2+b)) with lines lw 2 lc rgb "#d62728" title sprintf("q, %d bit%s", b, b > 1 ? "s" : "")
}
unset multiplot
GP
  echo "plot_fewbit: wrote $out/$fn.png"
done
