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
  memory less SAFETY_MARGIN; the one the speed model (cockpit/speed.py) rates fastest wins;
- fused kernels (Liger: RMSNorm, RoPE, SwiGLU), loader workers, the token cache, and what
  is fixed: TRL's chunked cross-entropy, the precision.

A key the user's config sets is kept as written (config: speed.keep), and the reason says so.
"""

from __future__ import annotations

import bisect
import copy
import math
from dataclasses import dataclass, replace

from cockpit import speed as speed_model
from cockpit.config import TrainConfig
from cockpit.estimate import (
    GIB,
    SAFETY_MARGIN,
    EstimateError,
    Workload,
    estimate_memory,
    workload_from_config,
)
from cockpit.modelshape import ModelShape

PACK_MIN_SAMPLES_PER_ROW = 1.1  # below this, packing gains less than 10% real tokens per row
BFD_SAMPLE = 20000  # lengths looked at to predict the packing (an even subsample beyond this)
MAX_LOADER_WORKERS = 4
# how each attention kernel keeps packed samples apart: rows (a block-diagonal mask per row,
# from position_ids) or flat (one flattened sequence per micro-batch, varlen kernel)
PACKING_BY_ATTENTION = {
    "sdpa": "rows",
    "eager": "rows",
    "flash_attention_2": "flat",
    "flash_attention_3": "flat",
}


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


@dataclass(frozen=True)
class Choice:
    name: str
    value: str
    reason: str
    source: str  # auto: chosen here | yours: your config | off: speed.mode off | fixed: how the trainer works


@dataclass(frozen=True)
class SpeedPlan:
    mode: str
    config: TrainConfig  # the config to run
    choices: tuple[Choice, ...]
    packing: str = "none"  # none | rows | flat
    sft_packing: bool = False  # what SFTConfig.packing gets
    checkpoint_every: int = 0  # transformers' every_n_layers; 0: no checkpointing
    checkpoint_layers: int = 0
    num_layers: int | None = None
    liger: bool = False
    cache_tokens: bool = False
    samples_per_row: float | None = None
    budget_bytes: int | None = None
    predicted_peak_bytes: int | None = None
    predicted_tokens_per_s: float | None = None

    def to_event(self) -> dict:
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
            "num_layers": self.num_layers,
            "packing": self.packing,
            "samples_per_row": self.samples_per_row,
            "attn_implementation": self.config.model.attn_implementation,
            "liger": self.liger,
            "dataloader_num_workers": t.dataloader_num_workers,
            "cache_tokens": self.cache_tokens,
            "budget_bytes": self.budget_bytes,
            "predicted_peak_bytes": self.predicted_peak_bytes,
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
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


def plan(
    cfg: TrainConfig, facts: Facts, lengths: list[int], shape: ModelShape | None, shape_note: str = ""
) -> SpeedPlan:
    """The settings to run `cfg` with, and why. `lengths`: the samples' token lengths."""
    if cfg.speed.mode == "off":
        off = Choice("speed", "off", "speed.mode: off: every setting runs as written in the config", "off")
        return SpeedPlan("off", cfg, (off, _cross_entropy()), sft_packing=cfg.training.packing)
    keep = set(cfg.speed.keep or [])
    run = copy.deepcopy(cfg)
    t = run.training
    choices: list[Choice] = []
    gpu = facts.device_kind == "cuda"

    # attention kernel
    if "model.attn_implementation" in keep:
        attn = cfg.model.attn_implementation
        choices.append(Choice("attention", attn, "model.attn_implementation is set in your config", "yours"))
    elif gpu and facts.flash_attention and facts.precision in ("bf16", "fp16"):
        attn = facts.flash_attention
        choices.append(
            Choice(
                "attention",
                attn,
                "flash-attention imports: the fastest kernel here, and its "
                "varlen form runs packed samples without padding",
                "auto",
            )
        )
    else:
        attn = "sdpa"
        why = (
            "flash-attn is not installed; PyTorch's sdpa runs its flash kernel on plain rows and the "
            "memory-efficient kernel with a block-diagonal mask on packed rows"
            if gpu
            else "PyTorch's fused attention (flash-attn needs a CUDA GPU)"
        )
        if gpu and facts.flash_attention and facts.precision == "fp32":
            why = "flash-attention needs 16-bit precision and this run is fp32"
        choices.append(Choice("attention", attn, why, "auto"))
    run.model.attn_implementation = attn

    # packing
    used = [min(x, t.max_length) for x in lengths if x > 0]
    per_row = samples_per_row(used, t.max_length) if used else 1.0
    mean = sum(used) / len(used) if used else 0.0
    mode = PACKING_BY_ATTENTION.get(attn)
    if "training.packing" in keep:
        want, source, why = cfg.training.packing, "yours", "training.packing is set in your config"
    elif not gpu:
        want, source = False, "auto"
        why = (
            "on the CPU a step costs in proportion to its tokens, and group_by_length already keeps "
            "padding small; packing pays on a GPU, where it fills the memory with full rows"
        )
    else:
        want, source = per_row >= PACK_MIN_SAMPLES_PER_ROW, "auto"
        why = (
            f"samples average {mean:.0f} of {t.max_length} tokens: best-fit decreasing puts "
            f"{per_row:.2f} of them in a row"
        )
        why += (
            ", so a micro-batch carries that many times the real tokens in the same memory"
            if want
            else f"; below {PACK_MIN_SAMPLES_PER_ROW} there is little to gain"
        )
    packing = "none"
    if want and mode is None:
        why = f"{why}; but attention {attn} does not keep packed samples apart, so packing is off"
    elif want:
        packing = mode
        how = (
            "one flattened sequence per micro-batch (varlen kernel)"
            if mode == "flat"
            else "rows with position_ids restarting per sample: transformers masks each sample to itself"
        )
        why = f"{why}; {how}"
    value = {"none": "off", "rows": f"rows of {t.max_length}", "flat": "padding-free (flattened)"}[packing]
    choices.append(Choice("packing", value, why, source))
    t.packing = packing != "none"

    # effective batch, micro-batch and checkpointing
    samples_per_step = cfg.training.micro_batch_size * cfg.training.gradient_accumulation_steps
    rows_per_step = samples_per_step if packing == "none" else max(1, round(samples_per_step / per_row))
    fit, fit_choices = _fit(cfg, run, facts, shape, shape_note, keep, rows_per_step, packing != "none")
    choices.extend(fit_choices)
    t.micro_batch_size, t.gradient_accumulation_steps = fit.micro_batch, fit.accum
    t.gradient_checkpointing = fit.layers > 0

    # fused kernels
    liger = False
    if cfg.speed.fused_kernels == "off":
        choices.append(Choice("fused kernels", "off", "speed.fused_kernels: off", "yours"))
    elif not gpu:
        choices.append(Choice("fused kernels", "off", "Liger's Triton kernels need a CUDA GPU", "auto"))
    elif not facts.liger or not facts.liger_model:
        choices.append(
            Choice("fused kernels", "off", facts.liger_note or "liger-kernel is not usable", "auto")
        )
    else:
        liger = True
        choices.append(
            Choice(
                "fused kernels",
                f"Liger {facts.liger}: RMSNorm, RoPE, SwiGLU",
                "fewer kernel launches per layer and less activation memory (not counted in the memory plan)",
                "auto",
            )
        )
    choices.append(_cross_entropy())

    # data loading
    if "training.dataloader_num_workers" in keep:
        choices.append(
            Choice(
                "loader workers",
                str(t.dataloader_num_workers),
                "training.dataloader_num_workers is set in your config",
                "yours",
            )
        )
    elif not gpu:
        t.dataloader_num_workers = 0
        choices.append(
            Choice(
                "loader workers",
                "0",
                "on the CPU, loader processes would take cores from the compute threads",
                "auto",
            )
        )
    else:
        t.dataloader_num_workers = min(MAX_LOADER_WORKERS, facts.cpu_count // 4)
        why = (
            f"{t.dataloader_num_workers} of {facts.cpu_count} CPU cores collate batches while the GPU "
            "trains (pinned memory, kept across epochs)"
            if t.dataloader_num_workers
            else f"only {facts.cpu_count} CPU cores: batches are collated in the trainer process"
        )
        choices.append(Choice("loader workers", str(t.dataloader_num_workers), why, "auto"))
    cache = cfg.speed.cache_tokens
    choices.append(
        Choice(
            "token cache",
            "on" if cache else "off",
            "the tokenized dataset is kept in the run directory; a restart skips tokenizing"
            if cache
            else "speed.cache_tokens: false",
            "auto" if cache else "yours",
        )
    )
    choices.append(_precision(cfg, facts))
    return SpeedPlan(
        "auto",
        run,
        tuple(choices),
        packing=packing,
        sft_packing=packing == "flat",
        checkpoint_every=fit.every,
        checkpoint_layers=fit.layers,
        num_layers=shape.num_layers if shape else None,
        liger=liger,
        cache_tokens=cache,
        samples_per_row=round(per_row, 3) if packing != "none" else None,
        budget_bytes=fit.budget,
        predicted_peak_bytes=fit.peak,
        predicted_tokens_per_s=fit.tokens_per_s,
    )


@dataclass(frozen=True)
class _Fit:
    micro_batch: int
    accum: int
    layers: int  # decoder layers checkpointed
    every: int  # transformers' every_n_layers (0: none)
    budget: int | None = None
    peak: int | None = None
    tokens_per_s: float | None = None


def _fit(cfg, run, facts: Facts, shape, shape_note, keep, rows_per_step, packed) -> tuple[_Fit, list[Choice]]:
    t = cfg.training
    unit = "rows" if packed else "samples"
    pinned_batch = bool({"training.micro_batch_size", "training.gradient_accumulation_steps"} & keep)
    pinned_ckpt = "training.gradient_checkpointing" in keep
    layers_total = shape.num_layers if shape else 1
    written = _Fit(
        t.micro_batch_size,
        t.gradient_accumulation_steps,
        layers_total if t.gradient_checkpointing else 0,
        1 if t.gradient_checkpointing else 0,
    )
    if facts.device_kind != "cuda":
        fit, ckpt = written, _yours_or(pinned_ckpt, "gradient checkpointing", written, "")
        if not pinned_ckpt and shape is not None:
            fit, ckpt = _cpu_checkpointing(run, facts, shape, written)
        batch = _yours_or(
            pinned_batch,
            "micro-batch",
            written,
            "on the CPU there is no device memory to "
            "fit and a larger micro-batch is no faster per token: as configured",
        )
        return fit, [batch, ckpt]
    if shape is None or not facts.memory_bytes:
        why = (
            f"the memory model cannot size this run ({shape_note or 'unknown device memory'}): as configured"
        )
        return written, _as_written(written, why, pinned_batch, pinned_ckpt)

    budget = int(facts.memory_bytes * (1 - SAFETY_MARGIN))
    where = f"{_gib(budget)} GiB ({facts.memory_note} less the {SAFETY_MARGIN:.0%} margin)"
    base = replace(workload_from_config(run, shape), precision=facts.precision)
    if pinned_batch:
        splits = [(t.micro_batch_size, t.gradient_accumulation_steps)]
    else:  # every micro-batch size that splits the step, with the fewest accumulation steps
        splits = []
        for accum in range(1, rows_per_step + 1):
            mb = math.ceil(rows_per_step / accum)
            if not splits or splits[-1][0] != mb:
                splits.append((mb, accum))
    if pinned_ckpt:
        layer_options = [layers_total if t.gradient_checkpointing else 0]
    else:
        layer_options = sorted({0} | {math.ceil(layers_total / n) for n in range(1, layers_total + 1)})
    scored = []
    for mb, accum in splits:
        try:
            off = estimate_memory(
                replace(base, micro_batch=mb, grad_accum=accum, gradient_checkpointing=False)
            )
            on = estimate_memory(replace(base, micro_batch=mb, grad_accum=accum, gradient_checkpointing=True))
        except EstimateError as exc:
            return written, _as_written(
                written,
                f"the memory model refuses this run ({exc}): as configured",
                pinned_batch,
                pinned_ckpt,
            )
        for k in layer_options:
            peak = _partial_peak(off, on, k, layers_total)
            if peak <= budget:
                rate = _tokens_per_s(base, mb, accum, k, layers_total, facts.card)
                scored.append((rate, -k, -accum, mb, accum, k, peak))
                break
    if not scored:
        why = f"nothing fits {where} by the memory model: as configured; expect an out-of-memory error"
        return written, _as_written(written, why, pinned_batch, pinned_ckpt)
    scored.sort(reverse=True)
    rate, _, _, mb, accum, k, peak = scored[0]
    every = 0 if k == 0 else min(n for n in range(1, layers_total + 1) if math.ceil(layers_total / n) == k)
    rate_note = f", ~{rate / 1000:.1f}k tokens/s by the speed model{facts.card_note}" if rate else ""
    if len(scored) > 1 and rate:
        r2, _, _, mb2, accum2, k2, _ = scored[1]
        rate_note += f"; next best {mb2} x {accum2} with {k2} layers checkpointed, ~{r2 / 1000:.1f}k"
    written_step = (
        f"{t.micro_batch_size} x {t.gradient_accumulation_steps}{' samples, packed' if packed else ''}"
    )
    batch_why = (
        "training.micro_batch_size is set in your config"
        if pinned_batch
        else f"{rows_per_step} {unit} per optimizer step (from your {written_step}); the fastest split "
        f"that fits: peak ~{_gib(peak)} GiB of {where}{rate_note}"
    )
    value = (
        "off"
        if k == 0
        else (
            f"all {layers_total} layers"
            if k == layers_total
            else f"{k} of {layers_total} layers (every {every}{_nth(every)})"
        )
    )
    ckpt_why = (
        "training.gradient_checkpointing is set in your config"
        if pinned_ckpt
        else "not needed: the activations fit"
        if k == 0
        else f"the fewest recomputed layers with which {mb} x {accum} fits"
    )
    return _Fit(mb, accum, k, every, budget, peak, round(rate, 1) if rate else None), [
        Choice(
            "micro-batch",
            f"{mb} x {accum} ({mb * accum} {unit} per step)",
            batch_why,
            "yours" if pinned_batch else "auto",
        ),
        Choice("gradient checkpointing", value, ckpt_why, "yours" if pinned_ckpt else "auto"),
    ]


def _yours_or(pinned: bool, name: str, fit: _Fit, why: str) -> Choice:
    value = f"{fit.micro_batch} x {fit.accum}" if name == "micro-batch" else ("on" if fit.layers else "off")
    key = "training.micro_batch_size" if name == "micro-batch" else "training.gradient_checkpointing"
    return Choice(
        name, value, f"{key} is set in your config" if pinned else why, "yours" if pinned else "auto"
    )


def _as_written(written: _Fit, why: str, pinned_batch: bool, pinned_ckpt: bool) -> list[Choice]:
    return [
        _yours_or(pinned_batch, "micro-batch", written, why),
        _yours_or(pinned_ckpt, "gradient checkpointing", written, why),
    ]


def _cpu_checkpointing(run, facts: Facts, shape, written: _Fit) -> tuple[_Fit, Choice]:
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


def _partial_peak(off, on, k: int, layers: int) -> int:
    """Peak with `k` of `layers` blocks checkpointed, from the memory model's two extremes."""
    if k == 0:
        return off.peak_bytes
    per_layer = off.part("activations").bytes / layers
    saved = on.part("checkpoints").bytes / layers if on.part("checkpoints") else 0
    static = off.peak_bytes - off.part("activations").bytes
    return int(static + (layers - k) * per_layer + k * saved + on.part("activations").bytes)


def _tokens_per_s(base: Workload, mb: int, accum: int, k: int, layers: int, card) -> float:
    """The speed model's tokens/s; a partly checkpointed model pays the recompute of its share."""
    if card is None:
        return 0.0
    w = replace(base, micro_batch=mb, grad_accum=accum)
    off = speed_model.estimate_speed(replace(w, gradient_checkpointing=False), card)
    on = speed_model.estimate_speed(replace(w, gradient_checkpointing=True), card)
    share = k / layers
    micro_s = (1 - share) * off.micro_batch_s + share * on.micro_batch_s
    return w.tokens_per_micro_batch * accum / (micro_s * accum + off.optimizer_step_s)


def _cross_entropy() -> Choice:
    return Choice(
        "cross-entropy",
        "chunked, fused LM head",
        "TRL's SFTTrainer computes the loss from the "
        "hidden states in chunks, so the logits are never materialised (Liger's fused linear "
        "cross-entropy would replace it; TRL 1.x refuses it)",
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


def _gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f}"


def _nth(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def card_for(device_name: str, total_bytes: int | None) -> tuple[speed_model.CardSpeed, str]:
    """The catalog card behind a torch device name, for the speed model; the H200 (the model's
    calibration card) when there is none, which then only ranks the options."""
    from cockpit import catalog

    cards = catalog.load_catalog().cards
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
