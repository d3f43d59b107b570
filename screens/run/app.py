"""The cockpit's Textual app: follows one run session off the UI thread and shows it on the run screen.

The session (a `RunSource`: `cockpit.live.session.RunSession`, a `cockpit.live.replay.ReplaySession`,
or a test double) and the watch (a `Watch`: `cockpit.live.watch.LiveWatch`, the replay's, or a
double) are handed in (both Protocols in cockpit/live/sources.py). Two threads read; only the
message handlers touch the screen, and no thread but the follow thread touches the session's
`state`: the watch's doctor reads the `snapshot` it publishes.

- watch: loads the run's recorded `telemetry.jsonl` (so an attach shows the whole history) and
  posts it. Then a watch that pushes (LiveWatch) is subscribed: its sampler's thread leaves each
  new sample and the doctor's findings in a `WatchSlot`; any other watch (a replay's, a test
  double) is asked every WATCH_INTERVAL_S by this thread, which leaves what is new in the slot.
  A daemon thread: a watch that never answers leaves the keys working and does not keep the app
  from exiting;
- follow: reads and folds new events and the tail of `backend.log`, takes what the watch left,
  and posts it all as one `RunUpdated`; it reads again only once the screen has drawn it, so
  events that pile up meanwhile are read in one go and a slow terminal gets fewer, larger updates
  instead of a queue.

A redraw costs far more than everything else the view does, and on a busy box every thread that
wakes up costs too, so there is one tick per new sample for events and telemetry together: a
live watch's samples (2 a second) pace the ticks and new events ride along, waiting at most
EVENTS_WAIT_S; without a watch, events are drawn every REFRESH_S. Nothing is drawn while nothing
changed but the clock (then once a second).
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

from cockpit.live.sources import RunSource, Watch
from cockpit.results import summary
from cockpit.run.exit_codes import EXIT_DETACHED, exit_code
from cockpit.telemetry.history import TELEMETRY_NAME, read_history
from screens.hangup import TerminalWatch, leave_when_terminal_goes
from screens.run.telemetry_feed import LogTailReader, WatchNews, WatchSlot
from screens.run.view import EventLines, RunView

CLOCK_TICK_S = 1.0  # redraw at least this often while a run is live: elapsed time and cost move
READ_RETRY_S = 2.0
REFRESH_S = 0.5  # without a watch's samples to pace them, events are read and drawn twice a second
EVENTS_WAIT_S = 1.0  # with them, events wait for the next sample's tick, at most this long
NEWS_GAP_S = 0.3  # ticks for the watch's news at least this far apart (its samples come every 0.5 s)
WATCH_INTERVAL_S = 0.25  # how often a watch that does not push its samples is asked
WATCH_SILENT_S = 1.5  # a pushing watch silent for this long (three samples) is late
WATCH_RETRY_S = 2.0
HISTORY_POINTS = 480  # bins of the recorded history kept for the sparklines
WATCH_STOP_WAIT_S = 3.0


class RunUpdated(Message):
    """One tick: new events (`events`), the clock, and the watch's news; set `shown` once drawn.

    `log_tail`: the new last lines of backend.log, None when unchanged. `watch_late_s`: how long
    the watch has been asked for a sample without answering, None when it is not being asked.
    `telemetry`: the watch's news since the last tick, None when it said nothing new. `rewound`: a
    replay went back and its state was folded again from the start: the screen starts over.
    """

    def __init__(
        self,
        lines: list[str],
        shown: threading.Event,
        log_tail: list[str] | None = None,
        watch_late_s: float | None = None,
        *,
        events: bool = True,
        telemetry: WatchNews | None = None,
        rewound: bool = False,
    ) -> None:
        super().__init__()
        self.rewound = rewound
        self.lines = lines
        self.shown = shown
        self.log_tail = log_tail
        self.watch_late_s = watch_late_s
        self.events = events
        self.telemetry = telemetry


class HistoryLoaded(Message):
    """The run's recorded telemetry, oldest bin first."""

    def __init__(self, bins: list[dict]) -> None:
        super().__init__()
        self.bins = bins


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
    ):
        super().__init__()
        self.session = session
        self.relaunched = None  # a trainer the OOM wizard started: the CLI follows it after exit
        self.preflight_problems = list(preflight_problems or [])  # what the start's quick preflight found
        self.watch = watch
        self.poll_interval_s = poll_interval_s
        # a replay's "now" is the recorded time it has reached
        self.clock = clock or (session.recorded_now if session.mode == "playback" else time.time)
        self.run_view = RunView(session, self.clock, watching=watch is not None)
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
            self.run_worker(self._follow, thread=True, name="follow", group="follow")
            self._watch_thread.start()

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()
        self._watch_stop.set()
        self._watch_slot.wake()  # the follow thread sleeps until the slot wakes it
        if self.watch is not None:  # LiveWatch.stop joins its sampler: bounded, off this thread
            stopper = threading.Thread(target=self.watch.stop, name="cockpit-watch-stop", daemon=True)
            stopper.start()
            stopper.join(WATCH_STOP_WAIT_S)

    # ------------------------------------------------------------ the follow thread

    def _follow(self) -> None:
        cancelled = get_current_worker().cancelled_event
        session, event_lines, slot = self.session, EventLines(), self._watch_slot
        log = LogTailReader(session.run.log_path)
        last_post = last_show = float("-inf")
        shown: threading.Event | None = None  # set once the screen has drawn the last update
        pending_lines: list[str] = []
        pending_tail = None
        pending_items = False
        following = True  # until the session ends; then only the watch has news
        rewinds, rewound = getattr(session, "rewinds", 0), False  # a replay that went back
        # ...and the end runner, whose cost.on_end events come after the trainer's end
        tail_after_end = session.mode == "live" and summary.configured_on_end(session.run) is not None
        try:
            while not (cancelled.is_set() or self._watch_stop.is_set()):
                # the state is neither read nor changed while the screen draws from it
                while shown is not None and not shown.wait(0.05):
                    if cancelled.is_set():
                        return
                if not following and getattr(session, "rewind_pending", False):
                    following = True  # a replay played out went back: it plays again from there
                if following:
                    try:
                        items = session.poll()
                        if getattr(session, "rewinds", 0) != rewinds:  # folded again from its start
                            rewinds, rewound = session.rewinds, True
                            event_lines, pending_lines, pending_tail = EventLines(), [], None
                        pending_lines += event_lines.lines(items)
                        pending_items = pending_items or bool(items) or rewound
                    except OSError as exc:
                        pending_lines.append(f"could not read the run's events: {exc}; retrying")
                        cancelled.wait(READ_RETRY_S)
                    tail = log.poll()
                    pending_tail = tail if tail is not None else pending_tail
                elif tail_after_end:
                    items = session.poll()
                    pending_lines += event_lines.lines(items)
                    pending_items = pending_items or bool(items)
                    ran = (session.state.end_command or {}).get("state") in ("finished", "failed")
                    tail_after_end = not ran
                ended = following and session.ended
                now = time.monotonic()
                late = self._watch_late(now)
                # the clock moves elapsed time and cost while the run lives, and a late watch's delay
                clock_due = now - last_show >= CLOCK_TICK_S and (following or late is not None)
                changed = pending_items or bool(pending_lines) or pending_tail is not None
                show_due = ended or clock_due or changed
                paced = late is None and now - slot.put_at < EVENTS_WAIT_S  # samples are coming
                events_wait_s = EVENTS_WAIT_S if paced else self.poll_interval_s
                events_at, news_at = last_post + events_wait_s, last_post + NEWS_GAP_S
                if ended or (show_due and now >= events_at) or (slot.pending and now >= news_at):
                    shown = threading.Event()
                    update = RunUpdated(
                        pending_lines,
                        shown,
                        pending_tail,
                        late,
                        events=show_due,
                        telemetry=slot.take(),
                        rewound=rewound,
                    )
                    if not self.post_message(update):
                        return  # the app is closing
                    pending_lines, pending_tail, pending_items, rewound = [], None, False, False
                    last_post, last_show = now, (now if show_due else last_show)
                    events_at, news_at, show_due = now + events_wait_s, now + NEWS_GAP_S, False
                if ended:
                    following = False  # the trainer is gone and its last event read
                if not following and self.watch is None and not tail_after_end:
                    while shown is not None and not shown.wait(0.05) and not cancelled.is_set():
                        pass
                    return
                # sleep until the watch has news, pending events are due, or the next read
                wake_at = now + (self.poll_interval_s if following else CLOCK_TICK_S)
                if show_due:
                    wake_at = min(wake_at, events_at)
                if slot.pending:
                    wake_at = min(wake_at, news_at)
                slot.wait(max(0.0, wake_at - time.monotonic()))
        finally:
            session.close()

    def _watch_late(self, now: float) -> float | None:
        """How long the watch has kept the view waiting: asked without answering, or (one that
        pushes its samples) silent for WATCH_SILENT_S or more; None while it answers."""
        if self._watch_pushes:
            silent_s = now - self._watch_slot.put_at
            return silent_s if silent_s >= WATCH_SILENT_S else None
        asked_at = self._watch_asked_at
        return None if asked_at is None else now - asked_at

    def on_run_updated(self, message: RunUpdated) -> None:
        try:
            if not self._view_ready():
                return
            view = self.run_view
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
        finally:
            message.shown.set()

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
