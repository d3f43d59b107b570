"""Loss over steps, drawn with braille dots (2 x 4 per cell) so it reads over any SSH link.

The max and min loss label the top and bottom rows, the step range the last row. Below
a few cells it falls back to one line of text: a plot too small to read would mislead.
"""

from __future__ import annotations

import math
import textwrap
from bisect import bisect_right
from collections.abc import Sequence
from itertools import groupby, islice
from operator import itemgetter, le
from typing import ClassVar, NamedTuple

from rich.segment import Segment
from textual import events
from textual.geometry import Region
from textual.strip import Strip

from cockpit import fmt
from widgets.styled import StyledWidget

BRAILLE_BLANK = 0x2800
# DOT_BITS[row][column]: the bit of one dot inside a braille cell of 2 columns x 4 rows
DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
MIN_PLOT_COLUMNS = 6
MIN_PLOT_ROWS = 2  # one row of braille squashes any curve flat
LR_ROWS = 2  # the learning rate's own strip under the loss, on its own scale
LR_LABEL = "lr"
SUBTITLE_FRAME = 6  # the bottom border around a subtitle: '╰─ ' and ' ─╯'


def braille_cells(
    points: Sequence[tuple[int, float]],
    columns: int,
    rows: int,
    steps: tuple[int, int] | None = None,
    values: tuple[float, float] | None = None,
) -> list[list[int]]:
    """The dot bits of `rows` x `columns` braille cells, consecutive points joined by lines.

    `steps`: the (first, last) step of the x axis, when it is shared with another line; `values`:
    the (low, high) of the y axis, when another line shares it too (train and eval loss).
    """
    dots_w, dots_h = columns * 2, rows * 4
    steps_of, values_of = _split(points)
    first_step, last_step = steps or (min(steps_of), max(steps_of))
    low, high = values or (min(values_of), max(values_of))
    cells = [[0] * columns for _ in range(rows)]

    def fill_column(x: int, y_from: float, y_to: float) -> None:
        for y in range(round(min(y_from, y_to)), round(max(y_from, y_to)) + 1):
            cells[y // 4][x // 2] |= DOT_BITS[y % 4][x % 2]

    # the dot column of a step and the dot row of a value; both monotonic (a larger step is never
    # further left, a larger value never lower), which the in-order path below relies on
    x_span, y_span = last_step - first_step, high - low
    x_clamped = min(steps_of) < first_step or max(steps_of) > last_step  # an axis shared with another line
    y_clamped = values is not None  # a shared range: a value outside it stays on the plot

    def x_of(step: int) -> int:
        if not x_span:
            return 0
        x = round((step - first_step) * (dots_w - 1) / x_span)
        return min(dots_w - 1, max(0, x)) if x_clamped else x

    def y_of(value: float) -> int:
        if not y_span:
            return dots_h // 2  # a flat line is drawn mid-height
        y = round((high - value) * (dots_h - 1) / y_span)
        return min(dots_h - 1, max(0, y)) if y_clamped else y

    # consecutive points in one dot column are drawn as one stroke from their highest to their
    # lowest. A run of days logs tens of thousands of steps and the plot is drawn again at each:
    # with the steps in order, each column's points are one slice, found by bisection, and only
    # C-level passes (min, max) touch every point
    runs = []  # (x, first y, last y, top y, bottom y)
    if all(map(le, steps_of, islice(steps_of, 1, None))):
        start, count = 0, len(steps_of)
        while start < count:
            x = x_of(steps_of[start])
            end = bisect_right(steps_of, x, start, key=x_of)
            column = values_of[start:end]
            runs.append((x, y_of(column[0]), y_of(column[-1]), y_of(max(column)), y_of(min(column))))
            start = end
    else:  # out of order (a restart from a checkpoint, a test): point by point
        xs = map(x_of, steps_of)
        for x, group in groupby(zip(xs, map(y_of, values_of)), key=itemgetter(0)):
            run_ys = list(map(itemgetter(1), group))
            runs.append((x, run_ys[0], run_ys[-1], min(run_ys), max(run_ys)))
    previous: tuple[int, int] | None = None
    for x, first_y, last_y, top_y, bottom_y in runs:
        if previous is not None:
            # each column the segment from the previous point crosses gets the part of it above it
            x0, y0 = previous
            for column in range(min(x0, x), max(x0, x) + 1):
                t_a = min(1.0, max(0.0, (column - 0.5 - x0) / (x - x0)))
                t_b = min(1.0, max(0.0, (column + 0.5 - x0) / (x - x0)))
                fill_column(column, y0 + (first_y - y0) * t_a, y0 + (first_y - y0) * t_b)
        fill_column(x, top_y, bottom_y)
        previous = (x, last_y)
    return cells


def _split(points: Sequence[tuple[int, float]]) -> tuple[list[int], list[float]]:
    """The steps and the values of the points, as two lists (C-level passes: zip(*points) takes a
    run's tens of thousands of points as as many arguments, several times slower)."""
    return list(map(itemgetter(0), points)), list(map(itemgetter(1), points))


def braille_rows(points: Sequence[tuple[int, float]], columns: int, rows: int) -> list[str]:
    """The points as `rows` strings of `columns` braille cells, consecutive points joined by lines."""
    return [
        "".join(chr(BRAILLE_BLANK + bits) if bits else " " for bits in row)
        for row in braille_cells(points, columns, rows)
    ]


def axis_row(first_step: int, last_step: int, width: int) -> str:
    left, right = str(first_step), f"step {last_step}"
    if len(left) + len(right) + 1 > width:
        return f"{first_step}-{last_step}"[:width]
    return left + right.rjust(width - len(left))


class PlotRow(NamedTuple):
    label: str
    text: str
    is_plot: bool
    lr_columns: frozenset[int] = frozenset()  # cells of the learning rate's strip
    eval_columns: frozenset[int] = frozenset()  # cells the eval-loss line passes through


def plot_lines(
    points: Sequence[tuple[int, float]],
    width: int,
    height: int,
    lr_points: Sequence[tuple[int, float]] = (),
    eval_points: Sequence[tuple[int, float]] = (),
    noun: str = "loss",
    strip_label: str = LR_LABEL,
) -> list[PlotRow]:
    """One row per line of the plot; one summary line when the area is too small for a plot.
    `noun`: what the line is (the sentences' word for it); `strip_label`: the second line's strip
    (the learning rate's here; a preference run's margin, widgets.preference_plot).

    The learning rate, when given, is drawn in a strip of its own under the loss (LR_ROWS rows
    labelled "lr", its scale in the panel's subtitle), never on the loss's axes, where a warm-up
    read as the loss going up; a plot too short for both leaves it to the subtitle. The eval loss,
    when given, shares the training loss's axes (its points may start at step 0, the base) and is
    drawn over it.
    """
    if not points and not eval_points:
        return [PlotRow("", f"no {noun} logged yet", False)]
    steps_of, values = _split([*points, *eval_points])
    value_range = (min(values), max(values))
    low, high = fmt.loss(value_range[0]), fmt.loss(value_range[1])
    first_step, last_step = min(steps_of), max(steps_of)
    label_width = max(len(low), len(high), len(strip_label)) + 1
    columns, rows = width - label_width, height - 1
    if columns < MIN_PLOT_COLUMNS or rows < MIN_PLOT_ROWS:
        evaluated = f", eval {fmt.loss(eval_points[-1][1])}" if eval_points else ""
        return [PlotRow("", f"{noun} max {high} min {low}, steps {first_step}-{last_step}{evaluated}", False)]
    lr_in_range = [(s, v) for s, v in lr_points if first_step <= s <= last_step]
    lr_rows = LR_ROWS if lr_in_range and rows - LR_ROWS >= MIN_PLOT_ROWS + 1 else 0
    rows -= lr_rows
    lines = _loss_rows(points, eval_points, columns, rows, (first_step, last_step), (low, high), label_width)
    if lr_rows:
        for index, lr_row in enumerate(braille_cells(lr_in_range, columns, lr_rows, (first_step, last_step))):
            body = "".join(chr(BRAILLE_BLANK + b) if b else " " for b in lr_row)
            label = strip_label if index == 0 else ""
            lr_only = frozenset(range(columns))
            lines.append(PlotRow(label.rjust(label_width - 1) + " ", body, True, lr_only))
    lines.append(PlotRow(" " * label_width, axis_row(first_step, last_step, columns), False))
    return lines


def _loss_rows(
    points: Sequence[tuple[int, float]],
    eval_points: Sequence[tuple[int, float]],
    columns: int,
    rows: int,
    steps: tuple[int, int],
    labels: tuple[str, str],
    label_width: int,
) -> list[PlotRow]:
    """The loss's rows: the training loss, and the eval loss over it on the same axes."""
    low, high = labels
    shared = (min(v for _, v in [*points, *eval_points]), max(v for _, v in [*points, *eval_points]))
    shared_range = shared if eval_points else None
    loss_cells = braille_cells(points, columns, rows, steps, shared_range) if points else None
    eval_cells = braille_cells(eval_points, columns, rows, steps, shared_range) if eval_points else None
    flat_row = (rows * 4 // 2) // 4 if low == high else None  # braille_cells draws a flat line mid-height
    lines = []
    for index in range(rows):
        if flat_row is not None:
            label = high if index == flat_row else ""
        else:
            label = high if index == 0 else low if index == rows - 1 else ""
        loss_row = loss_cells[index] if loss_cells else [0] * columns
        eval_row = eval_cells[index] if eval_cells else [0] * columns
        body = "".join(chr(BRAILLE_BLANK + (a | e)) if a | e else " " for a, e in zip(loss_row, eval_row))
        on_eval = frozenset(i for i, e in enumerate(eval_row) if e)
        lines.append(PlotRow(label.rjust(label_width - 1) + " ", body, True, frozenset(), on_eval))
    return lines


def lr_range_text(lr_points: Sequence[tuple[int, float]], width: int = 0) -> str:
    """The learning-rate line's scale and its current value, for the panel's subtitle: the range
    and the value now, or where `width` (columns, 0: any) is too narrow, less of it, never cut."""
    if not lr_points:
        return ""
    _, values = _split(lr_points)
    low, high, now = fmt.sci(min(values)), fmt.sci(max(values)), fmt.sci(values[-1])
    texts = (f"lr {low}…{high}, now {now}", f"lr now {now}, max {high}", f"lr now {now}", f"lr {now}")
    return next((text for text in texts if not width or len(text) <= width), "")


class _FinitePoints:
    """The finite points of a series handed in again and again; a list that grew since the last
    time (a run's losses) is read from where it was left, anything else from the start."""

    def __init__(self) -> None:
        self._source: Sequence | None = None
        self._read = 0
        self._last: tuple[int, float] | None = None  # the last point read, to tell a list that changed
        self._points: list[tuple[int, float]] = []
        self.skipped = 0  # points left out: nan or inf

    def take(self, points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
        grew = points is self._source and len(points) >= self._read
        if not grew or (self._read and points[self._read - 1] is not self._last):
            self._source, self._read, self._points, self.skipped = points, 0, [], 0
        before = len(self._points)
        self._points.extend(p for p in points[self._read :] if math.isfinite(p[1]))
        self.skipped += len(points) - self._read - (len(self._points) - before)
        self._read = len(points)
        self._last = points[-1] if points else None
        return self._points


class LossPlot(StyledWidget):
    """Training loss (and learning rate) against step; `plot()` hands it the points."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "loss-plot--line",
        "loss-plot--label",
        "loss-plot--lr",
        "loss-plot--eval",
    }
    NOUN = "loss"  # what the main line is, in the sentences shown instead of a plot
    STRIP_LABEL = LR_LABEL  # the second line's strip under the main one

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._points: Sequence[tuple[int, float]] = ()
        self._lr_points: Sequence[tuple[int, float]] = ()
        self._eval_points: Sequence[tuple[int, float]] = ()
        self._loss_in, self._lr_in, self._eval_in = _FinitePoints(), _FinitePoints(), _FinitePoints()
        self._subtitle = ""
        self._rows: list[PlotRow] = []  # the plot at `_rows_size`, row by row
        self._rows_size: tuple[int, int] | None = None
        self._strips: dict[int, Strip] = {}

    @property
    def points(self) -> tuple[tuple[int, float], ...]:
        return tuple(self._points)

    @property
    def lr_points(self) -> tuple[tuple[int, float], ...]:
        return tuple(self._lr_points)

    @property
    def eval_points(self) -> tuple[tuple[int, float], ...]:
        return tuple(self._eval_points)

    def plot(
        self,
        points: Sequence[tuple[int, float]],
        lr_points: Sequence[tuple[int, float]] = (),
        eval_points: Sequence[tuple[int, float]] = (),
    ) -> None:
        """The points so far: a list that only grows (a run's) is taken in by its new points."""
        self._points = self._loss_in.take(points)
        self._lr_points = self._lr_in.take(lr_points)
        self._eval_points = self._eval_in.take(eval_points)
        subtitle = self.subtitle_text(self._subtitle_room())
        if subtitle != self._subtitle:
            self._set_subtitle(subtitle)
        before, size = self._rows, self._rows_size
        self._rows_size = None
        if size is None or size != tuple(self.content_size):
            self.refresh()
            return
        # a new point moves some rows of the plot, often not all: repaint those
        rows = self._plot_rows(size)
        changed = [y for y, row in enumerate(rows) if y >= len(before) or row != before[y]]
        if len(rows) != len(before):
            changed.extend(range(len(rows), len(before)))
        width = size[0]
        self.refresh(*(Region(0, y, width, 1) for y in changed))

    def _subtitle_room(self) -> int:
        """Columns for the subtitle on the bottom border, between its corners and dashes (0 before
        the first layout: any)."""
        return max(1, self.outer_size.width - SUBTITLE_FRAME) if self.outer_size.width else 0

    def subtitle_text(self, width: int) -> str:
        """The bottom border's text: the second line's scale (here the learning rate's)."""
        return lr_range_text(self._lr_points, width)

    def on_resize(self, _event: events.Resize) -> None:
        subtitle = self.subtitle_text(self._subtitle_room())
        if subtitle != self._subtitle:
            self._subtitle = subtitle
            self.border_subtitle = subtitle

    def _set_subtitle(self, subtitle: str) -> None:
        """The learning rate moves with every step: repaint the bottom border's row it is drawn on,
        not the whole plot as setting `border_subtitle` does (Textual 8's border title internals)."""
        first = not self._subtitle
        self._subtitle = subtitle
        outer, offset = self.outer_size, self.content_offset
        if first or not subtitle or not outer.height:
            self.border_subtitle = subtitle
            return
        self._border_subtitle = self.render_str(subtitle).expand_tabs(4).split()[0]
        # refresh() takes content coordinates: the border row lies below the content
        self.refresh(Region(-offset.x, outer.height - 1 - offset.y, outer.width, 1))

    def _plot_rows(self, size: tuple[int, int]) -> list[PlotRow]:
        if size != self._rows_size:
            rows = plot_lines(
                self._points,
                size[0],
                size[1],
                self._lr_points,
                self._eval_points,
                self.NOUN,
                self.STRIP_LABEL,
            )
            if not self._points and not self._eval_points and self._loss_in.skipped:
                rows = [
                    PlotRow("", f"no finite {self.NOUN} yet: every logged {self.NOUN} is nan or inf", False)
                ]
            if len(rows) == 1 and not rows[0].is_plot and size[0] > 0:  # a sentence: wrapped to the width
                rows = [PlotRow("", part, False) for part in textwrap.wrap(rows[0].text, size[0])] or rows
            self._rows, self._rows_size, self._strips = rows, size, {}
        return self._rows

    def notify_style_update(self) -> None:
        self._strips = {}
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        width, height = self.content_size
        rows = self._plot_rows((width, height))
        strip = self._strips.get(y)
        if strip is None:
            strip = self._strips[y] = self._row_strip(rows[y] if y < len(rows) else None, width)
        return strip

    def _row_strip(self, row: PlotRow | None, width: int) -> Strip:
        base = self.base_style
        if row is None:
            return Strip.blank(width, base)
        label_style = base + self.component_style("loss-plot--label")
        if not row.is_plot:
            segments = [Segment(row.label + row.text, label_style)]
        else:
            styles = {
                "loss": base + self.component_style("loss-plot--line"),
                "lr": base + self.component_style("loss-plot--lr"),
                "eval": base + self.component_style("loss-plot--eval"),
            }

            def line_of(column: int) -> str:
                if column in row.eval_columns:
                    return "eval"
                return "lr" if column in row.lr_columns else "loss"

            # one segment per run of cells of one line, not one per cell
            segments = [Segment(row.label, label_style)]
            start = 0
            for column in range(1, len(row.text) + 1):
                if column == len(row.text) or line_of(column) != line_of(start):
                    segments.append(Segment(row.text[start:column], styles[line_of(start)]))
                    start = column
        strip = Strip(segments)
        return strip.crop(0, width).extend_cell_length(width, base)
