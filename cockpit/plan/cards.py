"""A card table's rows: one card (or N of it) for one training run, with fit, speed, time and cost.

Pure Python (no textual, no torch), shared by `cockpit cards` and the picker screen. For each
card: the memory model's verdict (fits / tight / no) with the predicted peak and headroom, the
speed model's tokens/s, and the time and cost of the run at the card's price (the user's, or the
dated default). A card the run does not fit gets the first single change that makes it fit
(`cockpit.plan.fits`), with the speed, time and cost of the run so changed. Two rows are flagged:
the cheapest card the run fits as given (with the safety margin), and the fastest such card
within the budget (cockpit/plan/table.py says how ties go).

The run's size is dataset tokens x epochs (tokens given, or samples x mean tokens per sample,
each sample cut at the max length), or `training.max_steps` x the tokens of one optimizer
step. Speeds assume full rows of max-length tokens (packed, or samples at least that long).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from cockpit import fmt
from cockpit.fmt import GIB
from cockpit.gpus.card import Card, price_label
from cockpit.models.memory import (
    SAFETY_MARGIN,
    Workload,
)
from cockpit.plan.cards_inputs import RunSize
from cockpit.plan.fits import CardFit, Change
from cockpit.speed.model import SpeedEstimate, estimate_run, estimate_speed, speed_inputs

# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class RunFigures:
    """Speed, and with a known size, time and cost of one configuration on one card."""

    speed: SpeedEstimate
    tokens: int | None
    time_s: float | None
    cost_usd: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens_per_s": round(self.speed.tokens_per_s, 1),
            "step_s": round(self.speed.step_s, 4),
            "bound": self.speed.bound,
            "parts_s": {k: round(v, 5) for k, v in self.speed.parts_s.items()},
            "tokens": self.tokens,
            "time_s": None if self.time_s is None else round(self.time_s, 1),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 4),
        }


@dataclass(frozen=True)
class CardRow:
    card: Card
    fit: CardFit  # the run as given on this card (per GPU on a row of several)
    price_label: str
    as_given: RunFigures | None  # None when the run does not fit as given: nothing to time
    with_change: RunFigures | None  # the run with fit.change, when there is one
    within_budget: bool | None = None
    cheapest: bool = False
    fastest: bool = False
    gpus: int = 1  # a row of several GPUs of the card (cockpit.plan.multi_rows)
    sharding: str | None = None  # with gpus > 1: what distributed.strategy auto runs (ddp | fsdp)
    multi: dict[str, Any] | None = None  # with gpus > 1: the communication model's stated inputs and figures

    @property
    def key(self) -> str:
        """The row's id: the card's, with `-x4` for a row of 4 GPUs."""
        return self.card.id if self.gpus == 1 else f"{self.card.id}-x{self.gpus}"

    @property
    def name(self) -> str:
        """`A100 80GB SXM`, or `A100 80GB SXM x4 (FSDP)`."""
        if self.gpus == 1:
            return self.card.name
        assert self.sharding is not None  # set on a row of several GPUs
        return f"{self.card.name} x{self.gpus} ({self.sharding.upper()})"

    @property
    def usd_per_hour(self) -> float:
        """What the job costs an hour: the GPUs x the price per GPU-hour."""
        return self.gpus * self.card.price_per_hour

    @property
    def shown(self) -> RunFigures | None:
        """The figures of the row: as given where it runs, else with the change that makes it fit."""
        return self.as_given if self.fit.verdict != "no" else self.with_change

    def runs_as_given(self) -> RunFigures:
        """`as_given` of a row that runs as given (fits or tight): the rows a table flags or ranks."""
        assert self.as_given is not None, f"{self.key} does not run as given"
        return self.as_given

    @property
    def shown_workload_is_changed(self) -> bool:
        return self.fit.verdict == "no" and self.with_change is not None

    def phrase(self) -> str:
        """`RTX 4090: fits with gradient checkpointing (20.1 GiB): 1.2k tok/s, 2:15:00, $0.99`."""
        name, fit = self.name, self.fit
        per = "" if self.gpus == 1 else " per GPU"
        if fit.verdict == "fits":
            head = f"{name}: fits, {fit.headroom_bytes / GIB:.1f} GiB free{per}"
        elif fit.change is not None:
            head = f"{name}: fits with {fit.change.description} ({fit.change.peak_bytes / GIB:.1f} GiB{per})"
        elif fit.verdict == "tight":
            head = f"{name}: tight, {fit.headroom_bytes / GIB:.1f} GiB free{per} (inside the safety margin)"
        else:
            need = (fit.peak_bytes - self.card.vram_gib * GIB * (1 - SAFETY_MARGIN)) / GIB
            head = f"{name}: does not fit, and no single change fits it ({need:.1f} GiB{per} short)"
        figures = self.with_change if fit.change is not None else self.as_given
        return head if figures is None else f"{head}: {figures_text(figures)}"

    def to_dict(self, today: date) -> dict[str, Any]:
        change: Change | None = self.fit.change
        vram = int(self.card.vram_gib * GIB)
        return {
            "card": self.card.id,
            "name": self.name,
            "gpus": self.gpus,
            "sharding": self.sharding,
            "vram_gib": self.card.vram_gib,
            "verdict": self.fit.verdict,
            "peak_bytes": self.fit.peak_bytes,
            "headroom_bytes": self.fit.headroom_bytes,
            "price": {
                "usd_per_hour": self.card.price_per_hour,
                "is_default": self.card.price_is_default,
                "date": self.card.price_date,
                "source": self.card.price_source,
                "label": price_label(self.card, today),
            },
            "usd_per_hour": self.usd_per_hour,
            # a row of several GPUs is beyond the calibration on any card
            "speed_inputs": {**speed_inputs(self.card), **({} if self.gpus == 1 else {"extrapolated": True})},
            **({} if self.multi is None else {"multi_gpu": self.multi}),
            "as_given": None if self.as_given is None else self.as_given.to_dict(),
            "change": None
            if change is None
            else {
                "key": change.key,
                "description": change.description,
                "config": change.config,
                "effect": change.effect,
                "peak_bytes": change.peak_bytes,
                "headroom_bytes": vram - change.peak_bytes,
                "figures": None if self.with_change is None else self.with_change.to_dict(),
            },
            "within_budget": self.within_budget,
            "cheapest": self.cheapest,
            "fastest_within_budget": self.fastest,
            "phrase": self.phrase(),
        }


def figures_text(figures: RunFigures) -> str:
    text = f"{fmt.rate(figures.speed.tokens_per_s)} tok/s"
    if figures.time_s is not None:
        text += f", {fmt.duration(figures.time_s)}"
    if figures.cost_usd is not None:
        text += f", {fmt.money(figures.cost_usd)}"
    return text


def figures_for(w: Workload, card: Card, size: RunSize) -> RunFigures:
    """Speed, time and cost of the workload on one card for a run of `size`."""
    tokens = size.tokens(w)
    if tokens is None:
        return RunFigures(estimate_speed(w, card), None, None, None)
    run = estimate_run(w, card, tokens, 1.0, card.price_per_hour)
    return RunFigures(run.speed, run.tokens, run.time_s, run.cost_usd)


def figures_of(speed: SpeedEstimate, tokens: int | None, usd_per_hour: float) -> RunFigures:
    """Time and cost of `tokens` at `speed` and the job's price per hour (tokens None: speed only)."""
    if tokens is None:
        return RunFigures(speed, None, None, None)
    time_s = tokens / speed.tokens_per_s
    return RunFigures(speed, tokens, time_s, usd_per_hour * time_s / 3600)


def within(figures: RunFigures | None, budget_usd: float | None) -> bool | None:
    if budget_usd is None or figures is None or figures.cost_usd is None:
        return None
    return figures.cost_usd <= budget_usd
