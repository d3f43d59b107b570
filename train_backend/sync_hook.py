"""output.sync in the trainer: the sync worker (cockpit.sync.worker) started with the run, handed
each checkpoint as HF's trainer saves it (a callback's on_save, after the atomic rename), and given
a bounded wait at the run's end, before its last event."""

from __future__ import annotations

import sys

from cockpit import fmt
from cockpit.config.schema import TrainConfig
from cockpit.config.sync_spec import parse
from cockpit.run import rundir
from cockpit.sync.targets import open_target
from cockpit.sync.worker import SyncWorker
from train_backend.channel import Emitter

END_WAIT_S = 30.0  # a stopped or failed run: within cockpit stop's grace (cockpit.run.process)
RECORD_WAIT_S = 15.0  # the record's last copy, after the last event


def start(run: rundir.RunDir, cfg: TrainConfig, emitter: Emitter) -> SyncWorker | None:
    """The worker, when the config syncs; its thread is started (the network is its own)."""
    if cfg.output.sync is None:
        return None
    worker = SyncWorker(
        open_target(parse(cfg.output.sync)),
        run,
        emitter.emit,
        keep=cfg.output.checkpoints_kept,
        record_every_s=cfg.output.sync_record_s,
    )
    return worker.start()


def callbacks(worker: SyncWorker | None, run: rundir.RunDir) -> list:
    """The TrainerCallback that hands each saved checkpoint to the worker (none without one)."""
    if worker is None:
        return []
    from transformers import TrainerCallback

    class SyncCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            checkpoint = run.checkpoints_dir / f"checkpoint-{state.global_step}"
            if (checkpoint / rundir.COMPLETE_MARKER).is_file():  # published (checkpoints.py)
                worker.checkpoint_saved(checkpoint)
            return control

    return [SyncCallback()]


def final_saved(worker: SyncWorker | None, run: rundir.RunDir) -> None:
    if worker is not None and run.final_dir.is_dir():
        worker.final_saved(run.final_dir)


def wait(worker: SyncWorker | None, emitter: Emitter, timeout_s: float) -> None:
    """Before the run's last event: what is queued copied, for at most `timeout_s`; what is left
    is said."""
    if worker is None:
        return
    left = worker.drain(timeout_s)
    if not left:
        return
    synced = worker.synced
    has = f"; it holds {synced.checkpoint}" if synced is not None and synced.checkpoint else ""
    emitter.emit(
        "warning",
        message=f"output.sync: {', '.join(left)} not copied to {worker.text} within "
        f"{fmt.duration(timeout_s)}: the trainer ends without it{has}",
        hint="a run's end waits at most output.sync_wait_min (a stopped or failed run 30 s); copy what "
        "is left by hand from the run directory while this machine lives",
    )


def finish_wait_s(cfg: TrainConfig) -> float:
    return cfg.output.sync_wait_min * 60


def close(worker: SyncWorker | None) -> None:
    """After the run's last event: the record once more, so the copy ends as the run did."""
    if worker is not None and not worker.close(RECORD_WAIT_S):
        print(
            f"[cockpit] output.sync: the last copy of the record to {worker.text} did not end",
            file=sys.stderr,
        )
