"""The bottleneck doctor: names what slows a run down, or burns money, and the fix.

Pure: telemetry samples and the run state in, `Finding`s out; no clock of its own (times
come from the samples and the caller's `now_ts`), no I/O. `Doctor` keeps the recent
observations and runs every rule over its window: the single-GPU rules live in
cockpit.doctor.rules, those for several GPUs in cockpit.doctor.multi_gpu, the observations,
windows and hysteresis they share in cockpit.doctor.window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from cockpit.doctor import multi_gpu as doctor_multi
from cockpit.doctor import preference_rules
from cockpit.doctor.mfu_rule import low_mfu
from cockpit.doctor.rules import (
    IDLE_WINDOW_S,
    foreign_process,
    fp32_on_bf16_card,
    host_busy,
    idle_billed,
    input_bound,
    memory_pressure,
    no_gpu,
    slow_disk,
    throttling,
)
from cockpit.doctor.step_rules import cpu_bound, gpu_underfed
from cockpit.doctor.window import (
    DEFAULT_MIN_SAMPLES,
    SMOOTH_S,
    Finding,
    Observation,
    RuleFn,
    Window,
    field,
)

SEVERITY_ORDER = {"alarm": 0, "warn": 1, "info": 2}
MAX_OBSERVATIONS = 20_000  # a guard for a runaway sampler; the window is bounded by time first


class Doctor:
    """Keeps a sliding window of observations and says which findings hold now."""

    def __init__(
        self,
        window_s: float = 60.0,
        min_samples: int = DEFAULT_MIN_SAMPLES,
        idle_window_s: float = IDLE_WINDOW_S,
    ) -> None:
        self.window_s = window_s
        self.min_samples = min_samples
        self.rules: tuple[tuple[str, RuleFn, float], ...] = (
            ("idle_billed", idle_billed, idle_window_s),
            ("input_bound", input_bound, window_s),
            ("gpu_underfed", gpu_underfed, window_s),
            ("cpu_bound", cpu_bound, window_s),
            ("slow_disk", slow_disk, window_s),
            ("memory_pressure", memory_pressure, window_s),
            ("throttling", throttling, window_s),
            ("foreign_process", foreign_process, window_s),
            ("host_busy", host_busy, window_s),
            ("fp32_on_bf16_card", fp32_on_bf16_card, window_s),
            ("low_mfu", low_mfu, window_s),
            ("no_gpu", no_gpu, window_s),
            *((rule_id, rule, window_s) for rule_id, rule in doctor_multi.RULES),
            *((rule_id, rule, window_s) for rule_id, rule in preference_rules.RULES),
        )
        self._history_s = max(span for _, _, span in self.rules)
        self._history: deque[Observation] = deque(maxlen=MAX_OBSERVATIONS)
        self._state: Any = None
        self._active: dict[str, float] = {}  # rule -> since_ts of its shown finding

    def __len__(self) -> int:
        return len(self._history)

    def observe(self, sample: Any, state: Any, trainer_pids: Iterable[int] = ()) -> None:
        """Add one telemetry sample, with the run state (None: no run) and the pids of the
        trainer's children (the trainer's own pid comes from the sample and the state)."""
        ts = field(sample, "ts")
        if ts is None:
            return
        if self._history and ts < self._history[-1].ts:
            self._history.clear()  # time went backwards (a replay restarted): start over
            self._active.clear()
        pids = set(trainer_pids)
        pids.add(field(field(sample, "host"), "trainer_pid"))
        attempts = field(state, "attempts")
        if attempts:
            pids.add(field(attempts[-1], "pid"))
        pids.update(doctor_multi.rank_pids(state))  # several GPUs: every rank is the trainer
        pids.discard(None)
        recent = []  # newest first: those the smoothed readings average over, and the one before them
        for o in reversed(self._history):
            recent.append(o)
            if o.ts <= ts - SMOOTH_S:
                break
        # a step logged: the time before it (CUDA warm-up, the first step) is no evidence of the steps
        logged = (
            bool(field(state, "input"))
            or field(state, "tokens_per_s") is not None
            or bool(field(state, "step"))
        )
        first_log = field(state, "first_log_ts")
        stepped_s = (ts - first_log if first_log is not None else float("inf")) if logged else 0.0
        self._history.append(
            Observation.of(
                sample, field(state, "status"), frozenset(pids), logged, recent, max(0.0, stepped_s)
            )
        )
        self._state = state
        while self._history and self._history[0].ts <= ts - self._history_s:
            self._history.popleft()

    def findings(self, now_ts: float) -> list[Finding]:
        """The findings whose evidence holds at `now_ts`, alarms first."""
        found = []
        in_span: dict[float, tuple[Observation, ...]] = {}
        for rule_id, rule, span_s in self.rules:
            if span_s not in in_span:
                in_span[span_s] = tuple(o for o in self._history if now_ts - span_s < o.ts <= now_ts)
            window = Window(in_span[span_s], span_s, now_ts, self.min_samples, self._active.get(rule_id))
            finding = rule(window, self._state)
            if finding is None:
                self._active.pop(rule_id, None)
                continue
            since = self._active.setdefault(rule_id, now_ts if finding.since_ts is None else finding.since_ts)
            found.append(replace(finding, since_ts=since))
        return sorted(found, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
