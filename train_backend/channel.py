"""The trainer's side of the channel: protocol-only stdout, secret scrubbing, commands.

`take_stdout()` must run before any library is imported: it keeps a private duplicate
of fd 1 for protocol messages and points fd 1 at fd 2 (backend.log), so a stray print
or C-level write can never corrupt the channel (the MCP stdio transport's trick).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cockpit.config.secrets import scrub, secret_values
from cockpit.protocol.wire import COMMAND_TYPES, Fault, LineDecoder, encode


def _scrub_fields(value, secrets: list[str]):
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {k: _scrub_fields(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_fields(v, secrets) for v in value]
    return value


class ScrubbingStream(io.TextIOBase):
    """A text stream that removes secret values before writing (Python-level output only)."""

    def __init__(self, inner, secrets: list[str]):
        self.inner, self.secrets = inner, secrets

    def write(self, text: str) -> int:
        self.inner.write(scrub(text, self.secrets))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return False


class Emitter:
    """Writes protocol messages to the private stdout duplicate, one whole line per write."""

    def __init__(self, fd: int, secrets: list[str] | None = None):
        self.fd = fd
        self.secrets = secret_values() if secrets is None else secrets
        self._lock = threading.Lock()
        self.broken = False
        self.dropped = 0
        self.record: EventsRecord | None = None  # the trainer's: events.jsonl kept honest (keep_record)
        self.clock = ClockWatch()  # each event's mono_s, and a step of the wall clock said once

    def keep_record(self, events_path: Path, fallback_path: Path, on_lost: Callable[[str], None]) -> None:
        """When the events file stops taking events (made immutable, read-only, replaced or removed),
        go on in `fallback_path` and call `on_lost(why)` once, so the run stops with a checkpoint and
        its record does not end at the step the file did."""
        if self.fd >= 0:
            self.record = EventsRecord(self.fd, events_path, fallback_path, on_lost)

    def emit(self, msg_type: str, **fields) -> None:
        wall, mono_s, jumped = self.clock.read()
        line = encode(msg_type, ts=wall, mono_s=mono_s, **_scrub_fields(fields, self.secrets))
        self._write(msg_type, line)
        if jumped is not None:  # after the event it was seen at, whose ts it explains
            self.emit("warning", message=jumped, hint="")

    def _write(self, msg_type: str, line: bytes) -> None:
        lost = None
        with self._lock:
            if self.broken:
                return
            if self.record is not None and self.fd == self.record.fd:
                lost = self.record.replaced()
            try:
                if lost is None:
                    _write_all(self.fd, line)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    # this message is lost, training goes on; later ones are written once space frees up
                    self.dropped += 1
                    print(f"[cockpit] event {msg_type!r} not recorded: {exc}", file=sys.stderr)
                    return
                if self.record is None or self.fd != self.record.fd:
                    # the reader is gone (EPIPE) or the fd is: training goes on without events
                    self.broken = True
                    print(
                        f"[cockpit] protocol channel broken: {exc}; continuing without events",
                        file=sys.stderr,
                    )
                    return
                lost = f"{self.record.events_path.name} cannot be written ({exc.strerror or exc})"
            if lost is not None:
                self.fd = self.record.switch(lost, line)
                self.broken = self.fd < 0
        if lost is not None:
            self.record.on_lost(lost)  # outside the lock: it emits


class ClockWatch:
    """The trainer's two clocks: the wall clock for the events' `ts` (shown to people), the monotonic
    one for `mono_s` (what time and cost are counted on: NTP never steps it). A step of the wall clock
    against the monotonic one (NTP setting it, a VM resumed) is said once per step."""

    JUMP_S = 5.0  # a disagreement this large is a step, not drift

    def __init__(self) -> None:
        self._wall0, self._mono0 = time.time(), time.monotonic()
        self._said_s = 0.0  # the step already said
        self._lock = threading.Lock()

    def read(self) -> tuple[float, float, str | None]:
        """(wall time, seconds on the monotonic clock since the start, the warning for a new step)."""
        with self._lock:
            wall, mono = time.time(), time.monotonic()
            step = (wall - self._wall0) - (mono - self._mono0)
            news = None
            if abs(step - self._said_s) >= self.JUMP_S:
                news = _jump_text(step - self._said_s)
                self._said_s = step
            return wall, round(mono - self._mono0, 3), news


def _jump_text(step_s: float) -> str:
    sign = "+" if step_s > 0 else "-"
    minutes, seconds = divmod(round(abs(step_s)), 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"the wall clock was stepped by {sign}{hours}:{minutes:02d}:{seconds:02d} (NTP, or the machine "
        "was suspended): elapsed time and cost are counted on the monotonic clock (mono_s), unchanged; "
        "event times (ts) follow the wall clock"
    )


def _write_all(fd: int, line: bytes) -> None:
    view = memoryview(line)
    while view:  # a regular file takes it in one write; a pipe may not
        written = os.write(fd, view)
        view = view[written:]


class EventsRecord:
    """The events file the trainer's stdout points at, and where its events go when it stops taking
    them: the fallback file beside it (cockpit.run.journal reads both)."""

    CHECK_S = 2.0  # how often the file's identity is compared with the open descriptor's

    def __init__(self, fd: int, events_path: Path, fallback_path: Path, on_lost: Callable[[str], None]):
        self.fd, self.events_path, self.fallback_path, self.on_lost = fd, events_path, fallback_path, on_lost
        self._checked = 0.0

    def replaced(self) -> str | None:
        """Why the open file is no longer the events file: another file has its name. (No file by that
        name is the run directory going: RunDirWatch's, which ends the run in the open file.)"""
        now = time.monotonic()
        if now - self._checked < self.CHECK_S:
            return None
        self._checked = now
        try:
            held, named = os.fstat(self.fd), os.stat(self.events_path)
        except OSError:
            return None
        if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
            return f"{self.events_path.name} was replaced by another file"
        return None

    def switch(self, why: str, line: bytes) -> int:
        """The fallback file's descriptor with a warning and `line` written in it, or -1 when it cannot
        be opened either (the run then stops with nothing more recorded)."""
        print(f"[cockpit] {why}: events go on in {self.fallback_path}", file=sys.stderr)
        try:
            fd = os.open(self.fallback_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            _write_all(fd, encode("warning", message=f"{why}: the events go on in {self.fallback_path.name}"))
            _write_all(fd, line)
            return fd
        except OSError as exc:
            print(f"[cockpit] nor can {self.fallback_path}: {exc}; no more events", file=sys.stderr)
            return -1


def take_stdout() -> int:
    """Keep fd 1 for the protocol; send everything else that writes to fd 1 to fd 2."""
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    secrets = secret_values()
    sys.stdout = ScrubbingStream(io.TextIOWrapper(os.fdopen(1, "wb", 0), write_through=True), secrets)
    sys.stderr = ScrubbingStream(sys.stderr, secrets)
    return protocol_fd


class CommandListener:
    """Reads commands from the run directory's control FIFO in a daemon thread."""

    def __init__(self, fifo_path: str, on_command: Callable[[dict], None], on_fault: Callable[[Fault], None]):
        self.fifo_path = fifo_path
        self.on_command, self.on_fault = on_command, on_fault
        self.thread = threading.Thread(target=self._run, name="cockpit-commands", daemon=True)

    def start(self) -> None:
        if not stat.S_ISFIFO(os.stat(self.fifo_path).st_mode):
            raise RuntimeError(f"{self.fifo_path} is not a FIFO")
        self.thread.start()

    def _run(self) -> None:
        # O_RDWR: we hold a writer ourselves, so the read never sees EOF when clients come and go
        fd = os.open(self.fifo_path, os.O_RDWR)
        decoder = LineDecoder(max_line_bytes=4096)
        while True:
            data = os.read(fd, 4096)
            if not data:
                continue
            for item in decoder.feed(data):
                if isinstance(item, Fault):
                    self.on_fault(item)
                elif item["type"] in COMMAND_TYPES:
                    self.on_command(item)
                else:
                    self.on_fault(Fault("unknown_command", f"unknown command type {item['type']!r}"))
