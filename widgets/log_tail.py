"""The last lines of the trainer's `backend.log` (library prints, warnings, tracebacks), as
handed to it; lines too long for the panel end in an ellipsis rather than wrap, so ten lines
stay ten rows. The trainer's metrics dicts (transformers prints `{'loss': '4.916', ...}`) read as
`loss 4.916  grad_norm 2.3  ...`: their values, not Python's punctuation, in the room there is."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text

from widgets.styled import StyledWidget


def readable(line: str) -> str:
    """A printed dict of plain values as `key value` pairs; any other line as it is."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return line
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return line
    if not isinstance(value, dict) or not value:
        return line
    return "  ".join(f"{key} {item}" for key, item in value.items())


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
        return Text("\n", no_wrap=True, overflow="ellipsis").join(
            Text(readable(line), style) for line in shown
        )
