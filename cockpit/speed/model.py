"""The speed model: training tokens per second on a card, then time and cost of a run.

Pure Python, no torch. The host queues kernels while the GPU runs earlier ones, but the trainer
makes it wait for the GPU twice a micro-batch: TRL's SFTTrainer reads its per-step metrics after
the forward (`.item()` on the entropy and token accuracy, trl/trainer/sft_trainer.py
compute_loss) and HF Trainer checks the loss for nan/inf after the backward
(`logging_nan_inf_filter`, on by default). So a micro-batch takes, for its forward and then for
its backward, the longer of two times:

- host: Python and kernel launches, per decoder layer and forward pass (the recomputation under
  gradient checkpointing is one more), more for each 4-bit linear (bitsandbytes' autograd
  function) and each LoRA-adapted layer (peft's wrapper, dropout); the backward, run by autograd's
  C++ engine, takes a share of that (BACKWARD_HOST_SHARE); the same on every card. It is why
  a 7B QLoRA step takes ~0.25 s on an H200 whether it carries 512 or 2048 tokens;
- device: the matmul FLOPs (2 per weight per token per pass: forward, the input gradient, the weight
  gradient only where the weight trains, one more forward under checkpointing; TRL's fused LM head
  recomputes its logits in the backward, never under checkpointing) at the card's dense bf16 peak
  (its FP32 rate for an fp32 run) times an efficiency that grows with the tokens in the micro-batch
  (eff = EFF_MAX * T / (T + T_HALF x rate / the H200's bf16 rate): a fixed time per kernel), plus
  causal attention (quadratic in the sequence) as its kernel was timed on its own
  (ATTENTION_KERNELS: a fixed time per call, then a share of the peak that grows with the row:
  measured) times ATTENTION_SCALE (fitted: slower in a step than alone); and at the card's
  bandwidth, the blocks' elementwise kernels (counted op by op, fewer bytes with Liger's fused
  kernels, at the share ELEMENTWISE_EFF of the bandwidth that small kernels reach), the loss
  kernels' passes over the logits, QLoRA's dequantisation (each pass writes every 4-bit weight out
  in 16 bits and reads it back) and the adapters' traffic (per input and output feature). Liger's
  kernels also take a share of a layer's host time (HOST_LIGER_SHARE); the fused LoRA layer
  (speed.backend) a measured share of the adapters' host time and traffic.

Then, once per optimizer step and one after the other: the optimizer's step as it was timed
(OPTIMIZER_RATES, measured: a time per tensor, bitsandbytes' synchronisation after each among it,
then its traffic, counted kernel by kernel in OPTIMIZER_BYTES, at the optimizer's share of the
bandwidth), which the trainer's logging waits for; and the trainer's own per-step host time, with
the GPU idle. The coefficients are fitted on runs of the
product on H200s (bench/fit_speed.py, docs/estimator.md). Other cards scale the device time by
their dense bf16 TFLOPS and bandwidth and keep the host time: an extrapolation, labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cockpit.models.memory import Workload, check, forward_workload

if TYPE_CHECKING:  # the speed model reads a catalog Card as it is (the fields CardSpeed names)
    from cockpit.gpus.card import Card

# the copy of the checkpointed layers' inputs back to the GPU from pinned host memory, one way:
# PCIe 4.0 x16's ~25 GB/s (a stated figure, not fitted; PCIe 5.0 cards copy faster). The copy out
# runs on a side stream under the next layers' compute and is not counted.
HOST_LINK_BYTES_PER_S = 25e9
EFF_MAX = 0.9509  # share of the dense bf16 peak that large matmuls reach (fitted, bench/fit_speed.py)
T_HALF = 1109  # tokens per micro-batch at which half of EFF_MAX is reached on the H200 in bf16 (fitted)
REFERENCE_BF16_TFLOPS = 989.0  # the H200's dense bf16 rate, the card T_HALF was fitted on
ADAPTER_BYTES = 47.71  # bytes per token per adapted input and output feature, forward + backward (fitted)
HOST_LAYER_S = 0.002276  # host time per decoder layer per forward pass (fitted)
# a decoder layer's host time with Liger's fused RMSNorm, RoPE and SwiGLU, as a share of HOST_LAYER_S: in
# HF's Llama block the two norms are 8 aten ops each, rotary 16 and the gated activation 2 of the layer's
# ~53 (a CPU profile of LlamaDecoderLayer's forward), where Liger launches one Triton kernel each. Fitted
# above 1 since the host probe's runs joined the fit: the four Triton launches (each with its Python-side
# argument checks and grid) cost the host more than the ~34 aten ops they replace
HOST_LIGER_SHARE = 1.285
HOST_KBIT_LINEAR_S = 2.197e-05  # more host time per quantised linear per pass (fitted: small since the probe)
HOST_ADAPTER_S = 0.0002763  # more host time per LoRA-adapted linear per pass (fitted)
# the fused LoRA layer (train_backend/speed/fused_lora.py, speed.backend: auto) as a share of peft's own,
# by method: its extra host time per adapted linear over a forward and backward, and its extra
# device time (ADAPTER_BYTES), each over the bare base, timed in one run against peft's on one H200
# (bench/lora_kernel_rate.py --solve; measured, not fitted). 4-bit bases: the mean of two machines'
# records, bench/results/2026-12-04-lora-kernel-rate-h200.json and ...-rate-2-h200.json (host 0.513
# and 0.799: the host's share moves with the machine; device 0.356 and 0.372); 16-bit: ...-lora-h200.json.
# For LoRA its Python backward costs the host about what peft's C++ autograd nodes do; for QLoRA it
# also replaces bitsandbytes' own autograd function
FUSED_ADAPTER_HOST_SHARE = {"qlora": 0.656, "lora": 0.9576}
FUSED_ADAPTER_BYTES_SHARE = {"qlora": 0.3639, "lora": 0.4003}
# host time per optimizer step, GPU idle: logging, callbacks, next batch (fitted: ~0, the per-micro-batch
# host terms carry it since the 2026-12-03 points joined the fit)
STEP_OVERHEAD_S = 1.16e-13
# the backward's host time per layer, as a share of the forward's: autograd's engine runs it in C++,
# with Python only in custom autograd functions (bitsandbytes' MatMul4Bit) (fitted)
BACKWARD_HOST_SHARE = 0.9972
# the host's speed: train_backend/speed/host_probe.py times a fixed host-bound forward and backward (ms per
# iteration); the host terms above are for a host that takes HOST_PROBE_REFERENCE_MS, and scale by a
# box's own figure over it (CardSpeed.host_scale). Fitted with them: the runs measured before the probe
# existed count as one host of that speed, those after it at their own probe's figure (fitted: the
# H200 boxes of 2026-12-03's evening read 2.98-5.37 ms in the trainer, 3.34-4.51 on their own)
HOST_PROBE_REFERENCE_MS = 3.805
HOST_SCALE_RANGE = (0.25, 8.0)  # a probe outside this is not taken as the host's speed
# how far one box's probe moves between runs with nothing changed, over the reference: the H200 boxes
# of 2026-12-03 read 2.98-5.37 ms in the trainer (x0.78-1.41), one of 2026-12-04 4.65-6.35 (x1.67), one
# H100 6.06 then 4.27-4.37 (x1.59); a host slowed on purpose read 7.07 and 8.47 (x1.86, x2.23). A
# reading inside this ratio of the reference cannot be told from noise, so speed: auto ranks its splits
# at the reference host there (host_rank_scale); the predicted tokens/s still scales by the reading
HOST_NOISE_RATIO = 1.75


@dataclass(frozen=True)
class AttentionKernel:
    """One pass of the attention kernel in one decoder layer: a fixed time per call (the launch, the
    last partial wave) and its counted FLOPs at a share of the peak that grows with the row's length
    (a row's queries are the kernel's blocks of work, each over the keys before it):
    share_max x seq / (seq + half_seq)."""

    fixed_s: float
    share_max: float
    half_seq: float

    def seconds(self, flops: float, seq: float, peak_flops: float) -> float:
        return self.fixed_s + flops / (peak_flops * self.share_max * seq / (seq + self.half_seq))


# PyTorch's SDPA kernel as transformers calls it (causal, no mask, grouped-query heads with enable_gqa),
# (forward, backward) by head width, timed on its own on one H200 (SXM, torch 2.11 + CUDA 13) over rows of
# 256-16384 tokens and 4096-16384 tokens a call, four head layouts (bench/attention_rate.py,
# bench/results/2026-12-04-attention-rate-h200.json; these constants from its --fit: log error rms
# 0.03-0.10 over 16 rows of width 64 and 48 of 128, the worst +0.26 on calls of under 0.5 ms).
# Measured constants, not fitted to training runs: they give attention's shape by row length and head
# width; ATTENTION_SCALE, fitted, its level in a training step. Another head width takes the constants
# between 64 and 128 by proportion (clamped); another card the same shares of its own peak, the same
# fixed time
ATTENTION_KERNELS = {
    64: (AttentionKernel(7.981e-05, 0.4567, 368.0), AttentionKernel(1.201e-04, 0.5037, 1047.0)),
    128: (AttentionKernel(1.129e-04, 0.6207, 155.0), AttentionKernel(2.309e-04, 0.6316, 681.0)),
}
# a training step's attention time over the kernel's own as timed alone (fitted, bench/fit_speed.py):
# the same kernel among the step's other work (its inputs cold in the cache, the launches around it)
ATTENTION_SCALE = 1.471
ELEMENTWISE_EFF = 0.4384  # share of the card's bandwidth the blocks' small elementwise kernels reach (fitted)
ELEMENTWISE_BACKWARD = 2  # an elementwise op's backward reads its saved input(s) and the output's
# gradient and writes the input's gradient: about twice its forward's traffic (a counted approximation)
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
# An optimizer step as HF Trainer runs it (clip_grad_norm_, then step()) on one H200, by optimizer:
# (time per parameter tensor, the share of the datasheet bandwidth its counted OPTIMIZER_BYTES move
# at), from fp32 tensors shaped as Llama 3.2 1B's 146 (1.24B parameters) and as 448 LoRA adapters'
# (29M), the two unknowns solved from the two (bench/optimizer_rate.py --solve of
# bench/results/2026-12-04-optimizer-rate-h200.json). Measured, not fitted. bitsandbytes' optimizers
# step one tensor at a time and synchronise the device after each (Optimizer8bit.step: `sync_gpu(p)`
# in the loop): ~49 us a tensor; its blockwise 8-bit kernels move their bytes at under a fifth of the
# bandwidth. adafactor and sgd (torch's own, not timed) take adamw_torch's figures
OPTIMIZER_RATES = {
    "adamw_torch": (12.25e-6, 0.7226),
    "adamw_torch_fused": (7.12e-6, 0.7534),
    "adamw_8bit": (48.72e-6, 0.1809),
    "paged_adamw_8bit": (49.07e-6, 0.1681),
    "paged_adamw_32bit": (47.39e-6, 0.3754),
}
# NVIDIA H100 SXM / H200 datasheets: FP32 67 TFLOPS, BF16 tensor core 989 TFLOPS dense (1979 with
# sparsity); the fp32 rate of a card whose own figure is not given
FP32_SHARE_OF_BF16_DENSE = 67 / 989
CALIBRATED_ON = "NVIDIA H200 (SXM, 141 GB), torch 2.11 + CUDA 13, TRL 1.16, 2026-11-30 to 2026-12-04"


@dataclass(frozen=True)
class CardSpeed:
    """What the model needs of a card; `catalog.Card` has these fields."""

    name: str
    bf16_dense_tflops: float
    bandwidth_gbs: float
    fp32_tflops: float | None = None  # dense FP32 (CUDA cores), where the card's datasheet gives it
    # the host's time for the same work as the host the model was fitted on: 1.0 for a catalog card,
    # the probe's figure over HOST_PROBE_REFERENCE_MS for the box a run is on (host_scale_for)
    host_scale: float = 1.0


def host_scale_for(probe_ms: float | None) -> float:
    """The host terms' scale for a box whose probe (train_backend/speed/host_probe.py) took `probe_ms`: its
    time over the reference host's, 1.0 without a probe or for a figure outside HOST_SCALE_RANGE."""
    if not probe_ms or probe_ms <= 0:
        return 1.0
    scale = probe_ms / HOST_PROBE_REFERENCE_MS
    low, high = HOST_SCALE_RANGE
    return scale if low <= scale <= high else 1.0


