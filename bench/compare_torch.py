#!/usr/bin/env python3
"""Side-by-side: packrat's TrainStep/resnet18_cifar_gelu/64 (or another benchmark of REFERENCES below:
ViT, EfficientNet-B0, the GPT in tokens/s) against the same step in PyTorch, interleaved in one run (these machines are
noisy), and the ratio of their images/s (tokens/s). A compressed variant (TrainStep/<model>_<scheme>/<batch>)
is compared with the same FP32 step in PyTorch, which has no compressed storage.

    scripts/setup.sh --torch      # once: Debian's python3-torch and python3-torchvision
    /usr/bin/python3 bench/compare_torch.py [--rounds 3] [--bench build/bin/packrat_bench]
    /usr/bin/python3 bench/compare_torch.py --name TrainStep/gpt_small/32
    python3 bench/compare_torch.py --device cuda [--name TrainStep/resnet18_cifar_gelu_cuda/128]   # on a GPU

On a machine shared with other jobs, wall-clock rates swing with the load; `--clock cpu --threads 1`
compares process CPU time instead (clock_gettime's CLOCK_PROCESS_CPUTIME_ID against PyTorch's
time.process_time()), each side on one thread, which the load barely moves:

    /usr/bin/python3 bench/compare_torch.py --clock cpu --threads 1 --rounds 5 \\
        --name TrainStep/efficientnet_b0_cifar/32 --name TrainStep/efficientnet_b0_cifar_actnn2_fewbit2/32

--device cuda compares TrainStep/resnet18_cifar_gelu_cuda/{128,512} (FP32 store) with PyTorch on the
same GPU (channels_last, cudnn.benchmark), and adds PyTorch's peak memory and packrat's to the result.
"""
import argparse, importlib.util, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def check_prerequisites(bench, device):
    """Exits with what to install or build when the PyTorch reference or packrat_bench is missing."""
    missing = [m for m in ("torch", "torchvision") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"compare_torch: {sys.executable} cannot import {' and '.join(missing)}, which the PyTorch "
                 "reference (bench/torch_train_step.py) needs. Install Debian's python3-torch and "
                 "python3-torchvision with `scripts/setup.sh --torch`, then run this with /usr/bin/python3.")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            sys.exit(f"compare_torch: --device cuda, but {sys.executable}'s PyTorch sees no GPU")
    if not os.access(bench, os.X_OK):
        sys.exit(f"compare_torch: {bench} is missing: build it with scripts/build.sh (or pass --bench)")


# benchmark name -> (PyTorch twin, its arguments, the counter both report)
REFERENCES = {
    "TrainStep/resnet18_cifar_gelu/64": ("torch_train_step.py", ["--batch", "64", "--steps", "8"], "img_per_s"),
    # Debian's PyTorch runs ViT's and the GPT's matmuls on the reference BLAS (see README): few steps.
    "TrainStep/vit_tiny_cifar/64": ("torch_train_step.py", ["--batch", "64", "--steps", "3", "--warmup", "1",
                                                            "--model", "vit_tiny_cifar"], "img_per_s"),
    "TrainStep/efficientnet_b0_cifar/32": ("torch_train_step.py",
                                           ["--batch", "32", "--steps", "8", "--model", "efficientnet_b0_cifar"],
                                           "img_per_s"),
    "TrainStep/gpt_small/32": ("torch_gpt_step.py", ["--model", "gpt_small", "--batch", "32", "--steps", "2",
                                                     "--warmup", "1"], "tok_per_s"),
    "TrainStep/gpt_tiny/32": ("torch_gpt_step.py", ["--model", "gpt_tiny", "--batch", "32", "--steps", "8"],
                              "tok_per_s"),
    "TrainStep/resnet18_cifar_gelu_cuda/128": ("torch_train_step.py",
                                               ["--batch", "128", "--steps", "100", "--warmup", "10", "--device", "cuda"],
                                               "img_per_s"),
    "TrainStep/resnet18_cifar_gelu_cuda/512": ("torch_train_step.py",
                                               ["--batch", "512", "--steps", "40", "--warmup", "5", "--device", "cuda"],
                                               "img_per_s"),
}
# bf16 autocast: PyTorch's CPU autocast step.
for fp32, bf16 in (("TrainStep/resnet18_cifar_gelu/64", "TrainStep/resnet18_cifar_gelu_bf16/64"),
                   ("TrainStep/efficientnet_b0_cifar/32", "TrainStep/efficientnet_b0_cifar_bf16/32")):
    script, args, metric = REFERENCES[fp32]
    REFERENCES[bf16] = (script, args + ["--autocast", "bf16"], metric)
