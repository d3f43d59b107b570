"""What the trainer's process is doing, from /proc/PID/stat: its state letter and the CPU it uses.

The edge the stall notice looks through before it says anything (cockpit.live.stall): a process
stopped (`T`, kill -STOP), waiting on I/O (`D`), busy on the CPU, or asleep. `read_stat` is the real
reader; tests hand `TrainerLook` a fake.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from cockpit.paths import cockpit_command

MIN_WINDOW_S = 1.0  # CPU use is measured over at least this long: shorter is noise
BUSY_CORES = 0.1  # using this much of a core or more: the process works (a loaded box gives it little)


@dataclass(frozen=True)
class Seen:
    """The trainer as last looked at."""

    pid: int
    state: str  # /proc/PID/stat's letter: R running, S asleep, D in I/O, T stopped, Z gone
    cores: float | None  # CPU used since an earlier look, in cores; None on the first look

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    @property
    def in_io(self) -> bool:
        return self.state == "D"

    @property
    def working(self) -> bool:
        return self.cores is not None and self.cores >= BUSY_CORES

    def words(self) -> str:
        """What was seen, said before any guess."""
        if self.stopped:
            return (
                f"its process {self.pid} is stopped (state {self.state}: kill -STOP, a debugger); "
                f"`kill -CONT {self.pid}` lets it go on, `{cockpit_command()} stop` ends it."
            )
        if self.in_io:
            return (
                f"its process {self.pid} waits on I/O (state D): a slow or dead disk or network file "
                f"system? `{cockpit_command()} stop` ends it once the I/O returns."
            )
        if self.working:
            return (
                f"its process {self.pid} uses {self.cores:.1f} of a core, so it works: a long step, or a "
                f"machine short of CPU? `{cockpit_command()} stop` ends it."
            )
        if self.cores is not None:
            return (
                f"its process {self.pid} is asleep (state {self.state}, {self.cores:.2f} of a core): waiting "
                f"on something (a lock, another rank, the GPU)? `{cockpit_command()} stop` ends it."
            )
        return f"its process {self.pid} is in state {self.state}; `{cockpit_command()} stop` ends it."


def read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, utime + stime in clock ticks) of /proc/PID/stat; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()  # fields after `(comm)` start at 3
        return fields[0].decode(), int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


class TrainerLook:
    """Looks at one process each time asked; its CPU use over the last MIN_WINDOW_S or more."""

    def __init__(
        self,
        pid: int,
        read: Callable[[int], tuple[str, int] | None] = read_stat,
        clock: Callable[[], float] = time.monotonic,
        ticks_per_s: float | None = None,
    ) -> None:
        self.pid, self.read, self.clock = pid, read, clock
        self.ticks_per_s = ticks_per_s or _clock_ticks()
        self._base: tuple[float, int] | None = None  # (time, cpu ticks) the use is measured from
        self._cores: float | None = None

    def look(self) -> Seen | None:
        got = self.read(self.pid)
        if got is None:
            return None
        state, ticks = got
        now = self.clock()
        if self._base is None:
            self._base = (now, ticks)
        elif now - self._base[0] >= MIN_WINDOW_S:
            self._cores = (ticks - self._base[1]) / self.ticks_per_s / (now - self._base[0])
            self._base = (now, ticks)
        return Seen(self.pid, state, self._cores)


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0
