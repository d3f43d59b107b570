"""The OOM wizard: what happened, where the memory went, the remedies ranked, and a relaunch.

It opens by itself when the run view shows an `oom` error of a run whose config it can read
(`offer_oom_wizard`), and again with `o`. The analysis (config, model shape, catalog, both
models) runs in a worker thread. The user picks one remedy or several (space), and `r` (or
Enter) relaunches: the change goes into the run's config and history (`cockpit.oom.relaunch`) and a new
trainer continues from the last complete checkpoint; the app then follows that trainer.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState

from cockpit.config import schema as config_mod
from cockpit.oom import relaunch as relaunch_mod
from cockpit.oom.remedies import Analysis, Option
from cockpit.paths import cockpit_command
from cockpit.run import process
from screens.confirm import Confirm
from screens.oom.figures import (
    NARROW_BELOW,
    NARROW_COLUMNS,
    REMEDY_COLUMNS,
    notes_text,
    observed_rows,
    option_text,
    predicted_rows,
    remedy_cells,
    rows_table,
    what_happened,
)
from screens.read_only import read_only_refusal
from widgets.footer import Footer

COMPACT_BELOW_ROWS = 30  # shorter terminals show the memory breakdown on `m` only, for the table


class OomWizard(Screen[Any]):
    """Dismissed with the new trainer process after a relaunch, or None."""

    CSS_PATH = "wizard.tcss"
    AUTO_FOCUS = "#remedies"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle", "Pick/unpick"),
        Binding("r", "relaunch", "Relaunch"),  # Enter on a row too
        Binding("m", "toggle_memory", "Memory"),
        Binding("escape", "close", "Close"),
    ]

    def __init__(self, session, analyse=None):
        super().__init__()
        self.session = session
        self.analyse = analyse or relaunch_mod.analyse_run  # (run, state) -> Analysis, injectable
        self.analysis: Analysis | None = None
        self.picked: list[Option] = []
        self.failure: str | None = None
        self.memory_wanted: bool | None = None  # `m`; None: shown when the terminal is tall enough
        self.narrow = False  # the remedies table without `#` and the effect (the detail box says it)

    def compose(self) -> ComposeResult:
        yield Static("analysing the failure...", id="what")
        with Horizontal(id="where"):
            yield Static(id="observed")
            yield Static(id="predicted")
        table: DataTable = DataTable(id="remedies", cursor_type="row", zebra_stripes=True)
        table.add_columns(*REMEDY_COLUMNS)
        yield table
        with VerticalScroll(id="detail-box"):
            yield Static("", id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#what").border_title = "out of memory"
        if getattr(self.session, "rehearsal", False):  # never taken for a run of this machine
            self.query_one("#what").border_title = "out of memory · REPLAY: a rehearsal, nothing runs"
            self.query_one("#what").border_subtitle = self.session.source
        self.query_one("#observed").border_title = "at the failure"
        self.query_one("#predicted").border_title = "memory model, failed config"
        self.query_one("#remedies").border_title = "remedies, best first"
        # a config.yaml edited by hand since the run failed can fail the analysis: said, not a crash
        run, state = self.session.run, self.session.state
        self.run_worker(lambda: self.analyse(run, state), thread=True, name="oom", exit_on_error=False)

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.height < COMPACT_BELOW_ROWS, "-compact")
        narrow = event.size.width < NARROW_BELOW
        self.set_class(narrow, "-narrow")
        if narrow != self.narrow:
            self.narrow = narrow
            table = self.query_one("#remedies", DataTable)
            table.clear(columns=True)
            table.add_columns(*(NARROW_COLUMNS if narrow else REMEDY_COLUMNS))
            if self.analysis is not None:
                self._fill_table()
        self._show_memory()

    def _show_memory(self) -> None:
        """The memory panes, when wanted; on a short terminal in place of the detail box, so the
        remedies keep their rows (`m` swaps the two)."""
        compact = self.has_class("-compact")
        shown = not compact if self.memory_wanted is None else self.memory_wanted
        self.query_one("#where").display = shown
        self.query_one("#detail-box").display = not (shown and compact)

    def action_toggle_memory(self) -> None:
        self.memory_wanted = not self.query_one("#where").display
        self._show_memory()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "oom":
            return
        if event.state == WorkerState.SUCCESS:
            self.show_analysis(event.worker.result)
        elif event.state == WorkerState.ERROR:
            self.failure = f"could not analyse the failure: {event.worker.error}"
            self.query_one("#what", Static).update(self.failure)

    # ------------------------------------------------------------ drawing

    def show_analysis(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.query_one("#what", Static).update(what_happened(analysis))
        self.query_one("#observed", Static).update(rows_table(observed_rows(analysis)))
        self.query_one("#predicted", Static).update(rows_table(predicted_rows(analysis)))
        self._fill_table()
        self._show_detail()

    def _fill_table(self) -> None:
        table = self.query_one("#remedies", DataTable)
        row = table.cursor_row
        table.clear()
        for index, option in enumerate(self.analysis.options, 1):
            table.add_row(*remedy_cells(index, option, option in self.picked, self.narrow), key=str(index))
        if self.analysis.options:
            table.move_cursor(row=min(max(row, 0), len(self.analysis.options) - 1))

    def _highlighted(self) -> Option | None:
        if self.analysis is None or not self.analysis.options:
            return None
        row = self.query_one("#remedies", DataTable).cursor_row
        return self.analysis.options[min(max(row, 0), len(self.analysis.options) - 1)]

    def _choice(self) -> tuple[Option | None, str]:
        """What Enter would apply: the picks, combined, or the highlighted remedy; or why nothing."""
        if self.analysis is None:
            return None, self.failure or "the analysis is not ready"
        if not self.picked:
            option = self._highlighted()
            return option, "" if option is not None else "no remedy to apply"
        if len(self.picked) == 1:
            return self.picked[0], ""
        try:
            return self.analysis.combine(self.picked), ""
        except ValueError as exc:
            return None, str(exc)

    def _show_detail(self) -> None:
        detail = self.query_one("#detail", Static)
        if self.analysis is None:
            return
        option, problem = self._choice()
        if option is None:
            text = notes_text(self.analysis)
            text.append(f"\n{problem}", style="bold")
            detail.update(text)
            return
        what = "picked" if self.picked else "highlighted"
        text = option_text(option, f"{what}{' together' if len(self.picked) > 1 else ''}")
        text.append("\n")
        text.append_text(notes_text(self.analysis))
        detail.update(text)

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        if not self.picked:
            self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_relaunch()

    # ------------------------------------------------------------ actions

    def action_toggle(self) -> None:
        option = self._highlighted()
        if option is None:
            return
        if option in self.picked:
            self.picked.remove(option)
        else:
            self.picked.append(option)
        self._fill_table()
        self._show_detail()

    def action_close(self) -> None:
        self.dismiss(None)
        self._rehearsal_goes_on()

    def _rehearsal_goes_on(self) -> None:
        """A rehearsal holds its replay at the OOM while the wizard is open: play on."""
        go_on = getattr(self.session, "go_on", None)
        if go_on is not None:
            go_on()

    def _refusal(self, option: Option | None, problem: str) -> str | None:
        if option is None:
            return problem
        if not option.applicable:
            return f"{option.title}: {option.resume}"
        if getattr(self.session, "rehearsal", False):
            return None  # nothing runs: the recorded relaunch plays (`_relaunch`)
        if getattr(self.app, "read_only", False):
            return read_only_refusal("relaunch")
        if self.session.mode == "playback":
            restart = f"{cockpit_command()} restart {self.session.run.run_id}"
            return f"this is a replay: relaunch the run with {restart}"
        if process.is_alive(self.session.run):
            return "the failed trainer is still exiting: try again in a moment"
        return None

    def action_relaunch(self) -> None:
        option, problem = self._choice()
        refusal = self._refusal(option, problem)
        if refusal:
            self.notify(refusal, severity="warning")
            return
        fit = "" if option.verdict == "fits" else f" It is predicted NOT to fit ({option.verdict})."
        question = f"Relaunch with {option.title}? It resumes {option.resume}.{fit}"
        self.app.push_screen(Confirm(question), lambda yes: self._relaunch(option) if yes else None)

    def _relaunch(self, option: Option) -> None:
        if getattr(self.session, "rehearsal", False):
            self.notify(
                f"a rehearsal: nothing was relaunched (on your run, {option.title} would be); "
                f"{self.session.recorded_relaunch()} (the recording ends at the OOM)",
                timeout=15,
            )
            self.dismiss(None)
            self._rehearsal_goes_on()
            return
        try:
            applied = relaunch_mod.apply_option(self.session.run, option, self.analysis, "the OOM wizard")
            proc = relaunch_mod.relaunch(self.session.run)
        except (config_mod.ConfigError, OSError) as exc:
            self.notify(f"relaunch failed: {exc}", severity="error")
            return
        self.notify(f"relaunched with {option.title}; old config in history/{applied.previous.name}")
        self.dismiss(proc)


def offer_oom_wizard(view) -> None:
    """Open the wizard once per OOM error the run view shows, when the run's config can be read."""
    state = view.session.state
    if not relaunch_mod.is_oom_failure(state) or getattr(view, "_oom_offered", None) is state.error:
        return
    rehearsal = getattr(view.session, "rehearsal", False)
    if (view.session.mode == "playback" and not rehearsal) or not view.session.run.config_path.is_file():
        return  # a recording plays as it was (a rehearsal stops for the wizard); `o` still opens it
    view._oom_offered = state.error
    open_oom_wizard(view)


def open_oom_wizard(view) -> None:
    """Push the wizard; a relaunch makes the app exit so the CLI follows the new trainer."""
    if not relaunch_mod.is_oom_failure(view.session.state):
        view.notify("the OOM wizard is for a run that ran out of memory")
        return
    if not view.session.run.config_path.is_file():
        view.notify("the run's config.yaml is missing: nothing to change", severity="warning")
        return
    app = view.app

    def done(proc) -> None:
        if proc is not None:
            app.relaunched = proc
            app.exit(0)

    app.push_screen(OomWizard(view.session), done)
