"""Component styles looked up once per stylesheet change instead of at every render.

Textual clears a widget's own cache of component styles at every `refresh()`, so a panel redrawn
twice a second recomputes each of its styles (CSS rules, inherited background, opacity) every
time: for the GPU panel's seven, as much as drawing its text. The styles of this app change
only when the stylesheet is applied again (`notify_style_update`), which clears this cache.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


def line_strip(text: Text, width: int, base: Style, console) -> Strip:
    """One row: `text` over `base`, cut to `width` with an ellipsis, padded to it.

    A panel's rows are label/value/sparkline runs whose spans do not overlap: their segments are
    built straight from the spans (each style added to the base once; `Style.__add__` is cached).
    Rich's `Text.render`, which the rest goes through, combines a stack of styles at every span
    edge: for a repainted row it was most of the cost of drawing it.
    """
    plain, spans, own = text.plain, text.spans, text.style
    if text.cell_len <= width and (own == "" or isinstance(own, Style)):
        if not spans and not own:  # as rich renders a line with no styles at all: unstyled
            return Strip([Segment(plain)], text.cell_len).extend_cell_length(width, base)
        segments: list[Segment] = []
        row = base + own if own else base
        at = 0
        for span in spans:
            start, end, style = span
            if start < at or not isinstance(style, Style):
                break  # overlapping spans or a style by name: rich's renderer below
            if start >= end:
                continue
            if start > at:
                segments.append(Segment(plain[at:start], row))
            segments.append(Segment(plain[start:end], row + style))
            at = end
        else:
            if at < len(plain):
                segments.append(Segment(plain[at:], row))
            return Strip(segments, text.cell_len).extend_cell_length(width, base)
    line = Text(style=base, no_wrap=True, end="")
    line.append_text(text)
    line.truncate(width, overflow="ellipsis")
    return Strip(line.render(console), line.cell_len).extend_cell_length(width, base)


class StyledWidget(Widget):
    """A widget that reads its component styles through `component_style`."""

    _styles_looked_up: dict[str, Style] | None = None
    _base_looked_up: Style | None = None

    @property
    def base_style(self) -> Style:
        """The widget's own rich style (its colours over its parents' background), for the line API."""
        if self._base_looked_up is None:
            self._base_looked_up = self.rich_style
        return self._base_looked_up

    def component_style(self, name: str) -> Style:
        """The rich style of the component class `name` (e.g. `gpu-panel--label`)."""
        cache = self._styles_looked_up
        if cache is None:
            cache = self._styles_looked_up = {}
        style = cache.get(name)
        if style is None:
            style = cache[name] = self.get_component_rich_style(name)
        return style

    def notify_style_update(self) -> None:
        self._styles_looked_up = self._base_looked_up = None
        super().notify_style_update()


class LinePanel(StyledWidget):
    """A panel whose rows are lines of rich Text, drawn line by line (Textual's line API).

    A subclass builds its rows for a width (`build_lines`) and calls `redraw()` when its data
    changed: only the rows whose text changed are repainted, and nothing when none did. A panel
    redrawn with every telemetry sample otherwise renders all of its text and styles all of its
    rows twice a second, though most samples change a figure or two.
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._lines: list[Text] = []
        self._lines_width = -1  # the width the lines were built for; -1: build them again

    def build_lines(self, width: int) -> list[Text]:
        raise NotImplementedError

    def redraw(self, layout: bool = False) -> None:
        """The data changed: repaint the rows whose text changed (all of them on a new layout)."""
        width = self.size.width
        if layout or width <= 0 or width != self._lines_width:
            self._lines_width = -1
            self.refresh(layout=layout)
            return
        before, lines = self._lines, self.build_lines(width)
        self._lines = lines
        if len(lines) != len(before):
            self.refresh()
            return
        changed = [y for y, (old, new) in enumerate(zip(before, lines)) if old != new]
        if changed:
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self.base_style
        if width != self._lines_width:
            self._lines, self._lines_width = self.build_lines(width), width
        if y >= len(self._lines):
            return Strip.blank(width, base)
        return line_strip(self._lines[y], width, base, self.app.console)

    def notify_style_update(self) -> None:
        self._lines_width = -1  # the lines carry the component styles: built again
        super().notify_style_update()
