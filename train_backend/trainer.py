"""The training run: phases from config to done, TRL's SFTTrainer, one error event for any failure."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time

from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError, TrainConfig
from cockpit.money import budget as budget_mod
from cockpit.run import rundir
from train_backend import data as data_mod
from train_backend import emulated_card, generation, oom_watch, step_meter
from train_backend import evaluation as eval_mod
from train_backend import model as model_mod
from train_backend.channel import CommandListener, Emitter
from train_backend.checkpoints import clean_unfinished, fsync_tree, trainer_class
from train_backend.controls import Controls
from train_backend.distributed import RankControls, World, choose_strategy, local_first
from train_backend.errors import classify, format_traceback
from train_backend.rundir_watch import RunDirectoryGone, RunDirWatch
from train_backend.speed import host_probe as host_speed
from train_backend.speed import setup as fast


def build_sft_config(
    cfg: TrainConfig, run: rundir.RunDir, precision: str, device_kind: str, extra: dict | None = None
):
    """`extra`: arguments the speed plan adds or replaces (train_backend.speed.setup.sft_kwargs)."""
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
        save_total_limit=None,  # rotation happens after the atomic rename (AtomicCheckpoints)
        report_to=list(cfg.report_to or []),  # validated installed (cockpit.config.load)
        run_name=run.run_id,  # the trackers' name for it
        disable_tqdm=True,
        dataset_text_field="text",
    )
    if "trackio" in kwargs["report_to"] and "project" in {f.name for f in dataclasses.fields(SFTConfig)}:
        kwargs["project"] = "lora-cockpit"  # trackio's project (an argument of newer transformers)
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
        RunDirWatch(run.path, controls.on_run_dir_gone).start()
        start_recorder(run)
    phase = "starting"
    step = None
    tracker = oom_watch.PhaseTracker()  # where an OOM strikes
    prior = budget_mod.history_state(run.events_path)  # earlier attempts: what they cost

    def enter(name: str, message: str = "") -> None:
        nonlocal phase
        phase = name
        tracker.enter(name)
        emitter.emit("phase", phase=name, message=message)

    def stopped_early() -> int:
        if controls.gone.is_set():
            raise RunDirectoryGone(f"stopped while {phase.replace('_', ' ')}")
        emitter.emit("done", status="stopped", step=0, message=f"stopped while {phase.replace('_', ' ')}")
        return 0

    try:
        enter("starting", "reading config")
        cfg = load_config(run.config_path)
        refusal = budget_mod.already_spent(cfg, prior, run.run_id)
        if refusal is not None:
            raise ConfigError(refusal)
        oom_watch.allocator_options(cfg)  # before CUDA starts
        import torch
        import transformers

        versions = _versions()
        device = model_mod.detect_device()
        if world is not None:
            world.init_process_group(device.kind, cfg.distributed.timeout_s)
        model_mod.check_device_fits_method(cfg, device)
        precision = model_mod.choose_precision(cfg, device)
        tracker.emulation = oom_watch.emulate_vram(cfg, device.kind, precision)
        if owner:
            clean_unfinished(run, emitter)
        card = None  # the emulated card, held to its size as nvidia-smi counts the whole process
        if tracker.emulation is not None and tracker.emulation["applied"]:
            card = emulated_card.start(tracker.emulation["limit_bytes"], tracker.emulation)
        resume = run.complete_checkpoints()
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
            max_usd=cfg.cost.max_usd,
            emulated_vram=tracker.emulation,
        )
        budget = budget_mod.budget_for(cfg, prior, time.time())
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
        prepared, held_out = eval_mod.split_eval(cfg, prepared, tokenizer)
        style, prefix = _prompt_style(prepared, tokenizer)
        prompts = eval_mod.build_prompts(cfg, held_out, tokenizer, style, prefix)
        emitter.emit("data", **prepared.stats, **_eval_fields(held_out, style, prefix, prompts))
        if prepared.dropped_note:
            emitter.emit("warning", message=prepared.dropped_note, hint="fix or remove those rows")
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
        scales = fast.apply_quant_scales(cfg, model, sharded)
        load_s = time.time() - started
        controls.agree()
        if controls.stop.is_set():
            return stopped_early()

        peft_config = None if cfg.method == "full" else model_mod.lora_config(cfg)
        _tracker_dirs(cfg, run)
        train_data, data_kwargs, cache = fast.cached_dataset(plan, run.path, prepared.dataset, cfg, tokenizer)
        args = build_sft_config(cfg, run, precision, device.kind, fast.sft_kwargs(plan, data_kwargs))
        if world is not None:
            args = world.adapt_sft_config(args, cfg)
        meter = step_meter.StepMeter()  # the data wait and tokens per micro-batch, for the doctor
        eval_tracker = eval_mod.EvalTracker(run) if held_out is not None else None
        evaluator = eval_mod.Evaluator(
            cfg, emitter, eval_tracker or eval_mod.EvalTracker(run), held_out, prompts, style
        )
        from train_backend.callbacks import CockpitCallback, memory_fields

        callbacks = [CockpitCallback(emitter, controls, cfg, budget=budget, meter=meter)]
        if held_out is not None or prompts:
            callbacks.append(eval_mod.make_eval_callback(evaluator, controls))
        callbacks.extend(fast.extra_callbacks(plan, emitter))
        if cfg.debug.profile_steps and (world is None or world.rank == 0):
            from train_backend.profiling import make_profile_callback

            callbacks.append(
                make_profile_callback(run.path, cfg.debug.profile_from_step, cfg.debug.profile_steps, emitter)
            )
        trainer_cls = step_meter.metered(fast.trainer_class(plan, trainer_class()), meter)
        trainer = trainer_cls(
            model=model,
            args=args,
            train_dataset=train_data,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=callbacks,
            run=run,
            emitter=emitter,
            cfg=cfg,
            eval_tracker=eval_tracker,
        )
        evaluator.trainer = trainer
        if prompts and world is not None and world.strategy == "fsdp":
            evaluator.sampling = False
            emitter.emit(
                "warning",
                message="eval.prompts: no samples under FSDP (generation needs the whole model on one GPU); "
                "try the adapter with cockpit chat after the run",
                hint="",
            )
        fast.finish_trainer(plan, trainer, tokenizer, cache if owner else None)
        lora_fused = fast.apply_lora_backend(plan, trainer.model, sharded)
        mlp_fused = fast.apply_mlp_block(plan, trainer.model, sharded)
        data_mod.burn_cpu_in_collator(trainer, cfg.debug.collate_cpu_ms)
        tracker.watch(trainer)
        if card is not None:
            card.watch(trainer)
            card.check()  # the weights and the context alone may already be over it
        oom_watch.keep_optimizer_compatible(trainer, resume[-1] if resume else None, cfg, emitter)
        total, trainable = model_mod.parameter_counts(trainer.model)
        optim = trainer.args.optim
        oom_watch.hold_back_paged_states(trainable, str(getattr(optim, "value", optim)))  # before step 1
        emitter.emit(
            "model",
            name=cfg.model.name,
            method=cfg.method,
            params_total=total,
            params_trainable=trainable,
            load_s=round(load_s, 2),
            lora_fused=lora_fused,
            scales_unpacked=scales,
            mlp_fused=mlp_fused,
            **memory_fields(),
        )
        if device.kind == "cuda":
            torch.cuda.reset_peak_memory_stats()

        enter("training", f"resuming from {resume[-1].name}" if resume else "")
        result = trainer.train(resume_from_checkpoint=str(resume[-1]) if resume else None)
        step = trainer.state.global_step
        end_probe = host_speed.measure() if device.kind == "cuda" and not controls.stop.is_set() else None
        if controls.gone.is_set():
            raise RunDirectoryGone(f"stopped at step {step} of {trainer.state.max_steps}, with no checkpoint")
        if controls.stop.is_set():
            saved = run.complete_checkpoints()
            at = f"; {saved[-1].name} saved" if saved else ""
            over = controls.budget_reached
            emitter.emit(
                "done",
                status="stopped",
                step=step,
                total_steps=trainer.state.max_steps,
                train_loss=result.training_loss,
                runtime_s=round(result.metrics.get("train_runtime", 0.0), 2),
                reason="budget" if over else "request",
                message=(f"stopped at the budget ({over}){at}" if over else f"stopped by request{at}"),
            )
            return 0

        if held_out is not None and step not in evaluator.tracker.losses:
            enter("evaluating", "eval loss of the final weights")
            evaluator.run_eval(step, "final")
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
        if prompts:
            enter("sampling", f"{len(prompts)} prompts with the final weights")
            evaluator.run_samples(step, "final", rundir.FINAL_NAME if final else None)
        enter("done")
        emitter.emit(
            "done",
            status="finished",
            step=step,
            total_steps=trainer.state.max_steps,
            train_loss=result.training_loss,
            runtime_s=round(result.metrics.get("train_runtime", 0.0), 2),
            output=final,
            host_probe_end_ms=end_probe["ms"] if end_probe else None,
            **_eval_summary(eval_tracker, run),
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


def _tracker_dirs(cfg: TrainConfig, run: rundir.RunDir) -> None:
    """report_to: trackers that write files write them into the run directory, beside its events
    (not into checkpoints/, which rotation and `cockpit runs --prune` clear)."""
    names = cfg.report_to or []
    if "tensorboard" in names:
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run.path / "tensorboard"))
    if "wandb" in names:
        os.environ.setdefault("WANDB_DIR", str(run.path))
    if "trackio" in names:
        os.environ.setdefault("TRACKIO_DIR", str(run.path / "trackio"))


def _prompt_style(prepared: data_mod.PreparedData, tokenizer) -> tuple[str, str]:
    """How prompts are written for this data (train_backend.generation), and llama2 rows' prefix."""
    texts = prepared.dataset["text"][:50] if prepared.format == "text" else []
    style = generation.detect_style(prepared.format, texts, tokenizer)
    return style, generation.text_prefix(texts) if style == "llama2" else ""


def _eval_fields(held_out, style: str, prefix: str, prompts: list) -> dict:
    fields = {
        "prompt_style": style,
        "prompt_prefix": prefix,
        "eval_samples": None,
        "eval_source": None,
        "sample_prompts": len(prompts),
    }
    if held_out is not None:
        fields.update(eval_samples=len(held_out.input_ids), eval_source=held_out.source)
    return fields


def _eval_summary(tracker, run: rundir.RunDir) -> dict:
    if tracker is None or not tracker.losses:
        return {}
    last_step = max(tracker.losses)
    best = tracker.best_checkpoint([p.name for p in run.complete_checkpoints()])
    return {
        "eval_loss": tracker.losses[last_step],
        "best_checkpoint": best[0] if best else None,
        "best_eval_loss": round(best[1], 6) if best else None,
    }


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "transformers", "peft", "trl", "bitsandbytes", "datasets", "accelerate"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out