def host_rank_scale(host_scale: float) -> float:
    """The host scale speed: auto ranks its splits at: the reference host's (1.0) for a reading within
    HOST_NOISE_RATIO of it, which one box's probe moves by between runs, so that such noise does not
    change the plan; the reading's own scale beyond it (a host clearly slower or faster)."""
    return 1.0 if 1 / HOST_NOISE_RATIO <= host_scale <= HOST_NOISE_RATIO else host_scale


def card_fp32_flops(card: CardSpeed | Card) -> float:
    """The fp32 matmul rate: torch leaves TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32
    is False unless set, and the trainer does not set it), so an fp32 run multiplies on the CUDA
    cores at the card's dense FP32 rate, not on the tensor cores. A card without that figure gets the
    H100/H200 datasheets' FP32 share of the dense BF16 rate (67 of 989 TFLOPS), stated here."""
    fp32: float | None = getattr(card, "fp32_tflops", None)  # the catalog's Card does not carry it yet
    if fp32:
        return fp32 * 1e12
    return card.bf16_dense_tflops * 1e12 * FP32_SHARE_OF_BF16_DENSE


@dataclass(frozen=True)
class SpeedEstimate:
    tokens_per_s: float
    micro_batch_s: float
    optimizer_step_s: float
    parts_s: dict[str, float]  # one micro-batch: host; the device's arithmetic, logits, elementwise, ...
    step_s: float  # one optimizer step: every micro-batch of a gradient-accumulation cycle
    bound: str  # what sets a micro-batch's time: host (overhead), compute, memory
    card: str


