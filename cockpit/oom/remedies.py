"""What to change after an out-of-memory error: every remedy with its predicted peak, whether it
fits the card with the safety margin, its speed cost and its effect on results, ranked.

Pure Python (no torch, no textual). Inputs: the failed run's config, its `error` event (the
parsed allocator numbers and where it struck), its `data` event (token lengths), the device
it ran on and the GPU catalog. The peaks come from the memory model (`cockpit.models.memory`);
where the OOM proves the model low for this run (the process held more, plus what it asked
for, than the model predicts), the shortfall is added to every prediction, so a remedy is
never judged against a figure the run has already exceeded. What the failure says and the card
the run must fit are read in `cockpit.oom.remedy_inputs`.

Speed is relative tokens/s from the speed model (`cockpit.speed.model`) on the card the run is on
(or the reference H200 where that card is unknown). Ranking (`rank_key`): what fits first;
then what keeps the results before what changes them; then the fastest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cockpit.fmt import GIB
from cockpit.gpus.card import Card
from cockpit.gpus.catalog import Catalog
from cockpit.models.memory import (
    SAFETY_MARGIN,
    EstimateError,
    MemoryEstimate,
    Workload,
    estimate_memory,
    workload_from_config,
)
from cockpit.models.shape import ModelShape
from cockpit.oom.remedy_inputs import Observation, Target, device_card, observe, target_card, verdict_of
from cockpit.oom.remedy_options import Choice, Knob, knobs
from cockpit.speed.batch_choice import partial_peak, partial_tokens_per_s
from cockpit.speed.model import CardSpeed, estimate_speed

if TYPE_CHECKING:
    from cockpit.config.schema import TrainConfig

VERDICT_ORDER = {"fits": 0, "tight": 1, "no": 2, "unknown": 3}
MAX_COMBINATIONS_SHOWN = 3
COMBINATION_MIN_GAIN = 1.1  # more changes at once must buy at least 10% more tokens/s
REFERENCE_CARD = CardSpeed("H200 SXM (reference)", 989.0, 4800.0)  # catalog figures of h200-sxm
# auto mode applies only what keeps the results: no change, or 8-bit optimizer states
AUTO_EFFECT_RANK = 1


@dataclass(frozen=True)
class Option:
    """One remedy: a single change or a combination, predicted on the target card."""

    keys: tuple[str, ...]
    title: str
    config: dict[str, Any]
    peak_bytes: int | None
    headroom_bytes: int | None
    verdict: str  # fits | tight | no | unknown
    speed: float | None  # relative tokens/s, 1.0 = as before
    speed_reasons: tuple[str, ...]
    effect: str
    effect_rank: int  # 0 none, 1 near-identical, 2 quality, 3 truncation, 4 adapter capacity
    resume: str
    from_step_zero: bool = False
    applicable: bool = True  # False: another card, not a relaunch here
    card: Card | None = None
    choices: tuple[Choice, ...] = ()

    @property
    def auto(self) -> bool:
        """Whether `--on-oom auto` may apply it: it fits and keeps the run's results and steps."""
        return (
            self.applicable
            and self.verdict == "fits"
            and self.effect_rank <= AUTO_EFFECT_RANK
            and not self.from_step_zero
        )


@dataclass(frozen=True)
class Analysis:
    target: Target
    observation: Observation
    workload: Workload | None
    estimate: MemoryEstimate | None
    gap_bytes: int  # added to every prediction: how far the OOM proves the model low
    options: list[Option]
    notes: list[str] = field(default_factory=list)
    speed_card: CardSpeed | Card | None = None  # what the speeds were computed on
    pinned: dict[str, Any] = field(default_factory=dict)  # settings the failed run ran with (speed: auto)

    def combine(self, options: list[Option]) -> Option:
        """Several remedies at once, predicted together. ValueError when they cannot combine."""
        if self.workload is None:
            raise ValueError("no predictions for this run: nothing to combine")
        assert self.speed_card is not None  # analyse() sets it with the workload
        choices: dict[str, Choice] = {}
        for option in options:
            if not option.applicable:
                raise ValueError(f"{option.title} is another card, not a change to this run")
            for choice in option.choices:
                if choice.key in choices and choices[choice.key] != choice:
                    raise ValueError(f"{option.title} and another pick both set {choice.key}: keep one")
                choices[choice.key] = choice
        return _option(self.workload, tuple(choices.values()), self.gap_bytes, self.target, self.speed_card)

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options and self.options[0].verdict == "fits" else None

    def auto_choice(self) -> Option | None:
        return next((o for o in self.options if o.auto), None)


