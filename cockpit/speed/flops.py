"""FLOPs per trained token and model FLOPs utilisation (MFU), from the model's shape. No torch.

The convention (stated on screen as "MFU", in docs/protocol.md and the speed plan's event):

- a matrix product of a token's `in`-vector by an `in x out` weight costs 2*in*out FLOPs
  (a multiply and an add);
- every linear of the decoder blocks and the LM head runs forward (2*in*out) and computes the
  gradient of its input in the backward pass (2*in*out more); only a weight that trains also
  computes its own gradient (2*in*out more). So a frozen base (LoRA, QLoRA) costs 4 FLOPs per
  weight per token and a full fine-tune 6 (the usual 6N); the input gradient of the very first
  block, which nothing needs, is counted all the same (it is < 0.2% of a 7B model's);
- each LoRA adapter (A: in x r, B: r x out) trains: 6*r*(in+out) per token;
- causal attention: a token at position p of its sample scores and mixes p+1 positions, 4*q_out
  FLOPs per position per layer forward (QK^T and AV), twice that backward. Samples packed into a
  row never attend across each other (varlen kernels or block masks), and padding is no work, so
  the context is taken per sample: `attention_context` is the token-weighted mean of p+1,
  sum n(n+1)/2 / sum n over the samples' lengths n;
- embedding look-ups, norms, activations, the loss, the optimizer, QLoRA's dequantisation: not
  matrix products, not counted.

**Model FLOPs** are those above: what the step has to compute. **Hardware FLOPs** add what the
run computes again: the forward of the layers recomputed under gradient checkpointing (their
linears, adapters and attention; the LM head is not recomputed). Kernel-internal recomputation
(FlashAttention recomputing its scores in the backward pass) is counted in neither. MFU divides
model FLOPs per second (real tokens/s, never padding, times model FLOPs per token) by the card's
dense bf16 peak from the catalog (never the 2:4-sparse headline); HFU does the same with hardware
FLOPs. The screens show MFU; the speed plan event carries both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cockpit.models.shape import ModelShape


@dataclass(frozen=True)
class FlopsPerToken:
    model: float  # forward + backward, what the step has to compute
    hardware: float  # model + the forward recomputed under gradient checkpointing
    attention_context: float  # mean positions a token attends to (causal, within its sample)
    parts: dict[str, float]  # model FLOPs by part: linears, lm_head, adapters, attention; and recompute


def attention_context(lengths: list[int], max_length: int | None = None) -> float:
    """Token-weighted mean of the positions each token attends to: sum n(n+1)/2 / sum n.

    Lengths longer than `max_length` are cut to it (the trainer truncates them); empty samples count
    nothing. 0.0 when there is no token."""
    cut = [min(n, max_length) if max_length else n for n in lengths if n > 0]
    total = sum(cut)
    return sum(n * (n + 1) / 2 for n in cut) / total if total else 0.0


def flops_per_token(
    shape: ModelShape,
    method: str,
    lora_r: int,
    lora_targets: list[str] | str,
    context: float,
    checkpoint_layers: int = 0,
) -> FlopsPerToken:
    """FLOPs per real token of one training step (see the module's convention)."""
    if method not in ("lora", "qlora", "full"):
        raise ValueError(f"method {method!r}: expected lora, qlora or full")
    if context < 0 or checkpoint_layers < 0:
        raise ValueError("the attention context and the checkpointed layers cannot be negative")
    layers = shape.num_layers
    recomputed = min(checkpoint_layers, layers) / layers if layers else 0.0
    trained_base = method == "full"
    per_weight = 6.0 if trained_base else 4.0  # forward, input gradient, (weight gradient)
    block_linear = layers * shape.layer_linear_params
    head = shape.vocab_size * shape.hidden_size  # tied or not, the LM head is a matmul
    adapters = 0 if trained_base else shape.lora_params(lora_r, lora_targets)
    attention_fwd = 4.0 * layers * shape.q_out * context
    parts = {
        "linears": per_weight * block_linear,
        "lm_head": per_weight * head,
        "adapters": 6.0 * adapters,
        "attention": 3.0 * attention_fwd,  # forward + a backward of twice its cost
    }
    model = sum(parts.values())
    recompute = recomputed * (2.0 * block_linear + 2.0 * adapters + attention_fwd)
    return FlopsPerToken(
        model=model,
        hardware=model + recompute,
        attention_context=context,
        parts={**parts, "recompute": recompute},
    )


def utilisation(
    tokens_per_s: float | None, flops_per_token: float | None, peak_flops: float | None
) -> float | None:
    """FLOPs per second achieved over the peak (0-1, may exceed 1 if an input is wrong); None
    when any input is missing or not positive."""
    if not tokens_per_s or not flops_per_token or not peak_flops:
        return None
    if tokens_per_s < 0 or flops_per_token < 0 or peak_flops <= 0:
        return None
    return tokens_per_s * flops_per_token / peak_flops


def mfu_of(
    state_speed_plan: dict[str, Any] | None, tokens_per_s: float | None, gpus: int = 1
) -> float | None:
    """MFU of a run from its speed plan event's `flops` and a tokens/s over all its GPUs."""
    info = (state_speed_plan or {}).get("flops") or {}
    peak = info.get("peak_flops")
    if not isinstance(peak, (int, float)) or isinstance(peak, bool):
        return None
    return utilisation(tokens_per_s, info.get("model_per_token"), peak * max(1, gpus))
