#!/usr/bin/python3
"""Golden files for the EfficientNet tests, made with Debian's PyTorch 1.13 + torchvision 0.14.

Run from the repository root:  /usr/bin/python3 tests/golden/make_efficientnet_goldens.py
Writes tests/golden/models/:
  efficientnet_b0.txt, efficientnet_v2_s.txt
      one line per state_dict entry "param|buffer <name> <dims...>" of torchvision's model (10 classes)
  efficientnet_blocks.safetensors
      torchvision's blocks with given weights, forward + backward on a small input:
        se.*        SqueezeExcitation(16, 4, SiLU)
        mbconv.*    MBConv expand 4, 3x3, stride 1, 8 -> 8 (residual), BN eps 1e-5, train mode
        mbconv_s2.* MBConv expand 6, 5x5, stride 2, 8 -> 16, train mode
        fused.*     FusedMBConv expand 4, 3x3, stride 2, 8 -> 16, BN eps 1e-3, train mode
        fused_res.* FusedMBConv expand 1, 3x3, stride 1, 8 -> 8 (residual), train mode
        mbconv_eval.* the mbconv block with stochastic depth 0.5 in eval mode (drop path is identity)
      stochastic depth is 0 in train mode (torch's Bernoulli draws cannot be shared)
  efficientnet_b0_tiny.safetensors, efficientnet_v2_s_tiny.safetensors
      torchvision's EfficientNet code at width 0.1, depth 0.1 (B0: efficientnet.py's own
      multipliers; V2-S: its rows scaled the same way), 10 classes, on (3, 3, 48, 48):
      `param.<name>` / `buffer.<name>` the weights packrat loads, then eval mode (dropout 0.2 and
      stochastic depth 0.2 as the model's own, both identity) `eval.y`, `eval.gx`, `eval.grad.<name>`,
      then train mode with dropout and stochastic depth 0: `train.y`, `train.gx`, `train.grad.<name>`,
      and the running statistics after it, `train.buffer.<name>`; `x`, `gy`.
safetensors is written by hand below (the Python package is not in Debian 12).
"""
import copy
import json
import math
import os
import struct
from functools import partial

import torch
import torch.nn as nn
import torchvision
from torchvision.models.efficientnet import (EfficientNet, FusedMBConv, FusedMBConvConfig, MBConv, MBConvConfig,
                                             _make_divisible)
from torchvision.ops.misc import SqueezeExcitation

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_keys():
    for arch in ["efficientnet_b0", "efficientnet_v2_s"]:
        m = getattr(torchvision.models, arch)(num_classes=10)
        params = dict(m.named_parameters())
        with open(os.path.join(OUT, "%s.txt" % arch), "w") as f:
            for name, t in m.state_dict().items():
                kind = "param" if name in params else "buffer"
                f.write("%s %s %s\n" % (kind, name, " ".join(str(d) for d in t.shape)))