@dataclass(frozen=True)
class RunEstimate:
    speed: SpeedEstimate
    tokens: int  # tokens processed: dataset tokens x epochs
    time_s: float
    cost_usd: float | None


def lm_head_passes(w: Workload) -> tuple[int, int]:
    """(forward, backward) matmul passes of the LM head. TRL 1.16's SFTTrainer (the product) patches a
    fused LM head (trl/trainer/utils.py add_fused_lm_head, trl/kernels/chunked_logprob.py): its
    backward recomputes every logits tile before the input gradient (and the weight gradient, when
    the head trains), so 1 forward and 2 (3) backward passes; a plain HF Trainer keeps the logits:
    1 and 1 (2). Gradient checkpointing wraps the decoder layers only, never the head."""
    backward = 1 + (1 if w.method == "full" else 0) + (1 if w.trainer == "trl" else 0)
    return 1, backward


def layer_passes(w: Workload) -> tuple[int, int]:
    """(forward, backward) matmul passes of a decoder layer's linears: the backward computes the input
    gradient, the weight gradient where the weight trains, and first recomputes the forward under
    gradient checkpointing."""
    return 1, 1 + (1 if w.method == "full" else 0) + (1 if w.gradient_checkpointing else 0)


def matmul_flops_per_token(w: Workload) -> tuple[float, float]:
    """Matmul FLOPs of one token through the model's linears and the LM head, (forward, backward)."""
    s = w.shape
    layers = s.num_layers * s.layer_linear_params
    head = s.vocab_size * s.hidden_size  # tied or not, the head is one vocab x hidden matmul
    (layer_f, layer_b), (head_f, head_b) = layer_passes(w), lm_head_passes(w)
    forward = 2.0 * (layers * layer_f + head * head_f)
    backward = 2.0 * (layers * layer_b + head * head_b)
    if w.method != "full":  # the adapters' own matmuls: forward; input and weight gradients (+ recompute)
        adapters = 2.0 * w.shape.lora_params(w.lora_r, w.lora_targets)
        forward += adapters
        backward += adapters * (2 + (1 if w.gradient_checkpointing else 0))
    return forward, backward


