"""A trainer that has gone quiet: no event for much longer than its steps take.

A trainer stopped with SIGSTOP, hung in a collective, or stuck on a dead disk looks alive from its
last event: the status says running, the ETA is frozen. Pure: the run's state and "now" (the
client's clock while live, the recorded time in a replay) in, a `Stall` or None out. Judged only
while training runs (not paused, not loading, not ended) and once a step was said, since the first
step (compilation, the first batch) takes as long as it takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit import fmt
from cockpit.paths import cockpit_command
from cockpit.run.state import RunState

STALL_FLOOR_S = 10.0  # never sooner: a checkpoint save or a slow step is no stall
STALL_FACTOR = 3.0  # silent for this many times the usual gap between events


@dataclass(frozen=True)
class Stall:
    silent_s: float  # since the last event
    expected_s: float  # the usual time between events of this run (its steps)
    limit_s: float  # silent longer than this is a stall

    def text(self) -> str:
        return (
            f"no event from the trainer for {_seconds(self.silent_s)} (its steps take "
            f"{_seconds(self.expected_s)}): stopped (kill -STOP), hung, or stuck on I/O? Its CPU use shows "
            f"which; `{cockpit_command()} stop` ends it."
        )


def expected_gap_s(state: RunState) -> float | None:
    """How long this run's events usually take to come: its step time, or the gap between its
    log events (logging_steps > 1), whichever is longer; None before its first step is said."""
    known = [x for x in (state.step_time_s, state.log_gap_s) if x is not None]
    return max(known) if known else None


def find_stall(state: RunState, now_ts: float | None) -> Stall | None:
    if now_ts is None or state.last_ts is None or state.ended:
        return None
    if state.status != "running" or state.phase != "training":
        return None
    expected = expected_gap_s(state)
    if expected is None:
        return None
    limit = max(STALL_FLOOR_S, STALL_FACTOR * expected)
    silent = now_ts - state.last_ts
    return Stall(silent, expected, limit) if silent > limit else None


class StallNotices:
    """One line when a stall begins and one when events come again (for logs and event panes)."""

    def __init__(self) -> None:
        self.current: Stall | None = None

    def update(self, stall: Stall | None) -> str | None:
        was = self.current
        self.current = stall
        if stall is not None and was is None:  # began
            return stall.text()
        if stall is None and was is not None:  # ended
            return f"events again, after {_seconds(was.silent_s)} without one"
        return None


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else (f"{value:.0f} s" if value < 120 else fmt.duration(value))
