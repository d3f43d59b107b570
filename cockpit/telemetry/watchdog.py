"""NVML calls with a deadline: one worker thread, and a stuck call abandoned, not waited for.

A call that overruns its timeout raises `CallStalled` in the caller; its worker thread is left
to finish (a daemon) and a new worker serves later calls. At most `MAX_STUCK_THREADS` threads
are ever abandoned. Used by `cockpit.telemetry.gpu.GpuReader`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

MAX_STUCK_THREADS = 4


class CallStalled(Exception):
    """An NVML call did not return in time, or was not started because too many are stuck."""


class _Job:
    __slots__ = ("args", "done", "error", "fn", "result", "tag")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], tag: Any) -> None:
        self.fn, self.args, self.tag = fn, args, tag
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Worker:
    def __init__(self, watchdog: Watchdog) -> None:
        self.watchdog = watchdog
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.abandoned = False
        self.thread = threading.Thread(target=self._run, name="cockpit-nvml", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                job.result = job.fn(*job.args)
            except BaseException as exc:
                job.error = exc
            with self.watchdog.lock:
                job.done.set()
                if self.abandoned:
                    self.watchdog.stuck[job.tag] -= 1
                    if not self.watchdog.stuck[job.tag]:
                        del self.watchdog.stuck[job.tag]
                    return


class Watchdog:
    """Runs calls on one worker thread; a call that overruns leaves its thread behind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stuck: dict[Any, int] = {}  # tag -> calls still stuck on abandoned threads
        self._worker: _Worker | None = None

    def stuck_count(self) -> int:
        with self.lock:
            return sum(self.stuck.values())

    def is_stuck(self, tag: Any) -> bool:
        with self.lock:
            return tag in self.stuck

    def stuck_elsewhere(self, tag: Any) -> int:
        """Calls stuck under other tags than this one."""
        with self.lock:
            return sum(n for t, n in self.stuck.items() if t != tag)

    def call(self, timeout_s: float, tag: Any, fn: Callable[..., Any], *args: Any) -> Any:
        with self.lock:
            if self._worker is None:
                if sum(self.stuck.values()) >= MAX_STUCK_THREADS:
                    raise CallStalled(f"{MAX_STUCK_THREADS} NVML calls are stuck; not starting another")
                self._worker = _Worker(self)
            worker = self._worker
        job = _Job(fn, args, tag)
        worker.jobs.put(job)
        if not job.done.wait(max(timeout_s, 0.0)):
            with self.lock:
                if not job.done.is_set():
                    worker.abandoned = True
                    self._worker = None
                    self.stuck[tag] = self.stuck.get(tag, 0) + 1
                    raise CallStalled(f"did not return within {timeout_s:.1f} s")
        if job.error is not None:
            raise job.error
        return job.result

    def close(self) -> None:
        with self.lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.jobs.put(None)
