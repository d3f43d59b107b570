"""What a killed save or rotation leaves in checkpoints/ (a checkpoint with some of its files and no
marker, a removal begun) is cleaned on start and on rotation; complete checkpoints are kept."""

from __future__ import annotations

import json

from cockpit.run import rundir
from train_backend.checkpoints import _rotate, clean_unfinished


class Recorder:
    def __init__(self):
        self.events = []

    def emit(self, msg_type, **fields):
        self.events.append((msg_type, fields))


def checkpoint(folder, step, complete=True, files=12):
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for i in range(files):
        (path / f"part-{i}.bin").write_bytes(b"x" * 10)
    if complete:
        (path / rundir.COMPLETE_MARKER).write_text(json.dumps({"step": step}))
    return path


def test_a_half_deleted_checkpoint_is_removed_on_start_and_said(tmp_path):
    run = rundir.RunDir(tmp_path)
    checkpoint(run.checkpoints_dir, 8, complete=False, files=2)  # SIGKILL while rotating it out
    checkpoint(run.checkpoints_dir, 12)
    checkpoint(run.checkpoints_dir, 16)
    (run.checkpoints_dir / f"{rundir.REMOVING_PREFIX}checkpoint-4").mkdir()
    emitter = Recorder()
    clean_unfinished(run, emitter)
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["checkpoint-12", "checkpoint-16"]
    (warning,) = emitter.events
    assert (
        warning[0] == "warning" and "removed checkpoint-4, checkpoint-8: incomplete" in warning[1]["message"]
    )


def test_rotation_removes_incomplete_checkpoints_and_renames_before_deleting(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    for step in (4, 8, 12):
        checkpoint(folder, step)
    checkpoint(folder, 6, complete=False, files=3)
    deleted = []
    real = rundir.shutil.rmtree
    monkeypatch.setattr(rundir.shutil, "rmtree", lambda p, **kw: (deleted.append(p.name), real(p, **kw)))
    removed = _rotate(folder, keep=2)
    assert [p.name for p in removed] == ["checkpoint-4", "checkpoint-6"]
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint-12", "checkpoint-8"]
    assert deleted and all(name.startswith(rundir.REMOVING_PREFIX) for name in deleted)
