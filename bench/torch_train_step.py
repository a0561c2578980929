#!/usr/bin/env python3
"""PyTorch reference for TrainStep/<model>/<batch>: one SGD training step of ResNet-18 (CIFAR
stem: 3x3 stride-1 conv, no max-pool; GELU activations), of EfficientNet-B0 with a stride-1
stem (--model efficientnet_b0_cifar) or of the CIFAR ViT (--model vit_tiny_cifar), on random
3x32x32 images. --device cuda runs it on the GPU as fast as PyTorch goes there: channels_last
model and batch, cudnn.benchmark, the batch waiting on the GPU, synchronised before the clock
is read (the GPU machine's PyTorch 2.11; packrat_bench's TrainStep/resnet18_cifar_gelu_cuda/N).
Prints one JSON line {"img_per_s": X, "cpu_img_per_s": Y, "threads": T}: images per second of wall
time, and per second of this process's CPU time (time.process_time(), every thread); on a GPU also
"device" and "peak_bytes" (torch.cuda.max_memory_allocated). Run with Debian's /usr/bin/python3 for the CPU."""
import argparse, contextlib, json, sys, time

try:
    import torch, torch.nn as nn, torchvision
except ImportError as e:
    sys.exit(f"torch_train_step: {e}: install Debian's python3-torch and python3-torchvision "
             "with `scripts/setup.sh --torch`, then run this with /usr/bin/python3")


def resnet18_cifar_gelu(num_classes=10):
    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    for mod in list(m.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(mod, name, nn.GELU())
    # torchvision's BasicBlock calls self.relu twice; replacing the module covers both uses.
    return m


def vit_tiny_cifar(num_classes=10):
    # packrat's vit_tiny_cifar preset: 32x32, patch 4, 6 blocks of width 192, 3 heads, MLP 384.
    return torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                                hidden_dim=192, mlp_dim=384, num_classes=num_classes)


def efficientnet_b0_cifar(num_classes=10):
    """torchvision's efficientnet_b0 with a stride-1 stem (packrat's `stem: cifar`)."""
    m = torchvision.models.efficientnet_b0(num_classes=num_classes)
    m.features[0][0] = nn.Conv2d(3, 32, 3, 1, 1, bias=False)
    return m


def checkpointed_blocks(m):
    """A ResNet's forward with each residual block recomputed in backward (the stem and head kept)."""
    from torch.utils.checkpoint import checkpoint

    def forward(x):
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        for stage in (m.layer1, m.layer2, m.layer3, m.layer4):
            for block in stage:
                x = checkpoint(block, x, use_reentrant=False)
        return m.fc(torch.flatten(m.avgpool(x), 1))
    return forward


MODELS = {"resnet18_cifar_gelu": resnet18_cifar_gelu, "vit_tiny_cifar": vit_tiny_cifar,
          "efficientnet_b0_cifar": efficientnet_b0_cifar}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18_cifar_gelu", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--autocast", default="", choices=["", "bf16"],
                    help="bf16: the forward and loss under torch.autocast(dtype=torch.bfloat16)")
    ap.add_argument("--lever", default="", choices=["", "checkpoint", "save_on_cpu"],
                    help="checkpoint: every residual block recomputed in backward (torch.utils.checkpoint, "
                         "non-reentrant), packrat's memory.recompute: [blocks]; save_on_cpu: every saved tensor "
                         "in pinned host memory (torch.autograd.graph.save_on_cpu), packrat's memory.offload: {}")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    gpu = a.device == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit("torch_train_step: --device cuda, but this PyTorch sees no GPU")
    model = MODELS[a.model]()
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))
    if gpu:
        torch.backends.cudnn.benchmark = True
        model = model.to("cuda", memory_format=torch.channels_last)
        x = x.to("cuda").contiguous(memory_format=torch.channels_last)
        y = y.to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if gpu else (lambda: None)

    forward = model
    if a.lever == "checkpoint":
        forward = checkpointed_blocks(model)
    offload = (lambda: torch.autograd.graph.save_on_cpu(pin_memory=True)) if a.lever == "save_on_cpu" else \
        contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.autocast == "bf16"), offload():
            loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync()
    if gpu:
        torch.cuda.reset_peak_memory_stats()
        # The timed steps are the profiled ones under `ncu --profile-from-start off` or `nsys
        # --capture-range=cudaProfilerApi` (scripts/device_check.sh), not cuDNN's algorithm search
        # in the warm-up; without a profiler this does nothing.
        torch.cuda.profiler.start()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        step()
    sync()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    if gpu:
        torch.cuda.profiler.stop()
    out = {"img_per_s": a.batch * a.steps / dt, "cpu_img_per_s": a.batch * a.steps / dc, "threads": a.threads}
    if gpu:
        out.update(device=torch.cuda.get_device_name(), peak_bytes=torch.cuda.max_memory_allocated())
    if a.autocast or a.lever:
        out.update(autocast=a.autocast, lever=a.lever)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
