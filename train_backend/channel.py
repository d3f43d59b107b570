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
from collections.abc import Callable

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

    def emit(self, msg_type: str, **fields) -> None:
        line = encode(msg_type, **_scrub_fields(fields, self.secrets))
        with self._lock:
            if self.broken:
                return
            try:
                view = memoryview(line)
                while view:  # a regular file takes it in one write; a pipe may not
                    written = os.write(self.fd, view)
                    view = view[written:]
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    # this message is lost, training goes on; later ones are written once space frees up
                    self.dropped += 1
                    print(f"[cockpit] event {msg_type!r} not recorded: {exc}", file=sys.stderr)
                    return
                # the reader is gone (EPIPE) or the fd is: training goes on without events
                self.broken = True
                print(f"[cockpit] protocol channel broken: {exc}; continuing without events", file=sys.stderr)


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