# ---------------------------------------------------------------- the analysis


def analyse(
    cfg: TrainConfig,
    error: dict[str, Any],
    shape: ModelShape | None,
    data: dict[str, Any] | None = None,
    device: dict[str, Any] | None = None,
    catalog: Catalog | None = None,
    precision: str | None = None,
) -> Analysis:
    """Every remedy for the failed `cfg`, ranked; `shape` None when the model's shape is unknown.

    `precision`: what the trainer chose (its hello), when the config says auto."""
    data, device = data or {}, device or {}
    observation = observe(error)
    target = target_card(cfg, error.get("oom") or {}, device, catalog)
    notes: list[str] = []
    if observation.injected:
        notes.append(
            "this OOM was injected (a test aid, COCKPIT_TEST_AIDS fail_at_step): its figures describe a full "
            "card, not this run; it fires in the run's first trainer only, so a relaunch goes past it"
        )
    if observation.host:
        return _host_analysis(cfg, observation, target, notes)
    if shape is None:
        notes.append("the model's shape is unknown: no predictions (see the message above)")
        return Analysis(target, observation, None, None, 0, [], notes)

    base = _failed_workload(cfg, shape, data, precision, notes)
    try:
        estimate = estimate_memory(base)
    except EstimateError as exc:
        notes.append(f"the memory model cannot size this run: {exc}")
        return Analysis(target, observation, None, None, 0, [], notes)
    gap = _shortfall(observation, estimate, notes)
    device_kind = str(device.get("kind") or "cuda")
    card = device_card(device, catalog) if device_kind == "cuda" else None
    speed_card = card or REFERENCE_CARD
    notes.append(f"speed: the speed model's tokens/s on {speed_card.name}, relative to the failed run")
    all_knobs = knobs(cfg, base, observation, data, device_kind)
    ranked = _ranked(base, all_knobs, gap, target, speed_card)
    ranked += _bigger_card(cfg, base, estimate.peak_bytes + gap, target, card, catalog)
    return Analysis(target, observation, base, estimate, gap, ranked, notes, speed_card)


def _failed_workload(
    cfg: TrainConfig, shape: ModelShape, data: dict[str, Any], precision: str | None, notes: list[str]
) -> Workload:
    """The memory model's inputs for the failed run: the precision the trainer chose, and sequences
    as long as the longest sample where batches are padded to it."""
    base = workload_from_config(cfg, shape)
    if precision in ("bf16", "fp16", "fp32") and cfg.training.precision == "auto":
        base = replace(base, precision=precision)
    longest = data.get("tokens_max")
    packing = bool(getattr(cfg.training, "packing", False))
    if isinstance(longest, int) and longest < base.seq_len and not packing:
        # batches are padded to their longest sample, never to max_length
        base = replace(base, seq_len=longest)
        notes.append(
            f"sequences in the estimate: {longest} tokens (the longest sample; max_length is "
            f"{cfg.training.max_length})"
        )
    return base


def _shortfall(observation: Observation, estimate: MemoryEstimate, notes: list[str]) -> int:
    """What the OOM proves the run needs beyond the memory model's peak (0: nothing), added to every
    prediction."""
    if observation.demand_bytes is None:
        notes.append(observation.demand_basis)
    if observation.demand_bytes is None or observation.demand_bytes <= estimate.peak_bytes:
        return 0
    gap = observation.demand_bytes - estimate.peak_bytes
    notes.append(
        f"the OOM shows this run needs at least {observation.demand_bytes / GIB:.2f} GiB "
        f"({observation.demand_basis}), {gap / GIB:.2f} GiB more than the memory model's "
        f"{estimate.peak_gib:.2f} GiB: every prediction below adds it"
    )
    return gap


