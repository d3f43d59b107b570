#!/usr/bin/env python3
"""Fit the speed model's coefficients to measured throughput, and test it left-one-out.

The points are runs of the product on an H200 (bench/speed_sweep.py, bench/memory_points.py):
real `cockpit train --no-ui`, full-length sequences, one micro-batch per optimizer step, the
median step time of the steady steps. The model (cockpit/models/speed.py) is not linear in its
coefficients, so they are fitted by Nelder-Mead on the squared log error (a relative error:
a 10% miss on a 2k tokens/s run weighs as much as on a 40k one).

  python bench/fit_speed.py [POINTS.jsonl ...]      (default: bench/results/*speed-sweep*.jsonl)

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
    "HOST_KBIT_LINEAR_S",
    "HOST_ADAPTER_S",
    "STEP_OVERHEAD_S",
)


def default_files() -> list[Path]:
    """Every run of the product measured on an H200: the speed sweeps and the memory points."""
    results = ROOT / "bench" / "results"
    return sorted(results.glob("*speed-sweep*.jsonl")) + sorted(results.glob("*memory-points*.jsonl"))


MIN_STEPS = 10  # runs of a configuration with at least this many steps replace its shorter ones


def points(files: list[Path]) -> list[tuple[str, object, float]]:
    """One point per configuration: runs of the same configuration in several device calls
    (which drift by up to a third between machines) count once, at their geometric mean; where
    a configuration was re-measured with >= MIN_STEPS steps (bench/speed_sweep.py --points weak),
    its 3-5-step runs are left out."""
    runs: dict[str, list] = {}
    for file in files:
        for line in file.read_text().splitlines():
            p = json.loads(line)
            if not p.get("tokens_per_s"):
                continue
            w = dataclasses.replace(point_workload(p), grad_accum=1)
            runs.setdefault(repr(w), []).append((p["name"], w, float(p["tokens_per_s"]), p.get("steps", 0)))
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


def loss(log_values: np.ndarray, data, card) -> float:
    values = np.exp(log_values)
    if values[0] > 1.0:  # more than the card's peak is not a efficiency
        return 1e9
    return sum((math.log(predict(w, card, values)) - math.log(m)) ** 2 for _, w, m in data)


def nelder_mead(f, x0: np.ndarray, steps: int = 1500, scale: float = 0.5) -> np.ndarray:
    simplex = [x0] + [x0 + scale * np.eye(len(x0))[i] for i in range(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(steps):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex]
                values = [f(x) for x in simplex]
    return simplex[int(np.argmin(values))]


def fit(data, card) -> np.ndarray:
    start = np.log([getattr(speed, c) for c in COEFFICIENTS])
    return np.exp(nelder_mead(lambda x: loss(x, data, card), start))


def main() -> None:
    files = [Path(a) for a in sys.argv[1:]] or default_files()
    data = points(files)
    card = load_catalog().get("h200")
    coef = fit(data, card)
    print("coefficients: " + ", ".join(f"{n} = {v:.4g}" for n, v in zip(COEFFICIENTS, coef)))
    errors = []
    for k, (name, w, measured) in enumerate(data):
        left_out = fit([d for i, d in enumerate(data) if i != k], card)
        predicted = predict(w, card, left_out)
        errors.append((predicted - measured) / measured)
        print(f"{name:34s} measured {measured:7.0f}  left out {predicted:7.0f} ({errors[-1]:+6.1%})")
    print(held_out_line(errors, "configurations"))


if __name__ == "__main__":
    main()
