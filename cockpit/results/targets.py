"""Which weights `cockpit chat` loads: the run's final adapter, a checkpoint, the best one by eval
loss, or a whole (merged) model folder; checked here, before any process loads torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from cockpit.paths import cockpit_command
from cockpit.run import rundir
from cockpit.run.state import RunState


class TargetError(ValueError):
    """The weights asked for are not there; the message says what is, and what to type."""


@dataclass
class ChatTarget:
    path: Path
    kind: str  # adapter (base + LoRA) | model (a whole model folder)
    label: str  # final | checkpoint-N | the folder's name
    note: str = ""  # what was chosen in the user's stead, said before loading


def resolve(run: rundir.RunDir, state: RunState, checkpoint: str | None, model_dir: str | None) -> ChatTarget:
    if model_dir is not None:
        return _model_folder(Path(model_dir).expanduser())
    complete = run.complete_checkpoints()
    names = ", ".join(p.name for p in complete) or "none"
    if checkpoint is not None:
        if checkpoint == "best":
            if not state.best_checkpoint:
                raise TargetError(
                    f"--checkpoint best: run {run.run_id} has no checkpoint with an eval loss (it needs "
                    f"dataset.eval_fraction or eval_split). Complete checkpoints: {names}"
                )
            path = run.checkpoints_dir / state.best_checkpoint
        else:
            if not checkpoint.isdigit():
                raise TargetError(f"--checkpoint {checkpoint!r}: give a step number (e.g. 100) or 'best'")
            path = run.checkpoints_dir / f"checkpoint-{int(checkpoint)}"
        if path not in complete:
            steps = ", ".join(p.name.rsplit("-", 1)[1] for p in complete)
            which = f"steps {steps}" if complete else "none"
            raise TargetError(
                f"--checkpoint {checkpoint}: run {run.run_id} has no complete {path.name}; its complete "
                f"checkpoints are: {which}. Leave --checkpoint out for the final adapter ({run.final_dir})."
            )
        return ChatTarget(path, _kind(path), path.name)
    final = run.final_dir
    if _kind(final, missing=None) is not None:
        return ChatTarget(final, _kind(final), rundir.FINAL_NAME)
    if complete:
        last = complete[-1]
        return ChatTarget(
            last,
            _kind(last),
            last.name,
            note=f"run {run.run_id} has no final adapter ({state.status}); using its last complete "
            f"checkpoint, {last.name}",
        )
    raise TargetError(
        f"run {run.run_id} has nothing to chat with: no final/ and no complete checkpoint (status: "
        f"{state.status}). Wait for its first checkpoint (output.save_steps), or give a model folder "
        "with --model."
    )


@overload
def _kind(folder: Path) -> str: ...
@overload
def _kind(folder: Path, missing: None) -> str | None: ...


def _kind(folder: Path, missing: str | None = "adapter") -> str | None:
    if (folder / "adapter_config.json").is_file():
        return "adapter"
    if (folder / "config.json").is_file():
        return "model"  # a full fine-tune saves the whole model
    return missing


def _model_folder(path: Path) -> ChatTarget:
    if not path.is_dir() or not (path / "config.json").is_file():
        raise TargetError(
            f"--model {str(path)!r}: not a model folder (no config.json). Give the folder a merge wrote "
            f"({cockpit_command()} export RUN --merge), or leave --model out for the run's adapter."
        )
    if (path / "adapter_config.json").is_file():
        base = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        raise TargetError(f"--model {str(path)!r} holds an adapter (of {base}); use --checkpoint or the run")
    return ChatTarget(path, "model", path.name)
