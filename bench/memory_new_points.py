#!/usr/bin/env python3
"""The memory model on new points: runs it was not fitted on, predicted by the model as committed.

The memory counterpart of bench/speed_new_points.py. The model (cockpit/models/memory.py) is taken
as it stood at `--model-commit` (read with `git show`, so a later refit cannot leak in) and each run
of the records given (bench/speed_sweep.py or bench/memory_points.py lines with an NVML peak) is
predicted from its config as bench/fit_estimator.py reads it. The memory model's fit reads the
`*memory-points*` records only: the speed sweeps' peaks never enter it.

  python bench/memory_new_points.py --model-commit 2258e0f \\
      bench/results/2026-12-04-speed-sweep-long-more-h200.jsonl ...

Prints one line per run and the median and worst of the errors (predicted / measured - 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_estimator  # noqa: E402
from speed_new_points import module_at, report  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--model-commit", required=True, help="the commit whose memory model predicts")
    a = ap.parse_args(argv)
    memory = module_at(a.model_commit, "cockpit/models/memory.py")
    references = {name for name, *_ in fit_estimator.REFERENCE}
    errors = []
    for name, w, measured in fit_estimator.points(a.records):
        if name in references:  # fit_estimator.points adds the fitted reference points
            continue
        # the inputs that commit's Workload has (a later field, e.g. fused_lora, it did not know)
        fields = {
            f: getattr(w, f) for f in w.__dataclass_fields__ if f in memory.Workload.__dataclass_fields__
        }
        predicted = memory.estimate_memory(memory.Workload(**fields)).peak_bytes / memory.GIB
        errors.append(predicted / measured - 1)
        print(f"{name:36s} measured {measured:6.2f} GiB  predicted {predicted:6.2f} ({errors[-1]:+6.1%})")
    return report(f"memory model at {a.model_commit}", errors, "no runs with a device peak")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
