"""The cockpit's Textual app: follows one run session off the UI thread and shows it on the run screen.

The session (`cockpit.session.RunSession` or a test double) is handed in, so tests give it a
recorded run. A thread reads and folds new events, posts `RunUpdated`, and waits until the
screen has drawn it before it reads again: events that pile up meanwhile are read in one go,
so a slow terminal gets fewer, larger updates instead of a queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.worker import get_current_worker

from cockpit.headless import EXIT_DETACHED, exit_code
from cockpit.session import RunSession
from screens.run_view import EventLines, RunView

CLOCK_TICK_S = 1.0  # redraw at least this often: elapsed time and cost move with the clock
READ_RETRY_S = 2.0


class RunUpdated(Message):
    """The session's state took in new events; set `shown` once they are drawn."""

    def __init__(self, lines: list[str], shown: threading.Event) -> None:
        super().__init__()
        self.lines = lines
        self.shown = shown


class CockpitApp(App[int]):
    """`run()` returns 4 when the user detaches from a live run, else the run's exit code (0, 1, 3)."""

    TITLE = "lora-cockpit"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "detach", "Detach"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self, session: RunSession, *, poll_interval_s: float = 0.1, clock: Callable[[], float] | None = None
    ):
        super().__init__()
        self.session = session
        self.poll_interval_s = poll_interval_s
        self.clock = clock or time.time
        self.run_view = RunView(session, self.clock)

    async def on_mount(self) -> None:
        await self.push_screen(self.run_view)
        self.run_worker(self._follow, thread=True, name="follow", group="follow")

    def _follow(self) -> None:
        cancelled = get_current_worker().cancelled_event
        session, event_lines = self.session, EventLines()
        last_shown = float("-inf")
        try:
            while not cancelled.is_set():
                try:
                    items = session.poll()
                    lines = event_lines.lines(items)
                except OSError as exc:
                    items, lines = [], [f"could not read the run's events: {exc}; retrying"]
                    cancelled.wait(READ_RETRY_S)
                ended = session.ended
                if items or lines or ended or time.monotonic() - last_shown >= CLOCK_TICK_S:
                    shown = threading.Event()
                    if not self.post_message(RunUpdated(lines, shown)):
                        return  # the app is closing
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
            self.run_view.show(message.lines)
        finally:
            message.shown.set()

    def _leave(self) -> None:
        # a live run goes on training without us; an ended one leaves with how it ended
        self.exit(EXIT_DETACHED if self.run_view.live else exit_code(self.session.state))

    def action_detach(self) -> None:
        self._leave()

    async def action_quit(self) -> None:
        self._leave()
