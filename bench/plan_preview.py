#!/usr/bin/env python3
"""What `speed: auto` would choose for a bench row, before the row runs (no GPU, no torch).

The plan (cockpit/speed/auto.py) for bench/vs_unsloth.py's cockpit side: QLoRA nf4 with double
quantisation, r 16 / alpha 16 / no dropout on all seven linears, adamw_8bit, 16 samples a step, the
row's token lengths (seed 0, as the bench draws them), on an H200 at the speed model's reference
host, with Liger, at a memory cap. `--set KEY=VALUE` adds config keys (e.g. speed.mlp_block=fused).
It prints the split, the predicted peak and tokens/s and each choice: the prediction a later run on
the GPU is held against (bench/speed_heldout.py reads the runs' own plans).

  python3 bench/plan_preview.py --arch llama-2-7b --lengths full --cap 7.15 --set speed.mlp_block=fused
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cockpit.config import load as config_load  # noqa: E402
from cockpit.fmt import GIB  # noqa: E402
from cockpit.models.shape import load_shape  # noqa: E402
from cockpit.speed import auto as speed_auto  # noqa: E402


def plan_for(arch: str, lengths: str, cap_gib: float, extra: dict) -> speed_auto.SpeedPlan:
    import random

    from vs_unsloth import LENGTHS, RANK, SAMPLES_PER_STEP, TARGETS

    low, high = LENGTHS[lengths]
    rng = random.Random(0)
    drawn = [rng.randint(low, high) for _ in range(SAMPLES_PER_STEP * 46)]
    settings = {
        "model.name": f"synthetic:{arch}",
        "lora.r": RANK,
        "lora.alpha": RANK,
        "lora.dropout": 0.0,
        "lora.target_modules": TARGETS,
        "training.max_length": high,
        "training.optimizer": "adamw_8bit",
        **extra,
    }
    cfg = config_load.config_from_dotted(settings)
    card, _ = speed_auto.card_for("NVIDIA H200", int(139.8 * GIB))
    facts = speed_auto.Facts(
        device_kind="cuda",
        precision="bf16",
        device_name="NVIDIA H200",
        memory_bytes=int(cap_gib * GIB),
        memory_note=f"emulate_vram_gib {cap_gib:g}",
        capability="9.0",
        cpu_count=16,
        host_available_bytes=100 * GIB,
        liger="0.8.5",
        liger_model=True,
        card=card,
    )
    return speed_auto.plan(cfg, facts, drawn, load_shape(f"synthetic:{arch}"))


def summary(plan: speed_auto.SpeedPlan) -> dict:
    t = plan.config.training
    return {
        "split": f"{t.micro_batch_size} x {t.gradient_accumulation_steps}",
        "checkpoint_layers": plan.checkpoint_layers,
        "checkpoint_offload": plan.checkpoint_offload,
        "predicted_peak_gib": round(plan.predicted_peak_bytes / GIB, 2)
        if plan.predicted_peak_bytes
        else None,
        "budget_gib": round(plan.budget_bytes / GIB, 2) if plan.budget_bytes else None,
        "predicted_tokens_per_s": round(plan.predicted_tokens_per_s) if plan.predicted_tokens_per_s else None,
        "choices": {c.name: c.value for c in plan.choices},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="llama-2-7b")
    ap.add_argument("--lengths", default="full", choices=("ragged", "full"))
    ap.add_argument("--cap", type=float, default=22.0, help="GiB the run may use (emulate_vram_gib)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config key, dotted")
    a = ap.parse_args(argv)
    extra = {}
    for item in a.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: KEY=VALUE expected, e.g. speed.mlp_block=fused")
        extra[key] = value
    print(json.dumps(summary(plan_for(a.arch, a.lengths, a.cap, extra)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
