"""A panel of label/value rows: the figures of a run, one per line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

# a row is (label, value); a value may be Text to carry its own emphasis
Row = tuple[str, "str | Text"]


class StatsPanel(Widget):
    """Rows of a dim label and its value; a value too long for the panel ends in an ellipsis."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"stats--label", "stats--value"}

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._rows: tuple[Row, ...] = ()

    @property
    def rows(self) -> tuple[Row, ...]:
        return self._rows

    def show_rows(self, rows: Sequence[Row]) -> None:
        rows = tuple(rows)
        if rows != self._rows:
            self._rows = rows
            self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._rows))

    def render(self) -> Table:
        table = Table.grid(padding=(0, 1))
        label_width = max((len(label) for label, _ in self._rows), default=0)
        table.add_column(no_wrap=True, width=label_width, style=self.get_component_rich_style("stats--label"))
        table.add_column(
            no_wrap=True, overflow="ellipsis", style=self.get_component_rich_style("stats--value")
        )
        for label, value in self._rows:
            table.add_row(label, value)
        return table
