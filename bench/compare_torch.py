#!/usr/bin/env python3
"""Side-by-side: packrat's TrainStep/resnet18_cifar_gelu/64 (or another benchmark of REFERENCES below:
ViT, EfficientNet-B0, the GPT in tokens/s) against the same step in PyTorch, interleaved in one run (these machines are
noisy), and the ratio of their images/s (tokens/s).

    scripts/setup.sh --torch      # once: Debian's python3-torch and python3-torchvision
    /usr/bin/python3 bench/compare_torch.py [--rounds 3] [--bench build/bin/packrat_bench]
    /usr/bin/python3 bench/compare_torch.py --name TrainStep/gpt_small/32
    python3 bench/compare_torch.py --device cuda [--name TrainStep/resnet18_cifar_gelu_cuda/128]   # on a GPU

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
    "TrainStep/vit_tiny_cifar/64": ("torch_train_step.py", ["--batch", "64", "--steps", "8", "--model", "vit_tiny_cifar"],
                                    "img_per_s"),
    "TrainStep/efficientnet_b0_cifar/32": ("torch_train_step.py",
                                           ["--batch", "32", "--steps", "8", "--model", "efficientnet_b0_cifar"],
                                           "img_per_s"),
    "TrainStep/gpt_small/32": ("torch_gpt_step.py", ["--model", "gpt_small", "--batch", "32", "--steps", "4"],
                               "tok_per_s"),
    "TrainStep/gpt_tiny/32": ("torch_gpt_step.py", ["--model", "gpt_tiny", "--batch", "32", "--steps", "8"],
                              "tok_per_s"),
    "TrainStep/resnet18_cifar_gelu_cuda/128": ("torch_train_step.py",
                                               ["--batch", "128", "--steps", "100", "--warmup", "10", "--device", "cuda"],
                                               "img_per_s"),
    "TrainStep/resnet18_cifar_gelu_cuda/512": ("torch_train_step.py",
                                               ["--batch", "512", "--steps", "40", "--warmup", "5", "--device", "cuda"],
                                               "img_per_s"),
}
DEFAULT_NAME = {"cpu": "TrainStep/resnet18_cifar_gelu/64", "cuda": "TrainStep/resnet18_cifar_gelu_cuda/512"}


def device_of(name):
    return "cuda" if "_cuda/" in name else "cpu"


def packrat_run(bench, name, min_time):
    """The benchmark's JSON record (its counters: img_per_s, saved_MB, ...)."""
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
    ap.add_argument("--name", default=None, choices=sorted(REFERENCES),
                    help="default: TrainStep/resnet18_cifar_gelu/64, or .../resnet18_cifar_gelu_cuda/512 with --device cuda")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-model", default=None, help="ignored: the benchmark name picks the PyTorch twin")
    a = ap.parse_args()
    a.name = a.name or DEFAULT_NAME[a.device]
    if device_of(a.name) != a.device:
        sys.exit(f"compare_torch: {a.name} runs on {device_of(a.name)}, not on --device {a.device}")
    check_prerequisites(a.bench, a.device)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    script, args, metric = REFERENCES[a.name]
    unit = metric.split("_per_")[0] + "/s"
    ours, theirs, extra = [], [], {}
    for r in range(a.rounds):
        run = packrat_run(a.bench, a.name, 5 if a.device == "cpu" else 3)
        ours.append(run[metric])
        t = torch_run(script, args, a.threads)
        theirs.append(t[metric])
        if "peak_bytes" in t:
            extra = {"packrat_peak_bytes": int(run.get("peak_bytes", 0)), "pytorch_peak_bytes": t["peak_bytes"],
                     "gpu": t.get("device", "")}
        print(f"round {r + 1}: packrat {ours[-1]:.1f} {unit}, pytorch {theirs[-1]:.1f} {unit}", flush=True)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(json.dumps({f"packrat_{metric}": round(o, 1), f"pytorch_{metric}": round(t, 1), "ratio": round(o / t, 3),
                      **extra}))


if __name__ == "__main__":
    main()
