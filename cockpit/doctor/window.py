"""The doctor's window: observations of telemetry, the sliding window a rule judges, its findings.

Pure: no clock of its own (times come from the samples and the caller's `now_ts`), no I/O.
Samples are read by attribute name (the sampler's dataclasses, or anything shaped like them);
any field may be missing or None (not supported on this card or platform), and the reading
helpers here (`field`, `gpu_at`, `pids_on`, ...) return None rather than raise, so a rule that
lacks its evidence stays quiet rather than guess.

The hysteresis lives in `Window.held`: a condition must hold for most of the window
(`APPEAR_SHARE`) before its finding appears, and the finding stays until the condition held
for less than half of it (`KEEP_SHARE`), so a short blip neither raises nor drops a finding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from cockpit import fmt

APPEAR_SHARE = 0.7  # a finding appears when its condition held for 70% of the window...
KEEP_SHARE = 0.5  # ...and goes when it held for less than half
DEFAULT_MIN_SAMPLES = 5  # fewer observations in a window: no verdict


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # info | warn | alarm
    title: str  # what is wrong, one line
    evidence: str  # the measured numbers and their window
    fix: str  # what to do, naming the config key
    since_ts: float | None = None  # when the evidence began to hold (sample time)


@dataclass(frozen=True)
class Observation:
    """One telemetry sample with what the run was doing when it was taken."""

    ts: float
    sample: Any
    status: str | None  # the run's status then; None: no run
    trainer_pids: frozenset[int]
    gpus: tuple[Any, ...]  # the GPUs with live readings (none when NVML is not ok)
    trainer_gpus: tuple[Any, ...]  # those the trainer holds; all when the process lists cannot tell
    trainer_util: float | None  # the busiest trainer GPU's util

    @classmethod
    def of(cls, sample: Any, status: str | None, trainer_pids: frozenset[int]) -> Observation:
        gpus: tuple[Any, ...] = ()
        if field(sample, "nvml") == "ok":
            gpus = tuple(g for g in field(sample, "gpus") or [] if field(g, "state") in (None, "ok"))
        ours = tuple(g for g in gpus if pids_on(g) & trainer_pids) or gpus
        # "the GPU waits" must hold for every card the trainer uses: judge the busiest
        utils = [u for g in ours if (u := field(g, "util_pct")) is not None]
        return cls(sample.ts, sample, status, trainer_pids, gpus, ours, max(utils) if utils else None)

    @property
    def training(self) -> bool:
        return self.status == "running"

    @property
    def host(self) -> Any:
        return field(self.sample, "host")


@dataclass(frozen=True)
class Window:
    """The observations of the last `length_s` seconds, as one rule sees them."""

    observations: tuple[Observation, ...]
    length_s: float
    now_ts: float
    min_samples: int = DEFAULT_MIN_SAMPLES
    active_since: float | None = None  # when this rule's finding appeared; None: not shown

    def __iter__(self) -> Iterator[Observation]:
        return iter(self.observations)

    def __len__(self) -> int:
        return len(self.observations)

    @property
    def keeping(self) -> bool:
        return self.active_since is not None

    def covered_s(self) -> float:
        """Seconds the observations cover (each stands for one sampling interval)."""
        n = len(self.observations)
        if n < 2:
            return 0.0
        span = self.observations[-1].ts - self.observations[0].ts
        return min(self.length_s, span * n / (n - 1))

    def held_s(self, condition: Callable[[Observation], bool]) -> float:
        if not self.observations:
            return 0.0
        hits = sum(1 for o in self.observations if condition(o))
        return self.covered_s() * hits / len(self.observations)

    def held(
        self,
        condition: Callable[[Observation], bool],
        appear: float = APPEAR_SHARE,
        keep: float = KEEP_SHARE,
    ) -> bool:
        """Did `condition` hold for enough of the window (`keep` while shown, else `appear`)?"""
        if len(self.observations) < self.min_samples or self.length_s <= 0:
            return False
        return self.held_s(condition) / self.length_s >= (keep if self.keeping else appear)

    def first_ts(self, condition: Callable[[Observation], bool]) -> float | None:
        return next((o.ts for o in self.observations if condition(o)), None)

    def span_text(self) -> str:
        return seconds_text(self.covered_s())


RuleFn = Callable[[Window, Any], "Finding | None"]

# ---------------------------------------------------------------- reading samples


def field(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


def gpu_at(o: Observation, index: Any) -> Any:
    return next((g for g in o.gpus if field(g, "index") == index), None)


def pids_on(gpu: Any) -> set[int]:
    return {p.get("pid") for p in field(gpu, "processes") or [] if isinstance(p, dict)}


def mean_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def seconds_text(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def bytes_text(value: float | None) -> str:
    return fmt.gib(value, 1) if value is not None else "an unknown amount"


def phrase(parts: Iterable[str | None]) -> str:
    return ", ".join(p for p in parts if p)
