"""Several runs' curves on one braille plot, each in its colour, sharing both axes (`cockpit
compare`'s screen). The dots come from loss_plot.braille_cells; where two runs pass through one cell
it takes the colour of the later one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widgets import Static

from widgets.loss_plot import BRAILLE_BLANK, braille_cells

COLOURS = ("cyan", "magenta", "yellow", "green", "red", "bright_blue", "white", "bright_magenta")
X_UNITS = 100_000  # the shared x axis, in whole units for braille_cells
LABEL = 8  # the y labels' column


def overlay_rows(
    series: Sequence[Sequence[tuple[float, float]]], columns: int, rows: int
) -> list[list[tuple[int, int | None]]] | None:
    """Each cell as (dot bits, the index of the run that drew it last); None with nothing to draw."""
    points = [p for s in series for p in s]
    if not points or columns < 2 or rows < 2:
        return None
    x_low, x_high = min(x for x, _ in points), max(x for x, _ in points)
    low, high = min(v for _, v in points), max(v for _, v in points)
    span = (x_high - x_low) or 1.0
    grid: list[list[tuple[int, int | None]]] = [[(0, None)] * columns for _ in range(rows)]
    for index, curve in enumerate(series):
        if not curve:
            continue
        scaled = [(round((x - x_low) / span * X_UNITS), v) for x, v in curve]
        cells = braille_cells(scaled, columns, rows, steps=(0, X_UNITS), values=(low, high))
        for r, row in enumerate(cells):
            for c, bits in enumerate(row):
                if bits:
                    grid[r][c] = (grid[r][c][0] | bits, index)
    return grid


def overlay_text(
    series: Sequence[Sequence[tuple[float, float]]],
    width: int,
    height: int,
    x_words: Callable[[float], str],
    y_words: Callable[[float], str],
) -> Text:
    """The plot as rich Text: y labels (high, low) at the left, the x range on the last row."""
    columns, rows = width - LABEL, height - 1
    grid = overlay_rows(series, columns, rows)
    if grid is None:
        return Text("no points to draw yet" if width > 20 else "-", style="dim")
    points = [p for s in series for p in s]
    low, high = min(v for _, v in points), max(v for _, v in points)
    text = Text()
    for r, row in enumerate(grid):
        label = y_words(high) if r == 0 else (y_words(low) if r == rows - 1 else "")
        text.append(label[: LABEL - 1].rjust(LABEL - 1) + " ", style="dim")
        for bits, index in row:
            text.append(
                chr(BRAILLE_BLANK + bits) if bits else " ",
                style=COLOURS[index % len(COLOURS)] if index is not None else "",
            )
        text.append("\n")
    left, right = x_words(min(x for x, _ in points)), x_words(max(x for x, _ in points))
    text.append(" " * LABEL + left + right.rjust(max(1, columns - len(left))), style="dim")
    return text


class OverlayPlot(Static):
    """An overlay redrawn at its size: `show` hands it the curves and how to word the axes."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.series: list[list[tuple[float, float]]] = []
        self.x_words: Callable[[float], str] = str
        self.y_words: Callable[[float], str] = lambda v: f"{v:.3f}"

    def show(
        self,
        series: list[list[tuple[float, float]]],
        x_words: Callable[[float], str],
        y_words: Callable[[float], str],
    ) -> None:
        self.series, self.x_words, self.y_words = series, x_words, y_words
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width, height = self.content_size.width, self.content_size.height
        if width and height:
            self.update(overlay_text(self.series, width, height, self.x_words, self.y_words))
