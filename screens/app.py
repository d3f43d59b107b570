"""The cockpit's Textual app: follows one run session off the UI thread and shows it on the run screen.

The session (`cockpit.session.RunSession`, a `cockpit.replay.ReplaySession`, or a test double)
and the watch (`cockpit.watch.LiveWatch`, the replay's, or a double) are handed in. Two threads
read, and post messages; only the handlers touch the screen:

- follow: reads and folds new events and the tail of `backend.log`, posts `RunUpdated`, and
  waits until the screen has drawn it before it reads again: events that pile up meanwhile are
  read in one go, so a slow terminal gets fewer, larger updates instead of a queue;
- watch: loads the run's recorded `telemetry.jsonl` (so an attach shows the whole history),
  then asks the watch for its newest sample and findings four times a second, posting
  `TelemetryUpdated` and waiting until it is drawn. A daemon thread: a watch that never answers
  leaves the keys working and does not keep the app from exiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.worker import get_current_worker

from cockpit.headless import EXIT_DETACHED, exit_code
from cockpit.session import RunSession
from cockpit.telemetry_log import TELEMETRY_NAME, read_history
from screens.preflight_notice import PreflightNotice
from screens.run_view import EventLines, RunView
from screens.telemetry_feed import LogTailReader

CLOCK_TICK_S = 1.0  # redraw at least this often: elapsed time and cost move with the clock
READ_RETRY_S = 2.0
WATCH_INTERVAL_S = 0.35  # GPU figures refresh a little more than twice a second, with margin
REFRESH_S = 0.5  # run figures redraw at most twice a second
WATCH_RETRY_S = 2.0
HISTORY_POINTS = 480  # bins of the recorded history kept for the sparklines
WATCH_STOP_WAIT_S = 3.0


class RunUpdated(Message):
    """The session's state took in new events; set `shown` once they are drawn.

    `log_tail`: the new last lines of backend.log, None when unchanged. `watch_late_s`: how long
    the watch has been asked for a sample without answering, None when it is not being asked.
    """

    def __init__(
        self,
        lines: list[str],
        shown: threading.Event,
        log_tail: list[str] | None = None,
        watch_late_s: float | None = None,
    ) -> None:
        super().__init__()
        self.lines = lines
        self.shown = shown
        self.log_tail = log_tail
        self.watch_late_s = watch_late_s


class HistoryLoaded(Message):
    """The run's recorded telemetry, oldest bin first."""

    def __init__(self, bins: list[dict]) -> None:
        super().__init__()
        self.bins = bins


class TelemetryUpdated(Message):
    """The watch's newest sample and findings (and every sample since the last, when it keeps
    them); `error` says why there are none."""

    def __init__(
        self, sample: Any, findings: list, samples: list, shown: threading.Event, error: str | None = None
    ) -> None:
        super().__init__()
        self.sample = sample
        self.findings = findings
        self.samples = samples
        self.shown = shown
        self.error = error


