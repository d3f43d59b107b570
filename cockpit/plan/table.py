"""The card table: every catalog card for one training run, with fit, speed, time and cost.

Pure Python (no textual, no torch), shared by `cockpit cards` and the picker screen; the rows
are built in `cockpit.plan.cards` (one GPU) and `cockpit.plan.multi_rows` (several). Two rows
are flagged: the cheapest card the run fits as given (with the safety margin), and the fastest
such card within the budget. Cards within TIE_SHARE of the fastest tie, and the cheapest of them
is flagged. Several cards tie where the run is host-bound (the speed model's "overhead" bound:
Python and kernel launches set a micro-batch's time, which no faster GPU shortens; the H200 runs
of a 7B QLoRA step take 0.25 s at micro-batch 1 and at 4, bench/results/
2026-11-30-speed-sweep-2-h200.jsonl); the legend says so and names the change that helps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from cockpit import fmt
from cockpit.gpus.card import price_label
from cockpit.gpus.catalog import Catalog
from cockpit.models.memory import SAFETY_MARGIN, MemoryEstimate, Workload, estimate_memory
from cockpit.models.memory_report import to_dict as estimate_dict
from cockpit.models.memory_report import workload_inputs
from cockpit.plan.cards import CardRow, figures_for, within
from cockpit.plan.cards_inputs import RunSize, check_budget
from cockpit.plan.fits import fit_card
from cockpit.plan.multi_rows import check_gpu_counts, multi_row
from cockpit.speed.model import CALIBRATED_ON

TIE_SHARE = 0.005  # cards this close to the fastest tie (the model is not closer than that)


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

    def to_dict(self) -> dict[str, Any]:
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
    size = size or RunSize()
    today = today or date.today()
    budget_usd = check_budget(budget_usd, size)
    gpu_counts = check_gpu_counts(gpu_counts)
    warnings = list(catalog.warnings)
    if w.gpus != 1:
        if w.gpus not in gpu_counts:
            warnings.append(f"the config asks for {w.gpus} GPUs; this table is for one GPU of each card")
        w = replace(w, gpus=1, sharding="ddp")
    estimate = estimate_memory(w)
    rows = []
    for card in catalog.cards:
        if 1 in gpu_counts:
            fit = fit_card(w, card)
            as_given = figures_for(w, card, size) if fit.verdict != "no" else None
            with_change = figures_for(fit.change.workload, card, size) if fit.change is not None else None
            shown = as_given if fit.verdict != "no" else with_change
            label = price_label(card, today)
            rows.append(CardRow(card, fit, label, as_given, with_change, within(shown, budget_usd)))
        rows.extend(multi_row(w, card, n, size, budget_usd, today) for n in gpu_counts if n > 1)

    fitting = [r for r in rows if r.fit.verdict == "fits"]
    cheapest = min(fitting, key=_cost_key(size), default=None)
    in_budget = [r for r in fitting if budget_usd is None or r.within_budget]
    fastest = min(fastest_tied(in_budget), key=_cost_key(size), default=None)
    if budget_usd is not None and fitting and fastest is None:
        assert cheapest is not None  # some row fits
        warnings.append(
            f"no card that fits costs {fmt.money(budget_usd)} or less; the cheapest that fits costs "
            f"{fmt.money(cheapest.runs_as_given().cost_usd)} ({cheapest.name})"
        )
    rows = [replace(r, cheapest=r is cheapest, fastest=r is fastest) for r in rows]
    prices_from = str(catalog.user_file) if catalog.user_file else "default prices (no cards.yaml)"
    return CardTable(w, estimate, size, budget_usd, today, tuple(rows), prices_from, tuple(warnings))


def fastest_tied(rows: list[CardRow]) -> list[CardRow]:
    """The rows whose tokens/s are within TIE_SHARE of the fastest."""
    best = max((r.runs_as_given().speed.tokens_per_s for r in rows), default=0.0)
    return [r for r in rows if r.runs_as_given().speed.tokens_per_s >= best * (1 - TIE_SHARE)]


def _cost_key(size: RunSize) -> Callable[[CardRow], tuple[float | None, float | None]]:
    """What ranks the rows that fit by cost: the run's cost (then time), else the price per hour."""
    if size.known:
        return lambda r: (r.runs_as_given().cost_usd, r.runs_as_given().time_s)
    return lambda r: (r.usd_per_hour, -r.runs_as_given().speed.tokens_per_s)
