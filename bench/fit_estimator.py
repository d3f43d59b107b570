#!/usr/bin/env python3
"""Fit the memory model's coefficients to measured points, and test it left-one-out.

Three coefficients, ACTIVATION_SCALE, HF_LOGITS_BYTES and LIGER_ACTIVATION_SCALE (on the points
whose speed plan applied Liger's kernels only) (the hf QLoRA path's fp32 tensors, LoRA
dropout and the optimizer step are counted from the library sources, not fitted), read through
`cockpit.models.memory` itself and fitted by least squares (Gauss-Newton: the estimate is linear
in them but for the max of the backward's and the optimizer step's peak) to the NVML-measured
peaks:

- the product's own points (bench/memory_points.py, TRL SFTTrainer), and the reference
  run of seed_recipe.py with checkpointing (shared/bench/README.md: 6.12 GiB);
- S0, S1, S2 of shared/reference/memory.md (plain HF Trainer).

  python bench/fit_estimator.py [POINTS.jsonl ...]

Prints the coefficients fitted on all points, then each point predicted by a fit without it
(left-one-out), and the median and worst of those errors: held-out figures only.
docs/estimator.md records the output.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.config.load import config_from_dotted  # noqa: E402
from cockpit.models import memory as est  # noqa: E402
from cockpit.models.shape import load_shape  # noqa: E402

QV = ["q_proj", "v_proj"]
COEFFICIENTS = ("ACTIVATION_SCALE", "HF_LOGITS_BYTES", "LIGER_ACTIVATION_SCALE")
REFERENCE = [  # (name, workload settings, measured NVML GiB)
    (
        "seed_recipe (ckpt)",
        dict(method="qlora", gradient_checkpointing=True, optimizer="paged_adamw_32bit"),
        6.12,
    ),
    (
        "S0",
        dict(method="qlora", gradient_checkpointing=False, optimizer="paged_adamw_32bit", trainer="hf"),
        20.95,
    ),
    (
        "S1",
        dict(method="qlora", gradient_checkpointing=True, optimizer="paged_adamw_32bit", trainer="hf"),
        8.34,
    ),
    ("S2", dict(method="lora", gradient_checkpointing=False, optimizer="adamw_torch", trainer="hf"), 25.02),
]


def points(files: list[Path]) -> list[tuple[str, est.Workload, float]]:
    out = []
    for file in files:
        for line in file.read_text().splitlines():
            p = json.loads(line)
            if "device_used_gib" not in p:
                continue
            o = p["overrides"]
            w = est.Workload(
                shape=load_shape(f"synthetic:{p['arch']}"),
                method=p["method"],
                lora_r=o.get("lora.r", 8),
                lora_targets=o.get("lora.target_modules", "all-linear"),
                lora_dropout=o.get("lora.dropout", 0.1),  # bench/memory_points.py's config_yaml
                seq_len=o["training.max_length"],
                micro_batch=o["training.micro_batch_size"],
                gradient_checkpointing=o["training.gradient_checkpointing"],
                optimizer=o["training.optimizer"],
                precision=o.get("training.precision", "bf16"),
                liger=bool(p.get("liger")),  # what the run's speed plan applied
                checkpoint_offload=bool(p.get("checkpoint_offload")),
            )
            out.append((p["name"], w, p["device_used_gib"]))
    s7 = load_shape("synthetic:llama-2-7b")
    for name, settings, measured in REFERENCE:
        out.append(
            (name, est.Workload(shape=s7, lora_targets=QV, seq_len=512, micro_batch=4, **settings), measured)
        )
    return out


def point_workload(point: dict) -> est.Workload:
    """The estimate's inputs for a point measured by bench/memory_points.py (its config keys)."""
    cfg = config_from_dotted(
        {"model.name": f"synthetic:{point['arch']}", "method": point["method"], **point["overrides"]}
    )
    return est.workload_from_config(cfg, load_shape(cfg.model.name))


def peak_with(w: est.Workload, values: tuple[float, ...]) -> float:
    saved = [getattr(est, c) for c in COEFFICIENTS]
    try:
        for name, value in zip(COEFFICIENTS, values):
            setattr(est, name, value)
        return est.estimate_memory(w).peak_bytes
    finally:
        for name, value in zip(COEFFICIENTS, saved):
            setattr(est, name, value)


def fit(data: list[tuple[str, est.Workload, float]], start: np.ndarray) -> np.ndarray:
    """Least squares of the predicted against the measured peaks (bytes), by Gauss-Newton: the
    estimate is linear in the coefficients except where the optimizer step's peak takes over from
    the backward's (a max), so a few linearisations converge."""
    coef = start.astype(float)
    target = np.array([m * est.GIB for *_, m in data])
    for _ in range(8):
        now = np.array([peak_with(w, tuple(coef)) for _, w, _ in data])
        jac = np.array(
            [
                [(peak_with(w, tuple(coef + np.eye(len(coef))[i])) - y) for i in range(len(coef))]
                for (_, w, _), y in zip(data, now)
            ]
        )
        step, *_ = np.linalg.lstsq(jac, target - now, rcond=None)
        coef = coef + step
        if np.all(np.abs(step) < 1e-6 * (np.abs(coef) + 1)):
            break
    return coef


def main() -> None:
    files = [Path(a) for a in sys.argv[1:]] or sorted(
        (ROOT / "bench" / "results").glob("*memory-points*.jsonl")
    )
    data = points(files)
    start = np.array([getattr(est, c) for c in COEFFICIENTS], dtype=float)
    coef = fit(data, start)
    print("coefficients: " + ", ".join(f"{n} = {v:.3f}" for n, v in zip(COEFFICIENTS, coef)))
    errors = []
    for k, (name, w, measured) in enumerate(data):
        loo = fit(data[:k] + data[k + 1 :], coef)
        left_out = peak_with(w, tuple(loo)) / est.GIB
        errors.append((left_out - measured) / measured)
        print(f"{name:30s} measured {measured:6.2f}  left out {left_out:6.2f} ({errors[-1]:+6.1%})")
    print(held_out_line(errors, "points"))


def held_out_line(errors: list[float], what: str) -> str:
    """The last line of a left-one-out report (tests/test_readme.py reads it from the records)."""
    worst = max(errors, key=abs)
    return (
        f"left-one-out over {len(errors)} {what}: median {statistics.median(map(abs, errors)):.1%}, "
        f"worst {worst:+.1%}"
    )


if __name__ == "__main__":
    main()
