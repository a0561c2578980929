#!/usr/bin/python3
"""Golden values for packrat's Transformer pieces, from Debian's PyTorch 1.13 + torchvision 0.14 (CPU, f32).

Run from the repository root:  /usr/bin/python3 tests/golden/make_transformer_goldens.py
Writes tests/golden/transformer/*.txt, one tensor per line, `name rank d0 .. dk v0 v1 ...`
(the format of tests/golden/eltwise, read by tests/autograd/elementwise_golden.h):
  mha.txt  nn.MultiheadAttention(8, 2, batch_first=True) self-attention on (2, 5, 8), plain and
           causal, in train and eval mode (dropout 0): weights, input, output, upstream gradient,
           input and parameter gradients.
  vit.txt  torchvision VisionTransformer (image 8, patch 4, 2 layers, 2 heads, width 16, mlp 32,
           10 classes) on (2, 3, 8, 8) in train and eval mode: every state_dict entry, output, and
           input and parameter gradients (prefixed "grad.").
  vit_b_16_keys.txt  torchvision vit_b_16's state_dict: "param|buffer <name> <dims...>" per entry.
Inputs and weights come from torch.Generator seeds, so the files are reproducible.

  --check-checkpoint FILE  instead: load the model.* tensors of a packrat checkpoint of a vit_*
                           model (safetensors) into torchvision's VisionTransformer with
                           strict=True (its configuration read from the tensor shapes), and
                           run one forward pass.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torchvision

from make_gpt_golden import read_safetensors  # noqa: E402  (the script's own directory is on sys.path)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transformer")


def line(name, t):
    t = t.detach().to(torch.float64).contiguous()
    dims = list(t.shape)
    vals = " ".join("%.9g" % v for v in t.reshape(-1).tolist())
    return f"{name} {len(dims)} {' '.join(map(str, dims))} {vals}\n".replace("  ", " ")


def write(path, tensors):
    with open(os.path.join(OUT, path), "w") as f:
        for name, t in tensors:
            f.write(line(name, t))


def randomize(module, g, scale=0.5):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def write_mha():
    g = torch.Generator().manual_seed(11)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    randomize(mha, g)
    x0 = torch.randn(2, 5, 8, generator=g)
    gy = torch.randn(2, 5, 8, generator=g)
    out = [(k, v) for k, v in mha.state_dict().items()] + [("x", x0), ("gy", gy)]
    for mode in ["train", "eval"]:
        mha.train(mode == "train")
        for causal in [False, True]:
            tag = "%s.%s" % (mode, "causal" if causal else "full")
            mha.zero_grad()
            x = x0.clone().requires_grad_(True)
            mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1) if causal else None
            y, _ = mha(x, x, x, need_weights=False, attn_mask=mask)
            y.backward(gy)
            out += [(tag + ".y", y), (tag + ".gx", x.grad)]
            out += [(tag + ".grad." + n, p.grad.clone()) for n, p in mha.named_parameters()]
    write("mha.txt", out)


def small_vit():
    return torchvision.models.VisionTransformer(image_size=8, patch_size=4, num_layers=2, num_heads=2,
                                                hidden_dim=16, mlp_dim=32, num_classes=10)


def write_vit():
    g = torch.Generator().manual_seed(12)
    m = small_vit()
    randomize(m, g, 0.3)
    x0 = torch.randn(2, 3, 8, 8, generator=g)
    gy = torch.randn(2, 10, generator=g)
    out = [(k, v) for k, v in m.state_dict().items()] + [("x", x0), ("gy", gy)]
    for mode in ["train", "eval"]:
        m.train(mode == "train")
        m.zero_grad()
        x = x0.clone().requires_grad_(True)
        y = m(x)
        y.backward(gy)
        out += [(mode + ".y", y), (mode + ".gx", x.grad)]
        out += [(mode + ".grad." + n, p.grad.clone()) for n, p in m.named_parameters()]
    write("vit.txt", out)


def write_vit_b_16_keys():
    m = torchvision.models.vit_b_16()
    params = dict(m.named_parameters())
    with open(os.path.join(OUT, "vit_b_16_keys.txt"), "w") as f:
        for name, t in m.state_dict().items():
            kind = "param" if name in params else "buffer"
            f.write("%s %s %s\n" % (kind, name, " ".join(str(d) for d in t.shape)))


def check_checkpoint(path):
    sd = {k[6:]: v for k, v in read_safetensors(path).items() if k.startswith("model.")}
    hidden = sd["class_token"].shape[-1]
    patch = sd["conv_proj.weight"].shape[-1]
    tokens = sd["encoder.pos_embedding"].shape[1]
    side = math.isqrt(tokens - 1)
    layers = len({k.split(".")[2] for k in sd if k.startswith("encoder.layers.")})
    mlp = sd["encoder.layers.encoder_layer_0.mlp.0.weight"].shape[0]
    classes = sd["heads.head.weight"].shape[0]
    heads = int(sys.argv[3]) if len(sys.argv) > 3 else max(1, hidden // 16)
    m = torchvision.models.VisionTransformer(image_size=side * patch, patch_size=patch, num_layers=layers,
                                             num_heads=heads, hidden_dim=hidden, mlp_dim=mlp, num_classes=classes)
    if sd["conv_proj.weight"].shape[1] != 3:
        m.conv_proj = nn.Conv2d(sd["conv_proj.weight"].shape[1], hidden, patch, patch)
    m.load_state_dict(sd, strict=True)
    m.eval()
    y = m(torch.zeros(1, sd["conv_proj.weight"].shape[1], side * patch, side * patch))
    print("loaded %d tensors into torchvision VisionTransformer(image %d, patch %d, %d layers, hidden %d, mlp %d, "
          "%d classes) with strict=True; logits %s" % (len(sd), side * patch, patch, layers, hidden, mlp, classes,
                                                       tuple(y.shape)))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--check-checkpoint":
        check_checkpoint(sys.argv[2])
        sys.exit(0)
    os.makedirs(OUT, exist_ok=True)
    write_mha()
    write_vit()
    write_vit_b_16_keys()
