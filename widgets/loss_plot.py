"""Loss over steps, drawn with braille dots (2 x 4 per cell) so it reads over any SSH link.

The max and min loss label the top and bottom rows, the step range the last row. Below
a few cells it falls back to one line of text: a plot too small to read would mislead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from cockpit import fmt

BRAILLE_BLANK = 0x2800
# DOT_BITS[row][column]: the bit of one dot inside a braille cell of 2 columns x 4 rows
DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
MIN_PLOT_COLUMNS = 6
MIN_PLOT_ROWS = 2  # one row of braille squashes any curve flat


def braille_rows(points: Sequence[tuple[int, float]], columns: int, rows: int) -> list[str]:
    """The points as `rows` strings of `columns` braille cells, consecutive points joined by lines."""
    dots_w, dots_h = columns * 2, rows * 4
    steps = [step for step, _ in points]
    values = [value for _, value in points]
    first_step, last_step = min(steps), max(steps)
    low, high = min(values), max(values)
    cells = [[0] * columns for _ in range(rows)]

    def x_of(step: int) -> int:
        if last_step == first_step:
            return 0
        return round((step - first_step) * (dots_w - 1) / (last_step - first_step))

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
    return ["".join(chr(BRAILLE_BLANK + bits) if bits else " " for bits in row) for row in cells]


def axis_row(first_step: int, last_step: int, width: int) -> str:
    left, right = str(first_step), f"step {last_step}"
    if len(left) + len(right) + 1 > width:
        return f"{first_step}-{last_step}"[:width]
    return left + right.rjust(width - len(left))


def plot_lines(points: Sequence[tuple[int, float]], width: int, height: int) -> list[tuple[str, str, bool]]:
    """(label, text, is_plot) per row; one summary line when the area is too small for a plot."""
    if not points:
        return [("", "no loss logged yet", False)]
    values = [value for _, value in points]
    low, high = fmt.loss(min(values)), fmt.loss(max(values))
    first_step, last_step = min(s for s, _ in points), max(s for s, _ in points)
    label_width = max(len(low), len(high)) + 1
    columns, rows = width - label_width, height - 1
    if columns < MIN_PLOT_COLUMNS or rows < MIN_PLOT_ROWS:
        return [("", f"loss max {high} min {low}, steps {first_step}-{last_step}", False)]
    plot = braille_rows(points, columns, rows)
    flat_row = (rows * 4 // 2) // 4 if low == high else None  # braille_rows draws a flat line mid-height
    lines = []
    for index, row in enumerate(plot):
        if flat_row is not None:
            label = high if index == flat_row else ""
        else:
            label = high if index == 0 else low if index == rows - 1 else ""
        lines.append((label.rjust(label_width - 1) + " ", row, True))
    lines.append((" " * label_width, axis_row(first_step, last_step, columns), False))
    return lines


class LossPlot(Widget):
    """Training loss against step; `plot()` hands it the points."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"loss-plot--line", "loss-plot--label"}

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._points: tuple[tuple[int, float], ...] = ()

    @property
    def points(self) -> tuple[tuple[int, float], ...]:
        return self._points

    def plot(self, points: Sequence[tuple[int, float]]) -> None:
        self._points = tuple((step, value) for step, value in points if math.isfinite(value))
        self.refresh()

    def render(self) -> Text:
        width, height = self.content_size
        line_style: Style = self.get_component_rich_style("loss-plot--line")
        label_style: Style = self.get_component_rich_style("loss-plot--label")
        text = Text(no_wrap=True, overflow="crop")
        for index, (label, body, is_plot) in enumerate(plot_lines(self._points, width, height)):
            if index:
                text.append("\n")
            text.append(label, label_style)
            text.append(body, line_style if is_plot else label_style)
        return text
