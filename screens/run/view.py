"""The run screen: one training run's status, figures, loss, checkpoints and events, and, when
there is telemetry, its GPUs and host, the doctor's findings, and the tail of the trainer's log.

Every figure comes from the run's events folded into a `RunState`; cost and elapsed time
take "now" from the app's clock while the trainer runs and the last event's time once it
has ended. GPU and host figures come from a watch (live NVML sampling, or a replay) and the
run's recorded `telemetry.jsonl`. The app's threads read all of it; the app's message handlers
hand it to this screen (`show`, `show_log`, `show_history`, `show_telemetry`), which keeps what it
draws in reactive attributes: a watcher redraws the part that depends on one when it changes,
and a tick that changed nothing draws nothing. Its keys are in screens/run/commands.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import var
from textual.widgets import Static

from cockpit.live.replay import sample_of_bin
from cockpit.live.sources import RunSource
from cockpit.live.stall import Stall, StallNotices, find_stall
from cockpit.money import idle
from cockpit.results import summary
from cockpit.results.samples import collect as collect_samples
from cockpit.run.rundir import RunDir
from screens.run.boxes import DoctorBox, SummaryBox, TelemetryBox, summary_texts
from screens.run.commands import NOTHING_TO_EXPORT, RunCommands  # noqa: F401 - the tests import it from here
from screens.run.figures import (  # noqa: F401 - the tests and other screens import them from here
    CLIENT_LINE_INDENT,
    EventLines,
    checkpoint_rows,
    error_text,
    memory_rows,
    phase_text,
    stat_rows,
)
from screens.run.samples import SamplesView
from screens.run.telemetry_feed import SeriesBook
from widgets.doctor_panel import finding_log_line
from widgets.event_log import EventLog
from widgets.footer import Footer
from widgets.log_tail import LogTail
from widgets.loss_plot import LossPlot
from widgets.preference_plot import PLOTTED, PreferencePlot
from widgets.progress import StepProgress
from widgets.stats import StatsPanel

MAX_LOG_LINES = 1000
COMPACT_BELOW_ROWS = 30  # shorter terminals get one row per GPU and one for the host
WATCH_LATE_S = 3.0  # a watch that has not answered for this long is said to be late
LOSS_TITLE_WITH_EVAL = "loss: [$accent]train[/] · [$warning]eval[/]"


def has_weights(run: RunDir) -> bool:
    """The run's folder has weights `cockpit export` can start from (final/ or a complete checkpoint)."""
    from cockpit.results import export as exporter  # imported once a recording has ended, not at every start

    try:
        exporter.pick_source(run, None)
    except (exporter.ExportError, OSError):
        return False
    return True


