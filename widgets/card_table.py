"""The picker's table: one row per card (fit, peak, free memory, tokens/s, time, cost, $/hour),
the cheapest card that fits and the fastest within the budget highlighted.

Cells come from `cockpit.plan.cards_text.row_cells`, the same words `cockpit cards` prints. Columns are
separated by one space (no cell padding), so that the table fits 80 columns; the VRAM column
shows only on wider terminals. The cursor stays on its card when the table is refilled.
"""

from __future__ import annotations

from datetime import date
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from cockpit.plan.cards import CardRow
from cockpit.plan.cards_text import COLUMNS, row_cells
from cockpit.plan.table import CardTable

WITH_VRAM_FROM = 90  # terminal columns from which the VRAM column is shown
FIT_CLASSES = {"fits": "card-table--fits", "tight": "card-table--tight", "no": "card-table--no"}


class CardTableView(DataTable):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Write config")]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "card-table--cheapest",
        "card-table--fastest",
        "card-table--fits",
        "card-table--tight",
        "card-table--no",
        "card-table--changed",
    }

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes, cursor_type="row", cell_padding=0, zebra_stripes=False)
        self.table: CardTable | None = None
        self.today = date.today()
        self._columns_shown: tuple[str, ...] = ()

    def wanted_columns(self) -> tuple[str, ...]:
        wide = self.app.size.width >= WITH_VRAM_FROM
        return tuple(key for key, *_ in COLUMNS if wide or key != "vram")

    def show(self, table: CardTable | None, today: date) -> None:
        """Fill the table; None keeps the rows (the inputs have an error: the screen says so)."""
        if table is None:
            return
        keep = self.selected_row.key if self.selected_row is not None else None  # of the old table
        self.table, self.today = table, today
        self._fill(keep)

    def on_resize(self, _event: events.Resize) -> None:
        if self.table is not None and self.wanted_columns() != self._columns_shown:
            self._fill(self.selected_row.key if self.selected_row is not None else None)

    @property
    def selected_row(self) -> CardRow | None:
        if self.table is None or not self.table.rows:
            return None
        return self.table.rows[min(max(self.cursor_row, 0), len(self.table.rows) - 1)]

    def _fill(self, keep: str | None) -> None:
        columns = self.wanted_columns()
        if columns != self._columns_shown:
            self.clear(columns=True)
            for index, (key, header, width, right) in enumerate(c for c in COLUMNS if c[0] in columns):
                gap = 0 if index == 0 else 1
                label = Text(" " * gap + header.rjust(width) if right else " " * gap + header.ljust(width))
                self.add_column(label, width=width + gap, key=key)
            self._columns_shown = columns
        else:
            self.clear()
        for row in self.table.rows:
            self.add_row(*self._cells(row, columns), key=row.key)
        ids = [row.key for row in self.table.rows]
        self.move_cursor(row=ids.index(keep) if keep in ids else 0)

    def _cells(self, row: CardRow, columns: tuple[str, ...]) -> list[Text]:
        values = row_cells(row, self.today)
        flagged = "card-table--cheapest" if row.cheapest else "card-table--fastest" if row.fastest else None
        row_style = self.get_component_rich_style(flagged, partial=True) if flagged else None
        cells = []
        for index, (key, _, width, right) in enumerate(c for c in COLUMNS if c[0] in columns):
            text = values[key]
            if len(text) > width:
                text = text[: width - 1] + "…"
            text = text.rjust(width) if right else text.ljust(width)
            cell = Text(("" if index == 0 else " ") + text, no_wrap=True)
            if key == "fit":
                kind = (
                    "card-table--changed" if row.shown_workload_is_changed else FIT_CLASSES[row.fit.verdict]
                )
                cell.stylize(self.get_component_rich_style(kind, partial=True))
            if row_style is not None:
                cell.stylize(row_style)
            cells.append(cell)
        return cells
