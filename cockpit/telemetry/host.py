"""The host side of telemetry: CPU, RAM, swap, disk and network counters, the trainer's tree.

`HostCounters` is the edge: every callable reads psutil (or cgroup files) by default and can be
swapped in tests. `Rate` turns counters into per-second rates between samples.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

MIN_RATE_S = 0.1  # rates over a shorter interval are noise
RELIST_S = 2.0  # the trainer's descendants (data-loader workers) are listed again this often


class _CpuPercent:
    """Per-core CPU % since the previous call; None on the first call.

    Computed from psutil.cpu_times rather than psutil.cpu_percent, whose memory is per thread and
    shared with any other caller.
    """

    def __init__(self) -> None:
        self._last: list[tuple[float, float]] | None = None
        self._result: list[float] | None = None

    def __call__(self) -> list[float] | None:
        now = [_busy_total(t) for t in psutil.cpu_times(percpu=True)]
        last = self._last
        if last is None or len(last) != len(now):
            self._last, self._result = now, None
            return None
        if min(t1 - t0 for (_, t0), (_, t1) in zip(last, now)) < MIN_RATE_S:
            return self._result  # too soon after the last call to tell
        self._last = now
        self._result = [
            min(100.0, max(0.0, 100.0 * (b1 - b0) / (t1 - t0))) for (b0, t0), (b1, t1) in zip(last, now)
        ]
        return self._result


def _busy_total(times: Any) -> tuple[float, float]:
    """Busy and total seconds of one core, the way psutil counts them (guest time is in user)."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - times.idle - getattr(times, "iowait", 0.0), total


def _usable_cpu_count() -> int | None:
    count: int | None
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count()
    quota = _cgroup_cpu_quota()
    if count and quota:
        count = min(count, max(1, int(quota)))
    return count


def _cgroup_cpu_quota() -> float | None:
    """CPUs allowed by a cgroup quota (containers on rented boxes often have one), else None."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]  # cgroup v2
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())  # cgroup v1
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def _ram() -> tuple[int, int]:
    vm = psutil.virtual_memory()
    return vm.total - vm.available, vm.total


def _swap() -> tuple[int, int]:
    sw = psutil.swap_memory()
    return sw.used, sw.total


def _disk_bytes() -> tuple[int, int] | None:
    io = psutil.disk_io_counters(perdisk=False)
    return None if io is None else (io.read_bytes, io.write_bytes)


def _net_bytes() -> tuple[int, int] | None:
    nics = psutil.net_io_counters(pernic=True)
    real = [c for name, c in nics.items() if name != "lo" and not name.startswith("lo")]
    if not real:
        return None
    return sum(c.bytes_recv for c in real), sum(c.bytes_sent for c in real)


def descendants(root: psutil.Process) -> list[psutil.Process]:
    """The processes under `root`, from /proc/<pid>/task/<tid>/children: the cost grows with the
    trainer's tree and threads, not with the host. psutil's children(recursive=True) reads the stat
    file of every process of the host, which on a big GPU host (thousands of pids, kernel threads
    among them) cost more than everything else the live view does; it is the fallback where
    the kernel has no children files."""
    found: list[psutil.Process] = []
    seen = {root.pid}
    todo = [root.pid]
    try:
        while todo:
            pid = todo.pop()
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except (FileNotFoundError, ProcessLookupError):
                continue  # gone since its parent listed it
            for tid in tasks:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                        children = [int(c) for c in f.read().split()]
                except (FileNotFoundError, ProcessLookupError):
                    continue  # a thread that ended (a root gone is found when it is read)
                for child in children:
                    if child in seen:
                        continue
                    seen.add(child)
                    todo.append(child)
                    try:
                        found.append(psutil.Process(child))
                    except psutil.Error:
                        continue
    except (PermissionError, NotADirectoryError, ValueError):
        return root.children(recursive=True)
    return found


class ProcessTree:
    """CPU seconds and RSS of a process and its descendants; None when it is gone.

    Listing the descendants reads every process's stat file (psutil's parent map), the costliest
    host read by far, so they are listed again only every `relist_s`; in between, the listed ones
    are read. The CPU sum is a counter for rates and stays continuous: a process's children_*
    times hold its reaped children (a data-loader worker that exits), and a descendant counts
    from the listing that first finds it, not with the CPU it used before (that would show as a
    spike), so a new worker's first `relist_s` at most go uncounted.
    """

    def __init__(self, relist_s: float = RELIST_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.relist_s = relist_s
        self.clock = clock
        self._follow(None)

    def _follow(self, root: psutil.Process | None) -> None:
        self._root = root
        self._descendants: list[psutil.Process] = []
        self._listed_at = -math.inf
        self._known: set[psutil.Process] = set()  # descendants counted so far (pid and start time)
        self._before_known_s = 0.0  # the CPU they had used when first listed

    def __call__(self, pid: int) -> tuple[float, int] | None:
        try:
            if self._root is None or self._root.pid != pid:
                self._follow(psutil.Process(pid))
            root, now = self._root, self.clock()
            assert root is not None  # followed just above when it was not
            listed = now - self._listed_at >= self.relist_s
            if listed:
                self._descendants, self._listed_at = descendants(root), now
        except psutil.Error:
            self._root = None
            return None
        cpu_s, rss = 0.0, 0
        for proc in [root, *self._descendants]:
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    used_s = t.user + t.system + t.children_user + t.children_system
                    rss += proc.memory_info().rss
            except psutil.Error:
                if proc is root:
                    self._root = None
                    return None
                continue  # gone: once its parent reaps it, its time is in the parent's children_*
            if listed and proc is not root and proc not in self._known:
                self._known.add(proc)
                self._before_known_s += used_s
            cpu_s += used_s
        if listed:
            self._known.intersection_update(self._descendants)
        return cpu_s - self._before_known_s, rss


def _process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None  # gone, or (in a container) a host pid this namespace cannot see


@dataclass
class HostCounters:
    """The host edge as raw counters; the defaults read psutil, tests swap any of them."""

    cpu_percent_per_core: Callable[[], list[float] | None] = field(default_factory=_CpuPercent)
    cpu_count_usable: Callable[[], int | None] = _usable_cpu_count
    memory: Callable[[], tuple[int, int]] = _ram  # used, total
    swap: Callable[[], tuple[int, int]] = _swap  # used, total
    disk_bytes: Callable[[], tuple[int, int] | None] = _disk_bytes  # read, written since boot
    net_bytes: Callable[[], tuple[int, int] | None] = _net_bytes  # received, sent since boot
    process_tree: Callable[[int], tuple[float, int] | None] = field(default_factory=ProcessTree)  # cpu s, rss
    process_name: Callable[[int], str | None] = _process_name


def safe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


class Rate:
    """Per-second rates of a tuple of counters; None at first and after a counter went back.

    Counters tick coarsely (CPU time in 10 ms steps), so a baseline younger than MIN_RATE_S is
    kept and the previous rates are given again instead of a noisy one.
    """

    def __init__(self) -> None:
        self._last: tuple[float, tuple[float, ...]] | None = None
        self._rates: tuple[float | None, ...] | None = None

    def __call__(self, t: float, counters: tuple[float, ...] | None) -> tuple[float | None, ...] | None:
        last = self._last
        if counters is None or last is None or t < last[0] or len(counters) != len(last[1]):
            self._last, self._rates = (None if counters is None else (t, counters)), None
            return None
        dt = t - last[0]
        if dt < MIN_RATE_S:
            return self._rates
        self._last = (t, counters)
        self._rates = tuple(None if now < was else (now - was) / dt for now, was in zip(counters, last[1]))
        return self._rates
