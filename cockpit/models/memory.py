"""The memory model: peak device memory of a fine-tune, as nvidia-smi shows it, in parts.

Pure Python, no torch. Every part is computed from the model's shape and the run's
settings; three coefficients are calibrated on measured runs (docs/estimator.md):

- ACTIVATION_SCALE scales the tensors a llama-style block saves for backward, counted
  from the architecture (`block_saved_bytes_per_token`); LIGER_ACTIVATION_SCALE scales them
  again where Liger's RMSNorm, RoPE and SwiGLU replace transformers' (speed: auto on a GPU),
  fitted on the product's runs with them;
- HF_LOGITS_BYTES: plain HF Trainer materialises the logits (transformers' ForCausalLMLoss:
  the 16-bit logits, their fp32 upcast, fp32 log-softmax and gradient). TRL 1.16's SFTTrainer,
  which the product runs, patches a fused LM head (trl/trainer/utils.py add_fused_lm_head,
  trl/kernels/chunked_logprob.py): the loss is computed in tiles of LOSS_TILE_TOKENS x
  LOSS_TILE_VOCAB (a 16-bit tile, fp32 running sums), the hidden states of the scored tokens are
  copied and their gradient accumulated in fp32, a trained LM head gets an fp32 weight gradient;
  the full logits are not built (`loss_tiles`). It builds them only with a compute_loss_func or
  label smoothing, which the product does not set. One held-out TRL run with a 128k-152k
  vocabulary and 8 x 2048 tokens measured about the full 16-bit + fp32 logits more than this
  path predicts; for SFT (FUSED_HEAD_OBJECTIVES) SFTTrainer.compute_loss always takes the fused
  head, and a relaunch at 4 x 2048 tokens of a 152k vocabulary trained in 22.02 GiB where the
  tiles predicted 22.28 and the full logits would have added 7 GiB to a 24 GiB card
  (bench/results/2026-12-02-oom-vocab152k-recheck-h200.json): no band there. TRL's DPO and KTO
  trainers call the same fused head (`fused_lm_head=True`), and DPO at 8192 tokens a micro-batch
  measured -5.0% and -5.6% of nvidia-smi with 128k and 152k vocabularies, where the full logits
  would have added 5.9 and 7.0 GiB (bench/results/2026-12-07-preference-memory-h100.txt): no band
  there either.
  ORPO's full logits are a part of their own (`_orpo_logits`). The band (`high_bytes`) stays for a
  loss path not known to be either;
The hf QLoRA path, counted from the library sources:
- plain HF Trainer + peft's prepare_model_for_kbit_training (`--trainer hf`, QLoRA) casts every
  non-quantized weight to fp32, the embeddings among them, so the residual stream is fp32; a
  bitsandbytes Linear4bit returns its output in its input's dtype (bnb/nn/modules.py
  `.to(inp_dtype)`), so gate_proj and up_proj give fp32 outputs, and SiLU's input, its output and
  the up projection are saved for backward in fp32 (`hf_kbit_fp32_extra_bytes_per_token`, counted,
  not fitted); the checkpointed block inputs are fp32 too. q/k/v are cast to 16 bits by SDPA
  under autocast before they are saved, and MatMul4Bit saves no input, so nothing else changes.

Measured constants, not derived: CUDA_CONTEXT_BYTES and BNB_WORKSPACE_BYTES (an H200, CUDA 13;
other cards and CUDA versions take 0.5-1 GiB), and the two calibrated coefficients above.
A full fine-tune through TRL (the product) loads fp32 master weights (4 + 4 grad + 8 AdamW bytes
a parameter, 16-bit autocast copies); `--trainer hf` models a plain HF Trainer on a model loaded
in the run's precision, whose weights, gradients and AdamW states are all in that dtype (bf16:
2 + 2 + 4 = 8 bytes a parameter).

What the planning commands report beyond one peak (N-GPU options, the inference row, the JSON
form) is in cockpit.models.memory_report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cockpit import fmt
from cockpit.fmt import GIB
from cockpit.models.shape import ModelShape

ACTIVATION_SCALE = 0.762
LIGER_ACTIVATION_SCALE = 1.028
HF_LOGITS_BYTES = 22.2  # per token per vocabulary entry
CUDA_CONTEXT_BYTES = int(0.75 * GIB)  # CUDA context, cuBLAS workspace (H200, CUDA 13; ~0.5-1 GiB on others)
BNB_WORKSPACE_BYTES = int(0.15 * GIB)  # bitsandbytes kernels and their workspaces
# the largest micro-batch (tokens) whose fused-loss memory a measured point checks (l31-8b-qlora-qv-mb8:
# 8 x 512 tokens, vocabulary 128k, within 1.5% left out); beyond it the band's top adds the full logits
CHECKED_TOKENS_PER_MICRO_BATCH = 4096
LOSS_TILE_TOKENS = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE
LOSS_TILE_VOCAB = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
UNSURE_LOGITS_BYTES = 6  # the band's top on TRL: the logits in 16 bits and their fp32 upcast, per entry
UNSURE_SHARE = 0.03  # full logits below this share of the peak leave no band (inside the model's error)
# objectives whose TRL loss path is known to be the fused LM head in tiles (SFTTrainer.compute_loss with
# no compute_loss_func and no label smoothing, which the product never sets): no band up to the full logits
FUSED_HEAD_OBJECTIVES = ("sft", "dpo", "kto")
NF4_CONSTANTS_PER_PARAM = {True: 0.127 / 8, False: 0.5 / 8}  # bytes/param, with/without double quant
OPTIMIZER_STATE_BYTES = {  # per trainable parameter; None: two states in the parameter's own dtype
    "adamw_torch": None,
    "adamw_torch_fused": None,
    "adamw_8bit": 2,
    "paged_adamw_8bit": 2,
    "paged_adamw_32bit": 8,
    "adafactor": 0,
    "sgd": 0,
}
TRAINERS = ("trl", "hf")
SHARDINGS = ("ddp", "fsdp")  # with gpus > 1: a whole replica per GPU, or weights/grads/states sharded
# NCCL's own buffers and communicator state per GPU (typically 0.2-1 GiB; not yet calibrated here:
# bench/multi_gpu.py measures a DDP run's device memory against the same run on one GPU)
NCCL_BUFFERS_BYTES = int(0.5 * GIB)
# what a prediction must leave free on the card: the model's own error (<10% on measured
# points) and memory other processes or fragmentation take
SAFETY_MARGIN = 0.05

# Preference objectives (docs/preference.md), counted from TRL 1.16's trainers, and two coefficients
# fitted on four of nine 1B runs on an H100 (bench/results/2026-12-07-preference-memory-h100.txt;
# bench/preference_memory.py measures them against this model, `--repredict` again after a change):
# - PREFERENCE_ACTIVATION_SCALE: without checkpointing, a DPO or KTO forward kept 1.37x the activations
#   an SFT forward of as many tokens keeps (DPO and KTO at 512 tokens: 0.9 and 0.45 GiB over the count,
#   both 0.44 MB a token of the batch, 37% of the count); the padded pair and prompt batches are the
#   difference from SFT's rows, not yet told apart.
# - ORPO_LOGITS_BYTES: ORPO's logits (16-bit), the chosen half's shifted copy, its 16-bit cross-entropy
#   and their gradients, as the caching allocator reserves them, per token per vocabulary entry (fitted
#   on the 1B LoRA runs at 2048 and at 512 without checkpointing: 15.8 and 16.5).
PREFERENCE_ACTIVATION_SCALE = 1.37
# with checkpointing, DPO's and KTO's recomputed block keeps the same 1.37x; ORPO's does not (chosen
# after the held-out runs of 2026-12-07: DPO and KTO with checkpointing were predicted 1-9% under
# nvidia-smi on 8 of 10 runs, and counting the scale there brings their median to 2.8% and 1.8%, while
# ORPO's, already over, went to 12.5%). The cause is not found; the recomputed block is 1 of 32.
PREFERENCE_SCALED_RECOMPUTE = ("dpo", "kto")
# On the fused LoRA layers with Liger's kernels (speed: auto), DPO's and KTO's recomputed block keeps
# SFT's count: six such runs (7B and 1.5B QLoRA at 2048 tokens, 1B LoRA at 1024, every layer
# recomputed; bench/results/2026-12-07-preference-auto*-h100.json) were predicted 2.5-16.6% over
# nvidia-smi with the scale and -2.8 to +8.5% without it (chosen after them: not held out). Which of
# the two removes the excess is not yet told apart (bench/preference_memory.py takes backend=hf and
# liger=off for that), and no such run without checkpointing was measured, so the scale stays there.
ORPO_LOGITS_BYTES = 16.2
OBJECTIVES = ("sft", "dpo", "kto", "orpo")
PAIRED = ("dpo", "orpo")  # chosen and rejected in one forward: twice the sequences a row
# TRL's DPO, KTO and ORPO configs default to disable_dropout=True: every nn.Dropout, LoRA's included,
# gets p=0, and a dropout of p=0 returns its input (no copy, no mask). A DPO 7B QLoRA at 2048 tokens
# with LoRA dropout 0.1 on every linear, counted with dropout, was predicted 87.5 GiB against 49.1 by
# nvidia-smi (bench/results/2026-12-07-oom-dpo-h100.md)
DROPOUT_OFF_OBJECTIVES = ("dpo", "kto", "orpo")
# what the policy is scored against (train_backend.preference.trainers): adapter_off, the base with the
# adapter disabled (no second copy); ref_adapter, init_from's adapter copied as a frozen 'ref'
# adapter; copy, a 16-bit second model (a full fine-tune); precomputed, scored once before step 1;
# none (sft, orpo)
REFERENCES = ("none", "adapter_off", "ref_adapter", "copy", "precomputed")
# a no-grad forward's live tensors inside one block, per token, in hidden sizes: the residual and its
# norm, q, attention out and the MLP's gate, up and their product (k and v, intermediate sizes apart)
REF_FORWARD_SCALE = 1.0
# what is still allocated during the optimizer step (the backward's activations are freed by then)
STEP_HELD_PARTS = ("weights", "quant_constants", "gradients", "optimizer", "adapter", "reference")


@dataclass(frozen=True)
class Workload:
    """What is trained, how: the inputs of the estimate (all stated, all shown)."""

    shape: ModelShape
    method: str = "qlora"  # qlora | lora | full
    quant_bits: int = 4
    double_quant: bool = True
    lora_r: int = 64
    lora_targets: list[str] | str = field(default_factory=lambda: ["q_proj", "v_proj"])
    lora_dropout: float = 0.1
    seq_len: int = 512
    micro_batch: int = 4
    grad_accum: int = 4
    gradient_checkpointing: bool = True
    optimizer: str = "paged_adamw_32bit"
    precision: str = "bf16"  # bf16 | fp16 | fp32
    trainer: str = "trl"  # trl: the product (TRL SFTTrainer); hf: plain HF Trainer + peft
    gpus: int = 1  # processes of the job (GPUs over all machines); the estimate is per GPU
    sharding: str = "ddp"  # with gpus > 1: ddp (replicated) or fsdp (sharded, each layer gathered in turn)
    liger: bool = False  # Liger's fused RMSNorm, RoPE and SwiGLU (speed: auto on a GPU where it imports)
    checkpoint_offload: bool = False  # checkpointed block inputs in host memory (two on the GPU at a time)
    fused_lora: bool = False  # each frozen linear and its adapter in one autograd function (speed.backend)
    unpacked_scales: bool = False  # double-quantised 4-bit scales kept in fp32 (quantization.unpack_scales)
    fused_mlp: bool = False  # the MLP and its adapters in one function, down_proj's input recomputed
    figures_at_log: bool = False  # the step's figures read at logging steps (speed.read_figures: at_log)
    objective: str = "sft"  # sft | dpo | kto | orpo (docs/preference.md)
    reference: str = "none"  # what dpo and kto score against (REFERENCES; reference_kind)

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.seq_len * self.micro_batch

    @property
    def sequences_per_row(self) -> int:
        """Sequences a row puts through the model with gradients: chosen and rejected for a pair."""
        return 2 if self.objective in PAIRED else 1

    @property
    def forward_tokens_per_micro_batch(self) -> int:
        """Tokens one micro-batch puts through the model with gradients: a pair's chosen and rejected
        both (the unit of the speed model's tokens/s, and of the trainer's for a preference run)."""
        return self.tokens_per_micro_batch * self.sequences_per_row


@dataclass(frozen=True)
class Part:
    key: str
    label: str
    bytes: int
    note: str


@dataclass(frozen=True)
class Band:
    """What the estimate's top adds where the model is unsure, and why."""

    key: str
    bytes: int
    note: str


