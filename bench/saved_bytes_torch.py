#!/usr/bin/python3
"""Saved-for-backward bytes per sample: packrat's FP32 store against PyTorch, same torchvision model.

PyTorch: one training-mode forward of torchvision's model under
torch.autograd.graph.saved_tensors_hooks; every tensor autograd packs is counted once per
storage (deduplicated by the storage's data pointer, its whole storage's bytes), parameters left
out (they are the model's own memory, as packrat's reports leave them out).
packrat: `trainer --memory-report-only` on synthetic 224x224 inputs with `saved_tensors.default:
fp32`, its memory_report.json's saved_bytes (what the allocator holds under the Saved tag).

Usage (from the repository root, after building build/bin/trainer):
  /usr/bin/python3 bench/saved_bytes_torch.py [--batch 4] [--size 224] [--models efficientnet_b0,resnet18,resnet50]
Prints one Markdown row per model: MiB per sample, packrat / PyTorch.
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
import torchvision

MiB = 1024.0 * 1024.0


def saved_bytes(model, forward):
    """Bytes of every tensor autograd packs while forward() runs, once per storage, the model's
    parameters left out (shared with bench/saved_bytes_autocast.py)."""
    param_ptrs = {p.data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.storage()
        ptr = storage.data_ptr()
        if ptr not in param_ptrs and ptr not in seen:
            seen[ptr] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


def torch_saved_bytes(arch, batch, size, activation=None):
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=1000)
    model.train()
    x = torch.randn(batch, 3, size, size)
    return saved_bytes(model, lambda: torch.nn.functional.cross_entropy(model(x), torch.zeros(batch, dtype=torch.long)))


def packrat_saved_bytes(arch, batch, size, trainer):
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "c.yaml")
        with open(cfg, "w") as f:
            f.write("data: {dataset: image_folder, height: %d, width: %d, channels: 3, batch_size: %d}\n"
                    "model: {arch: %s, classes: 1000}\n"
                    "saved_tensors: {default: fp32}\n"
                    "conv_algorithm: direct\n"
                    "output: {dir: %s}\n" % (size, size, batch, arch, os.path.join(d, "run")))
        subprocess.run([trainer, "--config", cfg, "--memory-report-only"], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "run", "memory_report.json")) as f:
            return json.load(f)["totals"]["saved_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--models", default="efficientnet_b0,efficientnet_v2_s,resnet18,resnet50")
    ap.add_argument("--trainer", default="build/bin/trainer")
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print("| model (%dx%d, batch %d) | packrat FP32 store, MiB/sample | PyTorch 1.13, MiB/sample | packrat / PyTorch |"
          % (a.size, a.size, a.batch))
    print("|---|---|---|---|")
    for arch in a.models.split(","):
        t = torch_saved_bytes(arch, a.batch, a.size) / a.batch / MiB
        p = packrat_saved_bytes(arch, a.batch, a.size, a.trainer) / a.batch / MiB
        print("| %s | %.2f | %.2f | %.3f |" % (arch, p, t, p / t), flush=True)


if __name__ == "__main__":
    main()
