"""A panel of label/value rows: the figures of a run, one per line.

Drawn line by line (Textual's line API): a new set of rows redraws only the rows that changed,
which during training is a few figures twice a second, not the whole panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip

from widgets.styled import StyledWidget, line_strip

# a row is (label, value); a value may be Text to carry its own emphasis
Row = tuple[str, "str | Text"]


class StatsPanel(StyledWidget):
    """Rows of a dim label and its value; a value too long for the panel ends in an ellipsis."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"stats--label", "stats--value"}

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._rows: tuple[Row, ...] = ()

    @property
    def rows(self) -> tuple[Row, ...]:
        return self._rows

    def show_rows(self, rows: Sequence[Row]) -> None:
        rows, before = tuple(rows), self._rows
        if rows == before:
            return
        self._rows = rows
        if len(rows) != len(before):  # the panel's height is its row count
            self.refresh(layout=True)
        elif _label_width(rows) != _label_width(before):
            self.refresh()
        else:
            width = self.size.width
            self.refresh(*(Region(0, y, width, 1) for y, row in enumerate(rows) if row != before[y]))

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._rows))

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self.base_style
        if y >= len(self._rows):
            return Strip.blank(width, base)
        label, value = self._rows[y]
        line = Text(style=base, no_wrap=True, end="")
        line.append(label.ljust(_label_width(self._rows)), self.component_style("stats--label"))
        line.append(" ")
        value_style = self.component_style("stats--value")
        if isinstance(value, Text):
            line.append_text(Text.assemble(value, style=value_style))
        else:
            line.append(value, value_style)
        return line_strip(line, width, base, self.app.console)


def _label_width(rows: Sequence[Row]) -> int:
    return max((len(label) for label, _ in rows), default=0)
