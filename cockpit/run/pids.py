"""Telling a process from a later one that got its pid: its start in clock ticks since boot.

psutil's `create_time()` is that start plus the boot time, which Linux derives from the wall
clock (/proc/stat btime): a step of the clock (NTP setting it soon after boot, a VM resumed or
moved to another host) moves the boot time, and with it the create time of every process read
after the step, so a record taken before it no longer matches the very same process (`cockpit
stop` then found "not running" a trainer that ran on). The start in ticks (field 22 of
/proc/PID/stat) never moves. A record keeps both; a record without ticks, or a system without
/proc, is judged by the create time within a second, as before.
"""

from __future__ import annotations

from typing import Any

import psutil

CREATE_TIME_SLACK_S = 1.0


def start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks since boot, or None (no such process, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])  # fields after `(comm)` start at 3
    except (OSError, ValueError, IndexError):
        return None


def identity(pid: int) -> dict[str, Any]:
    """What a record (trainer.json, rank-N.json, a client's file) keeps to know the process again."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = None
    return {"create_time": created, "start_ticks": start_ticks(pid)}


def same_process(proc: psutil.Process, record: dict[str, Any]) -> bool:
    """`proc` is the process `record` was taken of, not a later one with its pid."""
    ticks: object = record.get("start_ticks")
    if ticks is not None:
        now = start_ticks(proc.pid)
        if now is not None:
            return now == ticks
    created = record.get("create_time")
    if created is None:
        return True
    try:
        return abs(proc.create_time() - float(created)) <= CREATE_TIME_SLACK_S
    except (psutil.Error, TypeError, ValueError):
        return False
