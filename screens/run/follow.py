"""What the run app's follow worker reads, tick by tick: plain Python over a `RunSource`, no widget.

`RunReader.read()` polls the session (which folds the new events into its state), the tail of
backend.log and what the watch left in its `WatchSlot`, and makes a `RunUpdated` of what is new,
or None when nothing is; `wait()` sleeps until the watch has news or the next read is due.

A redraw costs far more than everything else the view does, and on a busy box every thread that
wakes up costs too, so there is one tick per new sample for events and telemetry together: a live
watch's samples (2 a second) wake the reader and new events ride along, waiting at most
EVENTS_WAIT_S; without a watch, events are read every `poll_interval_s`. Nothing is drawn while
nothing changed but the clock (then once a second).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cockpit.live.sources import RunSource
from cockpit.results import summary
from screens.run.figures import EventLines
from screens.run.messages import RunUpdated
from screens.run.telemetry_feed import LogTailReader, WatchSlot

CLOCK_TICK_S = 1.0  # redraw at least this often while a run is live: elapsed time and cost move
READ_RETRY_S = 2.0
EVENTS_WAIT_S = 1.0  # with a watch's samples to pace them, events wait for the next, at most this long


class RunReader:
    """One run's reading for the follow worker; `late(now)` says how long the watch has kept the
    view waiting (None while it answers), `watching` whether there is a watch at all."""

    def __init__(
        self,
        session: RunSource,
        slot: WatchSlot,
        late: Callable[[float], float | None],
        *,
        watching: bool,
        poll_interval_s: float,
    ) -> None:
        self.session = session
        self.slot = slot
        self.late = late
        self.watching = watching
        self.poll_interval_s = poll_interval_s
        self.event_lines = EventLines()
        self.log = LogTailReader(session.run.log_path)
        self.following = True  # until the session ends; then only the watch has news
        self.rewinds = session.rewinds  # a replay that went back folds its state again
        # ...and the end runner, whose cost.on_end events come after the trainer's end
        self.tail_after_end = session.mode == "live" and summary.configured_on_end(session.run) is not None
        self.clock_shown_at = float("-inf")
        self.retry_at = float("-inf")  # the events could not be read: not again before then

    @property
    def done(self) -> bool:
        """Nothing more can come: the run's last events are read and there is no watch."""
        return not (self.following or self.watching or self.tail_after_end)

    def read(self) -> RunUpdated | None:
        """What is new since the last read, as one tick; None when nothing is and the clock is not due."""
        lines, changed, rewound = self._read_events()
        tail = self.log.poll() if self.following else None
        ended = self.following and self.session.ended
        now = time.monotonic()
        late = self.late(now)
        # the clock moves elapsed time and cost while the run lives, and a late watch's delay
        clock_due = now - self.clock_shown_at >= CLOCK_TICK_S and (self.following or late is not None)
        if ended:
            self.following = False  # the trainer is gone and its last event read
        events = ended or clock_due or changed or bool(lines) or tail is not None
        news = self.slot.take()
        if not events and news is None:
            return None
        if events:
            self.clock_shown_at = now
        return RunUpdated(lines, tail, late, events=events, telemetry=news, rewound=rewound)

    def _read_events(self) -> tuple[list[str], bool, bool]:
        """(new event lines, whether the state changed, whether it was folded again from the start)."""
        session = self.session
        if not self.following and session.rewind_pending:
            self.following = True  # a replay played out went back: it plays again from there
        if self.following:
            if time.monotonic() < self.retry_at:
                return [], False, False
            try:
                items = session.poll()
            except OSError as exc:
                self.retry_at = time.monotonic() + READ_RETRY_S
                return [f"could not read the run's events: {exc}; retrying"], False, False
            rewound = session.rewinds != self.rewinds  # folded again from its start
            if rewound:
                self.rewinds, self.event_lines = session.rewinds, EventLines()
            return self.event_lines.lines(items), bool(items) or rewound, rewound
        if self.tail_after_end:
            items = session.poll()
            ran = (session.state.end_command or {}).get("state") in ("finished", "failed")
            self.tail_after_end = not ran
            return self.event_lines.lines(items), bool(items), False
        return [], False, False

    def wait(self) -> None:
        """Until the watch has news or the next read is due."""
        now = time.monotonic()
        paced_until = self.slot.put_at + EVENTS_WAIT_S  # samples are coming: the next one wakes it
        if not self.following:
            wait_s = CLOCK_TICK_S
        elif self.late(now) is None and now < paced_until:
            wait_s = paced_until - now  # ...or, if none comes, the reads go back to their interval
        else:
            wait_s = self.poll_interval_s
        self.slot.wait(wait_s)
