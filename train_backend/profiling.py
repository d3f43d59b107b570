"""A profile of a few optimizer steps (debug.profile_steps): where a step's time goes.

torch.profiler records the steps from `debug.profile_from_step` on; the summary, written to
`profile.json` in the run directory, gives per optimizer step: the device time of the kernels by
kind (matmul, attention, dequantisation, Triton, elementwise, copy, ...), how many kernels ran,
how many the host launched and how long the host's launch calls took, and the share of the wall
time the device was busy. On the CPU (no kernels) it gives the host's operator time by the same
kinds. `kind_of` and `summarize` take plain names and numbers, so a bench can apply them to another
trainer's profile (bench/vs_unsloth.py, the unsloth side).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

PROFILE_FILE = "profile.json"
# first match wins: the patterns are looked for in the kernel's (or operator's) lower-cased name
KINDS = (
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("dequantisation", ("dequant", "kquantize", "bnb")),
    (
        "matmul",
        ("gemm", "nvjet", "matmul", "cutlass", "xmma", "cublas", "aten::mm", "aten::addmm", "aten::bmm"),
    ),
    ("triton", ("triton", "liger")),
    ("copy", ("memcpy", "copy_", "aten::to", "aten::_to_copy")),
    ("memset", ("memset", "fill_", "zero_")),
    ("optimizer", ("adam", "optimizer", "foreach")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "reduce", "softmax", "norm", "silu", "aten::")),
)
LAUNCH_CALLS = ("cudalaunchkernel", "culaunchkernel", "cudalaunchkernelexc", "culaunchkernelex")
TOP = 15


BY_NAME_FIRST = ("attention", "dequantisation", "matmul")  # told by name before the Triton test


def kind_of(name: str) -> str:
    """The kind of a kernel (or of a CPU operator, `aten::...`) by its name. A Triton kernel is named
    after its Python function alone (`_rms_norm_forward_kernel`), where a CUDA C++ kernel comes with
    its signature (`void at::native::...<...>(...)`), and cuBLAS's own are told by name first."""
    lower = name.lower()
    kind = next((k for k, patterns in KINDS if any(p in lower for p in patterns)), "other")
    if kind not in BY_NAME_FIRST and name.isidentifier() and "kernel" in lower:
        return "triton"
    return kind


def summarize(
    kernels: list[tuple[str, float, int]],
    launches: tuple[int, float],
    steps: int,
    wall_s: float,
    device: str,
) -> dict:
    """`kernels`: (name, self time in seconds, count) of each device kernel (on the CPU: of each
    operator, its self CPU time); `launches`: (count, seconds) of the host's launch calls; all over
    `steps` optimizer steps that took `wall_s`. Returns per-step figures."""
    steps = max(1, steps)
    by_kind: dict[str, float] = {}
    count_by_kind: dict[str, int] = {}
    for name, seconds, count in kernels:
        kind = kind_of(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
        count_by_kind[kind] = count_by_kind.get(kind, 0) + count
    busy = sum(by_kind.values())
    top = sorted(kernels, key=lambda k: -k[1])[:TOP]
    return {
        "device": device,
        "steps": steps,
        "wall_s_per_step": round(wall_s / steps, 4),
        "time_is": "device kernel time" if device == "cuda" else "host operator self time",
        "s_per_step_by_kind": {
            k: round(v / steps, 5) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])
        },
        "count_per_step_by_kind": {k: round(v / steps, 1) for k, v in count_by_kind.items()},
        "busy_s_per_step": round(busy / steps, 4),
        "busy_share": round(busy / wall_s, 4) if wall_s > 0 else None,
        "launches_per_step": round(launches[0] / steps, 1),
        "launch_s_per_step": round(launches[1] / steps, 5),
        "top": [
            {
                "name": n[:160],
                "kind": kind_of(n),
                "s_per_step": round(s / steps, 5),
                "count_per_step": round(c / steps, 1),
            }
            for n, s, c in top
        ],
    }


def from_profiler(prof, steps: int, wall_s: float, device: str) -> dict:
    """The summary of a finished torch.profiler.profile."""
    kernels, launches, launch_s = [], 0, 0.0
    for e in prof.key_averages():
        name = e.key
        if name.lower() in LAUNCH_CALLS:
            launches += e.count
            launch_s += e.self_cpu_time_total / 1e6
            continue
        # a record_function range (Optimizer.step#AdamW.step) shows on the device as the span of
        # the kernels under it: counting it would count them twice
        if getattr(e, "is_user_annotation", False):
            continue
        if device == "cuda":
            device_us = getattr(e, "self_device_time_total", None)
            if device_us is None:
                device_us = getattr(e, "self_cuda_time_total", 0)
            if str(getattr(e, "device_type", "")).endswith("CUDA") and device_us > 0:
                kernels.append((name, device_us / 1e6, e.count))
        elif name.startswith("aten::") and e.self_cpu_time_total > 0:
            kernels.append((name, e.self_cpu_time_total / 1e6, e.count))
    return summarize(kernels, (launches, launch_s), steps, wall_s, device)


def make_profile_callback(run_path: Path, start_step: int, steps: int, emitter=None):
    """A TrainerCallback that profiles optimizer steps start_step .. start_step + steps - 1."""
    import torch
    from transformers import TrainerCallback

    cuda = torch.cuda.is_available()
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if cuda else []
    )

    class ProfileCallback(TrainerCallback):
        def __init__(self):
            self.prof = None
            self.began = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            if self.prof is None and state.global_step + 1 == start_step:
                if cuda:
                    torch.cuda.synchronize()
                self.prof = torch.profiler.profile(activities=activities)
                self.prof.__enter__()
                self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self.prof is None or state.global_step < start_step + steps - 1 or self.began == 0.0:
                return
            if cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.began
            self.prof.__exit__(None, None, None)
            self.began = 0.0
            summary = from_profiler(self.prof, steps, wall, "cuda" if cuda else "cpu")
            summary["first_step"] = start_step
            (run_path / PROFILE_FILE).write_text(json.dumps(summary, indent=1) + "\n")
            if emitter is not None:
                emitter.emit(
                    "warning",
                    message=f"debug.profile_steps: steps {start_step}-{start_step + steps - 1} profiled "
                    f"(slower while profiled), {PROFILE_FILE} in the run directory",
                    hint="",
                )

    return ProfileCallback()
