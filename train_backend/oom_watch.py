"""What the trainer records so that an out-of-memory error can be explained and fixed.

- `PhaseTracker`: where the run is, finely enough to say where an OOM struck (model load,
  first forward, forward, backward, optimizer step, evaluation, checkpoint save), the step,
  and the shape of the batch in flight. Cheap: it wraps three trainer methods and listens to
  three callbacks; no per-module hooks.
- `memory_snapshot`: the allocator's counters at the failure (no NVML: torch only).
- `emulate_vram`: cap the allocator so the run behaves as on a smaller card
  (`emulate_vram_gib`); `allocator_options`: `expandable_segments` before CUDA starts.
- `keep_optimizer_compatible`: a relaunch that changed the optimizer (e.g. to 8-bit)
  resumes the weights and the schedule, not the old optimizer's states.
"""

from __future__ import annotations

import os
from pathlib import Path

from cockpit.config.schema import ConfigError, TrainConfig
from cockpit.fmt import GIB
from train_backend import test_aids
from train_backend.channel import Emitter

# the trainer's coarse phases -> the OOM's phase when it strikes outside the training loop
COARSE = {
    "starting": "startup",
    "loading_model": "model_load",
    "quantising": "model_load",
    "preparing_data": "data",
    "saving": "final_save",
    "evaluating": "evaluation",
    "sampling": "evaluation",
}


