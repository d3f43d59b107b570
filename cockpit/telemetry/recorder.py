"""The telemetry recorder: a small process beside the trainer that writes `telemetry.jsonl`.

    python -m cockpit.telemetry.recorder RUN_DIR TRAINER_PID

Started by the trainer as its child, in its process group, so `cockpit stop` reaches it;
it samples GPU and host once a second whether or not a client is attached, writes 5 s
bins (cockpit.telemetry.history) and ends when the trainer does. It is a process of its own, not a
thread in the trainer, so sampling never competes with training for the trainer's GIL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil

from cockpit.run.rundir import RunDir
from cockpit.telemetry.history import TELEMETRY_NAME, TelemetryRecorder
from cockpit.telemetry.sampler import Sampler

INTERVAL_S = 1.0


def record(run: RunDir, trainer_pid: int, interval_s: float = INTERVAL_S, bin_s: float = 5.0) -> int:
    try:
        trainer = psutil.Process(trainer_pid)
    except psutil.Error:
        return 0
    sampler = Sampler(trainer_pid=trainer_pid)
    recorder = TelemetryRecorder(run.path / TELEMETRY_NAME, bin_s=bin_s)
    try:
        while trainer.is_running() and trainer.status() != psutil.STATUS_ZOMBIE:
            recorder.add(sampler.sample())
            time.sleep(interval_s)
    except psutil.Error:
        pass  # the trainer is gone
    finally:
        recorder.close()
        sampler.close()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    return record(RunDir(Path(argv[0]).resolve()), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
