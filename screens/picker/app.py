"""`cockpit pick`'s TUI: the card picker on its own, with the catalog and the clock handed in, so
tests give it the shipped catalog at a fixed date and a fixed clock.

`written` lists the configs written from it, for the CLI to repeat after the app exits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from textual.app import App
from textual.worker import Worker, WorkerState

from cockpit.config import schema as config_mod
from cockpit.gpus.catalog import Catalog
from cockpit.models import shape as modelshape
from screens.data.data import DataScreen
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
        data_report: dict | None = None,
        data_loader: Callable[[], dict | None] | None = None,
        data_source: str = "the config",
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
        # the Data screen (d): the data check's report, or how to get it (in a worker, on d)
        self.data_report = data_report
        self.data_loader = data_loader
        self.data_source = data_source

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

    def action_data(self) -> None:
        """The Data screen over the config's data check: shown at once when the report is in hand,
        else checked in a worker first."""
        if self.data_report is not None:
            self.push_screen(DataScreen(self.data_report, self.data_source))
        elif self.data_loader is None:
            self.notify(
                "no dataset to check: start the picker with a config that names one", severity="warning"
            )
        elif not any(w.name == "data-check" and w.is_running for w in self.workers):
            self.notify("checking the data (cockpit data)...", timeout=5)
            self.run_worker(self.data_loader, thread=True, name="data-check", group="data")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "data-check":
            return
        if event.state == WorkerState.SUCCESS and event.worker.result is not None:
            self.data_report = event.worker.result
            self.push_screen(DataScreen(self.data_report, self.data_source))
        elif event.state in (WorkerState.SUCCESS, WorkerState.ERROR):
            self.notify("the data check gave no report; run cockpit data CONFIG to see why", severity="error")

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()
