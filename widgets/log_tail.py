"""The last lines of the trainer's `backend.log` (library prints, warnings, tracebacks), as
handed to it; lines too long for the panel end in an ellipsis rather than wrap, so ten lines
stay ten rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text

from widgets.styled import StyledWidget


class LogTail(StyledWidget):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"log-tail--line"}

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._lines: tuple[str, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        return self._lines

    def show(self, lines: Sequence[str]) -> None:
        lines = tuple(lines)
        if lines != self._lines:
            relayout = len(lines) != len(self._lines)  # its height is its line count
            self._lines = lines
            if self.display:  # hidden (the events in its place), it is laid out when shown
                self.refresh(layout=relayout)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._lines))

    def render(self) -> Text:
        style = self.component_style("log-tail--line")
        height = self.content_size.height
        shown = self._lines[-height:] if height else self._lines  # the newest when short of room
        return Text("\n", no_wrap=True, overflow="ellipsis").join(Text(line, style) for line in shown)
