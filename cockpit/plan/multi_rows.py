"""The card table's rows of several GPUs of one card (2x, 4x, 8x): per-GPU fit, and the job's
speed, time and cost.

For each count, the strategy is what `distributed.strategy: auto` runs on that card
(`cockpit.models.memory_report.multi_gpu_options`: DDP for LoRA/QLoRA, and for a full fine-tune whose replica
fits one card; FSDP otherwise). The fit (and the single change that makes a run fit) is per GPU,
by the memory model's per-GPU parts; tokens/s are all GPUs together, from the communication model
(`cockpit.speed.multi_gpu`, not calibrated on a measured multi-GPU run: marked so); the cost is
the GPUs x the price per GPU-hour x the time.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date
from typing import Any

from cockpit.gpus.card import Card, price_label
from cockpit.models.memory import Workload
from cockpit.models.memory_report import multi_gpu_options
from cockpit.plan.cards import CardRow, RunFigures, figures_of, within
from cockpit.plan.cards_inputs import CardsError, RunSize
from cockpit.plan.fits import card_vram_bytes, fit_card
from cockpit.speed.multi_gpu import estimate_multi_speed, multi_speed_inputs

MULTI_COUNTS = (1, 2, 4, 8)  # what the picker's toggle and `cockpit cards --gpus multi` show
MAX_GPUS = 64  # one job's GPUs in this table: several machines are more than a card choice


def parse_gpu_counts(text: str | None) -> tuple[int, ...]:
    """`1,2,4,8` (or `multi`: those four) -> the GPU counts of the rows, sorted. Raises CardsError."""
    text = str(text or "1").strip().lower()
    if text == "multi":
        return MULTI_COUNTS
    parts = [p for p in re.split(r"[\s,]+", text) if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise CardsError("gpus", f"--gpus {text!r}: expected GPU counts like 1,2,4,8 (or multi)")
    return check_gpu_counts(tuple(int(p) for p in parts))


def check_gpu_counts(counts: tuple[int, ...]) -> tuple[int, ...]:
    counts = tuple(sorted(set(counts)))
    if not counts or not all(isinstance(n, int) and 1 <= n <= MAX_GPUS for n in counts):
        raise CardsError("gpus", f"GPU counts {list(counts)}: expected whole numbers from 1 to {MAX_GPUS}")
    return counts


def multi_figures(w: Workload, card: Card, size: RunSize) -> tuple[RunFigures, dict[str, Any]]:
    """The job's figures (all GPUs) and the communication model's inputs, for `--json`."""
    multi = estimate_multi_speed(w, card)
    return figures_of(multi.speed, size.tokens(w), w.gpus * card.price_per_hour), multi_speed_inputs(multi)


def multi_row(
    w: Workload, card: Card, gpus: int, size: RunSize, budget_usd: float | None, today: date
) -> CardRow:
    """`gpus` of `card` running `w` (a one-GPU workload) as `distributed.strategy: auto` would."""
    (option,) = multi_gpu_options(w, card_vram_bytes(card), (gpus,))
    wn = replace(w, gpus=gpus, sharding=option.sharding)
    fit = fit_card(wn, card)
    as_given = with_change = None
    inputs = None
    if fit.verdict != "no":
        as_given, inputs = multi_figures(wn, card, size)
    if fit.change is not None:
        with_change, changed_inputs = multi_figures(fit.change.workload, card, size)
        inputs = inputs if as_given is not None else changed_inputs
    shown = as_given if fit.verdict != "no" else with_change
    multi = None if inputs is None else {**inputs, "strategy_reason": option.reason}
    return CardRow(
        card,
        fit,
        price_label(card, today),
        as_given,
        with_change,
        within(shown, budget_usd),
        gpus=gpus,
        sharding=option.sharding,
        multi=multi,
    )


def row_workload(table_workload: Workload, row: CardRow) -> Workload:
    """The workload a row's figures are for: the table's (one GPU), on the row's GPUs, with the
    row's change when it needs one to fit."""
    if row.shown_workload_is_changed:
        assert row.fit.change is not None  # the figures with the change are the change's
        return row.fit.change.workload
    if row.gpus == 1:
        return table_workload
    assert row.sharding is not None  # set on a row of several GPUs
    return replace(table_workload, gpus=row.gpus, sharding=row.sharding)
