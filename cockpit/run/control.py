"""Commands to a live trainer through the run directory's control FIFO (only the owner can open it)."""

from __future__ import annotations

import errno
import os
import stat

from cockpit import paths
from cockpit.protocol.wire import encode
from cockpit.run.rundir import RunDir


class NotRunning(RuntimeError):
    pass


class NotTheFifo(NotRunning):
    """The control path is there but is not the run's FIFO (a regular file, a directory, another
    user's): nothing written there reaches the trainer."""


def send_command(run: RunDir, name: str, sender: str = "cli") -> None:
    """Write one command to the control FIFO; NotRunning when no trainer reads it, NotTheFifo when the
    path is not the run's FIFO."""
    _check_fifo(run, name)
    try:
        fd = os.open(run.control_path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            raise NotRunning(f"run {run.run_id} has no live trainer to take '{name}'") from None
        raise
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # replaced between the check and the open
            raise NotTheFifo(_not_the_fifo_text(run, name, "was replaced while it was opened"))
        os.write(fd, encode(name, sender=sender))  # < PIPE_BUF: one atomic write
    finally:
        os.close(fd)


def _check_fifo(run: RunDir, name: str) -> None:
    """NotTheFifo unless the control path is a FIFO owned by this user (lstat: a symlink is refused)."""
    try:
        info = os.lstat(run.control_path)
    except FileNotFoundError:
        raise NotRunning(f"run {run.run_id} has no live trainer to take '{name}'") from None
    if not stat.S_ISFIFO(info.st_mode):
        raise NotTheFifo(_not_the_fifo_text(run, name, f"is {paths.file_kind(info.st_mode)}"))
    if info.st_uid != os.getuid():
        raise NotTheFifo(_not_the_fifo_text(run, name, f"belongs to another user (uid {info.st_uid})"))


def _not_the_fifo_text(run: RunDir, name: str, what: str) -> str:
    return (
        f"'{name}' was not sent: the run's control channel {run.control_path} {what}, not the FIFO the "
        "trainer reads (made when the run started, owned by you)"
    )
