#!/usr/bin/env python3
"""Does each doctor rule's fix help? Every case runs before and after its fix, in one call, on a GPU.

Each case is a real `cockpit train --no-ui` run; the doctor judges its recorded telemetry with the
run's events (bench/gpu_runs.doctor_over_recording), so the verdict is the product's own. Then
the fix the finding names is applied and the run repeated; tokens/s before and after (the steady
steps' median) and the gain the finding predicted are reported side by side:

- demo-packed (gpu_underfed): the shipped demo data packed into rows of 512 on the article's 7B
  QLoRA at micro-batch 4 x 4 with checkpointing, pinned as written (speed: off). The fix: the split
  the speed plan's `auto_split` names (speed: auto with the batch keys free). The old advice
  (raise dataloader_num_workers) is run too, as "wrong fix", to show it does not help;
- slow-loader (input_bound): `debug.collate_cpu_ms` burns CPU in the collator of every
  micro-batch with no loader workers. The fix: the workers the finding names;
- big-steps (cpu_bound, when it fires): micro-batches large enough for the card with the host's
  per-step work left: the fix is Liger's fused kernels (speed: auto, liger-kernel installed).

  python bench/doctor_fixes.py --out DIR [--steps 12] [--only CASE ...] [--smoke]

`--smoke` runs the shipped tiny model on the CPU (the suite runs it): no GPU, so no GPU-side
verdict; it checks that every case runs before and after and that the report is written.
Writes DIR/doctor_fixes.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
    train_headless,
    versions,
    write_config,
    write_json,
    write_tokens,
)


def measured_speed(events: list[dict], skip_steps: int = 2) -> dict:
    """Tokens the GPU computed per second (padding included, as the trainer counts micro-batches)
    and real tokens per second, medians of the steady steps."""
    logs = [e for e in events if e.get("type") == "log" and e.get("step", 0) > skip_steps]
    if not logs:
        return {"steps_measured": 0}
    begin = next((e for e in events if e.get("type") == "train_begin"), {})
    accum = begin.get("gradient_accumulation_steps") or 1
    step_s = sorted(e["step_time_s"] for e in logs)[len(logs) // 2]
    tokens = [e["tokens_per_micro_batch"] for e in logs if e.get("tokens_per_micro_batch")]
    real = sorted(e["tokens_per_s"] for e in logs if e.get("tokens_per_s"))
    waits = [e["data_wait_share"] for e in logs if e.get("data_wait_share") is not None]
    return {
        "steps_measured": len(logs),
        "step_s_median": round(step_s, 4),
        "micro_batch": begin.get("micro_batch_size"),
        "accumulation": accum,
        "tokens_per_micro_batch": round(sum(tokens) / len(tokens), 1) if tokens else None,
        "processed_tokens_per_s": round(sum(tokens) / len(tokens) * accum / step_s, 1) if tokens else None,
        "real_tokens_per_s": real[len(real) // 2] if real else None,
        "data_wait_share": round(sum(waits) / len(waits), 4) if waits else None,
    }


def run_once(label: str, config: Path, env: dict) -> dict:
    run, done = train_headless(config, env)
    events = events_of(run)
    recorded = doctor_over_recording(run)
    plan = next((e for e in events if e.get("type") == "speed_plan"), {})
    return {
        "label": label,
        "run": run.name,
        "exit_code": done.returncode,
        **ending(events),
        **measured_speed(events),
        "doctor_fired": recorded["fired"],
        "doctor_live_lines": doctor_lines(done.stdout),
        "gpu_telemetry": "ok" in recorded["nvml"],
        "auto_split": plan.get("auto_split"),
        "busy_tokens_per_micro_batch": plan.get("busy_tokens_per_micro_batch"),
        "versions": versions(events),
    }


def ratio(after: dict, before: dict, key: str = "real_tokens_per_s") -> float | None:
    a, b = after.get(key), before.get(key)
    return round(a / b, 3) if a and b else None


def case_demo_packed(shape, work: Path, env: dict, steps: int) -> dict:
    base = {
        "dataset.path": "demo",
        "dataset.format": "auto",
        "training.packing": True,
        "training.dataloader_num_workers": 0,
    }
    before_cfg = write_config(work / "demo-before.yaml", shape, Path("demo"), steps, **base)
    before = run_once("before", before_cfg, env)
    split = before.get("auto_split") or {}
    fix = (
        {
            "training.micro_batch_size": split["micro_batch_size"],
            "training.gradient_accumulation_steps": split["gradient_accumulation_steps"],
            "training.gradient_checkpointing": bool(split["checkpoint_layers"]),
        }
        if split
        else {  # no speed model here (the CPU): the finding's fallback, a larger micro-batch
            "training.micro_batch_size": shape.micro_batch_size * 2,
            "training.gradient_accumulation_steps": max(1, shape.accumulation // 2),
        }
    )
    after = run_once(
        "after", write_config(work / "demo-after.yaml", shape, Path("demo"), steps, **base, **fix), env
    )
    wrong = run_once(
        "wrong fix (more loader workers)",
        write_config(
            work / "demo-workers.yaml",
            shape,
            Path("demo"),
            steps,
            **{**base, "training.dataloader_num_workers": 4},
        ),
        env,
    )
    predicted = round(split["tokens_per_s"] / split["as_run_tokens_per_s"], 3) if split else None
    return {
        "case": "demo-packed",
        "rule": "gpu_underfed",
        "fix": fix,
        "predicted_gain": predicted,
        "runs": [before, after, wrong],
        "gain": ratio(after, before),
        "wrong_fix_gain": ratio(wrong, before),
    }


def case_slow_loader(shape, work: Path, env: dict, steps: int, collate_ms: float) -> dict:
    data = write_tokens(
        work / "tokens.jsonl", shape, shape.micro_batch_size * shape.accumulation * (steps + 2)
    )
    burn = {"debug.collate_cpu_ms": collate_ms}
    before = run_once(
        "before",
        write_config(
            work / "slow-before.yaml", shape, data, steps, **burn, **{"training.dataloader_num_workers": 0}
        ),
        env,
    )
    workers = 4
    after = run_once(
        "after",
        write_config(
            work / "slow-after.yaml",
            shape,
            data,
            steps,
            **burn,
            **{"training.dataloader_num_workers": workers},
        ),
        env,
    )
    share = before.get("data_wait_share")
    return {
        "case": "slow-loader",
        "rule": "input_bound",
        "fix": {"training.dataloader_num_workers": workers},
        "predicted_gain": round(1 / (1 - share), 3) if share is not None and share < 1 else None,
        "runs": [before, after],
        "gain": ratio(after, before),
    }


def case_big_steps(shape, work: Path, env: dict, steps: int) -> dict:
    big = dataclasses.replace(shape, micro_batch_size=shape.micro_batch_size * 4, accumulation=1)
    data = write_tokens(work / "tokens-big.jsonl", big, big.micro_batch_size * (steps + 2))
    before = run_once("before", write_config(work / "big-before.yaml", big, data, steps), env)
    # the fix: speed: auto keeping the batch as written, so only the fused kernels (and attention) change
    keep = [
        "training.micro_batch_size",
        "training.gradient_accumulation_steps",
        "training.gradient_checkpointing",
    ]
    after = run_once(
        "after",
        write_config(work / "big-after.yaml", big, data, steps, **{"speed.mode": "auto", "speed.keep": keep}),
        env,
    )
    return {
        "case": "big-steps",
        "rule": "cpu_bound",
        "fix": {"speed.mode": "auto (Liger's fused kernels)", "speed.keep": keep},
        "predicted_gain": None,  # the finding's own text states it when it fires (runs[0].doctor_fired)
        "runs": [before, after],
        "gain": ratio(after, before),
    }


CASES = ("demo-packed", "slow-loader", "big-steps")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, help="optimizer steps per run (default 12; smoke 5)")
    ap.add_argument("--collate-ms", type=float, help="CPU burnt per micro-batch in slow-loader (default 400)")
    ap.add_argument("--only", nargs="*", choices=CASES)
    ap.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    a = ap.parse_args()
    shape = SMOKE if a.smoke else FULL
    steps = a.steps or (5 if a.smoke else 12)
    collate_ms = a.collate_ms if a.collate_ms is not None else (40.0 if a.smoke else 400.0)
    work = Path(tempfile.mkdtemp(prefix="doctor-fixes-"))
    env = bench_env(work / "home")
    t0 = time.monotonic()
    prebuild(shape, env)
    cases = []

    def report() -> dict:
        return {
            "bench": "doctor_fixes",
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "smoke": a.smoke,
            "shape": shape.name,
            "steps": steps,
            "machine": machine(),
            "cases": cases,
            "named_as_expected": {c["case"]: c["rule"] in c["runs"][0]["doctor_fired"] for c in cases},
            "bench_s": round(time.monotonic() - t0, 1),
        }

    for name in a.only or CASES:
        if name == "demo-packed":
            cases.append(case_demo_packed(shape, work, env, steps))
        elif name == "slow-loader":
            cases.append(case_slow_loader(shape, work, env, steps, collate_ms))
        else:
            cases.append(case_big_steps(shape, work, env, steps))
        c = cases[-1]
        fired = sorted(c["runs"][0]["doctor_fired"])
        print(
            f"{c['case']}: before {c['runs'][0].get('real_tokens_per_s')} -> after "
            f"{c['runs'][1].get('real_tokens_per_s')} real tokens/s (x{c['gain']}, predicted "
            f"x{c['predicted_gain']}); doctor before: {fired or 'nothing'}"
            + (f"; wrong fix x{c['wrong_fix_gain']}" if "wrong_fix_gain" in c else ""),
            file=sys.stderr,
            flush=True,
        )
        write_json(a.out, "doctor_fixes.json", report())  # each case as it ends: a cut-off run keeps them
    result = report()
    path = write_json(a.out, "doctor_fixes.json", result)
    print(json.dumps(result["named_as_expected"]), path, file=sys.stderr)
    return 0 if all(r.get("status") == "finished" for c in cases for r in c["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