# Compressed variants: the same PyTorch twin (FP32; PyTorch has no compressed storage).
COMPRESSED = {"TrainStep/vit_tiny_cifar_actnn2/64": "TrainStep/vit_tiny_cifar/64",
              "TrainStep/efficientnet_b0_cifar_actnn2_fewbit2/32": "TrainStep/efficientnet_b0_cifar/32",
              "TrainStep/gpt_small_fewbit3_actnn4/32": "TrainStep/gpt_small/32",
              "TrainStep/resnet18_cifar_gelu_bf16_actnn2/64": "TrainStep/resnet18_cifar_gelu_bf16/64"}
REFERENCES.update({name: REFERENCES[fp32] for name, fp32 in COMPRESSED.items()})
DEFAULT_NAME = {"cpu": "TrainStep/resnet18_cifar_gelu/64", "cuda": "TrainStep/resnet18_cifar_gelu_cuda/512"}


def device_of(name):
    return "cuda" if "_cuda/" in name else "cpu"


def rate(record, metric, clock):
    """Items per second of wall time (the counter `metric`) or of process CPU time (cpu_<metric>)."""
    return record[metric if clock == "wall" else "cpu_" + metric]


def packrat_run(bench, name, min_time):
    """The benchmark's JSON record (its counters: img_per_s, cpu_img_per_s, saved_MB, peak_bytes, ...)."""
    out = subprocess.run([bench, f"--benchmark_filter=^{name}$", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b["name"] == name]
    if not runs:
        sys.exit(f"compare_torch: {bench} has no benchmark named {name}"
                 + (" (the CUDA variants are registered only where a GPU is visible)" if device_of(name) == "cuda" else ""))
    if runs[0].get("error_occurred"):
        sys.exit(f"compare_torch: {name}: {runs[0].get('error_message')}")
    return runs[0]


def torch_run(script, args, threads):
    out = subprocess.run([sys.executable, os.path.join(HERE, script), *args, "--threads", str(threads)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bin", "packrat_bench"))
    ap.add_argument("--name", action="append", choices=sorted(REFERENCES),
                    help="a benchmark to compare (repeat for several; default TrainStep/resnet18_cifar_gelu/64, "
                         "or .../resnet18_cifar_gelu_cuda/512 with --device cuda)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="rates per second of wall-clock time, or of process CPU time (steadier under load)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="packrat_bench's --benchmark_min_time per round (default 5 on the CPU, 3 on a GPU)")
    ap.add_argument("--torch-model", default=None, help="ignored: the benchmark name picks the PyTorch twin")
    a = ap.parse_args()
    names = a.name or [DEFAULT_NAME[a.device]]
    for name in names:
        if device_of(name) != a.device:
            sys.exit(f"compare_torch: {name} runs on {device_of(name)}, not on --device {a.device}")
    if a.device == "cuda" and a.clock == "cpu":
        sys.exit("compare_torch: --clock cpu measures host CPU time, not a GPU step: use --clock wall with --device cuda")
    a.min_time = a.min_time or (5 if a.device == "cpu" else 3)
    check_prerequisites(a.bench, a.device)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    compare(a, names)


def compare(a, names):
    """Alternates rounds: each round runs every benchmark of `names`, then each PyTorch twin they
    need once (an FP32 step and its compressed variants share their twin's run of that round).
    Prints each round and, per benchmark, a JSON line with the median rates, the median of the
    per-round ratios and their range (and on a GPU both peaks of memory)."""
    ours = {n: [] for n in names}
    theirs = {n: [] for n in names}
    extra = {n: {} for n in names}
    for r in range(a.rounds):
        runs = {name: packrat_run(a.bench, name, a.min_time) for name in names}
        twins = {}
        for name in names:
            script, args, metric = REFERENCES[name]
            key = (script, tuple(args))
            if key not in twins:
                twins[key] = torch_run(script, args, a.threads)
            t = twins[key]
            ours[name].append(rate(runs[name], metric, a.clock))
            theirs[name].append(rate(t, metric, a.clock))
            if "peak_bytes" in t:
                extra[name] = {"packrat_peak_bytes": int(runs[name].get("peak_bytes", 0)),
                               "pytorch_peak_bytes": t["peak_bytes"], "gpu": t.get("device", "")}
            unit = metric.split("_per_")[0] + ("/s" if a.clock == "wall" else "/CPU-s")
            print(f"{name} round {r + 1}: packrat {ours[name][-1]:.1f} {unit}, pytorch {theirs[name][-1]:.1f} "
                  f"{unit}, ratio {ours[name][-1] / theirs[name][-1]:.3f}", flush=True)
    for name in names:
        metric = REFERENCES[name][2]
        ratios = [o / t for o, t in zip(ours[name], theirs[name])]
        print(json.dumps({"name": name, "clock": a.clock, "threads": a.threads,
                          f"packrat_{metric}": round(statistics.median(ours[name]), 1),
                          f"pytorch_{metric}": round(statistics.median(theirs[name]), 1),
                          "ratio": round(statistics.median(ratios), 3),
                          "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)], **extra[name]}), flush=True)


if __name__ == "__main__":
    main()
