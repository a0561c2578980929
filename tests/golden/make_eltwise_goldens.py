#!/usr/bin/python3
"""Golden values for packrat's activations and small ops, from PyTorch (CPU, float32).

Run once with Debian's PyTorch: /usr/bin/python3 tests/golden/make_eltwise_goldens.py
Writes tests/golden/eltwise/*.txt: one tensor per line, `name rank d0 .. dk v0 v1 ...`.
Inputs are fixed numbers (no RNG), so the files are reproducible.
"""
import math
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eltwise")


def fixed(shape, a, b, lo=-1.0, hi=1.0):
    """Deterministic pseudo-random values in [lo, hi) from a sine sequence."""
    n = math.prod(shape)
    v = [lo + (hi - lo) * (0.5 + 0.5 * math.sin(a * (i + 1) + b * (i + 1) ** 2)) for i in range(n)]
    return torch.tensor(v, dtype=torch.float32).reshape(shape)


def write(path, tensors):
    with open(os.path.join(OUT, path), "w") as f:
        for name, t in tensors:
            t = t.detach().to(torch.float64).contiguous()
            dims = list(t.shape)
            vals = " ".join(repr(float(v)) if math.isfinite(float(v)) else str(float(v)) for v in t.reshape(-1).tolist())
            f.write(f"{name} {len(dims)} {' '.join(map(str, dims))} {vals}\n".replace("  ", " "))


ACTIVATIONS = {
    "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "gelu": F.gelu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "selu": F.selu,
    "softplus": F.softplus,
    "elu": F.elu,
    "mish": F.mish,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def activations():
    special = [0.0, -3.0, 3.0, 6.0, 25.0, -25.0, 20.0, 20.5, -0.5, 1e-3, -1e-3, 0.75, -6.5, 5.999]
    x = torch.cat([fixed([50], 0.7, 0.013, -9.0, 9.0), torch.tensor(special, dtype=torch.float32)])
    g = fixed(list(x.shape), 1.3, 0.007)
    out = [("x", x), ("gout", g)]
    for name, fn in ACTIVATIONS.items():
        xx = x.clone().requires_grad_(True)
        y = fn(xx)
        (dx,) = torch.autograd.grad(y, xx, g)
        out += [(f"y_{name}", y), (f"dx_{name}", dx)]
    write("activations.txt", out)


def softmax():
    x = fixed([3, 5], 0.9, 0.02, -3.0, 3.0).requires_grad_(True)
    g = fixed([3, 5], 1.7, 0.011)
    y = torch.softmax(x, dim=-1)
    (dx,) = torch.autograd.grad(y, x, g)
    write("softmax.txt", [("x", x), ("gout", g), ("y", y), ("dx", dx)])


def layernorm():
    x = fixed([4, 6], 0.55, 0.03, -2.0, 2.0).requires_grad_(True)
    w = fixed([6], 2.1, 0.05, 0.5, 1.5).requires_grad_(True)
    b = fixed([6], 0.3, 0.09).requires_grad_(True)
    g = fixed([4, 6], 1.1, 0.017)
    y = F.layer_norm(x, [6], w, b, 1e-5)
    dx, dw, db = torch.autograd.grad(y, (x, w, b), g)
    write("layernorm.txt", [("x", x), ("w", w), ("b", b), ("gout", g), ("y", y), ("dx", dx), ("dw", dw), ("db", db)])


def cross_entropy():
    x = fixed([5, 7], 0.8, 0.021, -4.0, 4.0)
    t = torch.tensor([3, 0, 6, 2, 3], dtype=torch.int64)
    out = [("logits", x), ("targets", t)]
    for tag, ls in (("ls0", 0.0), ("ls1", 0.1)):
        xx = x.clone().requires_grad_(True)
        loss = F.cross_entropy(xx, t, label_smoothing=ls)
        (dx,) = torch.autograd.grad(loss, xx, torch.tensor(1.5))
        out += [(f"loss_{tag}", loss.reshape(1)), (f"dx_{tag}", dx)]
    write("cross_entropy.txt", out)


def embedding():
    ids = torch.tensor([[1, 4, 1], [0, 3, 1]], dtype=torch.int64)
    w = fixed([5, 4], 0.45, 0.04).requires_grad_(True)
    g = fixed([2, 3, 4], 1.9, 0.003)
    y = F.embedding(ids, w)
    (dw,) = torch.autograd.grad(y, w, g)
    write("embedding.txt", [("ids", ids), ("w", w), ("gout", g), ("y", y), ("dw", dw)])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    activations()
    softmax()
    layernorm()
    cross_entropy()
    embedding()
    print("wrote", sorted(os.listdir(OUT)))
