"""Checkpoints that appear atomically: written aside, synced, marked complete, renamed."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

from cockpit.config.schema import TrainConfig
from cockpit.run import disk_guard as checkpoint_space
from cockpit.run import rundir
from train_backend.channel import Emitter
from train_backend.errors import CheckpointWontFit, refused_write
from train_backend.test_aids import MARK, Aids


class AtomicCheckpoints:
    """Mixed in before SFTTrainer (`trainer_class`): checkpoints that appear atomically, written
    aside, synced, marked complete, then renamed; rotated after the rename; refused before a save
    that cannot fit the disk.

    `eval_tracker`: the eval losses (train_backend.evaluation.EvalTracker), when the run evaluates:
    the checkpoint with the lowest is kept through rotation and named in each checkpoint event.
    `aids`: a test's full disk (train_backend.test_aids).
    """

    _staging = False

    def __init__(
        self,
        *args,
        run: rundir.RunDir,
        emitter: Emitter,
        cfg: TrainConfig,
        eval_tracker=None,
        aids: Aids | None = None,
        **kw,
    ):
        self.run, self.emitter, self.cfg, self.eval_tracker = run, emitter, cfg, eval_tracker
        self.aids = aids or Aids()
        super().__init__(*args, **kw)

    def _get_output_dir(self, trial):
        if self._staging:
            return str(self.run.checkpoints_dir / rundir.STAGING_NAME)
        return super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        step = self.state.global_step
        staged = self.run.checkpoints_dir / rundir.STAGING_NAME / f"checkpoint-{step}"
        # several processes: all write into the staging folder, one per node publishes it
        local_main = self.accelerator.is_local_main_process
        if local_main:
            shutil.rmtree(staged, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        # a save that cannot fit is never started: half-written, it fills the disk and kills the run
        check = self._agree_on_space(
            space_check(self.run, self.cfg, model, step, self.is_fsdp_enabled, self.aids.free_bytes)
            if local_main
            else None
        )
        if not check.fits:
            raise CheckpointWontFit(check, _refusal_hint(self.run, self.cfg, step))
        started = time.time()
        self.emitter.emit("busy", what="save", step=step)  # silent until its checkpoint event
        self._write_staged(model, trial, staged, local_main)
        self.accelerator.wait_for_everyone()
        if local_main:
            self._publish(staged, step, started)
        self.accelerator.wait_for_everyone()

    def _write_staged(self, model, trial, staged: Path, local_main: bool) -> None:
        """HF's own save, pointed at the staging folder (`_get_output_dir`)."""
        self._staging = True
        try:
            super()._save_checkpoint(model, trial)
            if self.aids.fail_kind == "disk_full" and self.state.global_step == self.aids.fail_at_step:
                raise OSError(errno.ENOSPC, f"No space left on device {MARK}")
        except BaseException as exc:
            # a full disk: the half-written files go, so the error event and the log can still be
            # written (the empty staging folder stays: a restart reports the unfinished save)
            if local_main and refused_write(exc) is not None:
                shutil.rmtree(staged, ignore_errors=True)
            raise
        finally:
            self._staging = False

    def _publish(self, staged: Path, step: int, started: float) -> None:
        """Mark the staged checkpoint complete, sync it, rename it into place, rotate, say so."""
        checkpoints_dir = self.run.checkpoints_dir
        final = checkpoints_dir / f"checkpoint-{step}"
        marker = {"step": step, "saved_at": time.time(), "save_s": round(time.time() - started, 3)}
        (staged / rundir.COMPLETE_MARKER).write_text(json.dumps(marker))
        fsync_tree(staged)
        if final.exists():  # an older save of this step that never completed
            shutil.rmtree(final)
        os.rename(staged, final)
        fsync_dir(checkpoints_dir)
        try:
            staged.parent.rmdir()
        except OSError:
            pass
        tracker = self.eval_tracker
        best = None
        if tracker is not None:
            best = tracker.best_checkpoint([p.name for p in self.run.complete_checkpoints()])
        removed = _rotate(
            checkpoints_dir, self.cfg.output.checkpoints_kept, protect=best[0] if best else None
        )
        size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file())
        loss = None if tracker is None else tracker.losses.get(step)
        evaluated = {} if tracker is None else {"eval_loss": round(loss, 6) if loss is not None else None}
        if best is not None:
            evaluated.update(best_checkpoint=best[0], best_eval_loss=round(best[1], 6))
        self.emitter.emit(
            "checkpoint",
            step=step,
            path=str(final),
            bytes=size,
            save_s=marker["save_s"],
            removed=[p.name for p in removed],
            **evaluated,
        )

    def _agree_on_space(self, check: checkpoint_space.SpaceCheck | None) -> checkpoint_space.SpaceCheck:
        """Every rank takes the same decision. The local main process of each node measured its own
        disk (several nodes each write their own copy, save_on_each_node); all ranks gather those
        verdicts and refuse if any node's disk is short, so no rank starts a save the others skip."""
        if self.accelerator.num_processes == 1:
            return check
        import torch.distributed as dist

        verdicts: list = [None] * self.accelerator.num_processes
        dist.all_gather_object(verdicts, check)
        measured = [v for v in verdicts if v is not None]
        return next((v for v in measured if not v.fits), measured[0])


