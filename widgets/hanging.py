"""Labelled lines whose wrapped text goes on under the text it continues (a hanging indent):

    fix: not in a container here; in a
         container, start it with --gpus all

Textual wraps a Static's text back to the left edge, under the label; this Visual wraps each line
at the width it is drawn at, which only the layout knows.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.css.styles import RulesMap
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual

MIN_BODY_WIDTH = 16  # narrower than this under its label, a line wraps from the left edge instead


class HangingLines(Visual):
    """Lines of (label, text); a text too long for the width wraps with its continuation indented
    by its label's width. `str()` is the text unwrapped, as a Content's is."""

    def __init__(self, lines: Sequence[tuple[Content | str, Content | str]]):
        self.lines = [
            (Content(h) if isinstance(h, str) else h, Content(b) if isinstance(b, str) else b)
            for h, b in lines
        ]
        self._laid_out: tuple[int, Content] | None = None

    def __str__(self) -> str:
        return self.content.plain

    @property
    def content(self) -> Content:
        """Every line unwrapped, for a width that needs no wrapping."""
        return Content("\n").join(head + body for head, body in self.lines)

    def at_width(self, width: int) -> Content:
        """The lines wrapped at `width` columns, each continuation under its text."""
        if self._laid_out is not None and self._laid_out[0] == width:
            return self._laid_out[1]
        out: list[Content] = []
        for head, body in self.lines:
            indent = head.cell_length
            if head.cell_length + body.cell_length <= width or width - indent < MIN_BODY_WIDTH:
                out.append(head + body)  # fits, or left to Textual's wrapping
                continue
            first, *rest = body.wrap(width - indent)
            out.append(head + first)
            out.extend(Content(" " * indent) + line for line in rest)
        laid_out = Content("\n").join(out)
        self._laid_out = (width, laid_out)
        return laid_out

    def render_strips(
        self, width: int, height: int | None, style: Style, options: RenderOptions
    ) -> list[Strip]:
        return self.at_width(width).render_strips(width, height, style, options)

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return self.content.get_optimal_width(rules, container_width)

    def get_minimal_width(self, rules: RulesMap) -> int:
        return self.content.get_minimal_width(rules)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return self.at_width(width).get_height(rules, width)
