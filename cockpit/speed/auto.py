"""`speed: auto`: the fast settings of a run, chosen from the card, the data and the models.

Pure Python, no torch. The trainer detects the facts (device and its memory, which kernels
import, the samples' token lengths) and `plan` decides, giving a reason for every choice:

- attention: flash_attention_3 > flash_attention_2 > sdpa, by what imports and the device;
- packing: samples packed into rows of max_length (best-fit decreasing) when a row would
  hold >= PACK_MIN_SAMPLES_PER_ROW of them, with every sample attending to itself only.
  With flash-attention the micro-batch is flattened into one sequence (TRL's padding-free
  path and the varlen kernel); with sdpa or eager each row keeps its own block-diagonal
  causal mask, which transformers builds from position_ids that restart at 0 for every
  sample (train_backend/packing.py). The optimizer step keeps about as many samples as the
  config's micro_batch_size x gradient_accumulation_steps;
- micro-batch, accumulation and gradient checkpointing: every split of the effective batch
  into micro-batch x accumulation, each with the fewest checkpointed decoder layers
  (transformers' every_n_layers) whose peak, by the memory model, stays inside the card's
  memory less SAFETY_MARGIN; the one the speed model (cockpit/speed/model.py) rates fastest wins.
  A split that does not fit even with every layer recomputed may keep the layers' inputs in
  pinned host memory (train_backend/speed/host_checkpoint.py), when the host has room;
- fused kernels (Liger: RMSNorm, RoPE, SwiGLU), loader workers, the token cache, and what
  is fixed: TRL's fused LM head (the loss in tiles), the precision.

A key the user's config sets is kept as written (config: speed.keep), and the reason says so.
"""

from __future__ import annotations

import bisect
import copy
import functools
from dataclasses import dataclass, replace
from typing import Any

from cockpit import fmt
from cockpit.config.schema import TrainConfig
from cockpit.fmt import GIB
from cockpit.models.memory import (
    LOSS_TILE_TOKENS,
    LOSS_TILE_VOCAB,
    fused_mlp_fewer_bytes_per_token,
    unpacked_scales_bytes,
)
from cockpit.models.shape import ModelShape
from cockpit.speed import flops as flops_model
from cockpit.speed import model as speed_model
from cockpit.speed.batch_choice import (
    BatchProblem,
    Choice,
    Facts,
    Fit,
    batch_advice,
    fit_batch,
    fused_lora_note,
    mlp_block_note,
    offload_as_written,
    uses_liger,
)

__all__ = ["Choice", "Facts", "SpeedPlan", "bfd_rows", "card_for", "plan", "samples_per_row"]

PACK_MIN_SAMPLES_PER_ROW = 1.1  # below this, packing gains less than 10% real tokens per row
BFD_SAMPLE = 20000  # lengths looked at to predict the packing (an even subsample beyond this)
MAX_LOADER_WORKERS = 4
# rows are padded to a multiple of this many tokens on a GPU, so that fewer distinct row widths
# reach the kernels: a width not run before can stall a step (docs/benchmarks.md, "Why speed: auto
# chooses what it chooses")
PAD_MULTIPLE = 16
# how each attention kernel keeps packed samples apart: rows (a block-diagonal mask per row,
# from position_ids) or flat (one flattened sequence per micro-batch, varlen kernel)
PACKING_BY_ATTENTION = {
    "sdpa": "rows",
    "eager": "rows",
    "flash_attention_2": "flat",
    "flash_attention_3": "flat",
}