def attention_kernels(head_dim: int) -> tuple[AttentionKernel, AttentionKernel]:
    """The (forward, backward) kernel constants for a head width (ATTENTION_KERNELS)."""
    if head_dim in ATTENTION_KERNELS:
        return ATTENTION_KERNELS[head_dim]
    low, high = min(ATTENTION_KERNELS), max(ATTENTION_KERNELS)
    t = min(max((head_dim - low) / (high - low), 0.0), 1.0)

    def between(a: AttentionKernel, b: AttentionKernel) -> AttentionKernel:
        return AttentionKernel(*(x + t * (y - x) for x, y in zip(vars(a).values(), vars(b).values())))

    lows, highs = ATTENTION_KERNELS[low], ATTENTION_KERNELS[high]  # each (forward, backward)
    return between(lows[0], highs[0]), between(lows[1], highs[1])


def attention_s(w: Workload, peak_flops: float) -> tuple[float, float]:
    """The attention kernels' time in one micro-batch, (forward, backward): per decoder layer one
    call each way (attention_flops_per_token), the backward's call plus the forward recomputed
    under checkpointing."""
    forward_k, backward_k = attention_kernels(w.shape.head_dim)
    flops_f, flops_b = attention_flops_per_token(w)
    tokens, layers = w.tokens_per_micro_batch, w.shape.num_layers
    recompute = 1 if w.gradient_checkpointing else 0
    backward_only = flops_b - recompute * flops_f  # the recomputed forward is timed as a forward
    f = layers * forward_k.seconds(tokens * flops_f / layers, w.seq_len, peak_flops)
    b = layers * backward_k.seconds(tokens * backward_only / layers, w.seq_len, peak_flops)
    return ATTENTION_SCALE * f, ATTENTION_SCALE * (b + recompute * f)


