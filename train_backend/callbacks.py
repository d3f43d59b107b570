"""What the trainer does at step boundaries: events, commands from clients, fault injection.

Imported when the run builds its trainer (it loads torch and transformers), never before the
trainer process has taken its stdout (train_backend.__main__).
"""

from __future__ import annotations

import os
import statistics
import time

import torch
from transformers import TrainerCallback

from cockpit import fmt
from cockpit.config.schema import TrainConfig
from cockpit.money.budget import Budget
from train_backend import oom_watch
from train_backend.channel import Emitter
from train_backend.controls import Controls
from train_backend.data import burn_cpu
from train_backend.oom_watch import injected_oom_message
from train_backend.step_meter import StepMeter
from train_backend.test_aids import MARK, Aids


def memory_fields() -> dict:
    if torch.cuda.is_available():
        return {
            "mem_allocated_bytes": torch.cuda.memory_allocated(),
            "mem_reserved_bytes": torch.cuda.memory_reserved(),
            "mem_peak_bytes": torch.cuda.max_memory_allocated(),
            # cudaMalloc failed and the allocator freed its cache and tried again: each retry
            # synchronises the device and returns memory to the driver (slow steps near a cap)
            "alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0),
        }
    import psutil

    return {"rss_bytes": psutil.Process().memory_info().rss}


