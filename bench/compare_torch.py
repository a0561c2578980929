#!/usr/bin/env python3
"""Side-by-side: packrat's TrainStep/resnet18_cifar_gelu/64 (or another benchmark of REFERENCES below:
ViT, EfficientNet-B0, the GPT in tokens/s) against the same step in PyTorch, interleaved in one run (these machines are
noisy), and the ratio of their images/s (tokens/s).

    scripts/setup.sh --torch      # once: Debian's python3-torch and python3-torchvision
    /usr/bin/python3 bench/compare_torch.py [--rounds 3] [--bench build/bin/packrat_bench]
    /usr/bin/python3 bench/compare_torch.py --name TrainStep/gpt_small/32
"""
import argparse, importlib.util, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def check_prerequisites(bench):
    """Exits with what to install or build when the PyTorch reference or packrat_bench is missing."""
    missing = [m for m in ("torch", "torchvision") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"compare_torch: {sys.executable} cannot import {' and '.join(missing)}, which the PyTorch "
                 "reference (bench/torch_train_step.py) needs. Install Debian's python3-torch and "
                 "python3-torchvision with `scripts/setup.sh --torch`, then run this with /usr/bin/python3.")
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
}


def packrat_rate(bench, name, min_time, metric):
    out = subprocess.run([bench, f"--benchmark_filter=^{name}$", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b["name"] == name]
    if not runs:
        sys.exit(f"compare_torch: {bench} has no benchmark named {name}")
    return runs[0][metric]


def torch_rate(script, args, threads, metric):
    out = subprocess.run([sys.executable, os.path.join(HERE, script), *args, "--threads", str(threads)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])[metric]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bin", "packrat_bench"))
    ap.add_argument("--name", default="TrainStep/resnet18_cifar_gelu/64", choices=sorted(REFERENCES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-model", default=None, help="ignored: the benchmark name picks the PyTorch twin")
    a = ap.parse_args()
    check_prerequisites(a.bench)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    script, args, metric = REFERENCES[a.name]
    unit = metric.split("_per_")[0] + "/s"
    ours, theirs = [], []
    for r in range(a.rounds):
        ours.append(packrat_rate(a.bench, a.name, 5, metric))
        theirs.append(torch_rate(script, args, a.threads, metric))
        print(f"round {r + 1}: packrat {ours[-1]:.1f} {unit}, pytorch {theirs[-1]:.1f} {unit}", flush=True)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(json.dumps({f"packrat_{metric}": round(o, 1), f"pytorch_{metric}": round(t, 1), "ratio": round(o / t, 3)}))


if __name__ == "__main__":
    main()
