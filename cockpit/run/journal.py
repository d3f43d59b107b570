"""The run's events file, `events.jsonl`: the one module that opens it, to follow, append or fold.

Writers: the trainer (and the launcher of several GPUs) write protocol lines to their stdout,
which is the descriptor `open_for_trainer` hands them; a client that must record something the
trainer could not (how it ended, a config change before a relaunch) calls `append`. Both end a
line a killed writer left unfinished first, so every message starts on a line of its own.
Readers follow the file from the start (`EventFollower`: replay, then live) or fold it whole
into a `RunState` (`fold`), or find the last event of a type (`last_event`). A trainer whose
events.jsonl stops taking events (made immutable, replaced) goes on in events-fallback.jsonl
beside it: every reader here reads that one after it, and `append` writes there when refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cockpit.protocol.wire import Fault, LineDecoder, encode
from cockpit.run.rundir import EVENTS_FALLBACK_NAME, EVENTS_NAME

if TYPE_CHECKING:
    from cockpit.run.state import RunState


def open_for_trainer(path: Path) -> int:
    """An append-only descriptor for a trainer's stdout (the caller closes its copy)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    end_partial_line(path)
    return fd


def append(path: Path, msg_type: str, **fields: Any) -> bytes:
    """Append one event; returns the line written. OSError (a full disk, a run directory gone)
    is the caller's to report."""
    line = encode(msg_type, **fields)
    try:
        _append_line(path, line)
    except PermissionError:  # made immutable or read-only: where the trainer goes on too
        fallback = fallback_of(path)
        if fallback is None:
            raise
        _append_line(fallback, line)
    return line


def _append_line(path: Path, line: bytes) -> None:
    end_partial_line(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one write: a line is never interleaved with the trainer's
    finally:
        os.close(fd)


def fallback_of(path: Path) -> Path | None:
    """The file the events go on in when `path` (a run's events.jsonl) refuses them; None for another
    file."""
    return path.with_name(EVENTS_FALLBACK_NAME) if path.name == EVENTS_NAME else None


def end_partial_line(path: Path) -> None:
    """A trainer killed mid-line leaves a fragment: close it so the next message starts clean."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
    except OSError:
        return
    if last != b"\n":
        with open(path, "ab") as f:
            f.write(b"\n")


class EventFollower:
    """Reads events.jsonl from the start, then whatever is appended (replay, then live)."""

    def __init__(self, path: Path, chunk_bytes: int = 1 << 16):
        self.path = path
        self.chunk_bytes = chunk_bytes
        self.decoder = LineDecoder()
        self._file: BinaryIO | None = None
        self.finished = False
        fallback = fallback_of(path)
        self._fallback = EventFollower(fallback, chunk_bytes) if fallback is not None else None

    def poll(self) -> list[dict[str, Any] | Fault]:
        items = self._poll_own()
        if self._fallback is not None:  # what came after events.jsonl stopped taking events
            items.extend(self._fallback.poll())
        return items

    def _poll_own(self) -> list[dict[str, Any] | Fault]:
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 - held open while following
            except FileNotFoundError:
                return []
        items: list[dict[str, Any] | Fault] = []
        while True:
            data = self._file.read(self.chunk_bytes)
            if not data:
                return items
            items.extend(self.decoder.feed(data))

    def finish(self) -> list[dict[str, Any] | Fault]:
        """The writer is gone: read the rest, and report a line it left unfinished."""
        items = self._poll_own()
        if not self.finished:
            self.finished = True
            items.extend(self.decoder.finish())
        if self._fallback is not None:
            items.extend(self._fallback.finish())
        return items

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._fallback is not None:
            self._fallback.close()


def read_all(path: Path) -> list[dict[str, Any] | Fault]:
    """Every message and fault of the file, including a last line left unfinished."""
    follower = EventFollower(path)
    try:
        return follower.finish()
    finally:
        follower.close()


def fold(path: Path, state: RunState | None = None) -> RunState:
    """The run's state from its whole history."""
    from cockpit.run.state import RunState

    state = state if state is not None else RunState()
    for item in read_all(path):
        state.apply(item)
    return state


def last_event(path: Path, msg_type: str) -> dict[str, Any] | None:
    """The last decoded event of a type, or None (no such event, or no file)."""
    found = None
    for item in read_all(path):
        if isinstance(item, dict) and item.get("type") == msg_type:
            found = item
    return found
