"""The trainer's side of `speed: auto`: find the facts, ask cockpit.speed.auto, apply its plan.

cockpit/speed/auto.py decides (pure Python); this module detects what it needs (device
memory, which kernels import, the model's shape) and carries the plan out: Liger kernels on
the model, SFTConfig arguments, packed rows and the token cache in the run directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from cockpit.config.schema import TrainConfig
from cockpit.fmt import GIB
from cockpit.models.shape import ModelShape, ShapeError, from_config_dict
from cockpit.speed import auto as speed_auto
from cockpit.speed import batch_choice
from cockpit.speed import model as speed_model
from train_backend import packing
from train_backend.speed import host_probe as host_speed

CACHE_DIR = "data-cache"


def make_plan(cfg: TrainConfig, device, precision: str, lengths: list[int], model_path: str):
    shape, note = read_shape(cfg, model_path)
    facts = detect_facts(cfg, device, precision, shape.model_type if shape else None)
    return speed_auto.plan(cfg, facts, lengths, shape, note)


def read_shape(cfg: TrainConfig, model_path: str) -> tuple[ModelShape | None, str]:
    """The model's shape from its config.json, for the memory and speed models."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            model_path, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code
        )
        return from_config_dict(config.to_dict(), cfg.model.name, f"config.json of {model_path}"), ""
    except ShapeError as exc:
        return None, str(exc)
    except Exception as exc:  # the model load that follows reports a bad path or hub in full
        return None, f"its config.json could not be read: {type(exc).__name__}: {exc}"


def detect_facts(cfg: TrainConfig, device, precision: str, model_type: str | None) -> speed_auto.Facts:
    import psutil

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    facts = {
        "device_kind": device.kind,
        "precision": precision,
        "device_name": device.name,
        "cpu_count": cpus,
        "host_available_bytes": psutil.virtual_memory().available,
        "capability": ".".join(map(str, device.capability)) if device.capability else None,
    }
    if device.kind != "cuda":
        return speed_auto.Facts(**facts)
    if cfg.emulate_vram_gib:
        memory, note = int(cfg.emulate_vram_gib * GIB), f"emulate_vram_gib {cfg.emulate_vram_gib:g}"
    else:
        memory, note = device.total_bytes, f"the {device.name}'s {(device.total_bytes or 0) / GIB:.1f} GiB"
    card, card_note = speed_auto.card_for(device.name, device.total_bytes)
    probe = host_speed.measure()
    probe_ms = probe["ms"] if probe else None
    card = dataclasses.replace(card, host_scale=speed_model.host_scale_for(probe_ms))
    return speed_auto.Facts(
        **facts,
        memory_bytes=memory,
        memory_note=note,
        flash_attention=_flash_attention(device),
        card=card,
        card_note=card_note,
        host_probe_ms=probe_ms,
        host_probe_spread=probe["spread"] if probe else None,
        **_liger(model_type),
    )


def _flash_attention(device) -> str | None:
    from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available

    if device.capability and device.capability >= (9, 0) and is_flash_attn_3_available():
        return "flash_attention_3"
    return "flash_attention_2" if is_flash_attn_2_available() else None


def _liger(model_type: str | None) -> dict:
    import importlib.metadata

    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        return {"liger_note": "liger-kernel is not installed (pip install liger-kernel)"}
    except Exception as exc:  # a Triton or torch mismatch: say so, train without it
        return {"liger_note": f"liger-kernel does not import: {type(exc).__name__}: {exc}"}
    version = importlib.metadata.version("liger-kernel")
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return {"liger": version, "liger_note": f"liger-kernel has no kernels for model type {model_type!r}"}
    return {"liger": version, "liger_model": True}


def apply_fused_kernels(plan, model) -> None:
    """Liger's RMSNorm, RoPE and SwiGLU on the loaded model (before the adapters wrap it)."""
    if not plan.liger:
        return
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(
        model=model,
        rope=True,
        rms_norm=True,
        swiglu=True,
        cross_entropy=False,
        fused_linear_cross_entropy=False,
    )


def apply_quant_scales(cfg: TrainConfig, model, sharded: bool) -> dict | None:
    """quantization.unpack_scales (speed: auto sets it where the memory plan has room): the
    double-quantised 4-bit scales unpacked once into fp32 (train_backend/speed/quant_scales.py).
    {"weights": n, "bytes": grown}, {"kept": why} under FSDP, None when not asked for."""
    q = cfg.quantization
    if not (cfg.method == "qlora" and q.bits == 4 and q.double_quant and q.unpack_scales):
        return None
    if sharded:  # distributed.strategy auto chose FSDP at launch, which the plan could not know
        return {"kept": "FSDP shards the 4-bit weights with their scales"}
    from train_backend.speed import quant_scales

    return quant_scales.unpack(model)