class CockpitCallback(TrainerCallback):
    """Events for every logging step; stop/save/pause at step boundaries; test fault injection.

    `budget`: cost.max_usd, checked at every step end; `meter`: the data wait and tokens per
    micro-batch (train_backend.step_meter), reported in each `log` event; `aids`: the faults and
    slowdowns of a test (train_backend.test_aids).
    """

    def __init__(
        self,
        emitter: Emitter,
        controls: Controls,
        cfg: TrainConfig,
        budget: Budget | None = None,
        meter: StepMeter | None = None,
        aids: Aids | None = None,
    ):
        self.emitter = emitter
        self.controls = controls
        self.cfg = cfg
        self.budget = budget
        self.meter = meter
        self.aids = aids or Aids()
        self.step_ends: list[float] = []
        self.window_start: tuple[float, int, int] | None = None  # (time, tokens, step)
        self.train_start = time.time()
        self.paused_s = 0.0
        self.tokens_seen = 0  # real (non-padding) tokens, as TRL counts them
        # a pause asked at a step whose log is still to come waits for that log (on_log): HF
        # Trainer logs a step after on_step_end, so a pause there left the step's loss unsaid
        # until the resume while `paused at step N` was said at once
        self.pause_after_log = False

    def on_train_begin(self, args, state, control, **kw):
        self.train_start = time.time()
        self.window_start = (time.time(), 0, state.global_step)
        if self.meter is not None:
            self.meter.reset()
            self.meter.watch_gc()  # the collector's time per step in each log (train_backend.step_meter)
        self.controls.training = True
        self.emitter.emit(
            "train_begin",
            total_steps=state.max_steps,
            start_step=state.global_step,
            epochs=None if args.max_steps > 0 else args.num_train_epochs,  # max_steps bounds it
            micro_batch_size=args.per_device_train_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            max_length=self.cfg.training.max_length,
            gradient_checkpointing=bool(args.gradient_checkpointing),
            precision="bf16" if args.bf16 else ("fp16" if args.fp16 else "fp32"),
            optimizer=str(args.optim.value if hasattr(args.optim, "value") else args.optim),
        )

    def on_step_begin(self, args, state, control, **kw):
        if self.pause_after_log:  # the log did not come (none with a loss): pause before the next step
            self._pause_now(state, control)
        oom_watch.recap_vram()
        self._inject_fault(state)

    def _inject_fault(self, state) -> None:
        """Test aid: raise at the start of step fail_at_step (on fail_rank only, if set)."""
        aids = self.aids
        fail_at = aids.fail_at_step
        this_rank = aids.fail_rank is None or aids.fail_rank == int(os.environ.get("RANK", "0"))
        if fail_at is not None and state.global_step + 1 == fail_at and this_rank:
            if aids.fail_kind == "oom":
                raise torch.OutOfMemoryError(injected_oom_message(self.cfg.emulate_vram_gib))
            if aids.fail_kind == "other":
                raise RuntimeError(f"injected fault at step {fail_at} {MARK}")

    def on_step_end(self, args, state, control, **kw):
        controls = self.controls
        self.step_ends.append(time.time())
        if self.aids.step_sleep_s:
            time.sleep(self.aids.step_sleep_s)
        self._check_budget(state)
        controls.agree()
        if controls.gone.is_set():  # nowhere to write a checkpoint: stop without one
            control.should_save = False
            control.should_training_stop = True
            return control
        if controls.save.is_set():
            controls.save.clear()
            control.should_save = True
        if controls.paused.is_set() and not controls.stop.is_set():
            if control.should_log:  # set by HF's flow callback, which runs before this one
                self.pause_after_log = True
            else:
                self._pause(state)
        if controls.stop.is_set():
            control.should_save = True
            control.should_training_stop = True
        return control

    def _pause_now(self, state, control) -> None:
        """The pause that waited for this step's log; a stop asked meanwhile saves and stops."""
        self.pause_after_log = False
        if self.controls.paused.is_set() and not self.controls.stop.is_set():
            self._pause(state)
        if self.controls.stop.is_set():
            control.should_save = True
            control.should_training_stop = True

    def _check_budget(self, state) -> None:
        """cost.max_usd: asked before the ranks agree, so every rank stops at the same step."""
        budget, controls = self.budget, self.controls
        if budget is None or controls.budget_reached is not None:
            return
        now = time.monotonic()  # a step of the wall clock is no time billed
        if not budget.reached(now):
            return
        spent = budget.cost_usd(now)
        controls.budget_reached = f"{fmt.money(spent)} of cost.max_usd {fmt.money(budget.max_usd)}"
        self.emitter.emit(
            "budget",
            step=state.global_step,
            cost_usd=round(spent, 6),
            max_usd=budget.max_usd,
            message=budget.reached_message(now, state.global_step),
        )
        getattr(controls, "requests", controls).stop.set()  # several GPUs: agree() spreads it

    def _pause(self, state) -> None:
        controls = self.controls
        self.emitter.emit("paused", step=state.global_step)
        began = time.time()
        while controls.paused.is_set() and not controls.stop.is_set():
            controls.wake.wait(1.0)
            controls.wake.clear()
            controls.agree()
        self.paused_s += time.time() - began
        # the pause is not training time: restart the throughput window
        self.window_start = (time.time(), self.tokens_seen, state.global_step)
        self.step_ends.clear()
        if self.meter is not None:
            self.meter.reset()
        self.emitter.emit("resumed", step=state.global_step, paused_s=round(time.time() - began, 2))

    def on_train_end(self, args, state, control, **kw):
        if self.meter is not None:
            self.meter.unwatch_gc()

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "loss" not in logs:
            return
        now = time.time()
        tokens = int(logs.get("num_tokens", 0))
        self.tokens_seen = tokens
        self.emitter.emit("log", **self._log_fields(args, state, logs, now, tokens))
        self.window_start = (now, tokens, state.global_step)
        self.step_ends = self.step_ends[-1:]
        if self.aids.log_cpu_ms:  # test aid: a slow logging callback, in the loop's own thread
            burn_cpu(self.aids.log_cpu_ms)
        if self.pause_after_log:  # HF saves (should_save) after the log: a stop in the pause saves
            self._pause_now(state, control)
            return control

    def _log_fields(self, args, state, logs: dict, now: float, tokens: int) -> dict:
        """The `log` event: the step's figures, and the rates over the window since the last log."""
        t0, tok0, step0 = self.window_start or (self.train_start, 0, 0)
        dt = max(now - t0, 1e-9)
        steps = state.global_step - step0
        batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        intervals = [b - a for a, b in zip(self.step_ends, self.step_ends[1:])]
        return dict(
            step=state.global_step,
            total_steps=state.max_steps,
            epoch=round(float(state.epoch or 0), 4),
            loss=logs.get("loss"),
            learning_rate=logs.get("learning_rate"),
            grad_norm=logs.get("grad_norm"),
            tokens_seen=tokens,
            trained_tokens_seen=int(logs["trained_tokens"]) if "trained_tokens" in logs else None,
            tokens_per_s=round((tokens - tok0) / dt, 1) if tokens >= tok0 and steps > 0 else None,
            samples_per_s=round(steps * batch / dt, 3) if steps > 0 else None,
            step_time_s=round(statistics.median(intervals), 4) if intervals else round(dt / max(steps, 1), 4),
            elapsed_s=round(now - self.train_start - self.paused_s, 2),
            **memory_fields(),
            **(self.meter.window(dt, steps) if self.meter is not None else {}),
        )
