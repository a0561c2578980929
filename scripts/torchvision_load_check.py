#!/usr/bin/python3
"""A packrat EfficientNet checkpoint in torchvision: load_state_dict(strict=True), then the test set.

Reads a packrat training checkpoint (safetensors; the model's tensors are `model.<torchvision name>`),
builds torchvision 0.14's EfficientNet with the same configuration (the preset's rows scaled by its
width / depth multipliers, as tests/golden/make_efficientnet_goldens.py does; the cifar stem swaps
features.0.0 for a stride-1 conv with the dataset's channels), loads the weights with strict=True
and evaluates the Fashion-MNIST test set in eval mode with the trainer's normalization. The loss
and accuracy printed must equal the run's metrics.csv row for that epoch (packrat's own eval).

  /usr/bin/python3 scripts/torchvision_load_check.py runs/efficientnet_fmnist/checkpoints/epoch_0003.safetensors \
      --arch efficientnet_b0_small [--metrics runs/efficientnet_fmnist/metrics.csv]
"""
import argparse
import csv
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.efficientnet import EfficientNet

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_efficientnet_goldens import tiny_setting  # noqa: E402  (the rows at given multipliers)

PRESETS = {  # arch: (torchvision base, width, depth, stem)
    "efficientnet_b0": ("efficientnet_b0", 1.0, 1.0, "imagenet"),
    "efficientnet_v2_s": ("efficientnet_v2_s", 1.0, 1.0, "imagenet"),
    "efficientnet_b0_small": ("efficientnet_b0", 0.5, 0.5, "cifar"),
    "efficientnet_v2_small": ("efficientnet_v2_s", 0.5, 0.25, "cifar"),
}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    types = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype=types[v["dtype"]]).copy().reshape(v["shape"]))
    return out


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw[4 + 4 * dims:], dtype=np.uint8).reshape(shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--arch", default="efficientnet_b0_small")
    ap.add_argument("--stem", default="", help="imagenet | cifar (default: the preset's own)")
    ap.add_argument("--width-mult", type=float, default=1.0)
    ap.add_argument("--depth-mult", type=float, default=1.0)
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--metrics", default="", help="the run's metrics.csv, to compare with")
    a = ap.parse_args()

    base, width, depth, stem = PRESETS[a.arch]
    stem = a.stem or stem
    state = {k[len("model."):]: v for k, v in read_safetensors(a.checkpoint).items() if k.startswith("model.")}
    classes = state["classifier.1.weight"].shape[0]
    in_channels = state["features.0.0.weight"].shape[1]
    rows, last, norm = tiny_setting(base, width * a.width_mult, depth * a.depth_mult)
    model = EfficientNet(rows, 0.2, num_classes=classes, norm_layer=norm, last_channel=last)
    first = model.features[0][0]
    model.features[0][0] = nn.Conv2d(in_channels, first.out_channels, 3, stride=1 if stem == "cifar" else 2,
                                     padding=1, bias=False)
    model.load_state_dict(state, strict=True)  # every key, every shape, nothing left over
    print("loaded %d tensors into torchvision's EfficientNet with strict=True" % len(state))

    images = read_idx(os.path.join(a.root, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    labels = torch.from_numpy(read_idx(os.path.join(a.root, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
    x = (torch.from_numpy(images).unsqueeze(1) - 0.2860) / 0.3530  # normalize(fashion_mnist)
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), 500):
            logits = model(x[i:i + 500])
            loss += F.cross_entropy(logits, labels[i:i + 500], reduction="sum").item()
            correct += (logits.argmax(1) == labels[i:i + 500]).sum().item()
    print("torchvision eval: test loss %.6f acc %.4f" % (loss / len(x), correct / len(x)))
    if a.metrics:
        epoch = int(os.path.basename(a.checkpoint).split("_")[1].split(".")[0])
        for row in csv.DictReader(open(a.metrics)):
            if int(row["epoch"]) == epoch:
                print("packrat eval (metrics.csv, epoch %d): test loss %.6f acc %.4f"
                      % (epoch, float(row["test_loss"]), float(row["test_acc"])))


if __name__ == "__main__":
    main()