def trainer_class() -> type:
    """TRL's SFTTrainer with `AtomicCheckpoints`; build it with run=, emitter=, cfg=, eval_tracker=
    besides SFTTrainer's own arguments. trl is imported here, when the run builds its trainer."""
    from trl import SFTTrainer

    from train_backend.step_figures import FiguresAtLog

    class CockpitSFTTrainer(AtomicCheckpoints, FiguresAtLog, SFTTrainer):
        """SFTTrainer whose checkpoints appear atomically: written aside, synced, then renamed; its step
        figures read at logging steps where speed.read_figures says so."""

    return CockpitSFTTrainer


def space_check(
    run: rundir.RunDir, cfg: TrainConfig, model, step: int, fsdp: bool, free_bytes: int | None = None
) -> checkpoint_space.SpaceCheck:
    """Free space of the checkpoints' file system against this checkpoint's expected size: the last
    complete checkpoint's when there is one, else an estimate from the model's parameters.
    `free_bytes`: a test's disk (test_aids.Aids.free_bytes), that fills as checkpoints are written."""
    folder = run.checkpoints_dir
    complete = run.complete_checkpoints()
    if complete:
        size = checkpoint_space.measured_checkpoint(complete[-1])
    else:
        size = estimate_from_model(model, cfg, fsdp)
    if free_bytes is not None:
        free = max(0, free_bytes - checkpoint_space.folder_bytes(folder))
    else:
        free = checkpoint_space.free_bytes(folder)
    return checkpoint_space.check_space(step, size, free, folder)


def estimate_from_model(model, cfg: TrainConfig, fsdp: bool) -> checkpoint_space.CheckpointSize:
    trainable = trainable_bytes = all_bytes = 0
    for p in model.parameters():  # FSDP2's DTensors report the full (unsharded) numel
        size = p.numel() * p.element_size()  # packed 4-bit weights: numel and element size both packed
        all_bytes += size
        if p.requires_grad:
            trainable += p.numel()
            trainable_bytes += size
    return checkpoint_space.estimate_checkpoint_bytes(
        trainable_params=trainable,
        trainable_bytes=trainable_bytes,
        saved_weight_bytes=all_bytes if cfg.method == "full" else trainable_bytes,
        optimizer=cfg.training.optimizer,
        # under FSDP HF writes the model twice: model.safetensors and pytorch_model_fsdp.bin
        weight_copies=2 if fsdp else 1,
    )


def _refusal_hint(run: rundir.RunDir, cfg: TrainConfig, step: int) -> str:
    return f"Nothing of checkpoint-{step} was written. " + checkpoint_space.disk_full_hint(
        method=cfg.method,
        checkpoints_kept=cfg.output.checkpoints_kept,
        run_id=run.run_id,
        checkpoints=[p.name for p in run.complete_checkpoints()],
    )


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


def _rotate(folder: Path, keep: int, protect: str | None = None) -> list[Path]:
    """The oldest complete checkpoints past `keep` (but never `protect`, the best by eval loss), and
    any incomplete one, removed."""
    complete = rundir.complete_checkpoints(folder)
    kept = {p.name for p in (complete[-keep:] if keep else complete)} | {protect}
    removed = [p for p in complete if p.name not in kept]
    removed += rundir.incomplete_checkpoints(folder)
    for path in removed:
        rundir.remove_checkpoint(path)
    return [p for p in removed if not p.name.startswith(rundir.REMOVING_PREFIX)]


def clean_unfinished(run: rundir.RunDir, emitter: Emitter) -> None:
    """At the start: what a killed save or rotation left (a staging folder, a checkpoint without its
    marker, one whose removal began) is removed, and said; complete checkpoints are kept."""
    staging = run.checkpoints_dir / rundir.STAGING_NAME
    if staging.exists():
        shutil.rmtree(staging, ignore_errors=True)
        emitter.emit(
            "warning", message="removed an unfinished checkpoint save from a previous attempt", hint=""
        )
    leftovers = rundir.incomplete_checkpoints(run.checkpoints_dir)
    for path in leftovers:
        rundir.remove_checkpoint(path)
    named = [p.name.removeprefix(rundir.REMOVING_PREFIX) for p in leftovers]
    if named:
        emitter.emit(
            "warning",
            message=f"removed {', '.join(named)}: incomplete (a save or a removal cut short); never resumed",
            hint="",
        )