@dataclass(frozen=True)
class MemoryEstimate:
    parts: tuple[Part, ...]
    load_peak_bytes: int
    unsure: tuple[Band, ...] = ()

    @property
    def peak_bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    @property
    def high_bytes(self) -> int:
        """The top of the band: the peak with every unsure part at its worst."""
        return self.peak_bytes + sum(b.bytes for b in self.unsure)

    @property
    def high_gib(self) -> float:
        return self.high_bytes / GIB

    def band_text(self) -> str:
        """`12.3 GiB` or `12.3-16.8 GiB`."""
        if self.high_bytes <= self.peak_bytes:
            return f"{self.peak_gib:.1f} GiB"
        return f"{self.peak_gib:.1f}-{self.high_gib:.1f} GiB"

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    def part(self, key: str) -> Part | None:
        return next((p for p in self.parts if p.key == key), None)


class EstimateError(ValueError):
    pass


def check(w: Workload) -> None:
    """Absurd or unknown inputs get a message, not a number."""
    if w.method not in ("qlora", "lora", "full"):
        raise EstimateError(f"method {w.method!r}: expected qlora, lora or full")
    if w.trainer not in TRAINERS:
        raise EstimateError(f"trainer {w.trainer!r}: expected trl (the product) or hf (plain HF Trainer)")
    if w.optimizer not in OPTIMIZER_STATE_BYTES:
        raise EstimateError(f"optimizer {w.optimizer!r}: expected one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    for name, value, low, high in (
        ("sequence length", w.seq_len, 1, 1 << 21),
        ("micro-batch", w.micro_batch, 1, 1 << 16),
        ("gradient accumulation", w.grad_accum, 1, 1 << 16),
        ("LoRA rank", w.lora_r, 1, 1 << 14),
    ):
        if not isinstance(value, int) or not low <= value <= high:
            raise EstimateError(f"{name} {value!r}: expected a whole number from {low} to {high}")
    if w.method == "qlora" and w.quant_bits not in (4, 8):
        raise EstimateError(f"quantisation bits {w.quant_bits!r}: expected 4 or 8")
    if not isinstance(w.gpus, int) or not 1 <= w.gpus <= 4096:
        raise EstimateError(f"GPU count {w.gpus!r}: expected a whole number from 1 to 4096")
    if w.sharding not in SHARDINGS:
        raise EstimateError(f"sharding {w.sharding!r}: expected ddp or fsdp")
    if w.sharding == "fsdp" and w.gpus > 1 and w.method == "qlora" and w.quant_bits == 8:
        raise EstimateError("FSDP shards 4-bit QLoRA weights only; with 8-bit weights use ddp")
    if w.objective not in OBJECTIVES or w.reference not in REFERENCES:
        raise EstimateError(
            f"objective {w.objective!r}, reference {w.reference!r}: expected an objective of "
            f"{', '.join(OBJECTIVES)} and a reference of {', '.join(REFERENCES)}"
        )
    if w.reference != reference_kind(
        w.objective, w.method, w.reference == "precomputed", w.reference == "ref_adapter"
    ):
        raise EstimateError(
            f"reference {w.reference!r} does not go with objective {w.objective} and {w.method}"
        )
    unknown = w.shape.unknown_targets(w.lora_targets) if w.method != "full" else []
    if unknown:
        names = ", ".join(w.shape.linear_shapes())
        raise EstimateError(
            f"LoRA targets {', '.join(unknown)} are not linear layers of {w.shape.name} ({names})"
        )


