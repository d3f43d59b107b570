"""A client's view of one run: follow its events, send commands, notice the trainer's end.

Used by the headless renderer and the TUI alike. A session may own the trainer
(it launched it, so it can reap it and record an exit code) or only attach to it.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from cockpit.protocol.wire import Fault
from cockpit.run import clients, process
from cockpit.run.control import send_command
from cockpit.run.journal import EventFollower
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from cockpit.run.status import record_exit


class RunSession:
    """A `RunSource` (cockpit.live.sources) over the run's journal: live, or `recorded` (a run that no
    longer trains: its whole history at once, never a look for a live trainer)."""

    playing = False  # not a timed playback: there is never more to play
    rewinds = 0  # the journal is folded forward only
    rewind_pending = False
    speed = 1.0  # events are read as the trainer writes them (or, recorded, all at once)
    next_commands: list[str] | None = None  # the run's own

    def __init__(self, run: RunDir, proc: subprocess.Popen[bytes] | None = None, recorded: bool = False):
        self.run = run
        self.proc = proc
        self.mode = "recorded" if recorded else "live"
        self.state = RunState(run_id=run.run_id, price_per_hour=run.config_price_per_hour())
        self.snapshot = self.state.snapshot()
        self.follower = EventFollower(run.events_path)
        self.trainer_gone = False
        self._alive_checked = 0.0
        self._alive = True
        self._received = (time.time(), time.monotonic())  # the clocks when events last came
        # a live client says it is attached, so the end runner's idle watch leaves the alarm to it
        self._presence = None if recorded else clients.attached(run)
        if self._presence is not None:
            self._presence.__enter__()

    def poll(self) -> list[dict[str, Any] | Fault]:
        """New messages since the last poll, already applied to `state`."""
        items = self.follower.poll()
        if not self.trainer_gone and not self._trainer_alive():
            self.trainer_gone = True
            items.extend(self.follower.finish())
            self._apply(items)
            fresh = self._after_exit()
            self._apply(fresh)
            return items + fresh
        self._apply(items)
        return items

    def _apply(self, items: list[dict[str, Any] | Fault]) -> None:
        for item in items:
            self.state.apply(item)
        if items:
            self.snapshot = self.state.snapshot()
            self._received = (time.time(), time.monotonic())

    def now_ts(self) -> float:
        """Now, as the wall clock read when events last came, moved on by the monotonic clock since:
        the clock a live view measures silence, elapsed time and cost on. A step of the wall clock
        while the trainer is quiet (NTP setting it an hour on) is no hour of silence or of cost; the
        trainer's next event, stamped by the stepped clock, brings the view onto it."""
        wall, mono = self._received
        return wall + (time.monotonic() - mono)

    @property
    def label(self) -> str | None:
        return "REPLAY" if self.mode == "recorded" else None

    def recorded_now(self) -> float | None:
        return None

    def set_speed(self, speed: float) -> float:
        return self.speed  # no pace of its own to change

    def skip(self, seconds: float) -> None:
        pass  # nothing to jump over: a live run is read as it comes, a recorded one at once

    def _trainer_alive(self) -> bool:
        if self.mode == "recorded":
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        now = time.monotonic()
        if now - self._alive_checked > 0.5:  # a process-table look-up costs more than a file read
            self._alive_checked = now
            self._alive = process.is_alive(self.run)
        return self._alive

    def _after_exit(self) -> list[dict[str, Any] | Fault]:
        """The trainer ended; if it said nothing final, write down how it ended."""
        if self.state.settle_from_remains(self.run.final_dir.is_dir()) or self.state.ended:
            return []  # finished, as its final adapter says, though its last event was cut
        if self.mode == "recorded":
            return []
        unwritten = record_exit(self.run, self.proc.returncode if self.proc is not None else None)
        return self.follower.poll() + unwritten

    @property
    def ended(self) -> bool:
        return self.trainer_gone and (self.state.ended or self.mode == "recorded")

    def send(self, command: str, sender: str = "cockpit") -> None:
        send_command(self.run, command, sender)

    def close(self) -> None:
        self.follower.close()
        if self._presence is not None:
            self._presence.__exit__(None, None, None)
            self._presence = None
