"""The terminal going away (an SSH drop, a closed tmux pane, a pty master closed) -> the app leaves.

When the master side of a pseudo-terminal closes, the kernel hangs up its slave: a read of it
returns end-of-file at once, a write fails with EIO, and select() calls it readable forever. If
the slave is the process's controlling terminal (as sshd sets it up) the session also gets
SIGHUP; if it is not (a process started with its own session and the slave only as its standard
streams, as a harness does) nothing else says so. Textual's input thread then selects, reads
nothing, and selects again, for ever: a client that never exits and burns a core. Its writer
thread dies on the first EIO, and a full write queue can then block the app's own loop.

`TerminalWatch` notices both (SIGHUP, and POLLHUP/POLLERR on the standard streams' terminal,
polled without reading a byte), then: points stdout and stderr at /dev/null (the app's last
writes and the CLI's closing message go nowhere instead of failing), asks the app to leave (as
its detach key does), and if the process has not ended within `grace_s` (the app's loop blocked
on a dead writer), runs `last_words` (bounded) and ends the process with `code()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

GRACE_S = 5.0  # for the app's own exit before the process is ended
LAST_WORDS_S = 2.0
POLL_MS = 1000  # the watch thread's poll timeout: only how often it looks at `stop`
GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


def terminal_fds() -> list[int]:
    """The standard streams that are terminals (the ones a hangup reaches)."""
    fds = []
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                fds.append(fd)
    return fds


def hung_up(fds: list[int], timeout_ms: int = 0) -> bool:
    """Whether any of `fds` reports a hangup or an error (waiting up to `timeout_ms`); reads nothing."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, 0)  # POLLHUP, POLLERR and POLLNVAL are always reported
    try:
        return any(mask & GONE for _fd, mask in poller.poll(timeout_ms))
    except OSError:
        return True


class TerminalWatch:
    def __init__(
        self,
        leave: Callable[[], None],
        code: Callable[[], int],
        *,
        last_words: Callable[[], None] | None = None,
        grace_s: float = GRACE_S,
    ) -> None:
        self._leave = leave  # called from any thread or a signal handler: only schedules the exit
        self.code = code
        self._last_words = last_words
        self.grace_s = grace_s
        self.stop_event = threading.Event()
        self._gone = threading.Event()
        self._fds = terminal_fds()
        self._sighup_before = None
        self.why = ""
        self._thread = threading.Thread(target=self._poll, name="cockpit-terminal", daemon=True)

    @property
    def gone(self) -> bool:
        return self._gone.is_set()

    def start(self) -> TerminalWatch:
        """On the main thread (it sets the SIGHUP handler), once the app runs."""
        if threading.current_thread() is threading.main_thread():
            self._sighup_before = signal.signal(
                signal.SIGHUP, lambda _sig, _frame: self.terminal_gone("SIGHUP")
            )
        if self._fds:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the poll (the app is leaving). Once the terminal has gone, the process still ends
        within `grace_s`: nothing after the app can be shown anyway."""
        self.stop_event.set()
        if (
            self._sighup_before is not None
            and not self.gone
            and threading.current_thread() is threading.main_thread()
        ):
            signal.signal(signal.SIGHUP, self._sighup_before)
            self._sighup_before = None

    def _poll(self) -> None:
        while not self.stop_event.is_set():
            if hung_up(self._fds, POLL_MS):
                self.terminal_gone("hangup")
                return

    def terminal_gone(self, why: str) -> None:
        if self._gone.is_set():
            return
        self._gone.set()
        self.why = why
        _quiet_standard_streams()
        threading.Thread(target=self._end_if_stuck, name="cockpit-terminal-gone", daemon=True).start()
        self._leave()

    def _end_if_stuck(self) -> None:
        time.sleep(self.grace_s)  # a process that ends before this (as usual) never wakes it
        if self._last_words is not None:  # bounded: a stuck one does not keep the process alive
            words = threading.Thread(target=self._last_words, name="cockpit-last-words", daemon=True)
            words.start()
            words.join(LAST_WORDS_S)
        code = 1
        with contextlib.suppress(Exception):
            code = self.code()
        os._exit(code)


def _quiet_standard_streams() -> None:
    """stdout and stderr: /dev/null. stdin stays: a hung-up terminal reads as end-of-file at once,
    which ends the input thread's reads as soon as the app sets its exit event (a stdin that
    never had data would leave a read that select() had already promised blocked for ever, and
    the app's exit waits for that thread)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def leave_when_terminal_goes(
    app,
    code: Callable[[], int],
    *,
    leave: Callable[[], None] | None = None,
    last_words: Callable[[], None] | None = None,
) -> TerminalWatch | None:
    """From an app's on_mount (its loop's thread): when the terminal goes, `leave()` runs on the
    app's loop (default: `app.exit(code())`). None for a headless app (a test's: no terminal).
    Stop the returned watch in on_unmount."""
    if app.is_headless:
        return None
    loop = asyncio.get_running_loop()
    leave = leave or (lambda: app.exit(code()))
    return TerminalWatch(lambda: loop.call_soon_threadsafe(leave), code, last_words=last_words).start()
