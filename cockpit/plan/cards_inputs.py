"""The card table's inputs: how much the run trains on (dataset tokens, or samples x mean tokens,
x epochs; or max_steps) and the budget, parsed from what people type (`10M`, `9846x350`, `2e6`).

Pure Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from cockpit.models.memory import Workload

TOKENS_MAX = 10**13  # ten trillion tokens: more is a unit mistake, not a fine-tune
SAMPLES_MAX = 10**11
MEAN_TOKENS_MAX = 1 << 21
EPOCHS_MAX = 1000.0
BUDGET_MAX = 10**7
SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
COUNT = r"\s*([0-9][0-9_,]*(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([kmbgt]?)\s*"


class CardsError(ValueError):
    """An input of the card table that cannot be used; `field` names it (dataset, epochs, budget)."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


# ---------------------------------------------------------------- inputs


def parse_count(text: str, what: str, field_name: str, high: float) -> float:
    """`10M`, `1.5b`, `250k`, `9,846`, `2e6` -> a positive number, at most `high`."""
    match = re.fullmatch(COUNT, str(text).lower())
    if not match:
        raise CardsError(field_name, f"{what} {text!r}: expected a number like 5M, 250k or 9846")
    value = float(match.group(1).replace(",", "").replace("_", "")) * SUFFIXES[match.group(2)]
    if value <= 0:
        raise CardsError(field_name, f"{what} {text!r}: must be more than 0")
    if value > high:
        raise CardsError(field_name, f"{what} {text!r}: more than {high:.0e}; check the unit (k, M, B)")
    return value


@dataclass(frozen=True)
class RunSize:
    """How much the run trains on. Without tokens, samples or max_steps there is no time or cost."""

    dataset_tokens: int | None = None
    samples: int | None = None
    mean_tokens: float | None = None
    epochs: float = 1.0
    max_steps: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.epochs, (int, float)) and 0 < self.epochs <= EPOCHS_MAX):
            raise CardsError("epochs", f"epochs {self.epochs!r}: expected a number above 0, at most 1000")
        for name, value, high in (
            ("dataset tokens", self.dataset_tokens, TOKENS_MAX),
            ("samples", self.samples, SAMPLES_MAX),
            ("mean tokens per sample", self.mean_tokens, MEAN_TOKENS_MAX),
        ):
            if value is not None and not 0 < value <= high:
                raise CardsError("dataset", f"{name} {value!r}: expected more than 0 and at most {high:.0e}")
        if (self.samples is None) != (self.mean_tokens is None):
            raise CardsError("dataset", "give samples together with their mean tokens (e.g. 9846x350)")
        if self.samples is not None and self.dataset_tokens is not None:
            raise CardsError("dataset", "give dataset tokens or samples x mean tokens, not both")
        if self.mean_tokens is not None and self.mean_tokens < 1:
            raise CardsError("dataset", f"mean tokens per sample {self.mean_tokens:g}: expected at least 1")
        # the run must cover at least one token (a sample keeps at least one after the cut)
        what, count = ("token", self.dataset_tokens) if self.samples is None else ("sample", self.samples)
        if self.max_steps is None and count is not None and count * self.epochs < 1:
            raise CardsError(
                "epochs" if self.epochs < 1 else "dataset",
                f"{self.epochs:g} epochs of {count:,} {what}{'s' if count != 1 else ''} "
                f"is less than one {what}; give more epochs or a larger dataset",
            )

    @property
    def known(self) -> bool:
        return self.max_steps is not None or self.dataset_tokens is not None or self.samples is not None

    def tokens(self, w: Workload) -> int | None:
        """Tokens the run processes with workload `w` (all epochs), or None when unknown: for a
        preference pair, its chosen and rejected sequences both (the speed model's unit); with several
        GPUs, every GPU's micro-batches (each runs its own: the multi-GPU tokens/s is all of them)."""
        if self.max_steps is not None:
            return self.max_steps * w.grad_accum * w.forward_tokens_per_micro_batch * w.gpus
        if self.samples is not None:  # each sample (each sequence of a pair) is cut at the max length
            assert self.mean_tokens is not None  # given with the samples (__post_init__)
            return int(self.samples * w.sequences_per_row * min(self.mean_tokens, w.seq_len) * self.epochs)
        if self.dataset_tokens is not None:
            return int(self.dataset_tokens * self.epochs)
        return None

    def describe(self, w: Workload) -> str:
        tokens = self.tokens(w)
        if tokens is None:
            return "dataset size not given: no time or cost"
        if self.max_steps is not None:
            per_step = w.grad_accum * w.forward_tokens_per_micro_batch * w.gpus
            return f"max_steps {self.max_steps} x {per_step} tokens/step"
        if self.samples is not None:
            assert self.mean_tokens is not None  # given with the samples (__post_init__)
            cut = " (cut at max length)" if self.mean_tokens > w.seq_len else ""
            pairs = " x 2 sequences (chosen, rejected)" if w.sequences_per_row == 2 else ""
            size = f"{self.samples:,} samples x {min(self.mean_tokens, w.seq_len):g} tokens{cut}{pairs}"
        else:
            size = f"{_tokens(self.dataset_tokens)} tokens"
        return f"{size} x {self.epochs:g} epoch{'s' if self.epochs != 1 else ''} = {_tokens(tokens)} tokens"

    def to_dict(self, w: Workload) -> dict[str, Any]:
        return {
            "dataset_tokens": self.dataset_tokens,
            "samples": self.samples,
            "mean_tokens": self.mean_tokens,
            "epochs": self.epochs,
            "max_steps": self.max_steps,
            "run_tokens": self.tokens(w),
        }


def parse_dataset(text: str, epochs: float = 1.0, max_steps: int | None = None) -> RunSize:
    """`10M` (tokens) or `9846x350` (samples x mean tokens per sample); empty: size unknown
    (unless `max_steps`, the config's training.max_steps, which wins over the dataset size)."""
    if max_steps is not None:
        return replace(parse_dataset(text, epochs), max_steps=max_steps)
    text = str(text or "").strip()
    if not text:
        return RunSize(epochs=epochs)
    samples, sep, mean = text.lower().replace("*", "x").partition("x")
    if sep:
        return RunSize(
            samples=int(parse_count(samples, "samples", "dataset", SAMPLES_MAX)),
            mean_tokens=parse_count(mean, "mean tokens per sample", "dataset", MEAN_TOKENS_MAX),
            epochs=epochs,
        )
    return RunSize(
        dataset_tokens=int(parse_count(text, "dataset tokens", "dataset", TOKENS_MAX)), epochs=epochs
    )


def check_budget(budget_usd: float | None, size: RunSize) -> float | None:
    if budget_usd is None:
        return None
    if not 0 < budget_usd <= BUDGET_MAX:
        raise CardsError(
            "budget", f"budget {budget_usd!r}: expected US dollars above 0, at most {BUDGET_MAX:.0e}"
        )
    if not size.known:
        raise CardsError("budget", "a budget needs the dataset size (tokens, or samples x mean tokens)")
    return float(budget_usd)


def _tokens(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"