def attention_flops_per_token(w: Workload) -> tuple[float, float]:
    """Causal attention (QK^T and AV over half the square), (forward, backward): the backward ~2.5x
    the forward, plus the recomputed forward under checkpointing."""
    one = 2.0 * w.shape.num_layers * w.seq_len * w.shape.q_out
    return one, one * (2.5 + (1 if w.gradient_checkpointing else 0))


def logits_bytes_per_entry(w: Workload) -> tuple[float, float]:
    """Memory traffic of the loss outside the LM head's matmuls, per token per vocabulary entry,
    (forward, backward). TRL's fused head: a Triton kernel folds each 16-bit logits tile into
    running sums in the forward (reads it: 2 B) and turns the recomputed tile into its gradient in
    place in the backward (reads and writes it: 4 B). A plain HF Trainer (transformers'
    ForCausalLMLoss): the fp32 upcast (read 2, write 4), log-softmax (read 4, write 4) forward; its
    gradient (read 4 + 4, write 4) and the cast back (read 4, write 2) backward."""
    return (2.0, 4.0) if w.trainer == "trl" else (14.0, 18.0)


def elementwise_bytes_per_token(w: Workload) -> float:
    """Bytes a decoder block's memory-bound kernels move per token in the forward, counted op by op
    from transformers' Llama/Qwen2 block (h hidden, q and kv the attention widths, i the MLP's, a the
    activations' bytes):
    - each RMSNorm (x2): upcast to fp32 (read a, write 4), square (4, 4), mean (4), scale (4, 4),
      cast back and multiply by the weight (a, a; a, a): 26 + 4a bytes per hidden feature;
    - the residual adds (x2): read two, write one: 3a each;
    - rotary on q and k: x cos, rotate_half (slice and negate, concatenate), x sin, add: 10 accesses;
    - attention's kernel reads q, k, v and writes its output, which is transposed back (read, write):
      4q + 2kv accesses;
    - SiLU on the gate (read, write) and its product with up (read two, write one): 5 accesses.
    A full fine-tune in 16 bits through TRL keeps fp32 weights under autocast (the memory model's
    master weights): the residual stream is fp32 (the embeddings' output), so the adds and the
    norms' outputs are fp32, and each of the 5 linears that reads a normed input casts it to 16 bits
    (read 4, write 2). `--trainer hf` loads the weights in the run's dtype: no fp32 stream.
    Liger's kernels (liger_kernel/ops: rms_norm.py, rope.py, swiglu.py) keep the intermediates in
    registers: each norm reads its input and writes its output (the fp32 upcast inside the kernel),
    rotary rewrites q and k in place (read, write: 2 accesses), and SiLU-and-multiply reads the gate
    and up and writes their product (3 accesses)."""
    s = w.shape
    h, q, kv, i = s.hidden_size, s.q_out, s.kv_out, s.intermediate_size
    a = 4 if w.precision == "fp32" else 2
    residual = 4 if w.method == "full" and w.trainer == "trl" else a
    adds = 2 * 3 * h * residual
    casts = 5 * h * (4 + 2) if residual != a else 0
    attention = 4 * q + 2 * kv
    if w.liger:
        norms = 2 * h * (residual + a)
        return norms + adds + casts + a * (2 * (q + kv) + attention + 3 * i)
    norms = 2 * h * (26 + 2 * residual + 2 * a)
    return norms + adds + casts + a * (10 * (q + kv) + attention + 5 * i)


