"""The knobs an OOM remedy can turn, each with its choices (mildest first), and the speed model.

A choice says which config keys it sets, which memory-model inputs it changes, its effect on
the results (ranked: 0 none, 1 near-identical, 2 quality, 3 truncation, 4 adapter capacity),
whether the relaunch can resume from the last checkpoint, and why it changes the speed (the
speed model, `cockpit.speed.model`, gives the figure). Pure Python; `cockpit.oom.remedies` predicts,
combines and ranks them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cockpit.models.memory import Workload
from cockpit.oom.remedy_inputs import Observation

if TYPE_CHECKING:
    from cockpit.config.schema import TrainConfig

# expandable segments is offered when the allocator holds at least this much reserved but unallocated
FRAGMENTED_MIN_BYTES = 256 * 2**20
FRAGMENTED_MIN_SHARE = 0.05  # ... and at least this share of what the process holds
EIGHT_BIT_OPTIMIZER = "paged_adamw_8bit"
LOW_STATE_OPTIMIZERS = ("paged_adamw_8bit", "adamw_8bit", "adafactor", "sgd")
MIN_LENGTH = 64
# cutting at most this share of the samples (a few outliers) counts as near-identical results
FEW_CUT_SHARE = 0.01
MIN_RANK = 8


@dataclass(frozen=True)
class Choice:
    key: str
    title: str
    config: dict[str, Any]  # dotted config keys to set
    fields: dict[str, Any]  # memory-model inputs it changes
    effect: str
    effect_rank: int = 0
    speed_reason: str = ""  # why the speed changes; the speed model gives the figure
    saves_bytes: int = 0  # memory it frees outside the model (fragmentation)
    from_step_zero: bool = False
    fresh_optimizer: bool = False
    # partial recomputation: this many of the model's layers recomputed (0: as `fields` say); speed: auto
    # carries it out, as transformers' every_n_layers (cockpit.speed.batch_choice)
    checkpoint_layers: int = 0


@dataclass(frozen=True)
class Knob:
    key: str
    choices: tuple[Choice, ...] = field(default_factory=tuple)


def knobs(
    cfg: TrainConfig, base: Workload, observation: Observation, data: dict[str, Any], device_kind: str
) -> list[Knob]:
    """Every knob that can lower the peak of `base`, with its choices, mildest first."""
    gpu = device_kind == "cuda"
    found = [
        _fragmentation(cfg, observation) if gpu else None,
        _checkpointing(base, gpu, cfg),
        _micro_batch(base),
        _optimizer(base) if gpu else None,
        _scales(base),
        _base_weights(base, gpu),
        _targets(base),
        _rank(base),
        _max_length(cfg, base, data),
        _reference(base),
        _prompt_cut(cfg, base, data),
    ]
    return [k for k in found if k is not None and k.choices]


def _fragmentation(cfg: TrainConfig, observation: Observation) -> Knob | None:
    free_able = observation.reserved_unallocated_bytes
    held = observation.in_use_bytes or observation.allocated_bytes or 0
    if cfg.expandable_segments or not free_able:
        return None
    if free_able < FRAGMENTED_MIN_BYTES or free_able < FRAGMENTED_MIN_SHARE * held:
        return None
    return Knob(
        "expandable_segments",
        (
            Choice(
                "expandable_segments",
                "allocator expandable_segments",
                {"expandable_segments": True},
                {},
                "none",
                saves_bytes=free_able,
                speed_reason="an allocator setting: same kernels",
            ),
        ),
    )


def _checkpointing(w: Workload, gpu: bool = True, cfg: TrainConfig | None = None) -> Knob | None:
    """Recompute some blocks (on a GPU, by speed: auto: the fewest first), or every block; on a GPU,
    also keep their inputs in pinned host memory."""
    if w.checkpoint_offload:
        return None
    choices = []
    if not w.gradient_checkpointing and gpu and cfg is not None:
        choices += _partial(w, cfg)
    if not w.gradient_checkpointing:
        choices.append(
            Choice(
                "gradient_checkpointing",
                "gradient checkpointing",
                {"training.gradient_checkpointing": True},
                {"gradient_checkpointing": True},
                "none",
                speed_reason="one more forward pass per step: each block is recomputed in backward",
            )
        )
    if gpu:
        choices.append(
            Choice(
                "checkpoint_offload",
                "layer inputs in host memory",
                {"training.gradient_checkpointing": True, "training.checkpoint_offload": True},
                {"gradient_checkpointing": True, "checkpoint_offload": True},
                "none",
                speed_reason="every block recomputed; its input copied to pinned host memory and back "
                "(the copy back counted at 25 GB/s)",
            )
        )
    return Knob("gradient_checkpointing", tuple(choices)) if choices else None


def _partial(w: Workload, cfg: TrainConfig) -> list[Choice]:
    """Recompute k of the model's layers (the counts transformers' every_n_layers can make, fewest
    first): speed: auto on the relaunch, with gradient checkpointing left to it and the rest kept."""
    n = w.shape.num_layers
    counts = sorted({math.ceil(n / every) for every in range(2, n + 1)} - {0, n})
    keep = [k for k in cfg.speed.keep or [] if k not in PARTIAL_FREED]
    config: dict[str, Any] = {
        "speed.mode": "auto",
        "speed.keep": keep or None,
        **{key: None for key in PARTIAL_FREED},  # removed: speed: auto chooses them
    }
    return [
        Choice(
            "gradient_checkpointing",
            f"recompute {k} of {n} layers (auto)",
            config,
            {"gradient_checkpointing": True},
            "none",
            speed_reason=f"{k} of {n} blocks recomputed in backward: the fewest with which the batch fits",
            checkpoint_layers=k,
        )
        for k in counts
    ]


# the keys a partial-recomputation remedy leaves to speed: auto (removed from the config and speed.keep)
PARTIAL_FREED = ("training.gradient_checkpointing", "training.checkpoint_offload")


def _micro_batch(w: Workload) -> Knob:
    effective = w.micro_batch * w.grad_accum
    choices = []
    for size in sorted((d for d in range(1, w.micro_batch) if w.micro_batch % d == 0), reverse=True):
        accum = w.grad_accum * (w.micro_batch // size)
        choices.append(
            Choice(
                "micro_batch",
                f"micro-batch {w.micro_batch} -> {size}, accum {w.grad_accum} -> {accum}",
                {"training.micro_batch_size": size, "training.gradient_accumulation_steps": accum},
                {"micro_batch": size, "grad_accum": accum},
                f"effective batch kept at {effective} ({size} x {accum})",
                speed_reason="smaller matmuls use the GPU less; fixed costs per micro-batch weigh more",
            )
        )
    return Knob("micro_batch", tuple(choices))


def _optimizer(w: Workload) -> Knob | None:
    if w.optimizer in LOW_STATE_OPTIMIZERS:
        return None
    return Knob(
        "optimizer",
        (
            Choice(
                "optimizer",
                f"{EIGHT_BIT_OPTIMIZER} optimizer",
                {"training.optimizer": EIGHT_BIT_OPTIMIZER},
                {"optimizer": EIGHT_BIT_OPTIMIZER},
                "8-bit optimizer states: results very close to 32-bit AdamW",
                effect_rank=1,
                speed_reason="8-bit optimizer states: less memory traffic in the optimizer step",
                fresh_optimizer=True,
            ),
        ),
    )


def _scales(w: Workload) -> Knob | None:
    """Scales unpacked into fp32 (speed: auto where the memory allowed): back to double-quantised."""
    if not (w.method == "qlora" and w.quant_bits == 4 and w.double_quant and w.unpacked_scales):
        return None
    choice = Choice(
        "unpack_scales",
        "4-bit scales kept double-quantised",
        {"quantization.unpack_scales": False},
        {"unpacked_scales": False},
        "none",
        speed_reason="the same numbers; each 4-bit dequantisation turns its scales back into fp32 "
        "first: two kernels more (the speed model does not count them)",
    )
    return Knob("unpack_scales", (choice,))


def _base_weights(w: Workload, gpu: bool) -> Knob | None:
    if w.method == "full":
        choice = Choice(
            "lora",
            "LoRA instead of a full fine-tune",
            {"method": "lora"},
            {"method": "lora"},
            "a LoRA adapter instead of all weights: a different, smaller fine-tune",
            effect_rank=4,
            speed_reason="no weight gradients and optimizer states for the base",
            from_step_zero=True,
        )
        return Knob("base", (choice,))
    if not gpu or (w.method == "qlora" and w.quant_bits == 4):
        return None
    if w.method == "lora":
        choice = Choice(
            "qlora",
            "a 4-bit base (QLoRA)",
            {"method": "qlora", "quantization.bits": 4},
            {"method": "qlora", "quant_bits": 4},
            "4-bit base weights: slightly lower quality",
            effect_rank=2,
            speed_reason="the 4-bit weights are dequantised in every pass",
        )
    else:
        choice = Choice(
            "nf4",
            "a 4-bit instead of an 8-bit base",
            {"quantization.bits": 4},
            {"quant_bits": 4},
            "4-bit base weights: slightly lower quality",
            effect_rank=2,
            speed_reason="4-bit dequantisation instead of 8-bit",
        )
    return Knob("base", (choice,))


def _targets(w: Workload) -> Knob | None:
    fewer = ["q_proj", "v_proj"]
    if w.method == "full" or w.lora_targets == fewer or not set(fewer) <= _target_set(w):
        return None
    choice = Choice(
        "targets",
        "LoRA on q_proj, v_proj only",
        {"lora.target_modules": fewer},
        {"lora_targets": fewer},
        "fewer adapted layers: a lower-capacity adapter",
        effect_rank=4,
        speed_reason="fewer adapter matmuls",
        from_step_zero=True,
    )
    return Knob("targets", (choice,))


def _target_set(w: Workload) -> set[str]:
    if w.lora_targets == "all-linear":
        return set(w.shape.linear_shapes())
    return set(w.lora_targets)


def _rank(w: Workload) -> Knob | None:
    if w.method == "full":
        return None
    choices: list[Choice] = []
    rank = w.lora_r // 2
    while rank >= MIN_RANK and len(choices) < 2:
        choices.append(
            Choice(
                "rank",
                f"LoRA rank {w.lora_r} -> {rank}",
                {"lora.r": rank},
                {"lora_r": rank},
                f"rank {rank} instead of {w.lora_r}: a lower-capacity adapter",
                effect_rank=4,
                speed_reason="smaller adapter matmuls",
                from_step_zero=True,
            )
        )
        rank //= 2
    return Knob("rank", tuple(choices))


def _max_length(cfg: TrainConfig, w: Workload, data: dict[str, Any]) -> Knob:
    over = data.get("tokens_over") or {}
    samples = data.get("samples")
    choices: list[Choice] = []
    length = 1 << ((w.seq_len - 1).bit_length() - 1)  # the largest power of two below seq_len
    while length >= MIN_LENGTH and len(choices) < 4:
        rank = 3
        if str(length) in over and samples:
            cut = over[str(length)]
            share = f"cuts {cut / samples:.1%} of the samples ({cut} of {samples}) to {length} tokens"
            rank = 1 if cut <= FEW_CUT_SHARE * samples else 3
        else:
            share = f"cuts the samples longer than {length} tokens (share unknown: no length figures)"
        choices.append(
            Choice(
                "max_length",
                f"max length {cfg.training.max_length} -> {length}",
                {"training.max_length": length},
                {"seq_len": length},
                share,
                effect_rank=rank,
                speed_reason="fewer tokens per micro-batch: smaller matmuls",
            )
        )
        length //= 2
    return Knob("max_length", tuple(choices))


def _reference(w: Workload) -> Knob | None:
    """DPO and KTO: the reference's log-probs computed once before step 1 instead of a reference forward
    each step (and no 16-bit copy of a full fine-tune's base)."""
    if w.objective not in ("dpo", "kto") or w.reference in ("precomputed", "none"):
        return None
    choice = Choice(
        "precompute_ref_log_probs",
        "precomputed reference log-probs",
        {"preference.precompute_ref_log_probs": True},
        {"reference": "precomputed"},
        "none: the reference is fixed, so its log-probs are the same computed once",
        speed_reason="no reference forward during training; one pass over the data before step 1",
        # a full fine-tune's copy goes: a relaunch from a checkpoint would score the trained weights
        from_step_zero=w.reference == "copy",
    )
    return Knob("reference", (choice,))


def _prompt_cut(cfg: TrainConfig, w: Workload, data: dict[str, Any]) -> Knob | None:
    """Preference objectives: preference.max_prompt_length, which keeps the end of a long prompt and so
    shortens the longest sequence (prompt + answer) where the prompts are what makes it long."""
    if w.objective == "sft":
        return None
    prompt_max, answer_max = data.get("prompt_tokens_max"), data.get("answer_tokens_max")
    if not isinstance(prompt_max, int) or not isinstance(answer_max, int):
        return None
    current = cfg.preference.max_prompt_length or prompt_max
    choices: list[Choice] = []
    length = 1 << max(0, (min(current, prompt_max) - 1).bit_length() - 1)
    while length >= MIN_LENGTH // 2 and len(choices) < 3:
        seq = min(w.seq_len, length + answer_max)
        if seq < w.seq_len:
            choices.append(
                Choice(
                    "max_prompt_length",
                    f"max prompt length {length}",
                    {"preference.max_prompt_length": length},
                    {"seq_len": seq},
                    f"prompts longer than {length} tokens lose their start (longest prompt {prompt_max})",
                    effect_rank=3,
                    speed_reason="fewer tokens per sequence: smaller matmuls",
                )
            )
        length //= 2
    return Knob("max_prompt_length", tuple(choices)) if choices else None
