"""The host's speed at feeding the GPU: a fixed forward and backward of tiny layers, bound by the host.

A small micro-batch, QLoRA's 4-bit linears and LoRA's wrappers leave the GPU waiting for the host:
Python, torch's dispatcher and the kernel launches (the speed model's host terms,
cockpit/speed/model.py). How fast a rented box does that work differs between boxes of the same
card, and within a day on one box (the same 7B QLoRA step took 0.43-0.60 s on one H200 machine and
0.52-0.77 s on another, bench/results/2026-12-0[23]-*). This probe times the same kind of work with
nothing else in it: PROBE_LAYERS small linear layers (bf16, PROBE_WIDTH features, PROBE_ROWS rows)
each with an RMS norm, SiLU and a residual add, forward and backward through autograd, every kernel
a few microseconds of GPU work, so the host's time is what is measured. `ms` is the median over
ROUNDS of the time per iteration, the GPU synchronised at the end of each round.

The trainer runs it before the weights load (the `speed_plan` event's `host_probe_ms`) and after the
last step (`done`'s `host_probe_end_ms`); the preflight probe runs it too. The speed model scales its
host terms by `ms` over the reference (speed.HOST_PROBE_REFERENCE_MS).
"""

from __future__ import annotations

import statistics
import time

PROBE_LAYERS = 8
PROBE_WIDTH = 64
PROBE_ROWS = 8
ITERATIONS = 10  # per round
ROUNDS = 9
WARMUP = 10


def measure(device: int | None = None) -> dict | None:
    """{"ms": median per iteration, "min_ms", "max_ms"} on CUDA device `device` (the current one when
    None); None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    where = torch.device("cuda", torch.cuda.current_device() if device is None else device)
    generator = torch.Generator().manual_seed(0)
    layers = [
        torch.nn.Linear(PROBE_WIDTH, PROBE_WIDTH, bias=False).to(where, torch.bfloat16)
        for _ in range(PROBE_LAYERS)
    ]
    for layer in layers:
        with torch.no_grad():
            layer.weight.copy_(torch.randn(PROBE_WIDTH, PROBE_WIDTH, generator=generator) * 0.1)
    x = torch.randn(PROBE_ROWS, PROBE_WIDTH, generator=generator).to(where, torch.bfloat16)

    def once() -> None:
        h = x
        for layer in layers:
            wide = h.float()
            normed = (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)
            h = h + torch.nn.functional.silu(layer(normed))
        h.float().pow(2).mean().backward()
        for layer in layers:
            layer.weight.grad = None

    with torch.cuda.device(where):
        for _ in range(WARMUP):
            once()
        torch.cuda.synchronize(where)
        per_iteration = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(ITERATIONS):
                once()
            torch.cuda.synchronize(where)
            per_iteration.append((time.perf_counter() - started) * 1000 / ITERATIONS)
    return {
        "ms": round(statistics.median(per_iteration), 4),
        "min_ms": round(min(per_iteration), 4),
        "max_ms": round(max(per_iteration), 4),
    }
