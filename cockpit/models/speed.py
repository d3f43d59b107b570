"""The speed model: training tokens per second on a card, then time and cost of a run.

Pure Python, no torch. The host queues a micro-batch's kernels while the GPU runs earlier
ones, so a micro-batch takes the longer of two times:

- host: Python and kernel launches, per decoder layer and pass (forward, backward, and the
  recomputation under gradient checkpointing), more for each 4-bit linear (bitsandbytes'
  autograd function) and each LoRA-adapted layer (peft's wrapper, dropout); the same on
  every card. It is why a 7B QLoRA step takes ~0.25 s on an H200 whether it carries 512 or
  2048 tokens;
- device: the matmul FLOPs of forward and backward (2 FLOPs per weight per token per pass:
  forward, the input gradient, the weight gradient only where the weight trains, one more
  forward under checkpointing) at the card's dense bf16 peak (its FP32 rate for an fp32 run)
  times an efficiency that grows with the tokens in the micro-batch (eff = EFF_MAX * T /
  (T + T_HALF x rate / the H200's bf16 rate): a fixed time per kernel), plus causal
  attention (quadratic in the sequence) at EFF_MAX; QLoRA's dequantisation (each pass
  writes every 4-bit weight out in 16 bits and reads it back) and the adapters' memory
  traffic, at the card's bandwidth.

An optimizer step takes the longer of its traffic (counted kernel by kernel, OPTIMIZER_BYTES) at
the card's bandwidth and the trainer's own host time per step, which overlap. The
coefficients are fitted on runs of the product on H200s (bench/fit_speed.py,
docs/estimator.md). Other cards scale the device time by their dense bf16 TFLOPS and
bandwidth and keep the host time: an extrapolation, labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit.models.memory import Workload, check

EFF_MAX = 0.670  # share of the dense bf16 peak that large matmuls reach (fitted, bench/fit_speed.py)
T_HALF = 1747.0  # tokens per micro-batch at which half of EFF_MAX is reached on the H200 in bf16 (fitted)
REFERENCE_BF16_TFLOPS = 989.0  # the H200's dense bf16 rate, the card T_HALF was fitted on
ADAPTER_BYTES = 186.5  # bytes moved per token per adapted input feature, forward + backward (fitted)
HOST_LAYER_S = 0.000524  # host time per decoder layer per pass (fitted)
HOST_KBIT_LINEAR_S = 0.000245  # more host time per quantised linear per pass (fitted)
HOST_ADAPTER_S = 0.000501  # more host time per LoRA-adapted linear per pass (fitted)
STEP_OVERHEAD_S = 0.0741  # host time per optimizer step: the trainer's loop, logging, clipping (fitted)
DEQUANT_BYTES = {4: 4.5, 8: 5.0}  # per weight per pass: read packed, write 16-bit, read back
# bytes moved per trainable (fp32) parameter per optimizer step, counted kernel by kernel, each with
# the gradient clipping HF Trainer runs first (max_grad_norm: foreach norm reads g, foreach mul reads
# and writes g: 12 B):
# - adamw_torch, foreach (torch/optim/adam.py _multi_tensor_adam): lerp_ m (r m, g; w m: 12), mul_ v
#   (8), addcmul_ v (r v, g; w v: 12), sqrt v -> t (8), div_ t (8), add_ t eps (8), addcdiv_ p
#   (r p, m, t; w p: 16): 72 + 12 = 84;
# - adamw_torch_fused and bitsandbytes' paged 32-bit: one kernel reads p, g, m, v and writes p, m, v:
#   28 + 12 = 40;
# - bitsandbytes 8-bit (blockwise): reads p, g and two 1-byte states, writes p and the states: 16 + 12
OPTIMIZER_BYTES = {
    "adamw_torch": 84,
    "adamw_torch_fused": 40,
    "adamw_8bit": 28,
    "paged_adamw_8bit": 28,
    "paged_adamw_32bit": 40,
    "adafactor": 24,
    "sgd": 20,
}
# NVIDIA H100 SXM / H200 datasheets: FP32 67 TFLOPS, BF16 tensor core 989 TFLOPS dense (1979 with
# sparsity); the fp32 rate of a card whose own figure is not given
FP32_SHARE_OF_BF16_DENSE = 67 / 989
CALIBRATED_ON = "NVIDIA H200 (SXM, 141 GB), torch 2.11 + CUDA 13, TRL 1.16, 2026-11-30 and 2026-12-02"


@dataclass(frozen=True)
class CardSpeed:
    """What the model needs of a card; `catalog.Card` has these fields."""

    name: str
    bf16_dense_tflops: float
    bandwidth_gbs: float
    fp32_tflops: float | None = None  # dense FP32 (CUDA cores), where the card's datasheet gives it


def card_fp32_flops(card: CardSpeed) -> float:
    """The fp32 matmul rate: torch leaves TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32
    is False unless set, and the trainer does not set it), so an fp32 run multiplies on the CUDA
    cores at the card's dense FP32 rate, not on the tensor cores. A card without that figure gets the
    H100/H200 datasheets' FP32 share of the dense BF16 rate (67 of 989 TFLOPS), stated here."""
    fp32 = getattr(card, "fp32_tflops", None)  # the catalog's Card does not carry it yet
    if fp32:
        return fp32 * 1e12
    return card.bf16_dense_tflops * 1e12 * FP32_SHARE_OF_BF16_DENSE


