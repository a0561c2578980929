#!/usr/bin/python3
"""Saved-for-backward bytes per sample under bf16 autocast: packrat's FP32 store with
`precision: bf16` against PyTorch 1.13's torch.autocast(device_type="cpu", dtype=torch.bfloat16),
for packrat's ResNet-20, EfficientNet-B0-small, ViT-tiny (CIFAR) and GPT-tiny written in PyTorch.

Per sample = the slope between two batch sizes (saved(2B) - saved(B)) / B, so what a step saves
once whatever the batch (PyTorch's bf16 copies of the weights, which autocast caches and its
convolutions save; packrat reads its f32 weights converted and saves no copy) drops out.
PyTorch: one training-mode forward and loss under saved_tensors_hooks, every packed tensor
counted once per storage (its whole storage's bytes), parameters left out.
packrat: `trainer --memory-report-only` on synthetic inputs, memory_report.json's
allocator_saved_bytes (what the allocator holds under the Saved tag after the forward).
PyTorch 1.13's CPU layer_norm refuses a bf16 input with f32 weights (PyTorch 2 runs it mixed);
here its LayerNorms run as PyTorch 2's do: f32 statistics, the bf16 input saved, a bf16 output.

Usage (from the repository root, after building build/bin/trainer):
  /usr/bin/python3 bench/saved_bytes_autocast.py [--batch 8] [--models resnet20,efficientnet_b0_small,vit_tiny_cifar,gpt_tiny]
Prints one Markdown row per model: KiB per sample in f32 and in bf16 on both sides, packrat / PyTorch.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.efficientnet import EfficientNet, MBConvConfig

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))
sys.path.insert(0, HERE)
from make_gpt_golden import Gpt  # noqa: E402  packrat's models/gpt.h in PyTorch
from saved_bytes_torch import saved_bytes  # noqa: E402

KiB = 1024.0


class MixedLayerNorm(torch.autograd.Function):
    """layer_norm of a bf16 x with f32 weights as PyTorch 2 runs it: f32 math, x saved as bf16."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return F.layer_norm(x.float(), x.shape[-1:], weight, bias, eps).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        with torch.enable_grad():
            xf = x.float().detach().requires_grad_()
            w = weight.detach().requires_grad_()
            y = F.layer_norm(xf, x.shape[-1:], w, None, ctx.eps)
            gx, gw = torch.autograd.grad(y, (xf, w), g.float())
        return gx.to(x.dtype), gw, g.float().sum(dim=tuple(range(g.dim() - 1))), None


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        if x.dtype == torch.float32:
            return super().forward(x)
        return MixedLayerNorm.apply(x, self.weight, self.bias, self.eps)


def mixed_layernorms(model):
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if type(child) is nn.LayerNorm:
                ln = LayerNorm(child.normalized_shape, eps=child.eps)
                ln.load_state_dict(child.state_dict())
                setattr(mod, name, ln)
    return model


class ShortcutA(nn.Module):
    """ResNet-20's option-A shortcut: subsample by the stride, zero-pad the channels."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.pad, self.stride = (cout - cin) // 2, stride

    def forward(self, x):
        return F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad, self.pad))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = ShortcutA(cin, cout, stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def efficientnet_b0_small(classes=10):
    """torchvision's B0 at width 0.5, depth 0.5, with a stride-1 stem (packrat's efficientnet_b0_small)."""
    bneck = partial(MBConvConfig, width_mult=0.5, depth_mult=0.5)
    rows = [bneck(1, 3, 1, 32, 16, 1), bneck(6, 3, 2, 16, 24, 2), bneck(6, 5, 2, 24, 40, 2),
            bneck(6, 3, 2, 40, 80, 3), bneck(6, 5, 1, 80, 112, 3), bneck(6, 5, 2, 112, 192, 4),
            bneck(6, 3, 1, 192, 320, 1)]
    m = EfficientNet(rows, 0.2, stochastic_depth_prob=0.2, num_classes=classes)
    stem = m.features[0][0]
    m.features[0][0] = nn.Conv2d(3, stem.out_channels, 3, 1, 1, bias=False)
    return m


def vit_tiny_cifar(classes=10):
    return mixed_layernorms(torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                                                 hidden_dim=192, mlp_dim=384, num_classes=classes))


# name: (PyTorch model, input maker, packrat config lines)
IMAGE = "data: {dataset: cifar10, batch_size: %d}\nmodel: {arch: %s, stem: cifar}\n"
MODELS = {
    "resnet20": (ResNet20, lambda n: torch.randn(n, 3, 32, 32), IMAGE),
    "efficientnet_b0_small": (efficientnet_b0_small, lambda n: torch.randn(n, 3, 32, 32), IMAGE),
    "vit_tiny_cifar": (vit_tiny_cifar, lambda n: torch.randn(n, 3, 32, 32),
                       "data: {dataset: cifar10, batch_size: %d}\nmodel: {arch: %s}\n"),
    "gpt_tiny": (lambda: mixed_layernorms(Gpt(vocab=256, block=128, layers=2, heads=2, embd=64, dropout=0.0)),
                 lambda n: torch.randint(0, 256, (n, 128)),
                 "data: {dataset: text, root: /usr/share/games/fortunes, seq_len: 128, batch_size: %d}\nmodel: {arch: %s}\n"),
}


def torch_saved_bytes(name, batch, autocast):
    make, inputs, _ = MODELS[name]
    torch.manual_seed(0)
    model = make()
    model.train()
    x = inputs(batch)

    def forward():
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
            target = torch.zeros(logits.shape[:-1], dtype=torch.long)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    return saved_bytes(model, forward)


def packrat_saved_bytes(name, batch, precision, trainer):
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "c.yaml")
        with open(cfg, "w") as f:
            f.write(MODELS[name][2] % (batch, name))
            f.write("saved_tensors: {default: fp32}\nprecision: %s\nconv_algorithm: direct\noutput: {dir: %s}\n"
                    % (precision, os.path.join(d, "run")))
        subprocess.run([trainer, "--config", cfg, "--memory-report-only"], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "run", "memory_report.json")) as f:
            return json.load(f)["totals"]["allocator_saved_bytes"]


def per_sample(measure, batch):
    return (measure(2 * batch) - measure(batch)) / batch / KiB


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--trainer", default="build/bin/trainer")
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print("| model (per sample, slope over batch %d -> %d) | PyTorch f32 KiB | PyTorch bf16 autocast KiB | "
          "packrat f32 KiB | packrat bf16 KiB | packrat / PyTorch, bf16 |" % (a.batch, 2 * a.batch))
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        t32 = per_sample(lambda n: torch_saved_bytes(name, n, False), a.batch)
        t16 = per_sample(lambda n: torch_saved_bytes(name, n, True), a.batch)
        p32 = per_sample(lambda n: packrat_saved_bytes(name, n, "fp32", a.trainer), a.batch)
        p16 = per_sample(lambda n: packrat_saved_bytes(name, n, "bf16", a.trainer), a.batch)
        print("| %s | %.1f | %.1f | %.1f | %.1f | %.3f |" % (name, t32, t16, p32, p16, p16 / t16), flush=True)


if __name__ == "__main__":
    main()
