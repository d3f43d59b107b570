"""The bottleneck doctor: names what slows a run down, or burns money, and the fix.

Pure: telemetry samples and the run state in, `Finding`s out; no clock of its own (times
come from the samples and the caller's `now_ts`), no I/O. Samples are read by attribute
name (the sampler's dataclasses, or anything shaped like them); any field may be missing
or None (not supported on this card or platform), and a rule that lacks its evidence
stays quiet rather than guess.

Each rule is a small function `rule(window, state) -> Finding | None` over a sliding
window of observations. The hysteresis lives in `Window.held`: a condition must hold for
most of the window (`APPEAR_SHARE`) before its finding appears, and the finding stays
until the condition held for less than half of it (`KEEP_SHARE`), so a short blip neither
raises nor drops a finding. The article's checklist (section 6.3, slow training) is the
source of the first rules: GPU util below 70% means a CPU or disk bottleneck, fp32 where
bf16 runs, DataLoader num_workers left at 0, SATA instead of NVMe.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from statistics import fmean
from typing import Any

from cockpit import fmt

# ---------------------------------------------------------------- thresholds

APPEAR_SHARE = 0.7  # a finding appears when its condition held for 70% of the window...
KEEP_SHARE = 0.5  # ...and goes when it held for less than half
DEFAULT_MIN_SAMPLES = 5  # fewer observations in a window: no verdict

LOW_UTIL_PCT = 70.0  # the article: GPU util steadily below 70% is a CPU/disk bottleneck
CPU_SATURATED_PCT = 90.0  # trainer CPU (100 = one core), or the host's CPU over all cores
DISK_READ_HIGH_BYTES_S = 50e6  # a tokenised text dataset reads KB/s; 50 MB/s means streaming from disk
MEM_FULL_SHARE = 0.95  # device memory used over total
DIP_SHARE_OF_MEAN = 0.5  # a dip: util below half its window mean...
MIN_DIPS = 2  # ...at least twice in the window (one is a checkpoint save or an eval)
MIN_WORKING_UTIL_PCT = 30.0  # dips of a GPU that hardly works say nothing
HARD_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake")
THROTTLE_APPEAR_SHARE = 0.5  # throttling hurts long before it is the rule
THROTTLE_KEEP_SHARE = 0.25
POWER_CAP_CLOCK_SHARE = 0.8  # sw_power_cap counts when SM clock < 80% of max...
POWER_CAP_MIN_UTIL_PCT = 80.0  # ...while the GPU is busy (a power cap at idle is normal)
POWER_LIMIT_SHARE = 0.95  # power limit below 95% of the card's default: capped by the provider
BUSY_UTIL_PCT = 20.0  # a GPU this busy while no run of ours trains is used by someone else
IDLE_UTIL_PCT = 5.0
IDLE_WINDOW_S = 300.0
IDLE_APPEAR_SHARE = 0.95  # "idle for the whole window", a stray sample forgiven
IDLE_KEEP_SHARE = 0.8  # the alarm goes within a minute of the GPU working again

NOT_TRAINING = ("paused", "finished", "stopped", "failed")  # or no run at all (status None)
SEVERITY_ORDER = {"alarm": 0, "warn": 1, "info": 2}


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
        if _field(sample, "nvml") == "ok":
            gpus = tuple(g for g in _field(sample, "gpus") or [] if _field(g, "state") in (None, "ok"))
        ours = tuple(g for g in gpus if _pids_on(g) & trainer_pids) or gpus
        # "the GPU waits" must hold for every card the trainer uses: judge the busiest
        utils = [u for g in ours if (u := _field(g, "util_pct")) is not None]
        return cls(sample.ts, sample, status, trainer_pids, gpus, ours, max(utils) if utils else None)

    @property
    def training(self) -> bool:
        return self.status == "running"

    @property
    def host(self) -> Any:
        return _field(self.sample, "host")


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
        return _seconds_text(self.covered_s())


RuleFn = Callable[[Window, Any], "Finding | None"]

# ---------------------------------------------------------------- reading samples


def _field(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


def _gpu(o: Observation, index: Any) -> Any:
    return next((g for g in o.gpus if _field(g, "index") == index), None)


def _pids_on(gpu: Any) -> set[int]:
    return {p.get("pid") for p in _field(gpu, "processes") or [] if isinstance(p, dict)}


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def _seconds_text(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _bytes_text(value: float | None) -> str:
    return fmt.gib(value, 1) if value is not None else "an unknown amount"


def _phrase(parts: Iterable[str | None]) -> str:
    return ", ".join(p for p in parts if p)


# ---------------------------------------------------------------- rules


def _cpu_saturated(o: Observation) -> bool:
    trainer = _field(o.host, "trainer_cpu_pct")
    host = _field(o.host, "cpu_pct")
    return (trainer is not None and trainer >= CPU_SATURATED_PCT) or (
        host is not None and host >= CPU_SATURATED_PCT
    )


def _gpu_waits(o: Observation) -> bool:
    util = o.trainer_util
    return o.training and util is not None and util < LOW_UTIL_PCT


def input_bound(window: Window, state: Any) -> Finding | None:
    """GPU util < 70% (window mean) while training, with the trainer's CPU saturated
    (>= 90% of one core: a single-threaded loader) or the host's CPU >= 90% busy."""

    def starved(o: Observation) -> bool:
        return _gpu_waits(o) and _cpu_saturated(o)

    if not window.held(starved):
        return None
    training = [o for o in window if o.training]
    util = _mean(o.trainer_util for o in training)
    if util is None or util >= LOW_UTIL_PCT:
        return None
    trainer_cpu = _mean(_field(o.host, "trainer_cpu_pct") for o in training)
    host_cpu = _mean(_field(o.host, "cpu_pct") for o in training)
    cores = _field(window.observations[-1].host, "cpu_count_usable")
    workers = (_field(state, "plan") or {}).get("dataloader_num_workers")
    evidence = _phrase(
        [
            f"GPU util {util:.0f}% (mean of {window.span_text()})",
            f"trainer CPU {trainer_cpu:.0f}% of one core" if trainer_cpu is not None else None,
            f"host CPU {host_cpu:.0f}%" + (f" ({cores} cores usable)" if cores else "")
            if host_cpu is not None
            else None,
            f"dataloader_num_workers {workers}" if workers is not None else None,
        ]
    )
    suggested = max(1, cores // 2) if cores else 4
    return Finding(
        rule="input_bound",
        severity="warn",
        title="Input-bound: the GPU waits for data",
        evidence=evidence,
        fix=f"Raise training.dataloader_num_workers (e.g. to {suggested}) and pre-tokenise the dataset; "
        "the article's rule: about half the cores.",
        since_ts=window.first_ts(starved),
    )


def slow_disk(window: Window, state: Any) -> Finding | None:
    """Disk reads >= 50 MB/s while training with GPU util < 70%: the input comes from disk."""

    def reading(o: Observation) -> bool:
        rate = _field(o.host, "disk_read_bytes_s")
        return _gpu_waits(o) and rate is not None and rate >= DISK_READ_HIGH_BYTES_S

    if not window.held(reading):
        return None
    training = [o for o in window if o.training]
    rate = _mean(_field(o.host, "disk_read_bytes_s") for o in training) or 0.0
    util = _mean(o.trainer_util for o in training) or 0.0
    return Finding(
        rule="slow_disk",
        severity="warn",
        title="Disk-bound: the GPU waits for reads from disk",
        evidence=f"disk reads {rate / 1e6:.0f} MB/s, GPU util {util:.0f}% (means of {window.span_text()})",
        fix="Copy the dataset and model to a local NVMe disk (a SATA disk reads ~500 MB/s at best), "
        "or raise training.dataloader_num_workers.",
        since_ts=window.first_ts(reading),
    )


def _capability(text: Any) -> tuple[int, int] | None:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, TypeError):
        return None