@dataclass(frozen=True)
class SpeedPlan:
    mode: str
    config: TrainConfig  # the config to run
    choices: tuple[Choice, ...]
    packing: str = "none"  # none | rows | flat
    sft_packing: bool = False  # what SFTConfig.packing gets
    checkpoint_every: int = 0  # transformers' every_n_layers; 0: no checkpointing
    checkpoint_layers: int = 0
    checkpoint_offload: bool = False  # the checkpointed layers' inputs wait in pinned host memory
    num_layers: int | None = None
    liger: bool = False
    lora_backend: str = "hf"  # fused: train_backend/speed/fused_lora.py; hf: peft's own layers
    mlp_block: str = "off"  # fused: train_backend/speed/fused_mlp.py; off: the MLP's own forward
    pad_multiple: int = 1  # rows padded to a multiple of this many tokens
    cache_tokens: bool = False
    samples_per_row: float | None = None
    budget_bytes: int | None = None
    predicted_peak_bytes: int | None = None
    predicted_tokens_per_s: float | None = None
    busy_tokens_per_micro_batch: int | None = None
    auto_split: dict[str, Any] | None = None
    flops: dict[str, Any] | None = None  # FLOPs per token and the card's peak, for MFU (cockpit.speed.flops)
    host_probe_ms: float | None = None  # the host's probe (train_backend/speed/host_probe.py)
    host_probe_spread: float | None = None  # its rounds' upper over lower quartile
    effective_batch: dict[str, Any] | None = None  # the step's size: the config's and the plan's

    def to_event(self) -> dict[str, Any]:
        t = self.config.training
        return {
            "mode": self.mode,
            "choices": [
                {"name": c.name, "value": c.value, "reason": c.reason, "source": c.source}
                for c in self.choices
            ],
            "micro_batch_size": t.micro_batch_size,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "checkpoint_layers": self.checkpoint_layers,
            "checkpoint_offload": self.checkpoint_offload,
            "num_layers": self.num_layers,
            "packing": self.packing,
            "samples_per_row": self.samples_per_row,
            "attn_implementation": self.config.model.attn_implementation,
            "liger": self.liger,
            "lora_backend": self.lora_backend,
            "mlp_block": self.mlp_block,
            "read_figures": "at_log" if self.config.reads_figures_at_log() else "each_micro_batch",
            "unpack_scales": self.config.quantization.unpack_scales,
            "pad_multiple": self.pad_multiple,
            "dataloader_num_workers": t.dataloader_num_workers,
            "cache_tokens": self.cache_tokens,
            "budget_bytes": self.budget_bytes,
            "predicted_peak_bytes": self.predicted_peak_bytes,
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "busy_tokens_per_micro_batch": self.busy_tokens_per_micro_batch,
            "auto_split": self.auto_split,
            "flops": self.flops,
            "host_probe_ms": self.host_probe_ms,
            "host_scale": round(speed_model.host_scale_for(self.host_probe_ms), 3),
            "host_rank_scale": round(
                speed_model.host_rank_scale(speed_model.host_scale_for(self.host_probe_ms)), 3
            ),
            "host_probe_spread": self.host_probe_spread,
            "effective_batch": self.effective_batch,
        }


def bfd_rows(lengths: list[int], capacity: int) -> int:
    """Rows that best-fit decreasing packs `lengths` into, each at most `capacity` tokens."""
    spaces: list[int] = []  # free space of the open rows, ascending
    rows = 0
    for n in sorted((min(x, capacity) for x in lengths if x > 0), reverse=True):
        i = bisect.bisect_left(spaces, n)
        if i < len(spaces):
            left = spaces.pop(i) - n
        else:
            rows += 1
            left = capacity - n
        if left > 0:
            bisect.insort(spaces, left)
    return rows


