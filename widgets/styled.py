"""Component styles looked up once per stylesheet change instead of at every render.

Textual clears a widget's own cache of component styles at every `refresh()`, so a panel redrawn
twice a second recomputes each of its styles (CSS rules, inherited background, opacity) every
time: for the GPU panel's seven, as much as drawing its text. The styles of this app change
only when the stylesheet is applied again (`notify_style_update`), which clears this cache.
"""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget


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
