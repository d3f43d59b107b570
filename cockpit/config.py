"""The training config: one YAML file, validated before anything starts.

Each section is a dataclass whose fields carry their documentation and limits, so the
validator, the commented template (`cockpit init`) and the README's reference all come
from one place. Errors name the key, say what was expected and how to fix it.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import yaml

from cockpit import shapes

METHODS = ("qlora", "lora", "full")
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
# the keys `speed: auto` chooses unless your config sets them (cockpit/speed_auto.py)
SPEED_AUTO_KEYS = (
    "model.attn_implementation",
    "training.micro_batch_size",
    "training.gradient_accumulation_steps",
    "training.gradient_checkpointing",
    "training.packing",
    "training.dataloader_num_workers",
)
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
        "hub id (org/name), local directory, or synthetic:<arch> (shipped shape, random weights; "
        f"shapes: {', '.join(shapes.shape_names())})",
    )
    revision: str | None = _f(None, "hub revision (branch, tag or commit) when name is a hub id")
    trust_remote_code: bool = _f(False, "run Python code shipped with the model; off unless you trust it")
    attn_implementation: str = _f(
        "sdpa", "attention kernel", choices=("sdpa", "eager", "flash_attention_2", "flash_attention_3")
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
        "the tokenizer's chat template), 'tokens' (pre-tokenized input_ids), or auto",
        choices=("auto", "text", "messages", "tokens"),
    )
    text_field: str = _f("text", "column holding the text when format is text")
    messages_field: str = _f("messages", "column holding the chat turns when format is messages")
    max_samples: int | None = _f(None, "use only the first N samples", min=1)


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
class OutputSection:
    dir: str | None = _f(
        None, "root of run directories (default: $COCKPIT_HOME/runs or ~/.local/share/lora-cockpit/runs)"
    )
    save_steps: int = _f(100, "optimizer steps between checkpoints", min=1)
    checkpoints_kept: int = _f(2, "newest complete checkpoints to keep", min=1)
    save_final: bool = _f(True, "save the final adapter (or model, for full) into the run's final/ folder")


@dataclass
class CostSection:
    price_per_hour: float | None = _f(None, "what the instance costs, USD/hour, for the cost meter", min=0)


@dataclass
class SpeedSection:
    mode: str = _f(
        "auto",
        "auto: the trainer picks packing, micro-batch, checkpointing, attention kernel, fused kernels and "
        "loader workers for this card and data, and logs each choice with its reason; off: run the "
        "settings as written",
        choices=("auto", "off"),
    )
    fused_kernels: str = _f(
        "auto",
        "auto: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU) where installed, on a GPU; off: never",
        choices=("auto", "off"),
    )
    cache_tokens: bool = _f(True, "keep the tokenized dataset in the run directory, so a restart skips it")
    keep: list[str] | None = _f(
        None,
        "keys that speed: auto leaves as written; every one of them your config sets is added on its own "
        f"(auto keys: {', '.join(SPEED_AUTO_KEYS)})",
    )


@dataclass
class DebugSection:
    fail_at_step: int | None = _f(None, "test aid: raise an error at this step", min=1)
    fail_kind: str = _f(
        "other",
        "test aid: what to raise: other (RuntimeError), oom (torch.OutOfMemoryError with a real message), "
        "disk_full (ENOSPC in the middle of the checkpoint save at that step)",
        choices=("other", "oom", "disk_full"),
    )
    step_sleep_s: float = _f(0.0, "test aid: sleep this long in every optimizer step", min=0, max=60)
    fail_rank: int | None = _f(
        None, "test aid: with several processes, only this global rank raises at fail_at_step", min=0
    )
    collate_cpu_ms: float = _f(
        0.0,
        "test aid: burn this much CPU in the data collator for every batch, an expensive on-the-fly "
        "preprocessing that makes a run input-bound (bench/input_bound.py)",
        min=0,
        max=60000,
    )
    free_bytes: int | None = _f(
        None,
        "test aid: the checkpoint disk-space guard sees this many bytes free, less what checkpoints/ "
        "holds (a disk that fills as checkpoints are written)",
        min=0,
    )


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
    lora: LoraSection = field(default_factory=LoraSection)
    quantization: QuantizationSection = field(default_factory=QuantizationSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    gpus: int = _f(
        1, "GPUs (one process each) on this machine; > 1 starts the trainer through torchrun", min=1, max=64
    )
    distributed: DistributedSection = field(default_factory=DistributedSection)
    output: OutputSection = field(default_factory=OutputSection)
    cost: CostSection = field(default_factory=CostSection)
    speed: SpeedSection = field(default_factory=SpeedSection)
    emulate_vram_gib: float | None = _f(
        None,
        "rehearse a smaller card: cap PyTorch's allocator so the run behaves as on a GPU of this many GiB "
        "(as nvidia-smi counts it; the CUDA context measured at start is taken out of it, docs/oom.md). "
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
    debug: DebugSection = field(default_factory=DebugSection)

    def to_dict(self) -> dict:
        return asdict(self)


SECTIONS = {f.name: f for f in fields(TrainConfig)}


def _is_section(cls: Any) -> bool:
    return isinstance(cls, type) and hasattr(cls, "__dataclass_fields__")


# ---------------------------------------------------------------- loading


def load_config(path: str | os.PathLike | None, overrides: list[str] | None = None) -> TrainConfig:
    """Read YAML, apply `key=value` overrides, validate. Raises ConfigError."""
    raw: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} not found. Write one with: cockpit init {path}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (model:, dataset:, ...) at the top")
        raw = loaded
    for item in overrides or []:
        apply_override(raw, item)
    return config_from_dict(raw)


def apply_override(raw: dict, item: str) -> None:
    """`training.max_steps=50` -> raw["training"]["max_steps"] = 50 (value parsed as YAML)."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set training.max_steps=50")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    node = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = value