def randomize(module, g):
    """Weights of a useful scale; BN affine and running statistics away from their defaults."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 4:
                fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                p.copy_(torch.randn(p.shape, generator=g) * math.sqrt(2.0 / fan_in))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))


def forward_backward(module, x, gy, prefix, out):
    x = x.clone().requires_grad_(True)
    module.zero_grad()
    y = module(x)
    y.backward(gy)
    out[prefix + "y"] = y
    out[prefix + "gx"] = x.grad
    for name, p in module.named_parameters():
        out[prefix + "grad." + name] = p.grad


def block_case(out, key, module, in_shape, g, train=True):
    randomize(module, g)
    for name, p in module.named_parameters():
        out["%s.param.%s" % (key, name)] = p.detach().clone()
    for name, b in module.named_buffers():
        if b.dtype == torch.float32:
            out["%s.buffer.%s" % (key, name)] = b.detach().clone()
    x = torch.randn(in_shape, generator=g)
    module.train(train)
    with torch.no_grad():
        y_shape = module(x).shape
    # The probe forward above moved the running statistics: put them back.
    for name, b in module.named_buffers():
        if b.dtype == torch.float32:
            with torch.no_grad():
                b.copy_(out["%s.buffer.%s" % (key, name)])
    gy = torch.randn(y_shape, generator=g)
    out[key + ".x"] = x
    out[key + ".gy"] = gy
    forward_backward(module, x, gy, key + ".", out)
    for name, b in module.named_buffers():
        if b.dtype == torch.float32:
            out["%s.after.%s" % (key, name)] = b.detach().clone()


def write_blocks():
    g = torch.Generator().manual_seed(3)
    out = {}
    bn5 = nn.BatchNorm2d
    bn3 = partial(nn.BatchNorm2d, eps=1e-3)
    block_case(out, "se", SqueezeExcitation(16, 4, activation=partial(nn.SiLU, inplace=True)), (2, 16, 5, 5), g)
    block_case(out, "mbconv", MBConv(MBConvConfig(4, 3, 1, 8, 8, 1), 0.0, bn5), (2, 8, 6, 6), g)
    block_case(out, "mbconv_s2", MBConv(MBConvConfig(6, 5, 2, 8, 16, 1), 0.0, bn5), (2, 8, 7, 7), g)
    block_case(out, "fused", FusedMBConv(FusedMBConvConfig(4, 3, 2, 8, 16, 1), 0.0, bn3), (2, 8, 6, 6), g)
    block_case(out, "fused_res", FusedMBConv(FusedMBConvConfig(1, 3, 1, 8, 8, 1), 0.0, bn3), (2, 8, 5, 5), g)
    block_case(out, "mbconv_eval", MBConv(MBConvConfig(4, 3, 1, 8, 8, 1), 0.5, bn5), (2, 8, 6, 6), g, train=False)
    write_safetensors(os.path.join(OUT, "efficientnet_blocks.safetensors"), out)


def tiny_setting(arch, width, depth):
    """torchvision's inverted_residual_setting at the given multipliers (packrat's width_mult /
    depth_mult: _make_divisible(c * width, 8) channels, ceil(n * depth) blocks, for every row)."""
    if arch == "efficientnet_b0":
        bneck = partial(MBConvConfig, width_mult=width, depth_mult=depth)
        rows = [bneck(1, 3, 1, 32, 16, 1), bneck(6, 3, 2, 16, 24, 2), bneck(6, 5, 2, 24, 40, 2),
                bneck(6, 3, 2, 40, 80, 3), bneck(6, 5, 1, 80, 112, 3), bneck(6, 5, 2, 112, 192, 4),
                bneck(6, 3, 1, 192, 320, 1)]
        return rows, None, nn.BatchNorm2d
    c = lambda ch: _make_divisible(ch * width, 8)
    d = lambda n: int(math.ceil(n * depth))
    rows = [FusedMBConvConfig(1, 3, 1, c(24), c(24), d(2)), FusedMBConvConfig(4, 3, 2, c(24), c(48), d(4)),
            FusedMBConvConfig(4, 3, 2, c(48), c(64), d(4)),
            MBConvConfig(4, 3, 2, 64, 128, 6, width, depth), MBConvConfig(6, 3, 1, 128, 160, 9, width, depth),
            MBConvConfig(6, 3, 2, 160, 256, 15, width, depth)]
    return rows, c(1280), partial(nn.BatchNorm2d, eps=1e-3)


def write_tiny_model(arch):
    g = torch.Generator().manual_seed(17)
    rows, last, norm = tiny_setting(arch, 0.1, 0.1)
    out = {}
    # Eval: the model's own dropout 0.2 and stochastic depth 0.2, identity in eval.
    model = EfficientNet(copy.deepcopy(rows), 0.2, stochastic_depth_prob=0.2, num_classes=10, norm_layer=norm,
                         last_channel=last)
    randomize(model, g)
    for name, p in model.named_parameters():
        out["param." + name] = p.detach().clone()
    for name, b in model.named_buffers():
        if b.dtype == torch.float32:
            out["buffer." + name] = b.detach().clone()
    # (3, 3, 48, 48): the last stages still see 2x2 maps, so train-mode batchnorm normalizes over
    # 12 values a channel (over 2 values at batch 2 and 32x32, the gradients are ill-conditioned).
    x = torch.randn(3, 3, 48, 48, generator=g)
    gy = torch.randn(3, 10, generator=g)
    out["x"], out["gy"] = x, gy
    model.eval()
    forward_backward(model, x, gy, "eval.", out)
    # Train: the same weights in a model with dropout and stochastic depth 0.
    train_model = EfficientNet(copy.deepcopy(rows), 0.0, stochastic_depth_prob=0.0, num_classes=10, norm_layer=norm,
                               last_channel=last)
    train_model.load_state_dict(model.state_dict(), strict=True)
    train_model.train()
    forward_backward(train_model, x, gy, "train.", out)
    for name, b in train_model.named_buffers():
        if b.dtype == torch.float32:
            out["train.buffer." + name] = b.detach().clone()
    write_safetensors(os.path.join(OUT, "%s_tiny.safetensors" % arch), out)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    write_keys()
    write_blocks()
    for arch in ["efficientnet_b0", "efficientnet_v2_s"]:
        print(arch, "tiny parameters:", write_tiny_model(arch))