def block_saved_bytes_per_token(shape: ModelShape, full: bool) -> int:
    """Bytes one decoder block saves for backward, per token, in 16-bit activations.

    Two RMSNorms (their fp32 input and output), the normed input of q/k/v and of
    gate/up, q/k/v after rotary, the attention output and o_proj's input, SiLU's
    input, the gated product and down_proj's input. A full fine-tune also keeps each
    trainable linear's input for its weight gradient.
    """
    h, i, q, kv = shape.hidden_size, shape.intermediate_size, shape.q_out, shape.kv_out
    saved = 12 * h + 6 * q + 4 * kv + 8 * i
    if full:
        saved += 2 * sum(d_in for d_in, _ in shape.linear_shapes().values())
    return saved


def unpacked_scales_bytes(shape: ModelShape) -> int:
    """What keeping a double-quantised 4-bit model's scales unpacked in fp32 adds: every 4-bit linear's
    absmax as fp32 (4 bytes a block of 64) in place of a byte a block and the blocks' own fp32 absmax
    (one per 256 blocks)."""
    linear = shape.num_layers * shape.layer_linear_params
    return int(linear * NF4_CONSTANTS_PER_PARAM[False]) - int(linear * NF4_CONSTANTS_PER_PARAM[True])


def fused_mlp_fewer_bytes_per_token(shape: ModelShape, liger: bool) -> int:
    """Bytes per token one decoder block does not save with the fused MLP block
    (train_backend/speed/fused_mlp.py), in 16-bit activations: down_proj's input, and SiLU's output where
    PyTorch's SiLU and multiply would keep it (Liger's SwiGLU does not). On the CPU, by saved-tensor
    hooks, a block saves exactly the PyTorch figure less (tests/test_fused_mlp.py). The estimate
    takes them out of the block's count before its fitted scales, so it credits less than this."""
    return (2 if liger else 4) * shape.intermediate_size


