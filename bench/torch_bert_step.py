#!/usr/bin/env python3
"""PyTorch's twin of packrat's BERT classification step on a GPU (scripts/device_check.sh's
`levers` phase; packrat's side is `trainer --config configs/bert_fortunes.yaml --set
model.arch=bert_base --benchmark N`): byte tokens (vocabulary 256), word + position + token-type
embeddings and LayerNorm, post-LN nn.TransformerEncoderLayer blocks (GELU, dropout 0.1, width D,
D / 64 heads, 4 D intermediate), a linear classifier on the first token, AdamW (lr 1e-3, weight
decay 0.01), random tokens of --seq-len with no padding. The layers' attention goes through
F.scaled_dot_product_attention, restricted with --attention to one of its kernels: `math` (the
standard algorithm, the (T, T) probabilities saved), `efficient` (memory-efficient attention,
packrat's model.attention: memory_efficient) or `flash`; `any` lets PyTorch pick.
Prints one JSON line {"img_per_s", "tok_per_s", "peak_bytes", "device", "attention", "autocast"}.
Needs PyTorch 2.3 or later (torch.nn.attention.sdpa_kernel): the GPU machine's 2.11."""
import argparse, contextlib, json, sys, time

import torch, torch.nn as nn

SIZES = {"bert_tiny": (2, 128), "bert_small": (4, 512), "bert_base": (12, 768), "bert_large": (24, 1024)}


class Bert(nn.Module):
    def __init__(self, layers, hidden, classes, max_positions=512):
        super().__init__()
        self.word = nn.Embedding(256, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(hidden, hidden // 64, 4 * hidden, 0.1, activation="gelu",
                                           layer_norm_eps=1e-12, batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.word(tokens) + self.position(positions) + self.token_type(torch.zeros_like(tokens))
        return self.classifier(self.encoder(self.dropout(self.norm(x)))[:, 0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert_base", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--attention", default="any", choices=["any", "math", "efficient", "flash"])
    ap.add_argument("--autocast", default="", choices=["", "bf16"])
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_bert_step: this PyTorch sees no GPU (the twin runs on a GPU only)")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kernels = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    restrict = (lambda: sdpa_kernel(kernels[a.attention])) if a.attention in kernels else contextlib.nullcontext
    torch.manual_seed(0)
    layers, hidden = SIZES[a.model]
    model = Bert(layers, hidden, 43).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, 256, (a.batch, a.seq_len), device="cuda")
    labels = torch.randint(0, 43, (a.batch,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with restrict(), \
                torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = loss_fn(model(tokens), labels)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"img_per_s": a.batch * a.steps / dt, "tok_per_s": a.batch * a.seq_len * a.steps / dt,
                      "peak_bytes": torch.cuda.max_memory_allocated(), "device": torch.cuda.get_device_name(),
                      "attention": a.attention, "autocast": a.autocast}))


if __name__ == "__main__":
    main()
