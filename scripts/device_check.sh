#!/usr/bin/env bash
# Every check of packrat that needs a GPU, in one run on a lent GPU machine (the device tool), from
# a checkout holding the bundle `../shared/tools/device-bundle --data` made of a CUDA build:
#
#   scripts/device_check.sh OUT [PHASE ...]     PHASE: tests, train, bench (default: all three)
#
# tests: the GPU test suites (every backend primitive against the CPU, the CUDA kernels' bytes
#        against the CPU kernels', the stores on GPU tensors, the CUDA training steps), in parallel;
# train: the quickstart on the GPU with FP32 and with 2-bit per-group storage, --find-max-batch;
# bench: packrat_bench's CUDA benchmarks, then bench/compare_torch.py --device cuda.
# Logs (one file per check) go to OUT/logs.tar.gz; a summary of each is printed at the end.
set -uo pipefail
dest=${1:?usage: scripts/device_check.sh OUT [tests|train|bench ...]}; shift
phases=${*:-tests train bench}
out=$(mktemp -d)/logs  # the device tool brings back at most 8 files: everything leaves as one archive
mkdir -p "$out" "$dest"
trap 'tar -C "$(dirname "$out")" -czf "$dest/logs.tar.gz" logs' EXIT
run=.device/run
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
$run packrat_tests --gtest_list_tests >/dev/null  # unpacks the bundle once, before the parallel runs

# One gtest filter per group, run side by side (the GPU has room; the CPU references use the cores).
declare -A groups=(
  [backend]='Backend*'
  [cuda_core]='CudaDevice.*:CudaElementwiseGpu.*:CudaRowsDevice.*:CudaKernels*'
  [quant]='StoreCuda.*:BitpackDevice.*:CodecBitExact.*:FewbitDevice.*:GactDevice.*:GroupQuantDevice.*:MixedQuantDevice.*:CodecDevice.*'
  [trainer]='CudaTrainer.*:BadInputs.ADeviceThatCannotTrainSaysWhy'
)

if [[ $phases == *tests* ]]; then
  for g in "${!groups[@]}"; do
    OMP_NUM_THREADS=4 timeout 200 $run packrat_tests --gtest_filter="${groups[$g]}" >"$out/tests_$g.log" 2>&1 &
  done
  OMP_NUM_THREADS=1 timeout 60 $run packrat_mpi_tests --gtest_filter='Nccl.*' >"$out/tests_nccl.log" 2>&1 &
fi
if [[ $phases == *train* ]]; then
  (
    for cfg in "fp32" "{scheme: actnn, bits: 2}"; do
      name=${cfg//[^a-z0-9]/}
      timeout 180 $run trainer --config configs/quickstart.yaml --set device=cuda --set threads=2 \
        --set "saved_tensors.default=$cfg" --set output.dir=/tmp/runs/q_$name --overwrite >"$out/train_$name.log" 2>&1 &
    done
    wait
    for r in /tmp/runs/q_*; do cp "$r/metrics.csv" "$out/$(basename "$r")_metrics.csv" 2>/dev/null; done
    for cfg in "fp32" "shipped"; do
      extra=(); [[ $cfg == fp32 ]] && extra=(--set saved_tensors.default=fp32 --set 'saved_tensors.rules=[]')
      timeout 45 $run trainer --config configs/resnet18_gelu_3bit.yaml --set device=cuda "${extra[@]}" \
        --find-max-batch 16G >"$out/maxbatch_$cfg.log" 2>&1
    done
  ) &
fi
wait

if [[ $phases == *bench* ]]; then
  timeout 100 $run packrat_bench --benchmark_filter='cuda|Cuda' --benchmark_min_time=1 >"$out/bench.log" 2>&1
  printf '#!/usr/bin/env bash\nexec %s/.device/run packrat_bench "$@"\n' "$PWD" >/tmp/packrat_bench
  chmod +x /tmp/packrat_bench
  PACKRAT_CUDA_TF32=1 PYTHONUNBUFFERED=1 timeout 120 python3 bench/compare_torch.py --device cuda --bench /tmp/packrat_bench \
    --rounds 2 >"$out/compare_torch.log" 2>&1
fi

echo "== summary"
for f in "$out"/tests_*.log; do
  [[ -f $f ]] || continue
  echo "-- $(basename "$f"): $(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$f" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] .*\(|Segmentation|terminate called|Aborted|what\(\)' "$f" | head -20
  grep -qE '^\[ +PASSED' "$f" || tail -n 5 "$f"  # a run that did not finish: its last words
done
for f in "$out"/train_*.log "$out"/maxbatch_*.log; do [[ -f $f ]] && { echo "-- $(basename "$f")"; tail -n 4 "$f"; }; done
for f in "$out"/bench.log "$out"/compare_torch.log; do [[ -f $f ]] && { echo "-- $(basename "$f")"; tail -n 30 "$f"; }; done