def apply_mlp_block(plan, model, sharded: bool) -> dict | None:
    """The fused MLP block (train_backend/speed/fused_mlp.py) on the peft model, when the plan chose it:
    {"fused": n, "kept": {reason: count}}; None when it did not."""
    if plan.mlp_block != "fused":
        return None
    if sharded:
        return {"fused": 0, "kept": {batch_choice.FSDP_LORA_NOTE: 1}}
    from train_backend.speed import fused_mlp

    return fused_mlp.apply(model)


def apply_lora_backend(plan, model, sharded: bool) -> dict | None:
    """The fused LoRA layers (train_backend/speed/fused_lora.py) on the peft model, when the plan chose
    them: {"fused": n, "kept": {reason: count}}; None when it did not."""
    if plan.lora_backend != "fused":
        return None
    from train_backend.speed import fused_lora

    # sharded: distributed.strategy auto chose FSDP at launch, which the plan could not know
    refuse = batch_choice.FSDP_LORA_NOTE if sharded else None
    return fused_lora.apply(model, refuse)


def sft_kwargs(plan, dataset_kwargs: dict | None) -> dict:
    """SFTConfig arguments beyond the config's own keys."""
    kwargs: dict = {"packing": plan.sft_packing}
    if plan.pad_multiple > 1:  # TRL's collator (plain and flattened rows); packed rows: ours
        kwargs["pad_to_multiple_of"] = plan.pad_multiple
    if plan.sft_packing:
        kwargs["packing_strategy"] = "bfd"  # with flash-attention: padding-free, one flattened row
    if plan.checkpoint_layers and plan.checkpoint_every > 1:
        kwargs["gradient_checkpointing_kwargs"] = {"every_n_layers": plan.checkpoint_every}
    if dataset_kwargs:
        kwargs["dataset_kwargs"] = dataset_kwargs
    return kwargs


def extra_callbacks(plan, emitter) -> list:
    """Trainer callbacks the plan needs: the host-memory checkpointing of its layers' inputs, or its
    checkpointed layers (exactly its count where every_n_layers cannot give it), kept through TRL's
    reference forwards (train_backend/speed/layer_mask.py)."""
    if plan.checkpoint_offload:
        from train_backend.speed import host_checkpoint

        return [host_checkpoint.make_callback(emitter)]
    if plan.mode == "auto" and plan.checkpoint_layers:
        from train_backend.speed.layer_mask import PlannedLayers

        return [PlannedLayers(plan.checkpoint_layers, emitter, exact=plan.checkpoint_every == 1)]
    return []


def trainer_class(plan, trainer_cls):
    return packing.with_real_token_count(trainer_cls) if plan.packing == "rows" else trainer_cls


def cached_dataset(plan, run_path: Path, dataset, cfg: TrainConfig, tokenizer):
    """(dataset, dataset_kwargs, cache folder): the tokenized dataset from an earlier attempt of
    this run when there is one (TRL then skips its preparation), else the raw one."""
    if not plan.cache_tokens or plan.mode != "auto":
        return dataset, None, None
    import trl

    key = {
        "fingerprint": getattr(dataset, "_fingerprint", None),
        "max_length": cfg.training.max_length,
        "dataset": cfg.dataset.__dict__,
        "tokenizer": [getattr(tokenizer, "name_or_path", ""), len(tokenizer), tokenizer.eos_token],
        "trl": trl.__version__,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    folder = run_path / CACHE_DIR / digest
    if key["fingerprint"] is not None and (folder / "state.json").is_file():
        import datasets

        return datasets.load_from_disk(str(folder)), {"skip_prepare_dataset": True}, None
    return dataset, None, folder if key["fingerprint"] is not None else None


def finish_trainer(plan, trainer, tokenizer, cache_folder: Path | None) -> None:
    """After SFTTrainer prepared the data: keep it in the cache, then pack it into rows."""
    if cache_folder is not None:  # written aside and renamed: a cache is complete or absent
        staging = cache_folder.with_name(f".{cache_folder.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        columns = [c for c in ("input_ids", "labels") if c in trainer.train_dataset.column_names]
        trainer.train_dataset.select_columns(columns).save_to_disk(str(staging))
        shutil.rmtree(cache_folder, ignore_errors=True)
        try:
            os.replace(staging, cache_folder)
        except OSError:  # another process of this run got there first
            shutil.rmtree(staging, ignore_errors=True)
    if plan.packing == "rows":
        trainer.train_dataset = packing.pack_rows(trainer.train_dataset, plan.config.training.max_length)
        trainer.data_collator = packing.PackedRowsCollator(tokenizer.pad_token_id, plan.pad_multiple)
