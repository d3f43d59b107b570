"""What a run view is given: a source of the run's events and, live, a watch of its GPU and host.

Sources: `RunSession` follows a run's journal, live (`mode == "live"`) or, for a run that no
longer trains, its whole history at once (`mode == "recorded"`: `cockpit attach` of an ended
run); `ReplaySession` plays a recording back at its recorded pace (`mode == "playback"`:
`cockpit replay`). Watches: `LiveWatch` pushes each NVML/host sample with the doctor's verdict;
`ReplayWatch` is asked for the recording's samples as the playback reaches them. Tests hand the
views doubles of the same shape (tests/support/pilot.py).

The follow thread owns `state` (it folds events into it; a view draws from it only while that
thread waits); every other thread reads `snapshot`, the copy it publishes after each poll.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cockpit.protocol.wire import Fault
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState

if TYPE_CHECKING:
    from cockpit.doctor.window import Finding
    from cockpit.telemetry.sampler import Sample

MODES = ("live", "recorded", "playback")

# called with (sample, findings, None), or (None, [], why) when judging a sample failed
OnNews = Callable[["Sample | None", "list[Finding]", "str | None"], None]


@runtime_checkable
class RunSource(Protocol):
    run: RunDir
    state: RunState  # the follow thread's own: folded by poll()
    snapshot: RunState  # the copy other threads read
    trainer_gone: bool
    # how many times poll() has folded the state again from the run's start (a playback sent back
    # by skip()): what was drawn from the later events goes. Always 0 where nothing goes back
    rewinds: int
    speed: float  # a playback's pace (0: as fast as it can); 1 where the run sets its own pace
    # what the summary says goes on from the run's end, where the source knows better than the run's
    # own commands (a rehearsal: the recorded run is not on this machine to restart); None elsewhere
    next_commands: list[str] | None

    @property
    def mode(self) -> str: ...  # live | recorded | playback

    @property
    def label(self) -> str | None:
        """What the header says of a run that is not live ("REPLAY x2 0:01:10/0:05:00"), or None."""
        ...

    @property
    def ended(self) -> bool: ...

    @property
    def playing(self) -> bool:
        """A playback with more to play: leaving now is no ending of the run."""
        ...

    @property
    def rewind_pending(self) -> bool:
        """skip() went back and the next poll() has yet to fold the state again from the start."""
        ...

    def set_speed(self, speed: float) -> float:
        """A playback plays on at `speed` (clamped); returns the speed it plays at (a source with
        no pace of its own to change: its `speed`, unchanged)."""
        ...

    def skip(self, seconds: float) -> None:
        """A playback jumps `seconds` of recording ahead, or back when negative; elsewhere nothing."""
        ...

    def recorded_now(self) -> float | None:
        """The recorded time a playback has reached (its "now" for elapsed time and cost);
        None: the wall clock is "now"."""
        ...

    def poll(self) -> list[dict[str, Any] | Fault]: ...

    def send(self, command: str, sender: str = "cockpit") -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Watch(Protocol):
    plays_history: bool  # it plays telemetry.jsonl itself: the view must not prefill from it
    pushes: bool  # it calls back with each sample (subscribe) rather than being asked (update)

    def start(self) -> Watch: ...

    def stop(self) -> None: ...

    def update(self, state: RunState) -> tuple[Sample | None, list[Finding]]: ...

    def pop_samples(self) -> list[Sample]: ...

    def subscribe(self, state_of: Callable[[], RunState], on_news: OnNews) -> None: ...
