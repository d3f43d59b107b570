"""The training run: phases, TRL's SFTTrainer, events, commands, atomic checkpoints."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import statistics
import threading
import time
from pathlib import Path

from cockpit import rundir
from cockpit.config import TrainConfig, load_config
from cockpit.protocol import Fault
from train_backend import data as data_mod
from train_backend import model as model_mod
from train_backend.channel import CommandListener, Emitter
from train_backend.errors import classify, format_traceback


class Controls:
    """What the clients asked for; set by the command thread and signal handlers, read by the loop."""

    def __init__(self, emitter: Emitter):
        self.emitter = emitter
        self.stop = threading.Event()
        self.save = threading.Event()
        self.paused = threading.Event()
        self.wake = threading.Event()
        self.training = False

    def on_command(self, command: dict) -> None:
        name = command["type"]
        accepted, detail = True, ""
        if name == "stop":
            self.stop.set()
            detail = "stopping after the current step, with a checkpoint" if self.training else "stopping"
        elif name == "save":
            if self.training:
                self.save.set()
                detail = "checkpoint after the current step"
            else:
                accepted, detail = False, "no training step yet: nothing to save"
        elif name == "pause":
            self.paused.set()
            detail = "pausing after the current step"
        elif name == "resume":
            accepted = self.paused.is_set()
            detail = "resuming" if accepted else "not paused"
            self.paused.clear()
        self.wake.set()
        self.emitter.emit("command", name=name, accepted=accepted, detail=detail)

    def on_fault(self, fault: Fault) -> None:
        self.emitter.emit("warning", message=f"control channel: {fault.describe()}", hint="")

    def on_signal(self, signum, _frame) -> None:
        self.emitter.emit(
            "command", name="stop", accepted=True, detail=f"signal {signal.Signals(signum).name}"
        )
        self.stop.set()
        self.paused.clear()
        self.wake.set()


def _memory_fields() -> dict:
    import torch

    if torch.cuda.is_available():
        return {
            "mem_allocated_bytes": torch.cuda.memory_allocated(),
            "mem_reserved_bytes": torch.cuda.memory_reserved(),
            "mem_peak_bytes": torch.cuda.max_memory_allocated(),
        }
    import psutil

    return {"rss_bytes": psutil.Process().memory_info().rss}


def make_callback(emitter: Emitter, controls: Controls, cfg: TrainConfig, micro_tokens: dict):
    import torch
    from transformers import TrainerCallback

    class CockpitCallback(TrainerCallback):
        """Events for every logging step; stop/save/pause at step boundaries; test fault injection."""

        def __init__(self):
            self.step_ends: list[float] = []
            self.window_start: tuple[float, int, int] | None = None  # (time, tokens, step)
            self.train_start = time.time()
            self.paused_s = 0.0

        def on_train_begin(self, args, state, control, **kw):
            self.train_start = time.time()
            self.window_start = (time.time(), 0, state.global_step)
            controls.training = True
            emitter.emit(
                "train_begin",
                total_steps=state.max_steps,
                start_step=state.global_step,
                epochs=args.num_train_epochs,
                micro_batch_size=args.per_device_train_batch_size,
                gradient_accumulation_steps=args.gradient_accumulation_steps,
                max_length=cfg.training.max_length,
                gradient_checkpointing=bool(args.gradient_checkpointing),
                precision="bf16" if args.bf16 else ("fp16" if args.fp16 else "fp32"),
                optimizer=str(args.optim.value if hasattr(args.optim, "value") else args.optim),
            )

        def on_step_begin(self, args, state, control, **kw):
            fail_at = cfg.debug.fail_at_step
            if fail_at is not None and state.global_step + 1 == fail_at:
                if cfg.debug.fail_kind == "oom":
                    raise torch.OutOfMemoryError(injected_oom_message())
                if cfg.debug.fail_kind == "other":
                    raise RuntimeError(f"injected fault at step {fail_at} (debug.fail_at_step)")

        def on_step_end(self, args, state, control, **kw):
            self.step_ends.append(time.time())
            if cfg.debug.step_sleep_s:
                time.sleep(cfg.debug.step_sleep_s)
            if controls.save.is_set():
                controls.save.clear()
                control.should_save = True
            if controls.paused.is_set() and not controls.stop.is_set():
                self._pause(state)
            if controls.stop.is_set():
                control.should_save = True
                control.should_training_stop = True
            return control

        def _pause(self, state) -> None:
            emitter.emit("paused", step=state.global_step)
            began = time.time()
            while controls.paused.is_set() and not controls.stop.is_set():
                controls.wake.wait(1.0)
                controls.wake.clear()
            self.paused_s += time.time() - began
            # the pause is not training time: restart the throughput window
            self.window_start = (time.time(), micro_tokens["seen"], state.global_step)
            self.step_ends.clear()
            emitter.emit("resumed", step=state.global_step, paused_s=round(time.time() - began, 2))

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            if "loss" not in logs:
                return
            now = time.time()
            tokens = int(logs.get("num_tokens", 0))
            micro_tokens["seen"] = tokens
            t0, tok0, step0 = self.window_start or (self.train_start, 0, 0)
            dt = max(now - t0, 1e-9)
            steps = state.global_step - step0
            samples = steps * args.per_device_train_batch_size * args.gradient_accumulation_steps
            intervals = [b - a for a, b in zip(self.step_ends, self.step_ends[1:])]
            emitter.emit(
                "log",
                step=state.global_step,
                total_steps=state.max_steps,
                epoch=round(float(state.epoch or 0), 4),
                loss=logs.get("loss"),
                learning_rate=logs.get("learning_rate"),
                grad_norm=logs.get("grad_norm"),
                tokens_seen=tokens,
                tokens_per_s=round((tokens - tok0) / dt, 1) if tokens >= tok0 and steps > 0 else None,
                samples_per_s=round(samples / dt, 3) if steps > 0 else None,
                step_time_s=round(statistics.median(intervals), 4)
                if intervals
                else round(dt / max(steps, 1), 4),
                elapsed_s=round(now - self.train_start - self.paused_s, 2),
                **_memory_fields(),
            )
            self.window_start = (now, tokens, state.global_step)
            self.step_ends = self.step_ends[-1:]

    return CockpitCallback()


def injected_oom_message() -> str:
    """The newer allocator format, as PyTorch prints it (for tests of the OOM path)."""
    return (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which "
        "1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use. Of the "
        "allocated memory 20.10 GiB is allocated by PyTorch, and 2.00 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. "
        "(injected by debug.fail_at_step)"
    )


def make_trainer_class(emitter: Emitter, run: rundir.RunDir, cfg: TrainConfig):
    from trl import SFTTrainer

    keep = cfg.output.checkpoints_kept

    class CockpitSFTTrainer(SFTTrainer):
        """SFTTrainer whose checkpoints appear atomically: written aside, synced, then renamed."""

        _staging = False

        def _get_output_dir(self, trial):
            if self._staging:
                return str(run.checkpoints_dir / rundir.STAGING_NAME)
            return super()._get_output_dir(trial)

        def _save_checkpoint(self, model, trial):
            step = self.state.global_step
            staging_root = run.checkpoints_dir / rundir.STAGING_NAME
            staged = staging_root / f"checkpoint-{step}"
            final = run.checkpoints_dir / f"checkpoint-{step}"
            shutil.rmtree(staged, ignore_errors=True)
            started = time.time()
            self._staging = True
            try:
                super()._save_checkpoint(model, trial)
                if cfg.debug.fail_kind == "disk_full" and step == cfg.debug.fail_at_step:
                    raise OSError(errno.ENOSPC, "No space left on device (injected by debug.fail_at_step)")
            finally:
                self._staging = False
            marker = {"step": step, "saved_at": time.time(), "save_s": round(time.time() - started, 3)}
            (staged / rundir.COMPLETE_MARKER).write_text(json.dumps(marker))
            _fsync_tree(staged)
            if final.exists():  # an older save of this step that never completed
                shutil.rmtree(final)
            os.rename(staged, final)
            _fsync_dir(run.checkpoints_dir)
            try:
                staging_root.rmdir()
            except OSError:
                pass
            removed = _rotate(run.checkpoints_dir, keep)
            size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file())
            emitter.emit(
                "checkpoint",
                step=step,
                path=str(final),
                bytes=size,
                save_s=marker["save_s"],
                removed=[p.name for p in removed],
            )

    return CockpitSFTTrainer


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rotate(folder: Path, keep: int) -> list[Path]:
    complete = rundir.complete_checkpoints(folder)
    removed = complete[:-keep] if keep and len(complete) > keep else []
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def build_sft_config(cfg: TrainConfig, run: rundir.RunDir, precision: str, device_kind: str):
    from trl import SFTConfig

    t = cfg.training
    return SFTConfig(
        output_dir=str(run.checkpoints_dir),
        per_device_train_batch_size=t.micro_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_train_epochs=t.epochs,
        max_steps=t.max_steps if t.max_steps is not None else -1,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup,
        optim=t.optimizer,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        gradient_checkpointing=t.gradient_checkpointing,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=device_kind == "cpu",
        max_length=t.max_length,
        packing=t.packing,
        train_sampling_strategy=t.sampling,
        seed=t.seed,
        data_seed=t.seed,
        logging_steps=t.logging_steps,
        logging_first_step=True,
        dataloader_num_workers=t.dataloader_num_workers,
        save_strategy="steps",
        save_steps=cfg.output.save_steps,
        save_total_limit=None,  # rotation happens after the atomic rename, see CockpitSFTTrainer
        report_to=[],
        disable_tqdm=True,
        dataset_text_field="text",
    )


def run_training(run: rundir.RunDir, emitter: Emitter) -> int:
    """The whole run; returns the process exit code. Every failure becomes one `error` event."""
    controls = Controls(emitter)
    signal.signal(signal.SIGTERM, controls.on_signal)
    signal.signal(signal.SIGINT, controls.on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH drop is not a reason to stop
    CommandListener(str(run.control_path), controls.on_command, controls.on_fault).start()
    phase = "starting"
    step = None

    def enter(name: str, message: str = "") -> None:
        nonlocal phase
        phase = name
        emitter.emit("phase", phase=name, message=message)

    def stopped_early() -> int:
        emitter.emit("done", status="stopped", step=0, message=f"stopped while {phase.replace('_', ' ')}")
        return 0

    try:
        enter("starting", "reading config")
        cfg = load_config(run.config_path)
        import torch
        import transformers

        versions = _versions()
        device = model_mod.detect_device()
        model_mod.check_device_fits_method(cfg, device)
        precision = model_mod.choose_precision(cfg, device)
        resume = run.complete_checkpoints()
        staging = run.checkpoints_dir / rundir.STAGING_NAME
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
            emitter.emit(
                "warning", message="removed an unfinished checkpoint save from a previous attempt", hint=""
            )
        emitter.emit(
            "hello",
            pid=os.getpid(),
            pgid=os.getpgid(0),
            run_id=run.run_id,
            device=device.to_dict(),
            precision=precision,
            versions=versions,
            resume_from=str(resume[-1]) if resume else None,
            price_per_hour=cfg.cost.price_per_hour,
        )
        transformers.set_seed(cfg.training.seed)
        if controls.stop.is_set():
            return stopped_early()

        enter("loading_model", f"resolving {cfg.model.name}")
        model_path = model_mod.resolve_model_path(cfg, precision, device)
        tokenizer = model_mod.load_tokenizer(cfg, model_path)

        enter("preparing_data", f"loading {cfg.dataset.path}")
        prepared = data_mod.prepare(cfg.dataset, tokenizer, cfg.training.max_length)
        emitter.emit("data", **prepared.stats)
        if controls.stop.is_set():
            return stopped_early()

        enter(
            "quantising" if cfg.method == "qlora" else "loading_model", f"loading weights of {cfg.model.name}"
        )
        started = time.time()
        model = model_mod.load_model(cfg, model_path, precision, device)
        load_s = time.time() - started
        if controls.stop.is_set():
            return stopped_early()

        peft_config = None if cfg.method == "full" else model_mod.lora_config(cfg)
        args = build_sft_config(cfg, run, precision, device.kind)
        trainer_cls = make_trainer_class(emitter, run, cfg)
        micro_tokens = {"seen": 0}
        trainer = trainer_cls(
            model=model,
            args=args,
            train_dataset=prepared.dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[make_callback(emitter, controls, cfg, micro_tokens)],
        )
        total, trainable = model_mod.parameter_counts(trainer.model)
        emitter.emit(
            "model",
            name=cfg.model.name,
            method=cfg.method,
            params_total=total,
            params_trainable=trainable,
            load_s=round(load_s, 2),
            **_memory_fields(),
        )
        if device.kind == "cuda":
            torch.cuda.reset_peak_memory_stats()

        enter("training", f"resuming from {resume[-1].name}" if resume else "")
        result = trainer.train(resume_from_checkpoint=str(resume[-1]) if resume else None)
        step = trainer.state.global_step
        if controls.stop.is_set():
            emitter.emit(
                "done",
                status="stopped",
                step=step,
                total_steps=trainer.state.max_steps,
                train_loss=result.training_loss,
                message="stopped by request; checkpoint saved",
            )
            return 0

        final = None
        if cfg.output.save_final:
            enter("saving", "final adapter" if peft_config else "final model")
            staged = run.path / f".{rundir.FINAL_NAME}.staging"
            shutil.rmtree(staged, ignore_errors=True)
            trainer.save_model(str(staged))
            tokenizer.save_pretrained(str(staged))
            _fsync_tree(staged)
            os.rename(staged, run.final_dir)
            final = str(run.final_dir)
        enter("done")
        emitter.emit(
            "done",
            status="finished",
            step=step,
            total_steps=trainer.state.max_steps,
            train_loss=result.training_loss,
            runtime_s=round(result.metrics.get("train_runtime", 0.0), 2),
            output=final,
        )
        return 0
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        verdict = classify(exc, phase, str(run.path))
        emitter.emit(
            "error",
            kind=verdict.kind,
            message=verdict.message,
            hint=verdict.hint,
            phase=phase,
            step=step,
            oom=verdict.oom,
            traceback=format_traceback(exc),
            checkpoints=[p.name for p in run.complete_checkpoints()],
        )
        print(format_traceback(exc))
        return verdict.exit_code


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "transformers", "peft", "trl", "bitsandbytes", "datasets", "accelerate"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out
