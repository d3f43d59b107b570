"""The run screen's keys: what each does, and which the footer offers when.

`RunCommands` is the base of `screens.run.view.RunView`, which draws the run: a live run takes
s, p and x (sent to the trainer through the run's control FIFO; a stop asks first, then runs
`process.stop` in a worker, which says what it escalates to); a replay takes its speed and seek
keys instead; g, l, h and f change what the screen shows (reactive attributes of the view, whose
watchers redraw); m, e, a and o open the samples, export, data and OOM screens. A read-only view
(`cockpit attach --read-only`, `cockpit serve` without --control) sends nothing: s, p, x and e are
left out of its footer and, pressed anyway, say why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from cockpit.paths import cockpit_command
from cockpit.results.samples import collect as collect_samples
from cockpit.results.samples import no_samples_reason
from cockpit.run import process
from cockpit.run.control import NotRunning
from screens.read_only import read_only_refusal
from screens.run.figures import CLIENT_LINE_INDENT
from screens.run.messages import ReplayMoved, StopSaid
from screens.run.samples import SamplesView
from widgets.event_log import EventLog
from widgets.footer import Footer
from widgets.log_tail import LogTail

if TYPE_CHECKING:
    from cockpit.live.sources import RunSource

STOP_QUESTION = "Stop the run? A checkpoint is saved first."
COMPACT_FOOTER_BELOW_COLUMNS = 70  # narrower (or narrower than its keys): the footer's keys closer together
RECENT_SPAN_S = 300.0  # `h` switches the sparklines between the whole run and this
NO_TELEMETRY = "no GPU/host telemetry for this run: no live watch and no telemetry.jsonl"
NOTHING_TO_EXPORT = (
    "nothing to export: this recording's folder has no final/ adapter and no complete checkpoint"
)


class RunCommands(Screen):
    """The keys of the run screen; `RunView` gives them the run and what it draws."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "save", "Save"),  # a checkpoint; short, so that every key fits 80 columns
        Binding("p", "pause", "Pause"),
        Binding("p", "resume", "Resume"),
        Binding("x", "stop", "Stop"),
        Binding("g", "toggle_telemetry", "GPU"),
        Binding("l", "toggle_log", "Log"),
        Binding("h", "toggle_span", "Span"),
        Binding("m", "samples", "Samples"),  # once there are samples, or prompts that will give some
        Binding("m", "no_samples", "Samples", show=False),  # no prompts: `m` says why, out of the footer
        Binding("f", "toggle_summary", "Summary"),  # an ended run only: its summary whole or in a line
        Binding("e", "export", "Export"),  # an ended run only: merge, GGUF, the model card
        Binding("a", "data", "Data"),  # the run's data as the trainer reads it (cockpit data)
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
    READ_ONLY_ACTIONS = COMMANDS_OF_LIVE_RUNS | {"export"}  # what a read-only view leaves out

    # what RunView holds (reactive attributes there: setting one redraws what depends on it)
    session: RunSource
    status: str
    live: bool
    stopping: bool
    run_ended: bool
    exportable: bool
    has_telemetry: bool
    telemetry_wanted: bool
    span_s: float | None
    summary_folded: bool | None
    replay_label: str
    read_only: bool  # nothing is sent to the trainer, nothing exported (RunView's argument)

    # ------------------------------------------------------------ what the footer offers

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.REPLAY_ACTIONS:
            return self.session.mode == "playback" and self.session.playing
        if action == self.REPLAY_BACK:
            return self.session.mode == "playback"
        if self.read_only and action in self.READ_ONLY_ACTIONS:
            return False  # not offered; pressed anyway, on_key says why
        if action in self.COMMANDS_OF_LIVE_RUNS and (self.session.mode != "live" or not self.live):
            return False  # a recording or an ended run takes no commands: not offered
        if action == "pause":
            return self.status != "paused"
        if action == "resume":
            return self.status == "paused"
        if action in ("samples", "no_samples"):
            state = self.session.state
            coming = bool(state.samples) or bool((state.data or {}).get("sample_prompts"))
            return coming == (action == "samples")
        if action == "export":
            return self.exportable
        if action == "toggle_summary":
            return self.has_class("-ended")
        if action == "data":
            return self.session.mode != "playback" and self.session.run.config_path.is_file()
        return True

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

    # ------------------------------------------------------------ commands to the trainer

    def _refusal(self, command: str) -> str | None:
        if self.read_only:
            return read_only_refusal(command)
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
        if self.read_only and event.key in (*names, "e"):
            event.stop()
            command = names.get(event.key, "export")
            if command == "pause" and self.status == "paused":
                command = "resume"
            self.notify(read_only_refusal(command), severity="warning")
        elif (self.session.mode != "live" or not self.live) and event.key in names:
            event.stop()
            self.notify(self._refusal(names[event.key]), severity="warning")
        elif event.key == "e" and self.run_ended and not self.exportable:
            event.stop()
            self.notify(NOTHING_TO_EXPORT, severity="warning")

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
        self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}stopping: asked for a checkpoint, then a stop")
        self.run_worker(self._stop, thread=True, group="stop", exit_on_error=False)

    def _stop(self) -> str:
        # blocks for up to STOP_GRACE_S + TERM_GRACE_S while the trainer checkpoints and exits
        return process.stop(self.session.run, say=lambda text: self.post_message(StopSaid(text)))

    def on_stop_said(self, message: StopSaid) -> None:
        self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}stopping: {message.text}")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "data":
            self._data_checked(event)
            return
        if event.worker.group != "stop" or event.state not in (WorkerState.SUCCESS, WorkerState.ERROR):
            return
        self.stopping = False
        if event.state == WorkerState.SUCCESS:
            self.notify(f"stop: {event.worker.result}")
        else:
            self.notify(f"stop failed: {event.worker.error}", severity="error")

    # ------------------------------------------------------------ a replay's keys

    def action_replay_speed(self, factor: float) -> None:
        speed = self.session.set_speed(self.session.speed * factor if self.session.speed else 1.0)
        self.notify(f"replay at x{speed:g}", timeout=2)
        self._replay_moved()

    def action_replay_skip(self, seconds: float) -> None:
        self.session.skip(seconds)
        self._replay_moved()

    def action_replay_back(self, seconds: float) -> None:
        """Back `seconds` of recording: the follow worker folds the events again up to there."""
        self.session.skip(-seconds)
        self._replay_moved()
        self.refresh_bindings()  # a replay played out plays again: its speed keys come back

    def _replay_moved(self) -> None:
        self.replay_label = self.session.label or ""
        self.post_message(ReplayMoved())  # the app's follow worker reads at once, not at its next tick

    # ------------------------------------------------------------ what the screen shows

    def action_toggle_telemetry(self) -> None:
        if not self.has_telemetry:
            self.notify(NO_TELEMETRY)
            return
        self.telemetry_wanted = not self.telemetry_wanted

    def action_toggle_log(self) -> None:
        """The tail of backend.log in the place of the events, or back."""
        log = self.query_one(LogTail)
        log.display = not log.display
        self.query_one(EventLog).display = not log.display

    def action_toggle_summary(self) -> None:
        """The ended run's summary whole, or folded to its first line."""
        self.summary_folded = not self.query_one("#summary").has_class("-folded")

    def action_toggle_span(self) -> None:
        if not self.has_telemetry:  # no sparklines whose span could change
            self.notify(NO_TELEMETRY)
            return
        self.span_s = None if self.span_s else RECENT_SPAN_S
        self.telemetry_wanted = True  # the span is the strip's: hidden (`g`), it comes back to show it

    # ------------------------------------------------------------ other screens

    def action_samples(self) -> None:
        """Base vs now, side by side: the samples the trainer wrote (eval.prompts)."""
        state = self.session.state
        if not state.samples:
            self.notify(no_samples_reason(state))
            return
        self.app.push_screen(SamplesView(collect_samples(state.samples), state.run_id))

    def action_no_samples(self) -> None:
        self.notify(no_samples_reason(self.session.state))

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

    def action_data(self) -> None:
        """The Data screen: the run's dataset as its trainer reads it (the data check, in a worker;
        cached while the files are unchanged)."""
        if any(w.group == "data" and w.is_running for w in self.workers):
            return
        self.notify(f"checking the data ({cockpit_command()} data)...", timeout=5)
        self.run_worker(data_report_of(self.session.run.config_path), thread=True, group="data")

    def _data_checked(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.SUCCESS and isinstance(event.worker.result, dict):
            from screens.data.data import DataScreen

            self.app.push_screen(DataScreen(event.worker.result, self.session.run.run_id))
        elif event.state == WorkerState.SUCCESS:
            self.notify(f"no data report: {event.worker.result}", severity="error")
        elif event.state == WorkerState.ERROR:
            self.notify(f"the data check failed: {event.worker.error}", severity="error")

    def action_oom_wizard(self) -> None:
        from screens.oom.wizard import open_oom_wizard

        open_oom_wizard(self)


def data_report_of(config_path: Path) -> Callable[[], dict[str, Any] | str]:
    """The data check of the run's config: its report, or why there is none."""

    def check() -> dict[str, Any] | str:
        from cockpit.config.load import load_config
        from cockpit.config.schema import ConfigError
        from cockpit.datacheck.cache import cached_check

        try:
            answer = cached_check(load_config(config_path))
        except ConfigError as exc:
            return f"the run's config does not load: {exc}"
        return answer.report if answer.report is not None else (answer.problem() or "no report")

    return check