def adapted_features(w: Workload) -> int:
    """Input plus output features of the adapted linears: peft's LoRA layer reads the input for the
    dropout and writes the dropped copy that lora_A reads (in), and adds lora_B's output into the base
    layer's (read both, write one: out), each with its backward."""
    if w.method == "full":
        return 0
    shapes_ = w.shape.linear_shapes()
    names = list(shapes_) if w.lora_targets == "all-linear" else [t for t in w.lora_targets if t in shapes_]
    return w.shape.num_layers * sum(shapes_[n][0] + shapes_[n][1] for n in names)


def adapted_linears(w: Workload) -> int:
    if w.method == "full":
        return 0
    names = w.shape.linear_shapes()
    return w.shape.num_layers * (
        len(names) if w.lora_targets == "all-linear" else len(set(w.lora_targets) & set(names))
    )


def trainable_params(w: Workload) -> int:
    return w.shape.params if w.method == "full" else w.shape.lora_params(w.lora_r, w.lora_targets)


def trainable_tensors(w: Workload) -> int:
    """Parameter tensors the optimizer steps: every weight, norm and bias of a full fine-tune (one
    tensor for tied embeddings); lora_A and lora_B of each adapted linear."""
    if w.method != "full":
        return 2 * adapted_linears(w)
    s = w.shape
    per_layer = len(s.linear_shapes()) + 2 + (3 if s.attention_bias else 0) + (2 if s.qk_norm else 0)
    return s.num_layers * per_layer + 1 + (0 if s.tie_embeddings else 1) + 1  # embeddings, head, final norm


def optimizer_rate(optimizer: str) -> tuple[float, float]:
    """(seconds per parameter tensor, share of the bandwidth) of an optimizer's step (OPTIMIZER_RATES)."""
    return OPTIMIZER_RATES.get(optimizer, OPTIMIZER_RATES["adamw_torch"])


def optimizer_step_s(
    traffic_bytes: float,
    bandwidth_bytes_per_s: float,
    tensors: int = 0,
    host_scale: float = 1.0,
    optimizer: str = "adamw_torch",
) -> float:
    """An optimizer step and the trainer's own per-step work, one after the other: HF Trainer's
    logging (`.item()` on the loss, every step at logging_steps 1) waits for the optimizer's kernels,
    and the host's per-step work (logging, callbacks, the next batch) then runs with the GPU idle
    (STEP_OVERHEAD_S). The step itself as it was timed (OPTIMIZER_RATES): a time per parameter tensor
    (`tensors`; the launches, bitsandbytes' synchronisation after each), then its counted traffic at
    the optimizer's share of the bandwidth. The host's parts scale by `host_scale` (CardSpeed.host_scale)."""
    per_tensor_s, share = optimizer_rate(optimizer)
    host = STEP_OVERHEAD_S + tensors * per_tensor_s
    return host * host_scale + traffic_bytes / (bandwidth_bytes_per_s * share)


