"""The run's event lines, wrapped to the panel, newest kept in view when the panel changes height."""

from __future__ import annotations

from collections import deque

from textual import events
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widgets import RichLog

from cockpit.plain import fold_paths


class EventLog(RichLog):
    """A RichLog that stays at its newest line when it shrinks (an error panel or a checkpoint row
    taking its room), as it does on every write.

    A line written grows the log's virtual size, which in a RichLog asks for a layout of the whole
    screen (~10 ms of CPU at 100x30: a write a training step was a third of the live view's CPU
    on a GPU box). The panel's own size does not depend on its lines (its height and width come
    from the layout around it), so only its scrollbar follows: a layout happens when the
    scrollbar appears or goes (`show_vertical_scrollbar` asks for one), not at every line.

    A RichLog wraps each line once, for the width it has when written: lines written before the
    panel narrowed (a resize, the GPU strip hidden, the scrollbar appearing) were cut at its
    edge. This one keeps what it was given and wraps it all again at a new width."""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def __init__(self, *, max_lines: int, id: str | None = None):
        super().__init__(id=id, max_lines=max_lines, min_width=20, wrap=True, markup=False, highlight=False)
        self._written: deque = deque(maxlen=max_lines)  # what was written, to wrap again
        self._wrapped_for = 0  # the width the lines were wrapped for
        self._rewrapping = False

    def write(
        self,
        content,
        width: int | None = None,
        expand: bool = False,
        shrink: bool = True,
        scroll_end: bool | None = None,
        animate: bool = False,
    ):
        """RichLog.write, the log scrolled to its end at once rather than after the next frame (a
        second frame, the panel drawn twice, for every line), its scrollbar being up to date."""
        follow = self.auto_scroll if scroll_end is None else scroll_end
        if self._size_known and width is None:  # before, RichLog defers it and writes it again here
            if not self._rewrapping:
                self._written.append(content)
            self._wrapped_for = self.scrollable_content_region.width
            if isinstance(content, str):
                content = fold_paths(content, max(self._wrapped_for, self.min_width))
        super().write(content, width, expand, shrink, scroll_end=False, animate=animate)
        if follow and self.lines:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        return self

    def clear(self):
        if not self._rewrapping:
            self._written.clear()
        return super().clear()

    def watch_virtual_size(self, size: Size) -> None:
        if self.is_mounted and self.container_size:
            self._scroll_update(size)  # the scrollbar shown or hidden (a layout then), its thumb moved
            self._rewrap_if_narrowed()

    def on_resize(self, event: events.Resize) -> None:
        super().on_resize(event)
        self._rewrap_if_narrowed()
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=False)

    def _rewrap_if_narrowed(self) -> None:
        """Every line wrapped again when the width to write in changed since they were wrapped."""
        width = self.scrollable_content_region.width
        if self._rewrapping or not self._written or not width or width == self._wrapped_for:
            return
        self._rewrapping = True
        try:
            self.clear()
            for content in self._written:
                self.write(content, scroll_end=False)
        finally:
            self._rewrapping = False
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