class RunView(RunCommands):
    CSS_PATH = "view.tcss"
    AUTO_FOCUS = "#events"  # arrow keys and PgUp scroll the event history

    # the run as drawn
    status: var[str] = var("starting", init=False)
    live: var[bool] = var(True, init=False)  # the trainer runs: it takes commands (s, p, x)
    run_ended: var[bool] = var(False, init=False)  # gone, its end recorded (a replay: played out)
    stopping: var[bool] = var(False, init=False)  # `x` was confirmed: the stop worker runs
    stall: var[Stall | None] = var(None, init=False)  # silent for longer than its steps take
    status_label: var[tuple[str, str]] = var(("", ""), init=False)  # the label and its class
    phase_line: var[str] = var("", init=False)
    replay_label: var[str] = var("", init=False)
    loss_counts: var[tuple[int, int]] = var((-1, -1), init=False)  # losses and evals plotted
    preference_counts: var[tuple[int, int]] = var((0, 0), init=False)  # a preference run's logs, evals
    sample_count: var[int] = var(0, init=False)  # the trainer's samples (`m`)
    failure: var[tuple[str, Text] | None] = var(None, init=False, toggle_class="-failed")
    summary_shown: var[bool] = var(False, init=False, toggle_class="-ended")
    ending: var[tuple | None] = var(None, init=False)  # what the summary was written for
    keys_offered: var[tuple] = var((), init=False)  # what the footer's keys depend on
    # telemetry, and how it is shown
    has_telemetry: var[bool] = var(False, init=False)  # a watch or a recorded history
    telemetry_wanted: var[bool] = var(True, init=False)  # `g`
    span_s: var[float | None] = var(None, init=False)  # `h`: None (the whole run) or RECENT_SPAN_S
    telemetry_late_s: var[float | None] = var(None, init=False)  # the watch has not answered for this long
    telemetry_error: var[str | None] = var(None, init=False)  # why the watch failed
    findings: var[tuple] = var((), init=False)  # the doctor's
    short: var[bool] = var(False, init=False)  # the terminal's height: compact panels
    summary_folded: var[bool | None] = var(None, init=False)  # `f`; None: folded on a short terminal

    class Ready(Message):
        """The view is composed and mounted: updates can reach its widgets."""

    def __init__(
        self,
        session: RunSource,
        clock: Callable[[], float],
        *,
        watching: bool = False,
        read_only: bool = False,
    ):
        super().__init__()
        self.session = session
        self.clock = clock
        self.read_only = read_only  # s, p, x and e refused (commands.py): a served view without --control
        self.set_reactive(RunView.live, session.mode == "live")  # until the first update says otherwise
        self.set_reactive(RunView.has_telemetry, watching)  # the GPU/host panels have a source
        self.updates_shown = 0  # ticks drawn (the tests wait for them)
        self.telemetry_shown = 0  # samples (or a recorded history) drawn so far
        self.book = SeriesBook()  # the sparklines' history
        self.sample: Any = None  # the newest telemetry sample, live or rebuilt from the last bin
        self.exportable = False  # `e`: the run has ended and its folder has weights to export
        self._stall_notices = StallNotices()
        self.idle_settings = idle.settings_of(session.run.config_path)
        self.idle_alarm = idle.IdleAlarm(
            self.idle_settings, None if session.mode != "live" else session.run.log_path
        )

    def compose(self) -> ComposeResult:
        # the header and the progress bar in one box: a frame that repaints the panels below them
        # renders one widget for the two (a child of the screen's box is rendered at every frame)
        with Vertical(id="top"):
            with Horizontal(id="header"):
                run_id = self.session.run.run_id
                yield Static(f"{run_id} (read-only)" if self.read_only else run_id, id="run-id")
                yield Static("", id="status")
                yield Static("", id="phase")
            # a replay's label (speed and position) beside the steps, where the bar can give way to
            # it, so that the header's row is left to the phase (`finished at step 88` at 80x24)
            with Horizontal(id="progress-row"):
                yield StepProgress(id="progress")
                yield Static(self.session.label or "", id="replay")
        with VerticalScroll(id="error"):
            yield Static("", id="error-text")
        yield SummaryBox(id="summary")
        yield TelemetryBox(id="telemetry")
        yield DoctorBox(id="doctor-box")
        with Horizontal(id="body"):
            with VerticalScroll(id="stats-box"):
                yield StatsPanel(id="stats")
            with Vertical(id="right"):
                yield LossPlot(id="loss-plot")
                yield PreferencePlot(id="preference-plot")
                yield StatsPanel(id="checkpoints")
                yield EventLog(id="events", max_lines=MAX_LOG_LINES)
                yield LogTail(id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#stats-box").border_title = "run"
        self.query_one("#loss-plot").border_title = "loss"
        self.query_one("#checkpoints").border_title = "checkpoints"
        self.query_one("#events").border_title = "events"
        self.query_one("#doctor-box").border_title = "doctor"
        self.query_one("#summary").border_title = "the run has ended"
        self.query_one("#log").border_title = "backend.log"
        self.query_one("#replay").display = self.session.mode != "live"
        self.query_one("#doctor-box").display = False
        self.query_one("#log").display = False
        self.query_one("#preference-plot").display = False  # a preference run's only
        self._show_telemetry_panels()
        # what the status label and the GPU/host box are drawn from: either redraws when one changes
        for name in ("status", "live", "stopping", "stall"):
            self.watch(self, name, self._show_status, init=False)
        for name in ("has_telemetry", "telemetry_wanted", "span_s", "telemetry_late_s", "telemetry_error"):
            self.watch(self, name, self._show_telemetry_panels, init=False)
        self.post_message(self.Ready())  # every widget exists now: the app may start its threads

    def on_resize(self, event: events.Resize) -> None:
        self._fit_footer(event.size.width)
        self.short = event.size.height < COMPACT_BELOW_ROWS

    # ------------------------------------------------------------ what the app hands it

    def show(self, lines: list[str]) -> None:
        """Redraw from the session's state and write `lines` to the events log; called from the
        app's handler, which holds the app's `state_lock` meanwhile."""
        session, state = self.session, self.session.state
        ended = session.ended or state.ended
        interrupted = session.mode != "live" and session.trainer_gone and not state.ended
        self.live = session.mode == "live" and not ended
        self.status = "interrupted" if interrupted else state.status
        self.run_ended = self._has_ended()
        now_ts = state.last_ts if ended or session.trainer_gone else self.clock()
        self.stall = find_stall(state, now_ts) if self.live else None
        said = self._stall_notices.update(self.stall)
        self.replay_label = session.label or ""
        self.phase_line = self.stall.text() if self.stall is not None else phase_text(state, interrupted)
        epochs = state.plan.get("epochs")
        self.query_one(StepProgress).show(state.step, state.total_steps, state.epoch, epochs)
        self.query_one("#stats", StatsPanel).show_rows(stat_rows(state, now_ts))
        self.query_one("#checkpoints", StatsPanel).show_rows(checkpoint_rows(state))
        self.loss_counts = (len(state.losses), len(state.evals))
        self.preference_counts = (len(state.preference.logs), len(state.preference.evals))
        self.sample_count = len(state.samples)
        error = error_text(state, interrupted)
        self.summary_shown = ended and error is None and state.ended
        if self.summary_shown:
            self.ending = (state.status, (state.end_command or {}).get("state"), len(state.checkpoints))
        failed = "the trainer is gone" if interrupted else "the run failed"
        self.failure = None if error is None else (failed, error)
        log = self.query_one(EventLog)
        for line in [*lines, *([said] if said else [])]:
            log.write(line)
        offered = (self.status, self.live, self.exportable, self.summary_shown, self.sample_count > 0)
        self.keys_offered = offered  # what the footer's keys depend on
        self.updates_shown += 1
        if state.status == "failed" and (state.error or {}).get("kind") == "oom":
            # imported on the first OOM: the wizard and the remedies behind it cost every start
            # of the TUI a tenth of a second of CPU otherwise
            from screens.oom.wizard import offer_oom_wizard

            offer_oom_wizard(self)  # the wizard opens by itself, once

    def _has_ended(self) -> bool:
        """The trainer is gone and its end is recorded (a replay has ended once it played it all)."""
        session = self.session
        if session.mode == "playback":
            return session.state.ended and not session.playing
        return (session.ended or session.state.ended) and (session.mode != "live" or not self.live)

    def show_log(self, lines: Sequence[str]) -> None:
        """The last lines of backend.log."""
        self.query_one(LogTail).show(lines)

    def show_history(self, bins: Sequence[dict]) -> None:
        """The run's recorded telemetry (cockpit.telemetry.history bins), oldest first."""
        if not bins:
            return
        for line in bins:
            self.book.add_bin(line)
        if self.sample is None or self.sample.ts < bins[-1]["ts_end"]:
            self.sample = sample_of_bin(bins[-1])  # until a live sample comes
        self.has_telemetry = True
        self.telemetry_shown += 1
        self._show_telemetry_panels()

    def show_telemetry(self, sample: Any, findings: Sequence[Any], samples: Sequence[Any] = ()) -> None:
        """The watch's newest sample and findings; `samples`: every sample since the last call."""
        if self.session.mode == "playback":  # a replay that went back: what the watch had read before
            now = self.clock()
            samples = [each for each in samples if now is None or each.ts <= now + 1e-6]
            if sample is not None and now is not None and sample.ts > now + 1e-6:
                sample = samples[-1] if samples else None
        for each in samples or ([sample] if sample is not None else []):
            self.book.add_sample(each)
        if sample is not None:
            self.sample = sample
        self.has_telemetry = True
        self.telemetry_error = None
        sounded = self.idle_alarm.update(list(findings))
        if sounded:  # once per idle spell: the bell, a line, cost.on_idle
            self.app.bell()
            self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}{sounded}")
            self.notify(sounded, severity="error", timeout=30)
        self.findings = tuple(findings)
        self.telemetry_shown += 1
        self._show_telemetry_panels()

    def show_watch_error(self, error: str, samples: Sequence[Any] = ()) -> None:
        """The watch raised: the figures shown are its last good ones (and `samples`, taken before)."""
        for each in samples:
            self.book.add_sample(each)
        self.telemetry_error = error
        self.has_telemetry = True
        self._show_telemetry_panels()

    def show_watch_late(self, late_s: float | None) -> None:
        """How long the watch has kept the app waiting for a sample (None: it answers)."""
        self.telemetry_late_s = late_s if late_s is not None and late_s >= WATCH_LATE_S else None

    def start_over(self) -> None:
        """A replay went back: its state was folded again from the start, so what was drawn from
        the later part of the recording goes (the events, the loss, the telemetry, the summary)."""
        self.query_one(EventLog).clear()
        self.book, self.sample = SeriesBook(), None
        self.query_one(TelemetryBox).set_reactive(TelemetryBox.panels, None)  # drawn again
        self.set_reactive(RunView.loss_counts, (-1, -1))
        self.set_reactive(RunView.preference_counts, (0, 0))
        self.query_one("#preference-plot").display = False
        self.set_reactive(RunView.sample_count, 0)
        self.set_reactive(RunView.ending, None)
        self.query_one("#loss-plot", LossPlot).border_title = "loss"
        self.query_one("#checkpoints").border_title = "checkpoints"
        self.findings = ()
        self.refresh_bindings()

    # ------------------------------------------------------------ the header

    def _show_status(self) -> None:
        label = "stopping…" if self.stopping and self.live else self.status
        if label == self.status and self.stall is not None:
            label = "silent"  # the trainer has gone quiet (cockpit.live.stall)
        css = {"stopping…": "-stopping", "silent": "-stalled"}.get(label, f"-{self.status}")
        self.status_label = (f" {label} ", css)

    def watch_status_label(self, status_label: tuple[str, str]) -> None:
        label, css = status_label
        self._set_text("#status", label)
        # query, not query_one: a redraw that lands while the screen is being torn down finds nothing
        self.query("#status").set_classes(css)

    def watch_phase_line(self, line: str) -> None:
        self._set_text("#phase", line)

    def watch_replay_label(self, label: str) -> None:
        self._set_text("#replay", label)

    # Statics whose size does not follow their text: the phase line takes the header's width left
    # over (1fr) at one row; a new phase (several a second while a model loads) repaints it only
    FIXED_SIZE_TEXTS = frozenset({"#phase"})
    # one-row labels as wide as their text: one of the same length keeps the header's layout
    ONE_ROW_LABELS = frozenset({"#status", "#replay"})
    HEADER_TEXTS = ("#status", "#phase", "#replay")

    def _set_text(self, selector: str, content: str | Text) -> None:
        """Update a Static only when its content changed; a layout pass (~5-10 ms of CPU) only when
        its size may have changed with it."""
        static = self.query_one(selector, Static)
        before = static.content
        if before != content:
            same_size = selector in self.FIXED_SIZE_TEXTS or (
                selector in self.ONE_ROW_LABELS
                and isinstance(before, str)
                and isinstance(content, str)
                and len(before) == len(content)
            )
            static.update(content, layout=not same_size)

    @property
    def _texts(self) -> dict[str, Any]:
        """What the header's Statics show, by selector (read from them)."""
        return {selector: self.query_one(selector, Static).content for selector in self.HEADER_TEXTS}

    # ------------------------------------------------------------ the figures and the ending

    def watch_loss_counts(self, before: tuple[int, int], counts: tuple[int, int]) -> None:
        state = self.session.state
        evals = counts[1] > 0
        if evals != (before[1] > 0):  # a replay that went back has none
            self.query_one("#loss-plot", LossPlot).border_title = LOSS_TITLE_WITH_EVAL if evals else "loss"
            self.query_one("#checkpoints").border_title = f"checkpoints{' · eval, ★ best' if evals else ''}"
        self.query_one("#loss-plot", LossPlot).plot(state.losses, state.learning_rates, state.evals)
        self._show_telemetry_panels()  # the torch memory counters came with the step

    def watch_preference_counts(self) -> None:
        """A preference run's figure (widgets.preference_plot) under the loss, once it logs one."""
        pref = self.session.state.preference
        plot = self.query_one(PreferencePlot)
        objective = pref.objective
        if objective not in PLOTTED or not pref.logs:
            plot.display = False
            return
        main, second = PLOTTED[objective]
        evals = [
            (int(e["step"]), float(e[main])) for e in pref.evals if isinstance(e.get(main), (int, float))
        ]
        plot.show(objective, {main: pref.series(main), second: pref.series(second)}, evals)
        plot.display = True

    def watch_sample_count(self) -> None:
        samples = self.session.state.samples
        for screen in self.app.screen_stack:
            if isinstance(screen, SamplesView):
                screen.show_book(collect_samples(samples))

    def watch_run_ended(self, run_ended: bool) -> None:
        # the Export key shows once the run has ended and, for a recording, once its folder is seen
        # to hold weights: a copy of a run's folder (a fixture, a shared example) may hold only its
        # events and telemetry
        self.exportable = run_ended and (self.session.mode == "live" or has_weights(self.session.run))

    def watch_keys_offered(self) -> None:
        self._refresh_keys()

    def watch_ending(self, ending: tuple | None) -> None:
        """The ended run's summary: figures, where the adapter is, the next commands, the end command."""
        if ending is None:
            return
        state = self.session.state
        box = self.query_one(SummaryBox)
        box.border_title = f"the run has {state.status}"
        box.texts = summary_texts(
            summary.run_summary_lines(self.session.run, state, self.session.next_commands)
        )

    def watch_summary_folded(self) -> None:
        self._fold_summary()

    def _fold_summary(self) -> None:
        """The summary in one line on a short terminal (or after `f`), so that the run panel's cost,
        the checkpoints and the last events stay on screen; whole otherwise."""
        folded = self.short if self.summary_folded is None else self.summary_folded
        self.query_one(SummaryBox).folded = folded
        # whole on a short terminal (`f`): the events and checkpoints give their rows to the loss plot
        self.set_class(self.short and not folded, "-summary-whole-short")

    def watch_failure(self, failure: tuple[str, Text] | None) -> None:
        if failure is not None:
            title, text = failure
            self.query_one("#error").border_title = title
            self._set_text("#error-text", text)

    # ------------------------------------------------------------ telemetry and the doctor

    def watch_short(self, short: bool) -> None:
        self.query_one(DoctorBox).brief = short
        self._show_telemetry_panels()
        self._fold_summary()

    def watch_findings(self, before: tuple, findings: tuple) -> None:
        """The whole finding in the events log, once each time it comes up; the doctor's box."""
        logged = {(f.rule, f.title) for f in before}
        for finding in findings:
            if (finding.rule, finding.title) not in logged:
                self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}{finding_log_line(finding)}")
        self.query_one(DoctorBox).show(findings)

    def _show_telemetry_panels(self) -> None:
        box = self.query_one(TelemetryBox)
        shown = self.has_telemetry and self.telemetry_wanted
        if box.display != shown:
            box.display = shown
        if shown:
            box.show(
                self.sample,
                self.book,
                self.session.state,
                span_s=self.span_s,
                short=self.short,
                late_s=self.telemetry_late_s,
                error=self.telemetry_error,
            )
