#!/usr/bin/env python3
"""Fit the speed model's coefficients to measured throughput, and test it left-one-out.

The points are runs of the product on an H200 (bench/speed_sweep.py, bench/memory_points.py):
real `cockpit train --no-ui`, full-length sequences, one micro-batch per optimizer step (one run
with 4, ACCUMULATED), the median step time of the steady steps, each with what its speed plan
applied (Liger's kernels, the layer inputs in host memory). The model
(cockpit/speed/model.py) is not linear in its coefficients, so they are fitted by
Levenberg-Marquardt on the squared log error (a relative error: a 10% miss on a 2k tokens/s run
weighs as much as on a 40k one), the best of STARTS starts: its max() terms leave several local
optima, and a fit from one start point (Nelder-Mead from the shipped coefficients, before) gave
held-out figures that depended on that point. Every left-out refit runs the same way.

A run with the host probe (train_backend/speed/host_probe.py: `host_probe_ms` and `host_probe_end_ms` in
its record) is predicted at its own host's speed, the host terms scaled by its probe over
HOST_PROBE_REFERENCE_MS, which is fitted with the rest (the runs before the probe count as one host
of that figure); a configuration with probed runs counts by those only, and left-one-out leaves
each configuration out whole, every run of it.

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

from cockpit.gpus.catalog import load_catalog  # noqa: E402
from cockpit.speed import model as speed  # noqa: E402

COEFFICIENTS = (
    "EFF_MAX",
    "T_HALF",
    "ADAPTER_BYTES",
    "HOST_LAYER_S",
    "HOST_LIGER_SHARE",
    "ELEMENTWISE_EFF",
    "ATTENTION_SCALE",
    "HOST_KBIT_LINEAR_S",
    "HOST_ADAPTER_S",
    "STEP_OVERHEAD_S",
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


@dataclasses.dataclass(frozen=True)
class Point:
    """One measured figure to fit: a configuration's runs on one host (a geometric mean where they
    were several), `probe_ms` the host probe's figure (train_backend/speed/host_probe.py) or None for the
    runs made before the probe existed; `key`: the configuration, which left-one-out leaves out
    whole (every host it was measured on)."""

    label: str
    workload: object
    rate: float
    probe_ms: float | None
    key: str

    def __iter__(self):  # (label, workload, rate), as the points were before the probe
        return iter((self.label, self.workload, self.rate))


def run_probe_ms(p: dict) -> float | None:
    """A run's host probe: the geometric mean of its figures before the weights loaded and after the
    last step, where the run recorded them."""
    found = [p[k] for k in ("host_probe_ms", "host_probe_end_ms") if p.get(k)]
    return math.exp(statistics.fmean(math.log(v) for v in found)) if found else None


def points(files: list[Path]) -> list[Point]:
    """The configurations' measured points. Runs of the same configuration in several device calls
    (which drift by up to a third between machines) count once, at their geometric mean; where a
    configuration was re-measured with >= MIN_STEPS steps (bench/speed_sweep.py --points weak), its
    3-5-step runs are left out; where it was re-measured with the host probe, only the probed runs
    count, each its own point at its own probe's figure (a slowed host among them: --slow-host)."""
    runs: dict[str, list] = {}
    for file in files:
        accum = ACCUMULATED.get(file.name, 1)
        for line in file.read_text().splitlines():
            p = json.loads(line)
            if not p.get("tokens_per_s"):
                continue
            w = record_workload(p, accum)
            rate = float(p["tokens_per_s"]) * accum  # the record counts one micro-batch per step
            runs.setdefault(repr(w), []).append((p["name"], w, rate, p.get("steps", 0), run_probe_ms(p)))
    out = []
    for key, same in runs.items():
        probed = [r for r in same if r[4]]
        if probed:
            for name, w, rate, _, probe in probed:
                out.append(Point(f"{name} @{probe:.2f}ms", w, rate, probe, key))
            continue
        long = [r for r in same if r[3] >= MIN_STEPS]
        same = long or same
        names = sorted({r[0] for r in same})
        rate = math.exp(statistics.fmean(math.log(r[2]) for r in same))
        label = names[0] + (f" (x{len(same)})" if len(same) > 1 else "")
        out.append(Point(label, same[0][1], rate, None, key))
    return out


