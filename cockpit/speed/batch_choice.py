"""The micro-batch, gradient accumulation and checkpointing of `speed: auto` (cockpit/speed/auto.py).

Every split of the optimizer step into micro-batch x accumulation is tried, each with the
fewest checkpointed decoder layers, any count from none to all, whose peak, by the memory model,
stays inside the card's memory less SAFETY_MARGIN. A count that transformers' every_n_layers
gives (ceil(layers / n)) runs through it; any other is every layer's checkpointing turned off
again on all but that many, spread evenly (train_backend/speed/layer_mask.py). A partly
checkpointed model holds the full activations of its other layers, the inputs of its
checkpointed ones and one recomputed block: the memory model's two extremes, mixed per layer. A
split that does not fit with every layer recomputed may still fit with their inputs in pinned
host memory (HOST_SHARE of the host's available memory at most), at the cost of copying them
back before each recompute. The speed model rates each fitting split the same way (the
recompute of its share of the layers) and the fastest wins. Pure Python, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from cockpit import fmt
from cockpit.config.schema import TrainConfig, TrainingSection
from cockpit.gpus.card import Card
from cockpit.models.memory import (
    SAFETY_MARGIN,
    EstimateError,
    MemoryEstimate,
    Workload,
    estimate_memory,
    workload_from_config,
)
from cockpit.models.shape import ModelShape
from cockpit.speed import model as speed_model


@dataclass(frozen=True)
class Facts:
    """What the trainer found out about this machine and model."""

    device_kind: str  # cuda | cpu
    precision: str  # as chosen: bf16 | fp16 | fp32
    device_name: str = ""
    memory_bytes: int | None = None  # device memory the run may use (the card's, or emulate_vram_gib)
    memory_note: str = ""  # where memory_bytes comes from
    capability: str | None = None
    cpu_count: int = 1
    host_available_bytes: int | None = None
    flash_attention: str | None = None  # the best flash kernel transformers can use here
    liger: str | None = None  # liger-kernel's version, when it imports
    liger_model: bool = False  # liger has kernels for this model type
    liger_note: str = ""  # why liger is not usable, when it is not
    card: speed_model.CardSpeed | None = None  # for the speed model
    card_note: str = ""
    host_probe_ms: float | None = None  # the host's probe (train_backend.speed.host_probe); None: none
    host_probe_spread: float | None = None  # its rounds' upper over lower quartile; None: no probe


@dataclass(frozen=True)
class Choice:
    name: str
    value: str
    reason: str
    source: str  # auto: chosen here | yours: your config | off: speed.mode off | fixed: how the trainer works


@dataclass(frozen=True)
class Fit:
    micro_batch: int
    accum: int
    layers: int  # decoder layers checkpointed
    every: int  # transformers' every_n_layers (0: none; 1 with fewer layers: the rest turned off again)
    budget: int | None = None
    peak: int | None = None
    tokens_per_s: float | None = None
    offload: bool = False  # the checkpointed layers' inputs wait in pinned host memory
    # tokens/s on BatchProblem.rank_card, the figure splits are ranked by (a probe's noise does not
    # move it); a choice between fits (speed.mlp_block and speed.fused_kernels: auto) compares these
    rank_tokens_per_s: float | None = None


HOST_SHARE = 0.5  # the most of the host's available memory the pinned layer inputs may take


@dataclass(frozen=True)
class BatchProblem:
    """What the split of the optimizer step is chosen from: built once by the plan, given to both
    `fit_batch` and `batch_advice`.

    `cfg` is the user's config (its speed keys, the batch as written); `run` the config being
    planned, read when each of them runs (the plan sets the chosen split on it in between).
    """

    cfg: TrainConfig
    run: TrainConfig
    facts: Facts
    shape: ModelShape | None
    shape_note: str
    keep: frozenset[str]  # the keys the user's config sets (speed.keep)
    rows_per_step: int  # rows per optimizer step (samples, where they are not packed)
    packed: bool

    @property
    def unit(self) -> str:
        return "rows" if self.packed else "samples"

    @property
    def layers(self) -> int:
        return self.shape.num_layers if self.shape else 1

    @property
    def rank_card(self) -> speed_model.CardSpeed | None:
        """The card the splits are ranked on: the host at speed.host_rank_scale of the probe's scale,
        so that a probe's noise does not change the plan (the predicted tokens/s takes facts.card)."""
        card = self.facts.card
        if card is None:
            return None
        return replace(card, host_scale=speed_model.host_rank_scale(card.host_scale))

    @property
    def pinned_batch(self) -> bool:
        return bool({"training.micro_batch_size", "training.gradient_accumulation_steps"} & self.keep)

    @property
    def pinned_checkpointing(self) -> bool:
        return "training.gradient_checkpointing" in self.keep

    @property
    def pinned_offload(self) -> bool:
        return "training.checkpoint_offload" in self.keep

    @property
    def offload_forced(self) -> bool:
        """The config asks for it: every layer recomputed, its input in host memory."""
        t = self.cfg.training
        return self.pinned_offload and t.checkpoint_offload and t.gradient_checkpointing

    @property
    def may_offload(self) -> bool:
        """Inputs in host memory: as written, or speed: auto's last resort where the host has room."""
        if self.offload_forced:
            return True
        pinned = self.pinned_offload or self.pinned_checkpointing
        return not pinned and bool(self.facts.host_available_bytes)