def config_from_dotted(values: dict) -> TrainConfig:
    """{"training.max_length": 512, "method": "lora", ...} -> a validated config."""
    raw: dict = {}
    for dotted, value in values.items():
        node = raw
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return config_from_dict(raw)


def config_from_dict(raw: dict) -> TrainConfig:
    speed = raw.get("speed")
    if isinstance(speed, dict):  # YAML reads a bare `off` as false
        raw = {
            **raw,
            "speed": {
                k: "off" if v is False and k in ("mode", "fused_kernels") else v for k, v in speed.items()
            },
        }
    cfg = _build(TrainConfig, raw, "")
    _check_combinations(cfg)
    _pin_explicit_speed_keys(cfg, raw)
    return cfg


def _pin_explicit_speed_keys(cfg: TrainConfig, raw: dict) -> None:
    """An auto key the config sets is the user's choice: `speed: auto` keeps it (speed.keep)."""
    unknown = [k for k in cfg.speed.keep or [] if k not in SPEED_AUTO_KEYS]
    if unknown:
        raise ConfigError(
            f"speed.keep: {', '.join(map(repr, unknown))} is not a key speed: auto chooses; "
            f"those are: {', '.join(SPEED_AUTO_KEYS)}"
        )
    present = set()
    for key in SPEED_AUTO_KEYS:
        section, name = key.split(".")
        if isinstance(raw.get(section), dict) and name in raw[section]:
            present.add(key)
    cfg.speed.keep = sorted(set(cfg.speed.keep or []) | present) or None


