"""`cockpit restart --from TARGET`: a run directory rebuilt from its synced copy on a new machine.

The newest run at the target (or the one named) is fetched into `runs/.restoring-<id>/`: its config,
its events and the checkpoint its manifest names, each of that checkpoint's files checked against
the manifest's size; then the run directory's own parts are made (backend.log, the control FIFO),
a `sync` event says where it came from, and one rename puts it in place. The trainer then resumes
from that checkpoint as from any of its own: the step count, the optimizer, the data order go on.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cockpit import fmt, paths
from cockpit.config.sync_spec import parse
from cockpit.run import journal, rundir
from cockpit.sync.failures import classify
from cockpit.sync.manifest import RECORD_FILES, Manifest
from cockpit.sync.targets import Target, open_target

RESTORING_PREFIX = ".restoring-"


class RestoreError(RuntimeError):
    """The copy cannot be had or is not whole; nothing was made on this machine."""


@dataclass(frozen=True)
class Restored:
    run: rundir.RunDir
    manifest: Manifest
    others: list[str]  # the other runs at the target

    def line(self, text: str) -> str:
        where = (
            f"{self.manifest.checkpoint} (step {self.manifest.step})"
            if self.manifest.checkpoint
            else "no checkpoint (it begins again at step 0)"
        )
        age = fmt.duration(max(0.0, time.time() - self.manifest.synced_at))
        also = f"; the target also holds {', '.join(self.others)}" if self.others else ""
        return (
            f"restored run {self.run.run_id} from {text}: {where}, copied there {age} ago, with its config "
            f"and events, into {self.run.path}{also}"
        )


def restore(text: str, run_id: str | None = None, root: Path | None = None) -> Restored:
    """Rebuild the run from the target `text` under `root` (the runs folder); RestoreError, or
    ConfigError for a target that is no target."""
    spec = parse(text, key="--from")
    target = open_target(spec)
    try:
        found = target.list_manifests()
    except Exception as exc:
        failure = classify(exc, spec)
        raise RestoreError(f"cannot read {text}: {failure.reason}. {failure.hint}") from None
    chosen = _choose(found, run_id, text)
    root = root or paths.runs_root()
    place = root / chosen.run_id
    if place.exists() or place.is_symlink():
        me = paths.cockpit_command()
        raise RestoreError(
            f"run {chosen.run_id} is already on this machine ({place}): `{me} restart {chosen.run_id}` "
            f"goes on from its own checkpoints. To take the copy at {text} instead, remove it first: "
            f"{me} runs --rm {chosen.run_id}"
        )
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = root / f"{RESTORING_PREFIX}{chosen.run_id}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    try:
        _fetch(target, chosen, staging, text)
        _complete(staging)
        journal.append(
            staging / rundir.EVENTS_NAME,
            "sync",
            status="restored",
            target=text,
            checkpoint=chosen.checkpoint,
            step=chosen.step,
            synced_at=chosen.synced_at,
        )
        os.rename(staging, place)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Restored(rundir.RunDir(place), chosen, [m.run_id for m in found if m.run_id != chosen.run_id])


def _choose(found: list[Manifest], run_id: str | None, text: str) -> Manifest:
    if not found:
        raise RestoreError(
            f"{text} holds no synced run: output.sync puts each run in a folder named by its id, with "
            "cockpit-sync.json in it"
        )
    if run_id is None:
        return max(found, key=lambda m: m.synced_at)
    matches = [m for m in found if m.run_id == run_id] or [m for m in found if m.run_id.startswith(run_id)]
    if len(matches) != 1:
        names = ", ".join(m.run_id for m in found)
        how = "matches no" if not matches else f"matches {len(matches)}"
        raise RestoreError(f"{run_id!r} {how} run at {text}; it holds: {names}")
    return matches[0]


def _fetch(target: Target, chosen: Manifest, staging: Path, text: str) -> None:
    checkpoint = f"{rundir.CHECKPOINTS_NAME}/{chosen.checkpoint}" if chosen.checkpoint else None
    try:
        target.fetch(chosen.run_id, [*RECORD_FILES, *([checkpoint] if checkpoint else [])], staging)
    except Exception as exc:
        failure = classify(exc, parse(text, key="--from"))
        raise RestoreError(
            f"cannot fetch run {chosen.run_id} from {text}: {failure.reason}. {failure.hint}"
        ) from None
    if not (staging / rundir.CONFIG_NAME).is_file():
        raise RestoreError(f"the copy of run {chosen.run_id} at {text} has no config.yaml; it cannot be run")
    if checkpoint is None:
        return
    for relative, size in chosen.files.items():
        path = staging / checkpoint / relative
        have = path.stat().st_size if path.is_file() else None
        if have != size:
            got = "missing" if have is None else f"{have:,} bytes"
            raise RestoreError(
                f"{chosen.checkpoint} at {text} is not whole: {relative} is {got}, its manifest says "
                f"{size:,} bytes; it cannot be resumed from"
            )
    if not (staging / checkpoint / rundir.COMPLETE_MARKER).is_file():
        raise RestoreError(
            f"{chosen.checkpoint} at {text} has no completion marker; it cannot be resumed from"
        )


def _complete(staging: Path) -> None:
    """The run directory's own parts: one events file (a fallback's events after the main's, in the
    order they were written), an empty backend.log, the control FIFO, checkpoints/; private modes."""
    events, fallback = staging / rundir.EVENTS_NAME, staging / rundir.EVENTS_FALLBACK_NAME
    with open(events, "ab") as out:
        if fallback.is_file():
            out.write(fallback.read_bytes())
    fallback.unlink(missing_ok=True)
    (staging / rundir.LOG_NAME).touch(mode=0o600)
    os.mkfifo(staging / rundir.CONTROL_NAME, 0o600)
    (staging / rundir.CHECKPOINTS_NAME).mkdir(mode=0o700, exist_ok=True)
    for path in [staging, *staging.rglob("*")]:
        if path.is_dir():
            os.chmod(path, 0o700)
        elif path.is_file():
            os.chmod(path, 0o600)