def fp32_on_bf16_card(window: Window, state: Any) -> Finding | None:
    """Precision fp32 on a CUDA card of compute capability >= 8.0 (native bf16), run not ended."""
    device = _field(state, "device") or {}
    capability = _capability(device.get("capability"))
    if (
        _field(state, "precision") != "fp32"
        or _field(state, "status") not in ("starting", "running", "paused")
        or device.get("kind", "cuda") != "cuda"
        or capability is None
        or capability < (8, 0)
    ):
        return None
    name = device.get("name") or "this GPU"
    return Finding(
        rule="fp32_on_bf16_card",
        severity="warn",
        title="Training in fp32 on a card with native bf16",
        evidence=f"precision fp32 on {name} (compute capability {capability[0]}.{capability[1]})",
        fix="Set training.precision: bf16 (or auto): about 2x faster and half the activation memory.",
        since_ts=_field(state, "train_started_ts"),
    )


def _mem_share(gpu: Any) -> float | None:
    used, total = _field(gpu, "mem_used_bytes"), _field(gpu, "mem_total_bytes")
    return used / total if used is not None and total else None


def _dips(utils: list[float], mean: float) -> int:
    """Separate episodes of util below DIP_SHARE_OF_MEAN of its mean."""
    low = [u < DIP_SHARE_OF_MEAN * mean for u in utils]
    return sum(1 for i, is_low in enumerate(low) if is_low and (i == 0 or not low[i - 1]))