def _build(cls: type, raw: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "the config"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a section (key: value lines), got {_show(raw)}")
    hints = get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if key not in known:
            full = f"{prefix}{key}"
            if SECRET_KEY_PATTERN.search(str(key)):
                raise ConfigError(
                    f"{full}: secrets do not belong in the config (it is saved in the run directory). "
                    "Set the HF_TOKEN environment variable instead."
                )
            raise ConfigError(_unknown_key_message(full, [f"{prefix}{k}" for k in known], str(key)))
    values = {}
    for name, f in known.items():
        full = f"{prefix}{name}"
        hint = hints[name]
        if _is_section(hint):
            values[name] = _build(hint, raw.get(name, {}) if raw.get(name) is not None else {}, f"{full}.")
            continue
        if name not in raw:
            continue
        values[name] = _check_value(full, raw[name], hint, f.metadata)
    return cls(**values)


def _unknown_key_message(full: str, candidates: list[str], key: str) -> str:
    close = difflib.get_close_matches(full, candidates, n=1, cutoff=0.6)
    if not close:
        # the key may be right but in the wrong section
        everywhere = [k for k in all_keys() if k.rsplit(".", 1)[-1] == key]
        close = everywhere[:1]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    valid = ", ".join(c.rsplit(".", 1)[-1] for c in candidates)
    return f"unknown key {full!r}.{hint} Valid keys here: {valid}."


def _check_value(key: str, value: Any, hint: Any, meta: dict) -> Any:
    allowed = _allowed_types(hint)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(
            f"{key}: a value is required ({_type_words(allowed)}); remove the key for the default"
        )
    value = _coerce(key, value, allowed)
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint_text = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key}: {_show(value)} is not one of {', '.join(map(str, choices))}.{hint_text}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = meta.get("min"), meta.get("max")
        if low is not None and (value < low or (meta.get("exclusive_min") and value == low)):
            bound = f"> {low}" if meta.get("exclusive_min") else f">= {low}"
            raise ConfigError(f"{key}: {_show(value)} is out of range; it must be {bound}")
        if high is not None and value > high:
            raise ConfigError(f"{key}: {_show(value)} is out of range; it must be <= {high}")
    return value


def _allowed_types(hint: Any) -> tuple:
    if get_origin(hint) is Union or type(hint).__name__ == "UnionType":
        return get_args(hint)
    return (hint,)


def _coerce(key: str, value: Any, allowed: tuple) -> Any:
    for t in allowed:
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if t is str and isinstance(value, str):
            return value
        if get_origin(t) is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
            if not value:
                raise ConfigError(f"{key}: the list is empty; name at least one module or use 'all-linear'")
            return list(value)
    # YAML reads 2e-4 as a string (no dot in the mantissa): accept numbers written that way
    if isinstance(value, str) and (float in allowed or int in allowed):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if float in allowed:
                return number
            if number.is_integer():
                return int(number)
    raise ConfigError(f"{key}: expected {_type_words(allowed)}, got {_show(value)}")