def hf_kbit_fp32_extra_bytes_per_token(shape: ModelShape) -> int:
    """Bytes per token per block that plain HF Trainer's QLoRA saves beyond the 16-bit count.

    prepare_model_for_kbit_training makes the embeddings fp32, so the residual stream and the
    norms' outputs are fp32; Linear4bit casts its input to the compute dtype and its output back
    to the input's dtype, so gate_proj's and up_proj's outputs are fp32, and the three tensors the
    MLP saves from them (SiLU's input, SiLU's output, up) take 4 bytes instead of 2.
    """
    return 3 * 2 * shape.intermediate_size


def lora_dropout_bytes_per_token(w: Workload, act_bytes: int) -> int:
    """Bytes per token per block that LoRA's dropout adds: peft runs `lora_B(lora_A(dropout(x)))`
    on each adapted linear, so with dropout > 0 each keeps its own dropped-out input (cast to the
    compute dtype for lora_A's weight gradient) and dropout's 1-byte mask; with 0 dropout is an
    identity and lora_A saves the block's input, already counted."""
    if w.method == "full" or w.lora_dropout <= 0 or w.objective in DROPOUT_OFF_OBJECTIVES:
        return 0
    shapes = w.shape.linear_shapes()
    names = list(shapes) if w.lora_targets == "all-linear" else [t for t in w.lora_targets if t in shapes]
    return sum(shapes[n][0] for n in names) * (act_bytes + 1)


def foreach_step_bytes(w: Workload, trainable: int, param_bytes: int) -> int:
    """torch's AdamW steps with foreach kernels on a GPU (torch/optim/adam.py `_multi_tensor_adam`):
    `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)` allocates one temporary as large as all
    the trainable parameters, in their dtype, while weights, gradients and states are all held.
    bitsandbytes' 8-bit and paged optimizers step parameter by parameter; the fused AdamW has no
    temporary."""
    return trainable * param_bytes if w.optimizer == "adamw_torch" else 0


def estimate_memory(w: Workload) -> MemoryEstimate:
    """Peak device memory of `w`, in parts: what is held (weights, what trains), what a micro-batch
    adds (activations, the loss), the optimizer step where it peaks higher, the CUDA context; per
    GPU where the job has several."""
    check(w)
    act_bytes = 4 if w.precision == "fp32" else 2
    trained, step_temp = _trained_state(w, act_bytes)
    forward = forward_workload(w)
    activations = _activations(forward, act_bytes)
    orpo = w.objective == "orpo"
    loss = _orpo_logits(forward, trained) if orpo else _loss(forward, activations[0].bytes)
    parts = [*_weights(w, act_bytes), *trained, *activations, loss]
    parts += _reference_parts(w, act_bytes, activations, loss)
    step = _optimizer_step(w, parts, step_temp)
    if step is not None:
        parts.append(step)
    context = _context_bytes(w)
    parts.append(
        Part("context", "CUDA context + workspaces", context, "measured on an H200 (a constant, not derived)")
    )
    unsure = _logits_band(w, parts)
    one_gpu = parts
    if w.gpus > 1:
        parts = _per_gpu_parts(w, parts, act_bytes)
    return MemoryEstimate(tuple(parts), _load_peak_bytes(w, one_gpu, parts, context), tuple(unsure))


def reference_kind(objective: str, method: str, precomputed: bool, from_adapter: bool) -> str:
    """What a run of `objective` scores its policy against (REFERENCES): the one rule the trainer
    (train_backend.preference.trainers) and this model share."""
    if objective in ("sft", "orpo"):
        return "none"
    if precomputed:
        return "precomputed"
    if from_adapter:
        return "ref_adapter"
    return "copy" if method == "full" else "adapter_off"


