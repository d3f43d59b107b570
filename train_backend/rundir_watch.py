"""Noticing that the run directory is gone while the trainer runs (`rm -rf`, an unmounted disk).

The trainer would otherwise train on to the end, billed, writing into files nobody can open, and
fail only at its next checkpoint. A thread holds the directory open and looks every CHECK_S (two
stats: its link count fell to 0, or another directory now has its name; held open, its inode
cannot be reused for a new one); then the run stops at the next step boundary,
without a checkpoint (there is nowhere to put it), and ends with an error naming the cause.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

CHECK_S = 2.0


class RunDirectoryGone(RuntimeError):
    """The run directory was deleted (or replaced) while the trainer ran."""


class RunDirWatch:
    def __init__(self, path: Path, on_gone, check_s: float = CHECK_S):
        self.path = path
        self.on_gone = on_gone
        self.check_s = check_s
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            self._fd = None
        self.gone = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cockpit-rundir", daemon=True)

    def start(self) -> RunDirWatch:
        if self._fd is not None:
            self._thread.start()
        return self

    def check(self) -> bool:
        """True once the directory is gone (and on_gone was called, once)."""
        if self._fd is not None and not self.gone.is_set() and not self._still_there():
            self.gone.set()
            self.on_gone(f"the run directory {self.path} was deleted (or replaced) while the trainer ran")
        return self.gone.is_set()

    def _run(self) -> None:
        while not self.gone.wait(self.check_s):
            self.check()

    def _still_there(self) -> bool:
        held = os.fstat(self._fd)
        try:
            named = os.stat(self.path)
        except OSError:
            return False
        return held.st_nlink > 0 and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