def micro_batch_s(w: Workload, forward: tuple[float, float], backward: tuple[float, float]) -> float:
    """One micro-batch from the (host, device) times of its forward and its backward. HF Trainer
    checks the loss for nan/inf after the backward (`logging_nan_inf_filter`, on by default: a
    `bool()` of a GPU tensor), and TRL's compute_loss reads its per-step metrics after the forward
    (`.item()` on the entropy and token accuracy): under TRL the host's launches overlap the device's
    work within the forward and within the backward, never across them; a plain HF Trainer's forward
    and backward overlap as one, and so do the product's where it reads those figures at logging steps
    instead (speed.read_figures: at_log, the default, train_backend.step_figures; the coefficients
    were fitted on runs that waited twice a micro-batch, docs/estimator.md says how it holds)."""
    if w.trainer == "trl" and not w.figures_at_log:
        return max(forward) + max(backward)
    return max(forward[0] + backward[0], forward[1] + backward[1])


def estimate_speed(w: Workload, card: CardSpeed | Card) -> SpeedEstimate:
    """Training throughput of `w` on `card`, in tokens processed per second (padding included)."""
    check(w)
    if card.bf16_dense_tflops <= 0 or card.bandwidth_gbs <= 0:
        raise ValueError(f"{card.name}: needs its dense bf16 TFLOPS and memory bandwidth")
    policy, w = w, forward_workload(w)  # a pair's chosen and rejected: one forward of twice the rows
    tokens = w.tokens_per_micro_batch  # of the forward workload: policy.forward_tokens_per_micro_batch
    peak_flops = card.bf16_dense_tflops * 1e12
    if w.precision == "fp32":
        peak_flops = card_fp32_flops(card)
    bandwidth = card.bandwidth_gbs * 1e9
    device, device_f, device_b = _device_s(w, peak_flops, bandwidth)
    host_scale = getattr(card, "host_scale", 1.0)  # the catalog's Card: the reference host
    host_f = host_pass_s(w, host_scale)
    host_b = host_f * (BACKWARD_HOST_SHARE + (1 if w.gradient_checkpointing else 0))
    micro_s = micro_batch_s(w, (host_f, device_f), (host_b, device_b))
    # preference objectives: forwards without gradients (the reference, KTO's KL batch), each waited for
    no_grad_s = no_grad_forwards(policy) * max(host_f, device_f)
    micro_s += no_grad_s
    host_copy = 0.0
    if w.gradient_checkpointing and w.checkpoint_offload:  # each block's input back before its recompute
        residual = 4 if w.precision == "fp32" else 2
        host_copy = tokens * w.shape.num_layers * w.shape.hidden_size * residual / HOST_LINK_BYTES_PER_S
        micro_s += host_copy
    parts = {"host": host_f + host_b, **device, "host_copy": host_copy, "no_grad_forwards": no_grad_s}
    optimizer_s = optimizer_step_s(
        trainable_params(w) * OPTIMIZER_BYTES[w.optimizer],
        bandwidth,
        trainable_tensors(w),
        host_scale,
        w.optimizer,
    )
    step_s = micro_s * w.grad_accum + optimizer_s
    if host_f + host_b >= device_f + device_b:
        bound = "overhead"
    else:
        memory = parts["logits"] + parts["elementwise"] + parts["dequantisation"] + parts["adapters"]
        bound = "compute" if parts["arithmetic"] >= memory else "memory"
    return SpeedEstimate(
        tokens_per_s=tokens * w.grad_accum / step_s,
        micro_batch_s=micro_s,
        optimizer_step_s=optimizer_s,
        parts_s=parts,
        step_s=step_s,
        bound=bound,
        card=card.name,
    )


def no_grad_forwards(w: Workload) -> int:
    """Forwards without gradients a micro-batch adds, each as long as the policy's forward (TRL 1.16):
    DPO's reference over chosen and rejected; KTO's KL batch through the policy, and the reference
    over the batch and the KL batch; none with precomputed reference log-probs (but KTO's KL) or
    for ORPO."""
    reference = w.reference not in ("none", "precomputed")
    if w.objective == "dpo":
        return 1 if reference else 0
    if w.objective == "kto":
        return 1 + (2 if reference else 0)
    return 0


