#!/usr/bin/env python3
"""PyTorch's anchor for packrat's recomputation (docs/recompute.md): one SGD training step
(momentum 0.9, nesterov, weight decay 5e-4, as configs/quickstart.yaml) of torchvision's
ResNet-50 on random 3xSxS images, without recomputation and with every bottleneck checkpointed
(torch.utils.checkpoint.checkpoint around each block, the reentrant variant PyTorch 1.13 defaults
to: what checkpoint_sequential does with one segment per block, except that it leaves each
stage's last block out), alternated REPEATS times in one process. Prints one
JSON line {"plain_ms": A, "recompute_ms": B, "ratio": B / A, "threads": T, "batch": N, "size": S}
with the median step times. Run with Debian's /usr/bin/python3 (python3-torch,
python3-torchvision)."""
import argparse, json, statistics, sys, time

try:
    import torch, torch.nn as nn, torchvision
    from torch.utils.checkpoint import checkpoint
except ImportError as e:
    sys.exit(f"torch_recompute_step: {e}: install Debian's python3-torch and python3-torchvision "
             "with `scripts/setup.sh --torch`, then run this with /usr/bin/python3")


class Checkpointed(nn.Module):
    """ResNet-50 whose stages recompute each bottleneck in backward."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        m = self.m
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        for stage in (m.layer1, m.layer2, m.layer3, m.layer4):
            for block in stage:
                x = checkpoint(block, x)
        return m.fc(torch.flatten(m.avgpool(x), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    base = torchvision.models.resnet50(num_classes=10)
    models = {"plain": base, "recompute": Checkpointed(base)}
    opt = torch.optim.SGD(base.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step(model):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    times = {k: [] for k in models}
    for name, model in models.items():  # warm-up
        step(model)
    for _ in range(a.repeats):
        for name, model in models.items():
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step(model)
            times[name].append((time.perf_counter() - t0) / a.steps * 1e3)
    plain, recompute = statistics.median(times["plain"]), statistics.median(times["recompute"])
    print(json.dumps({"plain_ms": plain, "recompute_ms": recompute, "ratio": recompute / plain,
                      "threads": a.threads, "batch": a.batch, "size": a.size}))


if __name__ == "__main__":
    main()
