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
    a peak must not average away). The intervals are kept as their starts, ends and values apart,
    with running sums of duration and of value x duration, so that `spark()` finds a column's
    intervals by bisection and its mean by two subtractions instead of visiting every interval.
    """

    def __init__(self, max_points: int = MAX_POINTS, how: str = "mean") -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be 4 or more, got {max_points}")
        if how not in ("mean", "max"):
            raise ValueError(f"how must be 'mean' or 'max', got {how!r}")
        self.max_points = max_points
        self.how = how
        self.generation = 0  # counts the times the intervals were rebuilt (merged): drawings of before go
        self.drawn: dict[tuple, tuple[int, int, str]] = {}  # spark(): (generation, intervals, text) by key
        self._index([])

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def points(self) -> list[tuple[float, float, float]]:
        """The intervals as (start, end, value), oldest first."""
        return list(zip(self.starts, self.ends, self.values))

    @property
    def first_ts(self) -> float | None:
        return self.starts[0] if self.starts else None

    @property
    def last_ts(self) -> float | None:
        return self.ends[-1] if self.ends else None

    def add(self, start: float, end: float, value: float | None) -> None:
        """One interval; a missing value leaves a gap, an interval older than the newest is trimmed."""
        if value is None or not math.isfinite(value):
            return
        if self.ends and start < self.ends[-1]:
            start = self.ends[-1]
        if end <= start:
            return
        self._append_index(start, end, float(value))
        if len(self.starts) > self.max_points:
            self._compact()

    def _index(self, points: list[tuple[float, float, float]]) -> None:
        self.generation += 1
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.values: list[float] = []
        self.durations: list[float] = [0.0]  # running sums: the first k intervals' duration
        self.areas: list[float] = [0.0]  # and their value x duration
        for start, end, value in points:
            self._append_index(start, end, value)

    def _append_index(self, start: float, end: float, value: float) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.values.append(value)
        self.durations.append(self.durations[-1] + (end - start))
        self.areas.append(self.areas[-1] + (end - start) * value)

    def _compact(self) -> None:
        points = self.points
        half = len(points) // 2
        older, newer = points[:half], points[half:]
        self._index([self._merge(older[i : i + 2]) for i in range(0, half, 2)] + newer)

    def _merge(self, pair: list[tuple[float, float, float]]) -> tuple[float, float, float]:
        start, end = pair[0][0], pair[-1][1]
        if self.how == "max":
            return start, end, max(value for _, _, value in pair)
        weight = sum(e - s for s, e, _ in pair)
        return start, end, sum((e - s) * v for s, e, v in pair) / weight


SUMMED_FROM = 4  # a column over this many intervals or more takes its mean from the running sums


def spark(series: Series, width: int, t0: float, t1: float, high: float, low: float = 0.0) -> str:
    """`width` columns over [t0, t1]: each the mean (or max) of the intervals it overlaps, weighted
    by the overlap.

    A column's intervals are found by bisection on the starts and ends; a mean over many of them
    comes from the running sums, less the parts of the first and last that lie outside the column
    (rounded to 1e-6 so that the sums' float error cannot tip a value across a block's edge).

    A series remembers what it last drew for each (width, span, scale): drawn again on the same
    grid after new intervals came (a live panel, twice a second), only the columns from the one
    where the new intervals start are computed again; the others cannot have changed, as a new
    interval never starts before the newest one's end.
    """
    if width <= 0:
        return ""
    if t1 <= t0 or not len(series):
        return " " * width
    key = (width, t0, t1, high, low)
    drawn = series.drawn.get(key)
    count = len(series.starts)
    if drawn is not None and drawn[0] == series.generation and drawn[1] <= count:
        if drawn[1] == count:
            return drawn[2]
        # the first column that can hold time after the newest interval drawn (one before, to be
        # safe at a column's edge): the columns before it are kept
        first = max(0, min(width, int((series.ends[drawn[1] - 1] - t0) / ((t1 - t0) / width))) - 1)
        text = drawn[2][:first] + _columns(series, first, width, t0, t1, high, low)
    else:
        text = _columns(series, 0, width, t0, t1, high, low)
    if key not in series.drawn and len(series.drawn) >= DRAWN_KEPT:
        series.drawn.pop(next(iter(series.drawn)))
    series.drawn[key] = (series.generation, count, text)
    return text


DRAWN_KEPT = 4  # spans and widths a series remembers its drawing for (a panel and its compact form)


def _columns(
    series: Series, from_column: int, width: int, t0: float, t1: float, high: float, low: float
) -> str:
    """Columns `from_column` .. `width` - 1 of spark()."""
    slice_s = (t1 - t0) / width
    starts, ends, values = series.starts, series.ends, series.values
    durations, areas = series.durations, series.areas
    peak = series.how == "max"
    cells = []
    right = t0 + from_column * slice_s
    for column in range(from_column, width):
        left, right = right, (t0 + (column + 1) * slice_s if column < width - 1 else t1)
        first = bisect.bisect_right(ends, left)  # the first interval that ends after the column starts
        stop = bisect.bisect_left(starts, right, first)  # past the last that starts before it ends
        if first >= stop:
            cells.append(" ")
            continue
        if peak:
            cells.append(block(max(values[first:stop]), low, high))
            continue
        if stop - first < SUMMED_FROM:
            area = weight = 0.0
            for k in range(first, stop):
                overlap = min(ends[k], right) - max(starts[k], left)
                area += values[k] * overlap
                weight += overlap
            value = area / weight
        else:
            area, weight = areas[stop] - areas[first], durations[stop] - durations[first]
            before, after = left - starts[first], ends[stop - 1] - right
            if before > 0:
                area -= before * values[first]
                weight -= before
            if after > 0:
                area -= after * values[stop - 1]
                weight -= after
            value = round(area / weight, 6)
        cells.append(block(value, low, high))
    return "".join(cells)


GRID_STEPS_PER_DOUBLING = 8  # a growing span's column width moves in steps of 2**(1/8), ~9%


def grid_span(t0: float, t1: float, width: int, sliding: bool = False) -> tuple[float, float]:
    """The span a live sparkline of `width` columns is drawn over, on a grid that stays put between
    samples, so that a new sample changes the last column and leaves the others as they were (a
    panel repaints only the rows whose text changed).

    The whole run (`sliding` False): columns from `t0` whose width is (t1 - t0) / width rounded up
    to a step of 2**(1/8), so the line fills at least 92% of its columns, the rest being the
    time to come, and its columns change only when the run's length passes the next step. The
    last N seconds (`sliding`, the history longer than that): columns of (t1 - t0) / width on a
    grid of whole multiples of that width, the span's end rounded up to the next; the line moves
    left by one column each column width, not by a fraction of one at every sample.
    """
    if width <= 0 or t1 <= t0:
        return t0, t1
    column_s = (t1 - t0) / width
    if sliding:
        end = math.ceil(t1 / column_s) * column_s
        return end - width * column_s, end
    column_s = 2.0 ** (math.ceil(math.log2(column_s) * GRID_STEPS_PER_DOUBLING) / GRID_STEPS_PER_DOUBLING)
    return t0, t0 + width * column_s


def block(value: float, low: float, high: float) -> str:
    if high <= low:
        return BLOCKS[0]
    share = min(1.0, max(0.0, (value - low) / (high - low)))
    return BLOCKS[round(share * (len(BLOCKS) - 1))]


def levels(values: list[float], high: float = 100.0) -> str:
    """One block per value (per-core CPU %, say), on a scale of 0 to `high`."""
    return "".join(block(v, 0.0, high) for v in values)