def memory_pressure(window: Window, state: Any) -> Finding | None:
    """A trainer GPU > 95% full for most of the window while its util dips below half its
    mean (>= 30%) at least twice (once while the finding is shown): allocator paging or
    fragmentation."""
    for index in dict.fromkeys(_field(g, "index") for o in window for g in o.trainer_gpus):

        def full(o: Observation, index: Any = index) -> bool:
            share = _mem_share(_gpu(o, index))
            return o.training and share is not None and share > MEM_FULL_SHARE

        if not window.held(full):
            continue
        utils = [u for o in window if o.training and (u := _field(_gpu(o, index), "util_pct")) is not None]
        if len(utils) < window.min_samples:
            continue
        mean = fmean(utils)
        dips = _dips(utils, mean)
        if mean < MIN_WORKING_UTIL_PCT or dips < (1 if window.keeping else MIN_DIPS):
            continue
        last_full = next(_gpu(o, index) for o in reversed(window.observations) if full(o))
        used, total = _field(last_full, "mem_used_bytes"), _field(last_full, "mem_total_bytes")
        checkpointing = (_field(state, "plan") or {}).get("gradient_checkpointing")
        return Finding(
            rule="memory_pressure",
            severity="warn",
            title="Memory pressure: the GPU is nearly full and its util keeps dropping",
            evidence=f"GPU {index}: {fmt.gib(used, 1)} of {fmt.gib(total, 1)} used ({used / total:.0%}); "
            f"util mean {mean:.0f}%, below {DIP_SHARE_OF_MEAN * mean:.0f}% {dips} times "
            f"in {window.span_text()} (lowest {min(utils):.0f}%)",
            fix="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and lower training.micro_batch_size"
            + (" or turn on training.gradient_checkpointing." if checkpointing is not True else "."),
            since_ts=window.first_ts(full),
        )
    return None


def _throttled(gpu: Any) -> list[str]:
    """The throttle reasons that cost speed in this reading."""
    reasons = _field(gpu, "throttle_reasons") or []
    found = [r for r in reasons if r in HARD_THROTTLE]
    clock, clock_max = _field(gpu, "sm_clock_mhz"), _field(gpu, "sm_clock_max_mhz")
    util = _field(gpu, "util_pct")
    if (
        "sw_power_cap" in reasons
        and None not in (clock, clock_max, util)
        and clock < POWER_CAP_CLOCK_SHARE * clock_max
        and util >= POWER_CAP_MIN_UTIL_PCT
    ):
        found.append("sw_power_cap")
    return found


def _power_capped(gpu: Any) -> bool:
    limit, default = _field(gpu, "power_limit_w"), _field(gpu, "power_default_limit_w")
    return limit is not None and bool(default) and limit < POWER_LIMIT_SHARE * default


