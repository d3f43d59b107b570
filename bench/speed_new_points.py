#!/usr/bin/env python3
"""The speed model on new points: runs it was not fitted on, predicted by a model as committed.

A held-out check by construction: the model (cockpit/speed/model.py) is taken as it stood at
`--model-commit` (read with `git show`, so later refits cannot leak in), and each run of the
records given (bench/speed_sweep.py or bench/memory_points.py lines) is predicted from its
config, with Liger and host-memory checkpointing as the run's speed plan applied them, on the run's
own host: a run that recorded the host probe (train_backend/speed/host_probe.py) is predicted with the host
terms scaled by it, as its speed plan and the fit (bench/fit_speed.py) scale them.

  python bench/speed_new_points.py --model-commit cfe35f0 \\
      bench/results/2026-12-03-speed-sweep-heldout-h200.jsonl [--only-prefix n-]

Prints one line per run and the median and worst of the errors (predicted / measured - 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_speed import record_workload, run_probe_ms  # noqa: E402

from cockpit.gpus.catalog import load_catalog  # noqa: E402


def module_at(commit: str, path: str = "cockpit/speed/model.py"):
    """A file of the project as it stood at `commit` (read with `git show`), as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(f"{Path(path).stem}_{commit}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
    return module


def report(what: str, errors: list[float], none: str) -> int:
    """The last line of a new-points report, the median and the worst of the errors; exit 1 (saying
    `none`) when no run was predicted."""
    if not errors:
        print(none, file=sys.stderr)
        return 1
    worst, median = max(errors, key=abs), statistics.median(abs(e) for e in errors)
    print(f"{what}, {len(errors)} new runs: median |error| {median:.1%}, worst {worst:+.1%}")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--model-commit", required=True, help="the commit whose speed model predicts")
    ap.add_argument("--only-prefix", default="", help="only runs whose name starts with this")
    a = ap.parse_args(argv)
    speed = module_at(a.model_commit)
    card = load_catalog().get("h200")
    errors = []
    for record in a.records:
        for line in record.read_text().splitlines():
            p = json.loads(line)
            if not p.get("tokens_per_s") or not p["name"].startswith(a.only_prefix):
                continue
            probe = run_probe_ms(p)
            host = card  # a run from before the host probe: the reference host
            if probe and hasattr(speed, "host_scale_for"):  # the model as the run's own plan uses it
                host = speed.CardSpeed(
                    card.name,
                    card.bf16_dense_tflops,
                    card.bandwidth_gbs,
                    host_scale=speed.host_scale_for(probe),
                )
            predicted = speed.estimate_speed(record_workload(p), host).tokens_per_s
            measured = p["tokens_per_s"]
            errors.append(predicted / measured - 1)
            print(
                f"{p['name']:36s} measured {measured:7.0f}  predicted {predicted:7.0f} ({errors[-1]:+6.1%})"
            )
    return report(f"model at {a.model_commit}", errors, "no runs matched")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
