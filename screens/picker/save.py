"""Where to write the chosen card's training config: a path to edit (the default is in the current
directory). Enter writes it; a file already there is named, and only a second Enter on the same
path overwrites it. Escape goes back without writing."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from widgets.footer import Footer


class SaveConfig(ModalScreen[str | None]):
    CSS_PATH = "save.tcss"
    AUTO_FOCUS = "#save-path"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, what: str, default_path: str, exists: Callable[[str], bool]):
        super().__init__()
        self.what = what
        self.default_path = default_path
        self.exists = exists
        self.warned: str | None = None  # the path the user was told exists

    def compose(self) -> ComposeResult:
        with Vertical(id="save"):
            yield Static(f"Write the training config for {self.what} to:", id="save-what")
            yield Input(self.default_path, id="save-path", select_on_focus=False)
            yield Static("", id="save-warning")
            yield Static("Enter: write it   Esc: cancel", id="save-keys")
        yield Footer()  # the keys of this dialog, not those of the picker under it

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        path = event.value.strip()
        if not path:
            self.query_one("#save-warning", Static).update("give a path, e.g. ./my-run.yaml")
            return
        if self.exists(path) and self.warned != path:
            self.warned = path
            self.query_one("#save-warning", Static).update(
                f"{path} exists. Enter again overwrites it; or edit the path."
            )
            return
        self.dismiss(path)

    def on_input_changed(self, _event: Input.Changed) -> None:
        self.warned = None
        self.query_one("#save-warning", Static).update("")

    def action_cancel(self) -> None:
        self.dismiss(None)
