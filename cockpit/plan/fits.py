"""What fits where, and what to change so that it fits: the memory model applied to cards.

Shared by the card picker ("RTX 4090: fits with gradient checkpointing") and the OOM
wizard (remedies ranked by predicted peak). Every suggestion is one change to the run's
settings, with the peak the memory model predicts after it; a change that alters the
effective batch keeps it by raising gradient accumulation, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cockpit.fmt import GIB
from cockpit.gpus.card import Card
from cockpit.models.memory import Workload, estimate_memory, verdict

PAGED_8BIT = "paged_adamw_8bit"


@dataclass(frozen=True)
class Change:
    key: str  # short id, e.g. "gradient_checkpointing"
    description: str  # for people: what changes and its cost
    workload: Workload
    config: dict[str, Any]  # the config keys to set (dotted) to apply it
    peak_bytes: int
    effect: str  # what it does to results or speed, stated plainly


@dataclass(frozen=True)
class CardFit:
    card: Card
    verdict: str  # fits | tight | no
    peak_bytes: int
    headroom_bytes: int
    change: Change | None  # the first single change that makes it fit, when it does not


def card_vram_bytes(card: Card) -> int:
    return int(card.vram_gib * GIB)


def single_changes(w: Workload) -> list[Change]:
    """Each change that lowers the peak, alone, in the article's order of preference."""
    out: list[Change] = []

    def add(key: str, description: str, config: dict[str, Any], effect: str, **fields: Any) -> None:
        changed = replace(w, **fields)
        out.append(Change(key, description, changed, config, estimate_memory(changed).peak_bytes, effect))

    if not w.gradient_checkpointing:
        add(
            "gradient_checkpointing",
            "gradient checkpointing",
            {"training.gradient_checkpointing": True},
            "same results; each step recomputes the forward pass (about a third slower)",
            gradient_checkpointing=True,
        )
    if w.micro_batch > 1:
        half = w.micro_batch // 2
        add(
            "micro_batch",
            f"micro-batch {w.micro_batch} -> {half} (accumulation {w.grad_accum} -> {w.grad_accum * 2})",
            {"training.micro_batch_size": half, "training.gradient_accumulation_steps": w.grad_accum * 2},
            "same effective batch, same results; smaller matrix products are somewhat slower",
            micro_batch=half,
            grad_accum=w.grad_accum * 2,
        )
    if w.optimizer not in (PAGED_8BIT, "adamw_8bit", "adafactor", "sgd"):
        add(
            "optimizer",
            f"the {PAGED_8BIT} optimizer",
            {"training.optimizer": PAGED_8BIT},
            "8-bit optimizer states: results very close to 32-bit AdamW",
            optimizer=PAGED_8BIT,
        )
    if w.method == "lora":
        add(
            "qlora",
            "a 4-bit base (QLoRA)",
            {"method": "qlora", "quantization.bits": 4},
            "4-bit base weights: slightly lower quality, dequantisation costs speed",
            method="qlora",
            quant_bits=4,
        )
    if w.method == "full":
        add(
            "lora",
            "LoRA instead of a full fine-tune",
            {"method": "lora"},
            "far fewer trainable weights: a different kind of fine-tune",
            method="lora",
        )
    if w.method == "qlora" and w.quant_bits == 8:
        add(
            "nf4",
            "a 4-bit instead of 8-bit base",
            {"quantization.bits": 4},
            "4-bit base weights: slightly lower quality",
            quant_bits=4,
        )
    if w.method != "full" and w.lora_targets == "all-linear":
        add(
            "targets",
            "LoRA on q_proj, v_proj only",
            {"lora.target_modules": ["q_proj", "v_proj"]},
            "fewer adapted layers: a smaller adapter, often a little lower quality",
            lora_targets=["q_proj", "v_proj"],
        )
    if w.seq_len > 256:
        shorter = w.seq_len // 2
        add(
            "max_length",
            f"max length {w.seq_len} -> {shorter}",
            {"training.max_length": shorter},
            "samples longer than this are cut: check the share of truncated samples",
            seq_len=shorter,
        )
    base = estimate_memory(w).peak_bytes
    return [c for c in out if c.peak_bytes < base]


def fit_card(w: Workload, card: Card) -> CardFit:
    vram = card_vram_bytes(card)
    estimate = estimate_memory(w)
    result = verdict(estimate, vram)
    change = None
    if result != "fits":
        # the first single change, in the article's order, that makes the run fit with margin
        change = next(
            (c for c in single_changes(w) if verdict(estimate_memory(c.workload), vram) == "fits"), None
        )
    return CardFit(card, result, estimate.peak_bytes, vram - estimate.peak_bytes, change)


def fit_cards(w: Workload, cards: list[Card]) -> list[CardFit]:
    return [fit_card(w, card) for card in cards]


def fit_phrase(fit: CardFit) -> str:
    """`RTX 4090: fits`, `RTX 4090: fits with gradient checkpointing`, `RTX 4090: does not fit`."""
    if fit.verdict == "fits":
        return f"{fit.card.name}: fits ({fit.headroom_bytes / GIB:.1f} GiB free)"
    if fit.change is not None:
        return f"{fit.card.name}: fits with {fit.change.description} ({fit.change.peak_bytes / GIB:.1f} GiB)"
    if fit.verdict == "tight":
        return f"{fit.card.name}: tight ({fit.headroom_bytes / GIB:.1f} GiB free, under the safety margin)"
    return f"{fit.card.name}: does not fit ({fit.peak_bytes / GIB:.1f} GiB needed)"
