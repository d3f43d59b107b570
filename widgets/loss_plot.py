"""Loss over steps, drawn with braille dots (2 x 4 per cell) so it reads over any SSH link.

The max and min loss label the top and bottom rows, the step range the last row. Below
a few cells it falls back to one line of text: a plot too small to read would mislead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit import fmt

BRAILLE_BLANK = 0x2800
# DOT_BITS[row][column]: the bit of one dot inside a braille cell of 2 columns x 4 rows
DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
MIN_PLOT_COLUMNS = 6
MIN_PLOT_ROWS = 2  # one row of braille squashes any curve flat


def braille_cells(
    points: Sequence[tuple[int, float]], columns: int, rows: int, steps: tuple[int, int] | None = None
) -> list[list[int]]:
    """The dot bits of `rows` x `columns` braille cells, consecutive points joined by lines.

    `steps`: the (first, last) step of the x axis, when it is shared with another line.
    """
    dots_w, dots_h = columns * 2, rows * 4
    values = [value for _, value in points]
    first_step, last_step = steps or (min(s for s, _ in points), max(s for s, _ in points))
    low, high = min(values), max(values)
    cells = [[0] * columns for _ in range(rows)]

    def x_of(step: int) -> int:
        if last_step == first_step:
            return 0
        x = round((step - first_step) * (dots_w - 1) / (last_step - first_step))
        return min(dots_w - 1, max(0, x))

    def y_of(value: float) -> int:
        if high == low:
            return dots_h // 2
        return round((high - value) * (dots_h - 1) / (high - low))

    def fill_column(x: int, y_from: float, y_to: float) -> None:
        for y in range(round(min(y_from, y_to)), round(max(y_from, y_to)) + 1):
            cells[y // 4][x // 2] |= DOT_BITS[y % 4][x % 2]

    previous: tuple[int, int] | None = None
    for step, value in points:
        x, y = x_of(step), y_of(value)
        if previous is None or previous[0] == x:
            fill_column(x, previous[1] if previous else y, y)
        else:
            # each column the segment crosses gets the part of the segment above it
            x0, y0 = previous
            for column in range(min(x0, x), max(x0, x) + 1):
                t_a = min(1.0, max(0.0, (column - 0.5 - x0) / (x - x0)))
                t_b = min(1.0, max(0.0, (column + 0.5 - x0) / (x - x0)))
                fill_column(column, y0 + (y - y0) * t_a, y0 + (y - y0) * t_b)
        previous = (x, y)
    return cells


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
    lr_columns: frozenset[int] = frozenset()  # cells where only the learning-rate line has dots


def plot_lines(
    points: Sequence[tuple[int, float]],
    width: int,
    height: int,
    lr_points: Sequence[tuple[int, float]] = (),
) -> list[PlotRow]:
    """One row per line of the plot; one summary line when the area is too small for a plot.

    The learning rate, when given, is a second line on its own scale (its range is the panel's
    subtitle), drawn where the loss line leaves the cell empty.
    """
    if not points:
        return [PlotRow("", "no loss logged yet", False)]
    values = [value for _, value in points]
    low, high = fmt.loss(min(values)), fmt.loss(max(values))
    first_step, last_step = min(s for s, _ in points), max(s for s, _ in points)
    label_width = max(len(low), len(high)) + 1
    columns, rows = width - label_width, height - 1
    if columns < MIN_PLOT_COLUMNS or rows < MIN_PLOT_ROWS:
        return [PlotRow("", f"loss max {high} min {low}, steps {first_step}-{last_step}", False)]
    loss_cells = braille_cells(points, columns, rows, (first_step, last_step))
    lr_in_range = [(s, v) for s, v in lr_points if first_step <= s <= last_step]
    lr_cells = braille_cells(lr_in_range, columns, rows, (first_step, last_step)) if lr_in_range else None
    flat_row = (rows * 4 // 2) // 4 if low == high else None  # braille_cells draws a flat line mid-height
    lines = []
    for index, loss_row in enumerate(loss_cells):
        if flat_row is not None:
            label = high if index == flat_row else ""
        else:
            label = high if index == 0 else low if index == rows - 1 else ""
        lr_row = lr_cells[index] if lr_cells else [0] * columns
        body = "".join(chr(BRAILLE_BLANK + (a | b)) if a | b else " " for a, b in zip(loss_row, lr_row))
        lr_only = frozenset(i for i, (a, b) in enumerate(zip(loss_row, lr_row)) if b and not a)
        lines.append(PlotRow(label.rjust(label_width - 1) + " ", body, True, lr_only))
    lines.append(PlotRow(" " * label_width, axis_row(first_step, last_step, columns), False))
    return lines


def lr_range_text(lr_points: Sequence[tuple[int, float]]) -> str:
    """The learning-rate line's scale and its current value, for the panel's subtitle."""
    if not lr_points:
        return ""
    values = [value for _, value in lr_points]
    return f"lr {fmt.sci(min(values))}…{fmt.sci(max(values))}, now {fmt.sci(values[-1])}"


class LossPlot(Widget):
    """Training loss (and learning rate) against step; `plot()` hands it the points."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"loss-plot--line", "loss-plot--label", "loss-plot--lr"}

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._points: tuple[tuple[int, float], ...] = ()
        self._lr_points: tuple[tuple[int, float], ...] = ()

    @property
    def points(self) -> tuple[tuple[int, float], ...]:
        return self._points

    @property
    def lr_points(self) -> tuple[tuple[int, float], ...]:
        return self._lr_points

    def plot(self, points: Sequence[tuple[int, float]], lr_points: Sequence[tuple[int, float]] = ()) -> None:
        self._points = tuple((step, value) for step, value in points if math.isfinite(value))
        self._lr_points = tuple((step, value) for step, value in lr_points if math.isfinite(value))
        self.border_subtitle = lr_range_text(self._lr_points)
        self.refresh()

    def render(self) -> Text:
        width, height = self.content_size
        line_style: Style = self.get_component_rich_style("loss-plot--line")
        label_style: Style = self.get_component_rich_style("loss-plot--label")
        lr_style: Style = self.get_component_rich_style("loss-plot--lr")
        text = Text(no_wrap=True, overflow="crop")
        for index, row in enumerate(plot_lines(self._points, width, height, self._lr_points)):
            if index:
                text.append("\n")
            text.append(row.label, label_style)
            if not row.is_plot:
                text.append(row.text, label_style)
            elif not row.lr_columns:
                text.append(row.text, line_style)
            else:
                for column, char in enumerate(row.text):
                    text.append(char, lr_style if column in row.lr_columns else line_style)
        return text
