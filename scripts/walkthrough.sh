#!/usr/bin/env bash
# The walkthrough's table (docs/walkthrough.md): the bytes each op of configs/walkthrough.yaml keeps
# for backward, read from the memory report of one step under fp32, fewbit (3 bits), actnn (2 bits)
# and mixed storage, as the markdown rows the guide shows (a test checks the guide against a run).
#   scripts/walkthrough.sh [OUT_DIR]     (default: runs/walkthrough_table)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-runs/walkthrough_table}
trainer=${TRAINER:-$root/build/bin/trainer}
command -v jq >/dev/null || { echo "walkthrough.sh: jq not found (apt-get install jq)" >&2; exit 2; }
schemes=("fp32" "{scheme: fewbit, bits: 3}" "{scheme: actnn, bits: 2}" "{scheme: mixed}")
for i in "${!schemes[@]}"; do
  "$trainer" --config "$root/configs/walkthrough.yaml" --memory-report-only --set "saved_tensors.default=${schemes[$i]}" \
    --set "output.dir=$out/$i" >/dev/null 2>&1 || { echo "walkthrough.sh: the report under ${schemes[$i]} failed" >&2; exit 1; }
done
echo "| op | fp32 | fewbit 3 | actnn 2 | mixed |"
echo "|---|---:|---:|---:|---:|"
for op in $(jq -r '.ops[].op' "$out/0/memory_report.json"); do
  row="| $op"
  for i in "${!schemes[@]}"; do row+=" | $(jq -r --arg op "$op" '[.ops[] | select(.op == $op) | .bytes] | add // 0' "$out/$i/memory_report.json")"; done
  echo "$row |"
done
row="| total"
for i in "${!schemes[@]}"; do row+=" | $(jq -r '.totals.saved_bytes' "$out/$i/memory_report.json")"; done
echo "$row |"
