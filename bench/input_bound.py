#!/usr/bin/env python3
"""Does the doctor name an input-bound run? A run whose batches come too slowly, on a real GPU.

The article's QLoRA recipe (`synthetic:llama-2-7b`, 512 tokens, micro-batch 4 x accumulation 4)
with `training.dataloader_num_workers: 0` and an expensive on-the-fly preprocessing: the test aid
`collate_cpu_ms` (COCKPIT_TEST_AIDS, train_backend/test_aids.py) burns that much CPU in the data
collator for every micro-batch, in the training process itself (no loader workers), so the GPU
waits for every batch while one core is saturated. The run goes through `cockpit train --no-ui`,
whose own doctor says what it finds as the run goes (its `doctor [...]` lines); afterwards the
recorded telemetry (`telemetry.jsonl`, written by the recorder beside the trainer) is replayed
through the doctor with the run's state at each bin. Both must name the input-bound rule (GPU util
< 70% with the trainer's CPU saturated), with the evidence in numbers.

  python bench/input_bound.py --out DIR [--collate-ms 1000] [--steps 18] [--smoke]

`--smoke` runs the shipped tiny model on the CPU (the tests run it): no GPU, so no verdict on the
GPU's wait; it checks the knob slows each step and the findings are read. Writes
DIR/input_bound.json; exits 1 when the run did not finish or (on a GPU) input-bound was not named.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_runs import (
    FULL,
    SMOKE,
    bench_env,
    doctor_lines,
    doctor_over_recording,
    ending,
    events_of,
    machine,
    prebuild,
    throughput,
    train_headless,
    versions,
    write_config,
    write_json,
    write_tokens,
)

# gpu_runs has put this checkout on sys.path
from train_backend import test_aids

RULE = "input_bound"
TITLE = "Input-bound"  # how the rule's finding begins (cockpit.doctor.rules.input_bound)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for input_bound.json")
    ap.add_argument("--collate-ms", type=float, help="CPU burnt per micro-batch (default 1000; smoke 150)")
    ap.add_argument("--steps", type=int, help="optimizer steps (default 18, ~100 s on an H200; smoke 10)")
    ap.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    a = ap.parse_args()
    shape = SMOKE if a.smoke else FULL
    collate_ms = a.collate_ms if a.collate_ms is not None else (150.0 if a.smoke else 1000.0)
    steps = a.steps or (10 if a.smoke else 18)
    work = Path(tempfile.mkdtemp(prefix="input-bound-"))
    env = bench_env(work / "home")
    data = write_tokens(
        work / "tokens.jsonl", shape, shape.micro_batch_size * shape.accumulation * (steps + 2)
    )
    config = write_config(
        work / "run.yaml",
        shape,
        data,
        steps,
        **{"training.dataloader_num_workers": 0},
    )
    t0 = time.monotonic()
    prebuild(shape, env)
    run, done = train_headless(config, {**env, **test_aids.environ(collate_cpu_ms=collate_ms)})
    events = events_of(run)
    live = doctor_lines(done.stdout)
    recorded = doctor_over_recording(run)
    speed = throughput(events, shape)
    gpu = "ok" in recorded["nvml"]
    named_live = any(TITLE in line for line in live)
    named_recorded = RULE in recorded["fired"]
    result = {
        "bench": "input_bound",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "smoke": a.smoke,
        "shape": shape.name,
        "steps": steps,
        "collate_cpu_ms_per_micro_batch": collate_ms,
        "dataloader_num_workers": 0,
        "machine": machine(),
        "versions": versions(events),
        "run": run.name,
        "exit_code": done.returncode,
        **ending(events),
        **speed,
        # each optimizer step collates `accumulation` micro-batches, each after collate_ms of CPU
        "collate_s_per_step": round(collate_ms / 1000 * shape.accumulation, 3),
        "doctor_live_lines": live,
        "doctor_recorded": recorded,
        "gpu_telemetry": gpu,
        "input_bound_named_live": named_live,
        "input_bound_named_recorded": named_recorded,
        "bench_s": round(time.monotonic() - t0, 1),
    }
    path = write_json(a.out, "input_bound.json", result)
    print(
        f"run {result['status']}; input-bound named: live {named_live}, recorded {named_recorded} "
        f"(GPU telemetry: {gpu}); {path}",
        file=sys.stderr,
    )
    if result["status"] != "finished":
        return 1
    if gpu and not (named_live and named_recorded):
        return 1  # the doctor missed it on a real GPU
    return 0


if __name__ == "__main__":
    sys.exit(main())