class Candidate(NamedTuple):
    """A split that fits, ordered so that the best is the largest: the fastest (on the rank card), then
    the one with fewer recomputed layers, then the one with fewer accumulation steps."""

    rate: float  # tokens/s by the speed model on BatchProblem.rank_card (0: no card to rate with)
    fewer_layers: int  # -layers
    fewer_steps: int  # -accum
    micro_batch: int
    accum: int
    layers: int  # decoder layers checkpointed
    peak: int
    host_bytes: int  # the checkpointed layers' inputs in pinned host memory (0: on the GPU)


def fit_batch(problem: BatchProblem) -> tuple[Fit, list[Choice]]:
    """The split of the optimizer step (micro-batch x accumulation) and its checkpointed layers that
    the speed model rates fastest among those the memory model fits on the card, with the two
    choices; the split as written where there is no device memory to fit or no way to size it."""
    written = _written_fit(problem)
    if problem.facts.device_kind != "cuda":
        return _fit_on_cpu(problem, written)
    if problem.shape is None or not problem.facts.memory_bytes:
        unsized = problem.shape_note or "unknown device memory"
        why = f"the memory model cannot size this run ({unsized}): as configured"
        return written, _as_written(problem, written, why)
    budget = int(problem.facts.memory_bytes * (1 - SAFETY_MARGIN))
    base = _base_workload(problem, problem.shape)
    try:
        scored = sorted(_candidates(problem, base, budget), reverse=True)
    except EstimateError as exc:
        why = f"the memory model refuses this run ({exc}): as configured"
        return written, _as_written(problem, written, why)
    if not scored:
        why = (
            f"nothing fits {_budget_text(problem, budget)} by the memory model: as configured; "
            "expect an out-of-memory error"
        )
        return written, _as_written(problem, written, why)
    best = scored[0]
    every = _every_nth(best.layers, problem.layers)
    here = [_rate_here(problem, base, c) for c in scored[:2]]
    rate = round(here[0], 1) if here[0] else None
    offload = bool(best.host_bytes)
    ranked = best.rate or None
    fit = Fit(best.micro_batch, best.accum, best.layers, every, budget, best.peak, rate, offload, ranked)
    batch = _batch_choice(problem, scored, here, budget)
    return fit, [batch, _checkpointing_choice(problem, best, every)]


def _rate_here(problem: BatchProblem, base: Workload, c: Candidate) -> float:
    """A candidate's tokens/s on this box's host (facts.card), not the rank card's."""
    offload = bool(c.host_bytes)
    return _tokens_per_s(base, c.micro_batch, c.accum, c.layers, problem.facts.card, offload)


def _written_fit(problem: BatchProblem) -> Fit:
    t = problem.cfg.training
    return Fit(
        t.micro_batch_size,
        t.gradient_accumulation_steps,
        problem.layers if t.gradient_checkpointing else 0,
        1 if t.gradient_checkpointing else 0,
        offload=offload_as_written(t, problem.facts),
    )


