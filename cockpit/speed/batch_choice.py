"""The micro-batch, gradient accumulation and checkpointing of `speed: auto` (cockpit/speed/auto.py).

Every split of the optimizer step into micro-batch x accumulation is tried, each with the
fewest checkpointed decoder layers (transformers' every_n_layers: every n-th layer, so
ceil(layers / n) of them) whose peak, by the memory model, stays inside the card's memory
less SAFETY_MARGIN. A partly checkpointed model holds the full activations of its other
layers, the inputs of its checkpointed ones and one recomputed block: the memory model's two
extremes, mixed per layer. A split that does not fit with every layer recomputed may still fit
with their inputs in pinned host memory (HOST_SHARE of the host's available memory at most),
at the cost of copying them back before each recompute. The speed model rates each fitting
split the same way (the recompute of its share of the layers) and the fastest wins. Pure
Python, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cockpit import fmt
from cockpit.models.memory import (
    SAFETY_MARGIN,
    EstimateError,
    Workload,
    estimate_memory,
    workload_from_config,
)
from cockpit.speed import model as speed_model

if TYPE_CHECKING:
    from cockpit.config.schema import TrainConfig, TrainingSection
    from cockpit.models.memory import MemoryEstimate
    from cockpit.models.shape import ModelShape


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
    every: int  # transformers' every_n_layers (0: none)
    budget: int | None = None
    peak: int | None = None
    tokens_per_s: float | None = None
    offload: bool = False  # the checkpointed layers' inputs wait in pinned host memory


HOST_SHARE = 0.5  # the most of the host's available memory the pinned layer inputs may take


def fit_batch(
    cfg: TrainConfig,
    run: TrainConfig,
    facts: Facts,
    shape: ModelShape | None,
    shape_note: str,
    keep: set[str],
    rows_per_step: int,
    packed: bool,
) -> tuple[Fit, list[Choice]]:
    t = cfg.training
    unit = "rows" if packed else "samples"
    pinned_batch = bool({"training.micro_batch_size", "training.gradient_accumulation_steps"} & keep)
    pinned_ckpt = "training.gradient_checkpointing" in keep
    pinned_offload = "training.checkpoint_offload" in keep
    layers_total = shape.num_layers if shape else 1
    written = Fit(
        t.micro_batch_size,
        t.gradient_accumulation_steps,
        layers_total if t.gradient_checkpointing else 0,
        1 if t.gradient_checkpointing else 0,
        offload=offload_as_written(t, facts),
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
    base = replace(
        workload_from_config(run, shape),
        precision=facts.precision,
        liger=uses_liger(cfg, facts),
        checkpoint_offload=False,
        fused_lora=fused_lora_note(cfg) is None,
        fused_mlp=mlp_block_note(cfg, shape) is None,
    )
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
    host_free = facts.host_available_bytes
    forced = pinned_offload and t.checkpoint_offload and t.gradient_checkpointing
    if forced:  # as written: every layer recomputed, its input in host memory
        may_offload, layer_options = True, []
    else:  # speed: auto's last resort, where the host has room
        may_offload = not pinned_offload and not pinned_ckpt and bool(host_free)
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
                scored.append((rate, -k, -accum, mb, accum, k, peak, 0))
                break
        else:  # not even with every layer recomputed: their inputs to the host, if it has room
            host = on.part("checkpoints").bytes
            if not (may_offload and host and (forced or host <= HOST_SHARE * (host_free or 0))):
                continue
            # the GPU holds one recomputed block and two inputs (one copied back, one recomputed):
            # the memory model's own estimate, as its left-one-out check measured it
            on_host = replace(base, micro_batch=mb, grad_accum=accum, checkpoint_offload=True)
            peak = estimate_memory(on_host).peak_bytes
            if peak <= budget:
                rate = _tokens_per_s(base, mb, accum, layers_total, layers_total, facts.card, True)
                scored.append((rate, -layers_total, -accum, mb, accum, layers_total, peak, host))
    if not scored:
        why = f"nothing fits {where} by the memory model: as configured; expect an out-of-memory error"
        return written, _as_written(written, why, pinned_batch, pinned_ckpt)
    scored.sort(reverse=True)
    rate, _, _, mb, accum, k, peak, host = scored[0]
    every = 0 if k == 0 else min(n for n in range(1, layers_total + 1) if math.ceil(layers_total / n) == k)
    rate_note = f", ~{rate / 1000:.1f}k tokens/s by the speed model{facts.card_note}" if rate else ""
    if len(scored) > 1 and rate:
        r2, _, _, mb2, accum2, k2, _, host2 = scored[1]
        where2 = ", inputs in host memory" if host2 else ""
        rate_note += f"; next best {mb2} x {accum2} with {k2} layers checkpointed{where2}, ~{r2 / 1000:.1f}k"
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
    if host and forced:
        value += ", inputs in host memory"
        ckpt_why = "training.checkpoint_offload is set in your config"
    elif host:
        value += ", inputs in host memory"
        ckpt_why = (
            f"{mb} x {accum} fits only with the layer inputs ({_gib(host)} GiB) in pinned host memory "
            f"(of {_gib(host_free)} GiB available, {HOST_SHARE:.0%} at most): copied out under the "
            f"next layers' compute, back before each recompute, "
            f"~{host / speed_model.HOST_LINK_BYTES_PER_S * accum:.2f} s a step at "
            f"{speed_model.HOST_LINK_BYTES_PER_S / 1e9:.0f} GB/s (PCIe 4.0 x16, stated)"
        )
    fit = Fit(mb, accum, k, every, budget, peak, round(rate, 1) if rate else None, bool(host))
    return fit, [
        Choice(
            "micro-batch",
            f"{mb} x {accum} ({mb * accum} {unit} per step)",
            batch_why,
            "yours" if pinned_batch else "auto",
        ),
        Choice("gradient checkpointing", value, ckpt_why, "yours" if pinned_ckpt or forced else "auto"),
    ]


BATCH_KEYS = {
    "training.micro_batch_size",
    "training.gradient_accumulation_steps",
    "training.gradient_checkpointing",
    "training.checkpoint_offload",
}
MAX_BUSY_MICRO_BATCH = 1024


def busy_tokens(base: Workload, card: speed_model.CardSpeed | None) -> int | None:
    """The fewest tokens per micro-batch (whole rows of `base.seq_len`) at which, by the speed model, the
    card's work outlasts the host's launches: below it the GPU is underfed, whatever feeds it."""
    if card is None:
        return None
    for mb in range(1, MAX_BUSY_MICRO_BATCH + 1):
        est = speed_model.estimate_speed(replace(base, micro_batch=mb, grad_accum=1), card)
        if est.bound != "overhead":
            return mb * base.seq_len
    return None


def batch_advice(
    cfg: TrainConfig,
    run: TrainConfig,
    facts: Facts,
    shape: ModelShape | None,
    shape_note: str,
    keep: set[str],
    rows_per_step: int,
    packed: bool,
) -> dict[str, Any]:
    """The speed model's view of the run's batch, for the doctor: the tokens per micro-batch that keep
    the card busy, and the split speed: auto picks with the batch keys free, against the run's own."""
    if facts.device_kind != "cuda" or shape is None or not facts.memory_bytes or facts.card is None:
        return {}
    try:
        base = replace(workload_from_config(run, shape), precision=facts.precision)
        busy = busy_tokens(base, facts.card)
    except EstimateError:
        return {}
    as_run, _ = fit_batch(run, run, facts, shape, shape_note, set(keep) | BATCH_KEYS, rows_per_step, packed)
    free, _ = fit_batch(cfg, run, facts, shape, shape_note, set(keep) - BATCH_KEYS, rows_per_step, packed)
    out: dict = {"busy_tokens_per_micro_batch": busy}
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


