#!/usr/bin/env python3
"""The speed model against the cockpit runs of bench/vs_unsloth.py: points it was never fitted on.

For each cockpit run of the records given (`speed: auto`'s own split, as its `plan` field says),
the plan's prediction (`cockpit.speed.batch_choice.partial_tokens_per_s`, the H200 SXM's catalog figures,
as the plan computes it) against the measured rate. The model predicts processed tokens (whole
rows of max_length: ragged samples are packed into rows); the bench measures real ones, so the
comparison is by the time of a step:
- predicted: micro-batch x accumulation x max_length processed tokens at the predicted rate (rows
  of one length: the step's 16 rows, where the split has room for more, e.g. 6 x 3);
- measured: 16 samples of the drawn mean length (the lengths bench/vs_unsloth.py draws for that
  model's vocabulary, seed 0; a step's own mix varies around it) at the measured real rate.
The error is that of the rate: predicted step time over measured, less one, negated.

  python bench/speed_heldout.py [--card NAME] [--probe] [--steady] [RECORD.json ...]
      (default: the 2026-12-02 20:38-22:00 records; --card: the catalog card the runs ran on, as
      NVML names it, e.g. 'NVIDIA H100 80GB HBM3'; default the H200 SXM reference figures;
      --probe: the host terms at each run's own probe reading, host_probe_ms in its plan, as the
      plan's own prediction was)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402
from vs_unsloth import LENGTHS, SAMPLES_PER_STEP, cockpit_config, write_sequences  # noqa: E402

from cockpit.config.load import config_from_dict  # noqa: E402
from cockpit.gpus.catalog import find_card, load_catalog  # noqa: E402
from cockpit.models import memory as est  # noqa: E402
from cockpit.models.shape import load_shape  # noqa: E402
from cockpit.oom.remedies import REFERENCE_CARD  # noqa: E402
from cockpit.speed.batch_choice import partial_tokens_per_s  # noqa: E402
from cockpit.speed.model import CardSpeed, host_scale_for  # noqa: E402

DEFAULT = [
    ROOT / "bench" / "results" / f"2026-12-02-vs-unsloth-{name}-h200.json"
    for name in ("7b-matched3", "8b-matched", "7b-full")
]


def workload(
    arch: str, max_length: int, liger: bool, fused_lora: bool = False, figures_at_log: bool = False
) -> est.Workload:
    """The estimate's inputs of the cockpit side's own config (bench/vs_unsloth.py cockpit_config);
    `fused_lora`: the run's plan chose the fused LoRA layers (its `lora_backend`; runs before it
    existed ran peft's); `figures_at_log`: its plan read the step's figures at the log
    (speed.read_figures: at_log, the bench's side cockpit-late)."""
    model = f"synthetic:{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        # the config names a data file that must exist to load; its rows do not matter here
        data = Path(tmp) / "rows.jsonl"
        data.write_text('{"text": "x"}\n')
        text = cockpit_config(model, data, max_length, steps=1, cap=None, smoke=False)
        cfg = config_from_dict(yaml.safe_load(text))
    return dataclasses.replace(
        est.workload_from_config(cfg, load_shape(model)),
        liger=liger,
        fused_lora=fused_lora,
        figures_at_log=figures_at_log,
    )


def reads_at_log(plan: dict) -> bool:
    """Whether a run's plan read its step figures at the log (its `read_figures`, which the bench
    records; runs before it existed read them each micro-batch)."""
    return plan.get("read_figures") == "at_log"


def mean_length(arch: str, lengths: str, warmup: int, steps: int) -> float:
    """The mean of the lengths the bench drew for this model (its vocabulary moves the draw)."""
    vocab = load_shape(f"synthetic:{arch}").vocab_size
    count = SAMPLES_PER_STEP * (warmup + steps) * 2
    with tempfile.TemporaryDirectory() as tmp:
        drawn = write_sequences(Path(tmp) / "d.jsonl", LENGTHS[lengths], count, vocab)
    return statistics.fmean(drawn)


def rows(
    record: dict, card: CardSpeed = REFERENCE_CARD, probe: bool = False, steady: bool = False
) -> list[dict]:
    """The record's cockpit runs against the speed model on `card`; `probe`: at each run's own host, as
    its plan read it (host_probe_ms), as the plan's own figure was; else at the reference host.
    `steady`: the measured step at the median of the timed steps' times, not their mean (a one-off
    pause such as the ~2.5 s one of the ragged checkpointed runs at step 5 or 6 left out: what a
    run of thousands of steps sees); the mean where the record has no step times."""
    out = []
    for row in record["rows"]:
        max_length = LENGTHS[row["lengths"]][1]
        mean = mean_length(row["arch"], row["lengths"], record["warmup_steps"], record["timed_steps"])
        for run in row["runs"]:
            plan = run.get("plan") or {}
            if not run["side"].startswith("cockpit") or not run.get("tokens_per_s") or not plan:
                continue
            mb, accum = plan["micro_batch_size"], plan["gradient_accumulation_steps"]
            base = workload(
                row["arch"],
                max_length,
                bool(plan.get("liger")),
                plan.get("lora_backend") == "fused",
                reads_at_log(plan),
            )
            layers = base.shape.num_layers
            host_scale = host_scale_for(plan.get("host_probe_ms")) if probe else 1.0
            rate = partial_tokens_per_s(
                dataclasses.replace(base, micro_batch=mb, grad_accum=accum),
                plan["checkpoint_layers"],
                dataclasses.replace(card, host_scale=host_scale),
                bool(plan.get("checkpoint_offload")),
            )
            # rows of one length (2048): the step has 16 of them, however the plan splits it (6 x 3
            # runs 6, 6 and 4); ragged rows are packed into the rows the plan sized the split for
            shortest, longest = LENGTHS[row["lengths"]]
            rows_run = min(mb * accum, SAMPLES_PER_STEP) if shortest == longest else mb * accum
            predicted_step = rows_run * max_length / rate
            measured_step = SAMPLES_PER_STEP * mean / run["tokens_per_s"]
            times = run.get("step_s") or []
            if steady and times:
                measured_step *= statistics.median(times) / statistics.fmean(times)
            out.append(
                {
                    "row": row["id"],
                    "side": run["side"],
                    "split": f"{mb} x {accum}, {plan['checkpoint_layers']} of {layers} recomputed"
                    + (", inputs in host memory" if plan.get("checkpoint_offload") else ""),
                    "measured_tokens_per_s": run["tokens_per_s"],
                    "measured_step_s": round(measured_step, 3),
                    "predicted_step_s": round(predicted_step, 3),
                    "error": round(measured_step / predicted_step - 1, 4),
                    "host_scale": round(host_scale, 3),
                }
            )
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="*", type=Path, help="vs_unsloth.json records")
    ap.add_argument("--card", metavar="NAME", help="the card as NVML names it, e.g. 'NVIDIA H100 80GB HBM3'")
    ap.add_argument(
        "--probe",
        action="store_true",
        help="each run at its own host, as its plan's probe read it (host_probe_ms); else the reference host",
    )
    ap.add_argument(
        "--steady",
        action="store_true",
        help="the measured step at the median of the timed steps' times (one-off pauses left out); "
        "else their mean",
    )
    a = ap.parse_args(argv)
    card = REFERENCE_CARD
    if a.card:
        found_card = find_card(a.card, load_catalog())
        if found_card is None:
            raise SystemExit(f"--card {a.card!r}: not a card of the catalog (cockpit/data/gpus.yaml)")
        card = CardSpeed(found_card.name, found_card.bf16_dense_tflops, found_card.bandwidth_gbs)
    files = a.records or DEFAULT
    found = []
    for f in files:
        found += rows(json.loads(f.read_text()), card, a.probe, a.steady)
    host = "each run's own host (its probe)" if a.probe else "the reference host"
    if a.steady:
        host += "; measured: the median step (one-off pauses left out)"
    print(
        f"speed model on {card.name}: {card.bf16_dense_tflops:g} TFLOPS bf16, {card.bandwidth_gbs:g} GB/s, "
        f"at {host}"
    )
    print("| row | run | split | measured real tokens/s | step s measured | predicted | error |")
    print("|---|---|---|---|---|---|---|")
    for r in found:
        print(
            f"| {r['row']} | {r['side']} | {r['split']} | {r['measured_tokens_per_s']:,.0f} | "
            f"{r['measured_step_s']:.3f} | {r['predicted_step_s']:.3f} | {r['error']:+.1%} |"
        )
    if found:
        errors = [abs(r["error"]) for r in found]
        print(f"\n{len(found)} runs: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
