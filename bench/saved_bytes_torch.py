#!/usr/bin/python3
"""Bytes PyTorch keeps for backward per sample, for a torchvision model in train mode.

    /usr/bin/python3 bench/saved_bytes_torch.py [--model vit_b_16] [--size 224] [--batch 2] [--classes 1000]

Every tensor autograd saves passes through torch.autograd.graph.saved_tensors_hooks; tensors are
deduplicated by storage (a buffer saved by two ops, or a view of it, counts once), and
parameters (weights saved by linear / conv / layernorm) are left out: they are model state,
not activations, as packrat's memory report leaves them out too. Each storage counts its
whole nbytes. Prints the total per sample in bytes and MiB, and the biggest contributors by the
autograd node that saved them (first saver).
"""
import argparse
import collections

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vit_b_16")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--classes", type=int, default=1000)
    a = ap.parse_args()
    torch.manual_seed(0)
    m = getattr(torchvision.models, a.model)(num_classes=a.classes) if a.model != "vit_b_16" or a.size == 224 \
        else torchvision.models.vit_b_16(num_classes=a.classes, image_size=a.size)
    m.train()
    params = {p.storage().data_ptr() for p in m.parameters()}
    seen = {}  # storage data_ptr -> (nbytes, shape)
    x = torch.randn(a.batch, 3, a.size, a.size)

    def pack(t):
        s = t.storage()
        ptr = s.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr] = (s.nbytes(), tuple(t.shape), t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = m(x)
    total = sum(n for n, _, _ in seen.values())
    by_shape = collections.Counter()
    for n, shape, dtype in seen.values():
        by_shape[(shape, str(dtype))] += n
    print("%s %dx%d batch %d: %d saved storages, %d bytes per sample (%.2f MiB)" % (
        a.model, a.size, a.size, a.batch, len(seen), total // a.batch, total / a.batch / 2**20))
    for (shape, dtype), n in by_shape.most_common(12):
        print("  %-28s %-14s %10.2f MiB per sample" % (shape, dtype, n / a.batch / 2**20))
    y.sum().backward()


if __name__ == "__main__":
    main()
