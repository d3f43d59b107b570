"""The training run: phases from config to done, TRL's SFTTrainer, one error event for any failure."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

from cockpit.config.load import load_config
from cockpit.config.schema import TrainConfig
from cockpit.run import rundir
from train_backend import data as data_mod
from train_backend import emulated_card, oom_watch, step_meter
from train_backend import model as model_mod
from train_backend import speed_setup as fast
from train_backend.callbacks import Controls, make_callback, memory_fields
from train_backend.channel import CommandListener, Emitter
from train_backend.checkpoints import fsync_tree, make_trainer_class
from train_backend.distributed import RankControls, World, choose_strategy, local_first
from train_backend.errors import classify, format_traceback


def build_sft_config(
    cfg: TrainConfig, run: rundir.RunDir, precision: str, device_kind: str, extra: dict | None = None
):
    """`extra`: arguments the speed plan adds or replaces (train_backend.speed_setup.sft_kwargs)."""
    from trl import SFTConfig

    t = cfg.training
    kwargs = dict(
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
    kwargs.update(extra or {})
    return SFTConfig(**kwargs)


def start_recorder(run: rundir.RunDir) -> None:
    """The telemetry recorder (cockpit.telemetry.recorder): our child, in our group, ends with us."""
    # several GPUs: watch the launcher, whose process tree holds every rank of this node
    watched = os.environ.get("COCKPIT_LAUNCHER_PID", str(os.getpid()))
    try:
        subprocess.Popen(
            [sys.executable, "-m", "cockpit.telemetry.recorder", str(run.path), watched],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sys.stderr.fileno(),
            close_fds=True,
        )
    except OSError as exc:  # no history is no reason to stop a run
        print(f"[cockpit] telemetry recorder not started: {exc}", file=sys.stderr)


def run_training(run: rundir.RunDir, emitter: Emitter, world: World | None = None) -> int:
    """The whole run; returns the process exit code. Every failure becomes one `error` event.

    `world`: this process's place among several (torchrun); None for one process.
    """
    controls = Controls(emitter) if world is None else RankControls(emitter, world)
    owner = world is None or world.writes_events  # the one process per node that owns the run dir
    signal.signal(signal.SIGTERM, controls.on_signal)
    signal.signal(signal.SIGINT, controls.on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH drop is not a reason to stop
    if owner:
        CommandListener(str(run.control_path), controls.on_command, controls.on_fault).start()
        start_recorder(run)
    phase = "starting"
    step = None
    tracker = oom_watch.PhaseTracker()  # where an OOM strikes

    def enter(name: str, message: str = "") -> None:
        nonlocal phase
        phase = name
        tracker.enter(name)
        emitter.emit("phase", phase=name, message=message)

    def stopped_early() -> int:
        emitter.emit("done", status="stopped", step=0, message=f"stopped while {phase.replace('_', ' ')}")
        return 0

    try:
        enter("starting", "reading config")
        cfg = load_config(run.config_path)
        oom_watch.allocator_options(cfg)  # before CUDA starts
        import torch
        import transformers

        versions = _versions()
        device = model_mod.detect_device()
        if world is not None:
            world.init_process_group(device.kind, cfg.distributed.timeout_s)
        model_mod.check_device_fits_method(cfg, device)
        precision = model_mod.choose_precision(cfg, device)
        tracker.emulation = oom_watch.emulate_vram(cfg, device.kind)
        card = None  # the emulated card, held to its size as nvidia-smi counts the whole process
        if tracker.emulation is not None and tracker.emulation["applied"]:
            card = emulated_card.start(tracker.emulation["limit_bytes"])
            tracker.emulation["whole_process"] = card is not None
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
            emulated_vram=tracker.emulation,
        )
        if tracker.emulation is not None and not tracker.emulation["applied"]:
            emitter.emit(
                "warning",
                message="emulate_vram_gib has no effect without a CUDA GPU; the OOM wizard still judges "
                "what fits against it",
                hint="",
            )
        transformers.set_seed(cfg.training.seed)
        controls.agree()
        if controls.stop.is_set():
            return stopped_early()

        enter("loading_model", f"resolving {cfg.model.name}")
        with local_first(world):  # one download or synthetic build per node
            model_path = model_mod.resolve_model_path(cfg, precision, device)
        if world is not None:
            choose_strategy(world, cfg, model_path, device.total_bytes)
        tokenizer = model_mod.load_tokenizer(cfg, model_path)

        enter("preparing_data", f"loading {cfg.dataset.path}")
        prepared = data_mod.prepare(cfg.dataset, tokenizer, cfg.training.max_length)
        emitter.emit("data", **prepared.stats)
        plan = fast.make_plan(cfg, device, precision, prepared.lengths, model_path)  # speed: auto
        cfg = plan.config
        emitter.emit("speed_plan", **plan.to_event())
        controls.agree()
        if controls.stop.is_set():
            return stopped_early()

        enter(
            "quantising" if cfg.method == "qlora" else "loading_model", f"loading weights of {cfg.model.name}"
        )
        started = time.time()
        sharded = world is not None and world.strategy == "fsdp"
        model = model_mod.load_model(cfg, model_path, precision, device, sharded=sharded)
        fast.apply_fused_kernels(plan, model)
        load_s = time.time() - started
        controls.agree()
        if controls.stop.is_set():
            return stopped_early()

        peft_config = None if cfg.method == "full" else model_mod.lora_config(cfg)
        train_data, data_kwargs, cache = fast.cached_dataset(plan, run.path, prepared.dataset, cfg, tokenizer)
        args = build_sft_config(cfg, run, precision, device.kind, fast.sft_kwargs(plan, data_kwargs))
        if world is not None:
            args = world.adapt_sft_config(args, cfg)
        meter = step_meter.StepMeter()  # the data wait and tokens per micro-batch, for the doctor
        trainer_cls = step_meter.metered(
            fast.trainer_class(plan, make_trainer_class(emitter, run, cfg)), meter
        )
        trainer = trainer_cls(
            model=model,
            args=args,
            train_dataset=train_data,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[make_callback(emitter, controls, cfg, meter)],
        )
        fast.finish_trainer(plan, trainer, tokenizer, cache if owner else None)
        data_mod.burn_cpu_in_collator(trainer, cfg.debug.collate_cpu_ms)
        tracker.watch(trainer)
        if card is not None:
            card.watch(trainer)
            card.check()  # the weights and the context alone may already be over it
        oom_watch.keep_optimizer_compatible(trainer, resume[-1] if resume else None, cfg, emitter)
        total, trainable = model_mod.parameter_counts(trainer.model)
        emitter.emit(
            "model",
            name=cfg.model.name,
            method=cfg.method,
            params_total=total,
            params_trainable=trainable,
            load_s=round(load_s, 2),
            **memory_fields(),
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
            if owner:
                shutil.rmtree(staged, ignore_errors=True)
            trainer.accelerator.wait_for_everyone()
            trainer.save_model(str(staged))  # several processes: all take part, the main one writes
            trainer.accelerator.wait_for_everyone()
            if owner:
                tokenizer.save_pretrained(str(staged))
                fsync_tree(staged)
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
        if verdict.oom is not None:
            verdict.oom.update(tracker.details())
            if step is None and phase == "training":
                step = tracker.step
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
