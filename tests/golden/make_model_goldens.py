#!/usr/bin/python3
"""Golden files for the layers/models/optim tests, made with Debian's PyTorch 1.13 + torchvision 0.14.

Run from the repository root:  /usr/bin/python3 tests/golden/make_model_goldens.py
Writes tests/golden/models/:
  <arch>_<stem>.txt  one line per state_dict entry: "param|buffer <name> <dims...>" (torchvision, 10 classes)
  layers.txt         Linear and Conv2d forward/backward on small inputs with given weights
  basic_block.txt, bottleneck_block.txt
                     a BasicBlock / Bottleneck (GELU, stride 2, downsample) forward/backward in train mode
  optim.txt          SGD / AdamW trajectories on a small fixed problem
Numeric files hold lines "<key> <count> <values...>" with values printed to round-trip f32.
"""
import os

import torch
import torch.nn as nn
import torchvision

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


def fmt(t):
    v = t.detach().reshape(-1).tolist()
    return "%d %s" % (len(v), " ".join("%.9g" % x for x in v))


def write_keys():
    for arch in ["resnet18", "resnet34", "resnet50"]:
        for stem in ["imagenet", "cifar"]:
            m = getattr(torchvision.models, arch)(num_classes=10)
            if stem == "cifar":
                m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
                m.maxpool = nn.Identity()
            params = dict(m.named_parameters())
            with open(os.path.join(OUT, "%s_%s.txt" % (arch, stem)), "w") as f:
                for name, t in m.state_dict().items():
                    kind = "param" if name in params else "buffer"
                    f.write("%s %s %s\n" % (kind, name, " ".join(str(d) for d in t.shape)))


def write_layers():
    g = torch.Generator().manual_seed(7)
    lines = []
    # Linear 5 -> 4 on (3, 5)
    x = torch.randn(3, 5, generator=g, requires_grad=True)
    lin = nn.Linear(5, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(4, 5, generator=g))
        lin.bias.copy_(torch.randn(4, generator=g))
    y = lin(x)
    gy = torch.randn(y.shape, generator=g)
    y.backward(gy)
    for k, t in [("x", x), ("weight", lin.weight), ("bias", lin.bias), ("y", y), ("gy", gy),
                 ("gx", x.grad), ("gweight", lin.weight.grad), ("gbias", lin.bias.grad)]:
        lines.append("linear.%s %s" % (k, fmt(t)))
    # Conv2d 3 -> 4, 3x3, stride 2, padding 1 on (2, 3, 6, 6)
    x = torch.randn(2, 3, 6, 6, generator=g, requires_grad=True)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(4, 3, 3, 3, generator=g))
        conv.bias.copy_(torch.randn(4, generator=g))
    y = conv(x)
    gy = torch.randn(y.shape, generator=g)
    y.backward(gy)
    for k, t in [("x", x), ("weight", conv.weight), ("bias", conv.bias), ("y", y), ("gy", gy),
                 ("gx", x.grad), ("gweight", conv.weight.grad), ("gbias", conv.bias.grad)]:
        lines.append("conv.%s %s" % (k, fmt(t)))
    with open(os.path.join(OUT, "layers.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_block(kind):
    """A torchvision block with GELU, stride 2, with a downsample, in train mode:
    BasicBlock 8 -> 16 channels, or Bottleneck 16 -> 4 planes -> 16 channels."""
    from torchvision.models.resnet import BasicBlock, Bottleneck, conv1x1
    g = torch.Generator().manual_seed(5)
    if kind == "basic":
        block = BasicBlock(8, 16, stride=2, downsample=nn.Sequential(conv1x1(8, 16, 2), nn.BatchNorm2d(16)))
    else:
        block = Bottleneck(16, 4, stride=2, downsample=nn.Sequential(conv1x1(16, 16, 2), nn.BatchNorm2d(16)))
    block.relu = nn.GELU()
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if "weight" in name and p.dim() == 4 else 1.0))
    block.train()
    x = torch.randn(2, 8 if kind == "basic" else 16, 6, 6, generator=g, requires_grad=True)
    y = block(x)
    gy = torch.randn(y.shape, generator=g)
    y.backward(gy)
    lines = ["x %s" % fmt(x), "y %s" % fmt(y), "gy %s" % fmt(gy), "gx %s" % fmt(x.grad)]
    for name, p in block.named_parameters():
        lines.append("param.%s %s" % (name, fmt(p)))
        lines.append("grad.%s %s" % (name, fmt(p.grad)))
    for name, b in block.named_buffers():
        if b.dtype == torch.float32:
            lines.append("buffer.%s %s" % (name, fmt(b)))
    with open(os.path.join(OUT, "%s_block.txt" % kind), "w") as f:
        f.write("\n".join(lines) + "\n")


# The fixed problem: two parameters; at step k the gradient is 0.3 * p + (k + 1) * c with
# c[i] = 0.01 * ((i % 7) - 3) over each parameter's flat index. Six steps; the lr is halved
# before step 3 (0-based).
OPTIM_CONFIGS = [
    ("sgd", torch.optim.SGD, dict(lr=0.1)),
    ("sgd_momentum_wd", torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=5e-4)),
    ("sgd_nesterov_wd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)),
    ("sgd_dampening", torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.5)),
    ("adamw", torch.optim.AdamW, dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)),
    ("adamw_betas", torch.optim.AdamW, dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0)),
]


def write_optim():
    g = torch.Generator().manual_seed(11)
    p1_0 = torch.randn(3, 4, generator=g)
    p2_0 = torch.randn(5, generator=g)
    lines = ["init.p1 %s" % fmt(p1_0), "init.p2 %s" % fmt(p2_0)]
    for name, cls, kw in OPTIM_CONFIGS:
        p1 = p1_0.clone().requires_grad_(True)
        p2 = p2_0.clone().requires_grad_(True)
        opt = cls([p1, p2], **kw)
        for k in range(6):
            if k == 3:
                for group in opt.param_groups:
                    group["lr"] *= 0.5
            for p in (p1, p2):
                c = torch.tensor([0.01 * ((i % 7) - 3) for i in range(p.numel())], dtype=torch.float32)
                p.grad = (0.3 * p.detach().reshape(-1) + (k + 1) * c).reshape(p.shape)
            opt.step()
            lines.append("%s.step%d.p1 %s" % (name, k, fmt(p1)))
            lines.append("%s.step%d.p2 %s" % (name, k, fmt(p2)))
    with open(os.path.join(OUT, "optim.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    write_keys()
    write_layers()
    write_block("basic")
    write_block("bottleneck")
    write_optim()
