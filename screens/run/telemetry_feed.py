"""The live view's data side for telemetry and the trainer's log: plain Python, no widgets.

- `SeriesBook`: the sparkline histories of a run (per GPU util, memory, power; host CPU and
  RAM), fed by live samples and by the bins of the recorded `telemetry.jsonl`, bounded;
- `WatchSlot`: where the watch thread leaves what the watch said (`WatchNews`) for the thread
  that draws it;
- `LogTailReader`: the last lines of `backend.log`, read at most once a second and only when
  the file changed (a trainer's progress bars rewrite it many times a second).

The app's threads call the readers; only the screen's handlers touch a `SeriesBook`.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from widgets.sparkline import MAX_POINTS, Series

SAMPLE_GAP_S = 10.0  # samples further apart than this leave a gap in the sparkline between them
LONE_SAMPLE_S = 0.5  # the time a sample after a gap stands for (the live sampling interval)
LOG_TAIL_LINES = 10
LOG_TAIL_BYTES = 16384
LOG_READ_EVERY_S = 1.0

# key suffix -> (GpuSample field, bin key, how merged)
GPU_SERIES = (
    ("util", "util_pct", "util_mean_pct", "mean"),
    ("mem", "mem_used_bytes", "mem_used_max_bytes", "max"),
    ("power", "power_w", "power_mean_w", "mean"),
)
HOST_SERIES = (
    ("cpu", "cpu_pct", "cpu_mean_pct", "mean"),
    ("ram", "ram_used_bytes", "ram_used_max_bytes", "max"),
)


def gpu_key(index: int, figure: str) -> str:
    return f"gpu{index}.{figure}"


class SeriesBook:
    """Every sparkline's history for one run, keyed `gpu0.util`, `gpu0.mem`, `host.cpu`, ..."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points
        self.series: dict[str, Series] = {}
        self.peaks: dict[str, float] = {}  # the scale of a figure with no known limit (power)
        self.last_ts: float | None = None

    def get(self, key: str) -> Series | None:
        return self.series.get(key)

    @property
    def first_ts(self) -> float | None:
        starts = [s.first_ts for s in self.series.values() if s.first_ts is not None]
        return min(starts) if starts else None

    def span(self, window_s: float | None = None) -> tuple[float, float] | None:
        """(t0, t1) of the whole history, or of its last `window_s`; None while empty."""
        first, last = self.first_ts, self.last_ts
        if first is None or last is None:
            return None
        return (max(first, last - window_s) if window_s else first), last

    def sliding(self, window_s: float | None = None) -> bool:
        """Whether `span(window_s)` is the last `window_s` of a longer history (it then moves with
        every sample; the whole history's start stays put)."""
        first, last = self.first_ts, self.last_ts
        return bool(window_s) and first is not None and last is not None and last - window_s > first

    def add_sample(self, sample: Any) -> None:
        """A live sample (or one replayed from a bin): it stands for the time since the one before."""
        ts = sample.ts
        if self.last_ts is not None and ts <= self.last_ts:
            return
        near = self.last_ts is not None and ts - self.last_ts <= SAMPLE_GAP_S
        start = self.last_ts if near else ts - LONE_SAMPLE_S
        if sample.nvml == "ok":
            for gpu in sample.gpus:
                if gpu.state != "ok" or gpu.stale:
                    continue  # a lost or stalled GPU leaves a gap
                for suffix, field, _, how in GPU_SERIES:
                    self._add(gpu_key(gpu.index, suffix), start, ts, getattr(gpu, field), how)
        for suffix, field, _, how in HOST_SERIES:
            self._add(f"host.{suffix}", start, ts, getattr(sample.host, field), how)
        self.last_ts = ts

    def add_bin(self, line: dict) -> None:
        """One line of `telemetry.jsonl` (see cockpit.telemetry.history)."""
        start = line["ts_start"]
        covered_s = float(line.get("bin_s") or 5.0) * int(line.get("merged_bins") or 1)
        end = start + max(line["ts_end"] - start, covered_s)
        if self.last_ts is not None and end <= self.last_ts:
            return
        for gpu in line.get("gpus") or []:
            if not gpu.get("n"):
                continue
            for suffix, _, key, how in GPU_SERIES:
                self._add(gpu_key(gpu["index"], suffix), start, end, gpu.get(key), how)
        host = line.get("host") or {}
        for suffix, _, key, how in HOST_SERIES:
            self._add(f"host.{suffix}", start, end, host.get(key), how)
        self.last_ts = end

    def _add(self, key: str, start: float, end: float, value: float | None, how: str) -> None:
        if value is None:
            return
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = Series(self.max_points, how)
        series.add(start, end, value)
        self.peaks[key] = max(self.peaks.get(key, 0.0), float(value))