def throttling(window: Window, state: Any) -> Finding | None:
    """A GPU throttled (hw_slowdown, hw/sw thermal slowdown, hw_power_brake; sw_power_cap
    only with SM clock < 80% of max at util >= 80%) for half the window (kept down to a
    quarter), or a power limit below 95% of the card's default for most of it."""
    for index in dict.fromkeys(_field(g, "index") for o in window for g in o.gpus):

        def slowed(o: Observation, index: Any = index) -> bool:
            return bool(_throttled(_gpu(o, index)))

        def capped(o: Observation, index: Any = index) -> bool:
            return _power_capped(_gpu(o, index))

        is_slowed = window.held(slowed, THROTTLE_APPEAR_SHARE, THROTTLE_KEEP_SHARE)
        is_capped = window.held(capped)
        if not (is_slowed or is_capped):
            continue
        readings = [g for o in window if (g := _gpu(o, index)) is not None]
        parts = []
        if is_slowed:
            counts: dict[str, int] = {}
            for g in readings:
                for reason in _throttled(g):
                    counts[reason] = counts.get(reason, 0) + 1
            names = "/".join(sorted(counts, key=lambda r: -counts[r]))
            temp = max((t for g in readings if (t := _field(g, "temp_c")) is not None), default=None)
            clock = _mean(_field(g, "sm_clock_mhz") for g in readings)
            clock_max = _field(readings[-1], "sm_clock_max_mhz")
            parts += [
                f"GPU {index}: {names} for {window.held_s(slowed):.0f} of {window.span_text()}",
                f"up to {temp:.0f} °C" if temp is not None else None,
                f"SM clock {clock:.0f}" + (f" of {clock_max:.0f} MHz" if clock_max else " MHz")
                if clock is not None
                else None,
            ]
        if is_capped:
            g = next(g for g in reversed(readings) if _power_capped(g))
            parts.append(
                f"GPU {index}: power limit {_field(g, 'power_limit_w'):.0f} W, "
                f"default {_field(g, 'power_default_limit_w'):.0f} W"
            )
        return Finding(
            rule="throttling",
            severity="warn",
            title="Throttled: the GPU delivers less than its spec",
            evidence=_phrase(parts),
            fix="Tell the provider or choose another instance: this card runs below its spec "
            "(nvidia-smi -q -d PERFORMANCE,POWER shows why).",
            since_ts=window.first_ts(slowed) if is_slowed else window.first_ts(capped),
        )
    return None


def _foreign(o: Observation) -> list[tuple[Any, dict]]:
    """(GPU index, process) for GPU processes not the trainer's. Trusted only when the lists
    show the trainer itself or no run is live: in a container NVML may report host pids."""
    gpus = o.gpus
    sees_trainer = any(_pids_on(g) & o.trainer_pids for g in gpus)
    if not (sees_trainer or o.status is None or o.status in ("finished", "stopped", "failed")):
        return []
    return [
        (_field(g, "index"), p)
        for g in gpus
        for p in _field(g, "processes") or []
        if isinstance(p, dict) and p.get("pid") is not None and p["pid"] not in o.trainer_pids
    ]


def _max_util(o: Observation) -> float | None:
    utils = [u for g in o.gpus if (u := _field(g, "util_pct")) is not None]
    return max(utils) if utils else None


def _busy_without_us(o: Observation) -> bool:
    util = _max_util(o)
    return (o.status is None or o.status in NOT_TRAINING) and util is not None and util >= BUSY_UTIL_PCT


def foreign_process(window: Window, state: Any) -> Finding | None:
    """Another process (pid not the trainer's) on a GPU for most of the window, or a GPU
    >= 20% busy while no run of ours trains (paused, ended, or none)."""

    def has_foreign(o: Observation) -> bool:
        return bool(_foreign(o))

    holds_memory = window.held(has_foreign)
    busy = window.held(_busy_without_us)
    if not (holds_memory or busy):
        return None
    parts = []
    if holds_memory:
        seen: dict[int, tuple[Any, dict]] = {}
        for o in window:
            for index, p in _foreign(o):
                seen[p["pid"]] = (index, p)
        for index, p in list(seen.values())[:3]:
            name = p.get("name") or "?"
            parts.append(f"pid {p['pid']} ({name}) holds {_bytes_text(p.get('used_bytes'))} on GPU {index}")
        if len(seen) > 3:
            parts.append(f"{len(seen) - 3} more")
    if busy:
        utils = [_max_util(o) for o in window if _busy_without_us(o)]
        status = window.observations[-1].status
        doing = f"the run is {status}" if status else "no run is attached"
        parts.append(f"GPU util {fmean(utils):.0f}% (mean of {window.span_text()}) while {doing}")
    return Finding(
        rule="foreign_process",
        severity="warn",
        title="Another process is using the GPU",
        evidence=_phrase(parts),
        fix="Stop it (nvidia-smi lists it; kill the pid if it is yours): it takes GPU memory and time "
        "from the run.",
        since_ts=window.first_ts(has_foreign) if holds_memory else window.first_ts(_busy_without_us),
    )