def _type_words(allowed: tuple) -> str:
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
    out = []
    for t in allowed:
        if t is type(None):
            continue
        out.append(words.get(t, "a list of strings" if get_origin(t) is list else str(t)))
    return " or ".join(out)


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _check_combinations(cfg: TrainConfig) -> None:
    name = cfg.model.name
    if shapes.is_synthetic(name):
        arch = shapes.synthetic_arch(name)
        if arch not in shapes.shape_names():
            raise ConfigError(
                f"model.name: unknown synthetic architecture {arch!r}; shipped shapes are: "
                f"{', '.join(shapes.shape_names())}"
            )
    elif looks_like_path(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise ConfigError(
                f"model.name: local path {name!r} does not exist. Give an existing directory with "
                "config.json and weights, a hub id like 'org/name', or synthetic:<arch>."
            )
        if path.is_dir() and not (path / "config.json").is_file():
            raise ConfigError(
                f"model.name: {name!r} has no config.json; point it at the folder that holds config.json "
                "and the weights (the one save_pretrained wrote)."
            )
    elif not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        raise ConfigError(
            f"model.name: {name!r} is neither a local path, a hub id (org/name) nor synthetic:<arch>"
        )

    ds = cfg.dataset.path
    if ds != "demo" and looks_like_path(ds) and not Path(ds).expanduser().exists():
        raise ConfigError(
            f"dataset.path: {ds!r} does not exist. Give a .json/.jsonl/.csv/.parquet file, a folder "
            "written by datasets' save_to_disk, a hub id, or 'demo'."
        )
    targets = cfg.lora.target_modules
    if isinstance(targets, str) and targets != "all-linear":
        raise ConfigError(
            f"lora.target_modules: {targets!r}; give a list of module names (e.g. [q_proj, v_proj]) "
            "or the string 'all-linear'"
        )
    _check_distributed(cfg)
    t = cfg.training
    if (
        cfg.debug.fail_at_step is not None
        and t.max_steps is not None
        and cfg.debug.fail_at_step > t.max_steps
    ):
        raise ConfigError(
            f"debug.fail_at_step: {cfg.debug.fail_at_step} is after training.max_steps ({t.max_steps})"
        )


def _check_distributed(cfg: TrainConfig) -> None:
    d = cfg.distributed
    if d.node_rank >= d.nnodes:
        raise ConfigError(
            f"distributed.node_rank: {d.node_rank} with nnodes {d.nnodes}; "
            f"node ranks go from 0 to {d.nnodes - 1}"
        )
    if d.rdzv_endpoint is not None and not re.fullmatch(r"\[?[\w.:-]+\]?:\d{1,5}", d.rdzv_endpoint):
        raise ConfigError(
            f"distributed.rdzv_endpoint: {d.rdzv_endpoint!r}; expected host:port of node 0, "
            "e.g. 10.0.0.1:29500"
        )
    if d.nnodes > 1 and d.rdzv_endpoint is None:
        raise ConfigError(
            f"distributed.rdzv_endpoint: required with nnodes {d.nnodes}; set it to host:port of node 0 "
            "(an address every node reaches, e.g. 10.0.0.1:29500), the same on every node"
        )
    if d.nnodes > 1 and d.master_port is not None:
        raise ConfigError(
            "distributed.master_port: only for one machine; with several, the port is part of rdzv_endpoint"
        )
    if cfg.method == "qlora" and cfg.quantization.bits == 8 and d.strategy == "fsdp":
        raise ConfigError(
            "distributed.strategy: fsdp shards 4-bit QLoRA weights only (bitsandbytes' quant_storage); with "
            "quantization.bits 8 use strategy ddp (or auto)"
        )
    world = cfg.gpus * d.nnodes
    if cfg.debug.fail_rank is not None and cfg.debug.fail_rank >= world:
        raise ConfigError(
            f"debug.fail_rank: {cfg.debug.fail_rank}, but the job has {world} ranks (0 to {world - 1})"
        )


def with_absolute_paths(cfg: TrainConfig, base: Path | None = None) -> TrainConfig:
    """Local paths made absolute against `base` (the user's working directory).

    The trainer runs inside the run directory, so a relative path in the saved config
    would point somewhere else.
    """
    base = Path.cwd() if base is None else base
    if not shapes.is_synthetic(cfg.model.name) and looks_like_path(cfg.model.name):
        cfg.model.name = str((base / Path(cfg.model.name).expanduser()).resolve())
    if cfg.dataset.path != "demo" and looks_like_path(cfg.dataset.path):
        cfg.dataset.path = str((base / Path(cfg.dataset.path).expanduser()).resolve())
    if cfg.output.dir:
        cfg.output.dir = str((base / Path(cfg.output.dir).expanduser()).resolve())
    return cfg


def looks_like_path(name: str) -> bool:
    return (
        name.startswith(("/", "./", "../", "~")) or name in (".", "..") or (Path(name).expanduser().exists())
    )


# ---------------------------------------------------------------- writing


def all_keys() -> list[str]:
    keys = []
    for f in fields(TrainConfig):
        hint = get_type_hints(TrainConfig)[f.name]
        if _is_section(hint):
            keys.extend(f"{f.name}.{g.name}" for g in fields(hint))
        else:
            keys.append(f.name)
    return keys


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what the run directory keeps).

    An auto key left at its default and not kept is left out, so that reading the file
    back leaves it to `speed: auto` as the user's config did.
    """
    data = cfg.to_dict()
    defaults = TrainConfig().to_dict()
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
    hints = get_type_hints(TrainConfig)
    for f in fields(TrainConfig):
        hint = hints[f.name]
        if not _is_section(hint):
            lines.append(f"# {f.metadata['doc']}")
            lines.append(f"{f.name}: {_yaml_scalar(getattr(defaults, f.name))}")
            lines.append("")
            continue
        if f.name == "debug":
            lines.append("# debug: test aids (fault injection); leave out in real runs")
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
    """(key, default, doc) for every key: the README's config reference."""
    rows = []
    defaults = TrainConfig()
    hints = get_type_hints(TrainConfig)
    for f in fields(TrainConfig):
        hint = hints[f.name]
        if _is_section(hint):
            section = getattr(defaults, f.name)
            for g in fields(hint):
                rows.append((f"{f.name}.{g.name}", _yaml_scalar(getattr(section, g.name)), g.metadata["doc"]))
        else:
            rows.append((f.name, _yaml_scalar(getattr(defaults, f.name)), f.metadata["doc"]))
    return rows
