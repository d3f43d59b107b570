"""The run screen: one training run's status, figures, loss, checkpoints and events, and, when
there is telemetry, its GPUs and host, the doctor's findings, and the tail of the trainer's log.

Every figure comes from the run's events folded into a `RunState`; cost and elapsed time
take "now" from the app's clock while the trainer runs and the last event's time once it
has ended. GPU and host figures come from a watch (live NVML sampling, or a replay) and the
run's recorded `telemetry.jsonl`. The app's threads read all of it; this screen only draws
what it is handed (`show`, `show_log`, `show_history`, `show_telemetry`) and sends the
user's commands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from cockpit import fmt
from cockpit.doctor.multi_gpu import rank_pids
from cockpit.live.replay import sample_of_bin
from cockpit.live.sources import RunSource
from cockpit.live.stall import Stall, StallNotices, find_stall
from cockpit.money import idle
from cockpit.paths import cockpit_command
from cockpit.results import summary
from cockpit.results.samples import collect as collect_samples
from cockpit.results.samples import no_samples_reason
from cockpit.run import process
from cockpit.run.control import NotRunning
from cockpit.run.rundir import RunDir
from screens.run.figures import (  # noqa: F401 - the tests and other screens import them from here
    EventLines,
    checkpoint_rows,
    error_text,
    memory_rows,
    phase_text,
    stat_rows,
)
from screens.run.samples import SamplesView
from screens.run.telemetry_feed import SeriesBook
from widgets.doctor_panel import DoctorPanel, finding_log_line
from widgets.event_log import EventLog
from widgets.footer import Footer
from widgets.gpu_panel import GpuPanel, GpuView, gpu_title, torch_text
from widgets.host_panel import HostPanel
from widgets.log_tail import LogTail
from widgets.loss_plot import LossPlot
from widgets.progress import StepProgress
from widgets.stats import StatsPanel

MAX_LOG_LINES = 1000
CLIENT_LINE_INDENT = " " * len("0:00:00 ")  # this client's own lines carry no event time
STOP_QUESTION = "Stop the run? A checkpoint is saved first."
COMPACT_FOOTER_BELOW_COLUMNS = 70  # narrower (or narrower than its keys): the footer's keys closer together
COMPACT_BELOW_ROWS = 30  # shorter terminals get one row per GPU and one for the host
MANY_GPUS = 2  # more GPUs than this: one row each at any size
RECENT_SPAN_S = 300.0  # `h` switches the sparklines between the whole run and this
WATCH_LATE_S = 3.0  # a watch that has not answered for this long is said to be late
LOSS_TITLE_WITH_EVAL = "loss: [$accent]train[/] · [$warning]eval[/]"
NO_TELEMETRY = "no GPU/host telemetry for this run: no live watch and no telemetry.jsonl"
NOTHING_TO_EXPORT = (
    "nothing to export: this recording's folder has no final/ adapter and no complete checkpoint"
)


def has_weights(run: RunDir) -> bool:
    """The run's folder has weights `cockpit export` can start from (final/ or a complete checkpoint)."""
    from cockpit.results import export as exporter  # imported once a recording has ended, not at every start

    try:
        exporter.pick_source(run, None)
    except (exporter.ExportError, OSError):
        return False
    return True