def fitted_names(data: list[Point]) -> tuple[str, ...]:
    """The coefficients to fit: the host probe's reference only where some point has a probe."""
    return COEFFICIENTS + (("HOST_PROBE_REFERENCE_MS",) if any(d.probe_ms for d in data) else ())


def predict(w, card, values, probe_ms: float | None = None, names: tuple[str, ...] = COEFFICIENTS) -> float:
    """The model's tokens/s for `w` with the coefficients `values` (named `names`), on a host whose
    probe took `probe_ms` (None: the reference host)."""
    saved = [getattr(speed, c) for c in names]
    try:
        for name, value in zip(names, values):
            setattr(speed, name, value)
        # the probe over the reference as it is: the product's guard against a nonsense probe
        # (speed.HOST_SCALE_RANGE) would let a fit move the reference until every probe falls outside
        # the range and counts as the reference host (a left-out fit did, 2026-12-03)
        scale = probe_ms / speed.HOST_PROBE_REFERENCE_MS if probe_ms else 1.0
        host = speed.CardSpeed(card.name, card.bf16_dense_tflops, card.bandwidth_gbs, host_scale=scale)
        return speed.estimate_speed(w, host).tokens_per_s
    finally:
        for name, value in zip(names, saved):
            setattr(speed, name, value)


def residuals(log_values: np.ndarray, data: list[Point], card, names: tuple[str, ...]) -> np.ndarray:
    """log(predicted) - log(measured) for each point: a relative error."""
    if np.any(np.abs(log_values) > 30):  # far outside any physical value
        return np.full(len(data), 1e3)
    values = np.exp(log_values)
    if values[0] > 1.0:  # more than the card's peak is not an efficiency
        return np.full(len(data), 1e3)
    return np.array(
        [math.log(predict(d.workload, card, values, d.probe_ms, names)) - math.log(d.rate) for d in data]
    )


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


def fit(data: list[Point], card) -> np.ndarray:
    """The coefficients (fitted_names(data)) that minimise the squared log error, the best of STARTS
    Levenberg-Marquardt runs: one from the shipped coefficients, the others from starts spread around
    them, so that the result does not hang on one start's local optimum."""
    names = fitted_names(data)
    shipped = np.log([getattr(speed, c) for c in names])
    rng = np.random.default_rng(SEED)
    starts = [shipped] + [shipped + rng.normal(0, SPREAD, len(shipped)) for _ in range(STARTS - 1)]
    for x in starts[1:]:
        x[0] = min(x[0], math.log(0.95))  # EFF_MAX starts below the peak
    runs = [levenberg_marquardt(lambda x: residuals(x, data, card, names), x0) for x0 in starts]
    best = min(runs, key=lambda run: run[1])
    return np.exp(best[0])


def left_out_predictions(args) -> list[float]:
    """The points of one configuration predicted by a fit on every other configuration (one task of
    the left-one-out pool): each at its own host's probe."""
    data, key = args
    card = load_catalog().get("h200")
    kept = [d for d in data if d.key != key]
    left_out, names = fit(kept, card), fitted_names(kept)
    return [predict(d.workload, card, left_out, d.probe_ms, names) for d in data if d.key == key]


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
    names = fitted_names(data)
    print("coefficients: " + ", ".join(f"{n} = {v:.4g}" for n, v in zip(names, coef)), flush=True)
    keys = list(dict.fromkeys(d.key for d in data))
    tasks = [(data, key) for key in keys]
    if jobs > 1:
        from multiprocessing import Pool

        with Pool(jobs) as pool:
            predicted = pool.map(left_out_predictions, tasks, chunksize=1)
    else:
        predicted = [left_out_predictions(t) for t in tasks]
    errors = []
    for key, predictions in zip(keys, predicted):
        for d, p in zip([d for d in data if d.key == key], predictions):
            errors.append((p - d.rate) / d.rate)
            print(f"{d.label:44s} measured {d.rate:7.0f}  left out {p:7.0f} ({errors[-1]:+6.1%})")
    print(held_out_line(errors, f"points of {len(keys)} configurations"))


if __name__ == "__main__":
    main()
