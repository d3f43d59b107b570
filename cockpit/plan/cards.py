"""The card table: every catalog card for one training run, with fit, speed, time and cost.

Pure Python (no textual, no torch), shared by `cockpit cards` and the picker screen. For each
card: the memory model's verdict (fits / tight / no) with the predicted peak and headroom, the
speed model's tokens/s, and the time and cost of the run at the card's price (the user's, or the
dated default). A card the run does not fit gets the first single change that makes it fit
(`cockpit.plan.fits`), with the speed, time and cost of the run so changed. Two rows are flagged:
the cheapest card the run fits as given (with the safety margin), and the fastest such card
within the budget; cards within TIE_SHARE of the fastest tie, and the cheapest of them is
flagged. Several cards tie where the run is host-bound (the speed model's "overhead" bound:
Python and kernel launches set a micro-batch's time, which no faster GPU shortens; the H200
runs of a 7B QLoRA step take 0.25 s at micro-batch 1 and at 4, bench/results/
2026-11-30-speed-sweep-2-h200.jsonl); the legend says so and names the change that helps.

The run's size is dataset tokens x epochs (tokens given, or samples x mean tokens per sample,
each sample cut at the max length), or `training.max_steps` x the tokens of one optimizer
step. Speeds assume full rows of max-length tokens (packed, or samples at least that long).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date

from cockpit import fmt
from cockpit.models.memory import (
    GIB,
    SAFETY_MARGIN,
    MemoryEstimate,
    Workload,
    estimate_memory,
)
from cockpit.models.memory_report import to_dict as estimate_dict
from cockpit.models.memory_report import workload_inputs
from cockpit.models.speed import CALIBRATED_ON, SpeedEstimate, estimate_run, estimate_speed, speed_inputs
from cockpit.plan.card import price_label
from cockpit.plan.cards_inputs import CardsError as CardsError  # re-exported: the table's inputs
from cockpit.plan.cards_inputs import RunSize, check_budget
from cockpit.plan.cards_inputs import parse_count as parse_count
from cockpit.plan.cards_inputs import parse_dataset as parse_dataset
from cockpit.plan.catalog import Card, Catalog
from cockpit.plan.fits import CardFit, Change, fit_card

# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class RunFigures:
    """Speed, and with a known size, time and cost of one configuration on one card."""

    speed: SpeedEstimate
    tokens: int | None
    time_s: float | None
    cost_usd: float | None

    def to_dict(self) -> dict:
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
    multi: dict | None = None  # with gpus > 1: the communication model's stated inputs and figures

    @property
    def key(self) -> str:
        """The row's id: the card's, with `-x4` for a row of 4 GPUs."""
        return self.card.id if self.gpus == 1 else f"{self.card.id}-x{self.gpus}"

    @property
    def name(self) -> str:
        """`A100 80GB SXM`, or `A100 80GB SXM x4 (FSDP)`."""
        if self.gpus == 1:
            return self.card.name
        return f"{self.card.name} x{self.gpus} ({self.sharding.upper()})"

    @property
    def usd_per_hour(self) -> float:
        """What the job costs an hour: the GPUs x the price per GPU-hour."""
        return self.gpus * self.card.price_per_hour

    @property
    def shown(self) -> RunFigures | None:
        """The figures of the row: as given where it runs, else with the change that makes it fit."""
        return self.as_given if self.fit.verdict != "no" else self.with_change

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

    def to_dict(self, today: date) -> dict:
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
        text += f", {money(figures.cost_usd)}"
    return text


def money(value: float | None) -> str:
    if value is None:
        return "-"
    if 0 < value < 0.005:
        return "<$0.01"
    return f"${value:,.0f}" if value >= 1000 else f"${value:.2f}"


def _figures(w: Workload, card: Card, size: RunSize) -> RunFigures:
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


TIE_SHARE = 0.005  # cards this close to the fastest tie (the model is not closer than that)

# ---------------------------------------------------------------- the table


@dataclass(frozen=True)
class CardTable:
    workload: Workload
    estimate: MemoryEstimate
    size: RunSize
    budget_usd: float | None
    today: date
    rows: tuple[CardRow, ...]
    prices_from: str  # the user's cards.yaml, or "default prices"
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def cheapest(self) -> CardRow | None:
        return next((r for r in self.rows if r.cheapest), None)

    @property
    def fastest(self) -> CardRow | None:
        return next((r for r in self.rows if r.fastest), None)

    @property
    def tied_with_fastest(self) -> list[CardRow]:
        """The other cards as fast as the flagged one (within TIE_SHARE)."""
        fastest = self.fastest
        if fastest is None:
            return []
        in_budget = [
            r for r in self.rows if r.fit.verdict == "fits" and (self.budget_usd is None or r.within_budget)
        ]
        return [r for r in fastest_tied(in_budget) if r is not fastest]

    @property
    def cheapest_by(self) -> str:
        return "run cost" if self.size.known else "price per hour"

    def row(self, key: str) -> CardRow:
        """The row of a card id (one GPU), or of `<id>-x4` (4 GPUs of it)."""
        return next(r for r in self.rows if r.key == key)

    @property
    def gpu_counts(self) -> tuple[int, ...]:
        return tuple(sorted({r.gpus for r in self.rows}))

    def to_dict(self) -> dict:
        w = self.workload
        inputs = {
            **workload_inputs(w),
            "grad_accum": w.grad_accum,
            "run": self.size.to_dict(w),
            "budget_usd": self.budget_usd,
            "today": self.today.isoformat(),
            "prices_from": self.prices_from,
            "safety_margin": SAFETY_MARGIN,
            "speed_calibrated_on": CALIBRATED_ON,
            "speed_assumes": "full rows of max-length tokens (packed, or samples at least that long)",
        }
        return {
            **estimate_dict(self.estimate, inputs),  # inputs, the memory parts, peak and load peak
            "cheapest": None if self.cheapest is None else self.cheapest.key,
            "cheapest_by": self.cheapest_by,
            "fastest_within_budget": None if self.fastest is None else self.fastest.key,
            "gpu_counts": list(self.gpu_counts),
            "rows": [r.to_dict(self.today) for r in self.rows],
            "warnings": list(self.warnings),
        }


def card_table(
    w: Workload,
    catalog: Catalog,
    size: RunSize | None = None,
    budget_usd: float | None = None,
    today: date | None = None,
    gpu_counts: tuple[int, ...] = (1,),
) -> CardTable:
    """One row per catalog card, in catalog order, with the cheapest and fastest rows flagged;
    with `gpu_counts` beyond 1, each card's rows of that many GPUs follow its own.

    Raises EstimateError (the workload) or CardsError (the size or the budget)."""
    from cockpit.plan.multi_rows import check_gpu_counts, multi_row  # builds on this module's rows

    size = size or RunSize()
    today = today or date.today()
    budget_usd = check_budget(budget_usd, size)
    gpu_counts = check_gpu_counts(gpu_counts)
    warnings = list(catalog.warnings)
    if w.gpus != 1:
        if w.gpus not in gpu_counts:
            warnings.append(f"the config asks for {w.gpus} GPUs; this table is for one GPU of each card")
        w = replace(w, gpus=1, sharding="ddp")
    warnings.extend(context_warnings(w))
    estimate = estimate_memory(w)
    rows = []
    for card in catalog.cards:
        if 1 in gpu_counts:
            fit = fit_card(w, card)
            as_given = _figures(w, card, size) if fit.verdict != "no" else None
            with_change = _figures(fit.change.workload, card, size) if fit.change is not None else None
            shown = as_given if fit.verdict != "no" else with_change
            label = price_label(card, today)
            rows.append(CardRow(card, fit, label, as_given, with_change, within(shown, budget_usd)))
        rows.extend(multi_row(w, card, n, size, budget_usd, today) for n in gpu_counts if n > 1)

    fitting = [r for r in rows if r.fit.verdict == "fits"]
    cheapest = min(fitting, key=_cost_key(size), default=None)
    in_budget = [r for r in fitting if budget_usd is None or r.within_budget]
    fastest = min(fastest_tied(in_budget), key=_cost_key(size), default=None)
    if budget_usd is not None and fitting and fastest is None:
        warnings.append(
            f"no card that fits costs {money(budget_usd)} or less; the cheapest that fits costs "
            f"{money(cheapest.as_given.cost_usd)} ({cheapest.name})"
        )
    rows = [replace(r, cheapest=r is cheapest, fastest=r is fastest) for r in rows]
    prices_from = str(catalog.user_file) if catalog.user_file else "default prices (no cards.yaml)"
    return CardTable(w, estimate, size, budget_usd, today, tuple(rows), prices_from, tuple(warnings))


def context_warnings(w: Workload) -> list[str]:
    """A max length past the model's own context: the run goes, but its far positions are untrained."""
    limit = w.shape.max_positions
    if limit is None or w.seq_len <= limit:
        return []
    return [
        f"max length {w.seq_len} is past {w.shape.name}'s context of {limit} tokens "
        "(max_position_embeddings): positions beyond it were never trained; "
        f"set training.max_length to {limit} or less, or pick a longer-context model"
    ]


def fastest_tied(rows: list[CardRow]) -> list[CardRow]:
    """The rows whose tokens/s are within TIE_SHARE of the fastest."""
    best = max((r.as_given.speed.tokens_per_s for r in rows), default=0.0)
    return [r for r in rows if r.as_given.speed.tokens_per_s >= best * (1 - TIE_SHARE)]


def _cost_key(size: RunSize):
    if size.known:
        return lambda r: (r.as_given.cost_usd, r.as_given.time_s)
    return lambda r: (r.usd_per_hour, -r.as_given.speed.tokens_per_s)
