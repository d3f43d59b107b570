"""Folding the channel's messages into what a screen shows (pure; no clock of its own).

Both the headless renderer and the TUI render a `RunState`. Figures are taken from
the events or computed from them and the config's price: the ETA from the recent
step time, the cost from the trainer's wall time (`ts` of its events), never
from the client's clock, so a replay shows what the live run showed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from cockpit.protocol.events import (
    BudgetEvent,
    CheckpointEvent,
    DataEvent,
    DoneEvent,
    EndCommandEvent,
    ErrorEvent,
    EvalEvent,
    ExitEvent,
    HelloEvent,
    LogEvent,
    ModelEvent,
    PausedEvent,
    PhaseEvent,
    PreferenceEvalEvent,
    PreferenceLogEvent,
    PreferenceSetupEvent,
    ResumedEvent,
    SampleEvent,
    SpeedPlanEvent,
    SyncEvent,
    TrainBeginEvent,
)
from cockpit.protocol.wire import EVENT_TYPES, Fault, number
from cockpit.run.preference_state import PreferenceState
from cockpit.speed import flops

MAX_NOTICES = 200
INPUT_FIELDS: Final = ("data_wait_s", "compute_s", "data_wait_share", "tokens_per_micro_batch", "gc_s")
# the ETA: the median step time of the last ETA_WINDOW_STEPS logged steps (one slow step under load
# does not swing it), and none before ETA_MIN_STEPS steps were timed (the first ones load and compile)
ETA_WINDOW_STEPS = 20
ETA_MIN_STEPS = 3
# the event that ends each kind of work between steps, and its field that says how long it took
BUSY_DURATIONS = {
    "eval": ("eval", "eval_s"),
    "sample": ("samples", "seconds"),
    "checkpoint": ("save", "save_s"),
}


def notice_text(item: dict[str, Any] | Fault) -> str | None:
    """The notice a message adds to the run's notices (faults, commands, pauses, warnings...)."""
    if isinstance(item, Fault):
        return item.describe()
    kind = item.get("type")
    if kind not in EVENT_TYPES:
        return f"ignored a message of unknown type {kind!r}"
    if kind == "hello" and item.get("resume_from"):
        return f"resumed from {str(item['resume_from']).rsplit('/', 1)[-1]}"
    if kind == "command":
        verdict = "" if item.get("accepted", True) else " (refused)"
        detail = item.get("detail", "")
        return f"command {item.get('name')}{verdict}" + (f": {detail}" if detail else "")
    if kind == "paused":
        return f"paused at step {item.get('step')}"
    if kind == "resumed":
        return f"resumed at step {item.get('step')}"
    if kind == "warning":
        return f"warning: {item.get('message', '')}"
    if kind == "budget":
        return str(item.get("message") or "budget reached")
    if kind == "end_command":
        return end_command_text(item)
    return None


def end_command_text(item: dict[str, Any]) -> str:
    command, state = item.get("command", ""), item.get("state")
    if item.get("detail"):  # stop-instance / destroy-instance: what is or was done, what still bills
        return f"on_end: {command}: {item['detail']}"
    if state == "started":
        return f"on_end: the run {item.get('run_status')}; running: {command}"
    if state == "finished":
        return f"on_end: done in {item.get('duration_s')} s (exit 0): {command}"
    if state == "timed_out":
        return (
            f"on_end TIMED OUT after {item.get('duration_s')} s (cost.on_end_timeout_min): ended with its "
            f"process group: {command}; its output is in backend.log, the run directory is intact"
        )
    why = f"exit {item.get('returncode')}" if item.get("error") is None else item.get("error")
    return f"on_end FAILED ({why}): {command}; its output is in backend.log, the run directory is intact"