class RunView(Screen):
    CSS_PATH = "view.tcss"
    AUTO_FOCUS = "#events"  # arrow keys and PgUp scroll the event history
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "save", "Save"),  # a checkpoint; short, so that every key fits 80 columns
        Binding("p", "pause", "Pause"),
        Binding("p", "resume", "Resume"),
        Binding("x", "stop", "Stop"),
        Binding("g", "toggle_telemetry", "GPU"),
        Binding("l", "toggle_log", "Log"),
        Binding("h", "toggle_span", "Span"),
        Binding("m", "samples", "Samples"),
        Binding("f", "toggle_summary", "Summary"),  # an ended run only: its summary whole or in a line
        Binding("e", "export", "Export"),  # an ended run only: merge, GGUF, the model card
        Binding("o", "oom_wizard", "OOM wizard", show=False),
        # a replay's own keys (its footer has these instead of s, p and x)
        Binding("minus", "replay_speed(0.5)", "Slower", key_display="-"),
        Binding("plus,equals_sign", "replay_speed(2)", "Faster", key_display="+"),
        Binding("left_square_bracket", "replay_back(60)", "-1 min", key_display="["),
        Binding("right_square_bracket", "replay_skip(60)", "+1 min", key_display="]"),
    ]
    COMMANDS_OF_LIVE_RUNS = frozenset({"save", "pause", "resume", "stop"})
    REPLAY_ACTIONS = frozenset({"replay_speed", "replay_skip"})  # while the replay plays
    REPLAY_BACK = "replay_back"  # a replay played out can still go back

    class Ready(Message):
        """The view is composed and mounted: updates can reach its widgets."""

    class StopSaid(Message):
        """A line from the stop thread (`process.stop` says what it escalates to)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, session: RunSource, clock: Callable[[], float], *, watching: bool = False):
        super().__init__()
        self.session = session
        self.clock = clock
        self.status = "starting"
        self.live = session.mode == "live"  # until the first update says otherwise
        self.stopping = False
        self.updates_shown = 0
        self.telemetry_shown = 0  # samples (or a recorded history) drawn so far
        self._losses_shown = (-1, -1)
        self._samples_shown = 0
        self.book = SeriesBook()
        self.sample: Any = None  # the newest telemetry sample, live or rebuilt from the last bin
        self.has_telemetry = watching  # a watch or a recorded history: the GPU/host panels have a source
        self.telemetry_wanted = True  # `g`
        self.span_s: float | None = None  # `h`: None for the whole run, else the last RECENT_SPAN_S
        self.short = False  # set from the terminal's height
        self.watch_late_s: float | None = None
        self.watch_error: str | None = None
        self._findings_logged: set[tuple[str, str]] = set()
        self.stall: Stall | None = None  # the trainer silent for longer than its steps take
        self._stall_notices = StallNotices()
        self._panels_drawn: tuple | None = None  # what the GPU and host panels last drew
        self._texts: dict[str, str | Text] = {}  # what each Static shows
        self._status_css: str | None = None
        self._summary_of: tuple | None = None  # the ending the summary panel was drawn for
        self._summary_texts: tuple[Text, Text] | None = None  # the summary whole, and in one line
        self.summary_folded: bool | None = None  # `f`; None: folded on a short terminal
        self._export_offered = False
        self.exportable = False  # `e`: the run has ended and its folder has weights to export
        self.idle_settings = idle.settings_of(session.run.config_path)
        self.idle_alarm = idle.IdleAlarm(
            self.idle_settings, None if session.mode != "live" else session.run.log_path
        )
        self._titles: dict[str | None, tuple[str, str | None]] = {}  # border title, subtitle per widget

    def compose(self) -> ComposeResult:
        # the header and the progress bar in one box: a frame that repaints the panels below them
        # renders one widget for the two (a child of the screen's box is rendered at every frame)
        with Vertical(id="top"):
            with Horizontal(id="header"):
                yield Static(self.session.run.run_id, id="run-id")
                yield Static("", id="status")
                yield Static("", id="phase")
            # a replay's label (speed and position) beside the steps, where the bar can give way to
            # it, so that the header's row is left to the phase (`finished at step 88` at 80x24)
            with Horizontal(id="progress-row"):
                yield StepProgress(id="progress")
                yield Static(self.session.label or "", id="replay")
        with VerticalScroll(id="error"):
            yield Static("", id="error-text")
        with VerticalScroll(id="summary"):
            yield Static("", id="summary-text")
        with Vertical(id="telemetry"):
            yield GpuPanel(id="gpus")
            yield HostPanel(id="host")
        with VerticalScroll(id="doctor-box"):
            yield DoctorPanel(id="doctor")
        with Horizontal(id="body"):
            with VerticalScroll(id="stats-box"):
                yield StatsPanel(id="stats")
            with Vertical(id="right"):
                yield LossPlot(id="loss-plot")
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
        self._show_telemetry_panels()
        self.post_message(self.Ready())  # every widget exists now: the app may start its threads

    def on_resize(self, event: events.Resize) -> None:
        self._fit_footer(event.size.width)
        short = event.size.height < COMPACT_BELOW_ROWS
        if short != self.short:
            self.short = short
            self.query_one("#doctor-box").set_class(short, "-short")
            self.query_one(DoctorPanel).show(self.query_one(DoctorPanel).findings, brief=short)
            self._show_telemetry_panels()
            self._fold_summary()

    def refresh_bindings(self) -> None:
        super().refresh_bindings()
        self._fit_footer(self.size.width)

    def _refresh_keys(self) -> None:
        """refresh_bindings() unless the footer already shows these keys: each call rebuilds the
        footer, every key a new widget restyled (e.g. starting -> running offers the same keys)."""
        footer = self.query(Footer)
        if footer:
            wanted = {
                (active.binding.action, active.enabled)
                for active in self.active_bindings.values()
                if active.binding.show
            }
            keys = footer.first().query("FooterKey")  # textual's footer keys (they carry .action)
            if keys and wanted == {(key.action, not key.has_class("-disabled")) for key in keys}:
                return
        self.refresh_bindings()

    def _fit_footer(self, width: int) -> None:
        """Every key in view: the footer's keys closer together when, spaced out, they would not
        fit (a narrow terminal, or a replay's seek and speed keys beside the others)."""
        shown: set[tuple[str, str]] = set()
        spaced = 1
        for active in self.active_bindings.values():
            binding = active.binding
            if binding.show and (binding.action, binding.description) not in shown:
                shown.add((binding.action, binding.description))
                spaced += len(binding.key_display or binding.key) + len(binding.description) + 3
        footer = self.query(Footer)
        if footer:
            footer.first().compact = width < max(spaced, COMPACT_FOOTER_BELOW_COLUMNS)

    # ------------------------------------------------------------ drawing

    def show(self, lines: list[str]) -> None:
        """Redraw from the session's state; called from the app's handler while the follow thread waits."""
        session, state = self.session, self.session.state
        ended = session.ended or state.ended
        self.live = session.mode == "live" and not ended
        interrupted = session.mode != "live" and session.trainer_gone and not state.ended
        status = "interrupted" if interrupted else state.status
        run_ended = self.run_ended
        if self.status != status or run_ended != self._export_offered:
            self.status = status
            self._export_offered = run_ended  # the Export key shows once the run has ended...
            # ...and, for a recording, once its folder is seen to hold weights: a copy of a run's
            # folder (a fixture, a shared example) may hold only its events and telemetry
            self.exportable = run_ended and (session.mode == "live" or has_weights(session.run))
            self._refresh_keys()
        now_ts = state.last_ts if ended or session.trainer_gone else self.clock()
        self.stall = find_stall(state, now_ts) if self.live else None
        said = self._stall_notices.update(self.stall)
        self._show_status()
        if session.label is not None:
            self._set_text("#replay", session.label)
        phase = phase_text(state, interrupted)
        self._set_text("#phase", self.stall.text() if self.stall is not None else phase)
        self.query_one(StepProgress).show(
            state.step, state.total_steps, state.epoch, state.plan.get("epochs")
        )
        self.query_one("#stats", StatsPanel).show_rows(stat_rows(state, now_ts))
        self.query_one("#checkpoints", StatsPanel).show_rows(checkpoint_rows(state))
        if (len(state.losses), len(state.evals)) != self._losses_shown:
            if bool(state.evals) != (self._losses_shown[1] > 0):  # a replay that went back has none
                evals = bool(state.evals)
                self._set_title(self.query_one(LossPlot), LOSS_TITLE_WITH_EVAL if evals else "loss")
                self._set_title(
                    self.query_one("#checkpoints"), f"checkpoints{' · ★ best eval' if evals else ''}"
                )
            self._losses_shown = (len(state.losses), len(state.evals))
            self.query_one(LossPlot).plot(state.losses, state.learning_rates, state.evals)
            self._show_telemetry_panels()  # the torch memory counters came with the step
        if len(state.samples) != self._samples_shown:
            if not self._samples_shown:
                self._refresh_keys()  # the Samples key shows once there are samples
            self._samples_shown = len(state.samples)
            for screen in self.app.screen_stack:
                if isinstance(screen, SamplesView):
                    screen.show_book(collect_samples(state.samples))
        error = error_text(state, interrupted)
        self._show_summary(ended and error is None and state.ended)
        self.set_class(error is not None, "-failed")
        if error is not None:
            self._set_title(
                self.query_one("#error"), "the trainer is gone" if interrupted else "the run failed"
            )
            self._set_text("#error-text", error)
        log = self.query_one(EventLog)
        for line in [*lines, *([said] if said else [])]:
            log.write(line)
        self.updates_shown += 1
        if state.status == "failed" and (state.error or {}).get("kind") == "oom":
            # imported on the first OOM: the wizard and the remedies behind it cost every start
            # of the TUI a tenth of a second of CPU otherwise
            from screens.oom.wizard import offer_oom_wizard

            offer_oom_wizard(self)  # the wizard opens by itself, once

    def _show_summary(self, shown: bool) -> None:
        """The ended run's summary: figures, where the adapter is, the next commands, the end command."""
        if self.has_class("-ended") != shown:
            self.set_class(shown, "-ended")
            self._refresh_keys()  # `f` folds the summary: offered while there is one
        if not shown:
            return
        state = self.session.state
        ending = (state.status, (state.end_command or {}).get("state"), len(state.checkpoints))
        if ending == self._summary_of:
            return
        self._summary_of = ending
        lines = summary.run_summary_lines(self.session.run, state)
        whole = Text()
        whole.append(lines[0] + "\n", style="bold")
        for line in lines[1:]:
            head, sep, rest = line.partition(": ")
            if sep and head in ("adapter", "adapter (newest checkpoint)", "next", "on_end", "error"):
                whole.append(head + sep, style="bold")
                whole.append(rest + "\n")
            else:
                whole.append(line + "\n")
        whole.rstrip()
        folded = Text(lines[0], style="bold")
        folded.append(" · f: the whole summary", style="dim")
        self._summary_texts = (whole, folded)
        self._set_title(self.query_one("#summary"), f"the run has {state.status}")
        self._fold_summary()

    def _fold_summary(self) -> None:
        """The summary in one line on a short terminal (or after `f`), so that the run panel's cost,
        the checkpoints and the last events stay on screen; whole otherwise."""
        if self._summary_texts is None:
            return
        folded = self.short if self.summary_folded is None else self.summary_folded
        self.query_one("#summary").set_class(folded, "-folded")
        self._set_text("#summary-text", self._summary_texts[folded])

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
        self.watch_error = None
        sounded = self.idle_alarm.update(list(findings))
        if sounded:  # once per idle spell: the bell, a line, cost.on_idle
            self.app.bell()
            self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}{sounded}")
            self.notify(sounded, severity="error", timeout=30)
        doctor_box = self.query_one("#doctor-box")
        for finding in findings:  # the whole finding in the events log, once each time it comes up
            if (finding.rule, finding.title) not in self._findings_logged:
                self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}{finding_log_line(finding)}")
        self._findings_logged = {(f.rule, f.title) for f in findings}
        if self.query_one(DoctorPanel).show(findings, brief=self.short):
            doctor_box.display = bool(findings)
            severity = findings[0].severity if findings else "info"
            for each in ("alarm", "warn", "info"):  # set_class: the box keeps its -short
                doctor_box.set_class(each == severity, f"-{each}")
            self._set_title(doctor_box, f"doctor: {len(findings)} finding{'s' if len(findings) != 1 else ''}")
        self.telemetry_shown += 1
        self._show_telemetry_panels()

    def show_watch_error(self, error: str, samples: Sequence[Any] = ()) -> None:
        """The watch raised: the figures shown are its last good ones (and `samples`, taken before)."""
        for each in samples:
            self.book.add_sample(each)
        self.watch_error = error
        self.has_telemetry = True
        self._show_telemetry_panels()

    def show_watch_late(self, late_s: float | None) -> None:
        """How long the watch has kept the app waiting for a sample (None: it answers)."""
        late_s = late_s if late_s is not None and late_s >= WATCH_LATE_S else None
        if (late_s is None) != (self.watch_late_s is None) or late_s is not None:
            self.watch_late_s = late_s
            self._show_telemetry_panels()

    def _show_telemetry_panels(self) -> None:
        box = self.query_one("#telemetry")
        shown = self.has_telemetry and self.telemetry_wanted
        if box.display != shown:
            box.display = shown
        if not shown:
            return
        sample, state = self.sample, self.session.state
        span = self.book.span(self.span_s)
        pid = sample.host.trainer_pid if sample is not None else None
        if pid is None and state.attempts:
            pid = state.attempts[-1].pid
        many = sample is not None and len(sample.gpus) > MANY_GPUS
        compact = self.short or many
        box.set_class(many, "-many")  # eight GPUs, their spread and the host fit at 80x24
        ranks = frozenset(rank_pids(state))  # several GPUs: which of them the run uses
        # the panels redraw only when what they draw changed: a new sample (its sparklines end at
        # its time), the span, the layout, the trainer's ranks, or the trainer's torch counters
        signature = (sample, span, pid, compact, ranks, torch_text(state.memory))
        if signature != self._panels_drawn:
            self._panels_drawn = signature
            sliding = self.book.sliding(self.span_s)
            view = GpuView(sample, self.book, span, state.memory, pid, compact, ranks, sliding)
            self.query_one(GpuPanel).show(view)
            cpu = self.book.get("host.cpu")
            cpu_spark = (cpu, span, sliding) if cpu is not None and span is not None else None
            self.query_one(HostPanel).show(sample.host if sample is not None else None, cpu_spark, self.short)
        subtitle = ""
        if span is not None:
            subtitle = f"last {fmt.duration(span[1] - span[0])}" if self.span_s else "whole run"
        if self.watch_late_s is not None:
            subtitle = f"no new sample for {self.watch_late_s:.0f} s · {subtitle}".rstrip(" ·")
        if self.watch_error is not None:
            subtitle = f"{self.watch_error} · {subtitle}".rstrip(" ·")
        self._set_title(box, f"{gpu_title(sample)} · host", subtitle)

    def _show_status(self) -> None:
        label = "stopping…" if self.stopping and self.live else self.status
        if label == self.status and self.stall is not None:
            label = "silent"  # the trainer has gone quiet (cockpit.live.stall)
        self._set_text("#status", f" {label} ")
        # query, not query_one: a redraw that lands while the screen is being torn down finds nothing
        css = {"stopping…": "-stopping", "silent": "-stalled"}.get(label, f"-{self.status}")
        if css != self._status_css:  # set_classes restyles the widget even when they are the same
            self._status_css = css
            self.query("#status").set_classes(css)

    # Statics whose size does not follow their text: the phase line takes the header's width left
    # over (1fr) at one row; a new phase (several a second while a model loads) repaints it only
    FIXED_SIZE_TEXTS = frozenset({"#phase"})
    # one-row labels as wide as their text: one of the same length keeps the header's layout
    ONE_ROW_LABELS = frozenset({"#status", "#replay"})

    def _set_text(self, selector: str, content: str | Text) -> None:
        """Update a Static only when its content changed; a layout pass (~5-10 ms of CPU) only when
        its size may have changed with it."""
        before = self._texts.get(selector)
        if before != content:
            self._texts[selector] = content
            same_size = selector in self.FIXED_SIZE_TEXTS or (
                selector in self.ONE_ROW_LABELS
                and isinstance(before, str)
                and isinstance(content, str)
                and len(before) == len(content)
            )
            self.query_one(selector, Static).update(content, layout=not same_size)

    def _set_title(self, widget: Widget, title: str, subtitle: str | None = None) -> None:
        """Border titles repaint their widget when set, even to the same text: set them on change."""
        if self._titles.get(widget.id) != (title, subtitle):
            self._titles[widget.id] = (title, subtitle)
            widget.border_title = title
            if subtitle is not None:
                widget.border_subtitle = subtitle

    # ------------------------------------------------------------ commands

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.REPLAY_ACTIONS:
            return self.session.mode == "playback" and self.session.playing
        if action == self.REPLAY_BACK:
            return self.session.mode == "playback"
        if action in self.COMMANDS_OF_LIVE_RUNS and (self.session.mode != "live" or not self.live):
            return False  # a recording or an ended run takes no commands: not offered
        if action == "pause":
            return self.status != "paused"
        if action == "resume":
            return self.status == "paused"
        if action == "samples":
            return bool(self.session.state.samples)
        if action == "export":
            return self.exportable
        if action == "toggle_summary":
            return self.has_class("-ended")
        return True

    @property
    def run_ended(self) -> bool:
        """The trainer is gone and its end is recorded (a replay has ended once it played it all)."""
        session = self.session
        if session.mode == "playback":
            return session.state.ended and not session.playing
        return (session.ended or session.state.ended) and (session.mode != "live" or not self.live)

    def _refusal(self, command: str) -> str | None:
        if self.session.mode != "live":
            return f"this is a replay of a recorded run: '{command}' needs a live trainer"
        if not self.live:
            return f"the run has ended ({self.status}): nothing to {command}"
        if self.stopping:
            return f"the run is stopping: '{command}' is not sent"
        return None

    def _send(self, command: str, sent: str) -> None:
        refusal = self._refusal(command)
        if refusal:
            self.notify(refusal, severity="warning")
            return
        try:
            self.session.send(command)
        except (NotRunning, OSError) as exc:
            self.notify(f"'{command}' was not sent: {exc}", severity="error")
            return
        self.notify(sent)

    def on_key(self, event: events.Key) -> None:
        """A replay's or an ended run's footer leaves s, p and x out; pressed anyway, they say why
        nothing happens."""
        names = {"s": "save", "p": "pause", "x": "stop"}
        if (self.session.mode != "live" or not self.live) and event.key in names:
            event.stop()
            self.notify(self._refusal(names[event.key]), severity="warning")
        elif event.key == "e" and self.run_ended and not self.exportable:
            event.stop()
            self.notify(NOTHING_TO_EXPORT, severity="warning")

    def action_replay_speed(self, factor: float) -> None:
        speed = self.session.set_speed(self.session.speed * factor if self.session.speed else 1.0)
        self.notify(f"replay at x{speed:g}", timeout=2)
        self._set_text("#replay", self.session.label)

    def action_replay_skip(self, seconds: float) -> None:
        self.session.skip(seconds)
        self._set_text("#replay", self.session.label)

    def action_replay_back(self, seconds: float) -> None:
        """Back `seconds` of recording: the follow thread folds the events again up to there."""
        self.session.skip(-seconds)
        self._set_text("#replay", self.session.label)
        self.refresh_bindings()  # a replay played out plays again: its speed keys come back

    def start_over(self) -> None:
        """A replay went back: its state was folded again from the start, so what was drawn from
        the later part of the recording goes (the events, the loss, the telemetry, the summary)."""
        self.query_one(EventLog).clear()
        self.book = SeriesBook()
        self.sample, self._panels_drawn = None, None
        self._losses_shown, self._summary_of = (-1, -1), None
        self._findings_logged, self._samples_shown = set(), 0
        self._set_title(self.query_one(LossPlot), "loss")
        self._set_title(self.query_one("#checkpoints"), "checkpoints")
        if self.query_one(DoctorPanel).show([], brief=self.short):
            self.query_one("#doctor-box").display = False
        self.refresh_bindings()

    def action_toggle_telemetry(self) -> None:
        if not self.has_telemetry:
            self.notify(NO_TELEMETRY)
            return
        self.telemetry_wanted = not self.telemetry_wanted
        self._show_telemetry_panels()

    def action_toggle_log(self) -> None:
        """The tail of backend.log in the place of the events, or back."""
        log = self.query_one(LogTail)
        log.display = not log.display
        self.query_one(EventLog).display = not log.display

    def action_toggle_summary(self) -> None:
        """The ended run's summary whole, or folded to its first line."""
        folded = self.query_one("#summary").has_class("-folded")
        self.summary_folded = not folded
        self._fold_summary()

    def action_toggle_span(self) -> None:
        if not self.has_telemetry:  # no sparklines whose span could change
            self.notify(NO_TELEMETRY)
            return
        self.span_s = None if self.span_s else RECENT_SPAN_S
        self._show_telemetry_panels()

    def action_samples(self) -> None:
        """Base vs now, side by side: the samples the trainer wrote (eval.prompts)."""
        state = self.session.state
        if not state.samples:
            self.notify(no_samples_reason(state))
            return
        self.app.push_screen(SamplesView(collect_samples(state.samples), state.run_id))

    def action_export(self) -> None:
        """The export screen: weights, merge, dtype, GGUF, where; checked, then run in its process."""
        if not self.run_ended:
            self.notify(
                "the run has not ended: export it once it has "
                f"(or `{cockpit_command()} export --checkpoint N`)"
            )
            return
        from screens.run.export import ExportScreen

        self.app.push_screen(ExportScreen(self.session.run, self.session.state.best_checkpoint))

    def action_oom_wizard(self) -> None:
        from screens.oom.wizard import open_oom_wizard

        open_oom_wizard(self)

    def action_save(self) -> None:
        self._send("save", "asked for a checkpoint after the current step")

    def action_pause(self) -> None:
        self._send("pause", "asked the trainer to pause after the current step")

    def action_resume(self) -> None:
        self._send("resume", "asked the trainer to resume")

    def action_stop(self) -> None:
        refusal = self._refusal("stop")
        if refusal:
            self.notify(refusal, severity="warning")
            return
        from screens.confirm import Confirm  # its buttons are imported on the first stop, not at start

        self.app.push_screen(Confirm(STOP_QUESTION), self._stop_confirmed)

    def _stop_confirmed(self, confirmed: bool | None) -> None:
        if not confirmed:
            return
        refusal = self._refusal("stop")  # the run may have ended while the question was open
        if refusal:
            self.notify(refusal, severity="warning")
            return
        self.stopping = True
        self._show_status()
        self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}stopping: asked for a checkpoint, then a stop")
        self.run_worker(self._stop, thread=True, group="stop", exit_on_error=False)

    def _stop(self) -> str:
        # blocks for up to STOP_GRACE_S + TERM_GRACE_S while the trainer checkpoints and exits
        return process.stop(self.session.run, say=lambda text: self.post_message(self.StopSaid(text)))

    def on_run_view_stop_said(self, message: StopSaid) -> None:
        self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}stopping: {message.text}")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "stop" or event.state not in (WorkerState.SUCCESS, WorkerState.ERROR):
            return
        self.stopping = False
        if event.state == WorkerState.SUCCESS:
            self.notify(f"stop: {event.worker.result}")
        else:
            self.notify(f"stop failed: {event.worker.error}", severity="error")
        self._show_status()