@dataclass(frozen=True)
class SpeedEstimate:
    tokens_per_s: float
    micro_batch_s: float
    optimizer_step_s: float
    parts_s: dict[str, float]  # one micro-batch: host, and the device's arithmetic, dequantisation, adapters
    step_s: float  # one optimizer step: every micro-batch of a gradient-accumulation cycle
    bound: str  # what sets a micro-batch's time: host (overhead), compute, memory
    card: str


@dataclass(frozen=True)
class RunEstimate:
    speed: SpeedEstimate
    tokens: int  # tokens processed: dataset tokens x epochs
    time_s: float
    cost_usd: float | None


def matmul_flops_per_token(w: Workload) -> float:
    """Matmul FLOPs of one token through the model's linears, forward and backward (and recompute)."""
    s = w.shape
    linear = s.num_layers * s.layer_linear_params + s.vocab_size * s.hidden_size  # lm_head is a matmul
    passes = 2 + (1 if w.method == "full" else 0) + (1 if w.gradient_checkpointing else 0)
    flops = 2.0 * linear * passes
    if w.method != "full":  # the adapters' own matmuls: forward, input and weight gradients
        flops += 2.0 * 3 * w.shape.lora_params(w.lora_r, w.lora_targets)
    return flops


def attention_flops_per_token(w: Workload) -> float:
    """Causal attention (QK^T and AV over half the square): forward, backward (~2.5x), recompute."""
    passes = 1 + 2.5 + (1 if w.gradient_checkpointing else 0)
    return 2.0 * w.shape.num_layers * w.seq_len * w.shape.q_out * passes


def adapted_input_features(w: Workload) -> int:
    if w.method == "full":
        return 0
    shapes_ = w.shape.linear_shapes()
    names = list(shapes_) if w.lora_targets == "all-linear" else [t for t in w.lora_targets if t in shapes_]
    return w.shape.num_layers * sum(shapes_[n][0] for n in names)


def adapted_linears(w: Workload) -> int:
    if w.method == "full":
        return 0
    names = w.shape.linear_shapes()
    return w.shape.num_layers * (
        len(names) if w.lora_targets == "all-linear" else len(set(w.lora_targets) & set(names))
    )


def trainable_params(w: Workload) -> int:
    return w.shape.params if w.method == "full" else w.shape.lora_params(w.lora_r, w.lora_targets)