def host_pass_s(w: Workload, host_scale: float = 1.0) -> float:
    """The host's time for one forward pass: Python and kernel launches per decoder layer, per 4-bit
    linear and per adapted linear, on a host `host_scale` times as slow as the reference one."""
    kbit_linears = w.shape.num_layers * len(w.shape.linear_shapes()) if w.method == "qlora" else 0
    fused = w.fused_lora and w.method in FUSED_ADAPTER_HOST_SHARE
    layer_host = HOST_LAYER_S * (HOST_LIGER_SHARE if w.liger else 1.0)
    return host_scale * (
        w.shape.num_layers * layer_host
        + kbit_linears * HOST_KBIT_LINEAR_S
        + adapted_linears(w) * HOST_ADAPTER_S * (FUSED_ADAPTER_HOST_SHARE[w.method] if fused else 1.0)
    )


def _device_s(w: Workload, peak_flops: float, bandwidth: float) -> tuple[dict[str, float], float, float]:
    """The device's time for a micro-batch by kind of work (forward and backward together), and its
    forward's and its backward's time."""
    tokens = w.tokens_per_micro_batch
    # a fixed time per kernel beside its work: the faster the card (or the slower the number format),
    # the more tokens a micro-batch needs to hide it, so T_HALF, fitted on the H200 in bf16, scales
    # with the rate the matmuls run at
    efficiency = EFF_MAX * tokens / (tokens + T_HALF * peak_flops / (REFERENCE_BF16_TFLOPS * 1e12))
    matmul_f, matmul_b = matmul_flops_per_token(w)
    attention_f, attention_b = attention_s(w, peak_flops)
    matmul_rate = peak_flops * efficiency
    arithmetic_f = tokens * matmul_f / matmul_rate + attention_f
    arithmetic_b = tokens * matmul_b / matmul_rate + attention_b
    logits_f, logits_b = (tokens * w.shape.vocab_size * b / bandwidth for b in logits_bytes_per_entry(w))
    recompute = 1 if w.gradient_checkpointing else 0
    dequant_pass = 0.0
    if w.method == "qlora":  # every pass writes each 4-bit weight out in 16 bits and reads it back
        quantised = w.shape.num_layers * w.shape.layer_linear_params
        dequant_pass = quantised * DEQUANT_BYTES[w.quant_bits] / bandwidth
    fused = w.fused_lora and w.method in FUSED_ADAPTER_HOST_SHARE
    adapter_bytes = ADAPTER_BYTES * (FUSED_ADAPTER_BYTES_SHARE[w.method] if fused else 1.0)
    adapters_s = tokens * adapted_features(w) * adapter_bytes / bandwidth  # a third forward
    # the blocks' elementwise kernels (norms, rotary, residual adds, SiLU and the gated product,
    # attention's inputs and output): memory-bound, counted per token (elementwise_bytes_per_token)
    elementwise = tokens * w.shape.num_layers * elementwise_bytes_per_token(w) / (bandwidth * ELEMENTWISE_EFF)
    elementwise_f = elementwise
    elementwise_b = elementwise * (ELEMENTWISE_BACKWARD + recompute)
    device_f = arithmetic_f + logits_f + elementwise_f + dequant_pass + adapters_s / 3
    device_b = arithmetic_b + logits_b + elementwise_b + dequant_pass * (1 + recompute) + adapters_s * 2 / 3
    parts = {
        "arithmetic": arithmetic_f + arithmetic_b,
        "logits": logits_f + logits_b,
        "elementwise": elementwise_f + elementwise_b,
        "dequantisation": dequant_pass * (2 + recompute),
        "adapters": adapters_s,
    }
    return parts, device_f, device_b


def estimate_run(
    w: Workload, card: CardSpeed | Card, dataset_tokens: int, epochs: float, price_per_hour: float | None
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


def speed_inputs(card: CardSpeed | Card) -> dict[str, Any]:
    """The stated inputs of a speed figure, for --json and the screens."""
    return {
        "card": card.name,
        "bf16_dense_tflops": card.bf16_dense_tflops,
        "bandwidth_gbs": card.bandwidth_gbs,
        "calibrated_on": CALIBRATED_ON,
        "extrapolated": "h200" not in card.name.lower(),
    }