class CockpitApp(App[int]):
    """`run()` returns 4 when the user detaches from a live run (or leaves a replay before its
    end), else the run's exit code (0, 1, 3)."""

    TITLE = "lora-cockpit"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "detach", "Detach"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        session: RunSession,
        *,
        watch: Any = None,
        clock: Callable[[], float] | None = None,
        poll_interval_s: float = 0.1,
        preflight_problems: list | None = None,
    ):
        super().__init__()
        self.session = session
        self.relaunched = None  # a trainer the OOM wizard started: the CLI follows it after exit
        self.preflight_problems = list(preflight_problems or [])  # what the start's quick preflight found
        self.watch = watch
        self.poll_interval_s = poll_interval_s
        # a replay's "now" is the recorded time it has reached
        self.clock = clock or getattr(session, "recorded_now", None) or time.time
        self.run_view = RunView(session, self.clock, watching=watch is not None)
        self._watch_stop = threading.Event()
        self._watch_asked_at: float | None = None  # monotonic time of the pending watch.update()
        self._watch_thread = threading.Thread(target=self._watch_loop, name="cockpit-watch", daemon=True)

    async def on_mount(self) -> None:
        await self.push_screen(self.run_view)
        if self.preflight_problems:
            await self.push_screen(PreflightNotice(self.preflight_problems))

    def on_run_view_ready(self, _message: RunView.Ready) -> None:
        # the threads start once every widget they update exists
        if not self._watch_thread.is_alive() and self._watch_thread.ident is None:
            self.run_worker(self._follow, thread=True, name="follow", group="follow")
            self._watch_thread.start()

    def on_unmount(self) -> None:
        self._watch_stop.set()
        stop = getattr(self.watch, "stop", None)
        if stop is not None:  # LiveWatch.stop joins its sampler: bounded, off this thread
            stopper = threading.Thread(target=stop, name="cockpit-watch-stop", daemon=True)
            stopper.start()
            stopper.join(WATCH_STOP_WAIT_S)

    # ------------------------------------------------------------ the follow thread

    def _follow(self) -> None:
        cancelled = get_current_worker().cancelled_event
        session, event_lines = self.session, EventLines()
        log = LogTailReader(session.run.log_path)
        last_shown = float("-inf")
        pending_lines: list[str] = []
        pending_tail = None
        pending_items = False
        try:
            while not cancelled.is_set():
                try:
                    items = session.poll()
                    pending_lines += event_lines.lines(items)
                except OSError as exc:
                    items = []
                    pending_lines.append(f"could not read the run's events: {exc}; retrying")
                    cancelled.wait(READ_RETRY_S)
                pending_items = pending_items or bool(items)
                tail = log.poll()
                pending_tail = tail if tail is not None else pending_tail
                ended = session.ended
                since = time.monotonic() - last_shown
                # at most REFRESH_S apart: a redraw costs more than everything else the view does
                changed = pending_items or pending_lines or pending_tail is not None
                if ended or (changed and since >= REFRESH_S) or since >= CLOCK_TICK_S:
                    asked_at = self._watch_asked_at
                    late = None if asked_at is None else time.monotonic() - asked_at
                    shown = threading.Event()
                    if not self.post_message(RunUpdated(pending_lines, shown, pending_tail, late)):
                        return  # the app is closing
                    pending_lines, pending_tail, pending_items = [], None, False
                    while not shown.wait(0.05):
                        if cancelled.is_set():
                            return
                    last_shown = time.monotonic()
                if ended:
                    return  # the trainer is gone and its last event read: nothing more will come
                if not items:
                    cancelled.wait(self.poll_interval_s)
        finally:
            session.close()

    def on_run_updated(self, message: RunUpdated) -> None:
        try:
            if not self._view_ready():
                return
            self.run_view.show(message.lines)
            if message.log_tail is not None:
                self.run_view.show_log(message.log_tail)
            if self.watch is not None:
                self.run_view.show_watch_late(message.watch_late_s)
        finally:
            message.shown.set()

    # ------------------------------------------------------------ the watch thread

    def _watch_loop(self) -> None:
        stop, watch = self._watch_stop, self.watch
        if not getattr(watch, "plays_history", False):  # a replay's watch plays the history itself
            path = self.session.run.path / TELEMETRY_NAME
            if path.exists():
                bins = read_history(path, max_points=HISTORY_POINTS).bins
                if bins and not self.post_message(HistoryLoaded(bins)):
                    return
        if watch is None:
            return
        pop = getattr(watch, "pop_samples", None)
        while not stop.is_set():
            self._watch_asked_at = time.monotonic()
            try:
                sample, findings = watch.update(self.session.state)
                samples, error = (pop() if pop is not None else []), None
            except Exception as exc:  # a bug in a watch must not take the live view down
                sample, findings, samples = None, [], []
                error = f"the GPU/host watch failed: {type(exc).__name__}: {exc}"
            self._watch_asked_at = None
            shown = threading.Event()
            if not self.post_message(TelemetryUpdated(sample, list(findings), samples, shown, error)):
                return
            while not shown.wait(0.05):
                if stop.is_set():
                    return
            stop.wait(WATCH_RETRY_S if error else WATCH_INTERVAL_S)

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        if self._view_ready():
            self.run_view.show_history(message.bins)

    def on_telemetry_updated(self, message: TelemetryUpdated) -> None:
        try:
            if not self._view_ready():
                return
            if message.error is not None:
                self.run_view.show_watch_error(message.error)
            else:
                self.run_view.show_telemetry(message.sample, message.findings, message.samples)
        finally:
            message.shown.set()

    def _view_ready(self) -> bool:
        """Messages from the threads can land while the app tears the screen down: drop those."""
        return self.run_view.is_attached and not self._watch_stop.is_set()

    # ------------------------------------------------------------ leaving

    def _leave(self) -> None:
        # a live run goes on training without us; a replay left before its end is no ending
        if self.run_view.live or getattr(self.session, "playing", False):
            self.exit(EXIT_DETACHED)
            return
        self.exit(exit_code(self.session.state))

    def action_detach(self) -> None:
        self._leave()

    async def action_quit(self) -> None:
        self._leave()
