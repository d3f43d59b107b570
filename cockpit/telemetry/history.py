"""A run's telemetry history on disk (`telemetry.jsonl` in the run directory), and reading it back.

The trainer records; `cockpit attach` reads the whole history back. One UTF-8 JSON object per
line, one line per bin of `bin_s` seconds (bins aligned to multiples of `bin_s` in Unix time),
appended with one write per line:

    {"v": 1, "ts_start": 1718000000.2, "ts_end": 1718000004.7, "n": 10, "bin_s": 5.0,
     "merged_bins": 1, "nvml": "ok",
     "gpus": [{"index": 0, "n": 10, "state": "ok",
               "util_mean_pct": 96.4, "util_max_pct": 100, "sm_clock_mean_mhz": 1905.0,
               "mem_used_max_bytes": 65498251264, "mem_total_bytes": 85899345920,
               "power_mean_w": 601.2, "temp_max_c": 71, "throttle_reasons": ["sw_power_cap"]}],
     "host": {"cpu_mean_pct": 41.5, "ram_used_max_bytes": 30064771072, "ram_total_bytes": 270...,
              "swap_used_max_bytes": 0, "disk_read_mean_bytes_s": 1.2e6, "disk_write_mean_bytes_s": 0.0,
              "net_rx_mean_bytes_s": 5.1e3, "net_tx_mean_bytes_s": 3.0e3,
              "trainer_cpu_mean_pct": 180.0, "trainer_rss_max_bytes": 9663676416}}

- `ts_start`/`ts_end`: the first and last sample in the bin; `n`: samples in it; `merged_bins`: 1 as
  written, more in points that `read_history` merged.
- `*_mean_*` are means and `*_max_*` maxima over the bin; a figure no sample had is null.
- per GPU, `n` counts the samples with fresh values: a stalled GPU's stale repeats and a lost GPU
  add to `state` (the worst seen: lost > stalled > ok) but not to the figures. `throttle_reasons`
  is the union over the bin.
- `nvml` is the worst library state seen: error > stalled > no_driver > no_gpu > ok.
- readers ignore keys they do not know; a line with another `v` is skipped and counted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG_VERSION = 1
TELEMETRY_NAME = "telemetry.jsonl"
FULL_RESOLUTION_S = 3600.0  # the newest hour is read back at the recorded resolution
_TAIL_BYTES = 1 << 20

# (key on disk, field of the live sample, how a bin aggregates it)
_Spec = tuple[tuple[str, str, str], ...]
GPU_FIGURES = (
    ("util_mean_pct", "util_pct", "mean"),
    ("util_max_pct", "util_pct", "max"),
    ("sm_clock_mean_mhz", "sm_clock_mhz", "mean"),
    ("mem_used_max_bytes", "mem_used_bytes", "max"),
    ("mem_total_bytes", "mem_total_bytes", "max"),
    ("power_mean_w", "power_w", "mean"),
    ("temp_max_c", "temp_c", "max"),
)
HOST_FIGURES = (
    ("cpu_mean_pct", "cpu_pct", "mean"),
    ("ram_used_max_bytes", "ram_used_bytes", "max"),
    ("ram_total_bytes", "ram_total_bytes", "max"),
    ("swap_used_max_bytes", "swap_used_bytes", "max"),
    ("disk_read_mean_bytes_s", "disk_read_bytes_s", "mean"),
    ("disk_write_mean_bytes_s", "disk_write_bytes_s", "mean"),
    ("net_rx_mean_bytes_s", "net_rx_bytes_s", "mean"),
    ("net_tx_mean_bytes_s", "net_tx_bytes_s", "mean"),
    ("trainer_cpu_mean_pct", "trainer_cpu_pct", "mean"),
    ("trainer_rss_max_bytes", "trainer_rss_bytes", "max"),
)
# the same figures keyed as on disk, for merging lines read back
_AS_READ: dict[_Spec, _Spec] = {
    spec: tuple((key, key, how) for key, _, how in spec) for spec in (GPU_FIGURES, HOST_FIGURES)
}
_GPU_STATE_RANK = {"ok": 0, "stalled": 1, "lost": 2}
_NVML_RANK = {"ok": 0, "no_gpu": 1, "no_driver": 2, "stalled": 3, "error": 4}


class _Figures:
    """Weighted means and maxima of named figures; None (and non-finite) values are left out."""

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.maxes: dict[str, float] = {}

    def add_sample(self, data: dict[str, Any]) -> None:
        self._add(data, self.spec, 1.0)

    def add_bin(self, data: dict[str, Any], weight: float) -> None:
        self._add(data, _AS_READ[self.spec], weight)

    def _add(self, data: dict[str, Any], spec: _Spec, weight: float) -> None:
        # a read-back merges ~50,000 lines of eight GPUs: this loop is kept lean
        sums, weights, maxes = self.sums, self.weights, self.maxes
        for key, source, how in spec:
            value = data.get(source)
            if value.__class__ not in _NUMBER or value - value != 0:  # None, bool, str, NaN, inf
                continue
            if how == "mean":
                sums[key] = sums.get(key, 0.0) + value * weight
                weights[key] = weights.get(key, 0.0) + weight
            elif key not in maxes or value > maxes[key]:
                maxes[key] = value

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, _, how in self.spec:
            if how == "mean":
                out[key] = round(self.sums[key] / self.weights[key], 3) if self.weights.get(key) else None
            else:
                out[key] = self.maxes.get(key)
        return out


_NUMBER = (int, float)


class _Bin:
    """Samples (as written) or bins (as read back and merged) becoming one line."""

    def __init__(self, bin_s: float) -> None:
        self.bin_s = bin_s
        self.ts_start = math.inf
        self.ts_end = -math.inf
        self.n = 0
        self.merged_bins = 0
        self.nvml = "ok"
        self.host = _Figures(HOST_FIGURES)
        self.gpus: dict[int, dict[str, Any]] = {}  # index -> {figures, n, state, throttle}

    def _gpu(self, index: int) -> dict[str, Any]:
        if index not in self.gpus:
            self.gpus[index] = {"figures": _Figures(GPU_FIGURES), "n": 0, "state": "ok", "throttle": set()}
        return self.gpus[index]

    def _span(self, start: float, end: float, n: int, nvml: str) -> None:
        self.ts_start, self.ts_end = min(self.ts_start, start), max(self.ts_end, end)
        self.n += n
        if _NVML_RANK.get(nvml, 4) > _NVML_RANK.get(self.nvml, 4):
            self.nvml = nvml

    def add_sample(self, sample: dict[str, Any]) -> None:
        self._span(sample["ts"], sample["ts"], 1, sample.get("nvml") or "ok")
        self.merged_bins = 1
        self.host.add_sample(sample.get("host") or {})
        for gpu in sample.get("gpus") or []:
            acc = self._gpu(gpu["index"])
            state = gpu.get("state") or "ok"
            if _GPU_STATE_RANK.get(state, 2) > _GPU_STATE_RANK.get(acc["state"], 2):
                acc["state"] = state
            if gpu.get("stale") or state != "ok":
                continue
            acc["n"] += 1
            acc["figures"].add_sample(gpu)
            acc["throttle"].update(gpu.get("throttle_reasons") or ())

    def add_bin(self, line: dict[str, Any]) -> None:
        n = line["n"]
        self._span(line["ts_start"], line["ts_end"], n, line.get("nvml") or "ok")
        self.bin_s = line.get("bin_s", self.bin_s)
        self.merged_bins += line.get("merged_bins", 1)
        self.host.add_bin(line.get("host") or {}, n)
        for gpu in line.get("gpus") or []:
            acc = self._gpu(gpu["index"])
            if _GPU_STATE_RANK.get(gpu.get("state"), 2) > _GPU_STATE_RANK.get(acc["state"], 2):
                acc["state"] = gpu["state"]
            acc["n"] += gpu.get("n", 0)
            acc["figures"].add_bin(gpu, gpu.get("n", 0))
            acc["throttle"].update(gpu.get("throttle_reasons") or ())

    def line(self) -> dict[str, Any]:
        return {
            "v": LOG_VERSION,
            "ts_start": round(self.ts_start, 3),
            "ts_end": round(self.ts_end, 3),
            "n": self.n,
            "bin_s": self.bin_s,
            "merged_bins": self.merged_bins,
            "nvml": self.nvml,
            "gpus": [
                {
                    "index": index,
                    "n": acc["n"],
                    "state": acc["state"],
                    **acc["figures"].result(),
                    "throttle_reasons": sorted(acc["throttle"]),
                }
                for index, acc in sorted(self.gpus.items())
            ],
            "host": self.host.result(),
        }


class TelemetryRecorder:
    """Aggregates samples into bins and appends one line per finished bin to `path`.

    Never raises on a write: a full disk must not stop a training run. The last failure is kept
    in `write_error`.
    """

    def __init__(self, path: str | os.PathLike[str], bin_s: float = 5.0) -> None:
        if not bin_s > 0:
            raise ValueError(f"bin_s must be positive seconds, got {bin_s}")
        self.path = Path(path)
        self.bin_s = float(bin_s)
        self.lines_written = 0
        self.write_error: str | None = None
        self._bin: _Bin | None = None
        self._bin_index: int | None = None
        self._fd: int | None = None

    def add(self, sample: Any) -> None:
        """A `telemetry.Sample` (or its `to_dict()`)."""
        data = sample.to_dict() if hasattr(sample, "to_dict") else sample
        index = math.floor(data["ts"] / self.bin_s)
        if self._bin is not None and index != self._bin_index:
            self._flush()
        if self._bin is None:
            self._bin, self._bin_index = _Bin(self.bin_s), index
        self._bin.add_sample(data)

    def close(self) -> None:
        """Write the last, partial bin and close the file."""
        self._flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TelemetryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _flush(self) -> None:
        current, self._bin, self._bin_index = self._bin, None, None
        if current is None or not current.n:
            return
        data = json.dumps(current.line(), separators=(",", ":"), allow_nan=False) + "\n"
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                if _ends_mid_line(self.path):  # a writer died mid-line: start ours on a fresh one
                    data = "\n" + data
            payload = data.encode("utf-8")
            while payload:  # one write; a short write (disk full) finishes the same line
                payload = payload[os.write(self._fd, payload) :]
            self.lines_written += 1
        except (OSError, ValueError) as exc:
            self.write_error = f"cannot write telemetry to {self.path}: {exc}"


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


@dataclass
class History:
    """A run's telemetry, oldest first: `bins` are lines of the format above (older ones merged)."""

    bins: list[dict[str, Any]]
    skipped_lines: int = 0  # bad or partial lines (a partial last line is usual after a crash)
    lines_read: int = 0  # good lines in the file
    full_resolution_from: float | None = None  # bins from this ts on are as recorded


