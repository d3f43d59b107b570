"""`cockpit runs`: every run with its status, start, duration, final loss, cost, config and disk,
and what `--rm` and `--prune` would delete (the disks of rented boxes are small).

Rows are folded from each run's events (the same `RunState` the views use) and its directory;
deleting never touches a run whose trainer is alive, checked again right before each delete.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cockpit import fmt, paths
from cockpit.run import journal, process
from cockpit.run.rundir import STAGING_NAME, RunDir
from cockpit.run.status import run_status
from cockpit.sync import text as sync_text

ENDED = ("finished", "stopped", "failed")


@dataclass(frozen=True)
class RunRow:
    run: str
    status: str
    step: int
    total_steps: int | None
    detail: str
    path: str
    started: str | None  # ISO time of the first trainer's start, local time
    started_ts: float | None
    duration_s: float  # wall time of all attempts: what was billed
    final_loss: float | None  # the last logged training loss
    cost_usd: float | None
    config: str | None  # the config file it was started from
    disk_bytes: int  # the whole run directory
    checkpoints_bytes: int  # checkpoints/ alone: what --prune frees (most of it)
    adapter: str | None  # final/ when there is one
    on_end: dict[str, Any] | None  # the last end_command event: state, command, returncode (cost.on_end)
    sync: dict[str, Any] | None = None  # output.sync: what is on the target (RunState.sync)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def folder_bytes(path: Path) -> int:
    total = 0
    if not path.exists():
        return 0
    for child in path.rglob("*"):
        try:
            if child.is_file() and not child.is_symlink():
                total += child.stat().st_size
        except OSError:
            continue
    return total


def row_of(run: RunDir) -> RunRow:
    status = run_status(run)
    state = journal.fold(run.events_path)
    started_ts = state.attempts[0].started_ts if state.attempts else None
    # a trainer that runs (or waits, paused) is billed up to now, as the live view counts it, not
    # up to its last event: a paused run writes none until it resumes
    now = time.time() if status.state in ("running", "paused") else None
    return RunRow(
        run=run.run_id,
        status=status.state,
        step=status.step,
        total_steps=status.total_steps,
        detail=status.detail,
        path=str(run.path),
        started=datetime.fromtimestamp(started_ts).isoformat(timespec="seconds") if started_ts else None,
        started_ts=started_ts,
        duration_s=round(state.billed_s(now), 2),
        final_loss=state.loss,
        cost_usd=state.cost_so_far(now),
        config=run.config_name(),
        disk_bytes=folder_bytes(run.path),
        checkpoints_bytes=folder_bytes(run.checkpoints_dir),
        adapter=str(run.final_dir) if run.final_dir.is_dir() else None,
        on_end=_end_command(state.end_command),
        sync=state.sync or None,
    )


def _end_command(event: dict[str, Any] | None) -> dict[str, Any] | None:
    if not event:
        return None
    keys = ("state", "command", "returncode", "error", "duration_s", "timeout_s", "ts")
    return {k: event[k] for k in keys if k in event}


def rows(runs: list[RunDir]) -> list[RunRow]:
    return [row_of(run) for run in runs]


def size_text(n_bytes: int) -> str:
    if n_bytes < 2**20:
        return f"{n_bytes / 2**10:.0f} KiB"
    if n_bytes < 2**30:
        return f"{n_bytes / 2**20:.1f} MiB"
    return fmt.gib(n_bytes, 1)


def table_lines(found: list[RunRow]) -> list[str]:
    """The table for a terminal of 80 columns: a row of figures per run, under it when it started,
    how long it ran and its config, then why it failed and a failed end command."""
    head = ("RUN", "STATUS", "STEPS", "LOSS", "COST", "DISK")
    body = [
        (
            r.run,
            r.status,
            f"{r.step}/{r.total_steps or '?'}",
            fmt.loss(r.final_loss),
            fmt.money(r.cost_usd),
            size_text(r.disk_bytes),
        )
        for r in found
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    right = {2, 3, 4, 5}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    out = [line(head).rstrip()]
    for r, cells in zip(found, body):
        out.append(line(cells).rstrip())
        started = r.started[:16].replace("T", " ") if r.started else "never started"
        took = f", ran {fmt.duration(r.duration_s)}" if r.started_ts else ""
        out.append(f"  started {started}{took}, config {r.config or '-'}")
        if r.status == "failed" and r.detail:
            out.append(f"  {r.detail}")
        if r.on_end and r.on_end.get("state") == "failed":
            why = r.on_end.get("error") or f"exit {r.on_end.get('returncode')}"
            out.append(f"  on_end FAILED ({why}): {r.on_end.get('command')} (see its backend.log)")
        elif r.on_end:
            out += on_end_lines(r.on_end, time.time())
        synced = sync_text.runs_line(r.sync or {})
        if synced:
            out.append(f"  {synced}")
    return out


def on_end_lines(on_end: dict[str, Any], now_ts: float) -> list[str]:
    """cost.on_end still running (with its limit), timed out, or started and never ended (its runner
    gone: past its limit, it cannot be running)."""
    state, command = on_end.get("state"), on_end.get("command")
    limit = on_end.get("timeout_s")
    if state == "timed_out":
        took = fmt.duration(on_end.get("duration_s"))
        return [
            f"  on_end TIMED OUT after {took} (cost.on_end_timeout_min), ended: {command} (see backend.log)"
        ]
    if state != "started" or not isinstance(on_end.get("ts"), (int, float)):
        return []
    running = now_ts - on_end["ts"]
    if isinstance(limit, (int, float)) and running > limit + 60:
        return [
            f"  on_end started {fmt.duration(running)} ago and never ended (its runner killed?): {command}"
        ]
    bound = f" of at most {fmt.duration(limit)}" if isinstance(limit, (int, float)) else ""
    return [f"  on_end running for {fmt.duration(running)}{bound}: {command}"]


# ---------------------------------------------------------------- freeing disk


@dataclass(frozen=True)
class Removal:
    run: RunDir
    paths: tuple[Path, ...]  # what goes
    n_bytes: int
    what: str  # for the question: "the whole run", "2 checkpoints (final/ kept)"
    whole_run: bool = False


class StillRunning(RuntimeError):
    """The run has a live trainer: nothing of it is deleted."""


def plan_rm(run: RunDir) -> Removal:
    if process.is_alive(run):
        raise StillRunning(
            f"run {run.run_id} is still running: nothing deleted. Stop it first "
            f"({paths.cockpit_command()} stop {run.run_id})"
        )
    return Removal(run, (run.path,), folder_bytes(run.path), "the whole run directory", whole_run=True)


def plan_prune(runs: list[RunDir]) -> tuple[list[Removal], list[str]]:
    """Checkpoints of every ended run: all of a finished run with final/; of a stopped or failed
    one all but the newest complete checkpoint (a restart or an export goes on from it).
    Returns the removals and a line for each run left alone because it is running."""
    removals, skipped = [], []
    for run in runs:
        if process.is_alive(run):
            skipped.append(f"{run.run_id}: running, left alone")
            continue
        state = run_status(run).state
        if state not in ENDED or not run.checkpoints_dir.is_dir():
            continue
        complete = run.complete_checkpoints()
        everything = sorted(
            p
            for p in run.checkpoints_dir.iterdir()
            if p.name.startswith("checkpoint-") or p.name == STAGING_NAME
        )
        keep: set[Path] = set()
        if state == "finished" and run.final_dir.is_dir():
            kept = "final/ kept"
        elif complete:
            keep = {complete[-1]}
            kept = f"{complete[-1].name} kept"
        else:
            kept = "no complete checkpoint to keep"
        going = tuple(p for p in everything if p not in keep)
        if not going:
            continue
        n = len(going)
        what = f"{n} checkpoint folder{'s' if n != 1 else ''} ({kept})"
        removals.append(Removal(run, going, sum(folder_bytes(p) for p in going), what))
    return removals, skipped


def plan_lines(removals: list[Removal]) -> list[str]:
    lines = [f"  {r.run.run_id}: {r.what}, {size_text(r.n_bytes)}" for r in removals]
    total = sum(r.n_bytes for r in removals)
    lines.append(f"frees {size_text(total)}")
    return lines


def execute(removal: Removal) -> int:
    """Delete what `removal` names; StillRunning if its trainer came alive since the plan."""
    if process.is_alive(removal.run):
        raise StillRunning(f"run {removal.run.run_id} started again meanwhile: nothing of it deleted")
    for path in removal.paths:
        shutil.rmtree(path, ignore_errors=False)
    if removal.whole_run:
        link = paths.runs_root() / removal.run.run_id
        if link.is_symlink():
            link.unlink()
    return removal.n_bytes
