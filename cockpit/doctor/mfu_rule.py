"""A run far below what its card can do: model FLOPs utilisation (cockpit.speed.flops) under 20%.

Large bf16 matrix products reach ~57% of a card's dense peak (the speed model's EFF_MAX, fitted
on H200 runs, cockpit/speed/model.py); a training step also runs norms, the loss, the optimizer
and, with QLoRA, dequantisation, so a well-fed run lands between the two. Under 20% most of the
rented card is unused. The finding names the measured MFU and, where the cockpit has the
evidence, the change it predicts would help most: speed: auto's split (speed model), a larger
micro-batch, the data loader (the trainer's measured wait), bf16, fewer recomputed layers.
"""

from __future__ import annotations

from typing import Any

from cockpit import fmt
from cockpit.doctor.step_rules import auto_fitted
from cockpit.doctor.window import Finding, Observation, Window, field, phrase
from cockpit.paths import cockpit_command
from cockpit.speed import flops

LOW_MFU = 0.20
RECOMPUTE_SHARE = 1.15  # hardware FLOPs at least this many times model FLOPs: recomputation is worth naming
INPUT_WAIT_SHARE = 0.25  # as step_rules
WORTH_GAIN = 1.1


def run_mfu(state: Any) -> float | None:
    distributed = field(state, "distributed") or {}
    gpus = distributed.get("world_size") if isinstance(distributed, dict) else None
    return flops.mfu_of(
        field(state, "speed_plan") or {}, field(state, "tokens_per_s"), gpus if isinstance(gpus, int) else 1
    )


def _training(o: Observation) -> bool:
    return o.training


def _stepping(o: Observation) -> bool:
    return o.stepping


def _advice(state: Any, mfu: float) -> str:
    sp = field(state, "speed_plan") or {}
    measured = field(state, "input") or {}
    split = sp.get("auto_split") or {}
    rate, base = split.get("tokens_per_s"), split.get("as_run_tokens_per_s")
    tips: list[str] = []
    if rate and base and rate / base >= WORTH_GAIN:
        tips.append(
            f"speed: auto's split (micro-batch {split.get('micro_batch_size')} x "
            f"{split.get('gradient_accumulation_steps')}) is ~{rate / base:.1f}x by the speed model, "
            f"MFU ~{fmt.share(mfu * rate / base)}: drop the batch keys from the config and speed.keep"
        )
    if sp.get("mode") == "off":
        tips.append("speed: auto (speed.mode is off) packs rows and picks the batch and checkpointing")
    wait = measured.get("data_wait_share")
    if isinstance(wait, (int, float)) and wait >= INPUT_WAIT_SHARE:
        tips.append(
            f"the step waits {wait:.0%} of its time for data: raise training.dataloader_num_workers "
            f"(up to ~{1 / max(1e-6, 1 - wait):.1f}x)"
        )
    tokens, busy = measured.get("tokens_per_micro_batch"), sp.get("busy_tokens_per_micro_batch")
    if tokens and busy and tokens < busy and not tips:
        tips.append(
            f"{tokens:.0f} tokens per micro-batch, ~{busy} needed to keep the card busy (speed model): "
            + (
                "speed: auto already runs the fastest split that fits the memory it may use, so only more "
                "device memory (or less of it per token) would raise it"
                if auto_fitted(sp)
                else "raise training.micro_batch_size or pack rows"
            )
        )
    if (field(state, "precision") or "") == "fp32":
        tips.append("training.precision: bf16 (fp32 runs off the tensor cores' bf16 path)")
    info = sp.get("flops") or {}
    model, hardware = info.get("model_per_token"), info.get("hardware_per_token")
    if model and hardware and hardware / model >= RECOMPUTE_SHARE:
        tips.append(
            f"{info.get('checkpoint_layers')} layers are recomputed ({hardware / model - 1:.0%} more FLOPs "
            "than the model's): fewer checkpointed layers where memory allows (speed: auto picks the fewest "
            "that fit)"
        )
    if not tips:
        return (
            "No single change the cockpit can predict; the speed plan (speed_plan lines) says what runs. "
            "QLoRA's dequantisation and small models (< 1B) keep MFU low on a large card: a smaller card "
            f"costs less for the same run ({cockpit_command()} cards)."
        )
    return "Predicted to help: " + "; ".join(tips) + "."


def low_mfu(window: Window, state: Any) -> Finding | None:
    """MFU < 20% of the card's dense bf16 peak while training, for most of the window."""
    # steps measured for most of the time it trained (>= MIN_HELD_S), and training now
    if not window.observations or not window.observations[-1].training:
        return None
    if not window.stepped_enough() or not window.held(_stepping, during=_training):
        return None
    mfu = run_mfu(state)
    if mfu is None or mfu >= LOW_MFU:
        return None
    info = (field(state, "speed_plan") or {}).get("flops") or {}
    tokens_per_s = field(state, "tokens_per_s")
    peak = info.get("peak_flops") or 0
    return Finding(
        rule="low_mfu",
        severity="info",
        title=f"The card works at {fmt.share(mfu)} of its dense bf16 peak (MFU)",
        evidence=phrase(
            [
                f"{fmt.rate(tokens_per_s)} real tokens/s x {info.get('model_per_token', 0) / 1e9:.3g} "
                f"GFLOP a token: {mfu * peak / 1e12:.0f} of {peak / 1e12:.0f} TFLOPS a card: "
                f"{info.get('peak_source')}",
                f"large bf16 matmuls reach ~57% of it; under {LOW_MFU:.0%} most of the card is unused",
            ]
        ),
        fix=_advice(state, mfu),
        since_ts=window.first_ts(_stepping),
    )