def optimizer_step_s(traffic_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """An optimizer step: the host queues the optimizer's kernels and goes on with the trainer's
    per-step work (its loop, logging, clipping's bookkeeping) while the GPU runs them, so the step
    takes the longer of the two, as a micro-batch does."""
    return max(STEP_OVERHEAD_S, traffic_bytes / bandwidth_bytes_per_s)


def estimate_speed(w: Workload, card: CardSpeed) -> SpeedEstimate:
    """Training throughput of `w` on `card`, in tokens processed per second (padding included)."""
    check(w)
    if card.bf16_dense_tflops <= 0 or card.bandwidth_gbs <= 0:
        raise ValueError(f"{card.name}: needs its dense bf16 TFLOPS and memory bandwidth")
    tokens = w.tokens_per_micro_batch
    peak_flops = card.bf16_dense_tflops * 1e12
    if w.precision == "fp32":
        peak_flops = card_fp32_flops(card)
    bandwidth = card.bandwidth_gbs * 1e9
    # a fixed time per kernel beside its work: the faster the card (or the slower the number format),
    # the more tokens a micro-batch needs to hide it, so T_HALF, fitted on the H200 in bf16, scales
    # with the rate the matmuls run at
    efficiency = EFF_MAX * tokens / (tokens + T_HALF * peak_flops / (REFERENCE_BF16_TFLOPS * 1e12))
    arithmetic_s = matmul_flops_per_token(w) * tokens / (peak_flops * efficiency)
    arithmetic_s += attention_flops_per_token(w) * tokens / (peak_flops * EFF_MAX)
    passes = 2 + (1 if w.gradient_checkpointing else 0)  # forward, backward, recompute
    dequant_s = 0.0
    kbit_linears = 0
    if w.method == "qlora":
        quantised = w.shape.num_layers * w.shape.layer_linear_params
        dequant_s = passes * quantised * DEQUANT_BYTES[w.quant_bits] / bandwidth
        kbit_linears = w.shape.num_layers * len(w.shape.linear_shapes())
    adapters_s = tokens * adapted_input_features(w) * ADAPTER_BYTES / bandwidth
    host_s = passes * (
        w.shape.num_layers * HOST_LAYER_S
        + kbit_linears * HOST_KBIT_LINEAR_S
        + adapted_linears(w) * HOST_ADAPTER_S
    )
    parts = {
        "host": host_s,
        "arithmetic": arithmetic_s,
        "dequantisation": dequant_s,
        "adapters": adapters_s,
    }
    device_s = arithmetic_s + dequant_s + adapters_s
    micro_s = max(host_s, device_s)
    optimizer_s = optimizer_step_s(trainable_params(w) * OPTIMIZER_BYTES[w.optimizer], bandwidth)
    step_s = micro_s * w.grad_accum + optimizer_s
    if host_s >= device_s:
        bound = "overhead"
    else:
        bound = "compute" if arithmetic_s >= dequant_s + adapters_s else "memory"
    return SpeedEstimate(
        tokens_per_s=tokens * w.grad_accum / step_s,
        micro_batch_s=micro_s,
        optimizer_step_s=optimizer_s,
        parts_s=parts,
        step_s=step_s,
        bound=bound,
        card=card.name,
    )


def estimate_run(
    w: Workload, card: CardSpeed, dataset_tokens: int, epochs: float, price_per_hour: float | None
) -> RunEstimate:
    """Time and cost of training on `dataset_tokens` (as the trainer feeds them: padded, or
    packed) for `epochs`, at `price_per_hour` (None: no cost)."""
    if dataset_tokens <= 0 or epochs <= 0:
        raise ValueError("dataset tokens and epochs must be positive")
    speed = estimate_speed(w, card)
    tokens = int(dataset_tokens * epochs)
    time_s = tokens / speed.tokens_per_s
    cost = None if price_per_hour is None else price_per_hour * time_s / 3600
    return RunEstimate(speed=speed, tokens=tokens, time_s=time_s, cost_usd=cost)


def speed_inputs(card: CardSpeed) -> dict:
    """The stated inputs of a speed figure, for --json and the screens."""
    return {
        "card": card.name,
        "bf16_dense_tflops": card.bf16_dense_tflops,
        "bandwidth_gbs": card.bandwidth_gbs,
        "calibrated_on": CALIBRATED_ON,
        "extrapolated": "h200" not in card.name.lower(),
    }