class PhaseTracker:
    """The phase, step and batch in flight; read by the trainer when something fails."""

    def __init__(self) -> None:
        self.phase = "startup"
        self.step: int | None = None
        self.seq_len: int | None = None
        self.batch_rows: int | None = None
        self.forwards_done = 0
        self.emulation: dict | None = None  # what emulate_vram set up

    def enter(self, coarse: str) -> None:
        """The trainer's own phases (starting, loading_model, ...); training is tracked finely."""
        if coarse in COARSE:
            self.phase = COARSE[coarse]

    def _next_forward(self, step: int) -> None:
        self.step = step
        self.phase = "forward" if self.forwards_done else "first_forward"
        self.seq_len = self.batch_rows = None

    def watch(self, trainer) -> None:
        """Wrap the trainer's loss, checkpoint and evaluation calls and add the step callback."""
        from transformers import TrainerCallback

        tracker = self
        compute_loss = trainer.compute_loss
        save_checkpoint = trainer._save_checkpoint
        evaluate = trainer.evaluate

        def tracked_loss(model, inputs, *args, **kwargs):
            training = model.training
            ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
            if ids is not None and hasattr(ids, "shape") and len(ids.shape) == 2:
                tracker.batch_rows, tracker.seq_len = int(ids.shape[0]), int(ids.shape[1])
            if training:
                tracker.phase = "forward" if tracker.forwards_done else "first_forward"
            result = compute_loss(model, inputs, *args, **kwargs)
            if training:
                tracker.forwards_done += 1
                tracker.phase = "backward"
            return result

        def tracked_save(*args, **kwargs):
            before, tracker.phase = tracker.phase, "checkpoint_save"
            save_checkpoint(*args, **kwargs)
            tracker.phase = before

        def tracked_evaluate(*args, **kwargs):
            before, tracker.phase = tracker.phase, "evaluation"
            try:
                return evaluate(*args, **kwargs)
            finally:
                tracker.phase = before

        trainer.compute_loss = tracked_loss
        trainer._save_checkpoint = tracked_save
        trainer.evaluate = tracked_evaluate

        class StepPhases(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                tracker._next_forward(state.global_step + 1)

            def on_pre_optimizer_step(self, args, state, control, **kw):
                tracker.phase = "optimizer_step"

            def on_substep_end(self, args, state, control, **kw):
                tracker.phase = "forward"

            def on_step_end(self, args, state, control, **kw):
                tracker._next_forward(state.global_step + 1)

        trainer.add_callback(StepPhases())

    def details(self) -> dict:
        """The `oom` event's fields from the trainer: where, which step, which batch, memory."""
        return {
            "phase": self.phase,
            "step": self.step,
            "seq_len": self.seq_len,
            "batch_rows": self.batch_rows,
            "memory": memory_snapshot(),
            "emulated_vram": self.emulation,
        }


def memory_snapshot() -> dict:
    """The allocator's counters now (after an OOM: what was held when it struck). Never raises."""
    try:
        import torch

        if not torch.cuda.is_available():
            import psutil

            return {"rss_bytes": psutil.Process().memory_info().rss}
        free, total = torch.cuda.mem_get_info()
        return {
            "allocated_bytes": torch.cuda.memory_allocated(),
            "reserved_bytes": torch.cuda.memory_reserved(),
            "max_allocated_bytes": torch.cuda.max_memory_allocated(),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(),
            "device_free_bytes": free,
            "device_total_bytes": total,
        }
    except Exception as exc:  # the snapshot must never hide the error being reported
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def allocator_options(cfg: TrainConfig) -> None:
    """`expandable_segments: true` -> PyTorch's allocator option; set before CUDA starts."""
    if not cfg.expandable_segments:
        return
    name = "PYTORCH_ALLOC_CONF" if "PYTORCH_ALLOC_CONF" in os.environ else "PYTORCH_CUDA_ALLOC_CONF"
    current = os.environ.get(name, "")
    if "expandable_segments" not in current:
        os.environ[name] = ",".join(x for x in (current, "expandable_segments:True") if x)


# Code loaded outside the allocator after CUDA starts (lazily loaded kernels of torch, cuBLAS,
# cuBLASLt, attention, bitsandbytes; cuBLAS handles): measured on an H200 (torch 2.11, driver
# 580) from the bare context (527 MiB) to the peak of the first steps, with the cap set right
# after CUDA started: +161 to +172 MiB in 16-bit LoRA (qwen2.5-1.5b 8 x 2048, llama-2-7b 4 x 512)
# and in 4-bit QLoRA on 7B and 1.5B, +229 MiB at the article's 13B QLoRA OOM (cudaMemGetInfo
# less the reserved bytes in the OOM report; NVML above idle less torch's max reserved)
# (bench/results/2026-11-30-oom-scenarios-h200.json, 2026-12-02-oom-article13b-24gib-h200.json,
# and the two 16-bit cases of 2026-12-02). The cap holds back 256 MiB above the bare context for
# it, or what the warm-up measured if that is more. bitsandbytes' paged optimizer states are
# data, not code: `hold_back_paged_states` holds them back from their size.
LAZY_CODE_BYTES = 256 << 20


def warm_up_libraries(precision: str, device: str = "cuda") -> None:
    """Run what every training step runs, once and small, so cuBLAS/cuBLASLt create their handles
    and workspaces and the kernels of a linear layer's forward and backward and of the loss load
    now, before what lives outside the allocator is measured. In the run's dtype and in fp32 (the
    loss and LoRA's fp32 parts); no random numbers, so the run's seed is untouched."""
    import torch
    import torch.nn.functional as F

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dtype in dict.fromkeys((dtypes.get(precision, torch.float32), torch.float32)):
        x = torch.linspace(-1, 1, 64 * 256, device=device).reshape(64, 256).to(dtype).requires_grad_()
        w = torch.linspace(1, -1, 256 * 256, device=device).reshape(256, 256).to(dtype).requires_grad_()
        b = torch.zeros(256, device=device, dtype=dtype, requires_grad=True)
        y = F.linear(x, w, b)  # addmm: cuBLASLt with a bias epilogue
        y = y @ w.t()  # a plain matmul with a transpose: cuBLAS
        target = torch.arange(64, device=device)
        F.cross_entropy(y.float(), target).backward()  # log_softmax, nll, the transposed matmuls
    del x, w, b, y, target
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # cuBLAS workspaces stay (in the allocator, so counted as reserved)


def _outside(torch) -> int:
    """Device memory in use that PyTorch's caching allocator does not hold (cudaMemGetInfo)."""
    free, total = torch.cuda.mem_get_info()
    return max(0, total - free - torch.cuda.memory_reserved())


def emulate_vram(
    cfg: TrainConfig, device_kind: str, precision: str = "fp32", warm_up=warm_up_libraries
) -> dict | None:
    """Cap PyTorch's allocator so the process behaves as on a card of `emulate_vram_gib`.

    nvidia-smi counts the CUDA context and anything else outside the allocator against the
    card; the fraction caps the allocator alone. So the cap is the limit minus what lives outside
    the allocator, measured after CUDA starts and after `warm_up` (the libraries every step uses,
    in the run's `precision`), and minus `LAZY_CODE_BYTES` held back for kernels that later steps
    load (the cap cannot wait for them: the memory they take is in use the moment they load).
    What grows beyond that (bitsandbytes' paged optimizer states, a kernel larger than measured)
    `recap_vram` takes off the cap at each step's begin; the NVML check after every micro-batch
    (train_backend/emulated_card.py) turns what still passes the size into an OOM.
    """
    if cfg.emulate_vram_gib is None:
        return None
    limit = int(cfg.emulate_vram_gib * GIB)
    if device_kind != "cuda":
        return {"limit_bytes": limit, "applied": False}
    import torch

    torch.cuda.init()
    bare = _outside(torch)  # the CUDA context (and any other process on the GPU)
    warm_up(precision)
    warmed = _outside(torch)
    held_back = max(bare + LAZY_CODE_BYTES, warmed)
    total = torch.cuda.mem_get_info()[1]
    allowed = limit - held_back
    if limit > total or allowed <= 0:
        raise ConfigError(
            f"emulate_vram_gib: {cfg.emulate_vram_gib:g} GiB cannot be emulated on this GPU "
            f"({total / GIB:.2f} GiB, of which {warmed / GIB:.2f} GiB are already in use outside PyTorch "
            f"and {LAZY_CODE_BYTES >> 20} MiB are held back for kernels loaded later). "
            "Give a size below the card's and above what is in use."
        )
    torch.cuda.set_per_process_memory_fraction(allowed / total)
    _EMULATION.clear()
    _EMULATION.update(
        limit_bytes=limit,
        applied=True,
        allowed_bytes=allowed,
        outside_bytes_at_start=bare,
        outside_bytes_after_warm_up=warmed,
        held_back_bytes=held_back,
        outside_bytes_max=warmed,
        device_total_bytes=total,
    )
    return _EMULATION


_EMULATION: dict = {}  # what emulate_vram set up; recap_vram keeps it current


def recap_vram() -> None:
    """Lower the cap when what lives outside the allocator grew past what the cap holds back
    (bitsandbytes' paged optimizer states after the first optimizer step, kernels beyond
    `LAZY_CODE_BYTES`), so the emulated card keeps its size as nvidia-smi counts it from the next
    step on. Called at every step's begin: one cudaMemGetInfo, a few microseconds."""
    if not _EMULATION.get("applied"):
        return
    import torch

    outside = _outside(torch)
    _EMULATION["outside_bytes_max"] = max(_EMULATION["outside_bytes_max"], outside)
    if outside <= _EMULATION["held_back_bytes"]:
        return
    allowed = max(1, _EMULATION["limit_bytes"] - outside)
    torch.cuda.set_per_process_memory_fraction(allowed / _EMULATION["device_total_bytes"])
    if torch.cuda.memory_reserved() > allowed:  # a lower cap does not give back what is cached
        torch.cuda.empty_cache()
    _EMULATION.update(allowed_bytes=allowed, held_back_bytes=outside)


def hold_back_paged_states(trainable_params: int, optimizer: str) -> int:
    """Hold back, before the first step, what bitsandbytes' paged optimizer will allocate outside
    the allocator (unified memory, resident on the GPU from its first step: nvidia-smi counts it):
    its states' bytes per trainable parameter (cockpit.models.memory.OPTIMIZER_STATE_BYTES: 8 for
    paged_adamw_32bit, 2 for paged_adamw_8bit). Otherwise the cache that step 1 filled up to the
    cap sits beside the new states until the next step's `recap_vram`: the article's 13B QLoRA
    showed 24.40 GiB on a 24 GiB card that way. A real card would page the states out under
    pressure (slowly); the emulated card holds them to its size instead. The bytes held back."""
    if not _EMULATION.get("applied") or not optimizer.startswith("paged_"):
        return 0
    from cockpit.models.memory import OPTIMIZER_STATE_BYTES

    states = int(trainable_params * (OPTIMIZER_STATE_BYTES.get(optimizer) or 8))
    allowed = _EMULATION["limit_bytes"] - _EMULATION["held_back_bytes"] - states
    if allowed <= 0:
        return 0  # nothing left for the allocator: the run meets its OOM as it is
    import torch

    torch.cuda.set_per_process_memory_fraction(allowed / _EMULATION["device_total_bytes"])
    _EMULATION.update(
        allowed_bytes=allowed,
        held_back_bytes=_EMULATION["held_back_bytes"] + states,
        paged_states_bytes=states,
    )
    return states


def checkpoint_optimizer(checkpoint: Path) -> str | None:
    """The optimizer a checkpoint's states belong to (from its training_args.bin), or None."""
    path = Path(checkpoint) / "training_args.bin"
    if not path.is_file():
        return None
    try:
        import torch

        args = torch.load(path, weights_only=False)  # our own file, written by the trainer
    except Exception:
        return None
    optim = getattr(args, "optim", None)
    return str(getattr(optim, "value", optim)) if optim is not None else None


def keep_optimizer_compatible(trainer, checkpoint: Path | None, cfg: TrainConfig, emitter: Emitter) -> None:
    """When the optimizer changed since `checkpoint` (an OOM remedy: 8-bit states), resume the
    weights and the learning-rate schedule but let the new optimizer start its own states."""
    if checkpoint is None:
        return
    before = checkpoint_optimizer(checkpoint)
    if before is None or before == cfg.training.optimizer:
        return
    import torch

    def load_schedule_only(folder) -> None:
        path = Path(folder) / "scheduler.pt"
        if path.is_file():
            trainer.lr_scheduler.load_state_dict(torch.load(path, weights_only=True))

    trainer._load_optimizer_and_scheduler = load_schedule_only
    emitter.emit(
        "warning",
        message=f"the optimizer changed ({before} -> {cfg.training.optimizer}): its states start afresh "
        f"from {checkpoint.name}; weights and learning-rate schedule continue",
        hint="",
    )


def injected_oom_message(card_gib: float | None = None) -> str:
    """A `torch.OutOfMemoryError` message in the newer format for a full card (test aid).

    The card is `card_gib` (the run's emulate_vram_gib) or 23.65 GiB; the figures keep the
    proportions of a real message seen on a 24 GB card.
    """
    card = (card_gib or 23.65) * GIB

    def size(share: float) -> str:
        return format_size(int(card * share / 23.65))

    return (
        f"CUDA out of memory. Tried to allocate {size(2.00)}. GPU 0 has a total capacity of {size(23.65)} of "
        f"which {size(1.02)} is free. Including non-PyTorch memory, this process has {size(22.61)} memory in "
        f"use. Of the allocated memory {size(20.10)} is allocated by PyTorch, and {size(2.00)} is reserved "
        "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. "
        f"{test_aids.MARK}"
    )


def format_size(n_bytes: int) -> str:
    """As PyTorch's allocator writes sizes in its messages."""
    if n_bytes <= 1024:
        return f"{n_bytes} bytes"
    for unit, scale in (("KiB", 2**10), ("MiB", 2**20)):
        if n_bytes <= scale * 1024:
            return f"{n_bytes / scale:.2f} {unit}"
    return f"{n_bytes / GIB:.2f} GiB"
