"""The doctor's window: observations of telemetry, the sliding window a rule judges, its findings.

Pure: no clock of its own (times come from the samples and the caller's `now_ts`), no I/O.
Samples are read by attribute name (the sampler's dataclasses, or anything shaped like them);
any field may be missing or None (not supported on this card or platform), and the reading
helpers here (`field`, `gpu_at`, `pids_on`, ...) return None rather than raise, so a rule that
lacks its evidence stays quiet rather than guess.

The hysteresis lives in `Window.held`: a condition must hold for most of the time the window
observed (`APPEAR_SHARE`), and for at least `MIN_HELD_S`, before its finding appears; the finding
stays until the condition held for less than half of it (`KEEP_SHARE`), so a short blip neither
raises nor drops a finding. A rule about training judges only the time the run trained (`during`):
the minute of model loading before the first step is no evidence either way, so a misconfigured
run is named within its first quarter-minute of steps, not a minute after its start.

The same run gives the same verdict watched live or replayed: a live view samples about twice a
second, the recording keeps 5-s bins (cockpit.telemetry.history) of once-a-second samples. So every
observation weighs the time it stands for (the gap to the one before), and the readings that
swing within a step (GPU util, the trainer's CPU) are judged as their mean over the trailing
`SMOOTH_S` seconds, one recorded bin: a live sample taken inside a kernel burst (util 100%) and one
taken while the loader runs (0%) are judged as the bin that holds both is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from statistics import fmean
from typing import Any

from cockpit import fmt

APPEAR_SHARE = 0.7  # a finding appears when its condition held for 70% of the time observed...
KEEP_SHARE = 0.5  # ...and goes when it held for less than half
MIN_HELD_S = 10.0  # ...and only once it held this long: two recorded bins, not one stray sample
DEFAULT_MIN_SAMPLES = 2  # fewer observations (of the time judged) in a window: no verdict
SMOOTH_S = 5.0  # util and the trainer's CPU are judged as their mean over this long: one recorded bin
MAX_WEIGHT_S = 10.0  # an observation stands for at most this long (a sampler that paused, a gap)


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
    logged: bool = False  # the run had logged a step (its step measurements exist) when this was taken
    util_smooth: float | None = None  # trainer_util, mean of the trailing SMOOTH_S seconds
    trainer_cpu_smooth: float | None = None  # the trainer's CPU (100 = one core), mean of SMOOTH_S
    stepped_s: float = 0.0  # seconds since the attempt's first logged step (inf: logged, when unknown)

    @classmethod
    def of(
        cls,
        sample: Any,
        status: str | None,
        trainer_pids: frozenset[int],
        logged: bool = False,
        before: Iterable[Observation] = (),
        stepped_s: float = 0.0,
    ) -> Observation:
        """`before`: the observations just before this one, newest first, back to the first that is
        SMOOTH_S or more older (their readings over the last SMOOTH_S seconds are averaged into its
        smoothed ones)."""
        gpus: tuple[Any, ...] = ()
        if field(sample, "nvml") == "ok":
            gpus = tuple(g for g in field(sample, "gpus") or [] if field(g, "state") in (None, "ok"))
        ours = tuple(g for g in gpus if pids_on(g) & trainer_pids) or gpus
        # "the GPU waits" must hold for every card the trainer uses: judge the busiest
        utils = [u for g in ours if (u := field(g, "util_pct")) is not None]
        util = max(utils) if utils else None
        cpu = field(field(sample, "host"), "trainer_cpu_pct")
        earlier = [o for o in before if o.ts < sample.ts]
        times = [sample.ts, *(o.ts for o in earlier)]
        return cls(
            sample.ts,
            sample,
            status,
            trainer_pids,
            gpus,
            ours,
            util,
            logged,
            _trailing_mean(times, [util, *(o.trainer_util for o in earlier)]) if util is not None else None,
            _trailing_mean(times, [cpu, *(field(o.host, "trainer_cpu_pct") for o in earlier)])
            if cpu is not None
            else None,
            stepped_s,
        )

    @property
    def training(self) -> bool:
        return self.status == "running"

    @property
    def stepping(self) -> bool:
        """Training with its steps measured: the time before the first logged step (CUDA warm-up,
        the first step's allocations) says nothing of the steps."""
        return self.training and self.logged

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

    @cached_property
    def weights(self) -> tuple[float, ...]:
        """The seconds each observation stands for: the gap to the one before (at most
        MAX_WEIGHT_S); the first, which has none in the window, the mean gap."""
        obs = self.observations
        if len(obs) < 2:
            return (0.0,) * len(obs)
        gaps = [max(0.0, min(MAX_WEIGHT_S, b.ts - a.ts)) for a, b in pairwise(obs)]
        return (fmean(gaps), *gaps)

    def covered_s(self, during: Callable[[Observation], bool] | None = None) -> float:
        """Seconds the observations cover (those `during` holds for, when given)."""
        seen = sum(
            w for o, w in zip(self.observations, self.weights, strict=True) if during is None or during(o)
        )
        return min(self.length_s, seen)

    def held_s(
        self, condition: Callable[[Observation], bool], during: Callable[[Observation], bool] | None = None
    ) -> float:
        """Seconds `condition` held (in the time `during` holds for, when given)."""
        held = sum(
            w
            for o, w in zip(self.observations, self.weights, strict=True)
            if (during is None or during(o)) and condition(o)
        )
        return min(self.length_s, held)

    def held(
        self,
        condition: Callable[[Observation], bool],
        appear: float = APPEAR_SHARE,
        keep: float = KEEP_SHARE,
        during: Callable[[Observation], bool] | None = None,
        whole: bool = False,
    ) -> bool:
        """Did `condition` hold for enough of the time observed (`keep` of it while shown, else
        `appear` of it and at least MIN_HELD_S)? `during`: judge only the time it holds for (a rule
        about steps judges the time the run trained). `whole`: judge the whole window's length
        instead, however little of it was observed (an idle GPU must have idled for all of it)."""
        if self.length_s <= 0:
            return False
        share = keep if self.keeping else appear
        if whole:
            if len(self.observations) < self.min_samples:
                return False
            return self.held_s(condition) / self.length_s >= share
        judged = [o for o in self.observations if during is None or during(o)]
        if len(judged) < self.min_samples:
            return False
        seen = self.covered_s(during)
        held = self.held_s(condition, during)
        if seen <= 0 or (not self.keeping and held < min(MIN_HELD_S, appear * self.length_s)):
            return False
        return held / seen >= share

    def stepped_enough(self) -> bool:
        """The run has logged steps for MIN_HELD_S by the newest observation (or the finding shows):
        a recorded bin that the first step ends inside weighs its whole 5 s as steps, so the time
        judged can run ahead of the steps there were; this keeps a replay from speaking before the
        live view would."""
        if self.keeping:
            return True
        return bool(self.observations) and self.observations[-1].stepped_s >= min(
            MIN_HELD_S, APPEAR_SHARE * self.length_s
        )

    def first_ts(self, condition: Callable[[Observation], bool]) -> float | None:
        return next((o.ts for o in self.observations if condition(o)), None)

    def span_text(self, during: Callable[[Observation], bool] | None = None) -> str:
        return seconds_text(self.covered_s(during))


RuleFn = Callable[[Window, Any], "Finding | None"]


def _trailing_mean(times: list[float], values: list[float | None]) -> float | None:
    """The time-weighted mean over the SMOOTH_S seconds up to `times[0]` of readings taken at
    `times` (newest first), each standing for the time since the one before it: a live sample for
    its ~0.5 s, a recorded bin for its 5 s (so a bin is judged as itself, whatever the jitter of
    the bins' ends). The oldest reading, with none before it, stands for the mean gap."""
    start = times[0] - SMOOTH_S
    gaps = [a - b for a, b in pairwise(times)]
    typical = fmean(gaps) if gaps else 1.0
    total = weight_sum = 0.0
    for i, (ts, value) in enumerate(zip(times, values, strict=True)):
        if ts <= start:
            break
        covers_from = times[i + 1] if i + 1 < len(times) else ts - typical
        weight = ts - max(covers_from, start)
        if value is not None and weight > 0:
            total += value * weight
            weight_sum += weight
    return total / weight_sum if weight_sum > 0 else values[0]


# ---------------------------------------------------------------- reading samples


def field(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


def gpu_at(o: Observation, index: Any) -> Any:
    return next((g for g in o.gpus if field(g, "index") == index), None)


def pids_on(gpu: Any) -> set[int | None]:
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