@dataclass
class Attempt:
    """One trainer process: the first launch or a resume."""

    pid: int | None
    started_ts: float
    last_ts: float
    resume_from: str | None = None
    # the same on the trainer's monotonic clock (its events' mono_s), where they carry it: what the
    # attempt lasted whatever the wall clock did (an NTP step of an hour bills nothing)
    started_mono: float | None = None
    last_mono: float | None = None

    @property
    def lasted_s(self) -> float:
        if self.started_mono is not None and self.last_mono is not None:
            return max(0.0, self.last_mono - self.started_mono)
        return max(0.0, self.last_ts - self.started_ts)


@dataclass
class RunState:
    run_id: str = ""
    phase: str = "starting"
    phase_message: str = ""
    status: str = "starting"  # starting | running | paused | finished | stopped | failed
    device: dict[str, Any] = field(default_factory=dict)
    precision: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    price_per_hour: float | None = None
    max_usd: float | None = None  # cost.max_usd, the budget
    budget_reached: dict[str, Any] | None = None  # the budget event, when it stopped the run
    end_command: dict[str, Any] | None = None  # the last end_command event (cost.on_end)
    data: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    # several GPUs: world size, strategy, rank pids
    distributed: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)  # train_begin
    # what speed: auto chose, and the speed model's figures
    speed_plan: dict[str, Any] = field(default_factory=dict)
    # the last log's data wait and tokens per micro-batch
    input: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    total_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    first_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_s: float | None = None
    step_times: list[float] = field(default_factory=list)  # the last ETA_WINDOW_STEPS step times
    tokens_seen: int | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    losses: list[tuple[int, float]] = field(default_factory=list)
    learning_rates: list[tuple[int, float]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, eval loss), step 0 the base
    eval_loss: float | None = None
    best_eval: dict[str, Any] = field(default_factory=dict)  # step, eval_loss: the lowest so far
    best_checkpoint: str | None = None  # the kept checkpoint with the lowest eval loss
    samples: list[dict[str, Any]] = field(default_factory=list)  # the sample events, in order
    preference: PreferenceState = field(default_factory=PreferenceState)  # objective dpo, kto or orpo
    attempts: list[Attempt] = field(default_factory=list)
    train_started_ts: float | None = None
    first_log_ts: float | None = None  # this attempt's first log event: its steps are measured from then
    error: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None  # the done or exit message
    notices: list[str] = field(default_factory=list)
    faults: int = 0
    last_ts: float | None = None
    log_gap_s: float | None = None  # between the last two log events: how often a training step is said
    busy: dict[str, Any] | None = None  # work between steps under way (a busy event): what, step, ts
    busy_s: dict[str, float] = field(default_factory=dict)  # what -> the longest it took (eval_s, save_s...)
    # output.sync: target, step/checkpoint/lag_s (the newest on it), saved (the newest checkpoint),
    # failing/kind/reason (failed tries since the last copy), final, restored (cockpit.sync.text)
    sync: dict[str, Any] = field(default_factory=dict)
    _last_log_ts: float | None = None

    # ------------------------------------------------------------ folding

    def apply(self, item: dict[str, Any] | Fault) -> None:
        text = notice_text(item)
        if text:
            self._notice(text)
        if isinstance(item, Fault):
            self.faults += 1
            return
        kind = item.get("type")
        ts = number(item.get("ts"))
        if ts is not None:
            self.last_ts = ts
            # an attempt lasts from its hello to its last event of its own: what comes after its end
            # (the next attempt's start, a relaunch's config change, an exit a client wrote when it
            # noticed, maybe much later) does not stretch it over time when nothing ran
            if self.attempts and not self.ended and kind not in ("hello", "config_change", "exit"):
                self.attempts[-1].last_ts = max(self.attempts[-1].last_ts, ts)
                mono = number(item.get("mono_s"))
                if mono is not None and self.attempts[-1].started_mono is not None:
                    self.attempts[-1].last_mono = max(self.attempts[-1].last_mono or 0.0, mono)
        if kind not in EVENT_TYPES:
            return
        self._track_busy(kind, item, ts)
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(item)

    def _track_busy(self, kind: str, item: dict[str, Any], ts: float | None) -> None:
        """The work between steps under way (an eval pass, sampling, a save), and how long each kind
        took at most: what a silence meanwhile is judged by (cockpit.live.stall)."""
        if kind == "busy":
            self.busy = {"what": item.get("what"), "step": item.get("step"), "ts": ts}
            return
        what, key = BUSY_DURATIONS.get(kind, (None, None))
        took = number(item.get(key)) if key else None
        if what and took is not None:
            self.busy_s[what] = max(took, self.busy_s.get(what, 0.0))
        ends_it = kind in ("log", "paused", "done", "error", "exit") or (
            self.busy is not None and self.busy.get("what") == what and what != "samples"
        )
        if self.busy is not None and ends_it:
            self.busy = None

    def _notice(self, text: str) -> None:
        self.notices.append(text)
        del self.notices[:-MAX_NOTICES]

    def _on_hello(self, m: HelloEvent) -> None:
        ts = number(m.get("ts")) or 0.0
        mono = number(m.get("mono_s"))
        self.attempts.append(Attempt(m.get("pid"), ts, ts, m.get("resume_from"), mono, mono))
        self.run_id = m.get("run_id", self.run_id)
        self.device = m.get("device") or {}
        self.precision = m.get("precision")
        self.versions = m.get("versions") or {}
        # the trainer's price; a hello without one keeps what the run's config.yaml said
        price = number(m.get("price_per_hour"))
        self.price_per_hour = self.price_per_hour if price is None else price
        self.max_usd = number(m.get("max_usd"))
        self.distributed = m.get("distributed") or {}
        self.status = "starting"
        self.error = None
        self.outcome = None
        self.first_log_ts = None

    def _on_phase(self, m: PhaseEvent) -> None:
        self.phase = m.get("phase", self.phase)
        self.phase_message = m.get("message", "")
        if self.status not in ("paused",) and self.phase != "done":
            # after training (the final eval, saving, sampling) the run is still running, not starting
            trained = self.phase == "training" or self.train_started_ts is not None
            self.status = "running" if trained else "starting"

    def _on_data(self, m: DataEvent) -> None:
        self.data = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}

    def _on_model(self, m: ModelEvent) -> None:
        self.model = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}
        self.distributed = m.get("distributed") or self.distributed

    def _on_speed_plan(self, m: SpeedPlanEvent) -> None:
        self.speed_plan = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}

    def _on_train_begin(self, m: TrainBeginEvent) -> None:
        self.plan = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}
        self.total_steps = m.get("total_steps")
        self.status = "running"
        if self.train_started_ts is None:
            self.train_started_ts = number(m.get("ts"))

    def _on_log(self, m: LogEvent) -> None:
        ts = number(m.get("ts"))
        if ts is not None:
            if self._last_log_ts is not None and self.status == "running":  # not across a pause
                self.log_gap_s = max(0.0, ts - self._last_log_ts)
            self._last_log_ts = ts
            if self.first_log_ts is None:
                self.first_log_ts = ts
        self.step = int(m.get("step") or self.step)
        self.total_steps = m.get("total_steps") or self.total_steps
        if self.phase == "training":
            self.phase_message = ""  # "resuming from checkpoint-3" is said until a step is trained
        self.epoch = number(m.get("epoch"))
        loss = number(m.get("loss"))
        if loss is not None:
            self.loss = loss
            if self.first_loss is None:
                self.first_loss = loss
            self.losses.append((self.step, loss))
        lr = number(m.get("learning_rate"))
        if lr is not None:
            self.learning_rate = lr
            self.learning_rates.append((self.step, lr))
        self.grad_norm = number(m.get("grad_norm"))
        self.tokens_per_s = number(m.get("tokens_per_s"))
        self.samples_per_s = number(m.get("samples_per_s"))
        self.step_time_s = number(m.get("step_time_s"))
        if self.step_time_s is not None and self.step_time_s > 0:
            self.step_times.append(self.step_time_s)
            del self.step_times[:-ETA_WINDOW_STEPS]
        self.tokens_seen = m.get("tokens_seen")
        self.memory = {
            k: m[k]
            for k in ("mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes", "rss_bytes")
            if k in m
        }
        self.input = {k: m[k] for k in INPUT_FIELDS if number(m.get(k)) is not None}
        if self.status != "paused":
            self.status = "running"

    def _on_checkpoint(self, m: CheckpointEvent) -> None:
        removed = set(m.get("removed") or [])
        self.checkpoints = [c for c in self.checkpoints if c["name"] not in removed]
        path = m.get("path", "")
        self.checkpoints.append(
            {
                "name": path.rsplit("/", 1)[-1],
                "step": m.get("step"),
                "bytes": m.get("bytes"),
                "eval_loss": number(m.get("eval_loss")),
            }
        )
        if "best_checkpoint" in m:
            self.best_checkpoint = m.get("best_checkpoint")
        if self.sync:  # what is saved and not yet copied: the sync's lag
            self.sync = {**self.sync, "saved": {"step": m.get("step"), "ts": number(m.get("ts"))}}

    def _on_eval(self, m: EvalEvent) -> None:
        loss, step = number(m.get("eval_loss")), m.get("step")
        if loss is None or not isinstance(step, int):
            return
        self.evals = [(s, v) for s, v in self.evals if s != step] + [(step, loss)]  # a restart re-evaluates
        self.eval_loss = loss
        best = number(m.get("best_eval_loss"))
        if best is not None:
            self.best_eval = {"step": m.get("best_step"), "eval_loss": best}
        if m.get("best_checkpoint"):
            self.best_checkpoint = m["best_checkpoint"]
        # new dicts, not changed ones: a snapshot handed to the screen shares the old
        self.checkpoints = [dict(c, eval_loss=loss) if c.get("step") == step else c for c in self.checkpoints]

    def _on_sample(self, m: SampleEvent) -> None:
        self.samples.append({k: v for k, v in m.items() if k not in ("v", "type")})

    def _on_preference_setup(self, m: PreferenceSetupEvent) -> None:
        self.preference.on_setup(dict(m))

    def _on_preference_log(self, m: PreferenceLogEvent) -> None:
        self.preference.on_log(dict(m))

    def _on_preference_eval(self, m: PreferenceEvalEvent) -> None:
        self.preference.on_eval(dict(m))

    def _on_sync(self, m: SyncEvent) -> None:
        sync = {**self.sync, "target": m.get("target", self.sync.get("target"))}  # new: snapshots share
        status = m.get("status")
        if status == "synced" and m.get("what") == "final":
            sync.update(final=True, failing=0)
        elif status == "synced":
            sync.update(step=m.get("step"), checkpoint=m.get("checkpoint"), lag_s=m.get("lag_s"), failing=0)
        elif status == "failed":
            sync.update(failing=int(sync.get("failing") or 0) + 1, kind=m.get("kind"), reason=m.get("reason"))
        elif status == "restored":
            sync["restored"] = {"checkpoint": m.get("checkpoint"), "step": m.get("step")}
        self.sync = sync

    def _on_budget(self, m: BudgetEvent) -> None:
        self.budget_reached = {k: v for k, v in m.items() if k not in ("v", "type")}

    def _on_end_command(self, m: EndCommandEvent) -> None:
        self.end_command = {k: v for k, v in m.items() if k not in ("v", "type")}

    def _on_paused(self, m: PausedEvent) -> None:
        self.status = "paused"
        self._at_step(m)

    def _on_resumed(self, m: ResumedEvent) -> None:
        self.status = "running"
        self._at_step(m)

    def _at_step(self, m: PausedEvent | ResumedEvent) -> None:
        """A pause or resume names the step the trainer is at, which may be past the last log
        (logging_steps > 1, or the log of that step still to come): the header shows the same step."""
        step = m.get("step")
        if isinstance(step, int) and step > self.step:
            self.step = step

    def _on_error(self, m: ErrorEvent) -> None:
        self.error = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}
        self.status = "failed"

    def _on_done(self, m: DoneEvent) -> None:
        self.outcome = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}
        self.status = m.get("status", "finished")
        if m.get("best_checkpoint"):
            self.best_checkpoint = m["best_checkpoint"]
        self.phase = "done"
        if m.get("step"):
            self.step = int(m["step"])

    def _on_exit(self, m: ExitEvent) -> None:
        # written by a client that saw the trainer end without done/error
        if self.status not in ("finished", "stopped", "failed"):
            self.status = "failed"
            self.outcome = {k: v for k, v in m.items() if k not in ("v", "type", "ts")}

    def settle_from_remains(self, final_written: bool) -> bool:
        """A trainer that is gone without a final event: judged by what it left. The final adapter
        (`final/` appears by one rename after its save) or a `done` phase means training finished and
        only the last event was cut (a crash or a full disk while writing it). True if so."""
        if self.ended or not (final_written or self.phase == "done"):
            return False
        self.status, self.phase = "finished", "done"
        left = "its final adapter is in final/" if final_written else "it reached its done phase"
        self.outcome = {
            "status": "finished",
            "message": f"finished: {left}; the events file ends before the final event (cut while written)",
            "step": self.step,
        }
        return True

    # ------------------------------------------------------------ derived figures

    def snapshot(self) -> RunState:
        """A copy that folding more events no longer changes: what the follow thread hands to the
        screen and to the watch's thread (the doctor), which read it while this one goes on."""
        copied = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (list, dict)):
                value = value.copy()
            copied[f.name] = value
        copied["attempts"] = [replace(a) for a in self.attempts]
        copied["preference"] = self.preference.copy()
        return RunState(**copied)

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation of the last log window (cockpit.speed.flops): its real tokens/s
        (over every GPU of the run) times the plan's model FLOPs per token, over the cards' dense
        bf16 peak; None before the first window or without a catalog peak."""
        gpus = self.distributed.get("world_size") if isinstance(self.distributed, dict) else None
        return flops.mfu_of(self.speed_plan, self.tokens_per_s, gpus if isinstance(gpus, int) else 1)

    @property
    def ended(self) -> bool:
        return self.status in ("finished", "stopped", "failed")

    @property
    def progress(self) -> float | None:
        if not self.total_steps:
            return None
        return min(1.0, self.step / self.total_steps)

    def eta_s(self) -> float | None:
        """Time to the last step at the recent median step time; None while that means nothing."""
        if self.ended or not self.total_steps or len(self.step_times) < ETA_MIN_STEPS:
            return None
        recent = sorted(self.step_times)
        middle = len(recent) // 2
        median = recent[middle] if len(recent) % 2 else (recent[middle - 1] + recent[middle]) / 2
        return max(0, self.total_steps - self.step) * median

    @property
    def estimating(self) -> bool:
        """Training is under way but too few steps were timed for an ETA (and a projected cost)."""
        return not self.ended and self.eta_s() is None

    def billed_s(self, now_ts: float | None = None) -> float:
        """Time of all trainer attempts so far (on the trainer's monotonic clock where its events carry
        it): what the instance was billed while training ran. `now_ts` adds the time since the live
        attempt's last event (a live client's clock: cockpit.live.session.RunSession.now_ts)."""
        total = sum(attempt.lasted_s for attempt in self.attempts)
        if self.attempts and now_ts is not None and not self.ended:
            total += max(0.0, now_ts - self.attempts[-1].last_ts)
        return total

    def cost_so_far(self, now_ts: float | None = None) -> float | None:
        if self.price_per_hour is None:
            return None
        return self.price_per_hour * self.billed_s(now_ts) / 3600

    def cost_projected(self, now_ts: float | None = None) -> float | None:
        """Cost so far plus the ETA's worth; None without a price, or while the ETA is not known."""
        spent = self.cost_so_far(now_ts)
        eta = self.eta_s()
        if spent is None or (eta is None and not self.ended):
            return None
        return spent + (self.price_per_hour or 0) * (eta or 0) / 3600

    def loss_drop(self) -> float | None:
        if self.first_loss in (None, 0) or self.loss is None:
            return None
        return 1 - self.loss / self.first_loss