# ---------------------------------------------------------------- the watch's news


@dataclass
class WatchNews:
    """What the watch said since the screen last drew it: its newest sample and findings, every
    sample since (when it keeps them), or why there are none (`error`)."""

    sample: Any
    findings: list
    samples: list = field(default_factory=list)
    error: str | None = None


class WatchSlot:
    """Where the watch thread leaves its news for the follow thread, which `wait`s for it; news
    not yet taken is merged, and what the watch says again unchanged is no news."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.put_at = float("-inf")  # when the last news came
        self._lock = threading.Lock()
        self._news: WatchNews | None = None
        self._last: tuple | None = None  # (sample, findings, error) as last put
        self._wake = threading.Event()

    def put(self, sample: Any, findings: list, samples: list, error: str | None) -> bool:
        """Keep the news and wake the waiter; False (and nothing kept) when nothing is new."""
        said = (sample, findings, error)
        with self._lock:
            if not samples and self._last is not None and _same(said, self._last):
                return False
            self._last = said
            if self._news is not None:
                samples = self._news.samples + samples
            self._news = WatchNews(sample, findings, samples, error)
            self.put_at = self.clock()
        self._wake.set()
        return True

    @property
    def pending(self) -> bool:
        return self._news is not None

    def take(self) -> WatchNews | None:
        with self._lock:
            news, self._news = self._news, None
            return news

    def wait(self, timeout_s: float) -> None:
        """Until news comes, `wake()` is called, or `timeout_s` has passed."""
        self._wake.wait(timeout_s)
        self._wake.clear()

    def wake(self) -> None:
        self._wake.set()


def _same(a: tuple, b: tuple) -> bool:
    # the same sample object (a watch hands its newest again until a new one comes), equal findings
    return a[0] is b[0] and a[1] == b[1] and a[2] == b[2]


# ---------------------------------------------------------------- backend.log

_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_line(raw: str) -> str:
    """What a terminal would show of one line: the last rewrite after a carriage return
    (progress bars), without escape sequences or control characters."""
    parts = [part for part in raw.split("\r") if part.strip()]
    text = parts[-1] if parts else ""
    return _CONTROLS.sub("", _ESCAPES.sub("", text)).rstrip()


def tail_lines(path: Path, n: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_BYTES) -> list[str]:
    """The last `n` non-blank lines of a text file, read from its last `max_bytes`."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read()
    lines = data.decode("utf-8", errors="replace").split("\n")
    if size > max_bytes:
        lines = lines[1:]  # the first one is cut
    cleaned = [clean_line(line) for line in lines]
    return [line for line in cleaned if line][-n:]


class LogTailReader:
    """`poll()` gives the log's last lines when they changed, else None; never raises."""

    def __init__(
        self,
        path: Path,
        n: int = LOG_TAIL_LINES,
        every_s: float = LOG_READ_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.n = n
        self.every_s = every_s
        self.clock = clock
        self._read_at: float | None = None
        self._signature: tuple | None = None
        self._lines: list[str] | None = None

    def poll(self) -> list[str] | None:
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.every_s:
            return None
        self._read_at = now
        try:
            st = os.stat(self.path)
            signature: tuple = (st.st_size, st.st_mtime_ns)
        except OSError as exc:
            signature = ("missing", type(exc).__name__)
        if signature == self._signature:
            return None
        self._signature = signature
        if signature[0] == "missing":
            lines = [f"no {self.path.name} yet"]
        else:
            try:
                lines = tail_lines(self.path, self.n)
            except OSError as exc:
                lines = [f"cannot read {self.path.name}: {exc}"]
        if lines == self._lines:
            return None
        self._lines = lines
        return lines
