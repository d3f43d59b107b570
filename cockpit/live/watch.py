"""Live GPU/host telemetry and the doctor's findings for a client showing a live run.

The client samples NVML itself (a little more than twice a second, off its main thread) for the
live figures; the recorder process beside the trainer keeps the history on disk. Headless and
TUI use this one class so both show the same figures and the same findings: headless asks for
the newest (`update`), the TUI has each new sample pushed to it (`subscribe`), so no thread of
its own wakes up to ask.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from cockpit.doctor.engine import Doctor
from cockpit.doctor.window import Finding
from cockpit.fmt import GIB
from cockpit.run.state import RunState
from cockpit.telemetry import spread as gpu_spread
from cockpit.telemetry.sampler import BackgroundSampler, Sample, Sampler

SAMPLE_INTERVAL_S = 0.5  # GPU figures twice a second: the view redraws once per sample (2 Hz)
HOST_EVERY = 2  # host figures (CPU, RAM, disk, network, the trainer's CPU) about once a second
JUDGE_EVERY_S = 2.0  # the doctor's rules look at windows of a minute: judged every other second

# called with (sample, findings, None), or (None, [], why) when judging a sample failed
OnNews = Callable[[Sample | None, list[Finding], str | None], None]


class LiveWatch:
    """A `Watch` (cockpit.live.sources) of this machine's GPUs and host: a background sampler, and
    the doctor judging each sample against the run's state."""

    plays_history = False  # the view prefills from telemetry.jsonl, then this samples what comes
    pushes = True

    def __init__(
        self,
        trainer_pid: int | None,
        interval_s: float = SAMPLE_INTERVAL_S,
        sampler: Sampler | None = None,
        doctor: Doctor | None = None,
    ):
        self._lock = threading.Lock()
        self._latest: Sample | None = None
        self._fresh = False
        self._findings: list[Finding] = []  # the doctor's last verdict
        self._judged_ts = float("-inf")  # the sample time it was given at
        self._subscriber: tuple[Callable[[], RunState], OnNews] | None = None
        # the run's own: its idle window is cost.idle_minutes
        self.doctor = Doctor() if doctor is None else doctor
        self.trainer_pid = trainer_pid
        self.background = BackgroundSampler(
            sampler or Sampler(trainer_pid=trainer_pid, host_every=HOST_EVERY),
            interval_s=interval_s,
            on_sample=self._on_sample,
        )

    def start(self) -> LiveWatch:
        self.background.start()
        return self

    def stop(self) -> None:
        self.background.stop(timeout_s=2.0)

    def subscribe(self, state_of: Callable[[], RunState], on_news: OnNews) -> None:
        """Hand each new sample, judged by the doctor against the run's state as `state_of()` gives
        it (a snapshot: another thread folds the events), to `on_news`, on the sampler's thread
        (so `on_news` must only hand it on)."""
        self._subscriber = (state_of, on_news)

    def pop_samples(self) -> list[Sample]:
        """Nothing: this watch hands each sample to its subscriber (the view keeps its own history)."""
        return []

    def _on_sample(self, sample: Sample) -> None:
        with self._lock:
            self._latest, self._fresh = sample, True
        subscriber = self._subscriber
        if subscriber is None:
            return
        state_of, on_news = subscriber
        try:
            newest, findings = self.update(state_of())
        except Exception as exc:  # a bug in a rule must not stop the figures
            on_news(None, [], f"the doctor failed: {type(exc).__name__}: {exc}")
            return
        on_news(newest, findings, None)

    def update(self, state: RunState) -> tuple[Sample | None, list[Finding]]:
        """The newest sample (fed to the doctor once) and the findings that hold now."""
        with self._lock:
            sample, fresh = self._latest, self._fresh
            self._fresh = False
        if sample is None:
            return None, []
        if fresh:  # every sample is evidence; the verdict every JUDGE_EVERY_S, not per question
            self.doctor.observe(sample, state, [self.trainer_pid] if self.trainer_pid else [])
            if sample.ts - self._judged_ts >= JUDGE_EVERY_S or sample.ts < self._judged_ts:
                self._findings, self._judged_ts = self.doctor.findings(sample.ts), sample.ts
        return sample, list(self._findings)


def gpu_status(sample: Sample | None, trainer_pids: Iterable[int] = ()) -> str:
    """`GPU0 97% 21.3/79.6 GiB 310 W` for each GPU (a summary beyond two, with the spread of util
    across the trainer's GPUs, `trainer_pids` when known), or why there is none."""
    if sample is None:
        return "GPU: sampling..."
    if sample.nvml != "ok":
        return f"GPU: {sample.nvml.replace('_', ' ')}"
    parts = []
    for gpu in sample.gpus[:2]:
        if gpu.state != "ok":
            parts.append(f"GPU{gpu.index} {gpu.state}")
            continue
        util = "-" if gpu.util_pct is None else f"{gpu.util_pct:.0f}%"
        mem = "-"
        if gpu.mem_used_bytes is not None and gpu.mem_total_bytes:
            mem = f"{gpu.mem_used_bytes / GIB:.1f}/{gpu.mem_total_bytes / GIB:.1f} GiB"
        power = "" if gpu.power_w is None else f" {gpu.power_w:.0f} W"
        parts.append(f"GPU{gpu.index} {util} {mem}{power}")
    if len(sample.gpus) > 2:
        busy = [g.util_pct for g in sample.gpus if g.util_pct is not None]
        parts.append(f"+{len(sample.gpus) - 2} GPUs (mean {sum(busy) / max(len(busy), 1):.0f}%)")
        spread = gpu_spread.brief(gpu_spread.gpu_spread(sample.gpus, trainer_pids))
        if spread:
            parts.append(f"spread {spread}")
    return "  ".join(parts) or "GPU: none"


def finding_line(finding: Finding) -> str:
    return f"doctor [{finding.severity}] {finding.title}: {finding.evidence} Fix: {finding.fix}"
