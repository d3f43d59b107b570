"""Starting the end runner (cockpit.money.end_runner) beside a trainer: called by the launcher
(cockpit.run.process.launch), so it imports nothing that imports the launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cockpit.config.schema import TrainConfig
from cockpit.run.rundir import RunDir

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])  # the tree the runner imports, as the trainer


def needs_runner(cfg: TrainConfig) -> bool:
    return bool(cfg.cost.on_end or cfg.export.at_end or cfg.cost.on_idle or cfg.notify.urls)


def start(run: RunDir, trainer_pid: int) -> subprocess.Popen[bytes] | None:
    """Start the runner for this trainer, detached, its output on backend.log; None if it cannot be."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    try:
        log_fd = os.open(run.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "cockpit.money.end_runner", str(run.path), str(trainer_pid)],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            env=env,
            cwd=str(run.path),
            start_new_session=True,  # not in the trainer's group: `cockpit stop` does not reach it
            close_fds=True,
        )
    except OSError:
        return None
    finally:
        os.close(log_fd)