def _ranked(
    base: Workload, all_knobs: list[Knob], gap: int, target: Target, card: CardSpeed | Card
) -> list[Option]:
    """The best choice of each knob, and the few combinations worth showing, ranked (rank_key)."""
    options = [_option(base, (c,), gap, target, card) for k in all_knobs for c in k.choices]
    singles = sorted(_best_per_knob(options), key=rank_key)
    best_single = singles[0] if singles and singles[0].verdict == "fits" else None
    combos = [
        o
        for o in _combinations(base, all_knobs, gap, target, card)
        if o.verdict == "fits" and _worth_combining(o, best_single)
    ]
    return sorted(singles + _distinct(sorted(combos, key=rank_key))[:MAX_COMBINATIONS_SHOWN], key=rank_key)


def rank_key(option: Option) -> tuple[int, int, float, int, int]:
    """What fits first; then what keeps the results (or nearly: 8-bit optimizer states, a few
    outliers cut) before what changes them, least first; then the fastest; then the fewest changes
    and the lowest peak. What does not fit comes last, closest to fitting first."""
    order = VERDICT_ORDER[option.verdict]
    if order > VERDICT_ORDER["tight"]:
        return (order, 0, 0.0, len(option.keys), option.peak_bytes or 0)
    return (
        order,
        0 if option.effect_rank <= AUTO_EFFECT_RANK else option.effect_rank,
        -(option.speed or 0.0),
        len(option.keys),
        option.peak_bytes or 0,
    )


def relative_speed(base: Workload, changed: Workload, card: CardSpeed | Card) -> float:
    return estimate_speed(changed, card).tokens_per_s / estimate_speed(base, card).tokens_per_s


def _option(
    base: Workload, choices: tuple[Choice, ...], gap: int, target: Target, card: CardSpeed | Card
) -> Option:
    workload, config, saved = base, {}, 0
    for choice in choices:
        workload = replace(workload, **choice.fields)
        config.update(choice.config)
        saved += choice.saves_bytes
    partial = max((c.checkpoint_layers for c in choices), default=0)
    if partial:  # k of the layers recomputed: the memory and speed models' two extremes, mixed per layer
        off = estimate_memory(replace(workload, gradient_checkpointing=False))
        on = estimate_memory(replace(workload, gradient_checkpointing=True))
        peak = partial_peak(off, on, partial, workload.shape.num_layers) + gap - saved
        mixed = partial_tokens_per_s(replace(workload, gradient_checkpointing=False), partial, card)
        speed = mixed / estimate_speed(base, card).tokens_per_s
    else:
        peak = estimate_memory(workload).peak_bytes + gap - saved
        speed = relative_speed(base, workload, card)
    verdict, headroom = verdict_of(peak, target)
    reasons = tuple(c.speed_reason for c in choices if c.speed_reason)
    worst = max(choices, key=lambda c: c.effect_rank)
    effects = [c.effect for c in choices if c.effect != "none"] or ["none"]
    resume = (
        "from step 0 (the adapter changes shape)"
        if any(c.from_step_zero for c in choices)
        else (
            "from the last checkpoint, with fresh optimizer states"
            if any(c.fresh_optimizer for c in choices)
            else "from the last checkpoint"
        )
    )
    return Option(
        keys=tuple(c.key for c in choices),
        title=" + ".join(c.title for c in choices),
        config=config,
        peak_bytes=peak,
        headroom_bytes=headroom,
        verdict=verdict,
        speed=round(speed, 3),
        speed_reasons=reasons,
        effect="; ".join(effects),
        effect_rank=worst.effect_rank,
        resume=resume,
        from_step_zero=any(c.from_step_zero for c in choices),
        choices=choices,
    )


def _worth_combining(combo: Option, best_single: Option | None) -> bool:
    """A combination is shown when nothing alone fits, when it keeps the results better than the
    best single change, or when it is clearly faster (COMBINATION_MIN_GAIN) at the same effect."""
    if best_single is None:
        return True
    combo_key, single_key = rank_key(combo), rank_key(best_single)
    if combo_key[1] != single_key[1]:
        return combo_key[1] < single_key[1]
    return (combo.speed or 0) >= (best_single.speed or 0) * COMBINATION_MIN_GAIN


