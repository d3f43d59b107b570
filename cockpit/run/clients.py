"""Clients watching a run say so with a presence file, `clients/<pid>.json` in its run directory,
made by `attached(run)` and removed when they leave; one whose process is gone (killed, SIGHUP)
does not count. The end runner's idle watch reads them (cockpit.money.idle_watch)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import psutil

from cockpit.run import pids, rundir

CLIENTS_DIR = "clients"


@contextlib.contextmanager
def attached(run: rundir.RunDir) -> Iterator[None]:
    """While inside, this process counts as a client watching `run` (best effort: a read-only run
    directory only means the watch cannot see this client)."""
    path = run.path / CLIENTS_DIR / f"{os.getpid()}.json"
    written = True
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.write_text(json.dumps({"pid": os.getpid(), **pids.identity(os.getpid())}))
    except OSError:
        written = False
    try:
        yield
    finally:
        if written:
            with contextlib.suppress(OSError):
                path.unlink()


def attached_clients(runs: list[rundir.RunDir]) -> list[str]:
    """'RUN_ID (pid N)' for each live client of these runs; stale presence files are left alone."""
    found = []
    for run in runs:
        for path in sorted((run.path / CLIENTS_DIR).glob("*.json")):
            try:
                record = json.loads(path.read_text())
                proc = psutil.Process(int(record["pid"]))
                if not pids.same_process(proc, record):
                    continue  # the pid is someone else's now
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
            except (OSError, ValueError, KeyError, TypeError, psutil.Error):
                continue
            found.append(f"{run.run_id} (pid {record['pid']})")
    return found
