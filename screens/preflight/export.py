"""Where to write the preflight report: a path to edit (the default is in the current directory);
Enter writes it there, Escape goes back without writing."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from widgets.footer import Footer


class ExportReport(ModalScreen[str | None]):
    CSS_PATH = "export.tcss"
    AUTO_FOCUS = "#export-path"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default_path: str):
        super().__init__()
        self.default_path = default_path

    def compose(self) -> ComposeResult:
        with Vertical(id="export"):
            yield Static("Export the report as JSON (the schema of `cockpit preflight --json`) to:")
            yield Input(self.default_path, id="export-path", select_on_focus=False)
            yield Static("Enter: write it   Esc: cancel", id="export-keys")
        yield Footer()  # the keys of this dialog, not those of the checklist under it

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        path = event.value.strip()
        if not path:  # closing here would look like a report written
            self.notify("Give a path to write the report to, e.g. ./preflight.json; Esc cancels.")
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)