def forward_workload(w: Workload) -> Workload:
    """The workload one forward with gradients runs: a pair's chosen and rejected are one batch of
    twice the sequences (TRL concatenates them), padded to the longer; KTO's as SFT's."""
    if w.sequences_per_row == 1:
        return w
    return replace(w, micro_batch=w.micro_batch * w.sequences_per_row)


def _orpo_logits(w: Workload, trained: list[Part]) -> Part:
    """ORPO (trl.experimental.orpo) builds the full logits of chosen and rejected, without the fused LM
    head: ORPO_LOGITS_BYTES per token per vocabulary entry (fitted). A full fine-tune frees them at the
    start of the backward, before most gradients exist: only what exceeds the gradients counts."""
    tokens, s = w.tokens_per_micro_batch, w.shape
    logits = int(tokens * s.vocab_size * ORPO_LOGITS_BYTES)
    note = f"{tokens} tokens (chosen + rejected) x vocab {s.vocab_size} x {ORPO_LOGITS_BYTES} B"
    note += "; no fused LM head"
    if w.method == "full":
        gradients = sum(p.bytes for p in trained if p.key == "gradients")
        logits = max(0, logits - gradients)
        note += "; only what exceeds the gradients, which the backward allocates after them"
    return Part("logits", "logits (ORPO: full, + log-softmax, grads)", logits, note)


def no_grad_forward_bytes(w: Workload, tokens: int, act_bytes: int) -> int:
    """The live tensors of a forward without gradients over `tokens` (the reference's, KTO's KL batch):
    one block's working set and one tile of the fused LM head; nothing is saved for backward."""
    s = w.shape
    kv = s.num_kv_heads * s.head_dim
    per_token = (5 * s.hidden_size + 2 * kv + 3 * s.intermediate_size) * act_bytes * REF_FORWARD_SCALE
    tile = min(tokens, LOSS_TILE_TOKENS) * min(s.vocab_size, LOSS_TILE_VOCAB) * 4
    return int(tokens * per_token + tile)


def _reference_parts(w: Workload, act_bytes: int, activations: list[Part], loss: Part) -> list[Part]:
    """What the reference holds (a 16-bit copy, a frozen adapter) and what its forward without gradients
    adds at its peak: it runs after the policy's forward, beside what that forward saved; the part is
    what it needs beyond the recomputed block and the loss, which come after it (KTO: its KL batch and
    the reference over both batches, one forward at a time)."""
    parts = []
    s = w.shape
    if w.reference == "copy":
        parts.append(Part("reference", "reference model (16-bit copy)", s.params * 2, "frozen, no grads"))
    if w.reference == "ref_adapter":
        adapter = s.lora_params(w.lora_r, w.lora_targets) * 4
        parts.append(Part("reference", "reference adapter ('ref', frozen)", adapter, "init_from's adapter"))
    forwards = w.objective == "kto" or w.reference in ("adapter_off", "ref_adapter", "copy")
    if not forwards or w.objective not in ("dpo", "kto"):
        return parts
    tokens = forward_workload(w).tokens_per_micro_batch
    transient = no_grad_forward_bytes(w, tokens, act_bytes)
    after = loss.bytes + (activations[0].bytes if w.gradient_checkpointing else 0)
    what = "the KL batch's and the reference's" if w.objective == "kto" else "the reference's"
    parts.append(
        Part(
            "reference_forward",
            "forward without grads (reference" + (", KL batch)" if w.objective == "kto" else ")"),
            max(0, transient - after),
            f"{what} forward over {tokens} tokens, beside the policy's saved activations; what exceeds "
            "the backward's own working set",
        )
    )
    return parts


def _weights(w: Workload, act_bytes: int) -> list[Part]:
    """The model's weights as the method holds them (and a full fine-tune's 16-bit copies)."""
    s = w.shape
    if w.method == "qlora":
        return _quantised_weights(w)
    if w.method == "lora":
        return [Part("weights", "weights", s.params * act_bytes, f"{fmt.params(s.params)} params, 16-bit")]
    if w.trainer == "hf":  # a model loaded in the run's precision, trained as loaded: no master copy
        return [
            Part(
                "weights",
                "weights",
                s.params * act_bytes,
                f"{fmt.params(s.params)} params in {8 * act_bytes}-bit, as loaded (no fp32 master)",
            )
        ]
    parts = [Part("weights", "weights (fp32 master)", s.params * 4, f"{fmt.params(s.params)} params in fp32")]
    if w.precision != "fp32":
        parts.append(
            Part(
                "autocast_copies",
                "16-bit weight copies",
                s.params * 2,
                "autocast keeps a 16-bit copy of each weight during the step",
            )
        )
    return parts


def _quantised_weights(w: Workload) -> list[Part]:
    """QLoRA: the linear layers in 4 or 8 bits, the rest in 16 (fp32 under `--trainer hf`), and the
    4-bit blocks' quantisation constants."""
    s = w.shape
    linear = s.num_layers * s.layer_linear_params
    other = s.params - linear  # embeddings, lm_head, norms, biases
    per_weight = 0.5 if w.quant_bits == 4 else 1.0
    other_bytes = 4 if w.trainer == "hf" else 2  # prepare_model_for_kbit_training upcasts the rest to fp32
    parts = [
        Part(
            "weights",
            "weights",
            int(linear * per_weight + other * other_bytes),
            f"{fmt.billions(linear)} linear params in {w.quant_bits}-bit, {fmt.billions(other)} "
            f"(embeddings, lm_head, norms) in {8 * other_bytes}-bit",
        )
    ]
    if w.quant_bits == 4:
        packed = w.double_quant and not w.unpacked_scales
        how = ""
        if packed:
            how = ", double-quantised"
        elif w.double_quant:
            how = ", double-quantised at load, kept unpacked in fp32"
        parts.append(
            Part(
                "quant_constants",
                "quantisation constants",
                int(linear * NF4_CONSTANTS_PER_PARAM[packed]),
                f"absmax per 64 weights{how}",
            )
        )
    return parts


