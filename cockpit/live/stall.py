"""A trainer that has gone quiet: no event for much longer than its work takes.

A trainer stopped with SIGSTOP, hung in a collective, or stuck on a dead disk looks alive from its
last event: the status says running, the ETA is frozen. Pure: the run's state, "now" (the client's
clock while live, the recorded time in a replay) and, when the caller looked, what the trainer's
process was doing (cockpit.live.trainer_seen) in, a `Stall` or None out. Judged only while training
runs (not paused, not loading, not ended) and once a step was said, since the first step
(compilation, the first batch) takes as long as it takes.

What it waits for: the slow end of its recent steps (a high percentile, not the last one: steps of 4
micro-batches and of 1 alternate), or, while an eval pass, sampling or a save is under way (the
trainer's `busy` event), that work's own longest duration so far. A process seen working on the CPU
gets longer; one seen stopped (state T) is said at the floor. The notice says what was seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit import fmt
from cockpit.live.trainer_seen import Seen
from cockpit.paths import cockpit_command
from cockpit.run.state import RunState

STALL_FLOOR_S = 10.0  # never sooner: a checkpoint save or a slow step is no stall
STALL_FACTOR = 3.0  # silent for this many times the usual gap between events
STEP_PERCENTILE = 0.9  # of the recent step times: the slow end of their spread
BUSY_FIRST_S = 300.0  # an eval pass, sampling or a save not timed before in this run: this long
WORKING_FACTOR = 3.0  # a process seen using the CPU is given this many times longer
BUSY_WORDS = {"eval": "an eval pass", "samples": "sampling", "save": "a checkpoint save"}


@dataclass(frozen=True)
class Stall:
    silent_s: float  # since the last event
    expected_s: float  # the usual time between events of this run (its steps, or the work under way)
    limit_s: float  # silent longer than this is a stall
    busy: str | None = None  # the work between steps under way (eval, samples, save), if any
    seen: Seen | None = None  # what the trainer's process was doing, when looked at

    def text(self) -> str:
        work = BUSY_WORDS.get(self.busy or "", self.busy)
        if self.busy is None:
            took = f"its steps take up to {_seconds(self.expected_s)}"
        elif self.expected_s > 0:
            took = f"during {work}, which took up to {_seconds(self.expected_s)}"
        else:
            took = f"during {work}, its first"
        head = f"no event from the trainer for {_seconds(self.silent_s)} ({took}): "
        if self.seen is not None:
            return head + self.seen.words()
        return (
            f"{head}stopped (kill -STOP), hung, or stuck on I/O? Its CPU use shows which; "
            f"`{cockpit_command()} stop` ends it."
        )


def step_spread_s(state: RunState) -> float | None:
    """The slow end of the recent steps (STEP_PERCENTILE of the last ones timed); the last step's
    time when none is kept."""
    times = sorted(state.step_times)
    if not times:
        return state.step_time_s
    return times[min(len(times) - 1, int(STEP_PERCENTILE * len(times)))]


def expected_gap_s(state: RunState) -> float | None:
    """How long this run's events usually take to come: the slow end of its step times, or the gap
    between its log events (logging_steps > 1), whichever is longer; None before its first step is
    said."""
    known = [x for x in (step_spread_s(state), state.log_gap_s) if x is not None]
    return max(known) if known else None


def find_stall(state: RunState, now_ts: float | None, seen: Seen | None = None) -> Stall | None:
    if now_ts is None or state.last_ts is None or state.ended:
        return None
    if state.status != "running" or state.phase != "training":
        return None
    expected = expected_gap_s(state)
    if expected is None:
        return None
    busy = (state.busy or {}).get("what")
    if busy is not None:
        expected = float(state.busy_s.get(busy, 0.0))
        limit = max(STALL_FLOOR_S, STALL_FACTOR * expected) if expected > 0 else BUSY_FIRST_S
    else:
        limit = max(STALL_FLOOR_S, STALL_FACTOR * expected)
    if seen is not None and seen.stopped:
        limit = STALL_FLOOR_S  # no guess: it cannot send anything
    elif seen is not None and seen.working:
        limit *= WORKING_FACTOR
    silent = now_ts - state.last_ts
    return Stall(silent, expected, limit, busy, seen) if silent > limit else None


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
