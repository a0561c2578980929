#!/usr/bin/env python3
"""Every shipped compressed config's training step against the step it compresses.

The twin of a config is the same config with every saved tensor kept in FP32
(--vs 'saved_tensors={default: fp32}'), in the same precision. Each round runs every config
against its twin in one process, their steps in turn (`trainer --benchmark STEPS --vs ...`), in
f32 and in bf16, so that the machine's load changes meet both sides alike (run back to back as
two processes, the pairs' ratios on the 2-core machines spread from 0.66 to 0.87); the table gives
the median img/s over the rounds and each round's ratio of the two sides' step times (median,
and the range over the rounds).

    python3 bench/shipped_configs.py [--rounds 3] [--configs a,b] [--precisions f32,bf16]

The GACT CB levels (bert_fortunes_gact_cb1/cb2) recompute as well as compress, and are measured
by the frontier (experiments/frontier), not here.
"""
import argparse
import json
import statistics
import subprocess
import sys

# config -> steps a run (the EfficientNetV2 step at 32x32 takes over a second on 2 cores)
CONFIGS = {
    "resnet18_gelu_3bit": 20,
    "gpt_fortunes": 20,
    "vit_fmnist_2bit": 20,
    "bert_fortunes_gact_l1": 20,
    "efficientnet_fmnist_2bit": 30,
    "efficientnet_b0_cifar10": 6,
    "efficientnet_v2_cifar10_2bit": 6,
}
TWIN = "saved_tensors={default: fp32}"


def paired(config, steps, precision):
    cmd = ["build/bin/trainer", "--config", f"configs/{config}.yaml", "--benchmark", str(steps),
           "--set", f"precision={'bf16' if precision == 'bf16' else 'fp32'}", "--vs", TWIN]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j["config"]["img_per_s"], j["vs"]["img_per_s"], j["speed_vs"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--precisions", default="f32,bf16")
    a = ap.parse_args()
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"--configs: {c} is not a shipped compressed config ({', '.join(CONFIGS)})")
    precisions = a.precisions.split(",")
    runs = {}  # (config, precision) -> [(compressed img/s, twin img/s, speed_vs)]
    for r in range(a.rounds):
        for c in configs:
            for p in precisions:
                pair = paired(c, CONFIGS[c], p)
                runs.setdefault((c, p), []).append(pair)
                print(f"round {r + 1}: {c} {p}: {pair[0]:.1f} against {pair[1]:.1f} img/s ({pair[2]:.3f}x)",
                      file=sys.stderr)
    print("| config | precision | compressed img/s | FP32-store twin img/s | speed of the twin's |")
    print("|---|---|---|---|---|")
    for (c, p), pairs in runs.items():
        ratios = [r for _, _, r in pairs]
        print(f"| `{c}` | {p} | {statistics.median(x for x, _, _ in pairs):.1f} | "
              f"{statistics.median(y for _, y, _ in pairs):.1f} | **{statistics.median(ratios):.2f}x** "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
