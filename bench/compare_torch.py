#!/usr/bin/env python3
"""Side-by-side: packrat's TrainStep/resnet18_cifar_gelu/64 against the same step in PyTorch,
interleaved in one run (these machines are noisy), and the ratio of their images/s.

    scripts/setup.sh --torch      # once: Debian's python3-torch and python3-torchvision
    /usr/bin/python3 bench/compare_torch.py [--rounds 3] [--bench build/bin/packrat_bench]
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


def packrat_img_per_s(bench, name, min_time):
    out = subprocess.run([bench, f"--benchmark_filter=^{name}$", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b["name"] == name]
    if not runs:
        sys.exit(f"compare_torch: {bench} has no benchmark named {name}")
    return runs[0]["img_per_s"]


def torch_img_per_s(model, batch, steps, threads):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_train_step.py"), "--model", model, "--batch", str(batch),
                          "--steps", str(steps), "--threads", str(threads)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["img_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bin", "packrat_bench"))
    ap.add_argument("--name", default="TrainStep/resnet18_cifar_gelu/64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    check_prerequisites(a.bench)
    model, batch = a.name.split("/")[1], int(a.name.split("/")[2])  # TrainStep/<model>/<batch>
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    ours, theirs = [], []
    for r in range(a.rounds):
        ours.append(packrat_img_per_s(a.bench, a.name, 5))
        theirs.append(torch_img_per_s(model, batch, 8, a.threads))
        print(f"round {r + 1}: packrat {ours[-1]:.1f} img/s, pytorch {theirs[-1]:.1f} img/s", flush=True)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(json.dumps({"packrat_img_per_s": round(o, 1), "pytorch_img_per_s": round(t, 1), "ratio": round(o / t, 3)}))


if __name__ == "__main__":
    main()
