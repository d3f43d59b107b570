"""Textual's footer, rebuilt only when its keys change, each key styled once.

Textual's `Footer` rebuilds itself (every key a new widget, styled) at every change of the
screen's bindings, such as focus moving, even when the keys on offer stay the same; and its
`FooterKey` is made compact by default and bound to its footer's `compact` only once mounted,
so each key of a wide (not compact) footer was restyled twice after its first styling
(`-compact` added, then removed), a restyle walking the stylesheet for the key and its parts.
At the run screen's start-up these rebuilds and restyles were a fifth of its CPU before the
first frame. Here the footer rebuilds only when the keys it would show differ from those it
shows, and each key is handed its footer's `compact` before it is mounted.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey  # textual is pinned (pyproject.toml)


def keys_on_offer(screen: Screen) -> tuple:
    """What a footer on `screen` would show: each shown binding, whether it is enabled, its tooltip."""
    return tuple(
        (binding.key, binding.action, binding.description, binding.key_display, binding.group, enabled, tip)
        for _node, binding, enabled, tip in screen.active_bindings.values()
        if binding.show
    )


class Footer(TextualFooter):
    _shown: tuple | None = None

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = keys_on_offer(self.screen)
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.set_reactive(FooterKey.compact, self.compact)
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        if self._shown is not None and screen is self.screen and keys_on_offer(screen) == self._shown:
            return  # the same keys: nothing to rebuild
        super().bindings_changed(screen)