def _fit_on_cpu(problem: BatchProblem, written: Fit) -> tuple[Fit, list[Choice]]:
    """The batch as configured; checkpointing only where host memory is short."""
    pinned = problem.pinned_checkpointing
    fit, ckpt = written, _yours_or(pinned, "gradient checkpointing", written, "")
    if not pinned and problem.shape is not None:
        fit, ckpt = _cpu_checkpointing(problem.run, problem.facts, problem.shape, written)
    batch = _yours_or(
        problem.pinned_batch,
        "micro-batch",
        written,
        "on the CPU there is no device memory to "
        "fit and a larger micro-batch is no faster per token: as configured",
    )
    return fit, [batch, ckpt]


def _candidates(problem: BatchProblem, base: Workload, budget: int) -> list[Candidate]:
    """Every split of the step that fits `budget`, each with the fewest checkpointed layers it fits
    with, or with every layer's input in host memory where only that fits. EstimateError where the
    memory model refuses a split."""
    options = _layer_options(problem)
    out = []
    for mb, accum in _splits(problem):
        split = replace(base, micro_batch=mb, grad_accum=accum)
        off = estimate_memory(replace(split, gradient_checkpointing=False))
        on = estimate_memory(replace(split, gradient_checkpointing=True))
        found = _fewest_layers(problem, base, off, on, mb, accum, options, budget)
        if found is None:
            found = _inputs_on_host(problem, base, on, mb, accum, budget)
        if found is not None:
            out.append(found)
    return out


def _base_workload(problem: BatchProblem, shape: ModelShape) -> Workload:
    """The memory and speed models' inputs: the run as planned (its model's `shape`, which fit_batch
    has found known), with the kernels the plan chooses."""
    cfg, facts = problem.cfg, problem.facts
    return replace(
        workload_from_config(problem.run, shape),
        precision=facts.precision,
        liger=uses_liger(cfg, facts),
        checkpoint_offload=False,
        fused_lora=fused_lora_note(cfg) is None,
        fused_mlp=mlp_block_note(cfg, shape) is None,
    )