def _idle(o: Observation) -> bool:
    if not (o.status is None or o.status in NOT_TRAINING):
        return False
    gpus = o.gpus
    utils = [_field(g, "util_pct") for g in gpus]
    return bool(gpus) and None not in utils and max(utils) < IDLE_UTIL_PCT


def idle_billed(window: Window, state: Any) -> Finding | None:
    """Every GPU below 5% util for the whole (5-minute) window while no run trains (paused,
    finished, stopped, failed, or none; a vanished trainer is marked failed by its exit
    event). The alarm stays until the GPU works again for a fifth of the window."""
    if not window.held(_idle, IDLE_APPEAR_SHARE, IDLE_KEEP_SHARE):
        return None
    since = window.active_since if window.keeping else window.first_ts(_idle)
    since = window.now_ts if since is None else since
    idle_s = max(0.0, window.now_ts - since)
    price = _field(state, "price_per_hour")
    status = window.observations[-1].status
    doing = f"the run is {status}" if status else "no run is attached"
    cost = (
        f"{fmt.money(price * idle_s / 3600)} burnt at {fmt.money(price)}/h"
        if price is not None
        else "price unknown (set cost.price_per_hour)"
    )
    return Finding(
        rule="idle_billed",
        severity="alarm",
        title="Idle GPU, still billed",
        evidence=f"GPU util below {IDLE_UTIL_PCT:.0f}% for {idle_s / 60:.0f} min while {doing}; {cost}",
        fix="Shut the instance down, or start the next run: it is billed by the hour, idle or not.",
        since_ts=since,
    )


def no_gpu(window: Window, state: Any) -> Finding | None:
    """NVML says no_driver or no_gpu for most of the window while a run is training."""

    def blind(o: Observation) -> bool:
        return o.training and _field(o.sample, "nvml") in ("no_driver", "no_gpu")

    if not window.held(blind):
        return None
    device = _field(state, "device") or {}
    kind, name = device.get("kind"), device.get("name")
    if kind == "cuda":
        title = "No GPU telemetry: NVML cannot see the GPU the trainer uses"
        fix = "Check that nvidia-smi works in this environment (driver library mounted); until then the "
        fix += "doctor cannot judge the GPU."
    else:
        title = "Training without a GPU?"
        fix = "Check nvidia-smi and the driver, or pick an instance with a GPU: on the CPU a fine-tune "
        fix += "of a 7B model takes days."
    nvml = _field(window.observations[-1].sample, "nvml")
    on = f"{kind} ({name})" if kind and name and name != kind else (kind or "an unknown device")
    return Finding(
        rule="no_gpu",
        severity="info",
        title=title,
        evidence=f"NVML: {nvml} for {window.held_s(blind):.0f} of {window.span_text()} "
        f"while the run trains on {on}",
        fix=fix,
        since_ts=window.first_ts(blind),
    )


# ---------------------------------------------------------------- the doctor

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
            ("slow_disk", slow_disk, window_s),
            ("memory_pressure", memory_pressure, window_s),
            ("throttling", throttling, window_s),
            ("foreign_process", foreign_process, window_s),
            ("fp32_on_bf16_card", fp32_on_bf16_card, window_s),
            ("no_gpu", no_gpu, window_s),
            *((rule_id, rule, window_s) for rule_id, rule in doctor_multi.RULES),
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
        ts = _field(sample, "ts")
        if ts is None:
            return
        if self._history and ts < self._history[-1].ts:
            self._history.clear()  # time went backwards (a replay restarted): start over
            self._active.clear()
        pids = set(trainer_pids)
        pids.add(_field(_field(sample, "host"), "trainer_pid"))
        attempts = _field(state, "attempts")
        if attempts:
            pids.add(_field(attempts[-1], "pid"))
        pids.update(doctor_multi.rank_pids(state))  # several GPUs: every rank is the trainer
        pids.discard(None)
        self._history.append(Observation.of(sample, _field(state, "status"), frozenset(pids)))
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


from cockpit import doctor_multi  # noqa: E402  (its rules use this module's types)
