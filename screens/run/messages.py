"""What the run app's threads post to it: a tick of the run (`RunUpdated`), the recorded telemetry
(`HistoryLoaded`), the stop worker's lines (`StopSaid`); and what the run screen tells the app
(`ReplayMoved`). The threads only read and post; the handlers draw.

Ticks can pile up while the screen is busy (a modal over it, a slow terminal): Textual asks a tick
not yet handled whether the next one in the queue may take its place (`can_replace`), and it may,
carrying along what this one brought (its event lines, the log's tail, the watch's samples), so a
burst is drawn once.
"""

from __future__ import annotations

from textual.message import Message

from screens.run.telemetry_feed import WatchNews


class RunUpdated(Message):
    """One tick: new event lines (`lines`; `events`: the state changed or the clock moved, so the
    screen redraws its figures), the tail of backend.log, and the watch's news.

    `log_tail`: the new last lines of backend.log, None when unchanged. `watch_late_s`: how long
    the watch has been asked for a sample without answering, None when it is not being asked.
    `telemetry`: the watch's news since the last tick, None when it said nothing new. `rewound`: a
    replay went back and its state was folded again from the start: the screen starts over.
    """

    def __init__(
        self,
        lines: list[str],
        log_tail: list[str] | None = None,
        watch_late_s: float | None = None,
        *,
        events: bool = True,
        telemetry: WatchNews | None = None,
        rewound: bool = False,
    ) -> None:
        super().__init__()
        self.lines = lines
        self.log_tail = log_tail
        self.watch_late_s = watch_late_s
        self.events = events
        self.telemetry = telemetry
        self.rewound = rewound

    def can_replace(self, message: Message) -> bool:
        """Textual's question to a tick still queued: may `message`, the next one, take its place?
        A tick may, once it holds what this one brought (a rewind drops the lines from before it)."""
        if not isinstance(message, RunUpdated):
            return False
        if not message.rewound:
            message.lines[:0] = self.lines
        if message.log_tail is None:
            message.log_tail = self.log_tail
        message.telemetry = merged_news(self.telemetry, message.telemetry)
        message.events = message.events or self.events
        message.rewound = message.rewound or self.rewound
        return True


def merged_news(older: WatchNews | None, newer: WatchNews | None) -> WatchNews | None:
    """The watch's news of two ticks as one: the newer's sample, findings and error, every sample."""
    if older is None or newer is None:
        return newer or older
    return WatchNews(newer.sample, newer.findings, older.samples + newer.samples, newer.error)


class ReplayMoved(Message):
    """A replay's speed or position changed (its keys): the follow worker reads it now."""


class StopSaid(Message):
    """A line from the stop worker (`process.stop` says what it escalates to)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class HistoryLoaded(Message):
    """The run's recorded telemetry, oldest bin first."""

    def __init__(self, bins: list[dict]) -> None:
        super().__init__()
        self.bins = bins