def _best_per_knob(options: list[Option]) -> list[Option]:
    """Per knob, the mildest choice that fits (the largest micro-batch, the longest max_length...),
    else the strongest one, so the table shows what each knob can do at best."""
    by_knob: dict[str, list[Option]] = {}
    for option in options:
        by_knob.setdefault(option.keys[0], []).append(option)
    chosen = []
    for group in by_knob.values():  # choices come mildest first
        fitting = [o for o in group if o.verdict == "fits"]
        chosen.append(fitting[0] if fitting else min(group, key=lambda o: o.peak_bytes or 0))
    return chosen


def _combinations(
    base: Workload, all_knobs: list[Knob], gap: int, target: Target, card: CardSpeed | Card
) -> Iterator[Option]:
    """Every combination of two or more knobs (one choice each): both models are cheap."""
    for size in range(2, len(all_knobs) + 1):
        for group in itertools.combinations(all_knobs, size):
            for choices in itertools.product(*(k.choices for k in group)):
                if not any(c.checkpoint_layers for c in choices):  # partial: speed: auto's, alone
                    yield _option(base, choices, gap, target, card)


def _distinct(options: list[Option]) -> list[Option]:
    """Drop a combination that only adds changes to a better-ranked one."""
    kept: list[Option] = []
    for option in options:
        if not any(set(k.keys) <= set(option.keys) for k in kept):
            kept.append(option)
    return kept


def _bigger_card(
    cfg: TrainConfig, base: Workload, peak: int, target: Target, current: Card | None, catalog: Catalog | None
) -> list[Option]:
    """The cheapest catalog card the unchanged run fits with the margin."""
    if catalog is None:
        return []
    fitting = [c for c in catalog.cards if peak <= c.vram_gib * GIB * (1 - SAFETY_MARGIN)]
    if target.bytes is not None:
        fitting = [c for c in fitting if c.vram_gib * GIB > target.bytes]
    if not fitting:
        return []
    card = min(fitting, key=lambda c: (c.price_per_hour, c.vram_gib))
    if current is not None and cfg.emulate_vram_gib is None:
        speed = round(estimate_speed(base, card).tokens_per_s / estimate_speed(base, current).tokens_per_s, 3)
        reason = f"the speed model on {card.name} against {current.name}"
    else:
        speed, reason = None, "the card the run is on is emulated or unknown"
    verdict, headroom = verdict_of(peak, Target(int(card.vram_gib * GIB), card.name))
    price = "default price" if card.price_is_default else "your price"
    return [
        Option(
            keys=("card",),
            title=f"a bigger card: {card.name} ({card.vram_gib:g} GiB)",
            config={},
            peak_bytes=peak,
            headroom_bytes=headroom,
            verdict=verdict,
            speed=speed,
            speed_reasons=(reason,),
            effect=f"none; another instance at ${card.price_per_hour:.2f}/h ({price}, {card.price_date})",
            effect_rank=0,
            resume="copy the run directory to the new instance, then cockpit restart",
            applicable=False,
            card=card,
        )
    ]


def _host_analysis(cfg: TrainConfig, observation: Observation, target: Target, notes: list[str]) -> Analysis:
    """Host RAM ran out: the GPU memory model does not apply; fewer loader processes is the lever here."""
    notes.append("host RAM ran out, not GPU memory: the memory model predicts GPU memory only")
    options = []
    workers = cfg.training.dataloader_num_workers
    if workers > 0:
        options.append(
            Option(
                keys=("dataloader_workers",),
                title=f"dataloader workers {workers} -> 0",
                config={"training.dataloader_num_workers": 0},
                peak_bytes=None,
                headroom_bytes=None,
                verdict="unknown",
                speed=None,
                speed_reasons=("batches are prepared in the training process: slower when input-bound",),
                effect="none",
                effect_rank=0,
                resume="from the last checkpoint",
            )
        )
    return Analysis(target, observation, None, None, 0, options, notes)
