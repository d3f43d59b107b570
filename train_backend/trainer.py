"""The training run: phases from config to done, TRL's SFTTrainer, one error event for any failure."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit import fmt
from cockpit.config import preference as objectives
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError, TrainConfig
from cockpit.money import budget as budget_mod
from cockpit.run import rundir
from cockpit.run.state import RunState
from train_backend import (
    answer_data,
    checkpoints,
    data_mix,
    early_stop,
    emulated_card,
    generation,
    init_adapter,
    oom_watch,
    step_meter,
    sync_hook,
    test_aids,
    train_args,
)
from train_backend import data as data_mod
from train_backend import evaluation as eval_mod
from train_backend import model as model_mod
from train_backend import prompt_completion as pc
from train_backend.channel import CommandListener, Emitter
from train_backend.controls import Controls
from train_backend.distributed import RankControls, World, choose_strategy, local_first
from train_backend.errors import classify, format_traceback
from train_backend.preference import build as preference
from train_backend.preference.evaluation import PreferenceEvaluator
from train_backend.rundir_watch import RunDirectoryGone, RunDirWatch
from train_backend.speed import host_probe as host_speed
from train_backend.speed import setup as fast
from train_backend.step_figures import reads_at_log


def run_training(run: rundir.RunDir, emitter: Emitter, world: World | None = None) -> int:
    """The whole run, phase by phase; returns the process exit code. Every failure becomes one
    `error` event. `world`: this process's place among several (torchrun); None for one process."""
    r = TrainingRun.begin(run, emitter, world)
    try:
        setup = start(r)
        if r.stop_asked():
            return r.stopped_early()
        tokenizer = load_tokenizer(r, setup)
        data = prepare_data(r, setup, tokenizer)
        plan = plan_speed(r, setup, data)
        if r.stop_asked():
            return r.stopped_early()
        loaded = load_model(r, setup, plan)
        if r.stop_asked():
            return r.stopped_early()
        built = build_trainer(r, setup, plan, data, loaded, tokenizer)
        result = train(r, setup, built)
        if r.controls.stop.is_set():
            return stopped(r, built, result)
        return finish(r, setup, data, built, result)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        return failed(r, exc)
    finally:
        sync_hook.close(r.sync)  # output.sync: the record once more, after the last event


