#!/usr/bin/env bash
# The paper's Table 3 (Few-Bit Backward, arXiv:2202.00441, appendix C: the error of eq. 3 with uniform
# weight on [-10, 10], 1-4 bits), computed now by `fewbit errors` (each table solved by the DP
# solver, eq. 3 integrated from it), written as errors.csv and a Markdown table errors.md.
#   experiments/fewbit_backward/errors.sh [OUT_DIR]     (default: experiments/fewbit_backward/results)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/results}
fewbit=${FEWBIT:-build/bin/fewbit}
[[ -x $fewbit ]] || { echo "errors.sh: $fewbit not found (ninja -C build fewbit)" >&2; exit 2; }
mkdir -p "$out"
"$fewbit" errors >"$out/errors.csv"
{
  echo "# Few-bit approximation error (eq. 3, uniform weight on [-10, 10])"
  echo
  echo "Computed by \`$fewbit errors\` (each table solved now by the DP solver; \`shipped\` is the same integral"
  echo "for the table compiled into packrat). The paper's Table 3 gives these numbers; its values are withheld"
  echo "in the copy this project worked from, so no paper column."
  echo
  echo "| function | 1 bit | 2 bits | 3 bits | 4 bits |"
  echo "|---|---|---|---|---|"
  awk -F, 'NR > 1 { v[$1] = v[$1] sprintf(" %.4g |", $3); if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
           END { for (i = 1; i <= n; ++i) print "| " order[i] " |" v[order[i]] }' "$out/errors.csv"
  echo
  echo "Largest difference between the solved and the shipped table's error: $(awk -F, 'NR > 1 { d = $3 - $5; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m }' "$out/errors.csv")."
} >"$out/errors.md"
echo "errors.sh: wrote $out/errors.csv and $out/errors.md"
