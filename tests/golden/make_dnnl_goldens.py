#!/usr/bin/python3
"""Golden files for the oneDNN ops (conv2d, linear, matmul, batchnorm2d, pooling).

Run once with Debian's PyTorch (not a dependency of packrat):
    /usr/bin/python3 tests/golden/make_dnnl_goldens.py
Writes tests/golden/dnnl/{conv,linear,batchnorm,pool}.bin. Each case stores its inputs, the
seed gradient `g` of its output, the output and the gradients of sum(out * g).

File format (little-endian): b"PRGD", u32 count, then per tensor: u32 name length, name
(utf-8), u32 rank, i64 dims[rank], f32 data[prod(dims)] (row-major NCHW).
"""
import os
import struct

import torch
import torch.nn.functional as F

torch.manual_seed(20261122)
torch.set_num_threads(2)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dnnl")


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(b"PRGD")
        f.write(struct.pack("<I", len(tensors)))
        for name, t in tensors.items():
            t = t.detach().to(torch.float32).contiguous()
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", t.dim()))
            f.write(struct.pack(f"<{t.dim()}q", *t.shape))
            f.write(t.numpy().astype("<f4").tobytes())


def rand(*shape):
    return (torch.rand(*shape) * 2 - 1).requires_grad_(True)


def case(store, prefix, inputs, fn):
    """inputs: dict name -> leaf tensor (requires grad). Stores inputs, y, g, and grads."""
    y = fn(**inputs)
    g = torch.rand_like(y) * 2 - 1
    (y * g).sum().backward()
    for k, v in inputs.items():
        store[f"{prefix}.{k}"] = v
        if v.grad is not None:
            store[f"{prefix}.g{k}"] = v.grad
    store[f"{prefix}.y"] = y
    store[f"{prefix}.g"] = g


def conv_cases():
    s = {}
    geoms = {  # name: (x shape, w shape, bias, stride, padding, dilation, groups)
        "basic": ((2, 3, 5, 5), (4, 3, 3, 3), True, 1, 1, 1, 1),
        "strided_dilated_grouped": ((2, 4, 7, 7), (6, 2, 3, 3), True, 2, 2, 2, 2),
        "depthwise16": ((1, 16, 6, 6), (16, 1, 3, 3), False, 1, 1, 1, 16),
        "resnet_down16to32": ((2, 16, 8, 8), (32, 16, 3, 3), False, 2, 1, 1, 1),
        "pointwise_stride2": ((2, 16, 6, 6), (32, 16, 1, 1), True, 2, 0, 1, 1),
    }
    for name, (xs, ws, bias, st, pad, dil, gr) in geoms.items():
        inputs = {"x": rand(*xs), "w": rand(*ws)}
        if bias:
            inputs["b"] = rand(ws[0])
        case(s, name, inputs,
             lambda x, w, b=None: F.conv2d(x, w, b, stride=st, padding=pad, dilation=dil, groups=gr))
        s[f"{name}.options"] = torch.tensor([st, st, pad, pad, dil, dil, gr], dtype=torch.float32)
    write(os.path.join(OUT, "conv.bin"), s)


def linear_cases():
    s = {}
    case(s, "linear", {"x": rand(3, 5), "w": rand(4, 5), "b": rand(4)}, lambda x, w, b: F.linear(x, w, b))
    case(s, "linear3d", {"x": rand(2, 3, 5), "w": rand(4, 5)}, lambda x, w: F.linear(x, w))
    case(s, "matmul", {"a": rand(3, 4), "b": rand(4, 5)}, lambda a, b: a @ b)
    case(s, "bmm", {"a": rand(2, 2, 3, 4), "b": rand(2, 2, 4, 5)}, lambda a, b: a @ b)
    write(os.path.join(OUT, "linear.bin"), s)


def batchnorm_cases():
    s = {}
    for name, shape in {"bn3": (4, 3, 3, 3), "bn16": (3, 16, 4, 4)}.items():
        C = shape[1]
        rm0, rv0 = torch.rand(C) - 0.5, torch.rand(C) + 0.5
        rm, rv = rm0.clone(), rv0.clone()
        x = (torch.rand(*shape) * 4 - 1).requires_grad_(True)
        inputs = {"x": x, "w": (torch.rand(C) + 0.5).requires_grad_(True), "b": rand(C)}
        case(s, name, inputs, lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5))
        s[f"{name}.running_mean0"], s[f"{name}.running_var0"] = rm0, rv0
        s[f"{name}.running_mean"], s[f"{name}.running_var"] = rm, rv
        with torch.no_grad():
            s[f"{name}.y_eval"] = F.batch_norm(x, rm, rv, inputs["w"], inputs["b"], training=False, eps=1e-5)
    write(os.path.join(OUT, "batchnorm.bin"), s)


def pool_cases():
    s = {}
    x = torch.randperm(2 * 16 * 7 * 7).float().reshape(2, 16, 7, 7) / 100.0  # distinct: a unique argmax
    case(s, "max3s2p1", {"x": x.requires_grad_(True)}, lambda x: F.max_pool2d(x, 3, 2, 1))
    case(s, "max2s2", {"x": rand(1, 3, 5, 5)}, lambda x: F.max_pool2d(x, 2, 2, 0))
    case(s, "avg3s2p1", {"x": rand(2, 16, 7, 7)}, lambda x: F.avg_pool2d(x, 3, 2, 1))
    case(s, "avg_k3x2_s2x1_p1x1", {"x": rand(1, 3, 6, 5)}, lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 1)))
    case(s, "adaptive1", {"x": rand(2, 16, 4, 4)}, lambda x: F.adaptive_avg_pool2d(x, 1))
    case(s, "adaptive3x2", {"x": rand(1, 3, 5, 5)}, lambda x: F.adaptive_avg_pool2d(x, (3, 2)))
    write(os.path.join(OUT, "pool.bin"), s)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    conv_cases()
    linear_cases()
    batchnorm_cases()
    pool_cases()
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)), "bytes")