def samples_per_row(lengths: list[int], capacity: int) -> float:
    looked = lengths[:: max(1, len(lengths) // BFD_SAMPLE)] if len(lengths) > BFD_SAMPLE else lengths
    rows = bfd_rows(looked, capacity)
    return len([x for x in looked if x > 0]) / rows if rows else 1.0


# speed.fused_kernels: auto turns Liger's kernels off where the speed model rates the split without them
# at least this much faster (its median error held out is about 10%; on one H100, 2026-12-07, the 7B
# ragged row held to 5.45 GiB ran 1.77x without them, predicted 1.58x; the 8B one 1.01x, predicted 1.09x)
LIGER_OFF_GAIN = 1.05


def plan(
    cfg: TrainConfig, facts: Facts, lengths: list[int], shape: ModelShape | None, shape_note: str = ""
) -> SpeedPlan:
    """The settings to run `cfg` with, and why. `lengths`: the samples' token lengths."""
    if cfg.speed.mode == "off":
        return _as_written(cfg, facts, lengths, shape, shape_note)
    keep = frozenset(cfg.speed.keep or [])
    run = copy.deepcopy(cfg)
    attention = _attention(cfg, facts, keep)
    run.model.attn_implementation = attention.value
    packing, per_row, packing_choice = _packing(cfg, facts, keep, attention.value, lengths)
    run.training.packing = packing != "none"
    rows_per_step = _rows_per_step(cfg, packing, per_row)
    problem = BatchProblem(cfg, run, facts, shape, shape_note, keep, rows_per_step, packing != "none")
    problem, fit, split_choices, mlp_auto = _fit(problem)
    kernels = _fused_kernels(cfg, facts)
    if cfg.speed.fused_kernels == "auto" and uses_liger(cfg, facts):
        problem, fit, split_choices, mlp_auto, kernels = _fused_kernels_auto(
            problem, fit, split_choices, mlp_auto, kernels
        )
        run.speed.fused_kernels = problem.cfg.speed.fused_kernels
    cfg = problem.cfg
    _set_split(run, fit)
    advice = batch_advice(problem)  # before the scales: the run's split as the memory plan sized it
    lora_layers = _lora_backend(cfg)
    mlp = mlp_auto or _mlp_block(cfg, facts, shape)
    scales, scales_bytes = _scales(cfg, run, facts, shape, fit, keep)
    # not the flattened rows of flash-attention's padding-free path: TRL counts their width as real tokens
    pad_multiple = PAD_MULTIPLE if facts.device_kind == "cuda" and packing != "flat" else 1
    choices = [
        attention,
        packing_choice,
        *split_choices,
        kernels,
        lora_layers,
        *(c for c in (mlp, scales) if c is not None),
        _cross_entropy(cfg.objective),
        _step_figures(cfg),
        *([_row_width()] if pad_multiple > 1 else []),
        _loader_workers(run, facts, keep),
        _token_cache(cfg),
        _precision(cfg, facts),
    ]
    return SpeedPlan(
        "auto",
        run,
        tuple(choices),
        packing=packing,
        sft_packing=packing == "flat",
        checkpoint_every=fit.every,
        checkpoint_layers=fit.layers,
        checkpoint_offload=fit.offload,
        num_layers=shape.num_layers if shape else None,
        liger=uses_liger(cfg, facts),
        lora_backend="fused" if lora_layers.value == "fused" else "hf",
        mlp_block="fused" if mlp is not None and mlp.value == "fused" else "off",
        pad_multiple=pad_multiple,
        cache_tokens=cfg.speed.cache_tokens,
        samples_per_row=round(per_row, 3) if packing != "none" else None,
        budget_bytes=fit.budget,
        predicted_peak_bytes=None if fit.peak is None else fit.peak + scales_bytes,
        predicted_tokens_per_s=fit.tokens_per_s,
        busy_tokens_per_micro_batch=advice.get("busy_tokens_per_micro_batch"),
        auto_split=advice.get("auto_split"),
        flops=flops_info(run, facts, lengths, shape, fit.layers),
        host_probe_ms=facts.host_probe_ms,
        host_probe_spread=facts.host_probe_spread,
        effective_batch=_effective_batch(cfg, run, problem),
    )


def _effective_batch(cfg: TrainConfig, run: TrainConfig, problem: BatchProblem) -> dict[str, Any]:
    """The step's size: the config's micro-batch x accumulation (samples), the rows or samples that
    makes (`target`; packed, the rows it fills), the plan's product, and whether they differ."""
    written = cfg.training.micro_batch_size * cfg.training.gradient_accumulation_steps
    planned = run.training.micro_batch_size * run.training.gradient_accumulation_steps
    return {
        "config": written,
        "target": problem.rows_per_step,
        "planned": planned,
        "unit": problem.unit,
        "kept": planned == problem.rows_per_step,
        "keep_effective_batch": cfg.speed.keep_effective_batch,
    }


def _as_written(
    cfg: TrainConfig, facts: Facts, lengths: list[int], shape: ModelShape | None, shape_note: str
) -> SpeedPlan:
    """speed.mode: off: the config runs as written; the plan still says what the speed model makes
    of its batch, for the doctor."""
    off = Choice("speed", "off", "speed.mode: off: every setting runs as written in the config", "off")
    t = cfg.training
    samples_per_step = t.micro_batch_size * t.gradient_accumulation_steps
    advice = batch_advice(
        BatchProblem(cfg, cfg, facts, shape, shape_note, frozenset(), samples_per_step, t.packing)
    )
    return SpeedPlan(
        "off",
        cfg,
        (off, _cross_entropy(cfg.objective)),
        sft_packing=cfg.training.packing,
        checkpoint_offload=offload_as_written(t, facts),
        busy_tokens_per_micro_batch=advice.get("busy_tokens_per_micro_batch"),
        auto_split=advice.get("auto_split"),
        flops=flops_info(
            cfg, facts, lengths, shape, shape.num_layers if shape and t.gradient_checkpointing else 0
        ),
        host_probe_ms=facts.host_probe_ms,
    )


def _attention(cfg: TrainConfig, facts: Facts, keep: frozenset[str]) -> Choice:
    """The attention kernel: flash-attention where it imports on a GPU in 16 bits, else sdpa."""
    if "model.attn_implementation" in keep:
        attn = cfg.model.attn_implementation
        return Choice("attention", attn, "model.attn_implementation is set in your config", "yours")
    gpu = facts.device_kind == "cuda"
    if gpu and facts.flash_attention and facts.precision in ("bf16", "fp16"):
        return Choice(
            "attention",
            facts.flash_attention,
            "flash-attention imports: the fastest kernel here, and its "
            "varlen form runs packed samples without padding",
            "auto",
        )
    why = (
        "flash-attn is not installed, so PyTorch's sdpa runs and picks its own kernel"
        if gpu
        else "PyTorch's fused attention (flash-attn needs a CUDA GPU)"
    )
    if gpu and facts.flash_attention and facts.precision == "fp32":
        why = "flash-attention needs 16-bit precision and this run is fp32"
    return Choice("attention", "sdpa", why, "auto")


def _packing(
    cfg: TrainConfig, facts: Facts, keep: frozenset[str], attn: str, lengths: list[int]
) -> tuple[str, float, Choice]:
    """How samples share rows (none | rows | flat, by what keeps them apart under `attn`), the
    samples a row holds by best-fit decreasing, and the choice."""
    max_length = cfg.training.max_length
    used = [min(x, max_length) for x in lengths if x > 0]
    per_row = samples_per_row(used, max_length) if used else 1.0
    want, source, why = _packing_wanted(cfg, facts, keep, used, per_row)
    mode = PACKING_BY_ATTENTION.get(attn)
    packing = "none"
    if want and mode is not None:
        packing = mode
        how = (
            "one flattened sequence per micro-batch (varlen kernel)"
            if mode == "flat"
            else "rows with position_ids restarting per sample: transformers masks each sample to itself"
        )
        why = f"{why}; {how}"
    elif want:
        why = f"{why}; but attention {attn} does not keep packed samples apart, so packing is off"
    value = {"none": "off", "rows": f"rows of {max_length}", "flat": "padding-free (flattened)"}[packing]
    return packing, per_row, Choice("packing", value, why, source)


def _packing_wanted(
    cfg: TrainConfig, facts: Facts, keep: frozenset[str], used: list[int], per_row: float
) -> tuple[bool, str, str]:
    """Whether packing pays here, before asking whether the attention kernel allows it: on a GPU,
    where a row holds at least PACK_MIN_SAMPLES_PER_ROW samples. (want, source, why)"""
    if cfg.objective != "sft":  # docs/preference.md
        why = f"objective {cfg.objective}: TRL runs each prompt + answer as its own sequence (no packing)"
        return False, "fixed", why
    if "training.packing" in keep:
        return cfg.training.packing, "yours", "training.packing is set in your config"
    if facts.device_kind != "cuda":
        why = (
            "on the CPU a step costs in proportion to its tokens, and group_by_length already keeps "
            "padding small; packing pays on a GPU, where it fills the memory with full rows"
        )
        return False, "auto", why
    want = per_row >= PACK_MIN_SAMPLES_PER_ROW
    mean = sum(used) / len(used) if used else 0.0
    why = (
        f"samples average {mean:.0f} of {cfg.training.max_length} tokens: best-fit decreasing puts "
        f"{per_row:.2f} of them in a row"
    )
    why += (
        ", so a micro-batch carries that many times the real tokens in the same memory"
        if want
        else f"; below {PACK_MIN_SAMPLES_PER_ROW} there is little to gain"
    )
    return want, "auto", why


def _rows_per_step(cfg: TrainConfig, packing: str, per_row: float) -> int:
    """The rows an optimizer step takes: about as many samples as the config's micro-batch x
    accumulation, packed into rows where packing is on."""
    samples_per_step = cfg.training.micro_batch_size * cfg.training.gradient_accumulation_steps
    return samples_per_step if packing == "none" else max(1, round(samples_per_step / per_row))


def _set_split(run: TrainConfig, fit: Fit) -> None:
    t = run.training
    t.micro_batch_size, t.gradient_accumulation_steps = fit.micro_batch, fit.accum
    t.gradient_checkpointing = fit.layers > 0
    t.checkpoint_offload = fit.offload


def _fused_kernels(cfg: TrainConfig, facts: Facts) -> Choice:
    """Liger's kernels: the same decision the memory plan sized the split with (uses_liger)."""
    if cfg.speed.fused_kernels == "off":
        return Choice("fused kernels", "off", "speed.fused_kernels: off", "yours")
    if facts.device_kind != "cuda":
        return Choice("fused kernels", "off", "Liger's Triton kernels need a CUDA GPU", "auto")
    if not facts.liger or not facts.liger_model:
        return Choice("fused kernels", "off", facts.liger_note or "liger-kernel is not usable", "auto")
    return Choice(
        "fused kernels",
        f"Liger {facts.liger}: RMSNorm, RoPE, SwiGLU",
        "fewer kernel launches per layer, for the same activation memory",
        "yours" if cfg.speed.fused_kernels == "on" else "auto",
    )


def _fit(problem: BatchProblem) -> tuple[BatchProblem, Fit, list[Choice], Choice | None]:
    """The split of `problem`, and where speed.mlp_block is auto the MLP block's choice (which may
    change the problem's config): (the problem, fit, split choices, the MLP block's line or None)."""
    fit, split_choices = fit_batch(problem)
    if problem.cfg.speed.mlp_block == "auto" and problem.cfg.method in ("lora", "qlora"):  # LoRA's block
        return _mlp_block_auto(problem, fit, split_choices)
    return problem, fit, split_choices, None


def _fused_kernels_auto(
    problem: BatchProblem, fit: Fit, choices: list[Choice], mlp: Choice | None, on_line: Choice
) -> tuple[BatchProblem, Fit, list[Choice], Choice | None, Choice]:
    """speed.fused_kernels: auto where Liger's kernels can run: the split fitted again without them,
    taken where the speed model rates it LIGER_OFF_GAIN faster. Liger's kernels save device time and
    activation memory, but each of its Triton launches costs the host more than the aten ops it
    replaces (speed model: HOST_LIGER_SHARE): on a split the host binds (a small micro-batch of short
    rows, e.g. held to a few GiB) they slow the step. (the problem, fit, split choices and MLP block
    line kept, and the fused kernels' line; `on_line`: that line with them.)"""
    off_cfg = copy.deepcopy(problem.cfg)
    off_cfg.speed.fused_kernels = "off"
    off_problem, off_fit, off_choices, off_mlp = _fit(replace(problem, cfg=off_cfg))
    layers = problem.shape.num_layers if problem.shape is not None else "?"
    split = functools.partial(_split_text, layers=layers)

    both = f"without them {split(off_fit)}; with them {split(fit)}"
    # compared at the rank card, as the splits are: the probe's noise moves both rates, not the choice
    on_rate, off_rate = fit.rank_tokens_per_s, off_fit.rank_tokens_per_s
    if on_rate is not None and off_rate is not None and off_rate >= LIGER_OFF_GAIN * on_rate:
        why = (
            "auto: the speed model rates the split without Liger's kernels faster: their launches cost "
            f"the host more than they save the GPU here: {both}"
        )
        return off_problem, off_fit, off_choices, off_mlp, Choice("fused kernels", "off", why, "auto")
    if on_rate is not None and off_rate is not None:
        on_line = replace(on_line, reason=f"{on_line.reason}: {both}")
    return problem, fit, choices, mlp, on_line


def _split_text(f: Fit, layers: int | str) -> str:
    """A fit in the words of a choice's reason: split, layers recomputed, host memory, predicted rate."""
    rate = f", {f.tokens_per_s:,.0f} tokens/s predicted" if f.tokens_per_s else ""
    host = ", inputs in host memory" if f.offload else ""
    return f"{f.micro_batch} x {f.accum}, {f.layers} of {layers} layers recomputed{host}{rate}"


def _row_width() -> Choice:
    return Choice(
        "row width",
        f"padded to a multiple of {PAD_MULTIPLE} tokens",
        "fewer distinct row widths, so fewer steps stall on a width the GPU has not run yet; "
        "padding never counts as a real token",
        "auto",
    )


def _loader_workers(run: TrainConfig, facts: Facts, keep: frozenset[str]) -> Choice:
    """The data loader's worker processes; sets them on `run`."""
    t = run.training
    if "training.dataloader_num_workers" in keep:
        why = "training.dataloader_num_workers is set in your config"
        return Choice("loader workers", str(t.dataloader_num_workers), why, "yours")
    if facts.device_kind != "cuda":
        t.dataloader_num_workers = 0
        why = "on the CPU, loader processes would take cores from the compute threads"
        return Choice("loader workers", "0", why, "auto")
    t.dataloader_num_workers = min(MAX_LOADER_WORKERS, facts.cpu_count // 4)
    why = (
        f"{t.dataloader_num_workers} of {facts.cpu_count} CPU cores collate batches while the GPU "
        "trains (into pinned memory)"
        if t.dataloader_num_workers
        else f"only {facts.cpu_count} CPU cores: batches are collated in the trainer process"
    )
    return Choice("loader workers", str(t.dataloader_num_workers), why, "auto")


def _step_figures(cfg: TrainConfig) -> Choice:
    """speed.read_figures: when the trainer reads a step's figures (train_backend/step_figures.py)."""
    name = "step figures"
    if cfg.objective != "sft":
        return Choice(name, "each micro-batch", f"{cfg.objective}: TRL's trainer reads them", "fixed")
    if cfg.reads_figures_at_log():
        why = (
            "read once a logging step, so the host queues the backward while the GPU runs the forward "
            "(1.04x-1.16x the tokens/s of reading them each micro-batch, H100, docs/benchmarks.md)"
        )
        return Choice(name, "at logging steps", why, "auto")
    why = (
        "speed.read_figures: each_micro_batch: TRL's and HF's own; the host waits for the GPU twice a "
        "micro-batch"
    )
    return Choice(name, "each micro-batch", why, "yours")


def _token_cache(cfg: TrainConfig) -> Choice:
    if cfg.speed.cache_tokens:
        why = "the tokenized dataset is kept in the run directory; a restart skips tokenizing"
        return Choice("token cache", "on", why, "auto")
    return Choice("token cache", "off", "speed.cache_tokens: false", "yours")


def _lora_backend(cfg: TrainConfig) -> Choice:
    """speed.backend: the fused LoRA layer (train_backend/speed/fused_lora.py) or peft's own."""
    note = fused_lora_note(cfg)
    if cfg.method not in ("lora", "qlora"):
        assert note is not None, "fused_lora_note gives the reason of a method without adapters"
        return Choice("LoRA layers", "none", note, "fixed")
    if note is not None:
        return Choice("LoRA layers", "peft", note, "yours" if cfg.speed.backend == "hf" else "auto")
    return Choice(
        "LoRA layers",
        "fused",
        "each frozen linear and its adapter run as one autograd function, with less host time and memory "
        "traffic than peft's layers; a layer it cannot take (DoRA, several adapters) keeps peft's",
        "yours" if cfg.speed.backend == "fused" else "auto",
    )


def _mlp_block_auto(
    problem: BatchProblem, fit: Fit, choices: list[Choice]
) -> tuple[BatchProblem, Fit, list[Choice], Choice]:
    """speed.mlp_block: auto: the split fitted again with the fused MLP block, taken where the block
    changes the split (fewer layers recomputed, a larger micro-batch, with or without host memory)
    and the speed model rates it faster; else the MLP's own forward (the block's extra SwiGLU pass
    in the backward buys nothing where the split does not change). (the problem, fit and split
    choices kept, and the line that says which and why)."""
    cfg = problem.cfg
    fused_cfg = copy.deepcopy(cfg)
    fused_cfg.speed.mlp_block = "fused"
    own = "the MLP's own"
    note = mlp_block_note(fused_cfg, problem.shape)
    if note is not None:
        return problem, fit, choices, Choice("MLP block", own, f"auto: {note}", "auto")
    fused_problem = replace(problem, cfg=fused_cfg)
    fused_fit, fused_choices = fit_batch(fused_problem)
    # the speed model does not count the block's own cost (one more SwiGLU pass in the backward, one
    # autograd node for four): a split that does not change ties, and keeps the MLP's own forward. A
    # changed one is ranked by the speed model alone, which counts the recompute and the copies back
    # from host memory: on the 7B 2048-token row at 7.15 GiB the block lets 4 x 4 with the inputs in
    # host memory fit where 2 x 8 without them did, rated 10,602 tokens/s against 9,756
    key = (fused_fit.micro_batch, fused_fit.accum, fused_fit.layers, fused_fit.offload)
    changed = key != (fit.micro_batch, fit.accum, fit.layers, fit.offload)
    # at the rank card, as the splits are ranked: the probe's noise does not move the choice
    faster = (
        fused_fit.rank_tokens_per_s is not None and (fit.rank_tokens_per_s or 0) < fused_fit.rank_tokens_per_s
    )
    layers = problem.shape.num_layers if problem.shape is not None else "?"
    split = functools.partial(_split_text, layers=layers)

    both = f"with it {split(fused_fit)}; without it {split(fit)}"
    if changed and faster:
        why = f"auto: fused, as the block frees memory for the split: {both}"
        return fused_problem, fused_fit, fused_choices, Choice("MLP block", "fused", why, "auto")
    why = f"auto: off, as the block would not change the split enough to pay for its recompute: {both}"
    return problem, fit, choices, Choice("MLP block", own, why, "auto")


def _mlp_block(cfg: TrainConfig, facts: Facts, shape: ModelShape | None) -> Choice | None:
    """speed.mlp_block: the MLP and its three adapters in one function (train_backend/speed/fused_mlp.py)."""
    if cfg.method not in ("lora", "qlora") or cfg.speed.mlp_block != "fused":
        return None  # off, the default: no line
    note = mlp_block_note(cfg, shape)
    if note is not None:
        return Choice("MLP block", "the MLP's own", note, "yours")
    liger = uses_liger(cfg, facts)
    what = "down_proj's input" if liger else "SiLU's output and down_proj's input"
    fewer = f"{fused_mlp_fewer_bytes_per_token(shape, liger) / 1024:.0f} KiB" if shape is not None else what
    return Choice(
        "MLP block",
        "fused",
        "each SiLU MLP and its three adapters run as one autograd function that recomputes down_proj's "
        f"input in the backward: a layer keeps {fewer} a token less ({what}), which goes to the split",
        "yours",
    )


SCALES = "4-bit scales"


def _scales(
    cfg: TrainConfig, run: TrainConfig, facts: Facts, shape: ModelShape | None, fit: Fit, keep: frozenset[str]
) -> tuple[Choice | None, int]:
    """quantization.unpack_scales: a double-quantised 4-bit model's scales kept in fp32 after loading,
    where the split's peak leaves room for them; sets it on `run`. (choice, bytes it adds to the
    split's peak: 0 where the memory plan already counted them or they stay packed)."""
    q = cfg.quantization
    if cfg.method != "qlora" or q.bits != 4:
        return None, 0
    if not q.double_quant:
        return Choice(SCALES, "fp32", "quantization.double_quant: false: fp32 as loaded", "yours"), 0
    if "quantization.unpack_scales" in keep:  # the memory plan sized the split with them as written
        value = "fp32, unpacked once" if q.unpack_scales else "double-quantised"
        return Choice(SCALES, value, "quantization.unpack_scales is set in your config", "yours"), 0
    packed = "double-quantised"
    if facts.device_kind != "cuda":
        return Choice(SCALES, packed, "no device memory to plan on the CPU: as loaded", "auto"), 0
    if cfg.distributed.strategy == "fsdp":
        return Choice(SCALES, packed, "FSDP shards the 4-bit weights with their scales", "auto"), 0
    if shape is None or fit.peak is None or fit.budget is None:
        return Choice(SCALES, packed, "the memory model did not size this run: as loaded", "auto"), 0
    extra = unpacked_scales_bytes(shape)
    peak = fit.peak + extra
    if peak > fit.budget:
        why = (
            f"unpacked in fp32 they would take {fmt.gib(extra)} more, {fmt.gib(peak)} over the "
            f"{fmt.gib(fit.budget)} budget of this split: kept as loaded"
        )
        return Choice(SCALES, packed, why, "auto"), 0
    run.quantization.unpack_scales = True
    per_micro_batch = len(shape.linear_shapes()) * (2 * shape.num_layers + fit.layers)
    why = (
        "bitsandbytes turns double-quantised scales back into fp32 before every 4-bit dequantisation, "
        f"{per_micro_batch * fit.accum:,} a step here; unpacked once after loading, each runs a kernel less "
        f"on the same numbers, for {fmt.gib(extra)} more (the split's peak {fmt.gib(peak, unit='')} of "
        f"{fmt.gib(fit.budget)}); the predicted tokens/s does not count the saving"
    )
    return Choice(SCALES, "fp32, unpacked once", why, "auto"), extra


def flops_info(
    cfg: TrainConfig, facts: Facts, lengths: list[int], shape: ModelShape | None, checkpoint_layers: int
) -> dict[str, Any] | None:
    """The speed plan's `flops`: FLOPs per real token (model and hardware, cockpit.speed.flops) and
    the card's dense bf16 peak, from which a client computes MFU; None without a shape."""
    if shape is None:
        return None
    context = flops_model.attention_context(lengths, cfg.training.max_length)
    per_token = flops_model.flops_per_token(
        shape, cfg.method, cfg.lora.r, cfg.lora.target_modules, context, checkpoint_layers
    )
    peak, source = _peak(facts)
    return {
        "model_per_token": round(per_token.model),
        "hardware_per_token": round(per_token.hardware),
        "attention_context": round(context, 1),
        "checkpoint_layers": checkpoint_layers,
        "peak_flops": peak,
        "peak_source": source,
    }


def _peak(facts: Facts) -> tuple[float | None, str]:
    """The card's dense bf16 peak in FLOP/s and where it comes from: the catalog card its NVML name
    denotes (the catalog's find_card: "H100 80GB HBM3" is the SXM card), else the speed model's match."""
    if facts.device_kind != "cuda":
        return None, "no catalog peak for the CPU"
    from cockpit.gpus.catalog import find_card

    card = find_card(facts.device_name)
    if card is not None:
        return card.bf16_dense_tflops * 1e12, f"{card.name}, dense bf16 (catalog)"
    if facts.card is not None and not facts.card_note:
        return facts.card.bf16_dense_tflops * 1e12, f"{facts.card.name}, dense bf16 (catalog)"
    return None, f"no catalog peak for {facts.device_name or 'this card'}"


def _cross_entropy(objective: str = "sft") -> Choice:
    if objective == "orpo":  # trl.experimental.orpo: docs/preference.md
        return Choice(
            "cross-entropy",
            "full logits",
            "ORPO (trl.experimental.orpo) builds the full logits of chosen and rejected and their fp32 "
            "log-softmax; the memory plan counts them",
            "fixed",
        )
    return Choice(
        "cross-entropy",
        "fused LM head, in tiles",
        f"TRL computes the loss from the hidden states in tiles of {LOSS_TILE_TOKENS} tokens x "
        f"{LOSS_TILE_VOCAB} vocabulary entries, so this path does not build the full logits; where they "
        "are large, the memory plan shows a band up to them",
        "fixed",
    )


def _precision(cfg: TrainConfig, facts: Facts) -> Choice:
    if cfg.training.precision != "auto":
        return Choice("precision", facts.precision, "training.precision is set in your config", "yours")
    why = {
        "bf16": f"compute capability {facts.capability} computes in bf16",
        "fp16": f"compute capability {facts.capability} has no real bf16",
        "fp32": "the CPU has no fast 16-bit path",
    }[facts.precision]
    return Choice("precision", facts.precision, why, "auto")


def card_for(device_name: str, total_bytes: int | None) -> tuple[speed_model.CardSpeed, str]:
    """The catalog card behind a torch device name, for the speed model: by the NVML name's patterns
    first (catalog.find_card: "NVIDIA H100 80GB HBM3" is the SXM card; by memory alone it tied with the
    PCIe card, whose 756 TFLOPS and 2.0 TB/s put the H100 plans' tokens/s 25-35% under what ran), then
    by the name's words and the memory; the H200 (the model's calibration card) when there is none,
    which then only ranks the options."""
    from cockpit.gpus import catalog

    loaded = catalog.load_catalog()
    named = catalog.find_card(device_name, loaded)
    if named is not None:
        return speed_model.CardSpeed(named.name, named.bf16_dense_tflops, named.bandwidth_gbs), ""
    cards = loaded.cards
    words = [
        w for w in device_name.replace("-", " ").split() if w.lower() not in ("nvidia", "geforce", "tesla")
    ]
    found = []
    for n in range(len(words), 0, -1):
        found = catalog.Catalog(cards).find(" ".join(words[:n]))
        if found:
            break
    if found:
        gib = (total_bytes or 0) / GIB
        card = min(found, key=lambda c: abs(c.vram_gib - gib))
        return speed_model.CardSpeed(card.name, card.bf16_dense_tflops, card.bandwidth_gbs), ""
    h200 = next(c for c in cards if c.id == "h200-sxm")
    note = f" (figures of the {h200.name}: {device_name or 'this card'} is not in the catalog)"
    return speed_model.CardSpeed(h200.name, h200.bf16_dense_tflops, h200.bandwidth_gbs), note
