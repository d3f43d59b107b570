"""Several GPUs: whether a run copies the model to each GPU (DDP) or shards it (FSDP)."""

from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("ddp", "fsdp")
DDP_MARGIN = 0.05  # what a DDP replica must leave free on the card (the estimate's own error)


@dataclass(frozen=True)
class StrategyChoice:
    strategy: str  # ddp | fsdp
    reason: str


def choose_strategy(
    requested: str, method: str, ddp_bytes: int | None, card_bytes: int | None
) -> StrategyChoice:
    """DDP for LoRA/QLoRA; for a full fine-tune DDP only when its per-GPU memory fits one card.

    `ddp_bytes`: the memory model's per-GPU peak under DDP (a whole replica, its gradient buckets
    and NCCL's buffers; None: unknown shape); `card_bytes`: what one card offers (None: unknown).
    Unknowns make auto shard a full fine-tune, the choice that fits more.
    """
    if requested in STRATEGIES:
        return StrategyChoice(requested, f"distributed.strategy: {requested}")
    if method in ("lora", "qlora"):
        return StrategyChoice(
            "ddp", f"{method}: the frozen base and the adapter fit one card; ddp copies them"
        )
    if ddp_bytes is None or card_bytes is None:
        return StrategyChoice("fsdp", "full fine-tune, replica size unknown: sharded to be safe")
    need = f"full fine-tune: a DDP replica needs ~{ddp_bytes / 2**30:.1f} GiB per GPU, one card has "
    need += f"{card_bytes / 2**30:.1f} GiB"
    if ddp_bytes <= card_bytes * (1 - DDP_MARGIN):
        return StrategyChoice("ddp", need)
    return StrategyChoice("fsdp", need + "; sharded over the GPUs")
