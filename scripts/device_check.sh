#!/usr/bin/env bash
# Every check of packrat that needs a GPU, in one run on a lent GPU machine (the device tool), from
# a checkout holding the bundle `../shared/tools/device-bundle --data` made of a CUDA build:
#
#   scripts/device_check.sh OUT [PHASE ...]     (default: tests train codec step layouts torch)
#
# tests:   the GPU test suites (every backend primitive against the CPU, the CUDA kernels' bytes
#          against the CPU kernels', the stores on GPU tensors, the CUDA training steps), in
#          parallel; again for plain NCHW convolutions;
# train:   the quickstart on the GPU with FP32 (seed 0) and with 2-bit per-group storage (seeds 0, 1
#          and 2, against the CPU's runs of the same seeds), --find-max-batch;
# codec:   the codec kernels against copy bandwidth;
# step:    the ResNet-18 step (FP32, few-bit 3, ActNN 2; batch 128, 512) with TF32 convolutions, as
#          PyTorch's default;
# layouts: the step at 512 with exact f32, and in NCHW;
# torch:   bench/compare_torch.py --device cuda at batch 128 and 512 (TF32);
# ncu:     Nsight Compute's time of every kernel of 4 timed ResNet-18 steps at batch 512 (FP32 and
#          ActNN 2-bit storage, or NCU_SCHEMES; the warm-up left out), by name, and of PyTorch's 4
#          timed steps (the same FP32 step); ncu_packrat: packrat's only;
# kernels: Nsight Compute's detailed sections (speed of light, memory, occupancy, warp stalls by
#          source line) for the codec kernels and the batchnorm and activation kernels of the step;
# nhwc:    the same sections for the NHWC codec kernels (quantize and decode, per plane and per
#          sample), and with EXPERIMENT the quantizes again with it;
# ab:      packrat_bench against packrat_bench.variant (scripts/bench_variant.sh: another revision's),
#          AB_FILTER's benchmarks (default: the plain and NHWC per-group codecs and the ResNet-18
#          step at 512, FP32 and ActNN 2-bit), in alternating rounds A B A B, so that both are
#          measured in one run; with
#          EXPERIMENT (NAME=VALUE: a kernel an environment variable picks, while both are measured),
#          the variant is this packrat_bench with EXPERIMENT set, and the tests phase runs the codec
#          and store suites (or EXPERIMENT_TESTS) again with it. The next GPU: the 16-bit convolutions,
#          EXPERIMENT=PACKRAT_CUDA_CONV=half EXPERIMENT_TESTS='BackendConv.*:CudaTrainer.Bf16*'
#          LEVERS=bf16 scripts/device_check.sh OUT tests levers;
# offload: experiments/gact/offload.sh (GACT's L2): --find-max-batch and img/s for ResNet-50 and
#          BERT-base at L0, gact-L1, gact-L2 and offloaded FP32, and the copy time hidden;
# levers:  the memory levers on the GPU beside PyTorch's, in one run (LEVERS: resnet offload bert, or bf16):
#          resnet, the ResNet-18 step at 512 (FP32 saves) plain, under bf16 autocast and with every
#          block recomputed, against bench/torch_train_step.py plain, --autocast bf16 and --lever
#          checkpoint; offload, every saved tensor offloaded (in_flight_bytes 256 MiB and 0) against
#          --lever save_on_cpu, and gact-L1 / gact-L2; bert, the BERT-base step at sequence 512 with
#          standard and memory-efficient attention (and bf16) against bench/torch_bert_step.py's
#          scaled_dot_product_attention kernels, and the largest BERT-base batch in 16 GiB,
#          standard, memory-efficient and gact-CB2 (the fortune files: the machine's, or a copy
#          in .device/fortunes);
#          bf16, the ResNet-18 step at 512 in FP32, bf16 (and with EXPERIMENT, e.g.
#          PACKRAT_CUDA_CONV=half, and both with 2-bit storage) against --autocast bf16, and
#          BERT-base's (standard attention) against torch_bert_step.py's;
# plan:    memory.plan: auto on the ResNet-18 step at 512 in PLAN_BUDGET (1500M), 10 timed steps;
# timeline: Nsight Systems' trace of 4 timed FP32 steps at batch 512 and of PyTorch's 4, at
#          the GPU's own clocks: how much of the step the GPU is busy (kernels and copies, overlaps
#          merged) and how long it waits between launches, i.e. whether the step is bound by its
#          kernels or by the host. Needs `nsys`, which the lent H100 machine did not have on
#          2026-11-26 (not on PATH, nothing under /opt or /usr/local): there it logs just that.
# Logs (one file per check) go to OUT/logs.tar.gz; a summary of each is printed at the end.
set -uo pipefail
dest=${1:?usage: scripts/device_check.sh OUT [tests|train|bench ...]}; shift
phases=${*:-tests train codec step layouts torch}
out=$(mktemp -d)/logs  # the device tool brings back at most 8 files: everything leaves as one archive
mkdir -p "$out" "$dest"
trap 'tar -C "$(dirname "$out")" -czf "$dest/logs.tar.gz" logs' EXIT
trap 'exit 143' TERM INT  # a run cut short by its time limit still packs the logs it has
run=.device/run
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
$run packrat_tests --gtest_list_tests >/dev/null  # unpacks the bundle once, before the parallel runs

