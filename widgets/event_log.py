"""The run's event lines, wrapped to the panel, newest kept in view when the panel changes height."""

from __future__ import annotations

from textual import events
from textual.widgets import RichLog


class EventLog(RichLog):
    """A RichLog that stays at its newest line when it shrinks (an error panel or a checkpoint row
    taking its room), as it does on every write."""

    def __init__(self, *, max_lines: int, id: str | None = None):
        super().__init__(id=id, max_lines=max_lines, min_width=20, wrap=True, markup=False, highlight=False)

    def on_resize(self, event: events.Resize) -> None:
        super().on_resize(event)
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=False)