def read_history(
    path: str | os.PathLike[str], max_points: int = 2000, full_resolution_s: float = FULL_RESOLUTION_S
) -> History:
    """The history in at most `max_points` bins, reading the file once with bounded memory.

    The newest `full_resolution_s` (an hour) stays at the recorded resolution; older bins are
    merged into equal spans of time (means weighted by samples, maxima of maxima), so a run of
    days still fits. A missing file is an empty history.
    """
    if max_points < 2:
        raise ValueError(f"max_points must be 2 or more, got {max_points}")
    path = Path(path)
    first, last = _first_line(path), _last_line(path)
    if first is None or last is None:
        return History([], _count_bad(path))
    bin_s = float(last.get("bin_s") or 5.0)
    recent_points = min(int(full_resolution_s / bin_s) + 1, max_points * 3 // 4)
    cutoff = last["ts_start"] - (recent_points - 1) * bin_s
    older_points = max_points - recent_points
    width = max(bin_s, (cutoff - first["ts_start"]) / max(1, older_points - 1))

    older: dict[int, _Bin] = {}
    recent: list[dict[str, Any]] = []
    skipped = read = 0
    for line in _lines(path):
        if line is None:
            skipped += 1
            continue
        read += 1
        if line["ts_start"] >= cutoff:
            recent.append(line)
            continue
        key = math.floor((line["ts_start"] - first["ts_start"]) / width)
        if key not in older:
            older[key] = _Bin(bin_s)
        older[key].add_bin(line)
    merged = sorted((b.line() for b in older.values()), key=lambda b: b["ts_start"])
    recent.sort(key=lambda b: b["ts_start"])
    if len(merged) + len(recent) > max_points:  # bins out of order or off the grid: squeeze the old
        room = max_points - len(recent)
        merged, recent = (_merge_evenly(merged, room), recent) if room > 0 else ([], recent[-max_points:])
    return History(merged + recent, skipped, read, recent[0]["ts_start"] if recent else None)


def _merge_evenly(bins: list[dict[str, Any]], max_points: int) -> list[dict[str, Any]]:
    if not bins:
        return []
    group = math.ceil(len(bins) / max_points)
    out = []
    for start in range(0, len(bins), group):
        merged = _Bin(bins[start].get("bin_s", 5.0))
        for line in bins[start : start + group]:
            merged.add_bin(line)
        out.append(merged.line())
    return out


def _parse(raw: bytes) -> dict[str, Any] | None:
    """One line as a bin, or None when it is not one of ours."""
    try:
        line = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(line, dict) or line.get("v") != LOG_VERSION:
        return None
    for key in ("ts_start", "ts_end", "n"):
        value = line.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
    return line


def _lines(path: Path) -> Iterator[dict[str, Any] | None]:
    """Every line of the file, parsed (None for a bad one); a partial last line counts as bad."""
    try:
        with open(path, "rb") as f:
            for raw in f:
                if raw.strip():
                    yield _parse(raw) if raw.endswith(b"\n") else None
    except OSError:
        return


def _first_line(path: Path) -> dict[str, Any] | None:
    return next((line for line in _lines(path) if line is not None), None)


def _last_line(path: Path) -> dict[str, Any] | None:
    """The last good line, read from the file's tail (the whole file only if the tail has none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read()
    except OSError:
        return None
    raws = tail.split(b"\n")
    complete = raws[1:-1] if size > _TAIL_BYTES else raws[:-1]  # the first may be cut, the last is
    for raw in reversed(complete):
        line = _parse(raw) if raw.strip() else None
        if line is not None:
            return line
    if size <= _TAIL_BYTES:
        return None
    last = None
    for line in _lines(path):
        last = line if line is not None else last
    return last


def _count_bad(path: Path) -> int:
    return sum(1 for line in _lines(path) if line is None)
