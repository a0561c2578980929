#!/usr/bin/python3
"""Golden file for `model.arch: sequential` (models/sequential_model.h; tests/models/sequential_golden_test.cpp),
made with Debian's PyTorch 1.13 (a reference only, never a dependency of packrat).

Run from the repository root:
  /usr/bin/python3 tests/golden/make_layers_golden.py
      writes tests/golden/models/layers_golden.safetensors
  /usr/bin/python3 tests/golden/make_layers_golden.py --check CONFIG.yaml CHECKPOINT.safetensors
      builds the nn.Sequential of CONFIG's model.layers for Fashion-MNIST (1x28x28, 10 classes) and loads
      a packrat checkpoint of it (RUN/checkpoints/epoch_0001.safetensors, tensors `model.<name>`) with
      strict=True

A config's layer list is built here as PyTorch modules (torch_layers below: the PyTorch equivalent of
each name), in an nn.Sequential, a residual as the module

  class Residual(nn.Module):
      def __init__(self, *layers):
          super().__init__()
          self.body = nn.Sequential(*layers)
      def forward(self, x): return x + self.body(x)

so its state_dict's names are packrat's: `0.weight`, `1.running_mean`, `4.body.0.weight`. The golden
holds random weights and batchnorm statistics (param.<name>, buffer.<name>), an input batch (N, 1, 28, 28)
and targets, and, in train mode (the dropout module alone in eval mode, so the run is deterministic):
  logits.train, loss.train, grad.<param>, buffer_after.<name>   forward + backward of the mean cross-entropy
and logits.eval: the eval-mode forward after it (with the updated statistics).
"""
import ast
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt_golden import read_safetensors, write_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
N, CHANNELS, SIDE, CLASSES = 4, 1, 28, 10

# The list tests/models/sequential_golden_test.cpp builds from the same YAML text.
LAYERS_YAML = """
- conv2d(8, 3, padding=1)
- batchnorm2d
- relu
- maxpool2d(2)
- residual: [conv2d(8, 3, padding=1, bias=false), batchnorm2d, gelu, conv2d(8, 3, padding=1), batchnorm2d]
- silu
- conv2d(16, 3, stride=2, padding=1)
- batchnorm2d
- hardswish
- avgpool2d(3, stride=1, padding=1)
- adaptive_avgpool2d(3)
- flatten
- linear(32)
- layernorm
- tanh
- dropout(0.1)
- linear(10)
"""

ACTIVATIONS = {
    "relu": nn.ReLU, "leaky_relu": lambda: nn.LeakyReLU(0.01), "relu6": nn.ReLU6, "hardswish": nn.Hardswish,
    "gelu": nn.GELU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "selu": nn.SELU,
    "softplus": nn.Softplus, "elu": nn.ELU, "mish": nn.Mish, "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
}


class Residual(nn.Module):
    """x + body(x): packrat's residual item."""

    def __init__(self, *layers):
        super().__init__()
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.body(x)


def rejoin(items):
    """YAML splits `conv2d(8, 3, padding=1)` at its commas inside [...]: join while parentheses are open."""
    out = []
    for item in items:
        if out and not isinstance(item, dict) and isinstance(out[-1], str) and out[-1].count("(") > out[-1].count(")"):
            out[-1] += ", " + str(item)
        else:
            out.append(item)
    return out


def call(text):
    """'conv2d(8, 3, padding=1)' -> ('conv2d', [8, 3], {'padding': 1})."""
    node = ast.parse(text.replace("true", "True").replace("false", "False"), mode="eval").body
    if isinstance(node, ast.Name):
        return node.id, [], {}
    keywords = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return node.func.id, [ast.literal_eval(a) for a in node.args], keywords


def torch_layer(text, x):
    """The PyTorch module of one layer's text, for input like x."""
    name, args, kw = call(text)
    if name == "conv2d":
        return nn.Conv2d(x.shape[1], *args, **kw)
    if name == "batchnorm2d":
        return nn.BatchNorm2d(x.shape[1], *args, **kw)
    if name == "linear":
        return nn.Linear(x.shape[1], *args, **kw)
    if name == "layernorm":
        return nn.LayerNorm(x.shape[1], *args, **kw)
    simple = {"maxpool2d": nn.MaxPool2d, "avgpool2d": nn.AvgPool2d, "adaptive_avgpool2d": nn.AdaptiveAvgPool2d,
              "flatten": nn.Flatten, "dropout": nn.Dropout}
    if name in simple:
        return simple[name](*args, **kw)
    return ACTIVATIONS[name](*args, **kw)


def torch_layers(items, x):
    """The modules of a layer list for input like x (shapes chained by running each), and the output."""
    modules = []
    for item in rejoin(items):
        if isinstance(item, dict):
            body, y = torch_layers(item["residual"], x)
            m = Residual(*body)
        else:
            m = torch_layer(item, x)
        m.eval()
        with torch.no_grad():
            x = m(x)
        modules.append(m)
    return modules, x


def sequential(items):
    modules, _ = torch_layers(items, torch.zeros(2, CHANNELS, SIDE, SIDE))
    return nn.Sequential(*modules)


def check(config, checkpoint):
    with open(config) as f:
        model = sequential(yaml.safe_load(f)["model"]["layers"])
    tensors = read_safetensors(checkpoint)
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(state, strict=True)
    print("loaded %d tensors of %s into the nn.Sequential of %s with strict=True" % (len(state), checkpoint, config))
    print(model)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(47)
    model = sequential(yaml.safe_load(LAYERS_YAML))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 1:  # batchnorm, layernorm
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
            elif name.endswith("num_batches_tracked"):
                b.fill_(3)
    model.load_state_dict(dict(model.state_dict()), strict=True)
    x = torch.randn(N, CHANNELS, SIDE, SIDE, generator=g)
    targets = torch.randint(0, CLASSES, (N,), generator=g)
    out = {"input": x, "targets": targets}
    for name, p in model.named_parameters():
        out["param." + name] = p
    for name, b in model.named_buffers():
        out["buffer." + name] = b.clone()
    model.train()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.eval()  # identity, as the C++ test sets it
    logits = model(x)
    loss = F.cross_entropy(logits, targets)
    loss.backward()
    out["logits.train"] = logits
    out["loss.train"] = loss.reshape(1)
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad
    for name, b in model.named_buffers():
        out["buffer_after." + name] = b
    model.eval()
    with torch.no_grad():
        out["logits.eval"] = model(x)
    path = os.path.join(HERE, "models", "layers_golden.safetensors")
    write_safetensors(path, out)
    print("wrote", path, "loss", loss.item(), "bytes", os.path.getsize(path))


if __name__ == "__main__":
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
    else:
        main()