def _as_written(written: Fit, why: str, pinned_batch: bool, pinned_ckpt: bool) -> list[Choice]:
    return [
        _yours_or(pinned_batch, "micro-batch", written, why),
        _yours_or(pinned_ckpt, "gradient checkpointing", written, why),
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
    per_layer = off.part("activations").bytes / layers
    saved = on.part("checkpoints").bytes / layers if on.part("checkpoints") else 0
    static = off.peak_bytes - off.part("activations").bytes
    return int(static + (layers - k) * per_layer + k * saved + on.part("activations").bytes)


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
        return "speed.mlp_block: off (the default: the fused block is not yet measured on a GPU)"
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
    layers: int,
    card: speed_model.CardSpeed | None,
    offload: bool = False,
) -> float:
    """The speed model's tokens/s; a partly checkpointed model pays the recompute of its share,
    and inputs held in host memory their copy back (speed.HOST_LINK_BYTES_PER_S)."""
    if card is None:
        return 0.0
    w = replace(base, micro_batch=mb, grad_accum=accum)
    off = speed_model.estimate_speed(replace(w, gradient_checkpointing=False), card)
    on = speed_model.estimate_speed(replace(w, gradient_checkpointing=True, checkpoint_offload=offload), card)
    share = k / layers
    micro_s = (1 - share) * off.micro_batch_s + share * on.micro_batch_s
    return w.tokens_per_micro_batch * accum / (micro_s * accum + off.optimizer_step_s)


def _gib(n: float | None) -> str:
    return "?" if n is None else fmt.gib(n, 1, "")


def _nth(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
