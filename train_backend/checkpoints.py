"""Checkpoints that appear atomically: written aside, synced, marked complete, renamed."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

from cockpit import rundir
from cockpit.config import TrainConfig
from train_backend.channel import Emitter


def make_trainer_class(emitter: Emitter, run: rundir.RunDir, cfg: TrainConfig):
    from trl import SFTTrainer

    keep = cfg.output.checkpoints_kept

    class CockpitSFTTrainer(SFTTrainer):
        """SFTTrainer whose checkpoints appear atomically: written aside, synced, then renamed."""

        _staging = False

        def _get_output_dir(self, trial):
            if self._staging:
                return str(run.checkpoints_dir / rundir.STAGING_NAME)
            return super()._get_output_dir(trial)

        def _save_checkpoint(self, model, trial):
            step = self.state.global_step
            staging_root = run.checkpoints_dir / rundir.STAGING_NAME
            staged = staging_root / f"checkpoint-{step}"
            final = run.checkpoints_dir / f"checkpoint-{step}"
            # several processes: all write into the staging folder, one per node publishes it
            local_main = self.accelerator.is_local_main_process
            if local_main:
                shutil.rmtree(staged, ignore_errors=True)
            self.accelerator.wait_for_everyone()
            started = time.time()
            self._staging = True
            try:
                super()._save_checkpoint(model, trial)
                if cfg.debug.fail_kind == "disk_full" and step == cfg.debug.fail_at_step:
                    raise OSError(errno.ENOSPC, "No space left on device (injected by debug.fail_at_step)")
            finally:
                self._staging = False
            self.accelerator.wait_for_everyone()
            if not local_main:
                self.accelerator.wait_for_everyone()
                return
            marker = {"step": step, "saved_at": time.time(), "save_s": round(time.time() - started, 3)}
            (staged / rundir.COMPLETE_MARKER).write_text(json.dumps(marker))
            fsync_tree(staged)
            if final.exists():  # an older save of this step that never completed
                shutil.rmtree(final)
            os.rename(staged, final)
            fsync_dir(run.checkpoints_dir)
            try:
                staging_root.rmdir()
            except OSError:
                pass
            removed = _rotate(run.checkpoints_dir, keep)
            size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file())
            emitter.emit(
                "checkpoint",
                step=step,
                path=str(final),
                bytes=size,
                save_s=marker["save_s"],
                removed=[p.name for p in removed],
            )
            self.accelerator.wait_for_everyone()

    return CockpitSFTTrainer


def fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(folder)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rotate(folder: Path, keep: int) -> list[Path]:
    complete = rundir.complete_checkpoints(folder)
    removed = complete[:-keep] if keep and len(complete) > keep else []
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