# One gtest filter per group, run side by side (the GPU has room; the CPU references use the cores).
declare -A groups=(
  [backend]='Backend*'
  [cuda_core]='CudaDevice.*:CudaElementwiseGpu.*:CudaRowsDevice.*:CudaKernels*'
  [quant]='StoreCuda.*:BitpackDevice.*:CodecBitExact.*:FewbitDevice.*:GactDevice.*:GroupQuantDevice.*:MixedQuantDevice.*:CodecDevice.*:GroupApplyDerivative*:MixedApplyDerivative*'
  [trainer]='CudaTrainer.*:BadInputs.ADeviceThatCannotTrainSaysWhy'
)

if [[ $phases == *tests* ]]; then
  for g in "${!groups[@]}"; do
    OMP_NUM_THREADS=4 timeout 200 $run packrat_tests --gtest_filter="${groups[$g]}" >"$out/tests_$g.log" 2>&1 &
  done
  if [[ -n ${EXPERIMENT:-} ]]; then  # EXPERIMENT_TESTS (default: the codec and store suites) again with it
    env "$EXPERIMENT" OMP_NUM_THREADS=4 timeout 200 $run packrat_tests --gtest_filter="${EXPERIMENT_TESTS:-${groups[quant]}}" \
      >"$out/tests_experiment.log" 2>&1 &
  fi
  # The plain NCHW path of the convolutions (PACKRAT_CUDA_LAYOUT=nchw).
  PACKRAT_CUDA_LAYOUT=nchw OMP_NUM_THREADS=4 timeout 200 $run packrat_tests \
    --gtest_filter='Backend*:CudaTrainer.ResNet20StepMatchesTheCpuStep' >"$out/tests_nchw.log" 2>&1 &
  if [[ -x /tmp/packrat-bundle/bin/packrat_mpi_tests ]]; then  # where .device/run unpacks the bundle
    OMP_NUM_THREADS=1 timeout 60 $run packrat_mpi_tests --gtest_filter='Nccl.*' >"$out/tests_nccl.log" 2>&1 &
  else  # a bundle made without it, to fit the device tool's 64 MiB
    echo "packrat_mpi_tests is not in the bundle: the NCCL tests did not run" >"$out/tests_nccl.log"
  fi
