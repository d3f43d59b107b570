"""Commands to a live trainer through the run directory's control FIFO (only the owner can open it)."""

from __future__ import annotations

import errno
import os

from cockpit.protocol.wire import encode
from cockpit.run.rundir import RunDir


class NotRunning(RuntimeError):
    pass


def send_command(run: RunDir, name: str, sender: str = "cli") -> None:
    """Write one command to the control FIFO; NotRunning when no trainer reads it."""
    try:
        fd = os.open(run.control_path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            raise NotRunning(f"run {run.run_id} has no live trainer to take '{name}'") from None
        raise
    try:
        os.write(fd, encode(name, sender=sender))  # < PIPE_BUF: one atomic write
    finally:
        os.close(fd)
