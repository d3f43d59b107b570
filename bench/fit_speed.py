#!/usr/bin/env python3
"""Fit the speed model's coefficients to measured throughput, and test it left-one-out.

The points are runs of the product on an H200 (bench/speed_sweep.py, bench/memory_points.py):
real `cockpit train --no-ui`, full-length sequences, one micro-batch per optimizer step (one run
with 4, ACCUMULATED), the median step time of the steady steps, each with what its speed plan
applied (Liger's kernels, the layer inputs in host memory). The model
(cockpit/models/speed.py) is not linear in its coefficients, so they are fitted by
Levenberg-Marquardt on the squared log error (a relative error: a 10% miss on a 2k tokens/s run
weighs as much as on a 40k one), the best of STARTS starts: its max() terms leave several local
optima, and a fit from one start point (Nelder-Mead from the shipped coefficients, before) gave
held-out figures that depended on that point. Every left-out refit runs the same way.

  python bench/fit_speed.py [--jobs N] [POINTS.jsonl ...]      (default: default_files())

Prints the coefficients fitted on all points, then each point's error when it is left out of
the fit, and their median and worst: held-out figures only (in-sample errors are not what to
expect of a configuration the fit has not seen). docs/estimator.md records the output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_estimator import held_out_line, point_workload  # noqa: E402

from cockpit.models import speed  # noqa: E402
from cockpit.plan.catalog import load_catalog  # noqa: E402

COEFFICIENTS = (
    "EFF_MAX",
    "T_HALF",
    "ADAPTER_BYTES",
    "HOST_LAYER_S",
    "HOST_LIGER_SHARE",
    "ELEMENTWISE_EFF",
    "ATTENTION_EFF",
    "HOST_KBIT_LINEAR_S",
    "HOST_ADAPTER_S",
    "STEP_OVERHEAD_S",
    "HOST_OPTIMIZER_TENSOR_S",
    "BACKWARD_HOST_SHARE",
)
STARTS = 16  # the shipped coefficients and 15 starts spread around them (a fixed seed: reproducible)
SEED = 15
SPREAD = 1.0  # the starts' log-normal spread around the shipped coefficients (x e^+-1)


def default_files() -> list[Path]:
    """Every run of the product measured on an H200: the speed sweeps and the memory points, and
    the one run with gradient accumulation (ACCUMULATED)."""
    results = ROOT / "bench" / "results"
    found = sorted(results.glob("*speed-sweep*.jsonl")) + sorted(results.glob("*memory-points*.jsonl"))
    return found + [results / name for name in ACCUMULATED if (results / name).exists()]


# The one run of the product with more than one micro-batch per optimizer step: the article's QLoRA
# recipe (S0) at the config's default of 4 accumulation steps, 8 steps (docs/benchmarks.md); its
# record states neither, and its tokens_per_s counts one micro-batch per step. bench/memory_points.py
# runs every other point at 1.
ACCUMULATED = {"2026-11-30-memory-point-S0-accum4-h200.json": 4}


def record_workload(p: dict, accum: int = 1):
    """The speed model's inputs for one recorded run: its config, with what its speed plan applied
    (Liger's kernels, the layer inputs in host memory)."""
    return dataclasses.replace(
        point_workload(p),
        grad_accum=accum,
        liger=bool(p.get("liger")),
        checkpoint_offload=bool(p.get("checkpoint_offload")),
    )


MIN_STEPS = 10  # runs of a configuration with at least this many steps replace its shorter ones


def points(files: list[Path]) -> list[tuple[str, object, float]]:
    """One point per configuration: runs of the same configuration in several device calls
    (which drift by up to a third between machines) count once, at their geometric mean; where
    a configuration was re-measured with >= MIN_STEPS steps (bench/speed_sweep.py --points weak),
    its 3-5-step runs are left out."""
    runs: dict[str, list] = {}
    for file in files:
        accum = ACCUMULATED.get(file.name, 1)
        for line in file.read_text().splitlines():
            p = json.loads(line)
            if not p.get("tokens_per_s"):
                continue
            w = record_workload(p, accum)
            rate = float(p["tokens_per_s"]) * accum  # the record counts one micro-batch per step
            runs.setdefault(repr(w), []).append((p["name"], w, rate, p.get("steps", 0)))
    out = []
    for same in runs.values():
        long = [r for r in same if r[3] >= MIN_STEPS]
        same = long or same
        names = sorted({r[0] for r in same})
        rate = math.exp(statistics.fmean(math.log(r[2]) for r in same))
        label = names[0] + (f" (x{len(same)})" if len(same) > 1 else "")
        out.append((label, same[0][1], rate))
    return out


def predict(w, card, values) -> float:
    saved = [getattr(speed, c) for c in COEFFICIENTS]
    try:
        for name, value in zip(COEFFICIENTS, values):
            setattr(speed, name, value)
        return speed.estimate_speed(w, card).tokens_per_s
    finally:
        for name, value in zip(COEFFICIENTS, saved):
            setattr(speed, name, value)


def residuals(log_values: np.ndarray, data, card) -> np.ndarray:
    """log(predicted) - log(measured) for each point: a relative error."""
    if np.any(np.abs(log_values) > 30):  # far outside any physical value
        return np.full(len(data), 1e3)
    values = np.exp(log_values)
    if values[0] > 1.0:  # more than the card's peak is not an efficiency
        return np.full(len(data), 1e3)
    return np.array([math.log(predict(w, card, values)) - math.log(m) for _, w, m in data])


def levenberg_marquardt(f, x0: np.ndarray, steps: int = 300) -> tuple[np.ndarray, float]:
    """Least squares of the residuals f(x) by Levenberg-Marquardt (forward-difference Jacobian); the
    model's max() terms make the loss piecewise smooth, so a step that does not lower it is refused
    and the damping raised."""
    x, r = x0.copy(), f(x0)
    cost, damping = float(r @ r), 1e-3
    for _ in range(steps):
        jac = np.empty((len(r), len(x)))
        for i in range(len(x)):
            dx = np.zeros(len(x))
            dx[i] = 1e-5
            jac[:, i] = (f(x + dx) - r) / 1e-5
        gram, grad = jac.T @ jac, jac.T @ r
        for _ in range(12):
            step = np.linalg.solve(gram + damping * np.diag(np.diag(gram) + 1e-12), -grad)
            r_new = f(x + step)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                break
            damping *= 10
        else:
            return x, cost
        converged = cost - cost_new < 1e-12 * (1 + cost)
        x, r, cost, damping = x + step, r_new, cost_new, max(damping / 10, 1e-9)
        if converged:
            break
    return x, cost


def fit(data, card) -> np.ndarray:
    """The coefficients that minimise the squared log error, the best of STARTS Levenberg-Marquardt
    runs: one from the shipped coefficients, the others from starts spread around them, so that the
    result does not hang on one start's local optimum."""
    shipped = np.log([getattr(speed, c) for c in COEFFICIENTS])
    rng = np.random.default_rng(SEED)
    starts = [shipped] + [shipped + rng.normal(0, SPREAD, len(shipped)) for _ in range(STARTS - 1)]
    for x in starts[1:]:
        x[0] = min(x[0], math.log(0.95))  # EFF_MAX starts below the peak
    runs = [levenberg_marquardt(lambda x: residuals(x, data, card), x0) for x0 in starts]
    best = min(runs, key=lambda run: run[1])
    return np.exp(best[0])


def left_out_prediction(args) -> float:
    """Point k predicted by a fit on every other point (one task of the left-one-out pool)."""
    data, k = args
    card = load_catalog().get("h200")
    left_out = fit([d for i, d in enumerate(data) if i != k], card)
    return predict(data[k][1], card, left_out)


def main() -> None:
    args = sys.argv[1:]
    jobs = 1
    if "--jobs" in args:  # left-out refits in parallel processes: the same figures, sooner
        i = args.index("--jobs")
        jobs = int(args[i + 1])
        args = args[:i] + args[i + 2 :]
    files = [Path(a) for a in args] or default_files()
    data = points(files)
    card = load_catalog().get("h200")
    coef = fit(data, card)
    print("coefficients: " + ", ".join(f"{n} = {v:.4g}" for n, v in zip(COEFFICIENTS, coef)), flush=True)
    tasks = [(data, k) for k in range(len(data))]
    if jobs > 1:
        from multiprocessing import Pool

        with Pool(jobs) as pool:
            predictions = pool.map(left_out_prediction, tasks, chunksize=1)
    else:
        predictions = [left_out_prediction(t) for t in tasks]
    errors = []
    for (name, _, measured), predicted in zip(data, predictions):
        errors.append((predicted - measured) / measured)
        print(f"{name:34s} measured {measured:7.0f}  left out {predicted:7.0f} ({errors[-1]:+6.1%})")
    print(held_out_line(errors, "configurations"))


if __name__ == "__main__":
    main()