def _splits(problem: BatchProblem) -> list[tuple[int, int]]:
    """(micro-batch, accumulation) pairs: as written where the config sets them; else every split whose
    product is the step's rows exactly (speed.keep_effective_batch, the default), or, where the config
    lets the step grow, every micro-batch size that splits it with the fewest accumulation steps (a
    product up to accumulation - 1 rows over the step)."""
    t = problem.cfg.training
    if problem.pinned_batch:
        return [(t.micro_batch_size, t.gradient_accumulation_steps)]
    rows = problem.rows_per_step
    if problem.cfg.speed.keep_effective_batch:  # the step exactly: micro-batch x accumulation = rows
        return [(rows // accum, accum) for accum in range(1, rows + 1) if rows % accum == 0]
    splits: list[tuple[int, int]] = []
    for accum in range(1, problem.rows_per_step + 1):
        mb = math.ceil(problem.rows_per_step / accum)
        if not splits or splits[-1][0] != mb:
            splits.append((mb, accum))
    return splits


def _layer_options(problem: BatchProblem) -> list[int]:
    """The counts of checkpointed layers to try, fewest first (every_n_layers: ceil(layers / n))."""
    if problem.offload_forced:  # as written: every layer recomputed, its input in host memory
        return []
    n = problem.layers
    if problem.pinned_checkpointing:
        return [n if problem.cfg.training.gradient_checkpointing else 0]
    return list(range(n + 1))


def _fewest_layers(
    problem: BatchProblem,
    base: Workload,
    off: MemoryEstimate,
    on: MemoryEstimate,
    mb: int,
    accum: int,
    options: list[int],
    budget: int,
) -> Candidate | None:
    for k in options:
        peak = _partial_peak(off, on, k, problem.layers)
        if peak <= budget:
            rate = _tokens_per_s(base, mb, accum, k, problem.rank_card)
            return Candidate(rate, -k, -accum, mb, accum, k, peak, 0)
    return None


def _inputs_on_host(
    problem: BatchProblem, base: Workload, on: MemoryEstimate, mb: int, accum: int, budget: int
) -> Candidate | None:
    """Every layer recomputed, its input in pinned host memory, where the host has room for them."""
    host = _part_bytes(on, "checkpoints")
    room = problem.offload_forced or host <= HOST_SHARE * (problem.facts.host_available_bytes or 0)
    if not (problem.may_offload and host and room):
        return None
    n = problem.layers
    peak = split_peak(replace(base, micro_batch=mb, grad_accum=accum), n, offload=True)
    if peak > budget:
        return None
    rate = _tokens_per_s(base, mb, accum, n, problem.rank_card, True)
    return Candidate(rate, -n, -accum, mb, accum, n, peak, host)


def _every_nth(k: int, layers: int) -> int:
    """transformers' every_n_layers that checkpoints `k` of `layers` (0: none); 1 where no n gives
    exactly k: every layer, all but k turned off again at the start of training."""
    if k == 0:
        return 0
    return min((n for n in range(1, layers + 1) if math.ceil(layers / n) == k), default=1)


def _budget_text(problem: BatchProblem, budget: int) -> str:
    return f"{_gib(budget)} GiB ({problem.facts.memory_note} less the {SAFETY_MARGIN:.0%} margin)"


def _batch_choice(problem: BatchProblem, scored: list[Candidate], here: list[float], budget: int) -> Choice:
    best, unit = scored[0], problem.unit
    if problem.pinned_batch:
        why = "training.micro_batch_size is set in your config"
    else:
        t = problem.cfg.training
        packed = " samples, packed" if problem.packed else ""
        why = (
            f"{problem.rows_per_step} {unit} per optimizer step (from your "
            f"{t.micro_batch_size} x {t.gradient_accumulation_steps}{packed}){_product_note(problem, best)}; "
            f"the fastest split that fits: peak ~{_gib(best.peak)} GiB of {_budget_text(problem, budget)}"
            f"{_rate_note(problem, scored, here)}"
        )
    value = f"{best.micro_batch} x {best.accum} ({best.micro_batch * best.accum} {unit} per step)"
    return Choice("micro-batch", value, why, "yours" if problem.pinned_batch else "auto")


def _product_note(problem: BatchProblem, best: Candidate) -> str:
    """Whether the split keeps the step's size: exactly, by speed.keep_effective_batch, or not."""
    if problem.cfg.speed.keep_effective_batch:
        return ", kept exactly (speed.keep_effective_batch)"
    product = best.micro_batch * best.accum
    if product == problem.rows_per_step:
        return ""
    return (
        f"; {product} {problem.unit} a step, not {problem.rows_per_step}, since "
        "speed.keep_effective_batch is false"
    )


def _rate_note(problem: BatchProblem, scored: list[Candidate], here: list[float]) -> str:
    """The winner's tokens/s by the speed model on this host, the runner-up's, and the host the splits
    were ranked at."""
    best = scored[0]
    if not best.rate:
        return ""
    note = f", ~{here[0] / 1000:.1f}k tokens/s by the speed model{problem.facts.card_note}"
    if len(scored) > 1:
        second = scored[1]
        where = ", inputs in host memory" if second.host_bytes else ""
        note += (
            f"; next best {second.micro_batch} x {second.accum} with {second.layers} layers "
            f"checkpointed{where}, ~{here[1] / 1000:.1f}k"
        )
    return note + _ranked_at_note(problem)


def _ranked_at_note(problem: BatchProblem) -> str:
    """Which host the splits were ranked at, where a probe read one."""
    card, rank = problem.facts.card, problem.rank_card
    if card is None or rank is None or problem.facts.host_probe_ms is None:
        return ""
    ratio = speed_model.HOST_NOISE_RATIO
    if rank.host_scale == card.host_scale and card.host_scale != 1.0:
        return f"; ranked at this host (x{card.host_scale:.2f} the reference: past x{ratio:g})"
    return (
        f"; ranked at the reference host: this probe's x{card.host_scale:.2f} is inside the "
        f"x{ratio:g} one box's probe moves by between runs"
    )


def _checkpointing_choice(problem: BatchProblem, best: Candidate, every: int) -> Choice:
    n, k = problem.layers, best.layers
    if k == 0:
        value = "off"
    elif k == n:
        value = f"all {n} layers"
    else:
        value = f"{k} of {n} layers" + (f" (every {every}{_nth(every)})" if every > 1 else " (spread evenly)")
    if problem.pinned_checkpointing:
        why = "training.gradient_checkpointing is set in your config"
    elif k == 0:
        why = "not needed: the activations fit"
    else:
        why = f"the fewest recomputed layers with which {best.micro_batch} x {best.accum} fits"
    if best.host_bytes:
        value += ", inputs in host memory"
        why = (
            "training.checkpoint_offload is set in your config"
            if problem.offload_forced
            else _host_note(problem, best)
        )
    source = "yours" if problem.pinned_checkpointing or problem.offload_forced else "auto"
    return Choice("gradient checkpointing", value, why, source)


def _host_note(problem: BatchProblem, best: Candidate) -> str:
    host, link = best.host_bytes, speed_model.HOST_LINK_BYTES_PER_S
    return (
        f"{best.micro_batch} x {best.accum} fits only with the layer inputs ({_gib(host)} GiB) in pinned "
        f"host memory (of {_gib(problem.facts.host_available_bytes)} GiB available, {HOST_SHARE:.0%} at "
        f"most): copied out under the next layers' compute, back before each recompute, "
        f"~{host / link * best.accum:.2f} s a step at "
        f"{link / 1e9:.0f} GB/s (PCIe 4.0 x16, stated)"
    )


BATCH_KEYS = frozenset(
    {
        "training.micro_batch_size",
        "training.gradient_accumulation_steps",
        "training.gradient_checkpointing",
        "training.checkpoint_offload",
    }
)
MAX_BUSY_MICRO_BATCH = 1024


def busy_tokens(base: Workload, card: speed_model.CardSpeed | None) -> int | None:
    """The fewest tokens per micro-batch (whole rows of `base.seq_len`; a pair's two sequences both, as
    the trainer's step meter counts its input_ids) at which, by the speed model, the card's work outlasts
    the host's launches: below it the GPU is underfed, whatever feeds it."""
    if card is None:
        return None
    for mb in range(1, MAX_BUSY_MICRO_BATCH + 1):
        w = replace(base, micro_batch=mb, grad_accum=1)
        if speed_model.estimate_speed(w, card).bound != "overhead":
            return w.forward_tokens_per_micro_batch
    return None


def batch_advice(problem: BatchProblem) -> dict[str, Any]:
    """The speed model's view of the run's batch, for the doctor: the tokens per micro-batch that keep
    the card busy, and the split speed: auto picks with the batch keys free, against the run's own."""
    facts, shape = problem.facts, problem.shape
    if facts.device_kind != "cuda" or shape is None or not facts.memory_bytes or facts.card is None:
        return {}
    try:
        base = replace(workload_from_config(problem.run, shape), precision=facts.precision)
        busy = busy_tokens(base, facts.card)
    except EstimateError:
        return {}
    as_run, _ = fit_batch(replace(problem, cfg=problem.run, keep=problem.keep | BATCH_KEYS))
    free, _ = fit_batch(replace(problem, keep=problem.keep - BATCH_KEYS))
    out: dict[str, Any] = {"busy_tokens_per_micro_batch": busy}
    if free.tokens_per_s and as_run.tokens_per_s:
        out["auto_split"] = {
            "micro_batch_size": free.micro_batch,
            "gradient_accumulation_steps": free.accum,
            "checkpoint_layers": free.layers,
            "checkpoint_offload": free.offload,
            "tokens_per_s": free.tokens_per_s,
            "as_run_tokens_per_s": as_run.tokens_per_s,
        }
    return out


def _yours_or(pinned: bool, name: str, fit: Fit, why: str) -> Choice:
    value = f"{fit.micro_batch} x {fit.accum}" if name == "micro-batch" else ("on" if fit.layers else "off")
    key = "training.micro_batch_size" if name == "micro-batch" else "training.gradient_checkpointing"
    return Choice(
        name, value, f"{key} is set in your config" if pinned else why, "yours" if pinned else "auto"
    )


def _as_written(problem: BatchProblem, written: Fit, why: str) -> list[Choice]:
    return [
        _yours_or(problem.pinned_batch, "micro-batch", written, why),
        _yours_or(problem.pinned_checkpointing, "gradient checkpointing", written, why),
    ]


def _cpu_checkpointing(run: TrainConfig, facts: Facts, shape: ModelShape, written: Fit) -> tuple[Fit, Choice]:
    """On the CPU, recomputing activations only costs time unless host memory is short."""
    try:
        w = replace(
            workload_from_config(run, shape),
            precision=facts.precision,
            gradient_checkpointing=False,
            micro_batch=written.micro_batch,
        )
        peak = estimate_memory(w).peak_bytes
    except EstimateError as exc:
        return written, _yours_or(False, "gradient checkpointing", written, f"as configured ({exc})")
    free = facts.host_available_bytes
    if free is None or peak <= free * 0.5:
        where = f" of the {_gib(free)} GiB of free host memory" if free else ""
        why = f"not needed: the run needs ~{_gib(peak)} GiB{where} without it"
        return replace(written, layers=0, every=0), Choice("gradient checkpointing", "off", why, "auto")
    why = f"without it the run needs ~{_gib(peak)} GiB, over half of the {_gib(free)} GiB free"
    fit = replace(written, layers=shape.num_layers, every=1)
    return fit, Choice("gradient checkpointing", f"all {shape.num_layers} layers", why, "auto")


def _partial_peak(off: MemoryEstimate, on: MemoryEstimate, k: int, layers: int) -> int:
    """Peak with `k` of `layers` blocks checkpointed, from the memory model's two extremes."""
    if k == 0:
        return off.peak_bytes
    if k == layers:  # every block recomputed: the model's own estimate (the loss's backward ends first)
        return on.peak_bytes
    per_layer = _part_bytes(off, "activations") / layers
    checkpoints = on.part("checkpoints")
    saved = checkpoints.bytes / layers if checkpoints else 0
    static = off.peak_bytes - _part_bytes(off, "activations")
    return int(static + (layers - k) * per_layer + k * saved + _part_bytes(on, "activations"))


def _part_bytes(estimate: MemoryEstimate, key: str) -> int:
    """Bytes of a part the memory model always gives: activations; checkpoints, with checkpointing on."""
    part = estimate.part(key)
    assert part is not None, f"the memory model gave no {key!r} part"
    return part.bytes


def offload_as_written(t: TrainingSection, facts: Facts) -> bool:
    """training.checkpoint_offload as the trainer carries it out: with checkpointing, on a GPU."""
    return bool(t.gradient_checkpointing and t.checkpoint_offload and facts.device_kind == "cuda")


def uses_liger(cfg: TrainConfig, facts: Facts) -> bool:
    """Whether speed: auto applies Liger's kernels (its activations are then smaller)."""
    return (
        facts.device_kind == "cuda"
        and cfg.speed.mode == "auto"
        and cfg.speed.fused_kernels != "off"
        and bool(facts.liger)
        and facts.liger_model
    )


FSDP_LORA_NOTE = "FSDP shards the base weights, which the fused backward reads again"


# model types whose MLP is down(silu(gate(x)) * up(x)): the fused MLP block's
SILU_MLP_MODELS = ("llama", "mistral", "qwen2", "qwen3")
MLP_PARTS = ("gate_proj", "up_proj", "down_proj")


def mlp_block_note(cfg: TrainConfig, shape: ModelShape | None = None) -> str | None:
    """Why the MLPs keep their own forward; None: the fused MLP block (speed.mlp_block: fused)."""
    if cfg.speed.mlp_block != "fused":
        return f"speed.mlp_block: {cfg.speed.mlp_block}"
    note = fused_lora_note(cfg)
    if note is not None:
        return f"it needs the fused LoRA layers: {note}"
    if cfg.lora.dropout > 0:
        return f"lora.dropout {cfg.lora.dropout:g}: the fused block runs without LoRA dropout"
    targets = cfg.lora.target_modules
    if targets != "all-linear" and not set(MLP_PARTS) <= set(targets):
        return "lora.target_modules leaves out part of the MLP (gate_proj, up_proj, down_proj)"
    if shape is not None and shape.model_type not in SILU_MLP_MODELS:
        return f"model type {shape.model_type}: not known to have a SiLU MLP"
    return None


def fused_lora_note(cfg: TrainConfig) -> str | None:
    """Why speed.backend runs peft's own LoRA layers; None: the fused ones."""
    if cfg.speed.mode != "auto":
        return "speed: off runs peft's layers as written"
    if cfg.speed.backend == "hf":
        return "speed.backend: hf"
    if cfg.method not in ("lora", "qlora"):
        return f"method {cfg.method} has no adapters"
    if cfg.method == "qlora" and cfg.quantization.bits != 4:
        return "8-bit base weights (LLM.int8) keep peft's layer: the fused one dequantises 4-bit weights"
    if cfg.distributed.strategy == "fsdp":
        return FSDP_LORA_NOTE
    return None


def _tokens_per_s(
    base: Workload,
    mb: int,
    accum: int,
    k: int,
    card: speed_model.CardSpeed | None,
    offload: bool = False,
) -> float:
    """The speed model's tokens/s; a partly checkpointed model pays the recompute of its share,
    and inputs held in host memory their copy back (speed.HOST_LINK_BYTES_PER_S)."""
    if card is None:
        return 0.0
    w = replace(base, micro_batch=mb, grad_accum=accum)
    split = split_speed(w, k, card, offload)
    # a pair's chosen and rejected both, as estimate_speed counts them
    return w.forward_tokens_per_micro_batch * accum / (split.micro_batch_s * accum + split.optimizer_step_s)


@dataclass(frozen=True)
class SplitSpeed:
    """The speed model's figures for a split with some of its layers recomputed."""

    micro_batch_s: float
    optimizer_step_s: float
    parts_s: dict[str, float]  # a micro-batch's time by kind (speed_model.SpeedEstimate.parts_s)


def split_speed(w: Workload, k: int, card: speed_model.CardSpeed, offload: bool = False) -> SplitSpeed:
    """`w`'s micro-batch with `k` of its layers recomputed (`offload`: their inputs in host memory): each
    layer recomputed pays its share of the fully checkpointed figures, the rest of the plain ones."""
    off = speed_model.estimate_speed(replace(w, gradient_checkpointing=False), card)
    on = speed_model.estimate_speed(replace(w, gradient_checkpointing=True, checkpoint_offload=offload), card)
    share = k / w.shape.num_layers
    return SplitSpeed(
        micro_batch_s=(1 - share) * off.micro_batch_s + share * on.micro_batch_s,
        optimizer_step_s=off.optimizer_step_s,
        parts_s={key: (1 - share) * off.parts_s[key] + share * on.parts_s[key] for key in off.parts_s},
    )


def partial_peak(off: MemoryEstimate, on: MemoryEstimate, k: int, layers: int) -> int:
    """The peak with `k` of `layers` blocks recomputed (for the OOM wizard's partial remedy)."""
    return _partial_peak(off, on, k, layers)


def split_peak(w: Workload, k: int, offload: bool = False) -> int:
    """The peak of `w`'s split with `k` of its layers recomputed, as the plan sizes it; `offload`: every
    layer recomputed, its input in host memory (the GPU holds one recomputed block and two inputs: the
    memory model's own estimate, as its left-one-out check measured it)."""
    if offload:
        return estimate_memory(replace(w, gradient_checkpointing=True, checkpoint_offload=True)).peak_bytes
    off = estimate_memory(replace(w, gradient_checkpointing=False))
    on = estimate_memory(replace(w, gradient_checkpointing=True))
    return _partial_peak(off, on, k, w.shape.num_layers)


def partial_tokens_per_s(
    w: Workload, k: int, card: speed_model.CardSpeed | Card, offload: bool = False
) -> float:
    """The speed model's tokens/s of `w` with `k` of its layers recomputed (`offload`: their inputs in
    host memory), on a catalog card too: it has the fields the speed model reads."""
    speed_card = speed_model.CardSpeed(
        card.name, card.bf16_dense_tflops, card.bandwidth_gbs, host_scale=getattr(card, "host_scale", 1.0)
    )
    return _tokens_per_s(w, w.micro_batch, w.grad_accum, k, speed_card, offload)


def _gib(n: float | None) -> str:
    return "?" if n is None else fmt.gib(n, 1, "")


def _nth(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