def _trained_state(w: Workload, act_bytes: int) -> tuple[list[Part], int]:
    """What training holds beside the weights: a full fine-tune's gradients and optimizer states, or
    the LoRA adapter with its own; and the optimizer step's temporary (foreach_step_bytes)."""
    s = w.shape
    if w.method == "full":
        master = 4 if w.trainer == "trl" else act_bytes  # the dtype the parameters (and grads) live in
        state = OPTIMIZER_STATE_BYTES[w.optimizer]
        state = 2 * master if state is None else state
        parts = [
            Part("gradients", "gradients", s.params * master, f"{8 * master}-bit, one per parameter"),
            Part("optimizer", "optimizer states", s.params * state, f"{w.optimizer}: {state} B/param"),
        ]
        return parts, foreach_step_bytes(w, s.params, master)
    trainable = s.lora_params(w.lora_r, w.lora_targets)
    # TRL casts a quantized model's adapters to bf16; peft otherwise keeps them in fp32
    adapter = 2 if (w.trainer == "trl" and w.method == "qlora") else 4
    state = OPTIMIZER_STATE_BYTES[w.optimizer]
    state = 2 * adapter if state is None else state
    part = Part(
        "adapter",
        "LoRA adapter + grads + optimizer",
        trainable * (2 * adapter + state),
        f"{trainable / 1e6:.1f}M params x ({adapter} weight + {adapter} grad + {state} {w.optimizer}) B",
    )
    return [part], foreach_step_bytes(w, trainable, adapter)


def fp32_kbit_path(w: Workload) -> bool:
    """peft's prepare_model_for_kbit_training runs on a 4- or 8-bit base: under `--trainer hf`, and in
    TRL's ORPOTrainer, which calls it on a quantised model before its own casts (norms stay fp32, so
    the MLP's inputs and the residual stream are fp32: the module docstring's hf QLoRA path). Not in
    ORPO with Liger's RMSNorm, which writes its output in its input's dtype whatever the weight's
    (liger_kernel/ops/rms_norm.py allocates Y as X.dtype): the embeddings are 16-bit again after
    TRL's peft_module_casting_to_bf16, so the stream stays 16-bit (a 7B QLoRA ORPO at 2048 tokens
    with speed: auto used 11.5 GiB against 15.2 with speed off, 2026-12-07, one H100)."""
    if w.method != "qlora":
        return False
    return w.trainer == "hf" or (w.objective == "orpo" and not w.liger)


def _block_bytes_per_token(w: Workload, act_bytes: int) -> float:
    """What one decoder block keeps for backward, per token: the counted tensors scaled by the
    calibrated coefficients, then what `--trainer hf`'s fp32 QLoRA path and LoRA's dropout add."""
    s = w.shape
    saved = block_saved_bytes_per_token(s, w.method == "full")
    if w.fused_mlp and w.method in ("lora", "qlora") and w.trainer == "trl":
        saved -= fused_mlp_fewer_bytes_per_token(s, w.liger)
    per_block = saved * act_bytes / 2 * ACTIVATION_SCALE
    if w.liger:
        per_block *= LIGER_ACTIVATION_SCALE
    if fp32_kbit_path(w):
        per_block += hf_kbit_fp32_extra_bytes_per_token(s)
    per_block += lora_dropout_bytes_per_token(w, act_bytes)
    return per_block


def _preference_scale(w: Workload) -> float:
    """PREFERENCE_ACTIVATION_SCALE where a preference batch keeps more than SFT's count: every
    preference objective's blocks without checkpointing, DPO's and KTO's recomputed one with it; not
    the recomputed block of a run on the fused LoRA layers and Liger's kernels (the note at
    PREFERENCE_SCALED_RECOMPUTE)."""
    if w.objective == "sft" or (w.gradient_checkpointing and w.objective not in PREFERENCE_SCALED_RECOMPUTE):
        return 1.0
    fused = w.fused_lora and w.liger and w.method in ("lora", "qlora") and w.trainer == "trl"
    if fused and w.gradient_checkpointing:
        return 1.0
    return PREFERENCE_ACTIVATION_SCALE


def _activations(w: Workload, act_bytes: int) -> list[Part]:
    """Every block's activations, or with checkpointing one recomputed block's and every block's input
    (on the GPU, or all but two in host memory). The first part is the activations."""
    s, tokens = w.shape, w.tokens_per_micro_batch
    scale = _preference_scale(w)
    per_block = _block_bytes_per_token(w, act_bytes) * scale
    scaled = f"; x {scale} for a preference batch (fitted)" if scale != 1.0 else ""
    if not w.gradient_checkpointing:
        note = (
            f"{s.num_layers} blocks x {tokens} tokens x {per_block / 1024:.0f} KiB, no checkpointing" + scaled
        )
        return [Part("activations", "activations", int(tokens * s.num_layers * per_block), note)]
    hf_kbit = fp32_kbit_path(w)
    residual_bytes = 4 if hf_kbit or w.precision == "fp32" else 2  # the residual stream's dtype
    on_gpu = min(2, s.num_layers) if w.checkpoint_offload else s.num_layers
    return [
        Part(
            "activations",
            "activations (one block, recomputed)",
            int(tokens * 2 * per_block),  # one block recomputed during backward, and its gradients
            f"{tokens} tokens x {per_block / 1024:.0f} KiB, checkpointing on" + scaled,
        ),
        Part(
            "checkpoints",
            "checkpointed block inputs"
            + (" (on the GPU; the rest in host memory)" if w.checkpoint_offload else ""),
            tokens * on_gpu * s.hidden_size * residual_bytes,
            f"{on_gpu} blocks x {tokens} tokens x hidden {s.hidden_size}, {8 * residual_bytes}-bit",
        ),
    ]


