"""What the planning commands report of the memory model (cockpit.models.memory), beyond one peak.

- `multi_gpu_options`: a card's 2x/4x/8x rows, each with the strategy `distributed.strategy: auto`
  would run and the per-GPU estimate under it;
- `estimate_inference`: the article's inference row (quantised weights, KV cache, context);
- `workload_inputs` and `to_dict`: an estimate with its stated inputs, for `--json` and the screens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cockpit.models.memory import (
    CUDA_CONTEXT_BYTES,
    NF4_CONSTANTS_PER_PARAM,
    MemoryEstimate,
    Part,
    Workload,
    estimate_memory,
    verdict,
)
from cockpit.models.shape import ModelShape


@dataclass(frozen=True)
class GpuCountOption:
    """A job of `gpus` of one card: which strategy it runs and what each GPU then holds."""

    gpus: int
    sharding: str
    reason: str
    estimate: MemoryEstimate
    verdict: str  # fits | tight | no (per GPU, against the card's memory)


def multi_gpu_options(
    w: Workload, vram_bytes: int, counts: tuple[int, ...] = (2, 4, 8)
) -> list[GpuCountOption]:
    """The card picker's 2x/4x/8x rows: for each GPU count, the strategy `distributed.strategy: auto`
    runs (cockpit.models.sharding.choose_strategy: DDP when its per-GPU share fits the card) and the
    per-GPU estimate under it."""
    from cockpit.models.sharding import choose_strategy

    options = []
    for n in counts:
        ddp = estimate_memory(replace(w, gpus=n, sharding="ddp"))
        choice = choose_strategy("auto", w.method, ddp.peak_bytes, vram_bytes)
        est = ddp if choice.strategy == "ddp" else estimate_memory(replace(w, gpus=n, sharding="fsdp"))
        options.append(GpuCountOption(n, choice.strategy, choice.reason, est, verdict(est, vram_bytes)))
    return options


def estimate_inference(shape: ModelShape, bits: int, context_tokens: int, batch: int = 1) -> MemoryEstimate:
    """The article's inference row: quantised weights + KV cache (16-bit) + context."""
    linear = shape.num_layers * shape.layer_linear_params
    other = shape.params - linear
    per_weight = {4: 0.5 + NF4_CONSTANTS_PER_PARAM[True], 8: 1.0, 16: 2.0}[bits]
    kv = 2 * shape.num_layers * shape.kv_out * context_tokens * batch * 2
    parts = (
        Part("weights", "weights", int(linear * per_weight + other * 2), f"{bits}-bit linear layers"),
        Part("kv_cache", "KV cache", kv, f"{context_tokens} tokens x batch {batch}, 16-bit"),
        Part("context", "CUDA context + workspaces", CUDA_CONTEXT_BYTES, ""),
    )
    return MemoryEstimate(parts, parts[0].bytes + CUDA_CONTEXT_BYTES)


def workload_inputs(w: Workload) -> dict[str, Any]:
    """The stated inputs of a training estimate, for `--json` and the screens."""
    return {
        "model": w.shape.name,
        "shape_source": w.shape.source,
        "params": w.shape.params,
        "method": w.method,
        "quant_bits": w.quant_bits if w.method == "qlora" else None,
        "lora_r": w.lora_r if w.method != "full" else None,
        "lora_targets": w.lora_targets if w.method != "full" else None,
        "seq_len": w.seq_len,
        "micro_batch": w.micro_batch,
        "gradient_checkpointing": w.gradient_checkpointing,
        "optimizer": w.optimizer,
        "precision": w.precision,
        "trainer": w.trainer,
        **({"objective": w.objective, "reference": w.reference} if w.objective != "sft" else {}),
        **({"gpus": w.gpus, "sharding": w.sharding} if w.gpus > 1 else {}),
    }


def to_dict(estimate: MemoryEstimate, inputs: dict[str, Any]) -> dict[str, Any]:
    """The estimate's parts and peaks with its stated inputs, as plain data."""
    return {
        "inputs": inputs,
        "parts": [{"key": p.key, "label": p.label, "bytes": p.bytes, "note": p.note} for p in estimate.parts],
        "peak_bytes": estimate.peak_bytes,
        "load_peak_bytes": estimate.load_peak_bytes,
    }
