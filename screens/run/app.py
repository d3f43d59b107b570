"""The cockpit's Textual app: follows one run session off the UI thread and shows it on the run screen.

The session (a `RunSource`: `cockpit.live.session.RunSession`, a `cockpit.live.replay.ReplaySession`,
or a test double) and the watch (a `Watch`: `cockpit.live.watch.LiveWatch`, the replay's, or a
double) are handed in (both Protocols in cockpit/live/sources.py). Two threads read and post
messages (screens/run/messages.py); only the message handlers touch the screen, and no thread but
the follow worker changes the session's `state`: the watch's doctor reads the `snapshot` it
publishes.

- follow: a Textual worker (`follow`) that reads new events, the tail of `backend.log` and what
  the watch left (screens/run/follow.py: `RunReader`) and posts it all as one `RunUpdated` tick.
  It reads under `state_lock`, which the handlers hold while they draw, so the state is never
  folded while the screen draws from it and events that come meanwhile are read in one go; ticks
  that pile up behind a busy screen collapse into one (`RunUpdated.can_replace`);
- watch: loads the run's recorded `telemetry.jsonl` (so an attach shows the whole history) and
  posts it. Then a watch that pushes (LiveWatch) is subscribed: its sampler's thread leaves each
  new sample and the doctor's findings in a `WatchSlot`, which wakes the follow worker; any other
  watch (a replay's, a test double) is asked every WATCH_INTERVAL_S by this thread, which leaves
  what is new in the slot. A daemon thread, not a worker: a watch that never answers leaves the
  keys working and does not keep the app from exiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.worker import get_current_worker

from cockpit.live.sources import RunSource, Watch
from cockpit.run.exit_codes import EXIT_DETACHED, exit_code
from cockpit.telemetry.history import TELEMETRY_NAME, read_history
from screens.hangup import TerminalWatch, leave_when_terminal_goes
from screens.run.follow import RunReader
from screens.run.messages import HistoryLoaded, ReplayMoved, RunUpdated
from screens.run.telemetry_feed import WatchSlot
from screens.run.view import RunView

REFRESH_S = 0.5  # without a watch's samples to pace them, events are read and drawn twice a second
WATCH_INTERVAL_S = 0.25  # how often a watch that does not push its samples is asked
WATCH_SILENT_S = 1.5  # a pushing watch silent for this long (three samples) is late
WATCH_RETRY_S = 2.0
HISTORY_POINTS = 480  # bins of the recorded history kept for the sparklines
WATCH_STOP_WAIT_S = 3.0


class CockpitApp(App[int]):
    """`run()` returns 4 when the user detaches from a live run (or leaves a replay before its
    end), else the run's exit code (0, 1, 3)."""

    TITLE = "lora-cockpit"
    # the run screen's stylesheet read with the app's: a screen that brings its own makes Textual
    # parse every stylesheet again when it is pushed (~20 ms of the start's CPU)
    CSS_PATH: ClassVar[list[str]] = ["app.tcss", "view.tcss"]
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "detach", "Detach"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        session: RunSource,
        *,
        watch: Watch | None = None,
        clock: Callable[[], float] | None = None,
        poll_interval_s: float = REFRESH_S,
        preflight_problems: list | None = None,
        read_only: bool = False,
    ):
        super().__init__()
        self.session = session
        self.relaunched = None  # a trainer the OOM wizard started: the CLI follows it after exit
        self.preflight_problems = list(preflight_problems or [])  # what the start's quick preflight found
        self.watch = watch
        self.poll_interval_s = poll_interval_s
        # a replay's "now" is the recorded time it has reached
        self.clock = clock or (session.recorded_now if session.mode == "playback" else time.time)
        self.read_only = read_only  # sends nothing to the trainer (the OOM wizard relaunches nothing)
        self.run_view = RunView(session, self.clock, watching=watch is not None, read_only=read_only)
        self.state_lock = threading.Lock()  # the follow worker folds the state, a handler draws it
        self._watch_stop = threading.Event()
        self._watch_slot = WatchSlot()
        self._watch_pushes = False  # the watch hands its samples to the slot itself
        self._watch_asked_at: float | None = None  # monotonic time of the pending watch.update()
        self._watch_thread = threading.Thread(target=self._watch_loop, name="cockpit-watch", daemon=True)
        self._terminal: TerminalWatch | None = None

    async def on_mount(self) -> None:
        # the terminal going away (an SSH drop) detaches, as `d` does: the trainer runs on
        self._terminal = leave_when_terminal_goes(
            self,
            self._leave_code,
            leave=self._leave,
            last_words=self.watch.stop if self.watch is not None else None,
        )
        await self.push_screen(self.run_view)
        if self.preflight_problems:  # imported only then: its check list costs every start otherwise
            from screens.preflight.notice import PreflightNotice

            await self.push_screen(PreflightNotice(self.preflight_problems))

    def on_run_view_ready(self, _message: RunView.Ready) -> None:
        # the threads start once every widget they update exists
        if not self._watch_thread.is_alive() and self._watch_thread.ident is None:
            self.follow()
            self._watch_thread.start()

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()
        self._watch_stop.set()
        self._watch_slot.wake()  # the follow worker sleeps until the slot wakes it
        if self.watch is not None:  # LiveWatch.stop joins its sampler: bounded, off this thread
            stopper = threading.Thread(target=self.watch.stop, name="cockpit-watch-stop", daemon=True)
            stopper.start()
            stopper.join(WATCH_STOP_WAIT_S)

    # ------------------------------------------------------------ the follow worker

    @work(thread=True, name="follow", group="follow")
    def follow(self) -> None:
        """Reads the run and posts each tick until the run has ended and no watch has news (or the
        app closes); closes the session then."""
        worker = get_current_worker()
        reader = RunReader(
            self.session,
            self._watch_slot,
            self._watch_late,
            watching=self.watch is not None,
            poll_interval_s=self.poll_interval_s,
        )
        try:
            while not (worker.is_cancelled or self._watch_stop.is_set()):
                with self.state_lock:  # never while the screen draws from the state
                    tick = reader.read()
                if tick is not None and not self.post_message(tick):
                    return  # the app is closing
                if reader.done:
                    return
                reader.wait()
        finally:
            self.session.close()

    def on_replay_moved(self, _message: ReplayMoved) -> None:
        self._watch_slot.wake()  # a replay's new position or pace is read now, not at the next tick

    def _watch_late(self, now: float) -> float | None:
        """How long the watch has kept the view waiting: asked without answering, or (one that
        pushes its samples) silent for WATCH_SILENT_S or more; None while it answers."""
        if self._watch_pushes:
            silent_s = now - self._watch_slot.put_at
            return silent_s if silent_s >= WATCH_SILENT_S else None
        asked_at = self._watch_asked_at
        return None if asked_at is None else now - asked_at

    def on_run_updated(self, message: RunUpdated) -> None:
        if not self._view_ready():
            return
        view = self.run_view
        with self.state_lock:
            if message.rewound:
                view.start_over()
            if message.events:
                view.show(message.lines)
            if message.log_tail is not None:
                view.show_log(message.log_tail)
            news = message.telemetry
            if news is not None and news.error is not None:
                view.show_watch_error(news.error, news.samples)
            elif news is not None:
                view.show_telemetry(news.sample, news.findings, news.samples)
            if self.watch is not None:
                view.show_watch_late(message.watch_late_s)

    # ------------------------------------------------------------ the watch thread

    def _watch_loop(self) -> None:
        stop, watch = self._watch_stop, self.watch
        if watch is None or not watch.plays_history:  # a replay's watch plays the history itself
            path = self.session.run.path / TELEMETRY_NAME
            if path.exists():
                bins = read_history(path, max_points=HISTORY_POINTS).bins
                if bins and not self.post_message(HistoryLoaded(bins)):
                    return
        if watch is None:
            return
        session = self.session
        if watch.pushes:  # its sampler's thread brings each sample: nothing to ask
            self._watch_slot.put_at = time.monotonic()  # silent from now on is late
            self._watch_pushes = True
            watch.subscribe(lambda: session.snapshot, self._watch_news)
            return
        while not stop.is_set():
            self._watch_asked_at = time.monotonic()
            try:
                sample, findings = watch.update(session.snapshot)
                samples, error = watch.pop_samples(), None
            except Exception as exc:  # a bug in a watch must not take the live view down
                sample, findings, samples = None, [], []
                error = f"the GPU/host watch failed: {type(exc).__name__}: {exc}"
            self._watch_asked_at = None
            self._watch_slot.put(sample, list(findings), samples, error)
            stop.wait(WATCH_RETRY_S if error else WATCH_INTERVAL_S)

    def _watch_news(self, sample: Any, findings: list, error: str | None) -> None:
        """A pushing watch's new sample and findings, on its sampler's thread: only handed on."""
        if error is not None:
            error = f"the GPU/host watch failed: {error}"
        self._watch_slot.put(sample, list(findings), [], error)

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        if self._view_ready():
            with self.state_lock:
                self.run_view.show_history(message.bins)

    def _view_ready(self) -> bool:
        """Messages from the threads can land while the app tears the screen down: drop those.
        The app stops running before it prunes a widget, and a handler runs without yielding."""
        return self.is_running and self.run_view.is_attached and not self._watch_stop.is_set()

    # ------------------------------------------------------------ leaving

    def _leave(self) -> None:
        self.exit(self._leave_code())

    def _leave_code(self) -> int:
        # a live run goes on training without us; a replay left before its end is no ending
        if self.run_view.live or self.session.playing:
            return EXIT_DETACHED
        return exit_code(self.session.state)

    def action_detach(self) -> None:
        self._leave()

    async def action_quit(self) -> None:
        self._leave()
