"""`cockpit pick`'s TUI: the card picker on its own, with the catalog and the clock handed in, so
tests give it the shipped catalog at a fixed date and a fixed clock.

`written` lists the configs written from it, for the CLI to repeat after the app exits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from textual.app import App

from cockpit.config import schema as config_mod
from cockpit.gpus.catalog import Catalog
from cockpit.models import shape as modelshape
from screens.hangup import leave_when_terminal_goes
from screens.picker.inputs import Base, initial_fields
from screens.picker.picker import PickerScreen


class PickerApp(App[None]):
    TITLE = "lora-cockpit card picker"
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self,
        cfg: config_mod.TrainConfig,
        *,
        catalog: Catalog,
        clock: Callable[[], dt.datetime],
        trainer: str = "trl",
        dataset: str = "",
        epochs: float | None = None,
        budget: float | None = None,
        out_dir: Path | None = None,
        shape_loader: Callable[[str, str], modelshape.ModelShape] = modelshape.load_shape,
        multi: bool = False,
    ):
        super().__init__()
        self._terminal = None  # watches for the terminal going away (screens/hangup.py)
        self.catalog = catalog
        self.clock = clock
        self.trainer = trainer
        self.out_dir = out_dir  # where configs go (default: the current directory)
        self.shape_loader = shape_loader
        self.base = Base.of(cfg)
        self.initial = initial_fields(cfg, dataset, epochs, budget)
        self.written: list[Path] = []
        self.picker = PickerScreen(self.initial, self, multi=multi)

    def today(self) -> dt.date:
        return self.clock().date()

    def resolve(self, path: str) -> Path:
        """A path typed in the save dialog: `~` expanded, relative to the output folder."""
        target = Path(path).expanduser()
        return target if target.is_absolute() else (self.out_dir or Path.cwd()) / target

    def on_mount(self) -> None:
        # an SSH drop leaves as q does (nothing is written); a stuck exit ends the process with 0
        self._terminal = leave_when_terminal_goes(self, lambda: 0, leave=self.exit)
        self.push_screen(self.picker)

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()
