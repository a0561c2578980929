#!/usr/bin/env bash
# Data-parallel step benchmark (docs/distributed.md), side by side in one run:
#   A  mpiexec -np 2, 1 OpenMP thread per rank, gradient all-reduce overlapped with the backward
#   A' the same with distributed.overlap: false (every bucket reduced after the backward)
#   B  one process, 2 OpenMP threads, the same global batch
# run in turn (A A' B, REPEATS times) on synthetic inputs (trainer --benchmark). Prints every run's
# img/s, the time per step a rank waited for the reduction after its backward ("exposed": the
# reduction not hidden, plus waiting for the slower rank's backward), and the reduction alone
# (after a barrier: its cost C with nothing to hide it), then medians:
#   fraction of the reduction hidden behind the backward = the gradient bytes whose all-reduce
#     had completed when the backward ended (counted by the reducer in every timed step; a
#     reduction still running then counts as not hidden, so this is a lower bound). Unlike
#     exposed(A') - exposed(A), it does not drown in the ranks' skew on a shared machine.
#   step-time ratio 2 ranks x 1 thread / 1 rank x 2 threads = img/s(B) / img/s(A)
# Usage: bench/data_parallel_bench.sh [CONFIG] [STEPS] [REPEATS]   (build/bin/trainer must exist)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/quickstart.yaml}
steps=${2:-20}
repeats=${3:-5}
trainer=build/bin/trainer
mpi=(mpiexec -np 2 --oversubscribe --allow-run-as-root --bind-to none -x OMP_WAIT_POLICY=passive)
out=$(mktemp -d)
json() { grep '^{' "$1" | tail -1; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], 0))" "$1" "$2"; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); config $config, $steps steps"
printf '%-4s %-34s %10s %22s %16s %20s %22s\n' run variant img/s exposed_reduce_ms/step reduce_alone_ms started_in_backward \
  completed_in_backward
for r in $(seq 1 "$repeats"); do
  "${mpi[@]}" "$trainer" --config "$config" --benchmark "$steps" --set threads=1 --set output.dir="$out/a" >"$out/a$r" 2>&1
  "${mpi[@]}" "$trainer" --config "$config" --benchmark "$steps" --set threads=1 --set distributed.overlap=false \
    --set output.dir="$out/b" >"$out/n$r" 2>&1
  OMP_WAIT_POLICY=passive "$trainer" --config "$config" --benchmark "$steps" --set threads=2 --set output.dir="$out/c" \
    >"$out/s$r" 2>&1
  for v in a n s; do
    j=$(json "$out/$v$r")
    case $v in a) name="2 ranks x 1 thread, overlap";; n) name="2 ranks x 1 thread, no overlap";; s) name="1 rank x 2 threads";; esac
    printf '%-4s %-34s %10.1f %22.3f %16.3f %20.2f %22.2f\n' "$r" "$name" "$(field "$j" img_per_s)" \
      "$(python3 -c "print(1000*float('$(field "$j" exposed_reduce_s_per_step)'))")" \
      "$(python3 -c "print(1000*float('$(field "$j" reduce_alone_s)'))")" "$(field "$j" started_in_backward)" \
      "$(field "$j" completed_in_backward)"
    echo "$r $v $(field "$j" img_per_s) $(field "$j" exposed_reduce_s_per_step) $(field "$j" reduce_alone_s) $(field "$j" started_in_backward) $(field "$j" completed_in_backward)" >>"$out/all"
  done
done
python3 - "$out/all" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(v, k): return statistics.median(float(r[k]) for r in rows if r[1] == v)
ips_a, ips_n, ips_s = med("a", 2), med("n", 2), med("s", 2)
exp_a, exp_n = med("a", 3), med("n", 3)
alone = statistics.median([float(r[4]) for r in rows if r[1] in "an"])
print(f"median img/s: 2x1 overlap {ips_a:.1f}, 2x1 no overlap {ips_n:.1f}, 1x2 {ips_s:.1f}")
print(f"median exposed wait per step: overlap {1000*exp_a:.3f} ms, no overlap {1000*exp_n:.3f} ms; "
      f"the reduction alone {1000*alone:.3f} ms")
print(f"gradient bytes whose all-reduce started during the backward (overlap): {med('a', 5):.2f}")
hidden = sorted(float(r[6]) for r in rows if r[1] == "a")
print(f"fraction of the reduction hidden behind the backward (bytes reduced before it ended; overlap): "
      f"{med('a', 6):.2f} (range {hidden[0]:.2f}-{hidden[-1]:.2f}); without overlap: {med('n', 6):.2f}")
print(f"step time 2 ranks x 1 thread / 1 rank x 2 threads: {ips_s / ips_a:.2f}")
PY
rm -rf "$out"
