"""Sparklines in text, one block character per column, over a bounded history of a figure.

`Series` keeps a figure as time intervals with a value. It is bounded: once full, its older half
is merged pairwise, so a run of days keeps its shape while the newest minutes keep their
resolution. `spark()` draws a series over a span of time, one column per equal slice of it, on a
fixed scale (0-100%, 0-total memory), so a sparkline never exaggerates a flat line.
"""

from __future__ import annotations

import bisect
import math

BLOCKS = "▁▂▃▄▅▆▇█"  # the lowest block is a measured zero; a blank column means no data
MAX_POINTS = 600


class Series:
    """(start, end, value) intervals, oldest first, at most `max_points` of them.

    `how` says how merged intervals combine: "mean" (weighted by duration) or "max" (memory:
    a peak must not average away).
    """

    def __init__(self, max_points: int = MAX_POINTS, how: str = "mean") -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be 4 or more, got {max_points}")
        if how not in ("mean", "max"):
            raise ValueError(f"how must be 'mean' or 'max', got {how!r}")
        self.max_points = max_points
        self.how = how
        self.points: list[tuple[float, float, float]] = []

    def __len__(self) -> int:
        return len(self.points)

    @property
    def first_ts(self) -> float | None:
        return self.points[0][0] if self.points else None

    @property
    def last_ts(self) -> float | None:
        return self.points[-1][1] if self.points else None

    def add(self, start: float, end: float, value: float | None) -> None:
        """One interval; a missing value leaves a gap, an interval older than the newest is trimmed."""
        if value is None or not math.isfinite(value):
            return
        if self.points and start < self.points[-1][1]:
            start = self.points[-1][1]
        if end <= start:
            return
        self.points.append((start, end, float(value)))
        if len(self.points) > self.max_points:
            self._compact()

    def _compact(self) -> None:
        half = len(self.points) // 2
        older, newer = self.points[:half], self.points[half:]
        self.points = [self._merge(older[i : i + 2]) for i in range(0, half, 2)] + newer

    def _merge(self, pair: list[tuple[float, float, float]]) -> tuple[float, float, float]:
        start, end = pair[0][0], pair[-1][1]
        if self.how == "max":
            return start, end, max(value for _, _, value in pair)
        weight = sum(e - s for s, e, _ in pair)
        return start, end, sum((e - s) * v for s, e, v in pair) / weight


def spark(series: Series, width: int, t0: float, t1: float, high: float, low: float = 0.0) -> str:
    """`width` columns over [t0, t1]: each the mean (or max) of the intervals it overlaps."""
    if width <= 0:
        return ""
    if t1 <= t0 or not series.points:
        return " " * width
    slice_s = (t1 - t0) / width
    sums, weights = [0.0] * width, [0.0] * width
    maxes: list[float | None] = [None] * width
    points = series.points
    # the points are in time order: start at the first that ends after t0 (a recent span skips most)
    begin = bisect.bisect_right(points, t0, key=lambda p: p[1]) if points[0][1] <= t0 else 0
    for start, end, value in points[begin:]:
        if start >= t1:
            break
        if end <= t0:
            continue
        first = int((max(start, t0) - t0) / slice_s)
        last = min(width - 1, int((min(end, t1) - t0) / slice_s - 1e-9))
        if last <= first:  # most points lie inside one column: no per-column loop
            overlap = min(end, t1) - max(start, t0)
            if overlap > 0 and first < width:
                sums[first] += value * overlap
                weights[first] += overlap
                if maxes[first] is None or value > maxes[first]:
                    maxes[first] = value
            continue
        for column in range(first, last + 1):
            left, right = t0 + column * slice_s, t0 + (column + 1) * slice_s
            overlap = min(end, right) - max(start, left)
            if overlap <= 0:
                continue
            sums[column] += value * overlap
            weights[column] += overlap
            if maxes[column] is None or value > maxes[column]:
                maxes[column] = value
    cells = []
    for column in range(width):
        if not weights[column]:
            cells.append(" ")
            continue
        value = maxes[column] if series.how == "max" else sums[column] / weights[column]
        cells.append(block(value, low, high))
    return "".join(cells)


def block(value: float, low: float, high: float) -> str:
    if high <= low:
        return BLOCKS[0]
    share = min(1.0, max(0.0, (value - low) / (high - low)))
    return BLOCKS[round(share * (len(BLOCKS) - 1))]


def levels(values: list[float], high: float = 100.0) -> str:
    """One block per value (per-core CPU %, say), on a scale of 0 to `high`."""
    return "".join(block(v, 0.0, high) for v in values)
