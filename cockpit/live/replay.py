"""Replaying a recorded run: its events and its telemetry, at their recorded times, faster or not.

`ReplaySession` is a `RunSource` (cockpit/live/sources.py), as `cockpit.live.session.RunSession` is,
so the TUI and the headless renderer play a recording as they follow a live run. Events are
released when the replay's position reaches their recorded `ts`; `speed` 10 plays ten times as
fast, 0 as fast as possible. Silences longer than `MAX_GAP_S` (a trainer restarted hours later)
are cut short.

`set_speed()` and `skip()` (the screen's -, +, [ and ] keys) change the pace and jump ahead or back
from where the replay is. The state only folds forward, so going back folds the recording again
from its start up to the new position: `skip()` only asks for it (it runs on the UI's thread), and
the next `poll()` (on the thread that polls) starts a new `RunState` and counts the rewind in
`rewinds`, which tells the screen and the watch to drop what they drew from later on.

`session.watch` (a `ReplayWatch`) has the interface of `cockpit.live.watch.LiveWatch`: it rebuilds a
telemetry `Sample` from each bin of `telemetry.jsonl` once the replay reaches the bin's end, feeds
the doctor with it and returns the findings, as the live view had them.

The clock is injected (`clock`, monotonic seconds), so tests step through a replay.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from cockpit import fmt
from cockpit.doctor.engine import Doctor
from cockpit.doctor.window import Finding
from cockpit.protocol.wire import Fault, number
from cockpit.run.control import NotRunning
from cockpit.run.journal import EventFollower
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from cockpit.telemetry.gpu import GPU_LOST_TEXT, GpuSample
from cockpit.telemetry.history import TELEMETRY_NAME, read_history
from cockpit.telemetry.sampler import HostSample, Sample

MAX_GAP_S = 60.0  # recorded silence longer than this plays as this long
MIN_SPEED, MAX_SPEED = 0.25, 256.0  # what the replay's - and + keys go between
REPLAY_BINS = 10_000  # ~14 h of 5 s bins at full resolution; older ones are merged
_NVML_DETAIL = {
    "no_driver": "no NVIDIA GPU / driver not loaded: as recorded in telemetry.jsonl",
    "no_gpu": "no NVIDIA GPU: as recorded in telemetry.jsonl",
    "stalled": "NVML stalled: as recorded in telemetry.jsonl",
    "error": "the telemetry sampler failed: as recorded in telemetry.jsonl",
}


def sample_of_bin(line: dict[str, Any]) -> Sample:
    """A telemetry sample rebuilt from one bin of `telemetry.jsonl`: its means and maxima, at its end."""
    gpus = []
    for g in line.get("gpus") or []:
        state = g.get("state") or "ok"
        clock = number(g.get("sm_clock_mean_mhz"))
        gpus.append(
            GpuSample(
                index=int(g["index"]),
                util_pct=number(g.get("util_mean_pct")),
                mem_used_bytes=g.get("mem_used_max_bytes"),
                mem_total_bytes=g.get("mem_total_bytes"),
                power_w=number(g.get("power_mean_w")),
                temp_c=number(g.get("temp_max_c")),
                sm_clock_mhz=None if clock is None else round(clock),
                throttle_reasons=list(g.get("throttle_reasons") or []),
                state=state,
                stale=state == "stalled" and not g.get("n"),
                error=GPU_LOST_TEXT if state == "lost" else None,
            )
        )
    h = line.get("host") or {}
    host = HostSample(
        cpu_pct=number(h.get("cpu_mean_pct")),
        ram_used_bytes=h.get("ram_used_max_bytes"),
        ram_total_bytes=h.get("ram_total_bytes"),
        swap_used_bytes=h.get("swap_used_max_bytes"),
        disk_read_bytes_s=number(h.get("disk_read_mean_bytes_s")),
        disk_write_bytes_s=number(h.get("disk_write_mean_bytes_s")),
        net_rx_bytes_s=number(h.get("net_rx_mean_bytes_s")),
        net_tx_bytes_s=number(h.get("net_tx_mean_bytes_s")),
        trainer_cpu_pct=number(h.get("trainer_cpu_mean_pct")),
        trainer_rss_bytes=h.get("trainer_rss_max_bytes"),
    )
    nvml = line.get("nvml") or "ok"
    return Sample(float(line["ts_end"]), gpus, host, nvml, _NVML_DETAIL.get(nvml), gpu_source="recorded")


class Timeline:
    """Recorded times -> seconds into the replay, silences longer than MAX_GAP_S cut short."""

    def __init__(self, stamps: list[float]) -> None:
        self.stamps = sorted(set(stamps))
        self.offsets: list[float] = []
        offset = 0.0
        for i, ts in enumerate(self.stamps):
            if i:
                offset += min(ts - self.stamps[i - 1], MAX_GAP_S)
            self.offsets.append(offset)

    @property
    def total_s(self) -> float:
        return self.offsets[-1] if self.offsets else 0.0

    def offset(self, ts: float) -> float:
        i = bisect.bisect_right(self.stamps, ts) - 1
        if i < 0:
            return 0.0
        return self.offsets[i] + min(ts - self.stamps[i], MAX_GAP_S)

    def recorded(self, offset_s: float) -> float | None:
        """The recorded time the replay shows at `offset_s` seconds in."""
        if not self.stamps:
            return None
        i = max(0, bisect.bisect_right(self.offsets, offset_s) - 1)
        ahead = offset_s - self.offsets[i]
        if i + 1 < len(self.stamps):
            ahead = min(ahead, self.stamps[i + 1] - self.stamps[i])
        return self.stamps[i] + max(0.0, ahead)


class ReplaySession:
    """A recorded run played back as if live, at its recorded pace (a `RunSource` whose mode is
    "playback"); commands are refused."""

    mode = "playback"
    next_commands: list[str] | None = None  # the run's own (a rehearsal says its own)

    def __init__(
        self,
        run: RunDir,
        speed: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        max_bins: int = REPLAY_BINS,
    ) -> None:
        if not (math.isfinite(speed) and speed >= 0):
            raise ValueError(f"speed must be 0 (as fast as possible) or a positive factor, got {speed}")
        self.run = run
        self.speed = float(speed)
        self.clock = clock
        self.max_bins = max_bins
        self.state = RunState(run_id=run.run_id, price_per_hour=run.config_price_per_hour())
        self.snapshot = self.state.snapshot()
        self.trainer_gone = False
        self.telemetry_skipped_lines = 0
        self.watch = ReplayWatch(self)
        self._lock = threading.Lock()
        self._loaded = False
        self._events: list[tuple[float, dict[str, Any] | Fault]] = []  # (offset, item), in recorded order
        self._bins: list[tuple[float, dict[str, Any]]] = []
        self._timeline = Timeline([])
        self._started_at: float | None = None
        self._next_event = 0
        self._rewind = False  # skip() went back before an event already applied: fold again
        self.rewinds = 0  # how many times poll() has folded the recording again from its start

    # ------------------------------------------------------------ the recording

    def _load(self) -> None:
        """Read the recording once, on whichever thread first needs it (never the UI's)."""
        with self._lock:
            if self._loaded:
                return
            follower = EventFollower(self.run.events_path)
            try:
                items = follower.finish()
            finally:
                follower.close()
            history = read_history(
                self.run.path / TELEMETRY_NAME, max_points=self.max_bins, full_resolution_s=1e9
            )
            self.telemetry_skipped_lines = history.skipped_lines
            stamps = [ts for ts in (_ts(item) for item in items) if ts is not None]
            stamps += [float(line["ts_end"]) for line in history.bins]
            self._timeline = timeline = Timeline(stamps)
            offset = 0.0
            for item in items:  # a line without a time (a fault) goes out with the one before
                ts = _ts(item)
                offset = offset if ts is None else timeline.offset(ts)
                self._events.append((offset, item))
            self._bins = sorted(((timeline.offset(b["ts_end"]), b) for b in history.bins), key=lambda p: p[0])
            self._loaded = True

    def position_s(self) -> float:
        """Seconds of recording played so far (inf at speed 0); the replay starts at the first call."""
        self._load()
        with self._lock:
            now = self.clock()
            if self._started_at is None:
                self._started_at = now
            if self.speed == 0:
                return math.inf
            return (now - self._started_at) * self.speed

    def set_speed(self, speed: float) -> float:
        """Play on at `speed` (clamped to MIN_SPEED..MAX_SPEED) from where the replay is; returns it."""
        speed = min(MAX_SPEED, max(MIN_SPEED, float(speed)))
        at = self.position_s()
        with self._lock:
            if math.isfinite(at):
                self._started_at = self.clock() - at / speed
            self.speed = speed
        return speed

    def skip(self, seconds: float) -> None:
        """Jump `seconds` of recording ahead, or back when negative (to the start at most; from the
        end once the recording is played out). The events in between are applied at the next poll;
        going back starts the fold again from the start there. Going back at speed 0 (as fast as
        possible, so already at the end) plays on at x1 from there."""
        at = min(self.position_s(), self._timeline.total_s)
        with self._lock:
            if self.speed == 0:
                if seconds >= 0:
                    return  # already at the end
                self.speed = 1.0
            target = max(0.0, at + seconds)
            self._started_at = self.clock() - target / self.speed
            applied = self._events[self._next_event - 1][0] if self._next_event else -1.0
            if target < applied or (self.trainer_gone and seconds < 0):
                self._rewind = True

    @property
    def rewind_pending(self) -> bool:
        """skip() went back and the next poll has yet to fold the recording again."""
        return self._rewind

    def recorded_now(self) -> float | None:
        """The recorded time the replay has reached: the replay's "now" for elapsed time and cost."""
        if not self._loaded:
            return None
        return self._timeline.recorded(min(self.position_s(), self._timeline.total_s))

    @property
    def label(self) -> str:
        speed = "max speed" if self.speed == 0 else f"x{self.speed:g}"
        if not self._loaded:
            return f"REPLAY {speed}"
        total = self._timeline.total_s
        at = min(self.position_s(), total)
        return f"REPLAY {speed} {fmt.duration(at)}/{fmt.duration(total)}"

    # ------------------------------------------------------------ the rest of the RunSource protocol

    def poll(self) -> list[dict[str, Any] | Fault]:
        """The events the replay has reached since the last poll, already applied to `state`."""
        at = self.position_s()
        with self._lock:
            rewind, self._rewind = self._rewind, False
        if rewind:
            self.state = RunState(run_id=self.run.run_id, price_per_hour=self.run.config_price_per_hour())
            self.snapshot = self.state.snapshot()
            self._next_event, self.trainer_gone = 0, False
            self.rewinds += 1
        items = []
        while self._next_event < len(self._events) and self._events[self._next_event][0] <= at:
            items.append(self._events[self._next_event][1])
            self._next_event += 1
        for item in items:
            self.state.apply(item)
        if items:
            self.snapshot = self.state.snapshot()
        if self._next_event >= len(self._events) and at >= self._timeline.total_s:
            self.trainer_gone = True  # the recording is played out
            self.state.settle_from_remains(self.run.final_dir.is_dir())
        return items

    @property
    def ended(self) -> bool:
        return self.trainer_gone

    @property
    def playing(self) -> bool:
        """The recording has more to play: leaving now is no ending of the run."""
        return not self.trainer_gone

    def send(self, command: str, sender: str = "cockpit") -> None:
        raise NotRunning(f"this is a replay of run {self.run.run_id}: '{command}' needs a live trainer")

    def close(self) -> None:
        self.watch.stop()

    def bins_until(self, start: int, at: float) -> tuple[list[dict[str, Any]], int]:
        """The telemetry bins from index `start` that the replay has reached at `at`, and the next index."""
        end = start
        while end < len(self._bins) and self._bins[end][0] <= at:
            end += 1
        return [line for _, line in self._bins[start:end]], end


def _ts(item: dict[str, Any] | Fault) -> float | None:
    return number(item.get("ts")) if isinstance(item, dict) else None


class ReplayWatch:
    """`LiveWatch.update(state)` over the recorded telemetry; `pop_samples()` hands every sample
    released since the last call (the sparklines want them all, not only the newest)."""

    plays_history = True  # the app must not prefill from telemetry.jsonl: this plays it
    pushes = False  # asked as the playback's clock moves

    def __init__(self, session: ReplaySession) -> None:
        self.session = session
        self.doctor = Doctor()
        self._lock = threading.Lock()
        self._next_bin = 0
        self._latest: Sample | None = None
        self._pending: list[Sample] = []
        self._rewinds = 0

    def update(self, state: RunState) -> tuple[Sample | None, list[Finding]]:
        at = self.session.position_s()
        with self._lock:
            if self._rewinds != self.session.rewinds:  # the replay went back: play the bins again
                self._rewinds = self.session.rewinds
                self.doctor, self._next_bin, self._latest, self._pending = Doctor(), 0, None, []
            lines, self._next_bin = self.session.bins_until(self._next_bin, at)
            for line in lines:
                sample = sample_of_bin(line)
                self.doctor.observe(sample, state)
                self._pending.append(sample)
                self._latest = sample
            latest = self._latest
        if latest is None:
            return None, []
        return latest, self.doctor.findings(latest.ts)

    def pop_samples(self) -> list[Sample]:
        with self._lock:
            samples, self._pending = self._pending, []
        return samples

    def start(self) -> ReplayWatch:
        return self

    def subscribe(
        self,
        state_of: Callable[[], RunState],
        on_news: Callable[[Sample | None, list[Finding], str | None], None],
    ) -> None:
        raise TypeError("a replay's samples follow its playback clock: ask update(), it does not push")

    def stop(self) -> None:
        pass
