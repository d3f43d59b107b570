#!/usr/bin/env python3
"""What `speed: auto` would choose for a bench row, before the row runs (no GPU, no torch).

The plan (cockpit/speed/auto.py) for bench/vs_unsloth.py's cockpit side: QLoRA nf4 with double
quantisation, r 16 / alpha 16 / no dropout on all seven linears, adamw_8bit, 16 samples a step, the
row's token lengths (seed 0, as the bench draws them), on an H200 (`--card`: another, as NVML names
it) at the speed model's reference host, with Liger, at a memory cap; `--parts`: where the speed
model puts a micro-batch's time. `--set KEY=VALUE` adds config keys (e.g. speed.mlp_block=fused).
It prints the split, the predicted peak and tokens/s and each choice: the prediction a later run on
the GPU is held against (bench/speed_heldout.py reads the runs' own plans).

  python3 bench/plan_preview.py --arch llama-2-7b --lengths full --cap 7.15 --set speed.mlp_block=fused
  python3 bench/plan_preview.py --arch llama-2-7b --lengths ragged --card 'NVIDIA H100 80GB HBM3' --parts
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


def plan_for(
    arch: str, lengths: str, cap_gib: float, extra: dict, device_name: str = "NVIDIA H200"
) -> speed_auto.SpeedPlan:
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
    card, _ = speed_auto.card_for(device_name, int(139.8 * GIB))
    facts = speed_auto.Facts(
        device_kind="cuda",
        precision="bf16",
        device_name=device_name,
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


def step_parts(plan: speed_auto.SpeedPlan, arch: str, device_name: str = "NVIDIA H200") -> dict:
    """Where the speed model puts a micro-batch's time for the plan's split, in ms (at the reference
    host): the host's launches and the device's work by kind, as the plan rates the split
    (batch_choice.split_speed), and the optimizer's step."""
    from dataclasses import replace

    from cockpit.models.memory import workload_from_config
    from cockpit.speed.batch_choice import split_speed

    w = replace(
        workload_from_config(plan.config, load_shape(f"synthetic:{arch}")),
        precision="bf16",
        liger=plan.liger,
        fused_lora=plan.lora_backend == "fused",
        fused_mlp=plan.mlp_block == "fused",
    )
    card, _ = speed_auto.card_for(device_name, int(139.8 * GIB))
    split = split_speed(w, plan.checkpoint_layers, card, plan.checkpoint_offload)
    return {
        "card": card.name,
        "tokens_per_micro_batch": w.tokens_per_micro_batch,
        "micro_batch_ms": round(split.micro_batch_s * 1e3, 1),
        "optimizer_step_ms": round(split.optimizer_step_s * 1e3, 1),
        "parts_ms": {k: round(v * 1e3, 1) for k, v in split.parts_s.items() if v},
        "device_ms": round(sum(v for k, v in split.parts_s.items() if k != "host") * 1e3, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="llama-2-7b")
    ap.add_argument("--lengths", default="full", choices=("ragged", "full"))
    ap.add_argument("--cap", type=float, default=22.0, help="GiB the run may use (emulate_vram_gib)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config key, dotted")
    ap.add_argument("--card", default="NVIDIA H200", help="the card as NVML names it (default NVIDIA H200)")
    ap.add_argument(
        "--parts", action="store_true", help="also where the speed model puts a micro-batch's time"
    )
    a = ap.parse_args(argv)
    extra = {}
    for item in a.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: KEY=VALUE expected, e.g. speed.mlp_block=fused")
        extra[key] = value
    plan = plan_for(a.arch, a.lengths, a.cap, extra, a.card)
    out = summary(plan)
    if a.parts:
        out["step_parts"] = step_parts(plan, a.arch, a.card)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