def _loss(w: Workload, activation_bytes: int) -> Part:
    """The loss: plain HF Trainer's full logits, or TRL's fused LM head in tiles (with checkpointing,
    only what exceeds the recomputed block's activations: the loss's backward ends before it)."""
    tokens, s = w.tokens_per_micro_batch, w.shape
    if w.trainer == "hf":
        return Part(
            "logits",
            "logits (+ fp32 upcast, grad)",
            int(tokens * s.vocab_size * HF_LOGITS_BYTES),
            f"{tokens} tokens x vocab {s.vocab_size}",
        )
    loss = _loss_tiles(w, tokens)
    if not w.gradient_checkpointing:
        return loss
    return Part(
        loss.key,
        loss.label,
        max(0, loss.bytes - activation_bytes),
        loss.note + "; only what exceeds the recomputed block's activations, freed before it",
    )


def _optimizer_step(w: Workload, parts: list[Part], step_temp: int) -> Part | None:
    """What the optimizer step holds above the backward's peak, where it does: activations and autocast
    copies are gone by then, the step's temporary is held."""
    held_at_step = sum(p.bytes for p in parts if p.key in STEP_HELD_PARTS) + step_temp
    over = held_at_step - sum(p.bytes for p in parts)
    if over <= 0:
        return None
    return Part(
        "optimizer_step",
        "optimizer step (above the backward)",
        over,
        f"the peak is the step: {w.optimizer}'s foreach temporary "
        f"({step_temp / GIB:.2f} GiB) beside weights, grads and states",
    )


def _context_bytes(w: Workload) -> int:
    """The CUDA context, and bitsandbytes' kernels and workspaces wherever it runs: a 4- or 8-bit base
    or one of its optimizers (paged_*, *_8bit)."""
    return CUDA_CONTEXT_BYTES + (BNB_WORKSPACE_BYTES if uses_bitsandbytes(w) else 0)


def uses_bitsandbytes(w: Workload) -> bool:
    return w.method == "qlora" or bitsandbytes_optimizer(w.optimizer)


def bitsandbytes_optimizer(optimizer: str) -> bool:
    """Whether `optimizer` (training.optimizer) is one of bitsandbytes' (paged_*, *_8bit)."""
    return optimizer.startswith("paged_") or optimizer.endswith("_8bit")


def _logits_band(w: Workload, parts: list[Part]) -> list[Band]:
    """The band's top on TRL beyond the checked micro-batch size: the full logits, where they are
    large enough to matter and the loss path is not known: the fused head (FUSED_HEAD_OBJECTIVES) or
    ORPO's full logits, counted as a part."""
    tokens, s = w.tokens_per_micro_batch, w.shape
    full_logits = tokens * s.vocab_size * UNSURE_LOGITS_BYTES
    if not (
        w.trainer == "trl"
        and w.objective not in (*FUSED_HEAD_OBJECTIVES, "orpo")
        and tokens > CHECKED_TOKENS_PER_MICRO_BATCH
        and full_logits >= UNSURE_SHARE * sum(p.bytes for p in parts)
    ):
        return []
    return [
        Band(
            "logits",
            full_logits,
            f"up to the {tokens} x {s.vocab_size} logits in 16 bits + fp32: one held-out TRL run at "
            f"this size measured about that much more; the tiles are checked up to "
            f"{CHECKED_TOKENS_PER_MICRO_BATCH} tokens per micro-batch",
        )
    ]


def _load_peak_bytes(w: Workload, one_gpu: list[Part], per_gpu: list[Part], context: int) -> int:
    """Loading holds the weights and, while quantising, one 16-bit layer at a time; FSDP loads on the
    host, then shards onto the GPUs."""
    weights = ("weights", "quant_constants")
    if w.gpus > 1 and w.sharding == "fsdp":
        return sum(p.bytes for p in per_gpu if p.key in weights) + context
    biggest_layer = max(a * b for a, b in w.shape.linear_shapes().values()) * 2
    return sum(p.bytes for p in one_gpu if p.key in weights) + context + biggest_layer


def _loss_tiles(w: Workload, tokens: int) -> Part:
    """TRL's fused LM head: one 16-bit tile of logits at a time, the scored hidden states copied and
    their gradient in fp32, and an fp32 weight gradient (and its cast) when the LM head trains."""
    s = w.shape
    tile = min(tokens, LOSS_TILE_TOKENS) * min(s.vocab_size, LOSS_TILE_VOCAB) * 2
    held = tokens * s.hidden_size * (2 + 4)
    head_grad = s.vocab_size * s.hidden_size * (4 + 2) if w.method == "full" else 0
    note = (
        f"a {min(tokens, LOSS_TILE_TOKENS)} x {min(s.vocab_size, LOSS_TILE_VOCAB)} tile, not the full logits"
    )
    if head_grad:
        note += "; the LM head's fp32 weight gradient"
    return Part("logits", "loss (fused LM head, tiles)", tile + held + head_grad, note)


