#!/usr/bin/python3
"""Golden of one training step under PyTorch 1.13's CPU bf16 autocast, for tests/autograd/autocast_test.cpp:
conv 3x3 (3 -> 16, no bias) -> batchnorm (training) -> relu -> global average pool -> linear (16 -> 10) ->
cross entropy, on 8 random 3x8x8 images. Writes tests/golden/models/autocast_bf16_golden.safetensors:
the parameters, x, labels, the logits (bf16, widened), the loss and every parameter's gradient (f32).
Run with Debian's /usr/bin/python3 from the repository root."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt_golden import write_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "autocast_bf16_golden.safetensors")


def main():
    g = torch.Generator().manual_seed(5)
    conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
    bn = nn.BatchNorm2d(16)
    fc = nn.Linear(16, 10)
    with torch.no_grad():
        conv.weight.copy_(torch.rand(conv.weight.shape, generator=g) * 0.6 - 0.3)
        bn.weight.copy_(torch.rand(16, generator=g) + 0.5)
        bn.bias.copy_(torch.rand(16, generator=g) * 0.2 - 0.1)
        fc.weight.copy_(torch.rand(fc.weight.shape, generator=g) * 0.6 - 0.3)
        fc.bias.copy_(torch.rand(10, generator=g) * 0.2 - 0.1)
    x = torch.randn(8, 3, 8, 8, generator=g)
    labels = torch.arange(8, dtype=torch.long)
    params = {"conv.weight": conv.weight, "bn.weight": bn.weight, "bn.bias": bn.bias, "fc.weight": fc.weight,
              "fc.bias": fc.bias}
    out = {"param." + n: p.detach().clone() for n, p in params.items()}
    out["x"], out["labels"] = x, labels
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        h = F.relu(bn(conv(x)))
        logits = fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))
        loss = F.cross_entropy(logits, labels)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().reshape(1)
    for n, p in params.items():
        out["grad." + n] = p.grad.detach().clone()
    write_safetensors(OUT, out)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
