#!/usr/bin/python3
"""PyTorch's F.gelu forward + backward on (64, 64, 32, 32) f32 with 2 threads, and a clone of the
same tensor (PyTorch's memcpy) measured in the same iterations, to set beside
bench/activation_bench.cpp (BM_ActivationGeluFp32FwdBwd).

    /usr/bin/python3 bench/activation_bench_torch.py
"""
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
x = (torch.rand(64, 64, 32, 32, generator=gen) * 8 - 4).requires_grad_(True)
g = torch.rand(64, 64, 32, 32, generator=gen) * 8 - 4
copy = torch.empty_like(x)

for _ in range(3):  # warm-up
    y = F.gelu(x)
    (gx,) = torch.autograd.grad(y, x, g)

iters, t_act, t_copy, c_act, c_copy = 30, 0.0, 0.0, 0.0, 0.0
for _ in range(iters):
    c0, t0 = time.process_time(), time.perf_counter()
    y = F.gelu(x)
    (gx,) = torch.autograd.grad(y, x, g)
    t_act += time.perf_counter() - t0
    c_act += time.process_time() - c0
    c0, t0 = time.process_time(), time.perf_counter()
    copy.copy_(x.detach())
    t_copy += time.perf_counter() - t0
    c_copy += time.process_time() - c0
nbytes = x.numel() * 4
print(f"torch {torch.__version__} gelu fwd+bwd (64,64,32,32) threads=2: {1e3 * t_act / iters:.2f} ms/pass, "
      f"{nbytes * iters / t_act / 1e9:.2f} GB/s of tensor, memcpy {1e3 * t_copy / iters:.2f} ms, "
      f"fwd_bwd_over_memcpy {t_act / t_copy:.2f}; process CPU time (both threads): "
      f"{1e3 * c_act / iters:.2f} ms/pass, memcpy {1e3 * c_copy / iters:.2f} ms")
