"""The host's speed at feeding the GPU: a fixed forward and backward of tiny layers, bound by the host.

A small micro-batch, QLoRA's 4-bit linears and LoRA's wrappers leave the GPU waiting for the host:
Python, torch's dispatcher and the kernel launches (the speed model's host terms,
cockpit/speed/model.py). How fast a rented box does that work differs between boxes of the same
card, and within a day on one box (the same 7B QLoRA step took 0.43-0.60 s on one H200 machine and
0.52-0.77 s on another, bench/results/2026-12-0[23]-*). This probe times the same kind of work with
nothing else in it: PROBE_LAYERS small linear layers (bf16, PROBE_WIDTH features, PROBE_ROWS rows)
each with an RMS norm, SiLU and a residual add, forward and backward through autograd, every kernel
a few microseconds of GPU work, so the host's time is what is measured.

One reading is not a precise figure: five probes in a row on one H200 read 4.32, 4.51, 3.79, 3.34 and
3.41 ms (bench/results/2026-12-03-host-probe-h200/), falling as the box warmed, and on one H100 the
first run's probe read 6.06 ms where the later ones read 4.27-4.37 (docs/benchmarks.md: "A plan that
is the same every time"). So the probe first warms up for WARMUP_S at least (and WARMUP iterations),
then times ROUNDS rounds of ITERATIONS iterations, the GPU synchronised at the end of each round; its
figure `ms` is the median per iteration over the rounds (the statistic the speed model's
HOST_PROBE_REFERENCE_MS was fitted with). Where the rounds spread wide (their upper over their lower
quartile past WIDE_SPREAD), a busy moment of the box is in them: the probe runs once more and keeps
the quieter of the two (the lower median: other work on the host only ever slows the probe). It
reports the spread of the rounds it kept (`spread`: upper quartile over lower) and how many probes
ran. A reading within speed.HOST_NOISE_RATIO of the reference cannot be told from that noise: the plan
ranks its splits at the reference host there (cockpit/speed/batch_choice.py, `rank_card`).

The trainer runs it before the weights load (the `speed_plan` event's `host_probe_ms`) and after the
last step (`done`'s `host_probe_end_ms`); the preflight probe runs it too. The speed model scales its
host terms by `ms` over the reference (speed.HOST_PROBE_REFERENCE_MS).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

PROBE_LAYERS = 8
PROBE_WIDTH = 64
PROBE_ROWS = 8
ITERATIONS = 10  # per round
ROUNDS = 15
WARMUP = 10  # iterations at least, and
WARMUP_S = 0.5  # seconds at least: a cold box (clocks, caches, lazily loaded kernels) reads slow
WIDE_SPREAD = 1.15  # rounds' upper over lower quartile past this: a second probe
MAX_PROBES = 2


def measure(device: int | None = None) -> dict[str, Any] | None:
    """{"ms": the figure, "min_ms", "max_ms", "low_ms", "high_ms" (the rounds' quartiles), "spread",
    "probes", "rounds"} on CUDA device `device` (the current one when None); None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    where = torch.device("cuda", torch.cuda.current_device() if device is None else device)
    once = _workload(torch, where)
    with torch.cuda.device(where):
        return probe(once, lambda: torch.cuda.synchronize(where))


def _workload(torch: Any, where: Any) -> Callable[[], None]:
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

    return once


def probe(
    once: Callable[[], None],
    sync: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """The probe's figure from `once` (one iteration) and `sync` (wait for the device): warm up, time
    the rounds, and probe once more where they spread wide (module docstring). Pure of torch: a test
    gives it a fake iteration and clock."""
    started = clock()
    done = 0
    while done < WARMUP or clock() - started < WARMUP_S:
        once()
        done += 1
    sync()
    kept: dict[str, Any] | None = None
    for n in range(1, MAX_PROBES + 1):
        reading = summarise(_rounds(once, sync, clock))
        if kept is None or reading["ms"] < kept["ms"]:
            kept = reading
        kept["probes"] = n
        if reading["spread"] <= WIDE_SPREAD:
            break
    assert kept is not None
    return kept


def _rounds(once: Callable[[], None], sync: Callable[[], None], clock: Callable[[], float]) -> list[float]:
    per_iteration = []
    for _ in range(ROUNDS):
        started = clock()
        for _ in range(ITERATIONS):
            once()
        sync()
        per_iteration.append((clock() - started) * 1000 / ITERATIONS)
    return per_iteration


def summarise(per_iteration: list[float]) -> dict[str, Any]:
    """The figure of one probe's rounds (ms per iteration): their median, extremes, quartiles and
    spread (upper quartile over lower)."""
    low, _, high = statistics.quantiles(per_iteration, n=4, method="inclusive")
    return {
        "ms": round(statistics.median(per_iteration), 4),
        "min_ms": round(min(per_iteration), 4),
        "max_ms": round(max(per_iteration), 4),
        "low_ms": round(low, 4),
        "high_ms": round(high, 4),
        "spread": round(high / low, 3) if low > 0 else 1.0,
        "rounds": len(per_iteration),
    }