@dataclass
class TrainingRun:
    """What every phase shares: the run directory, the channel, the clients' requests, and where
    the run stands (its phase, and the step it reached) for the error event of a failure."""

    run: rundir.RunDir
    emitter: Emitter
    world: World | None
    controls: Controls
    owner: bool  # the one process per node that owns the run directory
    prior: RunState  # earlier attempts: what they cost
    tracker: oom_watch.PhaseTracker = field(default_factory=oom_watch.PhaseTracker)  # where an OOM strikes
    phase: str = "starting"
    step: int | None = None
    sync: Any = None  # output.sync's worker (cockpit.sync.worker.SyncWorker), on the owner

    @classmethod
    def begin(cls, run: rundir.RunDir, emitter: Emitter, world: World | None) -> TrainingRun:
        """Signals, and on the run directory's owner the command listener, the watch on the run
        directory and the telemetry recorder."""
        controls = Controls(emitter) if world is None else RankControls(emitter, world)
        owner = world is None or world.writes_events
        signal.signal(signal.SIGTERM, controls.on_signal)
        signal.signal(signal.SIGINT, controls.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH drop is not a reason to stop
        if owner:
            CommandListener(str(run.control_path), controls.on_command, controls.on_fault).start()
            RunDirWatch(run.path, controls.on_run_dir_gone).start()
            if world is None:  # the one writer of events.jsonl (several GPUs: rank 0 of a launcher's run)
                emitter.keep_record(run.events_path, run.events_fallback_path, controls.on_events_lost)
            start_recorder(run)
        return cls(run, emitter, world, controls, owner, budget_mod.history_state(run.events_path))

    def enter(self, name: str, message: str = "") -> None:
        self.phase = name
        self.tracker.enter(name)
        self.emitter.emit("phase", phase=name, message=message)

    @property
    def sharded(self) -> bool:
        return self.world is not None and self.world.strategy == "fsdp"

    def stop_asked(self) -> bool:
        """Between phases: every process acts on the same requests."""
        self.controls.agree()
        return self.controls.stop.is_set()

    def stopped_early(self) -> int:
        where = f"stopped while {self.phase.replace('_', ' ')}"
        if self.controls.gone.is_set():
            raise RunDirectoryGone(where)
        self.emitter.emit("done", status="stopped", step=0, message=where)
        return 0


@dataclass
class Setup:
    """What the start found (the config, the device, the checkpoint to resume from, the budget),
    and what the phases after it add: the model's path, then speed: auto's config."""

    cfg: TrainConfig
    device: model_mod.Device
    precision: str
    resume: Path | None  # the last complete checkpoint
    budget: budget_mod.Budget | None
    card: emulated_card.EmulatedCard | None  # held to its size as nvidia-smi counts the process
    aids: test_aids.Aids  # a test's faults and slowdowns
    model_path: str = ""


@dataclass
class Data:
    """What prepare_data made: the training rows and what evaluation needs."""

    prepared: data_mod.PreparedData
    held_out: eval_mod.EvalData | None  # the eval split
    style: str  # how prompts are written (train_backend.generation)
    prefix: str
    prompts: list[eval_mod.Prompt]  # sampled before step 1, after each checkpoint and at the end
    preference: dict | None = None  # a preference objective's rows: the data's part of preference_setup


@dataclass
class Loaded:
    """The model load_model made, and what the `model` event says of its loading."""

    model: Any
    scales_unpacked: dict | None  # train_backend.speed.setup.apply_quant_scales's account
    load_s: float


@dataclass
class Built:
    """The trainer build_trainer made, and what train and finish need beside it."""

    trainer: Any
    tokenizer: Any
    evaluator: eval_mod.Evaluator
    eval_tracker: eval_mod.EvalTracker | None
    peft_config: Any
    end_probe: dict | None = None  # the host's launch rate after training (CUDA)


def start(r: TrainingRun) -> Setup:
    """The config, the budget's refusal, the device and precision, the emulated card; `hello`."""
    r.enter("starting", "reading config")
    cfg = load_config(r.run.config_path)
    aids = test_aids.read(os.environ, cfg, first_attempt=not r.prior.attempts)
    refusal = budget_mod.already_spent(cfg, r.prior, r.run.run_id)
    if refusal is not None:
        raise ConfigError(refusal)
    oom_watch.allocator_options(cfg)  # before CUDA starts
    import transformers

    versions = _versions()
    device = model_mod.detect_device()
    if r.world is not None:
        r.world.init_process_group(device.kind, cfg.distributed.timeout_s)
    model_mod.check_device_fits_method(cfg, device)
    precision = model_mod.choose_precision(cfg, device)
    emulation = r.tracker.emulation = oom_watch.emulate_vram(cfg, device.kind, precision)
    if r.owner:
        checkpoints.clean_unfinished(r.run, r.emitter)
    card = None
    if emulation is not None and emulation["applied"]:
        card = emulated_card.start(emulation["limit_bytes"], emulation)
    resume = r.run.complete_checkpoints()
    r.emitter.emit(
        "hello",
        pid=os.getpid(),
        pgid=os.getpgid(0),
        run_id=r.run.run_id,
        device=device.to_dict(),
        precision=precision,
        versions=versions,
        resume_from=str(resume[-1]) if resume else None,
        price_per_hour=cfg.cost.price_per_hour,
        max_usd=cfg.cost.max_usd,
        emulated_vram=emulation,
    )
    if r.owner:
        r.sync = sync_hook.start(r.run, cfg, r.emitter)
    budget = budget_mod.budget_for(cfg, r.prior, time.monotonic())  # NTP never steps it
    if emulation is not None and not emulation["applied"]:
        r.emitter.emit(
            "warning",
            message="emulate_vram_gib has no effect without a CUDA GPU; the OOM wizard still judges "
            "what fits against it",
            hint="",
        )
    transformers.set_seed(cfg.training.seed)
    return Setup(cfg, device, precision, resume[-1] if resume else None, budget, card, aids)


def load_tokenizer(r: TrainingRun, s: Setup):
    """The model's files (one download or synthetic build per node), the sharding, the tokenizer."""
    r.enter("loading_model", f"resolving {s.cfg.model.name}")
    with local_first(r.world):
        s.model_path = model_mod.resolve_model_path(s.cfg, s.precision, s.device)
    if r.world is not None:
        choose_strategy(r.world, s.cfg, s.model_path, s.device.total_bytes)
    return model_mod.load_tokenizer(s.cfg, s.model_path)


def prepare_data(r: TrainingRun, s: Setup, tokenizer) -> Data:
    """The dataset, its eval split and the sample prompts; `data`."""
    cfg = s.cfg
    r.enter("preparing_data", f"loading {cfg.dataset.where()}")
    setup = None
    if objectives.is_preference(cfg):
        pairs = preference.prepare(cfg, tokenizer)
        prepared, held_out, style, prefix, prompts = (
            pairs.train,
            pairs.held_out,
            pairs.style,
            "",
            pairs.prompts,
        )
        setup = pairs.setup
    else:
        prepared = data_mix.prepare_all(cfg.dataset, tokenizer, cfg.training.max_length, cfg.training.seed)
        prepared, held_out = eval_mod.split_eval(cfg, prepared, tokenizer)
        style, prefix = _prompt_style(prepared, tokenizer)
        prompts = eval_mod.build_prompts(cfg, held_out, tokenizer, style, prefix)
    r.emitter.emit("data", **prepared.stats, **_eval_fields(held_out, style, prefix, prompts))
    if prepared.dropped_note:
        r.emitter.emit("warning", message=prepared.dropped_note, hint="fix or remove those rows")
    return Data(prepared, held_out, style, prefix, prompts, setup)


def plan_speed(r: TrainingRun, s: Setup, data: Data):
    """`speed: auto`: the plan for this data on this device; its config is the run's from here on."""
    plan = fast.make_plan(s.cfg, s.device, s.precision, data.prepared.lengths, s.model_path)
    s.cfg = plan.config
    r.emitter.emit("speed_plan", **plan.to_event())
    return plan


def load_model(r: TrainingRun, s: Setup, plan) -> Loaded:
    """The weights (quantised for qlora), with the plan's fused kernels and unpacked scales."""
    cfg = s.cfg
    r.enter(
        "quantising" if cfg.method == "qlora" else "loading_model", f"loading weights of {cfg.model.name}"
    )
    started = time.time()
    model = model_mod.load_model(cfg, s.model_path, s.precision, s.device, sharded=r.sharded)
    fast.apply_fused_kernels(plan, model)
    scales = fast.apply_quant_scales(cfg, model, r.sharded)
    model = init_adapter.attach(cfg, model)  # init_from: the earlier run's adapter, trained further
    return Loaded(model, scales, time.time() - started)


def build_trainer(r: TrainingRun, s: Setup, plan, data: Data, loaded: Loaded, tokenizer) -> Built:
    """TRL's trainer for the objective (SFTTrainer, or DPO, KTO, ORPO: train_backend.preference) with
    the cockpit's callbacks and checkpoints, made ready by the speed plan."""
    cfg = s.cfg
    peft_config = None if cfg.method == "full" or cfg.init_from else model_mod.lora_config(cfg)
    _tracker_dirs(cfg, r.run)
    meter = step_meter.StepMeter()  # the data wait and tokens per micro-batch, for the doctor
    eval_tracker = eval_mod.EvalTracker(r.run) if data.held_out is not None else None
    evaluator_cls = PreferenceEvaluator if data.preference is not None else eval_mod.Evaluator
    evaluator = evaluator_cls(
        cfg,
        r.emitter,
        eval_tracker or eval_mod.EvalTracker(r.run),
        data.held_out,
        data.prompts,
        data.style,
        aids=s.aids,
    )
    callbacks = _callbacks(r, s, plan, data, evaluator, meter)
    kwargs = dict(
        model=loaded.model,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
        eval_tracker=eval_tracker,
        aids=s.aids,
    )
    cache = None
    if data.preference is not None:
        kwargs.update(
            train_dataset=data.prepared.dataset,
            eval_dataset=data.held_out.dataset if data.held_out is not None else None,
            extra=fast.sft_kwargs(plan, None),
            trainer_cls_wrap=lambda cls: step_meter.metered(cls, meter),
        )
        model_args = (s.model_path, s.precision, s.device, r.sharded)
        trainer = preference.build_trainer(cfg, r.run, r.emitter, data.preference, kwargs, model_args)
    else:
        trainer, cache = _sft_trainer(r, s, plan, data, tokenizer, meter, kwargs)
    evaluator.trainer = trainer
    if data.prompts and r.sharded:
        evaluator.sampling = False
        r.emitter.emit(
            "warning",
            message="eval.prompts: no samples under FSDP (generation needs the whole model on one GPU); "
            "try the adapter with cockpit chat after the run",
            hint="",
        )
    fast.finish_trainer(plan, trainer, tokenizer, cache if r.owner else None)
    built = Built(trainer, tokenizer, evaluator, eval_tracker, peft_config)
    _ready_to_train(r, s, plan, loaded, built)
    return built


def _sft_trainer(r: TrainingRun, s: Setup, plan, data: Data, tokenizer, meter, kwargs: dict):
    """TRL's SFTTrainer on the rows with their answers, from the token cache where there is one;
    (trainer, the cache folder to fill)."""
    cfg = s.cfg
    rows = answer_data.trainer_columns(data.prepared.dataset)
    train_data, data_kwargs, cache = fast.cached_dataset(plan, r.run.path, rows, cfg, tokenizer)
    args = build_sft_config(cfg, r.run, s.precision, s.device.kind, fast.sft_kwargs(plan, data_kwargs))
    if r.world is not None:
        args = r.world.adapt_sft_config(args, cfg)
    trainer_cls = step_meter.metered(fast.trainer_class(plan, checkpoints.trainer_class()), meter)
    trainer_cls = answer_data.counting_trained_tokens(trainer_cls)
    trainer = trainer_cls(
        args=args, train_dataset=train_data, run=r.run, emitter=r.emitter, cfg=cfg, **kwargs
    )
    return trainer, cache


def _callbacks(r: TrainingRun, s: Setup, plan, data: Data, evaluator, meter) -> list:
    from train_backend.callbacks import CockpitCallback

    cfg = s.cfg
    callbacks = [CockpitCallback(r.emitter, r.controls, cfg, budget=s.budget, meter=meter, aids=s.aids)]
    if data.held_out is not None or data.prompts:
        callbacks.append(eval_mod.make_eval_callback(evaluator, r.controls))
    if data.preference is not None:
        from train_backend.preference.metrics import PreferenceCallback

        # before the cockpit's own: a step's figures are folded when its log line is drawn
        callbacks.insert(0, PreferenceCallback(r.emitter, cfg.objective))
    callbacks.extend(fast.extra_callbacks(plan, r.emitter))
    callbacks.extend(sync_hook.callbacks(r.sync, r.run))
    if cfg.debug.profile_steps and (r.world is None or r.world.rank == 0):
        from train_backend.profiling import make_profile_callback

        callbacks.append(
            make_profile_callback(r.run.path, cfg.debug.profile_from_step, cfg.debug.profile_steps, r.emitter)
        )
    return callbacks


def _ready_to_train(r: TrainingRun, s: Setup, plan, loaded: Loaded, built: Built) -> None:
    """The plan's LoRA and MLP kernels, the OOM and card watches, the optimizer's states; `model`."""
    import torch

    from train_backend.callbacks import memory_fields

    trainer, cfg = built.trainer, s.cfg
    lora_fused = fast.apply_lora_backend(plan, trainer.model, r.sharded)
    mlp_fused = fast.apply_mlp_block(plan, trainer.model, r.sharded)
    data_mod.burn_cpu_in_collator(trainer, s.aids.collate_cpu_ms)
    r.tracker.watch(trainer)
    if s.card is not None:
        s.card.watch(trainer)
        s.card.check()  # the weights and the context alone may already be over it
    oom_watch.keep_optimizer_compatible(trainer, s.resume, cfg, r.emitter)
    total, trainable = model_mod.parameter_counts(trainer.model)
    optim = trainer.args.optim
    oom_watch.hold_back_paged_states(trainable, str(getattr(optim, "value", optim)))  # before step 1
    r.emitter.emit(
        "model",
        name=cfg.model.name,
        method=cfg.method,
        params_total=total,
        params_trainable=trainable,
        load_s=round(loaded.load_s, 2),
        lora_fused=lora_fused,
        scales_unpacked=loaded.scales_unpacked,
        mlp_fused=mlp_fused,
        **memory_fields(),
    )
    if s.device.kind == "cuda":
        torch.cuda.reset_peak_memory_stats()


def train(r: TrainingRun, s: Setup, built: Built):
    """trainer.train, from the last complete checkpoint when there is one."""
    r.enter("training", f"resuming from {s.resume.name}" if s.resume else "")
    trainer = built.trainer
    result = trainer.train(resume_from_checkpoint=str(s.resume) if s.resume else None)
    r.step = trainer.state.global_step
    measure = s.device.kind == "cuda" and not r.controls.stop.is_set()
    built.end_probe = host_speed.measure() if measure else None
    if r.controls.gone.is_set():
        raise RunDirectoryGone(f"stopped at step {r.step} of {trainer.state.max_steps}, with no checkpoint")
    return result


def stopped(r: TrainingRun, built: Built, result) -> int:
    """A stop (a request, a signal or the budget) ended training: `done`, stopped."""
    saved = r.run.complete_checkpoints()
    at = f"; {saved[-1].name} saved" if saved else ""
    over = r.controls.budget_reached
    sync_hook.wait(r.sync, r.emitter, sync_hook.END_WAIT_S)
    r.emitter.emit(
        "done",
        status="stopped",
        step=r.step,
        total_steps=built.trainer.state.max_steps,
        train_loss=result.training_loss,
        runtime_s=round(result.metrics.get("train_runtime", 0.0), 2),
        reason="budget" if over else "request",
        message=(f"stopped at the budget ({over}){at}" if over else f"stopped by request{at}"),
    )
    return 0


def finish(r: TrainingRun, s: Setup, data: Data, built: Built, result) -> int:
    """The final weights' eval loss, the final adapter (or model), the final samples; `done`."""
    trainer, evaluator, step = built.trainer, built.evaluator, r.step
    if data.held_out is not None and step not in evaluator.tracker.losses:
        r.enter("evaluating", "eval loss of the final weights")
        evaluator.run_eval(step, "final")
    early = _early_stopped(r, s, built, result) if evaluator.early_stopped else {}
    final = None
    if s.cfg.output.save_final:
        r.enter("saving", "final adapter" if built.peft_config or s.cfg.init_from else "final model")
        _save_final(r, trainer, built.tokenizer)
        final = str(r.run.final_dir)
        sync_hook.final_saved(r.sync, r.run)
    if data.prompts:
        r.enter("sampling", f"{len(data.prompts)} prompts with the final weights")
        evaluator.run_samples(step, "final", rundir.FINAL_NAME if final else None)
    if r.sync is not None:
        r.enter("syncing", f"the last copies to {r.sync.text}")
        sync_hook.wait(r.sync, r.emitter, sync_hook.finish_wait_s(s.cfg))
    r.enter("done")
    r.emitter.emit(
        "done",
        status="finished",
        step=step,
        total_steps=trainer.state.max_steps,
        train_loss=result.training_loss,
        runtime_s=round(result.metrics.get("train_runtime", 0.0), 2),
        output=final,
        host_probe_end_ms=built.end_probe["ms"] if built.end_probe else None,
        **_eval_summary(built.eval_tracker, r.run),
        **early,
    )
    return 0


def _early_stopped(r: TrainingRun, s: Setup, built: Built, result) -> dict:
    """eval.early_stop_patience stopped training: the best checkpoint's weights loaded (what final/
    will hold), and the `done` event's reason, message and what the steps left would have cost."""
    trainer, early = built.trainer, built.evaluator.early
    assert early is not None
    best = built.evaluator.tracker.best_checkpoint([p.name for p in r.run.complete_checkpoints()])
    if best is not None and best[0] != f"checkpoint-{r.step}":
        r.enter("saving", f"early stop: loading {best[0]}'s weights (the lowest eval loss) for final/")
        trainer.state.best_model_checkpoint = str(r.run.checkpoints_dir / best[0])
        trainer._load_best_model()
    start = int(s.resume.name.rsplit("-", 1)[-1]) if s.resume else 0
    total = trainer.state.max_steps
    runtime_s = result.metrics.get("train_runtime", 0.0)
    seconds, usd = early_stop.not_spent(r.step, total, start, runtime_s, s.cfg.cost.price_per_hour)
    message = early_stop.stop_message(early, r.step, total, seconds, usd)
    if best is None:
        message += "; no checkpoint beat the base model's eval loss: final/ holds the last weights"
    else:
        message += f"; final/ holds {best[0]}'s weights (eval loss {fmt.loss(best[1])})"
    return {
        "reason": "early_stop",
        "message": message,
        "not_spent_s": round(seconds, 1) if seconds is not None else None,
        "not_spent_usd": round(usd, 4) if usd is not None else None,
    }


def _save_final(r: TrainingRun, trainer, tokenizer) -> None:
    """Written aside, synced, renamed: final/ is complete or absent."""
    staged = r.run.path / f".{rundir.FINAL_NAME}.staging"
    if r.owner:
        shutil.rmtree(staged, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(staged))  # several processes: all take part, the main one writes
    trainer.accelerator.wait_for_everyone()
    if r.owner:
        tokenizer.save_pretrained(str(staged))
        checkpoints.fsync_tree(staged)
        os.rename(staged, r.run.final_dir)


def failed(r: TrainingRun, exc: BaseException) -> int:
    """Any failure: one `error` event, classified, with where the run stood and what it kept."""
    verdict = classify(exc, r.phase, str(r.run.path))
    if not r.controls.gone.is_set():  # a deleted run directory has nothing left to copy
        sync_hook.wait(r.sync, r.emitter, sync_hook.END_WAIT_S)
    step = r.step
    if verdict.oom is not None:
        verdict.oom.update(r.tracker.details())
        if step is None and r.phase == "training":
            step = r.tracker.step
    r.emitter.emit(
        "error",
        kind=verdict.kind,
        message=verdict.message,
        hint=verdict.hint,
        phase=r.phase,
        step=step,
        oom=verdict.oom,
        traceback=format_traceback(exc),
        checkpoints=[p.name for p in r.run.complete_checkpoints()],
    )
    print(format_traceback(exc))
    return verdict.exit_code


def build_sft_config(
    cfg: TrainConfig, run: rundir.RunDir, precision: str, device_kind: str, extra: dict | None = None
):
    """`extra`: arguments the speed plan adds or replaces (train_backend.speed.setup.sft_kwargs)."""
    from trl import SFTConfig

    kwargs = train_args.common_kwargs(cfg, run, precision, device_kind, SFTConfig)
    kwargs.update(packing=cfg.training.packing, dataset_text_field="text")
    if reads_at_log(cfg):  # the nan/inf filter kept on the device (train_backend.step_figures)
        kwargs.update(logging_nan_inf_filter=False)
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
    fmt, texts = prepared.format, prepared.dataset["text"][:50] if prepared.format == "text" else []
    if fmt == pc.FORMAT:
        fmt, texts = pc.style_inputs(prepared.dataset)
    style = generation.detect_style(fmt, texts, tokenizer)
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
