#!/usr/bin/python3
"""Golden files for models/bert (tests/models/bert_test.cpp), made with Debian's PyTorch 1.13.

Run from the repository root:  /usr/bin/python3 tests/golden/make_bert_golden.py
Writes tests/golden/models/bert_golden_{post_ln_classes,pre_ln_tokens}.safetensors. The model is
PyTorch's own nn.TransformerEncoder(nn.TransformerEncoderLayer(...)) with BERT's embeddings and
heads around it, named as packrat's models/bert.h, so a packrat checkpoint's weights load here with
strict=True (load_state_dict below is strict). Random weights, tokens with padding after the
first pad token (0; the key padding packrat derives from the tokens), targets, and
  logits.train, loss.train, grad.<param>   forward + backward of the mean cross-entropy, train mode, dropout 0
  logits.eval                              forward in eval mode, no grad
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt_golden import write_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, POSITIONS, HIDDEN, HEADS, INTERMEDIATE, LAYERS, CLASSES = 256, 12, 16, 2, 32, 2, 5
N, T = 3, 9
PAD, CLS = 0, 1
EPS = 1e-12


class Embeddings(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(POSITIONS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        x = self.word_embeddings(tokens) + self.position_embeddings(pos) + self.token_type_embeddings(torch.zeros_like(tokens))
        return self.dropout(self.norm(x))


class MlmHead(nn.Module):
    def __init__(self, word_weight):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.bias = nn.Parameter(torch.zeros(VOCAB))
        self.word_weight = word_weight  # tied: not a parameter of the head

    def forward(self, x):
        return F.linear(self.norm(F.gelu(self.dense(x))), self.word_weight, self.bias)


class Bert(nn.Module):
    """packrat's models/bert.h in PyTorch."""

    def __init__(self, head, norm_first, dropout=0.0):
        super().__init__()
        self.embeddings = Embeddings(dropout)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, INTERMEDIATE, dropout, activation="gelu",
                                           layer_norm_eps=EPS, batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, norm=nn.LayerNorm(HIDDEN, eps=EPS) if norm_first else None,
                                             enable_nested_tensor=False)
        self.head = head
        if head == "classes":
            self.pooler = nn.ModuleDict(dict(dense=nn.Linear(HIDDEN, HIDDEN)))
            self.dropout = nn.Dropout(dropout)
            self.classifier = nn.Linear(HIDDEN, CLASSES)
        else:
            self.mlm = MlmHead(self.embeddings.word_embeddings.weight)

    def forward(self, tokens):
        # Keys at and after each row's first pad token are masked (at least the first key is kept).
        is_pad = tokens == PAD
        first = torch.where(is_pad.any(1), is_pad.int().argmax(1), torch.full_like(tokens[:, 0], tokens.shape[1]))
        length = first.clamp(min=1)
        mask = torch.arange(tokens.shape[1]).unsqueeze(0) >= length.unsqueeze(1)  # True: ignored
        x = self.encoder(self.embeddings(tokens), src_key_padding_mask=mask)
        if self.head == "classes":
            return self.classifier(self.dropout(torch.tanh(self.pooler["dense"](x[:, 0]))))
        return self.mlm(x)


def make(name, head, norm_first, g):
    model = Bert(head, norm_first)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname and pname.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_((0.5 if p.dim() == 2 else 0.2) * torch.randn(p.shape, generator=g))
    # A packrat checkpoint's names load strictly: the state dict holds exactly packrat's parameters.
    model.load_state_dict(dict(model.state_dict()), strict=True)
    tokens = torch.randint(3, VOCAB, (N, T), generator=g)
    tokens[:, 0] = CLS
    if head == "classes":
        tokens[1, 5:] = PAD
        tokens[2, 2:] = PAD
        targets = torch.randint(0, CLASSES, (N,), generator=g)
    else:
        targets = torch.randint(0, VOCAB, (N, T), generator=g)
    out = {"tokens": tokens, "targets": targets}
    for pname, p in model.named_parameters():
        out["param." + pname] = p
    model.train()
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    out["logits.train"] = logits
    out["loss.train"] = loss.reshape(1)
    for pname, p in model.named_parameters():
        out["grad." + pname] = p.grad
    model.eval()
    with torch.no_grad():
        out["logits.eval"] = model(tokens)
    path = os.path.join(HERE, "models", "bert_golden_%s.safetensors" % name)
    write_safetensors(path, out)
    print("wrote", path, "loss", loss.item())


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(42)
    make("post_ln_classes", "classes", False, g)
    make("pre_ln_tokens", "tokens", True, g)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