fi
if [[ $phases == *train* ]]; then
  (
    for run_of in "fp32 0" "{scheme: actnn, bits: 2} 0" "{scheme: actnn, bits: 2} 1" "{scheme: actnn, bits: 2} 2"; do
      cfg=${run_of% *} seed=${run_of##* } name=${run_of//[^a-z0-9]/}
      timeout 180 $run trainer --config configs/quickstart.yaml --set device=cuda --set threads=2 --set seed=$seed \
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

step=TrainStep/resnet18_cifar_gelu_cuda
export PACKRAT_CUDA_TF32=1  # TF32 convolutions, PyTorch's default
if [[ $phases == *offload* ]]; then
  TRAINER="$run trainer" timeout 400 experiments/gact/offload.sh "$out/offload" 40G >"$out/offload.log" 2>&1
fi
if [[ $phases == *codec* ]]; then
  timeout 80 $run packrat_bench --benchmark_filter=CodecCuda --benchmark_min_time=1 >"$out/bench_codec.log" 2>&1
fi
if [[ $phases == *step* ]]; then
  timeout 120 $run packrat_bench --benchmark_filter="$step" --benchmark_min_time=1 >"$out/bench_step.log" 2>&1
fi
if [[ $phases == *layouts* ]]; then
  PACKRAT_CUDA_TF32=0 timeout 60 $run packrat_bench --benchmark_filter="$step.*/512" --benchmark_min_time=1 \
    >"$out/bench_step_f32.log" 2>&1
  PACKRAT_CUDA_LAYOUT=nchw timeout 60 $run packrat_bench --benchmark_filter="$step/512" --benchmark_min_time=1 \
    >"$out/bench_step_nchw.log" 2>&1
fi
if [[ $phases == *torch* ]]; then
  printf '#!/usr/bin/env bash\nexec %s/.device/run packrat_bench "$@"\n' "$PWD" >/tmp/packrat_bench
  chmod +x /tmp/packrat_bench
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/compare_torch.py --device cuda --bench /tmp/packrat_bench \
    --name $step/128 --name $step/512 --rounds 2 >"$out/compare_torch.log" 2>&1
fi
if [[ " $phases " == *" ab "* ]]; then
  if [[ -n ${EXPERIMENT:-} || -x /tmp/packrat-bundle/bin/packrat_bench.variant ]]; then
    if [[ -n ${EXPERIMENT:-} ]]; then
      echo "ab: the variant is packrat_bench with $EXPERIMENT" | tee "$out/ab.txt"
    else
      echo "ab: the variant is $(cat /tmp/packrat-bundle/bin/packrat_bench.variant.rev 2>/dev/null)" | tee "$out/ab.txt"
    fi
    for round in 1 2; do
      for side in base variant; do
        cmd=($run packrat_bench)
        if [[ $side == variant ]]; then
          [[ -n ${EXPERIMENT:-} ]] && cmd=(env "$EXPERIMENT" $run packrat_bench) || cmd=($run packrat_bench.variant)
        fi
        timeout 90 "${cmd[@]}" --benchmark_filter="${AB_FILTER:-CodecCuda/Group(Nhwc|Quantize)|$step(_actnn2)?/512}" \
          --benchmark_min_time=0.7 >"$out/bench_ab_${round}_$side.log" 2>&1
      done
    done
  else
    echo "packrat_bench.variant is not in the bundle (scripts/bench_variant.sh)" >"$out/bench_ab_missing.log"
  fi
fi
if [[ $phases == *levers* ]]; then  # LEVERS: which of resnet, offload, bert (default: all three)
  resnet=(--config configs/resnet18_gelu_3bit.yaml --set device=cuda --set saved_tensors.default=fp32
          --set 'saved_tensors.rules=[]' --set data.batch_size=512 --set output.dir=/tmp/runs/levers --benchmark 10)
  fortunes=/usr/share/games/fortunes; [[ -d $fortunes ]] || fortunes=.device/fortunes  # copied there with the bundle
  bert=(--config configs/bert_fortunes.yaml --set model.arch=bert_base --set data.seq_len=512 --set device=cuda
        --set data.root=$fortunes --set output.dir=/tmp/runs/levers)
  torch_resnet=(python3 bench/torch_train_step.py --device cuda --batch 512 --steps 20 --warmup 5)
  lever() {  # NAME TIMEOUT COMMAND...: the command's last line, as "NAME JSON"
    local name=$1 limit=$2; shift 2
    echo "$name $(timeout "$limit" "$@" 2>>"$out/levers.err" | tail -n 1)" | tee -a "$out/levers.txt"
  }
  levers=${LEVERS:-resnet offload bert}
  if [[ $levers == *resnet* ]]; then
    for r in 1 2; do  # two rounds, packrat and PyTorch alternating
      lever "packrat_resnet18_fp32" 40 $run trainer "${resnet[@]}"
      lever "torch_resnet18_fp32" 60 "${torch_resnet[@]}"
      [[ $r == 2 ]] && break
      lever "packrat_resnet18_bf16" 40 $run trainer "${resnet[@]}" --set precision=bf16
      [[ -n ${EXPERIMENT:-} ]] &&
        lever "packrat_resnet18_bf16_$EXPERIMENT" 40 env "$EXPERIMENT" $run trainer "${resnet[@]}" --set precision=bf16
      lever "torch_resnet18_bf16" 60 "${torch_resnet[@]}" --autocast bf16
      lever "packrat_resnet18_recompute" 40 $run trainer "${resnet[@]}" --set 'memory.recompute=[blocks]'
      lever "torch_resnet18_checkpoint" 60 "${torch_resnet[@]}" --lever checkpoint
    done
  fi
  if [[ $levers == *offload* ]]; then
    lever "packrat_resnet18_fp32" 40 $run trainer "${resnet[@]}"
    lever "packrat_resnet18_offload" 40 $run trainer "${resnet[@]}" --set 'memory.offload={}'
    lever "packrat_resnet18_offload_in_flight0" 40 $run trainer "${resnet[@]}" --set 'memory.offload={in_flight_bytes: 0}'
    lever "torch_resnet18_save_on_cpu" 60 "${torch_resnet[@]}" --lever save_on_cpu
    lever "packrat_resnet18_gact-L1" 40 $run trainer "${resnet[@]}" --set saved_tensors.default=gact-L1
    lever "packrat_resnet18_gact-L2" 40 $run trainer "${resnet[@]}" --set saved_tensors.default=gact-L2
  fi
  if [[ $levers == *bf16* ]]; then  # bf16 autocast (convolutions and matmuls on TF32 tensor cores)
    for r in 1 2; do  # two rounds
      lever "packrat_resnet18_fp32" 40 $run trainer "${resnet[@]}"
      lever "packrat_resnet18_bf16" 40 $run trainer "${resnet[@]}" --set precision=bf16
      [[ -n ${EXPERIMENT:-} ]] &&
        lever "packrat_resnet18_bf16_$EXPERIMENT" 40 env "$EXPERIMENT" $run trainer "${resnet[@]}" --set precision=bf16
      lever "torch_resnet18_bf16" 60 "${torch_resnet[@]}" --autocast bf16
    done
    lever "packrat_resnet18_actnn2" 40 $run trainer "${resnet[@]}" --set 'saved_tensors.default={scheme: actnn, bits: 2}'
    lever "packrat_resnet18_bf16_actnn2" 40 $run trainer "${resnet[@]}" --set precision=bf16 \
      --set 'saved_tensors.default={scheme: actnn, bits: 2}'
    lever "packrat_bert_base_standard_fp32" 60 $run trainer "${bert[@]}" --set data.batch_size=32 --benchmark 5
    lever "packrat_bert_base_standard_bf16" 60 $run trainer "${bert[@]}" --set data.batch_size=32 --set precision=bf16 \
      --benchmark 5
    lever "torch_bert_base_any_bf16" 60 python3 bench/torch_bert_step.py --batch 32 --seq-len 512 --autocast bf16
  fi
  if [[ $levers == *bert* ]]; then
    for attention in standard memory_efficient; do
      lever "packrat_bert_base_$attention" 60 $run trainer "${bert[@]}" --set data.batch_size=32 \
        --set model.attention=$attention --benchmark 5
    done
    lever "packrat_bert_base_standard_bf16" 60 $run trainer "${bert[@]}" --set data.batch_size=32 --set precision=bf16 \
      --benchmark 5
    for attention in math efficient; do
      lever "torch_bert_base_$attention" 60 python3 bench/torch_bert_step.py --batch 32 --seq-len 512 --attention $attention
    done
    lever "torch_bert_base_any_bf16" 60 python3 bench/torch_bert_step.py --batch 32 --seq-len 512 --autocast bf16
    for level in "standard fp32" "memory_efficient fp32" "memory_efficient gact-CB2"; do
      read -r attention storage <<<"$level"
      lever "packrat_bert_base_maxbatch_${attention}_$storage" 60 $run trainer "${bert[@]}" \
        --set model.attention=$attention --set saved_tensors.default=$storage --find-max-batch 16G
    done
  fi
fi
if [[ $phases == *plan* ]]; then  # memory.plan: auto on the GPU: the ResNet-18 step at batch 512 in PLAN_BUDGET
  timeout 200 $run trainer --config configs/resnet18_gelu_3bit.yaml --set device=cuda --set data.batch_size=512 \
    --set memory.plan=auto --set memory.budget=${PLAN_BUDGET:-1500M} --set output.dir=/tmp/runs/plan \
    --benchmark 10 >"$out/plan.log" 2>&1
fi
# PyTorch's step (bench/torch_train_step.py): its 4 timed steps after 3 warm-up ones, which hold
# cuDNN's algorithm search. Both it and `trainer --benchmark` mark their timed steps for the
# profilers (cudaProfilerStart / Stop).
torch_step=(python3 bench/torch_train_step.py --device cuda --batch 512 --warmup 3 --steps 4)
if [[ $phases == *ncu* ]]; then
  if [[ " $phases " == *" ncu "* ]]; then  # `ncu_packrat`: packrat's steps only
    timeout 150 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
      "${torch_step[@]}" >"$out/ncu_torch.csv" 2>"$out/ncu_torch.err"
  fi
  for scheme in ${NCU_SCHEMES:-fp32 actnn2}; do  # or bf16: FP32 storage under precision: bf16
    default=fp32; [[ $scheme == actnn2 ]] && default='{scheme: actnn, bits: 2}'
    precision=(); [[ $scheme == bf16 ]] && precision=(--set precision=bf16)
    timeout 150 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base $run trainer \
      --config configs/resnet18_gelu_3bit.yaml --set device=cuda --set "saved_tensors.default=$default" \
      "${precision[@]}" \
      --set 'saved_tensors.rules=[]' --set data.batch_size=512 --benchmark 4 >"$out/ncu_$scheme.csv" 2>"$out/ncu_$scheme.err"
  done
fi

sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section ComputeWorkloadAnalysis --section SourceCounters)
if [[ $phases == *kernels* ]]; then
  timeout 150 ncu "${sections[@]}" --kernel-name-base demangled -k 'regex:quantize|mixed' --launch-skip 1 \
    --launch-count 6 $run packrat_bench --benchmark_filter='CodecCuda/(GroupQuantize/bits:2|Mixed)' \
    --benchmark_min_time=0.01 >"$out/kernels_codec.txt" 2>&1
  timeout 150 ncu "${sections[@]}" --kernel-name-base demangled \
    -k 'regex:ChannelAffine|BatchNormBackwardElement|Finalize|partial_sums|Pointwise|BinarySameShape' \
    --launch-count 14 $run trainer --config configs/resnet18_gelu_3bit.yaml --set device=cuda \
    --set saved_tensors.default=fp32 --set 'saved_tensors.rules=[]' --set data.batch_size=512 --benchmark 1 \
    >"$out/kernels_step.txt" 2>&1
fi

# profile_nhwc NAME BENCH KERNELS [NAME=VALUE]: the sections of the kernels matching KERNELS in one
# launch of CodecCuda/GroupNhwcBENCH, into kernels_nhwc_NAME.txt.
profile_nhwc() {
  local name=$1 bench=$2 kernels=$3; shift 3
  env "$@" timeout 60 ncu "${sections[@]}" --kernel-name-base demangled -k "regex:$kernels" --launch-skip 2 \
    --launch-count 1 $run packrat_bench --benchmark_filter="CodecCuda/GroupNhwc$bench/" \
    --benchmark_min_time=0.01 >"$out/kernels_nhwc_$name.txt" 2>&1
}
if [[ $phases == *nhwc* ]]; then  # the NHWC codec kernels, one launch of each benchmark
  for b in PerPlane/quantize0_dequantize1_gelu2:0 PerPlane/quantize0_dequantize1_gelu2:1 \
           PerSample/quantize0_dequantize1_gelu2:0 PerSample/quantize0_dequantize1_gelu2:1; do
    profile_nhwc "${b//[^a-zA-Z0-9]/_}" "$b" 'quantize|decode'
  done
  if [[ -n ${EXPERIMENT:-} ]]; then  # the quantizes again with the experiment's kernel
    for b in PerPlane PerSample; do
      profile_nhwc "experiment_$b" "$b/quantize0_dequantize1_gelu2:0" quantize "$EXPERIMENT"
    done
  fi
fi

if [[ $phases == *timeline* ]]; then
  if command -v nsys >/dev/null; then
    timeout 150 nsys profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true \
      --capture-range=cudaProfilerApi -o /tmp/timeline $run trainer --config configs/resnet18_gelu_3bit.yaml \
      --set device=cuda --set saved_tensors.default=fp32 --set 'saved_tensors.rules=[]' --set data.batch_size=512 \
      --benchmark 4 >"$out/timeline.log" 2>&1
    nsys stats --report cuda_gpu_trace --format csv --output /tmp/timeline /tmp/timeline.nsys-rep >>"$out/timeline.log" 2>&1
    cp /tmp/timeline_cuda_gpu_trace.csv "$out/timeline_gpu_trace.csv" 2>/dev/null
    timeout 150 nsys profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true \
      --capture-range=cudaProfilerApi -o /tmp/timeline_torch "${torch_step[@]}" >"$out/timeline_torch.log" 2>&1
    nsys stats --report cuda_gpu_trace --format csv --output /tmp/timeline_torch /tmp/timeline_torch.nsys-rep \
      >>"$out/timeline_torch.log" 2>&1
    cp /tmp/timeline_torch_cuda_gpu_trace.csv "$out/timeline_torch_gpu_trace.csv" 2>/dev/null
  else
    echo "nsys is not installed on this machine" >"$out/timeline.log"
  fi
fi

echo "== summary"
for f in "$out"/tests_*.log; do
  [[ -f $f ]] || continue
  echo "-- $(basename "$f"): $(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$f" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] .*\(|Segmentation|terminate called|Aborted|what\(\)' "$f" | head -20
  grep -qE '^\[ +PASSED' "$f" || tail -n 5 "$f"  # a run that did not finish: its last words
done
for f in "$out"/train_*.log "$out"/maxbatch_*.log "$out"/plan.log; do [[ -f $f ]] && { echo "-- $(basename "$f")"; tail -n 4 "$f"; }; done
for f in "$out"/ncu_*.csv; do  # GPU time by kernel name over the profiled launches
  [[ -s $f ]] || continue
  echo "-- $(basename "$f"): kernels by GPU time"
  python3 - "$f" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
first = next(i for i, r in enumerate(rows) if "Kernel Name" in r)  # the trainer's own lines come first
head, rows = rows[first], rows[first:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    try: t = float(r[value].replace(",", ""))
    except (IndexError, ValueError): continue  # the trainer's own lines
    k = r[name].split("(")[0][:140]; total[k] += t; count[k] += 1
all_ns = sum(total.values())
print(f"{sum(count.values())} launches ({sum(count.values()) / 4:.0f} a step), {all_ns / 1e6:.2f} ms of kernel time, {all_ns / 4e6:.2f} ms a step (4 profiled)")
for k, t in total.most_common(25): print(f"{t / 1e6:8.3f} ms {100 * t / all_ns:5.1f}% {count[k]:5d}x {k}")
# By part of the step, the same buckets for packrat's kernels and PyTorch's (the first match wins).
import re
parts = [("codec", r"quantiz|decode_groups|[Ff]ewbit|[Mm]ixed|pack_|[Bb]itpack"), ("reorder", r"reorder|ranspose|nchwToNhwc|nhwcToNchw"),
         ("convolution", r"conv|xmma|gemm|cutlass|cudnn|fprop|dgrad|wgrad|implicit"),
         ("batchnorm", r"atch_?[Nn]orm|ChannelAffine|Finalize|partial_sums|channel_|RunningUpdate"),
         ("activation", r"[Gg]elu|GELU|Pointwise|Activation"), ("add", r"add|Binary"),
         ("optimizer", r"[Ss]gd|SGD|multi_tensor|foreach|momentum"),
         ("loss, pool, linear", r"[Ss]oft[Mm]ax|nll|[Ll]oss|pool|Pool|Linear|Matmul|reduce")]
by = collections.Counter()
for k, t in total.items():
    plain = k.replace("packrat::", "")  # (its namespace would match "pack")
    by[next((p for p, rx in parts if re.search(rx, plain)), "other")] += t
print("  by part: " + ", ".join(f"{p} {t / 1e6:.2f} ms ({100 * t / all_ns:.0f}%)" for p, t in by.most_common()))
PY
done
for f in "$out"/timeline*_gpu_trace.csv; do  # the GPU's busy share of the profiled steps' span
  [[ -s $f ]] || continue
  echo "-- $(basename "$f")"
  python3 - "$f" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
spans = sorted((int(r["Start (ns)"]), int(r["Start (ns)"]) + int(r["Duration (ns)"])) for r in rows)
busy, end = 0, spans[0][0]
for a, b in spans:  # the union of the intervals
    if b > end: busy += b - max(a, end); end = b
span = spans[-1][1] - spans[0][0]
print(f"{len(spans)} kernels and copies over {span / 1e6:.2f} ms: GPU busy {busy / 1e6:.2f} ms ({100 * busy / span:.1f}%), "
      f"idle {(span - busy) / 1e6:.2f} ms between them")
PY
done
for f in "$out"/kernels_*.txt; do  # each profiled kernel's duration, throughputs and occupancy
  [[ -f $f ]] || continue
  echo "-- $(basename "$f")"
  grep -E '^  [a-zA-Z].*\(.*\)x\(|^    (Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread) ' \
    "$f" | sed -E 's/\(([^()]|\([^()]*\))*\) \(/ (/' | cut -c1-150 | head -150
done
[[ -f $out/levers.txt ]] && { echo "-- levers"; cut -c1-400 "$out/levers.txt"; tail -n 5 "$out/levers.err"; }
for f in "$out"/bench_*.log "$out"/compare_torch.log; do
  [[ -f $f ]] && { echo "-- $(basename "$f")"; grep -E '^(Codec|Train|BM_|\{|ERROR)|round|error' "$f" | cut -c1-220; }
done
# The exit status: 1 when a test failed (its log is named).
! grep -lE '^\[  FAILED  \]' "$out"/tests_*.log 2>/dev/null
