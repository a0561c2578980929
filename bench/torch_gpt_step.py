#!/usr/bin/env python3
"""PyTorch reference for TrainStep/gpt_small/32 (bench/gpt_train_step_bench.cpp): one AdamW
training step of the GPT twin of tests/golden/make_gpt_golden.py with gpt_small's shape (4 layers,
width 128, 4 heads, context 256, dropout 0.1, vocabulary 256) on random bytes, T = 128.
Prints one JSON line {"tok_per_s": X, "cpu_tok_per_s": Y, "threads": T}: tokens per second of wall
time, and per second of this process's CPU time (time.process_time(), every thread). Run with Debian's /usr/bin/python3."""
import argparse, json, os, sys, time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"torch_gpt_step: {e}: install Debian's python3-torch with `scripts/setup.sh --torch`, "
             "then run this with /usr/bin/python3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_gpt_golden import Gpt  # noqa: E402

PRESETS = {"gpt_tiny": dict(layers=2, heads=2, embd=64, block=128, dropout=0.0),
           "gpt_small": dict(layers=4, heads=4, embd=128, block=256, dropout=0.1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt_small", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt(vocab=256, **PRESETS[a.model])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    x = torch.randint(0, 256, (a.batch, a.seq_len))
    y = torch.randint(0, 256, (a.batch * a.seq_len,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        step()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    tokens = a.batch * a.seq_len * a.steps
    print(json.dumps({"tok_per_s": tokens / dt, "cpu_tok_per_s": tokens / dc, "threads": a.threads}))


if __name__ == "__main__":
    main()
