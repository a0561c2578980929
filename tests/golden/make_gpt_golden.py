#!/usr/bin/python3
"""Golden file for models/gpt (tests/models/gpt_test.cpp), made with Debian's PyTorch 1.13.

Run from the repository root:  /usr/bin/python3 tests/golden/make_gpt_golden.py
Writes tests/golden/models/gpt_tiny_golden.safetensors: a tiny GPT written here as a PyTorch twin
of packrat's (same parameter names; nn.MultiheadAttention with a causal mask inside), with random
weights, tokens and targets, and
  logits.train, loss.train, grad.<param>   forward + backward of the mean cross-entropy, train mode, dropout 0
  logits.eval                              forward in eval mode, no grad
The safetensors file is written by hand (the format is an 8-byte header length, a JSON header,
raw little-endian data): Debian has no python3-safetensors.
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "gpt_tiny_golden.safetensors")
VOCAB, BLOCK, LAYERS, HEADS, EMBD = 11, 8, 2, 2, 8
N, T = 2, 6


class Mlp(nn.Module):
    def __init__(self, embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(embd, 4 * embd)
        self.act = nn.GELU()
        self.c_proj = nn.Linear(4 * embd, embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embd)
        self.attn = nn.MultiheadAttention(embd, heads, dropout=dropout, batch_first=True)
        self.resid_dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(embd)
        self.mlp = Mlp(embd, dropout)

    def forward(self, x):
        t = x.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)  # True: masked
        h = self.ln_1(x)
        x = x + self.resid_dropout(self.attn(h, h, h, attn_mask=causal, need_weights=False)[0])
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """packrat's models/gpt.h in PyTorch (bench/torch_gpt_step.py uses it too)."""

    def __init__(self, vocab=VOCAB, block=BLOCK, layers=LAYERS, heads=HEADS, embd=EMBD, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, embd), wpe=nn.Embedding(block, embd), drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(embd, heads, dropout) for _ in range(layers)]), ln_f=nn.LayerNorm(embd)))
        self.lm_head = nn.Linear(embd, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1]).unsqueeze(0)
        x = self.transformer.drop(self.transformer.wte(tokens) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def write_safetensors(path, tensors):
    codes = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """The tensors of a safetensors file (F32, F64, I64, I32, U8), without the safetensors package."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": torch.float32, "I64": torch.int64, "F64": torch.float64, "I32": torch.int32, "U8": torch.uint8}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=dtypes[e["dtype"]]) if end > b else torch.zeros(0)
        out[name] = t.reshape(e["shape"])
    return out


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(12)
    model = Gpt()
    with torch.no_grad():
        for name, p in model.named_parameters():  # lm_head.weight is wte's: listed once
            scale = 0.5 if p.dim() == 2 else 0.2
            base = 1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight") else 0.0
            p.copy_(base + scale * torch.randn(p.shape, generator=g))
    tokens = torch.randint(0, VOCAB, (N, T), generator=g)
    targets = torch.randint(0, VOCAB, (N, T), generator=g)
    out = {"tokens": tokens, "targets": targets}
    for name, p in model.named_parameters():
        out["param." + name] = p
    model.train()
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
    loss.backward()
    out["logits.train"] = logits
    out["loss.train"] = loss.reshape(1)
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad
    model.eval()
    with torch.no_grad():
        out["logits.eval"] = model(tokens)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    write_safetensors(OUT, out)
    print("wrote", OUT, "loss", loss.item(), "nats =", loss.item() / math.log(2), "bits")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