def _per_gpu_parts(w: Workload, parts: list[Part], act_bytes: int) -> list[Part]:
    """One GPU's share under DDP (everything replicated, plus gradient buckets) or FSDP (weights,
    gradients and optimizer states divided by the GPU count; the layers in flight gathered whole)."""
    s, n = w.shape, w.gpus
    nccl = Part(
        "nccl", "NCCL buffers", NCCL_BUFFERS_BYTES, "communicator state; an assumption, not calibrated"
    )
    if w.sharding == "ddp":
        if w.method == "full":
            bucket = s.params * 4
        else:
            trainable = s.lora_params(w.lora_r, w.lora_targets)
            bucket = trainable * (2 if (w.trainer == "trl" and w.method == "qlora") else 4)
        note = "a copy of every gradient for the all-reduce (gradient_as_bucket_view off)"
        out = [*parts[:-1], Part("ddp_buckets", "DDP gradient buckets", bucket, note), nccl, parts[-1]]
        return out
    sharded = ("weights", "quant_constants", "gradients", "optimizer", "adapter", "optimizer_step")
    out = []
    for p in parts:
        if p.key in sharded:
            out.append(
                Part(p.key, f"{p.label} (1/{n})", -(-p.bytes // n), f"{p.note}; sharded over {n} GPUs")
            )
        elif p.key != "autocast_copies":  # FSDP gathers 16-bit layers instead of keeping a full copy
            out.append(p)
    layer = s.layer_linear_params + s.layer_other_params
    root = s.params - s.num_layers * layer  # embeddings, lm_head, final norm: one unit, held all step
    if w.method == "qlora":
        per_weight = 0.5 if w.quant_bits == 4 else 1.0
        layer_bytes = int(s.layer_linear_params * per_weight + s.layer_other_params * 2)
        root_bytes, grad_bytes = root * 2, 0
    else:
        layer_bytes, root_bytes = layer * act_bytes, root * act_bytes
        grad_bytes = layer * 4 if w.method == "full" else 0  # one layer's gradient before reduce-scatter
    gathered = root_bytes + 2 * layer_bytes + grad_bytes
    out.insert(
        len(out) - 1,
        Part(
            "gathered",
            "gathered layers",
            gathered,
            "the root unit (embeddings, lm_head) + the current and the prefetched decoder layer"
            + (" + one layer's full gradient" if grad_bytes else ""),
        ),
    )
    out.insert(len(out) - 1, nccl)
    return out


def verdict(estimate: MemoryEstimate, vram_bytes: int) -> str:
    """fits (the band's top inside the safety margin) | tight (the band's top fits the card, but only
    inside the margin) | no (the estimate or its band's top is over the card). Never "fits" or
    "tight" where the unsure parts at their worst would not fit at all: such a run would run out."""
    if estimate.high_bytes > vram_bytes:
        return "no"
    return "fits" if estimate.high_bytes <= vram_bytes * (1 - SAFETY_MARGIN) else "tight"


def workload_from_config(cfg: Any, shape: ModelShape, trainer: str = "trl") -> Workload:
    """The estimate's inputs from a training config (precision auto is taken as bf16). `cfg` is a
    cockpit.config TrainConfig, typed Any: config is a room above models, which does not import it."""
    t = cfg.training
    return Workload(
        shape=shape,
        method=cfg.method,
        quant_bits=cfg.quantization.bits,
        double_quant=cfg.quantization.double_quant,
        unpacked_scales=cfg.quantization.unpack_scales,
        lora_r=cfg.lora.r,
        lora_targets=cfg.lora.target_modules,
        lora_dropout=cfg.lora.dropout,
        seq_len=t.max_length,
        micro_batch=t.micro_batch_size,
        grad_accum=t.gradient_accumulation_steps,
        gradient_checkpointing=t.gradient_checkpointing,
        optimizer=t.optimizer,
        precision="bf16" if t.precision == "auto" else t.precision,
        trainer=trainer,
        checkpoint_offload=t.gradient_checkpointing and t.checkpoint_offload,
        gpus=cfg.gpus * cfg.distributed.nnodes,
        sharding=_config_sharding(cfg),
        objective=getattr(cfg, "objective", "sft"),
        reference=_config_reference(cfg),
        figures_at_log=_config_figures_at_log(cfg),
    )


def _config_figures_at_log(cfg: Any) -> bool:
    """speed.read_figures: at_log (TrainConfig.reads_figures_at_log; a config without it: never)."""
    return bool(getattr(cfg, "reads_figures_at_log", lambda: False)())


def _config_reference(cfg: Any) -> str:
    objective = getattr(cfg, "objective", "sft")
    pref = getattr(cfg, "preference", None)
    precomputed = bool(pref is not None and pref.precompute_ref_log_probs)
    return reference_kind(objective, cfg.method, precomputed, getattr(cfg, "init_from", None) is not None)


def _config_sharding(cfg: Any) -> str:
    """What the trainer runs: the strategy asked for, else auto's rule without the card
    (a full fine-tune counts as sharded: the trainer picks DDP only when a replica fits)."""
    strategy: str = cfg.distributed.strategy
    if strategy in SHARDINGS:
        return strategy
    return "fsdp" if cfg.method == "full" else "ddp"
